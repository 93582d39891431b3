// YaraRules: compile rule files with libyara once per run, scan buffers with
// them, and turn matches into MG-YARA-* findings. libyara is C: its
// callbacks below are noexcept and catch everything, and every libyara
// object is released on every path.
#include "yara_rules.h"

#include <yara.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <utility>

namespace modelgate::scanner {
namespace {

namespace fs = std::filesystem;
using core::Code;
using core::Error;

constexpr size_t kMaxReportedErrors = 10;
constexpr size_t kMaxMatchBytesShown = 64;

// libyara's global state (yr_initialize) is reference counted but not
// thread safe: initialize it exactly once per process, on first use, and
// finalize it at exit. A YaraRules held in a static made after this one is
// destroyed before it (reverse order of construction), so no rule set
// outlives the library.
class YaraLibrary {
 public:
  YaraLibrary() : rc_(yr_initialize()) {}
  ~YaraLibrary() {
    if (rc_ == ERROR_SUCCESS) yr_finalize();
  }
  YaraLibrary(const YaraLibrary&) = delete;
  YaraLibrary& operator=(const YaraLibrary&) = delete;
  bool ok() const { return rc_ == ERROR_SUCCESS; }

 private:
  int rc_;
};

const YaraLibrary& Library() {
  static YaraLibrary library;
  return library;
}

// Compilation is rare (once per run) and libyara's compiler is not
// documented as re-entrant across threads: serialize it.
std::mutex& CompileMutex() {
  static std::mutex m;
  return m;
}

Error RulesError(Code code, std::string message) {
  return Error{code, core::kNoOffset, std::move(message)};
}

bool IsIdentChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

// FindRuleLine is the 1-based line where `rule <name>` is declared in
// `text`, or 0. libyara keeps no source position per rule, and post-compile
// checks (meta severity) must still name a file and line.
size_t FindRuleLine(std::string_view text, std::string_view name) {
  for (size_t p = text.find(name); p != std::string_view::npos; p = text.find(name, p + 1)) {
    const size_t end = p + name.size();
    if (end < text.size() && IsIdentChar(text[end])) continue;
    size_t q = p;
    if (q == 0 || !(text[q - 1] == ' ' || text[q - 1] == '\t' || text[q - 1] == '\n' ||
                    text[q - 1] == '\r')) {
      continue;
    }
    while (q > 0 && (text[q - 1] == ' ' || text[q - 1] == '\t' || text[q - 1] == '\n' ||
                     text[q - 1] == '\r')) {
      --q;
    }
    if (q < 4 || text.substr(q - 4, 4) != "rule") continue;
    if (q > 4 && IsIdentChar(text[q - 5])) continue;
    return 1 + static_cast<size_t>(std::count(text.begin(), text.begin() + static_cast<long>(p), '\n'));
  }
  return 0;
}

// What the compiler callback collects for one compilation.
struct CompileState {
  std::string current_file;
  std::vector<std::string> errors;
  std::vector<std::string> warnings;
  bool out_of_memory = false;
};

void OnCompilerMessage(int error_level, const char* file_name, int line_number,
                       const YR_RULE* /*rule*/, const char* message, void* user_data) noexcept {
  auto* state = static_cast<CompileState*>(user_data);
  try {
    // Sources are added as strings, so libyara knows no file name; ours is
    // the file being added.
    std::string where = file_name != nullptr ? std::string(file_name) : state->current_file;
    std::string text = where + ":" + std::to_string(line_number) + ": yara: " +
                       (message != nullptr ? message : "unknown error");
    if (error_level == YARA_ERROR_LEVEL_ERROR) {
      if (state->errors.size() < kMaxReportedErrors) state->errors.push_back(std::move(text));
    } else {
      state->warnings.push_back(std::move(text));
    }
  } catch (...) {
    state->out_of_memory = true;
  }
}

// One compiler, destroyed on every path.
class Compiler {
 public:
  Compiler() {
    if (yr_compiler_create(&c_) != ERROR_SUCCESS) c_ = nullptr;
  }
  ~Compiler() {
    if (c_ != nullptr) yr_compiler_destroy(c_);
  }
  Compiler(const Compiler&) = delete;
  Compiler& operator=(const Compiler&) = delete;
  YR_COMPILER* get() const { return c_; }

 private:
  YR_COMPILER* c_ = nullptr;
};

// A rule file to compile, with the namespace it goes in.
struct Unit {
  std::string ns;
  YaraRuleSource source;
};

bool HasRuleExtension(const fs::path& p) {
  const std::string ext = p.extension().string();
  return ext == ".yar" || ext == ".yara";
}

// ReadRuleFile reads one rule file without following a symlink, within the
// size cap, and refuses a NUL byte (libyara reads C strings: text after a
// NUL would be dropped silently).
core::Result<std::string> ReadRuleFile(const std::string& path, const YaraDirLimits& limits) {
  auto opened = core::OpenRegularFile(path, /*follow_symlink=*/false);
  if (!opened.ok()) {
    return RulesError(Code::kIoOpen, "cannot open rule file " + core::Quoted(path) + ": " +
                                         opened.error().message);
  }
  const core::OpenedFile& f = opened.value();
  if (f.size > limits.max_file_bytes) {
    return RulesError(Code::kIoRead, "rule file " + core::Quoted(path) + " is " +
                                         std::to_string(f.size) + " bytes, over the limit of " +
                                         std::to_string(limits.max_file_bytes) +
                                         " (YaraDirLimits::max_file_bytes)");
  }
  std::string text(static_cast<size_t>(f.size), '\0');
  auto span = std::span<uint8_t>(reinterpret_cast<uint8_t*>(text.data()), text.size());
  if (auto s = core::PreadExact(f.fd, 0, span); !s.ok()) {
    return RulesError(Code::kIoRead,
                      "cannot read rule file " + core::Quoted(path) + ": " + s.error().message);
  }
  if (size_t nul = text.find('\0'); nul != std::string::npos) {
    return RulesError(Code::kIoRead, "rule file " + core::Quoted(path) +
                                         " holds a NUL byte at offset " + std::to_string(nul));
  }
  return text;
}

// CollectDir lists and reads the rule files under `dir` (see CompileDir).
core::Status CollectDir(const std::string& dir, const std::string& ns, const YaraDirLimits& limits,
                        std::vector<Unit>* units, std::vector<std::string>* skipped) {
  std::error_code ec;
  const fs::file_status top = fs::status(dir, ec);  // the operator named it: follow
  if (ec || !fs::exists(top)) {
    return RulesError(Code::kIoOpen, "cannot open rules directory " + core::Quoted(dir) +
                                         (ec ? ": " + ec.message() : ": no such file"));
  }
  std::vector<std::string> paths;
  if (fs::is_regular_file(top)) {
    paths.push_back(dir);
  } else if (fs::is_directory(top)) {
    fs::recursive_directory_iterator it(dir, fs::directory_options::none, ec);
    if (ec) {
      return RulesError(Code::kIoOpen,
                        "cannot list rules directory " + core::Quoted(dir) + ": " + ec.message());
    }
    for (; it != fs::recursive_directory_iterator(); it.increment(ec)) {
      if (ec) break;
      const fs::directory_entry& e = *it;
      std::error_code sec;
      const fs::file_status st = e.symlink_status(sec);
      if (sec) {
        return RulesError(Code::kIoOpen, "cannot stat " + core::Quoted(e.path().string()) + ": " +
                                             sec.message());
      }
      if (fs::is_symlink(st)) {
        // Neither a linked file nor a linked directory is read: a rule
        // directory must not pull in text from elsewhere.
        if (HasRuleExtension(e.path()) || fs::is_directory(fs::status(e.path(), sec))) {
          skipped->push_back(e.path().string());
        }
        continue;
      }
      if (!fs::is_regular_file(st) || !HasRuleExtension(e.path())) continue;
      paths.push_back(e.path().string());
      if (paths.size() > limits.max_file_count) {
        return RulesError(Code::kIoRead, "more than " + std::to_string(limits.max_file_count) +
                                             " rule files under " + core::Quoted(dir) +
                                             " (YaraDirLimits::max_file_count)");
      }
    }
    if (ec) {
      return RulesError(Code::kIoOpen,
                        "cannot list rules directory " + core::Quoted(dir) + ": " + ec.message());
    }
  } else {
    return RulesError(Code::kIoOpen, "rules path " + core::Quoted(dir) +
                                         " is neither a directory nor a regular file");
  }
  if (paths.empty()) {
    return RulesError(Code::kIoRead,
                      "no rules found in " + core::Quoted(dir) + " (no .yar or .yara file" +
                          (skipped->empty() ? std::string(")")
                                            : ", " + std::to_string(skipped->size()) +
                                                  " symlink(s) not followed)"));
  }
  std::sort(paths.begin(), paths.end());
  uint64_t total = 0;
  for (const auto& p : paths) {
    auto text = ReadRuleFile(p, limits);
    if (!text.ok()) return text.error();
    total += text.value().size();
    if (total > limits.max_total_bytes) {
      return RulesError(Code::kIoRead, "rule files under " + core::Quoted(dir) + " exceed " +
                                           std::to_string(limits.max_total_bytes) +
                                           " bytes in all (YaraDirLimits::max_total_bytes)");
    }
    units->push_back(Unit{ns, YaraRuleSource{p, text.value()}});
  }
  return std::monostate{};
}

std::string SeverityList() { return "critical|high|medium|low|info"; }

// MetaSeverity reads a rule's `severity` meta: true with the default (high)
// when there is none, false when present but not a severity name.
bool MetaSeverity(const YR_RULE* rule, core::Severity* out, std::string* bad) {
  *out = core::Severity::kHigh;
  const YR_META* meta;
  yr_rule_metas_foreach(rule, meta) {
    if (meta->identifier == nullptr || std::string_view(meta->identifier) != "severity") continue;
    if (meta->type != META_TYPE_STRING || meta->string == nullptr) {
      *bad = "(not a string)";
      return false;
    }
    std::string v = meta->string;
    for (char& c : v) c = static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
    if (!core::ParseSeverity(v, out)) {
      *bad = core::Quoted(meta->string);
      return false;
    }
    return true;
  }
  return true;
}

std::string MetaDescription(const YR_RULE* rule) {
  const YR_META* meta;
  yr_rule_metas_foreach(rule, meta) {
    if (meta->identifier != nullptr && std::string_view(meta->identifier) == "description" &&
        meta->type == META_TYPE_STRING && meta->string != nullptr) {
      return meta->string;
    }
  }
  return "yara rule matched";
}

// What one Scan() call collects.
struct ScanState {
  std::string_view scope;
  uint64_t base_offset = 0;
  std::vector<Finding>* out = nullptr;
  std::vector<YaraHit>* hits = nullptr;  // ScanHits: matches go here instead
  bool failed = false;  // an exception was caught in the callback
};

// MatchRanges is where `rule`'s strings matched (see YaraHit), absolute.
std::vector<std::pair<uint64_t, uint64_t>> MatchRanges(YR_SCAN_CONTEXT* context, const YR_RULE* rule,
                                                       uint64_t base_offset) {
  std::vector<std::pair<uint64_t, uint64_t>> out;
  const YR_STRING* string;
  yr_rule_strings_foreach(rule, string) {
    const YR_MATCH* p = context->matches[string->idx].head;
    while (p != nullptr) {
      YR_MATCH match;  // copied out: see MatchFinding
      std::memcpy(&match, static_cast<const void*>(p), sizeof match);
      const int64_t at = match.base + match.offset;
      if (at >= 0 && match.match_length >= 0) {
        const uint64_t begin = base_offset + static_cast<uint64_t>(at);
        out.emplace_back(begin, begin + static_cast<uint64_t>(match.match_length));
      }
      p = match.next;
    }
  }
  return out;
}

Finding MatchFinding(YR_SCAN_CONTEXT* context, const YR_RULE* rule, const ScanState& s) {
  core::Severity severity;
  std::string ignored;
  MetaSeverity(rule, &severity, &ignored);  // checked at compile time
  int64_t first = -1;
  YR_MATCH first_match{};
  const YR_STRING* string;
  yr_rule_strings_foreach(rule, string) {
    // libyara 4.2 allocates matches from its notebook without aligning
    // them: copy each out (yr_string_matches_foreach would read fields
    // through a misaligned pointer, which UBSan rightly rejects).
    const YR_MATCH* p = context->matches[string->idx].head;
    while (p != nullptr) {
      YR_MATCH match;
      std::memcpy(&match, static_cast<const void*>(p), sizeof match);
      const int64_t at = match.base + match.offset;
      if (!match.is_private && at >= 0 && (first < 0 || at < first)) {
        first = at;
        first_match = match;
      }
      p = match.next;
    }
  }
  const std::string name = rule->identifier != nullptr ? rule->identifier : "";
  std::string message = MetaDescription(rule) + " (yara rule " + name + ", in " +
                        std::string(s.scope);
  if (first >= 0 && first_match.data != nullptr && first_match.data_length > 0) {
    const auto n = static_cast<size_t>(first_match.data_length);
    message += "; matched " +
               core::Quoted(std::string_view(reinterpret_cast<const char*>(first_match.data), n),
                            kMaxMatchBytesShown);
  }
  message += ")";
  return MakeFinding(YaraFindingId(name), severity, std::move(message),
                     first < 0 ? core::kNoOffset : s.base_offset + static_cast<uint64_t>(first));
}

int OnScanMessage(YR_SCAN_CONTEXT* context, int message, void* message_data,
                  void* user_data) noexcept {
  auto* s = static_cast<ScanState*>(user_data);
  if (message != CALLBACK_MSG_RULE_MATCHING) return CALLBACK_CONTINUE;
  try {
    const auto* rule = static_cast<const YR_RULE*>(message_data);
    if (s->hits != nullptr) {
      s->hits->push_back(YaraHit{MatchFinding(context, rule, *s), MatchRanges(context, rule, s->base_offset)});
    } else {
      s->out->push_back(MatchFinding(context, rule, *s));
    }
    return CALLBACK_CONTINUE;
  } catch (...) {
    s->failed = true;
    return CALLBACK_ERROR;
  }
}

std::string ScanErrorText(int rc) {
  switch (rc) {
    case ERROR_SCAN_TIMEOUT:
      return "timed out after " + std::to_string(kYaraScanTimeoutSeconds) + " s";
    case ERROR_TOO_MANY_MATCHES: return "too many matches";
    case ERROR_INSUFFICIENT_MEMORY: return "out of memory";
    case ERROR_TOO_MANY_SCAN_THREADS: return "too many concurrent scans";
    default: return "libyara error " + std::to_string(rc);
  }
}

}  // namespace

std::string YaraFindingId(std::string_view rule_name) {
  std::string id = "MG-YARA-";
  for (char c : rule_name) {
    if (c >= 'a' && c <= 'z') {
      id += static_cast<char>(c - 'a' + 'A');
    } else if ((c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) {
      id += c;
    } else {
      id += '-';
    }
  }
  return id;
}

YaraRules::YaraRules(YaraRules&& other) noexcept
    : rules_(std::exchange(other.rules_, nullptr)),
      rule_count_(std::exchange(other.rule_count_, 0)),
      files_(std::move(other.files_)),
      skipped_(std::move(other.skipped_)),
      warnings_(std::move(other.warnings_)) {}

YaraRules& YaraRules::operator=(YaraRules&& other) noexcept {
  if (this != &other) {
    Reset();
    rules_ = std::exchange(other.rules_, nullptr);
    rule_count_ = std::exchange(other.rule_count_, 0);
    files_ = std::move(other.files_);
    skipped_ = std::move(other.skipped_);
    warnings_ = std::move(other.warnings_);
  }
  return *this;
}

YaraRules::~YaraRules() { Reset(); }

void YaraRules::Reset() {
  if (rules_ != nullptr) yr_rules_destroy(rules_);
  rules_ = nullptr;
  rule_count_ = 0;
}

namespace {

// Compile runs libyara over `units` (in order) and checks what the grammar
// cannot: each rule's meta severity, and that no rule claims the id of the
// scan-error finding.
core::Status CompileInto(const std::vector<Unit>& units, YR_RULES** rules_out, size_t* count_out,
                         std::vector<std::string>* warnings_out) {
  if (!Library().ok()) return RulesError(Code::kIoRead, "libyara failed to initialize");
  std::lock_guard<std::mutex> lock(CompileMutex());
  Compiler compiler;
  if (compiler.get() == nullptr) {
    return RulesError(Code::kIoRead, "libyara could not create a compiler (out of memory)");
  }
  CompileState state;
  yr_compiler_set_callback(compiler.get(), OnCompilerMessage, &state);
  // No includes: a rule file's text is all it contributes ("includes are
  // disabled" is libyara's error when one is tried).
  yr_compiler_set_include_callback(compiler.get(), nullptr, nullptr, nullptr);
  if (yr_compiler_define_string_variable(compiler.get(), kYaraScopeVariable, "") != ERROR_SUCCESS) {
    return RulesError(Code::kIoRead, "libyara could not define the mg_scope variable");
  }
  for (const Unit& u : units) {
    state.current_file = u.source.name;
    const int errors = yr_compiler_add_string(compiler.get(), u.source.text.c_str(), u.ns.c_str());
    if (state.out_of_memory) return RulesError(Code::kIoRead, "out of memory compiling rules");
    if (errors > 0) {
      std::string message;
      for (const auto& e : state.errors) message += (message.empty() ? "" : "; ") + e;
      if (message.empty()) message = u.source.name + ": yara: compile error";
      return RulesError(Code::kIoRead, std::move(message));
    }
  }
  YR_RULES* rules = nullptr;
  if (yr_compiler_get_rules(compiler.get(), &rules) != ERROR_SUCCESS || rules == nullptr) {
    return RulesError(Code::kIoRead, "libyara could not build the rule set (out of memory)");
  }
  // Checks on the compiled rules; on failure the rules are released here.
  size_t count = 0;
  std::string problem;
  const YR_RULE* rule;
  yr_rules_foreach(rules, rule) {
    ++count;
    if (!problem.empty()) continue;
    const std::string name = rule->identifier != nullptr ? rule->identifier : "";
    const std::string ns =
        rule->ns != nullptr && rule->ns->name != nullptr ? rule->ns->name : "";
    auto where = [&]() {
      for (const Unit& u : units) {
        if (u.ns != ns) continue;
        if (size_t line = FindRuleLine(u.source.text, name); line != 0) {
          return u.source.name + ":" + std::to_string(line) + ": ";
        }
      }
      return std::string();
    };
    core::Severity severity;
    std::string bad;
    if (!MetaSeverity(rule, &severity, &bad)) {
      problem = where() + "rule \"" + name + "\": meta severity " + bad + " is not one of " +
                SeverityList();
    } else if (YaraFindingId(name) == kYaraScanErrorId) {
      problem = where() + "rule \"" + name + "\": its finding id " + std::string(kYaraScanErrorId) +
                " is reserved for failed scans; rename the rule";
    }
  }
  if (!problem.empty()) {
    yr_rules_destroy(rules);
    return RulesError(Code::kIoRead, std::move(problem));
  }
  *rules_out = rules;
  *count_out = count;
  *warnings_out = std::move(state.warnings);
  return std::monostate{};
}

}  // namespace

core::Result<YaraRules> YaraRules::CompileSources(const std::vector<YaraRuleSource>& sources) {
  std::vector<Unit> units;
  YaraRules out;
  for (const auto& s : sources) {
    units.push_back(Unit{"default", s});
    out.files_.push_back(s.name);
  }
  if (units.empty()) return RulesError(Code::kIoRead, "no rules found (no rule source given)");
  if (auto s = CompileInto(units, &out.rules_, &out.rule_count_, &out.warnings_); !s.ok()) {
    return s.error();
  }
  return out;
}

core::Result<YaraRules> YaraRules::CompileDefault() { return CompileSources(DefaultSources()); }

namespace {

struct MemoryStream {
  std::span<const uint8_t> in;
  size_t pos = 0;
  std::vector<uint8_t>* out = nullptr;
};

size_t StreamRead(void* ptr, size_t size, size_t count, void* user_data) {
  auto* m = static_cast<MemoryStream*>(user_data);
  if (size == 0) return 0;
  const size_t items = std::min(count, (m->in.size() - m->pos) / size);
  std::memcpy(ptr, m->in.data() + m->pos, items * size);
  m->pos += items * size;
  return items;
}

size_t StreamWrite(const void* ptr, size_t size, size_t count, void* user_data) {
  auto* m = static_cast<MemoryStream*>(user_data);
  const auto* b = static_cast<const uint8_t*>(ptr);
  m->out->insert(m->out->end(), b, b + size * count);
  return count;
}

}  // namespace

core::Result<std::vector<uint8_t>> YaraRules::Serialize() const {
  if (rules_ == nullptr) return RulesError(Code::kIoRead, "no compiled rules to save");
  std::vector<uint8_t> out;
  MemoryStream m{{}, 0, &out};
  YR_STREAM stream{};
  stream.user_data = &m;
  stream.write = StreamWrite;
  if (yr_rules_save_stream(rules_, &stream) != ERROR_SUCCESS) {
    return RulesError(Code::kIoRead, "libyara could not save the compiled rules");
  }
  return out;
}

core::Result<YaraRules> YaraRules::Deserialize(std::span<const uint8_t> bytes) {
  if (!Library().ok()) return RulesError(Code::kIoRead, "libyara failed to initialize");
  MemoryStream m{bytes, 0, nullptr};
  YR_STREAM stream{};
  stream.user_data = &m;
  stream.read = StreamRead;
  YaraRules out;
  if (yr_rules_load_stream(&stream, &out.rules_) != ERROR_SUCCESS) {
    out.rules_ = nullptr;
    return RulesError(Code::kIoRead, "libyara could not load the precompiled rules");
  }
  const YR_RULE* rule = nullptr;
  yr_rules_foreach(out.rules_, rule) { ++out.rule_count_; }
  return out;
}

core::Result<YaraRules> YaraRules::CompileDir(const std::string& dir, const YaraDirLimits& limits) {
  return Compile({dir}, /*with_default=*/false, limits);
}

core::Result<YaraRules> YaraRules::Compile(const std::vector<std::string>& dirs,
                                           bool with_default, const YaraDirLimits& limits) {
  std::vector<Unit> units;
  YaraRules out;
  if (with_default) {
    for (auto& s : DefaultSources()) units.push_back(Unit{"default", std::move(s)});
  }
  for (size_t i = 0; i < dirs.size(); ++i) {
    if (auto s = CollectDir(dirs[i], "rules" + std::to_string(i), limits, &units, &out.skipped_);
        !s.ok()) {
      return s.error();
    }
  }
  if (units.empty()) return RulesError(Code::kIoRead, "no rules found (no rule directory given)");
  for (const Unit& u : units) out.files_.push_back(u.source.name);
  if (auto s = CompileInto(units, &out.rules_, &out.rule_count_, &out.warnings_); !s.ok()) {
    return s.error();
  }
  return out;
}

bool YaraRules::ScanChunked(std::span<const uint8_t> bytes, std::string_view scope,
                            std::vector<Finding>* out, uint64_t base_offset,
                            uint64_t chunk_bytes, uint64_t overlap_bytes, bool guarded) const {
  if (chunk_bytes == 0 || overlap_bytes >= chunk_bytes || bytes.size() <= chunk_bytes) {
    return ScanOnce(bytes, scope, out, base_offset, nullptr, guarded);
  }
  // Ids reported by earlier chunks (few: one per rule). A later chunk's
  // finding with one of them is the same rule again, further on.
  std::vector<std::string> seen;
  const uint64_t step = chunk_bytes - overlap_bytes;
  for (uint64_t pos = 0;; pos += step) {
    const uint64_t n = std::min<uint64_t>(chunk_bytes, bytes.size() - pos);
    std::vector<Finding> part;
    const bool ok = ScanOnce(bytes.subspan(static_cast<size_t>(pos), static_cast<size_t>(n)),
                             scope, &part, base_offset + pos, nullptr, guarded);
    const size_t seen_before = seen.size();
    for (auto& f : part) {
      if (std::find(seen.begin(), seen.begin() + static_cast<long>(seen_before), f.id) !=
          seen.begin() + static_cast<long>(seen_before)) {
        continue;
      }
      seen.push_back(f.id);
      out->push_back(std::move(f));
    }
    if (!ok) return false;
    if (pos + n == bytes.size()) return true;
  }
}

bool YaraRules::ScanHits(std::span<const uint8_t> bytes, std::string_view scope,
                         std::vector<YaraHit>* out, uint64_t base_offset) const {
  std::vector<Finding> errors;
  const bool ok = ScanOnce(bytes, scope, &errors, base_offset, out);
  for (auto& e : errors) out->push_back(YaraHit{std::move(e), {}});
  return ok;
}

bool YaraRules::ScanOnce(std::span<const uint8_t> bytes, std::string_view scope,
                         std::vector<Finding>* out, uint64_t base_offset,
                         std::vector<YaraHit>* hits, bool guarded) const {
  auto scan_error = [&](const std::string& why) {
    try {
      out->push_back(MakeFinding(std::string(kYaraScanErrorId), core::Severity::kHigh,
                                 "yara scan of " + std::string(scope) + " failed: " + why +
                                     "; the bytes were not fully checked",
                                 base_offset));
    } catch (...) {
      // Out of memory while reporting: the false return still says it.
    }
    return false;
  };
  if (rules_ == nullptr) return scan_error("no compiled rules");
  YR_SCANNER* scanner = nullptr;
  if (int rc = yr_scanner_create(rules_, &scanner); rc != ERROR_SUCCESS) {
    return scan_error(ScanErrorText(rc));
  }
  ScanState state;
  state.scope = scope;
  state.base_offset = base_offset;
  state.out = out;
  state.hits = hits;
  const std::string scope_text(scope);
  int rc = yr_scanner_define_string_variable(scanner, kYaraScopeVariable, scope_text.c_str());
  if (rc == ERROR_SUCCESS) {
    yr_scanner_set_callback(scanner, OnScanMessage, &state);
    yr_scanner_set_timeout(scanner, kYaraScanTimeoutSeconds);
    yr_scanner_set_flags(scanner, SCAN_FLAGS_FAST_MODE | (guarded ? SCAN_FLAGS_NO_TRYCATCH : 0));
    static const uint8_t kEmpty = 0;  // libyara wants a real pointer, even for 0 bytes
    rc = yr_scanner_scan_mem(scanner, bytes.empty() ? &kEmpty : bytes.data(), bytes.size());
  }
  yr_scanner_destroy(scanner);
  if (state.failed) return scan_error("out of memory recording a match");
  if (rc != ERROR_SUCCESS) return scan_error(ScanErrorText(rc));
  return true;
}

}  // namespace modelgate::scanner
