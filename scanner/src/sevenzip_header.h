// A strict, bounded reader of a 7z archive's header, run before libarchive
// sees the archive (sevenzip.h). libarchive's 7z reader callocs whatever a
// CRC-valid header declares (tables for up to 100,000,000 entries, an LZMA
// dictionary or a PPMd model of up to 4 GiB, BCJ2 side streams of their
// declared size) before it reads any of it, so the header is read here
// first, through core::ByteReader, and an archive whose header declares more
// than the limits below allow is refused: libarchive never runs on it.
//
// What is read (7-Zip's 7zFormat.txt; the rules of libarchive 3.6's
// archive_read_support_format_7zip.c and of 7-Zip's 7zIn.cpp):
// - the next header, whose CRC (the start header's) must match and which
//   must end exactly where the start header says;
// - a kEncodedHeader: its StreamsInfo (one packed stream inside the file,
//   one folder of one LZMA or LZMA2 coder), its declared unpack size
//   against max_7z_header_bytes, decoded here by liblzma's raw decoder
//   under max_decoder_memory_bytes, its CRC checked when present; then
// - the Header: ArchiveProperties, MainStreamsInfo (PackInfo, UnpackInfo
//   with every folder's coders, bind pairs and packed streams, unpack sizes
//   and CRCs, SubStreamsInfo) and FilesInfo (empty stream/file, anti, names,
//   times, attributes, dummy; other properties are skipped as both readers
//   skip them), each property consuming exactly its declared size.
// Every count is checked against the bytes that remain (an entry costs at
// least one byte) and against a limit before anything is reserved.
//
// What libarchive would read differently from 7-Zip is refused, so that the
// archive libarchive unpacks is the one 7-Zip (and py7zr) would:
// - coder chains other than the ones libarchive decodes as 7-Zip does: one
//   coder; a compressor then one filter (bind pair in 1 <- out 0, as 7-Zip
//   writes them); BCJ2 in the four-coder layout 7-Zip writes (bind pairs
//   (5,0) (4,1) (3,2), packed streams 2 6 1 0); chains with an encryption
//   coder pass (libarchive refuses them itself, as encrypted);
// - coders with properties libarchive ignores (branch filters with a start
//   offset), an "external" flag (data in another stream), attributes whose
//   defined-bits vector libarchive misreads (AllAreDefined = 0);
// - unknown coder ids, Deflate64, zstd and the ARM64/RISC-V filters
//   (MG-ARCHIVE-UNSUPPORTED), an additional streams section;
// - files with data that are not exactly the substreams the folders hold.
//
// Findings: MG-ARCHIVE-MALFORMED (high), MG-ARCHIVE-UNSUPPORTED (high, an
// encrypted header among them) and MG-ARCHIVE-LIMIT (high, through the
// Budget: the limit is recorded as hit). Offsets are file offsets for the
// bytes of a plain header; a decoded header's bytes are not in the file:
// its findings carry kNoOffset and say which byte of the decoded header.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "budget.h"
#include "modelgate/scanner.h"

namespace modelgate::scanner::internal {

// SevenZipLimits: each has a name (used in findings), a default and tests at
// N and N+1 (tests/archives/sevenzip_test.cc). Files and substreams are
// bounded by the Budget's max_members and max_records (what remains of
// them), which the walk over the members charges anyway.
struct SevenZipLimits {
  // The header's size: a plain next header's, or an encoded header's
  // declared unpack size (decoded into memory here, and read again by
  // libarchive). A file costs ~40 header bytes plus its name in UTF-16
  // (a 30-character name: ~100 bytes), so 16 MiB lists ~160,000 files;
  // model repositories hold hundreds. libarchive's tables grow with the
  // header (~80 bytes per file, ~200 per folder): bounded with it.
  uint64_t max_7z_header_bytes = 16ull << 20;
  // Folders (a solid block, or one file of a non-solid archive): libarchive
  // keeps ~200 bytes of tables for each (20 MB at the default).
  uint64_t max_7z_folders = 100'000;
  // Coders in one folder: libarchive's own cap (read_Folder), the most 7-Zip
  // writes (BCJ2 and the three coders of its streams).
  uint64_t max_7z_coders_per_folder = 4;
  // The memory one coder declares: an LZMA or LZMA2 dictionary, a PPMd
  // model (7-Zip -mx9: 64 MiB and 192 MiB), and liblzma's whole need when
  // the header is decoded here. The default is DecoderOptions's.
  uint64_t max_decoder_memory_bytes = 256ull << 20;
};

// SevenZipHeader is what CheckSevenZipHeader read (for tests and the fuzz
// target's invariants).
struct SevenZipHeader {
  bool encoded = false;        // the header was a kEncodedHeader
  uint64_t header_bytes = 0;   // the (decoded) header's size
  uint64_t files = 0;          // FilesInfo's NumFiles
  uint64_t folders = 0;        // MainStreamsInfo's folders
  uint64_t substreams = 0;     // files with data
  uint64_t pack_streams = 0;   // MainStreamsInfo's packed streams
  uint64_t coders = 0;         // the most coders in one folder
  uint64_t coder_memory_bytes = 0;  // the most memory one coder declares
};

// CheckSevenZipHeader reads the header of the 7z archive `file`, whose start
// header has been checked (signature, CRC, next header inside the file).
// True when the header is sound and within the limits (an empty archive,
// whose next header size is 0, is); false with a finding otherwise. Charges
// nothing to `budget`; a limit it names is recorded there as hit.
bool CheckSevenZipHeader(std::span<const uint8_t> file, Budget& budget,
                         const SevenZipLimits& limits, std::vector<Finding>* findings,
                         SevenZipHeader* header = nullptr);

}  // namespace modelgate::scanner::internal
