// Private to libmodelgate: the handles behind modelgate.h's opaque types and
// the error plumbing every entry point shares.
#pragma once

#include <cstdint>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "modelgate.h"
#include "modelgate/core.h"
#include "modelgate/signer.h"

#define MG_EXPORT extern "C" __attribute__((visibility("default")))

struct mg_keyring {
  std::vector<modelgate::signer::PublicKey> keys;
};

namespace modelgate::api {

// ApiError is an mg_error before it is copied into the caller's fixed
// buffers: `id` is a finding id, `file` the path it is about.
struct ApiError {
  mg_status status = MG_ERR_INTERNAL;
  std::string id;
  uint64_t offset = core::kNoOffset;
  std::string file;
  std::string message;
};

// StatusOf is the mg_status category of a core::Code.
mg_status StatusOf(core::Code code);
// FromCore is `e` about `file`, with FindingId(e.code) as its id.
ApiError FromCore(const core::Error& e, std::string_view file);
// Make builds an error with an explicit id (MG-API-*, MG-OMS-*).
ApiError Make(mg_status status, std::string_view id, std::string message,
              std::string_view file = {}, uint64_t offset = core::kNoOffset);

// Clear resets *err to "no error" (err may be NULL).
void Clear(mg_error* err);
// Fill copies `e` into *err (err may be NULL), truncating each string on a
// UTF-8 character boundary, and returns e.status.
mg_status Fill(mg_error* err, const ApiError& e);
// CopyTruncated copies `s` into dst[cap] NUL-terminated, cut on a UTF-8
// character boundary (and at an embedded NUL, which C strings cannot hold).
void CopyTruncated(char* dst, size_t cap, std::string_view s);

// Guard runs `body` (returning mg_status) so that no exception leaves it:
// std::bad_alloc and any other exception become MG_ERR_INTERNAL in *err.
template <typename Body>
mg_status Guard(mg_error* err, Body&& body) noexcept {
  try {
    return body();
  } catch (const std::bad_alloc&) {
    try {
      return Fill(err, Make(MG_ERR_INTERNAL, "MG-API-INTERNAL", "out of memory"));
    } catch (...) {
      return MG_ERR_INTERNAL;
    }
  } catch (const std::exception& e) {
    try {
      return Fill(err, Make(MG_ERR_INTERNAL, "MG-API-INTERNAL",
                            std::string("internal error: ") + e.what()));
    } catch (...) {
      return MG_ERR_INTERNAL;
    }
  } catch (...) {
    try {
      return Fill(err, Make(MG_ERR_INTERNAL, "MG-API-INTERNAL", "internal error"));
    } catch (...) {
      return MG_ERR_INTERNAL;
    }
  }
}

// Argument is the MG_ERR_ARGUMENT error for a bad `what`.
ApiError Argument(std::string message);

}  // namespace modelgate::api
