// ReadNumpy and ReadJoblib: numpy arrays as numpy.load and joblib.load
// read them (the scanner's ReadNumpyFile / ReadJoblibCheckpoint), each
// array one storage of its own. dtypes map one to one (MapDescr); the byte
// order is the file's, swapped to little-endian as it is written; a
// Fortran-order array is a column-major view written row-major.
#include <algorithm>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "readers.h"

namespace modelgate::convert {
namespace {

using core::Code;
using core::Error;
using core::Quoted;

// The numpy type strings that have a safetensors dtype of the same width
// and meaning; everything else ('<c16', '|O', strings, datetimes, 'V',
// structured dtypes) is refused.
struct NumpyType {
  std::string_view typestr;
  core::Dtype dtype;
};
constexpr NumpyType kTypes[] = {
    {"b1", core::Dtype::kBool}, {"u1", core::Dtype::kU8},  {"i1", core::Dtype::kI8},
    {"i2", core::Dtype::kI16},  {"u2", core::Dtype::kU16}, {"i4", core::Dtype::kI32},
    {"u4", core::Dtype::kU32},  {"i8", core::Dtype::kI64}, {"u8", core::Dtype::kU64},
    {"f2", core::Dtype::kF16},  {"f4", core::Dtype::kF32}, {"f8", core::Dtype::kF64},
    {"c8", core::Dtype::kC64},
};

// MapDescr maps an array-interface type string ('<f4', '|b1', '>i8') to a
// dtype and its byte order. Multi-byte types need an explicit '<' or '>'
// (numpy writes one); '=' and '|' would mean the reading host's order.
bool MapDescr(std::string_view descr, core::Dtype* dtype, bool* big_endian) {
  if (descr.size() != 3) return false;
  const char order = descr[0];
  for (const NumpyType& t : kTypes) {
    if (descr.substr(1) != t.typestr) continue;
    const bool one_byte = core::DtypeBits(t.dtype) == 8;
    if (!(order == '<' || order == '>' || (one_byte && order == '|'))) return false;
    *dtype = t.dtype;
    *big_endian = order == '>' && !one_byte;
    return true;
  }
  return false;
}

Error Unsupported(uint64_t at, const std::string& name, std::string_view descr) {
  return Error{Code::kConvUnsupported, at,
               Quoted(name, 120) + ": numpy dtype " + Quoted(descr, 60) +
                   " has no safetensors dtype (mapped: bool, u8, i8, i16, u16, i32, u32, i64, u64, f16, f32, "
                   "f64, complex64)"};
}

// Plan fills `t` (its name set) as one whole array of `shape`, C or
// Fortran order, over storage `key` of exactly `bytes` bytes.
core::Status Plan(const std::vector<uint64_t>& shape, bool fortran, core::Dtype dtype, const std::string& key,
                  uint64_t bytes, uint64_t at, const ConvertLimits& limits, TensorPlan* t) {
  if (shape.size() > limits.max_rank) {
    return Error{Code::kConvLimit, at,
                 Quoted(t->name, 120) + " has " + std::to_string(shape.size()) + " dimensions, over max_rank (" +
                     std::to_string(limits.max_rank) + ")"};
  }
  const uint64_t el = core::DtypeBits(dtype) / 8;
  uint64_t numel = 1, want = 0;
  bool overflow = false;
  for (uint64_t d : shape) overflow |= __builtin_mul_overflow(numel, d, &numel);
  overflow |= __builtin_mul_overflow(numel, el, &want);
  if (overflow || want != bytes) {
    return Error{Code::kConvStorage, at,
                 Quoted(t->name, 120) + ": its data is " + std::to_string(bytes) + " bytes, not shape x " +
                     std::to_string(el) + " bytes"};
  }
  t->dtype = dtype;
  t->key = key;
  t->storage_numel = numel;
  t->offset = 0;
  t->shape = shape;
  t->stride.assign(shape.size(), 1);
  // Row-major: stride_i = prod(shape[i+1:]); column-major: prod(shape[:i]).
  // Each product is at most numel (or a dimension is 0 and nothing is read).
  uint64_t run = 1;
  for (size_t k = 0; k < shape.size(); ++k) {
    const size_t i = fortran ? k : shape.size() - 1 - k;
    t->stride[i] = run;
    if (__builtin_mul_overflow(run, shape[i], &run)) run = 0;
  }
  if (t->node_offset == core::kNoOffset) t->node_offset = at;
  return core::OkStatus();
}

core::Status CheckName(const std::string& name, uint64_t at) {
  if (name.empty() || name == "__metadata__") {
    return Error{Code::kConvName, at, "an array named " + Quoted(name, 120) + " makes no tensor name"};
  }
  return core::OkStatus();
}

std::string List(const std::vector<std::string>& items) {
  std::string list;
  for (size_t i = 0; i < items.size() && i < 8; ++i) list += (i ? ", " : "") + items[i];
  if (items.size() > 8) list += ", ... (" + std::to_string(items.size()) + " in all)";
  return list;
}

}  // namespace

core::Result<Checkpoint> ReadNumpy(const core::OpenedFile& in, const ConvertOptions& options) {
  auto read = scanner::ReadNumpyFile(in, options.scan);
  if (!read.ok()) return read.error();
  const scanner::NumpyFile& file = read.value();
  const ConvertLimits& lim = options.limits;
  Checkpoint out;
  if (!file.other_members.empty()) {
    // NpzFile returns these as bytes: no tensor, no string.
    std::vector<std::string> names;
    for (const auto& [name, at] : file.other_members) names.push_back(Quoted(name, 120) + " (npz member, not .npy)");
    if (!options.drop_non_tensors) {
      return Error{Code::kConvNotTensor, file.other_members.front().second,
                   std::to_string(names.size()) + " member(s) are not .npy arrays: " + List(names) +
                       "; --drop-non-tensors drops them"};
    }
    out.plan.dropped = std::move(names);
  }
  for (const scanner::NumpyArrayRecord& a : file.arrays) {
    if (out.plan.tensors.size() >= lim.max_tensors) {
      return Error{Code::kConvLimit, a.header_offset,
                   "max_tensors (" + std::to_string(lim.max_tensors) + ") reached at " + Quoted(a.name, 120)};
    }
    if (auto s = CheckName(a.name, a.header_offset); !s.ok()) return s.error();
    core::Dtype dtype = core::Dtype::kU8;
    bool big = false;
    if (a.object || !MapDescr(a.descr, &dtype, &big)) return Unsupported(a.header_offset, a.name, a.descr);
    TensorPlan t;
    t.name = a.name;
    const std::string key = a.name;  // one member, one array: unique keys (checked)
    if (auto s = Plan(a.shape, a.fortran_order, dtype, key, a.data_bytes, a.header_offset, lim, &t); !s.ok()) {
      return s.error();
    }
    StorageBytes b;
    b.bytes = a.data_bytes;
    b.big_endian = big;
    if (a.deflated) {
      b.codec = StorageBytes::Codec::kDeflate;
      b.offset = a.data_offset;  // within the inflated member
      b.packed_offset = a.packed_offset;
      b.packed_bytes = a.packed_bytes;
      b.member_bytes = a.member_bytes;
      b.member_crc32 = a.member_crc32;
      // Inflated forward only: a view that is not contiguous is gathered.
      if (ViewReads(t, ConvertLimits{.gather_window_bytes = 0}) > 0 && a.data_bytes > lim.gather_window_bytes) {
        return Error{Code::kConvLimit, a.header_offset,
                     Quoted(a.name, 120) + ": a deflated Fortran-order array of " + std::to_string(a.data_bytes) +
                         " bytes is over gather_window_bytes (" + std::to_string(lim.gather_window_bytes) +
                         "); save it with np.savez (stored) or in C order"};
      }
    } else {
      b.offset = a.data_offset;
    }
    out.storages.emplace(key, b);
    out.plan.tensors.push_back(std::move(t));
  }
  std::sort(out.plan.tensors.begin(), out.plan.tensors.end(),
            [](const TensorPlan& x, const TensorPlan& y) { return x.name < y.name; });
  if (auto s = CheckViewReads(out.plan.tensors, lim); !s.ok()) return s.error();
  return out;
}

core::Result<Checkpoint> ReadJoblib(const core::OpenedFile& in, const ConvertOptions& options) {
  auto read = scanner::ReadJoblibCheckpoint(in, options.scan);
  if (!read.ok()) return read.error();
  Checkpoint out;
  const bool decoded = read.value().decoded_fd >= 0;
  out.data_fd = read.value().decoded_fd;
  out.data_owner = read.value().decoded;
  // Offsets in a compressed file's decoded stream are not file offsets: an
  // error names them in its message and points at the file's start.
  auto placed = [decoded](Error e) {
    if (decoded && e.offset != core::kNoOffset) {
      e.message = "decoded stream at " + std::to_string(e.offset) + ": " + e.message;
      e.offset = 0;
    }
    return e;
  };
  const ConvertLimits& lim = options.limits;
  PlanHooks hooks;
  hooks.root_name = "arr_0";
  hooks.leaf = [&](const scanner::PickleNode& n, TensorPlan* t) -> core::Status {
    const scanner::PickleJoblibArray& a = *n.joblib_array;
    // read() returns the array as read_array made it for numpy.ndarray; any
    // other subclass is rebuilt through it (code of its own). numpy.memmap
    // would be returned as read too, but the scan holds it critical.
    if (a.subclass != "numpy.ndarray") {
      return Error{Code::kConvNotAllowed, n.offset,
                   Quoted(t->name, 120) + ": a NumpyArrayWrapper of subclass " +
                       Quoted(a.subclass.empty() ? std::string("<not a global>") : a.subclass, 80) +
                       ", not numpy.ndarray"};
    }
    if (a.order != "C" && a.order != "F") {
      return Error{Code::kConvNotAllowed, n.offset,
                   Quoted(t->name, 120) + ": a NumpyArrayWrapper whose order is " + Quoted(a.order, 20) +
                       ", not 'C' or 'F'"};
    }
    const std::string descr = (a.byteorder ? std::string(1, a.byteorder) : std::string("?")) + a.typestr;
    core::Dtype dtype = core::Dtype::kU8;
    bool big = false;
    if (a.object || a.byteorder == 0 || !MapDescr(descr, &dtype, &big)) {
      return Unsupported(n.offset, t->name, a.object ? "|O" : descr);
    }
    const std::string key = "joblib@" + std::to_string(a.offset);
    if (auto s = Plan(a.shape, a.order == "F", dtype, key, a.bytes, n.offset, lim, t); !s.ok()) return s;
    if (decoded) t->node_offset = 0;
    StorageBytes b;
    b.offset = a.offset;
    b.bytes = a.bytes;
    b.big_endian = big;
    out.storages.emplace(key, b);  // one array read twice (a memo get) is one storage
    return core::OkStatus();
  };
  auto planned = PlanPickleGraph(read.value().graph, lim, options.drop_non_tensors, hooks);
  if (!planned.ok()) return placed(planned.error());
  out.plan = std::move(planned).value();
  for (const TensorPlan& t : out.plan.tensors) {
    if (out.storages.find(t.key) == out.storages.end()) {
      return placed(Error{Code::kConvNotAllowed, t.node_offset, Quoted(t.name, 120) + " is not a joblib array"});
    }
  }
  return out;
}

}  // namespace modelgate::convert
