// Keys on a PKCS#11 token, private to the signer: OpenPkcs11Key (signer.h)
// is the public face. The key's secret never leaves the token; a TokenKey
// holds the module, the logged-in session and the object handle, and signs
// through C_Sign.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "modelgate/core.h"
#include "modelgate/signer.h"

namespace modelgate::signer::pkcs11 {

// TokenKey signs on the token: Ed25519 the 64 raw bytes of CKM_EDDSA over
// the message, ECDSA a DER signature of CKM_ECDSA over the curve's digest of
// the message (the same forms PrivateKey::SignBytes returns for file keys).
// Destroying it logs out, closes the session and finalizes the module.
class TokenKey {
 public:
  virtual ~TokenKey() = default;
  virtual core::Result<std::vector<uint8_t>> Sign(std::span<const uint8_t> message) const = 0;
};

struct Opened {
  std::unique_ptr<TokenKey> key;
  PublicKey public_key;
};

// Open is OpenPkcs11Key's work (signer.h has the contract).
core::Result<Opened> Open(std::string_view uri, const Pkcs11Options& options);

}  // namespace modelgate::signer::pkcs11
