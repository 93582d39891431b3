// fuzz_jinja: the Jinja2 chat template analyzer (scanner/src/jinja.h), in
// memory. Invariants: no crash, it terminates (the limits bound the work),
// every finding is MG-TMPL-* with an offset in [base, base + size], and
// tight limits give at most one finding when they are what stops the parse.
#include <cstdint>
#include <string_view>
#include <vector>

#include "jinja.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace modelgate::scanner;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  constexpr uint64_t kBase = 4096;
  for (int round = 0; round < 2; ++round) {
    internal::TemplateLimits limits;
    if (round == 1) {  // small limits reach the limit paths often
      limits.max_depth = 12;
      limits.max_tokens = 64;
    }
    std::vector<Finding> findings;
    internal::AnalyzeTemplate(text, kBase, "fuzz", limits, &findings);
    for (const Finding& f : findings) {
      if (f.id.rfind("MG-TMPL-", 0) != 0) __builtin_trap();
      if (f.offset < kBase || f.offset > kBase + size) __builtin_trap();
      if ((f.id == "MG-TMPL-LIMIT" || f.id == "MG-TMPL-UNPARSEABLE") && findings.size() != 1) {
        __builtin_trap();
      }
    }
  }
  std::vector<Finding> findings;
  internal::AnalyzeTemplate(text, modelgate::core::kNoOffset, "fuzz", {}, &findings);
  for (const Finding& f : findings) {
    if (f.offset != modelgate::core::kNoOffset) __builtin_trap();
  }
  return 0;
}
