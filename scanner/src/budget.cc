// Budget accounting. Every failing charge names its limit and value in an
// MG-ARCHIVE-LIMIT finding and records the limit once.
#include "budget.h"

#include <algorithm>
#include <utility>

namespace modelgate::scanner {
namespace {

std::string N(uint64_t v) { return std::to_string(v); }

}  // namespace

BudgetLimits BudgetLimits::FromContainers(const ContainerLimits& c) {
  BudgetLimits b;
  b.max_total_decompressed_bytes = c.max_total_decompressed_bytes;
  b.max_member_bytes = c.max_member_bytes;
  b.max_expansion_ratio = c.max_expansion_ratio;
  b.max_nesting_depth = c.max_nesting_depth;
  return b;
}

BudgetStatus Budget::Hit(const char* limit, uint64_t value, std::string what, uint64_t offset) {
  if (std::find(hit_.begin(), hit_.end(), limit) == hit_.end()) hit_.emplace_back(limit);
  return BudgetStatus(MakeFinding("MG-ARCHIVE-LIMIT", core::Severity::kHigh,
                                  what + " (limit " + limit + " " + N(value) +
                                      "); the rest is not analyzed",
                                  offset));
}

uint64_t Budget::InflateRemaining() const {
  return inflated_ >= limits_.max_total_decompressed_bytes
             ? 0
             : limits_.max_total_decompressed_bytes - inflated_;
}

BudgetStatus Budget::ChargeInflated(uint64_t n, uint64_t offset) {
  if (n > InflateRemaining()) {
    return Hit("max_total_decompressed_bytes", limits_.max_total_decompressed_bytes,
               "decompressed content of the file exceeds " +
                   N(limits_.max_total_decompressed_bytes) + " bytes",
               offset);
  }
  inflated_ += n;
  return BudgetStatus();
}

uint64_t Budget::StreamCap(uint64_t input_bytes) const {
  uint64_t ratio_cap = UINT64_MAX;
  if (!__builtin_mul_overflow(limits_.max_expansion_ratio, input_bytes, &ratio_cap)) {
    ratio_cap = std::max(ratio_cap, limits_.ratio_floor_bytes);
  }
  return std::min(limits_.max_member_bytes, ratio_cap);
}

BudgetStatus Budget::StreamLimit(uint64_t input_bytes, uint64_t offset) {
  const uint64_t cap = StreamCap(input_bytes);
  if (cap < limits_.max_member_bytes) {
    return Hit("max_expansion_ratio", limits_.max_expansion_ratio,
               "a stream of " + N(input_bytes) + " bytes expands past " + N(cap) + " bytes",
               offset);
  }
  return Hit("max_member_bytes", limits_.max_member_bytes,
             "a member expands past " + N(cap) + " bytes", offset);
}

BudgetStatus Budget::DecoderMemoryLimit(uint64_t memlimit_bytes, uint64_t offset) {
  return Hit("max_decoder_memory_bytes", memlimit_bytes,
             "the stream needs more decoder memory than " + N(memlimit_bytes) + " bytes", offset);
}

BudgetStatus Budget::MemberLimit(uint64_t declared_bytes, uint64_t offset) {
  return Hit("max_member_bytes", limits_.max_member_bytes,
             "a member of " + N(declared_bytes) + " bytes exceeds " +
                 N(limits_.max_member_bytes) + " bytes",
             offset);
}

BudgetStatus Budget::DeclaredLimit(const char* limit, uint64_t value, std::string what,
                                   uint64_t offset) {
  return Hit(limit, value, std::move(what), offset);
}

BudgetStatus Budget::ChargeMember(uint64_t offset) {
  if (members_ >= limits_.max_members) {
    return Hit("max_members", limits_.max_members,
               "more than " + N(limits_.max_members) + " members read", offset);
  }
  ++members_;
  return BudgetStatus();
}

BudgetStatus Budget::ChargeRecords(uint64_t n, uint64_t offset) {
  if (n > limits_.max_records || records_ > limits_.max_records - n) {
    return Hit("max_records", limits_.max_records,
               "more than " + N(limits_.max_records) + " directory records listed", offset);
  }
  records_ += n;
  return BudgetStatus();
}

BudgetStatus Budget::Enter(uint64_t offset) {
  if (depth_ >= limits_.max_nesting_depth) {
    return Hit("max_nesting_depth", limits_.max_nesting_depth,
               "containers nested deeper than " + N(limits_.max_nesting_depth) + " levels",
               offset);
  }
  ++depth_;
  return BudgetStatus();
}

void Budget::Leave() {
  if (depth_ > 0) --depth_;
}

}  // namespace modelgate::scanner
