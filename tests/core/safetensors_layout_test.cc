// Size and layout rules: element count and byte size, sub-byte dtypes, and
// the data section tiled exactly by the tensors' offsets.
#include <catch2/catch.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "support/st_builder.h"
#include "support/st_expect.h"

namespace core = modelgate::core;
using modelgate::testing::Parse;

// ---- sizes ---------------------------------------------------------------

TEST_CASE("a shape whose element count wraps 64 bits overflows", "[core][st][size]") {
  SECTION("2^32 x 2^32") {
    auto b = StBuilder().Entry("w", "F32", {4294967296, 4294967296}, 0, 4);
    MG_CHECK_ERROR(Parse(b.Build()), core::Code::kStShapeOverflow, b.At(R"("w")"));
  }
  SECTION("a zero after the overflow does not undo it (reference order)") {
    auto b = StBuilder().Entry("w", "F32", {4294967296, 4294967296, 0}, 0, 0);
    MG_CHECK_ERROR(Parse(b.Build()), core::Code::kStShapeOverflow, b.At(R"("w")"));
  }
}

TEST_CASE("a zero before huge dimensions keeps the count at 0 (reference order)", "[core][st][size]") {
  auto b = StBuilder().Entry("w", "F32", {0, 4294967296, 4294967296}, 0, 0);
  auto r = Parse(b.Build());
  MG_REQUIRE_OK(r);
  REQUIRE(r.value().tensors.size() == 1);
  CHECK(r.value().tensors[0].ElementCount() == 0);
}

TEST_CASE("an element count that fits but whose bit count overflows", "[core][st][size]") {
  SECTION("U8 x 2^61: 2^64 bits") {
    auto b = StBuilder().Entry("w", "U8", {2305843009213693952ULL}, 0, 1);
    MG_CHECK_ERROR(Parse(b.Build()), core::Code::kStShapeOverflow, b.At(R"("w")"));
  }
  SECTION("F64 x 2^58: 2^64 bits") {
    auto b = StBuilder().Entry("w", "F64", {288230376151711744ULL}, 0, 8);
    MG_CHECK_ERROR(Parse(b.Build()), core::Code::kStShapeOverflow, b.At(R"("w")"));
  }
  SECTION("one element less fits and is only a size mismatch") {
    // (2^61 - 1) * 8 = 2^64 - 8 bits: no overflow, but not 1 byte either.
    auto b = StBuilder().Entry("w", "U8", {2305843009213693951ULL}, 0, 1);
    MG_CHECK_ERROR(Parse(b.Build()), core::Code::kStSizeMismatch, b.At(R"("w")"));
  }
}

TEST_CASE("sub-byte dtypes must fill whole bytes", "[core][st][size]") {
  SECTION("F4 with 3 elements is 12 bits") {
    auto b = StBuilder().Entry("w", "F4", {3}, 0, 2);
    MG_CHECK_ERROR(Parse(b.Build()), core::Code::kStPartialByte, b.At(R"("w")"));
  }
  SECTION("F4 scalar is 4 bits") {
    auto b = StBuilder().Entry("w", "F4", {}, 0, 1);
    MG_CHECK_ERROR(Parse(b.Build()), core::Code::kStPartialByte, b.At(R"("w")"));
  }
  SECTION("F6_E2M3 with 3 elements is 18 bits") {
    auto b = StBuilder().Entry("w", "F6_E2M3", {3}, 0, 2);
    MG_CHECK_ERROR(Parse(b.Build()), core::Code::kStPartialByte, b.At(R"("w")"));
  }
  SECTION("F6_E3M2 with 2 elements is 12 bits") {
    auto b = StBuilder().Entry("w", "F6_E3M2", {1, 2}, 0, 2);
    MG_CHECK_ERROR(Parse(b.Build()), core::Code::kStPartialByte, b.At(R"("w")"));
  }
}

TEST_CASE("sub-byte dtypes that fill whole bytes are accepted", "[core][st][size]") {
  SECTION("F4 with 2 elements is 1 byte") {
    auto r = Parse(StBuilder().Entry("w", "F4", {2}, 0, 1).Build());
    MG_REQUIRE_OK(r);
    CHECK(r.value().tensors.at(0).size_bytes() == 1);
  }
  SECTION("F6_E2M3 with 4 elements is 3 bytes") {
    auto r = Parse(StBuilder().Entry("w", "F6_E2M3", {4}, 0, 3).Build());
    MG_REQUIRE_OK(r);
    CHECK(r.value().tensors.at(0).size_bytes() == 3);
  }
  SECTION("F6_E3M2 with 2x2 elements is 3 bytes") {
    auto r = Parse(StBuilder().Entry("w", "F6_E3M2", {2, 2}, 0, 3).Build());
    MG_REQUIRE_OK(r);
    CHECK(r.value().tensors.at(0).ElementCount() == 4);
  }
}

TEST_CASE("byte size must equal end - start", "[core][st][size]") {
  SECTION("range too short") {
    auto b = StBuilder().Entry("w", "F32", {2}, 0, 4);
    MG_CHECK_ERROR(Parse(b.Build()), core::Code::kStSizeMismatch, b.At(R"("w")"));
  }
  SECTION("range too long") {
    auto b = StBuilder().Entry("w", "F32", {1}, 0, 8);
    MG_CHECK_ERROR(Parse(b.Build()), core::Code::kStSizeMismatch, b.At(R"("w")"));
  }
  SECTION("the second tensor is the wrong one") {
    auto b = StBuilder().Entry("a", "F32", {1}, 0, 4).Entry("b", "F16", {3}, 4, 12);
    MG_CHECK_ERROR(Parse(b.Build()), core::Code::kStSizeMismatch, b.At(R"("b")"));
  }
  SECTION("zero elements with a non-empty range") {
    auto b = StBuilder().Entry("w", "F32", {0}, 0, 4);
    MG_CHECK_ERROR(Parse(b.Build()), core::Code::kStSizeMismatch, b.At(R"("w")"));
  }
}

TEST_CASE("scalars have one element", "[core][st][size]") {
  auto b = StBuilder().Entry("s", "F64", {}, 0, 8);
  auto r = Parse(b.Build());
  MG_REQUIRE_OK(r);
  REQUIRE(r.value().tensors.size() == 1);
  const core::TensorInfo& t = r.value().tensors[0];
  CHECK(t.shape.empty());
  CHECK(t.ElementCount() == 1);
  CHECK(t.size_bytes() == 8);
}

// ---- offsets ---------------------------------------------------------------

TEST_CASE("end before start is reversed offsets at the entry", "[core][st][offsets]") {
  SECTION("alone") {
    auto b = StBuilder().Entry("w", "F32", {1}, 4, 0).DataBytes(4);
    MG_CHECK_ERROR(Parse(b.Build()), core::Code::kStOffsetsReversed, b.At(R"("w")"));
  }
  SECTION("after a valid tensor") {
    auto b = StBuilder().Entry("a", "F32", {1}, 0, 4).Entry("b", "F32", {1}, 8, 4).DataBytes(8);
    MG_CHECK_ERROR(Parse(b.Build()), core::Code::kStOffsetsReversed, b.At(R"("b")"));
  }
}

TEST_CASE("offsets past the end of the file are out of bounds at the entry", "[core][st][offsets]") {
  SECTION("end one past") {
    auto b = StBuilder().Entry("w", "F32", {2}, 0, 8).DataBytes(7);
    MG_CHECK_ERROR(Parse(b.Build()), core::Code::kStOutOfBounds, b.At(R"("w")"));
  }
  SECTION("no data at all") {
    auto b = StBuilder().Entry("w", "F32", {2}, 0, 8).DataBytes(0);
    MG_CHECK_ERROR(Parse(b.Build()), core::Code::kStOutOfBounds, b.At(R"("w")"));
  }
  SECTION("offsets near 2^64 do not wrap") {
    auto b = StBuilder()
                 .Entry("w", "U8", {3}, 18446744073709551612ULL, 18446744073709551615ULL)
                 .DataBytes(4);
    MG_CHECK_ERROR(Parse(b.Build()), core::Code::kStOutOfBounds, b.At(R"("w")"));
  }
  SECTION("the last of two tensors") {
    auto b = StBuilder().Entry("a", "F32", {1}, 0, 4).Entry("b", "F32", {1}, 4, 8).DataBytes(6);
    MG_CHECK_ERROR(Parse(b.Build()), core::Code::kStOutOfBounds, b.At(R"("b")"));
  }
}

TEST_CASE("a gap between tensors is rejected where it begins", "[core][st][offsets]") {
  SECTION("between two tensors") {
    auto b = StBuilder().Entry("a", "F32", {1}, 0, 4).Entry("b", "F32", {1}, 8, 12);
    MG_CHECK_ERROR(Parse(b.Build()), core::Code::kStGap, b.DataStart() + 4);
  }
  SECTION("before the first tensor") {
    auto b = StBuilder().Entry("a", "F32", {1}, 4, 8);
    MG_CHECK_ERROR(Parse(b.Build()), core::Code::kStGap, b.DataStart() + 0);
  }
  SECTION("one byte") {
    auto b = StBuilder().Entry("a", "U8", {3}, 0, 3).Entry("b", "U8", {1}, 4, 5);
    MG_CHECK_ERROR(Parse(b.Build()), core::Code::kStGap, b.DataStart() + 3);
  }
}

TEST_CASE("overlapping tensors are rejected", "[core][st][offsets]") {
  auto b = StBuilder().Entry("a", "F32", {2}, 0, 8).Entry("b", "F32", {2}, 4, 12);
  // At b's entry, a's entry, or where b begins in the file.
  MG_CHECK_ERROR_ANY(Parse(b.Build()), core::Code::kStOverlap, b.At(R"("b")"), b.At(R"("a")"),
                     b.DataStart() + 4);
}

TEST_CASE("a tensor inside another is rejected", "[core][st][offsets]") {
  auto b = StBuilder().Entry("a", "F32", {4}, 0, 16).Entry("b", "F32", {1}, 4, 8);
  MG_CHECK_ERROR_ANY(Parse(b.Build()), core::Code::kStOverlap, b.At(R"("b")"), b.At(R"("a")"),
                     b.DataStart() + 4);
}

TEST_CASE("two tensors aliasing the same bytes are rejected", "[core][st][offsets]") {
  auto b = StBuilder().Entry("a", "F32", {1}, 0, 4).Entry("b", "I32", {1}, 0, 4);
  MG_CHECK_ERROR_ANY(Parse(b.Build()), core::Code::kStAlias, b.At(R"("b")"), b.At(R"("a")"),
                     b.DataStart());
}

TEST_CASE("an empty tensor inside a non-empty one is rejected", "[core][st][offsets]") {
  // The reference requires each start to equal the previous end.
  auto b = StBuilder().Entry("a", "F32", {2}, 0, 8).Entry("z", "F32", {0}, 4, 4);
  auto r = Parse(b.Build());
  REQUIRE_FALSE(r.ok());
  CHECK((r.error().code == core::Code::kStOverlap || r.error().code == core::Code::kStAlias));
}

TEST_CASE("an empty tensor past the end of the data is rejected", "[core][st][offsets]") {
  auto b = StBuilder().Entry("a", "F32", {1}, 0, 4).Entry("z", "F32", {0}, 100, 100).DataBytes(4);
  auto r = Parse(b.Build());
  REQUIRE_FALSE(r.ok());
  CHECK((r.error().code == core::Code::kStOutOfBounds || r.error().code == core::Code::kStGap));
}

TEST_CASE("trailing bytes after the data are rejected where they begin", "[core][st][offsets]") {
  SECTION("after one tensor") {
    auto b = StBuilder().Entry("a", "F32", {1}, 0, 4).Trailing("\x80\x02}q.");
    MG_CHECK_ERROR(Parse(b.Build()), core::Code::kStTrailingBytes, b.DataStart() + 4);
  }
  SECTION("after an empty header") {
    auto b = StBuilder().Header("{}").Trailing("x");
    MG_CHECK_ERROR(Parse(b.Build()), core::Code::kStTrailingBytes, 10);
  }
  SECTION("after only empty tensors") {
    auto b = StBuilder().Entry("z", "F32", {0}, 0, 0).Trailing("PK\x03\x04");
    MG_CHECK_ERROR(Parse(b.Build()), core::Code::kStTrailingBytes, b.DataStart());
  }
}

// ---- accepted layouts --------------------------------------------------------

TEST_CASE("entries listed out of offset order are accepted and sorted by offset", "[core][st][offsets]") {
  auto b = StBuilder()
               .Entry("b", "F32", {1}, 8, 12)
               .Entry("a", "F32", {1}, 4, 8)
               .Entry("z", "F32", {1}, 0, 4);
  auto r = Parse(b.Build());
  MG_REQUIRE_OK(r);
  const auto& t = r.value().tensors;
  REQUIRE(t.size() == 3);
  CHECK(t[0].name == "z");
  CHECK(t[1].name == "a");
  CHECK(t[2].name == "b");
  // entry_offset follows each tensor, not its position in the list.
  CHECK(t[0].entry_offset == b.At(R"("z")"));
  CHECK(t[1].entry_offset == b.At(R"("a")"));
  CHECK(t[2].entry_offset == b.At(R"("b")"));
}

TEST_CASE("zero-size tensors are accepted", "[core][st][offsets]") {
  SECTION("alone") {
    auto b = StBuilder().Entry("z", "F32", {0}, 0, 0);
    auto r = Parse(b.Build());
    MG_REQUIRE_OK(r);
    REQUIRE(r.value().tensors.size() == 1);
    CHECK(r.value().tensors[0].size_bytes() == 0);
    CHECK(r.value().tensors[0].ElementCount() == 0);
  }
  SECTION("several at the same offset between two tensors") {
    auto b = StBuilder()
                 .Entry("b", "F32", {1}, 4, 8)
                 .Entry("z2", "BF16", {3, 0}, 4, 4)
                 .Entry("a", "F32", {1}, 0, 4)
                 .Entry("z1", "U8", {0}, 4, 4)
                 .Entry("z3", "F4", {0, 7}, 4, 4);
    auto r = Parse(b.Build());
    MG_REQUIRE_OK(r);
    std::vector<std::string> names;
    for (const auto& t : r.value().tensors) names.push_back(t.name);
    // By begin, then end, then name.
    CHECK(names == std::vector<std::string>{"a", "z1", "z2", "z3", "b"});
  }
  SECTION("at offset 0 before a tensor") {
    auto b = StBuilder().Entry("a", "F32", {1}, 0, 4).Entry("z", "F32", {0}, 0, 0);
    auto r = Parse(b.Build());
    MG_REQUIRE_OK(r);
    REQUIRE(r.value().tensors.size() == 2);
    CHECK(r.value().tensors[0].name == "z");
    CHECK(r.value().tensors[1].name == "a");
  }
  SECTION("at the end of the data") {
    auto b = StBuilder().Entry("a", "F32", {1}, 0, 4).Entry("z", "F32", {0}, 4, 4);
    auto r = Parse(b.Build());
    MG_REQUIRE_OK(r);
    CHECK(r.value().tensors.size() == 2);
  }
}

TEST_CASE("a file laid out like the reference writer parses with exact offsets", "[core][st]") {
  auto b = StBuilder()
               .Metadata("format", "pt")
               .Tensor("bias", "F64", {2})
               .Tensor("weight", "F32", {2, 3})
               .Tensor("mask", "BOOL", {3})
               .AlignTo8();
  auto file = b.Build();
  auto r = Parse(file);
  MG_REQUIRE_OK(r);
  const core::Safetensors& st = r.value();
  CHECK(st.file_size == file.size());
  CHECK(st.header_bytes == b.HeaderSize());
  CHECK(st.header_bytes % 8 == 0);
  CHECK(st.data_start == 8 + b.HeaderSize());
  CHECK(st.data_bytes() == 16 + 24 + 3);
  CHECK(st.has_metadata);
  REQUIRE(st.tensors.size() == 3);
  const core::TensorInfo& w = st.tensors[1];
  CHECK(w.name == "weight");
  CHECK(w.dtype == core::Dtype::kF32);
  CHECK(w.shape == std::vector<uint64_t>{2, 3});
  CHECK(w.begin == 16);
  CHECK(w.end == 40);
  CHECK(w.entry_offset == b.At(R"("weight")"));
  CHECK(w.data_start == st.data_start);
  CHECK(w.file_begin() == st.data_start + 16);
  CHECK(w.file_end() == st.data_start + 40);
  CHECK(st.tensors[0].entry_offset == b.At(R"("bias")"));
  CHECK(st.tensors[2].entry_offset == b.At(R"("mask")"));
  CHECK(core::CoveredBytes(st) == file.size());
}

TEST_CASE("100000 tensors are accepted", "[core][st][limits][slow]") {
  StBuilder b;
  for (int i = 0; i < 100'000; ++i) b.Tensor("t" + std::to_string(i), "U8", {1});
  auto file = b.Build();
  auto r = Parse(file);
  MG_REQUIRE_OK(r);
  const auto& t = r.value().tensors;
  REQUIRE(t.size() == 100'000);
  CHECK(t.front().name == "t0");
  CHECK(t[12345].name == "t12345");
  CHECK(t[12345].begin == 12345);
  CHECK(t.back().name == "t99999");
  CHECK(core::CoveredBytes(r.value()) == file.size());
}
