// The report fields of issue 11 (point 6) as RenderJson and RenderText write
// them: a file's SHA-256, the signature's kind, model and version, the run's
// policy, and a waived finding shown as waived rather than as info.
#include <string>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "cli.h"

namespace mc = modelgate::cli;
namespace ms = modelgate::scanner;
using modelgate::core::Severity;
using nlohmann::json;

namespace {

constexpr const char* kEmptySha =
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

mc::Report Detached() {
  mc::FileReport f;
  f.scan.path = "tiny/config.json";
  f.scan.size = 0;
  f.sha256 = modelgate::core::Sha256({});
  f.signature.status = "valid";
  f.signature.kind = "detached";
  f.signature.key_ids = {"00112233445566778899aabbccddeeff"};
  f.signature.key_names = {"release"};
  f.signature.model = "acme/tiny";
  f.signature.version = 3;
  auto waived = ms::MakeFinding("MG-ST-TRAILING-BYTES", Severity::kInfo,
                                "waived until 2027-01-31 (reviewed); was critical: trailing bytes", 8);
  waived.waived = ms::Waiver{"reviewed", "2027-01-31", Severity::kCritical};
  f.scan.findings.push_back(waived);
  f.scan.findings.push_back(ms::MakeFinding("MG-FMT-UNKNOWN", Severity::kInfo, "not a model"));
  mc::Report r;
  r.files.push_back(f);
  r.summary = mc::Summarize(r.files);
  return r;
}

}  // namespace

TEST_CASE("json: sha256, signature kind/model/version, waived, and the run's policy") {
  mc::Report r = Detached();
  json doc = json::parse(mc::RenderJson(r));
  CHECK_FALSE(doc.contains("policy"));  // no policy: no object
  const json& f = doc["files"][0];
  CHECK(f["sha256"] == kEmptySha);
  CHECK(f["signature"]["kind"] == "detached");
  CHECK(f["signature"]["model"] == "acme/tiny");
  CHECK(f["signature"]["version"] == 3);
  CHECK(f["signature"]["key_id"] == "00112233445566778899aabbccddeeff");
  CHECK(f["findings"][0]["severity"] == "info");
  CHECK(f["findings"][0]["waived"] ==
        json::parse(R"({"reason": "reviewed", "expires": "2027-01-31", "severity": "critical"})"));
  CHECK_FALSE(f["findings"][1].contains("waived"));

  // Absent rather than empty: no hash, no kind, no model, no version.
  r.files[0].sha256.reset();
  r.files[0].signature = mc::SignatureReport{};
  r.policy_path = "gate/policy.yaml";
  r.policy_sha256 = modelgate::core::Sha256({});
  doc = json::parse(mc::RenderJson(r));
  CHECK_FALSE(doc["files"][0].contains("sha256"));
  CHECK(doc["files"][0]["signature"] == json::parse(R"({"status": "not-checked"})"));
  CHECK(doc["policy"] == json::parse(std::string(R"({"path": "gate/policy.yaml", "sha256": ")") +
                                     kEmptySha + "\"}"));
  // The policy object comes before the files (a reader sees what judged them first).
  const std::string text = mc::RenderJson(r);
  CHECK(text.find("\"policy\"") < text.find("\"files\""));
}

TEST_CASE("text: a waived finding says waived, is counted apart, and the signer line says what was signed") {
  const std::string out = mc::RenderText(Detached(), false);
  CHECK(out.find("  tiny/config.json:8: MG-ST-TRAILING-BYTES (waived): waived until 2027-01-31 "
                 "(reviewed); was critical: trailing bytes\n") != std::string::npos);
  CHECK(out.find("MG-FMT-UNKNOWN (info)") != std::string::npos);
  CHECK(out.find("1 info, 1 waived") != std::string::npos);
  CHECK(out.find("valid (detached, key release)") != std::string::npos);
  CHECK(out.find("  signed by key 00112233445566778899aabbccddeeff (\"release\") for model "
                 "\"acme/tiny\" version 3 in a detached bundle\n") != std::string::npos);
}
