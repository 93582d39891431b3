// fuzz_policy: the strict policy parser (yaml-cpp's event parser plus the
// schema checks) on arbitrary text, then evaluation and lint of whatever
// parsed, and the key files and YARA rule directories a policy names.
// Policies are operator input, but they travel through pull requests and
// config maps, so they are parsed as untrusted.
//
// Input: the policy text, then optionally a NUL and the bytes of key.pem,
// then optionally a NUL and the bytes of rules/fuzz.yar. Both files live in
// one scratch directory (the policy's base dir, made once per process) and
// are rewritten, or removed when their part is absent, on every run; the
// directory rules/ always exists. So `file: key.pem` and `yara: {rules:
// [rules]}` read fuzz-chosen bytes.
//
// Invariants: never crashes; an error is kIoRead, names the source, and its
// offset lies inside the input; a parsed policy only tightens the default
// limits, has a threshold >= 1, and yields a verdict for any scan; a key
// read from key.pem is the key ParsePublicKeyPem reads from those bytes;
// every YARA rule dir is a directory; when they are all inside the scratch
// directory, ScanOptionsFor compiles them, or fails with kIoOpen/kIoRead,
// and compiles rules/fuzz.yar exactly when CompileSources compiles its text.
// Inputs naming "/dev" are skipped: a key path is opened (O_NONBLOCK, then
// refused unless a regular file), and opening some devices does something.
#include <stdlib.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <string_view>

#include "modelgate/policy.h"
#include "yara_rules.h"

namespace {

void Check(bool ok) {
  if (!ok) __builtin_trap();
}

// Scratch is the policy's base directory, removed at exit.
struct Scratch {
  std::string dir, key, rules, rule_file;
  Scratch() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "mg-fuzz-policy-XXXXXX").string();
    Check(mkdtemp(tmpl.data()) != nullptr);
    dir = std::filesystem::path(tmpl).lexically_normal().string();  // as the parser joins
    key = dir + "/key.pem";
    rules = dir + "/rules";
    rule_file = rules + "/fuzz.yar";
    std::filesystem::create_directory(rules);
  }
  ~Scratch() {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
};

const Scratch& TheScratch() {
  static const Scratch scratch;
  return scratch;
}

// Put makes `path` hold `bytes`, or removes it when there are none.
void Put(const std::string& path, std::optional<std::string_view> bytes) {
  if (!bytes) {
    std::error_code ec;
    std::filesystem::remove(path, ec);
    return;
  }
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes->data(), static_cast<std::streamsize>(bytes->size()));
  Check(out.good());
}

// TakePart removes and returns `rest` up to its first NUL (all of it when
// there is none; nullopt when `rest` is already used up).
std::optional<std::string_view> TakePart(std::optional<std::string_view>& rest) {
  if (!rest) return std::nullopt;
  std::string_view all = *rest;
  size_t nul = all.find('\0');
  if (nul == std::string_view::npos) {
    rest.reset();
    return all;
  }
  rest = all.substr(nul + 1);
  return all.substr(0, nul);
}

void CheckRuleDirs(const modelgate::policy::Policy& p, std::optional<std::string_view> rule_text) {
  using namespace modelgate;
  const Scratch& s = TheScratch();
  bool inside = !p.yara_rule_dirs.empty();
  for (const auto& d : p.yara_rule_dirs) {
    std::error_code ec;
    Check(std::filesystem::is_directory(d, ec));
    inside &= d.rfind(s.dir + "/", 0) == 0 || d == s.dir;
  }
  // Outside the scratch dir a rule directory could be anything (/usr): not
  // compiled here.
  if (!inside) return;
  auto o = policy::ScanOptionsFor(p);
  if (!o.ok()) {
    const core::Error& e = o.error();
    Check(e.code == core::Code::kIoOpen || e.code == core::Code::kIoRead);
    Check(e.offset == core::kNoOffset && !e.message.empty());
  } else {
    Check(o.value().yara != nullptr);
  }
  // Only rules/ listed, and it holds nothing but fuzz.yar: compiling the dir
  // and compiling the text must agree.
  bool only_rules = p.yara_rule_dirs.size() == 1 && p.yara_rule_dirs[0] == s.rules;
  if (only_rules && rule_text && rule_text->find('\0') == std::string_view::npos) {
    auto alone = scanner::YaraRules::CompileSources({{s.rule_file, std::string(*rule_text)}});
    Check(alone.ok() == o.ok());
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace modelgate;
  std::optional<std::string_view> rest(std::in_place, reinterpret_cast<const char*>(data), size);
  std::string_view text = *TakePart(rest);
  if (std::string_view(reinterpret_cast<const char*>(data), size).find("/dev") !=
      std::string_view::npos) {
    return 0;
  }
  std::optional<std::string_view> key_bytes = TakePart(rest);
  std::optional<std::string_view> rule_text = TakePart(rest);
  const Scratch& scratch = TheScratch();
  Put(scratch.key, key_bytes);
  Put(scratch.rule_file, rule_text);

  auto r = policy::ParsePolicy(text, "fuzz.yaml", scratch.dir);
  if (!r.ok()) {
    const core::Error& e = r.error();
    Check(e.code == core::Code::kIoRead);
    Check(e.offset == core::kNoOffset || e.offset <= text.size());
    Check(e.message.rfind("fuzz.yaml", 0) == 0);
    return 0;
  }
  const policy::Policy& p = r.value();
  const core::Limits d;
  Check(p.limits.max_header_bytes <= d.max_header_bytes && p.limits.max_rank <= d.max_rank &&
        p.limits.max_tensors <= d.max_tensors && p.limits.max_json_depth <= d.max_json_depth &&
        p.limits.max_name_bytes <= d.max_name_bytes &&
        p.limits.max_metadata_entries <= d.max_metadata_entries);
  Check(p.threshold >= 1);
  Check(!p.signatures_required || (!p.keys.empty() && p.threshold <= p.keys.size()));
  for (const auto& k : p.keys) {
    if (k.file != scratch.key) continue;
    Check(key_bytes.has_value());
    auto direct = signer::ParsePublicKeyPem(*key_bytes);
    Check(direct.ok() && direct.value().raw == k.key.raw && direct.value().kid == k.key.kid);
  }
  CheckRuleDirs(p, rule_text);

  scanner::FileScan scan;
  scan.path = "m";
  scan.format = scanner::Format::kPickle;
  scan.findings.push_back(
      scanner::MakeFinding("MG-PK-UNKNOWN-IMPORT", core::Severity::kHigh, "x", 0));
  core::Sha256Digest sha{};
  if (!p.exceptions.empty()) sha = p.exceptions[0].sha256;
  auto v = policy::Evaluate(p, scan, std::nullopt, sha, policy::Date{2026, 11, 29});
  Check(v.findings.size() >= scan.findings.size());
  bool blocking = false;
  for (const auto& j : v.findings) {
    blocking |= j.blocking;
    Check(!(j.waived && j.blocking));
  }
  Check(blocking == (v.decision == policy::Decision::kReject));
  (void)policy::LintParsed(p, policy::Date{2026, 11, 29});
  (void)policy::TrustedKeys(p);
  return 0;
}
