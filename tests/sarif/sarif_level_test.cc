// --sarif-level: which findings become SARIF results (cli/report_sarif.cc),
// and the region of a finding placed in a text file.
#include <catch2/catch.hpp>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "cli.h"

namespace mc = modelgate::cli;
namespace ms = modelgate::scanner;
using modelgate::core::Severity;
using nlohmann::json;

namespace {

// One file with one finding of each severity (ids tell them apart).
mc::Report Everything() {
  mc::FileReport f;
  f.scan.path = "model.bin";
  f.scan.format = ms::Format::kPickle;
  const std::vector<std::pair<const char*, Severity>> rows = {
      {"MG-PK-CRITICAL-IMPORT", Severity::kCritical},
      {"MG-PK-UNKNOWN-IMPORT", Severity::kHigh},
      {"MG-PK-PICKLE-FORMAT", Severity::kMedium},
      {"MG-PK-TRAILING-DATA", Severity::kLow},
      {"MG-PK-PY2-MAPPING", Severity::kInfo}};
  uint64_t offset = 10;
  for (const auto& [id, sev] : rows)
    f.scan.findings.push_back(ms::MakeFinding(id, sev, "m", offset++));
  f.verdict = mc::Verdict::kReject;
  mc::Report r;
  r.files.push_back(f);
  r.summary = mc::Summarize(r.files);
  return r;
}

std::set<std::string> ResultIds(const json& doc) {
  std::set<std::string> out;
  for (const auto& r : doc["runs"][0]["results"]) out.insert(r["ruleId"].get<std::string>());
  return out;
}

std::set<std::string> RuleIds(const json& doc) {
  std::set<std::string> out;
  for (const auto& r : doc["runs"][0]["tool"]["driver"]["rules"])
    out.insert(r["id"].get<std::string>());
  return out;
}

}  // namespace

TEST_CASE("ParseSarifLevel: exactly error, warning, note", "[sarif][level]") {
  mc::SarifLevel l = mc::SarifLevel::kError;
  REQUIRE(mc::ParseSarifLevel("note", &l));
  CHECK(l == mc::SarifLevel::kNote);
  REQUIRE(mc::ParseSarifLevel("warning", &l));
  CHECK(l == mc::SarifLevel::kWarning);
  REQUIRE(mc::ParseSarifLevel("error", &l));
  CHECK(l == mc::SarifLevel::kError);
  for (const char* bad : {"", "Note", "none", "info", "warning ", "errors"}) {
    CAPTURE(bad);
    CHECK_FALSE(mc::ParseSarifLevel(bad, &l));
    CHECK(l == mc::SarifLevel::kError);  // untouched
  }
}

TEST_CASE("RenderSarif: results below the level are left out, with their rules", "[sarif][level]") {
  const mc::Report r = Everything();
  const json note = json::parse(mc::RenderSarif(r, mc::SarifLevel::kNote));
  const json warning = json::parse(mc::RenderSarif(r, mc::SarifLevel::kWarning));
  const json error = json::parse(mc::RenderSarif(r, mc::SarifLevel::kError));
  const std::set<std::string> all = {"MG-PK-CRITICAL-IMPORT", "MG-PK-UNKNOWN-IMPORT",
                                     "MG-PK-PICKLE-FORMAT", "MG-PK-TRAILING-DATA",
                                     "MG-PK-PY2-MAPPING"};
  CHECK(ResultIds(note) == all);
  CHECK(ResultIds(warning) == std::set<std::string>{"MG-PK-CRITICAL-IMPORT", "MG-PK-UNKNOWN-IMPORT",
                                                    "MG-PK-PICKLE-FORMAT"});
  CHECK(ResultIds(error) == std::set<std::string>{"MG-PK-CRITICAL-IMPORT", "MG-PK-UNKNOWN-IMPORT"});
  CHECK(RuleIds(note) == ResultIds(note));
  CHECK(RuleIds(warning) == ResultIds(warning));
  CHECK(RuleIds(error) == ResultIds(error));
  // The summary and the invocation cover every file whatever the level.
  CHECK(error["runs"][0]["properties"] == note["runs"][0]["properties"]);
  CHECK(error["runs"][0]["invocations"] == note["runs"][0]["invocations"]);
}

TEST_CASE("RenderSarif: fingerprints do not depend on the level", "[sarif][level]") {
  mc::Report r = Everything();
  // Two identical findings but for severity: the occurrence count that
  // tells them apart must not shift when the first is left out.
  r.files[0].scan.findings.insert(
      r.files[0].scan.findings.begin(),
      ms::MakeFinding("MG-PK-CRITICAL-IMPORT", Severity::kInfo, "m", 10));
  const json note = json::parse(mc::RenderSarif(r, mc::SarifLevel::kNote));
  const json error = json::parse(mc::RenderSarif(r, mc::SarifLevel::kError));
  std::set<std::string> note_fps;
  for (const auto& x : note["runs"][0]["results"]) note_fps.insert(x["partialFingerprints"].dump());
  CHECK(note_fps.size() == note["runs"][0]["results"].size());
  for (const auto& x : error["runs"][0]["results"]) {
    CAPTURE(x["ruleId"]);
    CHECK(note_fps.count(x["partialFingerprints"].dump()) == 1);
  }
}

TEST_CASE("RenderSarif: rules link to their docs page", "[sarif][help]") {
  mc::FileReport f;
  f.scan.path = "a.safetensors";
  f.scan.findings.push_back(ms::MakeFinding("MG-ST-OVERLAP", Severity::kCritical, "m", 8));
  f.scan.findings.push_back(ms::MakeFinding("MG-YARA-SOME-RULE", Severity::kHigh, "m", 9));
  f.scan.findings.push_back(ms::MakeFinding("MG-YARA-PARTIAL", Severity::kHigh, "m"));
  mc::Report r;
  r.files.push_back(f);
  const json doc = json::parse(mc::RenderSarif(r, mc::SarifLevel::kNote));
  std::map<std::string, std::string> uri;
  for (const auto& rule : doc["runs"][0]["tool"]["driver"]["rules"]) {
    uri[rule["id"].get<std::string>()] = rule["helpUri"].get<std::string>();
  }
  auto ends = [](const std::string& s, const std::string& tail) {
    return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
  };
  CHECK(ends(uri["MG-ST-OVERLAP"], "/MG-ST-OVERLAP.md"));
  CHECK(ends(uri["MG-YARA-SOME-RULE"], "/MG-YARA.md"));
  CHECK(ends(uri["MG-YARA-PARTIAL"], "/MG-YARA-PARTIAL.md"));  // a fixed id wins over the family
}

TEST_CASE("RenderSarif: a placed finding has a region, others none", "[sarif][region]") {
  mc::FileReport f;
  f.scan.path = "config.json";
  f.scan.format = ms::Format::kUnknown;
  ms::Finding placed = ms::MakeFinding("MG-YARA-X", Severity::kHigh, "m", 40);
  placed.line = 3;
  placed.column = 7;
  f.scan.findings.push_back(placed);
  f.scan.findings.push_back(ms::MakeFinding("MG-YARA-Y", Severity::kHigh, "m", 41));
  mc::Report r;
  r.files.push_back(f);
  const json doc = json::parse(mc::RenderSarif(r, mc::SarifLevel::kNote));
  const auto& results = doc["runs"][0]["results"];
  REQUIRE(results.size() == 2);
  const auto& region = results[0]["locations"][0]["physicalLocation"]["region"];
  CHECK(region == json{{"startLine", 3}, {"startColumn", 7}});
  CHECK_FALSE(results[1]["locations"][0]["physicalLocation"].contains("region"));
  CHECK(doc["runs"][0]["columnKind"] == "utf16CodeUnits");
}

TEST_CASE("sarif.waived: a waived finding is a suppressed result at its unwaived level") {
  mc::Report r = Everything();
  // The high finding, waived by a policy exception (policy::Evaluate makes
  // it info and records the waiver).
  auto& high = r.files[0].scan.findings[1];
  high.severity = Severity::kInfo;
  high.waived = ms::Waiver{"reviewed by security", "2027-01-31", Severity::kHigh};
  const json doc = json::parse(mc::RenderSarif(r, mc::SarifLevel::kWarning));
  const json* waived = nullptr;
  for (const auto& res : doc["runs"][0]["results"]) {
    if (res["ruleId"] == "MG-PK-UNKNOWN-IMPORT") waived = &res;
    if (res["ruleId"] != "MG-PK-UNKNOWN-IMPORT") CHECK_FALSE(res.contains("suppressions"));
  }
  // Not dropped as an info note at the default level: shown, and suppressed.
  REQUIRE(waived);
  CHECK((*waived)["level"] == "error");
  CHECK((*waived)["suppressions"] ==
        json::parse(R"([{"kind": "external", "justification": "reviewed by security"}])"));
  CHECK((*waived)["properties"]["waived"]["expires"] == "2027-01-31");
  CHECK((*waived)["properties"]["severity"] == "high");
  // Below the level asked for, a waived finding is left out like any other.
  CHECK(ResultIds(json::parse(mc::RenderSarif(r, mc::SarifLevel::kError))).count(
            "MG-PK-UNKNOWN-IMPORT") == 1);
  high.waived->severity = Severity::kLow;
  CHECK(ResultIds(json::parse(mc::RenderSarif(r, mc::SarifLevel::kWarning))).count(
            "MG-PK-UNKNOWN-IMPORT") == 0);
}

TEST_CASE("sarif.artifacts: one per file, with its SHA-256 and signature, and the run's policy") {
  mc::Report r = Everything();
  r.files.push_back(r.files[0]);  // the same file named twice: one artifact
  mc::FileReport signed_file;
  signed_file.scan.path = "dir/config.json";
  signed_file.sha256 = modelgate::core::Sha256({});
  signed_file.signature.status = "valid";
  signed_file.signature.kind = "detached";
  signed_file.signature.key_ids = {"00112233445566778899aabbccddeeff"};
  signed_file.signature.model = "acme/llm";
  signed_file.signature.version = 3;
  r.files.push_back(signed_file);
  r.summary = mc::Summarize(r.files);
  json doc = json::parse(mc::RenderSarif(r, mc::SarifLevel::kWarning));
  const json& arts = doc["runs"][0]["artifacts"];
  REQUIRE(arts.size() == 2);
  CHECK(arts[0]["location"]["uri"] == "model.bin");
  CHECK_FALSE(arts[0].contains("hashes"));
  CHECK(arts[1]["hashes"]["sha-256"] ==
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(arts[1]["properties"]["signature"] ==
        json::parse(R"({"status": "valid", "kind": "detached",
                        "key_ids": ["00112233445566778899aabbccddeeff"],
                        "model": "acme/llm", "version": 3})"));
  for (const auto& res : doc["runs"][0]["results"]) {
    CHECK(res["locations"][0]["physicalLocation"]["artifactLocation"]["index"] == 0);
  }
  CHECK_FALSE(doc["runs"][0]["properties"].contains("policy"));
  r.policy_path = "policy.yaml";
  r.policy_sha256 = modelgate::core::Sha256({});
  doc = json::parse(mc::RenderSarif(r, mc::SarifLevel::kWarning));
  CHECK(doc["runs"][0]["properties"]["policy"] ==
        json::parse(R"({"path": "policy.yaml", "sha256":
                        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"})"));
}
