// ByteReader: bounds checks, no movement on failure, byte order, and
// absolute offsets with a base.
#include <catch2/catch.hpp>

#include <array>
#include <cstdint>
#include <vector>

#include "support/st_expect.h"

namespace core = modelgate::core;

namespace {
const std::array<uint8_t, 8> kBytes = {0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08};
}  // namespace

TEST_CASE("ByteReader: Take returns the next bytes and moves", "[core][byte_reader]") {
  core::ByteReader r(kBytes);
  auto a = r.Take(3);
  REQUIRE(a.ok());
  REQUIRE(a.value().size() == 3);
  CHECK(a.value()[0] == 0x01);
  CHECK(a.value()[2] == 0x03);
  CHECK(r.pos() == 3);
  CHECK(r.remaining() == 5);
  auto b = r.Take(5);
  REQUIRE(b.ok());
  CHECK(b.value()[0] == 0x04);
  CHECK(r.empty());
  auto zero = r.Take(0);
  REQUIRE(zero.ok());
  CHECK(zero.value().empty());
}

TEST_CASE("ByteReader: Take beyond remaining fails without moving", "[core][byte_reader]") {
  core::ByteReader r(kBytes);
  REQUIRE(r.Take(6).ok());
  MG_CHECK_ERROR(r.Take(3), core::Code::kStTruncated, 6);
  CHECK(r.pos() == 6);
  CHECK(r.remaining() == 2);
  // Sizes that would wrap pos + n.
  MG_CHECK_ERROR(r.Take(UINT64_MAX), core::Code::kStTruncated, 6);
  MG_CHECK_ERROR(r.Take(UINT64_MAX - 5), core::Code::kStTruncated, 6);
  CHECK(r.pos() == 6);
  // What remains is still readable.
  auto rest = r.Take(2);
  REQUIRE(rest.ok());
  CHECK(rest.value()[1] == 0x08);
}

TEST_CASE("ByteReader: Skip and Seek check bounds", "[core][byte_reader]") {
  core::ByteReader r(kBytes);
  CHECK(r.Skip(8).ok());
  CHECK(r.empty());
  auto bad_skip = r.Skip(1);
  REQUIRE_FALSE(bad_skip.ok());
  CHECK(bad_skip.error().code == core::Code::kStTruncated);
  CHECK(r.pos() == 8);
  CHECK(r.Seek(2).ok());
  CHECK(r.pos() == 2);
  CHECK(r.Seek(8).ok());
  CHECK(r.empty());
  auto bad_seek = r.Seek(9);
  REQUIRE_FALSE(bad_seek.ok());
  CHECK(bad_seek.error().code == core::Code::kStTruncated);
  CHECK(r.pos() == 8);
  CHECK_FALSE(r.Seek(UINT64_MAX).ok());
  CHECK(r.pos() == 8);
}

TEST_CASE("ByteReader: Peek returns up to n bytes without moving", "[core][byte_reader]") {
  core::ByteReader r(kBytes);
  REQUIRE(r.Skip(5).ok());
  auto p = r.Peek(2);
  REQUIRE(p.size() == 2);
  CHECK(p[0] == 0x06);
  CHECK(r.pos() == 5);
  CHECK(r.Peek(100).size() == 3);
  CHECK(r.pos() == 5);
}

TEST_CASE("ByteReader: little-endian integers", "[core][byte_reader]") {
  core::ByteReader r(kBytes);
  auto v = r.U64Le();
  REQUIRE(v.ok());
  CHECK(v.value() == 0x0807060504030201ULL);
  CHECK(r.empty());

  core::ByteReader r2(kBytes);
  auto u8 = r2.U8();
  auto u16 = r2.U16Le();
  auto u32 = r2.U32Le();
  REQUIRE(u8.ok());
  REQUIRE(u16.ok());
  REQUIRE(u32.ok());
  CHECK(u8.value() == 0x01);
  CHECK(u16.value() == 0x0302);
  CHECK(u32.value() == 0x07060504);
  CHECK(r2.remaining() == 1);
}

TEST_CASE("ByteReader: big-endian integers", "[core][byte_reader]") {
  core::ByteReader r(kBytes);
  auto v = r.U64Be();
  REQUIRE(v.ok());
  CHECK(v.value() == 0x0102030405060708ULL);

  core::ByteReader r2(kBytes);
  auto u16 = r2.U16Be();
  auto u32 = r2.U32Be();
  REQUIRE(u16.ok());
  REQUIRE(u32.ok());
  CHECK(u16.value() == 0x0102);
  CHECK(u32.value() == 0x03040506);
}

TEST_CASE("ByteReader: high bytes are not sign-extended", "[core][byte_reader]") {
  const std::array<uint8_t, 8> ff = {0xFF, 0xFE, 0x80, 0x81, 0x90, 0xA0, 0xB0, 0xFF};
  core::ByteReader r(ff);
  auto v = r.U64Le();
  REQUIRE(v.ok());
  CHECK(v.value() == 0xFFB0A0908180FEFFULL);
}

TEST_CASE("ByteReader: short integer reads fail without moving", "[core][byte_reader]") {
  core::ByteReader r(std::span<const uint8_t>(kBytes.data(), 7));
  MG_CHECK_ERROR(r.U64Le(), core::Code::kStTruncated, 0);
  CHECK(r.pos() == 0);
  REQUIRE(r.Skip(6).ok());
  MG_CHECK_ERROR(r.U16Be(), core::Code::kStTruncated, 6);
  MG_CHECK_ERROR(r.U32Le(), core::Code::kStTruncated, 6);
  CHECK(r.pos() == 6);
  REQUIRE(r.U8().ok());
  MG_CHECK_ERROR(r.U8(), core::Code::kStTruncated, 7);
}

TEST_CASE("ByteReader: offsets include the base", "[core][byte_reader]") {
  core::ByteReader r(kBytes, 1000);
  CHECK(r.offset() == 1000);
  REQUIRE(r.Take(3).ok());
  CHECK(r.offset() == 1003);
  CHECK(r.pos() == 3);
  MG_CHECK_ERROR(r.Take(6), core::Code::kStTruncated, 1003);
  MG_CHECK_ERROR(r.U64Le(), core::Code::kStTruncated, 1003);
  CHECK(r.offset() == 1003);
}

TEST_CASE("ByteReader: an empty span", "[core][byte_reader]") {
  core::ByteReader r(std::span<const uint8_t>{}, 42);
  CHECK(r.empty());
  CHECK(r.size() == 0);
  CHECK(r.Take(0).ok());
  MG_CHECK_ERROR(r.Take(1), core::Code::kStTruncated, 42);
  CHECK(r.Peek(4).empty());
}
