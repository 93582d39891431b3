// The one-pass header parse (issue 16): every header it accepts, the SAX
// parse accepts with the same table; every header it refuses is judged by
// the SAX parse (same rule, offset and message); the table is compact; the
// release callback walks forward through the header.
#include <catch2/catch.hpp>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "support/st_builder.h"
#include "support/st_expect.h"

namespace core = modelgate::core;
using modelgate::testing::Parse;

namespace {

std::vector<uint8_t> File(const std::string& header, uint64_t data_bytes) {
  return StBuilder().Header(header).DataBytes(data_bytes).Build();
}

// CheckSame: ParseSafetensors and the SAX parse give one answer.
void CheckSame(const std::vector<uint8_t>& file, const core::Limits& limits = core::Limits{}) {
  auto fast = core::ParseSafetensors(file, limits);
  auto sax = core::ParseSafetensorsSax(file, limits);
  REQUIRE(fast.ok() == sax.ok());
  if (!fast.ok()) {
    CHECK(fast.error().code == sax.error().code);
    CHECK(fast.error().offset == sax.error().offset);
    CHECK(fast.error().message == sax.error().message);
    return;
  }
  const core::Safetensors& a = fast.value();
  const core::Safetensors& b = sax.value();
  CHECK(a.header_bytes == b.header_bytes);
  CHECK(a.data_start == b.data_start);
  CHECK(a.has_metadata == b.has_metadata);
  CHECK(a.metadata == b.metadata);
  REQUIRE(a.tensors.size() == b.tensors.size());
  for (size_t i = 0; i < a.tensors.size(); ++i) {
    INFO("tensor " << i);
    CHECK(a.tensors[i].name == b.tensors[i].name);
    CHECK(a.tensors[i].dtype == b.tensors[i].dtype);
    CHECK(a.tensors[i].shape == b.tensors[i].shape);
    CHECK(a.tensors[i].begin == b.tensors[i].begin);
    CHECK(a.tensors[i].end == b.tensors[i].end);
    CHECK(a.tensors[i].entry_offset == b.tensors[i].entry_offset);
    CHECK(a.tensors[i].data_start == b.tensors[i].data_start);
  }
}

}  // namespace

TEST_CASE("one-pass parse: valid headers read as the SAX parse reads them", "[core][st][onepass]") {
  SECTION("escapes in names, keys, dtype and metadata") {
    auto file = File(
        R"({"\u0061\"b\\c\/d\b\f\n":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
        R"("\ud83d\ude00":{"d\u0074ype":"\u0046\u0031\u0036","shape":[2],"data_offsets":[4,8]},)"
        R"("__metadata__":{"k\u00e9y":"v\u0000\r\t","a":"\ud834\udd1e"}})",
        8);
    CheckSame(file);
    auto r = core::ParseSafetensors(file, core::Limits{});
    REQUIRE_FALSE(r.ok());  // a name with control characters (\b \f \n)
  }
  SECTION("escaped names that are valid") {
    auto file = File(
        R"({"\u0061\"b\\c\/d":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
        R"("\ud83d\ude00":{"d\u0074ype":"\u0046\u0031\u0036","shape":[2],"data_offsets":[4,8]},)"
        R"("__metadata__":{"k\u00e9y":"v\u0000\r\t","a":"\ud834\udd1e"}})",
        8);
    CheckSame(file);
    auto r = core::ParseSafetensors(file, core::Limits{});
    MG_REQUIRE_OK(r);
    CHECK(r.value().tensors[0].name == "a\"b\\c/d");
    CHECK(r.value().tensors[1].name == "\xF0\x9F\x98\x80");
    CHECK(r.value().tensors[1].dtype == core::Dtype::kF16);
    CHECK(r.value().metadata[0].second == "\xF0\x9D\x84\x9E");
    CHECK(r.value().metadata[1].second == std::string("v\0\r\t", 4));
  }
  SECTION("JSON whitespace everywhere it may be") {
    CheckSame(File(" {\n\t\"w\" :\r{ \"shape\" : [ 2 , 3 ] , \"dtype\" : \"U8\" , "
                   "\"data_offsets\" : [ 0 , 6 ] } , \"__metadata__\" : { } } \n\t\r ",
                   6));
    auto ok = File("{\n\t\"w\" :\r{ \"shape\" : [ 2 , 3 ] , \"dtype\" : \"U8\" , "
                   "\"data_offsets\" : [ 0 , 6 ] } , \"__metadata__\" : { } } \n\t\r ",
                   6);
    CheckSame(ok);
    MG_REQUIRE_OK(core::ParseSafetensors(ok, core::Limits{}));
  }
  SECTION("entries out of data order, scalars, empty tensors, ties by name") {
    CheckSame(File(R"({"c":{"dtype":"F64","shape":[],"data_offsets":[8,16]},)"
                   R"("z":{"dtype":"U8","shape":[0,5],"data_offsets":[8,8]},)"
                   R"("y":{"dtype":"U8","shape":[0],"data_offsets":[8,8]},)"
                   R"("a":{"dtype":"I64","shape":[1],"data_offsets":[0,8]}})",
                   16));
  }
  SECTION("the largest numbers, and a zero dimension beside them") {
    CheckSame(File(R"({"w":{"dtype":"U8","shape":[18446744073709551615,0],"data_offsets":[0,0]}})", 0));
  }
  SECTION("sub-byte dtypes in whole bytes") {
    CheckSame(File(R"({"f4":{"dtype":"F4","shape":[2,3],"data_offsets":[0,3]},)"
                   R"("b":{"dtype":"BOOL","shape":[3],"data_offsets":[3,6]}})",
                   6));
  }
}

TEST_CASE("one-pass parse: what it refuses is named by the SAX parse", "[core][st][onepass]") {
  for (const char* header : {
           R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"w":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
           R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"\u0077":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
           R"({"w":{"dtype":"F32","shape":[01],"data_offsets":[0,4]}})",
           R"({"w":{"dtype":"F32","shape":[1.0],"data_offsets":[0,4]}})",
           R"({"w":{"dtype":"F32","shape":[1e0],"data_offsets":[0,4]}})",
           R"({"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})",
           R"({"w":{"dtype":"F32","shape":[-0],"data_offsets":[0,4]}})",
           R"({"w":{"dtype":"F32","shape":[18446744073709551616],"data_offsets":[0,4]}})",
           R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4,4]}})",
           R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0]}})",
           R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"dtype":"F32"}})",
           R"({"w":{"dtype":"F32","shape":[1]}})",
           R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"x":1}})",
           R"({"w":{"dtype":"F31","shape":[1],"data_offsets":[0,4]}})",
           R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})",
           R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[4,0]}})",
           R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"v":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})",
           R"({"w":{"dtype":"F4","shape":[1],"data_offsets":[0,1]}})",
           R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
           R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}} x)",
           R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},})",
           R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]})",
           R"({"\u005f_metadata__":{}})",
           R"({"__metadata__":{},"__metadata__":{}})",
           R"({"__metadata__":{"a":"1","a":"2"}})",
           R"({"__metadata__":{"a":1}})",
           R"({"__metadata__":{"":"1"}})",
           R"({"__metadata__":null})",
           R"({"":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})",
           "{\"a\x7f\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}",
           "{\"a\x01\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}",
           R"({"\ud800":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})",
           R"({"\udc00":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})",
           R"({"\ud800\u0041":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})",
           R"({"\x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})",
           R"({"\u00g0":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})",
           "{\"\xC3\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}",
           R"({"w":[]})",
           R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"b":{"dtype":"","shape":[1],"data_offsets":[1,2]}})",
           R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"b":{"dtype":"U","shape":[1],"data_offsets":[1,2]}})",
           R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"b":{"dtype":"U8 ","shape":[1],"data_offsets":[1,2]}})",
           R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"b":{"dtype":"I8","shape":[1],"data_offsets":[1,2]},"c":{"dtype":"U8","shape":[1],"data_offsets":[2,4]}})",
           R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}} )",
       }) {
    INFO(header);
    CheckSame(File(header, 4));
  }
}

TEST_CASE("one-pass parse: under tightened limits, N and N+1 as the SAX parse", "[core][st][onepass][limits]") {
  const std::string two = R"({"a":{"dtype":"U8","shape":[1,1],"data_offsets":[0,1]},)"
                          R"("bb":{"dtype":"U8","shape":[1],"data_offsets":[1,2]},)"
                          R"("__metadata__":{"k":"v","kk":"v"}})";
  for (uint64_t n : {1, 2, 3}) {
    core::Limits l;
    l.max_tensors = n;
    CheckSame(File(two, 2), l);
    l = core::Limits{};
    l.max_rank = n;
    CheckSame(File(two, 2), l);
    l = core::Limits{};
    l.max_name_bytes = n;
    CheckSame(File(two, 2), l);
    l = core::Limits{};
    l.max_metadata_entries = n;
    CheckSame(File(two, 2), l);
    l = core::Limits{};
    l.max_json_depth = n;
    CheckSame(File(two, 2), l);
  }
}

TEST_CASE("TensorTable: one record per tensor, names and dims in one arena", "[core][st][onepass]") {
  // 100,000 entries as the issue-16 header writes them.
  std::string h = "{";
  const uint64_t n = 100'000;
  for (uint64_t i = 0; i < n; ++i) {
    char entry[128];
    std::snprintf(entry, sizeof entry, "%s\"t%07llu\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[%llu,%llu]}",
                  i ? "," : "", static_cast<unsigned long long>(i), static_cast<unsigned long long>(i),
                  static_cast<unsigned long long>(i + 1));
    h += entry;
  }
  h += "}";
  auto file = File(h, n);
  auto r = core::ParseSafetensors(file, core::Limits{});
  MG_REQUIRE_OK(r);
  const core::TensorTable& t = r.value().tensors;
  REQUIRE(t.size() == n);
  CHECK(t[12345].name == "t0012345");
  CHECK(t[12345].shape == std::vector<uint64_t>{1});
  // A 40-byte record, one word of name and one of shape; the capacity
  // reserved from the header's size stays under 64 bytes a tensor (the
  // vector of TensorInfo was 96 bytes a tensor plus a shape node).
  CHECK(t.HeapBytes() <= n * 64);
}

TEST_CASE("TensorTable: built by hand as a vector was", "[core][st][onepass]") {
  core::TensorTable t;
  core::TensorInfo a;
  a.name = "a";
  a.shape = {2, 3};
  a.begin = 0;
  a.end = 6;
  t.push_back(a);
  core::TensorInfo b;
  b.name = std::string(9, 'b');
  b.dtype = core::Dtype::kF64;
  b.begin = 6;
  b.end = 14;
  t.push_back(b);
  REQUIRE(t.size() == 2);
  CHECK(t[0].name == "a");
  CHECK(t[0].shape == std::vector<uint64_t>{2, 3});
  CHECK(t.at(1).name == std::string(9, 'b'));
  CHECK(t[1].shape.empty());
  CHECK(t[1].dtype == core::Dtype::kF64);
  CHECK_THROWS_AS(t.at(2), std::out_of_range);
  const core::TensorInfo copy = t[0];
  CHECK(copy.name == "a");
  CHECK(copy.shape == std::vector<uint64_t>{2, 3});
  t.pop_back();
  REQUIRE(t.size() == 1);
  t.push_back(b);
  CHECK(t.back().name == std::string(9, 'b'));
  size_t seen = 0;
  for (const core::TensorView v : t) seen += v.size_bytes();
  CHECK(seen == 14);
}

TEST_CASE("one-pass parse: the release callback walks forward through the header", "[core][st][onepass]") {
  std::string h = "{";
  const uint64_t n = 200'000;  // ~13 MB of header: several release steps
  for (uint64_t i = 0; i < n; ++i) {
    char entry[128];
    std::snprintf(entry, sizeof entry, "%s\"t%07llu\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[%llu,%llu]}",
                  i ? "," : "", static_cast<unsigned long long>(i), static_cast<unsigned long long>(i),
                  static_cast<unsigned long long>(i + 1));
    h += entry;
  }
  h += "}";
  auto file = File(h, n);
  std::vector<uint64_t> offsets;
  auto r = core::ParseSafetensors(file, core::Limits{}, [&](uint64_t at) { offsets.push_back(at); });
  MG_REQUIRE_OK(r);
  REQUIRE(offsets.size() >= 2);
  for (size_t i = 0; i < offsets.size(); ++i) {
    CHECK(offsets[i] > 8);
    CHECK(offsets[i] < r.value().data_start);
    if (i > 0) CHECK(offsets[i] > offsets[i - 1]);
  }
}
