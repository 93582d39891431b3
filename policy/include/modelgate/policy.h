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

// SignatureKind is a kind of signature that can satisfy signatures.required.
enum class SignatureKind : uint8_t {
  kEmbedded,  // STSIG v1 records in a safetensors file
  kDetached,  // an OMS (model_signing) bundle covering the file
};
// SignatureKindName: "embedded" | "detached" (the policy's and the report's word).
std::string_view SignatureKindName(SignatureKind k);

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
  // signatures.accept: the kinds that satisfy `signatures_required`, in the
  // order written (default: both). Never empty, no duplicates.
  std::vector<SignatureKind> accept = {SignatureKind::kDetached, SignatureKind::kEmbedded};
  // signatures.model: the model identity a satisfying signature must carry
  // (embedded: the record's model; detached: the bundle's subject name).
  std::optional<std::string> model;
  // signatures.minVersion: rollback protection; a satisfying signature's
  // version must be >= this (an unversioned signature never is).
  std::optional<uint64_t> min_version;
  // Limits: the core defaults, tightened by the policy (never loosened).
  core::Limits limits;
  scanner::ContainerLimits container_limits;
  scanner::PickleLimits pickle_limits;
  // YARA rule directories (resolved against base_dir) and scope.
  std::vector<std::string> yara_rule_dirs;
  scanner::YaraScope yara_scope = scanner::YaraScope::kHeader;
  std::vector<Exception> exceptions;
  // SHA-256 of the policy text ParsePolicy was given (for LoadPolicy: the
  // exact bytes read from the file): the report's policy.sha256.
  core::Sha256Digest sha256{};
  // Where some settings were written (line 0: absent), for lint messages.
  Location formats_where, threshold_where, keys_where;
  Location accept_where, model_where, min_version_where;
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
//    required; signatures.accept empty, with a duplicate, or with a name
//    other than detached / embedded; signatures.model empty, over
//    kMaxModelBytes or not UTF-8; signatures.minVersion 0 (it would
//    require nothing); duplicate key names or the same key twice; a key given both
//    or neither as `publicKey` and `file`; a PEM ParsePublicKeyPem rejects;
//    an unreadable key file; an extraAllowedGlobals entry that is not
//    "module.qualname" (split at the last dot; "module:qual.name" for a
//    dotted qualname) or that the scanner classifies as critical; a
//    duplicate list entry; a YARA dir that is not a directory; an exception
//    with a malformed id (MG-AREA-NAME), sha256 (64 lowercase hex), empty
//    reason or invalid date, or the same (id, sha256) twice.
inline constexpr size_t kMaxModelBytes = 1024;
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
  // Names of the trusted keys whose records verified (distinct keys): of
  // the kind that satisfied the policy, else of the embedded records.
  std::vector<std::string> signed_by;
  std::vector<std::string> signed_kids;  // their key ids (hex), same order
  // The kind `signature_status` is about: the kind that satisfied the
  // policy; else the kind whose failure is reported (an invalid embedded
  // record, an invalid bundle, a file changed since the bundle signed it,
  // a trusted signature with the wrong model or version); "" when there is
  // no signature to speak of (missing, not-checked, ignored).
  std::string signature_kind;
  // The signed model and version of the signature that satisfied the
  // policy ("" / nullopt: none signed, or nothing satisfied it).
  std::string signed_model;
  std::optional<uint64_t> signed_version;

  // Findings as reported (after waivers), for the existing report writers.
  std::vector<scanner::Finding> ReportedFindings() const;
};

// DetachedState is what one present file is against a verified bundle
// (the same enumerators, in the same order, as signer::oms::FileState).
enum class DetachedState : uint8_t {
  kSigned,   // in the bundle, every digest equal
  kChanged,  // in the bundle, a digest or the size differs
  kAdded,    // not in the bundle (not covered by it)
  kIgnored,  // under one of the bundle's ignore paths: needs no signature
};

// DetachedEvidence is one file against a detached bundle.
struct DetachedEvidence {
  // valid | invalid | untrusted | missing (no bundle for this file's tree).
  signer::SigStatus bundle_status = signer::SigStatus::kMissing;
  DetachedState state = DetachedState::kAdded;  // read only for a valid bundle
  std::string model;                            // the bundle's subject name
  std::optional<uint64_t> version;              // the bundle's signed version
  // Trusted keys whose DSSE signatures verified, and their key ids (hex,
  // PublicKey::kid_hex), in the same order.
  std::vector<std::string> key_names, kids;
  // Why the bundle is not valid (invalid / untrusted), for the message.
  std::string reason;
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
//     (high, blocking). `unknown` in the list also admits json, jinja and
//     python (the text formats that were reported unknown before issue 14).
//  3. pickle mode reject: a file with any MG-PK-* finding, any pickle
//     import or a pickle-bearing format (pickle, pytorch-zip, pytorch-tar,
//     joblib) gets MG-POLICY-PICKLE (critical, blocking) at the first
//     pickle finding's offset. Mode report: MG-PK-* findings never block.
//  - `detached`: the file against a detached bundle, or nullopt when no
//    bundle was looked for (as bundle_status kMissing).
//  4. signatures: `verify` status invalid always adds MG-POLICY-SIGNATURE
//     (high, blocking): a failed record never downgrades to "unsigned is
//     fine"; so do a detached bundle that is invalid, and a file a valid
//     bundle covers whose bytes changed since it was signed ("changed: ..."),
//     whatever `accept` and `required` say. When required: a file the
//     valid bundle ignores (kIgnored) needs no signature; any other file
//     passes only when one accepted kind is verified by at least
//     `threshold` distinct policy keys each of whose signatures carries
//     model == signatures.model (when set) and version >= minVersion (when
//     set) — embedded: per verified record; detached: the bundle's subject
//     name and version, the file kSigned. Otherwise MG-POLICY-SIGNATURE,
//     the message starting with the status ("missing: ...", "untrusted:
//     ...") and naming, for each accepted kind, why it does not satisfy
//     the policy (a wrong model or a version below minVersion is
//     "untrusted").
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
                 const std::optional<core::Sha256Digest>& file_sha256, const Date& today,
                 const std::optional<DetachedEvidence>& detached = std::nullopt);

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
// only label signatures); threshold, accept, model or minVersion set while
// signatures are not required (they require nothing then); minVersion
// without model (a higher version of another model by the same keys
// passes); accept [embedded] while formats.allow lists a format other than
// safetensors (no such file can carry an embedded signature: all rejected);
// an extraAllowedGlobals entry the scanner already allows. No problems
// means the policy is good.
std::vector<Problem> LintPolicy(const std::string& path, const Date& today);
// LintParsed is LintPolicy for an already parsed policy (warnings only).
std::vector<Problem> LintParsed(const Policy& policy, const Date& today);

}  // namespace modelgate::policy
