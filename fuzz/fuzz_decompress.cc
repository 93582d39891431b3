// fuzz_decompress: every codec (gzip, zlib, bzip2, xz, lzma-alone, zstd,
// lz4, joblib's ZF) over the same input, with a 1 MiB cap.
// Invariants: no crash, no hang; output never passes the cap; findings are
// MG-ARCHIVE-* with offsets inside the input; nullopt only with a finding;
// the streaming Decoder agrees with Decompress and stays in its budget.
#include <algorithm>
#include <cstdint>

#include "decompress.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace modelgate::scanner;
  DecompressLimits limits;
  limits.max_output_bytes = 1 << 20;
  limits.max_decoder_memory_bytes = 64 << 20;
  std::span<const uint8_t> in(data, size);
  (void)SniffCodec(in);
  for (Codec c : {Codec::kGzip, Codec::kZlib, Codec::kBzip2, Codec::kXz, Codec::kLzma,
                  Codec::kZstd, Codec::kLz4, Codec::kJoblibZf}) {
    std::vector<Finding> findings;
    auto out = Decompress(in, c, limits, &findings);
    if (out && out->size() > limits.max_output_bytes) __builtin_trap();
    if (!out && findings.empty()) __builtin_trap();
    for (const auto& f : findings) {
      if (f.id.rfind("MG-ARCHIVE-", 0) != 0 || f.message.empty()) __builtin_trap();
      if (f.offset != modelgate::core::kNoOffset && f.offset > size) __builtin_trap();
    }
    // The streaming Decoder, in odd-sized pieces under a budget, gives the
    // same bytes as far as both go and never decodes past the budget.
    BudgetLimits bl;
    bl.max_total_decompressed_bytes = 300'000;
    Budget budget(bl);
    std::vector<Finding> df;
    DecoderOptions o;
    o.max_decoder_memory_bytes = limits.max_decoder_memory_bytes;
    MemorySource src(in);
    auto dec = Decoder::Open(src, 0, size, c, budget, &df, o);
    if (!dec) __builtin_trap();
    std::vector<uint8_t> got;
    uint8_t piece[1237];
    while (dec->more()) {
      const size_t n = dec->Read(piece);
      got.insert(got.end(), piece, piece + n);
    }
    if (budget.inflated_bytes() != got.size() || got.size() > bl.max_total_decompressed_bytes) {
      __builtin_trap();
    }
    // "Not a stream" vs "corrupt after some output" may differ with the
    // read size (bzip2 can report a corrupt block before flushing earlier
    // output); either way the stream is reported malformed.
    const bool not_a_stream = dec->state() == DecodeState::kNotAStream;
    if (not_a_stream == out.has_value()) {
      auto malformed = [](const std::vector<Finding>& v) {
        return std::any_of(v.begin(), v.end(),
                           [](const Finding& f) { return f.id == "MG-ARCHIVE-MALFORMED"; });
      };
      if (!malformed(findings) || !malformed(df)) __builtin_trap();
    }
    if (out && !std::equal(got.begin(), got.begin() + static_cast<long>(std::min(got.size(), out->size())),
                           out->begin())) {
      __builtin_trap();
    }
  }
  return 0;
}
