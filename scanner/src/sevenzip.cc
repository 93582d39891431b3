// 7z through libarchive: one walk over the entries, every data byte read
// in chunks of at most one past what the budget allows (to tell "at the
// limit" from "past it", as the Decoder does) and charged before use.
#include "sevenzip.h"

#include <archive.h>
#include <archive_entry.h>
#include <zlib.h>

#include <algorithm>
#include <memory>
#include <set>

#include "archive_names.h"
#include "decompress.h"

namespace modelgate::scanner::internal {
namespace {

using core::Severity;

constexpr uint8_t kSignature[] = {'7', 'z', 0xBC, 0xAF, 0x27, 0x1C};
// The start header: signature, version (2), its CRC (4), then the next
// header's offset (8, from the end of these 32 bytes), size (8) and CRC (4).
constexpr size_t kStartHeaderBytes = 32;

uint64_t Le(std::span<const uint8_t> b, size_t at, int n) {
  uint64_t v = 0;
  for (int i = n; i-- > 0;) v = (v << 8) | b[at + static_cast<size_t>(i)];
  return v;
}

// StartHeaderProblem checks the start header before libarchive reads it:
// its CRC, and a next header that lies inside the file, so that a corrupt
// start header cannot make libarchive allocate what it claims (fuzz_sevenzip
// found a 2^58-byte request). nullptr when sound.
const char* StartHeaderProblem(std::span<const uint8_t> file) {
  if (file.size() < kStartHeaderBytes) return "shorter than the 7z start header";
  const uLong crc = crc32(0L, file.data() + 12, 20);
  if (crc != Le(file, 8, 4)) return "the start header's CRC does not match";
  const uint64_t offset = Le(file, 12, 8), size = Le(file, 20, 8);
  const uint64_t room = file.size() - kStartHeaderBytes;
  if (offset > room || size > room - offset) return "the next header lies outside the file";
  return nullptr;
}

struct ArchiveFree {
  void operator()(archive* a) const { archive_read_free(a); }
};

void Add(std::vector<Finding>* f, const char* id, Severity sev, std::string msg) {
  f->push_back(MakeFinding(id, sev, "7z: " + std::move(msg), core::kNoOffset));
}

std::string Why(archive* a) {
  const char* s = archive_error_string(a);
  return s != nullptr ? s : "no reason given";
}

bool Walk(std::span<const uint8_t> file, Budget& budget, std::vector<Finding>* findings,
          const SevenZipMemberFn* on_member, std::vector<SevenZipMember>* members,
          const SevenZipLimits& limits) {
  if (file.size() < sizeof kSignature ||
      !std::equal(std::begin(kSignature), std::end(kSignature), file.begin())) {
    Add(findings, "MG-ARCHIVE-MALFORMED", Severity::kHigh, "no 7z signature at the start");
    return false;
  }
  if (const char* why = StartHeaderProblem(file)) {
    Add(findings, "MG-ARCHIVE-MALFORMED", Severity::kHigh, why);
    return false;
  }
  // Our own bounded reading of the header first: libarchive allocates what
  // it declares before reading it (sevenzip_header.h).
  if (!CheckSevenZipHeader(file, budget, limits, findings)) return false;
  std::unique_ptr<archive, ArchiveFree> a(archive_read_new());
  if (!a || archive_read_support_format_7zip(a.get()) != ARCHIVE_OK ||
      archive_read_open_memory(a.get(), file.data(), file.size()) != ARCHIVE_OK) {
    Add(findings, "MG-ARCHIVE-MALFORMED", Severity::kHigh,
        "libarchive cannot open the archive: " + (a ? Why(a.get()) : std::string("no memory")));
    return false;
  }
  // Each member may expand to what one stream of the archive's size may.
  const uint64_t member_cap = budget.StreamCap(file.size());
  std::set<std::string> seen;
  std::vector<uint8_t> chunk(kSevenZipChunkBytes);
  for (;;) {
    archive_entry* e = nullptr;
    const int r = archive_read_next_header(a.get(), &e);
    if (r == ARCHIVE_EOF) break;
    if (r < ARCHIVE_WARN) {
      const bool encrypted = archive_read_has_encrypted_entries(a.get()) > 0;
      Add(findings, encrypted ? "MG-ARCHIVE-UNSUPPORTED" : "MG-ARCHIVE-MALFORMED", Severity::kHigh,
          std::string(encrypted ? "encrypted archive, not unpacked: " : "cannot read a header: ") +
              Why(a.get()));
      return false;
    }
    if (auto s = budget.ChargeRecords(1); !s.ok()) {
      findings->push_back(s.TakeFinding());
      return false;
    }
    const char* utf8 = archive_entry_pathname_utf8(e);
    std::string name = utf8 != nullptr ? utf8 : "";
    if (utf8 == nullptr) {
      Add(findings, "MG-ARCHIVE-UNSAFE-NAME", Severity::kHigh,
          "a member name cannot be converted to UTF-8");
    } else if (const char* why = UnsafeNameReason(name)) {
      Add(findings, "MG-ARCHIVE-UNSAFE-NAME", Severity::kHigh,
          "member \"" + name + "\": " + why);
    }
    if (utf8 != nullptr && !seen.insert(name).second) {
      Add(findings, "MG-ARCHIVE-DUPLICATE-NAME", Severity::kCritical,
          "member \"" + name + "\" appears more than once; extractors keep the last");
    }
    const mode_t type = archive_entry_filetype(e);
    const bool is_file = type == AE_IFREG;
    const uint64_t declared =
        archive_entry_size_is_set(e) && archive_entry_size(e) > 0
            ? static_cast<uint64_t>(archive_entry_size(e))
            : 0;
    if (members != nullptr) members->push_back({name, declared, is_file});
    if (!is_file && type != AE_IFDIR) {
      const char* target = archive_entry_symlink_utf8(e);
      Add(findings, "MG-ARCHIVE-UNSUPPORTED", Severity::kHigh,
          "member \"" + name + "\" is " +
              (type == AE_IFLNK ? "a symbolic link to \"" + std::string(target ? target : "") + "\""
                                : std::string("a special file")) +
              "; not followed");
    }
    if (archive_entry_is_encrypted(e)) {
      Add(findings, "MG-ARCHIVE-UNSUPPORTED", Severity::kHigh,
          "member \"" + name + "\" is encrypted; not unpacked");
      return false;  // libarchive cannot read past it without a passphrase
    }
    if (auto s = budget.ChargeMember(); !s.ok()) {
      findings->push_back(s.TakeFinding());
      return false;
    }
    if (declared > budget.limits().max_member_bytes) {
      findings->push_back(budget.MemberLimit(declared).TakeFinding());
      return false;
    }
    std::unique_ptr<Spool> spool;
    if (is_file && on_member != nullptr) {
      auto s = Spool::Create("modelgate-7z");
      if (!s.ok()) {
        Add(findings, "MG-ARCHIVE-LIMIT", Severity::kHigh, "cannot make a spool: " + s.error().message);
        return false;
      }
      spool = std::move(s).value();
    }
    // Every entry's data is read (and charged), links' and specials' too:
    // skipping would have libarchive decode a solid block uncharged.
    uint64_t produced = 0;
    for (;;) {
      const uint64_t budget_left = budget.InflateRemaining();
      const uint64_t allow = std::min(member_cap - std::min(member_cap, produced), budget_left);
      const size_t want = static_cast<size_t>(std::min<uint64_t>(chunk.size(), allow + 1));
      const la_ssize_t n = archive_read_data(a.get(), chunk.data(), want);
      if (n < 0) {
        Add(findings, "MG-ARCHIVE-MALFORMED", Severity::kHigh,
            "member \"" + name + "\" cannot be decoded: " + Why(a.get()));
        return false;
      }
      if (n == 0) break;
      const uint64_t got = static_cast<uint64_t>(n);
      if (got > allow) {
        // Past the limit: which one (the file's total first).
        (void)budget.ChargeInflated(allow);
        findings->push_back(allow == budget_left ? budget.ChargeInflated(1).TakeFinding()
                                                 : budget.StreamLimit(file.size()).TakeFinding());
        return false;
      }
      (void)budget.ChargeInflated(got);  // within InflateRemaining: cannot fail
      produced += got;
      if (spool) {
        if (auto s = spool->Append(std::span<const uint8_t>(chunk).first(static_cast<size_t>(n)));
            !s.ok()) {
          Add(findings, "MG-ARCHIVE-LIMIT", Severity::kHigh, s.error().message);
          return false;
        }
      }
    }
    if (spool) {
      if (auto s = spool->Seal(); !s.ok()) {
        Add(findings, "MG-ARCHIVE-LIMIT", Severity::kHigh, s.error().message);
        return false;
      }
      auto bytes = spool->Bytes();
      if (!bytes.ok()) {
        Add(findings, "MG-ARCHIVE-LIMIT", Severity::kHigh, bytes.error().message);
        return false;
      }
      (*on_member)(name, bytes.value());
    }
  }
  return true;
}

}  // namespace

bool ReadSevenZip(std::span<const uint8_t> file, Budget& budget, std::vector<Finding>* findings,
                  const SevenZipMemberFn& on_member, const SevenZipLimits& limits) {
  return Walk(file, budget, findings, &on_member, nullptr, limits);
}

bool ListSevenZip(std::span<const uint8_t> file, Budget& budget, std::vector<Finding>* findings,
                  std::vector<SevenZipMember>* members, const SevenZipLimits& limits) {
  return Walk(file, budget, findings, nullptr, members, limits);
}

}  // namespace modelgate::scanner::internal
