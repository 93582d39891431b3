// Policy file parsing: the YAML tree (yaml_tree.h) checked against the
// policy schema, every problem reported at its line and column.
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <iterator>
#include <set>
#include <sstream>
#include <utility>

#include "modelgate/policy.h"
#include "yaml_tree.h"

namespace modelgate::policy {

using internal::YNode;

namespace {

constexpr uint64_t kMaxPolicyBytes = 1 << 20;

// Failure is thrown inside this file only and turned into a core::Error at
// the ParsePolicy boundary.
struct Failure {
  int line = 0;
  int column = 0;
  int pos = -1;
  std::string message;
};

[[noreturn]] void FailAt(const YNode& n, std::string message) {
  throw Failure{n.line, n.column, n.pos, std::move(message)};
}

std::string KindName(const YNode& n) {
  switch (n.kind) {
    case YNode::Kind::kNull: return "nothing (null)";
    case YNode::Kind::kScalar: return n.plain ? "the value " + core::Quoted(n.value)
                                              : "the string " + core::Quoted(n.value);
    case YNode::Kind::kMap: return "a mapping";
    case YNode::Kind::kSeq: return "a list";
  }
  return "?";
}

bool IsYaml11Bool(std::string_view v) {
  static constexpr std::string_view kWords[] = {
      "y", "Y", "yes", "Yes", "YES", "n", "N", "no", "No", "NO",
      "true", "True", "TRUE", "false", "False", "FALSE",
      "on", "On", "ON", "off", "Off", "OFF"};
  for (auto w : kWords) {
    if (v == w) return true;
  }
  return false;
}

bool IsDigit(char c) { return c >= '0' && c <= '9'; }

// LooksNumeric: what YAML 1.1 or 1.2 resolves as an int or float (decimal,
// 0x/0o/0b, underscores, sexagesimal, exponent, .inf/.nan).
bool LooksNumeric(std::string_view v) {
  size_t i = 0;
  if (i < v.size() && (v[i] == '+' || v[i] == '-')) ++i;
  std::string_view r = v.substr(i);
  for (auto w : {".inf", ".Inf", ".INF", ".nan", ".NaN", ".NAN"}) {
    if (r == w) return true;
  }
  if (r.size() > 2 && r[0] == '0' && (r[1] == 'x' || r[1] == 'o' || r[1] == 'b')) {
    for (char c : r.substr(2)) {
      if (!std::isxdigit(static_cast<unsigned char>(c)) && c != '_') return false;
    }
    return true;
  }
  bool digit = false;
  size_t k = 0;
  while (k < r.size() && (IsDigit(r[k]) || r[k] == '_' || r[k] == ':')) digit |= IsDigit(r[k++]);
  if (k < r.size() && r[k] == '.') {
    ++k;
    while (k < r.size() && (IsDigit(r[k]) || r[k] == '_')) digit |= IsDigit(r[k++]);
  }
  if (!digit) return false;
  if (k < r.size() && (r[k] == 'e' || r[k] == 'E')) {
    ++k;
    if (k < r.size() && (r[k] == '+' || r[k] == '-')) ++k;
    size_t start = k;
    while (k < r.size() && IsDigit(r[k])) ++k;
    if (k == start) return false;
  }
  return k == r.size();
}

// Field accessors; `what` names the field in messages ("signatures.threshold").

const YNode& Map(const YNode& n, const std::string& what) {
  if (n.kind != YNode::Kind::kMap) FailAt(n, what + " must be a mapping, not " + KindName(n));
  return n;
}

const YNode& Seq(const YNode& n, const std::string& what) {
  if (n.kind != YNode::Kind::kSeq) FailAt(n, what + " must be a list, not " + KindName(n));
  return n;
}

std::string String(const YNode& n, const std::string& what) {
  if (n.kind != YNode::Kind::kScalar) FailAt(n, what + " must be a string, not " + KindName(n));
  if (n.plain && IsYaml11Bool(n.value)) {
    FailAt(n, what + " must be a string, but " + core::Quoted(n.value) +
                  " reads as a boolean in YAML; quote it");
  }
  if (n.plain && LooksNumeric(n.value)) {
    FailAt(n, what + " must be a string, but " + core::Quoted(n.value) +
                  " reads as a number in YAML; quote it");
  }
  return n.value;
}

bool Bool(const YNode& n, const std::string& what) {
  if (n.kind == YNode::Kind::kScalar && n.plain) {
    if (n.value == "true") return true;
    if (n.value == "false") return false;
    if (IsYaml11Bool(n.value)) {
      FailAt(n, what + ": " + core::Quoted(n.value) +
                    " is a YAML 1.1 boolean that YAML 1.2 reads differently; write true or false");
    }
  }
  if (n.kind == YNode::Kind::kScalar && !n.plain) {
    FailAt(n, what + " must be true or false, not the string " + core::Quoted(n.value) +
                  " (remove the quotes)");
  }
  FailAt(n, what + " must be true or false, not " + KindName(n));
}

uint64_t Uint(const YNode& n, const std::string& what) {
  if (n.kind != YNode::Kind::kScalar || !n.plain) {
    FailAt(n, what + " must be a non-negative integer, not " + KindName(n));
  }
  const std::string& v = n.value;
  bool ok = !v.empty() && v.size() <= 20 && (v == "0" || v[0] != '0');
  uint64_t out = 0;
  for (char c : v) {
    if (!ok) break;
    if (!IsDigit(c)) {
      ok = false;
      break;
    }
    ok = !__builtin_mul_overflow(out, 10u, &out) &&
         !__builtin_add_overflow(out, static_cast<uint64_t>(c - '0'), &out);
  }
  if (!ok) {
    FailAt(n, what + " must be a non-negative decimal integer (digits only, no sign, leading "
                     "zeros or '_'), not " + core::Quoted(v));
  }
  return out;
}

// Keys: rejects keys outside `allowed`; returns (key node, value node) pairs.
std::vector<std::pair<const YNode*, const YNode*>> Entries(
    const YNode& map, const std::string& what, std::initializer_list<std::string_view> allowed) {
  std::vector<std::pair<const YNode*, const YNode*>> out;
  for (size_t i = 0; i + 1 < map.children.size(); i += 2) {
    const YNode& key = map.children[i];
    bool known = false;
    for (auto a : allowed) known |= key.value == a;
    if (!known) {
      std::string list;
      for (auto a : allowed) list += (list.empty() ? "" : ", ") + std::string(a);
      FailAt(key, "unknown key " + core::Quoted(key.value) + " in " + what + " (allowed: " +
                      list + ")");
    }
    out.emplace_back(&key, &map.children[i + 1]);
  }
  return out;
}

Location Where(const YNode& n) { return Location{n.line, n.column}; }

std::string Join(const std::string& dir, const std::string& path) {
  if (path.empty() || path[0] == '/' || dir.empty()) return path;
  return (std::filesystem::path(dir) / path).lexically_normal().string();
}

bool IsIdentifier(std::string_view s) {
  if (s.empty() || IsDigit(s[0])) return false;
  for (char c : s) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_')) return false;
  }
  return true;
}

bool IsDottedIdentifier(std::string_view s) {
  size_t start = 0;
  while (true) {
    size_t dot = s.find('.', start);
    if (!IsIdentifier(s.substr(start, dot == std::string_view::npos ? dot : dot - start))) {
      return false;
    }
    if (dot == std::string_view::npos) return true;
    start = dot + 1;
  }
}

bool IsFindingId(std::string_view s) {
  // MG-<AREA>-<NAME>: upper-case letters and digits, at least three parts.
  if (s.substr(0, 3) != "MG-") return false;
  int parts = 1;
  bool empty_part = true;
  for (char c : s.substr(3)) {
    if (c == '-') {
      if (empty_part) return false;
      ++parts;
      empty_part = true;
    } else if ((c >= 'A' && c <= 'Z') || IsDigit(c)) {
      empty_part = false;
    } else {
      return false;
    }
  }
  return !empty_part && parts >= 2;
}

struct LimitField {
  std::string_view key;
  std::function<uint64_t&(Policy&)> field;
};

const std::vector<LimitField>& LimitFields() {
  static const std::vector<LimitField> kFields = {
      {"maxHeaderBytes", [](Policy& p) -> uint64_t& { return p.limits.max_header_bytes; }},
      {"maxTensors", [](Policy& p) -> uint64_t& { return p.limits.max_tensors; }},
      {"maxRank", [](Policy& p) -> uint64_t& { return p.limits.max_rank; }},
      {"maxNameBytes", [](Policy& p) -> uint64_t& { return p.limits.max_name_bytes; }},
      {"maxJsonDepth", [](Policy& p) -> uint64_t& { return p.limits.max_json_depth; }},
      {"maxMetadataEntries",
       [](Policy& p) -> uint64_t& { return p.limits.max_metadata_entries; }},
      {"maxZipEntries", [](Policy& p) -> uint64_t& { return p.container_limits.max_zip_entries; }},
      {"maxCentralDirBytes",
       [](Policy& p) -> uint64_t& { return p.container_limits.max_central_dir_bytes; }},
      {"maxMemberBytes",
       [](Policy& p) -> uint64_t& { return p.container_limits.max_member_bytes; }},
      {"maxNestingDepth",
       [](Policy& p) -> uint64_t& { return p.container_limits.max_nesting_depth; }},
      {"maxExpansionRatio",
       [](Policy& p) -> uint64_t& { return p.container_limits.max_expansion_ratio; }},
      {"maxTotalDecompressedBytes",
       [](Policy& p) -> uint64_t& { return p.container_limits.max_total_decompressed_bytes; }},
      {"maxPickleOpcodes", [](Policy& p) -> uint64_t& { return p.pickle_limits.max_opcodes; }},
      {"maxPickleStackDepth",
       [](Policy& p) -> uint64_t& { return p.pickle_limits.max_stack_depth; }},
      {"maxPickleMemoEntries",
       [](Policy& p) -> uint64_t& { return p.pickle_limits.max_memo_entries; }},
      {"maxPickleStringBytes",
       [](Policy& p) -> uint64_t& { return p.pickle_limits.max_string_bytes; }},
      {"maxPickleNesting", [](Policy& p) -> uint64_t& { return p.pickle_limits.max_nesting; }},
      {"maxPickleStreams", [](Policy& p) -> uint64_t& { return p.pickle_limits.max_streams; }},
      {"maxPickleRecords", [](Policy& p) -> uint64_t& { return p.pickle_limits.max_records; }},
  };
  return kFields;
}

class Parser {
 public:
  Parser(std::string base_dir) : base_dir_(std::move(base_dir)) {}

  Policy Run(const YNode& root) {
    Policy p;
    p.base_dir = base_dir_;
    Map(root, "the policy");
    const YNode* api = nullptr;
    const YNode* kind = nullptr;
    for (auto [key, value] :
         Entries(root, "the policy",
                 {"apiVersion", "kind", "failOn", "formats", "pickle", "signatures", "limits",
                  "yara", "exceptions"})) {
      const std::string& k = key->value;
      if (k == "apiVersion") {
        api = value;
        if (String(*value, k) != kApiVersion) {
          FailAt(*value, "apiVersion must be " + std::string(kApiVersion) + ", not " +
                             core::Quoted(value->value));
        }
      } else if (k == "kind") {
        kind = value;
        if (String(*value, k) != kKind) {
          FailAt(*value, "kind must be " + std::string(kKind) + ", not " +
                             core::Quoted(value->value));
        }
      } else if (k == "failOn") {
        std::string s = String(*value, k);
        if (!core::ParseSeverity(s, &p.fail_on)) {
          FailAt(*value, "failOn must be one of critical, high, medium, low, info, not " +
                             core::Quoted(s));
        }
      } else if (k == "formats") {
        Formats(*value, &p);
      } else if (k == "pickle") {
        Pickle(*value, &p);
      } else if (k == "signatures") {
        Signatures(*value, &p);
      } else if (k == "limits") {
        Limits(*value, &p);
      } else if (k == "yara") {
        Yara(*value, &p);
      } else if (k == "exceptions") {
        Exceptions(*value, &p);
      }
    }
    if (!api) FailAt(root, "the policy has no apiVersion (write apiVersion: modelgate/v1)");
    if (!kind) FailAt(root, "the policy has no kind (write kind: Policy)");
    return p;
  }

 private:
  void Formats(const YNode& n, Policy* p) {
    Map(n, "formats");
    for (auto [key, value] : Entries(n, "formats", {"allow"})) {
      Seq(*value, "formats.allow");
      p->formats_where = Where(*key);
      std::vector<scanner::Format> allowed;
      for (const YNode& item : value->children) {
        std::string name = String(item, "formats.allow entry");
        std::optional<scanner::Format> found;
        std::string known;
        for (int i = 0; i <= static_cast<int>(scanner::kLastFormat); ++i) {
          auto f = static_cast<scanner::Format>(i);
          known += (known.empty() ? "" : ", ") + std::string(scanner::FormatName(f));
          if (scanner::FormatName(f) == name) found = f;
        }
        if (!found) FailAt(item, "unknown format " + core::Quoted(name) + " (known: " + known + ")");
        for (auto f : allowed) {
          if (f == *found) FailAt(item, "format " + core::Quoted(name) + " is listed twice");
        }
        allowed.push_back(*found);
      }
      p->allowed_formats = std::move(allowed);
    }
  }

  void Pickle(const YNode& n, Policy* p) {
    Map(n, "pickle");
    for (auto [key, value] : Entries(n, "pickle", {"mode", "extraAllowedGlobals"})) {
      if (key->value == "mode") {
        std::string m = String(*value, "pickle.mode");
        if (m == "reject") {
          p->pickle_mode = PickleMode::kReject;
        } else if (m == "allowlist") {
          p->pickle_mode = PickleMode::kAllowlist;
        } else if (m == "report") {
          p->pickle_mode = PickleMode::kReport;
        } else {
          FailAt(*value, "pickle.mode must be one of reject, allowlist, report, not " +
                             core::Quoted(m));
        }
      } else {
        Seq(*value, "pickle.extraAllowedGlobals");
        for (const YNode& item : value->children) {
          std::string g = String(item, "pickle.extraAllowedGlobals entry");
          std::string module, qualname;
          size_t colon = g.find(':');
          if (colon != std::string::npos) {
            module = g.substr(0, colon);
            qualname = g.substr(colon + 1);
          } else if (size_t dot = g.rfind('.'); dot != std::string::npos) {
            module = g.substr(0, dot);
            qualname = g.substr(dot + 1);
          }
          if (!IsDottedIdentifier(module) || !IsDottedIdentifier(qualname)) {
            FailAt(item, "pickle.extraAllowedGlobals entry " + core::Quoted(g) +
                             " is not \"module.qualname\" (or \"module:qual.name\")");
          }
          std::string reason;
          if (scanner::ClassifyGlobal(module, qualname, &reason) ==
              scanner::GlobalClass::kCritical) {
            FailAt(item, core::Quoted(module + "." + qualname) +
                             " is a code-execution global and can never be allowed" +
                             (reason.empty() ? "" : " (" + reason + ")"));
          }
          for (const auto& [m2, q2] : p->extra_allowed_globals) {
            if (m2 == module && q2 == qualname) {
              FailAt(item, core::Quoted(g) + " is listed twice");
            }
          }
          p->extra_allowed_globals.emplace_back(module, qualname);
          p->extra_globals_where.push_back(Where(item));
        }
      }
    }
  }

  void Signatures(const YNode& n, Policy* p) {
    Map(n, "signatures");
    const YNode* threshold_node = nullptr;
    const YNode* required_node = nullptr;
    for (auto [key, value] : Entries(n, "signatures", {"required", "threshold", "accept", "model",
                                                       "minVersion", "keys"})) {
      if (key->value == "required") {
        required_node = value;
        p->signatures_required = Bool(*value, "signatures.required");
      } else if (key->value == "threshold") {
        threshold_node = value;
        p->threshold_where = Where(*key);
        uint64_t t = Uint(*value, "signatures.threshold");
        if (t < 1) FailAt(*value, "signatures.threshold must be at least 1");
        if (t > 1000) FailAt(*value, "signatures.threshold is above 1000");
        p->threshold = static_cast<uint32_t>(t);
      } else if (key->value == "accept") {
        p->accept_where = Where(*key);
        Accept(*value, p);
      } else if (key->value == "model") {
        p->model_where = Where(*key);
        std::string m = String(*value, "signatures.model");
        if (m.empty()) FailAt(*value, "signatures.model must not be empty (omit it to accept any model)");
        if (m.size() > kMaxModelBytes) {
          FailAt(*value, "signatures.model is longer than " + std::to_string(kMaxModelBytes) +
                             " bytes");
        }
        if (!core::IsUtf8(m)) FailAt(*value, "signatures.model is not UTF-8");
        p->model = std::move(m);
      } else if (key->value == "minVersion") {
        p->min_version_where = Where(*key);
        uint64_t v = Uint(*value, "signatures.minVersion");
        if (v < 1) {
          FailAt(*value, "signatures.minVersion 0 requires nothing (every version is >= 0); omit "
                         "it or write at least 1");
        }
        p->min_version = v;
      } else {
        p->keys_where = Where(*key);
        Seq(*value, "signatures.keys");
        for (const YNode& item : value->children) Key(item, p);
      }
    }
    if (p->signatures_required) {
      if (p->keys.empty()) {
        FailAt(*required_node,
               "signatures.required is true but signatures.keys lists no trusted key");
      }
      if (p->threshold > p->keys.size()) {
        FailAt(*threshold_node, "signatures.threshold " + std::to_string(p->threshold) +
                                    " is more than the " + std::to_string(p->keys.size()) +
                                    " trusted key(s) listed; no file could pass");
      }
    }
  }

  void Accept(const YNode& n, Policy* p) {
    Seq(n, "signatures.accept");
    if (n.children.empty()) {
      FailAt(n, "signatures.accept is empty: no signature could satisfy the policy (list "
                "detached, embedded or both)");
    }
    std::vector<SignatureKind> kinds;
    for (const YNode& item : n.children) {
      std::string name = String(item, "signatures.accept entry");
      SignatureKind k = SignatureKind::kEmbedded;
      if (name == SignatureKindName(SignatureKind::kDetached)) {
        k = SignatureKind::kDetached;
      } else if (name == SignatureKindName(SignatureKind::kEmbedded)) {
        k = SignatureKind::kEmbedded;
      } else {
        FailAt(item, "signatures.accept entry must be detached or embedded, not " +
                         core::Quoted(name));
      }
      if (std::find(kinds.begin(), kinds.end(), k) != kinds.end()) {
        FailAt(item, "signatures.accept: " + core::Quoted(name) + " is listed twice");
      }
      kinds.push_back(k);
    }
    p->accept = std::move(kinds);
  }

  void Key(const YNode& n, Policy* p) {
    Map(n, "a signatures.keys entry");
    const YNode* name = nullptr;
    const YNode* pem = nullptr;
    const YNode* file = nullptr;
    for (auto [key, value] : Entries(n, "a signatures.keys entry", {"name", "publicKey", "file"})) {
      if (key->value == "name") name = value;
      if (key->value == "publicKey") pem = value;
      if (key->value == "file") file = value;
    }
    if (!name) FailAt(n, "a signatures.keys entry needs a name");
    TrustedKey k;
    k.name = String(*name, "key name");
    k.where = Where(n);
    if (k.name.empty() || k.name.size() > 200) FailAt(*name, "key name must be 1-200 bytes");
    for (const auto& other : p->keys) {
      if (other.name == k.name) FailAt(*name, "key name " + core::Quoted(k.name) + " is used twice");
    }
    if ((pem == nullptr) == (file == nullptr)) {
      FailAt(n, "key " + core::Quoted(k.name) + " needs exactly one of publicKey (inline PEM) "
                "or file (a PEM file path)");
    }
    if (pem) {
      auto r = signer::ParsePublicKeyPem(String(*pem, "publicKey"));
      if (!r.ok()) {
        FailAt(*pem, "key " + core::Quoted(k.name) + ": publicKey is not a public key PEM "
                     "(Ed25519, or ECDSA P-256/P-384/P-521): " + r.error().message);
      }
      k.key = r.value();
    } else {
      std::string path = String(*file, "file");
      if (path.empty()) FailAt(*file, "key " + core::Quoted(k.name) + ": file is empty");
      k.file = Join(base_dir_, path);
      auto r = signer::LoadPublicKey(k.file);
      if (!r.ok()) {
        FailAt(*file, "key " + core::Quoted(k.name) + ": cannot use key file " +
                          core::Quoted(k.file) + ": " + r.error().message);
      }
      k.key = r.value();
    }
    k.key.name = k.name;
    for (const auto& other : p->keys) {
      if (other.key.kid == k.key.kid) {
        FailAt(n, "key " + core::Quoted(k.name) + " is the same key as " +
                      core::Quoted(other.name) + " (kid " + k.key.kid_hex() + ")");
      }
    }
    p->keys.push_back(std::move(k));
  }

  void Limits(const YNode& n, Policy* p) {
    Map(n, "limits");
    static const std::vector<std::string_view> kNames = [] {
      std::vector<std::string_view> v;
      for (const auto& f : LimitFields()) v.push_back(f.key);
      return v;
    }();
    for (size_t i = 0; i + 1 < n.children.size(); i += 2) {
      const YNode& key = n.children[i];
      const YNode& value = n.children[i + 1];
      const LimitField* field = nullptr;
      for (const auto& f : LimitFields()) {
        if (f.key == key.value) field = &f;
      }
      if (!field) {
        std::string list;
        for (auto k : kNames) list += (list.empty() ? "" : ", ") + std::string(k);
        FailAt(key, "unknown key " + core::Quoted(key.value) + " in limits (allowed: " + list + ")");
      }
      std::string what = "limits." + key.value;
      uint64_t v = Uint(value, what);
      Policy defaults;
      uint64_t def = field->field(defaults);
      if (v > def) {
        FailAt(value, what + ": " + std::to_string(v) + " is above the default " +
                          std::to_string(def) + "; a policy may only tighten limits");
      }
      field->field(*p) = v;
    }
  }

  void Yara(const YNode& n, Policy* p) {
    Map(n, "yara");
    for (auto [key, value] : Entries(n, "yara", {"rules", "scope"})) {
      if (key->value == "scope") {
        std::string s = String(*value, "yara.scope");
        if (s == "header") {
          p->yara_scope = scanner::YaraScope::kHeader;
        } else if (s == "all") {
          p->yara_scope = scanner::YaraScope::kAll;
        } else {
          FailAt(*value, "yara.scope must be header or all, not " + core::Quoted(s));
        }
      } else {
        Seq(*value, "yara.rules");
        for (const YNode& item : value->children) {
          std::string dir = String(item, "yara.rules entry");
          if (dir.empty()) FailAt(item, "yara.rules entry is empty");
          std::string path = Join(base_dir_, dir);
          std::error_code ec;
          if (!std::filesystem::is_directory(path, ec)) {
            FailAt(item, "yara.rules: " + core::Quoted(path) + " is not a directory");
          }
          for (const auto& d : p->yara_rule_dirs) {
            if (d == path) FailAt(item, "yara.rules: " + core::Quoted(dir) + " is listed twice");
          }
          p->yara_rule_dirs.push_back(path);
        }
      }
    }
  }

  void Exceptions(const YNode& n, Policy* p) {
    Seq(n, "exceptions");
    for (const YNode& item : n.children) {
      Map(item, "an exceptions entry");
      Exception e;
      e.where = Where(item);
      const YNode* seen[4] = {nullptr, nullptr, nullptr, nullptr};
      for (auto [key, value] :
           Entries(item, "an exceptions entry", {"id", "sha256", "reason", "expires"})) {
        const std::string& k = key->value;
        if (k == "id") {
          seen[0] = value;
          e.id = String(*value, "exception id");
          if (!IsFindingId(e.id)) {
            FailAt(*value, "exception id " + core::Quoted(e.id) +
                               " is not a finding id (MG-AREA-NAME)");
          }
        } else if (k == "sha256") {
          seen[1] = value;
          std::string hex = String(*value, "exception sha256");
          if (!core::ParseHexLower(hex, e.sha256)) {
            FailAt(*value, "exception sha256 must be 64 lowercase hex digits (the SHA-256 of "
                           "the whole file), not " + core::Quoted(hex));
          }
        } else if (k == "reason") {
          seen[2] = value;
          e.reason = String(*value, "exception reason");
          if (e.reason.find_first_not_of(" \t\r\n") == std::string::npos) {
            FailAt(*value, "exception reason must not be empty");
          }
        } else {
          seen[3] = value;
          std::string d = String(*value, "exception expires");
          auto date = ParseDate(d);
          if (!date) {
            FailAt(*value, "exception expires must be a date YYYY-MM-DD, not " + core::Quoted(d));
          }
          e.expires = *date;
        }
      }
      static constexpr const char* kNames[] = {"id", "sha256", "reason", "expires"};
      for (int i = 0; i < 4; ++i) {
        if (!seen[i]) FailAt(item, std::string("exception is missing \"") + kNames[i] + "\"");
      }
      for (const auto& other : p->exceptions) {
        if (other.id == e.id && other.sha256 == e.sha256) {
          FailAt(item, "a second exception for " + e.id + " and the same sha256 (first at line " +
                           std::to_string(other.where.line) + ")");
        }
      }
      p->exceptions.push_back(std::move(e));
    }
  }

  std::string base_dir_;
};

core::Error MakeError(const std::string& source, const Failure& f) {
  std::string where = source;
  if (f.line > 0) where += ":" + std::to_string(f.line) + ":" + std::to_string(f.column);
  return core::Error{core::Code::kIoRead,
                     f.pos >= 0 ? static_cast<uint64_t>(f.pos) : core::kNoOffset,
                     where + ": " + f.message};
}

int DaysFromCivil(int y, int m, int d) {
  // Howard Hinnant's days_from_civil.
  y -= m <= 2;
  const int era = (y >= 0 ? y : y - 399) / 400;
  const int yoe = y - era * 400;
  const int doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  const int doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + doe - 719468;
}

}  // namespace

std::optional<Date> ParseDate(std::string_view t) {
  if (t.size() != 10 || t[4] != '-' || t[7] != '-') return std::nullopt;
  for (size_t i : {0, 1, 2, 3, 5, 6, 8, 9}) {
    if (!IsDigit(t[i])) return std::nullopt;
  }
  auto num = [&](size_t at, size_t len) {
    int v = 0;
    for (size_t i = at; i < at + len; ++i) v = v * 10 + (t[i] - '0');
    return v;
  };
  Date d{num(0, 4), num(5, 2), num(8, 2)};
  if (d.year < 1970 || d.month < 1 || d.month > 12 || d.day < 1) return std::nullopt;
  static constexpr int kDays[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  bool leap = (d.year % 4 == 0 && d.year % 100 != 0) || d.year % 400 == 0;
  int max = kDays[d.month - 1] + (d.month == 2 && leap ? 1 : 0);
  if (d.day > max) return std::nullopt;
  return d;
}

std::string FormatDate(const Date& d) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02d", d.year % 10000, d.month % 100, d.day % 100);
  return buf;
}

Date Today() {
  std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  return Date{tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday};
}

int64_t DaysBetween(const Date& from, const Date& to) {
  return static_cast<int64_t>(DaysFromCivil(to.year, to.month, to.day)) -
         DaysFromCivil(from.year, from.month, from.day);
}

std::string_view SignatureKindName(SignatureKind k) {
  switch (k) {
    case SignatureKind::kEmbedded: return "embedded";
    case SignatureKind::kDetached: return "detached";
  }
  return "embedded";
}

std::string_view PickleModeName(PickleMode m) {
  switch (m) {
    case PickleMode::kReject: return "reject";
    case PickleMode::kAllowlist: return "allowlist";
    case PickleMode::kReport: return "report";
  }
  return "allowlist";
}

core::Result<Policy> ParsePolicy(std::string_view text, const std::string& source_name,
                                 const std::string& base_dir) {
  auto tree = internal::ParseYamlStrict(text);
  if (auto* e = std::get_if<internal::YamlError>(&tree)) {
    // yaml-cpp can place an end-of-input error one past the last byte.
    int pos = e->pos;
    if (pos >= 0 && static_cast<size_t>(pos) > text.size()) pos = static_cast<int>(text.size());
    return MakeError(source_name, Failure{e->line, e->column, pos, e->message});
  }
  try {
    Policy p = Parser(base_dir).Run(std::get<YNode>(tree));
    p.source = source_name;
    p.sha256 = core::Sha256({reinterpret_cast<const uint8_t*>(text.data()), text.size()});
    return p;
  } catch (const Failure& f) {
    return MakeError(source_name, f);
  } catch (const std::exception& e) {
    return MakeError(source_name, Failure{0, 0, -1, std::string("cannot parse: ") + e.what()});
  }
}

core::Result<Policy> LoadPolicy(const std::string& path) {
  // stat first: opening a FIFO would block.
  struct stat st{};
  if (::stat(path.c_str(), &st) != 0) {
    return core::Error{core::Code::kIoOpen, core::kNoOffset,
                       path + ": cannot open policy: " + std::strerror(errno)};
  }
  if (!S_ISREG(st.st_mode)) {
    return core::Error{core::Code::kIoOpen, core::kNoOffset,
                       path + ": policy is not a regular file"};
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return core::Error{core::Code::kIoOpen, core::kNoOffset,
                       path + ": cannot open policy: " + std::strerror(errno)};
  }
  std::string text;
  text.resize(kMaxPolicyBytes + 1);
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  if (in.bad()) {
    return core::Error{core::Code::kIoRead, core::kNoOffset, path + ": cannot read policy"};
  }
  text.resize(static_cast<size_t>(in.gcount()));
  if (text.size() > kMaxPolicyBytes) {
    return core::Error{core::Code::kIoRead, core::kNoOffset,
                       path + ": policy is larger than " + std::to_string(kMaxPolicyBytes) +
                           " bytes"};
  }
  std::string dir = std::filesystem::path(path).parent_path().string();
  if (dir.empty()) dir = ".";
  return ParsePolicy(text, path, dir);
}

}  // namespace modelgate::policy
