// Decompress and SniffCodec: every codec round trip (inputs made with the
// zlib, bzip2, liblzma, libzstd and liblz4 C APIs, joblib's ZF layout, and
// the zstd, pzstd and lz4 programs), caps at N and N+1, bombs, truncation,
// corruption, trailing data, concatenated members, skippable frames.
#include <bzlib.h>
#include <lz4frame.h>
#include <lzma.h>
#include <zlib.h>
#include <zstd.h>

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdio>

#include "budget.h"
#include "decompress.h"
#include "tool_dir.h"

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

// Zstd compresses with the zstd program's defaults (level 3, a content
// checksum, the content size); `window_log` > 0 sets the window and drops
// the content size, so that the frame states its window descriptor.
Bytes Zstd(const Bytes& in, int level = 3, int window_log = 0) {
  ZSTD_CCtx* c = ZSTD_createCCtx();
  REQUIRE(c != nullptr);
  REQUIRE_FALSE(ZSTD_isError(ZSTD_CCtx_setParameter(c, ZSTD_c_compressionLevel, level)));
  REQUIRE_FALSE(ZSTD_isError(ZSTD_CCtx_setParameter(c, ZSTD_c_checksumFlag, 1)));
  if (window_log > 0) {
    REQUIRE_FALSE(ZSTD_isError(ZSTD_CCtx_setParameter(c, ZSTD_c_windowLog, window_log)));
    REQUIRE_FALSE(ZSTD_isError(ZSTD_CCtx_setParameter(c, ZSTD_c_contentSizeFlag, 0)));
  }
  Bytes out(ZSTD_compressBound(in.size()));
  const size_t n = ZSTD_compress2(c, out.data(), out.size(), in.data(), in.size());
  ZSTD_freeCCtx(c);
  REQUIRE_FALSE(ZSTD_isError(n));
  out.resize(n);
  return out;
}

// Lz4 compresses one frame with the lz4 program's defaults (4 MiB blocks,
// a content checksum) or the given preferences.
Bytes Lz4(const Bytes& in, LZ4F_preferences_t prefs) {
  Bytes out(LZ4F_compressFrameBound(in.size(), &prefs));
  const size_t n = LZ4F_compressFrame(out.data(), out.size(), in.data(), in.size(), &prefs);
  REQUIRE_FALSE(LZ4F_isError(n));
  out.resize(n);
  return out;
}
LZ4F_preferences_t Lz4Defaults() {
  LZ4F_preferences_t p{};
  p.frameInfo.blockSizeID = LZ4F_max4MB;
  p.frameInfo.contentChecksumFlag = LZ4F_contentChecksumEnabled;
  return p;
}
Bytes Lz4(const Bytes& in) { return Lz4(in, Lz4Defaults()); }

// JoblibZf writes what joblib < 0.10's write_zfile wrote
// (numpy_pickle_compat.py): "ZF", hex(len(data)) left-justified to 19
// bytes, zlib.compress(data, 1).
Bytes JoblibZf(const Bytes& in, uint64_t declared) {
  char field[32];
  std::snprintf(field, sizeof field, "0x%llx", static_cast<unsigned long long>(declared));
  std::string head = std::string("ZF") + field;
  head.resize(sc::kJoblibZfHeaderBytes, ' ');
  Bytes out(head.begin(), head.end());
  uLongf n = compressBound(static_cast<uLong>(in.size()));
  Bytes z(n);
  REQUIRE(compress2(z.data(), &n, in.data(), static_cast<uLong>(in.size()), 1) == Z_OK);
  out.insert(out.end(), z.begin(), z.begin() + static_cast<ptrdiff_t>(n));
  return out;
}

Bytes Compress(sc::Codec c, const Bytes& in) {
  switch (c) {
    case sc::Codec::kGzip: return Deflate(in, 16 + MAX_WBITS);
    case sc::Codec::kZlib: return Deflate(in, MAX_WBITS);
    case sc::Codec::kBzip2: return Bzip2(in);
    case sc::Codec::kXz: return Lzma(in, false);
    case sc::Codec::kLzma: return Lzma(in, true);
    case sc::Codec::kZstd: return Zstd(in);
    case sc::Codec::kLz4: return Lz4(in);
    case sc::Codec::kJoblibZf: return JoblibZf(in, in.size());
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

constexpr sc::Codec kAll[] = {sc::Codec::kGzip, sc::Codec::kZlib,  sc::Codec::kBzip2,
                              sc::Codec::kXz,   sc::Codec::kLzma,  sc::Codec::kZstd,
                              sc::Codec::kLz4,  sc::Codec::kJoblibZf};

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
    if (c == sc::Codec::kZlib || c == sc::Codec::kJoblibZf) {  // zlib.decompress reads one stream
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

// --- Budget and the streaming Decoder ---

namespace {

// CountingSource is memory that records how it is read: the Decoder must
// read its input in bounded windows, and no further than it needs.
class CountingSource : public sc::Source {
 public:
  explicit CountingSource(const Bytes& b) : mem_(b) {}
  uint64_t size() const override { return mem_.size(); }
  modelgate::core::Status Read(uint64_t offset, std::span<uint8_t> out) const override {
    largest_read = std::max<uint64_t>(largest_read, out.size());
    bytes_read += out.size();
    return mem_.Read(offset, out);
  }
  mutable uint64_t largest_read = 0, bytes_read = 0;

 private:
  sc::MemorySource mem_;
};

// FailingSource fails every read past `good` bytes with an I/O error.
class FailingSource : public sc::Source {
 public:
  FailingSource(const Bytes& b, uint64_t good) : mem_(b), good_(good) {}
  uint64_t size() const override { return mem_.size(); }
  modelgate::core::Status Read(uint64_t offset, std::span<uint8_t> out) const override {
    if (offset + out.size() > good_) {
      return modelgate::core::Error{modelgate::core::Code::kIoChanged, offset, "file shrank"};
    }
    return mem_.Read(offset, out);
  }

 private:
  sc::MemorySource mem_;
  uint64_t good_;
};

sc::BudgetLimits NoRatio() {
  sc::BudgetLimits l;
  l.ratio_floor_bytes = UINT64_MAX;
  return l;
}

struct Decoded {
  Bytes bytes;
  sc::DecodeState state;
  std::vector<sc::Finding> findings;
};

Decoded DecodeAll(const Bytes& z, sc::Codec c, sc::Budget& budget) {
  sc::MemorySource src(z);
  Decoded d;
  auto dec = sc::Decoder::Open(src, 0, z.size(), c, budget, &d.findings);
  REQUIRE(dec);
  dec->ReadAll(&d.bytes);
  d.state = dec->state();
  return d;
}

bool Names(const sc::Finding& f, const std::string& limit) {
  return f.id == "MG-ARCHIVE-LIMIT" && f.message.find("(limit " + limit + " ") != std::string::npos;
}

}  // namespace

TEST_CASE("Decoder output read in small pieces equals the whole, for every codec", "[decompress]") {
  const Bytes data = Text(300'000);
  for (sc::Codec c : kAll) {
    INFO(sc::CodecName(c));
    const Bytes z = Compress(c, data);
    sc::MemorySource src(z);
    sc::Budget budget;
    std::vector<sc::Finding> f;
    auto dec = sc::Decoder::Open(src, 0, z.size(), c, budget, &f);
    REQUIRE(dec);
    Bytes out;
    uint8_t piece[977];
    while (dec->more()) {
      const size_t n = dec->Read(piece);
      out.insert(out.end(), piece, piece + n);
    }
    CHECK(dec->state() == sc::DecodeState::kEnd);
    CHECK(out == data);
    CHECK(f.empty());
    CHECK(budget.inflated_bytes() == data.size());  // every byte charged, once
  }
}

TEST_CASE("a sniff decodes at most what it asks for and reads input in windows", "[decompress][budget]") {
  // 8 MiB of text-like bytes: a full decode would be 128 times the sniff.
  const Bytes data = Text(8u << 20);
  for (sc::Codec c : {sc::Codec::kGzip, sc::Codec::kBzip2}) {
    INFO(sc::CodecName(c));
    const Bytes z = Compress(c, data);
    CountingSource src(z);
    sc::Budget budget;
    std::vector<sc::Finding> f;
    auto dec = sc::Decoder::Open(src, 0, z.size(), c, budget, &f);
    REQUIRE(dec);
    const Bytes head = dec->ReadUpTo(sc::kSniffBytes64K);
    CHECK(head.size() == sc::kSniffBytes64K);
    CHECK(std::equal(head.begin(), head.end(), data.begin()));
    CHECK(dec->more());
    CHECK(budget.inflated_bytes() == sc::kSniffBytes64K);
    CHECK(src.largest_read <= 64 * 1024);
    CHECK(src.bytes_read < z.size() / 4);  // nowhere near the whole input
    CHECK(f.empty());
  }
}

TEST_CASE("budget max_total_decompressed_bytes: N passes, N+1 is MG-ARCHIVE-LIMIT", "[decompress][budget][limits]") {
  const Bytes data = Text(100'000);
  for (sc::Codec c : kAll) {
    INFO(sc::CodecName(c));
    const Bytes z = Compress(c, data);
    sc::BudgetLimits l = NoRatio();
    l.max_total_decompressed_bytes = data.size();
    sc::Budget at(l);
    auto ok = DecodeAll(z, c, at);
    CHECK(ok.state == sc::DecodeState::kEnd);
    CHECK(ok.findings.empty());
    CHECK_FALSE(at.exhausted());
    l.max_total_decompressed_bytes = data.size() - 1;
    sc::Budget past(l);
    auto stopped = DecodeAll(z, c, past);
    CHECK(stopped.state == sc::DecodeState::kLimit);
    REQUIRE(stopped.findings.size() == 1);
    CHECK(Names(stopped.findings[0], "max_total_decompressed_bytes"));
    CHECK(stopped.findings[0].severity == modelgate::core::Severity::kHigh);
    CHECK(stopped.bytes.size() == data.size() - 1);  // up to the limit, a true prefix
    CHECK(past.exhausted());
    CHECK(past.limits_hit() == std::vector<std::string>{"max_total_decompressed_bytes"});
  }
}

TEST_CASE("one budget spans streams: the second stream pays for the first", "[decompress][budget]") {
  const Bytes a = Text(50'000);
  const Bytes z = Compress(sc::Codec::kGzip, a);
  sc::BudgetLimits l = NoRatio();
  l.max_total_decompressed_bytes = 2 * a.size() - 1;
  sc::Budget budget(l);
  CHECK(DecodeAll(z, sc::Codec::kGzip, budget).state == sc::DecodeState::kEnd);
  auto second = DecodeAll(z, sc::Codec::kGzip, budget);
  CHECK(second.state == sc::DecodeState::kLimit);
  CHECK(second.bytes.size() == a.size() - 1);
  // Spent stays spent: a third stream gets nothing.
  auto third = DecodeAll(z, sc::Codec::kGzip, budget);
  CHECK(third.bytes.empty());
  REQUIRE(third.findings.size() == 1);
  CHECK(Names(third.findings[0], "max_total_decompressed_bytes"));
}

TEST_CASE("budget max_member_bytes and max_expansion_ratio bind each stream", "[decompress][budget][limits]") {
  const Bytes data = Text(100'000);
  const Bytes z = Compress(sc::Codec::kBzip2, data);
  sc::BudgetLimits l = NoRatio();
  l.max_member_bytes = data.size();
  sc::Budget at(l);
  CHECK(DecodeAll(z, sc::Codec::kBzip2, at).findings.empty());
  l.max_member_bytes = data.size() - 1;
  sc::Budget past(l);
  auto m = DecodeAll(z, sc::Codec::kBzip2, past);
  REQUIRE(m.findings.size() == 1);
  CHECK(Names(m.findings[0], "max_member_bytes"));

  const Bytes zeros = Compress(sc::Codec::kGzip, Bytes(1 << 20, 0));
  const uint64_t need = ((1u << 20) + zeros.size() - 1) / zeros.size();
  sc::BudgetLimits r;
  r.ratio_floor_bytes = 0;
  r.max_expansion_ratio = need;
  sc::Budget ratio_at(r);
  CHECK(DecodeAll(zeros, sc::Codec::kGzip, ratio_at).findings.empty());
  r.max_expansion_ratio = need - 1;
  sc::Budget ratio_past(r);
  auto q = DecodeAll(zeros, sc::Codec::kGzip, ratio_past);
  REQUIRE(q.findings.size() == 1);
  CHECK(Names(q.findings[0], "max_expansion_ratio"));
  CHECK(ratio_past.limits_hit() == std::vector<std::string>{"max_expansion_ratio"});
}

TEST_CASE("budget max_members, max_records, max_nesting_depth at N and N+1", "[budget][limits]") {
  sc::BudgetLimits l;
  l.max_members = 3;
  l.max_records = 10;
  l.max_nesting_depth = 2;
  sc::Budget b(l);
  for (int i = 0; i < 3; ++i) CHECK(b.ChargeMember().ok());
  auto m = b.ChargeMember(77);
  REQUIRE_FALSE(m.ok());
  CHECK(Names(m.finding(), "max_members"));
  CHECK(m.finding().offset == 77);
  CHECK(b.members() == 3);

  CHECK(b.ChargeRecords(4).ok());
  CHECK(b.ChargeRecords(6).ok());  // exactly 10
  auto r = b.ChargeRecords(1);
  REQUIRE_FALSE(r.ok());
  CHECK(Names(r.finding(), "max_records"));
  CHECK_FALSE(b.ChargeRecords(UINT64_MAX).ok());  // no wrap-around
  CHECK(b.records() == 10);

  {
    sc::DepthScope one(b), two(b);
    CHECK(one.ok());
    CHECK(two.ok());
    CHECK(b.depth() == 2);
    sc::DepthScope three(b);
    REQUIRE_FALSE(three.ok());
    CHECK(Names(three.status().finding(), "max_nesting_depth"));
    CHECK(b.depth() == 2);
  }
  CHECK(b.depth() == 0);  // scopes leave what they entered, not more
  CHECK(b.limits_hit() ==
        std::vector<std::string>{"max_members", "max_records", "max_nesting_depth"});

  // The container limits carry over by name.
  modelgate::scanner::ContainerLimits c;
  c.max_member_bytes = 5;
  c.max_nesting_depth = 9;
  auto from = sc::BudgetLimits::FromContainers(c);
  CHECK(from.max_member_bytes == 5);
  CHECK(from.max_nesting_depth == 9);
  CHECK(from.max_total_decompressed_bytes == c.max_total_decompressed_bytes);
}

TEST_CASE("budget ratio floor: small streams of zeros are not bombs", "[budget][limits]") {
  sc::BudgetLimits l;
  l.max_expansion_ratio = 10;
  l.ratio_floor_bytes = 1000;
  sc::Budget b(l);
  CHECK(b.StreamCap(10) == 1000);       // 10 * 10 is under the floor
  CHECK(b.StreamCap(500) == 5000);
  CHECK(b.StreamCap(UINT64_MAX) == l.max_member_bytes);  // no overflow
}

TEST_CASE("Decoder I/O errors are errors, not findings", "[decompress]") {
  const Bytes z = Compress(sc::Codec::kGzip, Text(300'000));
  FailingSource src(z, z.size() / 2);
  sc::Budget budget;
  std::vector<sc::Finding> f;
  auto dec = sc::Decoder::Open(src, 0, z.size(), sc::Codec::kGzip, budget, &f);
  REQUIRE(dec);
  Bytes out;
  dec->ReadAll(&out);
  CHECK(dec->state() == sc::DecodeState::kIoError);
  REQUIRE(dec->io_error().has_value());
  CHECK(dec->io_error()->code == modelgate::core::Code::kIoChanged);
  CHECK(f.empty());
  // A range outside the source opens nothing.
  CHECK_FALSE(sc::Decoder::Open(src, 1, z.size(), sc::Codec::kGzip, budget, &f));
}

TEST_CASE("DecompressToSpool keeps decoded bytes in a sealed memfd, readable and mappable", "[decompress]") {
  const Bytes data = Text(1 << 20);
  const Bytes z = Compress(sc::Codec::kXz, data);
  sc::MemorySource src(z);
  sc::Budget budget;
  std::vector<sc::Finding> f;
  auto s = sc::DecompressToSpool(src, 0, z.size(), sc::Codec::kXz, budget, &f);
  REQUIRE(s.ok());
  REQUIRE(s.value());
  const sc::Spool& spool = *s.value();
  CHECK(spool.in_memfd());
  CHECK(spool.size() == data.size());
  Bytes mid(1000);
  REQUIRE(spool.Read(500'000, mid).ok());
  CHECK(std::equal(mid.begin(), mid.end(), data.begin() + 500'000));
  CHECK_FALSE(spool.Read(data.size() - 10, mid).ok());  // past the end
  auto bytes = spool.Bytes();
  REQUIRE(bytes.ok());
  CHECK(std::equal(bytes.value().begin(), bytes.value().end(), data.begin(), data.end()));
  CHECK(f.empty());
  // Not a stream: no spool, a finding.
  const Bytes junk(64, 0x55);
  sc::MemorySource jsrc(junk);
  auto none = sc::DecompressToSpool(jsrc, 0, junk.size(), sc::Codec::kXz, budget, &f);
  REQUIRE(none.ok());
  CHECK_FALSE(none.value());
  CHECK(Count(f, "MG-ARCHIVE-MALFORMED") == 1);
}

TEST_CASE("a spool refuses writes after sealing and cannot be shrunk", "[decompress]") {
  auto s = sc::Spool::Create();
  REQUIRE(s.ok());
  auto& spool = *s.value();
  REQUIRE(spool.Append(Bytes{1, 2, 3}).ok());
  CHECK_FALSE(spool.Bytes().ok());  // not before it is sealed
  REQUIRE(spool.Seal().ok());
  CHECK_FALSE(spool.Append(Bytes{4}).ok());
  REQUIRE(spool.Bytes().ok());
  CHECK(spool.Bytes().value().size() == 3);
}

TEST_CASE("a real joblib.dump(compress='lzma') file sniffs and decodes as lzma-alone", "[decompress][joblib]") {
  // tests/archives/data/make_joblib_lzma.py (joblib 1.2.0, Debian 12).
  FILE* fp = std::fopen(MG_ARCHIVE_DATA_DIR "/joblib-lzma.joblib", "rb");
  REQUIRE(fp != nullptr);
  Bytes z;
  for (int ch; (ch = std::fgetc(fp)) != EOF;) z.push_back(static_cast<uint8_t>(ch));
  std::fclose(fp);
  auto codec = sc::SniffCodec(z);
  REQUIRE(codec.has_value());
  CHECK(*codec == sc::Codec::kLzma);
  sc::Budget budget;
  auto d = DecodeAll(z, sc::Codec::kLzma, budget);
  CHECK(d.findings.empty());
  CHECK(d.state == sc::DecodeState::kEnd);
  REQUIRE(d.bytes.size() > 2);
  CHECK(d.bytes[0] == 0x80);  // a pickle, protocol 4
  const std::string text(d.bytes.begin(), d.bytes.end());
  CHECK(text.find("NumpyArrayWrapper") != std::string::npos);
}

// --- zstd, lz4 and joblib's ZF container ---

namespace {

Bytes Le32Bytes(uint32_t v) {
  return Bytes{static_cast<uint8_t>(v), static_cast<uint8_t>(v >> 8), static_cast<uint8_t>(v >> 16),
               static_cast<uint8_t>(v >> 24)};
}

// Skippable is a skippable frame (shared by zstd and lz4) holding `body`.
Bytes Skippable(const Bytes& body, uint32_t magic = 0x184D2A50) {
  return Cat(Cat(Le32Bytes(magic), Le32Bytes(static_cast<uint32_t>(body.size()))), body);
}

Decoded DecodeWith(const Bytes& z, sc::Codec c, sc::Budget& budget, uint64_t memlimit) {
  sc::MemorySource src(z);
  Decoded d;
  sc::DecoderOptions o;
  o.max_decoder_memory_bytes = memlimit;
  auto dec = sc::Decoder::Open(src, 0, z.size(), c, budget, &d.findings, o);
  REQUIRE(dec);
  dec->ReadAll(&d.bytes);
  d.state = dec->state();
  return d;
}

const sc::Finding* Find(const std::vector<sc::Finding>& f, const std::string& id) {
  for (const auto& x : f) {
    if (x.id == id) return &x;
  }
  return nullptr;
}

// FixLz4HeaderChecksum recomputes the header checksum byte after a header
// field was edited: the one value of 256 that LZ4F_getFrameInfo accepts.
void FixLz4HeaderChecksum(Bytes* z, size_t hc_at) {
  for (int v = 0; v < 256; ++v) {
    (*z)[hc_at] = static_cast<uint8_t>(v);
    LZ4F_dctx* d = nullptr;
    REQUIRE_FALSE(LZ4F_isError(LZ4F_createDecompressionContext(&d, LZ4F_VERSION)));
    LZ4F_frameInfo_t info{};
    size_t n = hc_at + 1;
    const size_t rc = LZ4F_getFrameInfo(d, &info, z->data(), &n);
    LZ4F_freeDecompressionContext(d);
    if (!LZ4F_isError(rc)) return;
  }
  FAIL("no header checksum fits");
}

}  // namespace

TEST_CASE("zstd and lz4: strict sniffing", "[decompress][zstd][lz4]") {
  const Bytes z = Zstd(Text(100));
  CHECK(sc::SniffCodec(z) == sc::Codec::kZstd);
  CHECK(sc::SniffCodec(Bytes(z.begin(), z.begin() + 4)) == sc::Codec::kZstd);  // magic alone
  Bytes reserved = z;
  reserved[4] |= 0x08;  // the frame header's reserved bit
  CHECK_FALSE(sc::SniffCodec(reserved));
  Bytes big_window = Zstd(Text(2 << 20), 3, 20);
  REQUIRE((big_window[4] & 0x20) == 0);  // a window descriptor
  big_window[5] = static_cast<uint8_t>((31 - 10) << 3);  // 2^31: still zstd
  CHECK(sc::SniffCodec(big_window) == sc::Codec::kZstd);
  big_window[5] = static_cast<uint8_t>((32 - 10) << 3);  // 2^32: no 64-bit libzstd reads it
  CHECK_FALSE(sc::SniffCodec(big_window));

  const Bytes l = Lz4(Text(100));
  CHECK(sc::SniffCodec(l) == sc::Codec::kLz4);
  Bytes bad_hc = l;
  bad_hc[6] ^= 0xFF;  // header checksum
  CHECK_FALSE(sc::SniffCodec(bad_hc));
  Bytes bad_version = l;
  bad_version[4] = static_cast<uint8_t>((bad_version[4] & 0x3F) | 0x80);
  CHECK_FALSE(sc::SniffCodec(bad_version));
  Bytes bad_block = l;
  bad_block[5] = 0x30;  // block size id 3
  CHECK_FALSE(sc::SniffCodec(bad_block));
  // The lz4 tool's legacy frame: no Python reader reads it.
  CHECK_FALSE(sc::SniffCodec(Cat(Le32Bytes(0x184C2102), Bytes(16, 1))));

  // Skippable frames first (pzstd's output): the frame after them decides.
  CHECK(sc::SniffCodec(Cat(Skippable(Bytes(4, 9)), z)) == sc::Codec::kZstd);
  CHECK(sc::SniffCodec(Cat(Skippable(Bytes(10, 9), 0x184D2A5F), l)) == sc::Codec::kLz4);
  CHECK_FALSE(sc::SniffCodec(Cat(Skippable(Bytes(10, 9)), Bytes(20, 0x55))));
  CHECK_FALSE(sc::SniffCodec(Skippable(Bytes(10, 9))));  // nothing after it in the head
}

TEST_CASE("zstd: skippable frames are hidden data, pzstd's 4-byte ones low", "[decompress][zstd]") {
  const Bytes a = Text(5000), b = Text(700);
  const Bytes za = Zstd(a);
  for (sc::Codec c : {sc::Codec::kZstd, sc::Codec::kLz4}) {
    INFO(sc::CodecName(c));
    const Bytes x = Compress(c, a);
    sc::Budget budget;
    // Before the frame, with a payload.
    const Bytes hidden = Skippable(Bytes{'c', 'o', 's', '\n', 's', 'y', 's', 't', 'e', 'm'}, 0x184D2A53);
    auto before = DecodeAll(Cat(hidden, x), c, budget);
    CHECK(before.state == sc::DecodeState::kEnd);
    CHECK(before.bytes == a);
    REQUIRE(before.findings.size() == 1);
    CHECK(before.findings[0].id == "MG-ARCHIVE-HIDDEN-DATA");
    CHECK(before.findings[0].severity == modelgate::core::Severity::kHigh);
    CHECK(before.findings[0].offset == 0);
    // After the frame: hidden, not trailing; a frame after it is a second frame.
    auto after = DecodeAll(Cat(Cat(x, hidden), Compress(c, b)), c, budget);
    CHECK(after.bytes == Cat(a, b));
    CHECK(Count(after.findings, "MG-ARCHIVE-HIDDEN-DATA") == 1);
    CHECK(Count(after.findings, "MG-ARCHIVE-MULTI-MEMBER") == 1);
    CHECK(Count(after.findings, "MG-ARCHIVE-TRAILING-DATA") == 0);
    REQUIRE(Find(after.findings, "MG-ARCHIVE-HIDDEN-DATA"));
    CHECK(Find(after.findings, "MG-ARCHIVE-HIDDEN-DATA")->offset == x.size());
    // pzstd's: magic 0x184D2A50, 4 bytes. One byte more is high again.
    auto pz = DecodeAll(Cat(Skippable(Le32Bytes(static_cast<uint32_t>(x.size()))), x), c, budget);
    REQUIRE(pz.findings.size() == 1);
    CHECK(pz.findings[0].severity == modelgate::core::Severity::kLow);
    auto five = DecodeAll(Cat(Skippable(Bytes(5, 0)), x), c, budget);
    REQUIRE(five.findings.size() == 1);
    CHECK(five.findings[0].severity == modelgate::core::Severity::kHigh);
    // A skippable frame whose size runs past the end, and a cut header.
    auto past = DecodeAll(Cat(x, Cat(Le32Bytes(0x184D2A50), Le32Bytes(1000))), c, budget);
    CHECK(past.state == sc::DecodeState::kMalformed);
    CHECK(Count(past.findings, "MG-ARCHIVE-MALFORMED") == 1);
    CHECK(past.bytes == a);
    auto cut = DecodeAll(Cat(x, Bytes{0x50, 0x2A, 0x4D, 0x18, 1}), c, budget);
    CHECK(cut.state == sc::DecodeState::kMalformed);
  }
  (void)za;
}

TEST_CASE("zstd and lz4: bad checksums are MG-ARCHIVE-MALFORMED", "[decompress][zstd][lz4]") {
  const Bytes data = Text(100'000);
  sc::Budget budget;
  Bytes z = Zstd(data);
  z[z.size() - 1] ^= 0x01;  // the content checksum (XXH64, low 4 bytes)
  auto zd = DecodeAll(z, sc::Codec::kZstd, budget);
  CHECK(zd.state == sc::DecodeState::kMalformed);
  REQUIRE(Count(zd.findings, "MG-ARCHIVE-MALFORMED") == 1);
  CHECK(zd.findings[0].message.find("checksum") != std::string::npos);

  Bytes l = Lz4(data);
  l[l.size() - 1] ^= 0x01;  // content checksum
  auto ld = DecodeAll(l, sc::Codec::kLz4, budget);
  CHECK(ld.state == sc::DecodeState::kMalformed);
  REQUIRE(Count(ld.findings, "MG-ARCHIVE-MALFORMED") == 1);
  CHECK(ld.findings[0].message.find("ontentChecksum") != std::string::npos);

  LZ4F_preferences_t p = Lz4Defaults();
  p.frameInfo.blockChecksumFlag = LZ4F_blockChecksumEnabled;
  p.frameInfo.contentChecksumFlag = LZ4F_noContentChecksum;
  Bytes lb = Lz4(data, p);
  // The frame ends: block checksum, end mark (4 zero bytes); flip the former.
  lb[lb.size() - 5] ^= 0x01;
  auto bd = DecodeAll(lb, sc::Codec::kLz4, budget);
  CHECK(bd.state == sc::DecodeState::kMalformed);
  REQUIRE(Count(bd.findings, "MG-ARCHIVE-MALFORMED") == 1);
  CHECK(bd.findings[0].message.find("blockChecksum") != std::string::npos);
}

TEST_CASE("lz4: the declared content size is a claim, checked, never allocated", "[decompress][lz4]") {
  const Bytes data = Text(10'000);
  LZ4F_preferences_t p = Lz4Defaults();
  p.frameInfo.contentSize = data.size();
  Bytes l = Lz4(data, p);
  sc::Budget budget;
  auto ok = DecodeAll(l, sc::Codec::kLz4, budget);
  CHECK(ok.findings.empty());
  CHECK(ok.bytes == data);
  // Claim 2^60 bytes: decoded as far as it goes, then the mismatch.
  REQUIRE((l[4] & 0x08) != 0);  // content size present: bytes 6..13, checksum at 14
  for (int i = 0; i < 8; ++i) l[6 + static_cast<size_t>(i)] = i == 7 ? 0x10 : 0;
  FixLz4HeaderChecksum(&l, 14);
  auto claim = DecodeAll(l, sc::Codec::kLz4, budget);
  CHECK(claim.state == sc::DecodeState::kMalformed);
  // liblz4 keeps the bytes of the call that fails (as python-lz4 raises
  // instead of returning them): a true prefix, maybe empty.
  CHECK(std::equal(claim.bytes.begin(), claim.bytes.end(), data.begin()));
  REQUIRE(Count(claim.findings, "MG-ARCHIVE-MALFORMED") == 1);
  CHECK(claim.findings[0].message.find("frameSize_wrong") != std::string::npos);
}

TEST_CASE("zstd and lz4: a bomb is stopped by the budget", "[decompress][zstd][lz4][limits]") {
  const Bytes zeros(32u << 20, 0);
  for (sc::Codec c : {sc::Codec::kZstd, sc::Codec::kLz4}) {
    INFO(sc::CodecName(c));
    const Bytes z = c == sc::Codec::kZstd ? Zstd(zeros, 19) : Lz4(zeros);
    // The defaults, 1000:1 past 1 MiB; lz4 cannot pass 255:1, so 100:1.
    sc::BudgetLimits bl;
    if (c == sc::Codec::kLz4) bl.max_expansion_ratio = 100;
    sc::Budget budget(bl);
    auto d = DecodeAll(z, c, budget);
    CHECK(d.state == sc::DecodeState::kLimit);
    REQUIRE(d.findings.size() == 1);
    CHECK(Names(d.findings[0], "max_expansion_ratio"));
    CHECK(d.bytes.size() == budget.StreamCap(z.size()));
    CHECK(d.bytes.size() < zeros.size());
    // The file's total, N and N+1.
    sc::BudgetLimits l = NoRatio();
    l.max_total_decompressed_bytes = zeros.size();
    sc::Budget at(l);
    CHECK(DecodeAll(z, c, at).findings.empty());
    l.max_total_decompressed_bytes = zeros.size() - 1;
    sc::Budget past(l);
    auto p = DecodeAll(z, c, past);
    REQUIRE(p.findings.size() == 1);
    CHECK(Names(p.findings[0], "max_total_decompressed_bytes"));
  }
}

TEST_CASE("zstd window and lz4 block size against max_decoder_memory_bytes, N and N+1", "[decompress][zstd][lz4][limits]") {
  sc::Budget budget;
  // A window descriptor of exactly 1 MiB (no content size).
  const Bytes w20 = Zstd(Text(3u << 20), 3, 20);
  REQUIRE((w20[4] & 0x20) == 0);
  REQUIRE(w20[5] == (20 - 10) << 3);
  auto at = DecodeWith(w20, sc::Codec::kZstd, budget, 1u << 20);
  CHECK(at.state == sc::DecodeState::kEnd);
  CHECK(at.findings.empty());
  auto past = DecodeWith(w20, sc::Codec::kZstd, budget, (1u << 20) - 1);
  CHECK(past.state == sc::DecodeState::kLimit);
  REQUIRE(past.findings.size() == 1);
  CHECK(Names(past.findings[0], "max_decoder_memory_bytes"));
  CHECK(past.bytes.empty());
  // A single-segment frame: the window is the content size.
  const Bytes small = Zstd(Text(5000));
  REQUIRE((small[4] & 0x20) != 0);
  CHECK(DecodeWith(small, sc::Codec::kZstd, budget, 5000).findings.empty());
  CHECK(DecodeWith(small, sc::Codec::kZstd, budget, 4999).state == sc::DecodeState::kLimit);
  // A header that claims a 2 GiB window: refused before anything is allocated.
  Bytes huge = w20;
  huge[5] = (31 - 10) << 3;
  auto h = DecodeAll(huge, sc::Codec::kZstd, budget);
  CHECK(h.state == sc::DecodeState::kLimit);
  REQUIRE(h.findings.size() == 1);
  CHECK(Names(h.findings[0], "max_decoder_memory_bytes"));
  // The second frame is judged too.
  auto second = DecodeWith(Cat(small, w20), sc::Codec::kZstd, budget, 1u << 19);
  CHECK(second.state == sc::DecodeState::kLimit);
  CHECK(second.bytes.size() == 5000);

  // lz4: 4 MiB blocks (LZ4F_compressFrame shrinks the id to the input's
  // size; the header is set back to 4 MiB, which one small block fits).
  Bytes l = Lz4(Text(1000));
  l[5] = 0x70;
  FixLz4HeaderChecksum(&l, 6);
  CHECK(DecodeWith(l, sc::Codec::kLz4, budget, 4u << 20).findings.empty());
  auto lp = DecodeWith(l, sc::Codec::kLz4, budget, (4u << 20) - 1);
  CHECK(lp.state == sc::DecodeState::kLimit);
  REQUIRE(lp.findings.size() == 1);
  CHECK(Names(lp.findings[0], "max_decoder_memory_bytes"));
}

TEST_CASE("zstd and lz4: truncated frames and headers", "[decompress][zstd][lz4]") {
  const Bytes data = Text(200'000);
  for (sc::Codec c : {sc::Codec::kZstd, sc::Codec::kLz4}) {
    INFO(sc::CodecName(c));
    const Bytes z = Compress(c, data);
    for (size_t cut : {size_t{5}, size_t{9}, z.size() - 1}) {
      INFO(cut);
      sc::Budget budget;
      auto d = DecodeAll(Bytes(z.begin(), z.begin() + static_cast<ptrdiff_t>(cut)), c, budget);
      CHECK(d.state == sc::DecodeState::kMalformed);
      CHECK(Count(d.findings, "MG-ARCHIVE-MALFORMED") == 1);
      CHECK(std::equal(d.bytes.begin(), d.bytes.end(), data.begin()));
    }
  }
}

TEST_CASE("joblib ZF: Python's int(field, 16), N and N+1 at 2^63", "[decompress][joblib]") {
  auto parse = [](const std::string& s) {
    return sc::ParseJoblibZfLength(std::span<const uint8_t>(
        reinterpret_cast<const uint8_t*>(s.data()), s.size()));
  };
  // Each value is what python3 (3.11) int(b"...", 16) gives or raises.
  CHECK(parse("0x1f               ") == 31u);
  CHECK(parse("  0X1_F  ") == 31u);
  CHECK(parse("+0x10") == 16u);
  CHECK(parse("0x_1f") == 31u);
  CHECK(parse("\x0b" "1f\x0c") == 31u);
  CHECK(parse("-0") == 0u);
  CHECK(parse("0x7fffffffffffffff") == uint64_t{INT64_MAX});
  CHECK_FALSE(parse("0x8000000000000000"));  // zlib.decompress: bufsize overflows
  CHECK_FALSE(parse("-0x1"));                // bufsize must be non-negative
  for (const char* bad : {"0x", "_1", "1__0", "1f_", "1 f", "", "   ", "0x1g"}) {
    INFO(bad);
    CHECK_FALSE(parse(bad));
  }
  CHECK_FALSE(parse(std::string("1f\0", 3)));
}

TEST_CASE("joblib ZF: sniffed, decoded, the declared length checked", "[decompress][joblib]") {
  const Bytes data = Text(50'000);
  const Bytes zf = JoblibZf(data, data.size());
  CHECK(sc::SniffCodec(zf) == sc::Codec::kJoblibZf);
  sc::Budget budget;
  auto ok = DecodeAll(zf, sc::Codec::kJoblibZf, budget);
  CHECK(ok.state == sc::DecodeState::kEnd);
  CHECK(ok.findings.empty());
  CHECK(ok.bytes == data);
  // The declared length one more and one less than the stream's.
  for (uint64_t declared : {uint64_t{data.size() + 1}, uint64_t{data.size() - 1}}) {
    auto m = DecodeAll(JoblibZf(data, declared), sc::Codec::kJoblibZf, budget);
    CHECK(m.bytes == data);
    REQUIRE(m.findings.size() == 1);
    CHECK(m.findings[0].id == "MG-ARCHIVE-MALFORMED");
    CHECK(m.findings[0].message.find("declares " + std::to_string(declared)) != std::string::npos);
  }
  // Python 2 joblib <= 0.8.4: one space more before the zlib stream.
  Bytes wide = zf;
  wide.insert(wide.begin() + sc::kJoblibZfHeaderBytes, ' ');
  CHECK(sc::SniffCodec(wide) == sc::Codec::kJoblibZf);
  CHECK(DecodeAll(wide, sc::Codec::kJoblibZf, budget).bytes == data);
  // Not ZF: a field int() refuses, or no zlib header after it.
  Bytes bad_field = zf;
  bad_field[2] = 'g';
  CHECK_FALSE(sc::SniffCodec(bad_field));
  auto nd = DecodeAll(bad_field, sc::Codec::kJoblibZf, budget);
  CHECK(nd.state == sc::DecodeState::kNotAStream);
  CHECK(Count(nd.findings, "MG-ARCHIVE-MALFORMED") == 1);
  Bytes no_zlib = zf;
  no_zlib[sc::kJoblibZfHeaderBytes] = 0x80;
  CHECK_FALSE(sc::SniffCodec(no_zlib));
  CHECK_FALSE(sc::SniffCodec(Bytes(zf.begin(), zf.begin() + 22)));  // cut in the zlib header
  // A huge declared length allocates nothing.
  auto huge = DecodeAll(JoblibZf(data, uint64_t{INT64_MAX}), sc::Codec::kJoblibZf, budget);
  CHECK(huge.bytes == data);
  CHECK(Count(huge.findings, "MG-ARCHIVE-MALFORMED") == 1);
}

using modelgate::test::ToolDir;

TEST_CASE("files made by the zstd, pzstd and lz4 programs", "[decompress][zstd][lz4][tools]") {
  const Bytes data = Text(300'000);
  ToolDir dir;
  dir.Write("m.pkl", data);
  dir.Run("zstd", "-q -19 m.pkl -o m.zst");
  dir.Run("pzstd", "-q -p 2 m.pkl -o m.pz.zst");
  dir.Run("lz4", "-q m.pkl m.lz4");
  dir.Run("lz4", "-q -BD -BX m.pkl m.bx.lz4");  // linked blocks with block checksums
  dir.Run("lz4", "-q -l m.pkl m.legacy.lz4");
  sc::Budget budget;
  for (const char* name : {"m.zst", "m.pz.zst", "m.lz4", "m.bx.lz4"}) {
    INFO(name);
    const Bytes z = dir.Read(name);
    const auto codec = sc::SniffCodec(z);
    REQUIRE(codec.has_value());
    auto d = DecodeAll(z, *codec, budget);
    CHECK(d.state == sc::DecodeState::kEnd);
    CHECK(d.bytes == data);
    if (std::string(name) == "m.pz.zst") {  // pzstd: 4-byte skippable frames, low
      REQUIRE_FALSE(d.findings.empty());
      for (const auto& f : d.findings) {
        CHECK(f.id == "MG-ARCHIVE-HIDDEN-DATA");
        CHECK(f.severity == modelgate::core::Severity::kLow);
      }
    } else {
      CHECK(d.findings.empty());
    }
  }
  // `cat a.zst b.zst` and `zstd a b -c`: concatenated frames.
  dir.Run("sh", "-c 'zstd -q -c m.pkl > m2.zst; zstd -q -c m.pkl >> m2.zst'");
  auto two = DecodeAll(dir.Read("m2.zst"), sc::Codec::kZstd, budget);
  CHECK(two.bytes == Cat(data, data));
  CHECK(Count(two.findings, "MG-ARCHIVE-MULTI-MEMBER") == 1);
  // The legacy lz4 frame: not sniffed, not a frame.
  const Bytes legacy = dir.Read("m.legacy.lz4");
  CHECK_FALSE(sc::SniffCodec(legacy));
  auto ld = DecodeAll(legacy, sc::Codec::kLz4, budget);
  CHECK(ld.state == sc::DecodeState::kNotAStream);
  // zstd --long=27 of a pipe (size unknown) asks for a 128 MiB window:
  // over a 64 MiB limit.
  dir.Run("sh", "-c 'cat m.pkl | zstd -q --long=27 -c > m.long.zst'");
  auto lw = DecodeWith(dir.Read("m.long.zst"), sc::Codec::kZstd, budget, 64u << 20);
  CHECK(lw.state == sc::DecodeState::kLimit);
}

TEST_CASE("real joblib.dump(compress='lz4') and python-zstandard files sniff and decode", "[decompress][joblib][zstd][lz4]") {
  // tests/archives/data/make_joblib_lz4_zstd.py (joblib 1.2.0, python-lz4
  // 4.0.2, python-zstandard 0.20.0, Debian 12).
  for (const auto& [file, codec] : {std::pair<const char*, sc::Codec>{"joblib-lz4.joblib", sc::Codec::kLz4},
                                    {"pickle-zstandard.zst", sc::Codec::kZstd}}) {
    INFO(file);
    FILE* fp = std::fopen((std::string(MG_ARCHIVE_DATA_DIR "/") + file).c_str(), "rb");
    REQUIRE(fp != nullptr);
    Bytes z;
    for (int ch; (ch = std::fgetc(fp)) != EOF;) z.push_back(static_cast<uint8_t>(ch));
    std::fclose(fp);
    REQUIRE(sc::SniffCodec(z) == codec);
    sc::Budget budget;
    auto d = DecodeAll(z, codec, budget);
    CHECK(d.findings.empty());
    CHECK(d.state == sc::DecodeState::kEnd);
    REQUIRE(d.bytes.size() > 2);
    CHECK(d.bytes[0] == 0x80);  // a pickle, protocol 4
    const std::string text(d.bytes.begin(), d.bytes.end());
    CHECK(text.find("tiny-linear") != std::string::npos);
  }
}
