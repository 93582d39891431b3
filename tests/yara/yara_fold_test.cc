// One finding per cause (issue 10): a YARA rule that sees exactly the bytes
// of a built-in import finding is listed on it (corroborated_by) instead of
// being reported again; a rule that matched anything else, or that is more
// severe than the built-in finding, is still reported on its own.
#include <catch2/catch.hpp>
#include <cstdio>
#include <string>
#include <vector>

#include "modelgate/scanner.h"
#include "yara_test_util.h"

using namespace yara_test;

namespace {

constexpr const char* kYaraGlobal = "MG-YARA-PICKLE-CODE-EXECUTION-GLOBAL";

std::string U32(uint32_t v) {
  return {static_cast<char>(v & 0xff), static_cast<char>((v >> 8) & 0xff),
          static_cast<char>((v >> 16) & 0xff), static_cast<char>(v >> 24)};
}

// Scan writes `bytes` as DIR/x.pkl and scans it with the shipped rules and
// the rule file `rules` (if any).
sc::FileScan Scan(const std::string& bytes, const std::string& rules = "") {
  TempDir dir;
  std::vector<std::string> dirs;
  if (!rules.empty()) {
    WriteFile(dir / "rules/extra.yar", rules);
    dirs.push_back(dir / "rules");
  }
  auto compiled = sc::CompileYaraRules(dirs, true);
  REQUIRE(compiled.ok());
  sc::ScanOptions options;
  options.yara = compiled.value();
  WriteFile(dir / "x.pkl", bytes);
  return sc::ScanFile(dir / "x.pkl", false, options);
}

size_t Count(const sc::FileScan& s, std::string_view id) {
  size_t n = 0;
  for (const auto& f : s.findings) n += f.id == id;
  return n;
}

const sc::Finding& Only(const sc::FileScan& s, std::string_view id) {
  INFO(Describe(s.findings));
  REQUIRE(Count(s, id) == 1);
  return *Find(s.findings, id);
}

// os.system("id") by GLOBAL (protocol 0) and by STACK_GLOBAL (protocol 4).
const std::string kGlobal = "cos\nsystem\n(S'id'\ntR.";
const std::string kStackGlobal = "\x80\x04\x8c\x02os\x94\x8c\x06system\x94\x93\x8c\x02id\x85R.";

}  // namespace

TEST_CASE("fold: a code-execution import is one finding, the YARA rule corroborating it",
          "[yara][fold]") {
  for (const std::string& pickle : {kGlobal, kStackGlobal}) {
    auto s = Scan(pickle);
    INFO(Describe(s.findings));
    const sc::Finding& imp = Only(s, "MG-PK-CRITICAL-IMPORT");
    CHECK(imp.corroborated_by == std::vector<std::string>{kYaraGlobal});
    CHECK(Count(s, kYaraGlobal) == 0);
  }
}

TEST_CASE("fold: STACK_GLOBAL strings brought back from the memo are the import's bytes",
          "[yara][fold]") {
  // The strings are pushed and memoized, popped, then fetched by BINGET.
  const std::string p = "\x80\x04\x8c\x02os\x94\x8c\x06system\x94" "00" +
                        std::string("h\x00h\x01\x93\x8c\x02id\x85R.", 12);
  auto s = Scan(p);
  const sc::Finding& imp = Only(s, "MG-PK-CRITICAL-IMPORT");
  CHECK(imp.corroborated_by == std::vector<std::string>{kYaraGlobal});
  CHECK(Count(s, kYaraGlobal) == 0);
}

TEST_CASE("fold: a second match outside the import keeps the YARA finding", "[yara][fold]") {
  // The rule's first match is the import (all libyara records in fast
  // mode); a second one sits in a string literal that imports nothing.
  const std::string text = "cposix\nsystem\n";
  const std::string p = "cos\nsystem\n(S'id'\ntR0X" + U32(static_cast<uint32_t>(text.size())) + text + ".";
  auto s = Scan(p);
  INFO(Describe(s.findings));
  CHECK(Only(s, "MG-PK-CRITICAL-IMPORT").corroborated_by.empty());
  CHECK(Count(s, kYaraGlobal) == 1);
}

TEST_CASE("fold: a match reaching past the import's bytes is its own finding", "[yara][fold]") {
  const std::string rule =
      "rule system_then_call { meta: severity = \"high\" strings: $a = \"system\\n(S'\" "
      "condition: $a }";
  auto s = Scan(kGlobal, rule);
  INFO(Describe(s.findings));
  CHECK(Count(s, "MG-YARA-SYSTEM-THEN-CALL") == 1);
  CHECK(Only(s, "MG-PK-CRITICAL-IMPORT").corroborated_by == std::vector<std::string>{kYaraGlobal});
}

TEST_CASE("fold: a rule more severe than the built-in finding is never folded", "[yara][fold]") {
  const std::string p = "cmymod\nfn\n)R.";
  auto rule = [](const char* severity) {
    return std::string("rule mymod_import { meta: severity = \"") + severity +
           "\" strings: $a = \"cmymod\\nfn\\n\" condition: $a }";
  };
  SECTION("critical over an unknown import (high)") {
    auto s = Scan(p, rule("critical"));
    INFO(Describe(s.findings));
    CHECK(Only(s, "MG-YARA-MYMOD-IMPORT").severity == modelgate::core::Severity::kCritical);
    CHECK(Only(s, "MG-PK-UNKNOWN-IMPORT").corroborated_by.empty());
  }
  SECTION("high over an unknown import (high)") {
    auto s = Scan(p, rule("high"));
    INFO(Describe(s.findings));
    CHECK(Count(s, "MG-YARA-MYMOD-IMPORT") == 0);
    CHECK(Only(s, "MG-PK-UNKNOWN-IMPORT").corroborated_by ==
          std::vector<std::string>{"MG-YARA-MYMOD-IMPORT"});
  }
}

TEST_CASE("fold: kYaraFoldMaxBytes: a stream of N bytes folds and one of N+1 does not", "[yara][fold][limits]") {
  // os.system, then a BINBYTES literal that pads the stream to `total`.
  auto padded = [](uint64_t total) {
    const std::string head = "cos\nsystem\n(S'id'\ntR0B";
    const uint64_t pad = total - head.size() - 4 - 1;
    return head + U32(static_cast<uint32_t>(pad)) + std::string(pad, 'a') + ".";
  };
  const std::string at = padded(sc::kYaraFoldMaxBytes), past = padded(sc::kYaraFoldMaxBytes + 1);
  REQUIRE(at.size() == sc::kYaraFoldMaxBytes);
  auto s = Scan(at);
  CHECK(Count(s, kYaraGlobal) == 0);
  CHECK(Only(s, "MG-PK-CRITICAL-IMPORT").corroborated_by == std::vector<std::string>{kYaraGlobal});
  s = Scan(past);
  CHECK(Count(s, kYaraGlobal) == 1);
  CHECK(Only(s, "MG-PK-CRITICAL-IMPORT").corroborated_by.empty());
}

// UstarOne is a tar holding one regular member "payload" with `data`.
std::string UstarOne(const std::string& data) {
  std::string tar(512, '\0');
  tar.replace(0, 7, "payload");
  tar.replace(100, 7, "0000644");
  tar.replace(108, 7, "0000000");
  tar.replace(116, 7, "0000000");
  char size[12];
  std::snprintf(size, sizeof size, "%011o", static_cast<unsigned>(data.size()));
  tar.replace(124, 11, size);
  tar.replace(136, 11, "00000000000");
  tar[156] = '0';
  tar.replace(257, 6, std::string("ustar\0", 6));
  tar.replace(263, 2, "00");
  tar.replace(148, 8, "        ");
  unsigned sum = 0;
  for (unsigned char c : tar) sum += c;
  char chk[8];
  std::snprintf(chk, sizeof chk, "%06o", sum);
  tar.replace(148, 7, std::string(chk, 6) + '\0');
  std::string body = data;
  body.resize((data.size() + 511) / 512 * 512, '\0');
  return tar + body + std::string(1024, '\0');
}

sc::FileScan ScanTar(const std::string& tar) {
  TempDir dir;
  WriteFile(dir / "x.tar", tar);
  auto compiled = sc::CompileYaraRules({}, true);
  REQUIRE(compiled.ok());
  sc::ScanOptions options;
  options.yara = compiled.value();
  return sc::ScanFile(dir / "x.tar", false, options);
}

TEST_CASE("fold: a pickle member of a tar is scanned by the rules once", "[yara][fold]") {
  // What tarfile lists is judged by content: the member's stream is scanned
  // as "pickle" and the member as "member"; the rule both saw is one cause.
  auto s = ScanTar(UstarOne(kGlobal));
  INFO(Describe(s.findings));
  CHECK(Count(s, kYaraGlobal) == 0);
  CHECK(Only(s, "MG-PK-CRITICAL-IMPORT").corroborated_by == std::vector<std::string>{kYaraGlobal});
}

TEST_CASE("fold: member-scope rules still see a pickle member", "[yara][fold]") {
  // A zip local header in a literal: only the "member" scope looks for it.
  const std::string zip = std::string("PK\x03\x04\x14\x00\x00\x00\x08\x00", 10) + std::string(20, 'z');
  const std::string p = "cos\nsystem\n(S'id'\ntR0X" + U32(static_cast<uint32_t>(zip.size())) + zip + ".";
  auto s = ScanTar(UstarOne(p));
  INFO(Describe(s.findings));
  CHECK(Count(s, "MG-YARA-EMBEDDED-ZIP-ARCHIVE") == 1);
  CHECK(Count(s, kYaraGlobal) == 0);
}
