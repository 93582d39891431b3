// ECDSA keys next to Ed25519: every PEM form openssl writes for P-256/384/521
// (SEC1 with and without its EC PARAMETERS block, PKCS#8, SPKI, compressed
// points), refusals (other curves, explicit parameters, encrypted keys,
// mismatched blocks, a SEC1 key carrying another key's point, RSA), sign /
// verify round trips per alg, the model_signing 1.1.1 DSSE signatures, and
// the rule that embedded STSIG stays Ed25519.
#include <catch2/catch.hpp>

#include <cstdlib>

#include "signer_test_util.h"

namespace core = modelgate::core;
namespace signer = modelgate::signer;
using namespace sigtest;
using signer::KeyAlg;

namespace {

int Run(const std::string& cmd) { return std::system((cmd + " >/dev/null 2>&1 </dev/null").c_str()); }

bool HaveOpenssl() { return Run("openssl version") == 0; }

// The oms fixtures (copied from the model_signing 1.1.1 vectors; test-only keys).
std::string Oms(const std::string& name) {
  return std::string(MG_STSIG_VECTORS) + "/../../fixtures/oms/" + name;
}

Bytes Base64Decode(const std::string& text) {
  static const std::string kAlphabet =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  Bytes out;
  uint32_t acc = 0;
  int bits = 0;
  for (char c : text) {
    if (c == '=') break;
    const size_t v = kAlphabet.find(c);
    REQUIRE(v != std::string::npos);
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<uint8_t>((acc >> bits) & 0xff));
    }
  }
  return out;
}

// Sec1Pem wraps SEC1 DER as an "EC PRIVATE KEY" PEM block (64-char lines).
std::string Sec1Pem(const Bytes& der) {
  static const char* kAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string b64;
  for (size_t i = 0; i < der.size(); i += 3) {
    const uint32_t n = (uint32_t{der[i]} << 16) | (i + 1 < der.size() ? uint32_t{der[i + 1]} << 8 : 0) |
                       (i + 2 < der.size() ? uint32_t{der[i + 2]} : 0);
    b64 += kAlphabet[(n >> 18) & 63];
    b64 += kAlphabet[(n >> 12) & 63];
    b64 += i + 1 < der.size() ? kAlphabet[(n >> 6) & 63] : '=';
    b64 += i + 2 < der.size() ? kAlphabet[n & 63] : '=';
  }
  std::string out = "-----BEGIN EC PRIVATE KEY-----\n";
  for (size_t i = 0; i < b64.size(); i += 64) out += b64.substr(i, 64) + "\n";
  return out + "-----END EC PRIVATE KEY-----\n";
}

// Pae is DSSE's pre-authentication encoding of (type, body).
Bytes Pae(const std::string& type, const Bytes& body) {
  std::string head = "DSSEv1 " + std::to_string(type.size()) + " " + type + " " +
                     std::to_string(body.size()) + " ";
  Bytes out(head.begin(), head.end());
  out.insert(out.end(), body.begin(), body.end());
  return out;
}

struct Envelope {
  Bytes pae;
  Bytes sig;
  std::string hint;
};

Envelope ReadBundle(const std::string& path) {
  auto j = nlohmann::json::parse(ReadText(path));
  const auto& env = j.at("dsseEnvelope");
  Envelope e;
  e.pae = Pae(env.at("payloadType").get<std::string>(),
              Base64Decode(env.at("payload").get<std::string>()));
  REQUIRE(env.at("signatures").size() == 1);
  e.sig = Base64Decode(env.at("signatures")[0].at("sig").get<std::string>());
  e.hint = j.at("verificationMaterial").at("publicKey").at("hint").get<std::string>();
  return e;
}

Bytes AsBytes(const std::string& s) { return Bytes(s.begin(), s.end()); }

void ExpectKeyFormat(const core::Error& e, const std::string& says) {
  CHECK(e.code == core::Code::kSigKeyFormat);
  CHECK_THAT(e.message, Catch::Contains(says));
}

}  // namespace

TEST_CASE("ecdsa: KeyAlgName and ParseKeyAlg are inverse, exact", "[signer][keys][ecdsa]") {
  for (KeyAlg alg : {KeyAlg::kEd25519, KeyAlg::kEcdsaP256, KeyAlg::kEcdsaP384, KeyAlg::kEcdsaP521}) {
    auto back = signer::ParseKeyAlg(signer::KeyAlgName(alg));
    REQUIRE(back.has_value());
    CHECK(*back == alg);
  }
  CHECK(signer::KeyAlgName(KeyAlg::kEcdsaP256) == "ecdsa-p256");
  CHECK(signer::KeyAlgName(KeyAlg::kEd25519) == "ed25519");
  CHECK_FALSE(signer::ParseKeyAlg("ECDSA-P256").has_value());
  CHECK_FALSE(signer::ParseKeyAlg("ecdsa-p224").has_value());
  CHECK_FALSE(signer::ParseKeyAlg("").has_value());
}

TEST_CASE("ecdsa: model_signing 1.1.1 DSSE signatures verify over PAE with the vector keys",
          "[signer][keys][ecdsa][oms]") {
  struct Case {
    const char* name;
    KeyAlg alg;
  };
  for (Case c : {Case{"p256", KeyAlg::kEcdsaP256}, Case{"p384", KeyAlg::kEcdsaP384},
                 Case{"p521", KeyAlg::kEcdsaP521}}) {
    INFO(c.name);
    const std::string pub_path = Oms(std::string("keys/") + c.name + ".pub.pem");
    auto pub = signer::LoadPublicKey(pub_path);
    REQUIRE(pub.ok());
    CHECK(pub.value().alg == c.alg);
    // Our PEM is the file byte for byte, so its SHA-256 is the bundle's hint.
    const std::string pem = signer::PublicKeyPem(pub.value());
    CHECK(pem == ReadText(pub_path));
    const Envelope env = ReadBundle(Oms(std::string("model_signing_1.1.1/files-") + c.name + ".sig"));
    CHECK(core::HexLower(core::Sha256(AsBytes(pem))) == env.hint);
    // kid = SHA-256(SPKI DER)[0..16), as for Ed25519.
    const core::Sha256Digest d = core::Sha256(pub.value().spki_der);
    CHECK(std::equal(pub.value().kid.begin(), pub.value().kid.end(), d.begin()));
    CHECK(signer::SubjectPublicKeyInfoDer(pub.value()) == pub.value().spki_der);

    CHECK(signer::VerifySignature(pub.value(), env.pae, env.sig));
    Bytes flipped = env.pae;
    flipped.back() ^= 1;
    CHECK_FALSE(signer::VerifySignature(pub.value(), flipped, env.sig));
    Bytes bad_sig = env.sig;
    bad_sig[bad_sig.size() / 2] ^= 0x40;
    CHECK_FALSE(signer::VerifySignature(pub.value(), env.pae, bad_sig));
    // DER is strict: a trailing byte is not the same signature.
    Bytes trailing = env.sig;
    trailing.push_back(0);
    CHECK_FALSE(signer::VerifySignature(pub.value(), env.pae, trailing));

    // The SEC1 private key (model_signing's input) is the same key and signs
    // what its public key verifies.
    auto priv = signer::LoadPrivateKey(Oms(std::string("keys/") + c.name + ".priv.pem"));
    REQUIRE(priv.ok());
    CHECK(priv.value().alg() == c.alg);
    CHECK(priv.value().public_key().kid == pub.value().kid);
    auto ours = priv.value().SignBytes(env.pae);
    REQUIRE(ours.ok());
    CHECK(signer::VerifySignature(pub.value(), env.pae, ours.value()));
  }

  // A P-256 signature does not verify under the P-384 key, nor the reverse.
  auto p256 = signer::LoadPublicKey(Oms("keys/p256.pub.pem"));
  auto p384 = signer::LoadPublicKey(Oms("keys/p384.pub.pem"));
  REQUIRE(p256.ok());
  REQUIRE(p384.ok());
  const Envelope e256 = ReadBundle(Oms("model_signing_1.1.1/files-p256.sig"));
  const Envelope e384 = ReadBundle(Oms("model_signing_1.1.1/files-p384.sig"));
  CHECK_FALSE(signer::VerifySignature(p384.value(), e256.pae, e256.sig));
  CHECK_FALSE(signer::VerifySignature(p256.value(), e384.pae, e384.sig));
  // A key whose alg does not match its SPKI's curve verifies nothing.
  signer::PublicKey lying = p256.value();
  lying.alg = KeyAlg::kEcdsaP384;
  CHECK_FALSE(signer::VerifySignature(lying, e256.pae, e256.sig));
  signer::PublicKey empty = p256.value();
  empty.spki_der.clear();
  CHECK_FALSE(signer::VerifySignature(empty, e256.pae, e256.sig));
  CHECK_FALSE(signer::VerifySignature(p256.value(), e256.pae, Bytes{}));
}

TEST_CASE("ecdsa: the hand-built Ed25519 bundle verifies with VerifySignature",
          "[signer][keys][ecdsa][oms]") {
  auto pub = signer::LoadPublicKey(Oms("keys/ed25519.pub.pem"));
  REQUIRE(pub.ok());
  CHECK(pub.value().alg == KeyAlg::kEd25519);
  const Envelope env = ReadBundle(Oms("handbuilt/files-ed25519.sig"));
  CHECK(signer::VerifySignature(pub.value(), env.pae, env.sig));
  Bytes flipped = env.pae;
  flipped[0] ^= 1;
  CHECK_FALSE(signer::VerifySignature(pub.value(), flipped, env.sig));
  CHECK_FALSE(signer::VerifySignature(pub.value(), env.pae, Bytes(env.sig.begin(), env.sig.end() - 1)));
  auto priv = signer::LoadPrivateKey(Oms("keys/ed25519.priv.pem"));
  REQUIRE(priv.ok());
  auto sig = priv.value().SignBytes(env.pae);
  REQUIRE(sig.ok());
  // Ed25519 is deterministic: our signature is the bundle's.
  CHECK(sig.value() == env.sig);
}

TEST_CASE("ecdsa: generate, sign, verify, write and reload per alg", "[signer][keys][ecdsa]") {
  REQUIRE(HaveOpenssl());
  TempDir dir;
  const Bytes msg = AsBytes("DSSEv1 28 application/vnd.in-toto+json 2 {}");
  for (KeyAlg alg : {KeyAlg::kEd25519, KeyAlg::kEcdsaP256, KeyAlg::kEcdsaP384, KeyAlg::kEcdsaP521}) {
    const std::string name(signer::KeyAlgName(alg));
    INFO(name);
    auto key = signer::PrivateKey::Generate(alg);
    REQUIRE(key.ok());
    CHECK(key.value().alg() == alg);
    CHECK(key.value().public_key().alg == alg);
    auto sig = key.value().SignBytes(msg);
    REQUIRE(sig.ok());
    CHECK(signer::VerifySignature(key.value().public_key(), msg, sig.value()));
    Bytes other_msg = msg;
    other_msg.push_back('x');
    CHECK_FALSE(signer::VerifySignature(key.value().public_key(), other_msg, sig.value()));
    auto other = signer::PrivateKey::Generate(alg);
    REQUIRE(other.ok());
    CHECK(other.value().public_key().kid != key.value().public_key().kid);
    CHECK_FALSE(signer::VerifySignature(other.value().public_key(), msg, sig.value()));

    auto gen = signer::Keygen(dir / name, alg);
    REQUIRE(gen.ok());
    CHECK(gen.value().public_key.alg == alg);
    CHECK(ModeOf(dir / (name + ".key")) == 0600);
    CHECK(ModeOf(dir / (name + ".pub")) == 0644);
    CHECK(ReadText(dir / (name + ".key")).rfind("-----BEGIN PRIVATE KEY-----\n", 0) == 0);
    auto priv = signer::LoadPrivateKey(dir / (name + ".key"));
    auto pub = signer::LoadPublicKey(dir / (name + ".pub"));
    REQUIRE(priv.ok());
    REQUIRE(pub.ok());
    CHECK(priv.value().public_key().kid == gen.value().public_key.kid);
    CHECK(pub.value().kid == gen.value().public_key.kid);
    CHECK(pub.value().spki_der == gen.value().public_key.spki_der);
    // openssl reads both files and derives the same public key.
    CHECK(Run("openssl pkey -in " + dir / (name + ".key") + " -noout") == 0);
    REQUIRE(Run("openssl pkey -in " + dir / (name + ".key") + " -pubout -out " + dir / (name + ".o.pub")) == 0);
    CHECK(ReadText(dir / (name + ".o.pub")) == ReadText(dir / (name + ".pub")));
    auto resigned = priv.value().SignBytes(msg);
    REQUIRE(resigned.ok());
    CHECK(signer::VerifySignature(pub.value(), msg, resigned.value()));
    // openssl verifies our ECDSA signature (DER, digest by curve).
    if (alg != KeyAlg::kEd25519) {
      const char* md = alg == KeyAlg::kEcdsaP256 ? "-sha256" : alg == KeyAlg::kEcdsaP384 ? "-sha384" : "-sha512";
      WriteBytes(dir / (name + ".msg"), msg);
      WriteBytes(dir / (name + ".sig"), resigned.value());
      CHECK(Run(std::string("openssl dgst ") + md + " -verify " + dir / (name + ".pub") + " -signature " +
                dir / (name + ".sig") + " " + dir / (name + ".msg")) == 0);
    }
  }
}

TEST_CASE("ecdsa: openssl ecparam / genpkey / ec PEM forms load and agree",
          "[signer][keys][ecdsa]") {
  REQUIRE(HaveOpenssl());
  TempDir dir;
  const std::string k = dir / "k.pem";
  // `openssl ecparam -genkey` writes EC PARAMETERS then EC PRIVATE KEY.
  REQUIRE(Run("openssl ecparam -name prime256v1 -genkey -out " + k) == 0);
  REQUIRE(ReadText(k).rfind("-----BEGIN EC PARAMETERS-----", 0) == 0);
  auto with_params = signer::LoadPrivateKey(k);
  REQUIRE(with_params.ok());
  CHECK(with_params.value().alg() == KeyAlg::kEcdsaP256);
  const signer::KeyId kid = with_params.value().public_key().kid;

  REQUIRE(Run("openssl ec -in " + k + " -out " + dir / "sec1.pem") == 0);
  REQUIRE(ReadText(dir / "sec1.pem").rfind("-----BEGIN EC PRIVATE KEY-----", 0) == 0);
  auto sec1 = signer::LoadPrivateKey(dir / "sec1.pem");
  REQUIRE(sec1.ok());
  CHECK(sec1.value().public_key().kid == kid);

  REQUIRE(Run("openssl pkey -in " + k + " -out " + dir / "pkcs8.pem") == 0);
  REQUIRE(ReadText(dir / "pkcs8.pem").rfind("-----BEGIN PRIVATE KEY-----", 0) == 0);
  auto pkcs8 = signer::LoadPrivateKey(dir / "pkcs8.pem");
  REQUIRE(pkcs8.ok());
  CHECK(pkcs8.value().public_key().kid == kid);

  REQUIRE(Run("openssl ec -in " + k + " -pubout -out " + dir / "pub.pem") == 0);
  auto pub = signer::LoadPublicKey(dir / "pub.pem");
  REQUIRE(pub.ok());
  CHECK(pub.value().kid == kid);
  CHECK(signer::PublicKeyPem(pub.value()) == ReadText(dir / "pub.pem"));

  // A compressed point is the same key: same kid, written uncompressed.
  REQUIRE(Run("openssl ec -in " + k + " -pubout -conv_form compressed -out " + dir / "cpub.pem") == 0);
  REQUIRE(ReadText(dir / "cpub.pem") != ReadText(dir / "pub.pem"));
  auto cpub = signer::LoadPublicKey(dir / "cpub.pem");
  REQUIRE(cpub.ok());
  CHECK(cpub.value().kid == kid);
  CHECK(signer::PublicKeyPem(cpub.value()) == ReadText(dir / "pub.pem"));
  REQUIRE(Run("openssl ec -in " + k + " -conv_form compressed -out " + dir / "csec1.pem") == 0);
  auto csec1 = signer::LoadPrivateKey(dir / "csec1.pem");
  REQUIRE(csec1.ok());
  CHECK(csec1.value().public_key().kid == kid);

  // genpkey P-384 and P-521 (PKCS#8).
  for (const char* curve : {"P-384", "P-521"}) {
    INFO(curve);
    const std::string path = dir / (std::string(curve) + ".pem");
    REQUIRE(Run(std::string("openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:") + curve +
                " -out " + path) == 0);
    auto key = signer::LoadPrivateKey(path);
    REQUIRE(key.ok());
    CHECK(key.value().alg() == (std::string(curve) == "P-384" ? KeyAlg::kEcdsaP384 : KeyAlg::kEcdsaP521));
  }
}

TEST_CASE("ecdsa: other curves, explicit parameters, encrypted keys and RSA are refused",
          "[signer][keys][ecdsa]") {
  REQUIRE(HaveOpenssl());
  TempDir dir;
  for (const char* curve : {"secp256k1", "secp224r1", "brainpoolP256r1"}) {
    INFO(curve);
    const std::string path = dir / (std::string(curve) + ".pem");
    REQUIRE(Run(std::string("openssl ecparam -name ") + curve + " -genkey -noout -out " + path) == 0);
    auto priv = signer::LoadPrivateKey(path);
    REQUIRE_FALSE(priv.ok());
    ExpectKeyFormat(priv.error(), "is not accepted (P-256, P-384, P-521)");
    REQUIRE(Run("openssl ec -in " + path + " -pubout -out " + path + ".pub") == 0);
    auto pub = signer::LoadPublicKey(path + ".pub");
    REQUIRE_FALSE(pub.ok());
    ExpectKeyFormat(pub.error(), "is not accepted");
  }

  // Explicit curve parameters, even when they are P-256's.
  REQUIRE(Run("openssl ecparam -name prime256v1 -genkey -noout -out " + dir / "k.pem") == 0);
  REQUIRE(Run("openssl ec -in " + dir / "k.pem" + " -param_enc explicit -pubout -out " + dir / "x.pub") == 0);
  auto xpub = signer::LoadPublicKey(dir / "x.pub");
  REQUIRE_FALSE(xpub.ok());
  ExpectKeyFormat(xpub.error(), "explicit curve parameters");
  REQUIRE(Run("openssl ec -in " + dir / "k.pem" + " -param_enc explicit -out " + dir / "x.pem") == 0);
  auto xpriv = signer::LoadPrivateKey(dir / "x.pem");
  REQUIRE_FALSE(xpriv.ok());
  ExpectKeyFormat(xpriv.error(), "explicit curve parameters");

  // Encrypted: PKCS#8 and the legacy SEC1 Proc-Type form; never a prompt.
  REQUIRE(Run("openssl pkey -in " + dir / "k.pem" + " -aes256 -passout pass:pw -out " + dir / "e8.pem") == 0);
  REQUIRE(Run("openssl ec -in " + dir / "k.pem" + " -aes256 -passout pass:pw -out " + dir / "e1.pem") == 0);
  REQUIRE(ReadText(dir / "e1.pem").find("Proc-Type: 4,ENCRYPTED") != std::string::npos);
  // Encrypted PKCS#8 needs a passphrase (keys_encrypted_test); legacy PEM
  // encryption is refused whatever the passphrase.
  auto e8 = signer::LoadPrivateKey(dir / "e8.pem");
  REQUIRE_FALSE(e8.ok());
  CHECK(e8.error().code == core::Code::kSigKeyEncrypted);
  auto e1 = signer::LoadPrivateKey(dir / "e1.pem");
  REQUIRE_FALSE(e1.ok());
  ExpectKeyFormat(e1.error(), "legacy PEM encryption");

  REQUIRE(Run("openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:1024 -out " + dir / "rsa.pem") == 0);
  REQUIRE(Run("openssl pkey -in " + dir / "rsa.pem" + " -pubout -out " + dir / "rsa.pub") == 0);
  ExpectKeyFormat(signer::LoadPrivateKey(dir / "rsa.pem").error(), "neither Ed25519 nor ECDSA");
  ExpectKeyFormat(signer::LoadPublicKey(dir / "rsa.pub").error(), "neither Ed25519 nor ECDSA");
  REQUIRE(Run("openssl rsa -in " + dir / "rsa.pem" + " -traditional -out " + dir / "rsa1.pem") == 0);
  ExpectKeyFormat(signer::LoadPrivateKey(dir / "rsa1.pem").error(), "is not a private key");
}

TEST_CASE("ecdsa: an EC PARAMETERS block only before its own EC PRIVATE KEY, nothing else",
          "[signer][keys][ecdsa][regress]") {
  REQUIRE(HaveOpenssl());
  TempDir dir;
  REQUIRE(Run("openssl ecparam -name prime256v1 -genkey -out " + dir / "a.pem") == 0);
  REQUIRE(Run("openssl ecparam -name secp384r1 -out " + dir / "p384.params") == 0);
  REQUIRE(Run("openssl ecparam -name prime256v1 -out " + dir / "p256.params") == 0);
  REQUIRE(Run("openssl ec -in " + dir / "a.pem" + " -out " + dir / "sec1.pem") == 0);
  REQUIRE(Run("openssl pkey -in " + dir / "a.pem" + " -out " + dir / "pkcs8.pem") == 0);
  const std::string sec1 = ReadText(dir / "sec1.pem");
  const std::string pkcs8 = ReadText(dir / "pkcs8.pem");
  const std::string p256 = ReadText(dir / "p256.params");
  const std::string p384 = ReadText(dir / "p384.params");

  REQUIRE(signer::ParsePrivateKeyPem(p256 + sec1).ok());
  REQUIRE(signer::ParsePrivateKeyPem("\n" + p256 + "\n" + sec1 + "\n").ok());
  ExpectKeyFormat(signer::ParsePrivateKeyPem(p384 + sec1).error(), "does not name");
  ExpectKeyFormat(signer::ParsePrivateKeyPem(p256 + pkcs8).error(), "may only precede");
  ExpectKeyFormat(signer::ParsePrivateKeyPem(p256 + p256 + sec1).error(), "2 PEM blocks");
  ExpectKeyFormat(signer::ParsePrivateKeyPem(sec1 + p256).error(), "2 PEM blocks");
  ExpectKeyFormat(signer::ParsePrivateKeyPem(sec1 + sec1).error(), "2 PEM blocks");
  ExpectKeyFormat(signer::ParsePrivateKeyPem("note\n" + p256 + sec1).error(), "2 PEM blocks");
  ExpectKeyFormat(signer::ParsePrivateKeyPem(p256).error(), "no PEM BEGIN line");
  ExpectKeyFormat(signer::ParsePrivateKeyPem(p256 + sec1 + "x").error(), "text after the PEM END line");
  // Public keys take no parameters block.
  REQUIRE(Run("openssl ec -in " + dir / "a.pem" + " -pubout -out " + dir / "a.pub") == 0);
  ExpectKeyFormat(signer::ParsePublicKeyPem(p256 + ReadText(dir / "a.pub")).error(), "2 PEM blocks");
}

// SEC1 stores the public point next to the scalar and OpenSSL does not check
// they belong together when reading: such a file would sign with one key
// while naming (kid, .pub, bundle hint) another.
TEST_CASE("ecdsa: a SEC1 key whose stored public point is another key's is refused",
          "[signer][keys][ecdsa][regress]") {
  REQUIRE(HaveOpenssl());
  TempDir dir;
  for (const char* n : {"a", "b"}) {
    REQUIRE(Run(std::string("openssl ecparam -name prime256v1 -genkey -noout -outform DER -out ") +
                dir / (std::string(n) + ".der")) == 0);
  }
  Bytes a = ReadBytes(dir / "a.der");
  const Bytes b = ReadBytes(dir / "b.der");
  REQUIRE(a.size() == 121);  // 30 77 ... a1 44 03 42 00 || 65-byte point
  REQUIRE(b.size() == 121);
  std::copy(b.end() - 65, b.end(), a.end() - 65);
  auto mixed = signer::ParsePrivateKeyPem(Sec1Pem(a));
  REQUIRE_FALSE(mixed.ok());
  ExpectKeyFormat(mixed.error(), "does not match the public key");
  // The untouched file, wrapped the same way, loads (the check does not
  // refuse everything).
  CHECK(signer::ParsePrivateKeyPem(Sec1Pem(b)).ok());
}

TEST_CASE("ecdsa: embedded STSIG stays Ed25519 (SignFile refuses, verify ignores ECDSA keys)",
          "[signer][keys][ecdsa]") {
  TempDir dir;
  ojson h;
  h["w"] = {{"dtype", "U8"}, {"shape", {4}}, {"data_offsets", {0, 4}}};
  const std::string path = dir / "m.safetensors";
  WriteBytes(path, Assemble(h.dump(), Bytes{1, 2, 3, 4}));
  const Bytes before = ReadBytes(path);

  auto ec = signer::PrivateKey::Generate(KeyAlg::kEcdsaP256);
  REQUIRE(ec.ok());
  auto refused = signer::SignFile(path, ec.value(), signer::SignOptions{}, dir / "out.safetensors");
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.error().code == core::Code::kSigOptions);
  CHECK_THAT(refused.error().message, Catch::Contains("--detached"));
  CHECK_FALSE(std::filesystem::exists(dir / "out.safetensors"));
  CHECK(ReadBytes(path) == before);
  CHECK(ec.value().Sign(before) == signer::Signature{});

  signer::PrivateKey ed = TestKey(1);
  REQUIRE(signer::SignFile(path, ed, signer::SignOptions{}).ok());
  // An ECDSA key that claims the record's kid is still not the record's key.
  signer::PublicKey impostor = ec.value().public_key();
  impostor.kid = ed.public_key().kid;
  std::vector<signer::PublicKey> only_ec = {impostor};
  auto r = signer::VerifyFile(path, only_ec);
  REQUIRE(r.ok());
  CHECK(r.value().status == signer::SigStatus::kUntrusted);
  std::vector<signer::PublicKey> both = {ec.value().public_key(), ed.public_key()};
  auto v = signer::VerifyFile(path, both);
  REQUIRE(v.ok());
  CHECK(v.value().status == signer::SigStatus::kValid);
}
