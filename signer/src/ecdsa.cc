// ECDSA over OpenSSL 3 EVP for P-256/P-384/P-521 keys (detached OMS bundles:
// what model_signing signs with). No hand-written crypto: OpenSSL parses,
// checks, signs and verifies; this file only picks the curve's digest and
// keeps the encodings canonical.
#include "ecdsa.h"

#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/core_names.h>
#include <openssl/ec.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <algorithm>
#include <array>
#include <climits>

namespace modelgate::signer::ecdsa {
namespace {

using core::Code;
using core::Error;
using core::kNoOffset;

struct MdCtxFree {
  void operator()(EVP_MD_CTX* p) const { EVP_MD_CTX_free(p); }
};
struct PkeyCtxFree {
  void operator()(EVP_PKEY_CTX* p) const { EVP_PKEY_CTX_free(p); }
};
struct BioFree {
  void operator()(BIO* p) const { BIO_free(p); }
};

// DigestFor is the hash model_signing (Python cryptography's ECDSA with the
// curve's "natural" hash) uses for each curve; checked against the vectors'
// P-384 and P-521 bundles in keys_ecdsa_test.
const EVP_MD* DigestFor(KeyAlg alg) {
  switch (alg) {
    case KeyAlg::kEcdsaP256:
      return EVP_sha256();
    case KeyAlg::kEcdsaP384:
      return EVP_sha384();
    case KeyAlg::kEcdsaP521:
      return EVP_sha512();
    case KeyAlg::kEd25519:
      break;
  }
  return nullptr;
}

// CurveName is the name EVP_PKEY_Q_keygen takes for `alg`.
const char* CurveName(KeyAlg alg) {
  switch (alg) {
    case KeyAlg::kEcdsaP256:
      return "P-256";
    case KeyAlg::kEcdsaP384:
      return "P-384";
    case KeyAlg::kEcdsaP521:
      return "P-521";
    case KeyAlg::kEd25519:
      break;
  }
  return nullptr;
}

// OpensslError is a kSigCrypto error for `what`, with OpenSSL's first queued
// reason (the queue is cleared so it does not leak into a later call).
Error OpensslError(const std::string& what) {
  unsigned long e = ERR_get_error();
  std::string reason;
  if (e != 0) {
    std::array<char, 256> buf{};
    ERR_error_string_n(e, buf.data(), buf.size());
    reason = std::string(": ") + buf.data();
  }
  ERR_clear_error();
  return Error{Code::kSigCrypto, kNoOffset, what + reason};
}

Error KeyFormat(const std::string& message) {
  ERR_clear_error();
  return Error{Code::kSigKeyFormat, kNoOffset, message};
}

// Utf8Param reads a short string parameter of `pkey` ("" when absent).
std::string Utf8Param(const EVP_PKEY* pkey, const char* name) {
  std::array<char, 80> buf{};
  size_t len = 0;
  if (EVP_PKEY_get_utf8_string_param(pkey, name, buf.data(), buf.size(), &len) != 1) return "";
  return std::string(buf.data(), std::min(len, buf.size()));
}

core::Status RunCheck(EVP_PKEY* pkey, int (*check)(EVP_PKEY_CTX*), const char* what) {
  std::unique_ptr<EVP_PKEY_CTX, PkeyCtxFree> ctx(EVP_PKEY_CTX_new_from_pkey(nullptr, pkey, nullptr));
  if (!ctx) return OpensslError("EVP_PKEY_CTX_new_from_pkey failed");
  if (check(ctx.get()) != 1) return KeyFormat(what);
  return core::OkStatus();
}

// ParseSpki decodes exactly `der` (no trailing bytes).
Pkey ParseSpki(std::span<const uint8_t> der) {
  if (der.empty() || der.size() > static_cast<size_t>(INT_MAX)) return nullptr;
  const unsigned char* p = der.data();
  Pkey pkey(d2i_PUBKEY(nullptr, &p, static_cast<long>(der.size())));
  if (pkey && p != der.data() + der.size()) pkey.reset();
  return pkey;
}

}  // namespace

bool IsEcdsa(KeyAlg alg) { return DigestFor(alg) != nullptr; }

core::Result<KeyAlg> AlgOf(const EVP_PKEY* pkey) {
  if (EVP_PKEY_get_base_id(pkey) != EVP_PKEY_EC) return KeyFormat("not an EC key");
  const std::string encoding = Utf8Param(pkey, OSSL_PKEY_PARAM_EC_ENCODING);
  if (encoding != OSSL_PKEY_EC_ENCODING_GROUP) {
    return KeyFormat("EC key with explicit curve parameters; only named curves are accepted "
                     "(P-256, P-384, P-521)");
  }
  const std::string group = Utf8Param(pkey, OSSL_PKEY_PARAM_GROUP_NAME);
  if (group == "prime256v1" || group == "P-256") return KeyAlg::kEcdsaP256;
  if (group == "secp384r1" || group == "P-384") return KeyAlg::kEcdsaP384;
  if (group == "secp521r1" || group == "P-521") return KeyAlg::kEcdsaP521;
  return KeyFormat("EC curve " + core::Quoted(group.empty() ? "(unnamed)" : group) +
                   " is not accepted (P-256, P-384, P-521)");
}

core::Result<PublicKey> PublicKeyOf(EVP_PKEY* pkey, KeyAlg alg) {
  // A key read with a compressed point would otherwise be written (and its
  // kid computed) compressed: one key, two ids, and a PEM whose hash is not
  // the hint model_signing computes.
  if (EVP_PKEY_set_utf8_string_param(pkey, OSSL_PKEY_PARAM_EC_POINT_CONVERSION_FORMAT,
                                     OSSL_PKEY_EC_POINT_CONVERSION_FORMAT_UNCOMPRESSED) != 1) {
    return OpensslError("cannot set the EC point format");
  }
  unsigned char* der = nullptr;
  const int n = i2d_PUBKEY(pkey, &der);
  if (n <= 0 || der == nullptr) return OpensslError("i2d_PUBKEY failed");
  PublicKey key;
  key.alg = alg;
  key.spki_der.assign(der, der + n);
  OPENSSL_free(der);
  const core::Sha256Digest d = core::Sha256(key.spki_der);
  std::copy_n(d.begin(), kKeyIdBytes, key.kid.begin());
  return key;
}

core::Status CheckPublic(EVP_PKEY* pkey) {
  return RunCheck(pkey, EVP_PKEY_public_check, "EC public key fails OpenSSL's checks");
}

core::Status CheckPrivate(EVP_PKEY* pkey) {
  return RunCheck(pkey, EVP_PKEY_pairwise_check,
                  "EC private key does not match the public key stored with it");
}

core::Result<Pkey> Generate(KeyAlg alg) {
  const char* curve = CurveName(alg);
  if (curve == nullptr) return Error{Code::kSigOptions, kNoOffset, "not an ECDSA algorithm"};
  Pkey pkey(EVP_PKEY_Q_keygen(nullptr, nullptr, "EC", curve));
  if (!pkey) return OpensslError(std::string("EC key generation on ") + curve + " failed");
  return pkey;
}

core::Result<std::vector<uint8_t>> Sign(EVP_PKEY* pkey, KeyAlg alg, std::span<const uint8_t> message) {
  const EVP_MD* md = DigestFor(alg);
  if (md == nullptr) return Error{Code::kSigOptions, kNoOffset, "not an ECDSA algorithm"};
  std::unique_ptr<EVP_MD_CTX, MdCtxFree> ctx(EVP_MD_CTX_new());
  if (!ctx || EVP_DigestSignInit(ctx.get(), nullptr, md, nullptr, pkey) != 1) {
    return OpensslError("EVP_DigestSignInit failed");
  }
  size_t len = 0;
  if (EVP_DigestSign(ctx.get(), nullptr, &len, message.data(), message.size()) != 1) {
    return OpensslError("EVP_DigestSign (size) failed");
  }
  std::vector<uint8_t> sig(len);
  if (EVP_DigestSign(ctx.get(), sig.data(), &len, message.data(), message.size()) != 1) {
    return OpensslError("EVP_DigestSign failed");
  }
  sig.resize(len);
  return sig;
}

core::Result<std::vector<uint8_t>> Digest(KeyAlg alg, std::span<const uint8_t> message) {
  const EVP_MD* md = DigestFor(alg);
  if (md == nullptr) return Error{Code::kSigOptions, kNoOffset, "not an ECDSA algorithm"};
  std::vector<uint8_t> out(static_cast<size_t>(EVP_MD_get_size(md)));
  unsigned int len = 0;
  if (EVP_Digest(message.data(), message.size(), out.data(), &len, md, nullptr) != 1 ||
      len != out.size()) {
    return OpensslError("EVP_Digest failed");
  }
  return out;
}

core::Result<std::vector<uint8_t>> RawToDer(KeyAlg alg, std::span<const uint8_t> raw) {
  size_t field = 0;
  switch (alg) {
    case KeyAlg::kEcdsaP256: field = 32; break;
    case KeyAlg::kEcdsaP384: field = 48; break;
    case KeyAlg::kEcdsaP521: field = 66; break;
    case KeyAlg::kEd25519: break;
  }
  if (field == 0 || raw.size() != 2 * field) {
    return Error{Code::kSigCrypto, kNoOffset,
                 "the token's ECDSA signature is " + std::to_string(raw.size()) + " bytes, not " +
                     std::to_string(2 * field) + " (r || s)"};
  }
  std::unique_ptr<ECDSA_SIG, void (*)(ECDSA_SIG*)> sig(ECDSA_SIG_new(), ECDSA_SIG_free);
  BIGNUM* r = BN_bin2bn(raw.data(), static_cast<int>(field), nullptr);
  BIGNUM* s = BN_bin2bn(raw.data() + field, static_cast<int>(field), nullptr);
  if (!sig || r == nullptr || s == nullptr || ECDSA_SIG_set0(sig.get(), r, s) != 1) {
    BN_free(r);
    BN_free(s);
    return OpensslError("ECDSA_SIG_set0 failed");
  }
  unsigned char* der = nullptr;
  const int n = i2d_ECDSA_SIG(sig.get(), &der);
  if (n <= 0 || der == nullptr) return OpensslError("i2d_ECDSA_SIG failed");
  std::vector<uint8_t> out(der, der + n);
  OPENSSL_free(der);
  return out;
}

bool Verify(const PublicKey& key, std::span<const uint8_t> message, std::span<const uint8_t> sig) {
  const EVP_MD* md = DigestFor(key.alg);
  Pkey pkey = ParseSpki(key.spki_der);
  bool ok = md != nullptr && pkey != nullptr && !sig.empty();
  if (ok) {
    auto alg = AlgOf(pkey.get());
    ok = alg.ok() && alg.value() == key.alg;
  }
  std::unique_ptr<EVP_MD_CTX, MdCtxFree> ctx(ok ? EVP_MD_CTX_new() : nullptr);
  ok = ok && ctx && EVP_DigestVerifyInit(ctx.get(), nullptr, md, nullptr, pkey.get()) == 1 &&
       EVP_DigestVerify(ctx.get(), sig.data(), sig.size(), message.data(), message.size()) == 1;
  ERR_clear_error();
  return ok;
}

std::string PublicKeyPem(const PublicKey& key) {
  Pkey pkey = ParseSpki(key.spki_der);
  std::unique_ptr<BIO, BioFree> bio(BIO_new(BIO_s_mem()));
  std::string out;
  if (pkey && bio && PEM_write_bio_PUBKEY(bio.get(), pkey.get()) == 1) {
    char* data = nullptr;
    const long n = BIO_get_mem_data(bio.get(), &data);
    if (n > 0 && data != nullptr) out.assign(data, static_cast<size_t>(n));
  }
  ERR_clear_error();
  return out;
}

core::Result<std::vector<uint8_t>> PrivateKeyPem(EVP_PKEY* pkey) {
  // secmem: the BIO's buffer is cleared when freed.
  std::unique_ptr<BIO, BioFree> bio(BIO_new(BIO_s_secmem()));
  if (!bio || PEM_write_bio_PrivateKey(bio.get(), pkey, nullptr, nullptr, 0, nullptr, nullptr) != 1) {
    return OpensslError("PEM_write_bio_PrivateKey failed");
  }
  char* data = nullptr;
  const long n = BIO_get_mem_data(bio.get(), &data);
  if (n <= 0 || data == nullptr) return OpensslError("PEM_write_bio_PrivateKey wrote nothing");
  return std::vector<uint8_t>(data, data + n);
}

}  // namespace modelgate::signer::ecdsa
