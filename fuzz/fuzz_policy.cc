// fuzz_policy: the strict policy parser (yaml-cpp's event parser plus the
// schema checks) on arbitrary text, then evaluation and lint of whatever
// parsed. Policies are operator input, but they travel through pull
// requests and config maps, so they are parsed as untrusted. Invariants:
// never crashes; an error is kIoRead, names the source, and its offset
// lies inside the input; a parsed policy only tightens the default limits,
// has a threshold >= 1, and yields a verdict for any scan.
// Inputs mentioning "file" are skipped: a `file:` key reads a path, and
// the fuzzer must not read /dev/zero or a FIFO.
#include <cstdint>
#include <cstring>
#include <string_view>

#include "modelgate/policy.h"

namespace {

void Check(bool ok) {
  if (!ok) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace modelgate;
  std::string_view text(reinterpret_cast<const char*>(data), size);
  if (text.find("file") != std::string_view::npos) return 0;
  auto r = policy::ParsePolicy(text, "fuzz.yaml", "/nonexistent/modelgate-fuzz");
  if (!r.ok()) {
    const core::Error& e = r.error();
    Check(e.code == core::Code::kIoRead);
    Check(e.offset == core::kNoOffset || e.offset <= size);
    Check(e.message.rfind("fuzz.yaml", 0) == 0);
    return 0;
  }
  const policy::Policy& p = r.value();
  const core::Limits d;
  Check(p.limits.max_header_bytes <= d.max_header_bytes && p.limits.max_rank <= d.max_rank &&
        p.limits.max_tensors <= d.max_tensors && p.limits.max_json_depth <= d.max_json_depth &&
        p.limits.max_name_bytes <= d.max_name_bytes &&
        p.limits.max_metadata_entries <= d.max_metadata_entries);
  Check(p.threshold >= 1);
  Check(!p.signatures_required || (!p.keys.empty() && p.threshold <= p.keys.size()));
  Check(p.yara_rule_dirs.empty());  // no directory exists under the base dir

  scanner::FileScan scan;
  scan.path = "m";
  scan.format = scanner::Format::kPickle;
  scan.findings.push_back(
      scanner::MakeFinding("MG-PK-UNKNOWN-IMPORT", core::Severity::kHigh, "x", 0));
  core::Sha256Digest sha{};
  if (!p.exceptions.empty()) sha = p.exceptions[0].sha256;
  auto v = policy::Evaluate(p, scan, std::nullopt, sha, policy::Date{2026, 11, 29});
  Check(v.findings.size() >= scan.findings.size());
  bool blocking = false;
  for (const auto& j : v.findings) {
    blocking |= j.blocking;
    Check(!(j.waived && j.blocking));
  }
  Check(blocking == (v.decision == policy::Decision::kReject));
  (void)policy::LintParsed(p, policy::Date{2026, 11, 29});
  (void)policy::TrustedKeys(p);
  return 0;
}
