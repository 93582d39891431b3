// A strict reader of zip archives as PyTorch's reader (miniz) finds members:
// through the end-of-central-directory record and the central directory,
// ZIP64 included. Every disagreement a second reader could resolve
// differently is reported, never silently trusted.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "modelgate/scanner.h"
#include "source.h"

namespace modelgate::scanner {

struct ZipLimits {
  uint64_t max_entries = 1'000'000;            // central directory entries
  uint64_t max_central_dir_bytes = 256u << 20;  // bytes of central directory read
  uint64_t max_member_bytes = 1ull << 30;       // one member extracted to memory
};

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

// ExtractZipMember returns a member's bytes (stored or deflated), at most
// `max_bytes`, checking the declared size and the CRC-32. A CRC mismatch is a
// finding (the bytes are still returned: the loader may not check). Returns
// nullopt, with a finding, when the member cannot be extracted; an Error only
// for I/O failures.
core::Result<std::optional<std::vector<uint8_t>>> ExtractZipMember(const Source& src, const ZipEntry& entry,
                                                    uint64_t max_bytes,
                                                    std::vector<Finding>* findings);

}  // namespace modelgate::scanner
