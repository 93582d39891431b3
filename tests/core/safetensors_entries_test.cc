// Header content rules: names, duplicates, __metadata__, tensor entry shape
// and field types, dtypes.
#include <catch2/catch.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "support/st_builder.h"
#include "support/st_expect.h"

namespace core = modelgate::core;
using modelgate::testing::Parse;

namespace {
// kEntry is a valid 4-byte F32 entry body at [0,4).
const std::string kEntry = R"({"dtype":"F32","shape":[1],"data_offsets":[0,4]})";
// kEntry2 is the same at [4,8).
const std::string kEntry2 = R"({"dtype":"F32","shape":[1],"data_offsets":[4,8]})";
}  // namespace

// ---- names ---------------------------------------------------------------

TEST_CASE("bad tensor names are rejected at the name", "[core][st][names]") {
  struct Case {
    const char* what;
    std::string key_json;
  };
  const std::vector<Case> cases = {
      {"empty", R"("")"},
      {"escaped NUL", R"("a\u0000b")"},
      {"escaped NUL alone", R"("\u0000")"},
      {"escaped newline", R"("a\nb")"},
      {"escaped tab", R"("a\tb")"},
      {"escaped U+001F", R"("a\u001fb")"},
      {"escaped carriage return at the end", R"("ab\r")"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.what);
    auto b = StBuilder().RawEntry(c.key_json, kEntry, 4);
    MG_CHECK_ERROR(Parse(b.Build()), core::Code::kStBadName, b.At(c.key_json));
  }
}

TEST_CASE("unusual but clean tensor names are accepted unescaped", "[core][st][names]") {
  auto b = StBuilder()
               .RawEntry(R"("\u00e9t\u00e9")", kEntry, 4)
               .RawEntry(R"("a\"b\\c\/d")", kEntry2, 8);
  auto r = Parse(b.Build());
  MG_REQUIRE_OK(r);
  REQUIRE(r.value().tensors.size() == 2);
  CHECK(r.value().tensors[0].name == "\xC3\xA9t\xC3\xA9");
  CHECK(r.value().tensors[1].name == "a\"b\\c/d");
}

// ---- duplicates ----------------------------------------------------------

TEST_CASE("duplicate tensor names are rejected at the second", "[core][st][duplicates]") {
  SECTION("same spelling") {
    auto b = StBuilder().RawEntry(R"("w")", kEntry, 4).RawEntry(R"("w")", kEntry2, 8);
    MG_CHECK_ERROR(Parse(b.Build()), core::Code::kStDuplicateTensor, b.AtNth(R"("w")", 1));
  }
  SECTION("same name after unescaping") {
    auto b = StBuilder().RawEntry(R"("w")", kEntry, 4).RawEntry(R"("\u0077")", kEntry2, 8);
    MG_CHECK_ERROR(Parse(b.Build()), core::Code::kStDuplicateTensor, b.At(R"("\u0077")"));
  }
  SECTION("identical entries") {
    auto b = StBuilder().RawEntry(R"("w")", kEntry, 4).RawEntry(R"("w")", kEntry, 4);
    MG_CHECK_ERROR(Parse(b.Build()), core::Code::kStDuplicateTensor, b.AtNth(R"("w")", 1));
  }
}

TEST_CASE("duplicate keys inside __metadata__ are rejected at the second", "[core][st][duplicates]") {
  SECTION("same spelling") {
    auto b = StBuilder().MetadataRaw(R"({"k":"1","x":"2","k":"3"})");
    MG_CHECK_ERROR(Parse(b.Build()), core::Code::kStDuplicateKey, b.AtNth(R"("k")", 1));
  }
  SECTION("same key after unescaping") {
    auto b = StBuilder().MetadataRaw(R"({"k":"1","\u006b":"1"})");
    MG_CHECK_ERROR(Parse(b.Build()), core::Code::kStDuplicateKey, b.At(R"("\u006b")"));
  }
}

TEST_CASE("duplicate keys inside a tensor entry are rejected at the second", "[core][st][duplicates]") {
  for (std::string field : {"dtype", "shape", "data_offsets"}) {
    CAPTURE(field);
    std::string body = R"({"dtype":"F32","shape":[1],"data_offsets":[0,4],)";
    if (field == "dtype") body += R"("dtype":"F32"})";
    if (field == "shape") body += R"("shape":[1]})";
    if (field == "data_offsets") body += R"("data_offsets":[0,4]})";
    auto b = StBuilder().RawEntry(R"("w")", body, 4);
    MG_CHECK_ERROR(Parse(b.Build()), core::Code::kStDuplicateKey,
                   b.AtNth("\"" + field + "\"", 1));
  }
}

TEST_CASE("a second __metadata__ is a duplicate key", "[core][st][duplicates][metadata]") {
  SECTION("same spelling") {
    auto b = StBuilder().Header(R"({"__metadata__":{"a":"1"},"__metadata__":{"a":"1"}})");
    MG_CHECK_ERROR(Parse(b.Build()), core::Code::kStDuplicateKey,
                   b.AtNth(R"("__metadata__")", 1));
  }
  SECTION("escaped after plain") {
    auto b = StBuilder().Header(R"({"__metadata__":{"a":"1"},"\u005f_metadata__":{"b":"2"}})");
    MG_CHECK_ERROR(Parse(b.Build()), core::Code::kStReservedEscaped,
                   b.At(R"("\u005f_metadata__")"));
  }
  SECTION("plain after escaped") {
    auto b = StBuilder().Header(R"({"\u005f_metadata__":{"b":"2"},"__metadata__":{"a":"1"}})");
    MG_CHECK_ERROR(Parse(b.Build()), core::Code::kStReservedEscaped,
                   b.At(R"("\u005f_metadata__")"));
  }
}

// ---- __metadata__ --------------------------------------------------------

TEST_CASE("the reserved key spelled with escapes is a differential", "[core][st][metadata]") {
  // The reference decodes "\u005f_metadata__" to __metadata__ and reads it as
  // metadata; a byte-matching parser reads a tensor named
  // "\u005f_metadata__". Either spelling of any escaped character is refused.
  for (const char* key : {R"("\u005f_metadata__")", R"("__metadata\u005f_")",
                          R"("\u005F\u005Fmetadata__")", R"("__m\u0065tadata__")"}) {
    CAPTURE(key);
    auto b = StBuilder().Header(std::string("{") + key + R"(:{"format":"pt"}})");
    MG_CHECK_ERROR(Parse(b.Build()), core::Code::kStReservedEscaped, b.At(key));
  }
  SECTION("written plainly it is metadata") {
    auto b = StBuilder().Header(R"({"__metadata__":{"format":"pt"}})");
    auto r = Parse(b.Build());
    MG_REQUIRE_OK(r);
    CHECK(r.value().has_metadata);
  }
  SECTION("an escaped tensor name that is not reserved is a tensor") {
    auto b = StBuilder().Header(
        R"({"\u0061":{"dtype":"U8","shape":[0],"data_offsets":[0,0]}})");
    auto r = Parse(b.Build());
    MG_REQUIRE_OK(r);
    REQUIRE(r.value().tensors.size() == 1);
    CHECK(r.value().tensors[0].name == "a");
  }
}

TEST_CASE("metadata is returned sorted bytewise and unescaped", "[core][st][metadata]") {
  auto b = StBuilder().MetadataRaw(
      R"({"z":"last","\u00e9":"caf\u00e9","a":"q\"uote\\d","B":"","format":"pt"})");
  auto r = Parse(b.Build());
  MG_REQUIRE_OK(r);
  CHECK(r.value().has_metadata);
  using Pair = std::pair<std::string, std::string>;
  const std::vector<Pair> want = {
      {"B", ""}, {"a", "q\"uote\\d"}, {"format", "pt"}, {"z", "last"},
      {"\xC3\xA9", "caf\xC3\xA9"}};
  CHECK(r.value().metadata == want);
}

TEST_CASE("an empty __metadata__ object is accepted", "[core][st][metadata]") {
  auto r = Parse(StBuilder().MetadataRaw("{}").Build());
  MG_REQUIRE_OK(r);
  CHECK(r.value().has_metadata);
  CHECK(r.value().metadata.empty());
}

TEST_CASE("__metadata__ that is not an object is rejected", "[core][st][metadata]") {
  for (std::string value : {"null", "\"x\"", "1", "[]", "[\"a\",\"b\"]", "true"}) {
    CAPTURE(value);
    auto b = StBuilder().MetadataRaw(value);
    auto file = b.Build();
    // At the __metadata__ key, or at its value.
    MG_CHECK_ERROR_ANY(Parse(file), core::Code::kStMetadataType,
                       b.At(R"("__metadata__")"), b.At(R"("__metadata__")") + 15);
  }
}

TEST_CASE("non-string metadata values are rejected", "[core][st][metadata]") {
  for (std::string value : {"null", "1", "1.5", "true", "{}", "[\"a\"]", "{\"x\":\"y\"}"}) {
    CAPTURE(value);
    auto b = StBuilder().MetadataRaw(R"({"ok":"v","k":)" + value + "}");
    // At the key "k", or at its value.
    MG_CHECK_ERROR_ANY(Parse(b.Build()), core::Code::kStMetadataType, b.At(R"("k")"),
                       b.At(R"("k")") + 4);
  }
}

// ---- tensor entries --------------------------------------------------------

TEST_CASE("a tensor entry that is not an object is rejected", "[core][st][entry]") {
  for (std::string value : {"[\"F32\",[1],[0,4]]", "[]", "\"F32\"", "4", "null", "true"}) {
    CAPTURE(value);
    auto b = StBuilder().RawEntry(R"("w")", value).DataBytes(4);
    MG_CHECK_ERROR(Parse(b.Build()), core::Code::kStEntryType, b.At(R"("w")"));
  }
}

TEST_CASE("extra fields in a tensor entry are rejected", "[core][st][entry]") {
  SECTION("after the known fields") {
    auto b = StBuilder().RawEntry(
        R"("w")", R"({"dtype":"F32","shape":[1],"data_offsets":[0,4],"offset":0})", 4);
    MG_CHECK_ERROR_ANY(Parse(b.Build()), core::Code::kStEntryUnknownField, b.At(R"("w")"),
                       b.At(R"("offset")"));
  }
  SECTION("before the known fields") {
    auto b = StBuilder().RawEntry(
        R"("w")", R"({"x":{},"dtype":"F32","shape":[1],"data_offsets":[0,4]})", 4);
    MG_CHECK_ERROR_ANY(Parse(b.Build()), core::Code::kStEntryUnknownField, b.At(R"("w")"),
                       b.At(R"("x")"));
  }
  SECTION("a field name differing only in case") {
    auto b = StBuilder().RawEntry(
        R"("w")", R"({"dtype":"F32","Shape":[1],"shape":[1],"data_offsets":[0,4]})", 4);
    MG_CHECK_ERROR_ANY(Parse(b.Build()), core::Code::kStEntryUnknownField, b.At(R"("w")"),
                       b.At(R"("Shape")"));
  }
}

TEST_CASE("a missing field in a tensor entry is rejected at the entry", "[core][st][entry]") {
  const std::vector<std::string> bodies = {
      R"({"shape":[1],"data_offsets":[0,4]})",
      R"({"dtype":"F32","data_offsets":[0,4]})",
      R"({"dtype":"F32","shape":[1]})",
      R"({})",
  };
  for (const std::string& body : bodies) {
    CAPTURE(body);
    auto b = StBuilder().RawEntry(R"("w")", body, 4).DataBytes(4);
    MG_CHECK_ERROR(Parse(b.Build()), core::Code::kStEntryMissingField, b.At(R"("w")"));
  }
}

TEST_CASE("dtype of the wrong JSON type is a field type error", "[core][st][entry]") {
  for (std::string dtype : {"{\"name\":\"F32\"}", "32", "null", "[\"F32\"]", "true"}) {
    CAPTURE(dtype);
    std::string body = R"({"dtype":)" + dtype + R"(,"shape":[1],"data_offsets":[0,4]})";
    auto b = StBuilder().RawEntry(R"("w")", body, 4);
    MG_CHECK_ERROR_ANY(Parse(b.Build()), core::Code::kStFieldType, b.At(R"("w")"),
                       b.At(R"("dtype")"), b.At(R"("dtype")") + 8);
  }
}

TEST_CASE("shape entries must be non-negative integers that fit 64 bits", "[core][st][entry]") {
  const std::vector<std::string> shapes = {
      "[-1]", "[1.0]", "[1e0]", "[0.5]", "[18446744073709551616]",
      "[99999999999999999999999]", "[\"1\"]", "[true]", "[null]", "\"1\"", "1", "{}",
      "[-0]",
  };
  for (const std::string& shape : shapes) {
    CAPTURE(shape);
    std::string body = R"({"dtype":"U8","shape":)" + shape + R"(,"data_offsets":[0,1]})";
    auto b = StBuilder().RawEntry(R"("w")", body, 1);
    MG_CHECK_ERROR_ANY(Parse(b.Build()), core::Code::kStFieldType, b.At(R"("w")"),
                       b.At(R"("shape")"), b.At(R"("shape")") + 8);
  }
}

TEST_CASE("a shape dimension of 2^64-1 is an integer and overflows the byte count", "[core][st][entry]") {
  auto b = StBuilder().RawEntry(
      R"("w")", R"({"dtype":"U8","shape":[18446744073709551615],"data_offsets":[0,1]})", 1);
  MG_CHECK_ERROR(Parse(b.Build()), core::Code::kStShapeOverflow, b.At(R"("w")"));
}

TEST_CASE("data_offsets must be two non-negative integers", "[core][st][entry]") {
  const std::vector<std::string> offsets = {
      "[4]", "[0,4,8]", "[]", "[-1,4]", "[0,4.0]", "[0,18446744073709551616]",
      "\"0,4\"", "{\"0\":0,\"1\":4}", "null", "[[0],[4]]", "[0,\"4\"]",
  };
  for (const std::string& value : offsets) {
    CAPTURE(value);
    std::string body = R"({"dtype":"F32","shape":[1],"data_offsets":)" + value + "}";
    auto b = StBuilder().RawEntry(R"("w")", body, 4).DataBytes(4);
    MG_CHECK_ERROR_ANY(Parse(b.Build()), core::Code::kStFieldType, b.At(R"("w")"),
                       b.At(R"("data_offsets")"), b.At(R"("data_offsets")") + 15);
  }
}

TEST_CASE("unknown dtypes are rejected at the entry", "[core][st][entry][dtype]") {
  for (std::string dtype : {"f32", "F128", "float32", "", "F32 ", " F32", "FLOAT", "F8_E4M3FN",
                            "bf16", "C128", "F32\\u0000"}) {
    CAPTURE(dtype);
    std::string body = R"({"dtype":")" + dtype + R"(","shape":[1],"data_offsets":[0,4]})";
    auto b = StBuilder().RawEntry(R"("w")", body, 4);
    MG_CHECK_ERROR(Parse(b.Build()), core::Code::kStUnknownDtype, b.At(R"("w")"));
  }
}

TEST_CASE("an escaped dtype spelling is the dtype", "[core][st][entry][dtype]") {
  // "\u0046\u0033\u0032" is "F32" after unescaping, as for the reference.
  auto b = StBuilder().RawEntry(
      R"("w")", R"({"dtype":"\u0046\u0033\u0032","shape":[1],"data_offsets":[0,4]})", 4);
  auto r = Parse(b.Build());
  MG_REQUIRE_OK(r);
  REQUIRE(r.value().tensors.size() == 1);
  CHECK(r.value().tensors[0].dtype == core::Dtype::kF32);
}

TEST_CASE("every known dtype is accepted with its size", "[core][st][entry][dtype]") {
  for (core::Dtype d : core::AllDtypes()) {
    std::string name(core::DtypeName(d));
    CAPTURE(name);
    // 8 elements: a whole number of bytes for every width.
    auto b = StBuilder().Tensor("w", name, {2, 4});
    auto r = Parse(b.Build());
    MG_REQUIRE_OK(r);
    REQUIRE(r.value().tensors.size() == 1);
    const core::TensorInfo& t = r.value().tensors[0];
    CHECK(t.dtype == d);
    CHECK(t.size_bytes() == core::DtypeBits(d));
    CHECK(t.ElementCount() == 8);
  }
}

TEST_CASE("fields may appear in any order", "[core][st][entry]") {
  auto b = StBuilder().RawEntry(
      R"("w")", R"({"data_offsets":[0,8],"shape":[2],"dtype":"F32"})", 8);
  auto r = Parse(b.Build());
  MG_REQUIRE_OK(r);
  REQUIRE(r.value().tensors.size() == 1);
  CHECK(r.value().tensors[0].shape == std::vector<uint64_t>{2});
  CHECK(r.value().tensors[0].end == 8);
}
