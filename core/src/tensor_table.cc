// TensorTable: the tensors of one file in three allocations (records, one
// word array for names and dims), never a node per tensor.
#include <algorithm>
#include <stdexcept>

#include "modelgate/core.h"
#include "tensor_table.h"

namespace modelgate::core {

TensorTable::TensorTable(const std::vector<TensorInfo>& tensors) {
  reserve(tensors.size());
  for (const auto& t : tensors) push_back(t);
}

TensorTable::TensorTable(std::initializer_list<TensorInfo> tensors) {
  reserve(tensors.size());
  for (const auto& t : tensors) push_back(t);
}

TensorView TensorTable::operator[](size_t i) const {
  assert(i < recs_.size());
  const Rec& r = recs_[i];
  const uint64_t* w = words_.data() + r.at;
  const auto* name = reinterpret_cast<const char*>(w);
  TensorView v;
  v.name = std::string_view(name, r.name_bytes);
  v.dtype = r.dtype;
  v.shape = Dims(std::span<const uint64_t>(w + TableAccess::NameWords(r.name_bytes), r.rank));
  v.begin = r.begin;
  v.end = r.end;
  v.entry_offset = r.entry_offset;
  v.data_start = data_start_;
  return v;
}

TensorView TensorTable::at(size_t i) const {
  if (i >= recs_.size()) throw std::out_of_range("TensorTable::at");
  return (*this)[i];
}

void TensorTable::push_back(const TensorInfo& t) {
  // A record holds at most kMaxTableNameBytes / kMaxTableRank (the parser
  // refuses more): anything else is a caller's bug.
  assert(t.name.size() <= kMaxTableNameBytes && t.shape.size() <= kMaxTableRank);
  assert(recs_.empty() || t.data_start == data_start_);
  if (recs_.empty()) data_start_ = t.data_start;
  TableAccess::Append(*this, t.name, t.shape, t.dtype, t.begin, t.end, t.entry_offset);
}

void TensorTable::pop_back() {
  assert(!recs_.empty());
  const Rec& r = recs_.back();
  // The last record's words are the arena's tail unless the table was
  // reordered (a parsed table is sorted by offset): then they stay unused.
  if (r.at + TableAccess::NameWords(r.name_bytes) + r.rank == words_.size()) words_.resize(r.at);
  recs_.pop_back();
}

void TensorTable::clear() {
  recs_.clear();
  words_.clear();
  data_start_ = 0;
}

void TensorTable::reserve(size_t tensor_count) { recs_.reserve(tensor_count); }

uint64_t TableAccess::NameHash(const TensorTable& t, const Rec& r) {
  const uint64_t* w = t.words_.data() + r.at;
  uint64_t h = 0x9E3779B97F4A7C15ull ^ r.name_bytes;
  for (uint64_t i = 0; i < NameWords(r.name_bytes); ++i) {
    h = (h ^ w[i]) * 0xFF51AFD7ED558CCDull;
    h ^= h >> 32;
  }
  // A multiply carries bits only upwards: without this finalizer (MurmurHash3's
  // fmix64) names that differ only in their last bytes (the high bytes of a
  // little-endian word: "t0000001", "t0000002", ...) shared their low bits
  // and filled the set in runs of ten, and a 650k-name table fell back to
  // the sort.
  h ^= h >> 33;
  h *= 0xFF51AFD7ED558CCDull;
  h ^= h >> 33;
  h *= 0xC4CEB9FE1A85EC53ull;
  h ^= h >> 33;
  return h;
}

NameCheck TableAccess::FindDuplicateName(const TensorTable& t, uint64_t max_probes_per_name) {
  const auto& recs = t.recs_;
  const size_t n = recs.size();
  NameCheck out;
  assert(n <= UINT32_MAX - 1);
  auto found = [&](size_t a, size_t b) {
    out.duplicate = true;
    out.first = std::min(a, b);
    out.second = std::max(a, b);
    return out;
  };
  size_t cap = 16;
  while (cap / 4 * 3 < n) cap *= 2;
  // A slot holds index + 1 in its low `index_bits` bits (0: empty) and the
  // top bits of the name's hash above them, so that a probe past another
  // name rarely reads that name's record (a cache miss in a big table).
  int index_bits = 1;
  while (index_bits < 32 && (uint64_t{1} << index_bits) <= n) ++index_bits;
  const uint32_t index_mask = index_bits == 32 ? UINT32_MAX : (uint32_t{1} << index_bits) - 1;
  bool collided = false;
  {
    std::vector<uint32_t> slots(cap, 0);
    uint64_t probes = 0;
    uint64_t max_probes = 0;
    if (__builtin_mul_overflow(max_probes_per_name, uint64_t{n}, &max_probes)) max_probes = UINT64_MAX;
    // The slots are a random walk through megabytes: each name's first
    // slot is fetched kAhead names before it is probed.
    constexpr size_t kAhead = 8;
    uint64_t ahead[kAhead];
    for (size_t i = 0; i < n && i < kAhead; ++i) {
      ahead[i] = NameHash(t, recs[i]);
      __builtin_prefetch(slots.data() + (ahead[i] & (cap - 1)));
    }
    for (size_t i = 0; i < n && !collided; ++i) {
      const std::string_view name = Name(t, recs[i]);
      const uint64_t h = ahead[i % kAhead];
      if (i + kAhead < n) {
        ahead[i % kAhead] = NameHash(t, recs[i + kAhead]);
        __builtin_prefetch(slots.data() + (ahead[i % kAhead] & (cap - 1)));
      }
      const uint32_t tag = index_bits == 32 ? 0 : static_cast<uint32_t>(h >> (32 + index_bits)) << index_bits;
      size_t s = static_cast<size_t>(h) & (cap - 1);
      while (slots[s] != 0) {
        const uint32_t other = (slots[s] & index_mask) - 1;
        if ((slots[s] & ~index_mask) == tag && Name(t, recs[other]) == name) return found(other, i);
        if (++probes > max_probes) {
          collided = true;
          break;
        }
        s = (s + 1) & (cap - 1);
      }
      slots[s] = tag | static_cast<uint32_t>(i + 1);
    }
  }  // the slots are freed before the sort allocates
  if (!collided) return out;
  out.sorted = true;
  {
    std::vector<uint32_t> idx(n);
    for (size_t i = 0; i < n; ++i) idx[i] = static_cast<uint32_t>(i);
    auto name = [&](uint32_t i) { return Name(t, recs[i]); };
    std::sort(idx.begin(), idx.end(), [&](uint32_t a, uint32_t b) { return name(a) < name(b); });
    for (size_t i = 1; i < n; ++i) {
      if (name(idx[i - 1]) == name(idx[i])) return found(idx[i - 1], idx[i]);
    }
  }
  return out;
}

size_t TensorTable::HeapBytes() const {
  return recs_.capacity() * sizeof(Rec) + words_.capacity() * sizeof(uint64_t);
}

}  // namespace modelgate::core
