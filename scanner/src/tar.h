// A strict reader of tar archives as Python's tarfile (what torch's legacy
// loader uses) lists them: ustar/V7 headers, GNU long names ('L'/'K') and
// PAX extended ('x') and global ('g') headers, applied in tarfile's order.
// Every place where another reader (GNU tar, libarchive) could see other
// members or other bytes is a finding (MG-TAR-*), never silently trusted.
//
// What Python's tarfile does, and so what this reader models:
// - A header whose checksum or numeric fields fail ends the archive silently
//   when it is not the first; the bytes after it are never read.
//   A single zero block ends the archive (no second block needed).
// - Numeric fields are `int(field.strip() or "0", 8)` after cutting at the
//   first NUL: signs, "0o" prefixes, underscores and odd whitespace are
//   accepted; base-256 (0x80, or 0xFF for negative) holds up to 2^88. They
//   are Python ints, without bound: this reader never wraps one. A value
//   of 2^63 or more, negative, or not plain octal is MG-TAR-BAD-NUMBER and
//   kept as tarfile keeps it; a negative checksum can match the signed sum.
// - A size (ustar, base-256 or PAX) that puts the next header past the end
//   of the file makes getmembers() raise (MG-TAR-OUT-OF-BOUNDS), wherever
//   the member is. A negative size moves tarfile backwards: not modelled
//   (MG-TAR-UNSUPPORTED, TarArchive::incomplete).
// - A PAX record length is ([0-9]{1,20}) read as a Python int: 20 digits
//   are a valid length when it fits the header, else InvalidHeaderError.
// - The first extension header of a chain wins: an 'L' before an 'x' sets
//   the name, an 'x' before an 'L' sets it. A global 'size' changes a
//   member's size but not where the next header is read.
// - Links and non-regular members skip no data whatever their size field.
// - getmember/extract/extractfile take the LAST member of a name.
// - Errors that make tarfile raise (TarError) make torch.load fall back to
//   unpickling the file from offset 0: TarArchive::loader_fails.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "modelgate/scanner.h"
#include "source.h"

namespace modelgate::scanner {

// TarLimits bound the work and memory of one listing; hitting one is
// MG-TAR-LIMIT (high) and ends the listing (the rest is not judged:
// TarArchive::incomplete).
struct TarLimits {
  // Member headers (regular, links, directories...; extension headers not
  // counted). torch's legacy tar has three; source trees have thousands.
  uint64_t max_members = 100'000;
  // One GNU long name / long link record ('L'/'K' data). Linux PATH_MAX is
  // 4096; GNU tar itself refuses names past a few KiB.
  uint64_t max_long_name_bytes = 64 * 1024;
  // One PAX header's records ('x'/'g' data).
  uint64_t max_pax_bytes = 1 << 20;
  // Extension headers chained before one member (tarfile recurses per
  // header and dies of RecursionError near 1000).
  uint64_t max_extension_chain = 16;
  // Bytes after the end of the archive checked to be zero padding; a longer
  // tail is reported as hidden data without reading it all (tarfile pads to
  // 10240-byte records, GNU tar to its blocking factor).
  uint64_t max_zero_tail_bytes = 1 << 20;
};

enum class TarType : uint8_t {
  kRegular,      // '0', '\0' (without a trailing '/'), '7' (contiguous)
  kDirectory,    // '5', or '\0' with a trailing '/'
  kSymlink,      // '2'
  kHardlink,     // '1'
  kCharDevice,   // '3'
  kBlockDevice,  // '4'
  kFifo,         // '6'
  kUnknown,      // any other type byte: tarfile reads it as a regular file
};
std::string_view TarTypeName(TarType t);

struct TarMember {
  std::string name;      // tarfile's name: long name / PAX path applied
  std::string linkname;  // links: the target (long link / PAX linkpath applied)
  char typeflag = '0';   // the raw type byte of the member header
  TarType type = TarType::kRegular;
  uint64_t size = 0;           // what extractfile reads (PAX/global size applied)
  uint64_t header_offset = 0;  // first header of its chain (tarfile's offset)
  uint64_t member_header_offset = 0;  // its own ustar header
  uint64_t data_offset = 0;    // absolute offset of its data
  bool data_in_bounds = false;  // [data_offset, data_offset + size) inside the file
  // True for members whose bytes extractfile returns (regular and unknown
  // types); links are resolved with ResolveTarMember.
  bool HasData() const { return type == TarType::kRegular || type == TarType::kUnknown; }
};

struct TarArchive {
  std::vector<TarMember> members;  // archive order, as tarfile lists them
  // Where tarfile stopped: just past the last member's padded data.
  uint64_t end_offset = 0;
  // Why the listing stopped: "zero block", "end of file", "invalid header",
  // "limit", "unsupported".
  std::string end_reason;
  // tarfile.open or getmembers() raises TarError (ReadError): torch.load
  // then unpickles the whole file from offset 0 instead (the caller must
  // run the pickle machine on it). `loader_error` says why. Also set when
  // getmembers() raises another error (the seek past 2^63 of a huge size
  // raises ValueError, and past the file system's largest file OSError):
  // torch.load then fails without the fallback, and judging the pickle
  // view anyway judges more, never less.
  bool loader_fails = false;
  std::string loader_error;
  // The listing stopped before tarfile would (a TarLimits limit, or a
  // construct this reader does not model, such as a negative size): what
  // tarfile would list after `end_offset` was not judged, so the caller
  // must reject the file whatever failOn says (fail closed).
  bool incomplete = false;
};

// LooksLikeTar: `head` (at least 512 bytes) starts with a header whose
// checksum tarfile accepts; the "ustar" magic is not needed (V7 archives
// have none), so this is what tarfile.open(mode="r:") would open.
bool LooksLikeTar(std::span<const uint8_t> head);

// ReadTar lists the archive's members from offset 0 the way tarfile does.
// Every problem is appended to `findings` (MG-TAR-*); an Error is returned
// only for I/O failures (the gate could not judge). Reads headers and
// extension records only, in bounded windows.
core::Result<TarArchive> ReadTar(const Source& src, const TarLimits& limits,
                                 std::vector<Finding>* findings);

// TarAccess is how the loader reads a member.
enum class TarAccess : uint8_t {
  // tarfile.extractfile(name): links are followed inside the archive
  // (_find_link_target: symlinks anywhere, hard links before the link).
  kExtractFile,
  // tarfile.extract(name) then open(): a symlink is written as a symlink
  // and open() follows it on the host; a hard link to an absolute or '..'
  // target links a host file. Only hard links to archive names resolve.
  kExtract,
};

// ResolveTarMember finds the member whose bytes the loader reads for
// `name`: the last member of that name (trailing '/' ignored, as
// getmember does), links followed per `access` (at most 8 hops). nullptr
// when there is none, when a link leaves the archive (the loader then reads
// a host file the gate cannot see), or on a loop.
const TarMember* ResolveTarMember(const TarArchive& tar, std::string_view name,
                                  TarAccess access);

// ExtractTarMember returns a member's data bytes: at most `max_bytes`, and
// only for members with data inside the file. An Error for I/O failures
// and, with code kStTruncated, for members that cannot be extracted
// (no data, out of bounds, over `max_bytes`): check before calling.
core::Result<std::vector<uint8_t>> ExtractTarMember(const Source& src, const TarMember& member,
                                                    uint64_t max_bytes);

}  // namespace modelgate::scanner

// The legacy-torch walker reads TarArchive listings; it lives in its own file.
#include "torch_legacy.h"
