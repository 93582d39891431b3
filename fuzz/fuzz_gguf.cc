// fuzz_gguf: the GGUF header parser (scanner/src/gguf.h), in memory, with
// default limits and with tight ones (so the limit paths are reached from
// small inputs). Invariants: no crash; every finding an MG-GGUF-* id with an
// offset inside the input or at its end; a nullopt carries a high finding; a returned
// value has its data section inside the input, every tensor inside it, no
// two non-empty tensors sharing a byte, every kept string's offset inside
// the input and within the kept-string caps.
#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "gguf.h"

namespace {

using namespace modelgate::scanner;
using namespace modelgate::scanner::internal;

void Check(const uint8_t* data, size_t size, const GgufLimits& limits) {
  std::vector<Finding> findings;
  auto info = ParseGguf({data, size}, limits, &findings);
  bool high = false;
  for (const auto& f : findings) {
    if (f.id.rfind("MG-GGUF-", 0) != 0) __builtin_trap();
    if (f.offset != modelgate::core::kNoOffset && f.offset > size) __builtin_trap();
    high |= f.severity <= modelgate::core::Severity::kHigh;
  }
  if (!info) {
    if (!high) __builtin_trap();
    return;
  }
  if (info->data_start > size || info->data_bytes != size - info->data_start) __builtin_trap();
  if (info->data_start > limits.max_header_bytes) __builtin_trap();
  if (info->version < 1 || info->version > 3) __builtin_trap();
  if (info->alignment == 0 || (info->alignment & (info->alignment - 1)) != 0) __builtin_trap();
  if (info->tensors.size() > limits.max_tensors) __builtin_trap();
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  for (const auto& t : info->tensors) {
    if (t.dims.size() > limits.max_dims) __builtin_trap();
    if (t.offset > size || t.bytes > size) __builtin_trap();
    const uint64_t begin = info->data_start + t.offset;
    if (begin > size || t.bytes > size - begin) __builtin_trap();
    if (t.bytes > 0) ranges.emplace_back(begin, begin + t.bytes);
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i) {
    if (ranges[i].first < ranges[i - 1].second) __builtin_trap();
  }
  if (info->strings.size() > limits.max_kept_strings) __builtin_trap();
  uint64_t kept = 0;
  for (const auto& s : info->strings) {
    if (s.offset >= size) __builtin_trap();
    kept += s.key.size() + s.value.size();
  }
  if (kept > limits.max_kept_string_bytes) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Check(data, size, GgufLimits{});
  GgufLimits tight;
  tight.max_tensors = 8;
  tight.max_kv = 8;
  tight.max_string_bytes = 64;
  tight.max_array_elements = 16;
  tight.max_header_bytes = 2048;
  tight.max_dims = 3;
  tight.max_array_depth = 2;
  tight.max_kept_strings = 4;
  tight.max_kept_string_bytes = 64;
  Check(data, size, tight);
  return 0;
}
