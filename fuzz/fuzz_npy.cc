// fuzz_npy: the .npy header parser, in memory. Invariants: no crash; a
// rejection is one MG-NPY-* finding with an offset inside the input; an
// accepted header's body starts inside the input and respects the limits.
#include <cstdint>

#include "npy.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace modelgate::scanner;
  NpyLimits limits;
  std::vector<Finding> findings;
  auto h = ParseNpyHeader({data, size}, 0, limits, &findings);
  if (!h) {
    if (findings.size() != 1 || findings[0].id.rfind("MG-NPY-", 0) != 0) __builtin_trap();
    if (findings[0].offset != modelgate::core::kNoOffset && findings[0].offset > size) __builtin_trap();
    return 0;
  }
  if (!findings.empty()) __builtin_trap();
  if (h->data_offset > size || h->header_bytes > limits.max_header_bytes) __builtin_trap();
  if (h->shape.size() > limits.max_rank) __builtin_trap();
  if (h->has_object && h->body_bytes) __builtin_trap();
  return 0;
}
