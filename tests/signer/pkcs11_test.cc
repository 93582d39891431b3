// PKCS#11 keys (issue 16 point 2) against SoftHSM2: every test case makes
// its own token in a temporary directory (SOFTHSM2_CONF), with keys that
// pkcs11-tool generates on the token (sensitive, never extractable), signs
// through OpenPkcs11Key and checks with the verifiers and the public keys
// the token exports. softhsm2 and opensc are installed by ci/install-deps.sh.
#include <catch2/catch.hpp>
#include <p11-kit/p11-kit.h>
#include <p11-kit/pkcs11.h>

#include <cstdlib>
#include <filesystem>
#include <span>
#include <string>

#include "signer_test_util.h"

namespace core = modelgate::core;
namespace signer = modelgate::signer;
using namespace sigtest;

namespace {

constexpr const char* kModule = "/usr/lib/softhsm/libsofthsm2.so";  // Debian's softhsm2
constexpr const char* kPin = "123456";

int Run(const std::string& cmd) { return std::system((cmd + " >/dev/null 2>&1 </dev/null").c_str()); }

std::span<const uint8_t> Span(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

// Token is a fresh SoftHSM2 token "mg" (user PIN kPin) holding an ECDSA
// P-256 key pair "ec" (id 01) and an Ed25519 key pair "ed" (id 02).
class Token {
 public:
  Token() {
    REQUIRE(std::filesystem::exists(kModule));
    std::filesystem::create_directory(dir_ / "tokens");
    const std::string conf = dir_ / "softhsm2.conf";
    const std::string text = "directories.tokendir = " + (dir_ / "tokens") + "\nobjectstore.backend = file\nlog.level = ERROR\n";
    WriteBytes(conf, Bytes(text.begin(), text.end()));
    ::setenv("SOFTHSM2_CONF", conf.c_str(), 1);
    REQUIRE(Run("softhsm2-util --init-token --free --label mg --so-pin 12345678 --pin " + std::string(kPin)) == 0);
    REQUIRE(Run(Tool() + " --login --pin " + kPin +
                " --keypairgen --key-type EC:prime256v1 --label ec --id 01 --usage-sign") == 0);
    REQUIRE(Run(Tool() + " --login --pin " + kPin +
                " --keypairgen --key-type EC:edwards25519 --label ed --id 02 --usage-sign") == 0);
  }
  std::string Tool() const { return std::string("pkcs11-tool --module ") + kModule + " --token-label mg"; }
  // Exported is the public key of `label` as pkcs11-tool exports it from the
  // token (DER SPKI for EC, PEM for Ed25519), read by LoadPublicKey.
  signer::PublicKey Exported(const std::string& label) const {
    const std::string out = dir_ / (label + ".out"), pem = dir_ / (label + ".pub");
    REQUIRE(Run(Tool() + " --read-object --type pubkey --label " + label + " -o " + out) == 0);
    if (ReadText(out).rfind("-----BEGIN", 0) == 0) {
      std::filesystem::copy_file(out, pem);
    } else {
      REQUIRE(Run("openssl pkey -pubin -inform DER -in " + out + " -out " + pem) == 0);
    }
    auto key = signer::LoadPublicKey(pem);
    REQUIRE(key.ok());
    return key.value();
  }
  const TempDir& dir() const { return dir_; }

 private:
  TempDir dir_;
};

signer::Pkcs11Options Opts(const std::string& pin = kPin) {
  signer::Pkcs11Options o;
  o.module_path = kModule;
  static std::string held;
  held = pin;
  o.pin = Span(held);
  return o;
}

Bytes Model() {
  ojson h;
  h["w"] = {{"dtype", "F32"}, {"shape", {2, 2}}, {"data_offsets", {0, 16}}};
  return Assemble(h.dump(), Bytes(16, 0x3c));
}

}  // namespace

TEST_CASE("pkcs11: an ECDSA P-256 token key signs, its exported public key verifies",
          "[signer][pkcs11]") {
  Token token;
  auto key = signer::OpenPkcs11Key("pkcs11:token=mg;object=ec", Opts());
  REQUIRE(key.ok());
  CHECK(key.value().on_token());
  CHECK(key.value().alg() == signer::KeyAlg::kEcdsaP256);
  const signer::PublicKey exported = token.Exported("ec");
  CHECK(key.value().public_key().kid == exported.kid);
  const std::string msg = "a bundle's PAE";
  auto sig = key.value().SignBytes(Span(msg));
  REQUIRE(sig.ok());
  CHECK(signer::VerifySignature(exported, Span(msg), sig.value()));
  CHECK_FALSE(signer::VerifySignature(exported, Span("another message"), sig.value()));
  // id= names the same key; a token key is never written out.
  auto by_id = signer::OpenPkcs11Key("pkcs11:token=mg;id=%01", Opts());
  REQUIRE(by_id.ok());
  CHECK(by_id.value().public_key().kid == exported.kid);
  CHECK(key.value().WritePem(token.dir() / "out.key").error().code == core::Code::kSigOptions);
  CHECK_FALSE(std::filesystem::exists(token.dir() / "out.key"));
}

TEST_CASE("pkcs11: an Ed25519 token key signs STSIG (embedded) that VerifyFile accepts",
          "[signer][pkcs11]") {
  Token token;
  auto key = signer::OpenPkcs11Key("pkcs11:token=mg;object=ed;type=private", Opts());
  REQUIRE(key.ok());
  CHECK(key.value().alg() == signer::KeyAlg::kEd25519);
  const signer::PublicKey exported = token.Exported("ed");
  CHECK(key.value().public_key().kid == exported.kid);
  const std::string path = token.dir() / "m.safetensors";
  WriteBytes(path, Model());
  auto signed_file = signer::SignFile(path, key.value(), signer::SignOptions{});
  REQUIRE(signed_file.ok());
  std::vector<signer::PublicKey> trusted{exported};
  auto v = signer::VerifyFile(path, trusted);
  REQUIRE(v.ok());
  CHECK(v.value().valid());
  // Sign (the fixed-size form STSIG uses) goes through the token too.
  const std::string msg = "m";
  CHECK(signer::VerifySignature(exported, Span(msg), key.value().Sign(Span(msg))));
}

TEST_CASE("pkcs11: the private keys are sensitive and not extractable (CKA_VALUE unreadable)",
          "[signer][pkcs11]") {
  Token token;
  CK_FUNCTION_LIST* fn = p11_kit_module_load(kModule, 0);
  REQUIRE(fn != nullptr);
  REQUIRE(p11_kit_module_initialize(fn) == CKR_OK);
  // Finalized on every path out (a failed REQUIRE included): a module left
  // initialized would keep this test's token directory for the next test.
  struct Finalize {
    CK_FUNCTION_LIST* fn;
    ~Finalize() {
      p11_kit_module_finalize(fn);
      p11_kit_module_release(fn);
    }
  } finalize{fn};
  CK_SLOT_ID slots[8];
  CK_ULONG n = 8;
  REQUIRE(fn->C_GetSlotList(CK_TRUE, slots, &n) == CKR_OK);
  // SoftHSM2 offers a fresh free slot beside the token it initialized.
  CK_SLOT_ID slot = 0;
  CK_ULONG named = 0;
  for (CK_ULONG i = 0; i < n; ++i) {
    CK_TOKEN_INFO info{};
    REQUIRE(fn->C_GetTokenInfo(slots[i], &info) == CKR_OK);
    if (std::string(reinterpret_cast<const char*>(info.label), 3) == "mg ") {
      slot = slots[i];
      ++named;
    }
  }
  REQUIRE(named == 1);
  CK_SESSION_HANDLE s = 0;
  REQUIRE(fn->C_OpenSession(slot, CKF_SERIAL_SESSION, nullptr, nullptr, &s) == CKR_OK);
  std::string pin = kPin;
  REQUIRE(fn->C_Login(s, CKU_USER, reinterpret_cast<CK_UTF8CHAR*>(pin.data()), pin.size()) == CKR_OK);
  for (std::string label : {"ec", "ed"}) {
    INFO(label);
    CK_OBJECT_CLASS cls = CKO_PRIVATE_KEY;
    CK_ATTRIBUTE tmpl[] = {{CKA_CLASS, &cls, sizeof cls}, {CKA_LABEL, label.data(), label.size()}};
    REQUIRE(fn->C_FindObjectsInit(s, tmpl, 2) == CKR_OK);
    CK_OBJECT_HANDLE obj = 0;
    CK_ULONG found = 0;
    REQUIRE(fn->C_FindObjects(s, &obj, 1, &found) == CKR_OK);
    fn->C_FindObjectsFinal(s);
    REQUIRE(found == 1);
    uint8_t value[256];
    CK_ATTRIBUTE secret{CKA_VALUE, value, sizeof value};
    CHECK(fn->C_GetAttributeValue(s, obj, &secret, 1) == CKR_ATTRIBUTE_SENSITIVE);
    CHECK(secret.ulValueLen == CK_UNAVAILABLE_INFORMATION);
    CK_BBOOL extractable = CK_TRUE, sensitive = CK_FALSE, never = CK_FALSE;
    CK_ATTRIBUTE flags[] = {{CKA_EXTRACTABLE, &extractable, sizeof extractable},
                            {CKA_SENSITIVE, &sensitive, sizeof sensitive},
                            {CKA_NEVER_EXTRACTABLE, &never, sizeof never}};
    REQUIRE(fn->C_GetAttributeValue(s, obj, flags, 3) == CKR_OK);
    CHECK(extractable == CK_FALSE);
    CHECK(sensitive == CK_TRUE);
    CHECK(never == CK_TRUE);
  }
  fn->C_Logout(s);
  fn->C_CloseSession(s);
}

TEST_CASE("pkcs11: wrong PIN, no PIN, missing object, bad URIs, no token, bad module",
          "[signer][pkcs11]") {
  Token token;
  auto code = [](const std::string& uri, const signer::Pkcs11Options& o) {
    auto k = signer::OpenPkcs11Key(uri, o);
    REQUIRE_FALSE(k.ok());
    INFO(k.error().message);
    return k.error().code;
  };
  CHECK(code("pkcs11:token=mg;object=ec", Opts("654321")) == core::Code::kSigPkcs11Login);
  signer::Pkcs11Options no_pin;
  no_pin.module_path = kModule;
  CHECK(code("pkcs11:token=mg;object=ec", no_pin) == core::Code::kSigPkcs11Login);
  CHECK(code("pkcs11:token=mg;object=nope", Opts()) == core::Code::kSigPkcs11Object);
  CHECK(code("pkcs11:token=mg;id=%07", Opts()) == core::Code::kSigPkcs11Object);
  // A misspelt attribute would otherwise match any key.
  CHECK(code("pkcs11:token=mg;objekt=ec", Opts()) == core::Code::kSigPkcs11Uri);
  CHECK(code("pkcs11:token=mg", Opts()) == core::Code::kSigPkcs11Uri);
  CHECK(code("pkcs11:token=mg;object=ec?pin-value=123456", Opts()) == core::Code::kSigPkcs11Uri);
  CHECK(code("pkcs11:token=mg;object=ec?pin-source=file:/tmp/pin", Opts()) == core::Code::kSigPkcs11Uri);
  CHECK(code("pkcs11:token=mg;object=ec;type=public", Opts()) == core::Code::kSigPkcs11Uri);
  CHECK(code("pkcs11:token=%zz;object=ec", Opts()) == core::Code::kSigPkcs11Uri);
  CHECK(code("pkcs11:token=other;object=ec", Opts()) == core::Code::kSigPkcs11Token);
  signer::Pkcs11Options bad_module = Opts();
  bad_module.module_path = token.dir() / "no-such-module.so";
  CHECK(code("pkcs11:token=mg;object=ec", bad_module) == core::Code::kSigPkcs11);
  // The URI's module-path works, and may not contradict --pkcs11-module.
  signer::Pkcs11Options uri_module = Opts();
  uri_module.module_path.clear();
  CHECK(signer::OpenPkcs11Key(std::string("pkcs11:token=mg;object=ec?module-path=") + kModule, uri_module).ok());
  CHECK(code("pkcs11:token=mg;object=ec?module-path=/usr/lib/other.so", Opts()) == core::Code::kSigPkcs11Uri);
}
