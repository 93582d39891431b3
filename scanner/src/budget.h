// Budget: the one account of the work a scan may do unpacking one file.
// One Budget is created per scanned file and passed by reference down the
// whole recursion (zip members, tar members, compressed wrappers, nested
// archives): every byte any decoder produces, every member read, every
// directory record listed and every level entered is charged to it, and
// nothing else counts. A charge that would pass a limit fails with an
// MG-ARCHIVE-LIMIT finding naming the limit and its value, and the limit
// stays hit: exhausted() is then true and the file must be rejected
// whatever --fail-on says, because what was not decoded was not judged.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "modelgate/scanner.h"

namespace modelgate::scanner {

// kSniffBytes64K is the most a scan decodes of a member to learn what it
// is; a member is decoded further only when its first bytes call for it.
inline constexpr uint64_t kSniffBytes64K = 64 * 1024;

// BudgetLimits: each has a name (used in findings), a default and tests at
// N and N+1 (tests/archives/decompress_test.cc).
struct BudgetLimits {
  // All bytes decoded for one file, across members, streams and layers.
  uint64_t max_total_decompressed_bytes = 4ull << 30;
  // What one member or decompressed stream may expand to.
  uint64_t max_member_bytes = 1ull << 30;
  // Output / input of one stream. deflate tops out near 1032:1; bzip2 and
  // xz reach far more only on degenerate (bomb) input.
  uint64_t max_expansion_ratio = 1000;
  // The ratio binds only past this much output, so that small streams of
  // zeros (an empty tensor, padding) are not bombs.
  uint64_t ratio_floor_bytes = 1ull << 20;
  // Containers inside each other: the file's own container is level 1.
  uint64_t max_nesting_depth = 4;
  // Members whose data is read (sniffed, extracted or decoded), across
  // every archive in the file; 64 KiB sniffs of this many members are what
  // max_total_decompressed_bytes then bounds.
  uint64_t max_members = 1'000'000;
  // Directory records listed (zip central records, tar headers), across
  // every archive in the file: four nested 1,000,000-entry zips fit.
  uint64_t max_records = 4'000'000;

  // FromContainers takes the limits ScanOptions carry (same names, same
  // defaults); max_members and max_records keep their defaults.
  static BudgetLimits FromContainers(const ContainerLimits& c);
};

// BudgetStatus is what a charge returns: ok(), or the MG-ARCHIVE-LIMIT
// finding (high) that names the limit. The caller adds the finding to the
// file's findings (placing it in its member); the budget keeps only the
// fact that the limit was hit.
class [[nodiscard]] BudgetStatus {
 public:
  BudgetStatus() = default;
  explicit BudgetStatus(Finding f) : finding_(std::move(f)) {}
  bool ok() const { return !finding_.has_value(); }
  const Finding& finding() const { return *finding_; }
  Finding TakeFinding() { return std::move(*finding_); }

 private:
  std::optional<Finding> finding_;
};

class Budget {
 public:
  explicit Budget(const BudgetLimits& limits = {}) : limits_(limits) {}
  explicit Budget(const ContainerLimits& c) : limits_(BudgetLimits::FromContainers(c)) {}

  const BudgetLimits& limits() const { return limits_; }

  // ChargeInflated adds `n` decoded bytes. Past max_total_decompressed_bytes
  // it charges nothing and fails (and keeps failing: the limit is spent).
  BudgetStatus ChargeInflated(uint64_t n, uint64_t offset = core::kNoOffset);
  uint64_t inflated_bytes() const { return inflated_; }
  // InflateRemaining is how many more bytes ChargeInflated accepts.
  uint64_t InflateRemaining() const;

  // StreamCap is what one stream of `input_bytes` compressed bytes may
  // produce: max_member_bytes, and max_expansion_ratio times the input
  // once past ratio_floor_bytes.
  uint64_t StreamCap(uint64_t input_bytes) const;
  // StreamLimit reports (and records) that a stream of `input_bytes` passed
  // StreamCap(input_bytes), naming whichever limit set it.
  BudgetStatus StreamLimit(uint64_t input_bytes, uint64_t offset = core::kNoOffset);
  // DecoderMemoryLimit reports (and records) a stream whose decoder needs
  // more memory than `memlimit_bytes` (max_decoder_memory_bytes).
  BudgetStatus DecoderMemoryLimit(uint64_t memlimit_bytes, uint64_t offset = core::kNoOffset);
  // MemberLimit reports (and records) a member whose declared size is over
  // max_member_bytes: it is refused before any decoding.
  BudgetStatus MemberLimit(uint64_t declared_bytes, uint64_t offset = core::kNoOffset);
  // DeclaredLimit reports (and records) that a container's header declares
  // more than the limit named `limit` (of value `value`) allows: `what` says
  // what it declares. Nothing is charged; the container is refused before
  // anything it declares is read or allocated (sevenzip_header.h).
  BudgetStatus DeclaredLimit(const char* limit, uint64_t value, std::string what,
                             uint64_t offset = core::kNoOffset);

  // ChargeMember counts one member whose data is about to be read.
  BudgetStatus ChargeMember(uint64_t offset = core::kNoOffset);
  uint64_t members() const { return members_; }

  // ChargeRecords counts `n` directory records about to be listed.
  BudgetStatus ChargeRecords(uint64_t n, uint64_t offset = core::kNoOffset);
  uint64_t records() const { return records_; }

  // Enter goes one container deeper; past max_nesting_depth it fails and
  // the depth does not change. Leave undoes a successful Enter.
  BudgetStatus Enter(uint64_t offset = core::kNoOffset);
  void Leave();
  uint64_t depth() const { return depth_; }

  // exhausted: some limit was hit; the file cannot be fully judged.
  bool exhausted() const { return !hit_.empty(); }
  // limits_hit names each limit hit, once, in the order first hit.
  const std::vector<std::string>& limits_hit() const { return hit_; }

 private:
  BudgetStatus Hit(const char* limit, uint64_t value, std::string what, uint64_t offset);

  BudgetLimits limits_;
  uint64_t inflated_ = 0;
  uint64_t members_ = 0;
  uint64_t records_ = 0;
  uint64_t depth_ = 0;
  std::vector<std::string> hit_;
};

// DepthScope enters one level for its lifetime: `ok()` says whether the
// level was granted; when it was not, status() carries the finding.
class DepthScope {
 public:
  explicit DepthScope(Budget& budget, uint64_t offset = core::kNoOffset)
      : budget_(budget), status_(budget.Enter(offset)) {}
  ~DepthScope() {
    if (status_.ok()) budget_.Leave();
  }
  DepthScope(const DepthScope&) = delete;
  DepthScope& operator=(const DepthScope&) = delete;
  bool ok() const { return status_.ok(); }
  BudgetStatus& status() { return status_; }

 private:
  Budget& budget_;
  BudgetStatus status_;
};

}  // namespace modelgate::scanner
