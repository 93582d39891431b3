// Private to libmodelgate: the handles behind modelgate.h's opaque types and
// the error plumbing every entry point shares.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <type_traits>
#include <vector>

#include "modelgate.h"
#include "modelgate/core.h"
#include "modelgate/signer.h"

#define MG_EXPORT extern "C" __attribute__((visibility("default")))

struct mg_keyring {
  std::vector<modelgate::signer::PublicKey> keys;
};

// mg_model is a verified model: one loader per file, its tensors across
// the files ordered by name, and what verified it.
struct mg_model {
  struct File {
    std::string path;
    std::unique_ptr<modelgate::signer::VerifiedModel> model;
    // Signed __metadata__ entries minus stsig.*, sorted bytewise by key.
    std::vector<std::pair<std::string, std::string>> metadata;
    std::optional<modelgate::core::Sha256Digest> sha256;  // the bundle's whole-file digest
  };
  struct Tensor {
    std::string name;
    std::string dtype;
    uint32_t dtype_bits = 0;
    modelgate::core::Dims shape;  // in the file's header (its tensor table)
    uint64_t byte_length = 0;
    size_t file_index = 0;
    size_t index_in_file = 0;  // data order, the loader's index
  };
  bool detached = false;
  uint32_t hash_threads = 0;  // the mg_open option
  std::vector<File> files;
  std::vector<Tensor> tensors;  // sorted bytewise by name
  std::string verification_json;
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

// kMaxHashThreads bounds mg_open_options.hash_threads: each is a thread the
// loader starts (lazy check_all may start one per tensor up to it), and a
// failure to start one midway cannot be undone cleanly.
inline constexpr uint32_t kMaxHashThreads = 256;

// kMaxModelFiles bounds the safetensors files of one model (a directory's,
// or an index's shards): each keeps a mapping (vm.max_map_count is 65530 by
// default) and, in lazy mode, a descriptor open. Real models have hundreds.
inline constexpr size_t kMaxModelFiles = 4096;

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

// RawValue is the integer a C caller stored in an enum-typed field or
// argument, read without an enum load: C allows any int there, and in C++
// loading a value outside the enum's range is undefined.
template <typename E>
std::underlying_type_t<E> RawValue(const E& e) {
  std::underlying_type_t<E> v;
  static_assert(sizeof v == sizeof e);
  std::memcpy(&v, &e, sizeof v);
  return v;
}

// Argument is the MG_ERR_ARGUMENT error (MG-API-ARGUMENT) saying `message`.
ApiError Argument(std::string message);

// HashThreads is the hash_threads option with 0 as one per core.
inline unsigned HashThreads(uint32_t option) {
  if (option != 0) return option;
  return std::max(1u, std::thread::hardware_concurrency());
}

// OuterThreads is how many of `files` are verified at once.
inline unsigned OuterThreads(uint32_t option, size_t files) {
  return static_cast<unsigned>(std::clamp<size_t>(files, 1, HashThreads(option)));
}

// RunOnThreads runs `work` (noexcept) on up to `threads` threads, this one
// included; a thread that cannot be started leaves its share to the others.
template <typename Work>
void RunOnThreads(unsigned threads, Work& work) {
  std::vector<std::thread> pool;
  for (unsigned t = 1; t < threads; ++t) {
    try {
      pool.emplace_back(work);
    } catch (...) {
      break;
    }
  }
  work();
  for (std::thread& t : pool) t.join();
}

// OpenModel is mg_open without the ABI wrapping (open.cc).
std::unique_ptr<mg_model> OpenModel(const std::string& path, const mg_keyring& keys,
                                    const mg_open_options& opts, ApiError* err);

}  // namespace modelgate::api
