// ReadTorchZipCheckpoint: a PyTorch zip checkpoint's pickle graph and
// storage records, for `modelgate convert` (scanner.h). The zip is read by
// the scanner's own reader (zip.h), data.pkl by the pickle machine with
// graph capture; nothing here judges: the caller has scanned the file.
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "budget.h"
#include "modelgate/scanner.h"
#include "source.h"
#include "zip.h"

namespace modelgate::scanner {
namespace {

core::Error Err(core::Code code, uint64_t offset, std::string message) {
  return core::Error{code, offset, std::move(message)};
}

// FirstFinding is the message of the first high or critical finding, for
// an error that says why a member could not be read.
std::string FirstFinding(const std::vector<Finding>& findings) {
  for (const Finding& f : findings) {
    if (f.severity <= core::Severity::kHigh) return f.id + ": " + f.message;
  }
  return findings.empty() ? std::string("no reason given") : findings.front().id + ": " + findings.front().message;
}

}  // namespace

core::Result<TorchZipCheckpoint> ReadTorchZipCheckpoint(const core::OpenedFile& file,
                                                        const ScanOptions& options) {
  FdSource src(file.fd, file.size);
  Budget budget(options.containers);
  std::vector<Finding> findings;
  auto zr = ReadZip(src, ZipLimitsFrom(options.containers), budget, &findings);
  if (!zr.ok()) return zr.error();
  const ZipArchive& zip = zr.value();
  if (!zip.directory_ok || zip.entries.empty()) {
    return Err(budget.exhausted() ? core::Code::kConvLimit : core::Code::kConvUnsupported, 0,
               "not a readable zip archive (" + FirstFinding(findings) + ")");
  }
  TorchZipCheckpoint out;
  // PyTorchStreamReader: the archive name is the first record's name up
  // to its first '/'; every record is looked up under it.
  const std::string& first = zip.entries.front().name;
  size_t slash = first.find('/');
  if (slash == std::string::npos || slash == 0) {
    return Err(core::Code::kConvUnsupported, zip.entries.front().central_offset,
               "first zip record " + core::Quoted(first, 80) +
                   " has no top directory: not a PyTorch checkpoint");
  }
  out.prefix = first.substr(0, slash);
  const std::string pkl_name = out.prefix + "/data.pkl";
  const std::string data_dir = out.prefix + "/data/";
  const std::string order_name = out.prefix + "/byteorder";
  const ZipEntry* pkl = nullptr;
  const ZipEntry* order = nullptr;
  for (const ZipEntry& e : zip.entries) {
    if (e.name == pkl_name || e.name == order_name) {
      const ZipEntry*& slot = e.name == pkl_name ? pkl : order;
      if (slot != nullptr) {
        return Err(core::Code::kConvStorage, e.central_offset,
                   "record " + core::Quoted(e.name, 80) + " appears twice");
      }
      slot = &e;
    } else if (e.name.rfind(out.prefix + "/code/", 0) == 0 ||
               e.name == out.prefix + "/constants.pkl") {
      return Err(core::Code::kConvUnsupported, e.central_offset,
                 "a TorchScript archive (" + core::Quoted(e.name, 80) +
                     "): only checkpoints of plain data are converted");
    } else if (e.name.rfind(data_dir, 0) == 0) {
      std::string key = e.name.substr(data_dir.size());
      if (key.empty() || key.find('/') != std::string::npos) continue;  // not a storage key
      if (!e.usable || e.method != 0 || (e.flags & 1) != 0 ||
          e.compressed_bytes != e.uncompressed_bytes) {
        return Err(core::Code::kConvUnsupported, e.central_offset,
                   "storage record " + core::Quoted(e.name, 80) +
                       " is not stored uncompressed and readable in place");
      }
      if (e.alias_of >= 0) {
        return Err(core::Code::kConvStorage, e.central_offset,
                   "storage record " + core::Quoted(e.name, 80) + " shares its bytes with " +
                       core::Quoted(zip.entries[static_cast<size_t>(e.alias_of)].name, 80));
      }
      out.records.push_back(TorchRecord{std::move(key), e.data_offset, e.uncompressed_bytes});
    }
  }
  if (pkl == nullptr) {
    return Err(core::Code::kConvUnsupported, 0, "no " + core::Quoted(pkl_name, 80) + " record");
  }
  // Records in file order must not overlap, nor run past the file.
  std::vector<const TorchRecord*> by_offset;
  by_offset.reserve(out.records.size());
  for (const TorchRecord& r : out.records) {
    if (r.offset > file.size || r.bytes > file.size - r.offset) {
      return Err(core::Code::kConvStorage, r.offset,
                 "storage record " + core::Quoted(r.key, 80) + " runs past the end of the file");
    }
    by_offset.push_back(&r);
  }
  std::sort(by_offset.begin(), by_offset.end(),
            [](const TorchRecord* a, const TorchRecord* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const TorchRecord& a = *by_offset[i - 1];
    const TorchRecord& b = *by_offset[i];
    if (b.offset < a.offset + a.bytes) {
      return Err(core::Code::kConvStorage, b.offset,
                 "storage records " + core::Quoted(a.key, 80) + " and " + core::Quoted(b.key, 80) +
                     " overlap");
    }
  }
  std::sort(out.records.begin(), out.records.end(),
            [](const TorchRecord& a, const TorchRecord& b) { return a.key < b.key; });
  for (size_t i = 1; i < out.records.size(); ++i) {
    if (out.records[i].key == out.records[i - 1].key) {
      return Err(core::Code::kConvStorage, out.records[i].offset,
                 "storage record " + core::Quoted(out.records[i].key, 80) + " appears twice");
    }
  }
  if (order != nullptr) {
    auto ob = ExtractZipMember(src, *order, budget, &findings);
    if (!ob.ok()) return ob.error();
    if (!ob.value() || !ob.value()->whole) {
      return Err(core::Code::kConvUnsupported, order->local_offset,
                 "byteorder record cannot be read (" + FirstFinding(findings) + ")");
    }
    std::string text(ob.value()->bytes.begin(), ob.value()->bytes.end());
    if (text != "little" && text != "big") {
      return Err(core::Code::kConvUnsupported, order->data_offset,
                 "byteorder record says " + core::Quoted(text, 40) + ", not little or big");
    }
    out.big_endian = text == "big";
  }
  auto pb = ExtractZipMember(src, *pkl, budget, &findings);
  if (!pb.ok()) return pb.error();
  if (!pb.value() || !pb.value()->whole) {
    return Err(budget.exhausted() ? core::Code::kConvLimit : core::Code::kConvUnsupported,
               pkl->local_offset, "data.pkl cannot be read (" + FirstFinding(findings) + ")");
  }
  out.pickle_offset = pkl->method == 0 ? pkl->data_offset : 0;
  PickleOptions po = options.pickle;
  po.capture_graph = true;
  po.limits.max_streams = 1;
  const std::vector<uint8_t>& bytes = pb.value()->bytes;
  PickleAnalysis a = AnalyzePickle(bytes, po, out.pickle_offset);
  if (!a.graph_cut.empty()) {
    bool limit = a.graph_cut.find("max_graph_refs") != std::string::npos;
    return Err(limit ? core::Code::kConvLimit : core::Code::kConvUnsupported, out.pickle_offset,
               "data.pkl: " + a.graph_cut);
  }
  if (a.streams.empty() || !a.streams.front().complete || a.graphs.size() != 1 ||
      a.streams.front().end != out.pickle_offset + bytes.size()) {
    std::string why = a.streams.empty() ? "no pickle"
                      : !a.streams.front().complete
                          ? a.streams.front().error
                          : "bytes follow its STOP";
    uint64_t at = a.streams.empty() ? out.pickle_offset : a.streams.front().error_offset;
    return Err(core::Code::kConvUnsupported, at == core::kNoOffset ? out.pickle_offset : at,
               "data.pkl is not one whole pickle: " + why);
  }
  out.graph = std::move(a.graphs.front());
  return out;
}

}  // namespace modelgate::scanner
