// fuzz_zip: the zip directory reader and member extraction, in memory.
// Invariants: no crash; every finding is an MG-ZIP-* id with an offset
// inside the input; usable entries lie inside the input; extraction never
// returns more than the member's declared bytes or the limit.
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
  return 0;
}
