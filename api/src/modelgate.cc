// The C API (modelgate.h) over the C++ library. Scaffolding: H1 replaces
// every MG_ERR_UNSUPPORTED below with the real implementation.
#include "modelgate.h"

#include <cstring>

#include "modelgate/core.h"

#define MG_EXPORT extern "C" __attribute__((visibility("default")))

namespace {
void Clear(mg_error* err) {
  if (err == nullptr) return;
  std::memset(err, 0, sizeof(*err));
  err->offset = MG_NO_OFFSET;
}
mg_status Unsupported(mg_error* err) {
  Clear(err);
  if (err != nullptr) {
    err->status = MG_ERR_UNSUPPORTED;
    std::strcpy(err->message, "not implemented yet");
  }
  return MG_ERR_UNSUPPORTED;
}
}  // namespace

MG_EXPORT const char* mg_version(void) { return "0.1.0"; }
MG_EXPORT uint32_t mg_api_version(void) { return MG_API_VERSION; }
MG_EXPORT const char* mg_status_name(mg_status s) {
  switch (s) {
    case MG_OK: return "ok";
    case MG_ERR_ARGUMENT: return "argument";
    case MG_ERR_IO: return "io";
    case MG_ERR_FORMAT: return "format";
    case MG_ERR_VERIFY: return "verify";
    case MG_ERR_KEY: return "key";
    case MG_ERR_UNSUPPORTED: return "unsupported";
    case MG_ERR_INTERNAL: return "internal";
  }
  return "unknown";
}
MG_EXPORT mg_status mg_keyring_new(mg_keyring** out, mg_error* err) {
  if (out) *out = nullptr;
  return Unsupported(err);
}
MG_EXPORT void mg_keyring_free(mg_keyring*) {}
MG_EXPORT mg_status mg_keyring_add_pem(mg_keyring*, const char*, size_t, const char*, mg_error* err) {
  return Unsupported(err);
}
MG_EXPORT mg_status mg_keyring_add_file(mg_keyring*, const char*, const char*, mg_error* err) {
  return Unsupported(err);
}
MG_EXPORT size_t mg_keyring_count(const mg_keyring*) { return 0; }
MG_EXPORT void mg_open_options_init(mg_open_options* opts) {
  if (opts == nullptr) return;
  std::memset(opts, 0, sizeof(*opts));
  opts->struct_size = sizeof(*opts);
}
MG_EXPORT mg_status mg_open(const char*, const mg_keyring*, const mg_open_options*, mg_model** out,
                            mg_error* err) {
  if (out) *out = nullptr;
  return Unsupported(err);
}
MG_EXPORT void mg_model_free(mg_model*) {}
MG_EXPORT size_t mg_model_file_count(const mg_model*) { return 0; }
MG_EXPORT const char* mg_model_file_path(const mg_model*, size_t) { return nullptr; }
MG_EXPORT size_t mg_model_tensor_count(const mg_model*) { return 0; }
MG_EXPORT mg_status mg_model_tensor_info(const mg_model*, size_t, mg_tensor_info*, mg_error* err) {
  return Unsupported(err);
}
MG_EXPORT mg_status mg_model_find(const mg_model*, const char*, size_t, size_t*, mg_error* err) {
  return Unsupported(err);
}
MG_EXPORT mg_status mg_model_tensor_data(const mg_model*, size_t, const void**, uint64_t*,
                                         mg_error* err) {
  return Unsupported(err);
}
MG_EXPORT mg_status mg_model_check_all(const mg_model*, mg_error* err) { return Unsupported(err); }
MG_EXPORT size_t mg_model_metadata_count(const mg_model*, size_t) { return 0; }
MG_EXPORT mg_status mg_model_metadata_entry(const mg_model*, size_t, size_t, const char**, size_t*,
                                            const char**, size_t*, mg_error* err) {
  return Unsupported(err);
}
MG_EXPORT const char* mg_model_verification_json(const mg_model*) { return "{}"; }
MG_EXPORT mg_status mg_scan(const char*, const char*, char** report, int* verdict, mg_error* err) {
  if (report) *report = nullptr;
  if (verdict) *verdict = 2;
  return Unsupported(err);
}
MG_EXPORT void mg_string_free(char*) {}
