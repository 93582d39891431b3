#include <array>

#include "modelgate/core.h"

namespace modelgate::core {
namespace {

struct CodeInfo {
  Code code;
  std::string_view id;
  Severity severity;
};

// The one table of finding ids. Severity: critical where the rule guards
// against a differential or a hidden payload (two readers disagreeing on
// which bytes a name means, bytes no reader accounts for); high for any
// other malformed file (still rejected by default).
constexpr std::array kCodes = {
    CodeInfo{Code::kIoOpen, "MG-IO-OPEN", Severity::kHigh},
    CodeInfo{Code::kIoRead, "MG-IO-READ", Severity::kHigh},
    CodeInfo{Code::kIoNotRegular, "MG-IO-NOT-REGULAR", Severity::kHigh},
    CodeInfo{Code::kIoChanged, "MG-IO-CHANGED", Severity::kHigh},
    CodeInfo{Code::kStTruncated, "MG-ST-TRUNCATED", Severity::kHigh},
    CodeInfo{Code::kStHeaderTooLarge, "MG-ST-HEADER-TOO-LARGE", Severity::kHigh},
    CodeInfo{Code::kStOverlap, "MG-ST-OVERLAP", Severity::kCritical},
    CodeInfo{Code::kStShapeOverflow, "MG-ST-SHAPE-OVERFLOW", Severity::kCritical},
    CodeInfo{Code::kStHeaderLength, "MG-ST-HEADER-LENGTH", Severity::kHigh},
    CodeInfo{Code::kStHeaderEmpty, "MG-ST-HEADER-EMPTY", Severity::kHigh},
    CodeInfo{Code::kStHeaderUtf8, "MG-ST-HEADER-UTF8", Severity::kHigh},
    CodeInfo{Code::kStHeaderStart, "MG-ST-HEADER-START", Severity::kHigh},
    CodeInfo{Code::kStJsonSyntax, "MG-ST-JSON-SYNTAX", Severity::kHigh},
    CodeInfo{Code::kStJsonDepth, "MG-ST-JSON-DEPTH", Severity::kHigh},
    CodeInfo{Code::kStDuplicateTensor, "MG-ST-DUPLICATE-TENSOR", Severity::kCritical},
    CodeInfo{Code::kStDuplicateKey, "MG-ST-DUPLICATE-KEY", Severity::kCritical},
    CodeInfo{Code::kStBadName, "MG-ST-BAD-NAME", Severity::kHigh},
    CodeInfo{Code::kStNameTooLong, "MG-ST-NAME-TOO-LONG", Severity::kHigh},
    CodeInfo{Code::kStTooManyTensors, "MG-ST-TOO-MANY-TENSORS", Severity::kHigh},
    CodeInfo{Code::kStMetadataType, "MG-ST-METADATA-TYPE", Severity::kHigh},
    CodeInfo{Code::kStEntryType, "MG-ST-ENTRY-TYPE", Severity::kHigh},
    CodeInfo{Code::kStEntryUnknownField, "MG-ST-ENTRY-UNKNOWN-FIELD", Severity::kHigh},
    CodeInfo{Code::kStEntryMissingField, "MG-ST-ENTRY-MISSING-FIELD", Severity::kHigh},
    CodeInfo{Code::kStFieldType, "MG-ST-FIELD-TYPE", Severity::kHigh},
    CodeInfo{Code::kStUnknownDtype, "MG-ST-UNKNOWN-DTYPE", Severity::kHigh},
    CodeInfo{Code::kStRankTooLarge, "MG-ST-RANK-TOO-LARGE", Severity::kHigh},
    CodeInfo{Code::kStPartialByte, "MG-ST-PARTIAL-BYTE", Severity::kHigh},
    CodeInfo{Code::kStSizeMismatch, "MG-ST-SIZE-MISMATCH", Severity::kCritical},
    CodeInfo{Code::kStOffsetsReversed, "MG-ST-OFFSETS-REVERSED", Severity::kCritical},
    CodeInfo{Code::kStGap, "MG-ST-GAP", Severity::kCritical},
    CodeInfo{Code::kStAlias, "MG-ST-ALIAS", Severity::kCritical},
    CodeInfo{Code::kStOutOfBounds, "MG-ST-OUT-OF-BOUNDS", Severity::kCritical},
    CodeInfo{Code::kStTrailingBytes, "MG-ST-TRAILING-BYTES", Severity::kCritical},
    CodeInfo{Code::kStTooManyKeys, "MG-ST-TOO-MANY-KEYS", Severity::kHigh},
    CodeInfo{Code::kStReservedEscaped, "MG-ST-RESERVED-ESCAPED", Severity::kCritical},
    // Signatures: tampering is critical. Whether a missing or untrusted
    // signature is a finding at all is the policy's call (signatures.required);
    // when it is reported, it blocks.
    CodeInfo{Code::kSigMissing, "MG-SIG-MISSING", Severity::kHigh},
    CodeInfo{Code::kSigUntrusted, "MG-SIG-UNTRUSTED", Severity::kHigh},
    CodeInfo{Code::kSigBadRecord, "MG-SIG-BAD-RECORD", Severity::kCritical},
    CodeInfo{Code::kSigUnknownAlg, "MG-SIG-UNKNOWN-ALG", Severity::kCritical},
    CodeInfo{Code::kSigUnknownKey, "MG-SIG-UNKNOWN-KEY", Severity::kCritical},
    CodeInfo{Code::kSigBadSignature, "MG-SIG-BAD-SIGNATURE", Severity::kCritical},
    CodeInfo{Code::kSigDigestMap, "MG-SIG-DIGEST-MAP", Severity::kCritical},
    CodeInfo{Code::kSigTensorMismatch, "MG-SIG-TENSOR-MISMATCH", Severity::kCritical},
    CodeInfo{Code::kSigDuplicateKid, "MG-SIG-DUPLICATE-KID", Severity::kCritical},
    CodeInfo{Code::kSigKeyFormat, "MG-SIG-KEY-FORMAT", Severity::kHigh},
    CodeInfo{Code::kSigKeyWrite, "MG-SIG-KEY-WRITE", Severity::kHigh},
    CodeInfo{Code::kSigCrypto, "MG-SIG-CRYPTO", Severity::kHigh},
    CodeInfo{Code::kSigOptions, "MG-SIG-OPTIONS", Severity::kHigh},
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
