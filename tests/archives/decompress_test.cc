// Decompress and SniffCodec: every codec round trip (inputs made with the
// zlib, bzip2 and liblzma C APIs), caps at N and N+1, bombs, truncation,
// corruption, trailing data, concatenated members.
#include <bzlib.h>
#include <lzma.h>
#include <zlib.h>

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdio>

#include "budget.h"
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
