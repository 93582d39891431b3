// The text table: columns shown, counts, alignment, escaping, colour.
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "cli.h"

namespace mc = modelgate::cli;
namespace ms = modelgate::scanner;
using modelgate::core::Severity;

namespace {

std::vector<std::string> Lines(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream in(s);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

mc::FileReport File(const std::string& path, mc::Verdict v, std::vector<Severity> severities) {
  mc::FileReport f;
  f.scan.path = path;
  f.scan.format = ms::Format::kPickle;
  f.scan.size = 2048;
  f.verdict = v;
  for (auto s : severities) f.scan.findings.push_back(ms::MakeFinding("MG-TEST-X", s, "m"));
  return f;
}

}  // namespace

TEST_CASE("rows count findings most severe first, and SIGNATURE only when something was verified") {
  mc::Report r;
  r.files.push_back(File("a.pkl", mc::Verdict::kReject,
                         {Severity::kMedium, Severity::kCritical, Severity::kMedium}));
  r.files.push_back(File("b.pkl", mc::Verdict::kError, {}));
  r.summary = mc::Summarize(r.files);
  auto lines = Lines(mc::RenderText(r, false));
  REQUIRE(lines.size() == 1 + 1 + 3 + 1 + 1 + 1);
  CHECK(lines[0].find("SIGNATURE") == std::string::npos);
  CHECK(lines[1].find("REJECT   pickle  2.0 KiB        -  1 critical, 2 medium  a.pkl") == 0);
  CHECK(lines[5].find("ERROR    pickle  2.0 KiB        -  -                     b.pkl") == 0);
  CHECK(lines.back() == "2 files: 0 passed, 1 rejected, 1 error");

  r.files[1].signature.status = "untrusted";
  lines = Lines(mc::RenderText(r, false));
  CHECK(lines[0].find("SIGNATURE") != std::string::npos);
  CHECK(lines[5].find("  untrusted  ") != std::string::npos);
  CHECK(lines[1].find("  -          1 critical") != std::string::npos);
}

TEST_CASE("a hostile path cannot add rows or drive the terminal, and colour comes only when asked") {
  mc::Report r;
  r.files.push_back(File("x\nPASS  forged\033[2J", mc::Verdict::kReject, {Severity::kHigh}));
  r.summary = mc::Summarize(r.files);
  const std::string plain = mc::RenderText(r, false);
  CHECK(Lines(plain).size() == 5);
  CHECK(plain.find('\033') == std::string::npos);
  const std::string color = mc::RenderText(r, true);
  CHECK(color.find("\033[1;31mREJECT\033[0m") != std::string::npos);
  CHECK(color.find("\033[2J") == std::string::npos);
  r.files.clear();
  r.summary = mc::Summarize(r.files);
  CHECK(mc::RenderText(r, true) == "0 files: 0 passed, 0 rejected, 0 errors\n");
}

namespace {

// TerminalSafe: valid UTF-8 with no C0 but '\n', no DEL, no C1 (U+0080 to
// U+009F) and no bidi control or line separator.
bool TerminalSafe(const std::string& s) {
  if (!modelgate::core::IsUtf8(s)) return false;
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<uint8_t>(s[i]);
    uint32_t cp = c;
    size_t len = 1;
    if (c >= 0xF0) {
      len = 4, cp = c & 0x07;
    } else if (c >= 0xE0) {
      len = 3, cp = c & 0x0F;
    } else if (c >= 0xC0) {
      len = 2, cp = c & 0x1F;
    }
    for (size_t k = 1; k < len; ++k) cp = (cp << 6) | (static_cast<uint8_t>(s[i + k]) & 0x3F);
    i += len;
    if ((cp < 0x20 && cp != '\n') || cp == 0x7F || (cp >= 0x80 && cp <= 0x9F)) return false;
    if (cp == 0x061C || cp == 0x200E || cp == 0x200F || (cp >= 0x2028 && cp <= 0x202E) ||
        (cp >= 0x2066 && cp <= 0x2069)) {
      return false;
    }
  }
  return true;
}

// Every class in one name: C0, DEL, a raw CSI byte, an encoded CSI, NEL,
// RLO, an isolate, a mark, a line separator and a truncated sequence.
const std::string kHostile =
    "n\x1b[2J\x7f\x9b" "31m\xc2\x9b\xc2\x85\xe2\x80\xae\xe2\x81\xa6\xe2\x80\x8f\xe2\x80\xa8\xe2\x80";

}  // namespace

TEST_CASE("C1, bidi and invalid UTF-8 in a path, member, message or key name are escaped") {
  mc::Report r;
  auto f = File("m/" + kHostile + ".pt", mc::Verdict::kReject, {});
  auto fd = ms::MakeFinding("MG-PK-CRITICAL-IMPORT", Severity::kCritical,
                            "torch member \"" + kHostile + "\" imports os.system", 7,
                            "archive/" + kHostile);
  fd.member_offset = 3;
  f.scan.findings.push_back(fd);
  f.signature.status = "valid";
  f.signature.key_ids = {"00112233445566778899aabbccddeeff"};
  f.signature.key_names = {"k" + kHostile};
  r.files.push_back(f);
  r.summary = mc::Summarize(r.files);
  for (bool color : {false, true}) {
    std::string out = mc::RenderText(r, color);
    if (color) {  // the report's own colours are the only escapes
      for (const char* sgr : {"\033[1;31m", "\033[0m"}) {
        for (size_t at; (at = out.find(sgr)) != std::string::npos;) out.erase(at, std::strlen(sgr));
      }
    }
    CHECK(TerminalSafe(out));
  }
  const std::string escaped =
      "n\\x1b[2J\\x7f\\x9b31m\\u009b\\u0085\\u202e\\u2066\\u200f\\u2028\\xe2\\x80";
  const std::string out = mc::RenderText(r, false);
  CHECK(out.find("  \"m/" + escaped + ".pt\"!\"archive/" + escaped + "\":3: MG-PK-CRITICAL-IMPORT "
                 "(critical): torch member \"" + escaped + "\" imports os.system\n") !=
        std::string::npos);
  CHECK(out.find("(\"k" + escaped + "\")") != std::string::npos);
  CHECK(Lines(out).size() == 1 + 1 + 1 + 1 + 1 + 1);
}

TEST_CASE("JSON keeps two non-UTF-8 paths apart and carries their bytes in path_bytes") {
  mc::Report r;
  r.files.push_back(File("d/a\xff.pkl", mc::Verdict::kPass, {}));
  r.files.push_back(File("d/a\xfe.pkl", mc::Verdict::kPass, {}));
  r.files.push_back(File("d/a\\xff.pkl", mc::Verdict::kPass, {}));  // valid UTF-8, as is
  auto fd = ms::MakeFinding("MG-PK-CRITICAL-IMPORT", Severity::kCritical, "m", 1, "x\x9b\\y");
  r.files[0].scan.findings.push_back(fd);
  r.summary = mc::Summarize(r.files);
  const auto doc = nlohmann::json::parse(mc::RenderJson(r));
  const auto& files = doc["files"];
  CHECK(files[0]["path"] == "d/a\\xff.pkl");
  CHECK(files[0]["path_bytes"] == "642f61ff2e706b6c");
  CHECK(files[1]["path"] == "d/a\\xfe.pkl");
  CHECK(files[1]["path_bytes"] == "642f61fe2e706b6c");
  CHECK(files[2]["path"] == "d/a\\xff.pkl");
  CHECK_FALSE(files[2].contains("path_bytes"));
  CHECK(files[0]["findings"][0]["member"] == "x\\x9b\\\\y");
  CHECK(files[0]["findings"][0]["member_bytes"] == "789b5c79");
  // A UTF-8 path is written as before, with no *_bytes field.
  mc::Report plain;
  plain.files.push_back(File("d/caf\xc3\xa9.pkl", mc::Verdict::kPass, {}));
  plain.summary = mc::Summarize(plain.files);
  const std::string out = mc::RenderJson(plain);
  CHECK(out.find("\"path\": \"d/caf\xc3\xa9.pkl\",\n") != std::string::npos);
  CHECK(out.find("_bytes") == std::string::npos);
}

TEST_CASE("the signature column says what was established: a key only for a valid signature") {
  auto row = [](const std::string& status, std::vector<std::string> kids,
                std::vector<std::string> untrusted) {
    mc::Report r;
    auto f = File("m.safetensors", status == "valid" ? mc::Verdict::kPass : mc::Verdict::kReject, {});
    f.scan.format = ms::Format::kSafetensors;
    f.signature.status = status;
    f.signature.key_ids = kids;
    for (size_t i = 0; i < kids.size(); ++i) f.signature.key_names.push_back("release key");
    f.signature.untrusted_key_ids = untrusted;
    r.files.push_back(f);
    r.summary = mc::Summarize(r.files);
    return mc::RenderText(r, false);
  };
  const std::string kid = "00112233445566778899aabbccddeeff";
  const std::string valid = row("valid", {kid}, {});
  CHECK(Lines(valid)[1].find("  valid (key \"release key\")  ") != std::string::npos);
  CHECK(valid.find("  signed by key " + kid + " (\"release key\")\n") != std::string::npos);
  // A record can verify and the file still be invalid (a tensor changed
  // after signing): the row must not name a signer.
  const std::string invalid = row("invalid", {kid}, {});
  CHECK(Lines(invalid)[1].find("  invalid  ") != std::string::npos);
  CHECK(invalid.find("signed by") == std::string::npos);
  CHECK(invalid.find("release key") == std::string::npos);
  const std::string untrusted = row("untrusted", {}, {"ffeeddccbbaa99887766554433221100"});
  CHECK(Lines(untrusted)[1].find("  untrusted (key id ffeeddccbbaa99887766554433221100 not trusted)  ") !=
        std::string::npos);
  CHECK(untrusted.find("signed by") == std::string::npos);
  // The policy's reading: a trusted key verified, but fewer than required
  // (or another model, an older version).
  const std::string below = row("untrusted", {kid}, {});
  CHECK(Lines(below)[1].find("  untrusted (does not meet the policy's signatures rule)  ") !=
        std::string::npos);
  CHECK(below.find("signed by") == std::string::npos);
  CHECK(Lines(row("missing", {}, {}))[1].find("  missing  ") != std::string::npos);
  CHECK(Lines(row("not-checked", {}, {}))[0].find("SIGNATURE") == std::string::npos);
}

TEST_CASE("a YARA rule folded into a finding is named on its line, once, and not counted") {
  mc::Report report;
  report.files.push_back(File("m.pkl", mc::Verdict::kReject, {Severity::kCritical}));
  auto& fd = report.files[0].scan.findings[0];
  fd.corroborated_by = {"MG-YARA-PICKLE-CODE-EXECUTION-GLOBAL", "MG-YARA-\x1b[2J"};
  report.summary = mc::Summarize(report.files);
  const auto lines = Lines(mc::RenderText(report, /*color=*/false));
  REQUIRE(lines.size() == 5);
  CHECK(lines[1].find("1 critical") != std::string::npos);
  CHECK(lines[2] ==
        "  m.pkl: MG-TEST-X (critical): m [also MG-YARA-PICKLE-CODE-EXECUTION-GLOBAL, "
        "MG-YARA-\\x1b[2J]");
}
