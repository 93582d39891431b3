// End to end: a policy that requires a trusted signature and allows only
// safetensors passes a signed file and rejects an unsigned one and a pickle,
// with real keys (signer::Keygen), SignFile, ScanFile and VerifyFile.
#include <catch2/catch.hpp>

#include "policy_test_util.h"
#include "support/st_builder.h"

namespace core = modelgate::core;
namespace policy = modelgate::policy;
namespace scanner = modelgate::scanner;
namespace signer = modelgate::signer;
using modelgate::testing::StBuilder;
using modelgate::testing::TempDir;
using modelgate::testing::WriteFile;

namespace {

struct Gate {
  policy::Policy policy;
  scanner::ScanOptions scan_options;
  std::vector<signer::PublicKey> trusted;

  policy::Verdict Judge(const std::string& path) const {
    scanner::FileScan scan = scanner::ScanFile(path, false, scan_options);
    std::optional<signer::VerifyResult> verify;
    if (scan.format == scanner::Format::kSafetensors) {
      auto v = signer::VerifyFile(path, trusted, policy::VerifyOptionsFor(policy));
      REQUIRE(v.ok());
      verify = std::move(v).value();
    }
    std::optional<core::Sha256Digest> sha;
    if (policy::NeedsFileSha256(policy)) {
      auto h = policy::FileSha256(path);
      REQUIRE(h.ok());
      sha = h.value();
    }
    return policy::Evaluate(policy, scan, verify, sha, policy::Date{2026, 11, 29});
  }
};

bool Has(const policy::Verdict& v, std::string_view id) {
  for (const auto& j : v.findings) {
    if (j.finding.id == id && j.blocking) return true;
  }
  return false;
}

std::string Bytes(const std::vector<uint8_t>& b) { return std::string(b.begin(), b.end()); }

}  // namespace

TEST_CASE("gate: signed safetensors only", "[policy][gate]") {
  TempDir dir;
  auto release = signer::Keygen(dir / "release");
  REQUIRE(release.ok());
  auto stranger = signer::Keygen(dir / "stranger");
  REQUIRE(stranger.ok());
  WriteFile(dir / "policy.yaml",
            "apiVersion: modelgate/v1\n"
            "kind: Policy\n"
            "failOn: high\n"
            "formats: {allow: [safetensors]}\n"
            "signatures:\n"
            "  required: true\n"
            "  threshold: 1\n"
            "  keys:\n"
            "    - name: release-2026\n"
            "      file: release.pub\n");
  auto loaded = policy::LoadPolicy(dir / "policy.yaml");
  INFO((loaded.ok() ? "" : loaded.error().message));
  REQUIRE(loaded.ok());
  Gate gate;
  gate.policy = loaded.value();
  auto options = policy::ScanOptionsFor(gate.policy);
  INFO((options.ok() ? "" : options.error().message));
  REQUIRE(options.ok());
  gate.scan_options = options.value();
  gate.trusted = policy::TrustedKeys(gate.policy);

  std::string plain = dir / "model.safetensors";
  WriteFile(plain, Bytes(StBuilder().Tensor("w", "F32", {2, 2}).AlignTo8().Build()));
  auto key = signer::LoadPrivateKey(release.value().private_path);
  REQUIRE(key.ok());
  std::string signed_path = dir / "signed.safetensors";
  REQUIRE(signer::SignFile(plain, key.value(), signer::SignOptions{}, signed_path).ok());
  auto other_key = signer::LoadPrivateKey(stranger.value().private_path);
  REQUIRE(other_key.ok());
  std::string stranger_path = dir / "stranger.safetensors";
  REQUIRE(signer::SignFile(plain, other_key.value(), signer::SignOptions{}, stranger_path).ok());
  // protocol 2: {} then STOP.
  std::string pickle_path = dir / "model.pkl";
  WriteFile(pickle_path, std::string("\x80\x02}q\x00.", 6));

  auto ok = gate.Judge(signed_path);
  CHECK(ok.decision == policy::Decision::kPass);
  CHECK(ok.signature_status == "valid");
  CHECK(ok.signed_by == std::vector<std::string>{"release-2026"});

  auto unsigned_v = gate.Judge(plain);
  CHECK(unsigned_v.decision == policy::Decision::kReject);
  CHECK(unsigned_v.signature_status == "missing");
  CHECK(Has(unsigned_v, "MG-POLICY-SIGNATURE"));
  CHECK_FALSE(Has(unsigned_v, "MG-POLICY-FORMAT"));

  auto foreign = gate.Judge(stranger_path);
  CHECK(foreign.decision == policy::Decision::kReject);
  CHECK(foreign.signature_status == "untrusted");

  auto pickle = gate.Judge(pickle_path);
  CHECK(pickle.decision == policy::Decision::kReject);
  CHECK(Has(pickle, "MG-POLICY-FORMAT"));
  CHECK(Has(pickle, "MG-POLICY-SIGNATURE"));

  // Tampering with a tensor byte of the signed file: invalid.
  std::string tampered = dir / "tampered.safetensors";
  std::filesystem::copy_file(signed_path, tampered);
  {
    std::fstream f(tampered, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-1, std::ios::end);
    f.put('\x7f');
  }
  auto bad = gate.Judge(tampered);
  CHECK(bad.decision == policy::Decision::kReject);
  CHECK(bad.signature_status == "invalid");
}

TEST_CASE("gate: policy limits and extra globals reach the scanner", "[policy][gate]") {
  auto p = policy::ParsePolicy(
      "apiVersion: modelgate/v1\nkind: Policy\nlimits: {maxRank: 1, maxPickleOpcodes: 7}\n"
      "pickle: {extraAllowedGlobals: [mylib.Net]}\n",
      "p.yaml", "");
  REQUIRE(p.ok());
  auto o = policy::ScanOptionsFor(p.value());
  REQUIRE(o.ok());
  CHECK(o.value().limits.max_rank == 1);
  CHECK(o.value().pickle.limits.max_opcodes == 7);
  using G = std::pair<std::string, std::string>;
  CHECK(o.value().pickle.extra_safe_globals == std::vector<G>{{"mylib", "Net"}});
  CHECK(o.value().yara != nullptr);
  CHECK(policy::VerifyOptionsFor(p.value()).limits.max_rank == 1);

  TempDir dir;
  std::string path = dir / "rank2.safetensors";
  WriteFile(path, Bytes(StBuilder().Tensor("w", "F32", {2, 2}).AlignTo8().Build()));
  auto scan = scanner::ScanFile(path, false, o.value());
  auto v = policy::Evaluate(p.value(), scan, std::nullopt, std::nullopt, policy::Today());
  CHECK(v.decision == policy::Decision::kReject);
}

TEST_CASE("gate: signatures.model and minVersion read the real STSIG record", "[policy][gate]") {
  TempDir dir;
  auto release = signer::Keygen(dir / "release");
  REQUIRE(release.ok());
  WriteFile(dir / "policy.yaml",
            "apiVersion: modelgate/v1\nkind: Policy\nsignatures:\n  required: true\n"
            "  accept: [embedded]\n  model: acme/llm\n  minVersion: 3\n"
            "  keys:\n    - {name: release, file: release.pub}\n");
  auto loaded = policy::LoadPolicy(dir / "policy.yaml");
  INFO((loaded.ok() ? "" : loaded.error().message));
  REQUIRE(loaded.ok());
  Gate gate;
  gate.policy = loaded.value();
  gate.scan_options = policy::ScanOptionsFor(gate.policy).value();
  gate.trusted = policy::TrustedKeys(gate.policy);
  auto key = signer::LoadPrivateKey(release.value().private_path);
  REQUIRE(key.ok());
  std::string plain = dir / "model.safetensors";
  WriteFile(plain, Bytes(StBuilder().Tensor("w", "F32", {2, 2}).AlignTo8().Build()));
  auto sign = [&](const std::string& name, std::string model, uint64_t version) {
    signer::SignOptions o;
    o.model = std::move(model);
    o.version = version;
    std::string out = dir / name;
    REQUIRE(signer::SignFile(plain, key.value(), o, out).ok());
    return out;
  };

  auto current = gate.Judge(sign("v3.safetensors", "acme/llm", 3));
  CHECK(current.decision == policy::Decision::kPass);
  CHECK(current.signature_kind == "embedded");
  CHECK(current.signed_model == "acme/llm");
  CHECK(current.signed_version == 3u);
  CHECK(current.signed_kids == std::vector<std::string>{release.value().public_key.kid_hex()});

  // The previous release, validly signed by the same key: a rollback.
  auto old = gate.Judge(sign("v2.safetensors", "acme/llm", 2));
  CHECK(old.decision == policy::Decision::kReject);
  CHECK(old.signature_status == "untrusted");
  CHECK(Has(old, "MG-POLICY-SIGNATURE"));
  // Another model of the same key, at a higher version.
  auto other = gate.Judge(sign("other.safetensors", "acme/other", 9));
  CHECK(other.decision == policy::Decision::kReject);
  // Signed without --model / --version.
  CHECK(gate.Judge(sign("bare.safetensors", "", 0)).decision == policy::Decision::kReject);
}
