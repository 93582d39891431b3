// The C API's trusted keys: mg_keyring is the list of public keys passed to
// every verification; nothing in a file adds to it.
#include <string>

#include "api_internal.h"

using modelgate::api::Argument;
using modelgate::api::Clear;
using modelgate::api::Fill;
using modelgate::api::FromCore;
using modelgate::api::Guard;

MG_EXPORT mg_status mg_keyring_new(mg_keyring** out, mg_error* err) {
  if (out != nullptr) *out = nullptr;
  return Guard(err, [&]() -> mg_status {
    if (out == nullptr) return Fill(err, Argument("mg_keyring_new: out is NULL"));
    *out = new mg_keyring();
    Clear(err);
    return MG_OK;
  });
}

MG_EXPORT void mg_keyring_free(mg_keyring* keys) { delete keys; }

namespace {

// AddKey adds `key` labelled `name` (NULL: `fallback_name`); `file` is the
// key file a failure is about ("" for PEM text).
mg_status AddKey(mg_keyring* keys, modelgate::core::Result<modelgate::signer::PublicKey> key,
                 const char* name, std::string_view fallback_name, std::string_view file,
                 mg_error* err) {
  if (!key.ok()) {
    modelgate::api::ApiError e = FromCore(key.error(), file);
    // Any key that does not parse is a key error, including a file that
    // cannot be read as one.
    if (e.status != MG_ERR_IO) e.status = MG_ERR_KEY;
    return Fill(err, e);
  }
  modelgate::signer::PublicKey k = std::move(key).value();
  k.name = name != nullptr ? std::string(name) : std::string(fallback_name);
  keys->keys.push_back(std::move(k));
  Clear(err);
  return MG_OK;
}

}  // namespace

MG_EXPORT mg_status mg_keyring_add_pem(mg_keyring* keys, const char* pem, size_t pem_len,
                                       const char* name, mg_error* err) {
  return Guard(err, [&]() -> mg_status {
    if (keys == nullptr) return Fill(err, Argument("mg_keyring_add_pem: keys is NULL"));
    if (pem == nullptr) return Fill(err, Argument("mg_keyring_add_pem: pem is NULL"));
    const std::string_view text(pem, pem_len);
    return AddKey(keys, modelgate::signer::ParsePublicKeyPem(text), name,
                  "key " + std::to_string(keys->keys.size() + 1), "", err);
  });
}

MG_EXPORT mg_status mg_keyring_add_file(mg_keyring* keys, const char* path, const char* name,
                                        mg_error* err) {
  return Guard(err, [&]() -> mg_status {
    if (keys == nullptr) return Fill(err, Argument("mg_keyring_add_file: keys is NULL"));
    if (path == nullptr) return Fill(err, Argument("mg_keyring_add_file: path is NULL"));
    return AddKey(keys, modelgate::signer::LoadPublicKey(path), name, path, path, err);
  });
}

MG_EXPORT size_t mg_keyring_count(const mg_keyring* keys) {
  return keys == nullptr ? 0 : keys->keys.size();
}
