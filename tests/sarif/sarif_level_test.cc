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
