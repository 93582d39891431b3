// Line and column of findings in text-like files, for SARIF regions.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "modelgate/scanner.h"
#include "source.h"

namespace modelgate::scanner::internal {

// kMaxTextRegionOffsetBytes bounds the bytes read to place findings: a
// finding further into the file than this gets no line/column. 16 MiB holds
// the configs, templates and tokenizer files of real model repositories;
// placing a finding costs one read of the bytes before it.
inline constexpr uint64_t kMaxTextRegionOffsetBytes = uint64_t{16} << 20;

// TextPosition is 1-based; 0 means none. Columns count UTF-16 code units,
// SARIF's default columnKind.
struct TextPosition {
  uint32_t line = 0;
  uint32_t column = 0;
};

// TextPositions places each of the ascending `offsets` in `file`, reading
// the bytes before the last one it places through `file` in bounded chunks,
// once. Lines end at LF, CR or CRLF. An offset past the file or past
// `max_offset_bytes` is not placed; none is when a read fails or when the
// bytes read are not text (a NUL byte, malformed UTF-8): a binary file has
// no lines. An offset inside a multi-byte character is placed at that
// character. Returns one position per offset.
std::vector<TextPosition> TextPositions(const Source& file, std::span<const uint64_t> offsets,
                                        uint64_t max_offset_bytes = kMaxTextRegionOffsetBytes);

// AddTextRegions sets Finding::line and ::column on the findings of `scan`
// that have an offset in the file itself (no archive member) when the file
// is text-like (format unknown or a git-lfs pointer: configs, templates,
// JSON); other files' findings keep none. `file` is the scan's own open
// descriptor: the path is never reopened.
void AddTextRegions(const Source& file, FileScan& scan,
                    uint64_t max_offset_bytes = kMaxTextRegionOffsetBytes);

}  // namespace modelgate::scanner::internal
