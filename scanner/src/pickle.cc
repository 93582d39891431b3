// AnalyzePickle: the pickle machine over an input, as every unpickler
// reads it, and as joblib.load reads it when that differs (see
// pickle_machine.h for the machine itself).
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "pickle_machine.h"

namespace modelgate::scanner {
namespace {

namespace pi = pickle_internal;
using core::Quoted;
using pi::Machine;

// MergePlainView adds to `out` (the joblib view) what `plain` (the same
// bytes read as opcodes throughout, as pickle.load, torch.load and every
// unpickler but joblib's read them) imports or calls from `from` on that
// the joblib view does not: a file must not hide a payload in bytes that
// joblib reads as array data.
void MergePlainView(const PickleAnalysis& plain, uint64_t from, const PickleLimits& lim,
                    PickleAnalysis* out) {
  pi::Recorder rec(out, lim);
  if (plain.incomplete) rec.Incomplete("pickle.load's reading: " + plain.incomplete_reason);
  auto stream_at = [&](uint64_t offset) {
    uint32_t best = 0;
    for (size_t i = 0; i < out->streams.size(); ++i) {
      if (out->streams[i].depth == 0 && out->streams[i].offset <= offset) best = static_cast<uint32_t>(i);
    }
    return best;
  };
  std::set<std::tuple<uint64_t, std::string, std::string>> seen;
  for (const PickleImport& i : out->imports) seen.emplace(i.offset, i.opcode, i.FullName());
  for (const PickleCall& c : out->calls) seen.emplace(c.offset, c.opcode, c.callee);
  std::vector<int64_t> remap(plain.imports.size(), -1);
  std::string first;
  uint64_t first_at = core::kNoOffset;
  auto note = [&](uint64_t at, const std::string& what) {
    if (first_at == core::kNoOffset) {
      first_at = at;
      first = what;
    }
  };
  for (size_t k = 0; k < plain.imports.size(); ++k) {
    PickleImport imp = plain.imports[k];
    if (imp.offset < from || imp.safety == GlobalClass::kSafe) continue;
    if (!seen.emplace(imp.offset, imp.opcode, imp.FullName()).second) continue;
    note(imp.offset, imp.opcode + " at " + std::to_string(imp.offset) + " imports " + Quoted(imp.FullName()));
    imp.stream = stream_at(imp.offset);
    remap[k] = rec.Import(std::move(imp));
  }
  for (const PickleCall& pc : plain.calls) {
    if (pc.offset < from || pc.allowed) continue;
    if (!seen.emplace(pc.offset, pc.opcode, pc.callee).second) continue;
    PickleCall c = pc;
    note(c.offset, c.opcode + " at " + std::to_string(c.offset) + " calls " + Quoted(c.callee));
    c.import_index = c.import_index >= 0 ? remap[static_cast<size_t>(c.import_index)] : -1;
    c.stream = stream_at(c.offset);
    rec.Call(std::move(c));
  }
  for (const PickleAnomaly& pa : plain.anomalies) {
    // What the plain view could not judge (limits, nested archives) counts;
    // that it breaks on array bytes does not.
    if (pa.offset == core::kNoOffset || pa.offset < from || pa.severity > core::Severity::kHigh ||
        (pa.kind != PickleAnomalyKind::kLimit && pa.kind != PickleAnomalyKind::kNested)) {
      continue;
    }
    PickleAnomaly a = pa;
    note(a.offset, a.message);
    a.stream = stream_at(a.offset);
    rec.Anomaly(std::move(a));
  }
  if (first_at != core::kNoOffset) {
    PickleAnomaly a;
    a.kind = PickleAnomalyKind::kDisagreement;
    a.severity = core::Severity::kHigh;
    a.offset = first_at;
    a.message = "joblib.load reads the bytes from " + std::to_string(from) +
                " on as array data, but pickle.load and other unpicklers read them as opcodes: " + first;
    a.stream = stream_at(first_at);
    rec.Anomaly(std::move(a));
  }
}

}  // namespace

PickleAnalysis AnalyzePickle(std::span<const uint8_t> bytes, const PickleOptions& options,
                             uint64_t base_offset) {
  PickleAnalysis out;
  pi::Recorder rec(&out, options.limits);
  Machine m(options, &out, &rec, 0, core::kNoOffset, true);
  m.RunStreams(bytes, base_offset, options.limits.max_streams, true);
  if (m.joblib_divergence() == core::kNoOffset) return out;
  // The graphs are joblib's reading; other loaders read other objects.
  if (!out.graphs.empty() || options.capture_graph) {
    out.graphs.clear();
    if (out.graph_cut.empty()) {
      out.graph_cut = "joblib.load and pickle.load read different objects from " +
                      std::to_string(m.joblib_divergence()) + " on";
    }
  }
  PickleAnalysis plain;
  pi::Recorder plain_rec(&plain, options.limits);
  Machine p(options, &plain, &plain_rec, 0, core::kNoOffset, false);
  p.RunStreams(bytes, base_offset, options.limits.max_streams, true);
  MergePlainView(plain, m.joblib_divergence(), options.limits, &out);
  return out;
}

}  // namespace modelgate::scanner

