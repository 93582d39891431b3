// TableAccess: how the parser (safetensors.cc) and TensorTable itself
// append to and reorder a table's records. Private to core.
#pragma once

#include <cstring>
#include <span>
#include <string_view>
#include <vector>

#include "modelgate/core.h"

namespace modelgate::core {

// kMaxProbesPerName: FindDuplicateName's budget of hash-set probes per name
// (on average) before it gives up on the hash and sorts.
inline constexpr uint64_t kMaxProbesPerName = 8;

// NameCheck is FindDuplicateName's answer: whether two records share a name
// (`first`, `second`: their indices, first < second), and whether the check
// ran as a sort because the names collided in the hash set.
struct NameCheck {
  bool duplicate = false;
  bool sorted = false;
  size_t first = 0;
  size_t second = 0;
};

struct TableAccess {
  using Rec = TensorTable::Rec;

  // NameWords: 8-byte words a name of `bytes` bytes takes (zero padded).
  static uint64_t NameWords(uint64_t bytes) { return (bytes + 7) / 8; }

  static std::vector<Rec>& Recs(TensorTable& t) { return t.recs_; }
  static const std::vector<Rec>& Recs(const TensorTable& t) { return t.recs_; }
  static std::vector<uint64_t>& Words(TensorTable& t) { return t.words_; }
  static void SetDataStart(TensorTable& t, uint64_t data_start) { t.data_start_ = data_start; }

  static std::string_view Name(const TensorTable& t, const Rec& r) {
    return {reinterpret_cast<const char*>(t.words_.data() + r.at), r.name_bytes};
  }
  static std::span<const uint64_t> Shape(const TensorTable& t, const Rec& r) {
    return {t.words_.data() + r.at + NameWords(r.name_bytes), r.rank};
  }

  // BeginName appends `name`'s words and returns the new record's `at`.
  static uint64_t AppendName(TensorTable& t, std::string_view name) {
    auto& w = t.words_;
    const uint64_t at = w.size();
    const uint64_t n = NameWords(name.size());
    w.resize(w.size() + n);  // zero filled: the padding is zeros
    if (!name.empty()) std::memcpy(w.data() + at, name.data(), name.size());
    return at;
  }

  // NameHash hashes a record's name words (zero padded) and its length;
  // every name bit reaches the low bits a hash set indexes with.
  static uint64_t NameHash(const TensorTable& t, const Rec& r);

  // FindDuplicateName looks for two records with the same name: a hash set
  // of record indices (open addressing, load <= 3/4, 4 bytes a slot). The
  // names are the sender's: a set built to collide in NameHash would make
  // the probing quadratic, so past `max_probes_per_name` probes a name on
  // average it sorts the indices by name instead (n log n whatever the
  // names). Tables of more than UINT32_MAX - 1 records are not supported.
  static NameCheck FindDuplicateName(const TensorTable& t,
                                     uint64_t max_probes_per_name = kMaxProbesPerName);

  static void Append(TensorTable& t, std::string_view name, std::span<const uint64_t> shape,
                     Dtype dtype, uint64_t begin, uint64_t end, uint64_t entry_offset) {
    Rec r{};
    r.at = AppendName(t, name);
    t.words_.insert(t.words_.end(), shape.begin(), shape.end());
    r.name_bytes = static_cast<uint32_t>(name.size());
    r.rank = static_cast<uint16_t>(shape.size());
    r.dtype = dtype;
    r.begin = begin;
    r.end = end;
    r.entry_offset = entry_offset;
    t.recs_.push_back(r);
  }
};

}  // namespace modelgate::core
