// TableAccess: how the parser (safetensors.cc) and TensorTable itself
// append to and reorder a table's records. Private to core.
#pragma once

#include <cstring>
#include <span>
#include <string_view>
#include <vector>

#include "modelgate/core.h"

namespace modelgate::core {

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
