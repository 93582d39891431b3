// PickleFindings: one analysis -> findings with stable MG-PK-* ids. Repeats
// of the same global (or the same anomaly text) fold into one finding at the
// first offset, with a count, so a hostile stream cannot flood a report.
#include <algorithm>
#include <map>
#include <string>
#include <tuple>

#include "modelgate/scanner.h"

namespace modelgate::scanner {
namespace {

using core::Quoted;
using core::Severity;

struct Folded {
  Finding finding;
  uint64_t count = 0;
};

void Fold(std::map<std::string, Folded>* into, const std::string& key, Finding f,
          uint64_t count = 1) {
  auto [it, inserted] = into->try_emplace(key);
  if (inserted) it->second.finding = std::move(f);
  it->second.count += count;
}

std::string_view AnomalyId(PickleAnomalyKind k) {
  switch (k) {
    case PickleAnomalyKind::kMalformed: return "MG-PK-MALFORMED";
    case PickleAnomalyKind::kDisagreement: return "MG-PK-DISAGREEMENT";
    case PickleAnomalyKind::kLimit: return "MG-PK-LIMIT";
    case PickleAnomalyKind::kPy2Mapping: return "MG-PK-PY2-MAPPING";
    case PickleAnomalyKind::kNested: return "MG-PK-NESTED-PICKLE";
    case PickleAnomalyKind::kTrailingData: return "MG-PK-TRAILING-DATA";
  }
  return "MG-PK-MALFORMED";
}

}  // namespace

std::vector<Finding> PickleFindings(const PickleAnalysis& a) {
  std::vector<Finding> out;
  if (a.streams.empty()) return out;
  {
    Finding f;
    f.id = "MG-PK-PICKLE-FORMAT";
    f.severity = Severity::kMedium;
    f.offset = a.streams.front().offset;
    const size_t n = a.streams.size();
    f.message = "pickle format; prefer safetensors (" + std::to_string(n) +
                (n == 1 ? " pickle stream" : " pickle streams") + ", protocol " +
                std::to_string(a.streams.front().protocol) + ")";
    out.push_back(std::move(f));
  }
  // Ordered by first appearance within each id: the map key carries it.
  std::map<std::string, Folded> folded;
  // What each import is called by (REDUCE, NEWOBJ, ...), for the message.
  std::map<size_t, std::string> called_by;
  for (const PickleCall& c : a.calls) {
    if (c.import_index < 0) continue;
    auto idx = static_cast<size_t>(c.import_index);
    if (called_by.count(idx) == 0) called_by[idx] = "; called by " + c.opcode + " at " + std::to_string(c.offset);
  }
  for (size_t i = 0; i < a.imports.size(); ++i) {
    const PickleImport& imp = a.imports[i];
    if (imp.safety == GlobalClass::kSafe) continue;
    Finding f;
    f.offset = imp.offset;
    f.opcode = imp.opcode;
    f.global = imp.FullName();
    std::string name = Quoted(imp.FullName());
    std::string written;
    if (imp.py2_mapped) written = " (written " + Quoted(imp.written_module + "." + imp.written_qualname) + ")";
    if (imp.ext_code) {
      f.id = "MG-PK-EXT-CODE";
      f.severity = Severity::kCritical;
      f.message = imp.opcode + " at " + std::to_string(imp.offset) + " imports " + name + ": " +
                  imp.reason;
    } else if (imp.safety == GlobalClass::kCritical) {
      f.id = "MG-PK-CRITICAL-IMPORT";
      f.severity = Severity::kCritical;
      f.message = imp.opcode + " at " + std::to_string(imp.offset) + " imports " + name + written +
                  ": " + imp.reason;
    } else {
      f.id = "MG-PK-UNKNOWN-IMPORT";
      f.severity = Severity::kHigh;
      f.message = imp.opcode + " at " + std::to_string(imp.offset) + " imports " + name + written +
                  ": unknown import; needs review";
    }
    if (auto it = called_by.find(i); it != called_by.end()) f.message += it->second;
    Fold(&folded, f.id + "\n" + imp.FullName(), std::move(f), imp.count);
  }
  for (const PickleCall& c : a.calls) {
    if (!c.flagged) continue;
    Finding f;
    f.id = "MG-PK-CALL-NOT-ALLOWED";
    f.severity = Severity::kCritical;
    f.offset = c.offset;
    f.opcode = c.opcode;
    f.global = c.callee;
    f.message = c.opcode + " at " + std::to_string(c.offset) + " calls " + Quoted(c.callee) + ": " +
                c.reason;
    Fold(&folded, f.id + "\n" + c.opcode + "\n" + c.callee, std::move(f), c.count);
  }
  for (const PickleAnomaly& an : a.anomalies) {
    Finding f;
    f.id = std::string(AnomalyId(an.kind));
    f.severity = an.severity;
    f.offset = an.offset;
    f.opcode = an.opcode;
    f.message = an.message;
    // Python 2 renames are facts, not problems: one finding says how many.
    std::string key = an.kind == PickleAnomalyKind::kPy2Mapping ? f.id : f.id + "\n" + an.message;
    if (an.kind == PickleAnomalyKind::kLimit && an.limit == "max_records") {
      f.message += "; " + std::to_string(a.records_folded) + " record(s) folded, " +
                   std::to_string(a.records_dropped) + " dropped";
    }
    Fold(&folded, key, std::move(f), an.count);
  }
  // An incomplete analysis always says why, naming the limit or construct.
  bool limit_listed = std::any_of(a.anomalies.begin(), a.anomalies.end(), [](const PickleAnomaly& an) {
    return an.kind == PickleAnomalyKind::kLimit;
  });
  if (a.incomplete && !limit_listed) {
    Finding f;
    f.id = "MG-PK-LIMIT";
    f.severity = Severity::kHigh;
    f.message = "the pickle analysis is incomplete: " + a.incomplete_reason +
                "; what was not analyzed was not judged";
    Fold(&folded, f.id + "\n" + f.message, std::move(f));
  }
  // Emit in a stable order: by severity, then offset, then id.
  std::vector<Finding> rest;
  for (auto& [key, fo] : folded) {
    if (fo.count > 1) {
      fo.finding.message += fo.finding.id == "MG-PK-PY2-MAPPING"
                                ? " (" + std::to_string(fo.count) + " globals renamed in all)"
                                : " (" + std::to_string(fo.count) + " times)";
    }
    rest.push_back(std::move(fo.finding));
  }
  std::stable_sort(rest.begin(), rest.end(), [](const Finding& x, const Finding& y) {
    return std::tie(x.severity, x.offset, x.id) < std::tie(y.severity, y.offset, y.id);
  });
  for (Finding& f : rest) out.push_back(std::move(f));
  return out;
}

}  // namespace modelgate::scanner
