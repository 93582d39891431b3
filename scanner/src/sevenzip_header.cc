// The 7z header, read strictly before libarchive reads it (see the header
// file for what is read and why). Property ids, coder ids and layouts:
// 7-Zip's DOC/7zFormat.txt; what libarchive 3.6 accepts:
// archive_read_support_format_7zip.c (read_StreamsInfo, read_Folder,
// read_SubStreamsInfo, read_Header, setup_decode_folder, init_decompression).
#include "sevenzip_header.h"

#include <lzma.h>
#include <zlib.h>

#include <algorithm>
#include <bitset>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <utility>

namespace modelgate::scanner::internal {
namespace {

using core::Severity;

// Property ids (7zFormat.txt).
enum : uint8_t {
  kEnd = 0x00,
  kHeader = 0x01,
  kArchiveProperties = 0x02,
  kAdditionalStreamsInfo = 0x03,
  kMainStreamsInfo = 0x04,
  kFilesInfo = 0x05,
  kPackInfo = 0x06,
  kUnPackInfo = 0x07,
  kSubStreamsInfo = 0x08,
  kSize = 0x09,
  kCrc = 0x0A,
  kFolder = 0x0B,
  kCodersUnPackSize = 0x0C,
  kNumUnPackStream = 0x0D,
  kEmptyStream = 0x0E,
  kEmptyFile = 0x0F,
  kAnti = 0x10,
  kName = 0x11,
  kCTime = 0x12,
  kATime = 0x13,
  kMTime = 0x14,
  kWinAttributes = 0x15,
  kEncodedHeader = 0x17,
  kDummy = 0x19,
};

// Coder ids libarchive 3.6 knows (7-Zip's DOC/Methods.txt).
constexpr uint64_t kCopy = 0x00;
constexpr uint64_t kDelta = 0x03;
constexpr uint64_t kLzma2 = 0x21;
constexpr uint64_t kLzma = 0x030101;
constexpr uint64_t kPpmd = 0x030401;
constexpr uint64_t kDeflate = 0x040108;
constexpr uint64_t kBzip2 = 0x040202;
constexpr uint64_t kX86 = 0x03030103;
constexpr uint64_t kBcj2 = 0x0303011B;
constexpr uint64_t kPowerPc = 0x03030205;
constexpr uint64_t kIa64 = 0x03030401;
constexpr uint64_t kArm = 0x03030501;
constexpr uint64_t kArmThumb = 0x03030701;
constexpr uint64_t kSparc = 0x03030805;
constexpr uint64_t kZipCrypto = 0x06F10101;
constexpr uint64_t kRar29Crypto = 0x06F10303;
constexpr uint64_t kAes256 = 0x06F10701;

enum class Kind { kCompressor, kFilter, kBranchPair, kCrypto, kUnknown };

Kind KindOf(uint64_t id) {
  switch (id) {
    case kCopy: case kLzma: case kLzma2: case kPpmd: case kDeflate: case kBzip2:
      return Kind::kCompressor;
    case kDelta: case kX86: case kPowerPc: case kIa64: case kArm: case kArmThumb: case kSparc:
      return Kind::kFilter;
    case kBcj2: return Kind::kBranchPair;
    case kZipCrypto: case kRar29Crypto: case kAes256: return Kind::kCrypto;
    default: return Kind::kUnknown;
  }
}

std::string N(uint64_t v) { return std::to_string(v); }

std::string Hex(uint64_t v) {
  static const char* digits = "0123456789ABCDEF";
  std::string s;
  do {
    s.insert(s.begin(), digits[v & 0xF]);
    v >>= 4;
  } while (v != 0);
  return "0x" + s;
}

std::string CoderName(uint64_t id) {
  switch (id) {
    case kCopy: return "Copy";
    case kDelta: return "Delta";
    case kLzma2: return "LZMA2";
    case kLzma: return "LZMA";
    case kPpmd: return "PPMd";
    case kDeflate: return "Deflate";
    case kBzip2: return "BZip2";
    case kX86: return "BCJ";
    case kBcj2: return "BCJ2";
    case kPowerPc: return "PPC";
    case kIa64: return "IA64";
    case kArm: return "ARM";
    case kArmThumb: return "ARMT";
    case kSparc: return "SPARC";
    case kAes256: return "7zAES";
    default: return "coder " + Hex(id);
  }
}

// PPMd variant H as 7-Zip and libarchive build it (Ppmd7.h).
constexpr uint32_t kPpmdMinOrder = 2, kPpmdMaxOrder = 64;
constexpr uint32_t kPpmdMinMemBytes = 1u << 11, kPpmdMaxMemBytes = 0xFFFFFFFFu - 12 * 3;
// Streams a coder may take: BCJ2 takes four, every other coder one.
constexpr uint64_t kMaxCoderInStreams = 4;
// libarchive's parse_7zip_int64 refuses values past INT64_MAX.
constexpr uint64_t kMaxInt64 = 0x7FFFFFFFFFFFFFFFull;
constexpr uint64_t kStartHeaderBytes = 32;
constexpr size_t kDecodeChunkBytes = 64 * 1024;

struct Coder {
  uint64_t id = 0;
  uint64_t in = 1;
  uint64_t out = 1;
  std::span<const uint8_t> props;
  uint64_t at = 0;  // reader offset of its flag byte
};

struct Folder {
  std::vector<Coder> coders;
  std::vector<std::pair<uint64_t, uint64_t>> binds;  // (in index, out index)
  std::vector<uint64_t> packed;                       // in indexes, in pack order
  std::vector<uint64_t> unpack;                       // one size per out stream
  uint64_t in_total = 0;
  uint64_t pack_index = 0;  // its first packed stream in PackInfo
  bool crc_defined = false;
  uint32_t crc = 0;
  uint64_t unpack_streams = 1;
  uint64_t at = 0;
  // MainOut: the one out stream no bind pair consumes (the folder's data).
  uint64_t MainOut() const {
    for (uint64_t o = 0; o < coders.size(); ++o) {
      if (std::none_of(binds.begin(), binds.end(), [&](const auto& b) { return b.second == o; })) {
        return o;
      }
    }
    return 0;  // unreachable: ReadFolder checked the bind pairs
  }
  uint64_t Size() const { return unpack[MainOut()]; }
};

struct Streams {
  bool has_pack = false;
  uint64_t pack_pos = 0;
  std::vector<uint64_t> pack_sizes;
  std::vector<Folder> folders;
  bool has_substreams = false;
  uint64_t substreams = 0;
};

class Parser {
 public:
  Parser(std::span<const uint8_t> file, Budget& budget, const SevenZipLimits& limits)
      : file_(file), budget_(budget), limits_(limits), r_(std::span<const uint8_t>()) {}

  bool Run(SevenZipHeader* out);
  std::optional<Finding>& error() { return err_; }

 private:
  // --- failures: the first one is kept ---
  uint64_t FileOffset(uint64_t at) const { return decoded_ ? core::kNoOffset : at; }
  std::string Where(uint64_t at) const {
    return decoded_ ? " (byte " + N(at) + " of the decoded header)" : "";
  }
  bool Fail(const char* id, const std::string& msg, uint64_t at) {
    if (!err_) {
      err_ = MakeFinding(id, Severity::kHigh, "7z header: " + msg + Where(at), FileOffset(at));
    }
    return false;
  }
  bool Malformed(const std::string& msg) { return Fail("MG-ARCHIVE-MALFORMED", msg, r_.offset()); }
  bool MalformedAt(const std::string& msg, uint64_t at) {
    return Fail("MG-ARCHIVE-MALFORMED", msg, at);
  }
  bool Unsupported(const std::string& msg, uint64_t at) {
    return Fail("MG-ARCHIVE-UNSUPPORTED", msg, at);
  }
  bool Limit(const char* name, uint64_t value, const std::string& what, uint64_t at) {
    if (!err_) {
      err_ = budget_.DeclaredLimit(name, value, "7z header: " + what + Where(at), FileOffset(at))
                 .TakeFinding();
    }
    return false;
  }
  uint64_t MembersLeft() const {
    const uint64_t max = budget_.limits().max_members;
    return budget_.members() >= max ? 0 : max - budget_.members();
  }
  uint64_t RecordsLeft() const {
    const uint64_t max = budget_.limits().max_records;
    return budget_.records() >= max ? 0 : max - budget_.records();
  }

  // --- primitives ---
  bool Byte(uint8_t* v) {
    auto b = r_.U8();
    if (!b.ok()) return Malformed("truncated: the header ends inside a field");
    *v = b.value();
    return true;
  }
  bool Expect(uint8_t id, const char* what) {
    const uint64_t at = r_.offset();
    uint8_t b = 0;
    if (!Byte(&b)) return false;
    if (b != id) {
      return MalformedAt(std::string("expected ") + what + " (" + Hex(id) + "), found " + Hex(b), at);
    }
    return true;
  }
  // Number reads 7z's variable-length UINT64 (the first byte's high bits
  // say how many little-endian bytes follow).
  bool Number(uint64_t* v) {
    uint8_t first = 0;
    if (!Byte(&first)) return false;
    uint64_t value = 0;
    uint8_t mask = 0x80;
    for (int i = 0; i < 8; ++i) {
      if ((first & mask) == 0) {
        value |= static_cast<uint64_t>(first & (mask - 1)) << (8 * i);
        *v = value;
        return true;
      }
      uint8_t b = 0;
      if (!Byte(&b)) return false;
      value |= static_cast<uint64_t>(b) << (8 * i);
      mask = static_cast<uint8_t>(mask >> 1);
    }
    *v = value;
    return true;
  }
  bool Int64(uint64_t* v, const char* what) {
    const uint64_t at = r_.offset();
    if (!Number(v)) return false;
    if (*v > kMaxInt64) return MalformedAt(std::string(what) + " " + N(*v) + " is past 2^63 - 1", at);
    return true;
  }
  // Bits reads a vector of `n` booleans (most significant bit first).
  bool Bits(uint64_t n, std::span<const uint8_t>* bits) {
    const uint64_t bytes = n / 8 + (n % 8 != 0 ? 1 : 0);
    auto b = r_.Take(bytes);
    if (!b.ok()) {
      return Malformed("a vector of " + N(n) + " bits needs " + N(bytes) + " bytes, " +
                       N(r_.remaining()) + " remain");
    }
    *bits = b.value();
    return true;
  }
  static bool Bit(std::span<const uint8_t> bits, uint64_t i) {
    return (bits[static_cast<size_t>(i / 8)] & (0x80 >> (i % 8))) != 0;
  }
  static uint64_t CountBits(std::span<const uint8_t> bits, uint64_t n) {
    uint64_t c = 0;
    for (uint64_t i = 0; i < n; ++i) c += Bit(bits, i) ? 1 : 0;
    return c;
  }
  // Digests reads `n` CRC slots (AllAreDefined, the defined bits, a CRC for
  // each defined one); `out` gets them when not null (n is bounded then).
  bool Digests(uint64_t n, std::vector<std::pair<bool, uint32_t>>* out) {
    if (n == 0) return Malformed("a CRC list of no entries (libarchive refuses it)");
    uint8_t all = 0;
    if (!Byte(&all)) return false;
    std::span<const uint8_t> bits;
    uint64_t defined = n;
    if (all == 0) {
      if (!Bits(n, &bits)) return false;
      defined = CountBits(bits, n);
    }
    if (defined > r_.remaining() / 4) {
      return Malformed(N(defined) + " CRCs need " + N(defined) + " * 4 bytes, " +
                       N(r_.remaining()) + " remain");
    }
    if (out != nullptr) out->assign(static_cast<size_t>(n), {false, 0});
    for (uint64_t i = 0; i < n; ++i) {
      if (all == 0 && !Bit(bits, i)) continue;
      auto crc = r_.U32Le();
      if (!crc.ok()) return Malformed("truncated CRC");
      if (out != nullptr) (*out)[static_cast<size_t>(i)] = {true, crc.value()};
    }
    return true;
  }

  bool StreamsInfo(Streams* s);
  bool PackInfo(Streams* s);
  bool UnpackInfo(Streams* s);
  bool ReadFolder(Folder* f);
  bool CheckCoder(const Coder& c);
  bool CheckFolder(const Streams& s, const Folder& f);
  bool SubStreams(Streams* s);
  bool Header(SevenZipHeader* out);
  bool FilesInfo(const Streams& main, SevenZipHeader* out);
  bool FileProperty(uint8_t type, uint64_t files, uint64_t* empty_streams,
                    const std::bitset<256>& seen);
  bool Encoded(SevenZipHeader* out);
  bool Decode(const Coder& c, std::span<const uint8_t> packed, uint64_t size,
              std::vector<uint8_t>* out);

  std::span<const uint8_t> file_;
  Budget& budget_;
  const SevenZipLimits& limits_;
  core::ByteReader r_;
  bool decoded_ = false;
  uint64_t next_header_offset_ = 0;  // from the end of the start header
  std::vector<uint8_t> decoded_bytes_;
  uint64_t coder_memory_ = 0;
  uint64_t most_coders_ = 0;
  std::optional<Finding> err_;
};

bool Parser::Run(SevenZipHeader* out) {
  if (file_.size() < kStartHeaderBytes) return MalformedAt("shorter than the start header", 0);
  auto le = [&](size_t at, int n) {
    uint64_t v = 0;
    for (int i = n; i-- > 0;) v = (v << 8) | file_[at + static_cast<size_t>(i)];
    return v;
  };
  const uint64_t offset = le(12, 8), size = le(20, 8);
  const uint32_t crc = static_cast<uint32_t>(le(28, 4));
  const uint64_t room = file_.size() - kStartHeaderBytes;
  if (offset > room || size > room - offset) {
    return MalformedAt("the next header lies outside the file", 12);
  }
  next_header_offset_ = offset;
  if (size == 0) return true;  // an empty archive: libarchive lists nothing
  if (size > limits_.max_7z_header_bytes) {
    return Limit("max_7z_header_bytes", limits_.max_7z_header_bytes,
                 "a next header of " + N(size) + " bytes", 20);
  }
  const uint64_t start = kStartHeaderBytes + offset;
  const auto next = file_.subspan(static_cast<size_t>(start), static_cast<size_t>(size));
  if (crc32(0L, next.data(), static_cast<uInt>(next.size())) != crc) {
    return MalformedAt("the next header's CRC does not match", start);
  }
  r_ = core::ByteReader(next, start);
  uint8_t id = 0;
  if (!Byte(&id)) return false;
  if (out != nullptr) out->header_bytes = size;
  if (id == kHeader) return Header(out);
  if (id == kEncodedHeader) return Encoded(out);
  return MalformedAt("the next header starts with " + Hex(id) + ", not a Header (0x01) or an "
                     "EncodedHeader (0x17)", start);
}

bool Parser::StreamsInfo(Streams* s) {
  uint8_t id = 0;
  if (!Byte(&id)) return false;
  if (id == kPackInfo) {
    if (!PackInfo(s) || !Byte(&id)) return false;
  }
  if (id == kUnPackInfo) {
    if (!UnpackInfo(s) || !Byte(&id)) return false;
  }
  // Each folder's packed streams follow the previous folder's, and together
  // they are PackInfo's (libarchive reads a packIndex past them as corrupt).
  uint64_t pack_index = 0;
  for (auto& f : s->folders) {
    f.pack_index = pack_index;
    pack_index += f.packed.size();  // at most 4 each, folders bounded: no overflow
  }
  if (pack_index != s->pack_sizes.size()) {
    return Malformed("the folders use " + N(pack_index) + " packed streams, PackInfo declares " +
                     N(s->pack_sizes.size()));
  }
  for (const auto& f : s->folders) {
    if (!CheckFolder(*s, f)) return false;
  }
  if (id == kSubStreamsInfo) {
    if (!SubStreams(s) || !Byte(&id)) return false;
  }
  if (id != kEnd) return Malformed("unexpected property " + Hex(id) + " in StreamsInfo");
  return true;
}

bool Parser::PackInfo(Streams* s) {
  uint64_t pos = 0, n = 0;
  if (!Int64(&pos, "PackPos")) return false;
  const uint64_t n_at = r_.offset();
  if (!Number(&n)) return false;
  if (n == 0) return MalformedAt("PackInfo declares no packed streams", n_at);
  if (n > r_.remaining()) {
    return MalformedAt(N(n) + " packed streams: their sizes need more than the " +
                           N(r_.remaining()) + " bytes left",
                       n_at);
  }
  // A folder has at most four packed streams (BCJ2).
  uint64_t most = 0;
  if (__builtin_mul_overflow(limits_.max_7z_folders, 4, &most)) most = UINT64_MAX;
  if (n > most) {
    return Limit("max_7z_folders", limits_.max_7z_folders,
                 N(n) + " packed streams, more than four per folder allowed", n_at);
  }
  uint8_t id = 0;
  if (!Byte(&id)) return false;
  if (id != kSize) return Malformed("PackInfo without the sizes of its streams");
  if (pos > next_header_offset_) return MalformedAt("PackPos " + N(pos) + " is past the header", n_at);
  uint64_t end = pos;
  s->pack_sizes.reserve(static_cast<size_t>(n));
  for (uint64_t i = 0; i < n; ++i) {
    uint64_t size = 0;
    if (!Int64(&size, "a packed stream size")) return false;
    if (size > next_header_offset_ - end) {
      return Malformed("packed stream " + N(i) + " of " + N(size) + " bytes at " + N(end) +
                       " runs past the header at " + N(next_header_offset_));
    }
    end += size;
    s->pack_sizes.push_back(size);
  }
  if (!Byte(&id)) return false;
  if (id == kCrc) {
    if (!Digests(n, nullptr) || !Expect(kEnd, "the end of PackInfo")) return false;
  } else if (id != kEnd) {
    return Malformed("unexpected property " + Hex(id) + " in PackInfo");
  }
  s->has_pack = true;
  s->pack_pos = pos;
  return true;
}

bool Parser::UnpackInfo(Streams* s) {
  if (!Expect(kFolder, "Folder")) return false;
  const uint64_t n_at = r_.offset();
  uint64_t n = 0;
  if (!Number(&n)) return false;
  if (n > r_.remaining()) {
    return MalformedAt(N(n) + " folders: more than the " + N(r_.remaining()) + " bytes left hold",
                       n_at);
  }
  if (n > limits_.max_7z_folders) {
    return Limit("max_7z_folders", limits_.max_7z_folders, N(n) + " folders declared", n_at);
  }
  const uint64_t ext_at = r_.offset();
  uint8_t external = 0;
  if (!Byte(&external)) return false;
  if (external != 0) return Unsupported("folders kept in another stream (External)", ext_at);
  s->folders.resize(static_cast<size_t>(n));
  for (auto& f : s->folders) {
    if (!ReadFolder(&f)) return false;
  }
  if (!Expect(kCodersUnPackSize, "CodersUnpackSize")) return false;
  for (auto& f : s->folders) {
    f.unpack.reserve(f.coders.size());
    for (size_t j = 0; j < f.coders.size(); ++j) {
      uint64_t size = 0;
      if (!Int64(&size, "an unpack size")) return false;
      f.unpack.push_back(size);
    }
  }
  uint8_t id = 0;
  if (!Byte(&id)) return false;
  if (id == kCrc) {
    std::vector<std::pair<bool, uint32_t>> crcs;
    if (!Digests(n, &crcs)) return false;
    for (size_t i = 0; i < crcs.size(); ++i) {
      s->folders[i].crc_defined = crcs[i].first;
      s->folders[i].crc = crcs[i].second;
    }
    if (!Expect(kEnd, "the end of UnpackInfo")) return false;
  } else if (id != kEnd) {
    return Malformed("unexpected property " + Hex(id) + " in UnpackInfo");
  }
  return true;
}

bool Parser::ReadFolder(Folder* f) {
  f->at = r_.offset();
  uint64_t n = 0;
  if (!Number(&n)) return false;
  if (n == 0) return MalformedAt("a folder of no coders", f->at);
  if (n > limits_.max_7z_coders_per_folder) {
    return Limit("max_7z_coders_per_folder", limits_.max_7z_coders_per_folder,
                 "a folder of " + N(n) + " coders", f->at);
  }
  if (n > r_.remaining()) return MalformedAt(N(n) + " coders: more than the bytes left hold", f->at);
  f->coders.resize(static_cast<size_t>(n));
  for (auto& c : f->coders) {
    c.at = r_.offset();
    uint8_t flag = 0;
    if (!Byte(&flag)) return false;
    if ((flag & 0xC0) != 0) {
      return Unsupported("coder flags " + Hex(flag) + " (alternative methods or reserved bits)", c.at);
    }
    const size_t id_bytes = flag & 0x0F;
    if (id_bytes > 8) return Unsupported("a coder id of " + N(id_bytes) + " bytes", c.at);
    auto id = r_.Take(id_bytes);
    if (!id.ok()) return Malformed("truncated coder id");
    for (uint8_t b : id.value()) c.id = (c.id << 8) | b;
    if ((flag & 0x10) != 0) {
      if (!Number(&c.in) || !Number(&c.out)) return false;
      // 7-Zip reads one output stream per coder; BCJ2 takes the most inputs.
      if (c.out != 1 || c.in == 0 || c.in > kMaxCoderInStreams) {
        return Unsupported(CoderName(c.id) + " with " + N(c.in) + " input and " + N(c.out) +
                               " output streams",
                           c.at);
      }
    }
    if ((flag & 0x20) != 0) {
      uint64_t size = 0;
      if (!Number(&size)) return false;
      auto props = r_.Take(size);
      if (!props.ok()) {
        return Malformed(N(size) + " property bytes of " + CoderName(c.id) + ", " +
                         N(r_.remaining()) + " remain");
      }
      c.props = props.value();
    }
    f->in_total += c.in;
  }
  const uint64_t ins = f->in_total, outs = n;
  std::vector<bool> in_bound(static_cast<size_t>(ins)), out_bound(static_cast<size_t>(outs));
  f->binds.reserve(static_cast<size_t>(outs - 1));
  for (uint64_t i = 0; i + 1 < outs; ++i) {
    const uint64_t at = r_.offset();
    uint64_t in = 0, out = 0;
    if (!Number(&in) || !Number(&out)) return false;
    if (in >= ins || out >= outs || in_bound[in] || out_bound[out]) {
      return MalformedAt("bind pair (" + N(in) + ", " + N(out) + ") of a folder of " + N(ins) +
                             " input and " + N(outs) + " output streams",
                         at);
    }
    in_bound[in] = out_bound[out] = true;
    f->binds.emplace_back(in, out);
  }
  const uint64_t packed = ins - (outs - 1);  // ins >= coders = outs
  if (packed == 1) {
    for (uint64_t i = 0; i < ins; ++i) {
      if (!in_bound[i]) {
        f->packed.push_back(i);
        break;
      }
    }
  } else {
    for (uint64_t i = 0; i < packed; ++i) {
      const uint64_t at = r_.offset();
      uint64_t in = 0;
      if (!Number(&in)) return false;
      if (in >= ins || in_bound[in]) {
        return MalformedAt("packed stream index " + N(in) + " is bound or out of range", at);
      }
      in_bound[in] = true;
      f->packed.push_back(in);
    }
  }
  return true;
}

bool Parser::CheckCoder(const Coder& c) {
  const auto& p = c.props;
  auto props_size = [&](size_t want) {
    if (p.size() == want) return true;
    return Unsupported(CoderName(c.id) + " with " + N(p.size()) + " property bytes (" + N(want) +
                           " expected)",
                       c.at);
  };
  auto memory = [&](const std::string& what, uint64_t bytes) {
    coder_memory_ = std::max(coder_memory_, bytes);
    if (bytes <= limits_.max_decoder_memory_bytes) return true;
    return Limit("max_decoder_memory_bytes", limits_.max_decoder_memory_bytes,
                 what + " of " + N(bytes) + " bytes", c.at);
  };
  switch (c.id) {
    case kLzma: {
      if (!props_size(5)) return false;
      if (p[0] >= 9 * 5 * 5) return Unsupported("LZMA properties byte " + Hex(p[0]), c.at);
      const uint64_t dict = static_cast<uint64_t>(p[1]) | static_cast<uint64_t>(p[2]) << 8 |
                            static_cast<uint64_t>(p[3]) << 16 | static_cast<uint64_t>(p[4]) << 24;
      return memory("an LZMA dictionary", dict);
    }
    case kLzma2: {
      if (!props_size(1)) return false;
      if (p[0] > 40) return Unsupported("LZMA2 dictionary byte " + N(p[0]), c.at);
      const uint64_t dict =
          p[0] == 40 ? 0xFFFFFFFFull : (2ull | (p[0] & 1u)) << (p[0] / 2 + 11);
      return memory("an LZMA2 dictionary", dict);
    }
    case kPpmd: {
      if (!props_size(5)) return false;
      const uint32_t order = p[0];
      const uint32_t mem = static_cast<uint32_t>(p[1]) | static_cast<uint32_t>(p[2]) << 8 |
                           static_cast<uint32_t>(p[3]) << 16 | static_cast<uint32_t>(p[4]) << 24;
      if (order < kPpmdMinOrder || order > kPpmdMaxOrder || mem < kPpmdMinMemBytes ||
          mem > kPpmdMaxMemBytes) {
        return Unsupported("PPMd order " + N(order) + ", memory " + N(mem), c.at);
      }
      return memory("a PPMd model", mem);
    }
    case kDelta: return props_size(1);
    case kCopy: case kDeflate: case kBzip2: case kBcj2:
    case kX86: case kPowerPc: case kIa64: case kArm: case kArmThumb: case kSparc:
      // Branch filters' optional start offset is ignored by libarchive and
      // used by 7-Zip: two readings. Fixed-memory codecs take none.
      return props_size(0);
    case kZipCrypto: case kRar29Crypto: case kAes256:
      return true;  // libarchive refuses the folder as encrypted
    default:
      return Unsupported("unknown or unsupported coder " + Hex(c.id) +
                             " (libarchive does not decode it)",
                         c.at);
  }
}

bool Parser::CheckFolder(const Streams& s, const Folder& f) {
  bool crypto = false;
  most_coders_ = std::max<uint64_t>(most_coders_, f.coders.size());
  for (const auto& c : f.coders) {
    if (!CheckCoder(c)) return false;
    crypto = crypto || KindOf(c.id) == Kind::kCrypto;
  }
  // An encrypted folder is refused by libarchive (as encrypted) before it
  // decodes or allocates anything of it.
  if (crypto) return true;
  const auto& c = f.coders;
  auto simple = [](const Coder& x) { return x.in == 1 && x.out == 1; };
  if (c.size() == 1) {
    if (KindOf(c[0].id) == Kind::kCompressor && simple(c[0])) return true;
    return Unsupported(CoderName(c[0].id) + " alone, without a compressor", f.at);
  }
  if (c.size() == 2) {
    // 7-Zip writes [compressor, filter], the compressor's output bound to the
    // filter's input; libarchive assumes that order whatever the bind pair.
    const bool ok = simple(c[0]) && simple(c[1]) && KindOf(c[0].id) == Kind::kCompressor &&
                    KindOf(c[1].id) == Kind::kFilter && f.binds.size() == 1 &&
                    f.binds[0] == std::pair<uint64_t, uint64_t>{1, 0} &&
                    f.packed == std::vector<uint64_t>{0};
    if (ok) return true;
    return Unsupported(CoderName(c[0].id) + " and " + CoderName(c[1].id) +
                           " in a layout libarchive does not decode as 7-Zip does",
                       f.at);
  }
  if (c.size() == 4 && c[3].id == kBcj2 && c[3].in == 4) {
    // 7-Zip's BCJ2 folder, the one layout libarchive maps stream by stream:
    // coders 0 and 1 decode BCJ2's call and jump streams, coder 2 its main
    // stream; the range coder's stream is stored.
    const bool ok = simple(c[0]) && simple(c[1]) && simple(c[2]) &&
                    KindOf(c[0].id) == Kind::kCompressor && KindOf(c[1].id) == Kind::kCompressor &&
                    KindOf(c[2].id) == Kind::kCompressor &&
                    f.binds == std::vector<std::pair<uint64_t, uint64_t>>{{5, 0}, {4, 1}, {3, 2}} &&
                    f.packed == std::vector<uint64_t>{2, 6, 1, 0};
    if (!ok) {
      return Unsupported("a BCJ2 folder in a layout libarchive does not decode as 7-Zip does", f.at);
    }
    // libarchive decodes the call and jump streams whole into buffers of
    // their declared sizes: each may expand as one stream of its packed
    // size may.
    for (uint64_t side : {uint64_t{0}, uint64_t{1}}) {
      const uint64_t pack = s.pack_sizes[static_cast<size_t>(f.pack_index + 3 - side)];
      if (f.unpack[side] > budget_.StreamCap(pack)) {
        if (!err_) err_ = budget_.StreamLimit(pack, FileOffset(f.at)).TakeFinding();
        return false;
      }
    }
    return true;
  }
  return Unsupported("a chain of " + N(c.size()) + " coders libarchive does not decode", f.at);
}

bool Parser::SubStreams(Streams* s) {
  s->has_substreams = true;
  uint8_t id = 0;
  if (!Byte(&id)) return false;
  const uint64_t left = MembersLeft();
  uint64_t total = s->folders.size();
  if (id == kNumUnPackStream) {
    total = 0;
    for (auto& f : s->folders) {
      const uint64_t at = r_.offset();
      if (!Number(&f.unpack_streams)) return false;
      if (f.unpack_streams > left - total) {
        return Limit("max_members", budget_.limits().max_members,
                     "more than " + N(left) + " files with data declared", at);
      }
      total += f.unpack_streams;
    }
    if (!Byte(&id)) return false;
  } else if (total > left) {
    return Limit("max_members", budget_.limits().max_members,
                 N(total) + " files with data declared", r_.offset());
  }
  if (id != kSize) {
    for (const auto& f : s->folders) {
      if (f.unpack_streams > 1) {
        return Malformed("a folder of " + N(f.unpack_streams) + " files without their sizes");
      }
    }
  } else {
    for (const auto& f : s->folders) {
      if (f.unpack_streams == 0) continue;
      uint64_t sum = 0;
      for (uint64_t k = 1; k < f.unpack_streams; ++k) {
        uint64_t size = 0;
        if (!Int64(&size, "a file size")) return false;
        if (size > f.Size() - sum) {
          return Malformed("the files of a folder add up past its " + N(f.Size()) + " bytes");
        }
        sum += size;
      }
    }
    if (!Byte(&id)) return false;
  }
  uint64_t digests = 0;
  for (const auto& f : s->folders) {
    if (f.unpack_streams != 1 || !f.crc_defined) digests += f.unpack_streams;
  }
  if (id == kCrc) {
    if (!Digests(digests, nullptr) || !Byte(&id)) return false;
  }
  if (id != kEnd) return Malformed("unexpected property " + Hex(id) + " in SubStreamsInfo");
  s->substreams = total;
  return true;
}

bool Parser::Header(SevenZipHeader* out) {
  uint8_t id = 0;
  if (!Byte(&id)) return false;
  if (id == kArchiveProperties) {
    for (;;) {
      uint8_t type = 0;
      if (!Byte(&type)) return false;
      if (type == kEnd) break;
      uint64_t size = 0;
      if (!Number(&size)) return false;
      if (!r_.Skip(size).ok()) return Malformed("an archive property of " + N(size) + " bytes");
    }
    if (!Byte(&id)) return false;
  }
  if (id == kAdditionalStreamsInfo) {
    return Unsupported("additional streams (libarchive does not read them)", r_.offset() - 1);
  }
  Streams main;
  if (id == kMainStreamsInfo) {
    if (!StreamsInfo(&main) || !Byte(&id)) return false;
  }
  if (id != kFilesInfo) return Malformed("expected FilesInfo (0x05), found " + Hex(id));
  if (!FilesInfo(main, out)) return false;
  if (!Expect(kEnd, "the end of the header")) return false;
  if (!r_.empty()) return Malformed(N(r_.remaining()) + " bytes after the end of the header");
  if (out != nullptr) {
    out->folders = main.folders.size();
    out->substreams = main.substreams;
    out->pack_streams = main.pack_sizes.size();
    out->coders = most_coders_;
    out->coder_memory_bytes = coder_memory_;
  }
  return true;
}

bool Parser::FilesInfo(const Streams& main, SevenZipHeader* out) {
  const uint64_t n_at = r_.offset();
  uint64_t files = 0;
  if (!Number(&files)) return false;
  // libarchive takes at least four name bytes per file (a character and the
  // terminator): names are required here.
  if (files > r_.remaining() / 4) {
    return MalformedAt(N(files) + " files: their names need more than the " +
                           N(r_.remaining()) + " bytes left",
                       n_at);
  }
  if (files > RecordsLeft()) {
    return Limit("max_records", budget_.limits().max_records, N(files) + " files declared", n_at);
  }
  if (files > MembersLeft()) {
    return Limit("max_members", budget_.limits().max_members, N(files) + " files declared", n_at);
  }
  std::bitset<256> seen;
  uint64_t empty_streams = 0;
  for (;;) {
    const uint64_t at = r_.offset();
    uint8_t type = 0;
    if (!Byte(&type)) return false;
    if (type == kEnd) break;
    uint64_t size = 0;
    if (!Number(&size)) return false;
    auto body = r_.Take(size);
    if (!body.ok()) {
      return MalformedAt("file property " + Hex(type) + " of " + N(size) + " bytes, " +
                             N(r_.remaining()) + " remain",
                         at);
    }
    if (type != kDummy && seen[type]) return MalformedAt("file property " + Hex(type) + " twice", at);
    // The property is read from its own bytes and must use all of them, as
    // 7-Zip checks; libarchive reads on without its size.
    core::ByteReader outer = r_;
    r_ = core::ByteReader(body.value(), outer.offset() - size);
    const bool ok = FileProperty(type, files, &empty_streams, seen);
    const core::ByteReader inner = r_;
    r_ = outer;
    if (!ok) return false;
    if (!inner.empty()) {
      return MalformedAt("file property " + Hex(type) + " has " + N(inner.remaining()) +
                             " bytes it does not use",
                         at);
    }
    seen[type] = true;
  }
  if (files > 0 && !seen[kName]) return MalformedAt("files without names", n_at);
  const uint64_t with_data = files - empty_streams;
  if (with_data != main.substreams) {
    return MalformedAt(N(with_data) + " files with data, the folders hold " + N(main.substreams),
                       n_at);
  }
  if (out != nullptr) out->files = files;
  return true;
}

bool Parser::FileProperty(uint8_t type, uint64_t files, uint64_t* empty_streams,
                          const std::bitset<256>& seen) {
  std::span<const uint8_t> bits;
  auto external = [&]() {
    const uint64_t at = r_.offset();
    uint8_t ext = 0;
    if (!Byte(&ext)) return false;
    if (ext != 0) return Unsupported("file property " + Hex(type) + " kept in another stream", at);
    return true;
  };
  switch (type) {
    case kEmptyStream:
      if (!Bits(files, &bits)) return false;
      *empty_streams = CountBits(bits, files);
      return true;
    case kEmptyFile:
    case kAnti:
      // libarchive skips these before EmptyStream; 7-Zip reads no bits.
      if (!seen[kEmptyStream] || *empty_streams == 0) {
        return Malformed("file property " + Hex(type) + " without empty streams before it");
      }
      return Bits(*empty_streams, &bits);
    case kCTime:
    case kATime:
    case kMTime: {
      uint8_t all = 0;
      if (!Byte(&all)) return false;
      uint64_t defined = files;
      if (all == 0) {
        if (!Bits(files, &bits)) return false;
        defined = CountBits(bits, files);
      }
      if (!external()) return false;
      if (defined > r_.remaining() / 8) return Malformed(N(defined) + " times need more bytes");
      return r_.Skip(defined * 8).ok();
    }
    case kName: {
      if (!external()) return false;
      const uint64_t bytes = r_.remaining();
      if (bytes % 2 != 0 || bytes / 4 < files) {
        return Malformed(N(bytes) + " bytes of names for " + N(files) + " files");
      }
      for (uint64_t i = 0; i < files; ++i) {
        for (;;) {
          auto u = r_.U16Le();
          if (!u.ok()) return Malformed("the names end before " + N(files) + " names");
          if (u.value() == 0) break;
        }
      }
      return true;  // bytes left over: the caller's "does not use"
    }
    case kWinAttributes: {
      uint8_t all = 0;
      if (!Byte(&all)) return false;
      if (all == 0) {
        // libarchive reads the External byte before the defined bits: two
        // readings of one layout.
        return Unsupported("attributes not defined for every file", r_.offset() - 1);
      }
      if (!external()) return false;
      if (files > r_.remaining() / 4) return Malformed(N(files) + " attributes need more bytes");
      return r_.Skip(files * 4).ok();
    }
    default:
      // kDummy (alignment) and properties neither reader interprets
      // (kStartPos, kComment, ...): skipped by both.
      return r_.Skip(r_.remaining()).ok();
  }
}

bool Parser::Encoded(SevenZipHeader* out) {
  Streams hs;
  if (!StreamsInfo(&hs)) return false;
  if (!r_.empty()) return Malformed(N(r_.remaining()) + " bytes after the encoded header's streams");
  if (hs.folders.size() != 1 || hs.pack_sizes.size() != 1 || hs.has_substreams) {
    return Unsupported("an encoded header of " + N(hs.folders.size()) + " folders and " +
                           N(hs.pack_sizes.size()) + " packed streams",
                       r_.offset());
  }
  const Folder& f = hs.folders[0];
  for (const auto& c : f.coders) {
    if (KindOf(c.id) == Kind::kCrypto) {
      return Unsupported("encrypted header, not unpacked (" + CoderName(c.id) + ")", c.at);
    }
  }
  if (f.coders.size() != 1 || (f.coders[0].id != kLzma && f.coders[0].id != kLzma2)) {
    return Unsupported("a header coded with " + CoderName(f.coders[0].id) +
                           (f.coders.size() > 1 ? " and more" : ""),
                       f.at);
  }
  const uint64_t size = f.unpack[0];
  if (size == 0) return MalformedAt("an encoded header of 0 bytes", f.at);
  if (size > limits_.max_7z_header_bytes) {
    return Limit("max_7z_header_bytes", limits_.max_7z_header_bytes,
                 "an encoded header declaring " + N(size) + " bytes", f.at);
  }
  const uint64_t start = kStartHeaderBytes + hs.pack_pos;
  const auto packed =
      file_.subspan(static_cast<size_t>(start), static_cast<size_t>(hs.pack_sizes[0]));
  if (!Decode(f.coders[0], packed, size, &decoded_bytes_)) return false;
  if (f.crc_defined &&
      crc32(0L, decoded_bytes_.data(), static_cast<uInt>(decoded_bytes_.size())) != f.crc) {
    return MalformedAt("the decoded header's CRC does not match", start);
  }
  r_ = core::ByteReader(decoded_bytes_, 0);
  decoded_ = true;
  if (out != nullptr) {
    out->encoded = true;
    out->header_bytes = size;
  }
  if (!Expect(kHeader, "a Header")) return false;
  return Header(out);
}

bool Parser::Decode(const Coder& c, std::span<const uint8_t> packed, uint64_t size,
                    std::vector<uint8_t>* out) {
  const uint64_t at = static_cast<uint64_t>(packed.data() - file_.data());
  lzma_filter filters[2];
  filters[0].id = c.id == kLzma2 ? LZMA_FILTER_LZMA2 : LZMA_FILTER_LZMA1;
  filters[0].options = nullptr;
  filters[1].id = LZMA_VLI_UNKNOWN;
  filters[1].options = nullptr;
  if (lzma_properties_decode(&filters[0], nullptr, c.props.data(), c.props.size()) != LZMA_OK) {
    return Unsupported("liblzma refuses the header coder's properties", c.at);
  }
  const std::unique_ptr<void, decltype(&free)> options(filters[0].options, &free);
  const uint64_t need = lzma_raw_decoder_memusage(filters);
  if (need > limits_.max_decoder_memory_bytes) {  // UINT64_MAX when refused
    if (!err_) {
      err_ = budget_.DecoderMemoryLimit(limits_.max_decoder_memory_bytes, at).TakeFinding();
    }
    return false;
  }
  lzma_stream s = LZMA_STREAM_INIT;
  if (lzma_raw_decoder(&s, filters) != LZMA_OK) {
    return MalformedAt("liblzma cannot start the header's decoder", at);
  }
  const std::unique_ptr<lzma_stream, decltype(&lzma_end)> end(&s, &lzma_end);
  s.next_in = packed.data();
  s.avail_in = packed.size();
  std::vector<uint8_t> chunk(kDecodeChunkBytes);
  while (out->size() < size) {
    const size_t want = static_cast<size_t>(std::min<uint64_t>(chunk.size(), size - out->size()));
    s.next_out = chunk.data();
    s.avail_out = want;
    const size_t in_before = s.avail_in;
    const lzma_ret rc = lzma_code(&s, LZMA_RUN);
    const size_t got = want - s.avail_out;
    out->insert(out->end(), chunk.begin(), chunk.begin() + static_cast<ptrdiff_t>(got));
    if (rc == LZMA_STREAM_END && out->size() < size) {
      return MalformedAt("the encoded header ends after " + N(out->size()) + " of " + N(size) +
                             " bytes",
                         at);
    }
    if (rc != LZMA_OK && rc != LZMA_STREAM_END) {
      return MalformedAt("the encoded header cannot be decoded (liblzma error " +
                             N(static_cast<uint64_t>(rc)) + ") after " + N(out->size()) + " bytes",
                         at);
    }
    if (got == 0 && s.avail_in == in_before) {
      return MalformedAt("the encoded header's packed stream ends after " + N(out->size()) +
                             " of " + N(size) + " bytes",
                         at);
    }
  }
  return true;
}

}  // namespace

bool CheckSevenZipHeader(std::span<const uint8_t> file, Budget& budget,
                         const SevenZipLimits& limits, std::vector<Finding>* findings,
                         SevenZipHeader* header) {
  Parser p(file, budget, limits);
  SevenZipHeader h;
  if (p.Run(&h)) {
    if (header != nullptr) *header = h;
    return true;
  }
  findings->push_back(p.error() ? std::move(*p.error())
                                : MakeFinding("MG-ARCHIVE-MALFORMED", Severity::kHigh,
                                              "7z header: cannot be read", core::kNoOffset));
  return false;
}

}  // namespace modelgate::scanner::internal
