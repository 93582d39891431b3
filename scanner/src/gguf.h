// The GGUF container (ggml's model format, versions 1, 2 and 3, in either
// byte order), read as strictly as the two readers that matter disagree:
// llama.cpp's gguf.cpp (refuses duplicate keys and tensor names, names of 64
// bytes or more, tensors out of declaration order; looks keys up with strcmp,
// so a NUL cuts a name) and gguf-py's GGUFReader (decodes names as strict
// UTF-8, reads nested arrays, accepts any tensor order). A file they could
// read differently, or one whose bytes hold more than its tensors and their
// alignment padding, is reported. Only the header is read: tensor data is
// never touched but for the padding bytes between tensors (fewer than
// `alignment` each), so a 100 GiB model costs a header read.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "modelgate/scanner.h"

namespace modelgate::scanner::internal {

// Defaults of GgufLimits. Real files: ~300-2,000 tensors, ~30-60 keys, a
// vocabulary array of up to ~256k strings (plus as many merges), chat
// templates of tens of KiB; headers of tens of MiB.
inline constexpr uint64_t kGgufMaxTensors = uint64_t{1} << 20;
inline constexpr uint64_t kGgufMaxKv = uint64_t{1} << 20;
inline constexpr uint64_t kGgufMaxStringBytes = uint64_t{64} << 20;
inline constexpr uint64_t kGgufMaxArrayElements = uint64_t{1} << 24;
inline constexpr uint64_t kGgufMaxHeaderBytes = uint64_t{512} << 20;
inline constexpr uint32_t kGgufMaxDims = 4;  // GGML_MAX_DIMS
// llama.cpp reads no nested arrays at all; gguf-py reads any depth. A
// top-level array is depth 1.
inline constexpr uint32_t kGgufMaxArrayDepth = 4;
// String values kept in GgufInfo::strings (every one is still checked):
// what a vocabulary, its merges and the templates need, with room.
inline constexpr uint64_t kGgufMaxKeptStrings = uint64_t{1} << 22;
inline constexpr uint64_t kGgufMaxKeptStringBytes = uint64_t{256} << 20;

// GgufLimits bound what ParseGguf reads and keeps. Each is tested at N and
// N+1; exceeding one is MG-GGUF-LIMIT (the header is not read to its end)
// except the two kept-string caps (MG-GGUF-STRINGS-CAPPED: the file is read,
// the strings past the cap are not handed on).
struct GgufLimits {
  uint64_t max_tensors = kGgufMaxTensors;
  uint64_t max_kv = kGgufMaxKv;
  uint64_t max_string_bytes = kGgufMaxStringBytes;      // one string (key, value, name)
  uint64_t max_array_elements = kGgufMaxArrayElements;  // one array
  uint64_t max_header_bytes = kGgufMaxHeaderBytes;      // everything before the data section
  uint32_t max_dims = kGgufMaxDims;
  uint32_t max_array_depth = kGgufMaxArrayDepth;
  uint64_t max_kept_strings = kGgufMaxKeptStrings;
  uint64_t max_kept_string_bytes = kGgufMaxKeptStringBytes;  // key + value bytes of those kept
};

// GgufString is one string value of the metadata: a KV's value, or an
// element of a string array (key "k[i]", nested "k[i][j]"). `offset` is the
// absolute offset of the string's length field (its bytes follow it: 4 bytes
// later in v1, 8 in v2 and v3).
struct GgufString {
  std::string key;
  std::string value;
  uint64_t offset = 0;
};

// GgufTensor is one tensor info: `dims` as written (ne[0] first, the
// fastest-varying), `offset` relative to the data section's start, `bytes`
// the size its type and shape give.
struct GgufTensor {
  std::string name;
  uint32_t type = 0;
  std::vector<uint64_t> dims;
  uint64_t offset = 0;
  uint64_t bytes = 0;
};

// GGUF_DEFAULT_ALIGNMENT, used when general.alignment is absent.
inline constexpr uint64_t kGgufDefaultAlignment = 32;

struct GgufInfo {
  uint32_t version = 0;
  bool big_endian = false;
  uint64_t alignment = kGgufDefaultAlignment;
  uint64_t kv_count = 0;
  uint64_t data_start = 0;  // absolute: the header's end padded to `alignment`
  uint64_t data_bytes = 0;  // file size - data_start
  std::vector<GgufString> strings;
  std::vector<GgufTensor> tensors;  // in declaration order
};

// ParseGguf judges one GGUF file (`file` is a read-only mapping of the whole
// file, never copied: only header bytes and inter-tensor padding are read).
// Appends MG-GGUF-* findings with absolute file offsets. Returns nullopt when
// the header cannot be read to its end, or when the tensors it describes
// cannot be located (an unknown type, a shape that overflows, a tensor past
// the end of the file or overlapping another, an invalid general.alignment):
// the findings say why, each high, and the caller marks the file
// unparseable (fail closed). A returned value satisfies: every tensor lies
// inside the file, no two overlap, data_start <= file size, every string's
// offset < file size.
std::optional<GgufInfo> ParseGguf(std::span<const uint8_t> file, const GgufLimits& limits,
                                  std::vector<Finding>* findings);

// GgmlTypeName is the ggml spelling of a tensor type ("F32", "Q4_K"), or ""
// for a type this parser does not know.
std::string_view GgmlTypeName(uint32_t type);

}  // namespace modelgate::scanner::internal
