// core hashing: SHA-256 known answers, HashRanges == per-range Sha256 on
// any thread count, and read errors.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <unistd.h>

#include "signer_test_util.h"

namespace core = modelgate::core;
using namespace sigtest;

TEST_CASE("Sha256: known answers and streaming", "[core][hash]") {
  const std::string abc = "abc";
  auto span = std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(abc.data()), abc.size());
  CHECK(core::HexLower(core::Sha256(span)) ==
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  CHECK(core::HexLower(core::Sha256({})) ==
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  core::Sha256Hasher h;
  h.Update(span.subspan(0, 1));
  h.Update(span.subspan(1));
  CHECK(h.Final() == core::Sha256(span));
  CHECK(h.Final() == core::Sha256({}));  // Final resets
}

TEST_CASE("HexLower / ParseHexLower", "[core][hash]") {
  std::array<uint8_t, 2> out{};
  CHECK(core::ParseHexLower("0aff", out));
  CHECK(out == std::array<uint8_t, 2>{0x0a, 0xff});
  CHECK_FALSE(core::ParseHexLower("0AFF", out));  // lowercase only
  CHECK_FALSE(core::ParseHexLower("0af", out));
  CHECK_FALSE(core::ParseHexLower("0afg", out));
  CHECK(core::HexLower(out) == "0aff");
}

TEST_CASE("HashRanges: equals Sha256 of each range on 1..8 threads", "[core][hash]") {
  TempDir dir;
  Bytes data(3 * 1024 * 1024 + 17);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>(i * 2654435761u >> 13);
  WriteBytes(dir / "f", data);
  std::vector<core::ByteRange> ranges = {
      {0, 0}, {0, 1}, {5, 2 * 1024 * 1024 + 3}, {100, 4096}, {data.size() - 10, 10}, {7, 1 << 20}};
  for (int i = 0; i < 40; ++i) ranges.push_back({static_cast<uint64_t>(i) * 1000, static_cast<uint64_t>(i) * 37});
  int fd = ::open((dir / "f").c_str(), O_RDONLY);
  REQUIRE(fd >= 0);
  for (unsigned threads : {1u, 2u, 3u, 8u}) {
    for (size_t buffer : {size_t{4096}, size_t{1} << 20}) {
      CAPTURE(threads, buffer);
      core::HashOptions opt;
      opt.threads = threads;
      opt.buffer_bytes = buffer;
      auto r = core::HashRanges(fd, ranges, opt);
      REQUIRE(r.ok());
      REQUIRE(r.value().size() == ranges.size());
      for (size_t i = 0; i < ranges.size(); ++i) {
        auto want = core::Sha256(std::span<const uint8_t>(data).subspan(ranges[i].offset, ranges[i].size_bytes));
        CHECK(r.value()[i] == want);
      }
    }
  }
  std::vector<std::span<const uint8_t>> spans;
  for (const auto& rg : ranges) spans.push_back(std::span<const uint8_t>(data).subspan(rg.offset, rg.size_bytes));
  auto s = core::HashSpans(spans);
  for (size_t i = 0; i < spans.size(); ++i) CHECK(s[i] == core::Sha256(spans[i]));

  // A range past the end of the file: the file shrank.
  std::vector<core::ByteRange> past = {{0, 10}, {data.size() - 5, 10}};
  auto bad = core::HashRanges(fd, past);
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.error().code == core::Code::kIoChanged);
  CHECK(bad.error().offset == data.size());
  CHECK(core::HashRanges(fd, {}).ok());
  ::close(fd);
  auto closed = core::HashRanges(fd, past);
  REQUIRE_FALSE(closed.ok());
  CHECK(closed.error().code == core::Code::kIoRead);
}

TEST_CASE("HashRanges: a dominant range is read ahead on a second thread", "[core][hash]") {
  TempDir dir;
  Bytes data(1024 * 1024 + 5);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>(i * 40503u >> 7);
  WriteBytes(dir / "g", data);
  int fd = ::open((dir / "g").c_str(), O_RDONLY);
  REQUIRE(fd >= 0);
  core::HashOptions opt;
  opt.threads = 2;
  opt.buffer_bytes = 4096;  // 257 chunks through the 4-slot ring
  std::vector<core::ByteRange> one = {{3, data.size() - 3}, {0, 2}};
  auto r = core::HashRanges(fd, one, opt);
  REQUIRE(r.ok());
  CHECK(r.value()[0] == core::Sha256(std::span<const uint8_t>(data).subspan(3)));
  CHECK(r.value()[1] == core::Sha256(std::span<const uint8_t>(data).first(2)));
  // The reader hits the end of the file part-way: the error, not a digest.
  std::vector<core::ByteRange> past = {{0, data.size() + 4096}};
  auto bad = core::HashRanges(fd, past, opt);
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.error().code == core::Code::kIoChanged);
  CHECK(bad.error().offset == data.size());
  ::close(fd);
}
