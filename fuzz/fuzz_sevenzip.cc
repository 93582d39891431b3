// fuzz_sevenzip: ReadSevenZip (the header reader of sevenzip_header.h, then
// libarchive's 7z reader under the Budget) over arbitrary bytes, with small
// limits and libFuzzer's default malloc limit (no allocation may follow
// what a header merely declares). Invariants: no crash, no hang; the bytes
// handed out never pass the budget; every finding is MG-ARCHIVE-* with a
// message; a false result comes with a finding; members come from spools of
// exactly their size; an archive whose header the reader refuses is never
// read, and one that is read hands out at most the files its header lists.
// Each input also runs with both its CRCs made to match (FixCrcs), so that
// mutations reach the header reader and libarchive, not only the CRC checks.
#include <zlib.h>

#include <cstdint>
#include <vector>

#include "budget.h"
#include "sevenzip.h"

namespace {

void Put32(std::vector<uint8_t>& b, size_t at, uint32_t v) {
  for (int i = 0; i < 4; ++i) b[at + static_cast<size_t>(i)] = static_cast<uint8_t>(v >> (8 * i));
}

// FixCrcs returns the input with the next header's CRC and the start
// header's CRC recomputed, or nothing when it has no start header or its
// next header lies outside it.
std::vector<uint8_t> FixCrcs(const uint8_t* data, size_t size) {
  if (size < 32) return {};
  std::vector<uint8_t> b(data, data + size);
  uint64_t offset = 0, length = 0;
  for (int i = 7; i >= 0; --i) {
    offset = (offset << 8) | b[12 + static_cast<size_t>(i)];
    length = (length << 8) | b[20 + static_cast<size_t>(i)];
  }
  const uint64_t room = size - 32;
  if (offset > room || length > room - offset) return {};
  Put32(b, 28, static_cast<uint32_t>(crc32(0L, b.data() + 32 + offset, static_cast<uInt>(length))));
  Put32(b, 8, static_cast<uint32_t>(crc32(0L, b.data() + 12, 20)));
  return b;
}

void RunOnce(const uint8_t* data, size_t size) {
  using namespace modelgate::scanner;
  BudgetLimits l;
  l.max_total_decompressed_bytes = 4 << 20;
  l.max_member_bytes = 1 << 20;
  l.max_members = 64;
  l.max_records = 256;
  internal::SevenZipLimits z;
  z.max_7z_header_bytes = 1 << 20;
  z.max_7z_folders = 256;
  z.max_decoder_memory_bytes = 64 << 20;
  Budget probe(l);
  std::vector<Finding> header_findings;
  internal::SevenZipHeader header;
  const bool header_ok = internal::CheckSevenZipHeader(std::span<const uint8_t>(data, size), probe,
                                                       z, &header_findings, &header);
  if (!header_ok && header_findings.size() != 1) __builtin_trap();
  Budget budget(l);
  std::vector<Finding> findings;
  uint64_t handed = 0, handed_count = 0;
  const bool ok = internal::ReadSevenZip(
      std::span<const uint8_t>(data, size), budget, &findings,
      [&](std::string_view, std::span<const uint8_t> bytes) {
        if (bytes.size() > l.max_member_bytes) __builtin_trap();
        // Touch every page of the mapping: a sealed spool cannot fault.
        volatile uint8_t sink = 0;
        for (size_t i = 0; i < bytes.size(); i += 4096) sink = static_cast<uint8_t>(sink ^ bytes[i]);
        handed += bytes.size();
        ++handed_count;
      },
      z);
  if (handed > budget.inflated_bytes() || budget.inflated_bytes() > l.max_total_decompressed_bytes) {
    __builtin_trap();
  }
  if (!ok && findings.empty()) __builtin_trap();
  // The start header is checked before the header reader runs; past it, a
  // refused header means libarchive never read the archive.
  if (!header_ok && ok) __builtin_trap();
  if (handed_count > 0 && (!header_ok || handed_count > header.files)) __builtin_trap();
  for (const auto& f : findings) {
    if (f.id.rfind("MG-ARCHIVE-", 0) != 0 || f.message.empty()) __builtin_trap();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  RunOnce(data, size);
  const std::vector<uint8_t> fixed = FixCrcs(data, size);
  if (!fixed.empty()) RunOnce(fixed.data(), fixed.size());
  return 0;
}
