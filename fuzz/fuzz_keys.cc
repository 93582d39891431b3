// fuzz_keys: the key PEM readers (ParsePublicKeyPem, ParsePrivateKeyPem) on
// arbitrary text. Key files reach the gate through policies and mounted
// secrets, so they are parsed as untrusted. Invariants:
// - a rejection is kSigKeyFormat with no offset and a message;
// - an accepted text holds exactly one PEM block ("-----BEGIN " once) with
//   only whitespace before it -- or, for an EC private key only, an "EC
//   PARAMETERS" block and then its "EC PRIVATE KEY" block; it is a public or
//   a private key, never both;
// - an accepted key round-trips: PublicKeyPem of it parses to the same alg,
//   SPKI DER and kid; the kid is SHA-256(SPKI DER)[0..16) for every alg, and
//   for Ed25519 the one PublicKeyFromRaw computes (ECDSA keys: raw is zero);
// - an input starting "RAW:" gives 32 raw public-key bytes, whose PEM must
//   parse back to them exactly;
// - an "ENCRYPTED PRIVATE KEY" without a passphrase is kSigKeyEncrypted (and
//   nothing else is); with the passphrase "fuzz" (seed
//   ed25519.pbkdf2-fuzz.pem) and small KDF limits (a slow file would slow
//   the fuzzer, not find bugs) a rejection is kSigKeyFormat or
//   kSigKeyPassphrase, and an accepted key is the one parsed without
//   encryption would be: it round-trips. The two encrypted seeds were made
//   with `openssl pkcs8 -topk8 -v2 aes-256-cbc -iter 1 -passout pass:fuzz`
//   (an openssl genpkey Ed25519 key) and `openssl pkcs8 -topk8 -scrypt
//   -scrypt_N 16 -scrypt_r 8 -scrypt_p 1 -passout pass:fuzz` (a P-256 key).
#include <array>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>

#include "modelgate/signer.h"

namespace {

namespace core = modelgate::core;
namespace signer = modelgate::signer;

void Check(bool ok) {
  if (!ok) __builtin_trap();
}

void CheckRejection(const core::Error& e) {
  Check(e.code == core::Code::kSigKeyFormat);
  Check(e.offset == core::kNoOffset);
  Check(!e.message.empty());
}

// CheckRoundTrip: `key` re-encoded parses to itself.
void CheckRoundTrip(const signer::PublicKey& key) {
  const core::Sha256Digest d = core::Sha256(key.spki_der);
  Check(std::memcmp(d.data(), key.kid.data(), key.kid.size()) == 0);
  if (key.alg == signer::KeyAlg::kEd25519) {
    Check(signer::PublicKeyFromRaw(key.raw).kid == key.kid);
  } else {
    Check(key.raw == std::array<uint8_t, signer::kPublicKeyBytes>{});
  }
  auto again = signer::ParsePublicKeyPem(signer::PublicKeyPem(key));
  Check(again.ok());
  Check(again.value().alg == key.alg && again.value().raw == key.raw &&
        again.value().spki_der == key.spki_der && again.value().kid == key.kid);
}

// CheckOneBlock: what the readers accepted is one block and whitespace (a
// private EC key: optionally after its EC PARAMETERS block).
void CheckOneBlock(std::string_view text, bool ec_private) {
  constexpr std::string_view kParams = "-----BEGIN EC PARAMETERS-----";
  size_t begin = text.find("-----BEGIN ");
  Check(begin != std::string_view::npos);
  Check(text.find_first_not_of(" \t\r\n") == begin);
  if (ec_private && text.substr(begin, kParams.size()) == kParams) {
    begin = text.find("-----BEGIN ", begin + 1);
    Check(begin != std::string_view::npos);
    Check(text.substr(begin).rfind("-----BEGIN EC PRIVATE KEY-----", 0) == 0);
  }
  Check(text.find("-----BEGIN ", begin + 1) == std::string_view::npos);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  constexpr std::string_view kRaw = "RAW:";
  if (text.substr(0, kRaw.size()) == kRaw && size >= kRaw.size() + signer::kPublicKeyBytes) {
    std::span<const uint8_t, signer::kPublicKeyBytes> raw(data + kRaw.size(),
                                                          signer::kPublicKeyBytes);
    signer::PublicKey key = signer::PublicKeyFromRaw(raw);
    // Any 32 bytes encode; OpenSSL may refuse a point off the curve, but
    // what it accepts must be these bytes.
    auto parsed = signer::ParsePublicKeyPem(signer::PublicKeyPem(key));
    if (parsed.ok()) {
      Check(std::memcmp(parsed.value().raw.data(), raw.data(), raw.size()) == 0);
      Check(parsed.value().kid == key.kid);
    } else {
      CheckRejection(parsed.error());
    }
    return 0;
  }

  auto pub = signer::ParsePublicKeyPem(text);
  if (pub.ok()) {
    CheckOneBlock(text, false);
    CheckRoundTrip(pub.value());
  } else {
    CheckRejection(pub.error());
  }
  const bool encrypted = text.find("-----BEGIN ENCRYPTED PRIVATE KEY-----") != std::string_view::npos;
  auto priv = signer::ParsePrivateKeyPem(text);
  if (priv.ok()) {
    Check(!encrypted);
    CheckOneBlock(text, priv.value().alg() != signer::KeyAlg::kEd25519);
    Check(!pub.ok());
    CheckRoundTrip(priv.value().public_key());
  } else if (priv.error().code == core::Code::kSigKeyEncrypted) {
    Check(encrypted);
    Check(priv.error().offset == core::kNoOffset);
  } else {
    CheckRejection(priv.error());
  }
  if (!encrypted) return 0;
  static const std::string kPass = "fuzz";
  signer::KeyReadOptions options;
  options.passphrase = std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(kPass.data()), kPass.size());
  options.max_pbkdf2_iterations = 16;
  options.max_scrypt_cost = 1024;
  auto dec = signer::ParsePrivateKeyPem(text, options);
  if (dec.ok()) {
    CheckOneBlock(text, false);
    CheckRoundTrip(dec.value().public_key());
  } else if (dec.error().code != core::Code::kSigKeyPassphrase) {
    CheckRejection(dec.error());
  }
  return 0;
}
