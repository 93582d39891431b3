// Recorder: records within max_records and max_flagged_records, folding
// what is safe or repeated, never what is more severe than what is kept.
#include "pickle_records.h"

#include <functional>

namespace modelgate::scanner::pickle_internal {
namespace {

using core::Severity;

size_t KeyHash(std::string_view a, std::string_view b, std::string_view c) {
  std::hash<std::string_view> h;
  size_t x = h(a);
  x ^= h(b) + 0x9e3779b97f4a7c15ull + (x << 6) + (x >> 2);
  x ^= h(c) + 0x9e3779b97f4a7c15ull + (x << 6) + (x >> 2);
  return x;
}

size_t ImportKey(const PickleImport& i) {
  return KeyHash(i.module, i.qualname, GlobalClassName(i.safety));
}
bool SameImport(const PickleImport& x, const PickleImport& y) {
  return x.module == y.module && x.qualname == y.qualname && x.safety == y.safety &&
         x.ext_code == y.ext_code;
}
size_t CallKey(const PickleCall& c) { return KeyHash(c.opcode, c.callee, c.reason); }
bool SameCall(const PickleCall& x, const PickleCall& y) {
  return x.opcode == y.opcode && x.callee == y.callee && x.flagged == y.flagged &&
         x.allowed == y.allowed && x.reason == y.reason;
}
// Past the cap, limits fold by name (one listed per limit), the rest by text.
size_t AnomalyKey(const PickleAnomaly& a) {
  std::string_view kind(reinterpret_cast<const char*>(&a.kind), 1);
  return a.kind == PickleAnomalyKind::kLimit ? KeyHash(kind, "", a.limit) : KeyHash(kind, a.message, "");
}
bool SameAnomaly(const PickleAnomaly& x, const PickleAnomaly& y) {
  if (x.kind == PickleAnomalyKind::kLimit) return y.kind == x.kind && x.limit == y.limit;
  return x.kind == y.kind && x.severity == y.severity && x.message == y.message;
}

// Find returns the index of a kept record equal to `r`, or -1. It walks the
// entries of `key` from the first (equal keys are adjacent) and stops at the
// first equal record: equal_range would walk them all, every time, which
// made 150,000 copies of one import past the cap quadratic.
template <typename T, typename Eq>
int64_t Find(const std::unordered_multimap<size_t, size_t>& index, size_t key,
             const std::vector<T>& kept, const T& r, Eq same) {
  for (auto it = index.find(key); it != index.end() && it->first == key; ++it) {
    // A record may have been taken back (bytes after the last pickle).
    if (it->second < kept.size() && same(kept[it->second], r)) {
      return static_cast<int64_t>(it->second);
    }
  }
  return -1;
}

// IndexOnce indexes kept record `i` under `key` unless an equal record is
// indexed already: Find returns the first equal one anyway, so a key's entries
// stay the distinct records that share it, however many repeats were kept
// before the cap. (Records are only taken back from the end, so the earlier
// equal record outlives `i`.)
template <typename T, typename Eq>
void IndexOnce(std::unordered_multimap<size_t, size_t>& index, size_t key,
               const std::vector<T>& kept, size_t i, Eq same) {
  if (Find(index, key, kept, kept[i], same) < 0) index.emplace(key, i);
}

}  // namespace

Severity ImportSeverity(const PickleImport& i) {
  if (i.ext_code || i.safety == GlobalClass::kCritical) return Severity::kCritical;
  return i.safety == GlobalClass::kUnknown ? Severity::kHigh : Severity::kInfo;
}

Severity CallSeverity(const PickleCall& c) {
  return c.flagged ? Severity::kCritical : Severity::kInfo;
}

void Recorder::Incomplete(std::string_view reason) {
  if (!out_->incomplete) out_->incomplete_reason = std::string(reason);
  out_->incomplete = true;
}

void Recorder::PastCap(uint64_t at, const std::string& opcode, uint32_t stream) {
  if (cap_reported_) return;
  cap_reported_ = true;
  for (size_t i = 0; i < out_->imports.size(); ++i) {
    IndexOnce(imports_, ImportKey(out_->imports[i]), out_->imports, i, SameImport);
  }
  for (size_t i = 0; i < out_->calls.size(); ++i) {
    IndexOnce(calls_, CallKey(out_->calls[i]), out_->calls, i, SameCall);
  }
  for (size_t i = 0; i < out_->anomalies.size(); ++i) {
    IndexOnce(anomalies_, AnomalyKey(out_->anomalies[i]), out_->anomalies, i, SameAnomaly);
  }
  PickleAnomaly a;  // always kept: says the cap was reached
  a.kind = PickleAnomalyKind::kLimit;
  a.severity = Severity::kHigh;
  a.offset = at;
  a.opcode = opcode;
  a.limit = "max_records";
  a.message = "max_records (" + std::to_string(lim_.max_records) +
              ") imports, calls and anomalies reached: past it safe records are only counted and "
              "repeats folded; every distinct high or critical one is still listed";
  a.stream = stream;
  out_->limit_hit = true;
  Incomplete("max_records (" + std::to_string(lim_.max_records) + ") reached");
  anomalies_.emplace(AnomalyKey(a), out_->anomalies.size());
  out_->anomalies.push_back(std::move(a));
}

bool Recorder::KeepNew(Severity s) {
  if (flagged_past_cap_ < lim_.max_flagged_records) {
    ++flagged_past_cap_;
    return true;
  }
  if (flagged_past_cap_ == lim_.max_flagged_records) {
    ++flagged_past_cap_;  // reported once
    PickleAnomaly a;
    a.kind = PickleAnomalyKind::kLimit;
    a.severity = Severity::kHigh;
    a.limit = "max_flagged_records";
    a.message = "max_flagged_records (" + std::to_string(lim_.max_flagged_records) +
                ") distinct high or critical records past max_records reached: further ones "
                "are not listed";
    Incomplete(a.message);
    out_->anomalies.push_back(std::move(a));
  }
  if (s < most_severe_) return true;  // more severe than all kept: never dropped
  ++out_->records_dropped;
  return false;
}

int64_t Recorder::Import(PickleImport imp) {
  Severity s = ImportSeverity(imp);
  if (!Full()) {
    Kept(s);
    out_->imports.push_back(std::move(imp));
    if (cap_reported_) {
      const size_t i = out_->imports.size() - 1;
      IndexOnce(imports_, ImportKey(out_->imports[i]), out_->imports, i, SameImport);
    }
    return static_cast<int64_t>(out_->imports.size() - 1);
  }
  PastCap(imp.offset, imp.opcode, imp.stream);
  size_t key = ImportKey(imp);
  int64_t same = Find(imports_, key, out_->imports, imp, SameImport);
  if (same >= 0 || s == Severity::kInfo) {
    // A safe import folds into a kept one of the same name (its calls then
    // point there), else it is only counted.
    if (same >= 0) ++out_->imports[static_cast<size_t>(same)].count;
    ++out_->records_folded;
    return same;
  }
  if (!KeepNew(s)) return -1;
  Kept(s);
  imports_.emplace(key, out_->imports.size());
  out_->imports.push_back(std::move(imp));
  return static_cast<int64_t>(out_->imports.size() - 1);
}

int64_t Recorder::Call(PickleCall c) {
  Severity s = CallSeverity(c);
  if (!Full()) {
    Kept(s);
    out_->calls.push_back(std::move(c));
    if (cap_reported_) {
      const size_t i = out_->calls.size() - 1;
      IndexOnce(calls_, CallKey(out_->calls[i]), out_->calls, i, SameCall);
    }
    return static_cast<int64_t>(out_->calls.size() - 1);
  }
  PastCap(c.offset, c.opcode, c.stream);
  size_t key = CallKey(c);
  int64_t same = Find(calls_, key, out_->calls, c, SameCall);
  if (same >= 0) {
    out_->calls[static_cast<size_t>(same)].count += c.count;
    ++out_->records_folded;
    return same;
  }
  if (s == Severity::kInfo) {  // allowed, or covered by its import's finding
    ++out_->records_folded;
    return -1;
  }
  if (!KeepNew(s)) return -1;
  Kept(s);
  calls_.emplace(key, out_->calls.size());
  out_->calls.push_back(std::move(c));
  return static_cast<int64_t>(out_->calls.size() - 1);
}

void Recorder::Anomaly(PickleAnomaly a) {
  if (a.kind == PickleAnomalyKind::kLimit) {
    out_->limit_hit = true;
    Incomplete(a.message);
  }
  if (!Full()) {
    Kept(a.severity);
    out_->anomalies.push_back(std::move(a));
    if (cap_reported_) {
      const size_t i = out_->anomalies.size() - 1;
      IndexOnce(anomalies_, AnomalyKey(out_->anomalies[i]), out_->anomalies, i, SameAnomaly);
    }
    return;
  }
  PastCap(a.offset, a.opcode, a.stream);
  size_t key = AnomalyKey(a);
  int64_t same = Find(anomalies_, key, out_->anomalies, a, SameAnomaly);
  if (same >= 0 || a.severity > Severity::kHigh) {
    if (same >= 0) ++out_->anomalies[static_cast<size_t>(same)].count;
    ++out_->records_folded;
    return;
  }
  // A limit is always listed: the finding must name it.
  if (a.kind != PickleAnomalyKind::kLimit && !KeepNew(a.severity)) return;
  Kept(a.severity);
  anomalies_.emplace(key, out_->anomalies.size());
  out_->anomalies.push_back(std::move(a));
}

void Recorder::Array(const PickleArray& a) {
  if (!Full()) {
    out_->arrays.push_back(a);
    return;
  }
  PastCap(a.build_offset, "BUILD", a.stream);
  ++out_->records_folded;
}

}  // namespace modelgate::scanner::pickle_internal
