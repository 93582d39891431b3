// `modelgate policy lint`: parse errors and warnings with positions.
#include <catch2/catch.hpp>

#include "policy_test_util.h"

namespace core = modelgate::core;
namespace policy = modelgate::policy;
using modelgate::testing::IndentedPem;
using modelgate::testing::kHead;
using modelgate::testing::TempDir;
using modelgate::testing::WriteFile;

namespace {

std::vector<policy::Problem> Lint(const std::string& rest, policy::Date today = {2026, 11, 29}) {
  TempDir dir;
  WriteFile(dir / "p.yaml", std::string(kHead) + rest);
  auto problems = policy::LintPolicy(dir / "p.yaml", today);
  // Strip the temp dir from messages.
  for (auto& p : problems) {
    if (p.message.starts_with(dir.path() + "/")) p.message.erase(0, dir.path().size() + 1);
  }
  return problems;
}

}  // namespace

TEST_CASE("lint: a good policy has no problems", "[policy][lint]") {
  CHECK(Lint("formats: {allow: [safetensors]}\n").empty());
}

TEST_CASE("lint: a parse error is one error", "[policy][lint]") {
  auto p = Lint("signatures:\n  required: on\n");
  REQUIRE(p.size() == 1);
  CHECK(p[0].level == policy::Problem::Level::kError);
  CHECK(p[0].message.starts_with("p.yaml:4:13: signatures.required: \"on\" is a YAML 1.1 boolean"));
  auto empty_keys = Lint("signatures:\n  required: true\n  keys: []\n");
  REQUIRE(empty_keys.size() == 1);
  CHECK(empty_keys[0].level == policy::Problem::Level::kError);
  CHECK(empty_keys[0].message ==
        "p.yaml:4:13: signatures.required is true but signatures.keys lists no trusted key");
}

TEST_CASE("lint: exceptions expiring soon or expired", "[policy][lint]") {
  std::string sha(64, '0');
  sha[63] = 'a';
  auto ex = [&](std::string expires) {
    return "exceptions:\n  - {id: MG-ST-GAP, sha256: \"" + sha + "\", reason: r, expires: " +
           expires + "}\n";
  };
  CHECK(Lint(ex("2026-12-30")).empty());  // 31 days
  auto soon = Lint(ex("2026-12-29"));
  REQUIRE(soon.size() == 1);
  CHECK(soon[0].level == policy::Problem::Level::kWarning);
  CHECK(soon[0].message ==
        "p.yaml:4:5: exception for MG-ST-GAP expires on 2026-12-29 (in 30 day(s))");
  auto past = Lint(ex("2026-11-28"));
  REQUIRE(past.size() == 1);
  CHECK(past[0].message ==
        "p.yaml:4:5: exception for MG-ST-GAP expired on 2026-11-28 and no longer applies");
}

TEST_CASE("lint: settings with no effect", "[policy][lint]") {
  auto empty = Lint("formats:\n  allow: []\n");
  REQUIRE(empty.size() == 1);
  CHECK(empty[0].message == "p.yaml:4:3: formats.allow is empty: every file is rejected");

  auto keys = Lint("signatures:\n  threshold: 1\n  keys:\n    - name: a\n      publicKey: |\n" +
                   IndentedPem(1, "        "));
  REQUIRE(keys.size() == 2);
  CHECK(keys[0].message ==
        "p.yaml:5:3: keys are listed but signatures.required is not true: an unsigned file passes");
  CHECK(keys[1].message ==
        "p.yaml:4:3: signatures.threshold has no effect unless signatures.required is true");

  auto safe = Lint("pickle: {extraAllowedGlobals: [collections.OrderedDict]}\n");
  REQUIRE(safe.size() == 1);
  CHECK(safe[0].message ==
        "p.yaml:3:32: \"collections.OrderedDict\" is already allowed by the scanner");
}

TEST_CASE("lint: signatures.accept, model and minVersion", "[policy][lint][signatures]") {
  const std::string key = "  keys:\n    - name: a\n      publicKey: |\n" + IndentedPem(1, "        ");
  // Set while signatures are not required: they require nothing.
  auto idle = Lint("signatures:\n  accept: [detached]\n  model: acme/llm\n  minVersion: 2\n");
  REQUIRE(idle.size() == 3);
  CHECK(idle[0].message ==
        "p.yaml:4:3: signatures.accept has no effect unless signatures.required is true");
  CHECK(idle[1].message ==
        "p.yaml:5:3: signatures.model has no effect unless signatures.required is true");
  CHECK(idle[2].message ==
        "p.yaml:6:3: signatures.minVersion has no effect unless signatures.required is true");
  CHECK(idle[0].level == policy::Problem::Level::kWarning);

  // Rollback protection without an identity.
  auto version = Lint("signatures:\n  required: true\n  minVersion: 2\n" + key);
  REQUIRE(version.size() == 1);
  CHECK(version[0].message ==
        "p.yaml:5:3: signatures.minVersion without signatures.model: a trusted key's signature "
        "of another model with a higher version passes");
  CHECK(Lint("signatures:\n  required: true\n  model: acme/llm\n  minVersion: 2\n" + key).empty());

  // Only embedded signatures, while formats.allow admits files that cannot carry one.
  auto embedded = Lint("formats: {allow: [safetensors, gguf]}\nsignatures:\n  required: true\n"
                       "  accept: [embedded]\n" + key);
  REQUIRE(embedded.size() == 1);
  CHECK(embedded[0].message ==
        "p.yaml:6:3: signatures.accept is [embedded] but formats.allow lists gguf, which carries "
        "no embedded signature: every such file is rejected");
  CHECK(Lint("formats: {allow: [safetensors]}\nsignatures:\n  required: true\n"
             "  accept: [embedded]\n" + key).empty());
  CHECK(Lint("formats: {allow: [safetensors, gguf]}\nsignatures:\n  required: true\n"
             "  accept: [detached, embedded]\n" + key).empty());
}
