// fuzz_onnx: the ONNX ModelProto wire reader (scanner/src/onnx.h), in memory,
// with the default limits and with tight ones (so the limit paths run on
// small inputs). Invariants: no crash; every finding is MG-ONNX-* with an
// offset inside the input (or none); a refusal carries a high or critical
// finding; an accepted model's counts respect the limits; LooksLikeOnnx
// never reads past what it is given.
#include <cstdint>
#include <vector>

#include "onnx.h"

namespace {

using modelgate::core::kNoOffset;
using modelgate::core::Severity;
namespace in = modelgate::scanner::internal;

void Check(const uint8_t* data, size_t size, const in::OnnxLimits& limits) {
  std::vector<modelgate::scanner::Finding> findings;
  auto info = in::AnalyzeOnnx({data, size}, limits, &findings);
  bool blocking = false;
  for (const auto& f : findings) {
    if (f.id.rfind("MG-ONNX-", 0) != 0) __builtin_trap();
    if (f.offset != kNoOffset && f.offset > size) __builtin_trap();
    blocking |= f.severity == Severity::kCritical || f.severity == Severity::kHigh;
  }
  if (!info) {
    if (!blocking) __builtin_trap();
    return;
  }
  if (info->nodes > limits.max_nodes || info->initializers > limits.max_initializers) {
    __builtin_trap();
  }
  if (info->ir_version <= 0) __builtin_trap();
  if (info->external_locations.size() > size) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Check(data, size, in::OnnxLimits{});
  in::OnnxLimits tight;
  tight.max_depth = 6;
  tight.max_nodes = 4;
  tight.max_initializers = 2;
  tight.max_fields = 64;
  Check(data, size, tight);
  (void)in::LooksLikeOnnx({data, size < 512 ? size : 512});
  return 0;
}
