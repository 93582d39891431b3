// fuzz_convert: the conversion path's reading on arbitrary bytes taken as a
// data.pkl: the pickle machine with graph capture (default and tight
// max_graph_refs), then convert::PlanStateDict (default and tight limits,
// dropping non-tensors or not). Invariants: never crashes or hangs; the
// analysis is the one made without capture (same imports, calls, streams);
// every graph index is in range; a plan has unique names, no more tensors
// than max_tensors, ranks within max_rank, and every view inside its
// storage; an error has a conversion code and an offset inside the input.
// The same bytes are also read as a whole legacy torch file and as a tar
// checkpoint (scanner::ReadTorchLegacyCheckpoint / ReadTorchTarCheckpoint,
// then convert::PlanTorchLegacy), with the invariants in Legacy().
// The same bytes as a whole file: scanner::ReadNumpyFile and
// ReadJoblibCheckpoint (numpy.load's and joblib.load's readings for
// conversion) keep every array inside the file (a compressed joblib
// file's: inside its decoded stream), and the joblib graph plans without
// crashing.
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <set>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "modelgate/convert.h"

namespace {

void Check(bool ok) {
  if (!ok) __builtin_trap();
}

void CheckGraph(const modelgate::scanner::PickleGraph& g) {
  using modelgate::scanner::kNoNode;
  const size_t n = g.nodes.size();
  Check(g.root < n);
  auto ok = [&](uint32_t i) { return i == kNoNode || i < n; };
  for (const auto& node : g.nodes) {
    Check(ok(node.callee) && ok(node.args));
    for (uint32_t i : node.items) Check(ok(i));
    for (const auto& [k, v] : node.entries) Check(ok(k) && ok(v));
    for (uint32_t i : node.states) Check(ok(i));
  }
}

void Plan(const modelgate::scanner::PickleGraph& g, const modelgate::convert::ConvertLimits& lim,
          bool drop, uint64_t size) {
  using namespace modelgate;
  auto r = convert::PlanStateDict(g, lim, drop);
  if (!r.ok()) {
    const auto c = static_cast<uint16_t>(r.error().code);
    Check(c >= static_cast<uint16_t>(core::Code::kConvUnsupported) &&
          c <= static_cast<uint16_t>(core::Code::kConvLimit));
    Check(r.error().offset == core::kNoOffset || r.error().offset < size);
    return;
  }
  const auto& p = r.value();
  Check(p.tensors.size() <= lim.max_tensors);
  std::set<std::string> names;
  for (const auto& t : p.tensors) {
    Check(names.insert(t.name).second);
    Check(t.shape.size() == t.stride.size() && t.shape.size() <= lim.max_rank);
    bool empty = false;
    for (uint64_t d : t.shape) empty |= d == 0;
    if (empty) continue;
    // Recomputed with overflow checks: the plan must have refused a wrap.
    uint64_t last = t.offset;
    for (size_t i = 0; i < t.shape.size(); ++i) {
      uint64_t step = 0;
      Check(!__builtin_mul_overflow(t.shape[i] - 1, t.stride[i], &step));
      Check(!__builtin_add_overflow(last, step, &last));
    }
    Check(last < t.storage_numel);
  }
  for (const auto& s : p.string_leaves) Check(names.insert(s.first).second);
  Check(drop || p.dropped.empty());
}

// Legacy: the input as a whole legacy file and as a tar checkpoint. An
// error has an offset inside the input; a reading has its storages inside
// the input, each after its 8-byte count, none overlapping, and its plan
// names only stored storages.
void Legacy(std::span<const uint8_t> in, bool tar) {
  using namespace modelgate;
  convert::ConvertOptions opts;
  opts.scan.pickle.limits.max_opcodes = 100'000;
  opts.limits.max_tensors = 64;
  auto r = tar ? scanner::ReadTorchTarCheckpoint(in, opts.scan, opts.limits.max_tensors)
               : scanner::ReadTorchLegacyCheckpoint(in, opts.scan, opts.limits.max_tensors);
  if (!r.ok()) {
    Check(r.error().code != core::Code::kOk);
    Check(r.error().offset == core::kNoOffset || r.error().offset <= in.size());
    return;
  }
  const auto& ck = r.value();
  Check(ck.tar == tar && ck.storages.size() <= opts.limits.max_tensors &&
        ck.tensors.size() <= opts.limits.max_tensors);
  CheckGraph(ck.graph);
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  for (const auto& s : ck.storages) {
    Check(s.count_offset + 8 == s.offset && s.offset <= in.size() && s.bytes <= in.size() - s.offset);
    ranges.emplace_back(s.count_offset, s.offset + s.bytes);
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i) Check(ranges[i].first >= ranges[i - 1].second);
  for (bool drop : {false, true}) {
    opts.drop_non_tensors = drop;
    auto p = convert::PlanTorchLegacy(ck, opts);
    if (!p.ok()) {
      Check(p.error().offset == core::kNoOffset || p.error().offset < in.size());
      continue;
    }
    for (const auto& t : p.value().plan.tensors) Check(p.value().storages.count(t.key) == 1);
  }
}

// CheckError: a conversion or I/O code, its offset inside the input.
void CheckError(const modelgate::core::Error& e, uint64_t size) {
  using modelgate::core::Code;
  const auto c = static_cast<uint16_t>(e.code);
  Check((c >= static_cast<uint16_t>(Code::kConvUnsupported) && c <= static_cast<uint16_t>(Code::kConvLimit)) ||
        e.code == Code::kIoRead || e.code == Code::kIoChanged);
  Check(e.offset == modelgate::core::kNoOffset || e.offset <= size);
}

// NumpyAndJoblib reads the input as a whole file, as numpy.load and
// joblib.load would for conversion: every array's bytes lie inside the
// file (or inside its inflated member), every graph index is in range.
void NumpyAndJoblib(std::span<const uint8_t> in) {
  using namespace modelgate;
  int fd = memfd_create("fuzz_convert", MFD_CLOEXEC);
  if (fd < 0) return;
  for (size_t done = 0; done < in.size();) {
    ssize_t n = write(fd, in.data() + done, in.size() - done);
    if (n <= 0) {
      close(fd);
      return;
    }
    done += static_cast<size_t>(n);
  }
  auto file = core::AdoptRegularFile(fd);
  if (!file.ok()) return;
  scanner::ScanOptions opts;
  opts.pickle.limits.max_opcodes = 100'000;
  const uint64_t size = in.size();
  auto np = scanner::ReadNumpyFile(file.value(), opts);
  if (!np.ok()) {
    CheckError(np.error(), size);
  } else {
    for (const auto& a : np.value().arrays) {
      Check(!a.name.empty() || np.value().npz);
      if (a.deflated) {
        Check(a.packed_offset <= size && a.packed_bytes <= size - a.packed_offset);
        Check(a.data_offset <= a.member_bytes && a.data_bytes <= a.member_bytes - a.data_offset);
      } else {
        Check(a.data_offset <= size && a.data_bytes <= size - a.data_offset);
      }
    }
  }
  auto jl = scanner::ReadJoblibCheckpoint(file.value(), opts);
  if (!jl.ok()) {
    CheckError(jl.error(), size);
    return;
  }
  CheckGraph(jl.value().graph);
  // A compressed file's arrays lie in its decoded stream.
  const bool decoded = jl.value().decoded_fd >= 0;
  Check(decoded == (jl.value().decoded != nullptr));
  const uint64_t bound = decoded ? jl.value().decoded_size : size;
  for (const auto& n : jl.value().graph.nodes) {
    if (!n.joblib_array) continue;
    Check(n.kind == scanner::PickleNode::Kind::kCall);
    Check(n.joblib_array->offset <= bound && n.joblib_array->bytes <= bound - n.joblib_array->offset);
  }
  Plan(jl.value().graph, {}, true, bound);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace modelgate;
  std::span<const uint8_t> in(data, size);
  scanner::PickleOptions plain;
  plain.limits.max_opcodes = 100'000;
  scanner::PickleOptions cap = plain;
  cap.capture_graph = true;
  const scanner::PickleAnalysis a = scanner::AnalyzePickle(in, plain);
  const scanner::PickleAnalysis b = scanner::AnalyzePickle(in, cap);
  Check(a.imports.size() == b.imports.size() && a.calls.size() == b.calls.size() &&
        a.streams.size() == b.streams.size() && a.anomalies.size() == b.anomalies.size() &&
        a.incomplete == b.incomplete);
  Check(a.graphs.empty());
  Check(b.graphs.empty() || b.graph_cut.empty());
  convert::ConvertLimits tight;
  tight.max_tensors = 3;
  tight.max_depth = 2;
  tight.max_rank = 2;
  for (const auto& g : b.graphs) {
    CheckGraph(g);
    Plan(g, {}, false, size);
    Plan(g, tight, true, size);
  }
  scanner::PickleOptions small = cap;
  small.limits.max_graph_refs = 8;
  const scanner::PickleAnalysis c = scanner::AnalyzePickle(in, small);
  Check(c.imports.size() == a.imports.size());
  for (const auto& g : c.graphs) CheckGraph(g);
  Legacy(in, false);
  Legacy(in, true);
  NumpyAndJoblib(in);
  return 0;
}
