// modelgate signer: Ed25519 and ECDSA (P-256/P-384/P-521) keys, STSIG v1
// signatures embedded in a safetensors header's __metadata__ (Ed25519 only),
// and verification. The format is docs/stsig.md ("STSIG v1"). No libsodium,
// OpenSSL or nlohmann types appear here.
//
// Trust comes only from the PublicKey list a caller passes to VerifyFile;
// the key id in a file is a lookup hint.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "modelgate/core.h"
#include "modelgate/shard_index.h"

namespace modelgate::signer {

inline constexpr size_t kPublicKeyBytes = 32;
inline constexpr size_t kSeedBytes = 32;
inline constexpr size_t kSignatureBytes = 64;
inline constexpr size_t kKeyIdBytes = 16;
inline constexpr std::string_view kAlgEd25519 = "ed25519";

using KeyId = std::array<uint8_t, kKeyIdBytes>;
using Signature = std::array<uint8_t, kSignatureBytes>;

// ---- keys ----------------------------------------------------------------

// KeyAlg is a key's algorithm. Embedded STSIG v1 records are Ed25519 only;
// the ECDSA curves are the ones OpenSSF model_signing signs detached
// bundles with (the digest follows the curve: SHA-256/384/512).
enum class KeyAlg : uint8_t { kEd25519, kEcdsaP256, kEcdsaP384, kEcdsaP521 };
// KeyAlgName: "ed25519" | "ecdsa-p256" | "ecdsa-p384" | "ecdsa-p521".
std::string_view KeyAlgName(KeyAlg alg);
// ParseKeyAlg is the inverse of KeyAlgName (exact, lowercase).
std::optional<KeyAlg> ParseKeyAlg(std::string_view name);

// PublicKey is a public key with its key id: the first 16 bytes of SHA-256
// over its DER SubjectPublicKeyInfo (for ECDSA: named curve, uncompressed
// point, as OpenSSL and Python's cryptography write it, whatever form the
// key was read in). `raw` is the 32-byte key for Ed25519 and all zero for
// ECDSA; `spki_der` is set for every alg. `name` is a caller's label (e.g.
// the policy's key name), used only in messages.
struct PublicKey {
  KeyAlg alg = KeyAlg::kEd25519;
  std::array<uint8_t, kPublicKeyBytes> raw{};
  std::vector<uint8_t> spki_der;
  KeyId kid{};
  std::string name;

  std::string kid_hex() const;
};

// PublicKeyFromRaw computes the Ed25519 PublicKey (spki_der, kid) for 32 raw
// public-key bytes.
PublicKey PublicKeyFromRaw(std::span<const uint8_t, kPublicKeyBytes> raw);
// SubjectPublicKeyInfoDer is the DER SPKI of `key`: for Ed25519 the 44 bytes
// of RFC 8410 built from `raw`, for ECDSA `spki_der`.
std::vector<uint8_t> SubjectPublicKeyInfoDer(const PublicKey& key);
// PublicKeyPem is `key` as a "PUBLIC KEY" (SPKI) PEM block, byte for byte
// what `openssl pkey -pubout` writes (64-character lines, final newline): for
// ECDSA the text whose SHA-256 model_signing records as the bundle's key hint.
std::string PublicKeyPem(const PublicKey& key);
// VerifySignature checks `sig` over `message` with `key`: Ed25519 64 raw
// bytes (libsodium); ECDSA a DER signature (strict: OpenSSL re-encodes and
// compares) with SHA-256/384/512 for P-256/384/521. False on any failure,
// including a key whose spki_der does not parse; never throws.
bool VerifySignature(const PublicKey& key, std::span<const uint8_t> message,
                     std::span<const uint8_t> sig);
// ParsePublicKeyPem reads one SPKI "PUBLIC KEY" PEM block (as written by
// PublicKeyPem or `openssl pkey -pubout`): Ed25519, or EC on P-256, P-384 or
// P-521 given by name (explicit curve parameters and other curves are
// refused). Other key types: kSigKeyFormat, and so is any text but
// whitespace around the one block (a second block, a comment line): the file
// must be exactly one key.
core::Result<PublicKey> ParsePublicKeyPem(std::string_view pem);
// LoadPublicKey reads a public key PEM file (symlinks followed: mounted
// secrets are often symlinks).
core::Result<PublicKey> LoadPublicKey(const std::string& path);

// kMaxPbkdf2Iterations bounds the PBKDF2 iteration count an encrypted key
// file may ask for (the count is in the file: decrypting must not hang).
// OpenSSL writes 2048, OWASP 2023 asks 600,000 for PBKDF2-HMAC-SHA256.
inline constexpr uint64_t kMaxPbkdf2Iterations = 10'000'000;
// kMaxScryptCost bounds scrypt's N * r * p for an encrypted key file (time
// grows with it; OpenSSL itself caps scrypt's memory at 32 MiB). Ours is
// N=2^14, r=8, p=1 (2^17), what `openssl pkcs8 -scrypt` writes.
inline constexpr uint64_t kMaxScryptCost = uint64_t{1} << 22;

// KeyReadOptions: how a private key file is read. An "ENCRYPTED PRIVATE
// KEY" (PKCS#8 PBES2) needs `passphrase`; without one it is
// kSigKeyEncrypted, with a wrong one kSigKeyPassphrase. A passphrase given
// for an unencrypted key is not used. The KDF parameters are the file's
// claim and are checked against the limits before any work.
struct KeyReadOptions {
  std::optional<std::span<const uint8_t>> passphrase;
  uint64_t max_pbkdf2_iterations = kMaxPbkdf2Iterations;
  uint64_t max_scrypt_cost = kMaxScryptCost;
};

// Pkcs11Options: where a PKCS#11 key lives besides its URI. `module_path`
// (a shared object, loaded through p11-kit) wins over the URI's
// module-path; when both are empty every module p11-kit is configured with
// is searched. `pin`, when set, logs in as the user (C_Login); a token that
// needs a login and has no PIN is kSigPkcs11Login.
struct Pkcs11Options {
  std::string module_path;
  std::optional<std::span<const uint8_t>> pin;
};

// PrivateKey is an Ed25519 or ECDSA signing key. Its secret lives in one heap
// block that is wiped (sodium_memzero) when the key is destroyed (ECDSA: an
// OpenSSL key, whose private scalar OpenSSL clears when freed); moving moves
// the pointer, never the secret bytes. Not copyable.
class PrivateKey {
 public:
  PrivateKey(PrivateKey&& other) noexcept;
  PrivateKey& operator=(PrivateKey&& other) noexcept;
  PrivateKey(const PrivateKey&) = delete;
  PrivateKey& operator=(const PrivateKey&) = delete;
  ~PrivateKey();

  // Generate makes a new key: Ed25519 with libsodium crypto_sign_keypair,
  // ECDSA with OpenSSL (EVP_PKEY_Q_keygen on the named curve).
  static core::Result<PrivateKey> Generate(KeyAlg alg = KeyAlg::kEd25519);
  // FromSeed derives the key for a 32-byte Ed25519 seed (RFC 8032).
  static core::Result<PrivateKey> FromSeed(std::span<const uint8_t, kSeedBytes> seed);

  KeyAlg alg() const { return public_.alg; }
  const PublicKey& public_key() const { return public_; }
  // Sign is the detached Ed25519 signature of `message` (STSIG). Ed25519
  // keys only: for an ECDSA key it is all zero, which verifies under no key
  // (SignFile refuses ECDSA keys before it would get here).
  Signature Sign(std::span<const uint8_t> message) const;
  // SignBytes signs `message` for any alg: Ed25519 the 64 raw bytes, ECDSA a
  // DER signature over SHA-256/384/512 of it (by curve).
  core::Result<std::vector<uint8_t>> SignBytes(std::span<const uint8_t> message) const;
  // WritePem creates `path` as a PKCS#8 "PRIVATE KEY" PEM file with
  // open(O_CREAT|O_EXCL|O_NOFOLLOW), mode 0600; an existing path (or a
  // symlink there) is an error, never overwritten. With `passphrase`, an
  // "ENCRYPTED PRIVATE KEY" (PKCS#8 PBES2: scrypt N=2^14 r=8 p=1, AES-256-CBC,
  // random salt and IV); an empty passphrase is kSigOptions. A token key
  // (OpenPkcs11Key) cannot be written: kSigOptions.
  core::Status WritePem(const std::string& path,
                        std::optional<std::span<const uint8_t>> passphrase = std::nullopt) const;
  // on_token: the key lives in a PKCS#11 token and signs there.
  bool on_token() const;

 private:
  struct Secret;
  friend core::Result<PrivateKey> ParsePrivateKeyPem(std::string_view pem,
                                                     const KeyReadOptions& options);
  friend core::Result<PrivateKey> OpenPkcs11Key(std::string_view uri, const Pkcs11Options& options);
  PrivateKey(std::unique_ptr<Secret> secret, PublicKey pub);

  std::unique_ptr<Secret> secret_;
  PublicKey public_;
};

// ParsePrivateKeyPem reads an unencrypted private key PEM: PKCS#8 "PRIVATE
// KEY" for Ed25519 (ours, `openssl genpkey -algorithm ed25519`) or EC (ours,
// `openssl genpkey -algorithm EC`), or SEC1 "EC PRIVATE KEY" (`openssl
// ecparam -genkey`, whose leading "EC PARAMETERS" block is allowed when it
// names the key's curve; no other second block). EC on P-256/P-384/P-521
// only; an EC key whose stored public point is not its private scalar's is
// refused. An "ENCRYPTED PRIVATE KEY" (PKCS#8, PBES2 with PBKDF2 or scrypt
// only) is decrypted with options.passphrase (see KeyReadOptions); legacy
// "Proc-Type: 4,ENCRYPTED" PEM and other key types are kSigKeyFormat;
// nothing prompts for a passphrase. Otherwise exactly one PEM block, as for
// ParsePublicKeyPem.
core::Result<PrivateKey> ParsePrivateKeyPem(std::string_view pem, const KeyReadOptions& options = {});
// LoadPrivateKey reads a private key PEM file (at most 64 KiB); the bytes
// read (and the decrypted key) are wiped after parsing.
core::Result<PrivateKey> LoadPrivateKey(const std::string& path, const KeyReadOptions& options = {});

// IsPkcs11Uri: `key` names a PKCS#11 object (starts with "pkcs11:", RFC 7512).
bool IsPkcs11Uri(std::string_view key);
// OpenPkcs11Key finds the one private key the RFC 7512 `uri` names
// (pkcs11:token=...;object=...;id=...) on one token, logs in with the PIN
// and returns a PrivateKey that signs on the token: Ed25519 (CKK_EC_EDWARDS,
// CKM_EDDSA over the message) or ECDSA P-256/384/521 (CKK_EC, CKM_ECDSA over
// the curve's digest, r||s re-encoded as DER). The key never leaves the
// token; its public half comes from the token's public key object with the
// same CKA_ID (else CKA_LABEL), else its certificate. Errors:
// kSigPkcs11Uri (does not parse, unknown or PIN attributes -- a PIN never
// travels in a URI --, no object or id), kSigPkcs11Token (no or several
// tokens match), kSigPkcs11Login (wrong, locked or missing PIN),
// kSigPkcs11Object (no, several, or an unsupported key), kSigPkcs11 (the
// module cannot be loaded, or another PKCS#11 failure).
core::Result<PrivateKey> OpenPkcs11Key(std::string_view uri, const Pkcs11Options& options);
// WritePublicKeyPem creates `path` (O_EXCL|O_NOFOLLOW, mode 0644).
core::Status WritePublicKeyPem(const PublicKey& key, const std::string& path);

struct KeygenResult {
  std::string private_path;  // PREFIX.key, 0600
  std::string public_path;   // PREFIX.pub, 0644
  PublicKey public_key;
};
// Keygen makes a new `alg` key and writes PREFIX.key and PREFIX.pub; if
// either exists, nothing is left behind (a .key it created is removed).
// With `passphrase`, PREFIX.key is an encrypted PKCS#8 (PrivateKey::WritePem).
core::Result<KeygenResult> Keygen(const std::string& prefix, KeyAlg alg = KeyAlg::kEd25519,
                                  std::optional<std::span<const uint8_t>> passphrase = std::nullopt);

// ---- STSIG v1 -------------------------------------------------------------

inline constexpr std::string_view kStsigPrefix = "stsig.";
inline constexpr std::string_view kStsigRecordsKey = "stsig.v1";
inline constexpr std::string_view kStsigDigestsKey = "stsig.v1.sha256";

// SetRef places a file in a signed shard set.
struct SetRef {
  uint64_t index = 0;
  uint64_t count = 0;
  core::Sha256Digest digest{};
  bool operator==(const SetRef&) const = default;
};

// StsigRecord is one element of the stsig.v1 array.
struct StsigRecord {
  std::string alg = std::string(kAlgEd25519);
  KeyId kid{};
  uint64_t created = 0;  // unix seconds
  std::string model;     // UTF-8, may be empty
  uint64_t version = 0;
  std::optional<SetRef> set;
  Signature sig{};
};

// TensorDigest is one entry of stsig.v1.sha256.
using TensorDigest = std::pair<std::string, core::Sha256Digest>;

// Stsig is the parsed stsig.* metadata of a file.
struct Stsig {
  bool present = false;                // any stsig.* key at all
  std::vector<StsigRecord> records;    // in file order
  std::vector<TensorDigest> digests;   // sorted bytewise by name
};

// ParseStsig reads the stsig.* keys of `st` strictly: only stsig.v1 and
// stsig.v1.sha256 (kSigUnknownKey otherwise), both or neither; each value is
// JSON text with no duplicate keys, fixed fields (unknown, missing or
// mistyped fields: kSigBadRecord), lowercase hex, canonical base64; the
// digest map's names equal the tensor names exactly (kSigDigestMap). The alg
// is not checked against the allowlist here (VerifyFile does).
core::Result<Stsig> ParseStsig(const core::Safetensors& st);

// SignedMessage is M for `record` over `st` (docs/stsig.md): metadata minus
// stsig.*, tensors sorted by name with the digest from `digests` (which must
// hold exactly one entry per tensor, sorted by name — as ParseStsig returns).
core::Result<std::vector<uint8_t>> SignedMessage(const core::Safetensors& st,
                                                 const StsigRecord& record,
                                                 std::span<const TensorDigest> digests);
// ContentDigest is D = SHA-256 of M from u64(data_len) on: names the signed
// content whoever signed it.
core::Result<core::Sha256Digest> ContentDigest(const core::Safetensors& st,
                                               std::span<const TensorDigest> digests);

// ---- sign -------------------------------------------------------------------

struct SignOptions {
  std::string model;
  uint64_t version = 0;
  std::optional<uint64_t> created;  // unix seconds; unset: now
  std::optional<SetRef> set;
  // Keep other keys' records whose message is unchanged (co-signing). A kept
  // record by a key listed in `cosigner_keys` must also verify, or it is
  // dropped; records by unlisted keys are kept when the file's digest map
  // still matches its tensor bytes (signing never changes what they signed).
  bool keep_cosignatures = true;
  std::vector<PublicKey> cosigner_keys;
  core::Limits limits;
  core::HashOptions hash;
};

struct SignResult {
  StsigRecord record;               // the new record
  std::vector<uint8_t> message;     // M that was signed
  size_t kept_records = 0;          // co-signatures carried over
  size_t dropped_records = 0;       // old records not carried over
  uint64_t header_bytes = 0;        // N of the written file
  uint64_t file_size = 0;
};

// SignFile signs the safetensors file at `path` and writes the result to
// `out_path` (empty: `path`, in place). The header is rewritten
// deterministically: tensors in data order as {"dtype","shape",
// "data_offsets"}, then "__metadata__" with keys sorted bytewise, compact,
// space-padded so 8 + N is a multiple of 8. A header that would break a
// limit of `options.limits` (what verify enforces, e.g. max_header_bytes for
// a file of very many tensors) is refused (kSigOptions, naming the limit
// and the excess) before anything is written. Tensor bytes are copied
// untouched to a core::AtomicOutput beside the output, hashed there (so the
// signature covers exactly the bytes written), then it is fsynced and put
// in place over the output: a kill at any moment leaves the old output and
// no temp file. A write error (ENOSPC, EFBIG) names the output. Mode: the
// output's if it exists, else the input's. The input must not be a symlink.
// STSIG v1 is Ed25519: an ECDSA `key` is kSigOptions, nothing read or written.
core::Result<SignResult> SignFile(const std::string& path, const PrivateKey& key,
                                  const SignOptions& options,
                                  const std::string& out_path = "");

// ---- headers for writers that lay out a file themselves (convert) ---------

// PlannedHeader is the header text SignFile would write for the tensors of
// `st` (data order; begin/end set; names, dtypes and shapes valid) and
// `metadata` (no stsig.* keys; written sorted): compact, padded with spaces
// so 8 + size is a multiple of 8. With `record` (Ed25519), it also holds
// stsig.v1 = [record] and stsig.v1.sha256 = `digests` (one per tensor,
// sorted by name); its length does not depend on the digest or signature
// values, so a writer lays out the data with zero digests first. The
// header is checked as verify will read it (ParseSafetensorsHeader under
// `limits`, for a file of data_bytes after it): kSigOptions, naming the
// rule, when it would break one.
core::Result<std::string> PlannedHeader(const core::Safetensors& st,
                                        std::vector<std::pair<std::string, std::string>> metadata,
                                        const StsigRecord* record,
                                        std::span<const TensorDigest> digests,
                                        uint64_t data_bytes, const core::Limits& limits);

// SignPlanned signs `record` (kid, created, model, version, set filled in)
// with `key` over the tensors of `st`, `metadata` (no stsig.* keys) and
// `digests` (sorted by name, of the bytes written): sets record->sig.
// Ed25519 keys only (kSigOptions otherwise).
core::Status SignPlanned(const core::Safetensors& st,
                         const std::vector<std::pair<std::string, std::string>>& metadata,
                         std::span<const TensorDigest> digests, const PrivateKey& key,
                         StsigRecord* record);

// ---- verify -------------------------------------------------------------------

enum class SigStatus : uint8_t { kValid, kInvalid, kMissing, kUntrusted };
// SigStatusName: "valid" | "invalid" | "missing" | "untrusted".
std::string_view SigStatusName(SigStatus status);

struct RecordCheck {
  enum class Outcome : uint8_t { kVerified, kUntrusted, kBadSignature, kUnknownAlg };
  Outcome outcome = Outcome::kUntrusted;
  StsigRecord record;
  std::string key_name;  // the trusted key's name when one matched the kid
};

struct VerifyOptions {
  core::Limits limits;
  core::HashOptions hash;
  bool follow_symlink = false;
};

// VerifyResult: `status`, and when it is not kValid, `reason` (code, offset,
// message naming the record, field or tensor). `records` lists what was
// found for each record; `file` is the parsed header when parsing passed.
struct VerifyResult {
  SigStatus status = SigStatus::kMissing;
  core::Error reason;
  std::vector<RecordCheck> records;
  core::Safetensors file;
  std::vector<std::string> verified_kids;  // hex, records that verified

  bool valid() const { return status == SigStatus::kValid; }
};

// VerifyFile opens `path` (O_NOFOLLOW unless options say otherwise), checks
// it is a regular file, parses the header strictly, checks every stsig.v1
// record (alg allowlist {ed25519}, kid among the Ed25519 keys of `trusted`
// -- ECDSA keys there are for detached bundles and never match a record --,
// Ed25519 over the rebuilt M), then hashes every tensor from the same fd and compares with
// the signed digests, and finally re-checks the file's identity (dev, ino,
// size, mtime, ctime).
//  - kValid: at least one record by a trusted key verified, no record is
//    malformed, fails, or has an unknown alg, and every tensor matches.
//    Records by keys not in `trusted` are reported, not judged.
//  - kMissing: no stsig.* key at all.
//  - kUntrusted: well-formed records, none by a trusted key (tensors are not
//    hashed).
//  - kInvalid: anything else, including a header the core parser rejects.
// An Error is returned only when the gate could not judge (cannot open or
// read, not a regular file, file changed while being verified).
core::Result<VerifyResult> VerifyFile(const std::string& path,
                                      std::span<const PublicKey> trusted,
                                      const VerifyOptions& options = {});

// VerifyFd is VerifyFile on an open regular file of `file_size` bytes; it
// does not re-check identity (the caller owns the fd and does).
core::Result<VerifyResult> VerifyFd(int fd, uint64_t file_size,
                                    std::span<const PublicKey> trusted,
                                    const VerifyOptions& options = {});

// ---- shard sets ---------------------------------------------------------------
// A sharded model (an index *.safetensors.index.json and its shards) is
// signed as one set: each shard's record carries set {index i, count n,
// digest} (docs/stsig.md "Shard sets"), so shards of two signed releases
// cannot be mixed, and a missing or renamed shard or an edited weight_map is
// caught.

// SetDigest = SHA-256("STSIG-SET/1\n" || u64(n) || D_1..D_n ||
// B(CanonicalWeightMap(index))), n = contents.size(): the content digests D_i
// (ContentDigest) of the shards in index.shards order (bytewise order of
// their names).
core::Sha256Digest SetDigest(std::span<const core::Sha256Digest> contents_in_shard_order,
                             const core::ShardIndex& index);

// FindShardIndex is `path` itself when it is not a directory, else the one
// *.safetensors.index.json (core::IsShardIndexName) directly in it; none or
// several: kSigOptions.
core::Result<std::string> FindShardIndex(const std::string& path);

struct SignSetShard {
  std::string path;               // index directory + "/" + shard name
  SetRef set;                     // the record's set
  core::Sha256Digest content{};   // D of the shard
  SignResult result;
};
struct SignSetResult {
  std::string index_path;
  core::ShardIndex index;
  core::Sha256Digest digest{};    // the set digest
  std::vector<SignSetShard> shards;  // index.shards order
};

// SignSet signs every shard of the index at `path` (or the one index in the
// directory `path`) in place with SignFile and its set record. First, for
// every shard: open (no symlink anywhere below the index's directory), strict
// parse, hash every tensor, D; the shards must be distinct files and agree
// with the index (core::ShardSetErrors, except kSetTotalSize: a refusal
// names the first problem, nothing is written). Then each shard is signed
// (atomically, as SignFile) and its written header re-read: its D must be the
// one the set digest was computed from (else kIoChanged: it changed
// meanwhile). A failure midway leaves the shards before it signed with the
// new set and the others unchanged, and says which; signing again gives the
// same set digest (signing does not change D), so a re-run completes it.
// `options.set` must be unset (kSigOptions); its other fields apply to every
// shard. The index file itself is not modified.
core::Result<SignSetResult> SignSet(const std::string& path, const PrivateKey& key,
                                    const SignOptions& options);

// SetVerifications maps a shard name of the index to that shard's
// verification (VerifyFile/VerifyFd); null, or no entry, when it is absent
// or could not be verified.
using SetVerifications = std::map<std::string, const VerifyResult*, std::less<>>;

// CheckSet judges the set records of the shards' trusted, verified records
// (Outcome::kVerified of kValid files) against the index; each error names
// the shard:
//  - kSetPosition: a record's set index/count is not the shard's place among
//    index.shards / their number;
//  - kSetDigest: a record's set digest differs from SetDigest over the D of
//    every listed shard (recomputed from its verified header);
//  - kSetIncomplete (once): some shard carries a set record but a listed
//    shard is absent or not kValid, so the digest cannot be recomputed;
//  - kSetNotSigned: a valid shard none of whose verified records has a set.
// No error when no shard is valid. Untrusted records are not judged.
std::vector<core::Error> CheckSet(const core::ShardIndex& index, const SetVerifications& verified);

// --- verified loader ---
//
// OpenVerified gives a model server tensor bytes only after they were checked
// against a signature by a trusted key. The guarantees differ by mode; read
// this before choosing one (docs/loader.md says the same at more length).
//
//  kEager (default): open(O_RDONLY|O_NOFOLLOW), fstat, strict parse, header
//    signature, SHA-256 of every tensor range read with pread from that fd,
//    compare; only then mmap *that fd* PROT_READ and re-fstat its identity
//    (dev, ino, size, mtime, ctime). OpenVerified fails unless all of it
//    passes. Protects against: a file that was tampered with before the
//    open; a path swapped (rename, symlink) after the open, since the mapping
//    comes from the fd that was hashed, not from the path. Does NOT protect
//    against another process with write access to the *same inode* changing
//    or truncating it after verification: mapped pages are the page cache, so
//    such a write shows through the views (MAP_PRIVATE does not help: a
//    read-only private mapping never copies a page, so it sees others' writes
//    too), and a truncation makes touching a view past the new end raise
//    SIGBUS, which this library does not catch (it kills the process unless
//    the caller handles SIGBUS). The identity re-check catches a write or
//    truncation that lands between the open and the return *if* it changes
//    size or moves mtime/ctime (a timestamp has a clock-tick granularity, so
//    a same-size write in the same tick as the file's previous change can go
//    unseen); nothing is checked after OpenVerified returns.
//  kLazy: as eager, but only the header signature is checked up front (plus
//    the mapping and the identity re-check); each tensor is hashed (pread
//    from the same fd) on its first Tensor() call, which fails on a mismatch
//    -- and so does every later call for that tensor. Thread-safe: one
//    std::once_flag per tensor, so threads loading different tensors hash in
//    parallel and threads asking for the same one wait for one hash. Each
//    first access also re-checks the identity before and after hashing.
//    By design a tensor that is never asked for is never checked: a tampered
//    tensor that a tensor-parallel rank does not load goes undetected. Same
//    concurrent-writer and SIGBUS limits as eager, with a longer window (up
//    to each tensor's first access).
//  kCopy: the data section is pread into private anonymous memory (each
//    tensor is hashed from the buffer it was read into), compared, and the
//    buffer is made read-only (mprotect). Views point into that buffer, so a
//    later write or truncation by anyone to the file cannot change or fault
//    them: the only mode safe against a concurrent writer to the same inode.
//    Costs the data size in private memory (RSS) and one copy.
//
// In every mode: no view is handed out before the header signature verified
// and that view's bytes matched their signed digest; failures carry the same
// codes as VerifyFile (kSigMissing, kSigUntrusted, kSigBadSignature,
// kSigTensorMismatch, ... kIoNotRegular for a symlink, kIoChanged when the
// identity moved).

enum class LoadMode : uint8_t { kEager, kLazy, kCopy };
// LoadModeName: "eager" | "lazy" | "copy".
std::string_view LoadModeName(LoadMode mode);

// MapSharing chooses MAP_SHARED or MAP_PRIVATE for eager and lazy mappings
// (ignored by kCopy). Either is PROT_READ. Neither isolates the views from
// writes by others to the inode (see above); kPrivate only matters to callers
// who later mprotect the pages writable (LoadOptions::writable does that for
// them, and always maps MAP_PRIVATE).
enum class MapSharing : uint8_t { kShared, kPrivate };

// SignedRange is a byte range of a file with the SHA-256 a detached bundle
// (OMS, modelgate/detached.h) signed for it: files mode one range, the
// whole file; shards mode the file's shards.
struct SignedRange {
  core::ByteRange range;
  core::Sha256Digest digest{};
};

struct LoadOptions {
  LoadMode mode = LoadMode::kEager;
  MapSharing sharing = MapSharing::kShared;
  // writable: eager and lazy map MAP_PRIVATE with PROT_READ|PROT_WRITE
  // (copy-on-write: a write through a view changes the process's page, never
  // the file, and does not fault), copy mode leaves its buffer writable;
  // `sharing` is then ignored. For frameworks whose tensors are always
  // writable (torch.frombuffer). Verification is unchanged, and so is what a
  // page not yet written shows (the file's page cache, as above).
  bool writable = false;
  // detached: the file is verified against these ranges instead of STSIG
  // records (the caller verified the bundle that gave them; `trusted` is not
  // used). They must tile the whole file, [0, size) in order (kSigOptions
  // otherwise): everything, header included, is covered. A mismatch is
  // kSigTensorMismatch naming the range. Eager: the header parsed from the
  // fd, every range hashed from it, then the map. Lazy: the header parsed,
  // the file mapped; the first Tensor() of any tensor (or CheckAll) hashes
  // every range, once for the file (other callers wait), re-checking the
  // identity around it; a failure is returned by that and every later
  // access. Copy: the whole file is pread into private memory and hashed
  // from there, and the header parsed from that copy.
  std::optional<std::vector<SignedRange>> detached;
  // limits, hash threads/buffer, follow_symlink (default false: a symlink is
  // refused with kIoNotRegular).
  VerifyOptions verify;
  // For tests only: called after the tensors were checked (eager, copy) or
  // the header was (lazy), just before mmap, with the path, so a test can
  // swap or write the file in that window. Leave empty.
  std::function<void(const std::string& path)> before_map_for_testing;
};

// TensorView is one verified tensor. Everything points into the
// VerifiedModel that handed it out and is valid while that object lives.
struct TensorView {
  std::string_view name;
  core::Dtype dtype = core::Dtype::kU8;
  std::span<const uint64_t> shape;
  std::span<const uint8_t> bytes;
};

// VerifiedModel owns a verified file's mapping (eager, lazy) or private copy
// (copy), its parsed header and the verification record. Move-only; the
// views die with it (the mapping is unmapped, the buffer freed).
class VerifiedModel {
 public:
  VerifiedModel(VerifiedModel&& other) noexcept;
  VerifiedModel& operator=(VerifiedModel&& other) noexcept;
  VerifiedModel(const VerifiedModel&) = delete;
  VerifiedModel& operator=(const VerifiedModel&) = delete;
  ~VerifiedModel();

  LoadMode mode() const;
  // header: the parsed, signature-checked header (tensors in data order,
  // metadata including the stsig.* keys).
  const core::Safetensors& header() const;
  // verification: records found and kids that verified (status kValid; in
  // lazy mode it speaks for the header only).
  const VerifyResult& verification() const;
  size_t tensor_count() const;
  // Find is the index of the tensor named `name`, if any.
  std::optional<size_t> Find(std::string_view name) const;
  // Tensor is the view of tensor `index` (data order) or `name`. Eager and
  // copy: always ok for an existing tensor. Lazy: hashes it on the first call
  // (concurrent callers of the same tensor wait for that one hash) and
  // returns kSigTensorMismatch or kIoChanged on failure, on this and every
  // later call. An index out of range or an unknown name: kSigOptions.
  core::Result<TensorView> Tensor(size_t index) const;
  core::Result<TensorView> Tensor(std::string_view name) const;
  // CheckAll hashes every tensor not checked yet (lazy; parallel over
  // options.verify.hash.threads) and returns the first failure in data
  // order; eager and copy: always ok.
  core::Status CheckAll() const;

 private:
  struct State;
  explicit VerifiedModel(std::unique_ptr<State> state);
  friend core::Result<VerifiedModel> OpenVerifiedFile(core::OpenedFile file,
                                                      const std::string& path,
                                                      std::span<const PublicKey> trusted,
                                                      const LoadOptions& options);
  std::unique_ptr<State> state_;
};

// OpenVerified opens, verifies and maps (or copies) the safetensors file at
// `path` as `options.mode` says (above). Any failure -- unreadable file,
// symlink, unsigned, untrusted, bad signature, a tensor mismatch (eager,
// copy), a file that changed -- is an Error; nothing is handed out.
core::Result<VerifiedModel> OpenVerified(const std::string& path,
                                         std::span<const PublicKey> trusted,
                                         const LoadOptions& options = {});
// OpenVerifiedFile is OpenVerified on a file the caller already opened
// (core::OpenRegularFile; `file` is consumed): the caller can read its size
// first (a detached bundle's ranges depend on it) without opening the path
// twice. `path` names it in before_map_for_testing.
core::Result<VerifiedModel> OpenVerifiedFile(core::OpenedFile file, const std::string& path,
                                             std::span<const PublicKey> trusted,
                                             const LoadOptions& options = {});

// --- end verified loader ---

// OpensslVersion ("OpenSSL 3.0.x <date>", OpenSSL_version) and SodiumVersion
// ("1.0.18", sodium_version_string) name the crypto libraries running, for
// `modelgate --version`; the CLI does not link them itself.
std::string OpensslVersion();
std::string SodiumVersion();

}  // namespace modelgate::signer
