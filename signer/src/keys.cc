// Keys: Ed25519 (libsodium) and ECDSA P-256/P-384/P-521 (OpenSSL, ecdsa.cc):
// generation, PKCS#8 / SEC1 / SPKI PEM files, key ids. Every buffer that
// holds a seed, a secret key, its DER or its PEM text is wiped with
// sodium_memzero on every path out.
#include <fcntl.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/objects.h>
#include <openssl/pem.h>
#include <openssl/pkcs12.h>
#include <openssl/x509.h>
#include <sodium.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>

#include "ecdsa.h"
#include "internal.h"
#include "pkcs11.h"

namespace modelgate::signer {
namespace {

using core::Code;
using core::Error;
using core::kNoOffset;

// RFC 8410: PKCS#8 v1 PrivateKeyInfo for Ed25519 is this 16-byte prefix and
// the 32-byte seed; SubjectPublicKeyInfo is this 12-byte prefix and the key.
constexpr std::array<uint8_t, 16> kPkcs8Prefix = {0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06,
                                                  0x03, 0x2b, 0x65, 0x70, 0x04, 0x22, 0x04, 0x20};
constexpr std::array<uint8_t, 12> kSpkiPrefix = {0x30, 0x2a, 0x30, 0x05, 0x06, 0x03,
                                                 0x2b, 0x65, 0x70, 0x03, 0x21, 0x00};
constexpr size_t kMaxKeyFileBytes = 64 * 1024;

// Wiped is a fixed buffer that is wiped when it goes out of scope.
template <size_t N>
struct Wiped {
  std::array<uint8_t, N> b{};
  ~Wiped() { sodium_memzero(b.data(), b.size()); }
};

// NoPassphrase refuses to decrypt: a gate never prompts on a terminal.
int NoPassphrase(char*, int, int, void*) { return -1; }

core::Status WriteAll(int fd, std::span<const uint8_t> bytes, const std::string& path) {
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return Error{Code::kSigKeyWrite, kNoOffset, "cannot write " + path + ": " + std::strerror(errno)};
    }
    done += static_cast<size_t>(n);
  }
  return core::OkStatus();
}

// WriteNewFile creates `path` exclusively (never through a symlink), sets
// `mode` exactly (umask would only narrow it), writes, fsyncs and closes.
// On failure after creating the file, it removes it.
core::Status WriteNewFile(const std::string& path, std::span<const uint8_t> bytes, mode_t mode) {
  int fd = ::open(path.c_str(), O_CREAT | O_EXCL | O_NOFOLLOW | O_WRONLY | O_CLOEXEC, mode);
  if (fd < 0) {
    return Error{Code::kSigKeyWrite, kNoOffset,
                 "cannot create " + path + ": " + std::strerror(errno) +
                     (errno == EEXIST ? " (keys are never overwritten)" : "")};
  }
  core::Status s = core::OkStatus();
  if (::fchmod(fd, mode) != 0) {
    s = Error{Code::kSigKeyWrite, kNoOffset, "cannot chmod " + path + ": " + std::strerror(errno)};
  }
  if (s.ok()) s = WriteAll(fd, bytes, path);
  if (s.ok() && ::fsync(fd) != 0) {
    s = Error{Code::kSigKeyWrite, kNoOffset, "cannot fsync " + path + ": " + std::strerror(errno)};
  }
  if (::close(fd) != 0 && s.ok()) {
    s = Error{Code::kSigKeyWrite, kNoOffset, "cannot close " + path + ": " + std::strerror(errno)};
  }
  if (!s.ok()) ::unlink(path.c_str());
  return s;
}

// ReadKeyFile reads a small key file into `out` (which the caller wipes).
core::Status ReadKeyFile(const std::string& path, std::vector<char>& out) {
  auto f = core::OpenRegularFile(path, /*follow_symlink=*/true);
  if (!f.ok()) return f.error();
  const core::OpenedFile& file = f.value();
  if (file.size > kMaxKeyFileBytes) {
    return Error{Code::kSigKeyFormat, kNoOffset,
                 path + ": " + std::to_string(file.size) + " bytes is too large for a key file"};
  }
  out.assign(static_cast<size_t>(file.size), '\0');  // sized once: no reallocation copies
  return core::PreadExact(file.fd, 0,
                          std::span<uint8_t>(reinterpret_cast<uint8_t*>(out.data()), out.size()));
}

// CheckOnePemBlock accepts `pem` only when it is one PEM block with nothing
// but whitespace around it. OpenSSL's reader skips any text before the first
// BEGIN line and ignores everything after the first END line, so a file
// holding two keys (or a key and a stray paste) would quietly be read as its
// first block: the operator would trust a key other than the one they meant.
// Messages give byte offsets, never key text.
core::Status CheckOnePemBlock(std::string_view pem) {
  constexpr std::string_view kBegin = "-----BEGIN ";
  constexpr std::string_view kEnd = "-----END ";
  constexpr std::string_view kDashes = "-----";
  constexpr std::string_view kSpace = " \t\r\n";
  size_t blocks = 0;
  for (size_t at = pem.find(kBegin); at != std::string_view::npos;
       at = pem.find(kBegin, at + kBegin.size())) {
    ++blocks;
  }
  if (blocks == 0) return Error{Code::kSigKeyFormat, kNoOffset, "no PEM BEGIN line"};
  if (blocks > 1) {
    return Error{Code::kSigKeyFormat, kNoOffset,
                 std::to_string(blocks) + " PEM blocks; a key file must hold exactly one"};
  }
  const size_t begin = pem.find(kBegin);
  const size_t first = pem.find_first_not_of(kSpace);
  if (first != begin) {
    return Error{Code::kSigKeyFormat, kNoOffset,
                 "text before the PEM BEGIN line at byte " + std::to_string(first)};
  }
  const size_t end = pem.find(kEnd, begin);
  const size_t close =
      end == std::string_view::npos ? end : pem.find(kDashes, end + kEnd.size());
  if (close == std::string_view::npos) {
    return Error{Code::kSigKeyFormat, kNoOffset, "no PEM END line"};
  }
  const size_t trailing = pem.find_first_not_of(kSpace, close + kDashes.size());
  if (trailing != std::string_view::npos) {
    return Error{Code::kSigKeyFormat, kNoOffset,
                 "text after the PEM END line at byte " + std::to_string(trailing) +
                     " (only whitespace may follow the one PEM block)"};
  }
  return core::OkStatus();
}

// PemToPkey decodes one PEM block with OpenSSL.
template <typename ReadFn>
EVP_PKEY* PemToPkey(std::string_view pem, ReadFn read) {
  if (pem.size() > kMaxKeyFileBytes) return nullptr;
  BIO* bio = BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size()));
  if (bio == nullptr) return nullptr;
  EVP_PKEY* pkey = read(bio);
  BIO_free(bio);
  return pkey;
}

bool IsEd25519(const EVP_PKEY* pkey) { return EVP_PKEY_get_base_id(pkey) == EVP_PKEY_ED25519; }

// PemLabel is the X of the "-----BEGIN X-----" line of one checked block.
std::string_view PemLabel(std::string_view pem) {
  constexpr std::string_view kBegin = "-----BEGIN ";
  const size_t at = pem.find(kBegin);
  if (at == std::string_view::npos) return {};
  const size_t from = at + kBegin.size();
  const size_t to = pem.find("-----", from);
  return to == std::string_view::npos ? std::string_view{} : pem.substr(from, to - from);
}

// SplitEcParameters splits off the "EC PARAMETERS" block `openssl ecparam
// -genkey` writes before its "EC PRIVATE KEY" block: `params` is that block
// (empty when there is none) and `key` the rest, which must still be one
// block (CheckOnePemBlock).
void SplitEcParameters(std::string_view pem, std::string_view& params, std::string_view& key) {
  constexpr std::string_view kBegin = "-----BEGIN EC PARAMETERS-----";
  constexpr std::string_view kEnd = "-----END EC PARAMETERS-----";
  params = {};
  key = pem;
  const size_t first = pem.find_first_not_of(" \t\r\n");
  if (first == std::string_view::npos || pem.substr(first, kBegin.size()) != kBegin) return;
  const size_t end = pem.find(kEnd, first);
  if (end == std::string_view::npos) return;
  const size_t rest = end + kEnd.size();
  params = pem.substr(first, rest - first);
  key = pem.substr(rest);
}

// ---- encrypted PKCS#8 -----------------------------------------------------------

// Scrypt parameters of the keys we write: what `openssl pkcs8 -topk8 -scrypt`
// writes, and the largest power-of-two N (with r=8) that OpenSSL's own
// PKCS#8 reader decrypts (it caps scrypt at 32 MiB; this is 16 MiB), so
// `openssl pkey` and Python's cryptography read our files. scrypt over
// PBKDF2 (OpenSSL's PEM_write_bio_PKCS8PrivateKey default, 2048 iterations
// of HMAC-SHA256) because it is memory-hard: a stolen key file costs an
// attacker 16 MiB per guess, not a GPU's spare cycles.
constexpr uint64_t kScryptN = uint64_t{1} << 14;
constexpr uint64_t kScryptR = 8;
constexpr uint64_t kScryptP = 1;

struct X509SigFree {
  void operator()(X509_SIG* p) const { X509_SIG_free(p); }
};
struct P8InfoFree {
  void operator()(PKCS8_PRIV_KEY_INFO* p) const { PKCS8_PRIV_KEY_INFO_free(p); }
};
struct BioFree {
  void operator()(BIO* p) const { BIO_free(p); }
};

Error KeyFormat(const std::string& message) {
  ERR_clear_error();
  return Error{Code::kSigKeyFormat, kNoOffset, message};
}

// CheckKdf reads the PBES2 parameters of an encrypted PKCS#8 key and
// refuses, before any key derivation, what is not PBES2 (PKCS#5 v1.5 and
// PKCS#12 schemes: DES, RC2, MD5, SHA-1 key stretching) or asks for more
// work than `options` allow: the counts are the file's claim.
core::Status CheckKdf(const X509_SIG* p8, const KeyReadOptions& options) {
  const X509_ALGOR* alg = nullptr;
  X509_SIG_get0(p8, &alg, nullptr);
  if (alg == nullptr || OBJ_obj2nid(alg->algorithm) != NID_pbes2) {
    return KeyFormat("the encrypted key does not use PBES2 (PKCS#5 v2.0); re-encrypt it: "
                     "openssl pkcs8 -topk8 -scrypt");
  }
  std::unique_ptr<PBE2PARAM, void (*)(PBE2PARAM*)> pbe2(
      static_cast<PBE2PARAM*>(ASN1_TYPE_unpack_sequence(ASN1_ITEM_rptr(PBE2PARAM), alg->parameter)),
      PBE2PARAM_free);
  if (!pbe2 || pbe2->keyfunc == nullptr) return KeyFormat("the encrypted key's PBES2 parameters do not parse");
  const int kdf = OBJ_obj2nid(pbe2->keyfunc->algorithm);
  if (kdf == NID_id_pbkdf2) {
    std::unique_ptr<PBKDF2PARAM, void (*)(PBKDF2PARAM*)> p(
        static_cast<PBKDF2PARAM*>(
            ASN1_TYPE_unpack_sequence(ASN1_ITEM_rptr(PBKDF2PARAM), pbe2->keyfunc->parameter)),
        PBKDF2PARAM_free);
    uint64_t iter = 0;
    if (!p || p->iter == nullptr || ASN1_INTEGER_get_uint64(&iter, p->iter) != 1) {
      return KeyFormat("the encrypted key's PBKDF2 parameters do not parse");
    }
    if (iter > options.max_pbkdf2_iterations) {
      return KeyFormat("the encrypted key asks for " + std::to_string(iter) +
                       " PBKDF2 iterations, over the limit max_pbkdf2_iterations of " +
                       std::to_string(options.max_pbkdf2_iterations));
    }
    return core::OkStatus();
  }
  if (kdf == NID_id_scrypt) {
    std::unique_ptr<SCRYPT_PARAMS, void (*)(SCRYPT_PARAMS*)> p(
        static_cast<SCRYPT_PARAMS*>(
            ASN1_TYPE_unpack_sequence(ASN1_ITEM_rptr(SCRYPT_PARAMS), pbe2->keyfunc->parameter)),
        SCRYPT_PARAMS_free);
    uint64_t n = 0, r = 0, par = 0, cost = 0;
    if (!p || ASN1_INTEGER_get_uint64(&n, p->costParameter) != 1 ||
        ASN1_INTEGER_get_uint64(&r, p->blockSize) != 1 ||
        ASN1_INTEGER_get_uint64(&par, p->parallelizationParameter) != 1) {
      return KeyFormat("the encrypted key's scrypt parameters do not parse");
    }
    if (__builtin_mul_overflow(n, r, &cost) || __builtin_mul_overflow(cost, par, &cost) ||
        cost > options.max_scrypt_cost) {
      return KeyFormat("the encrypted key asks for scrypt N=" + std::to_string(n) + " r=" +
                       std::to_string(r) + " p=" + std::to_string(par) +
                       ": N*r*p is over the limit max_scrypt_cost of " +
                       std::to_string(options.max_scrypt_cost));
    }
    return core::OkStatus();
  }
  return KeyFormat("the encrypted key's key derivation is neither PBKDF2 nor scrypt");
}

// DecryptPkcs8 decrypts one "ENCRYPTED PRIVATE KEY" block into an
// EVP_PKEY (the caller owns it). The decrypted PrivateKeyInfo is freed by
// OpenSSL, which clears its key octets.
core::Result<EVP_PKEY*> DecryptPkcs8(std::string_view pem, std::span<const uint8_t> passphrase,
                                     const KeyReadOptions& options) {
  if (pem.size() > kMaxKeyFileBytes || passphrase.size() > static_cast<size_t>(INT_MAX)) {
    return KeyFormat("key file or passphrase too large");
  }
  std::unique_ptr<BIO, BioFree> bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  std::unique_ptr<X509_SIG, X509SigFree> p8(
      bio ? PEM_read_bio_PKCS8(bio.get(), nullptr, NoPassphrase, nullptr) : nullptr);
  if (!p8) return KeyFormat("not a PKCS#8 \"ENCRYPTED PRIVATE KEY\" PEM");
  core::Status kdf = CheckKdf(p8.get(), options);
  if (!kdf.ok()) return kdf.error();
  std::unique_ptr<PKCS8_PRIV_KEY_INFO, P8InfoFree> info(
      PKCS8_decrypt(p8.get(), reinterpret_cast<const char*>(passphrase.data()),
                    static_cast<int>(passphrase.size())));
  if (!info) {
    // AES-CBC under a wrong key fails its padding check, or (1 in 256)
    // yields bytes that are not a PrivateKeyInfo: one answer for both.
    ERR_clear_error();
    return Error{Code::kSigKeyPassphrase, kNoOffset,
                 "the passphrase does not decrypt the key (wrong passphrase, or a damaged file)"};
  }
  EVP_PKEY* pkey = EVP_PKCS82PKEY(info.get());
  if (pkey == nullptr) {
    ERR_clear_error();
    return Error{Code::kSigKeyPassphrase, kNoOffset,
                 "the decrypted key does not parse (wrong passphrase, or a damaged file)"};
  }
  return pkey;
}

// EncryptedPkcs8Pem is `pkey` as an "ENCRYPTED PRIVATE KEY" PEM (PBES2,
// scrypt, AES-256-CBC), in a buffer the caller wipes.
core::Result<std::vector<uint8_t>> EncryptedPkcs8Pem(EVP_PKEY* pkey, std::span<const uint8_t> passphrase) {
  if (passphrase.empty()) {
    return Error{Code::kSigOptions, kNoOffset, "an empty passphrase would not protect the key"};
  }
  if (passphrase.size() > static_cast<size_t>(INT_MAX)) {
    return Error{Code::kSigOptions, kNoOffset, "passphrase too large"};
  }
  auto fail = [](const std::string& what) {
    ERR_clear_error();
    return Error{Code::kSigCrypto, kNoOffset, what + " failed"};
  };
  std::unique_ptr<PKCS8_PRIV_KEY_INFO, P8InfoFree> info(EVP_PKEY2PKCS8(pkey));
  if (!info) return fail("EVP_PKEY2PKCS8");
  // A 16-byte salt (OpenSSL's default is 8) and the IV are drawn from
  // OpenSSL's RAND when given as null.
  X509_ALGOR* pbe = PKCS5_pbe2_set_scrypt(EVP_aes_256_cbc(), nullptr, 16, nullptr, kScryptN, kScryptR, kScryptP);
  if (pbe == nullptr) return fail("PKCS5_pbe2_set_scrypt");
  std::unique_ptr<X509_SIG, X509SigFree> p8(PKCS8_set0_pbe(
      reinterpret_cast<const char*>(passphrase.data()), static_cast<int>(passphrase.size()), info.get(), pbe));
  if (!p8) {
    X509_ALGOR_free(pbe);
    return fail("PKCS8_set0_pbe");
  }
  std::unique_ptr<BIO, BioFree> bio(BIO_new(BIO_s_mem()));
  if (!bio || PEM_write_bio_PKCS8(bio.get(), p8.get()) != 1) return fail("PEM_write_bio_PKCS8");
  char* data = nullptr;
  const long n = BIO_get_mem_data(bio.get(), &data);
  if (n <= 0 || data == nullptr) return fail("PEM_write_bio_PKCS8 (empty)");
  return std::vector<uint8_t>(data, data + n);  // ciphertext: no secret in the BIO
}

// CheckParametersMatch: the EC PARAMETERS block names the key's curve (a
// file whose two blocks disagree is not one key to trust).
core::Status CheckParametersMatch(std::string_view params, const EVP_PKEY* key) {
  EVP_PKEY* p = PemToPkey(params, [](BIO* bio) { return PEM_read_bio_Parameters(bio, nullptr); });
  bool same = p != nullptr && EVP_PKEY_parameters_eq(p, key) == 1;
  EVP_PKEY_free(p);
  if (!same) {
    return Error{Code::kSigKeyFormat, kNoOffset,
                 "the EC PARAMETERS block does not name the EC PRIVATE KEY's curve"};
  }
  return core::OkStatus();
}

}  // namespace

// ---- PublicKey ---------------------------------------------------------------

std::string_view KeyAlgName(KeyAlg alg) {
  switch (alg) {
    case KeyAlg::kEd25519:
      return kAlgEd25519;
    case KeyAlg::kEcdsaP256:
      return "ecdsa-p256";
    case KeyAlg::kEcdsaP384:
      return "ecdsa-p384";
    case KeyAlg::kEcdsaP521:
      return "ecdsa-p521";
  }
  return "unknown";
}

std::optional<KeyAlg> ParseKeyAlg(std::string_view name) {
  for (KeyAlg alg : {KeyAlg::kEd25519, KeyAlg::kEcdsaP256, KeyAlg::kEcdsaP384, KeyAlg::kEcdsaP521}) {
    if (name == KeyAlgName(alg)) return alg;
  }
  return std::nullopt;
}

std::string PublicKey::kid_hex() const { return core::HexLower(kid); }

std::vector<uint8_t> SubjectPublicKeyInfoDer(const PublicKey& key) {
  if (key.alg != KeyAlg::kEd25519) return key.spki_der;
  std::vector<uint8_t> der(kSpkiPrefix.size() + key.raw.size());
  std::copy(kSpkiPrefix.begin(), kSpkiPrefix.end(), der.begin());
  std::copy(key.raw.begin(), key.raw.end(), der.begin() + kSpkiPrefix.size());
  return der;
}

PublicKey PublicKeyFromRaw(std::span<const uint8_t, kPublicKeyBytes> raw) {
  PublicKey k;
  std::copy(raw.begin(), raw.end(), k.raw.begin());
  k.spki_der = SubjectPublicKeyInfoDer(k);
  core::Sha256Digest d = core::Sha256(k.spki_der);
  std::copy_n(d.begin(), kKeyIdBytes, k.kid.begin());
  return k;
}

std::string PublicKeyPem(const PublicKey& key) {
  if (key.alg != KeyAlg::kEd25519) return ecdsa::PublicKeyPem(key);
  return "-----BEGIN PUBLIC KEY-----\n" + internal::Base64(SubjectPublicKeyInfoDer(key)) +
         "\n-----END PUBLIC KEY-----\n";
}

core::Result<PublicKey> ParsePublicKeyPem(std::string_view pem) {
  core::Status one = CheckOnePemBlock(pem);
  if (!one.ok()) return one.error();
  EVP_PKEY* pkey = PemToPkey(pem, [](BIO* bio) {
    return PEM_read_bio_PUBKEY(bio, nullptr, NoPassphrase, nullptr);
  });
  if (pkey == nullptr) {
    return Error{Code::kSigKeyFormat, kNoOffset, "not a PEM \"PUBLIC KEY\" (SubjectPublicKeyInfo)"};
  }
  if (EVP_PKEY_get_base_id(pkey) == EVP_PKEY_EC) {
    ecdsa::Pkey ec(pkey);
    auto alg = ecdsa::AlgOf(ec.get());
    if (!alg.ok()) return alg.error();
    core::Status checked = ecdsa::CheckPublic(ec.get());
    if (!checked.ok()) return checked.error();
    return ecdsa::PublicKeyOf(ec.get(), alg.value());
  }
  std::array<uint8_t, kPublicKeyBytes> raw{};
  size_t len = raw.size();
  bool ok = IsEd25519(pkey) && EVP_PKEY_get_raw_public_key(pkey, raw.data(), &len) == 1 &&
            len == raw.size();
  EVP_PKEY_free(pkey);
  if (!ok) {
    return Error{Code::kSigKeyFormat, kNoOffset,
                 "public key is neither Ed25519 nor ECDSA (P-256, P-384, P-521)"};
  }
  return PublicKeyFromRaw(raw);
}

bool VerifySignature(const PublicKey& key, std::span<const uint8_t> message,
                     std::span<const uint8_t> sig) {
  if (key.alg != KeyAlg::kEd25519) return ecdsa::Verify(key, message, sig);
  if (sig.size() != kSignatureBytes || !internal::EnsureSodium().ok()) return false;
  return crypto_sign_verify_detached(sig.data(), message.data(), message.size(), key.raw.data()) == 0;
}

core::Result<PublicKey> LoadPublicKey(const std::string& path) {
  std::vector<char> text;
  core::Status s = ReadKeyFile(path, text);
  if (!s.ok()) return s.error();
  auto key = ParsePublicKeyPem(std::string_view(text.data(), text.size()));
  if (!key.ok()) return Error{key.error().code, kNoOffset, path + ": " + key.error().message};
  return key;
}

core::Status WritePublicKeyPem(const PublicKey& key, const std::string& path) {
  std::string pem = PublicKeyPem(key);
  return WriteNewFile(path, std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(pem.data()), pem.size()),
                      0644);
}

// ---- PrivateKey --------------------------------------------------------------

struct PrivateKey::Secret {
  std::array<uint8_t, kSeedBytes> seed{};
  std::array<uint8_t, crypto_sign_SECRETKEYBYTES> sk{};  // libsodium: seed || pk
  ecdsa::Pkey ec;  // ECDSA keys only (then seed and sk stay zero)
  std::unique_ptr<pkcs11::TokenKey> token;  // a key on a PKCS#11 token (all else empty)
  Secret() = default;
  Secret(const Secret&) = delete;
  Secret& operator=(const Secret&) = delete;
  ~Secret() {
    sodium_memzero(seed.data(), seed.size());
    sodium_memzero(sk.data(), sk.size());
  }
};

PrivateKey::PrivateKey(std::unique_ptr<Secret> secret, PublicKey pub)
    : secret_(std::move(secret)), public_(std::move(pub)) {}
PrivateKey::PrivateKey(PrivateKey&& other) noexcept = default;
PrivateKey& PrivateKey::operator=(PrivateKey&& other) noexcept = default;
PrivateKey::~PrivateKey() = default;

core::Result<PrivateKey> PrivateKey::FromSeed(std::span<const uint8_t, kSeedBytes> seed) {
  core::Status init = internal::EnsureSodium();
  if (!init.ok()) return init.error();
  auto secret = std::make_unique<Secret>();
  std::copy(seed.begin(), seed.end(), secret->seed.begin());
  std::array<uint8_t, crypto_sign_PUBLICKEYBYTES> pk{};
  if (crypto_sign_seed_keypair(pk.data(), secret->sk.data(), secret->seed.data()) != 0) {
    return Error{Code::kSigCrypto, kNoOffset, "crypto_sign_seed_keypair failed"};
  }
  PublicKey pub = PublicKeyFromRaw(pk);
  return PrivateKey(std::move(secret), std::move(pub));
}

core::Result<PrivateKey> PrivateKey::Generate(KeyAlg alg) {
  if (alg != KeyAlg::kEd25519) {
    auto ec = ecdsa::Generate(alg);
    if (!ec.ok()) return ec.error();
    auto pub = ecdsa::PublicKeyOf(ec.value().get(), alg);
    if (!pub.ok()) return pub.error();
    auto secret = std::make_unique<Secret>();
    secret->ec = std::move(ec).value();
    return PrivateKey(std::move(secret), std::move(pub).value());
  }
  core::Status init = internal::EnsureSodium();
  if (!init.ok()) return init.error();
  auto secret = std::make_unique<Secret>();
  std::array<uint8_t, crypto_sign_PUBLICKEYBYTES> pk{};
  if (crypto_sign_keypair(pk.data(), secret->sk.data()) != 0) {
    return Error{Code::kSigCrypto, kNoOffset, "crypto_sign_keypair failed"};
  }
  crypto_sign_ed25519_sk_to_seed(secret->seed.data(), secret->sk.data());
  PublicKey pub = PublicKeyFromRaw(pk);
  return PrivateKey(std::move(secret), std::move(pub));
}

bool PrivateKey::on_token() const { return secret_ && secret_->token; }

Signature PrivateKey::Sign(std::span<const uint8_t> message) const {
  Signature sig{};
  if (alg() != KeyAlg::kEd25519) return sig;
  if (on_token()) {
    auto made = secret_->token->Sign(message);
    if (made.ok() && made.value().size() == sig.size()) {
      std::copy(made.value().begin(), made.value().end(), sig.begin());
    }
    return sig;  // all zero on failure: verifies under no key
  }
  crypto_sign_detached(sig.data(), nullptr, message.data(), message.size(), secret_->sk.data());
  return sig;
}

core::Result<std::vector<uint8_t>> PrivateKey::SignBytes(std::span<const uint8_t> message) const {
  if (on_token()) return secret_->token->Sign(message);
  if (alg() != KeyAlg::kEd25519) return ecdsa::Sign(secret_->ec.get(), alg(), message);
  const Signature sig = Sign(message);
  return std::vector<uint8_t>(sig.begin(), sig.end());
}

core::Status PrivateKey::WritePem(const std::string& path,
                                  std::optional<std::span<const uint8_t>> passphrase) const {
  if (on_token()) {
    return Error{Code::kSigOptions, kNoOffset, "a PKCS#11 token key cannot be written to a file"};
  }
  if (passphrase) {
    ecdsa::Pkey ed;
    EVP_PKEY* pkey = secret_->ec.get();
    if (alg() == KeyAlg::kEd25519) {
      ed.reset(EVP_PKEY_new_raw_private_key(EVP_PKEY_ED25519, nullptr, secret_->seed.data(),
                                            secret_->seed.size()));
      if (!ed) {
        ERR_clear_error();
        return Error{Code::kSigCrypto, kNoOffset, "EVP_PKEY_new_raw_private_key failed"};
      }
      pkey = ed.get();
    }
    auto pem = EncryptedPkcs8Pem(pkey, *passphrase);
    if (!pem.ok()) return pem.error();
    return WriteNewFile(path, pem.value(), 0600);
  }
  if (alg() != KeyAlg::kEd25519) {
    auto pem = ecdsa::PrivateKeyPem(secret_->ec.get());
    if (!pem.ok()) return pem.error();
    std::vector<uint8_t> text = std::move(pem).value();
    core::Status s = WriteNewFile(path, text, 0600);
    sodium_memzero(text.data(), text.size());
    return s;
  }
  static constexpr std::string_view kBegin = "-----BEGIN PRIVATE KEY-----\n";
  static constexpr std::string_view kEnd = "\n-----END PRIVATE KEY-----\n";
  Wiped<kPkcs8Prefix.size() + kSeedBytes> der;
  std::copy(kPkcs8Prefix.begin(), kPkcs8Prefix.end(), der.b.begin());
  std::copy(secret_->seed.begin(), secret_->seed.end(), der.b.begin() + kPkcs8Prefix.size());
  // 48 bytes are 64 base64 characters: one PEM line.
  constexpr size_t kB64 = sodium_base64_ENCODED_LEN(der.b.size(), sodium_base64_VARIANT_ORIGINAL);
  Wiped<kBegin.size() + kB64 - 1 + kEnd.size()> pem;
  auto* out = reinterpret_cast<char*>(pem.b.data());
  std::copy(kBegin.begin(), kBegin.end(), out);
  Wiped<kB64> b64;
  sodium_bin2base64(reinterpret_cast<char*>(b64.b.data()), b64.b.size(), der.b.data(), der.b.size(),
                    sodium_base64_VARIANT_ORIGINAL);
  std::copy_n(b64.b.begin(), kB64 - 1, pem.b.begin() + kBegin.size());
  std::copy(kEnd.begin(), kEnd.end(), out + kBegin.size() + kB64 - 1);
  return WriteNewFile(path, pem.b, 0600);
}

core::Result<PrivateKey> ParsePrivateKeyPem(std::string_view text, const KeyReadOptions& options) {
  std::string_view params, pem;
  SplitEcParameters(text, params, pem);
  core::Status one = CheckOnePemBlock(pem);
  if (!one.ok()) return one.error();
  const std::string_view label = PemLabel(pem);
  if (pem.find("Proc-Type: 4,ENCRYPTED") != std::string_view::npos) {
    return Error{Code::kSigKeyFormat, kNoOffset,
                 "the private key uses legacy PEM encryption (Proc-Type: 4,ENCRYPTED, an MD5 "
                 "key derivation); convert it to an encrypted PKCS#8 key: "
                 "openssl pkcs8 -topk8 -scrypt -in K -out K.p8"};
  }
  EVP_PKEY* pkey = nullptr;
  if (label == "ENCRYPTED PRIVATE KEY") {
    if (!params.empty()) return KeyFormat("an EC PARAMETERS block may only precede an EC PRIVATE KEY");
    if (!options.passphrase) {
      return Error{Code::kSigKeyEncrypted, kNoOffset,
                   "the private key is encrypted and no passphrase was given (--passphrase-file "
                   "FILE or MODELGATE_KEY_PASSPHRASE)"};
    }
    auto decrypted = DecryptPkcs8(pem, *options.passphrase, options);
    if (!decrypted.ok()) return decrypted.error();
    pkey = decrypted.value();
  } else if (label != "PRIVATE KEY" && label != "EC PRIVATE KEY") {
    return Error{Code::kSigKeyFormat, kNoOffset,
                 "PEM block " + core::Quoted(label) +
                     " is not a private key (\"PRIVATE KEY\" PKCS#8 or \"EC PRIVATE KEY\" SEC1)"};
  }
  if (!params.empty() && label != "EC PRIVATE KEY") {
    return Error{Code::kSigKeyFormat, kNoOffset,
                 "an EC PARAMETERS block may only precede an \"EC PRIVATE KEY\" block"};
  }
  if (pkey == nullptr) {
    pkey = PemToPkey(pem, [](BIO* bio) {
      return PEM_read_bio_PrivateKey(bio, nullptr, NoPassphrase, nullptr);
    });
  }
  if (pkey == nullptr) {
    return Error{Code::kSigKeyFormat, kNoOffset,
                 "not an unencrypted PKCS#8 \"PRIVATE KEY\" or SEC1 \"EC PRIVATE KEY\" PEM"};
  }
  if (EVP_PKEY_get_base_id(pkey) == EVP_PKEY_EC) {
    ecdsa::Pkey ec(pkey);
    auto alg = ecdsa::AlgOf(ec.get());
    if (!alg.ok()) return alg.error();
    if (!params.empty()) {
      core::Status same = CheckParametersMatch(params, ec.get());
      if (!same.ok()) return same.error();
    }
    core::Status checked = ecdsa::CheckPrivate(ec.get());
    if (!checked.ok()) return checked.error();
    auto pub = ecdsa::PublicKeyOf(ec.get(), alg.value());
    if (!pub.ok()) return pub.error();
    auto secret = std::make_unique<PrivateKey::Secret>();
    secret->ec = std::move(ec);
    return PrivateKey(std::move(secret), std::move(pub).value());
  }
  if (!params.empty()) {
    EVP_PKEY_free(pkey);
    return Error{Code::kSigKeyFormat, kNoOffset,
                 "an EC PARAMETERS block may only precede an EC private key"};
  }
  Wiped<kSeedBytes> seed;
  size_t len = seed.b.size();
  bool ok = IsEd25519(pkey) && EVP_PKEY_get_raw_private_key(pkey, seed.b.data(), &len) == 1 &&
            len == seed.b.size();
  EVP_PKEY_free(pkey);  // frees (and OpenSSL clears) its copy of the key
  if (!ok) {
    return Error{Code::kSigKeyFormat, kNoOffset,
                 "private key is neither Ed25519 nor ECDSA (P-256, P-384, P-521)"};
  }
  return PrivateKey::FromSeed(seed.b);
}

core::Result<PrivateKey> LoadPrivateKey(const std::string& path, const KeyReadOptions& options) {
  std::vector<char> text;
  core::Status s = ReadKeyFile(path, text);
  core::Result<PrivateKey> key = s.ok() ? ParsePrivateKeyPem(std::string_view(text.data(), text.size()), options)
                                        : core::Result<PrivateKey>(s.error());
  sodium_memzero(text.data(), text.size());
  if (!key.ok()) return Error{key.error().code, kNoOffset, path + ": " + key.error().message};
  return key;
}

core::Result<KeygenResult> Keygen(const std::string& prefix, KeyAlg alg,
                                  std::optional<std::span<const uint8_t>> passphrase) {
  auto key = PrivateKey::Generate(alg);
  if (!key.ok()) return key.error();
  KeygenResult out;
  out.private_path = prefix + ".key";
  out.public_path = prefix + ".pub";
  out.public_key = key.value().public_key();
  core::Status s = key.value().WritePem(out.private_path, passphrase);
  if (!s.ok()) return s.error();
  s = WritePublicKeyPem(out.public_key, out.public_path);
  if (!s.ok()) {
    ::unlink(out.private_path.c_str());  // created by us with O_EXCL just above
    return s.error();
  }
  return out;
}

bool IsPkcs11Uri(std::string_view key) { return key.substr(0, 7) == "pkcs11:"; }

core::Result<PrivateKey> OpenPkcs11Key(std::string_view uri, const Pkcs11Options& options) {
  auto opened = pkcs11::Open(uri, options);
  if (!opened.ok()) return opened.error();
  pkcs11::Opened o = std::move(opened).value();
  auto secret = std::make_unique<PrivateKey::Secret>();
  secret->token = std::move(o.key);
  return PrivateKey(std::move(secret), std::move(o.public_key));
}

}  // namespace modelgate::signer
