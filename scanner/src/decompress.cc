// Bounded decompression. One loop drives every codec through a small
// decoder interface: feed input in bounded slices, take output in 64 KiB
// chunks, append what was really produced, stop one byte past a cap.
#include "decompress.h"

#include <bzlib.h>
#include <lzma.h>
#include <zlib.h>

#include <algorithm>
#include <memory>
#include <string>

namespace modelgate::scanner {
namespace {

using core::Severity;

constexpr size_t kChunk = 1 << 16;
// Decoders take input lengths as 32-bit counts.
constexpr uint64_t kMaxFeed = 1u << 30;

enum class StepRc : uint8_t { kOk, kEnd, kCorrupt, kMemLimit };

class Decoder {
 public:
  virtual ~Decoder() = default;
  virtual bool Init() = 0;
  // Step decodes from `in` (advancing it and `in_n`) into `out` (reducing
  // `out_n` by what it wrote).
  virtual StepRc Step(const uint8_t** in, size_t* in_n, uint8_t* out, size_t* out_n) = 0;
};

class ZlibDecoder : public Decoder {
 public:
  explicit ZlibDecoder(int window_bits) : window_bits_(window_bits) {}
  ~ZlibDecoder() override {
    if (live_) inflateEnd(&zs_);
  }
  bool Init() override { return live_ = inflateInit2(&zs_, window_bits_) == Z_OK; }
  StepRc Step(const uint8_t** in, size_t* in_n, uint8_t* out, size_t* out_n) override {
    zs_.next_in = const_cast<Bytef*>(*in);
    zs_.avail_in = static_cast<uInt>(*in_n);
    zs_.next_out = out;
    zs_.avail_out = static_cast<uInt>(*out_n);
    const int rc = inflate(&zs_, Z_NO_FLUSH);
    *in += *in_n - zs_.avail_in;
    *in_n = zs_.avail_in;
    *out_n = zs_.avail_out;
    if (rc == Z_STREAM_END) return StepRc::kEnd;
    if (rc == Z_OK || rc == Z_BUF_ERROR) return StepRc::kOk;
    if (rc == Z_MEM_ERROR) return StepRc::kMemLimit;
    return StepRc::kCorrupt;
  }

 private:
  int window_bits_;
  z_stream zs_{};
  bool live_ = false;
};

class Bzip2Decoder : public Decoder {
 public:
  ~Bzip2Decoder() override {
    if (live_) BZ2_bzDecompressEnd(&bz_);
  }
  bool Init() override { return live_ = BZ2_bzDecompressInit(&bz_, 0, 0) == BZ_OK; }
  StepRc Step(const uint8_t** in, size_t* in_n, uint8_t* out, size_t* out_n) override {
    bz_.next_in = const_cast<char*>(reinterpret_cast<const char*>(*in));
    bz_.avail_in = static_cast<unsigned>(*in_n);
    bz_.next_out = reinterpret_cast<char*>(out);
    bz_.avail_out = static_cast<unsigned>(*out_n);
    const int rc = BZ2_bzDecompress(&bz_);
    *in += *in_n - bz_.avail_in;
    *in_n = bz_.avail_in;
    *out_n = bz_.avail_out;
    if (rc == BZ_STREAM_END) return StepRc::kEnd;
    if (rc == BZ_OK) return StepRc::kOk;
    if (rc == BZ_MEM_ERROR) return StepRc::kMemLimit;
    return StepRc::kCorrupt;
  }

 private:
  bz_stream bz_{};
  bool live_ = false;
};

class LzmaDecoder : public Decoder {
 public:
  LzmaDecoder(bool alone, uint64_t memlimit) : alone_(alone), memlimit_(memlimit) {}
  ~LzmaDecoder() override { lzma_end(&ls_); }
  bool Init() override {
    // No LZMA_CONCATENATED: the loop sees each stream's end and judges
    // what follows itself.
    return (alone_ ? lzma_alone_decoder(&ls_, memlimit_) : lzma_stream_decoder(&ls_, memlimit_, 0)) ==
           LZMA_OK;
  }
  StepRc Step(const uint8_t** in, size_t* in_n, uint8_t* out, size_t* out_n) override {
    ls_.next_in = *in;
    ls_.avail_in = *in_n;
    ls_.next_out = out;
    ls_.avail_out = *out_n;
    const lzma_ret rc = lzma_code(&ls_, LZMA_RUN);
    *in = ls_.next_in;
    *in_n = ls_.avail_in;
    *out_n = ls_.avail_out;
    if (rc == LZMA_STREAM_END) return StepRc::kEnd;
    if (rc == LZMA_OK || rc == LZMA_BUF_ERROR) return StepRc::kOk;
    if (rc == LZMA_MEMLIMIT_ERROR || rc == LZMA_MEM_ERROR) return StepRc::kMemLimit;
    return StepRc::kCorrupt;
  }

 private:
  bool alone_;
  uint64_t memlimit_;
  lzma_stream ls_ = LZMA_STREAM_INIT;
};

std::unique_ptr<Decoder> MakeDecoder(Codec c, const DecompressLimits& limits) {
  switch (c) {
    case Codec::kGzip: return std::make_unique<ZlibDecoder>(16 + MAX_WBITS);
    case Codec::kZlib: return std::make_unique<ZlibDecoder>(MAX_WBITS);
    case Codec::kBzip2: return std::make_unique<Bzip2Decoder>();
    case Codec::kXz: return std::make_unique<LzmaDecoder>(false, limits.max_decoder_memory_bytes);
    case Codec::kLzma: return std::make_unique<LzmaDecoder>(true, limits.max_decoder_memory_bytes);
  }
  return nullptr;
}

uint32_t Le32(std::span<const uint8_t> b, size_t at) {
  return b[at] | b[at + 1] << 8 | b[at + 2] << 16 | static_cast<uint32_t>(b[at + 3]) << 24;
}

std::string N(uint64_t v) { return std::to_string(v); }

}  // namespace

std::string_view CodecName(Codec c) {
  switch (c) {
    case Codec::kGzip: return "gzip";
    case Codec::kZlib: return "zlib";
    case Codec::kBzip2: return "bzip2";
    case Codec::kXz: return "xz";
    case Codec::kLzma: return "lzma";
  }
  return "unknown";
}

std::optional<Codec> SniffCodec(std::span<const uint8_t> h) {
  if (h.size() >= 3 && h[0] == 0x1f && h[1] == 0x8b && h[2] == 8) return Codec::kGzip;
  static constexpr uint8_t kXzMagic[] = {0xFD, '7', 'z', 'X', 'Z', 0x00};
  if (h.size() >= 6 && std::equal(std::begin(kXzMagic), std::end(kXzMagic), h.begin())) {
    return Codec::kXz;
  }
  if (h.size() >= 4 && h[0] == 'B' && h[1] == 'Z' && h[2] == 'h' && h[3] >= '1' && h[3] <= '9') {
    static constexpr uint8_t kBlock[] = {0x31, 0x41, 0x59, 0x26, 0x53, 0x59};
    static constexpr uint8_t kEnd[] = {0x17, 0x72, 0x45, 0x38, 0x50, 0x90};
    if (h.size() < 10 || std::equal(std::begin(kBlock), std::end(kBlock), h.begin() + 4) ||
        std::equal(std::begin(kEnd), std::end(kEnd), h.begin() + 4)) {
      return Codec::kBzip2;
    }
  }
  if (h.size() >= 13 && h[0] == 0x5D) {
    const uint32_t dict = Le32(h, 1);
    const bool pow2 = dict != 0 && (dict & (dict - 1)) == 0;
    const uint32_t low = dict & (~dict + 1);  // lowest set bit
    const bool pow2_and_half = dict != 0 && (dict - low) == (low << 1);
    uint64_t usize = 0;
    for (int i = 7; i >= 0; --i) usize = (usize << 8) | h[5 + static_cast<size_t>(i)];
    if ((pow2 || pow2_and_half) && (usize == UINT64_MAX || usize < (1ull << 40))) {
      return Codec::kLzma;
    }
  }
  if (h.size() >= 2 && h[0] == 0x78 && (h[1] & 0x20) == 0 && ((h[0] << 8) | h[1]) % 31 == 0) {
    return Codec::kZlib;
  }
  return std::nullopt;
}

Finding UnanalyzedArchiveFinding(std::string_view format_name) {
  return MakeFinding("MG-ARCHIVE-UNSUPPORTED", Severity::kHigh,
                     std::string(format_name) +
                         " archives are detected but not unpacked; their members are not analyzed",
                     0);
}

std::optional<std::vector<uint8_t>> Decompress(std::span<const uint8_t> in, Codec codec,
                                               const DecompressLimits& limits,
                                               std::vector<Finding>* findings,
                                               uint64_t base_offset) {
  const std::string name(CodecName(codec));
  auto add = [&](const char* id, Severity sev, std::string msg, uint64_t at) {
    findings->push_back(MakeFinding(id, sev, name + ": " + std::move(msg), base_offset + at));
  };
  // The cap: max_output_bytes, and the ratio once past its floor.
  uint64_t ratio_cap = UINT64_MAX;
  if (!__builtin_mul_overflow(limits.max_expansion_ratio, static_cast<uint64_t>(in.size()),
                              &ratio_cap)) {
    ratio_cap = std::max(ratio_cap, limits.ratio_floor_bytes);
  }
  const uint64_t cap = std::min(limits.max_output_bytes, ratio_cap);
  const bool ratio_binds = ratio_cap < limits.max_output_bytes;

  std::vector<uint8_t> out;
  uint8_t chunk[kChunk];
  size_t pos = 0;
  uint64_t members = 0;
  for (;;) {
    // Between streams: what Python's reader does with the rest.
    if (members > 0) {
      size_t p = pos;
      if (codec == Codec::kGzip || codec == Codec::kXz) {
        while (p < in.size() && in[p] == 0) ++p;
        if (codec == Codec::kXz && (p - pos) % 4 != 0) p = pos;  // not stream padding
      }
      if (p == in.size()) break;
      const auto next = codec == Codec::kZlib ? std::nullopt : SniffCodec(in.subspan(p));
      if (!next || *next != codec) {
        add("MG-ARCHIVE-TRAILING-DATA", Severity::kHigh,
            N(in.size() - pos) + " bytes after the end of the compressed stream", pos);
        break;
      }
      if (members == 1) {
        add("MG-ARCHIVE-MULTI-MEMBER", Severity::kLow,
            "a second stream follows at " + N(p) +
                "; Python's reader decodes every stream, single-stream readers only the first",
            p);
      }
      pos = p;
    }
    auto dec = MakeDecoder(codec, limits);
    if (!dec || !dec->Init()) {
      add("MG-ARCHIVE-LIMIT", Severity::kHigh, "decoder initialisation failed", pos);
      break;
    }
    const size_t member_start = pos;
    const uint64_t out_at_start = out.size();
    StepRc rc = StepRc::kOk;
    for (;;) {
      const uint8_t* next_in = in.data() + pos;
      const size_t fed = static_cast<size_t>(std::min<uint64_t>(in.size() - pos, kMaxFeed));
      size_t in_n = fed, out_n = kChunk;
      rc = dec->Step(&next_in, &in_n, chunk, &out_n);
      const size_t consumed = fed - in_n, produced = kChunk - out_n;
      pos += consumed;
      if (produced > cap - out.size()) {
        out.insert(out.end(), chunk, chunk + (cap - out.size()));
        add("MG-ARCHIVE-LIMIT", Severity::kHigh,
            "output exceeds " + N(cap) +
                (ratio_binds ? " bytes (limit max_expansion_ratio " + N(limits.max_expansion_ratio) +
                                   " times " + N(in.size()) + " input bytes)"
                             : " bytes (limit max_output_bytes)") +
                "; decoding stopped",
            pos);
        return out;
      }
      out.insert(out.end(), chunk, chunk + produced);
      if (rc == StepRc::kEnd) break;
      if (rc == StepRc::kMemLimit) {
        add("MG-ARCHIVE-LIMIT", Severity::kHigh,
            "stream needs more decoder memory than " + N(limits.max_decoder_memory_bytes) +
                " bytes (limit max_decoder_memory_bytes)",
            member_start);
        return out;
      }
      if (rc == StepRc::kCorrupt || (consumed == 0 && produced == 0)) {
        const bool truncated = rc != StepRc::kCorrupt;
        if (members == 0 && out.empty() && !truncated) {
          add("MG-ARCHIVE-MALFORMED", Severity::kHigh, "not a valid stream", pos);
          return std::nullopt;
        }
        add("MG-ARCHIVE-MALFORMED", Severity::kHigh,
            std::string(truncated ? "stream is truncated" : "stream is corrupt") + " after " +
                N(out.size() - out_at_start) + " output bytes",
            pos);
        return out;
      }
    }
    ++members;
  }
  return out;
}

}  // namespace modelgate::scanner
