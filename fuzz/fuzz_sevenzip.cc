// fuzz_sevenzip: ReadSevenZip (libarchive's 7z reader under the Budget)
// over arbitrary bytes, with small limits. Invariants: no crash, no hang;
// the bytes handed out never pass the budget; every finding is MG-ARCHIVE-*
// with a message; a false result comes with a finding; members come from
// spools of exactly their size.
#include <cstdint>

#include "budget.h"
#include "sevenzip.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace modelgate::scanner;
  BudgetLimits l;
  l.max_total_decompressed_bytes = 4 << 20;
  l.max_member_bytes = 1 << 20;
  l.max_members = 64;
  l.max_records = 256;
  Budget budget(l);
  std::vector<Finding> findings;
  uint64_t handed = 0;
  const bool ok = internal::ReadSevenZip(
      std::span<const uint8_t>(data, size), budget, &findings,
      [&](std::string_view, std::span<const uint8_t> bytes) {
        if (bytes.size() > l.max_member_bytes) __builtin_trap();
        // Touch every page of the mapping: a sealed spool cannot fault.
        volatile uint8_t sink = 0;
        for (size_t i = 0; i < bytes.size(); i += 4096) sink = static_cast<uint8_t>(sink ^ bytes[i]);
        handed += bytes.size();
      });
  if (handed > budget.inflated_bytes() || budget.inflated_bytes() > l.max_total_decompressed_bytes) {
    __builtin_trap();
  }
  if (!ok && findings.empty()) __builtin_trap();
  for (const auto& f : findings) {
    if (f.id.rfind("MG-ARCHIVE-", 0) != 0 || f.message.empty()) __builtin_trap();
  }
  return 0;
}
