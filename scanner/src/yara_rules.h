// YARA rules over the bytes a scan must never trust: safetensors headers
// and metadata, pickle streams, non-tensor archive members. A thin wrapper
// over libyara (Debian libyara-dev 4.2) that compiles a rule set once and
// turns matches into MG-YARA-* findings. Private to the scanner: no libyara
// type appears here (YR_RULES is only forward-declared).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "modelgate/core.h"
#include "modelgate/scanner.h"

struct YR_RULES;

namespace modelgate::scanner {

// Limits on what a rule directory may hold. Rule files are operator input,
// not scanned input, but a mistyped --yara-rules (/, $HOME) must fail fast
// instead of reading gigabytes.
struct YaraDirLimits {
  uint64_t max_file_bytes = 1u << 20;       // one .yar/.yara file
  uint64_t max_file_count = 10'000;         // rule files under one directory
  uint64_t max_total_bytes = 64ull << 20;   // all rule text under one directory
};

// kYaraScanTimeoutSeconds bounds one Scan() call (libyara's own timer). A
// scan that hits it is reported as MG-YARA-SCAN-ERROR (high): not judged.
inline constexpr int kYaraScanTimeoutSeconds = 10;

// Buffers larger than kYaraChunkBytes are scanned in chunks of that size
// overlapping by kYaraChunkOverlapBytes (libyara scans ~100 MB/s, so one
// call over gigabytes of tensor data would hit the timeout), each finding id
// reported once, at its first offset. Rules see each chunk as a whole input:
// `filesize` and `at 0` conditions are per chunk there.
inline constexpr uint64_t kYaraChunkBytes = 64ull << 20;
inline constexpr uint64_t kYaraChunkOverlapBytes = 64ull << 10;

// kYaraFoldMaxBytes: a pickle stream longer than this keeps every YARA
// finding on its own, never folded into an import finding as the same cause
// (folding rescans a copy of the stream; judge.h FoldYara). Real pickles
// that import code are small; tensor data sits in other members.
inline constexpr uint64_t kYaraFoldMaxBytes = 16ull << 20;

// kYaraScopeVariable is the external string variable every rule may test to
// learn what it is looking at: "header" (a safetensors JSON header),
// "metadata" (one decoded __metadata__ entry), "pickle" (one pickle stream),
// "member" (a non-tensor archive member), "data" (tensor data, only when the
// operator asks for scope "all"), "code" (Python source a model ships).
// JSON configs, chat templates and GGUF metadata strings are "metadata".
// Scan() sets it to its `scope` argument.
inline constexpr const char* kYaraScopeVariable = "mg_scope";

// kYaraScanErrorId is the finding a failed scan produces. A rule whose name
// maps to it ("scan_error") is refused at compile time.
inline constexpr std::string_view kYaraScanErrorId = "MG-YARA-SCAN-ERROR";

// YaraRuleSource is one rule file's text and the name errors report for it.
struct YaraRuleSource {
  std::string name;  // path (or "rules/<file>" for the embedded set)
  std::string text;
};

// YaraHit is one matching rule (its finding, as Scan makes it) and where
// its strings matched: absolute [begin, end) of the first match of each
// string (FAST_MODE records no more), private strings included; empty for a
// rule that matched without a string and for MG-YARA-SCAN-ERROR.
struct YaraHit {
  Finding finding;
  std::vector<std::pair<uint64_t, uint64_t>> matches;
};

// YaraRules is one compiled rule set. Move-only; owns libyara's YR_RULES.
//
// Errors. CompileDir/Compile return a core::Error (the core has no YARA
// codes, and adding one is not this module's call):
//   kIoOpen  the directory or a rule file cannot be opened or listed, or is
//            not a directory / regular file;
//   kIoRead  a rule file cannot be read, is over a YaraDirLimits cap, holds
//            a NUL byte, or does not compile. Compile errors read
//            "<file>:<line>: yara: <libyara message>" (every error of the
//            first file that fails, "; "-joined, at most 10), and a rule
//            whose meta `severity` is not critical|high|medium|low|info reads
//            "<file>:<line>: rule "<name>": meta severity ...". The directory
//            holding no rule file is kIoRead "no rules found in <dir>".
// offset is always kNoOffset (the error is about the rules, not the file
// being scanned).
//
// Thread safety. Compile* may be called from any thread (compilation is
// serialized on one mutex; libyara's global state is initialized once per
// process by a function-local static and finalized at exit). Scan() is
// const and may run concurrently on one YaraRules from up to 32 threads
// (libyara's YR_MAX_THREADS; each call has its own YR_SCANNER); past that it
// reports MG-YARA-SCAN-ERROR. libyara callbacks never throw: every
// allocation that could inside them is wrapped and turned into an error.
class YaraRules {
 public:
  // CompileDir compiles every regular `.yar`/`.yara` file under `dir`
  // (recursively, in bytewise path order, symlinks neither followed nor read
  // — each skipped one is listed in skipped()) into one rule set, in one
  // namespace. `dir` itself may be a symlink (the operator named it) or a
  // single rule file (compiled whatever its extension). Includes are
  // refused: every rule file is compiled on its own text.
  static core::Result<YaraRules> CompileDir(const std::string& dir,
                                            const YaraDirLimits& limits = {});

  // CompileDefault compiles the shipped rule set (scanner/rules/*.yar,
  // embedded in the library at build time).
  static core::Result<YaraRules> CompileDefault();

  // Compile compiles the shipped rules (when `with_default`) and every
  // directory of `dirs` into one rule set: the shipped rules in namespace
  // "default", each directory in its own namespace (so a directory may reuse
  // a shipped rule's name; both fire). This is what a scan run compiles once.
  static core::Result<YaraRules> Compile(const std::vector<std::string>& dirs,
                                         bool with_default,
                                         const YaraDirLimits& limits = {});

  // CompileSources compiles in-memory rule files, in order, in one namespace
  // (tests, and the embedded set).
  static core::Result<YaraRules> CompileSources(const std::vector<YaraRuleSource>& sources);

  // DefaultSources is the embedded copy of scanner/rules/*.yar (sorted by
  // file name; `name` is "rules/<file>").
  static std::vector<YaraRuleSource> DefaultSources();

  // Serialize is the compiled rule set in libyara's saved-rules format
  // (yr_rules_save_stream); Deserialize loads such bytes (built by the same
  // libyara: the build precompiles the shipped rules this way, because
  // loading them costs a fraction of compiling them at every start).
  core::Result<std::vector<uint8_t>> Serialize() const;
  static core::Result<YaraRules> Deserialize(std::span<const uint8_t> bytes);

  YaraRules(YaraRules&& other) noexcept;
  YaraRules& operator=(YaraRules&& other) noexcept;
  YaraRules(const YaraRules&) = delete;
  YaraRules& operator=(const YaraRules&) = delete;
  ~YaraRules();

  // Scan runs the rules over `bytes` (FAST_MODE, kYaraScanTimeoutSeconds)
  // with mg_scope = `scope` and appends one finding per matching (public)
  // rule to `out`:
  //   id        MG-YARA-<rule name, uppercased, every non-alphanumeric '-'>
  //   severity  the rule's meta `severity`, default high
  //   message   "<meta description> (yara rule <name>, in <scope>; matched
  //             <first matched bytes, quoted>)"
  //   offset    base_offset + the first match of any of the rule's strings
  //             (kNoOffset for a rule that matched without a string)
  //   member    "" (the caller places the finding inside an archive)
  // A scan that fails (timeout, too many matches, out of memory, too many
  // threads) appends MG-YARA-SCAN-ERROR (high) after whatever matched before
  // the failure and returns false. Throws nothing but std::bad_alloc.
  // Large buffers are chunked (kYaraChunkBytes).
  bool Scan(std::span<const uint8_t> bytes, std::string_view scope, std::vector<Finding>* out,
            uint64_t base_offset = 0) const {
    return ScanChunked(bytes, scope, out, base_offset, kYaraChunkBytes, kYaraChunkOverlapBytes);
  }

  // ScanHits is Scan, unchunked (for `bytes` up to kYaraChunkBytes), with
  // where each rule matched; a failed scan's MG-YARA-SCAN-ERROR is a hit
  // without matches.
  bool ScanHits(std::span<const uint8_t> bytes, std::string_view scope, std::vector<YaraHit>* out,
                uint64_t base_offset = 0) const;

  // ScanChunked is Scan with explicit chunking (tests use small chunks).
  // `overlap_bytes` must be below `chunk_bytes`.
  bool ScanChunked(std::span<const uint8_t> bytes, std::string_view scope,
                   std::vector<Finding>* out, uint64_t base_offset, uint64_t chunk_bytes,
                   uint64_t overlap_bytes, bool guarded = false) const;

  // ScanGuarded is Scan over bytes that lie in a core::GuardedMapping, for
  // a scan on another thread while this one reads the same mapping.
  // libyara installs its own SIGBUS handler for the whole process while a
  // scan runs, so it would also receive the other thread's faults; it is
  // left out (SCAN_FLAGS_NO_TRYCATCH), and the mapping's guard, which serves
  // every thread, turns a file that shrank into zeros and a faulted()
  // mapping for both readers (tests/loaders/header_overlap_test.cc).
  bool ScanGuarded(std::span<const uint8_t> bytes, std::string_view scope,
                   std::vector<Finding>* out, uint64_t base_offset = 0) const {
    return ScanChunked(bytes, scope, out, base_offset, kYaraChunkBytes, kYaraChunkOverlapBytes,
                       /*guarded=*/true);
  }

  // rule_count is how many rules the set holds (private ones included).
  size_t rule_count() const { return rule_count_; }
  // files lists the rule files compiled, in order.
  const std::vector<std::string>& files() const { return files_; }
  // skipped lists symlinks under a rule directory that were not followed.
  const std::vector<std::string>& skipped() const { return skipped_; }
  // warnings holds libyara's compiler warnings ("<file>:<line>: ...").
  const std::vector<std::string>& warnings() const { return warnings_; }

 private:
  YaraRules() = default;
  void Reset();
  bool ScanOnce(std::span<const uint8_t> bytes, std::string_view scope, std::vector<Finding>* out,
                uint64_t base_offset, std::vector<YaraHit>* hits = nullptr,
                bool guarded = false) const;

  YR_RULES* rules_ = nullptr;
  size_t rule_count_ = 0;
  std::vector<std::string> files_;
  std::vector<std::string> skipped_;
  std::vector<std::string> warnings_;
};

// YaraFindingId maps a rule name to its finding id: "MG-YARA-" + the name
// uppercased, every byte outside [A-Za-z0-9] replaced by '-'.
std::string YaraFindingId(std::string_view rule_name);

}  // namespace modelgate::scanner
