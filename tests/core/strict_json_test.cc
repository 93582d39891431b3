#include <catch2/catch.hpp>

#include "modelgate/strict_json.h"

namespace {
using modelgate::core::Code;
using modelgate::core::ParseStrictJson;
}  // namespace

TEST_CASE("ParseStrictJson accepts one plain JSON value", "[strict_json]") {
  auto r = ParseStrictJson(R"({"a": [1, "x", {"b": null}], "c": true})", 8, Code::kSigBadRecord, "doc");
  REQUIRE(r.ok());
  CHECK(r.value()["a"][1] == "x");
  CHECK(r.value()["c"] == true);
}

TEST_CASE("ParseStrictJson rejects a duplicate key at any depth, after unescaping", "[strict_json]") {
  for (const char* text : {R"({"a": 1, "a": 2})", R"({"x": {"a": 1, "\u0061": 2}})",
                           R"([{"k": 1}, {"k": 2, "k": 3}])"}) {
    auto r = ParseStrictJson(text, 8, Code::kSigBadRecord, "doc");
    INFO(text);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code == Code::kSigBadRecord);
    CHECK(r.error().message.rfind("doc: duplicate key", 0) == 0);
  }
}

TEST_CASE("ParseStrictJson bounds nesting at max_depth and max_depth + 1", "[strict_json]") {
  const std::string three = "[[[]]]";
  CHECK(ParseStrictJson(three, 3, Code::kSigBadRecord, "doc").ok());
  auto r = ParseStrictJson("[[[[]]]]", 3, Code::kSigBadRecord, "doc");
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().message == "doc: nested deeper than 3");
}

TEST_CASE("ParseStrictJson names a syntax error's byte and rejects trailing bytes", "[strict_json]") {
  auto r = ParseStrictJson(R"({"a": 1} x)", 8, Code::kIoRead, "index");
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code == Code::kIoRead);
  CHECK(r.error().message.find("syntax error at byte") != std::string::npos);
  CHECK_FALSE(ParseStrictJson("{\"a\": \"\xff\"}", 8, Code::kIoRead, "index").ok());  // not UTF-8
  CHECK_FALSE(ParseStrictJson("", 8, Code::kIoRead, "index").ok());
}
