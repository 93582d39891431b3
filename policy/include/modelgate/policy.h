// modelgate policy: the operator's rules (trusted keys, required signatures,
// formats, limits, exceptions) turned into a pass/fail verdict. Users read
// the file format in docs/policy.md (JSON Schema:
// docs/schemas/policy.schema.json); the comments below are the contract. No
// yaml-cpp types appear here.
//
// Errors. A policy that cannot be used is a core::Error whose message is
// "<file>:<line>:<column>: <what is wrong>" (1-based line and column, as
// compilers print them; "<file>: ..." when there is no position, e.g. an
// empty file), `offset` the byte offset in the policy file (or kNoOffset),
// and `code` kIoOpen when the policy file itself cannot be opened, kIoRead
// for everything else (syntax, strictness, types, values, key files, PEM).
// core has no policy codes and they are append-only there; every policy
// error means the same to the CLI: the gate cannot judge, exit 2.
#pragma once

#include <compare>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "modelgate/core.h"
#include "modelgate/scanner.h"
#include "modelgate/signer.h"

namespace modelgate::policy {

inline constexpr std::string_view kApiVersion = "modelgate/v1";
inline constexpr std::string_view kKind = "Policy";

// Finding ids the policy adds to a file's findings.
inline constexpr std::string_view kFindingFormat = "MG-POLICY-FORMAT";        // high
inline constexpr std::string_view kFindingPickle = "MG-POLICY-PICKLE";        // critical
inline constexpr std::string_view kFindingSignature = "MG-POLICY-SIGNATURE";  // high
inline constexpr std::string_view kFindingExceptionExpired =
    "MG-POLICY-EXCEPTION-EXPIRED";                                            // info

// Date is a calendar date (exception expiry). Valid dates only.
struct Date {
  int year = 1970;
  int month = 1;
  int day = 1;
  auto operator<=>(const Date&) const = default;
  bool operator==(const Date&) const = default;
};
// ParseDate reads exactly "YYYY-MM-DD" (a real Gregorian date, year 1970-9999).
std::optional<Date> ParseDate(std::string_view text);
// FormatDate is "YYYY-MM-DD".
std::string FormatDate(const Date& d);
// Today is the current UTC date.
Date Today();
// DaysBetween is `to` - `from` in days.
int64_t DaysBetween(const Date& from, const Date& to);

// Location is where something was written in the policy (1-based).
struct Location {
  int line = 0;
  int column = 0;
};

enum class PickleMode : uint8_t {
  kReject,     // any pickle content is a critical MG-POLICY-PICKLE finding
  kAllowlist,  // the scanner's classification decides (default)
  kReport,     // MG-PK-* findings are reported but never block
};
// PickleModeName: "reject" | "allowlist" | "report".
std::string_view PickleModeName(PickleMode m);

// TrustedKey is one entry of signatures.keys.
struct TrustedKey {
  std::string name;
  signer::PublicKey key;  // key.name == name
  std::string file;       // resolved path when given as `file:`, else ""
  Location where;
};

// Exception waives one finding id for one exact file (SHA-256 of the whole
// file) until (and including) `expires`.
struct Exception {
  std::string id;
  core::Sha256Digest sha256{};
  std::string reason;
  Date expires;
  Location where;
};

// Policy is a parsed, validated policy. Every field has the default that
// an absent key means; the defaults equal `modelgate scan` without a policy.
struct Policy {
  std::string source;    // the policy's file name, for messages
  std::string base_dir;  // relative paths in the policy resolve against this
  core::Severity fail_on = core::Severity::kHigh;
  // Formats a file may have; nullopt (no formats.allow) allows every format.
  std::optional<std::vector<scanner::Format>> allowed_formats;
  PickleMode pickle_mode = PickleMode::kAllowlist;
  std::vector<std::pair<std::string, std::string>> extra_allowed_globals;
  bool signatures_required = false;
  uint32_t threshold = 1;
  std::vector<TrustedKey> keys;
  // Limits: the core defaults, tightened by the policy (never loosened).
  core::Limits limits;
  scanner::ContainerLimits container_limits;
  scanner::PickleLimits pickle_limits;
  // YARA rule directories (resolved against base_dir) and scope.
  std::vector<std::string> yara_rule_dirs;
  scanner::YaraScope yara_scope = scanner::YaraScope::kHeader;
  std::vector<Exception> exceptions;
  // Where some settings were written (line 0: absent), for lint messages.
  Location formats_where, threshold_where, keys_where;
  std::vector<Location> extra_globals_where;  // one per extra_allowed_globals entry
};

// ParsePolicy parses policy YAML `text` strictly. `source_name` prefixes
// error messages; `base_dir` resolves relative key files and YARA dirs
// (empty: the current directory). Key files are read here (a missing or
// malformed key is an error now, not at the first file). Strict means each
// of these is an error at its line and column:
//  - YAML: a syntax error; more than one document; an empty file or an
//    empty document; anchors and aliases; any tag (`!!python/object`,
//    `!!str`, `!foo`); a key that is not a plain string; a duplicate key in
//    any mapping (yaml-cpp's node API keeps one silently: the parser's
//    event stream is walked instead); nesting deeper than 32.
//  - shape: an unknown key at any level; a missing apiVersion / kind (the
//    only required keys); a value of the wrong kind (mapping, sequence,
//    scalar, null).
//  - scalars: booleans are exactly plain `true` / `false` (`yes`, `on`,
//    `y`, `True`, and a quoted "true" are errors); integers are plain
//    decimal digits without sign, leading zeros or `_`; a string field
//    rejects a plain scalar that YAML 1.1 reads as a boolean, null or number
//    (quote it); enum values must be one of the names listed.
//  - values: limits above the core default (a policy may only tighten);
//    threshold < 1, or above the number of keys when signatures are
//    required; duplicate key names or the same key twice; a key given both
//    or neither as `publicKey` and `file`; a PEM ParsePublicKeyPem rejects;
//    an unreadable key file; an extraAllowedGlobals entry that is not
//    "module.qualname" (split at the last dot; "module:qual.name" for a
//    dotted qualname) or that the scanner classifies as critical; a
//    duplicate list entry; a YARA dir that is not a directory; an exception
//    with a malformed id (MG-AREA-NAME), sha256 (64 lowercase hex), empty
//    reason or invalid date, or the same (id, sha256) twice.
core::Result<Policy> ParsePolicy(std::string_view text, const std::string& source_name,
                                 const std::string& base_dir);
// LoadPolicy reads the file at `path` (at most 1 MiB, symlinks followed)
// and parses it with its own directory as base_dir.
core::Result<Policy> LoadPolicy(const std::string& path);

// ScanOptionsFor is the scanner configuration a policy asks for: its
// limits, extra allowed pickle globals, and YARA (the shipped rules plus the
// policy's dirs, compiled with scanner::CompileYaraRules; its errors are
// returned as they are).
core::Result<scanner::ScanOptions> ScanOptionsFor(const Policy& policy);
// VerifyOptionsFor carries the policy's core limits into verification.
signer::VerifyOptions VerifyOptionsFor(const Policy& policy);
// TrustedKeys is the policy's key list (each PublicKey named as the policy
// names it), for signer::VerifyFile.
std::vector<signer::PublicKey> TrustedKeys(const Policy& policy);
// NeedsFileSha256 is true when Evaluate can use the file's SHA-256 (the
// policy has exceptions); otherwise the caller may skip hashing.
bool NeedsFileSha256(const Policy& policy);
// FileSha256 hashes the whole regular file at `path` (a final symlink is
// followed only when `follow_symlink`, as for a path named on the command line).
core::Result<core::Sha256Digest> FileSha256(const std::string& path, bool follow_symlink = false,
                                            const core::HashOptions& hash = {});
// FileSha256 over a descriptor: the SHA-256 of the `size_bytes` bytes of the
// regular file open at `fd` (pread through core::HashRanges; the fd's
// position is untouched). A verdict hashes the fd it scanned, never a
// reopened path; a file that shrinks meanwhile is kIoChanged.
core::Result<core::Sha256Digest> FileSha256(int fd, uint64_t size_bytes,
                                            const core::HashOptions& hash = {});

enum class Decision : uint8_t { kPass, kReject, kError };
// DecisionName: "pass" | "reject" | "error" (the report's verdict).
std::string_view DecisionName(Decision d);

// JudgedFinding is one finding after the policy: `finding` as it should be
// reported, and why it counts or not.
struct JudgedFinding {
  scanner::Finding finding;
  // Severity before a waiver (equal to finding.severity otherwise).
  core::Severity original_severity = core::Severity::kInfo;
  bool blocking = false;  // this finding alone rejects the file
  bool waived = false;    // an exception applied (finding is now info)
};

// Verdict is the policy's judgment of one file.
struct Verdict {
  Decision decision = Decision::kPass;
  // Every finding of the scan (same order) followed by the policy's own
  // (MG-POLICY-*), each marked blocking or not.
  std::vector<JudgedFinding> findings;
  // The report's signature.status: "valid" | "invalid" | "missing" |
  // "untrusted" | "not-checked".
  std::string signature_status = "not-checked";
  // Names of the trusted keys whose records verified (distinct keys).
  std::vector<std::string> signed_by;

  // Findings as reported (after waivers), for the existing report writers.
  std::vector<scanner::Finding> ReportedFindings() const;
};

// Evaluate judges `scan` under `policy`.
//  - `verify`: signer::VerifyFile's result with TrustedKeys(policy), or
//    nullopt when the file was not verified (not safetensors: no embedded
//    signature can exist, so a required signature is "missing").
//  - `file_sha256`: SHA-256 of the whole file; nullopt when not computed
//    (then no exception can match; see NeedsFileSha256).
//  - `today`: the date exceptions are checked against (inclusive expiry).
// Rules, in order:
//  1. io_error: decision kError; nothing else is judged.
//  2. formats.allow set and the file's format not in it: MG-POLICY-FORMAT
//     (high, blocking).
//  3. pickle mode reject: a file with any MG-PK-* finding, any pickle
//     import or a pickle-bearing format (pickle, pytorch-zip, pytorch-tar,
//     joblib) gets MG-POLICY-PICKLE (critical, blocking) at the first
//     pickle finding's offset. Mode report: MG-PK-* findings never block.
//  4. signatures: `verify` status invalid always adds MG-POLICY-SIGNATURE
//     (high, blocking): a failed record never downgrades to "unsigned is
//     fine". When required: missing, untrusted, or fewer than `threshold`
//     distinct policy keys among verified_kids also add it; the message
//     starts with the status ("missing: ...", "untrusted: ...").
//  5. exceptions: an unexpired exception whose id and sha256 match turns
//     each matching finding (scanner or MG-POLICY-*) into info, message
//     "waived until DATE (reason); was SEVERITY: original message", never
//     blocking. An expired exception whose sha256 matches applies to
//     nothing and adds MG-POLICY-EXCEPTION-EXPIRED (info).
//  6. failOn: any other scanner finding at or above fail_on blocks;
//     MG-POLICY-FORMAT/-PICKLE/-SIGNATURE block whatever fail_on says.
//  7. scan.unparseable rejects (a file that cannot be parsed is never
//     passed, even in pickle report mode); else any blocking finding
//     rejects; else pass.
Verdict Evaluate(const Policy& policy, const scanner::FileScan& scan,
                 const std::optional<signer::VerifyResult>& verify,
                 const std::optional<core::Sha256Digest>& file_sha256, const Date& today);

// Problem is one thing `modelgate policy lint` reports.
struct Problem {
  enum class Level : uint8_t { kError, kWarning };
  Level level = Level::kError;
  std::string message;  // "<file>:<line>:<column>: <what>"
};

// LintPolicy loads `path` and reports problems: the parse error (one
// kError, as LoadPolicy) or warnings about a valid policy: an exception
// that expired or expires within 30 days of `today`; formats.allow empty
// (every file is rejected); keys listed but signatures not required (they
// only label signatures); threshold set while signatures are not required;
// an extraAllowedGlobals entry the scanner already allows. No problems
// means the policy is good.
std::vector<Problem> LintPolicy(const std::string& path, const Date& today);
// LintParsed is LintPolicy for an already parsed policy (warnings only).
std::vector<Problem> LintParsed(const Policy& policy, const Date& today);

}  // namespace modelgate::policy
