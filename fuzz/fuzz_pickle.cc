// fuzz_pickle: the pickle machine on arbitrary bytes, in memory, with the
// default limits and with tight ones. Invariants: never crashes; every
// stream, import, call, anomaly and finding offset lies inside the input;
// every finding has an MG-PK-* id; exactly one MG-PK-PICKLE-FORMAT; records
// stay within max_records (plus the one that says the cap was hit).
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
  }
  for (const PickleCall& c : a.calls) Check(c.offset < size && c.count >= 1);
  for (const PickleAnomaly& an : a.anomalies) Check(an.offset == kNoOffset || an.offset <= size);
  Check(a.imports.size() + a.calls.size() + a.anomalies.size() <= options.limits.max_records + 1);
  int format = 0;
  for (const Finding& f : PickleFindings(a)) {
    Check(f.id.size() > 6 && std::memcmp(f.id.data(), "MG-PK-", 6) == 0);
    Check(f.offset == kNoOffset || f.offset <= size);
    Check(!f.message.empty());
    format += f.id == "MG-PK-PICKLE-FORMAT" ? 1 : 0;
  }
  Check(format == 1);
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
  Run(in, tight);
  return 0;
}
