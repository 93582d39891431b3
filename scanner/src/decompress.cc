// Bounded decompression. One Decoder drives every codec through a small
// codec-state interface: input is read from the Source in 64 KiB windows,
// output is written straight into the caller's buffer, at most one byte
// past what the budget allows (to tell "exactly at the limit" from "past
// it"), and every byte produced is charged before it is handed out.
#include "decompress.h"

#include <bzlib.h>
#include <fcntl.h>
#include <lzma.h>
#include <sys/mman.h>
#include <unistd.h>
#include <zlib.h>

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
// Bytes read after a stream's end to tell another stream from trailing data.
constexpr size_t kPeekBytes = 16;

enum class StepRc : uint8_t { kOk, kEnd, kCorrupt, kMemLimit };

// CodecState is one stream's decoder.
class CodecState {
 public:
  virtual ~CodecState() = default;
  virtual bool Init() = 0;
  // Step decodes from `in` (advancing it and `in_n`) into `out` (reducing
  // `out_n` by what it wrote).
  virtual StepRc Step(const uint8_t** in, size_t* in_n, uint8_t* out, size_t* out_n) = 0;
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
enum class Kind : uint8_t { kGzip, kZlib, kBzip2, kXz, kLzma, kRawDeflate, kStored };

Kind KindOf(Codec c) {
  switch (c) {
    case Codec::kGzip: return Kind::kGzip;
    case Codec::kZlib: return Kind::kZlib;
    case Codec::kBzip2: return Kind::kBzip2;
    case Codec::kXz: return Kind::kXz;
    case Codec::kLzma: return Kind::kLzma;
  }
  return Kind::kStored;
}

bool MultiStream(Kind k) {
  return k == Kind::kGzip || k == Kind::kBzip2 || k == Kind::kXz || k == Kind::kLzma;
}

uint32_t Le32(std::span<const uint8_t> b, size_t at) {
  return b[at] | b[at + 1] << 8 | b[at + 2] << 16 | static_cast<uint32_t>(b[at + 3]) << 24;
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
      case Kind::kStored: return std::make_unique<StoredState>(end - begin);
    }
    return nullptr;
  }
};

Decoder::Decoder(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Decoder::~Decoder() = default;

std::unique_ptr<Decoder> Decoder::Open(const Source& src, uint64_t offset, uint64_t size,
                                       Codec codec, Budget& budget,
                                       std::vector<Finding>* findings, DecoderOptions options) {
  if (offset > src.size() || size > src.size() - offset) return nullptr;
  if (options.label.empty()) options.label = std::string(CodecName(codec));
  return std::unique_ptr<Decoder>(new Decoder(std::make_unique<Impl>(
      src, offset, size, KindOf(codec), budget, findings, std::move(options))));
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
      // Between streams: what Python's reader does with the rest.
      if (streams_ > 0) {
        if (!MultiStream(d.kind) && d.kind != Kind::kZlib) {
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
        const auto next = d.kind == Kind::kZlib
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
      if (streams_ == 0 && produced_ == 0 && !truncated) {
        d.Add("MG-ARCHIVE-MALFORMED", Severity::kHigh, "not a valid stream", d.pos());
        state_ = DecodeState::kNotAStream;
        break;
      }
      d.Add("MG-ARCHIVE-MALFORMED", Severity::kHigh,
            std::string(truncated ? "stream is truncated" : "stream is corrupt") + " after " +
                N(produced_ - d.stream_out_start) + " output bytes",
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

}  // namespace modelgate::scanner
