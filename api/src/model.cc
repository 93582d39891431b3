// The C API's model handle: opening (mg_open) and what a model hands out.
#include "api_internal.h"

using modelgate::api::Fill;
using modelgate::api::Guard;
using modelgate::api::Make;

namespace {
mg_status Unsupported(mg_error* err) {
  return Fill(err, Make(MG_ERR_UNSUPPORTED, "", "not implemented yet"));
}
}  // namespace

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
