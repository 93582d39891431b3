// 7z archives, read through Debian's libarchive (7zip format only: no other
// format or filter is enabled, so an SFX executable or another container is
// not read as 7z). Every member's data is decoded in bounded chunks and
// charged to the file's Budget (the one of decompress.h: members, records,
// decoded bytes, each member's expansion against the archive's size), and
// handed out from a sealed memfd spool (decompress.h's Spool), never from a
// heap buffer sized by a header's claim. Member names are judged as zip and
// tar names are (archive_names.h).
//
// Findings (offsets are kNoOffset: libarchive does not say where a member
// lies; the caller places them in its member):
//   MG-ARCHIVE-MALFORMED     libarchive cannot read the archive or a member
//                            (corrupt, truncated, a CRC mismatch), or the
//                            bytes do not start with the 7z signature
//   MG-ARCHIVE-UNSUPPORTED   an encrypted member or header (not unpacked);
//                            a link or special member (not followed)
//   MG-ARCHIVE-LIMIT         a Budget limit (the rest is not read)
//   MG-ARCHIVE-UNSAFE-NAME   absolute, '..', drive letter, backslash,
//                            control bytes, or a name libarchive cannot
//                            convert to UTF-8
//   MG-ARCHIVE-DUPLICATE-NAME  a name seen before (critical: extractors
//                            keep the last, listings show the first)
// Nesting depth is the caller's (it enters a level for the archive).
//
// The start header is checked first (its CRC; the next header inside the
// file), so that a corrupt one cannot have libarchive allocate what it
// claims (fuzz_sevenzip found a 2^58-byte request). Then the header itself
// is read by a strict reader of our own (sevenzip_header.h) before
// libarchive sees the archive, because libarchive callocs what a CRC-valid
// header declares before reading it. What it allocates is bounded now:
// - its tables: files and substreams by what remains of the Budget's
//   max_members and max_records, folders by max_7z_folders (100,000),
//   coders by max_7z_coders_per_folder (4), all of them by the header's
//   size, max_7z_header_bytes (16 MiB, a plain header's size or an encoded
//   header's declared unpack size; an encoded header is decoded there by
//   liblzma's raw decoder under max_decoder_memory_bytes, CRC checked);
// - each coder's dictionary or model (LZMA, LZMA2, PPMd) by
//   max_decoder_memory_bytes (256 MiB); BZip2, Deflate, Copy and the
//   filters are fixed-size;
// - BCJ2's call and jump streams, which libarchive decodes whole into
//   buffers of their declared size, by StreamCap of their packed size.
// An archive past a limit is refused (false, MG-ARCHIVE-LIMIT) before
// libarchive runs; so is a header libarchive would read unlike 7-Zip
// (MG-ARCHIVE-UNSUPPORTED or MG-ARCHIVE-MALFORMED; sevenzip_header.h lists
// them). libarchive's own fixed buffers (64 KiB, 32 KiB) remain, and the
// member data it decodes is charged to the Budget as before.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "budget.h"
#include "sevenzip_header.h"
#include "modelgate/scanner.h"

namespace modelgate::scanner::internal {

// kSevenZipChunkBytes is what one archive_read_data call may return.
inline constexpr size_t kSevenZipChunkBytes = 64 * 1024;

struct SevenZipMember {
  std::string name;  // UTF-8
  uint64_t size;     // what the header declares (a claim)
  bool is_file;      // a regular file (not a directory, link or special file)
};

using SevenZipMemberFn =
    std::function<void(std::string_view name, std::span<const uint8_t> bytes)>;

// ReadSevenZip reads the 7z archive `file` and calls `on_member` with each
// regular file member's name and full decoded bytes (a mapping of a sealed
// memfd, valid during the call), in archive order. Returns false when the
// archive cannot be read whole: it cannot be opened, a member cannot be
// decoded, a member is encrypted, or a limit was hit (each with its
// finding); the caller then fails closed. Name findings do not make it
// false.
bool ReadSevenZip(std::span<const uint8_t> file, Budget& budget, std::vector<Finding>* findings,
                  const SevenZipMemberFn& on_member,
                  const SevenZipLimits& limits = SevenZipLimits{});

// ListSevenZip lists the members as ReadSevenZip reads them (every
// member's data is still decoded and charged: libarchive decodes a solid
// block through to reach the next member, so a listing costs what a read
// does), with the same findings and result.
bool ListSevenZip(std::span<const uint8_t> file, Budget& budget, std::vector<Finding>* findings,
                  std::vector<SevenZipMember>* members,
                  const SevenZipLimits& limits = SevenZipLimits{});

}  // namespace modelgate::scanner::internal
