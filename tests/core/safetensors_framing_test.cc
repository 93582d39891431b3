// Framing rules: the length field, header start, UTF-8, JSON syntax, and
// what may follow the JSON object inside the header.
#include <catch2/catch.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "support/st_builder.h"
#include "support/st_expect.h"

namespace core = modelgate::core;
using modelgate::testing::Bytes;
using modelgate::testing::Parse;

namespace {
// A one-tensor header used where a realistic entry is needed.
const std::string kOneTensor =
    R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})";
}  // namespace

TEST_CASE("file shorter than 8 bytes is truncated at offset 0", "[core][st][framing]") {
  for (size_t size = 0; size < 8; ++size) {
    CAPTURE(size);
    std::vector<uint8_t> file(size, 0);
    MG_CHECK_ERROR(Parse(file), core::Code::kStTruncated, 0);
  }
}

TEST_CASE("header length 0 is empty", "[core][st][framing]") {
  MG_CHECK_ERROR(Parse(std::vector<uint8_t>(8, 0)), core::Code::kStHeaderEmpty, 0);
  auto with_data = StBuilder().Header("{}").LengthField(0).Build();
  MG_CHECK_ERROR(Parse(with_data), core::Code::kStHeaderEmpty, 0);
}

TEST_CASE("header length larger than the file", "[core][st][framing]") {
  // "{}" is 2 bytes; claiming 3 runs one byte past the end.
  auto one_past = StBuilder().Header("{}").LengthField(3).Build();
  MG_CHECK_ERROR(Parse(one_past), core::Code::kStHeaderLength, 0);
  auto far_past = StBuilder().Header("{}").LengthField(1'000'000).Build();
  MG_CHECK_ERROR(Parse(far_past), core::Code::kStHeaderLength, 0);
  // N exactly the remaining bytes is fine.
  MG_REQUIRE_OK(Parse(StBuilder().Header("{}").LengthField(2).Build()));
}

TEST_CASE("header length shorter than the JSON cuts the JSON", "[core][st][framing]") {
  // The length field says 1: the header is "{" and "}" becomes data.
  auto file = StBuilder().Header("{}").LengthField(1).Build();
  auto r = Parse(file);
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code == core::Code::kStJsonSyntax);
}

TEST_CASE("default header limit: 100000001 is too large at offset 0", "[core][st][framing][limits]") {
  auto file = StBuilder().Header("{}").LengthField(100'000'001).Build();
  MG_CHECK_ERROR(Parse(file), core::Code::kStHeaderTooLarge, 0);
  // At the limit the length is allowed, so the next check (file size) fires.
  auto at_limit = StBuilder().Header("{}").LengthField(100'000'000).Build();
  MG_CHECK_ERROR(Parse(at_limit), core::Code::kStHeaderLength, 0);
}

TEST_CASE("header length 2^64-1 is too large at offset 0", "[core][st][framing]") {
  auto file = StBuilder().Header("{}").LengthField(UINT64_MAX).Build();
  MG_CHECK_ERROR(Parse(file), core::Code::kStHeaderTooLarge, 0);
  // 2^64-8 would wrap 8 + N to 0 if added unchecked.
  auto wrap = StBuilder().Header("{}").LengthField(UINT64_MAX - 7).Build();
  MG_CHECK_ERROR(Parse(wrap), core::Code::kStHeaderTooLarge, 0);
}

TEST_CASE("default header limit: a header of exactly 100000000 bytes passes", "[core][st][framing][limits][slow]") {
  auto file = StBuilder().HeaderBytes(100'000'000).Build();
  REQUIRE(file.size() == 100'000'008);
  auto r = Parse(file);
  MG_REQUIRE_OK(r);
  CHECK(r.value().header_bytes == 100'000'000);
  CHECK(r.value().data_start == 100'000'008);
  CHECK(r.value().tensors.empty());
}

TEST_CASE("header must start with an opening brace", "[core][st][framing]") {
  SECTION("leading space") {
    MG_CHECK_ERROR(Parse(StBuilder().Header(" {}").Build()), core::Code::kStHeaderStart, 8);
  }
  SECTION("leading newline") {
    MG_CHECK_ERROR(Parse(StBuilder().Header("\n{}").Build()), core::Code::kStHeaderStart, 8);
  }
  SECTION("UTF-8 byte order mark") {
    MG_CHECK_ERROR(Parse(StBuilder().Header("\xEF\xBB\xBF{}").Build()),
                   core::Code::kStHeaderStart, 8);
  }
  SECTION("array") {
    MG_CHECK_ERROR(Parse(StBuilder().Header("[]").Build()), core::Code::kStHeaderStart, 8);
  }
  SECTION("string") {
    MG_CHECK_ERROR(Parse(StBuilder().Header("\"{}\"").Build()), core::Code::kStHeaderStart, 8);
  }
  SECTION("NUL padding before the object") {
    MG_CHECK_ERROR(Parse(StBuilder().Header(std::string("\0{}", 3)).Build()),
                   core::Code::kStHeaderStart, 8);
  }
}

TEST_CASE("header must be valid UTF-8", "[core][st][framing]") {
  SECTION("invalid byte in a metadata value") {
    auto b = StBuilder().Header("{\"__metadata__\":{\"k\":\"a\xFF\"}}");
    MG_CHECK_ERROR(Parse(b.Build()), core::Code::kStHeaderUtf8, b.At("\xFF"));
  }
  SECTION("invalid byte in the padding after the object") {
    auto b = StBuilder().Header("{}  \x80");
    MG_CHECK_ERROR(Parse(b.Build()), core::Code::kStHeaderUtf8, 8 + 4);
  }
  SECTION("overlong encoding of '/'") {
    auto b = StBuilder().Header("{\"__metadata__\":{\"k\":\"\xC0\xAF\"}}");
    MG_CHECK_ERROR(Parse(b.Build()), core::Code::kStHeaderUtf8, b.At("\xC0"));
  }
  SECTION("UTF-16 surrogate encoded in UTF-8") {
    auto b = StBuilder().Header("{\"__metadata__\":{\"k\":\"\xED\xA0\x80\"}}");
    MG_CHECK_ERROR(Parse(b.Build()), core::Code::kStHeaderUtf8, b.At("\xED"));
  }
  SECTION("code point above U+10FFFF") {
    auto b = StBuilder().Header("{\"__metadata__\":{\"k\":\"\xF4\x90\x80\x80\"}}");
    MG_CHECK_ERROR(Parse(b.Build()), core::Code::kStHeaderUtf8, b.At("\xF4"));
  }
  SECTION("sequence cut by the end of the header") {
    auto b = StBuilder().Header("{} \xE2\x82");
    MG_CHECK_ERROR(Parse(b.Build()), core::Code::kStHeaderUtf8, 8 + 3);
  }
  SECTION("valid multi-byte text is accepted") {
    auto b = StBuilder().Metadata("k", "caf\xC3\xA9 \xF0\x9F\x98\x80");
    auto r = Parse(b.Build());
    MG_REQUIRE_OK(r);
    REQUIRE(r.value().metadata.size() == 1);
    CHECK(r.value().metadata[0].second == "caf\xC3\xA9 \xF0\x9F\x98\x80");
  }
}

TEST_CASE("JSON syntax errors point at the offending byte", "[core][st][framing]") {
  SECTION("NaN literal") {
    auto b = StBuilder().Header(
        R"({"w":{"dtype":"F32","shape":[NaN],"data_offsets":[0,4]}})").DataBytes(4);
    MG_CHECK_ERROR(Parse(b.Build()), core::Code::kStJsonSyntax, b.At("NaN"));
  }
  SECTION("Infinity literal") {
    auto b = StBuilder().Header(
        R"({"w":{"dtype":"F32","shape":[Infinity],"data_offsets":[0,4]}})").DataBytes(4);
    MG_CHECK_ERROR(Parse(b.Build()), core::Code::kStJsonSyntax, b.At("Infinity"));
  }
  SECTION("garbage after the object") {
    MG_CHECK_ERROR(Parse(StBuilder().Header("{}x").Build()), core::Code::kStJsonSyntax, 8 + 2);
  }
  SECTION("a second object after the first") {
    MG_CHECK_ERROR(Parse(StBuilder().Header("{} {}").Build()), core::Code::kStJsonSyntax, 8 + 3);
  }
  SECTION("NUL padding after the object") {
    auto b = StBuilder().Header("{}").Pad(6, '\0');
    MG_CHECK_ERROR(Parse(b.Build()), core::Code::kStJsonSyntax, 8 + 2);
  }
  SECTION("a second object hidden after a NUL") {
    // A NUL ends a C string, not JSON text: a reader that stops there sees
    // "{}", the reference sees trailing characters.
    auto b = StBuilder().Header(std::string("{}\0", 3) +
                                R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})");
    MG_CHECK_ERROR(Parse(b.Build()), core::Code::kStJsonSyntax, 8 + 2);
  }
  SECTION("a NUL inside the object") {
    auto b = StBuilder().Header(std::string("{\0}", 3));
    MG_CHECK_ERROR(Parse(b.Build()), core::Code::kStJsonSyntax, 8 + 1);
  }
  SECTION("comment") {
    MG_CHECK_ERROR(Parse(StBuilder().Header("{/**/}").Build()), core::Code::kStJsonSyntax, 8 + 1);
  }
  SECTION("single-quoted key") {
    MG_CHECK_ERROR(Parse(StBuilder().Header("{'a':1}").Build()), core::Code::kStJsonSyntax, 8 + 1);
  }
  SECTION("trailing comma") {
    auto b = StBuilder().Header(R"({"__metadata__":{},})");
    MG_CHECK_ERROR(Parse(b.Build()), core::Code::kStJsonSyntax, b.At(",}") + 1);
  }
  SECTION("raw control character inside a string") {
    auto b = StBuilder().Header("{\"__metadata__\":{\"k\":\"a\x01\"}}");
    MG_CHECK_ERROR(Parse(b.Build()), core::Code::kStJsonSyntax, b.At("\x01"));
  }
  SECTION("unterminated object") {
    auto file = StBuilder().Header(R"({"__metadata__":{})").Build();
    MG_CHECK_CODE(Parse(file), core::Code::kStJsonSyntax, file.size());
  }
  SECTION("lone surrogate escape") {
    auto file = StBuilder().Header(R"({"__metadata__":{"k":"\ud800"}})").Build();
    MG_CHECK_CODE(Parse(file), core::Code::kStJsonSyntax, file.size());
  }
}

TEST_CASE("JSON whitespace after the object is accepted", "[core][st][framing]") {
  for (std::string tail : {" ", "\t", "\n", "\r", " \t\r\n  \n", "      "}) {
    CAPTURE(tail);
    auto file = StBuilder().Header(kOneTensor + tail).DataBytes(4).Build();
    auto r = Parse(file);
    MG_REQUIRE_OK(r);
    CHECK(r.value().header_bytes == kOneTensor.size() + tail.size());
    REQUIRE(r.value().tensors.size() == 1);
  }
}

TEST_CASE("non-JSON whitespace after the object is rejected", "[core][st][framing]") {
  // Vertical tab and form feed are whitespace to C, not to JSON.
  for (std::string tail : {"\v", "\f"}) {
    CAPTURE(tail);
    auto file = StBuilder().Header("{} " + tail).Build();
    MG_CHECK_ERROR(Parse(file), core::Code::kStJsonSyntax, 8 + 3);
  }
}

TEST_CASE("the empty header with no data is accepted", "[core][st][framing]") {
  auto file = StBuilder().Header("{}").Build();
  REQUIRE(file.size() == 10);
  auto r = Parse(file);
  MG_REQUIRE_OK(r);
  const core::Safetensors& st = r.value();
  CHECK(st.file_size == 10);
  CHECK(st.header_bytes == 2);
  CHECK(st.data_start == 10);
  CHECK(st.data_bytes() == 0);
  CHECK_FALSE(st.has_metadata);
  CHECK(st.tensors.empty());
  CHECK(st.metadata.empty());
  CHECK(core::CoveredBytes(st) == 10);
}

TEST_CASE("the empty header padded to 8 bytes like the reference writer is accepted", "[core][st][framing]") {
  auto file = StBuilder().Header("{}").AlignTo8().Build();
  REQUIRE(file.size() == 16);
  auto r = Parse(file);
  MG_REQUIRE_OK(r);
  CHECK(r.value().header_bytes == 8);
  CHECK(r.value().data_start == 16);
}
