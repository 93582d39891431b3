// modelgate detached signatures: OpenSSF Model Signing (OMS) bundles, the
// `model.sig` that `model_signing` (sigstore/model-transparency) 1.1.1 writes
// and verifies with `sign key` / `verify key`. A bundle is a Sigstore bundle
// v0.3 holding a DSSE envelope over an in-toto Statement v1 whose predicate
// (https://model_signing/signature/v1.0) lists one resource per file (files
// mode) or per shard of a file (shards mode) with its SHA-256, and whose one
// subject is the model's name and the root digest (SHA-256 over the
// resources' raw digests in the order listed).
//
// Reading is stricter than model_signing where it is lax (each rule below
// names its MG-OMS finding): duplicate JSON keys anywhere; unknown fields;
// resource names that are not canonical relative '/'-paths; duplicate
// resources; shards that do not tile their file; every DSSE signature must
// verify (model_signing checks only the first).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "modelgate/core.h"
#include "modelgate/signer.h"

namespace modelgate::signer::oms {

// kBundleName is the file a model directory carries its bundle in, at its
// top (model_signing's default).
inline constexpr std::string_view kBundleName = "model.sig";
inline constexpr std::string_view kBundleMediaType = "application/vnd.dev.sigstore.bundle.v0.3+json";
inline constexpr std::string_view kPayloadType = "application/vnd.in-toto+json";
inline constexpr std::string_view kStatementType = "https://in-toto.io/Statement/v1";
inline constexpr std::string_view kPredicateType = "https://model_signing/signature/v1.0";
// kVersionAnnotation: our extension, the subject's annotation carrying the
// signed model version (decimal text), set by `sign --detached --version N`.
inline constexpr std::string_view kVersionAnnotation = "modelgate.version";

// kMaxBundleBytes bounds the bundle file read (a 1M-file manifest is ~120 MB
// of base64; real models have at most thousands of files).
inline constexpr uint64_t kMaxBundleBytes = uint64_t{64} << 20;
// kMaxResources bounds the resources of one predicate.
inline constexpr size_t kMaxResources = 1'000'000;
// kMaxModelFiles bounds the regular files of a model walk (sign or verify).
inline constexpr size_t kMaxModelFiles = 1'000'000;
// kMaxWalkDepth bounds directory nesting (one descriptor per level is open).
inline constexpr size_t kMaxWalkDepth = 128;
// kMaxBundleJsonDepth bounds the nesting of the bundle and the statement
// (both are at most 5 deep).
inline constexpr size_t kMaxBundleJsonDepth = 16;

// DefaultIgnorePaths: what model_signing's --ignore_git_paths (its default)
// leaves out, relative to the model root, and records in ignore_paths.
std::span<const std::string_view> DefaultIgnorePaths();

// Reason is why a bundle or a model was rejected: one MG-OMS finding each
// (ReasonId), so the CLI reports the precise rule.
enum class Reason : uint8_t {
  kNone,
  kMalformed,     // MG-OMS-BUNDLE: JSON, duplicate key, field, type, base64, statement
  kMediaType,     // MG-OMS-MEDIA-TYPE: not the Sigstore bundle v0.3 media type
  kResourcePath,  // MG-OMS-RESOURCE-PATH: not a canonical relative path
  kDuplicate,     // MG-OMS-DUPLICATE-RESOURCE
  kShardTiling,   // MG-OMS-SHARD-TILING
  kRootDigest,    // MG-OMS-ROOT-DIGEST: subject digest is not over the resources
  kLimit,         // MG-OMS-LIMIT
  kBadSignature,  // MG-OMS-BAD-SIGNATURE: a DSSE signature does not verify
  kUntrusted,     // MG-OMS-UNTRUSTED: no trusted key made the signature
  kFileChanged,   // MG-OMS-FILE-CHANGED
  kFileMissing,   // MG-OMS-FILE-MISSING
  kFileUnsigned,  // MG-OMS-FILE-UNSIGNED
};
// ReasonId is the finding id of `reason` ("" for kNone).
std::string_view ReasonId(Reason reason);

enum class Method : uint8_t { kFiles, kShards };

// Resource is one signed item: a whole file (files mode: begin 0, end its
// size as hashed, which the bundle does not record -- so end is 0 there) or
// the bytes [begin, end) of a file (shards mode).
struct Resource {
  std::string path;  // relative '/'-path, or "." for a model that is one file
  uint64_t begin = 0, end = 0;
  core::Sha256Digest digest{};
};

struct Manifest {
  Method method = Method::kFiles;
  uint64_t shard_size = 0;                // shards mode only
  std::vector<Resource> resources;        // canonical order (ResourceLess)
  std::vector<std::string> ignore_paths;  // as recorded
  bool allow_symlinks = false;
  std::string subject_name;          // model dir basename / file basename
  std::optional<uint64_t> version;   // subject annotation kVersionAnnotation
  core::Sha256Digest root_digest{};  // the subject's digest
};

// PathLess is model_signing's order of paths (Python PurePosixPath): by
// '/'-separated components, each compared bytewise, so "a/x" < "a-b" <
// "a.txt" (bytewise, "a-b" < "a.txt" < "a/x").
bool PathLess(std::string_view a, std::string_view b);
// ResourceLess orders by (path PathLess, begin, end): the order model_signing
// writes resources in.
bool ResourceLess(const Resource& a, const Resource& b);
// RootDigest is SHA-256 over the raw digests of `resources` in the given order.
core::Sha256Digest RootDigest(std::span<const Resource> resources);

struct BundleSignature {
  std::vector<uint8_t> sig;  // ECDSA: DER; Ed25519: 64 raw bytes
  std::string keyid;
};

struct Bundle {
  Manifest manifest;
  std::string payload_type;
  std::string payload;  // the decoded statement bytes (what PAE covers)
  std::vector<BundleSignature> signatures;
  std::string hint;  // verificationMaterial.publicKey.hint, "" when absent
};

struct BundleLimits {
  uint64_t max_bundle_bytes = kMaxBundleBytes;
  size_t max_resources = kMaxResources;
};

// ParseBundle reads a bundle strictly. Errors are kSigBadRecord (MG-OMS
// reason in `*reason` when given): not one JSON object, a duplicate key at
// any level of the bundle or the statement, an unknown or missing field, a
// wrong type, non-canonical base64 or hex, no signature, an unknown media
// type, payload type, statement type or predicate type, not exactly one
// subject, a hash type other than sha256, a resource algorithm other than
// "sha256" (files) / "sha256-sharded-N" (shards), a resource name that is
// not a canonical relative '/'-path ("./x", "x/..", "/x", "a\\b", "a//b",
// empty, NUL or control bytes; "." only as the one file of a one-file
// model), a duplicate resource, shards that do not tile [0, size) of their
// file in shard_size steps, a resource under an ignore path, no resource,
// and a subject digest other than RootDigest of the resources as listed.
// Over `limits`: MG-OMS-LIMIT. The manifest's resources are returned sorted
// (ResourceLess).
core::Result<Bundle> ParseBundle(std::string_view text, const BundleLimits& limits = {},
                                 Reason* reason = nullptr);

// PreAuthEncoding is DSSE v1 PAE: "DSSEv1" SP len(type) SP type SP
// len(body) SP body, lengths in ASCII decimal.
std::vector<uint8_t> PreAuthEncoding(std::string_view payload_type, std::string_view payload);
// KeyHint is the lowercase hex SHA-256 of PublicKeyPem(key): model_signing's
// verificationMaterial.publicKey.hint.
std::string KeyHint(const PublicKey& key);

struct BundleVerdict {
  SigStatus status = SigStatus::kMissing;  // kValid only if EVERY signature verifies by a trusted key
  core::Error reason;                      // when not kValid: names the signature index and why
  Reason why = Reason::kNone;
  std::vector<std::string> kids, key_names;  // trusted keys that verified (one per signature)
};

// VerifyBundle checks every DSSE signature over PAE(payload type, payload)
// against every key of `trusted`. kValid: each signature verifies by some
// trusted key. kUntrusted: no signature verifies and the hint names no
// trusted key (signed by someone else). kInvalid: a signature fails while
// another verifies, or the hint names a trusted key that does not verify
// it (a forged or damaged signature). The hint is never needed to pass.
BundleVerdict VerifyBundle(const Bundle& bundle, std::span<const PublicKey> trusted);

// RangesFor is what a file of `size` bytes hashes to under `m`: files mode
// the one range [0, size); shards mode [k*N, min((k+1)*N, size)) -- none at
// all for size 0, as model_signing (which then records no resource for an
// empty file).
std::vector<core::ByteRange> RangesFor(const Manifest& m, uint64_t size);
// RangesToHash is what a verifier hashes of the present file `rel_path` of
// `size` bytes: RangesFor(m, size), except in shards mode for a file the
// manifest does not list, or lists with another size (the end of its last
// shard): none, since Compare decides those without digests. So the ranges
// hashed are bounded by the manifest's own resources, never by a size the
// file claims (a 1 TB sparse file under a 40-byte shard_size would ask for
// 25 billion ranges).
std::vector<core::ByteRange> RangesToHash(const Manifest& m, std::string_view rel_path, uint64_t size);

// FileState: what one present file is against the manifest.
enum class FileState : uint8_t { kSigned, kChanged, kAdded, kIgnored };
std::string_view FileStateName(FileState state);  // "signed" "changed" "added" "ignored"
// Compare judges the file `rel_path` of `size` bytes whose RangesFor(m,
// size) hashed to `digests_of_ranges`: kIgnored under an ignore path,
// kAdded when the manifest has no resource for it (so an empty file in
// shards mode, which has none, is kAdded), kSigned when its resources are
// exactly those ranges with those digests, else kChanged.
FileState Compare(const Manifest& m, std::string_view rel_path,
                  std::span<const core::Sha256Digest> digests_of_ranges, uint64_t size);
// Missing: manifest paths not among `present` (rel paths, any order), in
// manifest order, each once.
std::vector<std::string> Missing(const Manifest& m, std::span<const std::string> present);
// IsIgnored: `rel_path` is an ignore path or under one (component-wise).
bool IsIgnored(const Manifest& m, std::string_view rel_path);

// ---- signing and verifying a model --------------------------------------------

struct DetachedSignOptions {
  std::vector<std::string> ignore;  // extra ignore paths, relative to the model root
  std::string sig_path;             // unused by SignDetached (out_path is the bundle)
  std::string model;                // subject name; empty: the root's basename
  std::optional<uint64_t> version;  // recorded as the kVersionAnnotation annotation
  core::HashOptions hash;
  size_t max_files = kMaxModelFiles;
};
struct DetachedSignResult {
  Manifest manifest;
  std::string bundle_text;
  size_t files = 0;
  uint64_t bytes = 0;
};
// SignDetached walks `root` (a directory, or one regular file) as
// model_signing does: symlinks and special files are refused (kSigOptions,
// naming the path), the DefaultIgnorePaths, `options.ignore` and the bundle
// itself (when `out_path` lies in the model) are left out and recorded in
// ignore_paths; every other file is opened once (no symlink followed at
// any component), all are hashed in parallel from those descriptors and
// re-checked unchanged, and the bundle (files mode, compact JSON, the hint,
// one DSSE signature) is written atomically to `out_path`. A model with no
// file left: kSigOptions. A file name that is not UTF-8: kSigOptions.
core::Result<DetachedSignResult> SignDetached(const std::string& root, const PrivateKey& key,
                                              const std::string& out_path,
                                              const DetachedSignOptions& options);

// BundleText is the bundle for `m` signed by `key` (PAE, SignBytes): the
// minimal form model_signing verifies (tests/fixtures/oms/handbuilt).
core::Result<std::string> BundleText(const Manifest& m, const PrivateKey& key);

struct DetachedFile {
  std::string path;  // relative to the root ("." for a one-file model)
  FileState state = FileState::kAdded;
  uint64_t size = 0;
  core::Sha256Digest sha256{};  // of the whole file
};
struct DetachedVerifyResult {
  BundleVerdict bundle;
  Manifest manifest;                 // when the bundle parsed
  std::vector<DetachedFile> files;   // present files, sorted (PathLess); empty unless bundle kValid
  std::vector<std::string> missing;  // signed, not present
  bool allow_unsigned_files = false;
  // ok: the bundle is valid, no file changed or missing, and no file added
  // unless allow_unsigned_files.
  bool ok() const;
  // Problems: one Error per rejection (bundle, then each changed, missing
  // and (unless allowed) added file), message naming the file and reason;
  // `reasons` (when given) gets the Reason of each.
  std::vector<core::Error> Problems(std::vector<Reason>* reasons = nullptr) const;
};
struct DetachedVerifyOptions {
  bool allow_unsigned_files = false;
  std::string sig_path;
  core::HashOptions hash;
  size_t max_files = kMaxModelFiles;
  BundleLimits limits;
};
// VerifyDetached reads the bundle (at most limits.max_bundle_bytes,
// O_NOFOLLOW), ParseBundle, VerifyBundle; when valid, walks the model as
// SignDetached does (the bundle file itself, when inside, is kIgnored),
// hashes every present file from one descriptor and compares. A bundle that
// does not parse is a kInvalid verdict, not an Error. Error only when it
// cannot judge: the bundle or a file cannot be opened or read, a file
// changed while hashed, a symlink or special file in the model, over
// max_files.
// LoadedBundle is a bundle file read once, parsed and verified.
struct LoadedBundle {
  std::optional<Bundle> bundle;  // when it parsed
  BundleVerdict verdict;         // kInvalid (with why/reason) when it did not parse or is too large
  std::optional<core::Sha256Digest> sha256;  // of the bytes read; unset when over the limit (unread)
};
// LoadBundle opens `path` (no symlink followed, a regular file), reads it
// once when it is at most limits.max_bundle_bytes (else a kInvalid verdict,
// Reason::kLimit, unread), checks it did not change while read, then
// ParseBundle and VerifyBundle. An Error only when it cannot be opened or
// read (kIoNotRegular for a link or special file).
core::Result<LoadedBundle> LoadBundle(const std::string& path, std::span<const PublicKey> trusted,
                                      const BundleLimits& limits = {});

// RelInside is `path`'s place relative to the directory `root` when it
// lies inside it, resolved through realpath (so "./m/model.sig" lies in
// "m"); "" otherwise. The file need not exist; its directory must.
std::string RelInside(const std::string& root, const std::string& path);

core::Result<DetachedVerifyResult> VerifyDetached(const std::string& root, const std::string& bundle_path,
                                                  std::span<const PublicKey> trusted,
                                                  const DetachedVerifyOptions& options);

}  // namespace modelgate::signer::oms
