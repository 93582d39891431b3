// Policy keys of either kind: an ECDSA (P-256/P-384/P-521) public key listed
// inline or as a file parses next to an Ed25519 one and reaches TrustedKeys
// with its alg; a curve the signer refuses is a policy error at its line.
#include <catch2/catch.hpp>

#include "policy_test_util.h"

namespace policy = modelgate::policy;
namespace signer = modelgate::signer;
using modelgate::testing::IndentedPem;
using modelgate::testing::IndentLines;
using modelgate::testing::kHead;
using modelgate::testing::ParseError;
using modelgate::testing::TempDir;
using modelgate::testing::WriteFile;

namespace {

// A secp256k1 SPKI (openssl ecparam -name secp256k1 -genkey | openssl ec -pubout).
constexpr std::string_view kSecp256k1Pem =
    "-----BEGIN PUBLIC KEY-----\n"
    "MFYwEAYHKoZIzj0CAQYFK4EEAAoDQgAEYGdfOrL7Qt2Wevtr8v+iLUAcfDO/4KF/\n"
    "H2qtvAxThidnSMV09e4/h5NKY1rqkCDPnB2iub8mN6V8qEFbjpn46g==\n"
    "-----END PUBLIC KEY-----\n";

}  // namespace

TEST_CASE("policy: ECDSA public keys parse inline and from a file, next to Ed25519",
          "[policy][parse][ecdsa]") {
  TempDir dir;
  auto p256 = signer::PrivateKey::Generate(signer::KeyAlg::kEcdsaP256);
  auto p384 = signer::PrivateKey::Generate(signer::KeyAlg::kEcdsaP384);
  REQUIRE(p256.ok());
  REQUIRE(p384.ok());
  WriteFile(dir / "p384.pub", signer::PublicKeyPem(p384.value().public_key()));
  const std::string yaml = std::string(kHead) +
                           "signatures:\n"
                           "  required: true\n"
                           "  keys:\n"
                           "    - name: ed\n"
                           "      publicKey: |\n" + IndentedPem(1, "        ") +
                           "    - name: ec256\n"
                           "      publicKey: |\n" +
                           IndentLines(signer::PublicKeyPem(p256.value().public_key()), "        ") +
                           "    - {name: ec384, file: p384.pub}\n";
  auto r = policy::ParsePolicy(yaml, "p.yaml", dir.path());
  INFO((r.ok() ? "" : r.error().message));
  REQUIRE(r.ok());
  const auto keys = policy::TrustedKeys(r.value());
  REQUIRE(keys.size() == 3);
  CHECK(keys[0].alg == signer::KeyAlg::kEd25519);
  CHECK(keys[1].alg == signer::KeyAlg::kEcdsaP256);
  CHECK(keys[1].kid == p256.value().public_key().kid);
  CHECK(keys[1].spki_der == p256.value().public_key().spki_der);
  CHECK(keys[1].name == "ec256");
  CHECK(keys[2].alg == signer::KeyAlg::kEcdsaP384);
  CHECK(keys[2].kid == p384.value().public_key().kid);
}

TEST_CASE("policy: an EC key on a curve the signer refuses is a parse error at the key",
          "[policy][parse][ecdsa]") {
  const std::string yaml = std::string(kHead) +
                           "signatures:\n"
                           "  keys:\n"
                           "    - name: k1\n"
                           "      publicKey: |\n" + IndentLines(std::string(kSecp256k1Pem), "        ");
  const std::string e = ParseError(yaml);
  CHECK_THAT(e, Catch::StartsWith("p.yaml:6:") && Catch::Contains("key \"k1\"") &&
                    Catch::Contains("\"secp256k1\" is not accepted"));
}
