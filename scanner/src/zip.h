// A strict reader of zip archives as PyTorch's reader (miniz) finds members:
// through the end-of-central-directory record and the central directory,
// ZIP64 included. Every disagreement a second reader could resolve
// differently is reported, never silently trusted.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "budget.h"
#include "modelgate/scanner.h"
#include "source.h"

namespace modelgate::scanner {

struct ZipLimits {
  uint64_t max_entries = 1'000'000;            // central directory entries
  uint64_t max_central_dir_bytes = 256u << 20;  // bytes of central directory read
  uint64_t max_member_bytes = 1ull << 30;       // one member extracted to memory
};

// ZipLimitsFrom: the zip reader's limits a scan's ContainerLimits set (the
// scan's Zip() and ReadTorchZipCheckpoint read archives under the same ones).
inline ZipLimits ZipLimitsFrom(const ContainerLimits& c) {
  ZipLimits z;
  z.max_entries = c.max_zip_entries;
  z.max_central_dir_bytes = c.max_central_dir_bytes;
  z.max_member_bytes = c.max_member_bytes;
  return z;
}

struct ZipEntry {
  std::string name;  // central directory name (what the loader looks up)
  uint16_t flags = 0;
  uint16_t method = 0;
  uint32_t crc32 = 0;
  uint64_t compressed_bytes = 0;
  uint64_t uncompressed_bytes = 0;
  uint64_t local_offset = 0;  // absolute offset of the local header
  uint64_t data_offset = 0;   // absolute offset of the member's data
  uint64_t central_offset = 0;  // absolute offset of its central record
  bool usable = false;        // local header found and consistent enough to read
  // Index of the first usable entry with the same data offset, sizes and
  // method (records that alias one member's data: MG-ZIP-OVERLAP), or -1.
  // Its bytes are that entry's bytes: a scan extracts them once.
  int64_t alias_of = -1;
};

struct ZipArchive {
  // False when the directory itself cannot be read (MG-ZIP-MALFORMED was
  // added to the findings); entries then holds what was read before.
  bool directory_ok = false;
  std::vector<ZipEntry> entries;  // central directory order
  uint64_t eocd_offset = 0;
  bool zip64 = false;
};

// ReadZip reads the archive's directory and local headers (not member
// data). Every problem is appended to `findings` (MG-ZIP-*); an Error is
// returned only for I/O failures (the gate could not judge).
core::Result<ZipArchive> ReadZip(const Source& src, const ZipLimits& limits,
                                 std::vector<Finding>* findings);
// This ReadZip also charges the directory's records to `budget` before
// reading them (max_records); past it, the directory is not read
// (directory_ok false, the budget's MG-ARCHIVE-LIMIT in `findings`).
core::Result<ZipArchive> ReadZip(const Source& src, const ZipLimits& limits, Budget& budget,
                                 std::vector<Finding>* findings);

// ExtractZipMember returns a member's bytes (stored or deflated), at most
// `max_bytes`, checking the declared size and the CRC-32. A CRC mismatch is a
// finding (the bytes are still returned: the loader may not check). Returns
// nullopt, with a finding, when the member cannot be extracted; an Error only
// for I/O failures.
// (A Budget of its own: max_bytes, no ratio. Prefer the Budget forms.)
core::Result<std::optional<std::vector<uint8_t>>> ExtractZipMember(const Source& src, const ZipEntry& entry,
                                                    uint64_t max_bytes,
                                                    std::vector<Finding>* findings);

// ZipMemberBytes is what was read of a member.
struct ZipMemberBytes {
  std::vector<uint8_t> bytes;
  // The whole member: its stream ended (or reached its declared size) and
  // its sizes and CRC-32 were checked (findings added). A prefix that is
  // whole needs no second extraction.
  bool whole = false;
};

// ExtractZipMember (Budget form) reads the whole member through the one
// Decoder: counted by ChargeMember, every byte charged, refused before any
// decoding when it declares more than max_member_bytes. Stops one byte past
// the declared size (MG-ZIP-FIELD-MISMATCH). The CRC-32 is checked when the
// stream ends (MG-ZIP-BAD-CRC; the bytes are still returned). nullopt, with
// a finding, when it cannot be read (encrypted, unsupported method, corrupt
// stream, a budget limit: MG-ARCHIVE-LIMIT); an Error only for I/O.
core::Result<std::optional<ZipMemberBytes>> ExtractZipMember(const Source& src,
                                                             const ZipEntry& entry, Budget& budget,
                                                             std::vector<Finding>* findings);

// ReadZipMemberPrefix decodes at most `max_bytes` (kSniffBytes64K to learn
// what a member is) and stops: no more input is inflated than that needs.
// Counted and charged like ExtractZipMember. `whole` when the member ended
// within `max_bytes` (then its sizes and CRC-32 were checked too).
core::Result<std::optional<ZipMemberBytes>> ReadZipMemberPrefix(const Source& src,
                                                                const ZipEntry& entry,
                                                                Budget& budget, uint64_t max_bytes,
                                                                std::vector<Finding>* findings);

// ZipMemberSource is a member's bytes as a Source, for nested archives and
// members too large to hold: a stored member is a slice of `src` (nothing
// copied, nothing charged but the member count); a deflated one is decoded
// into a sealed Spool (page cache, not RSS). `source` is null, with a
// finding, when it cannot be read; the whole-member checks of
// ExtractZipMember apply to a deflated member (a slice is not read here, so
// `whole` is false for it). A slice reads `src`, which must outlive it.
struct ZipMemberSource {
  std::unique_ptr<Source> source;
  bool whole = false;
};
core::Result<ZipMemberSource> OpenZipMemberSource(const Source& src, const ZipEntry& entry,
                                                  Budget& budget, std::vector<Finding>* findings);

}  // namespace modelgate::scanner
