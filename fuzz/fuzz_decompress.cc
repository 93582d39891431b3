// fuzz_decompress: every codec over the same input, with a 1 MiB cap.
// Invariants: no crash, no hang; output never passes the cap; findings are
// MG-ARCHIVE-* with offsets inside the input; nullopt only with a finding.
#include <cstdint>

#include "decompress.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace modelgate::scanner;
  DecompressLimits limits;
  limits.max_output_bytes = 1 << 20;
  limits.max_decoder_memory_bytes = 64 << 20;
  std::span<const uint8_t> in(data, size);
  (void)SniffCodec(in);
  for (Codec c : {Codec::kGzip, Codec::kZlib, Codec::kBzip2, Codec::kXz, Codec::kLzma}) {
    std::vector<Finding> findings;
    auto out = Decompress(in, c, limits, &findings);
    if (out && out->size() > limits.max_output_bytes) __builtin_trap();
    if (!out && findings.empty()) __builtin_trap();
    for (const auto& f : findings) {
      if (f.id.rfind("MG-ARCHIVE-", 0) != 0 || f.message.empty()) __builtin_trap();
      if (f.offset != modelgate::core::kNoOffset && f.offset > size) __builtin_trap();
    }
  }
  return 0;
}
