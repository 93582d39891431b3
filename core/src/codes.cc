#include <array>

#include "modelgate/core.h"

namespace modelgate::core {
namespace {

struct CodeInfo {
  Code code;
  std::string_view id;
  Severity severity;
};

// The core's rows of the one table of finding ids (findings.def). Severity:
// critical where the rule guards against a differential or a hidden payload
// (two readers disagreeing on which bytes a name means, bytes no reader
// accounts for); high for any other malformed file (still rejected by
// default). Signatures: tampering is critical; whether a missing or
// untrusted signature is a finding at all is the policy's call
// (signatures.required); when it is reported, it blocks.
constexpr std::array kCodes = {
#define MG_CORE_FINDING(code, id, severity, title, rule, help) \
  CodeInfo{Code::code, id, Severity::k##severity},
#include "modelgate/findings.def"
};

constexpr std::array<Code, kCodes.size()> MakeCodeList() {
  std::array<Code, kCodes.size()> out{};
  for (size_t i = 0; i < kCodes.size(); ++i) out[i] = kCodes[i].code;
  return out;
}
constexpr auto kCodeList = MakeCodeList();

const CodeInfo* Find(Code code) {
  for (const auto& c : kCodes) {
    if (c.code == code) return &c;
  }
  return nullptr;
}

constexpr std::array<std::string_view, 5> kSeverityNames = {
    "critical", "high", "medium", "low", "info"};

}  // namespace

std::string_view FindingId(Code code) {
  const CodeInfo* c = Find(code);
  return c ? c->id : std::string_view();
}

Severity DefaultSeverity(Code code) {
  const CodeInfo* c = Find(code);
  return c ? c->severity : Severity::kHigh;
}

std::span<const Code> AllCodes() { return kCodeList; }

std::string_view SeverityName(Severity s) {
  return kSeverityNames[static_cast<size_t>(s)];
}

bool ParseSeverity(std::string_view name, Severity* out) {
  for (size_t i = 0; i < kSeverityNames.size(); ++i) {
    if (kSeverityNames[i] == name) {
      *out = static_cast<Severity>(i);
      return true;
    }
  }
  return false;
}

}  // namespace modelgate::core
