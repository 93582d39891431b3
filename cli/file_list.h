// scan/check --files-from and --shard: operands from a list (a registry's
// inventory, a backfill's share of it), and a deterministic slice of them.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "options.h"

namespace modelgate::cli {

// kMaxListLineBytes bounds one line of a --files-from list (PATH_MAX is
// 4096; JSON escapes can grow a path six-fold).
inline constexpr uint64_t kMaxListLineBytes = 64 * 1024;
// kMaxListEntries bounds the paths of one list: a registry shards its store
// into lists of at most this many (docs/registry-backfill.md).
inline constexpr uint64_t kMaxListEntries = 1'000'000;
// kMaxShards bounds N of --shard I/N.
inline constexpr uint64_t kMaxShards = 65536;

struct ListLimits {
  uint64_t max_line_bytes = kMaxListLineBytes;
  uint64_t max_entries = kMaxListEntries;
};

// ParseFileList reads a list: one path per line (LF; the last line may
// lack one), or, for a line starting with '{', a JSON object whose "path"
// is a non-empty string (other members ignored, a member twice refused).
// Refused, with `why` naming the line: an empty line, a CR (CRLF lists),
// a NUL, a line over the limit, malformed JSON, more entries than the
// limit, a path listed twice. False on refusal.
bool ParseFileList(std::string_view text, const ListLimits& limits, std::vector<std::string>* out,
                   std::string* why);

// ParseShard reads "I/N" (decimal, 0 <= I < N <= kMaxShards).
bool ParseShard(std::string_view text, uint64_t* index, uint64_t* count);

// InShard: `path` belongs to shard `index` of `count`: the first 8 bytes
// of SHA-256(path), big-endian, modulo count. The same on every machine,
// and a path's shard does not move when other lines are added.
bool InShard(std::string_view path, uint64_t index, uint64_t count);

// ResolveOperands applies --files-from (appending the list to the
// positional operands) and --shard to `opts.paths`. False, with a message
// for a usage error (exit 2), when the list cannot be read or is refused.
bool ResolveOperands(CommonOptions* opts, std::string* why);

}  // namespace modelgate::cli
