// Codes and dtypes: the finding-id table, severities, and the dtype table.
#include <catch2/catch.hpp>

#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "support/st_expect.h"

namespace core = modelgate::core;

TEST_CASE("FindingId: every code has a unique MG- id", "[core][codes]") {
  std::set<std::string_view> seen;
  REQUIRE_FALSE(core::AllCodes().empty());
  for (core::Code code : core::AllCodes()) {
    CAPTURE(static_cast<int>(code));
    CHECK(code != core::Code::kOk);
    std::string_view id = core::FindingId(code);
    CHECK_FALSE(id.empty());
    CHECK(id.substr(0, 3) == "MG-");
    CHECK(id.find(' ') == std::string_view::npos);
    CHECK(seen.insert(id).second);
  }
  CHECK(core::FindingId(core::Code::kOk).empty());
}

TEST_CASE("FindingId: each code maps to the id documented in core.h", "[core][codes]") {
  // Copied from the comments next to each enumerator: ids are a stable
  // contract with reports, policies and exceptions.
  const std::vector<std::pair<core::Code, std::string_view>> documented = {
      {core::Code::kIoOpen, "MG-IO-OPEN"},
      {core::Code::kIoRead, "MG-IO-READ"},
      {core::Code::kIoNotRegular, "MG-IO-NOT-REGULAR"},
      {core::Code::kIoChanged, "MG-IO-CHANGED"},
      {core::Code::kStTruncated, "MG-ST-TRUNCATED"},
      {core::Code::kStHeaderTooLarge, "MG-ST-HEADER-TOO-LARGE"},
      {core::Code::kStOverlap, "MG-ST-OVERLAP"},
      {core::Code::kStShapeOverflow, "MG-ST-SHAPE-OVERFLOW"},
      {core::Code::kStHeaderLength, "MG-ST-HEADER-LENGTH"},
      {core::Code::kStHeaderEmpty, "MG-ST-HEADER-EMPTY"},
      {core::Code::kStHeaderUtf8, "MG-ST-HEADER-UTF8"},
      {core::Code::kStHeaderStart, "MG-ST-HEADER-START"},
      {core::Code::kStJsonSyntax, "MG-ST-JSON-SYNTAX"},
      {core::Code::kStJsonDepth, "MG-ST-JSON-DEPTH"},
      {core::Code::kStDuplicateTensor, "MG-ST-DUPLICATE-TENSOR"},
      {core::Code::kStDuplicateKey, "MG-ST-DUPLICATE-KEY"},
      {core::Code::kStBadName, "MG-ST-BAD-NAME"},
      {core::Code::kStNameTooLong, "MG-ST-NAME-TOO-LONG"},
      {core::Code::kStTooManyTensors, "MG-ST-TOO-MANY-TENSORS"},
      {core::Code::kStMetadataType, "MG-ST-METADATA-TYPE"},
      {core::Code::kStEntryType, "MG-ST-ENTRY-TYPE"},
      {core::Code::kStEntryUnknownField, "MG-ST-ENTRY-UNKNOWN-FIELD"},
      {core::Code::kStEntryMissingField, "MG-ST-ENTRY-MISSING-FIELD"},
      {core::Code::kStFieldType, "MG-ST-FIELD-TYPE"},
      {core::Code::kStUnknownDtype, "MG-ST-UNKNOWN-DTYPE"},
      {core::Code::kStRankTooLarge, "MG-ST-RANK-TOO-LARGE"},
      {core::Code::kStPartialByte, "MG-ST-PARTIAL-BYTE"},
      {core::Code::kStSizeMismatch, "MG-ST-SIZE-MISMATCH"},
      {core::Code::kStOffsetsReversed, "MG-ST-OFFSETS-REVERSED"},
      {core::Code::kStGap, "MG-ST-GAP"},
      {core::Code::kStAlias, "MG-ST-ALIAS"},
      {core::Code::kStOutOfBounds, "MG-ST-OUT-OF-BOUNDS"},
      {core::Code::kStTrailingBytes, "MG-ST-TRAILING-BYTES"},
      {core::Code::kStTooManyKeys, "MG-ST-TOO-MANY-KEYS"},
      {core::Code::kStReservedEscaped, "MG-ST-RESERVED-ESCAPED"},
      {core::Code::kSigMissing, "MG-SIG-MISSING"},
      {core::Code::kSigUntrusted, "MG-SIG-UNTRUSTED"},
      {core::Code::kSigBadRecord, "MG-SIG-BAD-RECORD"},
      {core::Code::kSigUnknownAlg, "MG-SIG-UNKNOWN-ALG"},
      {core::Code::kSigUnknownKey, "MG-SIG-UNKNOWN-KEY"},
      {core::Code::kSigBadSignature, "MG-SIG-BAD-SIGNATURE"},
      {core::Code::kSigDigestMap, "MG-SIG-DIGEST-MAP"},
      {core::Code::kSigTensorMismatch, "MG-SIG-TENSOR-MISMATCH"},
      {core::Code::kSigDuplicateKid, "MG-SIG-DUPLICATE-KID"},
      {core::Code::kSigKeyFormat, "MG-SIG-KEY-FORMAT"},
      {core::Code::kSigKeyWrite, "MG-SIG-KEY-WRITE"},
      {core::Code::kSigCrypto, "MG-SIG-CRYPTO"},
      {core::Code::kSigOptions, "MG-SIG-OPTIONS"},
      {core::Code::kSigKeyEncrypted, "MG-SIG-KEY-ENCRYPTED"},
      {core::Code::kSigKeyPassphrase, "MG-SIG-KEY-PASSPHRASE"},
      {core::Code::kSigPkcs11Uri, "MG-SIG-PKCS11-URI"},
      {core::Code::kSigPkcs11Token, "MG-SIG-PKCS11-TOKEN"},
      {core::Code::kSigPkcs11Login, "MG-SIG-PKCS11-LOGIN"},
      {core::Code::kSigPkcs11Object, "MG-SIG-PKCS11-OBJECT"},
      {core::Code::kSigPkcs11, "MG-SIG-PKCS11"},
      {core::Code::kSetIndex, "MG-SET-INDEX"},
      {core::Code::kSetShardPath, "MG-SET-SHARD-PATH"},
      {core::Code::kSetLimit, "MG-SET-LIMIT"},
      {core::Code::kSetShardMissing, "MG-SET-SHARD-MISSING"},
      {core::Code::kSetTensorMissing, "MG-SET-TENSOR-MISSING"},
      {core::Code::kSetTensorMisplaced, "MG-SET-TENSOR-MISPLACED"},
      {core::Code::kSetTensorDuplicate, "MG-SET-TENSOR-DUPLICATE"},
      {core::Code::kSetTensorExtra, "MG-SET-TENSOR-EXTRA"},
      {core::Code::kSetTotalSize, "MG-SET-TOTAL-SIZE"},
      {core::Code::kSetDigest, "MG-SET-DIGEST"},
      {core::Code::kSetPosition, "MG-SET-POSITION"},
      {core::Code::kSetIncomplete, "MG-SET-INCOMPLETE"},
      {core::Code::kSetNotSigned, "MG-SET-NOT-SIGNED"},
      {core::Code::kConvUnsupported, "MG-CONV-UNSUPPORTED"},
      {core::Code::kConvNotAllowed, "MG-CONV-NOT-ALLOWED"},
      {core::Code::kConvNotTensor, "MG-CONV-NOT-TENSOR"},
      {core::Code::kConvStorage, "MG-CONV-STORAGE"},
      {core::Code::kConvName, "MG-CONV-NAME"},
      {core::Code::kConvLimit, "MG-CONV-LIMIT"},
  };
  CHECK(core::AllCodes().size() == documented.size());
  for (const auto& [code, id] : documented) {
    CAPTURE(id);
    CHECK(core::FindingId(code) == id);
  }
  std::set<core::Code> listed(core::AllCodes().begin(), core::AllCodes().end());
  for (const auto& [code, id] : documented) {
    CAPTURE(id);
    CHECK(listed.count(code) == 1);
  }
}

TEST_CASE("FindingId: codes are append-only numbers", "[core][codes]") {
  CHECK(static_cast<int>(core::Code::kStTruncated) == 100);
  CHECK(static_cast<int>(core::Code::kStHeaderTooLarge) == 101);
  CHECK(static_cast<int>(core::Code::kStOverlap) == 102);
  CHECK(static_cast<int>(core::Code::kStShapeOverflow) == 103);
  CHECK(static_cast<int>(core::Code::kStTooManyKeys) == 129);
  CHECK(static_cast<int>(core::Code::kStReservedEscaped) == 130);
}

TEST_CASE("FindingId: every code keeps its number and default severity", "[core][codes]") {
  // The values and severities before the table moved to findings.def
  // (core/src/codes.cc at 47979d1): reports, policies and exceptions rely
  // on both.
  struct Want {
    core::Code code;
    int value;
    core::Severity severity;
  };
  const std::vector<Want> want = {
      {core::Code::kIoOpen, 10, core::Severity::kHigh},
      {core::Code::kIoRead, 11, core::Severity::kHigh},
      {core::Code::kIoNotRegular, 12, core::Severity::kHigh},
      {core::Code::kIoChanged, 13, core::Severity::kHigh},
      {core::Code::kStTruncated, 100, core::Severity::kHigh},
      {core::Code::kStHeaderTooLarge, 101, core::Severity::kHigh},
      {core::Code::kStOverlap, 102, core::Severity::kCritical},
      {core::Code::kStShapeOverflow, 103, core::Severity::kCritical},
      {core::Code::kStHeaderLength, 104, core::Severity::kHigh},
      {core::Code::kStHeaderEmpty, 105, core::Severity::kHigh},
      {core::Code::kStHeaderUtf8, 106, core::Severity::kHigh},
      {core::Code::kStHeaderStart, 107, core::Severity::kHigh},
      {core::Code::kStJsonSyntax, 108, core::Severity::kHigh},
      {core::Code::kStJsonDepth, 109, core::Severity::kHigh},
      {core::Code::kStDuplicateTensor, 110, core::Severity::kCritical},
      {core::Code::kStDuplicateKey, 111, core::Severity::kCritical},
      {core::Code::kStBadName, 112, core::Severity::kHigh},
      {core::Code::kStNameTooLong, 113, core::Severity::kHigh},
      {core::Code::kStTooManyTensors, 114, core::Severity::kHigh},
      {core::Code::kStMetadataType, 115, core::Severity::kHigh},
      {core::Code::kStEntryType, 116, core::Severity::kHigh},
      {core::Code::kStEntryUnknownField, 117, core::Severity::kHigh},
      {core::Code::kStEntryMissingField, 118, core::Severity::kHigh},
      {core::Code::kStFieldType, 119, core::Severity::kHigh},
      {core::Code::kStUnknownDtype, 120, core::Severity::kHigh},
      {core::Code::kStRankTooLarge, 121, core::Severity::kHigh},
      {core::Code::kStPartialByte, 122, core::Severity::kHigh},
      {core::Code::kStSizeMismatch, 123, core::Severity::kCritical},
      {core::Code::kStOffsetsReversed, 124, core::Severity::kCritical},
      {core::Code::kStGap, 125, core::Severity::kCritical},
      {core::Code::kStAlias, 126, core::Severity::kCritical},
      {core::Code::kStOutOfBounds, 127, core::Severity::kCritical},
      {core::Code::kStTrailingBytes, 128, core::Severity::kCritical},
      {core::Code::kStTooManyKeys, 129, core::Severity::kHigh},
      {core::Code::kStReservedEscaped, 130, core::Severity::kCritical},
      {core::Code::kSigMissing, 300, core::Severity::kHigh},
      {core::Code::kSigUntrusted, 301, core::Severity::kHigh},
      {core::Code::kSigBadRecord, 302, core::Severity::kCritical},
      {core::Code::kSigUnknownAlg, 303, core::Severity::kCritical},
      {core::Code::kSigUnknownKey, 304, core::Severity::kCritical},
      {core::Code::kSigBadSignature, 305, core::Severity::kCritical},
      {core::Code::kSigDigestMap, 306, core::Severity::kCritical},
      {core::Code::kSigTensorMismatch, 307, core::Severity::kCritical},
      {core::Code::kSigDuplicateKid, 308, core::Severity::kCritical},
      {core::Code::kSigKeyFormat, 309, core::Severity::kHigh},
      {core::Code::kSigKeyWrite, 310, core::Severity::kHigh},
      {core::Code::kSigCrypto, 311, core::Severity::kHigh},
      {core::Code::kSigOptions, 312, core::Severity::kHigh},
      {core::Code::kSigKeyEncrypted, 313, core::Severity::kHigh},
      {core::Code::kSigKeyPassphrase, 314, core::Severity::kHigh},
      {core::Code::kSigPkcs11Uri, 315, core::Severity::kHigh},
      {core::Code::kSigPkcs11Token, 316, core::Severity::kHigh},
      {core::Code::kSigPkcs11Login, 317, core::Severity::kHigh},
      {core::Code::kSigPkcs11Object, 318, core::Severity::kHigh},
      {core::Code::kSigPkcs11, 319, core::Severity::kHigh},
      {core::Code::kSetIndex, 400, core::Severity::kHigh},
      {core::Code::kSetShardPath, 401, core::Severity::kCritical},
      {core::Code::kSetLimit, 402, core::Severity::kHigh},
      {core::Code::kSetShardMissing, 403, core::Severity::kHigh},
      {core::Code::kSetTensorMissing, 404, core::Severity::kHigh},
      {core::Code::kSetTensorMisplaced, 405, core::Severity::kCritical},
      {core::Code::kSetTensorDuplicate, 406, core::Severity::kCritical},
      {core::Code::kSetTensorExtra, 407, core::Severity::kCritical},
      {core::Code::kSetTotalSize, 408, core::Severity::kMedium},
      {core::Code::kSetDigest, 409, core::Severity::kCritical},
      {core::Code::kSetPosition, 410, core::Severity::kCritical},
      {core::Code::kSetIncomplete, 411, core::Severity::kHigh},
      {core::Code::kSetNotSigned, 412, core::Severity::kHigh},
      {core::Code::kConvUnsupported, 500, core::Severity::kHigh},
      {core::Code::kConvNotAllowed, 501, core::Severity::kHigh},
      {core::Code::kConvNotTensor, 502, core::Severity::kHigh},
      {core::Code::kConvStorage, 503, core::Severity::kCritical},
      {core::Code::kConvName, 504, core::Severity::kHigh},
      {core::Code::kConvLimit, 505, core::Severity::kHigh},
  };
  CHECK(core::AllCodes().size() == want.size());
  for (const auto& w : want) {
    CAPTURE(core::FindingId(w.code));
    CHECK(static_cast<int>(w.code) == w.value);
    CHECK(core::DefaultSeverity(w.code) == w.severity);
  }
}

TEST_CASE("Severity names round-trip", "[core][codes]") {
  const std::vector<std::pair<core::Severity, std::string_view>> names = {
      {core::Severity::kCritical, "critical"}, {core::Severity::kHigh, "high"},
      {core::Severity::kMedium, "medium"},     {core::Severity::kLow, "low"},
      {core::Severity::kInfo, "info"}};
  for (const auto& [sev, name] : names) {
    CAPTURE(name);
    CHECK(core::SeverityName(sev) == name);
    core::Severity parsed = core::Severity::kInfo;
    REQUIRE(core::ParseSeverity(name, &parsed));
    CHECK(parsed == sev);
  }
  core::Severity unused = core::Severity::kLow;
  CHECK_FALSE(core::ParseSeverity("HIGH", &unused));
  CHECK_FALSE(core::ParseSeverity("", &unused));
  CHECK_FALSE(core::ParseSeverity("high ", &unused));
  CHECK(unused == core::Severity::kLow);
}

TEST_CASE("DefaultSeverity: safetensors findings block by default", "[core][codes]") {
  // The default policy rejects high and above; every malformed file must.
  // The one exception is an index's metadata.total_size, which no loader
  // reads (a report-only number; the set's placement rules block).
  for (core::Code code : core::AllCodes()) {
    CAPTURE(core::FindingId(code));
    core::Severity s = core::DefaultSeverity(code);
    if (code == core::Code::kSetTotalSize) {
      CHECK(s == core::Severity::kMedium);
      continue;
    }
    CHECK((s == core::Severity::kCritical || s == core::Severity::kHigh));
  }
}

TEST_CASE("dtype table: names and bit widths", "[core][dtype]") {
  const std::vector<std::pair<std::string_view, uint32_t>> want = {
      {"BOOL", 8},  {"U8", 8},       {"I8", 8},      {"F8_E5M2", 8},    {"F8_E4M3", 8},
      {"F8_E8M0", 8}, {"F8_E4M3FNUZ", 8}, {"F8_E5M2FNUZ", 8}, {"F4", 4}, {"F6_E2M3", 6},
      {"F6_E3M2", 6}, {"I16", 16},   {"U16", 16},    {"F16", 16},       {"BF16", 16},
      {"I32", 32},  {"U32", 32},     {"F32", 32},    {"I64", 64},       {"U64", 64},
      {"F64", 64},  {"C64", 64}};
  CHECK(core::AllDtypes().size() == want.size());
  for (const auto& [name, bits] : want) {
    CAPTURE(name);
    core::Dtype d{};
    REQUIRE(core::ParseDtype(name, &d));
    CHECK(core::DtypeName(d) == name);
    CHECK(core::DtypeBits(d) == bits);
  }
}

TEST_CASE("dtype table: ParseDtype inverts DtypeName for every dtype", "[core][dtype]") {
  std::set<std::string_view> names;
  for (core::Dtype d : core::AllDtypes()) {
    std::string_view name = core::DtypeName(d);
    CAPTURE(name);
    CHECK(names.insert(name).second);
    core::Dtype parsed{};
    REQUIRE(core::ParseDtype(name, &parsed));
    CHECK(parsed == d);
    CHECK(core::DtypeBits(d) > 0);
  }
}

TEST_CASE("dtype table: only exact spellings parse", "[core][dtype]") {
  for (std::string_view name : {"f32", "F32 ", " F32", "", "F", "float32", "F128", "B"}) {
    CAPTURE(std::string(name));
    core::Dtype d = core::Dtype::kU8;
    CHECK_FALSE(core::ParseDtype(name, &d));
  }
  // An embedded NUL is not a terminator.
  core::Dtype d{};
  CHECK_FALSE(core::ParseDtype(std::string_view("F32\0", 4), &d));
}
