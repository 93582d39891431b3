// OMS bundles (modelgate/detached.h): strict parse, write, signature checks,
// the model walk, and the comparison of a model with its manifest.
#include "modelgate/detached.h"

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "internal.h"
#include "modelgate/atomic_file.h"
#include "modelgate/strict_json.h"

namespace modelgate::signer::oms {
namespace {

using json = nlohmann::json;
using core::Code;
using core::Error;

// kMaxPathBytes bounds one resource name (Linux PATH_MAX).
constexpr size_t kMaxPathBytes = 4096;
// kOpenBatch: files open at once while hashing a model (well under the
// usual 1024-descriptor soft limit, enough to keep every thread busy).
constexpr size_t kOpenBatch = 256;

constexpr std::array<std::string_view, 4> kDefaultIgnores = {".git", ".gitattributes", ".github",
                                                             ".gitignore"};

struct ParseFail {
  Error error;
  Reason reason;
};

ParseFail Fail(Reason reason, std::string message) {
  return {Error{Code::kSigBadRecord, core::kNoOffset, std::move(message)}, reason};
}

// DecodeBase64 decodes canonical padded base64 (RFC 4648 §4): no
// whitespace, padding only at the end, zero spare bits.
bool DecodeBase64(std::string_view text, std::vector<uint8_t>* out) {
  if (text.size() % 4 != 0) return false;
  auto value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  out->clear();
  out->reserve(text.size() / 4 * 3);
  for (size_t i = 0; i < text.size(); i += 4) {
    const bool last = i + 4 == text.size();
    int v[4];
    int pad = 0;
    for (int k = 0; k < 4; ++k) {
      char c = text[i + static_cast<size_t>(k)];
      if (c == '=' && last && k >= 2) {
        v[k] = 0;
        ++pad;
        continue;
      }
      if (pad) return false;  // a data character after '='
      v[k] = value(c);
      if (v[k] < 0) return false;
    }
    uint32_t n = (static_cast<uint32_t>(v[0]) << 18) | (static_cast<uint32_t>(v[1]) << 12) |
                 (static_cast<uint32_t>(v[2]) << 6) | static_cast<uint32_t>(v[3]);
    out->push_back(static_cast<uint8_t>(n >> 16));
    if (pad == 2) {
      if (n & 0xffff) return false;
      break;
    }
    out->push_back(static_cast<uint8_t>(n >> 8));
    if (pad == 1) {
      if (n & 0xff) return false;
      break;
    }
    out->push_back(static_cast<uint8_t>(n));
  }
  return true;
}

// ParseDecimal: canonical unsigned decimal (no sign, no leading zero, no
// separators: Python's int() accepts "+1", " 1" and "1_0"; we do not).
bool ParseDecimal(std::string_view s, uint64_t* out) {
  if (s.empty() || s.size() > 20 || (s.size() > 1 && s[0] == '0')) return false;
  uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    if (__builtin_mul_overflow(v, uint64_t{10}, &v) ||
        __builtin_add_overflow(v, static_cast<uint64_t>(c - '0'), &v)) {
      return false;
    }
  }
  *out = v;
  return true;
}

// PathProblem is why `p` is not a canonical relative '/'-path, or "" when it
// is one.
std::string PathProblem(std::string_view p) {
  if (p.empty()) return "is empty";
  if (p.size() > kMaxPathBytes) return "is longer than 4096 bytes";
  if (p.front() == '/') return "is absolute";
  for (char ch : p) {
    auto c = static_cast<unsigned char>(ch);
    if (c == '\\') return "has a backslash";
    if (c < 0x20 || c == 0x7f) return "has a control character";
  }
  if (!core::IsUtf8(p)) return "is not UTF-8";
  size_t start = 0;
  while (true) {
    size_t slash = p.find('/', start);
    std::string_view comp =
        p.substr(start, slash == std::string_view::npos ? std::string_view::npos : slash - start);
    if (comp.empty()) return "has an empty component";
    if (comp == ".") return "has a \".\" component";
    if (comp == "..") return "has a \"..\" component";
    if (slash == std::string_view::npos) break;
    start = slash + 1;
  }
  return "";
}

bool UnderPath(std::string_view rel, std::string_view base) {
  return rel == base ||
         (rel.size() > base.size() && rel.compare(0, base.size(), base) == 0 && rel[base.size()] == '/');
}

// CheckKeys: `obj` is an object whose keys are all in `allowed` and holds
// every key of `required`.
std::optional<ParseFail> CheckKeys(const json& obj, std::string_view what,
                                   std::initializer_list<std::string_view> allowed,
                                   std::initializer_list<std::string_view> required) {
  if (!obj.is_object()) return Fail(Reason::kMalformed, std::string(what) + " is not an object");
  for (const auto& [k, v] : obj.items()) {
    if (std::find(allowed.begin(), allowed.end(), k) == allowed.end()) {
      return Fail(Reason::kMalformed, std::string(what) + " has an unknown field " + core::Quoted(k));
    }
  }
  for (std::string_view r : required) {
    if (!obj.contains(std::string(r))) {
      return Fail(Reason::kMalformed, std::string(what) + " has no \"" + std::string(r) + "\"");
    }
  }
  return std::nullopt;
}

std::optional<ParseFail> GetString(const json& obj, std::string_view key, std::string_view what,
                                   std::string* out) {
  const json& v = obj.at(std::string(key));
  if (!v.is_string()) {
    return Fail(Reason::kMalformed, std::string(what) + "." + std::string(key) + " is not a string");
  }
  *out = v.get<std::string>();
  return std::nullopt;
}

std::optional<ParseFail> GetDigest(const json& v, std::string_view what, core::Sha256Digest* out) {
  if (!v.is_string() || !core::ParseHexLower(v.get_ref<const std::string&>(), *out)) {
    return Fail(Reason::kMalformed, std::string(what) + " is not 64 lowercase hex digits");
  }
  return std::nullopt;
}

std::optional<ParseFail> ParseSerialization(const json& s, Manifest* m) {
  if (!s.is_object() || !s.contains("method") || !s["method"].is_string()) {
    return Fail(Reason::kMalformed, "serialization has no string \"method\"");
  }
  const std::string method = s["method"].get<std::string>();
  if (method == "files") {
    m->method = Method::kFiles;
    if (auto f = CheckKeys(s, "serialization", {"method", "hash_type", "allow_symlinks", "ignore_paths"},
                           {"hash_type", "allow_symlinks"})) {
      return f;
    }
  } else if (method == "shards") {
    m->method = Method::kShards;
    if (auto f = CheckKeys(s, "serialization",
                           {"method", "hash_type", "allow_symlinks", "ignore_paths", "shard_size"},
                           {"hash_type", "allow_symlinks", "shard_size"})) {
      return f;
    }
    const json& n = s["shard_size"];
    // model_signing writes the shard size through protobuf's Struct, as a
    // double (40.0): an integral double is accepted, up to 2^53.
    if (n.is_number_unsigned() && n.get<uint64_t>() > 0) {
      m->shard_size = n.get<uint64_t>();
    } else if (n.is_number_float() && std::isfinite(n.get<double>()) && n.get<double>() >= 1 &&
               n.get<double>() <= 9007199254740992.0 && std::floor(n.get<double>()) == n.get<double>()) {
      m->shard_size = static_cast<uint64_t>(n.get<double>());
    } else {
      return Fail(Reason::kMalformed, "serialization.shard_size is not a positive integer");
    }
  } else {
    return Fail(Reason::kMalformed,
                "serialization.method " + core::Quoted(method) + " is not \"files\" or \"shards\"");
  }
  if (!s["hash_type"].is_string() || s["hash_type"].get<std::string>() != "sha256") {
    return Fail(Reason::kMalformed,
                "serialization.hash_type is not \"sha256\" (the only one modelgate checks)");
  }
  if (!s["allow_symlinks"].is_boolean()) {
    return Fail(Reason::kMalformed, "serialization.allow_symlinks is not a boolean");
  }
  m->allow_symlinks = s["allow_symlinks"].get<bool>();
  if (s.contains("ignore_paths")) {
    const json& ip = s["ignore_paths"];
    if (!ip.is_array()) return Fail(Reason::kMalformed, "serialization.ignore_paths is not an array");
    for (const json& p : ip) {
      if (!p.is_string()) return Fail(Reason::kMalformed, "an ignore path is not a string");
      std::string path = p.get<std::string>();
      if (std::string why = PathProblem(path); !why.empty()) {
        return Fail(Reason::kResourcePath, "ignore path " + core::Quoted(path) + " " + why);
      }
      m->ignore_paths.push_back(std::move(path));
    }
  }
  return std::nullopt;
}

std::optional<ParseFail> ParseResource(const json& r, const Manifest& m, size_t index, Resource* out) {
  const std::string what = "resource " + std::to_string(index);
  if (auto f = CheckKeys(r, what, {"name", "algorithm", "digest"}, {"name", "algorithm", "digest"})) return f;
  std::string name, algorithm;
  if (auto f = GetString(r, "name", what, &name)) return f;
  if (auto f = GetString(r, "algorithm", what, &algorithm)) return f;
  if (auto f = GetDigest(r["digest"], what + ".digest", &out->digest)) return f;
  std::string expected_alg =
      m.method == Method::kFiles ? "sha256" : "sha256-sharded-" + std::to_string(m.shard_size);
  if (algorithm != expected_alg) {
    return Fail(Reason::kMalformed, what + " " + core::Quoted(name) + ": algorithm " +
                                        core::Quoted(algorithm) + " is not " + core::Quoted(expected_alg));
  }
  std::string path = name;
  if (m.method == Method::kShards) {
    // model_signing splits the name at every ':' and wants three parts.
    size_t c1 = name.find(':');
    size_t c2 = c1 == std::string::npos ? std::string::npos : name.find(':', c1 + 1);
    if (c2 == std::string::npos || name.find(':', c2 + 1) != std::string::npos ||
        !ParseDecimal(std::string_view(name).substr(c1 + 1, c2 - c1 - 1), &out->begin) ||
        !ParseDecimal(std::string_view(name).substr(c2 + 1), &out->end)) {
      return Fail(Reason::kResourcePath,
                  what + " name " + core::Quoted(name) + " is not PATH:START:END in decimal");
    }
    path = name.substr(0, c1);
  }
  if (path != ".") {
    if (std::string why = PathProblem(path); !why.empty()) {
      return Fail(Reason::kResourcePath, what + " path " + core::Quoted(path) + " " + why);
    }
  }
  out->path = std::move(path);
  return std::nullopt;
}

// CheckManifest: the rules over the whole (sorted) resource list.
std::optional<ParseFail> CheckManifest(const Manifest& m) {
  const auto& rs = m.resources;
  if (rs.empty()) return Fail(Reason::kMalformed, "the predicate lists no resource");
  for (size_t i = 0; i < rs.size(); ++i) {
    if (rs[i].path == "." && rs.front().path != rs.back().path) {
      return Fail(Reason::kResourcePath, "resource \".\" (a one-file model) is listed with other files");
    }
    for (const std::string& ip : m.ignore_paths) {
      if (UnderPath(rs[i].path, ip)) {
        return Fail(Reason::kMalformed,
                    "resource " + core::Quoted(rs[i].path) + " is under the ignore path " + core::Quoted(ip));
      }
    }
    if (i == 0 || rs[i].path != rs[i - 1].path) continue;
    if (m.method == Method::kFiles || (rs[i].begin == rs[i - 1].begin && rs[i].end == rs[i - 1].end)) {
      return Fail(Reason::kDuplicate, "resource " + core::Quoted(rs[i].path) + " is listed twice");
    }
  }
  if (m.method == Method::kShards) {
    for (size_t i = 0; i < rs.size(); ++i) {
      const bool first = i == 0 || rs[i].path != rs[i - 1].path;
      const bool last = i + 1 == rs.size() || rs[i + 1].path != rs[i].path;
      const std::string where = "shard " + core::Quoted(rs[i].path) + ":" + std::to_string(rs[i].begin) +
                                ":" + std::to_string(rs[i].end);
      if (first && rs[i].begin != 0)
        return Fail(Reason::kShardTiling, where + ": the file's first shard does not start at 0");
      if (!first && rs[i].begin != rs[i - 1].end) {
        return Fail(Reason::kShardTiling, where + ": does not start where the previous shard ends (" +
                                              std::to_string(rs[i - 1].end) + ")");
      }
      if (rs[i].end <= rs[i].begin) return Fail(Reason::kShardTiling, where + ": is empty or reversed");
      const uint64_t len = rs[i].end - rs[i].begin;
      if (len > m.shard_size || (!last && len != m.shard_size)) {
        return Fail(Reason::kShardTiling, where + ": is " + std::to_string(len) +
                                              " bytes, not the shard size " + std::to_string(m.shard_size) +
                                              (last ? " or less (last shard)" : ""));
      }
    }
  }
  return std::nullopt;
}

std::optional<ParseFail> ParseStatement(std::string_view payload, const BundleLimits& limits, Manifest* m) {
  auto doc = core::ParseStrictJson(payload, kMaxBundleJsonDepth, Code::kSigBadRecord, "statement");
  if (!doc.ok()) return ParseFail{doc.error(), Reason::kMalformed};
  const json& st = doc.value();
  if (auto f = CheckKeys(st, "statement", {"_type", "subject", "predicateType", "predicate"},
                         {"_type", "subject", "predicateType", "predicate"})) {
    return f;
  }
  if (!st["_type"].is_string() || st["_type"].get<std::string>() != kStatementType) {
    return Fail(Reason::kMalformed, "statement _type is not " + core::Quoted(kStatementType));
  }
  if (!st["predicateType"].is_string() || st["predicateType"].get<std::string>() != kPredicateType) {
    return Fail(Reason::kMalformed, "statement predicateType is not " + core::Quoted(kPredicateType));
  }
  const json& subjects = st["subject"];
  if (!subjects.is_array() || subjects.size() != 1) {
    return Fail(Reason::kMalformed, "statement does not have exactly one subject");
  }
  const json& subject = subjects[0];
  if (auto f = CheckKeys(subject, "subject", {"name", "digest", "annotations"}, {"name", "digest"})) return f;
  if (auto f = GetString(subject, "name", "subject", &m->subject_name)) return f;
  if (auto f = CheckKeys(subject["digest"], "subject.digest", {"sha256"}, {"sha256"})) return f;
  if (auto f = GetDigest(subject["digest"]["sha256"], "subject.digest.sha256", &m->root_digest)) return f;
  if (subject.contains("annotations")) {
    const json& a = subject["annotations"];
    if (auto f = CheckKeys(a, "subject.annotations", {kVersionAnnotation}, {kVersionAnnotation})) return f;
    uint64_t v = 0;
    const json& vj = a[std::string(kVersionAnnotation)];
    if (!vj.is_string() || !ParseDecimal(vj.get_ref<const std::string&>(), &v)) {
      return Fail(Reason::kMalformed, "subject annotation modelgate.version is not a decimal string");
    }
    m->version = v;
  }
  const json& pred = st["predicate"];
  if (auto f = CheckKeys(pred, "predicate", {"serialization", "resources"}, {"serialization", "resources"})) {
    return f;
  }
  if (auto f = ParseSerialization(pred["serialization"], m)) return f;
  const json& res = pred["resources"];
  if (!res.is_array() || res.empty()) {
    return Fail(Reason::kMalformed, "predicate.resources is not a non-empty array");
  }
  if (res.size() > limits.max_resources) {
    return Fail(Reason::kLimit, "the predicate lists " + std::to_string(res.size()) +
                                    " resources, over the limit of " + std::to_string(limits.max_resources));
  }
  m->resources.resize(res.size());
  for (size_t i = 0; i < res.size(); ++i) {
    if (auto f = ParseResource(res[i], *m, i, &m->resources[i])) return f;
  }
  // model_signing hashes the digests in the order listed (not sorted).
  const core::Sha256Digest root = RootDigest(m->resources);
  if (root != m->root_digest) {
    return Fail(Reason::kRootDigest, "subject digest " + core::HexLower(m->root_digest) +
                                         " is not the digest of the resources listed (" +
                                         core::HexLower(root) + ")");
  }
  std::sort(m->resources.begin(), m->resources.end(), ResourceLess);
  return CheckManifest(*m);
}

std::optional<ParseFail> ParseBundleImpl(std::string_view text, const BundleLimits& limits, Bundle* b) {
  if (text.size() > limits.max_bundle_bytes) {
    return Fail(Reason::kLimit, "bundle is " + std::to_string(text.size()) + " bytes, over the limit of " +
                                    std::to_string(limits.max_bundle_bytes));
  }
  auto doc = core::ParseStrictJson(text, kMaxBundleJsonDepth, Code::kSigBadRecord, "bundle");
  if (!doc.ok()) return ParseFail{doc.error(), Reason::kMalformed};
  const json& root = doc.value();
  if (!root.is_object()) return Fail(Reason::kMalformed, "bundle is not a JSON object");
  if (!root.contains("mediaType") || !root["mediaType"].is_string()) {
    return Fail(Reason::kMalformed, "bundle has no string \"mediaType\"");
  }
  if (root["mediaType"].get<std::string>() != kBundleMediaType) {
    return Fail(Reason::kMediaType, "bundle media type " +
                                        core::Quoted(root["mediaType"].get<std::string>()) + " is not " +
                                        core::Quoted(kBundleMediaType));
  }
  if (auto f = CheckKeys(root, "bundle", {"mediaType", "verificationMaterial", "dsseEnvelope"},
                         {"verificationMaterial", "dsseEnvelope"})) {
    return f;
  }
  const json& vm = root["verificationMaterial"];
  if (auto f = CheckKeys(vm, "verificationMaterial", {"publicKey", "tlogEntries"}, {"publicKey"})) return f;
  if (vm.contains("tlogEntries") && (!vm["tlogEntries"].is_array() || !vm["tlogEntries"].empty())) {
    return Fail(Reason::kMalformed,
                "verificationMaterial.tlogEntries is not empty: modelgate checks key-signed bundles, "
                "without transparency-log entries");
  }
  // rawBytes and keyDetails: older model_signing wrote them; its reader
  // drops them, and trust never comes from the bundle, so they are read as
  // strings and not used.
  const json& pk = vm["publicKey"];
  if (auto f = CheckKeys(pk, "publicKey", {"hint", "rawBytes", "keyDetails"}, {})) return f;
  for (const char* k : {"rawBytes", "keyDetails"}) {
    if (pk.contains(k) && !pk[k].is_string()) {
      return Fail(Reason::kMalformed, std::string("publicKey.") + k + " is not a string");
    }
  }
  if (pk.contains("hint")) {
    if (auto f = GetString(pk, "hint", "publicKey", &b->hint)) return f;
    core::Sha256Digest h{};
    if (!core::ParseHexLower(b->hint, h)) {
      return Fail(Reason::kMalformed, "publicKey.hint is not 64 lowercase hex digits");
    }
  }
  const json& env = root["dsseEnvelope"];
  if (auto f = CheckKeys(env, "dsseEnvelope", {"payload", "payloadType", "signatures"},
                         {"payload", "payloadType", "signatures"})) {
    return f;
  }
  if (auto f = GetString(env, "payloadType", "dsseEnvelope", &b->payload_type)) return f;
  if (b->payload_type != kPayloadType) {
    return Fail(Reason::kMalformed, "dsseEnvelope.payloadType " + core::Quoted(b->payload_type) + " is not " +
                                        core::Quoted(kPayloadType));
  }
  std::string payload_b64;
  if (auto f = GetString(env, "payload", "dsseEnvelope", &payload_b64)) return f;
  std::vector<uint8_t> payload;
  if (!DecodeBase64(payload_b64, &payload)) {
    return Fail(Reason::kMalformed, "dsseEnvelope.payload is not canonical base64");
  }
  b->payload.assign(payload.begin(), payload.end());
  const json& sigs = env["signatures"];
  if (!sigs.is_array() || sigs.empty()) {
    return Fail(Reason::kMalformed, "dsseEnvelope.signatures is not a non-empty array");
  }
  for (size_t i = 0; i < sigs.size(); ++i) {
    const std::string what = "signature " + std::to_string(i);
    if (auto f = CheckKeys(sigs[i], what, {"sig", "keyid"}, {"sig"})) return f;
    BundleSignature s;
    std::string sig_b64;
    if (auto f = GetString(sigs[i], "sig", what, &sig_b64)) return f;
    if (!DecodeBase64(sig_b64, &s.sig) || s.sig.empty()) {
      return Fail(Reason::kMalformed, what + ": sig is not canonical base64");
    }
    if (sigs[i].contains("keyid")) {
      if (auto f = GetString(sigs[i], "keyid", what, &s.keyid)) return f;
    }
    b->signatures.push_back(std::move(s));
  }
  return ParseStatement(b->payload, limits, &b->manifest);
}

// ---- the model walk ----------------------------------------------------------------

struct WalkEntry {
  std::string rel;
  uint64_t dev = 0, ino = 0;
  bool ignored = false;
  uint64_t size = 0;  // lstat's, for an ignored file (which is not opened)
};

struct WalkSpec {
  std::vector<std::string> ignore;   // rel paths (and their subtrees) left out
  std::vector<std::string> exclude;  // rel paths of files left out (the bundle)
  size_t max_files = kMaxModelFiles;
  bool for_signing = false;  // names must be signable (PathProblem)
};

Error WalkError(Code code, const std::string& rel, const std::string& what) {
  return Error{code, core::kNoOffset, core::Quoted(rel) + " " + what};
}

core::Status WalkDir(int dir_fd, const std::string& prefix, size_t depth, const WalkSpec& spec,
                     std::vector<WalkEntry>* out, size_t* regular) {
  if (depth > kMaxWalkDepth) {
    return WalkError(Code::kSigOptions, prefix,
                     "is nested deeper than " + std::to_string(kMaxWalkDepth) + " directories");
  }
  int list_fd = ::dup(dir_fd);
  if (list_fd < 0)
    return WalkError(Code::kIoOpen, prefix.empty() ? "." : prefix,
                     std::string("cannot be listed: ") + std::strerror(errno));
  DIR* dir = ::fdopendir(list_fd);
  if (dir == nullptr) {
    ::close(list_fd);
    return WalkError(Code::kIoOpen, prefix.empty() ? "." : prefix,
                     std::string("cannot be listed: ") + std::strerror(errno));
  }
  std::vector<std::string> names;
  errno = 0;
  while (dirent* d = ::readdir(dir)) {
    std::string_view n = d->d_name;
    if (n != "." && n != "..") names.emplace_back(n);
    errno = 0;
  }
  const int read_errno = errno;
  ::closedir(dir);
  if (read_errno != 0) {
    return WalkError(Code::kIoRead, prefix.empty() ? "." : prefix,
                     std::string("cannot be listed: ") + std::strerror(read_errno));
  }
  std::sort(names.begin(), names.end());
  for (const std::string& name : names) {
    const std::string rel = prefix.empty() ? name : prefix + "/" + name;
    bool ignored = std::any_of(spec.ignore.begin(), spec.ignore.end(),
                               [&](const std::string& ip) { return UnderPath(rel, ip); }) ||
                   std::find(spec.exclude.begin(), spec.exclude.end(), rel) != spec.exclude.end();
    struct stat sb {};
    if (::fstatat(dir_fd, name.c_str(), &sb, AT_SYMLINK_NOFOLLOW) != 0) {
      return WalkError(Code::kIoOpen, rel, std::string("cannot be read: ") + std::strerror(errno));
    }
    if (ignored) {
      // Ignored paths are not looked into (model_signing skips them before
      // its symlink check); an ignored regular file is listed as such.
      if (S_ISREG(sb.st_mode)) {
        out->push_back({rel, static_cast<uint64_t>(sb.st_dev), static_cast<uint64_t>(sb.st_ino), true,
                        static_cast<uint64_t>(sb.st_size)});
      }
      continue;
    }
    if (S_ISLNK(sb.st_mode)) {
      return WalkError(Code::kIoNotRegular, rel,
                       "is a symlink: a model is signed and verified without following links");
    }
    if (S_ISDIR(sb.st_mode)) {
      core::UniqueFd sub(::openat(dir_fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
      struct stat sd {};
      if (sub.get() < 0 || ::fstat(sub.get(), &sd) != 0) {
        return WalkError(Code::kIoOpen, rel, std::string("cannot be opened: ") + std::strerror(errno));
      }
      if (sd.st_dev != sb.st_dev || sd.st_ino != sb.st_ino) {
        return WalkError(Code::kIoChanged, rel, "changed while the model was walked");
      }
      if (auto s = WalkDir(sub.get(), rel, depth + 1, spec, out, regular); !s.ok()) return s;
      continue;
    }
    if (!S_ISREG(sb.st_mode)) {
      return WalkError(Code::kIoNotRegular, rel,
                       "is not a regular file or a directory (a device, FIFO or socket)");
    }
    if (spec.for_signing) {
      if (std::string why = PathProblem(rel); !why.empty()) {
        return WalkError(Code::kSigOptions, rel, "cannot be named in a bundle: its path " + why);
      }
    }
    if (*regular >= spec.max_files) {
      return Error{Code::kSigOptions, core::kNoOffset,
                   "the model has more than " + std::to_string(spec.max_files) + " files (the limit)"};
    }
    out->push_back({rel, static_cast<uint64_t>(sb.st_dev), static_cast<uint64_t>(sb.st_ino), false});
    ++*regular;
  }
  return core::OkStatus();
}

struct Walk {
  bool single_file = false;
  std::shared_ptr<core::UniqueFd> root_fd;     // the directory, or the one file
  std::vector<WalkEntry> entries;  // sorted PathLess
};

core::Result<Walk> WalkModel(const std::string& root, const WalkSpec& spec) {
  Walk w;
  w.root_fd = std::make_shared<core::UniqueFd>(::open(root.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
  if (w.root_fd->get() < 0) {
    const int err = errno;
    if (err == ELOOP) return WalkError(Code::kIoNotRegular, root, "is a symlink: give the model's real path");
    return WalkError(Code::kIoOpen, root, std::string("cannot be opened: ") + std::strerror(err));
  }
  struct stat sb {};
  if (::fstat(w.root_fd->get(), &sb) != 0) {
    return WalkError(Code::kIoRead, root, std::string("cannot be read: ") + std::strerror(errno));
  }
  if (S_ISREG(sb.st_mode)) {
    w.single_file = true;
    w.entries.push_back({".", static_cast<uint64_t>(sb.st_dev), static_cast<uint64_t>(sb.st_ino), false});
    return w;
  }
  if (!S_ISDIR(sb.st_mode)) {
    return WalkError(Code::kIoNotRegular, root, "is not a regular file or a directory");
  }
  size_t regular = 0;
  if (auto s = WalkDir(w.root_fd->get(), "", 0, spec, &w.entries, &regular); !s.ok()) return s.error();
  std::sort(w.entries.begin(), w.entries.end(),
            [](const WalkEntry& a, const WalkEntry& b) { return PathLess(a.rel, b.rel); });
  return w;
}

// HashedFile: one present file, hashed.
struct HashedFile {
  std::string rel;
  uint64_t size = 0;
  core::Sha256Digest whole{};
  std::vector<core::Sha256Digest> range_digests;  // RangesToHash(m, rel, size)
};

// HashEntries opens each non-ignored entry once (checking it is the inode
// the walk saw), hashes RangesToHash(m, rel, size) (and the whole file in shards
// mode) from that descriptor, and checks it did not change meanwhile.
core::Result<std::vector<HashedFile>> HashEntries(const Walk& w, const std::string& root, const Manifest& m,
                                                  const core::HashOptions& hash) {
  std::vector<HashedFile> out;
  std::vector<const WalkEntry*> todo;
  for (const WalkEntry& e : w.entries) {
    if (!e.ignored) todo.push_back(&e);
  }
  for (size_t start = 0; start < todo.size(); start += kOpenBatch) {
    const size_t end = std::min(todo.size(), start + kOpenBatch);
    std::vector<core::OpenedFile> files;
    std::vector<core::FdRange> ranges;
    std::vector<std::pair<size_t, size_t>> spans;  // per file: first range, count
    std::vector<std::string> names;
    names.reserve(end - start);
    for (size_t i = start; i < end; ++i) {
      const WalkEntry& e = *todo[i];
      int fd = w.single_file
                   ? ::dup(w.root_fd->get())
                   : ::openat(w.root_fd->get(), e.rel.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
      if (fd < 0) {
        return WalkError(Code::kIoOpen, w.single_file ? root : e.rel,
                         std::string("cannot be opened: ") + std::strerror(errno));
      }
      auto f = core::AdoptRegularFile(fd);
      if (!f.ok()) return WalkError(f.error().code, e.rel, f.error().message);
      if (f.value().dev != e.dev || f.value().ino != e.ino) {
        return WalkError(Code::kIoChanged, e.rel,
                         "changed while the model was walked (another file is there now)");
      }
      files.push_back(std::move(f).value());
      names.push_back(w.single_file ? root : e.rel);
    }
    for (size_t k = 0; k < files.size(); ++k) {
      const uint64_t size = files[k].size;
      std::vector<core::ByteRange> rs = RangesToHash(m, todo[start + k]->rel, size);
      if (m.method == Method::kShards) rs.push_back({0, size});
      spans.emplace_back(ranges.size(), rs.size());
      for (const core::ByteRange& r : rs) ranges.push_back({files[k].fd, r, names[k]});
    }
    auto digests = core::HashFdRanges(ranges, hash);
    if (!digests.ok()) return digests.error();
    for (size_t k = 0; k < files.size(); ++k) {
      if (auto s = core::CheckUnchanged(files[k]); !s.ok()) {
        return WalkError(s.error().code, names[k], s.error().message);
      }
      HashedFile h;
      h.rel = todo[start + k]->rel;
      h.size = files[k].size;
      auto [first, count] = spans[k];
      const auto& d = digests.value();
      if (m.method == Method::kShards) {
        h.range_digests.assign(d.begin() + static_cast<std::ptrdiff_t>(first),
                               d.begin() + static_cast<std::ptrdiff_t>(first + count - 1));
        h.whole = d[first + count - 1];
      } else {
        h.range_digests = {d[first]};
        h.whole = d[first];
      }
      out.push_back(std::move(h));
    }
  }
  return out;
}

// Basename of a path as Python's pathlib.Path(p).name, with the resolved
// name for "." and ".." (what model_signing does).
std::string ModelName(const std::string& root) {
  std::string p = root;
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  std::string base = p.substr(p.rfind('/') == std::string::npos ? 0 : p.rfind('/') + 1);
  if (base.empty() || base == "." || base == "..") {
    char buf[PATH_MAX];
    if (::realpath(root.c_str(), buf) != nullptr) {
      std::string r = buf;
      base = r.substr(r.rfind('/') + 1);
    }
  }
  return base;
}

void AppendResourceName(std::string& out, const Manifest& m, const Resource& r) {
  if (m.method == Method::kFiles) {
    internal::AppendJsonString(out, r.path);
  } else {
    internal::AppendJsonString(out, r.path + ":" + std::to_string(r.begin) + ":" + std::to_string(r.end));
  }
}

}  // namespace

std::span<const std::string_view> DefaultIgnorePaths() {
  return kDefaultIgnores;
}

std::string_view ReasonId(Reason reason) {
  switch (reason) {
    case Reason::kNone: return "";
    case Reason::kMalformed: return "MG-OMS-BUNDLE";
    case Reason::kMediaType: return "MG-OMS-MEDIA-TYPE";
    case Reason::kResourcePath: return "MG-OMS-RESOURCE-PATH";
    case Reason::kDuplicate: return "MG-OMS-DUPLICATE-RESOURCE";
    case Reason::kShardTiling: return "MG-OMS-SHARD-TILING";
    case Reason::kRootDigest: return "MG-OMS-ROOT-DIGEST";
    case Reason::kLimit: return "MG-OMS-LIMIT";
    case Reason::kBadSignature: return "MG-OMS-BAD-SIGNATURE";
    case Reason::kUntrusted: return "MG-OMS-UNTRUSTED";
    case Reason::kFileChanged: return "MG-OMS-FILE-CHANGED";
    case Reason::kFileMissing: return "MG-OMS-FILE-MISSING";
    case Reason::kFileUnsigned: return "MG-OMS-FILE-UNSIGNED";
  }
  return "";
}

bool PathLess(std::string_view a, std::string_view b) {
  // Component by component; a path that is a prefix of the other (fewer
  // components) sorts first.
  size_t i = 0, j = 0;
  while (true) {
    const bool a_done = i > a.size(), b_done = j > b.size();
    if (a_done || b_done) return a_done && !b_done;
    size_t ea = a.find('/', i), eb = b.find('/', j);
    if (ea == std::string_view::npos) ea = a.size();
    if (eb == std::string_view::npos) eb = b.size();
    const std::string_view ca = a.substr(i, ea - i), cb = b.substr(j, eb - j);
    if (ca != cb) return ca < cb;
    i = ea + 1;
    j = eb + 1;
  }
}

bool ResourceLess(const Resource& a, const Resource& b) {
  if (a.path != b.path) return PathLess(a.path, b.path);
  if (a.begin != b.begin) return a.begin < b.begin;
  return a.end < b.end;
}

core::Sha256Digest RootDigest(std::span<const Resource> resources) {
  core::Sha256Hasher h;
  for (const Resource& r : resources) h.Update(r.digest);
  return h.Final();
}

core::Result<Bundle> ParseBundle(std::string_view text, const BundleLimits& limits, Reason* reason) {
  Bundle b;
  try {
    if (auto f = ParseBundleImpl(text, limits, &b)) {
      if (reason) *reason = f->reason;
      return f->error;
    }
  } catch (const std::exception& e) {
    if (reason) *reason = Reason::kMalformed;
    return Error{Code::kSigBadRecord, core::kNoOffset, std::string("bundle cannot be read: ") + e.what()};
  }
  if (reason) *reason = Reason::kNone;
  return b;
}

std::vector<uint8_t> PreAuthEncoding(std::string_view payload_type, std::string_view payload) {
  std::string head = "DSSEv1 " + std::to_string(payload_type.size()) + " " + std::string(payload_type) + " " +
                     std::to_string(payload.size()) + " ";
  std::vector<uint8_t> out(head.begin(), head.end());
  out.insert(out.end(), payload.begin(), payload.end());
  return out;
}

std::string KeyHint(const PublicKey& key) {
  const std::string pem = PublicKeyPem(key);
  return core::HexLower(core::Sha256({reinterpret_cast<const uint8_t*>(pem.data()), pem.size()}));
}

BundleVerdict VerifyBundle(const Bundle& bundle, std::span<const PublicKey> trusted) {
  BundleVerdict v;
  if (bundle.signatures.empty()) {
    v.status = SigStatus::kInvalid;
    v.why = Reason::kMalformed;
    v.reason = Error{Code::kSigBadRecord, core::kNoOffset, "the bundle has no DSSE signature"};
    return v;
  }
  const std::vector<uint8_t> pae = PreAuthEncoding(bundle.payload_type, bundle.payload);
  bool hint_trusted = false;
  for (const PublicKey& k : trusted)
    hint_trusted = hint_trusted || (!bundle.hint.empty() && KeyHint(k) == bundle.hint);
  std::vector<size_t> failed;
  for (size_t i = 0; i < bundle.signatures.size(); ++i) {
    const PublicKey* by = nullptr;
    for (const PublicKey& k : trusted) {
      if (VerifySignature(k, pae, bundle.signatures[i].sig)) {
        by = &k;
        break;
      }
    }
    if (by == nullptr) {
      failed.push_back(i);
      continue;
    }
    v.kids.push_back(by->kid_hex());
    v.key_names.push_back(by->name);
  }
  if (failed.empty()) {
    v.status = SigStatus::kValid;
    return v;
  }
  const size_t n = bundle.signatures.size();
  if (failed.size() == n && !hint_trusted) {
    v.status = SigStatus::kUntrusted;
    v.why = Reason::kUntrusted;
    v.reason = Error{Code::kSigUntrusted, core::kNoOffset,
                     (n == 1 ? std::string("the bundle's signature does not verify")
                             : "none of the bundle's " + std::to_string(n) + " signatures verifies") +
                         " under a trusted key" +
                         (bundle.hint.empty() ? std::string() : " (key hint " + bundle.hint + ")")};
  } else {
    v.status = SigStatus::kInvalid;
    v.why = Reason::kBadSignature;
    v.reason = Error{Code::kSigBadSignature, core::kNoOffset,
                     "DSSE signature " + std::to_string(failed.front()) + " of " + std::to_string(n) +
                         " does not verify under any trusted key" +
                         (failed.size() < n ? std::string(" (every signature must verify)")
                                            : std::string(" (the key hint names a trusted key)"))};
  }
  v.kids.clear();
  v.key_names.clear();
  return v;
}

std::vector<core::ByteRange> RangesFor(const Manifest& m, uint64_t size) {
  std::vector<core::ByteRange> out;
  if (m.method == Method::kFiles) {
    out.push_back({0, size});
    return out;
  }
  if (m.shard_size == 0) return out;
  for (uint64_t start = 0; start < size;) {
    const uint64_t len = std::min(m.shard_size, size - start);
    out.push_back({start, len});
    start += len;
  }
  return out;
}

std::string_view FileStateName(FileState state) {
  switch (state) {
    case FileState::kSigned: return "signed";
    case FileState::kChanged: return "changed";
    case FileState::kAdded: return "added";
    case FileState::kIgnored: return "ignored";
  }
  return "";
}

bool IsIgnored(const Manifest& m, std::string_view rel_path) {
  return std::any_of(m.ignore_paths.begin(), m.ignore_paths.end(),
                     [&](const std::string& ip) { return UnderPath(rel_path, ip); });
}

namespace {

// Listed is the manifest's resources for `rel_path` (canonical order keeps
// them adjacent, by offset).
std::span<const Resource> Listed(const Manifest& m, std::string_view rel_path) {
  auto lo = std::lower_bound(m.resources.begin(), m.resources.end(), rel_path,
                             [](const Resource& r, std::string_view p) { return PathLess(r.path, p); });
  auto hi = lo;
  while (hi != m.resources.end() && hi->path == rel_path) ++hi;
  return {lo, hi};
}

}  // namespace

std::vector<core::ByteRange> RangesToHash(const Manifest& m, std::string_view rel_path, uint64_t size) {
  if (m.method == Method::kShards) {
    const std::span<const Resource> listed = Listed(m, rel_path);
    if (listed.empty() || listed.back().end != size) return {};
  }
  return RangesFor(m, size);
}

FileState Compare(const Manifest& m, std::string_view rel_path,
                  std::span<const core::Sha256Digest> digests_of_ranges, uint64_t size) {
  if (IsIgnored(m, rel_path)) return FileState::kIgnored;
  const std::span<const Resource> listed = Listed(m, rel_path);
  auto lo = listed.begin();
  auto hi = listed.end();
  if (lo == hi) return FileState::kAdded;
  if (m.method == Method::kShards && listed.back().end != size) return FileState::kChanged;
  const std::vector<core::ByteRange> want = RangesFor(m, size);
  if (static_cast<size_t>(hi - lo) != want.size() || digests_of_ranges.size() != want.size()) {
    return FileState::kChanged;
  }
  for (size_t k = 0; k < want.size(); ++k) {
    const Resource& r = lo[static_cast<std::ptrdiff_t>(k)];
    if (m.method == Method::kShards && (r.begin != want[k].offset || r.end - r.begin != want[k].size_bytes)) {
      return FileState::kChanged;
    }
    if (r.digest != digests_of_ranges[k]) return FileState::kChanged;
  }
  return FileState::kSigned;
}

std::vector<std::string> Missing(const Manifest& m, std::span<const std::string> present) {
  std::set<std::string_view> have(present.begin(), present.end());
  std::vector<std::string> out;
  for (size_t i = 0; i < m.resources.size(); ++i) {
    if (i > 0 && m.resources[i].path == m.resources[i - 1].path) continue;
    if (!have.count(m.resources[i].path)) out.push_back(m.resources[i].path);
  }
  return out;
}

core::Result<std::string> BundleText(const Manifest& m, const PrivateKey& key) {
  std::string p = "{\"_type\":";
  internal::AppendJsonString(p, kStatementType);
  p += ",\"predicate\":{\"resources\":[";
  const std::string alg =
      m.method == Method::kFiles ? "sha256" : "sha256-sharded-" + std::to_string(m.shard_size);
  for (size_t i = 0; i < m.resources.size(); ++i) {
    if (i) p += ',';
    p += "{\"algorithm\":";
    internal::AppendJsonString(p, alg);
    p += ",\"digest\":\"" + core::HexLower(m.resources[i].digest) + "\",\"name\":";
    AppendResourceName(p, m, m.resources[i]);
    p += '}';
  }
  p += "],\"serialization\":{\"allow_symlinks\":";
  p += m.allow_symlinks ? "true" : "false";
  p += ",\"hash_type\":\"sha256\",\"ignore_paths\":[";
  for (size_t i = 0; i < m.ignore_paths.size(); ++i) {
    if (i) p += ',';
    internal::AppendJsonString(p, m.ignore_paths[i]);
  }
  p += "],\"method\":";
  p += m.method == Method::kFiles ? "\"files\"" : "\"shards\"";
  if (m.method == Method::kShards) p += ",\"shard_size\":" + std::to_string(m.shard_size);
  p += "}},\"predicateType\":";
  internal::AppendJsonString(p, kPredicateType);
  p += ",\"subject\":[{";
  if (m.version) p += "\"annotations\":{\"modelgate.version\":\"" + std::to_string(*m.version) + "\"},";
  p += "\"digest\":{\"sha256\":\"" + core::HexLower(RootDigest(m.resources)) + "\"},\"name\":";
  internal::AppendJsonString(p, m.subject_name);
  p += "}]}";

  const std::vector<uint8_t> pae = PreAuthEncoding(kPayloadType, p);
  auto sig = key.SignBytes(pae);
  if (!sig.ok()) return sig.error();
  // Checked before the bundle exists (a token key's public object may not be
  // its private key's): a bundle that would not verify is never written.
  if (!VerifySignature(key.public_key(), pae, sig.value())) {
    return Error{Code::kSigCrypto, core::kNoOffset,
                 "the signature just made does not verify under the key's public key " +
                     key.public_key().kid_hex() + "; nothing was written"};
  }
  std::string out = "{\"mediaType\": ";
  internal::AppendJsonString(out, kBundleMediaType);
  out += ", \"verificationMaterial\": {\"publicKey\": {\"hint\": \"" + KeyHint(key.public_key()) +
         "\"}}, \"dsseEnvelope\": {\"payload\": \"" +
         internal::Base64({reinterpret_cast<const uint8_t*>(p.data()), p.size()}) + "\", \"payloadType\": ";
  internal::AppendJsonString(out, kPayloadType);
  out += ", \"signatures\": [{\"sig\": \"" + internal::Base64(sig.value()) + "\"}]}}";
  return out;
}

core::Result<DetachedSignResult> SignDetached(const std::string& root, const PrivateKey& key,
                                              const std::string& out_path,
                                              const DetachedSignOptions& options) {
  WalkSpec spec;
  spec.for_signing = true;
  spec.max_files = options.max_files;
  for (std::string_view d : kDefaultIgnores) spec.ignore.emplace_back(d);
  for (std::string ig : options.ignore) {
    if (!ig.empty() && ig.front() == '/') {
      std::string rel = RelInside(root, ig);
      if (rel.empty()) {
        return Error{Code::kSigOptions, core::kNoOffset,
                     "--ignore " + core::Quoted(ig) + " is not inside the model"};
      }
      ig = rel;
    }
    while (ig.size() > 2 && ig.compare(0, 2, "./") == 0) ig.erase(0, 2);
    while (ig.size() > 1 && ig.back() == '/') ig.pop_back();
    if (std::string why = PathProblem(ig); !why.empty()) {
      return Error{Code::kSigOptions, core::kNoOffset, "--ignore " + core::Quoted(ig) + " " + why};
    }
    spec.ignore.push_back(ig);
  }
  const std::string bundle_rel = RelInside(root, out_path);
  if (!bundle_rel.empty()) spec.ignore.push_back(bundle_rel);

  auto walk = WalkModel(root, spec);
  if (!walk.ok()) return walk.error();
  Manifest m;
  m.method = Method::kFiles;
  m.subject_name = options.model.empty() ? ModelName(root) : options.model;
  m.version = options.version;
  std::set<std::string> ignores(spec.ignore.begin(), spec.ignore.end());
  m.ignore_paths.assign(ignores.begin(), ignores.end());
  if (walk.value().single_file) m.ignore_paths.assign(kDefaultIgnores.begin(), kDefaultIgnores.end());

  size_t regular = 0;
  for (const WalkEntry& e : walk.value().entries) regular += e.ignored ? 0 : 1;
  if (regular == 0) {
    return Error{Code::kSigOptions, core::kNoOffset,
                 core::Quoted(root) + " has no file to sign (empty, or only ignored paths)"};
  }
  auto hashed = HashEntries(walk.value(), root, m, options.hash);
  if (!hashed.ok()) return hashed.error();
  DetachedSignResult result;
  for (const HashedFile& h : hashed.value()) {
    m.resources.push_back({h.rel, 0, 0, h.whole});
    result.bytes += h.size;
  }
  std::sort(m.resources.begin(), m.resources.end(), ResourceLess);
  m.root_digest = RootDigest(m.resources);
  result.files = m.resources.size();
  auto text = BundleText(m, key);
  if (!text.ok()) return text.error();
  auto out = core::AtomicOutput::Create(out_path, 0644);
  if (!out.ok()) return out.error();
  const std::string& t = text.value();
  if (auto s = out.value().Write({reinterpret_cast<const uint8_t*>(t.data()), t.size()}); !s.ok())
    return s.error();
  if (auto s = out.value().Commit(); !s.ok()) return s.error();
  result.manifest = std::move(m);
  result.bundle_text = std::move(text).value();
  return result;
}

bool DetachedVerifyResult::ok() const {
  if (bundle.status != SigStatus::kValid || !missing.empty()) return false;
  for (const DetachedFile& f : files) {
    if (f.state == FileState::kChanged) return false;
    if (f.state == FileState::kAdded && !allow_unsigned_files) return false;
  }
  return true;
}

std::vector<core::Error> DetachedVerifyResult::Problems(std::vector<Reason>* reasons) const {
  std::vector<core::Error> out;
  auto add = [&](Error e, Reason r) {
    out.push_back(std::move(e));
    if (reasons) reasons->push_back(r);
  };
  if (bundle.status != SigStatus::kValid) {
    add(bundle.reason, bundle.why);
    return out;
  }
  for (const DetachedFile& f : files) {
    if (f.state == FileState::kChanged) {
      add(Error{Code::kSigTensorMismatch, core::kNoOffset,
                "file " + core::Quoted(f.path) + " changed since it was signed (sha256 now " +
                    core::HexLower(f.sha256) + ")"},
          Reason::kFileChanged);
    } else if (f.state == FileState::kAdded && !allow_unsigned_files) {
      add(Error{Code::kSigDigestMap, core::kNoOffset,
                "file " + core::Quoted(f.path) +
                    " is not in the signed manifest (added; --allow-unsigned-files accepts it)"},
          Reason::kFileUnsigned);
    }
  }
  for (const std::string& p : missing) {
    add(Error{Code::kSigDigestMap, core::kNoOffset, "signed file " + core::Quoted(p) + " is missing"},
        Reason::kFileMissing);
  }
  return out;
}

std::string RelInside(const std::string& root, const std::string& path) {
  char buf[PATH_MAX];
  if (::realpath(root.c_str(), buf) == nullptr) return "";
  std::string root_real = buf;
  std::string dir = ".", base = path;
  if (size_t slash = path.rfind('/'); slash != std::string::npos) {
    dir = slash == 0 ? "/" : path.substr(0, slash);
    base = path.substr(slash + 1);
  }
  if (base.empty() || base == "." || base == "..") return "";
  if (::realpath(dir.c_str(), buf) == nullptr) return "";
  std::string dir_real = buf;
  if (dir_real == root_real) return base;
  if (root_real == "/") return dir_real.substr(1) + "/" + base;
  if (dir_real.size() > root_real.size() && dir_real.compare(0, root_real.size(), root_real) == 0 &&
      dir_real[root_real.size()] == '/') {
    return dir_real.substr(root_real.size() + 1) + "/" + base;
  }
  return "";
}

core::Result<LoadedBundle> LoadBundle(const std::string& path, std::span<const PublicKey> trusted,
                                      const BundleLimits& limits) {
  LoadedBundle out;
  auto bf = core::OpenRegularFile(path, /*follow_symlink=*/false);
  if (!bf.ok()) return bf.error();
  if (bf.value().size > limits.max_bundle_bytes) {
    out.verdict.status = SigStatus::kInvalid;
    out.verdict.why = Reason::kLimit;
    out.verdict.reason =
        Error{Code::kSigBadRecord, core::kNoOffset,
              "bundle is " + std::to_string(bf.value().size) + " bytes, over the limit of " +
                  std::to_string(limits.max_bundle_bytes)};
    return out;
  }
  std::string text(static_cast<size_t>(bf.value().size), '\0');
  if (auto s = core::PreadExact(bf.value().fd, 0, {reinterpret_cast<uint8_t*>(text.data()), text.size()});
      !s.ok()) {
    return s.error();
  }
  if (auto s = core::CheckUnchanged(bf.value()); !s.ok()) return s.error();
  out.sha256 = core::Sha256({reinterpret_cast<const uint8_t*>(text.data()), text.size()});
  Reason why = Reason::kNone;
  auto parsed = ParseBundle(text, limits, &why);
  if (!parsed.ok()) {
    out.verdict.status = SigStatus::kInvalid;
    out.verdict.why = why == Reason::kNone ? Reason::kMalformed : why;
    out.verdict.reason = parsed.error();
    return out;
  }
  out.verdict = VerifyBundle(parsed.value(), trusted);
  out.bundle = std::move(parsed).value();
  return out;
}

core::Result<DetachedVerifyResult> VerifyDetached(const std::string& root, const std::string& bundle_path,
                                                  std::span<const PublicKey> trusted,
                                                  const DetachedVerifyOptions& options) {
  DetachedVerifyResult result;
  result.allow_unsigned_files = options.allow_unsigned_files;
  auto loaded = LoadBundle(bundle_path, trusted, options.limits);
  if (!loaded.ok()) return WalkError(loaded.error().code, bundle_path, loaded.error().message);
  result.bundle = loaded.value().verdict;
  if (!loaded.value().bundle) return result;
  const Bundle& b = *loaded.value().bundle;
  result.manifest = b.manifest;
  if (result.bundle.status != SigStatus::kValid) return result;

  const Manifest& m = b.manifest;
  WalkSpec spec;
  spec.max_files = options.max_files;
  spec.ignore = m.ignore_paths;
  if (std::string rel = RelInside(root, bundle_path); !rel.empty()) spec.exclude.push_back(rel);
  auto walk = WalkModel(root, spec);
  if (!walk.ok()) return walk.error();
  auto hashed = HashEntries(walk.value(), root, m, options.hash);
  if (!hashed.ok()) return hashed.error();
  std::vector<std::string> present;
  size_t h = 0;
  for (const WalkEntry& e : walk.value().entries) {
    DetachedFile f;
    f.path = e.rel;
    if (e.ignored) {
      f.state = FileState::kIgnored;
      f.size = e.size;
    } else {
      const HashedFile& hf = hashed.value()[h++];
      f.size = hf.size;
      f.sha256 = hf.whole;
      f.state = Compare(m, e.rel, hf.range_digests, hf.size);
      present.push_back(e.rel);
    }
    result.files.push_back(std::move(f));
  }
  result.missing = Missing(m, present);
  return result;
}

}  // namespace modelgate::signer::oms
