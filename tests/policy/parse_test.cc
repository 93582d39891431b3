// Strict policy parsing: every rule with its exact line:column.
#include <catch2/catch.hpp>

#include "policy_test_util.h"

namespace core = modelgate::core;
namespace policy = modelgate::policy;
namespace scanner = modelgate::scanner;
namespace signer = modelgate::signer;
using modelgate::testing::IndentedPem;
using modelgate::testing::kHead;
using modelgate::testing::ParseError;
using modelgate::testing::TempDir;
using modelgate::testing::TestKey;
using modelgate::testing::WriteFile;

namespace {
std::string H(std::string_view rest) { return std::string(kHead) + std::string(rest); }
}  // namespace

TEST_CASE("a full policy parses into its values", "[policy][parse]") {
  TempDir dir;
  std::filesystem::create_directory(dir / "rules");
  WriteFile(dir / "k2.pub", signer::PublicKeyPem(TestKey(2).public_key()));
  std::string yaml = H(
      "failOn: medium\n"
      "formats: {allow: [safetensors, gguf]}\n"
      "pickle: {mode: reject, extraAllowedGlobals: [\"mylib.models.Net\", \"collections:OrderedDict\"]}\n"
      "signatures:\n"
      "  required: true\n"
      "  threshold: 2\n"
      "  keys:\n"
      "    - name: release-2026\n"
      "      publicKey: |\n" + IndentedPem(1, "        ") +
      "    - {name: backup, file: k2.pub}\n"
      "limits: {maxHeaderBytes: 16777216, maxRank: 8, maxMemberBytes: 1024, maxPickleOpcodes: 5}\n"
      "yara: {rules: [rules/], scope: all}\n"
      "exceptions:\n"
      "  - id: MG-PK-UNKNOWN-IMPORT\n"
      "    sha256: \"" + std::string(64, 'a') + "\"\n"
      "    reason: reviewed by security\n"
      "    expires: 2027-01-31\n");
  auto r = policy::ParsePolicy(yaml, "p.yaml", dir.path());
  INFO((r.ok() ? "" : r.error().message));
  REQUIRE(r.ok());
  const policy::Policy& p = r.value();
  CHECK(p.fail_on == core::Severity::kMedium);
  REQUIRE(p.allowed_formats);
  CHECK(*p.allowed_formats ==
        std::vector<scanner::Format>{scanner::Format::kSafetensors, scanner::Format::kGguf});
  CHECK(p.pickle_mode == policy::PickleMode::kReject);
  using G = std::pair<std::string, std::string>;
  CHECK(p.extra_allowed_globals == std::vector<G>{{"mylib.models", "Net"}, {"collections", "OrderedDict"}});
  CHECK(p.signatures_required);
  CHECK(p.threshold == 2);
  REQUIRE(p.keys.size() == 2);
  CHECK(p.keys[0].name == "release-2026");
  CHECK(p.keys[0].key.raw == TestKey(1).public_key().raw);
  CHECK(p.keys[0].where.line == 10);
  CHECK(p.keys[1].name == "backup");
  CHECK(p.keys[1].file == dir / "k2.pub");
  CHECK(p.keys[1].key.kid == TestKey(2).public_key().kid);
  auto trusted = policy::TrustedKeys(p);
  REQUIRE(trusted.size() == 2);
  CHECK(trusted[1].name == "backup");
  CHECK(p.limits.max_header_bytes == 16777216);
  CHECK(p.limits.max_rank == 8);
  CHECK(p.limits.max_tensors == core::Limits{}.max_tensors);
  CHECK(p.container_limits.max_member_bytes == 1024);
  CHECK(p.pickle_limits.max_opcodes == 5);
  CHECK(p.yara_rule_dirs == std::vector<std::string>{dir / "rules/"});
  CHECK(p.yara_scope == scanner::YaraScope::kAll);
  REQUIRE(p.exceptions.size() == 1);
  CHECK(p.exceptions[0].id == "MG-PK-UNKNOWN-IMPORT");
  CHECK(p.exceptions[0].sha256[0] == 0xaa);
  CHECK(p.exceptions[0].reason == "reviewed by security");
  CHECK(p.exceptions[0].expires == policy::Date{2027, 1, 31});
  CHECK(policy::NeedsFileSha256(p));
}

TEST_CASE("the minimal policy has the defaults of a plain scan", "[policy][parse]") {
  auto r = policy::ParsePolicy(kHead, "p.yaml", "");
  REQUIRE(r.ok());
  CHECK(r.value().fail_on == core::Severity::kHigh);
  CHECK_FALSE(r.value().allowed_formats);
  CHECK(r.value().pickle_mode == policy::PickleMode::kAllowlist);
  CHECK_FALSE(r.value().signatures_required);
  CHECK(r.value().limits.max_rank == 64);
  CHECK_FALSE(policy::NeedsFileSha256(r.value()));
  // JSON-style YAML (quoted keys, flow mapping) is YAML too.
  CHECK(ParseError("{\"apiVersion\": \"modelgate/v1\", \"kind\": \"Policy\"}") == "OK");
}

TEST_CASE("duplicate keys at any depth", "[policy][parse][strict]") {
  CHECK(ParseError(H("kind: Policy\n")) ==
        "p.yaml:3:1: duplicate key \"kind\" (first at line 2, column 1)");
  CHECK(ParseError(H("formats: {allow: [safetensors], allow: []}\n")) ==
        "p.yaml:3:33: duplicate key \"allow\" (first at line 3, column 11)");
  CHECK(ParseError(H("signatures:\n  keys:\n    - name: a\n      name: b\n")) ==
        "p.yaml:6:7: duplicate key \"name\" (first at line 5, column 7)");
  // Quoting does not make a different key.
  CHECK(ParseError(H("pickle:\n  mode: report\n  \"mode\": reject\n")) ==
        "p.yaml:5:3: duplicate key \"mode\" (first at line 4, column 3)");
  CHECK(ParseError(H("limits:\n  maxRank: 8\n  maxRank: 9\n")) ==
        "p.yaml:5:3: duplicate key \"maxRank\" (first at line 4, column 3)");
}

TEST_CASE("anchors, aliases and tags", "[policy][parse][strict]") {
  CHECK(ParseError(H("failOn: &sev high\n")) ==
        "p.yaml:3:9: anchors (&name) are not allowed in a policy");
  CHECK(ParseError(H("formats: &f {allow: [safetensors]}\n")) ==
        "p.yaml:3:10: anchors (&name) are not allowed in a policy");
  CHECK(ParseError(H("failOn: *sev\n")) ==
        "p.yaml:3:9: aliases (*name) are not allowed in a policy");
  // An anchor is reported where it is, before the alias that uses it.
  CHECK(ParseError(H("failOn: &s high\nx: *s\n")) ==
        "p.yaml:3:9: anchors (&name) are not allowed in a policy");
  CHECK(ParseError(H("failOn: !!str high\n")) ==
        "p.yaml:3:9: tags (\"tag:yaml.org,2002:str\") are not allowed in a policy");
  CHECK(ParseError(H("exceptions:\n  - !!python/object:os.system {}\n")) ==
        "p.yaml:4:5: tags (\"tag:yaml.org,2002:python/object:os.system\") are not allowed in a "
        "policy");
  CHECK(ParseError(H("failOn: !custom high\n")) ==
        "p.yaml:3:9: tags (\"!custom\") are not allowed in a policy");
  CHECK(ParseError(H("failOn: ! high\n")) ==
        "p.yaml:3:9: tags (\"!\") are not allowed in a policy");
}

TEST_CASE("booleans are exactly true and false", "[policy][parse][strict]") {
  const std::string pre = "signatures:\n  required: ";
  for (const char* word : {"yes", "no", "on", "off", "y", "n", "True", "FALSE"}) {
    CAPTURE(word);
    CHECK(ParseError(H(pre + word + "\n")) ==
          "p.yaml:4:13: signatures.required: \"" + std::string(word) +
              "\" is a YAML 1.1 boolean that YAML 1.2 reads differently; write true or false");
  }
  CHECK(ParseError(H(pre + "\"true\"\n")) ==
        "p.yaml:4:13: signatures.required must be true or false, not the string \"true\" "
        "(remove the quotes)");
  CHECK(ParseError(H(pre + "1\n")) ==
        "p.yaml:4:13: signatures.required must be true or false, not the value \"1\"");
  CHECK(ParseError(H(pre + "\n")) ==
        "p.yaml:5:1: signatures.required must be true or false, not nothing (null)");
  CHECK(ParseError(H(pre + "false\n")) == "OK");
}

TEST_CASE("unknown keys at every level", "[policy][parse][strict]") {
  CHECK(ParseError(H("failon: high\n")).starts_with(
      "p.yaml:3:1: unknown key \"failon\" in the policy (allowed: apiVersion, kind, failOn,"));
  CHECK(ParseError(H("formats: {allow: [], deny: []}\n")) ==
        "p.yaml:3:22: unknown key \"deny\" in formats (allowed: allow)");
  CHECK(ParseError(H("pickle: {modes: reject}\n")) ==
        "p.yaml:3:10: unknown key \"modes\" in pickle (allowed: mode, extraAllowedGlobals)");
  CHECK(ParseError(H("signatures:\n  require: true\n")) ==
        "p.yaml:4:3: unknown key \"require\" in signatures (allowed: required, threshold, "
        "accept, model, minVersion, keys)");
  CHECK(ParseError(H("signatures:\n  keys:\n    - name: a\n      pem: x\n")) ==
        "p.yaml:6:7: unknown key \"pem\" in a signatures.keys entry (allowed: name, publicKey, "
        "file)");
  CHECK(ParseError(H("limits: {maxRanks: 3}\n")).starts_with(
      "p.yaml:3:10: unknown key \"maxRanks\" in limits (allowed: maxHeaderBytes,"));
  CHECK(ParseError(H("yara: {rule: []}\n")) ==
        "p.yaml:3:8: unknown key \"rule\" in yara (allowed: rules, scope)");
  CHECK(ParseError(H("exceptions:\n  - {id: MG-A-B, note: x}\n")) ==
        "p.yaml:4:18: unknown key \"note\" in an exceptions entry (allowed: id, sha256, reason, "
        "expires)");
  // Merge keys are just unknown keys here.
  CHECK(ParseError(H("<<: {failOn: high}\n")).starts_with("p.yaml:3:1: unknown key \"<<\""));
}

TEST_CASE("wrong types", "[policy][parse][strict]") {
  CHECK(ParseError(H("formats: [safetensors]\n")) ==
        "p.yaml:3:10: formats must be a mapping, not a list");
  CHECK(ParseError(H("formats: {allow: safetensors}\n")) ==
        "p.yaml:3:18: formats.allow must be a list, not the value \"safetensors\"");
  CHECK(ParseError(H("failOn: [high]\n")) == "p.yaml:3:9: failOn must be a string, not a list");
  CHECK(ParseError(H("failOn: severe\n")) ==
        "p.yaml:3:9: failOn must be one of critical, high, medium, low, info, not \"severe\"");
  CHECK(ParseError(H("signatures: {threshold: \"2\"}\n")) ==
        "p.yaml:3:25: signatures.threshold must be a non-negative integer, not the string \"2\"");
  CHECK(ParseError(H("signatures: {threshold: 1.5}\n")) ==
        "p.yaml:3:25: signatures.threshold must be a non-negative decimal integer (digits only, "
        "no sign, leading zeros or '_'), not \"1.5\"");
  CHECK(ParseError(H("signatures: {threshold: 0}\n")) ==
        "p.yaml:3:25: signatures.threshold must be at least 1");
  CHECK(ParseError(H("signatures:\n  keys:\n    - name: 2026\n")) ==
        "p.yaml:5:13: key name must be a string, but \"2026\" reads as a number in YAML; quote it");
  CHECK(ParseError(H("signatures:\n  keys:\n    - name: yes\n")) ==
        "p.yaml:5:13: key name must be a string, but \"yes\" reads as a boolean in YAML; quote it");
  CHECK(ParseError(H("pickle: {mode: off}\n")) ==
        "p.yaml:3:16: pickle.mode must be a string, but \"off\" reads as a boolean in YAML; "
        "quote it");
  CHECK(ParseError(H("pickle: {mode: block}\n")) ==
        "p.yaml:3:16: pickle.mode must be one of reject, allowlist, report, not \"block\"");
  CHECK(ParseError(H("yara: {scope: everything}\n")) ==
        "p.yaml:3:15: yara.scope must be header or all, not \"everything\"");
  CHECK(ParseError(H("formats: {allow: [pytorch]}\n")).starts_with(
      "p.yaml:3:19: unknown format \"pytorch\" (known: unknown, safetensors, pickle,"));
  CHECK(ParseError(H("formats: {allow: [gguf, gguf]}\n")) ==
        "p.yaml:3:25: format \"gguf\" is listed twice");
  CHECK(ParseError(H("? [a]\n: b\n")) == "p.yaml:3:3: a mapping key must be a string");
  CHECK(ParseError("- apiVersion\n") == "p.yaml:1:1: the policy must be a mapping, not a list");
}

TEST_CASE("apiVersion and kind are required and exact", "[policy][parse][strict]") {
  CHECK(ParseError("kind: Policy\n") ==
        "p.yaml:1:1: the policy has no apiVersion (write apiVersion: modelgate/v1)");
  CHECK(ParseError("apiVersion: modelgate/v1\n") ==
        "p.yaml:1:1: the policy has no kind (write kind: Policy)");
  CHECK(ParseError("apiVersion: modelgate/v2\nkind: Policy\n") ==
        "p.yaml:1:13: apiVersion must be modelgate/v1, not \"modelgate/v2\"");
  CHECK(ParseError("apiVersion: modelgate/v1\nkind: policy\n") ==
        "p.yaml:2:7: kind must be Policy, not \"policy\"");
}

TEST_CASE("limits may only tighten", "[policy][parse][limits]") {
  CHECK(ParseError(H("limits: {maxRank: 64}\n")) == "OK");
  CHECK(ParseError(H("limits: {maxRank: 65}\n")) ==
        "p.yaml:3:19: limits.maxRank: 65 is above the default 64; a policy may only tighten "
        "limits");
  CHECK(ParseError(H("limits:\n  maxHeaderBytes: 100000001\n")) ==
        "p.yaml:4:19: limits.maxHeaderBytes: 100000001 is above the default 100000000; a policy "
        "may only tighten limits");
  CHECK(ParseError(H("limits: {maxHeaderBytes: 100000000, maxNestingDepth: 0}\n")) == "OK");
  CHECK(ParseError(H("limits: {maxNestingDepth: 5}\n")) ==
        "p.yaml:3:27: limits.maxNestingDepth: 5 is above the default 4; a policy may only "
        "tighten limits");
  CHECK(ParseError(H("limits: {maxRank: 08}\n")).starts_with(
      "p.yaml:3:19: limits.maxRank must be a non-negative decimal integer"));
  CHECK(ParseError(H("limits: {maxRank: 1_0}\n")).starts_with(
      "p.yaml:3:19: limits.maxRank must be a non-negative decimal integer"));
  CHECK(ParseError(H("limits: {maxRank: -1}\n")).starts_with(
      "p.yaml:3:19: limits.maxRank must be a non-negative decimal integer"));
  CHECK(ParseError(H("limits: {maxTensors: 99999999999999999999999}\n")).starts_with(
      "p.yaml:3:22: limits.maxTensors must be a non-negative decimal integer"));
}

TEST_CASE("keys: PEM, files, names, threshold", "[policy][parse][keys]") {
  TempDir dir;
  WriteFile(dir / "good.pub", modelgate::signer::PublicKeyPem(TestKey(3).public_key()));
  WriteFile(dir / "bad.pub", "-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n");
  auto keys = [](std::string entries) { return H("signatures:\n  keys:\n" + entries); };

  std::string bad_pem = ParseError(keys("    - name: k\n      publicKey: |\n"
                                        "        -----BEGIN PUBLIC KEY-----\n"
                                        "        Zm9v\n"
                                        "        -----END PUBLIC KEY-----\n"));
  CHECK(bad_pem.starts_with(
      "p.yaml:6:18: key \"k\": publicKey is not a public key PEM (Ed25519, or ECDSA "
      "P-256/P-384/P-521): "));
  CHECK(ParseError(keys("    - name: k\n      publicKey: not a pem\n")).starts_with(
      "p.yaml:6:18: key \"k\": publicKey is not a public key PEM (Ed25519, or ECDSA "
      "P-256/P-384/P-521): "));
  CHECK(ParseError(keys("    - {name: k, file: good.pub}\n"), dir.path()) == "OK");
  CHECK(ParseError(keys("    - {name: k, file: missing.pub}\n"), dir.path())
            .starts_with("p.yaml:5:23: key \"k\": cannot use key file \"" + (dir / "missing.pub") +
                         "\": "));
  CHECK(ParseError(keys("    - {name: k, file: bad.pub}\n"), dir.path())
            .starts_with("p.yaml:5:23: key \"k\": cannot use key file \"" + (dir / "bad.pub") +
                         "\": "));
  CHECK(ParseError(keys("    - {name: k}\n")) ==
        "p.yaml:5:7: key \"k\" needs exactly one of publicKey (inline PEM) or file (a PEM file "
        "path)");
  CHECK(ParseError(keys("    - {file: good.pub}\n"), dir.path()) ==
        "p.yaml:5:7: a signatures.keys entry needs a name");
  CHECK(ParseError(keys("    - {name: a, file: good.pub}\n    - {name: a, file: good.pub}\n"),
                   dir.path()) == "p.yaml:6:14: key name \"a\" is used twice");
  CHECK(ParseError(keys("    - {name: a, file: good.pub}\n    - {name: b, file: good.pub}\n"),
                   dir.path())
            .starts_with("p.yaml:6:7: key \"b\" is the same key as \"a\" (kid "));
  CHECK(ParseError(H("signatures:\n  required: true\n  keys: []\n")) ==
        "p.yaml:4:13: signatures.required is true but signatures.keys lists no trusted key");
  CHECK(ParseError(H("signatures:\n  required: true\n  threshold: 2\n  keys:\n"
                     "    - {name: a, file: good.pub}\n"),
                   dir.path()) ==
        "p.yaml:5:14: signatures.threshold 2 is more than the 1 trusted key(s) listed; no file "
        "could pass");
}

TEST_CASE("documents: empty, several, syntax errors", "[policy][parse][strict]") {
  CHECK(ParseError("") == "p.yaml: empty policy (no YAML document)");
  CHECK(ParseError("# only a comment\n") == "p.yaml: empty policy (no YAML document)");
  CHECK(ParseError("---\n") == "p.yaml:2:1: empty policy (the document has no content)");
  CHECK(ParseError(H("---\n") + std::string(kHead)) ==
        "p.yaml:3:1: a policy is a single YAML document; found a second one");
  CHECK(ParseError(H("...\n---\nfoo: 1\n")) ==
        "p.yaml:4:1: a policy is a single YAML document; found a second one");
  CHECK(ParseError(H("formats: {allow: [safetensors}\n")).starts_with("p.yaml:3:"));
  CHECK(ParseError(H("failOn: high\n  x: y\n")) == "p.yaml:4:4: illegal map value");
  // An error at the end of the input stays inside it (found by fuzz_policy).
  auto eof = policy::ParsePolicy("{\"ej\\", "p.yaml", "");
  REQUIRE_FALSE(eof.ok());
  CHECK(eof.error().offset <= 5);
}

TEST_CASE("text: UTF-8 only, no control bytes, bounded nesting", "[policy][parse][strict]") {
  CHECK(ParseError(H(std::string("failOn: hi\0gh\n", 14))) ==
        "p.yaml:3:11: control character 0x00 in policy text");
  CHECK(ParseError(H("failOn: \xff\n")) == "p.yaml:3:9: invalid UTF-8 in policy text");
  CHECK(ParseError("\xef\xbb\xbf" + H("")) == "p.yaml:1:1: byte order mark in policy text");
  std::string deep = H("exceptions: ") + std::string(40, '[') + std::string(40, ']') + "\n";
  CHECK(ParseError(deep) == "p.yaml:3:44: nesting deeper than 32 levels");
}

TEST_CASE("pickle.extraAllowedGlobals", "[policy][parse]") {
  CHECK(ParseError(H("pickle: {extraAllowedGlobals: [os.system]}\n")).starts_with(
      "p.yaml:3:32: \"os.system\" is a code-execution global and can never be allowed"));
  CHECK(ParseError(H("pickle: {extraAllowedGlobals: [builtins:eval]}\n")).starts_with(
      "p.yaml:3:32: \"builtins.eval\" is a code-execution global"));
  CHECK(ParseError(H("pickle: {extraAllowedGlobals: [nodot]}\n")) ==
        "p.yaml:3:32: pickle.extraAllowedGlobals entry \"nodot\" is not \"module.qualname\" (or "
        "\"module:qual.name\")");
  CHECK(ParseError(H("pickle: {extraAllowedGlobals: [\"a b.c\"]}\n")).starts_with(
      "p.yaml:3:32: pickle.extraAllowedGlobals entry \"a b.c\" is not"));
  CHECK(ParseError(H("pickle: {extraAllowedGlobals: [a.B, a:B]}\n")) ==
        "p.yaml:3:37: \"a:B\" is listed twice");
}

TEST_CASE("exceptions are pinned and dated", "[policy][parse][exceptions]") {
  const std::string sha(64, 'a');
  auto ex = [&](std::string id, std::string hex, std::string reason, std::string expires) {
    return H("exceptions:\n  - id: " + id + "\n    sha256: " + hex + "\n    reason: " + reason +
             "\n    expires: " + expires + "\n");
  };
  CHECK(ParseError(ex("MG-ST-GAP", sha, "ok", "2027-01-31")) == "OK");
  CHECK(ParseError(ex("MG-ST-GAP", "\"" + sha + "\"", "\"ok\"", "\"2024-02-29\"")) == "OK");
  CHECK(ParseError(ex("mg-st-gap", sha, "ok", "2027-01-31")) ==
        "p.yaml:4:9: exception id \"mg-st-gap\" is not a finding id (MG-AREA-NAME)");
  CHECK(ParseError(ex("MG-", sha, "ok", "2027-01-31")).starts_with("p.yaml:4:9: exception id"));
  CHECK(ParseError(ex("MG-ST-GAP", std::string(64, 'A'), "ok", "2027-01-31")) ==
        "p.yaml:5:13: exception sha256 must be 64 lowercase hex digits (the SHA-256 of the whole "
        "file), not \"" + std::string(64, 'A') + "\"");
  CHECK(ParseError(ex("MG-ST-GAP", std::string(63, 'a'), "ok", "2027-01-31"))
            .starts_with("p.yaml:5:13: exception sha256 must be 64 lowercase hex"));
  CHECK(ParseError(ex("MG-ST-GAP", sha, "\"  \"", "2027-01-31")) ==
        "p.yaml:6:13: exception reason must not be empty");
  CHECK(ParseError(ex("MG-ST-GAP", sha, "ok", "2027-02-29")) ==
        "p.yaml:7:14: exception expires must be a date YYYY-MM-DD, not \"2027-02-29\"");
  CHECK(ParseError(ex("MG-ST-GAP", sha, "ok", "2027-1-31")) ==
        "p.yaml:7:14: exception expires must be a date YYYY-MM-DD, not \"2027-1-31\"");
  CHECK(ParseError(H("exceptions:\n  - {id: MG-ST-GAP, sha256: " + sha + ", reason: ok}\n")) ==
        "p.yaml:4:5: exception is missing \"expires\"");
  std::string one = "  - {id: MG-ST-GAP, sha256: " + sha + ", reason: ok, expires: 2027-01-31}\n";
  CHECK(ParseError(H("exceptions:\n" + one + one)) ==
        "p.yaml:5:5: a second exception for MG-ST-GAP and the same sha256 (first at line 4)");
}

TEST_CASE("yara rule directories resolve against the policy", "[policy][parse]") {
  TempDir dir;
  std::filesystem::create_directory(dir / "rules");
  CHECK(ParseError(H("yara: {rules: [rules]}\n"), dir.path()) == "OK");
  CHECK(ParseError(H("yara: {rules: [nope]}\n"), dir.path()) ==
        "p.yaml:3:16: yara.rules: \"" + (dir / "nope") + "\" is not a directory");
}

TEST_CASE("LoadPolicy reads a file and resolves paths from its directory", "[policy][load]") {
  TempDir dir;
  std::filesystem::create_directory(dir / "keys");
  WriteFile(dir / "keys/a.pub", modelgate::signer::PublicKeyPem(TestKey(4).public_key()));
  WriteFile(dir / "policy.yaml",
            H("signatures:\n  required: true\n  keys: [{name: a, file: keys/a.pub}]\n"));
  auto r = policy::LoadPolicy(dir / "policy.yaml");
  INFO((r.ok() ? "" : r.error().message));
  REQUIRE(r.ok());
  CHECK(r.value().source == dir / "policy.yaml");
  CHECK(r.value().keys.at(0).key.kid == TestKey(4).public_key().kid);

  auto missing = policy::LoadPolicy(dir / "none.yaml");
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.error().code == core::Code::kIoOpen);
  CHECK(missing.error().message.starts_with(dir / "none.yaml" + ": cannot open policy: "));
  CHECK_FALSE(policy::LoadPolicy(dir.path()).ok());

  WriteFile(dir / "bad.yaml", H("failOn: yes\n"));
  auto bad = policy::LoadPolicy(dir / "bad.yaml");
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.error().code == core::Code::kIoRead);
  CHECK(bad.error().offset == 46);  // byte offset of "yes"
  CHECK(bad.error().message ==
        dir / "bad.yaml" + ":3:9: failOn must be a string, but \"yes\" reads as a boolean in "
                           "YAML; quote it");

  WriteFile(dir / "big.yaml", H("# " + std::string(1 << 20, 'x') + "\n"));
  auto big = policy::LoadPolicy(dir / "big.yaml");
  REQUIRE_FALSE(big.ok());
  CHECK(big.error().message.ends_with("policy is larger than 1048576 bytes"));
}

TEST_CASE("dates", "[policy][date]") {
  CHECK(policy::ParseDate("2024-02-29") == policy::Date{2024, 2, 29});
  CHECK_FALSE(policy::ParseDate("2100-02-29"));
  CHECK(policy::ParseDate("2000-02-29"));
  CHECK_FALSE(policy::ParseDate("2027-13-01"));
  CHECK_FALSE(policy::ParseDate("2027-04-31"));
  CHECK_FALSE(policy::ParseDate("2027-00-10"));
  CHECK_FALSE(policy::ParseDate("2027-01-1x"));
  CHECK_FALSE(policy::ParseDate(" 2027-01-11"));
  CHECK(policy::FormatDate({2027, 1, 5}) == "2027-01-05");
  CHECK(policy::DaysBetween({2026, 12, 31}, {2027, 1, 31}) == 31);
  CHECK(policy::DaysBetween({2024, 2, 28}, {2024, 3, 1}) == 2);
  CHECK(policy::DaysBetween({2027, 1, 2}, {2027, 1, 1}) == -1);
}
