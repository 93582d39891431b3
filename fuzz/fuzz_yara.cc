// fuzz_yara: the scanner's YARA wrapper (scanner/src/yara_rules.h) over
// arbitrary bytes: the shipped rules, and a small rule set of fixed-length
// strings scanned whole and in small overlapping chunks. The first bytes pick
// the scope, the chunking and the base offset; the rest is scanned.
// Invariants:
// - every finding is MG-YARA-*, reported once per id, member "", with an
//   offset inside [base, base + size) or kNoOffset; a failed scan ends with
//   MG-YARA-SCAN-ERROR;
// - chunking changes nothing for rules whose one string is no longer than
//   the overlap: the same ids at the same (first-match) offsets, and the
//   offset is where the rule's string first occurs.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "modelgate/core.h"
#include "modelgate/scanner.h"
#include "yara_rules.h"

namespace {

namespace core = modelgate::core;
namespace scanner = modelgate::scanner;

void Check(bool ok) {
  if (!ok) __builtin_trap();
}

// One string per rule, at most kLongestString bytes (the overlap is longer).
constexpr size_t kLongestString = 6;
const char kFixedRules[] = R"(
rule fz_evil { strings: $a = "evil" condition: $a }
rule fz_proto { strings: $h = { 80 02 63 } condition: $h }
rule fz_system { strings: $s = "system" nocase condition: $s }
rule fz_wide { strings: $w = "ab" wide condition: $w }
)";

const scanner::YaraRules& DefaultRules() {
  static const scanner::YaraRules rules = [] {
    auto r = scanner::YaraRules::CompileDefault();
    Check(r.ok());
    return std::move(r).value();
  }();
  return rules;
}

const scanner::YaraRules& FixedRules() {
  static const scanner::YaraRules rules = [] {
    auto r = scanner::YaraRules::CompileSources({{"fuzz.yar", kFixedRules}});
    Check(r.ok());
    return std::move(r).value();
  }();
  return rules;
}

void CheckFindings(const std::vector<scanner::Finding>& found, bool ok, uint64_t base,
                   size_t size) {
  std::set<std::string> ids;
  for (const auto& f : found) {
    Check(f.id.rfind("MG-YARA-", 0) == 0);
    Check(ids.insert(f.id).second);
    Check(f.member.empty());
    Check(f.severity <= core::Severity::kInfo);
    Check(f.offset == core::kNoOffset || (f.offset >= base && f.offset - base < size));
  }
  Check(ok || (!found.empty() && found.back().id == scanner::kYaraScanErrorId));
}

bool MatchesAt(std::string_view id, std::span<const uint8_t> bytes, uint64_t at) {
  auto has = [&](std::string_view s, bool nocase) {
    if (at + s.size() > bytes.size()) return false;
    for (size_t i = 0; i < s.size(); ++i) {
      uint8_t b = bytes[at + i], c = static_cast<uint8_t>(s[i]);
      if (nocase && b >= 'A' && b <= 'Z') b = static_cast<uint8_t>(b - 'A' + 'a');
      if (b != c) return false;
    }
    return true;
  };
  if (id == "MG-YARA-FZ-EVIL") return has("evil", false);
  if (id == "MG-YARA-FZ-PROTO") return has(std::string_view("\x80\x02\x63", 3), false);
  if (id == "MG-YARA-FZ-SYSTEM") return has("system", true);
  if (id == "MG-YARA-FZ-WIDE") return has(std::string_view("a\0b\0", 4), false);
  return false;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 3) return 0;
  static constexpr std::string_view kScopes[] = {"header", "metadata", "pickle", "member", "data"};
  std::string_view scope = kScopes[data[0] % 5];
  const uint64_t chunk = 16 + data[1] % 64;
  const uint64_t overlap = kLongestString + data[1] / 64 % 4;  // < chunk
  const uint64_t base = (data[2] & 1) ? (uint64_t{1} << 40) + data[2] : 0;
  std::span<const uint8_t> bytes(data + 3, size - 3);

  std::vector<scanner::Finding> shipped;
  bool ok = DefaultRules().Scan(bytes, scope, &shipped, base);
  CheckFindings(shipped, ok, base, bytes.size());

  std::vector<scanner::Finding> whole, chunked;
  bool whole_ok = FixedRules().Scan(bytes, scope, &whole, base);
  bool chunked_ok = FixedRules().ScanChunked(bytes, scope, &chunked, base, chunk, overlap);
  CheckFindings(whole, whole_ok, base, bytes.size());
  CheckFindings(chunked, chunked_ok, base, bytes.size());
  if (!whole_ok || !chunked_ok) return 0;
  auto by_id = [](const scanner::Finding& a, const scanner::Finding& b) { return a.id < b.id; };
  std::sort(whole.begin(), whole.end(), by_id);
  std::sort(chunked.begin(), chunked.end(), by_id);
  Check(whole.size() == chunked.size());
  for (size_t i = 0; i < whole.size(); ++i) {
    Check(whole[i].id == chunked[i].id && whole[i].offset == chunked[i].offset);
    Check(whole[i].offset != core::kNoOffset);
    const uint64_t at = whole[i].offset - base;
    Check(MatchesAt(whole[i].id, bytes, at));
    for (uint64_t earlier = 0; earlier < at; ++earlier) Check(!MatchesAt(whole[i].id, bytes, earlier));
  }
  return 0;
}
