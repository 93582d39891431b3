// signatures.accept, signatures.model, signatures.minVersion (issue 11,
// point 5): strict parsing at the exact line:column, defaults, and the
// policy's SHA-256 over the bytes parsed.
#include <catch2/catch.hpp>

#include "policy_test_util.h"

namespace core = modelgate::core;
namespace policy = modelgate::policy;
using modelgate::testing::IndentedPem;
using modelgate::testing::kHead;
using modelgate::testing::ParseError;
using modelgate::testing::TempDir;
using modelgate::testing::WriteFile;

namespace {

// Sig is a policy whose signatures mapping holds `rest` (line 5 on) and one key.
std::string Sig(std::string_view rest) {
  return std::string(kHead) + "signatures:\n  required: true\n" + std::string(rest) +
         "  keys:\n    - name: k\n      publicKey: |\n" + IndentedPem(1, "        ");
}

policy::Policy Parsed(std::string_view rest) {
  auto r = policy::ParsePolicy(Sig(rest), "p.yaml", "");
  INFO((r.ok() ? "" : r.error().message));
  REQUIRE(r.ok());
  return r.value();
}

using Kinds = std::vector<policy::SignatureKind>;
constexpr auto kDetached = policy::SignatureKind::kDetached;
constexpr auto kEmbedded = policy::SignatureKind::kEmbedded;

}  // namespace

TEST_CASE("signatures: accept, model, minVersion default to any kind, any model, any version",
          "[policy][parse][signatures]") {
  auto p = Parsed("");
  CHECK(p.accept == Kinds{kDetached, kEmbedded});
  CHECK_FALSE(p.model);
  CHECK_FALSE(p.min_version);
  CHECK(policy::SignatureKindName(kDetached) == "detached");
  CHECK(policy::SignatureKindName(kEmbedded) == "embedded");
}

TEST_CASE("signatures.accept: a list of detached / embedded, in the order written",
          "[policy][parse][signatures]") {
  CHECK(Parsed("  accept: [detached]\n").accept == Kinds{kDetached});
  CHECK(Parsed("  accept: [embedded]\n").accept == Kinds{kEmbedded});
  CHECK(Parsed("  accept: [embedded, detached]\n").accept == Kinds{kEmbedded, kDetached});
  CHECK(Parsed("  accept:\n    - detached\n    - embedded\n").accept == Kinds{kDetached, kEmbedded});
  CHECK(Parsed("  accept: [detached]\n").accept_where.line == 5);

  CHECK(ParseError(Sig("  accept: []\n")) ==
        "p.yaml:5:11: signatures.accept is empty: no signature could satisfy the policy (list "
        "detached, embedded or both)");
  CHECK(ParseError(Sig("  accept: [detached, detached]\n")) ==
        "p.yaml:5:22: signatures.accept: \"detached\" is listed twice");
  CHECK(ParseError(Sig("  accept: [embedded, sigstore]\n")) ==
        "p.yaml:5:22: signatures.accept entry must be detached or embedded, not \"sigstore\"");
  CHECK(ParseError(Sig("  accept: [Detached]\n")) ==
        "p.yaml:5:12: signatures.accept entry must be detached or embedded, not \"Detached\"");
  CHECK(ParseError(Sig("  accept: detached\n")) ==
        "p.yaml:5:11: signatures.accept must be a list, not the value \"detached\"");
  CHECK(ParseError(Sig("  accept: [[detached]]\n")) ==
        "p.yaml:5:12: signatures.accept entry must be a string, not a list");
  CHECK(ParseError(Sig("  accept: [detached]\n  accept: [embedded]\n")).starts_with("p.yaml:6:3: "));
}

TEST_CASE("signatures.model: a non-empty UTF-8 string of at most kMaxModelBytes",
          "[policy][parse][signatures]") {
  auto p = Parsed("  model: acme/llm\n");
  REQUIRE(p.model);
  CHECK(*p.model == "acme/llm");
  CHECK(p.model_where.line == 5);
  CHECK(*Parsed("  model: \"3\"\n").model == "3");

  CHECK(ParseError(Sig("  model: \"\"\n")) ==
        "p.yaml:5:10: signatures.model must not be empty (omit it to accept any model)");
  CHECK(ParseError(Sig("  model: 3\n")) ==
        "p.yaml:5:10: signatures.model must be a string, but \"3\" reads as a number in YAML; "
        "quote it");
  CHECK(ParseError(Sig("  model: yes\n")).starts_with("p.yaml:5:10: signatures.model must be a "
                                                     "string, but \"yes\" reads as a boolean"));
  CHECK(ParseError(Sig("  model: [a]\n")) ==
        "p.yaml:5:10: signatures.model must be a string, not a list");
  CHECK(ParseError(Sig("  model:\n")) ==
        "p.yaml:6:3: signatures.model must be a string, not nothing (null)");
  // A lone surrogate escape, which would decode to bytes that are not
  // UTF-8, is refused already by the YAML layer.
  CHECK(ParseError(Sig("  model: \"a\\ud800\"\n")) == "p.yaml:5:18: invalid unicode: 55296");
  const std::string at_limit(policy::kMaxModelBytes, 'm');
  CHECK(*Parsed("  model: " + at_limit + "\n").model == at_limit);
  CHECK(ParseError(Sig("  model: " + at_limit + "m\n")) ==
        "p.yaml:5:10: signatures.model is longer than 1024 bytes");
}

TEST_CASE("signatures.minVersion: a decimal integer of at least 1", "[policy][parse][signatures]") {
  auto p = Parsed("  minVersion: 3\n");
  REQUIRE(p.min_version);
  CHECK(*p.min_version == 3);
  CHECK(p.min_version_where.line == 5);
  CHECK(*Parsed("  minVersion: 1\n").min_version == 1);
  CHECK(*Parsed("  minVersion: 18446744073709551615\n").min_version == UINT64_MAX);

  CHECK(ParseError(Sig("  minVersion: 0\n")) ==
        "p.yaml:5:15: signatures.minVersion 0 requires nothing (every version is >= 0); omit it "
        "or write at least 1");
  CHECK(ParseError(Sig("  minVersion: 18446744073709551616\n"))
            .starts_with("p.yaml:5:15: signatures.minVersion must be a non-negative decimal integer"));
  CHECK(ParseError(Sig("  minVersion: -1\n"))
            .starts_with("p.yaml:5:15: signatures.minVersion must be a non-negative decimal integer"));
  CHECK(ParseError(Sig("  minVersion: 03\n"))
            .starts_with("p.yaml:5:15: signatures.minVersion must be a non-negative decimal integer"));
  CHECK(ParseError(Sig("  minVersion: \"3\"\n")) ==
        "p.yaml:5:15: signatures.minVersion must be a non-negative integer, not the string \"3\"");
  CHECK(ParseError(Sig("  minversion: 3\n"))
            .starts_with("p.yaml:5:3: unknown key \"minversion\" in signatures (allowed: required, "
                         "threshold, accept, model, minVersion, keys)"));
}

TEST_CASE("the policy's sha256 is over the exact bytes parsed", "[policy][parse][load]") {
  const std::string text = Sig("  model: acme/llm\n");
  auto r = policy::ParsePolicy(text, "p.yaml", "");
  REQUIRE(r.ok());
  CHECK(r.value().sha256 ==
        core::Sha256({reinterpret_cast<const uint8_t*>(text.data()), text.size()}));
  // One more byte (a trailing comment) is another policy for the record.
  auto other = policy::ParsePolicy(text + "#\n", "p.yaml", "");
  REQUIRE(other.ok());
  CHECK(other.value().sha256 != r.value().sha256);

  TempDir dir;
  WriteFile(dir / "policy.yaml", text);
  auto loaded = policy::LoadPolicy(dir / "policy.yaml");
  REQUIRE(loaded.ok());
  CHECK(loaded.value().sha256 == r.value().sha256);
}
