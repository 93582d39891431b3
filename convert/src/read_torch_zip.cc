// ReadTorchZip: the scanner's reading of a PyTorch zip checkpoint (data.pkl's
// graph, the stored records) planned along the allowlisted rebuild path.
#include <string>

#include "readers.h"

namespace modelgate::convert {

core::Result<Checkpoint> ReadTorchZip(const core::OpenedFile& in, const ConvertOptions& options) {
  auto ck = scanner::ReadTorchZipCheckpoint(in, options.scan);
  if (!ck.ok()) return ck.error();
  const scanner::TorchZipCheckpoint& zip = ck.value();
  auto planned = PlanStateDict(zip.graph, options.limits, options.drop_non_tensors);
  if (!planned.ok()) return planned.error();
  Checkpoint out;
  out.plan = std::move(planned).value();
  for (const scanner::TorchRecord& r : zip.records) {
    StorageBytes b;
    b.offset = r.offset;
    b.bytes = r.bytes;
    b.big_endian = zip.big_endian;
    out.storages.emplace(r.key, b);
  }
  // A tensor whose storage has no record names the record torch would open.
  for (const TensorPlan& t : out.plan.tensors) {
    if (out.storages.find(t.key) == out.storages.end()) {
      return core::Error{core::Code::kConvStorage, t.node_offset,
                         core::Quoted(t.name, 120) + ": no storage record " +
                             core::Quoted(zip.prefix + "/data/" + t.key, 120)};
    }
  }
  return out;
}

}  // namespace modelgate::convert
