// Evaluation rules on synthetic scans and verification results.
#include <catch2/catch.hpp>

#include "policy_test_util.h"

namespace core = modelgate::core;
namespace policy = modelgate::policy;
namespace scanner = modelgate::scanner;
namespace signer = modelgate::signer;
using modelgate::testing::IndentedPem;
using modelgate::testing::kHead;
using modelgate::testing::TestKey;

namespace {

constexpr policy::Date kToday{2026, 11, 29};

policy::Policy Parse(const std::string& rest) {
  auto r = policy::ParsePolicy(std::string(kHead) + rest, "p.yaml", "");
  INFO((r.ok() ? "" : r.error().message));
  REQUIRE(r.ok());
  return r.value();
}

std::string Keys(int count) {
  std::string out = "  keys:\n";
  for (int i = 1; i <= count; ++i) {
    out += "    - name: key" + std::to_string(i) + "\n      publicKey: |\n" +
           IndentedPem(static_cast<uint8_t>(i), "        ");
  }
  return out;
}

scanner::FileScan Scan(scanner::Format format, std::vector<scanner::Finding> findings = {}) {
  scanner::FileScan s;
  s.path = "m";
  s.format = format;
  s.findings = std::move(findings);
  return s;
}

scanner::FileScan PickleScan(bool unknown_import) {
  std::vector<scanner::Finding> f = {scanner::MakeFinding(
      "MG-PK-PICKLE-FORMAT", core::Severity::kMedium, "pickle format; prefer safetensors", 0)};
  if (unknown_import) {
    f.push_back(scanner::MakeFinding("MG-PK-UNKNOWN-IMPORT", core::Severity::kHigh,
                                     "unknown import", 2));
  }
  return Scan(scanner::Format::kPickle, std::move(f));
}

signer::VerifyResult Verified(std::vector<uint8_t> key_seeds) {
  signer::VerifyResult v;
  v.status = signer::SigStatus::kValid;
  for (uint8_t k : key_seeds) v.verified_kids.push_back(TestKey(k).public_key().kid_hex());
  return v;
}

signer::VerifyResult WithStatus(signer::SigStatus s, std::string reason = "") {
  signer::VerifyResult v;
  v.status = s;
  v.reason.message = std::move(reason);
  return v;
}

const policy::JudgedFinding* Find(const policy::Verdict& v, std::string_view id) {
  for (const auto& j : v.findings) {
    if (j.finding.id == id) return &j;
  }
  return nullptr;
}

policy::Verdict Eval(const policy::Policy& p, const scanner::FileScan& s,
                     const std::optional<signer::VerifyResult>& v = std::nullopt,
                     const std::optional<core::Sha256Digest>& sha = std::nullopt,
                     policy::Date today = kToday) {
  return policy::Evaluate(p, s, v, sha, today);
}

}  // namespace

TEST_CASE("formats.allow", "[policy][evaluate]") {
  auto p = Parse("formats: {allow: [safetensors, numpy]}\n");
  CHECK(Eval(p, Scan(scanner::Format::kSafetensors)).decision == policy::Decision::kPass);
  CHECK(Eval(p, Scan(scanner::Format::kNumpy)).decision == policy::Decision::kPass);
  auto v = Eval(p, Scan(scanner::Format::kGguf));
  CHECK(v.decision == policy::Decision::kReject);
  auto* f = Find(v, "MG-POLICY-FORMAT");
  REQUIRE(f);
  CHECK(f->blocking);
  CHECK(f->finding.severity == core::Severity::kHigh);
  CHECK(f->finding.message == "format gguf is not allowed by the policy (allowed: safetensors, numpy)");
  // No formats key: everything is allowed.
  CHECK(Eval(Parse(""), Scan(scanner::Format::kGguf)).decision == policy::Decision::kPass);
  // An empty list allows nothing.
  CHECK(Eval(Parse("formats: {allow: []}\n"), Scan(scanner::Format::kSafetensors)).decision ==
        policy::Decision::kReject);
  // Format findings block whatever failOn says.
  CHECK(Eval(Parse("failOn: critical\nformats: {allow: [safetensors]}\n"),
             Scan(scanner::Format::kPickle))
            .decision == policy::Decision::kReject);
}

TEST_CASE("formats.allow holds for every loader's reading", "[policy][evaluate]") {
  // A safetensors file that torch.load reads as a tar (a polyglot) is not
  // "safetensors only", whatever format the report leads with.
  auto p = Parse("failOn: critical\nformats: {allow: [safetensors]}\n");
  scanner::FileScan s = Scan(scanner::Format::kSafetensors);
  s.views.push_back(scanner::View{"safetensors", "", 0, scanner::Format::kSafetensors});
  CHECK(Eval(p, s).decision == policy::Decision::kPass);
  s.views.push_back(scanner::View{"torch.load", "", 0, scanner::Format::kTar});
  auto v = Eval(p, s);
  CHECK(v.decision == policy::Decision::kReject);
  auto* f = Find(v, "MG-POLICY-FORMAT");
  REQUIRE(f);
  CHECK(f->finding.message ==
        "format tar (as torch.load reads it) is not allowed by the policy (allowed: safetensors)");
}

TEST_CASE("pickle modes", "[policy][evaluate][pickle]") {
  SECTION("allowlist: the scanner's severities and failOn decide") {
    auto p = Parse("pickle: {mode: allowlist}\n");
    CHECK(Eval(p, PickleScan(false)).decision == policy::Decision::kPass);
    auto v = Eval(p, PickleScan(true));
    CHECK(v.decision == policy::Decision::kReject);
    CHECK(Find(v, "MG-PK-UNKNOWN-IMPORT")->blocking);
    CHECK_FALSE(Find(v, "MG-POLICY-PICKLE"));
  }
  SECTION("report: pickle findings are reported, never block") {
    auto p = Parse("pickle: {mode: report}\nfailOn: info\n");
    auto v = Eval(p, PickleScan(true));
    CHECK(v.decision == policy::Decision::kPass);
    REQUIRE(Find(v, "MG-PK-UNKNOWN-IMPORT"));
    CHECK(Find(v, "MG-PK-UNKNOWN-IMPORT")->finding.severity == core::Severity::kHigh);
    CHECK_FALSE(Find(v, "MG-PK-UNKNOWN-IMPORT")->blocking);
    // Other findings still count, and an unparseable file is still rejected.
    auto s = PickleScan(false);
    s.findings.push_back(scanner::MakeFinding("MG-YARA-MATCH", core::Severity::kLow, "rule"));
    CHECK(Eval(p, s).decision == policy::Decision::kReject);
    auto broken = PickleScan(false);
    broken.unparseable = true;
    CHECK(Eval(p, broken).decision == policy::Decision::kReject);
  }
  SECTION("reject: any pickle content is critical") {
    auto p = Parse("pickle: {mode: reject}\n");
    auto v = Eval(p, PickleScan(false));
    CHECK(v.decision == policy::Decision::kReject);
    auto* f = Find(v, "MG-POLICY-PICKLE");
    REQUIRE(f);
    CHECK(f->finding.severity == core::Severity::kCritical);
    CHECK(f->finding.offset == 0);
    CHECK(f->blocking);
    // A pickle inside an archive, and a pickle-bearing format without findings.
    auto zip = Scan(scanner::Format::kZip, {scanner::MakeFinding("MG-PK-PICKLE-FORMAT",
                                                                 core::Severity::kMedium, "p", 30,
                                                                 "a.zip!x.pkl")});
    auto z = Eval(p, zip);
    REQUIRE(Find(z, "MG-POLICY-PICKLE"));
    CHECK(Find(z, "MG-POLICY-PICKLE")->finding.member == "a.zip!x.pkl");
    CHECK(Eval(p, Scan(scanner::Format::kPytorchZip)).decision == policy::Decision::kReject);
    CHECK(Eval(p, Scan(scanner::Format::kSafetensors)).decision == policy::Decision::kPass);
  }
}

TEST_CASE("signatures: required, threshold 1", "[policy][evaluate][signatures]") {
  auto p = Parse("signatures:\n  required: true\n" + Keys(1));
  auto st = Scan(scanner::Format::kSafetensors);
  auto ok = Eval(p, st, Verified({1}));
  CHECK(ok.decision == policy::Decision::kPass);
  CHECK(ok.signature_status == "valid");
  CHECK(ok.signed_by == std::vector<std::string>{"key1"});

  auto missing = Eval(p, st, WithStatus(signer::SigStatus::kMissing));
  CHECK(missing.decision == policy::Decision::kReject);
  REQUIRE(Find(missing, "MG-POLICY-SIGNATURE"));
  CHECK(Find(missing, "MG-POLICY-SIGNATURE")->finding.message ==
        "missing: the policy requires 1 trusted signature; the file is not signed");
  CHECK(missing.signature_status == "missing");

  auto untrusted = Eval(p, st, WithStatus(signer::SigStatus::kUntrusted));
  CHECK(untrusted.decision == policy::Decision::kReject);
  CHECK(Find(untrusted, "MG-POLICY-SIGNATURE")->finding.message.starts_with("untrusted: "));
  CHECK(untrusted.signature_status == "untrusted");

  auto invalid = Eval(p, st, WithStatus(signer::SigStatus::kInvalid, "record 0: bad signature"));
  CHECK(invalid.decision == policy::Decision::kReject);
  CHECK(Find(invalid, "MG-POLICY-SIGNATURE")->finding.message == "invalid: record 0: bad signature");
  CHECK(invalid.signature_status == "invalid");

  // A valid signature by a key the policy does not list does not count.
  auto other = Eval(p, st, Verified({7}));
  CHECK(other.decision == policy::Decision::kReject);
  CHECK(other.signature_status == "untrusted");

  // Not verified at all (not safetensors): missing.
  auto none = Eval(p, Scan(scanner::Format::kGguf));
  CHECK(none.decision == policy::Decision::kReject);
  CHECK(Find(none, "MG-POLICY-SIGNATURE")->finding.message ==
        "missing: the policy requires 1 trusted signature; a gguf file carries no embedded "
        "signature");
  // Signature findings block whatever failOn says.
  CHECK(Eval(Parse("failOn: critical\nsignatures:\n  required: true\n" + Keys(1)), st,
             WithStatus(signer::SigStatus::kMissing))
            .decision == policy::Decision::kReject);
}

TEST_CASE("signatures: threshold 2 needs two distinct trusted keys", "[policy][evaluate][signatures]") {
  auto p = Parse("signatures:\n  required: true\n  threshold: 2\n" + Keys(2));
  auto st = Scan(scanner::Format::kSafetensors);
  auto one = Eval(p, st, Verified({1}));
  CHECK(one.decision == policy::Decision::kReject);
  CHECK(Find(one, "MG-POLICY-SIGNATURE")->finding.message ==
        "untrusted: the policy requires 2 trusted signatures; 1 of 2 distinct trusted keys "
        "signed");
  CHECK(Eval(p, st, Verified({1, 1})).decision == policy::Decision::kReject);
  CHECK(Eval(p, st, Verified({1, 7})).decision == policy::Decision::kReject);
  auto two = Eval(p, st, Verified({2, 1}));
  CHECK(two.decision == policy::Decision::kPass);
  CHECK(two.signed_by == std::vector<std::string>{"key2", "key1"});
}

TEST_CASE("signatures not required", "[policy][evaluate][signatures]") {
  auto p = Parse("signatures:\n  required: false\n" + Keys(1));
  auto st = Scan(scanner::Format::kSafetensors);
  CHECK(Eval(p, st).signature_status == "not-checked");
  CHECK(Eval(p, st, WithStatus(signer::SigStatus::kMissing)).decision == policy::Decision::kPass);
  CHECK(Eval(p, st, WithStatus(signer::SigStatus::kUntrusted)).decision == policy::Decision::kPass);
  // A failed signature never downgrades to "unsigned is fine".
  CHECK(Eval(p, st, WithStatus(signer::SigStatus::kInvalid, "x")).decision ==
        policy::Decision::kReject);
}

TEST_CASE("exceptions: sha256 match, expiry", "[policy][evaluate][exceptions]") {
  core::Sha256Digest sha{};
  sha.fill(0xab);
  core::Sha256Digest other{};
  other.fill(0xcd);
  auto make = [&](const char* expires) {
    return Parse("exceptions:\n  - id: MG-PK-UNKNOWN-IMPORT\n    sha256: \"" +
                 core::HexLower(sha) + "\"\n    reason: reviewed, ticket 42\n    expires: " +
                 expires + "\n");
  };
  auto scan = PickleScan(true);

  SECTION("valid and matching: waived, now info") {
    auto v = Eval(make("2026-12-31"), scan, std::nullopt, sha);
    CHECK(v.decision == policy::Decision::kPass);
    auto* f = Find(v, "MG-PK-UNKNOWN-IMPORT");
    REQUIRE(f);
    CHECK(f->waived);
    CHECK_FALSE(f->blocking);
    CHECK(f->finding.severity == core::Severity::kInfo);
    CHECK(f->original_severity == core::Severity::kHigh);
    CHECK(f->finding.message ==
          "waived until 2026-12-31 (reviewed, ticket 42); was high: unknown import");
    CHECK(v.ReportedFindings().size() == 2);
  }
  SECTION("the expiry day itself still applies") {
    CHECK(Eval(make("2026-11-29"), scan, std::nullopt, sha).decision == policy::Decision::kPass);
  }
  SECTION("sha256 mismatch or not computed: not applied") {
    CHECK(Eval(make("2026-12-31"), scan, std::nullopt, other).decision ==
          policy::Decision::kReject);
    CHECK(Eval(make("2026-12-31"), scan).decision == policy::Decision::kReject);
  }
  SECTION("another id is not waived") {
    auto s = Scan(scanner::Format::kPickle,
                  {scanner::MakeFinding("MG-PK-CRITICAL-IMPORT", core::Severity::kCritical, "os")});
    CHECK(Eval(make("2026-12-31"), s, std::nullopt, sha).decision == policy::Decision::kReject);
  }
  SECTION("expired: no longer applies and says so") {
    auto v = Eval(make("2026-11-28"), scan, std::nullopt, sha);
    CHECK(v.decision == policy::Decision::kReject);
    CHECK(Find(v, "MG-PK-UNKNOWN-IMPORT")->blocking);
    CHECK_FALSE(Find(v, "MG-PK-UNKNOWN-IMPORT")->waived);
    auto* e = Find(v, "MG-POLICY-EXCEPTION-EXPIRED");
    REQUIRE(e);
    CHECK(e->finding.severity == core::Severity::kInfo);
    CHECK_FALSE(e->blocking);
    CHECK(e->finding.message ==
          "exception for MG-PK-UNKNOWN-IMPORT expired on 2026-11-28 and no longer applies "
          "(reviewed, ticket 42)");
    // An expired exception for another file says nothing.
    CHECK_FALSE(Find(Eval(make("2026-11-28"), scan, std::nullopt, other),
                     "MG-POLICY-EXCEPTION-EXPIRED"));
  }
  SECTION("policy findings can be waived for one file") {
    auto fp = Parse("formats: {allow: [safetensors]}\nexceptions:\n  - id: MG-POLICY-FORMAT\n"
                    "    sha256: \"" + core::HexLower(sha) + "\"\n    reason: legacy\n"
                    "    expires: 2027-01-01\n");
    CHECK(Eval(fp, Scan(scanner::Format::kGguf), std::nullopt, sha).decision ==
          policy::Decision::kPass);
    CHECK(Eval(fp, Scan(scanner::Format::kGguf), std::nullopt, other).decision ==
          policy::Decision::kReject);
  }
}

TEST_CASE("failOn moves the bar for scanner findings", "[policy][evaluate]") {
  auto s = Scan(scanner::Format::kSafetensors,
                {scanner::MakeFinding("MG-YARA-MATCH", core::Severity::kMedium, "m")});
  CHECK(Eval(Parse(""), s).decision == policy::Decision::kPass);  // default high
  CHECK(Eval(Parse("failOn: high\n"), s).decision == policy::Decision::kPass);
  CHECK(Eval(Parse("failOn: medium\n"), s).decision == policy::Decision::kReject);
  CHECK(Eval(Parse("failOn: low\n"), s).decision == policy::Decision::kReject);
  auto h = Scan(scanner::Format::kSafetensors,
                {scanner::MakeFinding("MG-ST-GAP", core::Severity::kHigh, "gap")});
  CHECK(Eval(Parse("failOn: critical\n"), h).decision == policy::Decision::kPass);
  CHECK(Eval(Parse("failOn: high\n"), h).decision == policy::Decision::kReject);
}

TEST_CASE("unreadable and unparseable files", "[policy][evaluate]") {
  auto s = Scan(scanner::Format::kSafetensors);
  s.io_error = true;
  CHECK(Eval(Parse(""), s).decision == policy::Decision::kError);
  auto u = Scan(scanner::Format::kSafetensors);
  u.unparseable = true;
  CHECK(Eval(Parse("failOn: critical\n"), u).decision == policy::Decision::kReject);
  CHECK(policy::DecisionName(policy::Decision::kReject) == "reject");
}
