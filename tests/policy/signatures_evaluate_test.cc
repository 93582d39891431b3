// signatures.accept / model / minVersion and detached evidence under
// Evaluate's rule 4 (issue 11, point 5), and the waiver a finding carries.
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

// Policy requires signatures by `keys` test keys (key1..keyN) with `rest`
// inside the signatures mapping.
policy::Policy Required(std::string_view rest, int keys = 1) {
  std::string yaml = std::string(kHead) + "signatures:\n  required: true\n" + std::string(rest) +
                     "  keys:\n";
  for (int i = 1; i <= keys; ++i) {
    yaml += "    - name: key" + std::to_string(i) + "\n      publicKey: |\n" +
            IndentedPem(static_cast<uint8_t>(i), "        ");
  }
  auto r = policy::ParsePolicy(yaml, "p.yaml", "");
  INFO((r.ok() ? "" : r.error().message));
  REQUIRE(r.ok());
  return r.value();
}

scanner::FileScan Scan(scanner::Format format = scanner::Format::kSafetensors) {
  scanner::FileScan s;
  s.path = "m";
  s.format = format;
  return s;
}

std::string Kid(uint8_t seed) { return TestKey(seed).public_key().kid_hex(); }

// Embedded is a valid verification with one verified record per (key seed,
// model, version).
struct Rec {
  uint8_t seed;
  std::string model;
  uint64_t version;
};
signer::VerifyResult Embedded(std::vector<Rec> recs) {
  signer::VerifyResult v;
  v.status = signer::SigStatus::kValid;
  for (const auto& r : recs) {
    signer::RecordCheck rc;
    rc.outcome = signer::RecordCheck::Outcome::kVerified;
    rc.record.kid = TestKey(r.seed).public_key().kid;
    rc.record.model = r.model;
    rc.record.version = r.version;
    v.records.push_back(rc);
    v.verified_kids.push_back(Kid(r.seed));
  }
  return v;
}

signer::VerifyResult Status(signer::SigStatus s) {
  signer::VerifyResult v;
  v.status = s;
  return v;
}

policy::DetachedEvidence Bundle(policy::DetachedState state, std::vector<uint8_t> seeds = {1},
                                std::string model = "acme/llm",
                                std::optional<uint64_t> version = 3) {
  policy::DetachedEvidence d;
  d.bundle_status = signer::SigStatus::kValid;
  d.state = state;
  d.model = std::move(model);
  d.version = version;
  for (uint8_t s : seeds) {
    d.kids.push_back(Kid(s));
    d.key_names.push_back("key" + std::to_string(s));
  }
  return d;
}

policy::DetachedEvidence BundleStatus(signer::SigStatus s, std::string reason = "") {
  policy::DetachedEvidence d;
  d.bundle_status = s;
  d.reason = std::move(reason);
  return d;
}

policy::Verdict Eval(const policy::Policy& p, const scanner::FileScan& s,
                     const std::optional<signer::VerifyResult>& v,
                     const std::optional<policy::DetachedEvidence>& d = std::nullopt) {
  return policy::Evaluate(p, s, v, std::nullopt, kToday, d);
}

std::string SignatureMessage(const policy::Verdict& v) {
  std::string out;
  for (const auto& j : v.findings) {
    if (j.finding.id == policy::kFindingSignature) {
      CHECK(j.blocking);
      out += (out.empty() ? "" : " | ") + j.finding.message;
    }
  }
  return out;
}

const auto kSigned = policy::DetachedState::kSigned;
const auto kChanged = policy::DetachedState::kChanged;
const auto kAdded = policy::DetachedState::kAdded;
const auto kIgnored = policy::DetachedState::kIgnored;

}  // namespace

TEST_CASE("a detached bundle alone satisfies a default policy: a config file passes",
          "[policy][evaluate][detached]") {
  auto p = Required("");
  auto v = Eval(p, Scan(scanner::Format::kUnknown), std::nullopt, Bundle(kSigned));
  CHECK(v.decision == policy::Decision::kPass);
  CHECK(v.signature_status == "valid");
  CHECK(v.signature_kind == "detached");
  CHECK(v.signed_by == std::vector<std::string>{"key1"});
  CHECK(v.signed_kids == std::vector<std::string>{Kid(1)});
  CHECK(v.signed_model == "acme/llm");
  CHECK(v.signed_version == 3u);
  CHECK(SignatureMessage(v).empty());
}

TEST_CASE("a file the bundle does not cover is named missing, with why for each kind",
          "[policy][evaluate][detached]") {
  auto p = Required("");
  auto config = Eval(p, Scan(scanner::Format::kUnknown), std::nullopt, Bundle(kAdded));
  CHECK(config.decision == policy::Decision::kReject);
  CHECK(config.signature_status == "missing");
  CHECK(config.signature_kind.empty());
  CHECK(SignatureMessage(config) ==
        "missing: the policy requires 1 trusted signature; the file is not in the detached "
        "bundle; embedded: an unknown file carries no embedded signature");
  auto st = Eval(p, Scan(), Status(signer::SigStatus::kMissing),
                 BundleStatus(signer::SigStatus::kMissing));
  CHECK(SignatureMessage(st) ==
        "missing: the policy requires 1 trusted signature; no detached bundle covers it; "
        "embedded: the file is not signed");
}

TEST_CASE("a file changed since the bundle signed it always blocks", "[policy][evaluate][detached]") {
  const std::string changed = "invalid: the file changed since the detached bundle signed it";
  // Even with a valid embedded signature that alone would satisfy it.
  auto v = Eval(Required(""), Scan(), Embedded({{1, "acme/llm", 3}}), Bundle(kChanged));
  CHECK(v.decision == policy::Decision::kReject);
  CHECK(v.signature_status == "invalid");
  CHECK(v.signature_kind == "detached");
  CHECK(SignatureMessage(v) == changed);
  // Even when signatures are not required, or the policy accepts only embedded.
  auto not_required = policy::ParsePolicy(std::string(kHead), "p.yaml", "").value();
  CHECK(SignatureMessage(Eval(not_required, Scan(), std::nullopt, Bundle(kChanged))) == changed);
  CHECK(Eval(not_required, Scan(), std::nullopt, Bundle(kChanged)).decision ==
        policy::Decision::kReject);
  CHECK(Eval(Required("  accept: [embedded]\n"), Scan(), Embedded({{1, "", 0}}), Bundle(kChanged))
            .decision == policy::Decision::kReject);
}

TEST_CASE("an invalid bundle always blocks, an untrusted one does not satisfy",
          "[policy][evaluate][detached]") {
  auto not_required = policy::ParsePolicy(std::string(kHead), "p.yaml", "").value();
  auto bad = Eval(not_required, Scan(scanner::Format::kUnknown), std::nullopt,
                  BundleStatus(signer::SigStatus::kInvalid, "signature 1: bad DSSE signature"));
  CHECK(bad.decision == policy::Decision::kReject);
  CHECK(bad.signature_status == "invalid");
  CHECK(SignatureMessage(bad) ==
        "invalid: the detached bundle is invalid: signature 1: bad DSSE signature");

  auto untrusted = Eval(Required("  accept: [detached]\n"), Scan(scanner::Format::kUnknown),
                        std::nullopt, BundleStatus(signer::SigStatus::kUntrusted));
  CHECK(untrusted.decision == policy::Decision::kReject);
  CHECK(untrusted.signature_status == "untrusted");
  CHECK(untrusted.signature_kind == "detached");
  CHECK(SignatureMessage(untrusted) ==
        "untrusted: the policy requires 1 trusted signature; the detached bundle is signed by no "
        "key the policy trusts");
  // A valid bundle whose signatures are by keys the policy does not list.
  auto other = Eval(Required(""), Scan(scanner::Format::kUnknown), std::nullopt,
                    Bundle(kSigned, {7}));
  CHECK(other.decision == policy::Decision::kReject);
  CHECK(other.signature_status == "untrusted");
}

TEST_CASE("files the bundle ignores need no signature", "[policy][evaluate][detached]") {
  auto v = Eval(Required(""), Scan(scanner::Format::kUnknown), std::nullopt, Bundle(kIgnored));
  CHECK(v.decision == policy::Decision::kPass);
  CHECK(v.signature_status == "not-checked");
  CHECK(v.signature_kind.empty());
  // But an invalid embedded signature on an ignored file still blocks.
  signer::VerifyResult bad = Status(signer::SigStatus::kInvalid);
  bad.reason.message = "record 0: bad signature";
  CHECK(Eval(Required(""), Scan(), bad, Bundle(kIgnored)).decision == policy::Decision::kReject);
  // Only a valid bundle's ignore list counts.
  auto untrusted = BundleStatus(signer::SigStatus::kUntrusted);
  untrusted.state = kIgnored;
  CHECK(Eval(Required(""), Scan(scanner::Format::kUnknown), std::nullopt, untrusted).decision ==
        policy::Decision::kReject);
}

TEST_CASE("signatures.accept: only the kinds listed satisfy", "[policy][evaluate][accept]") {
  auto detached_only = Required("  accept: [detached]\n");
  auto emb = Eval(detached_only, Scan(), Embedded({{1, "", 0}}));
  CHECK(emb.decision == policy::Decision::kReject);
  CHECK(emb.signature_status == "untrusted");
  CHECK(emb.signature_kind == "embedded");
  CHECK(SignatureMessage(emb) ==
        "untrusted: the policy requires 1 trusted signature; no detached bundle covers it; "
        "embedded signatures are not accepted (signatures.accept)");
  CHECK(Eval(detached_only, Scan(), Embedded({{1, "", 0}}), Bundle(kSigned)).decision ==
        policy::Decision::kPass);
  // The one accepted kind is named even when no bundle was looked for.
  CHECK(SignatureMessage(Eval(detached_only, Scan(scanner::Format::kUnknown), std::nullopt)) ==
        "missing: the policy requires 1 trusted signature; no detached bundle covers it");

  auto embedded_only = Required("  accept: [embedded]\n");
  auto det = Eval(embedded_only, Scan(scanner::Format::kUnknown), std::nullopt, Bundle(kSigned));
  CHECK(det.decision == policy::Decision::kReject);
  CHECK(SignatureMessage(det) ==
        "untrusted: the policy requires 1 trusted signature; embedded: an unknown file carries "
        "no embedded signature; detached signatures are not accepted (signatures.accept)");
  auto both = Eval(embedded_only, Scan(), Embedded({{1, "", 0}}), Bundle(kSigned));
  CHECK(both.decision == policy::Decision::kPass);
  CHECK(both.signature_kind == "embedded");

  // Both accepted and both present: the first kind listed is the one reported.
  auto order = Eval(Required("  accept: [embedded, detached]\n"), Scan(),
                    Embedded({{1, "acme/llm", 5}}), Bundle(kSigned));
  CHECK(order.signature_kind == "embedded");
  CHECK(order.signed_version == 5u);
  CHECK(Eval(Required(""), Scan(), Embedded({{1, "acme/llm", 5}}), Bundle(kSigned)).signature_kind ==
        "detached");
}

TEST_CASE("signatures.model: the signed identity must match", "[policy][evaluate][model]") {
  auto p = Required("  model: acme/llm\n");
  auto ok = Eval(p, Scan(), Embedded({{1, "acme/llm", 0}}));
  CHECK(ok.decision == policy::Decision::kPass);
  CHECK(ok.signed_model == "acme/llm");
  CHECK_FALSE(ok.signed_version);  // STSIG version 0: none given

  auto other = Eval(p, Scan(), Embedded({{1, "acme/other", 0}}));
  CHECK(other.decision == policy::Decision::kReject);
  CHECK(other.signature_status == "untrusted");
  CHECK(other.signature_kind == "embedded");
  CHECK(other.signed_model.empty());
  CHECK(SignatureMessage(other) ==
        "untrusted: the policy requires 1 trusted signature; a trusted key signed for model "
        "\"acme/other\", the policy requires \"acme/llm\"");
  CHECK(SignatureMessage(Eval(p, Scan(), Embedded({{1, "", 0}}))) ==
        "untrusted: the policy requires 1 trusted signature; a trusted key signed with no "
        "model, the policy requires \"acme/llm\"");
  // Exact bytes: no case folding, no prefix match.
  CHECK(Eval(p, Scan(), Embedded({{1, "Acme/llm", 0}})).decision == policy::Decision::kReject);
  CHECK(Eval(p, Scan(), Embedded({{1, "acme/llm2", 0}})).decision == policy::Decision::kReject);

  // Detached: the bundle's subject name.
  CHECK(Eval(p, Scan(scanner::Format::kUnknown), std::nullopt, Bundle(kSigned, {1}, "acme/llm"))
            .decision == policy::Decision::kPass);
  auto bundle = Eval(p, Scan(scanner::Format::kUnknown), std::nullopt,
                     Bundle(kSigned, {1}, "another-model"));
  CHECK(bundle.decision == policy::Decision::kReject);
  CHECK(SignatureMessage(bundle) ==
        "untrusted: the policy requires 1 trusted signature; a trusted key signed for model "
        "\"another-model\", the policy requires \"acme/llm\"; embedded: an unknown file carries "
        "no embedded signature");
}

TEST_CASE("signatures.minVersion: rollback to an older signed release is refused",
          "[policy][evaluate][version]") {
  auto p = Required("  model: acme/llm\n  minVersion: 3\n");
  CHECK(Eval(p, Scan(), Embedded({{1, "acme/llm", 3}})).decision == policy::Decision::kPass);
  CHECK(Eval(p, Scan(), Embedded({{1, "acme/llm", 4}})).signed_version == 4u);
  auto old = Eval(p, Scan(), Embedded({{1, "acme/llm", 2}}));
  CHECK(old.decision == policy::Decision::kReject);
  CHECK(SignatureMessage(old) ==
        "untrusted: the policy requires 1 trusted signature; a trusted key signed version 2, "
        "below minVersion 3 (an older release)");
  CHECK(SignatureMessage(Eval(p, Scan(), Embedded({{1, "acme/llm", 0}}))) ==
        "untrusted: the policy requires 1 trusted signature; a trusted key signed with no "
        "version; the policy requires minVersion 3");

  auto file = Scan(scanner::Format::kUnknown);
  CHECK(Eval(p, file, std::nullopt, Bundle(kSigned, {1}, "acme/llm", 3)).decision ==
        policy::Decision::kPass);
  CHECK(Eval(p, file, std::nullopt, Bundle(kSigned, {1}, "acme/llm", 2)).decision ==
        policy::Decision::kReject);
  CHECK(Eval(p, file, std::nullopt, Bundle(kSigned, {1}, "acme/llm", std::nullopt)).decision ==
        policy::Decision::kReject);
  CHECK(Eval(p, file, std::nullopt, Bundle(kSigned, {1}, "acme/llm", UINT64_MAX)).decision ==
        policy::Decision::kPass);
}

TEST_CASE("threshold with model and version: each counted key's own record must match",
          "[policy][evaluate][threshold]") {
  auto p = Required("  threshold: 2\n  model: acme/llm\n  minVersion: 3\n", 2);
  CHECK(Eval(p, Scan(), Embedded({{1, "acme/llm", 3}, {2, "acme/llm", 4}})).decision ==
        policy::Decision::kPass);
  // key2 signed an old release: one key left, below the threshold.
  auto one = Eval(p, Scan(), Embedded({{1, "acme/llm", 3}, {2, "acme/llm", 2}}));
  CHECK(one.decision == policy::Decision::kReject);
  CHECK(SignatureMessage(one) ==
        "untrusted: the policy requires 2 trusted signatures; 1 of 2 distinct trusted keys signed");
  // One key with two records, one old, one current: it counts once.
  CHECK(Eval(p, Scan(), Embedded({{1, "acme/llm", 2}, {1, "acme/llm", 3}})).decision ==
        policy::Decision::kReject);
  auto again = Eval(Required("  model: acme/llm\n  minVersion: 3\n"), Scan(),
                    Embedded({{1, "acme/llm", 2}, {1, "acme/llm", 3}}));
  CHECK(again.decision == policy::Decision::kPass);
  CHECK(again.signed_version == 3u);
  // Detached: the bundle's kids, distinct policy keys.
  auto file = Scan(scanner::Format::kUnknown);
  CHECK(Eval(p, file, std::nullopt, Bundle(kSigned, {1, 2})).decision == policy::Decision::kPass);
  CHECK(Eval(p, file, std::nullopt, Bundle(kSigned, {1, 1})).decision == policy::Decision::kReject);
  CHECK(Eval(p, file, std::nullopt, Bundle(kSigned, {1, 7})).decision == policy::Decision::kReject);
  // Kinds are not added together: one embedded key and one detached key are
  // not two signatures of one kind.
  CHECK(Eval(p, Scan(), Embedded({{1, "acme/llm", 3}}), Bundle(kSigned, {2})).decision ==
        policy::Decision::kReject);
}

TEST_CASE("not required: signatures are reported, never required", "[policy][evaluate][detached]") {
  auto p = policy::ParsePolicy(std::string(kHead), "p.yaml", "").value();
  auto v = Eval(p, Scan(scanner::Format::kUnknown), std::nullopt, Bundle(kAdded));
  CHECK(v.decision == policy::Decision::kPass);
  CHECK(v.signature_status == "not-checked");
  auto signed_file = Eval(p, Scan(scanner::Format::kUnknown), std::nullopt, Bundle(kSigned));
  CHECK(signed_file.decision == policy::Decision::kPass);
  CHECK(signed_file.signature_status == "untrusted");  // no policy key: nothing is trusted
}

TEST_CASE("a waived finding carries its waiver", "[policy][evaluate][exceptions]") {
  core::Sha256Digest sha{};
  sha.fill(0xab);
  auto r = policy::ParsePolicy(
      std::string(kHead) + "exceptions:\n  - {id: MG-ST-TRAILING-BYTES, sha256: \"" +
          std::string(64, 'a') + "b\"}\n",
      "p.yaml", "");
  REQUIRE_FALSE(r.ok());  // (65 hex digits)
  auto p = policy::ParsePolicy(std::string(kHead) +
                                   "exceptions:\n  - {id: MG-ST-TRAILING-BYTES, sha256: \"" +
                                   core::HexLower(sha) +
                                   "\", reason: reviewed, expires: 2027-01-31}\n",
                               "p.yaml", "")
               .value();
  auto s = Scan();
  s.findings.push_back(scanner::MakeFinding("MG-ST-TRAILING-BYTES", core::Severity::kHigh,
                                            "trailing bytes", 10));
  s.findings.push_back(scanner::MakeFinding("MG-ST-OTHER", core::Severity::kLow, "other"));
  auto v = policy::Evaluate(p, s, std::nullopt, sha, kToday);
  CHECK(v.decision == policy::Decision::kPass);
  auto reported = v.ReportedFindings();
  REQUIRE(reported.size() == 2);
  REQUIRE(reported[0].waived);
  CHECK(reported[0].waived->reason == "reviewed");
  CHECK(reported[0].waived->expires == "2027-01-31");
  CHECK(reported[0].waived->severity == core::Severity::kHigh);
  CHECK(reported[0].severity == core::Severity::kInfo);
  CHECK_FALSE(reported[1].waived);
  // Expired: nothing is waived.
  auto late = policy::Evaluate(p, s, std::nullopt, sha, policy::Date{2027, 2, 1});
  CHECK(late.decision == policy::Decision::kReject);
  CHECK_FALSE(late.ReportedFindings()[0].waived);
}
