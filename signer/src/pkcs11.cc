// PKCS#11 signing keys through p11-kit: it loads the module (a path, or the
// modules p11-kit is configured with), parses the RFC 7512 URI and matches
// tokens; modelgate itself logs in, finds the one private key and calls
// C_Sign.
//
// Why direct PKCS#11 and not OpenSSL's pkcs11 engine: Debian 12 has no
// pkcs11-provider, libengine-pkcs11-openssl (libp11 0.4.12) has no EdDSA,
// and engines are deprecated in OpenSSL 3. Calling the module directly signs
// both of our algorithms the same way (CKM_EDDSA over the message for
// STSIG's Ed25519, CKM_ECDSA over the digest for OMS bundles' P-256) with
// one code path and no OpenSSL configuration file.
#include "pkcs11.h"

#include <openssl/err.h>
#include <openssl/objects.h>
#include <openssl/x509.h>
#include <p11-kit/p11-kit.h>
#include <p11-kit/pkcs11.h>
#include <p11-kit/uri.h>
#include <sodium.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>

#include "ecdsa.h"

// Under ASan, LSan is told to ignore what the module allocates while it
// signs (SessionKey::Sign): SoftHSM2 2.6.1 (Debian 12) leaks an ASN1_STRING
// (its curve name "edwards25519") in every C_SignInit on an EdDSA key. The
// module's heap is not ours to judge; our own allocations stay checked.
#if defined(__SANITIZE_ADDRESS__)
#define MG_LSAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define MG_LSAN 1
#endif
#endif
#ifdef MG_LSAN
#include <sanitizer/lsan_interface.h>
#endif

namespace modelgate::signer::pkcs11 {
namespace {

using core::Code;
using core::Error;
using core::kNoOffset;

// kMaxAttributeBytes bounds an attribute read from the token (a
// certificate is the largest we read).
constexpr CK_ULONG kMaxAttributeBytes = 64 * 1024;
// kMaxSlots bounds the slots of one module we look at.
constexpr CK_ULONG kMaxSlots = 1024;

std::string RvName(CK_RV rv) {
  switch (rv) {
    case CKR_OK: return "CKR_OK";
    case CKR_PIN_INCORRECT: return "CKR_PIN_INCORRECT";
    case CKR_PIN_LOCKED: return "CKR_PIN_LOCKED";
    case CKR_PIN_EXPIRED: return "CKR_PIN_EXPIRED";
    case CKR_PIN_LEN_RANGE: return "CKR_PIN_LEN_RANGE";
    case CKR_USER_NOT_LOGGED_IN: return "CKR_USER_NOT_LOGGED_IN";
    case CKR_ATTRIBUTE_SENSITIVE: return "CKR_ATTRIBUTE_SENSITIVE";
    case CKR_MECHANISM_INVALID: return "CKR_MECHANISM_INVALID";
    case CKR_KEY_FUNCTION_NOT_PERMITTED: return "CKR_KEY_FUNCTION_NOT_PERMITTED";
    case CKR_KEY_TYPE_INCONSISTENT: return "CKR_KEY_TYPE_INCONSISTENT";
    case CKR_TOKEN_NOT_PRESENT: return "CKR_TOKEN_NOT_PRESENT";
    case CKR_DEVICE_ERROR: return "CKR_DEVICE_ERROR";
    case CKR_GENERAL_ERROR: return "CKR_GENERAL_ERROR";
    case CKR_FUNCTION_FAILED: return "CKR_FUNCTION_FAILED";
    case CKR_ARGUMENTS_BAD: return "CKR_ARGUMENTS_BAD";
    case CKR_BUFFER_TOO_SMALL: return "CKR_BUFFER_TOO_SMALL";
    default: break;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "CKR 0x%08lx", static_cast<unsigned long>(rv));
  return buf;
}

Error Fail(Code code, const std::string& message) { return Error{code, kNoOffset, message}; }
Error CallFailed(const char* call, CK_RV rv) {
  return Fail(Code::kSigPkcs11, std::string(call) + " failed: " + RvName(rv));
}

// Blank-padded PKCS#11 text (token labels) without its padding.
std::string Padded(const CK_UTF8CHAR* text, size_t n) {
  std::string s(reinterpret_cast<const char*>(text), n);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\0')) s.pop_back();
  return s;
}

// Modules owns what p11-kit loaded: one module by path, or the configured
// list; the destructor finalizes and releases them.
struct Modules {
  CK_FUNCTION_LIST* one = nullptr;
  CK_FUNCTION_LIST** list = nullptr;
  Modules() = default;
  Modules(const Modules&) = delete;
  Modules& operator=(const Modules&) = delete;
  ~Modules() {
    if (one != nullptr) {
      p11_kit_module_finalize(one);
      p11_kit_module_release(one);
    }
    if (list != nullptr) p11_kit_modules_finalize_and_release(list);
  }
  std::vector<CK_FUNCTION_LIST*> All() const {
    std::vector<CK_FUNCTION_LIST*> out;
    if (one != nullptr) out.push_back(one);
    for (CK_FUNCTION_LIST** m = list; m != nullptr && *m != nullptr; ++m) out.push_back(*m);
    return out;
  }
};

class SessionKey final : public TokenKey {
 public:
  SessionKey(std::unique_ptr<Modules> modules, CK_FUNCTION_LIST* fn, CK_SESSION_HANDLE session,
             bool logged_in, CK_OBJECT_HANDLE key, KeyAlg alg)
      : modules_(std::move(modules)), fn_(fn), session_(session), logged_in_(logged_in), key_(key), alg_(alg) {}
  ~SessionKey() override {
    if (logged_in_) fn_->C_Logout(session_);
    fn_->C_CloseSession(session_);
  }

  core::Result<std::vector<uint8_t>> Sign(std::span<const uint8_t> message) const override {
    std::vector<uint8_t> input;
    CK_MECHANISM mech{CKM_EDDSA, nullptr, 0};
    if (alg_ == KeyAlg::kEd25519) {
      input.assign(message.begin(), message.end());  // pure Ed25519 signs the message
    } else {
      auto digest = ecdsa::Digest(alg_, message);
      if (!digest.ok()) return digest.error();
      input = std::move(digest).value();
      mech.mechanism = CKM_ECDSA;  // over the digest: the token never hashes
    }
    if (input.size() > ULONG_MAX) return Fail(Code::kSigPkcs11, "message too large for C_Sign");
    std::lock_guard<std::mutex> lock(mu_);  // one operation per session at a time
#ifdef MG_LSAN
    __lsan::ScopedDisabler module_allocations;  // see MG_LSAN above
#endif
    CK_RV rv = fn_->C_SignInit(session_, &mech, key_);
    if (rv != CKR_OK) return CallFailed("C_SignInit", rv);
    CK_ULONG len = 0;
    rv = fn_->C_Sign(session_, input.data(), input.size(), nullptr, &len);
    if (rv != CKR_OK) return CallFailed("C_Sign (length)", rv);
    if (len == 0 || len > 512) {
      return Fail(Code::kSigPkcs11, "C_Sign announces a signature of " + std::to_string(len) + " bytes");
    }
    std::vector<uint8_t> sig(len);
    rv = fn_->C_Sign(session_, input.data(), input.size(), sig.data(), &len);
    if (rv != CKR_OK) return CallFailed("C_Sign", rv);
    sig.resize(len);
    if (alg_ == KeyAlg::kEd25519) {
      if (sig.size() != kSignatureBytes) {
        return Fail(Code::kSigPkcs11, "CKM_EDDSA returned " + std::to_string(sig.size()) + " bytes, not 64");
      }
      return sig;
    }
    return ecdsa::RawToDer(alg_, sig);
  }

 private:
  std::unique_ptr<Modules> modules_;  // outlives the session (destroyed after it)
  CK_FUNCTION_LIST* fn_;
  CK_SESSION_HANDLE session_;
  bool logged_in_;
  CK_OBJECT_HANDLE key_;
  KeyAlg alg_;
  mutable std::mutex mu_;
};

// Attribute reads one attribute of `obj` (at most kMaxAttributeBytes).
core::Result<std::vector<uint8_t>> Attribute(CK_FUNCTION_LIST* fn, CK_SESSION_HANDLE s,
                                             CK_OBJECT_HANDLE obj, CK_ATTRIBUTE_TYPE type,
                                             const char* name) {
  CK_ATTRIBUTE a{type, nullptr, 0};
  CK_RV rv = fn->C_GetAttributeValue(s, obj, &a, 1);
  if (rv != CKR_OK) return CallFailed((std::string("C_GetAttributeValue(") + name + ")").c_str(), rv);
  if (a.ulValueLen == CK_UNAVAILABLE_INFORMATION || a.ulValueLen > kMaxAttributeBytes) {
    return Fail(Code::kSigPkcs11Object, std::string(name) + " is unavailable or too large");
  }
  std::vector<uint8_t> out(a.ulValueLen);
  a.pValue = out.data();
  rv = fn->C_GetAttributeValue(s, obj, &a, 1);
  if (rv != CKR_OK) return CallFailed((std::string("C_GetAttributeValue(") + name + ")").c_str(), rv);
  out.resize(a.ulValueLen);
  return out;
}

// Find returns up to 2 objects matching `tmpl` (2 means "more than one").
core::Result<std::vector<CK_OBJECT_HANDLE>> Find(CK_FUNCTION_LIST* fn, CK_SESSION_HANDLE s,
                                                 std::vector<CK_ATTRIBUTE> tmpl) {
  CK_RV rv = fn->C_FindObjectsInit(s, tmpl.data(), tmpl.size());
  if (rv != CKR_OK) return CallFailed("C_FindObjectsInit", rv);
  CK_OBJECT_HANDLE found[2];
  CK_ULONG n = 0;
  rv = fn->C_FindObjects(s, found, 2, &n);
  fn->C_FindObjectsFinal(s);
  if (rv != CKR_OK) return CallFailed("C_FindObjects", rv);
  return std::vector<CK_OBJECT_HANDLE>(found, found + std::min<CK_ULONG>(n, 2));
}

// Der is one DER TLV (definite length, short or long form).
std::vector<uint8_t> Der(uint8_t tag, std::span<const uint8_t> content) {
  std::vector<uint8_t> out{tag};
  const size_t n = content.size();
  if (n < 0x80) {
    out.push_back(static_cast<uint8_t>(n));
  } else {
    std::vector<uint8_t> len;
    for (size_t v = n; v != 0; v >>= 8) len.insert(len.begin(), static_cast<uint8_t>(v));
    out.push_back(static_cast<uint8_t>(0x80 | len.size()));
    out.insert(out.end(), len.begin(), len.end());
  }
  out.insert(out.end(), content.begin(), content.end());
  return out;
}

// Unwrap is the content of a DER OCTET STRING `der`, or `der` itself when it
// is not exactly one (some tokens store the raw point in CKA_EC_POINT).
std::vector<uint8_t> Unwrap(const std::vector<uint8_t>& der) {
  const unsigned char* p = der.data();
  ASN1_OCTET_STRING* os = d2i_ASN1_OCTET_STRING(nullptr, &p, static_cast<long>(der.size()));
  std::vector<uint8_t> out = der;
  if (os != nullptr && p == der.data() + der.size()) {
    out.assign(ASN1_STRING_get0_data(os), ASN1_STRING_get0_data(os) + ASN1_STRING_length(os));
  }
  ASN1_OCTET_STRING_free(os);
  ERR_clear_error();
  return out;
}

bool IsEd25519Params(const std::vector<uint8_t>& params) {
  // PKCS#11 3.0: the curve's OID 1.3.101.112, or the PrintableString
  // "edwards25519" (what SoftHSM2 and OpenSC write).
  static const std::vector<uint8_t> kOid = {0x06, 0x03, 0x2b, 0x65, 0x70};
  static const std::string kName = "edwards25519";
  std::vector<uint8_t> name = {0x13, static_cast<uint8_t>(kName.size())};
  name.insert(name.end(), kName.begin(), kName.end());
  return params == kOid || params == name;
}

// FromPkey is the PublicKey of an OpenSSL public key (a certificate's).
core::Result<PublicKey> FromPkey(EVP_PKEY* pkey) {
  if (EVP_PKEY_get_base_id(pkey) == EVP_PKEY_ED25519) {
    std::array<uint8_t, kPublicKeyBytes> raw{};
    size_t len = raw.size();
    if (EVP_PKEY_get_raw_public_key(pkey, raw.data(), &len) != 1 || len != raw.size()) {
      ERR_clear_error();
      return Fail(Code::kSigPkcs11Object, "the certificate's Ed25519 key does not read");
    }
    return PublicKeyFromRaw(raw);
  }
  auto alg = ecdsa::AlgOf(pkey);
  if (!alg.ok()) return Fail(Code::kSigPkcs11Object, "the token's public key: " + alg.error().message);
  core::Status checked = ecdsa::CheckPublic(pkey);
  if (!checked.ok()) return Fail(Code::kSigPkcs11Object, "the token's public key: " + checked.error().message);
  return ecdsa::PublicKeyOf(pkey, alg.value());
}

// PublicOf builds the public key from a key object's CKA_EC_PARAMS and
// CKA_EC_POINT.
core::Result<PublicKey> PublicOf(CK_KEY_TYPE type, const std::vector<uint8_t>& params,
                                 const std::vector<uint8_t>& point_attr) {
  const std::vector<uint8_t> point = Unwrap(point_attr);
  if (type == CKK_EC_EDWARDS) {
    if (!IsEd25519Params(params) || point.size() != kPublicKeyBytes) {
      return Fail(Code::kSigPkcs11Object, "an EC_EDWARDS key that is not Ed25519 (only edwards25519 is supported)");
    }
    return PublicKeyFromRaw(std::span<const uint8_t, kPublicKeyBytes>(point.data(), kPublicKeyBytes));
  }
  // SubjectPublicKeyInfo { { id-ecPublicKey, <CKA_EC_PARAMS> }, BIT STRING point }:
  // OpenSSL then checks the named curve and the point (AlgOf, CheckPublic).
  static const std::vector<uint8_t> kEcPublicKey = {0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01};
  std::vector<uint8_t> alg = kEcPublicKey;
  alg.insert(alg.end(), params.begin(), params.end());
  std::vector<uint8_t> bits = {0x00};
  bits.insert(bits.end(), point.begin(), point.end());
  std::vector<uint8_t> body = Der(0x30, alg);
  const std::vector<uint8_t> bitstring = Der(0x03, bits);
  body.insert(body.end(), bitstring.begin(), bitstring.end());
  const std::vector<uint8_t> spki = Der(0x30, body);
  const unsigned char* p = spki.data();
  ecdsa::Pkey pkey(d2i_PUBKEY(nullptr, &p, static_cast<long>(spki.size())));
  if (!pkey || p != spki.data() + spki.size()) {
    ERR_clear_error();
    return Fail(Code::kSigPkcs11Object, "the token's CKA_EC_PARAMS / CKA_EC_POINT do not form an EC public key");
  }
  return FromPkey(pkey.get());
}

// ParsedUri holds the checked URI.
struct ParsedUri {
  std::unique_ptr<P11KitUri, void (*)(P11KitUri*)> uri{nullptr, p11_kit_uri_free};
  std::vector<uint8_t> label, id;
  bool has_label = false, has_id = false;
};

core::Result<ParsedUri> ParseUri(std::string_view text) {
  ParsedUri out;
  if (text.size() > 4096) return Fail(Code::kSigPkcs11Uri, "the pkcs11: URI is over 4096 bytes");
  const std::string s(text);
  if (s.find('\0') != std::string::npos) return Fail(Code::kSigPkcs11Uri, "the pkcs11: URI holds a NUL byte");
  out.uri.reset(p11_kit_uri_new());
  if (!out.uri) return Fail(Code::kSigPkcs11, "p11_kit_uri_new failed");
  const int rc = p11_kit_uri_parse(s.c_str(), P11_KIT_URI_FOR_ANY, out.uri.get());
  if (rc != P11_KIT_URI_OK) {
    return Fail(Code::kSigPkcs11Uri, std::string("the key URI does not parse as RFC 7512: ") +
                                         p11_kit_uri_message(rc));
  }
  if (p11_kit_uri_any_unrecognized(out.uri.get())) {
    return Fail(Code::kSigPkcs11Uri,
                "the key URI has an attribute modelgate does not know (a misspelt one would "
                "match any key); RFC 7512 path attributes are token, manufacturer, serial, "
                "model, library-*, slot-*, object, id, type");
  }
  if (p11_kit_uri_get_pin_value(out.uri.get()) != nullptr ||
      p11_kit_uri_get_pin_source(out.uri.get()) != nullptr) {
    return Fail(Code::kSigPkcs11Uri,
                "the key URI carries a PIN (pin-value or pin-source); a PIN never goes on the "
                "command line: use --pin-file FILE or MODELGATE_PKCS11_PIN");
  }
  if (CK_ATTRIBUTE* cls = p11_kit_uri_get_attribute(out.uri.get(), CKA_CLASS); cls != nullptr) {
    CK_OBJECT_CLASS c = 0;
    if (cls->ulValueLen != sizeof c) return Fail(Code::kSigPkcs11Uri, "the key URI's type does not parse");
    std::copy_n(static_cast<const uint8_t*>(cls->pValue), sizeof c, reinterpret_cast<uint8_t*>(&c));
    if (c != CKO_PRIVATE_KEY) return Fail(Code::kSigPkcs11Uri, "the key URI's type is not private");
  }
  if (CK_ATTRIBUTE* a = p11_kit_uri_get_attribute(out.uri.get(), CKA_LABEL); a != nullptr) {
    const auto* v = static_cast<const uint8_t*>(a->pValue);
    out.label.assign(v, v + a->ulValueLen);
    out.has_label = true;
  }
  if (CK_ATTRIBUTE* a = p11_kit_uri_get_attribute(out.uri.get(), CKA_ID); a != nullptr) {
    const auto* v = static_cast<const uint8_t*>(a->pValue);
    out.id.assign(v, v + a->ulValueLen);
    out.has_id = true;
  }
  if (!out.has_label && !out.has_id) {
    return Fail(Code::kSigPkcs11Uri, "the key URI names neither object= nor id= (which key?)");
  }
  return out;
}

struct Slot {
  CK_FUNCTION_LIST* fn;
  CK_SLOT_ID id;
  CK_TOKEN_INFO token;
};

}  // namespace

core::Result<Opened> Open(std::string_view uri_text, const Pkcs11Options& options) {
  auto parsed = ParseUri(uri_text);
  if (!parsed.ok()) return parsed.error();
  const ParsedUri& uri = parsed.value();
  p11_kit_be_quiet();  // its messages come back through p11_kit_message()

  auto modules = std::make_unique<Modules>();
  std::string path = options.module_path;
  if (const char* in_uri = p11_kit_uri_get_module_path(uri.uri.get()); in_uri != nullptr) {
    if (!path.empty() && path != in_uri) {
      return Fail(Code::kSigPkcs11Uri, "--pkcs11-module " + core::Quoted(path) +
                                           " and the URI's module-path " + core::Quoted(in_uri) +
                                           " differ");
    }
    path = in_uri;
  }
  if (!path.empty()) {
    modules->one = p11_kit_module_load(path.c_str(), 0);
    if (modules->one == nullptr) {
      const char* why = p11_kit_message();
      return Fail(Code::kSigPkcs11, "cannot load the PKCS#11 module " + core::Quoted(path) +
                                        (why != nullptr ? std::string(": ") + why : ""));
    }
    CK_RV rv = p11_kit_module_initialize(modules->one);
    if (rv != CKR_OK) {
      p11_kit_module_release(modules->one);
      modules->one = nullptr;
      return Fail(Code::kSigPkcs11, "the PKCS#11 module " + core::Quoted(path) +
                                        " does not initialize: " + RvName(rv));
    }
  } else {
    modules->list = p11_kit_modules_load_and_initialize(0);
    if (modules->list == nullptr) {
      const char* why = p11_kit_message();
      return Fail(Code::kSigPkcs11, std::string("cannot load p11-kit's configured PKCS#11 modules") +
                                        (why != nullptr ? std::string(": ") + why : ""));
    }
  }
  const char* module_name = p11_kit_uri_get_module_name(uri.uri.get());

  // The one token the URI names, across the modules.
  std::vector<Slot> matches;
  for (CK_FUNCTION_LIST* fn : modules->All()) {
    if (module_name != nullptr) {
      char* name = p11_kit_module_get_name(fn);
      const bool same = name != nullptr && std::string(name) == module_name;
      free(name);
      if (!same) continue;
    }
    CK_INFO info{};
    if (fn->C_GetInfo(&info) != CKR_OK || p11_kit_uri_match_module_info(uri.uri.get(), &info) != 1) continue;
    CK_ULONG count = 0;
    if (fn->C_GetSlotList(CK_TRUE, nullptr, &count) != CKR_OK || count == 0) continue;
    count = std::min(count, kMaxSlots);
    std::vector<CK_SLOT_ID> slots(count);
    if (fn->C_GetSlotList(CK_TRUE, slots.data(), &count) != CKR_OK) continue;
    slots.resize(std::min<CK_ULONG>(count, slots.size()));
    for (CK_SLOT_ID id : slots) {
      CK_SLOT_INFO si{};
      CK_TOKEN_INFO ti{};
      if (fn->C_GetSlotInfo(id, &si) != CKR_OK || fn->C_GetTokenInfo(id, &ti) != CKR_OK) continue;
      if (p11_kit_uri_match_slot_info(uri.uri.get(), &si) != 1) continue;
      if (p11_kit_uri_get_slot_id(uri.uri.get()) != static_cast<CK_SLOT_ID>(-1) &&
          p11_kit_uri_get_slot_id(uri.uri.get()) != id) {
        continue;
      }
      if (p11_kit_uri_match_token_info(uri.uri.get(), &ti) != 1) continue;
      matches.push_back({fn, id, ti});
    }
  }
  if (matches.empty()) {
    return Fail(Code::kSigPkcs11Token, "no token matches the key URI" +
                                           std::string(path.empty() ? " in p11-kit's configured modules" : " in " + core::Quoted(path)));
  }
  if (matches.size() > 1) {
    return Fail(Code::kSigPkcs11Token,
                std::to_string(matches.size()) + " tokens match the key URI (" +
                    core::Quoted(Padded(matches[0].token.label, sizeof matches[0].token.label)) + ", " +
                    core::Quoted(Padded(matches[1].token.label, sizeof matches[1].token.label)) +
                    "...): name one with token= or serial=");
  }
  const Slot slot = matches[0];
  CK_FUNCTION_LIST* fn = slot.fn;
  const std::string token_name = core::Quoted(Padded(slot.token.label, sizeof slot.token.label));

  CK_SESSION_HANDLE session = CK_INVALID_HANDLE;
  CK_RV rv = fn->C_OpenSession(slot.id, CKF_SERIAL_SESSION, nullptr, nullptr, &session);
  if (rv != CKR_OK) return CallFailed("C_OpenSession", rv);
  // From here the session (and the modules) belong to a SessionKey, so
  // every return below closes them; the key handle is filled in last.
  bool logged_in = false;
  auto close_session = [&]() {
    if (logged_in) fn->C_Logout(session);
    fn->C_CloseSession(session);
  };
  if (options.pin) {
    if (options.pin->size() > ULONG_MAX) {
      close_session();
      return Fail(Code::kSigPkcs11Login, "PIN too long");
    }
    // C_Login takes a non-const pointer; a copy that is wiped after.
    std::vector<CK_UTF8CHAR> pin(options.pin->begin(), options.pin->end());
    rv = fn->C_Login(session, CKU_USER, pin.data(), pin.size());
    sodium_memzero(pin.data(), pin.size());
    if (rv == CKR_OK) logged_in = true;
    if (rv != CKR_OK && rv != CKR_USER_ALREADY_LOGGED_IN) {
      close_session();
      if (rv == CKR_PIN_INCORRECT || rv == CKR_PIN_LEN_RANGE) {
        return Fail(Code::kSigPkcs11Login, "the token " + token_name + " refused the PIN (" + RvName(rv) + ")");
      }
      if (rv == CKR_PIN_LOCKED || rv == CKR_PIN_EXPIRED) {
        return Fail(Code::kSigPkcs11Login, "the token " + token_name + "'s user PIN is " +
                                               (rv == CKR_PIN_LOCKED ? "locked" : "expired") + " (" + RvName(rv) + ")");
      }
      return Fail(Code::kSigPkcs11Login, "C_Login on the token " + token_name + " failed: " + RvName(rv));
    }
  } else if ((slot.token.flags & CKF_LOGIN_REQUIRED) != 0) {
    close_session();
    return Fail(Code::kSigPkcs11Login, "the token " + token_name +
                                           " needs a PIN: --pin-file FILE or MODELGATE_PKCS11_PIN");
  }

  CK_OBJECT_CLASS priv_class = CKO_PRIVATE_KEY;
  std::vector<CK_ATTRIBUTE> tmpl = {{CKA_CLASS, &priv_class, sizeof priv_class}};
  std::vector<uint8_t> label = uri.label, id = uri.id;
  if (uri.has_label) tmpl.push_back({CKA_LABEL, label.data(), label.size()});
  if (uri.has_id) tmpl.push_back({CKA_ID, id.data(), id.size()});
  auto found = Find(fn, session, tmpl);
  if (!found.ok()) {
    close_session();
    return found.error();
  }
  const std::string which = uri.has_label ? "object " + core::Quoted(std::string(label.begin(), label.end()))
                                          : "id " + core::HexLower(id);
  if (found.value().size() != 1) {
    close_session();
    return Fail(Code::kSigPkcs11Object,
                found.value().empty()
                    ? "no private key " + which + " on the token " + token_name
                    : "several private keys match " + which + " on the token " + token_name +
                          ": name one with object= and id=");
  }
  const CK_OBJECT_HANDLE key = found.value()[0];

  CK_KEY_TYPE type = 0;
  CK_ATTRIBUTE type_attr{CKA_KEY_TYPE, &type, sizeof type};
  rv = fn->C_GetAttributeValue(session, key, &type_attr, 1);
  if (rv != CKR_OK || (type != CKK_EC && type != CKK_EC_EDWARDS)) {
    close_session();
    return Fail(Code::kSigPkcs11Object, "the private key " + which +
                                            " is not an EC or EC_EDWARDS key (Ed25519, ECDSA P-256/384/521)");
  }
  auto priv_params = Attribute(fn, session, key, CKA_EC_PARAMS, "CKA_EC_PARAMS");
  if (!priv_params.ok()) {
    close_session();
    return priv_params.error();
  }

  // The public half: the public key object beside it, else its certificate.
  CK_OBJECT_CLASS pub_class = CKO_PUBLIC_KEY;
  tmpl[0] = {CKA_CLASS, &pub_class, sizeof pub_class};
  auto pubs = Find(fn, session, tmpl);
  core::Result<PublicKey> pub = Fail(Code::kSigPkcs11Object, "");
  if (pubs.ok() && pubs.value().size() == 1) {
    auto params = Attribute(fn, session, pubs.value()[0], CKA_EC_PARAMS, "CKA_EC_PARAMS");
    auto point = Attribute(fn, session, pubs.value()[0], CKA_EC_POINT, "CKA_EC_POINT");
    if (!params.ok() || !point.ok()) {
      pub = Fail(Code::kSigPkcs11Object, "the public key object beside " + which + " has no EC parameters or point");
    } else if (params.value() != priv_params.value()) {
      pub = Fail(Code::kSigPkcs11Object, "the public key object beside " + which + " is on another curve");
    } else {
      pub = PublicOf(type, params.value(), point.value());
    }
  } else {
    CK_OBJECT_CLASS cert_class = CKO_CERTIFICATE;
    tmpl[0] = {CKA_CLASS, &cert_class, sizeof cert_class};
    auto certs = Find(fn, session, tmpl);
    if (certs.ok() && certs.value().size() == 1) {
      auto der = Attribute(fn, session, certs.value()[0], CKA_VALUE, "CKA_VALUE");
      if (der.ok()) {
        const unsigned char* p = der.value().data();
        std::unique_ptr<X509, void (*)(X509*)> cert(d2i_X509(nullptr, &p, static_cast<long>(der.value().size())), X509_free);
        EVP_PKEY* pk = cert ? X509_get0_pubkey(cert.get()) : nullptr;
        pub = pk != nullptr ? FromPkey(pk)
                            : core::Result<PublicKey>(Fail(Code::kSigPkcs11Object, "the certificate beside " + which + " does not parse"));
        ERR_clear_error();
      } else {
        pub = der.error();
      }
    } else {
      pub = Fail(Code::kSigPkcs11Object, "no single public key object or certificate beside the private key " + which +
                                             " (modelgate needs its public half for the key id)");
    }
  }
  if (!pub.ok()) {
    close_session();
    return pub.error();
  }
  const KeyAlg alg = pub.value().alg;
  if ((type == CKK_EC_EDWARDS) != (alg == KeyAlg::kEd25519)) {
    close_session();
    return Fail(Code::kSigPkcs11Object, "the public half beside " + which + " is of another key type");
  }
  Opened out;
  out.key = std::make_unique<SessionKey>(std::move(modules), fn, session, logged_in, key, alg);
  out.public_key = std::move(pub).value();
  return out;
}

}  // namespace modelgate::signer::pkcs11
