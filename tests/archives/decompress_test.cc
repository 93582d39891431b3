// Decompress and SniffCodec: every codec round trip (inputs made with the
// zlib, bzip2 and liblzma C APIs), caps at N and N+1, bombs, truncation,
// corruption, trailing data, concatenated members.
#include <bzlib.h>
#include <lzma.h>
#include <zlib.h>

#include <catch2/catch.hpp>

#include <algorithm>

#include "decompress.h"

namespace sc = modelgate::scanner;
using Bytes = std::vector<uint8_t>;

namespace {

Bytes Deflate(const Bytes& in, int window_bits) {
  z_stream zs{};
  REQUIRE(deflateInit2(&zs, 9, Z_DEFLATED, window_bits, 8, Z_DEFAULT_STRATEGY) == Z_OK);
  Bytes out(deflateBound(&zs, in.size()) + 64);
  zs.next_in = const_cast<Bytef*>(in.data());
  zs.avail_in = static_cast<uInt>(in.size());
  zs.next_out = out.data();
  zs.avail_out = static_cast<uInt>(out.size());
  REQUIRE(deflate(&zs, Z_FINISH) == Z_STREAM_END);
  out.resize(zs.total_out);
  deflateEnd(&zs);
  return out;
}

Bytes Bzip2(const Bytes& in) {
  unsigned n = static_cast<unsigned>(in.size() + in.size() / 100 + 700);
  Bytes out(n);
  char none = 0;  // bzip2 refuses a null source even for zero bytes
  char* src = in.empty() ? &none : const_cast<char*>(reinterpret_cast<const char*>(in.data()));
  REQUIRE(BZ2_bzBuffToBuffCompress(reinterpret_cast<char*>(out.data()), &n, src,
                                   static_cast<unsigned>(in.size()), 9, 0, 0) == BZ_OK);
  out.resize(n);
  return out;
}

Bytes Lzma(const Bytes& in, bool alone) {
  lzma_stream s = LZMA_STREAM_INIT;
  if (alone) {
    lzma_options_lzma opt;
    REQUIRE_FALSE(lzma_lzma_preset(&opt, 6));
    REQUIRE(lzma_alone_encoder(&s, &opt) == LZMA_OK);
  } else {
    REQUIRE(lzma_easy_encoder(&s, 6, LZMA_CHECK_CRC64) == LZMA_OK);
  }
  Bytes out(in.size() + in.size() / 2 + 4096);
  s.next_in = in.data();
  s.avail_in = in.size();
  s.next_out = out.data();
  s.avail_out = out.size();
  REQUIRE(lzma_code(&s, LZMA_FINISH) == LZMA_STREAM_END);
  out.resize(s.total_out);
  lzma_end(&s);
  return out;
}

Bytes Compress(sc::Codec c, const Bytes& in) {
  switch (c) {
    case sc::Codec::kGzip: return Deflate(in, 16 + MAX_WBITS);
    case sc::Codec::kZlib: return Deflate(in, MAX_WBITS);
    case sc::Codec::kBzip2: return Bzip2(in);
    case sc::Codec::kXz: return Lzma(in, false);
    case sc::Codec::kLzma: return Lzma(in, true);
  }
  return {};
}

Bytes Text(size_t n) {
  Bytes b(n);
  uint32_t x = 12345;
  for (auto& c : b) {
    x = x * 1103515245 + 12345;
    c = static_cast<uint8_t>("pickle\x80\x02q.K}"[(x >> 16) % 12]);
  }
  return b;
}

size_t Count(const std::vector<sc::Finding>& f, const std::string& id) {
  return static_cast<size_t>(
      std::count_if(f.begin(), f.end(), [&](const sc::Finding& x) { return x.id == id; }));
}

Bytes Cat(Bytes a, const Bytes& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

constexpr sc::Codec kAll[] = {sc::Codec::kGzip, sc::Codec::kZlib, sc::Codec::kBzip2,
                              sc::Codec::kXz, sc::Codec::kLzma};

}  // namespace

TEST_CASE("every codec round-trips and is sniffed", "[decompress]") {
  const Bytes data = Text(200'000);
  for (sc::Codec c : kAll) {
    INFO(sc::CodecName(c));
    const Bytes z = Compress(c, data);
    auto sniffed = sc::SniffCodec(z);
    REQUIRE(sniffed.has_value());
    CHECK(*sniffed == c);
    std::vector<sc::Finding> f;
    auto out = sc::Decompress(z, c, {}, &f);
    CHECK(f.empty());
    REQUIRE(out.has_value());
    CHECK(*out == data);
    // An empty payload too.
    f.clear();
    auto empty = sc::Decompress(Compress(c, {}), c, {}, &f);
    CHECK(f.empty());
    REQUIRE(empty.has_value());
    CHECK(empty->empty());
  }
}

TEST_CASE("SniffCodec rejects what is not a stream", "[decompress]") {
  CHECK_FALSE(sc::SniffCodec(Bytes{0x80, 0x02, 'K', 1, '.'}));  // a pickle
  CHECK_FALSE(sc::SniffCodec(Bytes{'(', 'd', 'p', '0'}));
  CHECK_FALSE(sc::SniffCodec(Bytes{0x78, 0x00}));             // %31 fails
  CHECK_FALSE(sc::SniffCodec(Bytes{'B', 'Z', 'h', '0'}));
  CHECK_FALSE(sc::SniffCodec(Bytes{0x1f, 0x8b, 0x07}));       // not deflate
  Bytes lzma_bad_dict = Compress(sc::Codec::kLzma, Text(10));
  lzma_bad_dict[1] = 0x03;  // dictionary size 2^n + 3: not what an encoder writes
  CHECK_FALSE(sc::SniffCodec(lzma_bad_dict));
  CHECK_FALSE(sc::SniffCodec({}));
}

TEST_CASE("max_output_bytes: N passes, N+1 stops with MG-ARCHIVE-LIMIT", "[decompress][limits]") {
  constexpr uint64_t kCap = 64 * 1024;
  for (sc::Codec c : kAll) {
    INFO(sc::CodecName(c));
    sc::DecompressLimits limits;
    limits.max_output_bytes = kCap;
    std::vector<sc::Finding> f;
    auto at = sc::Decompress(Compress(c, Bytes(kCap, 0)), c, limits, &f);
    CHECK(f.empty());
    REQUIRE(at.has_value());
    CHECK(at->size() == kCap);
    auto past = sc::Decompress(Compress(c, Bytes(kCap + 1, 0)), c, limits, &f);
    REQUIRE(Count(f, "MG-ARCHIVE-LIMIT") == 1);
    CHECK(f[0].severity == modelgate::core::Severity::kHigh);
    REQUIRE(past.has_value());
    CHECK(past->size() == kCap);  // what was decoded, up to the cap
  }
}

TEST_CASE("a bomb (1 MiB of zeros) stops at a 64 KiB cap", "[decompress][limits]") {
  const Bytes zeros(1 << 20, 0);
  for (sc::Codec c : kAll) {
    INFO(sc::CodecName(c));
    sc::DecompressLimits limits;
    limits.max_output_bytes = 64 * 1024;
    std::vector<sc::Finding> f;
    auto out = sc::Decompress(Compress(c, zeros), c, limits, &f);
    CHECK(Count(f, "MG-ARCHIVE-LIMIT") == 1);
    REQUIRE(out.has_value());
    CHECK(out->size() == 64 * 1024);
  }
}

TEST_CASE("max_expansion_ratio: N passes, N+1 stops (past the floor)", "[decompress][limits]") {
  const Bytes z = Compress(sc::Codec::kGzip, Bytes(1 << 20, 0));
  sc::DecompressLimits limits;
  limits.ratio_floor_bytes = 0;
  // Output 1 MiB from z.size() input: the ratio needed is ceil(2^20 / size).
  const uint64_t need = ((1u << 20) + z.size() - 1) / z.size();
  limits.max_expansion_ratio = need;
  std::vector<sc::Finding> f;
  auto ok = sc::Decompress(z, sc::Codec::kGzip, limits, &f);
  CHECK(f.empty());
  REQUIRE(ok.has_value());
  CHECK(ok->size() == 1u << 20);
  limits.max_expansion_ratio = need - 1;
  auto stopped = sc::Decompress(z, sc::Codec::kGzip, limits, &f);
  REQUIRE(Count(f, "MG-ARCHIVE-LIMIT") == 1);
  CHECK(f[0].message.find("max_expansion_ratio") != std::string::npos);
  // Below the floor the ratio is not enforced.
  f.clear();
  limits.ratio_floor_bytes = 1 << 20;
  CHECK(sc::Decompress(z, sc::Codec::kGzip, limits, &f).has_value());
  CHECK(f.empty());
}

TEST_CASE("max_decoder_memory_bytes: an xz dictionary over the limit", "[decompress][limits]") {
  const Bytes z = Compress(sc::Codec::kXz, Text(1000));  // preset 6: 8 MiB dictionary
  sc::DecompressLimits limits;
  limits.max_decoder_memory_bytes = 1 << 20;
  std::vector<sc::Finding> f;
  auto out = sc::Decompress(z, sc::Codec::kXz, limits, &f);
  CHECK(Count(f, "MG-ARCHIVE-LIMIT") == 1);
}

TEST_CASE("truncated and corrupt streams: MG-ARCHIVE-MALFORMED with the prefix", "[decompress]") {
  const Bytes data = Text(300'000);
  for (sc::Codec c : kAll) {
    INFO(sc::CodecName(c));
    Bytes z = Compress(c, data);
    Bytes cut(z.begin(), z.begin() + static_cast<ptrdiff_t>(z.size() / 2));
    std::vector<sc::Finding> f;
    auto out = sc::Decompress(cut, c, {}, &f);
    CHECK(Count(f, "MG-ARCHIVE-MALFORMED") == 1);
    REQUIRE(out.has_value());
    CHECK(out->size() < data.size());
    CHECK(std::equal(out->begin(), out->end(), data.begin()));  // a true prefix
    // Not a stream at all.
    f.clear();
    CHECK_FALSE(sc::Decompress(Bytes(64, 0x55), c, {}, &f).has_value());
    CHECK(Count(f, "MG-ARCHIVE-MALFORMED") == 1);
  }
  // A flipped byte in the middle of a gzip stream (CRC or data error).
  Bytes z = Compress(sc::Codec::kGzip, data);
  z[z.size() / 2] ^= 0xFF;
  std::vector<sc::Finding> f;
  (void)sc::Decompress(z, sc::Codec::kGzip, {}, &f);
  CHECK(Count(f, "MG-ARCHIVE-MALFORMED") == 1);
}

TEST_CASE("trailing data and concatenated members", "[decompress]") {
  const Bytes a = Text(1000), b = Text(500);
  for (sc::Codec c : kAll) {
    INFO(sc::CodecName(c));
    std::vector<sc::Finding> f;
    const Bytes za = Compress(c, a);
    auto trailing = sc::Decompress(Cat(za, Bytes{'j', 'u', 'n', 'k'}), c, {}, &f);
    REQUIRE(Count(f, "MG-ARCHIVE-TRAILING-DATA") == 1);
    CHECK(f[0].offset == za.size());
    REQUIRE(trailing.has_value());
    CHECK(*trailing == a);
    f.clear();
    auto both = sc::Decompress(Cat(za, Compress(c, b)), c, {}, &f);
    REQUIRE(both.has_value());
    if (c == sc::Codec::kZlib) {  // zlib.decompress reads one stream
      CHECK(Count(f, "MG-ARCHIVE-TRAILING-DATA") == 1);
      CHECK(*both == a);
    } else {  // gzip/bz2/lzma readers continue into the next stream
      CHECK(Count(f, "MG-ARCHIVE-MULTI-MEMBER") == 1);
      CHECK(Count(f, "MG-ARCHIVE-TRAILING-DATA") == 0);
      CHECK(*both == Cat(a, b));
    }
  }
  // Zero padding after gzip (gzip skips it) and xz stream padding.
  std::vector<sc::Finding> f;
  CHECK(sc::Decompress(Cat(Compress(sc::Codec::kGzip, a), Bytes(7, 0)), sc::Codec::kGzip, {}, &f) == a);
  CHECK(sc::Decompress(Cat(Compress(sc::Codec::kXz, a), Bytes(8, 0)), sc::Codec::kXz, {}, &f) == a);
  CHECK(f.empty());
  CHECK(sc::Decompress(Cat(Compress(sc::Codec::kXz, a), Bytes(3, 0)), sc::Codec::kXz, {}, &f) == a);
  CHECK(Count(f, "MG-ARCHIVE-TRAILING-DATA") == 1);
  // Limits span members: the second member's output counts.
  f.clear();
  sc::DecompressLimits limits;
  limits.max_output_bytes = a.size() + 10;
  auto capped = sc::Decompress(Cat(Compress(sc::Codec::kGzip, a), Compress(sc::Codec::kGzip, b)),
                               sc::Codec::kGzip, limits, &f);
  CHECK(Count(f, "MG-ARCHIVE-LIMIT") == 1);
  CHECK(capped->size() == a.size() + 10);
}

TEST_CASE("findings carry the base offset, 7z is reported, not unpacked", "[decompress]") {
  std::vector<sc::Finding> f;
  const Bytes z = Compress(sc::Codec::kGzip, Text(100));
  (void)sc::Decompress(Cat(z, Bytes{1}), sc::Codec::kGzip, {}, &f, 4096);
  REQUIRE(f.size() == 1);
  CHECK(f[0].offset == 4096 + z.size());
  auto u = sc::UnanalyzedArchiveFinding("7z");
  CHECK(u.id == "MG-ARCHIVE-UNSUPPORTED");
  CHECK(u.severity == modelgate::core::Severity::kHigh);
}
