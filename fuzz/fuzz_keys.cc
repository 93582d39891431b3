// fuzz_keys: the key PEM readers (ParsePublicKeyPem, ParsePrivateKeyPem) on
// arbitrary text. Key files reach the gate through policies and mounted
// secrets, so they are parsed as untrusted. Invariants:
// - a rejection is kSigKeyFormat with no offset and a message;
// - an accepted text holds exactly one PEM block ("-----BEGIN " once) with
//   only whitespace before it; it is a public or a private key, never both;
// - an accepted key round-trips: PublicKeyPem of it parses to the same raw
//   key and kid, and the kid is the one PublicKeyFromRaw computes;
// - an input starting "RAW:" gives 32 raw public-key bytes, whose PEM must
//   parse back to them exactly.
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
  Check(signer::PublicKeyFromRaw(key.raw).kid == key.kid);
  auto again = signer::ParsePublicKeyPem(signer::PublicKeyPem(key));
  Check(again.ok());
  Check(again.value().raw == key.raw && again.value().kid == key.kid);
}

// CheckOneBlock: what the readers accepted is one block and whitespace.
void CheckOneBlock(std::string_view text) {
  size_t begin = text.find("-----BEGIN ");
  Check(begin != std::string_view::npos);
  Check(text.find("-----BEGIN ", begin + 1) == std::string_view::npos);
  Check(text.find_first_not_of(" \t\r\n") == begin);
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
    CheckOneBlock(text);
    CheckRoundTrip(pub.value());
  } else {
    CheckRejection(pub.error());
  }
  auto priv = signer::ParsePrivateKeyPem(text);
  if (priv.ok()) {
    CheckOneBlock(text);
    Check(!pub.ok());
    CheckRoundTrip(priv.value().public_key());
  } else {
    CheckRejection(priv.error());
  }
  return 0;
}
