#include "text_region.h"

#include <algorithm>
#include <array>

namespace modelgate::scanner::internal {
namespace {

// kChunkBytes is the read window; the file is never held whole.
constexpr size_t kChunkBytes = 64 * 1024;

}  // namespace

std::vector<TextPosition> TextPositions(const Source& file, std::span<const uint64_t> offsets,
                                        uint64_t max_offset_bytes) {
  std::vector<TextPosition> out(offsets.size());
  if (!std::is_sorted(offsets.begin(), offsets.end())) return out;
  // Offsets past the limit or the file stay unplaced; the rest are read up
  // to the last of them.
  const uint64_t bound = std::min(max_offset_bytes, file.size());
  const size_t count = static_cast<size_t>(std::upper_bound(offsets.begin(), offsets.end(), bound) -
                                           offsets.begin());
  if (count == 0) return out;
  const uint64_t last = offsets[count - 1];

  std::vector<TextPosition> placed(offsets.size());
  std::array<uint8_t, kChunkBytes> buf;
  uint32_t line = 1, column = 1;  // of the next character
  uint32_t char_column = 1;       // where the character being decoded began
  int pending = 0;                // continuation bytes still expected
  bool after_cr = false;
  size_t next = 0;  // first offset not yet placed
  for (uint64_t at = 0; at < last;) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(kChunkBytes, last - at));
    if (!file.Read(at, std::span<uint8_t>(buf.data(), n)).ok()) return out;
    for (size_t i = 0; i < n; ++i, ++at) {
      while (next < count && offsets[next] == at) {
        placed[next++] = TextPosition{line, pending > 0 ? char_column : column};
      }
      const uint8_t b = buf[i];
      if (pending > 0) {
        if ((b & 0xC0) != 0x80) return out;
        --pending;
        continue;
      }
      if (b == 0) return out;
      if (b == '\n' || b == '\r') {
        if (!(b == '\n' && after_cr)) {
          ++line;
          column = 1;
        }
        after_cr = b == '\r';
        continue;
      }
      after_cr = false;
      char_column = column;
      if (b < 0x80) {
        ++column;
      } else if (b >= 0xC2 && b <= 0xDF) {
        pending = 1;
        ++column;
      } else if (b >= 0xE0 && b <= 0xEF) {
        pending = 2;
        ++column;
      } else if (b >= 0xF0 && b <= 0xF4) {
        pending = 3;
        column += 2;  // a surrogate pair in UTF-16
      } else {
        return out;
      }
    }
  }
  while (next < count) {
    placed[next++] = TextPosition{line, pending > 0 ? char_column : column};
  }
  return placed;
}

void AddTextRegions(const Source& file, FileScan& scan, uint64_t max_offset_bytes) {
  switch (scan.format) {
    case Format::kUnknown: case Format::kLfsPointer: case Format::kJson: case Format::kJinja:
    case Format::kPython:
      break;
    default:
      return;
  }
  std::vector<uint64_t> offsets;
  for (const auto& f : scan.findings) {
    if (f.member.empty() && f.offset != core::kNoOffset) offsets.push_back(f.offset);
  }
  std::sort(offsets.begin(), offsets.end());
  offsets.erase(std::unique(offsets.begin(), offsets.end()), offsets.end());
  const std::vector<TextPosition> placed = TextPositions(file, offsets, max_offset_bytes);
  for (auto& f : scan.findings) {
    if (!f.member.empty() || f.offset == core::kNoOffset) continue;
    const size_t i = static_cast<size_t>(
        std::lower_bound(offsets.begin(), offsets.end(), f.offset) - offsets.begin());
    f.line = placed[i].line;
    f.column = placed[i].column;
  }
}

}  // namespace modelgate::scanner::internal
