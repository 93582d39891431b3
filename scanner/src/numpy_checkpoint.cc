// ReadNumpyFile and ReadJoblibCheckpoint: numpy.load's and joblib.load's
// readings of a file, for `modelgate convert` (scanner.h). The .npy header
// is read by the scan's own parser (npy.h), an .npz by the zip reader
// (zip.h), a joblib pickle by the pickle machine with graph capture in
// joblib's reading; nothing here judges: the caller has scanned the file.
#include <algorithm>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <zlib.h>

#include "budget.h"
#include "decompress.h"
#include "modelgate/scanner.h"
#include "npy.h"
#include "pickle_machine.h"
#include "pickle_records.h"
#include "source.h"
#include "zip.h"

namespace modelgate::scanner {
namespace {

using core::Code;
using core::Quoted;

core::Error Err(Code code, uint64_t offset, std::string message) {
  return core::Error{code, offset, std::move(message)};
}

std::string FirstFinding(const std::vector<Finding>& findings) {
  for (const Finding& f : findings) {
    if (f.severity <= core::Severity::kHigh) return f.id + ": " + f.message;
  }
  return findings.empty() ? std::string("no reason given") : findings.front().id + ": " + findings.front().message;
}

// The most of a member read to find its .npy header: magic, version,
// length field and numpy's largest header.
uint64_t HeaderWindow(const NpyLimits& l) { return 12 + l.max_header_bytes; }

// Record fills `rec` from the header at the start of `head` (the first
// bytes of an array of `total` bytes whose magic is at `at`).
core::Status Record(std::span<const uint8_t> head, uint64_t at, uint64_t total, const std::string& what,
                    NumpyArrayRecord* rec) {
  std::vector<Finding> f;
  NpyLimits limits;
  auto h = ParseNpyHeader(head, 0, limits, &f);
  if (!h) {
    return Err(Code::kConvUnsupported, at, what + ": the .npy header does not parse (" + FirstFinding(f) + ")");
  }
  rec->header_offset = at;
  rec->descr = h->descr;
  rec->fortran_order = h->fortran_order;
  rec->shape = h->shape;
  rec->object = h->has_object;
  rec->data_offset = h->data_offset;  // relative to the array's start here
  if (h->data_offset > total) {
    return Err(Code::kConvStorage, at, what + ": the header runs past the array's bytes");
  }
  const uint64_t have = total - h->data_offset;
  if (h->body_bytes && *h->body_bytes != have) {
    return Err(Code::kConvStorage, at + h->data_offset,
               what + ": the body holds " + std::to_string(have) + " bytes, not the " +
                   std::to_string(*h->body_bytes) + " its shape and descr " + Quoted(h->descr, 40) + " make");
  }
  rec->data_bytes = have;
  return core::OkStatus();
}

// StoredCrc checks a stored member's CRC-32 as zipfile does when numpy
// reads it to its end (BadZipFile otherwise).
core::Status StoredCrc(const Source& src, const ZipEntry& e) {
  constexpr uint64_t kChunk = 4ull << 20;
  uLong crc = crc32(0L, Z_NULL, 0);
  std::vector<uint8_t> buf;
  for (uint64_t done = 0; done < e.compressed_bytes;) {
    const uint64_t n = std::min(kChunk, e.compressed_bytes - done);
    buf.resize(n);
    if (auto s = src.Read(e.data_offset + done, buf); !s.ok()) return s;
    crc = crc32(crc, buf.data(), static_cast<uInt>(n));
    done += n;
  }
  if (static_cast<uint32_t>(crc) != e.crc32) {
    return Err(Code::kConvStorage, e.data_offset,
               "member " + Quoted(e.name, 80) + ": CRC-32 of its bytes does not match the directory's");
  }
  return core::OkStatus();
}

core::Result<NumpyFile> ReadNpz(const core::OpenedFile& file, const ScanOptions& options) {
  FdSource src(file.fd, file.size);
  Budget budget(options.containers);
  std::vector<Finding> findings;
  auto zr = ReadZip(src, ZipLimitsFrom(options.containers), budget, &findings);
  if (!zr.ok()) return zr.error();
  const ZipArchive& zip = zr.value();
  if (!zip.directory_ok) {
    return Err(budget.exhausted() ? Code::kConvLimit : Code::kConvUnsupported, 0,
               "not a readable zip archive (" + FirstFinding(findings) + ")");
  }
  NumpyFile out;
  out.npz = true;
  const NpyLimits npy_limits;
  std::vector<std::pair<std::string, uint64_t>> keys;
  for (const ZipEntry& e : zip.entries) {
    // NpzFile: a name ending in .npy is the key without it; np.load opens
    // the member by its name through zipfile (the central directory).
    const bool npy_name = e.name.size() > 4 && e.name.compare(e.name.size() - 4, 4, ".npy") == 0;
    const std::string key = npy_name ? e.name.substr(0, e.name.size() - 4) : e.name;
    keys.emplace_back(key, e.central_offset);
    if (!e.usable || (e.flags & 1) != 0 || (e.method != 0 && e.method != 8)) {
      return Err(Code::kConvUnsupported, e.central_offset,
                 "member " + Quoted(e.name, 80) + " is encrypted, unreadable or neither stored nor deflated");
    }
    if (e.alias_of >= 0) {
      return Err(Code::kConvStorage, e.central_offset,
                 "member " + Quoted(e.name, 80) + " shares its bytes with " +
                     Quoted(zip.entries[static_cast<size_t>(e.alias_of)].name, 80));
    }
    if (e.data_offset > file.size || e.compressed_bytes > file.size - e.data_offset) {
      return Err(Code::kConvStorage, e.central_offset, "member " + Quoted(e.name, 80) + " runs past the end of the file");
    }
    std::vector<uint8_t> head;
    if (e.method == 0) {
      if (e.compressed_bytes != e.uncompressed_bytes) {
        return Err(Code::kConvStorage, e.central_offset,
                   "stored member " + Quoted(e.name, 80) + " declares " + std::to_string(e.compressed_bytes) +
                       " stored and " + std::to_string(e.uncompressed_bytes) + " uncompressed bytes");
      }
      auto h = src.ReadVec(e.data_offset, std::min(e.compressed_bytes, HeaderWindow(npy_limits)));
      if (!h.ok()) return h.error();
      head = std::move(h).value();
    } else {
      auto p = ReadZipMemberPrefix(src, e, budget, HeaderWindow(npy_limits), &findings);
      if (!p.ok()) return p.error();
      if (!p.value()) {
        return Err(budget.exhausted() ? Code::kConvLimit : Code::kConvUnsupported, e.central_offset,
                   "member " + Quoted(e.name, 80) + " cannot be inflated (" + FirstFinding(findings) + ")");
      }
      head = std::move(p.value()->bytes);
    }
    const bool magic = head.size() >= kNpyMagic.size() && std::memcmp(head.data(), kNpyMagic.data(), kNpyMagic.size()) == 0;
    if (!magic) {  // NpzFile returns such a member's raw bytes, not an array
      out.other_members.emplace_back(key, e.central_offset);
      continue;
    }
    NumpyArrayRecord rec;
    rec.name = key;
    const std::string what = "member " + Quoted(e.name, 80);
    if (e.method == 0) {
      if (auto s = Record(head, e.data_offset, e.compressed_bytes, what, &rec); !s.ok()) return s.error();
      if (auto s = StoredCrc(src, e); !s.ok()) return s.error();
      rec.data_offset += e.data_offset;
    } else {
      if (auto s = Record(head, 0, e.uncompressed_bytes, what, &rec); !s.ok()) return s.error();
      rec.header_offset = e.data_offset;
      rec.deflated = true;
      rec.packed_offset = e.data_offset;
      rec.packed_bytes = e.compressed_bytes;
      rec.member_bytes = e.uncompressed_bytes;
      rec.member_crc32 = e.crc32;
    }
    out.arrays.push_back(std::move(rec));
  }
  // Two members under one key: which one np.load returns depends on how
  // it is asked (zipfile keeps the last of one name).
  std::sort(keys.begin(), keys.end());
  for (size_t i = 1; i < keys.size(); ++i) {
    if (keys[i].first == keys[i - 1].first) {
      return Err(Code::kConvName, keys[i].second,
                 "two members have the key " + Quoted(keys[i].first, 80) + " (np.load returns one of them)");
    }
  }
  return out;
}

}  // namespace

core::Result<NumpyFile> ReadNumpyFile(const core::OpenedFile& file, const ScanOptions& options) {
  FdSource src(file.fd, file.size);
  const NpyLimits npy_limits;
  auto head = src.ReadVec(0, std::min<uint64_t>(file.size, HeaderWindow(npy_limits)));
  if (!head.ok()) return head.error();
  const std::vector<uint8_t>& h = head.value();
  if (h.size() >= 4 && h[0] == 'P' && h[1] == 'K' && h[2] == 3 && h[3] == 4) return ReadNpz(file, options);
  if (h.size() < kNpyMagic.size() || std::memcmp(h.data(), kNpyMagic.data(), kNpyMagic.size()) != 0) {
    return Err(Code::kConvUnsupported, 0, "neither an .npy array nor an .npz archive");
  }
  NumpyFile out;
  NumpyArrayRecord rec;
  rec.name = "arr_0";  // numpy's name for savez's first positional array
  if (auto s = Record(h, 0, file.size, "the array", &rec); !s.ok()) return s.error();
  out.arrays.push_back(std::move(rec));
  return out;
}

core::Result<JoblibCheckpoint> ReadJoblibCheckpoint(const core::OpenedFile& file, const ScanOptions& options) {
  JoblibCheckpoint out;
  FdSource src(file.fd, file.size);
  auto head = src.ReadVec(0, std::min<uint64_t>(file.size, kSniffBytes));
  if (!head.ok()) return head.error();
  const std::optional<Codec> codec = SniffCodec(head.value());
  std::shared_ptr<Spool> spool;
  if (codec) {
    // joblib.load decompresses the whole stream it finds (_detect_compressor):
    // decoded here under the scan's budget, whole and clean or refused.
    Budget budget(options.containers);
    std::vector<Finding> findings;
    auto decoded = DecompressToSpool(src, 0, file.size, *codec, budget, &findings);
    if (!decoded.ok()) return decoded.error();
    if (!decoded.value() || !findings.empty()) {
      return Err(budget.exhausted() ? Code::kConvLimit : Code::kConvUnsupported, 0,
                 "the " + std::string(CodecName(*codec)) + " stream does not decode whole and clean (" +
                     FirstFinding(findings) + ")");
    }
    spool = std::move(decoded).value();
    if (!spool->in_memfd()) {
      return Err(Code::kConvUnsupported, 0, "no memfd to hold the decoded stream (memfd_create failed)");
    }
    out.decoded_fd = spool->fd();
    out.decoded_size = spool->size();
    out.decoded = spool;
  }
  core::Result<core::GuardedMapping> mapped = core::GuardedMapping{};
  std::span<const uint8_t> bytes;
  if (spool) {
    auto b = spool->Bytes();
    if (!b.ok()) return b.error();
    bytes = b.value();
  } else {
    mapped = core::GuardedMapping::Map(file.fd, file.size);
    if (!mapped.ok()) return mapped.error();
    bytes = mapped.value().bytes();
  }
  PickleOptions po = options.pickle;
  po.capture_graph = true;
  po.limits.max_streams = 1;
  PickleAnalysis a;
  {
    // joblib's reading alone (AnalyzePickle also reads it as pickle.load
    // would, and keeps no graph where the two differ: the scan judged both).
    pickle_internal::Recorder rec(&a, po.limits);
    pickle_internal::Machine m(po, &a, &rec, 0, core::kNoOffset, true);
    m.RunStreams(bytes, 0, 1, true);
  }
  if (!spool && mapped.value().faulted()) {
    return Err(Code::kIoChanged, core::kNoOffset, "the file shrank while it was read");
  }
  if (!a.graph_cut.empty()) {
    bool limit = a.graph_cut.find("max_graph_refs") != std::string::npos;
    return Err(limit ? Code::kConvLimit : Code::kConvUnsupported, 0, "the pickle: " + a.graph_cut);
  }
  if (a.streams.empty() || !a.streams.front().complete || a.graphs.size() != 1 ||
      a.streams.front().end != bytes.size()) {
    std::string why = a.streams.empty()               ? "no pickle"
                      : !a.streams.front().complete ? a.streams.front().error
                                                    : "bytes follow its STOP";
    uint64_t at = a.streams.empty() ? 0 : a.streams.front().error_offset;
    if (!a.streams.empty() && a.streams.front().complete) at = a.streams.front().end;
    if (at == core::kNoOffset) at = 0;
    if (spool) {  // not a file offset: named in the message
      why = "at " + std::to_string(at) + " of the decoded stream: " + why;
      at = 0;
    }
    return Err(Code::kConvUnsupported, at, "not one whole joblib pickle: " + why);
  }
  out.graph = std::move(a.graphs.front());
  return out;
}

}  // namespace modelgate::scanner
