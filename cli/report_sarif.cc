// SARIF 2.1.0 report, shaped for GitHub code scanning (issue 5, point 3).
//
// Model files are binary, so their results carry no `region` (GitHub and
// the errata01 schema want a text region to name a start line); the byte
// offset, archive member and member offset go in `properties` and in the
// message. A finding in a text-like file (a config, a template, a git-lfs
// pointer) has a line and column from the scan (Finding::line), and its
// result a region with them; columns are UTF-16 code units (columnKind).
// Locations are relative to the working directory under the `%SRCROOT%` base
// id, which is what code scanning matches against repository paths; a file
// outside the working directory keeps an absolute file:// URI.
#include <unistd.h>

#include <algorithm>
#include <array>
#include <filesystem>
#include <map>
#include <string_view>

#include <nlohmann/json.hpp>

#include "cli.h"

namespace modelgate::cli {
namespace {

using nlohmann::ordered_json;

// RuleHelp is one row of the finding table (modelgate/findings.def) as a
// SARIF rule shows it: a one-line title, the exact rule, the help text a
// reviewer reads next to the alert, and the docs/findings page.
struct RuleHelp {
  std::string_view id;
  std::string_view title;
  std::string_view rule;
  std::string_view help;
  std::string_view page;  // docs/findings/<page>.md
};

constexpr std::array kRuleHelp = {
#define MG_CORE_FINDING(code, id, severity, title, rule, help) RuleHelp{id, title, rule, help, id},
#define MG_FINDING(id, severity, title, rule, help) RuleHelp{id, title, rule, help, id},
#include "modelgate/findings.def"
};

// Dynamic ids (MG-YARA-<RULE>): `id` is the prefix.
constexpr std::array kFamilyHelp = {
#define MG_FINDING_FAMILY(prefix, page, title, rule, help) \
  RuleHelp{prefix, title, rule, help, page},
#include "modelgate/findings.def"
};

// An id in no table cannot come from this build, but a report is never
// refused for it: it points at the index.
constexpr RuleHelp kUnknownHelp = {
    "", "modelgate finding", "", "A modelgate finding; the message describes the problem.",
    "README"};

const RuleHelp& HelpFor(std::string_view id) {
  for (const auto& h : kRuleHelp) {
    if (h.id == id) return h;
  }
  for (const auto& h : kFamilyHelp) {
    if (id.starts_with(h.id)) return h;
  }
  return kUnknownHelp;
}

// kDocsBaseUri is where docs/findings/ is published (the CMake cache
// variable MG_DOCS_BASE_URI, ending in '/').
constexpr std::string_view kDocsBaseUri = MG_DOCS_BASE_URI;
static_assert(kDocsBaseUri.ends_with('/'), "MG_DOCS_BASE_URI must end in '/'");

// GitHub's convention: a CVSS-like score as a string on the rule; code
// scanning maps >= 9.0 critical, 7.0-8.9 high, 4.0-6.9 medium, < 4 low.
const char* SecuritySeverity(core::Severity s) {
  switch (s) {
    case core::Severity::kCritical: return "9.5";
    case core::Severity::kHigh: return "8.0";
    case core::Severity::kMedium: return "5.5";
    case core::Severity::kLow: return "2.0";
    case core::Severity::kInfo: return nullptr;  // not a security alert
  }
  return nullptr;
}

SarifLevel LevelOf(core::Severity s) {
  switch (s) {
    case core::Severity::kCritical:
    case core::Severity::kHigh: return SarifLevel::kError;
    case core::Severity::kMedium: return SarifLevel::kWarning;
    case core::Severity::kLow:
    case core::Severity::kInfo: return SarifLevel::kNote;
  }
  return SarifLevel::kNote;
}

constexpr std::array<std::string_view, 3> kLevelNames = {"error", "warning", "note"};

std::string Level(core::Severity s) {
  return std::string(kLevelNames[static_cast<size_t>(LevelOf(s))]);
}

// Shown is whether a finding is a result at `min_level` (the enumerators go
// from most to least important).
bool Shown(core::Severity s, SarifLevel min_level) { return LevelOf(s) <= min_level; }

// Severity is what a result says of a finding: for a waived one, its
// severity before the waiver. A waiver does not change what was found; it
// is the result's suppression (kind "external": the policy's exception),
// so code scanning shows it as dismissed, not as an open alert, and the
// result is there at whatever --sarif-level it had before the waiver.
core::Severity Severity(const scanner::Finding& fd) {
  return fd.waived ? fd.waived->severity : fd.severity;
}

// PercentEncode keeps RFC 3986 unreserved bytes and '/', and escapes every
// other byte, so hostile names (':' in a first segment, '#', '?', spaces,
// invalid UTF-8) cannot change what the URI reference means.
std::string PercentEncode(std::string_view path) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : path) {
    const bool keep = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
                      c == '-' || c == '.' || c == '_' || c == '~' || c == '/';
    if (keep) {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

// ArtifactUri is where a scanned file goes: relative to `cwd` when it lies
// inside it (lexically, without touching the file system), else an absolute
// file:// URI. `relative` tells which.
std::string ArtifactUri(const std::string& path, const std::filesystem::path& cwd, bool* relative) {
  namespace fs = std::filesystem;
  fs::path p(path);
  if (!cwd.empty()) {
    const fs::path abs = (p.is_absolute() ? p : cwd / p).lexically_normal();
    const fs::path rel = abs.lexically_relative(cwd);
    const bool inside = !rel.empty() && rel != "." && *rel.begin() != "..";
    *relative = inside;
    return inside ? PercentEncode(rel.generic_string()) : "file://" + PercentEncode(abs.generic_string());
  }
  // No working directory: absolute paths stay absolute, relative ones are
  // reported as given.
  *relative = !p.is_absolute();
  p = p.lexically_normal();
  return *relative ? PercentEncode(p.generic_string()) : "file://" + PercentEncode(p.generic_string());
}

std::string DirUri(const std::filesystem::path& dir) {
  std::string s = dir.generic_string();
  if (s.empty() || s.back() != '/') s += '/';
  return "file://" + PercentEncode(s);
}

// Where, in words: the message is all a reader sees of a binary location.
std::string Where(const scanner::Finding& fd) {
  std::string out;
  if (!fd.member.empty()) {
    out = " [in archive member " + core::Quoted(fd.member);
    if (fd.member_offset != core::kNoOffset) out += " at byte " + std::to_string(fd.member_offset);
    if (fd.offset != core::kNoOffset) out += "; file byte " + std::to_string(fd.offset);
    out += "]";
  } else if (fd.offset != core::kNoOffset) {
    out = " [at byte " + std::to_string(fd.offset) + "]";
  }
  return out;
}

}  // namespace

bool ParseSarifLevel(std::string_view s, SarifLevel* out) {
  for (size_t i = 0; i < kLevelNames.size(); ++i) {
    if (kLevelNames[i] == s) {
      *out = static_cast<SarifLevel>(i);
      return true;
    }
  }
  return false;
}

std::string RenderSarif(const Report& report, SarifLevel min_level) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path cwd = fs::current_path(ec);
  if (ec) cwd.clear();

  // One rule per id that appears, sorted by id; its severity is the worst
  // severity that id has in this report.
  std::map<std::string, core::Severity> rule_severity;
  for (const auto& f : report.files) {
    for (const auto& fd : f.scan.findings) {
      if (!Shown(Severity(fd), min_level)) continue;
      auto [it, inserted] = rule_severity.emplace(fd.id, Severity(fd));
      if (!inserted) it->second = std::min(it->second, Severity(fd));  // lower = more severe
    }
  }
  std::map<std::string, size_t> rule_index;
  ordered_json rules = ordered_json::array();
  for (const auto& [id, severity] : rule_severity) {
    const RuleHelp& h = HelpFor(id);
    ordered_json r;
    r["id"] = id;
    const std::string uri = std::string(kDocsBaseUri) + std::string(h.page) + ".md";
    std::string help(h.help);
    if (!h.rule.empty()) help += "\n\nRule: " + std::string(h.rule) + ".";
    r["shortDescription"] = {{"text", std::string(h.title)}};
    r["fullDescription"] = {{"text", std::string(h.help)}};
    r["helpUri"] = uri;
    r["help"] = {{"text", help + "\n\n" + uri}};
    r["defaultConfiguration"] = {{"level", Level(severity)}};
    ordered_json props;
    if (const char* score = SecuritySeverity(severity)) {
      props["tags"] = {"security"};
      props["security-severity"] = score;
    }
    props["severity"] = std::string(core::SeverityName(severity));
    r["properties"] = std::move(props);
    rule_index[id] = rules.size();
    rules.push_back(std::move(r));
  }

  ordered_json results = ordered_json::array();
  ordered_json notifications = ordered_json::array();
  // Every file judged, once per URI: what a registry records of the run
  // (SHA-256 when hashed, verdict, signature), results pointing at it.
  ordered_json artifacts = ordered_json::array();
  std::map<std::string, size_t> artifact_index;
  bool success = true;
  std::map<std::string, size_t> seen;  // fingerprint key -> occurrences
  for (const auto& f : report.files) {
    const auto& s = f.scan;
    bool relative = false;
    const std::string uri = ArtifactUri(s.path, cwd, &relative);
    ordered_json artifact{{"uri", uri}};
    if (relative && !cwd.empty()) artifact["uriBaseId"] = "%SRCROOT%";
    auto [at, inserted] = artifact_index.emplace(uri, artifacts.size());
    if (inserted) {
      ordered_json a;
      a["location"] = artifact;
      a["length"] = s.size;
      if (f.sha256) a["hashes"] = {{"sha-256", core::HexLower(*f.sha256)}};
      ordered_json sig{{"status", f.signature.status}};
      if (!f.signature.kind.empty()) sig["kind"] = f.signature.kind;
      if (!f.signature.key_ids.empty()) sig["key_ids"] = f.signature.key_ids;
      if (!f.signature.model.empty()) sig["model"] = f.signature.model;
      if (f.signature.version) sig["version"] = *f.signature.version;
      a["properties"] = {{"format", std::string(scanner::FormatName(s.format))},
                         {"verdict", VerdictName(f.verdict)},
                         {"signature", std::move(sig)}};
      artifacts.push_back(std::move(a));
    }
    artifact["index"] = at->second;
    if (f.verdict == Verdict::kError) {
      success = false;
      notifications.push_back(
          {{"level", "error"},
           {"message", {{"text", "could not judge " + DisplayPath(s.path) + "; see its results"}}}});
    }
    for (const auto& fd : s.findings) {
      // A stable identity for the alert across runs: rule, file, place, and
      // the occurrence count among otherwise identical findings, counted
      // over every finding so that the level asked for does not change it.
      std::string key = fd.id + '\0' + uri + '\0' + fd.member + '\0' + std::to_string(fd.offset) +
                        '\0' + std::to_string(fd.member_offset);
      key += '\0' + std::to_string(seen[key]++);
      const core::Severity severity = Severity(fd);
      if (!Shown(severity, min_level)) continue;
      ordered_json r;
      r["ruleId"] = fd.id;
      r["ruleIndex"] = rule_index.at(fd.id);
      r["level"] = Level(severity);
      r["message"] = {{"text", fd.message + Where(fd)}};
      ordered_json physical{{"artifactLocation", artifact}};
      if (fd.line != 0) physical["region"] = {{"startLine", fd.line}, {"startColumn", fd.column}};
      r["locations"] = ordered_json::array({{{"physicalLocation", std::move(physical)}}});
      const auto digest = core::Sha256({reinterpret_cast<const uint8_t*>(key.data()), key.size()});
      r["partialFingerprints"] = {
          {"modelgateFinding/v1", core::HexLower(std::span<const uint8_t>(digest.data(), 16))}};
      if (fd.waived) {
        r["suppressions"] = ordered_json::array(
            {{{"kind", "external"}, {"justification", fd.waived->reason}}});
      }
      ordered_json props;
      props["severity"] = std::string(core::SeverityName(severity));
      if (const char* score = SecuritySeverity(severity)) props["security-severity"] = score;
      if (fd.waived) {  // as in the JSON report
        props["waived"] = {{"reason", fd.waived->reason},
                           {"expires", fd.waived->expires},
                           {"severity", std::string(core::SeverityName(fd.waived->severity))}};
      }
      if (fd.offset != core::kNoOffset) props["offset"] = fd.offset;
      if (!fd.member.empty()) {  // as in the JSON report: escaped, raw bytes beside
        props["member"] = core::EscapeInvalidUtf8(fd.member);
        if (std::string hex = NameBytes(fd.member); !hex.empty()) props["member_bytes"] = hex;
      }
      if (fd.member_offset != core::kNoOffset) props["member_offset"] = fd.member_offset;
      if (!fd.opcode.empty()) props["opcode"] = fd.opcode;
      if (!fd.global.empty()) props["global"] = fd.global;
      // As in the JSON report: the YARA ids folded into this finding.
      if (!fd.corroborated_by.empty()) props["corroborated_by"] = fd.corroborated_by;
      props["format"] = std::string(scanner::FormatName(s.format));
      props["verdict"] = VerdictName(f.verdict);
      r["properties"] = std::move(props);
      results.push_back(std::move(r));
    }
  }

  ordered_json invocation;
  invocation["executionSuccessful"] = success;
  if (!cwd.empty()) invocation["workingDirectory"] = {{"uri", DirUri(cwd)}};
  if (!notifications.empty()) invocation["toolExecutionNotifications"] = std::move(notifications);

  ordered_json run;
  run["tool"] = {{"driver",
                  {{"name", "modelgate"},
                   {"version", std::string(core::kVersion)},
                   {"semanticVersion", std::string(core::kVersion)},
                   {"rules", std::move(rules)}}}};
  run["columnKind"] = "utf16CodeUnits";
  if (!cwd.empty()) run["originalUriBaseIds"] = {{"%SRCROOT%", {{"uri", DirUri(cwd)}}}};
  run["invocations"] = ordered_json::array({std::move(invocation)});
  run["artifacts"] = std::move(artifacts);
  run["results"] = std::move(results);
  run["properties"] = {{"summary",
                        {{"files", report.summary.files},
                         {"passed", report.summary.passed},
                         {"rejected", report.summary.rejected},
                         {"errors", report.summary.errors}}}};
  if (!report.policy_path.empty()) {  // as the JSON report's `policy`
    ordered_json policy{{"path", core::EscapeInvalidUtf8(report.policy_path)}};
    if (report.policy_sha256) policy["sha256"] = core::HexLower(*report.policy_sha256);
    run["properties"]["policy"] = std::move(policy);
  }

  ordered_json doc;
  doc["$schema"] = "https://json.schemastore.org/sarif-2.1.0.json";
  doc["version"] = "2.1.0";
  doc["runs"] = ordered_json::array({std::move(run)});
  // Invalid UTF-8 left in a message or global becomes U+FFFD rather than an
  // exception (artifact URIs percent-encode raw bytes).
  return doc.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

}  // namespace modelgate::cli
