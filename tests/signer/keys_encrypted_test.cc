// Encrypted PKCS#8 key files (issue 16 point 3): keygen --encrypt's form
// (PBES2, scrypt, AES-256-CBC), what OpenSSL writes, the passphrase
// errors, and the KDF limits at N and N+1.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "signer_test_util.h"

namespace core = modelgate::core;
namespace signer = modelgate::signer;
using namespace sigtest;

namespace {

int Run(const std::string& cmd) { return std::system((cmd + " >/dev/null 2>&1 </dev/null").c_str()); }

// Span views `s`; callers pass literals or strings that outlive the use.
std::span<const uint8_t> Span(std::string_view s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

// With: options holding a view of `pass` (a literal, or a string that
// outlives them: a std::string temporary would leave the view dangling).
signer::KeyReadOptions With(std::string_view pass) {
  signer::KeyReadOptions o;
  o.passphrase = Span(pass);
  return o;
}

// WritePass writes `pass` to a 0600 file for openssl's -passin/-passout file:.
std::string WritePass(const TempDir& dir, const std::string& pass) {
  const std::string path = dir / "pass.txt";
  WriteBytes(path, sigtest::Bytes(pass.begin(), pass.end()));
  ::chmod(path.c_str(), 0600);
  return path;
}

}  // namespace

TEST_CASE("encrypted keygen: scrypt PKCS#8, 0600, openssl reads it, it signs", "[signer][keys][encrypted]") {
  TempDir dir;
  const std::string pass = "correct horse battery staple";
  const std::string passfile = WritePass(dir, pass);
  for (auto alg : {signer::KeyAlg::kEd25519, signer::KeyAlg::kEcdsaP256}) {
    const std::string prefix = dir / std::string(signer::KeyAlgName(alg));
    INFO(prefix);
    auto r = signer::Keygen(prefix, alg, Span(pass));
    REQUIRE(r.ok());
    CHECK(ModeOf(prefix + ".key") == 0600);
    const std::string text = ReadText(prefix + ".key");
    CHECK(text.rfind("-----BEGIN ENCRYPTED PRIVATE KEY-----\n", 0) == 0);
    // scrypt and AES-256-CBC, as documented (OpenSSL's own parse of the file).
    REQUIRE(std::system(("openssl asn1parse -in " + prefix + ".key > " + prefix + ".asn1").c_str()) == 0);
    const std::string asn1 = ReadText(prefix + ".asn1");
    CHECK_THAT(asn1, Catch::Contains("PBES2"));
    CHECK_THAT(asn1, Catch::Contains(":scrypt"));
    CHECK_THAT(asn1, Catch::Contains("INTEGER           :4000"));  // N = 2^14
    CHECK_THAT(asn1, Catch::Contains("aes-256-cbc"));
    // openssl decrypts it with the passphrase, and not without it.
    CHECK(Run("openssl pkey -in " + prefix + ".key -passin file:" + passfile + " -noout") == 0);
    CHECK(Run("openssl pkey -in " + prefix + ".key -passin pass:wrong -noout") != 0);

    auto key = signer::LoadPrivateKey(prefix + ".key", With(pass));
    REQUIRE(key.ok());
    CHECK(key.value().alg() == alg);
    CHECK(key.value().public_key().kid == r.value().public_key.kid);
    const std::string msg = "signed with a decrypted key";
    auto sig = key.value().SignBytes(Span(msg));
    REQUIRE(sig.ok());
    auto pub = signer::LoadPublicKey(prefix + ".pub");
    REQUIRE(pub.ok());
    CHECK(signer::VerifySignature(pub.value(), Span(msg), sig.value()));

    // No passphrase: its own id; a wrong one: another; neither is KEY-FORMAT.
    auto none = signer::LoadPrivateKey(prefix + ".key");
    REQUIRE_FALSE(none.ok());
    CHECK(none.error().code == core::Code::kSigKeyEncrypted);
    CHECK_THAT(none.error().message, Catch::Contains("--passphrase-file"));
    auto wrong = signer::LoadPrivateKey(prefix + ".key", With("correct horse battery stapler"));
    REQUIRE_FALSE(wrong.ok());
    CHECK(wrong.error().code == core::Code::kSigKeyPassphrase);
    CHECK_THAT(wrong.error().message, Catch::Contains("wrong passphrase"));
    auto empty = signer::LoadPrivateKey(prefix + ".key", With(""));
    REQUIRE_FALSE(empty.ok());
    CHECK(empty.error().code == core::Code::kSigKeyPassphrase);
  }
}

TEST_CASE("encrypted keys: each write has its own salt, and an empty passphrase is refused",
          "[signer][keys][encrypted]") {
  TempDir dir;
  auto key = signer::PrivateKey::Generate();
  REQUIRE(key.ok());
  REQUIRE(key.value().WritePem(dir / "a.key", Span("pw")).ok());
  REQUIRE(key.value().WritePem(dir / "b.key", Span("pw")).ok());
  CHECK(ReadText(dir / "a.key") != ReadText(dir / "b.key"));
  auto a = signer::LoadPrivateKey(dir / "a.key", With("pw"));
  auto b = signer::LoadPrivateKey(dir / "b.key", With("pw"));
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  CHECK(a.value().public_key().kid == b.value().public_key().kid);

  core::Status s = key.value().WritePem(dir / "c.key", Span(""));
  REQUIRE_FALSE(s.ok());
  CHECK(s.error().code == core::Code::kSigOptions);
  CHECK_FALSE(std::filesystem::exists(dir / "c.key"));
  // A passphrase given for an unencrypted key is not used (and not an error).
  REQUIRE(key.value().WritePem(dir / "plain.key").ok());
  CHECK(signer::LoadPrivateKey(dir / "plain.key", With("unused")).ok());
}

TEST_CASE("encrypted keys: openssl's PBKDF2 and scrypt PKCS#8 load, PBES1 and legacy PEM do not",
          "[signer][keys][encrypted]") {
  TempDir dir;
  const std::string passfile = WritePass(dir, "s3cret");
  REQUIRE(Run("openssl genpkey -algorithm ed25519 -out " + dir / "ed.pem") == 0);
  REQUIRE(Run("openssl ecparam -name prime256v1 -genkey -noout -out " + dir / "ec.pem") == 0);
  for (const char* src : {"ed.pem", "ec.pem"}) {
    INFO(src);
    const std::string in = dir / src;
    REQUIRE(Run("openssl pkcs8 -topk8 -v2 aes-256-cbc -v2prf hmacWithSHA256 -iter 1000 -in " + in +
                " -passout file:" + passfile + " -out " + in + ".pbkdf2") == 0);
    REQUIRE(Run("openssl pkcs8 -topk8 -scrypt -in " + in + " -passout file:" + passfile + " -out " + in + ".scrypt") == 0);
    auto plain = signer::LoadPrivateKey(in);
    REQUIRE(plain.ok());
    for (const char* ext : {".pbkdf2", ".scrypt"}) {
      INFO(ext);
      auto k = signer::LoadPrivateKey(in + ext, With("s3cret"));
      REQUIRE(k.ok());
      CHECK(k.value().public_key().kid == plain.value().public_key().kid);
      CHECK(signer::LoadPrivateKey(in + ext, With("s3creT")).error().code == core::Code::kSigKeyPassphrase);
    }
  }
  // PBES1 (PKCS#12 SHA-1 3DES): refused before any decryption.
  REQUIRE(Run("openssl pkcs8 -topk8 -v1 PBE-SHA1-3DES -in " + dir / "ec.pem" + " -passout file:" + passfile +
              " -out " + dir / "pbes1.pem") == 0);
  auto v1 = signer::LoadPrivateKey(dir / "pbes1.pem", With("s3cret"));
  REQUIRE_FALSE(v1.ok());
  CHECK(v1.error().code == core::Code::kSigKeyFormat);
  CHECK_THAT(v1.error().message, Catch::Contains("PBES2"));
  // Legacy "Proc-Type: 4,ENCRYPTED" PEM: refused with the conversion command.
  REQUIRE(Run("openssl ec -in " + dir / "ec.pem" + " -aes256 -passout file:" + passfile + " -out " +
              dir / "legacy.pem") == 0);
  auto legacy = signer::LoadPrivateKey(dir / "legacy.pem", With("s3cret"));
  REQUIRE_FALSE(legacy.ok());
  CHECK(legacy.error().code == core::Code::kSigKeyFormat);
  CHECK_THAT(legacy.error().message, Catch::Contains("openssl pkcs8 -topk8 -scrypt"));
}

TEST_CASE("encrypted keys: KDF limits at N and N+1", "[signer][keys][encrypted][limits]") {
  TempDir dir;
  const std::string passfile = WritePass(dir, "pw");
  REQUIRE(Run("openssl genpkey -algorithm ed25519 -out " + dir / "k.pem") == 0);
  REQUIRE(Run("openssl pkcs8 -topk8 -v2 aes-256-cbc -iter 1001 -in " + dir / "k.pem" + " -passout file:" +
              passfile + " -out " + dir / "pbkdf2.pem") == 0);
  signer::KeyReadOptions o = With("pw");
  o.max_pbkdf2_iterations = 1001;  // N: the file's count
  CHECK(signer::LoadPrivateKey(dir / "pbkdf2.pem", o).ok());
  o.max_pbkdf2_iterations = 1000;  // the file asks for N+1
  auto over = signer::LoadPrivateKey(dir / "pbkdf2.pem", o);
  REQUIRE_FALSE(over.ok());
  CHECK(over.error().code == core::Code::kSigKeyFormat);
  CHECK_THAT(over.error().message, Catch::Contains("1001 PBKDF2 iterations"));
  CHECK_THAT(over.error().message, Catch::Contains("max_pbkdf2_iterations of 1000"));

  // Ours: scrypt N=2^14 r=8 p=1, a cost of 2^17.
  auto key = signer::PrivateKey::Generate();
  REQUIRE(key.ok());
  REQUIRE(key.value().WritePem(dir / "scrypt.key", Span("pw")).ok());
  o = With("pw");
  o.max_scrypt_cost = uint64_t{1} << 17;
  CHECK(signer::LoadPrivateKey(dir / "scrypt.key", o).ok());
  o.max_scrypt_cost = (uint64_t{1} << 17) - 1;
  auto dear = signer::LoadPrivateKey(dir / "scrypt.key", o);
  REQUIRE_FALSE(dear.ok());
  CHECK(dear.error().code == core::Code::kSigKeyFormat);
  CHECK_THAT(dear.error().message, Catch::Contains("N=16384 r=8 p=1"));
  // The defaults take our own files and OpenSSL's.
  CHECK(signer::kMaxScryptCost >= (uint64_t{1} << 17));
  CHECK(signer::kMaxPbkdf2Iterations >= 600'000);
}
