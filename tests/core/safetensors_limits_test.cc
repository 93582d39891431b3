// Every named limit at N (passes) and N+1 (rejected with its code), using
// tightened limits, plus the defaults where a test can afford them.
#include <catch2/catch.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "support/st_builder.h"
#include "support/st_expect.h"

namespace core = modelgate::core;
using modelgate::testing::Parse;

TEST_CASE("max_header_bytes: N passes and N+1 is rejected at offset 0", "[core][limits]") {
  core::Limits limits;
  limits.max_header_bytes = 64;
  auto at = StBuilder().HeaderBytes(64).Build();
  auto past = StBuilder().HeaderBytes(65).Build();
  MG_REQUIRE_OK(Parse(at, limits));
  MG_CHECK_ERROR(Parse(past, limits), core::Code::kStHeaderTooLarge, 0);
}

TEST_CASE("max_header_bytes is checked on the length field before the file size", "[core][limits]") {
  core::Limits limits;
  limits.max_header_bytes = 64;
  // Claims 65 bytes in a 10-byte file: the limit names the problem.
  auto file = StBuilder().Header("{}").LengthField(65).Build();
  MG_CHECK_ERROR(Parse(file, limits), core::Code::kStHeaderTooLarge, 0);
}

TEST_CASE("max_tensors: N passes and N+1 is rejected", "[core][limits]") {
  core::Limits limits;
  limits.max_tensors = 3;
  StBuilder at;
  for (int i = 0; i < 3; ++i) at.Tensor("t" + std::to_string(i), "F32", {1});
  auto r = Parse(at.Build(), limits);
  MG_REQUIRE_OK(r);
  CHECK(r.value().tensors.size() == 3);

  StBuilder past = at;
  past.Tensor("t3", "F32", {1});
  // At the entry that goes over.
  MG_CHECK_ERROR(Parse(past.Build(), limits), core::Code::kStTooManyTensors,
                 past.At(R"("t3")"));
}

TEST_CASE("max_tensors does not count __metadata__", "[core][limits]") {
  core::Limits limits;
  limits.max_tensors = 1;
  auto b = StBuilder().Metadata("k", "v").Tensor("w", "F32", {1});
  MG_REQUIRE_OK(Parse(b.Build(), limits));
}

TEST_CASE("max_rank: N passes and N+1 is rejected at the entry", "[core][limits]") {
  core::Limits limits;
  limits.max_rank = 4;
  MG_REQUIRE_OK(Parse(StBuilder().Tensor("w", "F32", {1, 1, 2, 1}).Build(), limits));
  auto b = StBuilder().Tensor("w", "F32", {1, 1, 2, 1, 1});
  MG_CHECK_ERROR(Parse(b.Build(), limits), core::Code::kStRankTooLarge, b.At(R"("w")"));
}

TEST_CASE("default max_rank: 64 passes and 65 is rejected", "[core][limits]") {
  std::vector<uint64_t> shape(64, 1);
  MG_REQUIRE_OK(Parse(StBuilder().Tensor("w", "F32", shape).Build()));
  shape.push_back(1);
  auto b = StBuilder().Tensor("w", "F32", shape);
  MG_CHECK_ERROR(Parse(b.Build()), core::Code::kStRankTooLarge, b.At(R"("w")"));
}

TEST_CASE("max_name_bytes: N passes and N+1 is rejected at the name", "[core][limits]") {
  core::Limits limits;
  limits.max_name_bytes = 8;
  SECTION("tensor name") {
    MG_REQUIRE_OK(Parse(StBuilder().Tensor("abcdefgh", "F32", {1}).Build(), limits));
    auto b = StBuilder().Tensor("abcdefghi", "F32", {1});
    MG_CHECK_ERROR(Parse(b.Build(), limits), core::Code::kStNameTooLong, b.At(R"("abcdefghi")"));
  }
  SECTION("counted in bytes after unescaping") {
    // Eight escaped ASCII letters: 48 bytes of JSON, 8 bytes of name.
    std::string eight;
    for (int i = 0; i < 8; ++i) eight += "\\u0061";
    auto at = StBuilder().RawEntry("\"" + eight + "\"",
                                   R"({"dtype":"F32","shape":[1],"data_offsets":[0,4]})", 4);
    MG_REQUIRE_OK(Parse(at.Build(), limits));
    // Four e-acute: 4 characters, 8 UTF-8 bytes; five: 10 bytes.
    auto four = StBuilder().Tensor("\xC3\xA9\xC3\xA9\xC3\xA9\xC3\xA9", "F32", {1});
    MG_REQUIRE_OK(Parse(four.Build(), limits));
    auto five = StBuilder().Tensor("\xC3\xA9\xC3\xA9\xC3\xA9\xC3\xA9\xC3\xA9", "F32", {1});
    MG_CHECK_ERROR(Parse(five.Build(), limits), core::Code::kStNameTooLong, five.At("\"\xC3"));
  }
  SECTION("metadata key") {
    // 16, not 8: "__metadata__" itself is 12 bytes (see the next test).
    limits.max_name_bytes = 16;
    MG_REQUIRE_OK(Parse(StBuilder().Metadata("abcdefghijklmnop", "v").Build(), limits));
    auto b = StBuilder().Metadata("abcdefghijklmnopq", "v");
    MG_CHECK_ERROR(Parse(b.Build(), limits), core::Code::kStNameTooLong,
                   b.At(R"("abcdefghijklmnopq")"));
  }
  SECTION("metadata values are not names") {
    limits.max_name_bytes = 16;
    MG_REQUIRE_OK(Parse(StBuilder().Metadata("k", std::string(100, 'v')).Build(), limits));
  }
}

TEST_CASE("max_name_bytes does not apply to the __metadata__ key itself", "[core][limits]") {
  // "__metadata__" is neither a tensor name nor a metadata key; a policy
  // tightening names below 12 bytes must not reject every file with metadata.
  core::Limits limits;
  limits.max_name_bytes = 8;
  MG_REQUIRE_OK(Parse(StBuilder().Metadata("k", "v").Tensor("w", "F32", {1}).Build(), limits));
}

TEST_CASE("default max_name_bytes: 65536 passes and 65537 is rejected", "[core][limits]") {
  std::string name(65'536, 'n');
  MG_REQUIRE_OK(Parse(StBuilder().Tensor(name, "F32", {1}).Build()));
  name += 'n';
  auto b = StBuilder().Tensor(name, "F32", {1});
  MG_CHECK_ERROR(Parse(b.Build()), core::Code::kStNameTooLong, 8 + 1);
}

TEST_CASE("max_json_depth: N passes and N+1 is rejected at the bracket", "[core][limits]") {
  // A valid header nests 3 deep: object > entry > shape array.
  auto valid = StBuilder().Tensor("w", "F32", {1});
  core::Limits limits;
  limits.max_json_depth = 3;
  MG_REQUIRE_OK(Parse(valid.Build(), limits));
  limits.max_json_depth = 2;
  MG_CHECK_ERROR(Parse(valid.Build(), limits), core::Code::kStJsonDepth, valid.At("[1]"));
}

TEST_CASE("max_json_depth: the limit is checked before the content", "[core][limits]") {
  // shape [[1]] nests 4 deep. Under a limit of 4 it is a type error; under 3
  // the depth limit fires first.
  auto b = StBuilder().RawEntry(
      R"("w")", R"({"dtype":"F32","shape":[[1]],"data_offsets":[0,4]})", 4);
  core::Limits limits;
  limits.max_json_depth = 4;
  auto r = Parse(b.Build(), limits);
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code == core::Code::kStFieldType);
  limits.max_json_depth = 3;
  MG_CHECK_ERROR(Parse(b.Build(), limits), core::Code::kStJsonDepth, b.At("[[1]]") + 1);
}

TEST_CASE("max_json_depth: metadata nests 2 deep", "[core][limits]") {
  auto b = StBuilder().Metadata("k", "v");
  core::Limits limits;
  limits.max_json_depth = 2;
  MG_REQUIRE_OK(Parse(b.Build(), limits));
  limits.max_json_depth = 1;
  MG_CHECK_ERROR(Parse(b.Build(), limits), core::Code::kStJsonDepth,
                 b.At(R"("__metadata__")") + 15);
}

TEST_CASE("deep nesting under default limits is rejected without recursion", "[core][limits]") {
  std::string deep = "{\"w\":" + std::string(200'000, '[') + std::string(200'000, ']') + "}";
  auto r = Parse(StBuilder().Header(deep).Build());
  REQUIRE_FALSE(r.ok());
  CHECK((r.error().code == core::Code::kStJsonDepth || r.error().code == core::Code::kStEntryType));
}

TEST_CASE("max_metadata_entries: N passes and N+1 is rejected at the key", "[core][limits]") {
  core::Limits limits;
  limits.max_metadata_entries = 2;
  auto at = StBuilder().Metadata("a", "1").Metadata("b", "2");
  auto r = Parse(at.Build(), limits);
  MG_REQUIRE_OK(r);
  CHECK(r.value().metadata.size() == 2);
  auto past = StBuilder().Metadata("a", "1").Metadata("b", "2").Metadata("c", "3");
  MG_CHECK_ERROR(Parse(past.Build(), limits), core::Code::kStTooManyKeys, past.At(R"("c")"));
}

TEST_CASE("limits of zero", "[core][limits]") {
  core::Limits limits;
  SECTION("max_tensors 0 still accepts a file with only metadata") {
    limits.max_tensors = 0;
    MG_REQUIRE_OK(Parse(StBuilder().Metadata("k", "v").Build(), limits));
    auto b = StBuilder().Tensor("w", "F32", {1});
    MG_CHECK_ERROR(Parse(b.Build(), limits), core::Code::kStTooManyTensors, b.At(R"("w")"));
  }
  SECTION("max_rank 0 allows only scalars") {
    limits.max_rank = 0;
    MG_REQUIRE_OK(Parse(StBuilder().Tensor("s", "F32", {}).Build(), limits));
    auto b = StBuilder().Tensor("w", "F32", {1});
    MG_CHECK_ERROR(Parse(b.Build(), limits), core::Code::kStRankTooLarge, b.At(R"("w")"));
  }
}
