// Bounded decompression. One Decoder drives every codec through a small
// codec-state interface: input is read from the Source in 64 KiB windows,
// output is written straight into the caller's buffer, at most one byte
// past what the budget allows (to tell "exactly at the limit" from "past
// it"), and every byte produced is charged before it is handed out.
#include "decompress.h"

#include <bzlib.h>
#include <fcntl.h>
#include <lz4frame.h>
#include <lzma.h>
#include <sys/mman.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>
#include <zstd_errors.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>

namespace modelgate::scanner {
namespace {

using core::Severity;

constexpr size_t kInputWindow = 1 << 16;
// Output asked of a codec per call (and so the most it can run ahead of
// the caller's request: none, the request is smaller when it is).
constexpr uint64_t kMaxStep = 1 << 16;
// Bytes read after a stream's end to tell another stream from trailing
// data, and before a zstd or lz4 frame to judge its header (a zstd frame
// header is at most 18 bytes, an lz4 one 19, of which the 6 read here say
// the block size).
constexpr size_t kPeekBytes = 18;

// zstd and lz4 frame magics (little-endian u32), and the skippable frames
// both formats share: 0x184D2A50..5F, a u32 size, that many bytes.
constexpr uint32_t kZstdMagic = 0xFD2FB528;
constexpr uint32_t kLz4Magic = 0x184D2204;
constexpr uint32_t kSkippableMagic = 0x184D2A50;
constexpr uint32_t kSkippableMask = 0xFFFFFFF0;
constexpr uint64_t kSkippableHeaderBytes = 8;
// pzstd writes a skippable frame of this many bytes (the next frame's
// compressed size) before each frame; no more can hide in one.
constexpr uint32_t kPzstdSkippableBytes = 4;

enum class StepRc : uint8_t { kOk, kEnd, kCorrupt, kMemLimit };

uint32_t Le32(std::span<const uint8_t> b, size_t at) {
  return b[at] | b[at + 1] << 8 | b[at + 2] << 16 | static_cast<uint32_t>(b[at + 3]) << 24;
}

// CodecState is one stream's decoder.
class CodecState {
 public:
  virtual ~CodecState() = default;
  virtual bool Init() = 0;
  // Step decodes from `in` (advancing it and `in_n`) into `out` (reducing
  // `out_n` by what it wrote).
  virtual StepRc Step(const uint8_t** in, size_t* in_n, uint8_t* out, size_t* out_n) = 0;
  // Error names the library's reason for the last kCorrupt ("" if none).
  virtual std::string Error() const { return ""; }
};

class ZlibState : public CodecState {
 public:
  explicit ZlibState(int window_bits) : window_bits_(window_bits) {}
  ~ZlibState() override {
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

class Bzip2State : public CodecState {
 public:
  ~Bzip2State() override {
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

class LzmaState : public CodecState {
 public:
  LzmaState(bool alone, uint64_t memlimit) : alone_(alone), memlimit_(memlimit) {}
  ~LzmaState() override { lzma_end(&ls_); }
  bool Init() override {
    // No LZMA_CONCATENATED: the Decoder sees each stream's end and judges
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

// ZstdState decodes one zstd frame (ZSTD_decompressStream stops at a
// frame's end; the Decoder judges what follows). The window limit is set
// in the library too, as a second guard behind the Decoder's exact check
// of the frame header.
class ZstdState : public CodecState {
 public:
  explicit ZstdState(uint64_t memlimit) : memlimit_(memlimit) {}
  ~ZstdState() override { ZSTD_freeDStream(ds_); }
  bool Init() override {
    ds_ = ZSTD_createDStream();
    if (ds_ == nullptr) return false;
    int log = 10;  // ZSTD_WINDOWLOG_ABSOLUTEMIN: the smallest the library takes
    while (log < 31 && (uint64_t{1} << log) < memlimit_) ++log;  // ceil(log2), at most 31
    return !ZSTD_isError(ZSTD_DCtx_setParameter(ds_, ZSTD_d_windowLogMax, log));
  }
  StepRc Step(const uint8_t** in, size_t* in_n, uint8_t* out, size_t* out_n) override {
    ZSTD_inBuffer ib{*in, *in_n, 0};
    ZSTD_outBuffer ob{out, *out_n, 0};
    const size_t rc = ZSTD_decompressStream(ds_, &ob, &ib);
    *in += ib.pos;
    *in_n -= ib.pos;
    *out_n -= ob.pos;
    if (ZSTD_isError(rc)) {
      const ZSTD_ErrorCode code = ZSTD_getErrorCode(rc);
      if (code == ZSTD_error_frameParameter_windowTooLarge || code == ZSTD_error_memory_allocation) {
        return StepRc::kMemLimit;
      }
      error_ = ZSTD_getErrorName(rc);
      return StepRc::kCorrupt;
    }
    return rc == 0 ? StepRc::kEnd : StepRc::kOk;
  }
  std::string Error() const override { return error_; }

 private:
  uint64_t memlimit_;
  ZSTD_DStream* ds_ = nullptr;
  std::string error_;
};

// Lz4State decodes one lz4 frame (LZ4F_decompress returns 0 at a frame's
// end, having consumed no byte past it). liblz4 checks the block and
// content checksums and the content size the header declares, and sizes
// its buffers by the block size alone (at most 4 MiB), never by the
// declared content size.
class Lz4State : public CodecState {
 public:
  ~Lz4State() override {
    if (dctx_ != nullptr) LZ4F_freeDecompressionContext(dctx_);
  }
  bool Init() override { return !LZ4F_isError(LZ4F_createDecompressionContext(&dctx_, LZ4F_VERSION)); }
  StepRc Step(const uint8_t** in, size_t* in_n, uint8_t* out, size_t* out_n) override {
    size_t src_n = *in_n, dst_n = *out_n;
    const size_t rc = LZ4F_decompress(dctx_, out, &dst_n, *in, &src_n, nullptr);
    *in += src_n;
    *in_n -= src_n;
    *out_n -= dst_n;
    if (LZ4F_isError(rc)) {
      error_ = LZ4F_getErrorName(rc);
      return StepRc::kCorrupt;
    }
    return rc == 0 ? StepRc::kEnd : StepRc::kOk;
  }
  std::string Error() const override { return error_; }

 private:
  LZ4F_dctx* dctx_ = nullptr;
  std::string error_;
};

// StoredState copies: a stored zip member is its own bytes, so that both
// zip methods go through one reader, one budget and one CRC check.
class StoredState : public CodecState {
 public:
  explicit StoredState(uint64_t size) : left_(size) {}
  bool Init() override { return true; }
  StepRc Step(const uint8_t** in, size_t* in_n, uint8_t* out, size_t* out_n) override {
    const size_t n = static_cast<size_t>(std::min<uint64_t>({*in_n, *out_n, left_}));
    std::memcpy(out, *in, n);
    *in += n;
    *in_n -= n;
    *out_n -= n;
    left_ -= n;
    return left_ == 0 ? StepRc::kEnd : StepRc::kOk;
  }

 private:
  uint64_t left_;
};

// Kind is what the Decoder decodes: a wrapper codec or a zip method.
enum class Kind : uint8_t {
  kGzip, kZlib, kBzip2, kXz, kLzma, kZstd, kLz4, kJoblibZf, kRawDeflate, kStored
};

Kind KindOf(Codec c) {
  switch (c) {
    case Codec::kGzip: return Kind::kGzip;
    case Codec::kZlib: return Kind::kZlib;
    case Codec::kBzip2: return Kind::kBzip2;
    case Codec::kXz: return Kind::kXz;
    case Codec::kLzma: return Kind::kLzma;
    case Codec::kZstd: return Kind::kZstd;
    case Codec::kLz4: return Kind::kLz4;
    case Codec::kJoblibZf: return Kind::kJoblibZf;
  }
  return Kind::kStored;
}

bool MultiStream(Kind k) {
  return k == Kind::kGzip || k == Kind::kBzip2 || k == Kind::kXz || k == Kind::kLzma;
}
// Frame kinds: zstd and lz4, whose frames may be separated by skippable ones.
bool Framed(Kind k) { return k == Kind::kZstd || k == Kind::kLz4; }
// OneStream kinds are read by zlib.decompress: one stream, then trailing data.
bool OneStream(Kind k) { return k == Kind::kZlib || k == Kind::kJoblibZf; }

bool IsSkippable(uint32_t magic) { return (magic & kSkippableMask) == kSkippableMagic; }

// ZstdWindowBytes is the window size a zstd frame header declares (RFC
// 8878 3.1.1.1.2: the window descriptor, or the content size of a
// single-segment frame), through a ByteReader: nullopt when `h` is too
// short to hold it or the header is invalid (the decoder then reports it).
std::optional<uint64_t> ZstdWindowBytes(std::span<const uint8_t> h) {
  core::ByteReader r(h);
  auto magic = r.U32Le();
  auto fhd = r.U8();
  if (!magic.ok() || magic.value() != kZstdMagic || !fhd.ok()) return std::nullopt;
  const uint8_t d = fhd.value();
  if ((d & 0x08) != 0) return std::nullopt;  // reserved bit
  const bool single_segment = (d & 0x20) != 0;
  if (!single_segment) {
    auto wd = r.U8();
    if (!wd.ok()) return std::nullopt;
    const unsigned log = 10u + (wd.value() >> 3);
    if (log > 41) return std::nullopt;  // past what the format can say for 64-bit sizes
    const uint64_t base = uint64_t{1} << log;
    return base + (base / 8) * (wd.value() & 7);
  }
  static constexpr int kDictIdBytes[] = {0, 1, 2, 4};
  if (!r.Skip(static_cast<uint64_t>(kDictIdBytes[d & 3])).ok()) return std::nullopt;
  static constexpr int kFcsBytes[] = {1, 2, 4, 8};  // single segment: flag 0 is 1 byte
  auto fcs = r.Take(static_cast<uint64_t>(kFcsBytes[d >> 6]));
  if (!fcs.ok()) return std::nullopt;
  uint64_t v = 0;
  for (size_t i = fcs.value().size(); i-- > 0;) v = (v << 8) | fcs.value()[i];
  return (d >> 6) == 1 ? v + 256 : v;
}

// Lz4BlockBytes is the block maximum size an lz4 frame header declares
// (BD byte, ids 4..7: 64 KiB .. 4 MiB), what liblz4 sizes its buffers by;
// nullopt when `h` does not hold it or the id is invalid.
std::optional<uint64_t> Lz4BlockBytes(std::span<const uint8_t> h) {
  if (h.size() < 6 || Le32(h, 0) != kLz4Magic) return std::nullopt;
  const unsigned id = (h[5] >> 4) & 7;
  if (id < 4) return std::nullopt;
  return uint64_t{1} << (2 * id + 8);
}

std::string N(uint64_t v) { return std::to_string(v); }

}  // namespace

struct Decoder::Impl {
  Impl(const Source& s, uint64_t off, uint64_t n, Kind k, Budget& b, std::vector<Finding>* f,
       DecoderOptions o)
      : src(s), begin(off), end(off + n), kind(k), budget(b), findings(f), opt(std::move(o)),
        cap(b.StreamCap(n)), next_read(off), stream_start(off) {}

  const Source& src;
  uint64_t begin, end;  // the range, in `src`
  Kind kind;
  Budget& budget;
  std::vector<Finding>* findings;
  DecoderOptions opt;
  uint64_t cap;  // what this stream (all its concatenated members) may produce
  std::unique_ptr<CodecState> codec;  // null between streams
  std::vector<uint8_t> buf = std::vector<uint8_t>(kInputWindow);
  size_t buf_pos = 0, buf_len = 0;
  uint64_t next_read;     // offset of the next window read from `src`
  uint64_t stream_start;  // offset of the current stream's first byte
  uint64_t stream_out_start = 0;
  uint64_t zf_length = 0;    // kJoblibZf: the length its header declares
  bool zf_checked = false;   // ... compared with what the stream decoded
  bool frame_magic = false;  // zstd/lz4: the first frame's magic was there

  // pos is the offset of the first input byte the codec has not consumed.
  uint64_t pos() const { return next_read - (buf_len - buf_pos); }
  uint64_t At(uint64_t offset) const { return opt.finding_base + (offset - begin); }
  void Add(const char* id, Severity sev, std::string msg, uint64_t offset) {
    const std::string& name = opt.label;
    findings->push_back(MakeFinding(id, sev, name + ": " + std::move(msg), At(offset)));
  }
  void Add(BudgetStatus s) { findings->push_back(s.TakeFinding()); }
  void SeekTo(uint64_t offset) {
    buf_pos = buf_len = 0;
    next_read = offset;
  }
  // Fill reads the next window when the current one is used up.
  core::Status Fill() {
    if (buf_pos < buf_len || next_read >= end) return core::OkStatus();
    const size_t n = static_cast<size_t>(std::min<uint64_t>(end - next_read, kInputWindow));
    if (auto s = src.Read(next_read, std::span<uint8_t>(buf).first(n)); !s.ok()) return s;
    buf_pos = 0;
    buf_len = n;
    next_read += n;
    return core::OkStatus();
  }
  std::unique_ptr<CodecState> MakeState() const {
    switch (kind) {
      case Kind::kGzip: return std::make_unique<ZlibState>(16 + MAX_WBITS);
      case Kind::kZlib: return std::make_unique<ZlibState>(MAX_WBITS);
      case Kind::kRawDeflate: return std::make_unique<ZlibState>(-MAX_WBITS);
      case Kind::kBzip2: return std::make_unique<Bzip2State>();
      case Kind::kXz: return std::make_unique<LzmaState>(false, opt.max_decoder_memory_bytes);
      case Kind::kLzma: return std::make_unique<LzmaState>(true, opt.max_decoder_memory_bytes);
      case Kind::kZstd: return std::make_unique<ZstdState>(opt.max_decoder_memory_bytes);
      case Kind::kLz4: return std::make_unique<Lz4State>();
      case Kind::kJoblibZf: return std::make_unique<ZlibState>(MAX_WBITS);
      case Kind::kStored: return std::make_unique<StoredState>(end - begin);
    }
    return nullptr;
  }

  // FrameStart, for zstd and lz4 before each frame, skips skippable frames
  // (each one's content is MG-ARCHIVE-HIDDEN-DATA), then judges what starts
  // at the input position: kMore when a frame is to be decoded there (its
  // window or block size within max_decoder_memory_bytes), the state to end
  // in otherwise. `streams` frames were decoded before.
  DecodeState FrameStart(uint64_t streams, std::optional<core::Error>* io_error) {
    uint64_t p = pos();
    bool skipped = false;
    for (;;) {
      if (p == end) {
        if (streams == 0) break;  // nothing at all: the codec says truncated
        SeekTo(p);
        return DecodeState::kEnd;
      }
      uint8_t peek_buf[kPeekBytes];
      const size_t peek_n = static_cast<size_t>(std::min<uint64_t>(end - p, kPeekBytes));
      const std::span<const uint8_t> peek(peek_buf, peek_n);
      if (auto s = src.Read(p, std::span<uint8_t>(peek_buf, peek_n)); !s.ok()) {
        *io_error = s.error();
        return DecodeState::kIoError;
      }
      if (peek_n >= 4 && IsSkippable(Le32(peek, 0))) {
        if (peek_n < kSkippableHeaderBytes) {
          Add("MG-ARCHIVE-MALFORMED", Severity::kHigh, "skippable frame header is truncated", p);
          return DecodeState::kMalformed;
        }
        const uint32_t magic = Le32(peek, 0), n = Le32(peek, 4);
        const uint64_t body = p + kSkippableHeaderBytes;
        if (n > end - body) {
          Add("MG-ARCHIVE-MALFORMED", Severity::kHigh,
              "skippable frame of " + std::to_string(n) + " bytes runs past the end of the input",
              p);
          return DecodeState::kMalformed;
        }
        const bool pzstd = magic == kSkippableMagic && n == kPzstdSkippableBytes;
        Add("MG-ARCHIVE-HIDDEN-DATA", pzstd ? Severity::kLow : Severity::kHigh,
            "skippable frame of " + std::to_string(n) +
                " bytes, which every reader skips unread" +
                (pzstd ? " (the size pzstd writes before each frame)" : ""),
            p);
        p = body + n;
        skipped = true;
        continue;
      }
      const uint32_t own = kind == Kind::kZstd ? kZstdMagic : kLz4Magic;
      if (peek_n < 4 || Le32(peek, 0) != own) {
        // libzstd also decodes the legacy v0.1-v0.7 formats, whose decoders
        // write output that depends on the caller's buffer size before
        // they fail (fuzz_decompress found two readings of one input):
        // only a frame with the current magic is handed to it.
        if (kind == Kind::kZstd && (streams == 0 || skipped)) {
          Add("MG-ARCHIVE-MALFORMED", Severity::kHigh,
              std::string(skipped ? "after the skippable frames, " : "") +
                  "no zstd frame (the magic 28 B5 2F FD) starts here", p);
          return streams == 0 && !skipped ? DecodeState::kNotAStream : DecodeState::kMalformed;
        }
        if (streams == 0) break;  // the codec reports what is wrong with it
        Add("MG-ARCHIVE-TRAILING-DATA", Severity::kHigh,
            std::to_string(end - p) + " bytes after the end of the compressed stream", p);
        SeekTo(end);
        return DecodeState::kEnd;
      }
      frame_magic = true;
      if (streams == 1) {
        Add("MG-ARCHIVE-MULTI-MEMBER", Severity::kLow,
            "a second frame follows at " + std::to_string(At(p)) +
                "; Python's reader decodes every frame, single-frame readers only the first",
            p);
      }
      const auto need = kind == Kind::kZstd ? ZstdWindowBytes(peek) : Lz4BlockBytes(peek);
      if (need && *need > opt.max_decoder_memory_bytes) {
        Add(budget.DecoderMemoryLimit(opt.max_decoder_memory_bytes, At(p)));
        return DecodeState::kLimit;
      }
      break;
    }
    SeekTo(p);
    return DecodeState::kMore;
  }
};

Decoder::Decoder(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Decoder::~Decoder() = default;

std::unique_ptr<Decoder> Decoder::Open(const Source& src, uint64_t offset, uint64_t size,
                                       Codec codec, Budget& budget,
                                       std::vector<Finding>* findings, DecoderOptions options) {
  if (offset > src.size() || size > src.size() - offset) return nullptr;
  if (options.label.empty()) options.label = std::string(CodecName(codec));
  auto impl = std::make_unique<Impl>(src, offset, size, KindOf(codec), budget, findings,
                                     std::move(options));
  if (codec != Codec::kJoblibZf) return std::unique_ptr<Decoder>(new Decoder(std::move(impl)));
  // The ZF header: read_zfile's int(field, 16) and optional space; the zlib
  // stream starts after them.
  uint8_t head[kJoblibZfHeaderBytes + 1];
  const size_t n = static_cast<size_t>(std::min<uint64_t>(size, sizeof head));
  Impl& d = *impl;
  std::unique_ptr<Decoder> dec(new Decoder(std::move(impl)));
  if (auto s = src.Read(offset, std::span<uint8_t>(head, n)); !s.ok()) {
    dec->io_error_ = s.error();
    dec->state_ = DecodeState::kIoError;
    return dec;
  }
  const std::span<const uint8_t> h(head, n);
  const auto length = n >= kJoblibZfHeaderBytes && h[0] == 'Z' && h[1] == 'F'
                          ? ParseJoblibZfLength(h.subspan(2, kJoblibZfHeaderBytes - 2))
                          : std::nullopt;
  if (!length) {
    d.Add("MG-ARCHIVE-MALFORMED", Severity::kHigh,
          "not a joblib ZF header (\"ZF\" and a hex length joblib can read)", offset);
    dec->state_ = DecodeState::kNotAStream;
    return dec;
  }
  d.zf_length = *length;
  d.SeekTo(offset + kJoblibZfHeaderBytes + (n > kJoblibZfHeaderBytes && h[kJoblibZfHeaderBytes] == ' '));
  return dec;
}

std::unique_ptr<Decoder> Decoder::OpenZip(const Source& src, uint64_t offset, uint64_t size,
                                          uint16_t method, Budget& budget,
                                          std::vector<Finding>* findings,
                                          DecoderOptions options) {
  if (offset > src.size() || size > src.size() - offset) return nullptr;
  if (method != 0 && method != 8) return nullptr;
  if (options.label.empty()) options.label = method == 8 ? "deflate" : "stored";
  return std::unique_ptr<Decoder>(new Decoder(std::make_unique<Impl>(
      src, offset, size, method == 8 ? Kind::kRawDeflate : Kind::kStored, budget, findings,
      std::move(options))));
}

size_t Decoder::Read(std::span<uint8_t> out) {
  Impl& d = *impl_;
  size_t total = 0;
  while (total < out.size() && state_ == DecodeState::kMore) {
    if (!d.codec) {
      if (d.kind == Kind::kJoblibZf && streams_ > 0 && !d.zf_checked) {
        // read_zfile asserts len(data) == the declared length.
        d.zf_checked = true;
        if (produced_ != d.zf_length) {
          d.Add("MG-ARCHIVE-MALFORMED", Severity::kHigh,
                "the header declares " + N(d.zf_length) + " bytes, the stream decodes to " +
                    N(produced_) + " (joblib's assert; python -O loads it anyway)",
                d.begin);
        }
      }
      if (Framed(d.kind)) {
        // Before each frame: skippable frames, trailing data, the header.
        if (const DecodeState s = d.FrameStart(streams_, &io_error_); s != DecodeState::kMore) {
          state_ = s;
          break;
        }
      } else if (streams_ > 0) {
        // Between streams: what Python's reader does with the rest.
        if (!MultiStream(d.kind) && !OneStream(d.kind)) {
          state_ = DecodeState::kEnd;  // zip members: what follows is not read
          break;
        }
        const uint64_t after = d.pos();
        uint64_t p = after;
        if (d.kind == Kind::kGzip || d.kind == Kind::kXz) {
          for (bool zero = true; zero;) {  // skip zero padding, window by window
            if (auto s = d.Fill(); !s.ok()) {
              io_error_ = s.error();
              state_ = DecodeState::kIoError;
              return total;
            }
            if (d.buf_pos == d.buf_len) break;
            while (d.buf_pos < d.buf_len && d.buf[d.buf_pos] == 0) ++d.buf_pos;
            zero = d.buf_pos == d.buf_len;
          }
          p = d.pos();
          if (d.kind == Kind::kXz && (p - after) % 4 != 0) p = after;  // not stream padding
        }
        if (p == d.end) {
          state_ = DecodeState::kEnd;
          break;
        }
        uint8_t peek[kPeekBytes];
        const size_t peek_n = static_cast<size_t>(std::min<uint64_t>(d.end - p, kPeekBytes));
        if (auto s = d.src.Read(p, std::span<uint8_t>(peek, peek_n)); !s.ok()) {
          io_error_ = s.error();
          state_ = DecodeState::kIoError;
          break;
        }
        const auto next = OneStream(d.kind)
                              ? std::nullopt
                              : SniffCodec(std::span<const uint8_t>(peek, peek_n));
        if (!next || KindOf(*next) != d.kind) {
          d.Add("MG-ARCHIVE-TRAILING-DATA", Severity::kHigh,
                N(d.end - after) + " bytes after the end of the compressed stream", after);
          state_ = DecodeState::kEnd;
          break;
        }
        if (streams_ == 1) {
          d.Add("MG-ARCHIVE-MULTI-MEMBER", Severity::kLow,
                "a second stream follows at " + N(d.At(p)) +
                    "; Python's reader decodes every stream, single-stream readers only the first",
                p);
        }
        d.SeekTo(p);
      }
      d.codec = d.MakeState();
      d.stream_start = d.pos();
      d.stream_out_start = produced_;
      if (!d.codec || !d.codec->Init()) {
        d.Add("MG-ARCHIVE-LIMIT", Severity::kHigh, "decoder initialisation failed", d.stream_start);
        state_ = DecodeState::kLimit;
        break;
      }
    }
    if (auto s = d.Fill(); !s.ok()) {
      io_error_ = s.error();
      state_ = DecodeState::kIoError;
      break;
    }
    const uint64_t cap_left = d.cap - std::min(d.cap, produced_);
    const uint64_t stop_left = d.opt.stop_after - std::min(d.opt.stop_after, produced_);
    const uint64_t budget_left = d.budget.InflateRemaining();
    const uint64_t allow = std::min({cap_left, stop_left, budget_left});
    const uint64_t room = out.size() - total;
    const uint64_t one_past = allow == UINT64_MAX ? allow : allow + 1;
    const size_t want = static_cast<size_t>(std::min({room, one_past, kMaxStep}));

    const uint8_t* next_in = d.buf.data() + d.buf_pos;
    const size_t fed = d.buf_len - d.buf_pos;
    size_t in_n = fed, out_n = want;
    const StepRc rc = d.codec->Step(&next_in, &in_n, out.data() + total, &out_n);
    const size_t consumed = fed - in_n, produced = want - out_n;
    d.buf_pos += consumed;
    if (produced > allow) {
      // One byte past what is allowed: hand out up to the limit, then say
      // which limit it was (the caller's stop first: it has its own finding).
      (void)d.budget.ChargeInflated(allow);
      total += static_cast<size_t>(allow);
      produced_ += allow;
      if (allow == stop_left) {
        state_ = DecodeState::kStopped;
      } else if (allow == budget_left) {
        d.Add(d.budget.ChargeInflated(1, d.At(d.pos())));
        state_ = DecodeState::kLimit;
      } else {
        d.Add(d.budget.StreamLimit(d.end - d.begin, d.At(d.pos())));
        state_ = DecodeState::kLimit;
      }
      break;
    }
    (void)d.budget.ChargeInflated(produced);  // within InflateRemaining: cannot fail
    total += produced;
    produced_ += produced;
    if (rc == StepRc::kEnd) {
      d.codec.reset();
      ++streams_;
      continue;
    }
    if (rc == StepRc::kMemLimit) {
      d.Add(d.budget.DecoderMemoryLimit(d.opt.max_decoder_memory_bytes, d.At(d.stream_start)));
      state_ = DecodeState::kLimit;
      break;
    }
    if (rc == StepRc::kCorrupt || (consumed == 0 && produced == 0)) {
      // No progress with room to write: the input ran out mid-stream.
      const bool truncated = rc != StepRc::kCorrupt;
      // A frame whose magic was there is a stream, even when liblz4 finds
      // its first block corrupt before it hands out any byte.
      if (streams_ == 0 && produced_ == 0 && !truncated && !d.frame_magic) {
        d.Add("MG-ARCHIVE-MALFORMED", Severity::kHigh, "not a valid stream", d.pos());
        state_ = DecodeState::kNotAStream;
        break;
      }
      const std::string why = truncated ? "" : d.codec->Error();
      d.Add("MG-ARCHIVE-MALFORMED", Severity::kHigh,
            std::string(truncated ? "stream is truncated" : "stream is corrupt") + " after " +
                N(produced_ - d.stream_out_start) + " output bytes" +
                (why.empty() ? "" : " (" + why + ")"),
            d.pos());
      state_ = DecodeState::kMalformed;
      break;
    }
  }
  return total;
}

std::vector<uint8_t> Decoder::ReadUpTo(uint64_t n) {
  std::vector<uint8_t> out;
  while (out.size() < n && more()) {
    const size_t chunk = static_cast<size_t>(std::min<uint64_t>(n - out.size(), kMaxStep));
    const size_t at = out.size();
    out.resize(at + chunk);
    out.resize(at + Read(std::span<uint8_t>(out).subspan(at)));
  }
  return out;
}

void Decoder::ReadAll(std::vector<uint8_t>* out) {
  while (more()) {
    const size_t at = out->size();
    out->resize(at + kMaxStep);
    out->resize(at + Read(std::span<uint8_t>(*out).subspan(at)));
  }
}

// --- Spool ---

core::Result<std::unique_ptr<Spool>> Spool::Create(const char* name) {
  std::unique_ptr<Spool> s(new Spool());
  s->fd_ = ::memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
  return s;  // fd_ < 0: the heap buffer serves
}

Spool::~Spool() {
  if (map_ != nullptr) ::munmap(const_cast<uint8_t*>(map_), static_cast<size_t>(size_));
  if (fd_ >= 0) ::close(fd_);
}

core::Status Spool::Append(std::span<const uint8_t> bytes) {
  if (sealed_) return core::Error{core::Code::kIoRead, size_, "spool is sealed"};
  uint64_t end = 0;
  if (__builtin_add_overflow(size_, bytes.size(), &end)) {
    return core::Error{core::Code::kIoRead, size_, "spool size overflows"};
  }
  if (fd_ < 0) {
    heap_.insert(heap_.end(), bytes.begin(), bytes.end());
    size_ = end;
    return core::OkStatus();
  }
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::pwrite(fd_, bytes.data() + done, bytes.size() - done,
                               static_cast<off_t>(size_ + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      return core::Error{core::Code::kIoRead, size_ + done,
                         std::string("cannot write the decompression spool: ") +
                             std::strerror(n < 0 ? errno : ENOSPC)};
    }
    done += static_cast<size_t>(n);
  }
  size_ = end;
  return core::OkStatus();
}

core::Status Spool::Seal() {
  if (sealed_) return core::OkStatus();
  sealed_ = true;
  if (fd_ >= 0 &&
      ::fcntl(fd_, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) != 0) {
    return core::Error{core::Code::kIoRead, core::kNoOffset,
                       std::string("cannot seal the decompression spool: ") + std::strerror(errno)};
  }
  return core::OkStatus();
}

core::Status Spool::Read(uint64_t offset, std::span<uint8_t> out) const {
  if (offset > size_ || out.size() > size_ - offset) {
    return core::Error{core::Code::kStTruncated, offset, "read past the end of the spool"};
  }
  if (fd_ < 0) {
    std::copy_n(heap_.data() + offset, out.size(), out.data());
    return core::OkStatus();
  }
  return core::PreadExact(fd_, offset, out);
}

core::Result<std::span<const uint8_t>> Spool::Bytes() const {
  if (!sealed_) return core::Error{core::Code::kIoRead, core::kNoOffset, "spool is not sealed"};
  if (fd_ < 0) return std::span<const uint8_t>(heap_);
  if (size_ == 0) return std::span<const uint8_t>();
  if (map_ == nullptr) {
    void* p = ::mmap(nullptr, static_cast<size_t>(size_), PROT_READ, MAP_SHARED, fd_, 0);
    if (p == MAP_FAILED) {
      return core::Error{core::Code::kIoRead, core::kNoOffset,
                         std::string("cannot map the decompression spool: ") + std::strerror(errno)};
    }
    map_ = static_cast<const uint8_t*>(p);
  }
  return std::span<const uint8_t>(map_, static_cast<size_t>(size_));
}

core::Result<std::unique_ptr<Spool>> DecodeToSpool(Decoder& dec, std::span<const uint8_t> prefix) {
  auto spool = Spool::Create();
  if (!spool.ok()) return spool.error();
  std::unique_ptr<Spool> s = std::move(spool).value();
  if (auto a = s->Append(prefix); !a.ok()) return a.error();
  std::vector<uint8_t> chunk(4 * kMaxStep);
  while (dec.more()) {
    const size_t n = dec.Read(chunk);
    if (auto a = s->Append(std::span<const uint8_t>(chunk).first(n)); !a.ok()) return a.error();
  }
  if (dec.state() == DecodeState::kIoError) return *dec.io_error();
  if (auto a = s->Seal(); !a.ok()) return a.error();
  return s;
}

core::Result<std::unique_ptr<Spool>> DecompressToSpool(const Source& src, uint64_t offset,
                                                       uint64_t size, Codec codec, Budget& budget,
                                                       std::vector<Finding>* findings,
                                                       DecoderOptions options) {
  auto dec = Decoder::Open(src, offset, size, codec, budget, findings, std::move(options));
  if (!dec) {
    return core::Error{core::Code::kStTruncated, offset, "compressed range is outside the source"};
  }
  auto s = DecodeToSpool(*dec);
  if (!s.ok()) return s.error();
  if (dec->state() == DecodeState::kNotAStream) return std::unique_ptr<Spool>();
  return s;
}

// --- the in-memory interface ---

std::optional<std::vector<uint8_t>> Decompress(std::span<const uint8_t> in, Codec codec,
                                               const DecompressLimits& limits,
                                               std::vector<Finding>* findings,
                                               uint64_t base_offset) {
  BudgetLimits b;
  // max_output_bytes bounds what is held, across concatenated streams too
  // (max_member_bytes alone caps each stream).
  b.max_total_decompressed_bytes = limits.max_output_bytes;
  b.max_member_bytes = limits.max_output_bytes;
  b.max_expansion_ratio = limits.max_expansion_ratio;
  b.ratio_floor_bytes = limits.ratio_floor_bytes;
  Budget budget(b);
  MemorySource src(in);
  DecoderOptions o;
  o.max_decoder_memory_bytes = limits.max_decoder_memory_bytes;
  o.finding_base = base_offset;
  auto dec = Decoder::Open(src, 0, in.size(), codec, budget, findings, std::move(o));
  std::vector<uint8_t> out;
  dec->ReadAll(&out);
  if (dec->state() == DecodeState::kNotAStream) return std::nullopt;
  if (out.size() > limits.max_output_bytes) {
    // Concatenated streams can each stop at the cap; what is held never
    // passes it (fuzz_decompress seed bzip2-concatenated-past-max-output).
    out.resize(static_cast<size_t>(limits.max_output_bytes));
    const bool reported = std::any_of(findings->begin(), findings->end(), [](const Finding& f) {
      return f.id == "MG-ARCHIVE-LIMIT";
    });
    if (!reported) {
      findings->push_back(MakeFinding(
          "MG-ARCHIVE-LIMIT", core::Severity::kHigh,
          "decoded output passes " + std::to_string(limits.max_output_bytes) +
              " bytes (limit max_member_bytes); the rest is not judged",
          base_offset));
    }
  }
  return out;
}

std::string_view CodecName(Codec c) {
  switch (c) {
    case Codec::kGzip: return "gzip";
    case Codec::kZlib: return "zlib";
    case Codec::kBzip2: return "bzip2";
    case Codec::kXz: return "xz";
    case Codec::kLzma: return "lzma";
    case Codec::kZstd: return "zstd";
    case Codec::kLz4: return "lz4";
    case Codec::kJoblibZf: return "joblib-zf";
  }
  return "unknown";
}

std::optional<uint64_t> ParseJoblibZfLength(std::span<const uint8_t> f) {
  // Python's int(bytes, 16): _PyLong_FromBytes, then PyLong_FromString.
  auto space = [](uint8_t c) { return c == ' ' || (c >= '\t' && c <= '\r'); };
  auto digit = [](uint8_t c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  size_t i = 0;
  while (i < f.size() && space(f[i])) ++i;
  bool negative = false;
  if (i < f.size() && (f[i] == '+' || f[i] == '-')) negative = f[i++] == '-';
  if (i + 1 < f.size() && f[i] == '0' && (f[i + 1] == 'x' || f[i + 1] == 'X')) {
    i += 2;
    if (i < f.size() && f[i] == '_') ++i;  // "0x_1f" is valid
  }
  uint64_t v = 0;
  size_t digits = 0;
  while (i < f.size()) {
    if (f[i] == '_' && digits > 0 && i + 1 < f.size() && digit(f[i + 1]) >= 0) {
      ++i;  // one underscore between digits
      continue;
    }
    const int d = digit(f[i]);
    if (d < 0) break;
    if (v > (static_cast<uint64_t>(INT64_MAX) - static_cast<uint64_t>(d)) / 16) return std::nullopt;
    v = v * 16 + static_cast<uint64_t>(d);
    ++digits;
    ++i;
  }
  while (i < f.size() && space(f[i])) ++i;
  if (digits == 0 || i != f.size()) return std::nullopt;
  if (negative && v != 0) return std::nullopt;  // zlib.decompress: bufsize must be non-negative
  return v;
}

namespace {

// SniffFrame says whether `h` starts a zstd or lz4 frame, strictly: the
// magic and every header field `h` holds, as the library checks them.
std::optional<Codec> SniffFrame(std::span<const uint8_t> h) {
  if (h.size() < 4) return std::nullopt;
  const uint32_t magic = Le32(h, 0);
  if (magic == kZstdMagic) {
    if (h.size() >= 5 && (h[4] & 0x08) != 0) return std::nullopt;  // reserved bit
    // A window descriptor 64-bit libzstd accepts: a window log of at most
    // 31 (ZSTD_WINDOWLOG_MAX_64).
    if (h.size() >= 6 && (h[4] & 0x20) == 0 && 10 + (h[5] >> 3) > 31) return std::nullopt;
    return Codec::kZstd;
  }
  if (magic == kLz4Magic) {
    if (h.size() >= 5 && ((h[4] >> 6) != 1 || (h[4] & 0x02) != 0)) return std::nullopt;  // version, reserved
    if (h.size() >= 6 && ((h[5] & 0x8F) != 0 || !Lz4BlockBytes(h))) return std::nullopt;
    if (h.size() >= 7) {
      const size_t header = LZ4F_headerSize(h.data(), h.size());
      if (LZ4F_isError(header)) return std::nullopt;
      if (h.size() >= header) {  // whole: its checksum must match
        LZ4F_dctx* dctx = nullptr;
        if (LZ4F_isError(LZ4F_createDecompressionContext(&dctx, LZ4F_VERSION))) return std::nullopt;
        LZ4F_frameInfo_t info{};
        size_t n = header;
        const size_t rc = LZ4F_getFrameInfo(dctx, &info, h.data(), &n);
        LZ4F_freeDecompressionContext(dctx);
        if (LZ4F_isError(rc)) return std::nullopt;
      }
    }
    return Codec::kLz4;
  }
  return std::nullopt;
}

}  // namespace

std::optional<Codec> SniffCodec(std::span<const uint8_t> h) {
  if (h.size() >= 3 && h[0] == 0x1f && h[1] == 0x8b && h[2] == 8) return Codec::kGzip;
  if (auto framed = SniffFrame(h)) return framed;
  {
    // Skippable frames that `h` holds whole, then a zstd or lz4 frame (the
    // magic range is shared: only the frame after them tells which).
    std::span<const uint8_t> rest = h;
    while (rest.size() >= kSkippableHeaderBytes && IsSkippable(Le32(rest, 0))) {
      const uint64_t n = Le32(rest, 4);
      if (n > rest.size() - kSkippableHeaderBytes) break;
      rest = rest.subspan(kSkippableHeaderBytes + static_cast<size_t>(n));
      if (auto framed = SniffFrame(rest)) return framed;
    }
  }
  if (h.size() >= kJoblibZfHeaderBytes + 2 && h[0] == 'Z' && h[1] == 'F' &&
      ParseJoblibZfLength(h.subspan(2, kJoblibZfHeaderBytes - 2))) {
    const size_t z = kJoblibZfHeaderBytes + (h[kJoblibZfHeaderBytes] == ' ' ? 1 : 0);
    if (h.size() >= z + 2 && h[z] == 0x78 && (h[z + 1] & 0x20) == 0 &&
        ((h[z] << 8) | h[z + 1]) % 31 == 0) {
      return Codec::kJoblibZf;
    }
  }
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

}  // namespace modelgate::scanner
