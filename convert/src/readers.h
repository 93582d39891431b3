// One reader per source format: each reads the file open as `in` (already
// scanned and passed) into a Checkpoint, or refuses it with an MG-CONV-*
// (or I/O) error. Convert() picks the reader by the scan's format.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "modelgate/convert.h"

namespace modelgate::convert {

// PyTorch zip checkpoints (torch.save since 1.6): read_torch_zip.cc.
core::Result<Checkpoint> ReadTorchZip(const core::OpenedFile& in, const ConvertOptions& options);

// torch's legacy checkpoints, a file of pickles then raw storages
// (ReadTorchLegacy) and the tar of torch < 0.4 (ReadTorchTar): read_torch_legacy.cc.
core::Result<Checkpoint> ReadTorchLegacy(const core::OpenedFile& in, const ConvertOptions& options);
core::Result<Checkpoint> ReadTorchTar(const core::OpenedFile& in, const ConvertOptions& options);

// numpy .npy / .npz files (numpy.load) and uncompressed joblib files
// (joblib.load) of numpy arrays: read_numpy.cc.
core::Result<Checkpoint> ReadNumpy(const core::OpenedFile& in, const ConvertOptions& options);
core::Result<Checkpoint> ReadJoblib(const core::OpenedFile& in, const ConvertOptions& options);

// TorchStorageDtype is the safetensors dtype a torch.<qualname> typed
// storage holds (one to one: FloatStorage F32, ... ComplexFloatStorage
// C64); false for the others (ComplexDoubleStorage, quantized storages),
// which have none. rebuild.cc.
bool TorchStorageDtype(std::string_view qualname, core::Dtype* out);

// PlanHooks let a reader plan a pickle graph that is not a torch state
// dict with the same walk (rebuild.cc): `leaf` fills a TensorPlan (all but
// its name and node_offset) for a node with PickleNode::joblib_array; a
// root that is such a leaf is one tensor named `root_name`, a list or
// tuple root names its items 0, 1, ...
struct PlanHooks {
  std::function<core::Status(const scanner::PickleNode&, TensorPlan*)> leaf;
  std::string root_name;
};
core::Result<StateDictPlan> PlanPickleGraph(const scanner::PickleGraph& graph, const ConvertLimits& limits,
                                            bool drop_non_tensors, const PlanHooks& hooks);

// CheckViewReads: the preads of views too wide to gather in memory, one
// per contiguous run, stay within max_view_reads (kConvLimit).
uint64_t ViewReads(const TensorPlan& t, const ConvertLimits& limits);
core::Status CheckViewReads(const std::vector<TensorPlan>& tensors, const ConvertLimits& limits);

}  // namespace modelgate::convert
