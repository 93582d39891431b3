// modelgate convert: PyTorch checkpoints to safetensors without unpickling
// them. The file is scanned first (the same loader models as `scan`); a
// finding at or above the bar refuses it. Then the scanner's pickle
// machine builds data.pkl's object graph symbolically, and only the
// allowlisted rebuild path is followed (torch._utils._rebuild_tensor_v2,
// _rebuild_tensor, _rebuild_parameter, _rebuild_parameter_with_state over
// typed storages; dict, collections.OrderedDict, str and the plain scalars
// around them); anything else refuses the file. Nothing is written unless
// the whole file converts: the output is an AtomicOutput committed last.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "modelgate/core.h"
#include "modelgate/scanner.h"
#include "modelgate/signer.h"

namespace modelgate::convert {

// ConvertLimits bound what one conversion writes; each has tests at N and
// N+1 (tests/convert). Past one: MG-CONV-LIMIT naming it, nothing written.
struct ConvertLimits {
  // Tensors written (the safetensors core's default max_tensors).
  uint64_t max_tensors = 1'000'000;
  // Bytes of one tensor as written (contiguous).
  uint64_t max_tensor_bytes = 64ull << 30;
  // Bytes of all tensors written.
  uint64_t max_total_bytes = 1ull << 40;
  // Nesting of dicts in the state dict (a plain one is 1).
  uint64_t max_depth = 16;
  // Dimensions of one tensor (the safetensors core's max_rank).
  uint64_t max_rank = 64;
  // A strided view's storage window up to this many bytes is read whole
  // and gathered in memory; a larger one is read one contiguous run at a
  // time (bounded memory, one pread each).
  uint64_t gather_window_bytes = 64ull << 20;
  // preads of such run-by-run views across the file (a transposed 1 GiB
  // F32 tensor needs 2^28): past it the file is refused rather than read
  // for minutes.
  uint64_t max_view_reads = 16'000'000;
};

struct ConvertOptions {
  scanner::ScanOptions scan;
  // A scan finding at or above this severity refuses the conversion.
  core::Severity fail_on = core::Severity::kHigh;
  ConvertLimits limits;
  // Non-tensor leaves that are not strings are dropped (and listed) rather
  // than refusing the file.
  bool drop_non_tensors = false;
  // Signs the output (STSIG v1, Ed25519) in the same write when set.
  const signer::PrivateKey* key = nullptr;
  std::string model;
  uint64_t version = 0;
  std::optional<uint64_t> created;  // unix seconds; unset: now
};

// ConvertedTensor is one tensor written.
struct ConvertedTensor {
  std::string name;      // dotted, as flattened
  core::Dtype dtype = core::Dtype::kU8;
  std::vector<uint64_t> shape;
  std::string storage;   // the storage record's key
  uint64_t bytes = 0;
  bool contiguous = true;  // false: a view written contiguous
};

struct ConvertReport {
  bool converted = false;
  // The source could not be read, or the output not written: the gate
  // could not finish (exit 2), as opposed to a refusal (exit 1).
  bool io_error = false;
  // Why the file was not converted: the scan findings at or above the bar,
  // or the converter's own MG-CONV-* finding. Empty when converted.
  std::vector<scanner::Finding> blocking;
  // The scan's findings below the bar (e.g. MG-PK-PICKLE-FORMAT).
  std::vector<scanner::Finding> scan_findings;
  scanner::Format format = scanner::Format::kUnknown;
  std::string source_sha256;
  std::vector<ConvertedTensor> tensors;  // in name order (= data order)
  // String leaves written to __metadata__ (name, value).
  std::vector<std::pair<std::string, std::string>> string_leaves;
  // Non-tensor leaves dropped on request: "name (kind)".
  std::vector<std::string> dropped;
  // Tensors that share one storage: each group (2 or more names, sorted),
  // each tensor written with its own bytes.
  std::vector<std::vector<std::string>> shared;
  uint64_t file_size = 0;
  uint64_t header_bytes = 0;
  bool signed_output = false;
  signer::KeyId kid{};
};

// Convert converts the file open as `in` (reported as `in_path`, whose
// extension is the claim the scan judges) to `out_path`. Never throws;
// on any refusal or error nothing exists at `out_path` that was not there.
ConvertReport Convert(const core::OpenedFile& in, const std::string& in_path,
                      const std::string& out_path, const ConvertOptions& options);

// ---- the rebuild step alone (for tests and the fuzz target) ----------------

// TensorPlan is one tensor as the graph describes it: elements of `dtype`
// at `offset` (in elements) of storage `key`, with sizes and strides.
struct TensorPlan {
  std::string name;
  core::Dtype dtype = core::Dtype::kU8;
  std::string key;
  uint64_t storage_numel = 0;
  uint64_t offset = 0;
  std::vector<uint64_t> shape;
  std::vector<uint64_t> stride;
  uint64_t node_offset = core::kNoOffset;  // the opcode that made the tensor
};

struct StateDictPlan {
  std::vector<TensorPlan> tensors;  // in name order
  std::vector<std::pair<std::string, std::string>> string_leaves;
  std::vector<std::string> dropped;
};

// StorageBytes is where one storage's bytes lie in the source file.
// kStored: [offset, offset + bytes) of the file, read with pread in any
// order. kDeflate: a zip member's raw deflate stream, [packed_offset,
// packed_offset + packed_bytes) of the file, which inflates to exactly
// member_bytes with CRC-32 member_crc32; the storage is [offset, offset +
// bytes) of the inflated member. It is read forward only, in bounded
// chunks, and the member's size and CRC-32 are checked to its end; a view
// that is not contiguous is gathered in memory within
// ConvertLimits::gather_window_bytes. Elements are little-endian unless
// `big_endian` (then swapped as they are written).
struct StorageBytes {
  enum class Codec { kStored, kDeflate };
  Codec codec = Codec::kStored;
  uint64_t offset = 0;
  uint64_t bytes = 0;
  bool big_endian = false;
  uint64_t packed_offset = 0;
  uint64_t packed_bytes = 0;
  uint64_t member_bytes = 0;
  uint32_t member_crc32 = 0;
};

// Checkpoint is what one format's reader found in the source: the tensors
// to write (each naming its storage by key) and where every storage lies.
// Convert() writes it; a reader judges nothing (the scan ran first) but
// refuses what it cannot read exactly (MG-CONV-*).
struct Checkpoint {
  StateDictPlan plan;
  std::map<std::string, StorageBytes> storages;
  // Storages are read from this descriptor instead of the source when >= 0
  // (a compressed joblib file's decoded stream), kept open by data_owner.
  int data_fd = -1;
  std::shared_ptr<const void> data_owner;
};

// PlanStateDict follows `graph` from its root along the allowlisted path
// only: kConvNotAllowed, kConvUnsupported, kConvNotTensor, kConvName,
// kConvLimit (max_tensors, max_depth, max_rank, max_view_reads), kConvStorage (a view past
// its storage, one key read as two dtypes or numels) with the offset of the
// node at fault.
core::Result<StateDictPlan> PlanStateDict(const scanner::PickleGraph& graph,
                                          const ConvertLimits& limits, bool drop_non_tensors);

// PlanIds says what the graph's persistent ids are, by source format:
// kZipStorage ('storage', torch.<T>Storage, key, location, numel), as
// torch.save since 1.6 writes; kLegacyStorage the same with a sixth item,
// view_metadata, which must be None (torch.save(...,
// _use_new_zipfile_serialization=False)); kTarTensor a tensor key (a str of
// decimal digits or an int: legacy_load's int(saved_id)) naming one of
// `tar_tensors` (the tar's "tensors" member, by decimal key), which stands
// where a tensor does (a leaf, or a parameter's data).
struct PlanIds {
  enum class Form : uint8_t { kZipStorage, kLegacyStorage, kTarTensor };
  Form form = Form::kZipStorage;
  const std::map<std::string, TensorPlan>* tar_tensors = nullptr;
};

// PlanStateDict as above, for the persistent ids `ids` describes.
core::Result<StateDictPlan> PlanStateDict(const scanner::PickleGraph& graph, const ConvertLimits& limits,
                                          bool drop_non_tensors, const PlanIds& ids);

// PlanTorchLegacy plans a legacy or tar checkpoint the scanner read
// (scanner::ReadTorchLegacyCheckpoint / ReadTorchTarCheckpoint): the
// tensors along the allowlisted path, each storage's bytes (little-endian,
// as torch reads them). A tensor whose storage is not stored, or a tar
// record of a type with no safetensors dtype, is refused.
core::Result<Checkpoint> PlanTorchLegacy(const scanner::TorchLegacyCheckpoint& legacy, const ConvertOptions& options);

// CheckView: tensor `t` (shape, stride, offset, storage_numel set) reads
// only elements of its storage; else kConvStorage at `offset`.
core::Status CheckView(const TensorPlan& t, uint64_t offset);

}  // namespace modelgate::convert
