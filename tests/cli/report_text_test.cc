// The text table: columns shown, counts, alignment, escaping, colour.
#include <sstream>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

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
  CHECK(lines.back() == "2 files: 0 passed, 1 rejected, 1 errors");

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
