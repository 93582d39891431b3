// fuzz_zip: the zip directory reader and member extraction, in memory.
// Invariants: no crash; every finding is an MG-ZIP-* id with an offset
// inside the input; usable entries lie inside the input; extraction never
// returns more than the member's declared bytes or the limit; with a
// Budget, nothing decodes past it and aliases name identical earlier data.
#include <cstdint>
#include <cstring>

#include "zip.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace modelgate::scanner;
  MemorySource src({data, size});
  std::vector<Finding> findings;
  ZipLimits limits;
  limits.max_entries = 4096;
  limits.max_central_dir_bytes = 1 << 20;
  auto zip = ReadZip(src, limits, &findings);
  if (!zip.ok()) __builtin_trap();  // memory sources have no I/O errors
  size_t extracted = 0;
  for (const auto& e : zip.value().entries) {
    if (e.usable && (e.data_offset > size || e.compressed_bytes > size - e.data_offset)) {
      __builtin_trap();
    }
    if (!e.usable || ++extracted > 16) continue;
    constexpr uint64_t kMax = 1 << 20;
    auto m = ExtractZipMember(src, e, kMax, &findings);
    if (!m.ok()) __builtin_trap();
    // Stored members come back as their compressed bytes (a size mismatch is
    // a finding; the longer view holds the shorter one); inflated output never
    // passes the declared size.
    const uint64_t bound = e.method == 0 ? e.compressed_bytes : e.uncompressed_bytes;
    if (m.value() && (m.value()->size() > bound || m.value()->size() > kMax)) {
      __builtin_trap();
    }
  }
  for (const auto& f : findings) {
    if (f.id.rfind("MG-ZIP-", 0) != 0 || f.message.empty()) __builtin_trap();
    if (f.offset != modelgate::core::kNoOffset && f.offset > size) __builtin_trap();
  }

  // The Budget forms: one small budget for the whole archive. Nothing
  // decodes past it; a prefix never passes what was asked; an alias names
  // an earlier entry with the same data; budget limits are MG-ARCHIVE-LIMIT.
  BudgetLimits bl;
  bl.max_total_decompressed_bytes = 1 << 20;
  bl.max_member_bytes = 256 << 10;
  bl.max_members = 32;
  Budget budget(bl);
  std::vector<Finding> bf;
  auto bz = ReadZip(src, limits, budget, &bf);
  if (!bz.ok()) __builtin_trap();
  const auto& entries = bz.value().entries;
  for (size_t i = 0; i < entries.size(); ++i) {
    const auto& e = entries[i];
    if (e.alias_of >= 0) {
      const auto& a = entries[static_cast<size_t>(e.alias_of)];
      if (static_cast<size_t>(e.alias_of) >= i || a.alias_of >= 0 ||
          a.data_offset != e.data_offset || a.compressed_bytes != e.compressed_bytes ||
          a.uncompressed_bytes != e.uncompressed_bytes || a.method != e.method) {
        __builtin_trap();
      }
      continue;
    }
    if (i % 2 == 0) {
      auto p = ReadZipMemberPrefix(src, e, budget, 4096, &bf);
      if (!p.ok()) __builtin_trap();
      if (p.value() && p.value()->bytes.size() > 4096) __builtin_trap();
    } else {
      auto m = ExtractZipMember(src, e, budget, &bf);
      if (!m.ok()) __builtin_trap();
      if (m.value() && m.value()->bytes.size() > bl.max_member_bytes) __builtin_trap();
    }
  }
  if (budget.inflated_bytes() > bl.max_total_decompressed_bytes) __builtin_trap();
  for (const auto& f : bf) {
    const bool zip_id = f.id.rfind("MG-ZIP-", 0) == 0, limit = f.id == "MG-ARCHIVE-LIMIT";
    if ((!zip_id && !limit) || f.message.empty()) __builtin_trap();
    if (limit && !budget.exhausted()) __builtin_trap();
    if (f.offset != modelgate::core::kNoOffset && f.offset > size) __builtin_trap();
  }
  return 0;
}
