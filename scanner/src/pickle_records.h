// Private to the pickle machine: how records enter an analysis within its
// record limits.
#pragma once

#include <cstdint>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>

#include "modelgate/scanner.h"

namespace modelgate::scanner::pickle_internal {

// Recorder adds imports, calls, anomalies and arrays to one analysis. Up to
// PickleLimits::max_records every record is kept. Past it a limit must not
// drop what it protects: a safe import, an allowed or import-covered call, a
// low anomaly or an array is only counted (records_folded); a record that
// would be a high or critical finding adds to the count of a kept record of
// the same name, or is kept anew up to max_flagged_records distinct ones
// (past that, still kept when more severe than every record kept). Either
// way the analysis becomes incomplete. One Recorder serves an analysis and
// every nested machine writing into it.
class Recorder {
 public:
  Recorder(PickleAnalysis* out, const PickleLimits& limits) : out_(out), lim_(limits) {}

  // Import returns the index of the record holding `imp` (new or folded
  // into), or -1 when it was only counted or dropped.
  int64_t Import(PickleImport imp);
  // Call: the same for a call; `c.count` is added when folded.
  int64_t Call(PickleCall c);
  void Anomaly(PickleAnomaly a);
  void Array(const PickleArray& a);
  // Incomplete marks the analysis incomplete; the first reason stays.
  void Incomplete(std::string_view reason);
  // Full: past max_records (new allowed calls are then only counted).
  bool Full() const { return Records() >= lim_.max_records; }
  void CountFolded() { ++out_->records_folded; }
  // FirstNested: true the first time nested bytes `b` (by address and
  // length) are to be analyzed in this analysis.
  bool FirstNested(std::span<const uint8_t> b) {
    return nested_seen_.emplace(reinterpret_cast<uintptr_t>(b.data()), b.size()).second;
  }

 private:
  size_t Records() const {
    return out_->imports.size() + out_->calls.size() + out_->anomalies.size() + out_->arrays.size();
  }
  // PastCap reports max_records once (at `at`) and marks the analysis
  // incomplete; it indexes the kept records for folding.
  void PastCap(uint64_t at, const std::string& opcode, uint32_t stream);
  // KeepNew: a distinct record of severity `s` past the cap.
  bool KeepNew(core::Severity s);
  void Kept(core::Severity s) {
    if (s < most_severe_) most_severe_ = s;
  }

  PickleAnalysis* out_;
  const PickleLimits& lim_;
  bool cap_reported_ = false;
  uint64_t flagged_past_cap_ = 0;
  core::Severity most_severe_ = core::Severity::kInfo;
  // Hashes of kept flagged records' keys -> indices (built at the cap).
  std::unordered_multimap<size_t, size_t> imports_, calls_, anomalies_;
  std::set<std::pair<uintptr_t, size_t>> nested_seen_;
};

// ImportSeverity / CallSeverity: the severity of the finding a record makes
// (kInfo when it makes none of its own).
core::Severity ImportSeverity(const PickleImport& i);
core::Severity CallSeverity(const PickleCall& c);

}  // namespace modelgate::scanner::pickle_internal
