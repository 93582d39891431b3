// TensorTable: the tensors of one file in three allocations (records, one
// word array for names and dims), never a node per tensor.
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

size_t TensorTable::HeapBytes() const {
  return recs_.capacity() * sizeof(Rec) + words_.capacity() * sizeof(uint64_t);
}

}  // namespace modelgate::core
