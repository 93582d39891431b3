// The C API (modelgate.h): version, status names, options and the error
// plumbing every entry point shares (api_internal.h).
#include <cstdlib>
#include <cstring>
#include <iterator>

#include "api_internal.h"

namespace modelgate::api {

mg_status StatusOf(core::Code code) {
  using core::Code;
  const auto v = static_cast<uint16_t>(code);
  switch (code) {
    case Code::kOk: return MG_OK;
    case Code::kSigKeyFormat: return MG_ERR_KEY;
    case Code::kSigKeyWrite: return MG_ERR_IO;
    case Code::kSigCrypto: return MG_ERR_INTERNAL;
    case Code::kSigOptions: return MG_ERR_ARGUMENT;
    // An index the strict parser refuses is a format error; the other set
    // codes say the shards are not the signed set.
    case Code::kSetIndex:
    case Code::kSetShardPath:
    case Code::kSetLimit: return MG_ERR_FORMAT;
    default: break;
  }
  if (v >= 10 && v < 100) return MG_ERR_IO;
  if (v >= 100 && v < 300) return MG_ERR_FORMAT;
  if (v >= 300 && v < 500) return MG_ERR_VERIFY;
  return MG_ERR_INTERNAL;
}

ApiError FromCore(const core::Error& e, std::string_view file) {
  ApiError out;
  out.status = StatusOf(e.code);
  out.id = std::string(core::FindingId(e.code));
  out.offset = e.offset;
  out.file = std::string(file);
  out.message = e.message;
  return out;
}

ApiError Make(mg_status status, std::string_view id, std::string message, std::string_view file,
              uint64_t offset) {
  ApiError out;
  out.status = status;
  out.id = std::string(id);
  out.offset = offset;
  out.file = std::string(file);
  out.message = std::move(message);
  return out;
}

ApiError Argument(std::string message) {
  return Make(MG_ERR_ARGUMENT, "MG-API-ARGUMENT", std::move(message));
}

void Clear(mg_error* err) {
  if (err == nullptr) return;
  std::memset(err, 0, sizeof(*err));
  err->status = MG_OK;
  err->offset = MG_NO_OFFSET;
}

void CopyTruncated(char* dst, size_t cap, std::string_view s) {
  if (cap == 0) return;
  size_t n = s.size();
  if (const size_t nul = s.find('\0'); nul != std::string_view::npos) n = nul;
  if (n > cap - 1) {
    n = cap - 1;
    // Back up over continuation bytes (10xxxxxx) to the lead byte of the
    // character that does not fit, and cut before it.
    while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;
  }
  std::memcpy(dst, s.data(), n);
  dst[n] = '\0';
}

mg_status Fill(mg_error* err, const ApiError& e) {
  if (err != nullptr) {
    Clear(err);
    err->status = e.status;
    CopyTruncated(err->id, sizeof(err->id), e.id);
    err->offset = e.offset;
    CopyTruncated(err->file, sizeof(err->file), e.file);
    // One line: a message carrying a newline (a quoted name never does, but
    // a library message might) is cut there.
    std::string_view message = e.message;
    if (const size_t nl = message.find_first_of("\r\n"); nl != std::string_view::npos) {
      message = message.substr(0, nl);
    }
    CopyTruncated(err->message, sizeof(err->message), message);
  }
  return e.status;
}

}  // namespace modelgate::api

using modelgate::api::Guard;

MG_EXPORT const char* mg_version(void) { return "0.1.0"; }
MG_EXPORT uint32_t mg_api_version(void) { return MG_API_VERSION; }

MG_EXPORT const char* mg_status_name(mg_status status) {
  static constexpr const char* kNames[] = {"ok",     "argument", "io",          "format",
                                           "verify", "key",      "unsupported", "internal"};
  const auto v = static_cast<int64_t>(modelgate::api::RawValue(status));
  if (v < 0 || v >= static_cast<int64_t>(std::size(kNames))) return "unknown";
  return kNames[v];
}

MG_EXPORT void mg_open_options_init(mg_open_options* opts) {
  if (opts == nullptr) return;
  std::memset(opts, 0, sizeof(*opts));
  opts->struct_size = sizeof(*opts);
  opts->mode = MG_MODE_EAGER;
  opts->signature = MG_SIGNATURE_ANY;
  opts->bundle_path = nullptr;
  opts->flags = 0;
  opts->hash_threads = 0;
}

MG_EXPORT void mg_string_free(char* s) { std::free(s); }
