// Keys: keygen files and modes, O_EXCL/O_NOFOLLOW, openssl interop, and
// rejection of other key types and encrypted keys.
#include <catch2/catch.hpp>

#include <cstdlib>

#include "signer_test_util.h"

namespace core = modelgate::core;
namespace signer = modelgate::signer;
using namespace sigtest;

namespace {

bool HaveOpenssl() { return std::system("openssl version >/dev/null 2>&1") == 0; }

int Run(const std::string& cmd) { return std::system((cmd + " >/dev/null 2>&1 </dev/null").c_str()); }

}  // namespace

TEST_CASE("keygen: PREFIX.key 0600 PKCS#8 and PREFIX.pub 0644 SPKI", "[signer][keys]") {
  TempDir dir;
  const std::string prefix = dir / "release";
  auto r = signer::Keygen(prefix);
  REQUIRE(r.ok());
  CHECK(r.value().private_path == prefix + ".key");
  CHECK(r.value().public_path == prefix + ".pub");
  CHECK(ModeOf(prefix + ".key") == 0600);
  CHECK(ModeOf(prefix + ".pub") == 0644);
  CHECK(ReadText(prefix + ".key").rfind("-----BEGIN PRIVATE KEY-----\n", 0) == 0);
  CHECK(ReadText(prefix + ".pub").rfind("-----BEGIN PUBLIC KEY-----\n", 0) == 0);

  auto priv = signer::LoadPrivateKey(prefix + ".key");
  auto pub = signer::LoadPublicKey(prefix + ".pub");
  REQUIRE(priv.ok());
  REQUIRE(pub.ok());
  CHECK(priv.value().public_key().raw == pub.value().raw);
  CHECK(pub.value().kid == r.value().public_key.kid);
  CHECK(pub.value().kid_hex().size() == 32);
  // kid = SHA-256(SPKI DER)[0..16)
  core::Sha256Digest d = core::Sha256(signer::SubjectPublicKeyInfoDer(pub.value()));
  CHECK(std::equal(pub.value().kid.begin(), pub.value().kid.end(), d.begin()));

  // Two keygens give different keys.
  auto r2 = signer::Keygen(dir / "other");
  REQUIRE(r2.ok());
  CHECK(r2.value().public_key.kid != r.value().public_key.kid);

  // openssl reads what keygen wrote (installed by ci/install-deps.sh).
  REQUIRE(HaveOpenssl());
  CHECK(Run("openssl pkey -in " + prefix + ".key -noout -text") == 0);
  CHECK(Run("openssl pkey -pubin -in " + prefix + ".pub -noout -text") == 0);
}

TEST_CASE("keygen: never overwrites, never follows a symlink, leaves nothing half-made",
          "[signer][keys]") {
  TempDir dir;
  const std::string prefix = dir / "k";
  REQUIRE(signer::Keygen(prefix).ok());
  const std::string before = ReadText(prefix + ".key");
  auto again = signer::Keygen(prefix);
  REQUIRE_FALSE(again.ok());
  CHECK(again.error().code == core::Code::kSigKeyWrite);
  CHECK(ReadText(prefix + ".key") == before);

  // .pub exists but .key does not: the .key just created is removed again.
  WriteBytes(dir / "p.pub", Bytes{'x'});
  auto half = signer::Keygen(dir / "p");
  REQUIRE_FALSE(half.ok());
  CHECK(half.error().code == core::Code::kSigKeyWrite);
  CHECK_FALSE(std::filesystem::exists(dir / "p.key"));

  // A symlink (even dangling) where the key would go is refused.
  std::filesystem::create_symlink(dir / "target", dir / "s.key");
  auto link = signer::Keygen(dir / "s");
  REQUIRE_FALSE(link.ok());
  CHECK_FALSE(std::filesystem::exists(dir / "target"));
}

TEST_CASE("keys: openssl genpkey Ed25519 keys load, other types and encrypted keys do not",
          "[signer][keys]") {
  // openssl is installed by ci/install-deps.sh: without it this interop
  // test fails rather than passing by checking nothing.
  REQUIRE(HaveOpenssl());
  TempDir dir;
  REQUIRE(Run("openssl genpkey -algorithm ed25519 -out " + dir / "o.key") == 0);
  REQUIRE(Run("openssl pkey -in " + dir / "o.key" + " -pubout -out " + dir / "o.pub") == 0);
  auto priv = signer::LoadPrivateKey(dir / "o.key");
  auto pub = signer::LoadPublicKey(dir / "o.pub");
  REQUIRE(priv.ok());
  REQUIRE(pub.ok());
  CHECK(priv.value().public_key().kid == pub.value().kid);
  // Our SPKI PEM is what openssl writes.
  CHECK(signer::PublicKeyPem(pub.value()) == ReadText(dir / "o.pub"));

  // EC keys load since issue 11 (keys_ecdsa_test has their forms); a curve
  // outside P-256/P-384/P-521 is another key type.
  REQUIRE(Run("openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:secp256k1 -out " + dir / "ec.key") == 0);
  REQUIRE(Run("openssl pkey -in " + dir / "ec.key" + " -pubout -out " + dir / "ec.pub") == 0);
  auto ec = signer::LoadPrivateKey(dir / "ec.key");
  REQUIRE_FALSE(ec.ok());
  CHECK(ec.error().code == core::Code::kSigKeyFormat);
  auto ecpub = signer::LoadPublicKey(dir / "ec.pub");
  REQUIRE_FALSE(ecpub.ok());
  CHECK(ecpub.error().code == core::Code::kSigKeyFormat);

  // Encrypted: refused without prompting (stdin is /dev/null in Run, and
  // the library never asks).
  REQUIRE(Run("openssl pkey -in " + dir / "o.key" + " -aes256 -passout pass:pw -out " + dir / "enc.key") == 0);
  // Without a passphrase it is its own error (keys_encrypted_test has the rest).
  auto enc = signer::LoadPrivateKey(dir / "enc.key");
  REQUIRE_FALSE(enc.ok());
  CHECK(enc.error().code == core::Code::kSigKeyEncrypted);

  // A public key where a private key is expected, garbage, empty.
  CHECK(signer::LoadPrivateKey(dir / "o.pub").error().code == core::Code::kSigKeyFormat);
  CHECK(signer::ParsePrivateKeyPem("").error().code == core::Code::kSigKeyFormat);
  CHECK(signer::ParsePublicKeyPem("-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n")
            .error()
            .code == core::Code::kSigKeyFormat);
  CHECK(signer::LoadPrivateKey(dir / "missing.key").error().code == core::Code::kIoOpen);
}

TEST_CASE("keys: a key signs, the matching public key verifies, another does not", "[signer][keys]") {
  auto a = signer::PrivateKey::Generate();
  REQUIRE(a.ok());
  signer::PrivateKey moved = std::move(a).value();  // moves the pointer, not the secret
  Bytes msg = {1, 2, 3};
  signer::Signature sig = moved.Sign(msg);
  signer::PrivateKey b = TestKey();
  CHECK(sig != b.Sign(msg));
  CHECK(moved.public_key().kid != b.public_key().kid);
}

// A key file is one PEM block and whitespace. OpenSSL's PEM reader skips text
// before the first BEGIN line and ignores everything after the first END
// line, so a file holding two keys used to be read as its first key.
TEST_CASE("keys: a PEM file with a second block, or text around its block, is rejected",
          "[signer][keys][regress]") {
  const std::string pem = signer::PublicKeyPem(TestKey(1).public_key());
  const std::string other = signer::PublicKeyPem(TestKey(2).public_key());
  auto expect_rejected = [](const core::Result<signer::PublicKey>& r, const std::string& says) {
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code == core::Code::kSigKeyFormat);
    CHECK_THAT(r.error().message, Catch::Contains(says));
  };

  REQUIRE(signer::ParsePublicKeyPem(pem).ok());
  CHECK(signer::ParsePublicKeyPem("\n\r\n" + pem + "\r\n\n \t").ok());
  auto crlf = signer::ParsePublicKeyPem(Replace(pem, "\n", "\r\n"));
  REQUIRE(crlf.ok());
  CHECK(crlf.value().kid == TestKey(1).public_key().kid);

  expect_rejected(signer::ParsePublicKeyPem(pem + other), "2 PEM blocks");
  expect_rejected(signer::ParsePublicKeyPem(pem + "\n" + pem), "2 PEM blocks");
  expect_rejected(signer::ParsePublicKeyPem(pem + "-----BEGIN CERTIFICATE-----\nAAAA\n"),
                  "2 PEM blocks");
  expect_rejected(signer::ParsePublicKeyPem(pem + "trailing\n"),
                  "text after the PEM END line at byte " + std::to_string(pem.size()));
  expect_rejected(signer::ParsePublicKeyPem(pem + std::string(1, '\0')), "text after the PEM END line");
  expect_rejected(signer::ParsePublicKeyPem("a comment\n" + pem), "text before the PEM BEGIN line");
  expect_rejected(signer::ParsePublicKeyPem(pem.substr(0, pem.size() - 10)), "no PEM END line");
  expect_rejected(signer::ParsePublicKeyPem("just text\n"), "no PEM BEGIN line");

  TempDir dir;
  const std::string two = pem + other;
  WriteBytes(dir / "two.pub", Bytes(two.begin(), two.end()));
  auto loaded = signer::LoadPublicKey(dir / "two.pub");
  REQUIRE_FALSE(loaded.ok());
  CHECK(loaded.error().code == core::Code::kSigKeyFormat);
  CHECK_THAT(loaded.error().message, Catch::StartsWith(dir / "two.pub" + ": ") &&
                                         Catch::Contains("2 PEM blocks"));

  // The same rule for private keys: a key file with the public key pasted
  // after it is an operator's mistake to report, not to repair.
  REQUIRE(TestKey(1).WritePem(dir / "k.key").ok());
  const std::string key_pem = ReadText(dir / "k.key");
  REQUIRE(signer::ParsePrivateKeyPem(key_pem).ok());
  for (const std::string& text : {key_pem + pem, pem + key_pem, key_pem + "x"}) {
    auto r = signer::ParsePrivateKeyPem(text);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code == core::Code::kSigKeyFormat);
  }
  const std::string both_text = key_pem + pem;
  WriteBytes(dir / "both.key", Bytes(both_text.begin(), both_text.end()));
  auto both = signer::LoadPrivateKey(dir / "both.key");
  REQUIRE_FALSE(both.ok());
  CHECK_THAT(both.error().message, Catch::Contains("2 PEM blocks"));
}
