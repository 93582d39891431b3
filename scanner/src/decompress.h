// Bounded decompression: one streaming Decoder serves every compressed
// path the scanner follows, the single-stream wrappers model files come in
// (joblib's compress=, .gz/.bz2/.xz/.zst/.lz4 copies of checkpoints: gzip,
// zlib, bzip2, xz, lzma-alone, zstd and lz4 frames, and joblib < 0.10's "ZF"
// container) and zip members (raw deflate, method 8; stored, method 0,
// through the same interface). It reads its input from a Source range in
// bounded windows (never the whole input in memory), writes into the
// caller's buffer only what the codec really produces (never sized by a
// header's claim), and charges every byte it produces to the file's Budget.
//
// Concatenated streams are decoded like Python's readers decode them
// (gzip.GzipFile, bz2.BZ2File, lzma.LZMAFile, lz4.frame.LZ4FrameFile and
// Python 3.14's compression.zstd.ZstdFile continue into the next stream or
// frame; zlib.decompress stops after one, and so does python-zstandard's
// stream_reader by default): every member is decoded and a second member
// is reported (MG-ARCHIVE-MULTI-MEMBER, low: single-stream readers see only
// the first). Zero padding after a gzip member (which gzip skips) and xz
// stream padding are accepted; any other byte after the last stream is
// MG-ARCHIVE-TRAILING-DATA (high: hidden data that Python's bz2/lzma
// silently ignore and gzip raises on after returning the data).
//
// zstd and lz4 skippable frames (magic 0x184D2A50..5F, shared by both
// formats) are skipped by every reader, libzstd and liblz4 included: their
// content is hidden data, MG-ARCHIVE-HIDDEN-DATA, high; low for the
// 4-byte frames pzstd writes before each frame (its compressed size) and
// nothing else. The lz4 legacy frame (magic 0x184C2102, the lz4 tool's
// -l) is not decoded: liblz4's frame decoder and python-lz4 do not read it,
// so no Python loader does; SniffCodec does not claim it and after an lz4
// frame it is trailing data.
//
// 7z is decoded by sevenzip.h (libarchive), not here.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "budget.h"
#include "modelgate/scanner.h"
#include "source.h"

namespace modelgate::scanner {

// Append only: the lead's detection switches over these.
enum class Codec : uint8_t { kGzip, kZlib, kBzip2, kXz, kLzma, kZstd, kLz4, kJoblibZf };
// "gzip", "zlib", "bzip2", "xz", "lzma", "zstd", "lz4", "joblib-zf"
std::string_view CodecName(Codec c);

// SniffCodec names the wrapper `head` starts with: gzip (1F 8B 08), zlib
// (CMF 0x78, no preset dictionary, header check divisible by 31), bzip2
// ("BZh" + '1'..'9', then a block or end-of-stream magic when present), xz
// (FD "7zXZ" 00), lzma-alone (properties 0x5D, which every liblzma preset
// writes, joblib's compress='lzma' included; a dictionary size of 2^n or
// 2^n + 2^(n-1); an unknown size or one below 2^40), zstd (28 B5 2F FD and
// a frame header libzstd accepts, as far as `head` holds it), lz4 (04 22 4D
// 18, version 01, reserved bits clear, a block size id 4..7 and a header
// checksum that matches, as far as `head` holds it), either of them after
// skippable frames that `head` holds whole (pzstd's output starts with
// one), joblib-zf ("ZF", a 19-byte length Python's int(s, 16) parses, an
// optional space, then a zlib header: what joblib.load hands to
// read_zfile). nullopt otherwise.
std::optional<Codec> SniffCodec(std::span<const uint8_t> head);

// kJoblibZfHeaderBytes is "ZF" and the 19-byte hex length field joblib
// writes (len(hex(2**64))); one optional space may follow (joblib <= 0.8.4
// on Python 2 wrote the field one byte wider).
inline constexpr uint64_t kJoblibZfHeaderBytes = 21;
// ParseJoblibZfLength reads the length field of a ZF header as Python's
// int(field, 16) does (surrounding whitespace, a sign, 0x, single
// underscores between digits); nullopt where int() raises, and where the
// value is negative or past 2^63 - 1, which read_zfile passes on as
// zlib.decompress's bufsize and which then raises too: such a file does not
// load.
std::optional<uint64_t> ParseJoblibZfLength(std::span<const uint8_t> field);

// DecodeState is where a Decoder stands.
enum class DecodeState : uint8_t {
  kMore,        // more output may follow
  kEnd,         // every stream ended cleanly (trailing bytes reported, if any)
  kStopped,     // produced `stop_after` bytes and the stream had more (no finding)
  kLimit,       // a budget or decoder limit stopped it (MG-ARCHIVE-LIMIT added)
  kMalformed,   // corrupt or truncated after some output (MG-ARCHIVE-MALFORMED)
  kNotAStream,  // the input does not start a stream of the codec at all
  kIoError,     // reading the Source failed: io_error()
};

struct DecoderOptions {
  // The decoder stops, with state kStopped and no finding, once it has
  // produced this many bytes and sees one more (a zip member's declared
  // size: more is the zip reader's MG-ZIP-FIELD-MISMATCH, not a bomb).
  uint64_t stop_after = UINT64_MAX;
  // Decoder memory (xz/lzma dictionaries, xz -9 needs 65 MiB; a zstd
  // frame's window size, zstd --ultra -22 asks for 128 MiB and --long up
  // to 2 GiB; an lz4 frame's block size, at most 4 MiB). A stream that asks
  // for more is MG-ARCHIVE-LIMIT.
  uint64_t max_decoder_memory_bytes = 256ull << 20;
  // File offset of the range's first byte, for findings (kNoOffset: the
  // range is not in the file, e.g. a decompressed layer; then findings
  // carry range-relative offsets, to be placed by the caller).
  uint64_t finding_base = 0;
  // Prefix of finding messages ("" = the codec's name).
  std::string label;
};

// Decoder streams the decoded bytes of [offset, offset + size) of `src`.
// `src`, `budget` and `findings` must outlive it. Never throws.
class Decoder {
 public:
  // Open decodes a wrapper codec (every concatenated stream, see above).
  // kJoblibZf: the range is the whole ZF file, header included; its zlib
  // stream is decoded as read_zfile decodes it (one stream), and a decoded
  // length other than the declared one (joblib's assert) is
  // MG-ARCHIVE-MALFORMED.
  static std::unique_ptr<Decoder> Open(const Source& src, uint64_t offset, uint64_t size,
                                       Codec codec, Budget& budget,
                                       std::vector<Finding>* findings, DecoderOptions options = {});
  // OpenZip decodes one zip member's data: method 8 (raw deflate, one
  // stream; bytes after its end are not read, as zip readers do not) or 0
  // (stored: the bytes themselves). nullptr for any other method.
  static std::unique_ptr<Decoder> OpenZip(const Source& src, uint64_t offset, uint64_t size,
                                          uint16_t method, Budget& budget,
                                          std::vector<Finding>* findings,
                                          DecoderOptions options = {});
  ~Decoder();
  Decoder(const Decoder&) = delete;
  Decoder& operator=(const Decoder&) = delete;

  // Read fills up to out.size() bytes and returns how many it produced;
  // less (0 at the end) once state() is no longer kMore. Every byte is
  // charged to the budget first.
  size_t Read(std::span<uint8_t> out);
  // ReadUpTo returns the next at most `n` bytes (a sniff: it decodes no
  // more than that and leaves the stream open).
  std::vector<uint8_t> ReadUpTo(uint64_t n);
  // ReadAll appends everything to `out` until the state leaves kMore.
  void ReadAll(std::vector<uint8_t>* out);

  DecodeState state() const { return state_; }
  bool more() const { return state_ == DecodeState::kMore; }
  // ok: ended cleanly, or open with more to come.
  bool ok() const { return state_ == DecodeState::kMore || state_ == DecodeState::kEnd; }
  uint64_t produced() const { return produced_; }
  uint64_t streams() const { return streams_; }
  // io_error is set in state kIoError.
  const std::optional<core::Error>& io_error() const { return io_error_; }

 private:
  struct Impl;
  explicit Decoder(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
  DecodeState state_ = DecodeState::kMore;
  uint64_t produced_ = 0;
  uint64_t streams_ = 0;
  std::optional<core::Error> io_error_;
};

// SliceSource is [offset, offset + size) of another Source (a stored
// member, a tar member's data), read in place, never copied.
class SliceSource : public Source {
 public:
  SliceSource(const Source& base, uint64_t offset, uint64_t size)
      : base_(base), offset_(offset), size_(size) {}
  uint64_t size() const override { return size_; }
  core::Status Read(uint64_t offset, std::span<uint8_t> out) const override {
    if (offset > size_ || out.size() > size_ - offset) {
      return core::Error{core::Code::kStTruncated, offset, "read past the end of the slice"};
    }
    return base_.Read(offset_ + offset, out);
  }

 private:
  const Source& base_;
  uint64_t offset_, size_;
};

// Spool holds decoded bytes outside the heap: an anonymous, sealed memfd
// whose pages live in the page cache (shmem), not in the process's RSS
// unless mapped and touched; a heap buffer where memfd_create is missing.
// Write it with Append, then Seal it; after that it is a read-only Source
// whose bytes can also be mapped (Map) for analyzers that need a span: the
// seal forbids shrinking, so a mapping cannot fault.
class Spool : public Source {
 public:
  // Create makes an empty spool; `name` shows in /proc/self/fd.
  static core::Result<std::unique_ptr<Spool>> Create(const char* name = "modelgate-spool");
  ~Spool() override;
  Spool(const Spool&) = delete;
  Spool& operator=(const Spool&) = delete;

  core::Status Append(std::span<const uint8_t> bytes);
  // Seal ends writing (idempotent).
  core::Status Seal();
  uint64_t size() const override { return size_; }
  core::Status Read(uint64_t offset, std::span<uint8_t> out) const override;
  // Bytes maps the whole sealed spool read-only (once; later calls return
  // the same span). Pages are read in as they are touched.
  core::Result<std::span<const uint8_t>> Bytes() const;
  bool in_memfd() const { return fd_ >= 0; }
  // fd is the sealed memfd's descriptor (-1 without memfd), for pread.
  int fd() const { return fd_; }

 private:
  Spool() = default;
  int fd_ = -1;
  uint64_t size_ = 0;
  bool sealed_ = false;
  std::vector<uint8_t> heap_;  // without memfd
  mutable const uint8_t* map_ = nullptr;
};

// DecodeToSpool drains `dec` into a new sealed spool (after `prefix`,
// bytes the caller already read from it, e.g. a sniff). The Decoder's
// state tells how it ended; an Error only when the spool cannot be
// written or the Source cannot be read.
core::Result<std::unique_ptr<Spool>> DecodeToSpool(Decoder& dec,
                                                   std::span<const uint8_t> prefix = {});

// DecompressToSpool decodes [offset, offset + size) of `src` as `codec`
// into a spool: what the old Decompress returned in a vector, without
// holding it in the heap. nullptr (with MG-ARCHIVE-MALFORMED) when the
// range does not start a stream of `codec`; otherwise the bytes decoded
// before any limit or corruption (which a streaming loader has already
// consumed), with findings as Decompress below.
core::Result<std::unique_ptr<Spool>> DecompressToSpool(const Source& src, uint64_t offset,
                                                       uint64_t size, Codec codec, Budget& budget,
                                                       std::vector<Finding>* findings,
                                                       DecoderOptions options = {});

// --- the earlier in-memory interface, now a wrapper over Decoder ---

struct DecompressLimits {
  // Output bytes held in memory (the caller passes the smaller of
  // ContainerLimits::max_member_bytes and what remains of
  // max_total_decompressed_bytes for the file).
  uint64_t max_output_bytes = 1ull << 30;
  uint64_t max_expansion_ratio = 1000;
  uint64_t ratio_floor_bytes = 1ull << 20;
  uint64_t max_decoder_memory_bytes = 256ull << 20;
};

// Decompress decodes `in` as `codec`. Returns the decoded bytes, also when
// a cap was hit or the stream is corrupt or truncated (then the bytes
// decoded before that point, which a streaming loader such as
// pickle.load(gzip.open(f)) has already consumed), with a finding:
// MG-ARCHIVE-LIMIT (high) at a cap, MG-ARCHIVE-MALFORMED (high) for a
// corrupt or truncated stream, MG-ARCHIVE-TRAILING-DATA (high),
// MG-ARCHIVE-MULTI-MEMBER (low). nullopt (with MG-ARCHIVE-MALFORMED) when
// `in` does not start a stream of `codec` at all. Finding offsets are into
// `in` plus `base_offset`. Never throws. A Budget of its own, from
// `limits`: prefer Decoder with the file's Budget.
std::optional<std::vector<uint8_t>> Decompress(std::span<const uint8_t> in, Codec codec,
                                               const DecompressLimits& limits,
                                               std::vector<Finding>* findings,
                                               uint64_t base_offset = 0);

// UnanalyzedArchiveFinding reports a container the scanner detects but does
// not open: MG-ARCHIVE-UNSUPPORTED, high.
Finding UnanalyzedArchiveFinding(std::string_view format_name);

}  // namespace modelgate::scanner
