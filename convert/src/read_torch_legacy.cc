// ReadTorchLegacy / ReadTorchTar: torch's legacy checkpoints (a file of
// pickles then raw storages, and the tar layout of torch < 0.4) as the
// scanner reads them for conversion (scanner.h), planned along the
// allowlisted rebuild path. The file is mapped read-only (GuardedMapping):
// only the pickles and each storage's 8-byte count are touched here; the
// storages' bytes are read later, with pread, by Convert().
#include <map>
#include <string>
#include <utility>

#include "readers.h"

namespace modelgate::convert {
namespace {

using core::Code;
using core::Error;
using core::Quoted;

using Reader = core::Result<scanner::TorchLegacyCheckpoint> (*)(std::span<const uint8_t>,
                                                                const scanner::ScanOptions&, uint64_t);

core::Result<Checkpoint> Read(const core::OpenedFile& in, const ConvertOptions& options, Reader reader) {
  auto mapped = core::GuardedMapping::Map(in.fd, in.size);
  if (!mapped.ok()) return mapped.error();
  const core::GuardedMapping& map = mapped.value();
  auto ck = reader(map.bytes(), options.scan, options.limits.max_tensors);
  if (map.faulted()) return Error{Code::kIoChanged, core::kNoOffset, "the file shrank while it was read"};
  if (!ck.ok()) return ck.error();
  return PlanTorchLegacy(ck.value(), options);
}

}  // namespace

core::Result<Checkpoint> PlanTorchLegacy(const scanner::TorchLegacyCheckpoint& legacy, const ConvertOptions& options) {
  PlanIds ids;
  std::map<std::string, TensorPlan> tar_tensors;
  Checkpoint out;
  for (const scanner::TorchLegacyStorage& s : legacy.storages) {
    StorageBytes b;
    b.offset = s.offset;
    b.bytes = s.bytes;
    b.big_endian = false;  // torch reads them little-endian, whatever sys_info says
    out.storages.emplace(s.key, b);
  }
  if (legacy.tar) {
    ids.form = PlanIds::Form::kTarTensor;
    std::map<std::string, const scanner::TorchLegacyStorage*> by_key;
    for (const auto& s : legacy.storages) by_key.emplace(s.key, &s);
    for (const scanner::TorchTarTensor& r : legacy.tensors) {
      const scanner::TorchLegacyStorage& s = *by_key.at(r.storage_key);  // the reader checked it
      TensorPlan t;
      if (!TorchStorageDtype(s.storage_type, &t.dtype)) {
        return Error{Code::kConvUnsupported, s.count_offset,
                     "storage " + Quoted(s.key, 40) + ": torch." + Quoted(s.storage_type, 60) +
                         " has no safetensors dtype"};
      }
      t.name = "tensor " + r.key;
      t.key = s.key;
      t.storage_numel = s.numel;
      t.offset = r.storage_offset;
      t.shape = r.sizes;
      t.stride = r.strides;
      t.node_offset = r.offset;
      tar_tensors.emplace(r.key, std::move(t));
    }
    ids.tar_tensors = &tar_tensors;
  } else {
    ids.form = PlanIds::Form::kLegacyStorage;
  }
  auto planned = PlanStateDict(legacy.graph, options.limits, options.drop_non_tensors, ids);
  if (!planned.ok()) return planned.error();
  out.plan = std::move(planned).value();
  // A tensor whose storage is not in the file: torch would leave it
  // uninitialized (a legacy file's storage that is not listed).
  for (const TensorPlan& t : out.plan.tensors) {
    if (out.storages.find(t.key) == out.storages.end()) {
      return Error{Code::kConvStorage, t.node_offset,
                   Quoted(t.name, 120) + ": storage " + Quoted(t.key, 60) + " is not listed among the stored ones"};
    }
  }
  return out;
}

core::Result<Checkpoint> ReadTorchLegacy(const core::OpenedFile& in, const ConvertOptions& options) {
  return Read(in, options, &scanner::ReadTorchLegacyCheckpoint);
}

core::Result<Checkpoint> ReadTorchTar(const core::OpenedFile& in, const ConvertOptions& options) {
  return Read(in, options, &scanner::ReadTorchTarCheckpoint);
}

}  // namespace modelgate::convert
