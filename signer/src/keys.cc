// Keys: Ed25519 (libsodium) and ECDSA P-256/P-384/P-521 (OpenSSL, ecdsa.cc):
// generation, PKCS#8 / SEC1 / SPKI PEM files, key ids. Every buffer that
// holds a seed, a secret key, its DER or its PEM text is wiped with
// sodium_memzero on every path out.
#include <fcntl.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <sodium.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "ecdsa.h"
#include "internal.h"

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

Signature PrivateKey::Sign(std::span<const uint8_t> message) const {
  Signature sig{};
  if (alg() != KeyAlg::kEd25519) return sig;
  crypto_sign_detached(sig.data(), nullptr, message.data(), message.size(), secret_->sk.data());
  return sig;
}

core::Result<std::vector<uint8_t>> PrivateKey::SignBytes(std::span<const uint8_t> message) const {
  if (alg() != KeyAlg::kEd25519) return ecdsa::Sign(secret_->ec.get(), alg(), message);
  const Signature sig = Sign(message);
  return std::vector<uint8_t>(sig.begin(), sig.end());
}

core::Status PrivateKey::WritePem(const std::string& path) const {
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

core::Result<PrivateKey> ParsePrivateKeyPem(std::string_view text) {
  std::string_view params, pem;
  SplitEcParameters(text, params, pem);
  core::Status one = CheckOnePemBlock(pem);
  if (!one.ok()) return one.error();
  const std::string_view label = PemLabel(pem);
  if (label == "ENCRYPTED PRIVATE KEY" || pem.find("Proc-Type: 4,ENCRYPTED") != std::string_view::npos) {
    return Error{Code::kSigKeyFormat, kNoOffset,
                 "the private key is encrypted; modelgate never asks for a passphrase (decrypt "
                 "it into a 0600 file first, e.g. `openssl pkey -in K -out K.plain`)"};
  }
  if (label != "PRIVATE KEY" && label != "EC PRIVATE KEY") {
    return Error{Code::kSigKeyFormat, kNoOffset,
                 "PEM block " + core::Quoted(label) +
                     " is not a private key (\"PRIVATE KEY\" PKCS#8 or \"EC PRIVATE KEY\" SEC1)"};
  }
  if (!params.empty() && label != "EC PRIVATE KEY") {
    return Error{Code::kSigKeyFormat, kNoOffset,
                 "an EC PARAMETERS block may only precede an \"EC PRIVATE KEY\" block"};
  }
  EVP_PKEY* pkey = PemToPkey(pem, [](BIO* bio) {
    return PEM_read_bio_PrivateKey(bio, nullptr, NoPassphrase, nullptr);
  });
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

core::Result<PrivateKey> LoadPrivateKey(const std::string& path) {
  std::vector<char> text;
  core::Status s = ReadKeyFile(path, text);
  core::Result<PrivateKey> key = s.ok() ? ParsePrivateKeyPem(std::string_view(text.data(), text.size()))
                                        : core::Result<PrivateKey>(s.error());
  sodium_memzero(text.data(), text.size());
  if (!key.ok()) return Error{key.error().code, kNoOffset, path + ": " + key.error().message};
  return key;
}

core::Result<KeygenResult> Keygen(const std::string& prefix, KeyAlg alg) {
  auto key = PrivateKey::Generate(alg);
  if (!key.ok()) return key.error();
  KeygenResult out;
  out.private_path = prefix + ".key";
  out.public_path = prefix + ".pub";
  out.public_key = key.value().public_key();
  core::Status s = key.value().WritePem(out.private_path);
  if (!s.ok()) return s.error();
  s = WritePublicKeyPem(out.public_key, out.public_path);
  if (!s.ok()) {
    ::unlink(out.private_path.c_str());  // created by us with O_EXCL just above
    return s.error();
  }
  return out;
}

}  // namespace modelgate::signer
