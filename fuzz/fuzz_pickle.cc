// fuzz_pickle: the pickle machine on arbitrary bytes, in memory, with the
// default limits and with tight ones. Invariants: never crashes; every
// stream, import, call, anomaly and finding offset lies inside the input;
// every finding has an MG-PK-* id; exactly one MG-PK-PICKLE-FORMAT; records
// stay within max_records plus max_flagged_records (and a few limit
// records); a limit always makes the analysis incomplete with an MG-PK-LIMIT.
#include <cstdint>
#include <cstring>
#include <span>

#include "modelgate/scanner.h"

namespace {

void Check(bool ok) {
  if (!ok) __builtin_trap();
}

void Run(std::span<const uint8_t> in, const modelgate::scanner::PickleOptions& options) {
  using namespace modelgate::scanner;
  using modelgate::core::kNoOffset;
  const uint64_t size = in.size();
  PickleAnalysis a = AnalyzePickle(in, options);
  Check(!a.streams.empty());
  for (const PickleStream& s : a.streams) {
    Check(s.offset <= size && s.end <= size);
    Check(s.error_offset == kNoOffset || s.error_offset <= size);
    Check(s.complete == s.error.empty());
    Check(s.protocol >= 0 && s.protocol <= 5);
  }
  for (const PickleImport& i : a.imports) {
    Check(i.offset < size);
    Check(i.stream < a.streams.size());
    Check(i.count >= 1);
    Check(i.module.size() <= options.limits.max_name_bytes && i.qualname.size() <= options.limits.max_name_bytes);
  }
  for (const PickleCall& c : a.calls) Check(c.offset < size && c.count >= 1);
  for (const PickleAnomaly& an : a.anomalies) Check(an.offset == kNoOffset || an.offset <= size);
  // Past max_records: distinct flagged records up to max_flagged_records,
  // one record per limit name, and at most two more severe than all kept.
  Check(a.imports.size() + a.calls.size() + a.anomalies.size() + a.arrays.size() <=
        options.limits.max_records + options.limits.max_flagged_records + 16);
  // Whatever stops or cuts the analysis makes it incomplete, and says so.
  bool limit = false;
  for (const PickleAnomaly& an : a.anomalies) limit |= an.kind == PickleAnomalyKind::kLimit;
  Check(!limit || a.incomplete);
  Check(!a.incomplete || !a.incomplete_reason.empty());
  Check(a.records_dropped == 0 || a.incomplete);
  int format = 0;
  for (const Finding& f : PickleFindings(a)) {
    Check(f.id.size() > 6 && std::memcmp(f.id.data(), "MG-PK-", 6) == 0);
    Check(f.offset == kNoOffset || f.offset <= size);
    Check(!f.message.empty());
    format += f.id == "MG-PK-PICKLE-FORMAT" ? 1 : 0;
    limit |= f.id == "MG-PK-LIMIT";
  }
  Check(format == 1);
  Check(!a.incomplete || limit);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::span<const uint8_t> in(data, size);
  modelgate::scanner::PickleOptions defaults;
  Run(in, defaults);
  modelgate::scanner::PickleOptions tight;
  tight.limits.max_opcodes = 2000;
  tight.limits.max_stack_depth = 64;
  tight.limits.max_memo_entries = 32;
  tight.limits.max_string_bytes = 256;
  tight.limits.max_nesting = 1;
  tight.limits.max_streams = 4;
  tight.limits.max_records = 16;
  tight.limits.max_flagged_records = 8;
  tight.limits.max_name_bytes = 64;
  Run(in, tight);
  return 0;
}
