// Zip reading, strict. PyTorch's reader (miniz) finds the end-of-central-
// directory record by scanning back from the end, reads the central
// directory, and locates members by their central names; so do we, and every
// place where another reader (Python's zipfile, a local-header walker) could
// see something else is a finding.
#include "zip.h"

#include "archive_names.h"
#include "decompress.h"

#include <zlib.h>

#include <algorithm>
#include <functional>
#include <numeric>
#include <tuple>

namespace modelgate::scanner {
namespace {

using core::Severity;

constexpr uint32_t kEocdSig = 0x06054b50;
constexpr uint32_t kCentralSig = 0x02014b50;
constexpr uint32_t kLocalSig = 0x04034b50;
constexpr uint32_t kZip64EocdSig = 0x06064b50;
constexpr uint32_t kZip64LocatorSig = 0x07064b50;
constexpr uint64_t kEocdBytes = 22;
constexpr uint64_t kZip64LocatorBytes = 20;
constexpr uint64_t kZip64EocdBytes = 56;
constexpr uint64_t kCentralBytes = 46;
constexpr uint64_t kLocalBytes = 30;
constexpr uint64_t kMaxComment = 0xFFFF;
// Largest data descriptor (signature + CRC + two 8-byte sizes) after a
// member whose flag bit 3 is set.
constexpr uint64_t kMaxDescriptorBytes = 24;
constexpr uint16_t kFlagEncrypted = 1u << 0;
constexpr uint16_t kFlagDescriptor = 1u << 3;
constexpr uint16_t kFlagStrongEncryption = 1u << 6;
constexpr uint16_t kFlagUtf8 = 1u << 11;

void Add(std::vector<Finding>* out, const char* id, Severity sev, std::string message,
         uint64_t offset, const std::string& member = "") {
  out->push_back(MakeFinding(id, sev, std::move(message), offset, member));
}

bool IsIo(const core::Error& e) {
  return e.code == core::Code::kIoRead || e.code == core::Code::kIoChanged;
}

uint32_t Le32(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8 |
         static_cast<uint32_t>(p[2]) << 16 | static_cast<uint32_t>(p[3]) << 24;
}


struct Zip64Values {
  uint64_t uncompressed, compressed, local_offset;
};

// ApplyZip64Extra replaces 0xFFFFFFFF fields from a ZIP64 extra field (id 1),
// in the order the format fixes: uncompressed, compressed, local offset.
bool ApplyZip64Extra(std::span<const uint8_t> extra, uint64_t base, Zip64Values* v,
                     bool want_offset) {
  core::ByteReader r(extra, base);
  while (r.remaining() >= 4) {
    uint16_t id = r.U16Le().value();
    uint16_t len = r.U16Le().value();
    auto body = r.Take(len);
    if (!body.ok()) return false;
    if (id != 0x0001) continue;
    core::ByteReader z(body.value(), base);
    auto take = [&](uint64_t* field) {
      if (*field != 0xFFFFFFFFu) return true;
      auto x = z.U64Le();
      if (!x.ok()) return false;
      *field = x.value();
      return true;
    };
    if (!take(&v->uncompressed) || !take(&v->compressed)) return false;
    if (want_offset && !take(&v->local_offset)) return false;
    return true;
  }
  return true;
}

// MarkAliases sets alias_of: usable entries whose (data offset,
// compressed size, uncompressed size, method) equal an earlier entry's
// decode to the same bytes. Sorted indices, not a map: 8 bytes per entry.
void MarkAliases(ZipArchive* zip) {
  auto& es = zip->entries;
  std::vector<size_t> order;
  for (size_t i = 0; i < es.size(); ++i) {
    if (es[i].usable) order.push_back(i);
  }
  auto key = [&](size_t i) {
    const ZipEntry& e = es[i];
    return std::make_tuple(e.data_offset, e.compressed_bytes, e.uncompressed_bytes, e.method, i);
  };
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return key(a) < key(b); });
  for (size_t k = 1; k < order.size(); ++k) {
    const ZipEntry& prev = es[order[k - 1]];
    ZipEntry& e = es[order[k]];
    if (e.data_offset == prev.data_offset && e.compressed_bytes == prev.compressed_bytes &&
        e.uncompressed_bytes == prev.uncompressed_bytes && e.method == prev.method) {
      e.alias_of = prev.alias_of >= 0 ? prev.alias_of : static_cast<int64_t>(order[k - 1]);
    }
  }
}

}  // namespace

namespace {

core::Result<ZipArchive> ReadZipImpl(const Source& src, const ZipLimits& limits, Budget* budget,
                                     std::vector<Finding>* findings) {
  ZipArchive zip;
  const uint64_t size = src.size();
  auto malformed = [&](std::string message, uint64_t offset) {
    Add(findings, "MG-ZIP-MALFORMED", Severity::kHigh, std::move(message), offset);
    return zip;
  };
  if (size < kEocdBytes) return malformed("too small for an end-of-central-directory record", 0);

  // The end record: scan back from the end, as miniz does.
  const uint64_t tail_bytes = std::min(size, kEocdBytes + kMaxComment);
  const uint64_t tail_start = size - tail_bytes;
  auto tail = src.ReadVec(tail_start, tail_bytes);
  if (!tail.ok()) return tail.error();
  const auto& t = tail.value();
  int64_t found = -1;
  for (int64_t i = static_cast<int64_t>(tail_bytes - kEocdBytes); i >= 0; --i) {
    if (Le32(t.data() + i) == kEocdSig) {
      found = i;
      break;
    }
  }
  if (found < 0) return malformed("no end-of-central-directory record", size);
  zip.eocd_offset = tail_start + static_cast<uint64_t>(found);
  core::ByteReader er(std::span<const uint8_t>(t).subspan(static_cast<size_t>(found)),
                      zip.eocd_offset);
  (void)er.U32Le();
  const uint16_t disk = er.U16Le().value(), cd_disk = er.U16Le().value();
  const uint16_t disk_entries = er.U16Le().value();
  uint64_t entry_count = er.U16Le().value();
  uint64_t cd_bytes = er.U32Le().value();
  uint64_t cd_offset = er.U32Le().value();
  const uint16_t comment_bytes = er.U16Le().value();
  if (comment_bytes > er.remaining()) {
    return malformed("archive comment runs past the end of the file", zip.eocd_offset + 20);
  }
  if (comment_bytes < er.remaining()) {
    Add(findings, "MG-ZIP-TRAILING-DATA", Severity::kHigh,
        std::to_string(er.remaining() - comment_bytes) +
            " bytes after the end of the archive (another format can hide there)",
        zip.eocd_offset + kEocdBytes + comment_bytes);
  }
  if (disk != 0 || cd_disk != 0 || disk_entries != entry_count) {
    return malformed("multi-disk archives are not supported", zip.eocd_offset);
  }

  // ZIP64: a locator right before the end record names the ZIP64 end record.
  uint64_t directory_end = zip.eocd_offset;  // where the central directory must end
  if (zip.eocd_offset >= kZip64LocatorBytes) {
    auto loc = src.ReadVec(zip.eocd_offset - kZip64LocatorBytes, kZip64LocatorBytes);
    if (!loc.ok()) return loc.error();
    if (Le32(loc.value().data()) == kZip64LocatorSig) {
      core::ByteReader lr(loc.value(), zip.eocd_offset - kZip64LocatorBytes);
      (void)lr.U32Le();
      (void)lr.U32Le();  // disk with the ZIP64 end record
      const uint64_t z64_offset = lr.U64Le().value();
      if (z64_offset > zip.eocd_offset - kZip64LocatorBytes ||
          zip.eocd_offset - kZip64LocatorBytes - z64_offset < kZip64EocdBytes) {
        return malformed("ZIP64 end record offset is out of place", zip.eocd_offset - 12);
      }
      auto z = src.ReadVec(z64_offset, kZip64EocdBytes);
      if (!z.ok()) return z.error();
      core::ByteReader zr(z.value(), z64_offset);
      if (zr.U32Le().value() != kZip64EocdSig) {
        return malformed("ZIP64 locator points at no ZIP64 end record", z64_offset);
      }
      (void)zr.U64Le();  // record size
      (void)zr.U16Le();
      (void)zr.U16Le();
      const uint32_t z_disk = zr.U32Le().value(), z_cd_disk = zr.U32Le().value();
      const uint64_t z_disk_entries = zr.U64Le().value();
      entry_count = zr.U64Le().value();
      cd_bytes = zr.U64Le().value();
      cd_offset = zr.U64Le().value();
      if (z_disk != 0 || z_cd_disk != 0 || z_disk_entries != entry_count) {
        return malformed("multi-disk archives are not supported", z64_offset);
      }
      zip.zip64 = true;
      directory_end = z64_offset;
    }
  }
  if (entry_count > limits.max_entries) {
    Add(findings, "MG-ZIP-LIMIT", Severity::kHigh,
        std::to_string(entry_count) + " entries exceed " + std::to_string(limits.max_entries) +
            " (limit max_entries)",
        zip.eocd_offset);
    return zip;
  }
  if (cd_bytes > limits.max_central_dir_bytes) {
    Add(findings, "MG-ZIP-LIMIT", Severity::kHigh,
        "central directory of " + std::to_string(cd_bytes) + " bytes exceeds " +
            std::to_string(limits.max_central_dir_bytes) + " (limit max_central_dir_bytes)",
        zip.eocd_offset);
    return zip;
  }
  if (budget != nullptr) {
    if (auto charged = budget->ChargeRecords(entry_count, zip.eocd_offset); !charged.ok()) {
      findings->push_back(charged.TakeFinding());
      return zip;
    }
  }
  if (cd_offset > directory_end || cd_bytes > directory_end - cd_offset) {
    return malformed("central directory [" + std::to_string(cd_offset) + "+" +
                         std::to_string(cd_bytes) + ") runs past its end record",
                     zip.eocd_offset);
  }
  // Offsets that all point short of where the directory really ends: bytes
  // were prepended to a whole archive (a self-extractor, or a polyglot).
  // Python's zipfile (and so np.load) shifts every offset by the difference
  // and reads it; miniz (torch.load) does not. Read it as zipfile does.
  uint64_t shift = 0;
  if (cd_offset + cd_bytes < directory_end) {
    const uint64_t candidate = directory_end - cd_bytes;
    auto sig_at = [&](uint64_t at) -> core::Result<bool> {
      if (cd_bytes < 4) return false;
      auto b = src.ReadVec(at, 4);
      if (!b.ok()) return b.error();
      return Le32(b.value().data()) == kCentralSig;
    };
    auto real = sig_at(candidate);
    if (!real.ok()) return real.error();
    auto claimed = sig_at(cd_offset);
    if (!claimed.ok()) return claimed.error();
    if (real.value() && !claimed.value()) {
      shift = candidate - cd_offset;
      Add(findings, "MG-ZIP-PREPENDED-DATA", Severity::kHigh,
          "the archive starts " + std::to_string(shift) +
              " bytes into the file (data before it; Python's zipfile reads it, PyTorch's "
              "reader does not)",
          0);
      cd_offset = candidate;
    } else {
      Add(findings, "MG-ZIP-HIDDEN-DATA", Severity::kHigh,
          std::to_string(directory_end - cd_offset - cd_bytes) +
              " bytes between the central directory and its end record",
          cd_offset + cd_bytes);
    }
  }

  auto cd = src.ReadVec(cd_offset, cd_bytes);
  if (!cd.ok()) return cd.error();
  core::ByteReader cr(cd.value(), cd_offset);
  // Each record is at least 46 bytes, so the count is bounded by real bytes.
  zip.entries.reserve(static_cast<size_t>(std::min<uint64_t>(entry_count, cd_bytes / kCentralBytes)));
  for (uint64_t i = 0; i < entry_count; ++i) {
    const uint64_t at = cr.offset();
    auto fixed = cr.Take(kCentralBytes);
    if (!fixed.ok()) {
      return malformed("central directory holds " + std::to_string(i) + " of " +
                           std::to_string(entry_count) + " records",
                       at);
    }
    core::ByteReader f(fixed.value(), at);
    if (f.U32Le().value() != kCentralSig) return malformed("bad central directory record signature", at);
    (void)f.U16Le();
    (void)f.U16Le();
    ZipEntry e;
    e.central_offset = at;
    e.flags = f.U16Le().value();
    e.method = f.U16Le().value();
    (void)f.U32Le();  // time, date
    e.crc32 = f.U32Le().value();
    Zip64Values v{0, 0, 0};
    v.compressed = f.U32Le().value();
    v.uncompressed = f.U32Le().value();
    const uint16_t name_len = f.U16Le().value(), extra_len = f.U16Le().value(),
                   comment_len = f.U16Le().value();
    (void)f.U16Le();  // disk start
    (void)f.U16Le();
    (void)f.U32Le();
    v.local_offset = f.U32Le().value();
    auto name = cr.Take(name_len);
    auto extra = name.ok() ? cr.Take(extra_len) : name;
    auto comment = extra.ok() ? cr.Take(comment_len) : extra;
    if (!comment.ok()) return malformed("central directory record runs past the directory", at);
    e.name.assign(reinterpret_cast<const char*>(name.value().data()), name.value().size());
    if (!ApplyZip64Extra(extra.value(), at + kCentralBytes + name_len, &v, true)) {
      return malformed("truncated ZIP64 extra field for " + core::Quoted(e.name), at);
    }
    e.compressed_bytes = v.compressed;
    e.uncompressed_bytes = v.uncompressed;
    if (__builtin_add_overflow(v.local_offset, shift, &e.local_offset)) {
      return malformed("local header offset of " + core::Quoted(e.name) + " overflows", at);
    }
    zip.entries.push_back(std::move(e));
  }
  if (!cr.empty()) {
    Add(findings, "MG-ZIP-HIDDEN-DATA", Severity::kHigh,
        std::to_string(cr.remaining()) + " bytes after the last central directory record",
        cr.offset());
  }
  zip.directory_ok = true;

  // Names: unsafe, duplicated (which one a reader picks is up to the reader).
  std::vector<size_t> order(zip.entries.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return zip.entries[a].name < zip.entries[b].name; });
  for (size_t i = 1; i < order.size(); ++i) {
    const auto& e = zip.entries[order[i]];
    if (e.name == zip.entries[order[i - 1]].name) {
      Add(findings, "MG-ZIP-DUPLICATE-NAME", Severity::kCritical,
          "member name " + core::Quoted(e.name) + " appears more than once", e.central_offset,
          e.name);
    }
  }

  for (auto& e : zip.entries) {
    if (const char* why = UnsafeNameReason(e.name)) {
      Add(findings, "MG-ZIP-UNSAFE-NAME", Severity::kHigh,
          "member name " + core::Quoted(e.name) + ": " + why, e.central_offset, e.name);
    }
    if (e.flags & (kFlagEncrypted | kFlagStrongEncryption)) {
      Add(findings, "MG-ZIP-ENCRYPTED", Severity::kHigh,
          "member " + core::Quoted(e.name) + " is encrypted and cannot be analyzed",
          e.central_offset, e.name);
    }
    // The local header: another reader (or a streaming one) trusts it.
    if (e.local_offset > size || size - e.local_offset < kLocalBytes) {
      Add(findings, "MG-ZIP-BAD-LOCAL-HEADER", Severity::kHigh,
          "local header of " + core::Quoted(e.name) + " at " + std::to_string(e.local_offset) +
              " is past the end of the file",
          e.central_offset, e.name);
      continue;
    }
    auto lh = src.ReadVec(e.local_offset, kLocalBytes);
    if (!lh.ok()) return lh.error();
    core::ByteReader l(lh.value(), e.local_offset);
    if (l.U32Le().value() != kLocalSig) {
      Add(findings, "MG-ZIP-BAD-LOCAL-HEADER", Severity::kHigh,
          "no local header signature for " + core::Quoted(e.name), e.local_offset, e.name);
      continue;
    }
    (void)l.U16Le();
    const uint16_t lflags = l.U16Le().value(), lmethod = l.U16Le().value();
    (void)l.U32Le();
    const uint32_t lcrc = l.U32Le().value();
    Zip64Values lv{0, 0, 0};
    lv.compressed = l.U32Le().value();
    lv.uncompressed = l.U32Le().value();
    const uint16_t lname_len = l.U16Le().value(), lextra_len = l.U16Le().value();
    const uint64_t var_offset = e.local_offset + kLocalBytes;
    if (size - var_offset < uint64_t{lname_len} + lextra_len) {
      Add(findings, "MG-ZIP-BAD-LOCAL-HEADER", Severity::kHigh,
          "local header of " + core::Quoted(e.name) + " runs past the end of the file",
          e.local_offset, e.name);
      continue;
    }
    auto var = src.ReadVec(var_offset, uint64_t{lname_len} + lextra_len);
    if (!var.ok()) return var.error();
    const std::string lname(reinterpret_cast<const char*>(var.value().data()), lname_len);
    if (lname != e.name) {
      Add(findings, "MG-ZIP-NAME-MISMATCH", Severity::kCritical,
          "local header names " + core::Quoted(lname) + " but the central directory names " +
              core::Quoted(e.name),
          e.local_offset, e.name);
    }
    const uint16_t kFlagsCompared = kFlagEncrypted | kFlagStrongEncryption | kFlagUtf8;
    if ((lflags & kFlagsCompared) != (e.flags & kFlagsCompared)) {
      Add(findings, "MG-ZIP-FIELD-MISMATCH", Severity::kHigh,
          "local and central flags of " + core::Quoted(e.name) + " differ (encryption/UTF-8)",
          e.local_offset, e.name);
    }
    if (lmethod != e.method) {
      Add(findings, "MG-ZIP-FIELD-MISMATCH", Severity::kHigh,
          "local and central compression methods of " + core::Quoted(e.name) + " differ",
          e.local_offset, e.name);
    }
    if (!(lflags & kFlagDescriptor)) {
      ApplyZip64Extra(std::span<const uint8_t>(var.value()).subspan(lname_len),
                      var_offset + lname_len, &lv, false);
      if (lcrc != e.crc32 || lv.compressed != e.compressed_bytes ||
          lv.uncompressed != e.uncompressed_bytes) {
        Add(findings, "MG-ZIP-FIELD-MISMATCH", Severity::kHigh,
            "local and central CRC/sizes of " + core::Quoted(e.name) + " differ",
            e.local_offset, e.name);
      }
    }
    e.data_offset = var_offset + lname_len + lextra_len;
    if (e.compressed_bytes > size - e.data_offset) {
      Add(findings, "MG-ZIP-OUT-OF-BOUNDS", Severity::kHigh,
          "data of " + core::Quoted(e.name) + " runs past the end of the file", e.data_offset,
          e.name);
      continue;
    }
    e.usable = true;
  }

  // Layout: members, then the directory, tile the file from 0. Bytes before
  // the first member, between members or shared by two members are where a
  // second payload hides or where two readers part ways.
  struct Span {
    uint64_t begin, end;
    const ZipEntry* e;
  };
  std::vector<Span> spans;
  for (const auto& e : zip.entries) {
    if (!e.usable) continue;
    uint64_t end = e.data_offset + e.compressed_bytes;
    spans.push_back(Span{e.local_offset, end, &e});
  }
  std::sort(spans.begin(), spans.end(),
            [](const Span& a, const Span& b) { return a.begin < b.begin; });
  uint64_t cursor = 0;
  const Span* prev = nullptr;
  for (const auto& s : spans) {
    if (s.begin < cursor) {
      Add(findings, "MG-ZIP-OVERLAP", Severity::kCritical,
          "member " + core::Quoted(s.e->name) + " overlaps " + core::Quoted(prev->e->name),
          s.begin, s.e->name);
    } else if (s.begin > cursor) {
      const uint64_t gap = s.begin - cursor;
      const bool descriptor = prev != nullptr && (prev->e->flags & kFlagDescriptor) &&
                              gap <= kMaxDescriptorBytes;
      if (prev == nullptr) {
        if (shift == 0) Add(findings, "MG-ZIP-PREPENDED-DATA", Severity::kHigh,
            std::to_string(gap) + " bytes before the first member (data before the archive)", 0);
      } else if (!descriptor) {
        Add(findings, "MG-ZIP-HIDDEN-DATA", Severity::kHigh,
            std::to_string(gap) + " bytes between members belong to none", cursor);
      }
    }
    if (s.end > cursor) {
      cursor = s.end;
      prev = &s;
    }
  }
  if (!spans.empty() && cd_offset > cursor) {
    const uint64_t gap = cd_offset - cursor;
    if (!((prev->e->flags & kFlagDescriptor) && gap <= kMaxDescriptorBytes)) {
      Add(findings, "MG-ZIP-HIDDEN-DATA", Severity::kHigh,
          std::to_string(gap) + " bytes between the last member and the central directory",
          cursor);
    }
  } else if (spans.empty() && cd_offset > 0) {
    Add(findings, "MG-ZIP-PREPENDED-DATA", Severity::kHigh,
        std::to_string(cd_offset) + " bytes before the central directory", 0);
  } else if (!spans.empty() && cd_offset < cursor) {
    Add(findings, "MG-ZIP-OVERLAP", Severity::kCritical,
        "central directory overlaps member data", cd_offset);
  }
  MarkAliases(&zip);
  return zip;
}

}  // namespace

core::Result<ZipArchive> ReadZip(const Source& src, const ZipLimits& limits,
                                 std::vector<Finding>* findings) {
  return ReadZipImpl(src, limits, nullptr, findings);
}

core::Result<ZipArchive> ReadZip(const Source& src, const ZipLimits& limits, Budget& budget,
                                 std::vector<Finding>* findings) {
  return ReadZipImpl(src, limits, &budget, findings);
}

namespace {

using Sink = std::function<core::Status(std::span<const uint8_t>)>;

struct MemberRead {
  bool ok = false;  // bytes were read (false: a finding says why not)
  bool whole = false;
};

uint32_t Crc32(uint32_t crc, std::span<const uint8_t> b) {
  return static_cast<uint32_t>(crc32(crc, b.data(), static_cast<uInt>(b.size())));
}

// ReadMember runs a member's data through the one Decoder into `sink`: at
// most `max_bytes`, or the whole member (UINT64_MAX), which is refused
// first when it declares more than max_member_bytes. The Decoder's own
// findings become zip findings: a budget limit stays MG-ARCHIVE-LIMIT, a
// broken stream is MG-ZIP-MALFORMED.
core::Result<MemberRead> ReadMember(const Source& src, const ZipEntry& e, Budget& budget,
                                    uint64_t max_bytes, const Sink& sink,
                                    std::vector<Finding>* findings) {
  MemberRead r;
  if (!e.usable || (e.flags & (kFlagEncrypted | kFlagStrongEncryption))) return r;
  if (e.method != 0 && e.method != 8) {
    Add(findings, "MG-ZIP-UNSUPPORTED-METHOD", Severity::kHigh,
        "member " + core::Quoted(e.name) + " uses compression method " +
            std::to_string(e.method) + ", which cannot be analyzed",
        e.central_offset, e.name);
    return r;
  }
  const uint64_t out_bytes = e.method == 0 ? e.compressed_bytes : e.uncompressed_bytes;
  if (max_bytes == UINT64_MAX && out_bytes > budget.limits().max_member_bytes) {
    Finding f = budget.MemberLimit(out_bytes, e.data_offset).TakeFinding();
    f.member = e.name;
    findings->push_back(std::move(f));
    return r;
  }
  if (auto c = budget.ChargeMember(e.data_offset); !c.ok()) {
    findings->push_back(c.TakeFinding());
    return r;
  }
  DecoderOptions o;
  o.finding_base = e.data_offset;
  o.label = "member " + core::Quoted(e.name);
  if (e.method == 8) o.stop_after = e.uncompressed_bytes;
  std::vector<Finding> decoder_findings;
  auto dec = Decoder::OpenZip(src, e.data_offset, e.compressed_bytes, e.method, budget,
                              &decoder_findings, o);
  if (!dec) {
    Add(findings, "MG-ZIP-OUT-OF-BOUNDS", Severity::kHigh,
        "data of " + core::Quoted(e.name) + " runs past the end of the file", e.data_offset,
        e.name);
    return r;
  }
  uint32_t crc = Crc32(0, {});
  std::vector<uint8_t> chunk(static_cast<size_t>(std::min<uint64_t>(max_bytes, 256 * 1024)));
  for (uint64_t left = max_bytes; dec->more() && left > 0;) {
    const size_t n = dec->Read(std::span<uint8_t>(chunk).first(
        static_cast<size_t>(std::min<uint64_t>(left, chunk.size()))));
    const std::span<const uint8_t> got = std::span<const uint8_t>(chunk).first(n);
    crc = Crc32(crc, got);
    if (auto s = sink(got); !s.ok()) return s.error();
    left -= n;
  }
  for (auto& f : decoder_findings) {
    if (f.id != "MG-ARCHIVE-LIMIT") continue;
    f.member = e.name;
    findings->push_back(std::move(f));
  }
  switch (dec->state()) {
    case DecodeState::kIoError:
      if (IsIo(*dec->io_error())) return *dec->io_error();
      Add(findings, "MG-ZIP-OUT-OF-BOUNDS", Severity::kHigh, dec->io_error()->message,
          e.data_offset, e.name);
      return r;
    case DecodeState::kMore:  // a prefix
      r.ok = true;
      return r;
    case DecodeState::kLimit: return r;
    case DecodeState::kMalformed: case DecodeState::kNotAStream:
      Add(findings, "MG-ZIP-MALFORMED", Severity::kHigh,
          "member " + core::Quoted(e.name) + " is not a complete deflate stream", e.data_offset,
          e.name);
      return r;
    case DecodeState::kStopped:
      // Stopped one byte past the declared size: more is a lie or a bomb.
      Add(findings, "MG-ZIP-FIELD-MISMATCH", Severity::kHigh,
          "member " + core::Quoted(e.name) + " inflates past its declared size", e.data_offset,
          e.name);
      r.ok = r.whole = true;
      return r;
    case DecodeState::kEnd: break;
  }
  if (e.method == 0 && e.compressed_bytes != e.uncompressed_bytes) {
    Add(findings, "MG-ZIP-FIELD-MISMATCH", Severity::kHigh,
        "stored member " + core::Quoted(e.name) + " has different compressed and "
        "uncompressed sizes", e.central_offset, e.name);
  } else if (e.method == 8 && dec->produced() < e.uncompressed_bytes) {
    Add(findings, "MG-ZIP-FIELD-MISMATCH", Severity::kHigh,
        "member " + core::Quoted(e.name) + " inflates to fewer bytes than declared",
        e.data_offset, e.name);
  }
  if (crc != e.crc32) {
    Add(findings, "MG-ZIP-BAD-CRC", Severity::kHigh,
        "member " + core::Quoted(e.name) + " fails its CRC-32 check", e.data_offset, e.name);
  }
  r.ok = r.whole = true;
  return r;
}

core::Result<std::optional<ZipMemberBytes>> ReadToVector(const Source& src, const ZipEntry& e,
                                                         Budget& budget, uint64_t max_bytes,
                                                         std::vector<Finding>* findings) {
  ZipMemberBytes out;
  auto r = ReadMember(
      src, e, budget, max_bytes,
      [&](std::span<const uint8_t> b) {
        out.bytes.insert(out.bytes.end(), b.begin(), b.end());
        return core::OkStatus();
      },
      findings);
  if (!r.ok()) return r.error();
  if (!r.value().ok) return std::optional<ZipMemberBytes>();
  out.whole = r.value().whole;
  return std::optional<ZipMemberBytes>(std::move(out));
}

}  // namespace

core::Result<std::optional<ZipMemberBytes>> ExtractZipMember(const Source& src,
                                                             const ZipEntry& entry, Budget& budget,
                                                             std::vector<Finding>* findings) {
  return ReadToVector(src, entry, budget, UINT64_MAX, findings);
}

core::Result<std::optional<ZipMemberBytes>> ReadZipMemberPrefix(const Source& src,
                                                                const ZipEntry& entry,
                                                                Budget& budget, uint64_t max_bytes,
                                                                std::vector<Finding>* findings) {
  return ReadToVector(src, entry, budget, max_bytes, findings);
}

core::Result<ZipMemberSource> OpenZipMemberSource(const Source& src, const ZipEntry& e,
                                                  Budget& budget, std::vector<Finding>* findings) {
  ZipMemberSource out;
  if (e.usable && e.method == 0 && !(e.flags & (kFlagEncrypted | kFlagStrongEncryption))) {
    if (auto c = budget.ChargeMember(e.data_offset); !c.ok()) {
      findings->push_back(c.TakeFinding());
      return out;
    }
    out.source = std::make_unique<SliceSource>(src, e.data_offset, e.compressed_bytes);
    return out;
  }
  auto spool = Spool::Create("modelgate-zip-member");
  if (!spool.ok()) return spool.error();
  std::unique_ptr<Spool> s = std::move(spool).value();
  auto r = ReadMember(
      src, e, budget, UINT64_MAX, [&](std::span<const uint8_t> b) { return s->Append(b); },
      findings);
  if (!r.ok()) return r.error();
  if (!r.value().ok) return out;
  if (auto sealed = s->Seal(); !sealed.ok()) return sealed.error();
  out.whole = r.value().whole;
  out.source = std::move(s);
  return out;
}

core::Result<std::optional<std::vector<uint8_t>>> ExtractZipMember(
    const Source& src, const ZipEntry& e, uint64_t max_bytes, std::vector<Finding>* findings) {
  using Out = std::optional<std::vector<uint8_t>>;
  if (!e.usable || (e.flags & (kFlagEncrypted | kFlagStrongEncryption))) return Out{};
  if (e.uncompressed_bytes > max_bytes || e.compressed_bytes > max_bytes) {
    Add(findings, "MG-ZIP-LIMIT", Severity::kHigh,
        "member " + core::Quoted(e.name) + " of " + std::to_string(e.uncompressed_bytes) +
            " bytes exceeds " + std::to_string(max_bytes) + " (limit max_member_bytes)",
        e.data_offset, e.name);
    return Out{};
  }
  BudgetLimits limits;
  limits.max_total_decompressed_bytes = UINT64_MAX;
  limits.max_member_bytes = max_bytes;
  limits.max_expansion_ratio = UINT64_MAX;
  limits.max_members = UINT64_MAX;
  Budget budget(limits);
  auto m = ExtractZipMember(src, e, budget, findings);
  if (!m.ok()) return m.error();
  if (!m.value()) return Out{};
  return Out{std::move(m.value()->bytes)};
}

}  // namespace modelgate::scanner
