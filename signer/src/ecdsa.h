// ECDSA keys over OpenSSL 3 EVP, private to the signer: the NIST curves
// OpenSSF model_signing signs with. keys.cc owns the PEM framing; this file
// turns an EVP_PKEY into a PublicKey, signs and verifies.
#pragma once

#include <openssl/evp.h>

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "modelgate/core.h"
#include "modelgate/signer.h"

namespace modelgate::signer::ecdsa {

struct PkeyFree {
  void operator()(EVP_PKEY* p) const { EVP_PKEY_free(p); }
};
using Pkey = std::unique_ptr<EVP_PKEY, PkeyFree>;

// IsEcdsa: `alg` is one of the ECDSA algs.
bool IsEcdsa(KeyAlg alg);

// AlgOf is the KeyAlg of an EC key on P-256, P-384 or P-521 named by its
// OID. kSigKeyFormat for another curve, explicit curve parameters (a
// "named" curve that is really whatever the file's numbers say) or a key
// that is not EC.
core::Result<KeyAlg> AlgOf(const EVP_PKEY* pkey);

// PublicKeyOf is the public half of `pkey` (public or private, of `alg` as
// AlgOf said) as a PublicKey: SPKI DER with the point uncompressed, kid.
// It re-sets the key's point conversion form to uncompressed.
core::Result<PublicKey> PublicKeyOf(EVP_PKEY* pkey, KeyAlg alg);

// CheckPublic / CheckPrivate run OpenSSL's key checks: the point is on the
// curve and not the identity; for a private key also that its public point
// is its private scalar times the generator (a SEC1 file may carry any
// point).
core::Status CheckPublic(EVP_PKEY* pkey);
core::Status CheckPrivate(EVP_PKEY* pkey);

// Generate makes a new key on `alg`'s curve.
core::Result<Pkey> Generate(KeyAlg alg);

// Sign is the DER ECDSA signature of `message` (digest by curve).
core::Result<std::vector<uint8_t>> Sign(EVP_PKEY* pkey, KeyAlg alg,
                                        std::span<const uint8_t> message);
// Digest is the curve's digest (SHA-256/384/512) of `message`: what
// CKM_ECDSA signs on a token.
core::Result<std::vector<uint8_t>> Digest(KeyAlg alg, std::span<const uint8_t> message);
// RawToDer turns a PKCS#11 ECDSA signature (r || s, each the curve's field
// size, big-endian) into the DER ECDSA-Sig-Value the verifiers take.
core::Result<std::vector<uint8_t>> RawToDer(KeyAlg alg, std::span<const uint8_t> raw);

// Verify checks a DER signature; false on any failure.
bool Verify(const PublicKey& key, std::span<const uint8_t> message, std::span<const uint8_t> sig);

// PublicKeyPem is PEM_write_bio_PUBKEY's text for `key.spki_der` ("" only
// if OpenSSL fails, e.g. out of memory).
std::string PublicKeyPem(const PublicKey& key);

// PrivateKeyPem is `pkey` as PKCS#8 "PRIVATE KEY" PEM text in a buffer the
// caller must wipe (sodium_memzero) and discard.
core::Result<std::vector<uint8_t>> PrivateKeyPem(EVP_PKEY* pkey);

}  // namespace modelgate::signer::ecdsa
