#include <openssl/crypto.h>
#include <sodium.h>

#include "modelgate/signer.h"

namespace modelgate::signer {

std::string OpensslVersion() { return OpenSSL_version(OPENSSL_VERSION); }

std::string SodiumVersion() { return sodium_version_string(); }

}  // namespace modelgate::signer
