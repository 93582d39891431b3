// The C API's model handle: mg_open's ABI wrapping and what a model hands
// out (tensor info, verified bytes, metadata, the verification record).
#include <atomic>
#include <cstddef>
#include <string>
#include <vector>

#include "api_internal.h"
#include "modelgate/detached.h"

using modelgate::api::ApiError;
using modelgate::api::Argument;
using modelgate::api::Clear;
using modelgate::api::Fill;
using modelgate::api::FromCore;
using modelgate::api::Guard;
using modelgate::api::Make;
namespace core = modelgate::core;

namespace {

// LoaderError is a loader failure on file `f` of `model`: under a bundle,
// bytes that differ from the signed digest are MG-OMS-FILE-CHANGED.
mg_status LoaderError(const mg_model& model, size_t f, const core::Error& e, mg_error* err) {
  const std::string& path = model.files[f].path;
  ApiError out = FromCore(e, path);
  if (model.detached && e.code == core::Code::kSigTensorMismatch) {
    out.id = std::string(
        modelgate::signer::oms::ReasonId(modelgate::signer::oms::Reason::kFileChanged));
  }
  out.message = core::Quoted(path, 512) + ": " + out.message;
  return Fill(err, out);
}

mg_status IndexOutOfRange(const char* fn, size_t index, size_t count, mg_error* err) {
  return Fill(err, Argument(std::string(fn) + ": index " + std::to_string(index) +
                            " out of range (" + std::to_string(count) + ")"));
}

}  // namespace

MG_EXPORT mg_status mg_open(const char* path, const mg_keyring* keys, const mg_open_options* opts,
                            mg_model** out, mg_error* err) {
  if (out != nullptr) *out = nullptr;
  return Guard(err, [&]() -> mg_status {
    if (out == nullptr) return Fill(err, Argument("mg_open: out is NULL"));
    if (path == nullptr) return Fill(err, Argument("mg_open: path is NULL"));
    if (*path == '\0') return Fill(err, Argument("mg_open: path is empty"));
    if (keys == nullptr || keys->keys.empty()) {
      return Fill(err, Make(MG_ERR_KEY, "MG-API-NO-KEYS",
                            "mg_open: no trusted key (add at least one to the key ring)"));
    }
    mg_open_options o;
    mg_open_options_init(&o);
    if (opts != nullptr) {
      // A caller built against a later header may pass a larger struct;
      // one that is smaller than this one was not made by init.
      if (opts->struct_size < sizeof(mg_open_options)) {
        return Fill(err, Argument("mg_open: opts->struct_size is " +
                                  std::to_string(opts->struct_size) +
                                  " (call mg_open_options_init)"));
      }
      o = *opts;
    }
    const auto mode = modelgate::api::RawValue(o.mode);
    if (mode != MG_MODE_EAGER && mode != MG_MODE_LAZY && mode != MG_MODE_COPY) {
      return Fill(err, Make(MG_ERR_UNSUPPORTED, "MG-API-UNSUPPORTED",
                            "mg_open: unknown mode " + std::to_string(mode)));
    }
    const auto signature = modelgate::api::RawValue(o.signature);
    if (signature != MG_SIGNATURE_ANY && signature != MG_SIGNATURE_EMBEDDED &&
        signature != MG_SIGNATURE_DETACHED) {
      return Fill(err, Make(MG_ERR_UNSUPPORTED, "MG-API-UNSUPPORTED",
                            "mg_open: unknown signature kind " + std::to_string(signature)));
    }
    if ((o.flags & ~MG_OPEN_WRITABLE) != 0) {
      return Fill(err, Make(MG_ERR_UNSUPPORTED, "MG-API-UNSUPPORTED",
                            "mg_open: unknown flags " + std::to_string(o.flags & ~MG_OPEN_WRITABLE)));
    }
    if (o.hash_threads > modelgate::api::kMaxHashThreads) {
      return Fill(err, Argument("mg_open: hash_threads is " + std::to_string(o.hash_threads) +
                                ", over the limit of " +
                                std::to_string(modelgate::api::kMaxHashThreads)));
    }
    if (o.signature == MG_SIGNATURE_EMBEDDED && o.bundle_path != nullptr) {
      return Fill(err, Argument("mg_open: bundle_path given with MG_SIGNATURE_EMBEDDED"));
    }
    ApiError e;
    std::unique_ptr<mg_model> model = modelgate::api::OpenModel(path, *keys, o, &e);
    if (!model) return Fill(err, e);
    *out = model.release();
    Clear(err);
    return MG_OK;
  });
}

MG_EXPORT void mg_model_free(mg_model* model) { delete model; }

MG_EXPORT size_t mg_model_file_count(const mg_model* model) {
  return model == nullptr ? 0 : model->files.size();
}

MG_EXPORT const char* mg_model_file_path(const mg_model* model, size_t index) {
  if (model == nullptr || index >= model->files.size()) return nullptr;
  return model->files[index].path.c_str();
}

MG_EXPORT size_t mg_model_tensor_count(const mg_model* model) {
  return model == nullptr ? 0 : model->tensors.size();
}

MG_EXPORT mg_status mg_model_tensor_info(const mg_model* model, size_t index, mg_tensor_info* out,
                                         mg_error* err) {
  return Guard(err, [&]() -> mg_status {
    if (model == nullptr) return Fill(err, Argument("mg_model_tensor_info: model is NULL"));
    if (out == nullptr) return Fill(err, Argument("mg_model_tensor_info: out is NULL"));
    if (index >= model->tensors.size()) {
      return IndexOutOfRange("mg_model_tensor_info", index, model->tensors.size(), err);
    }
    const mg_model::Tensor& t = model->tensors[index];
    out->name = t.name.c_str();
    out->name_len = t.name.size();
    out->dtype = t.dtype.c_str();
    out->dtype_bits = t.dtype_bits;
    out->rank = static_cast<uint32_t>(t.shape.size());
    out->shape = t.shape.empty() ? nullptr : t.shape.data();
    out->byte_length = t.byte_length;
    out->file_index = t.file_index;
    Clear(err);
    return MG_OK;
  });
}

MG_EXPORT mg_status mg_model_find(const mg_model* model, const char* name, size_t name_len,
                                  size_t* index, mg_error* err) {
  return Guard(err, [&]() -> mg_status {
    if (model == nullptr) return Fill(err, Argument("mg_model_find: model is NULL"));
    if (index == nullptr) return Fill(err, Argument("mg_model_find: index is NULL"));
    if (name == nullptr && name_len > 0) return Fill(err, Argument("mg_model_find: name is NULL"));
    const std::string_view want = name_len == 0 ? std::string_view() : std::string_view(name, name_len);
    auto it = std::lower_bound(
        model->tensors.begin(), model->tensors.end(), want,
        [](const mg_model::Tensor& t, std::string_view n) { return std::string_view(t.name) < n; });
    if (it == model->tensors.end() || it->name != want) {
      return Fill(err, Make(MG_ERR_ARGUMENT, "MG-API-NO-TENSOR",
                            "no tensor named " + core::Quoted(want)));
    }
    *index = static_cast<size_t>(it - model->tensors.begin());
    Clear(err);
    return MG_OK;
  });
}

MG_EXPORT mg_status mg_model_tensor_data(const mg_model* model, size_t index, const void** data,
                                         uint64_t* len, mg_error* err) {
  if (data != nullptr) *data = nullptr;
  if (len != nullptr) *len = 0;
  return Guard(err, [&]() -> mg_status {
    if (model == nullptr) return Fill(err, Argument("mg_model_tensor_data: model is NULL"));
    if (data == nullptr || len == nullptr) {
      return Fill(err, Argument("mg_model_tensor_data: data or len is NULL"));
    }
    if (index >= model->tensors.size()) {
      return IndexOutOfRange("mg_model_tensor_data", index, model->tensors.size(), err);
    }
    const mg_model::Tensor& t = model->tensors[index];
    auto view = model->files[t.file_index].model->Tensor(t.index_in_file);
    if (!view.ok()) return LoaderError(*model, t.file_index, view.error(), err);
    *data = view.value().bytes.empty() ? nullptr : view.value().bytes.data();
    *len = view.value().bytes.size();
    Clear(err);
    return MG_OK;
  });
}

MG_EXPORT mg_status mg_model_check_all(const mg_model* model, mg_error* err) {
  return Guard(err, [&]() -> mg_status {
    if (model == nullptr) return Fill(err, Argument("mg_model_check_all: model is NULL"));
    // Files in parallel, as mg_open verifies them; each file's lazy check
    // runs once (later callers get its outcome), so the first failure in
    // file order is the same whoever ran it.
    const size_t n = model->files.size();
    std::vector<char> failed(n, 0);
    std::atomic<size_t> next{0};
    auto work = [&]() noexcept {
      for (size_t f = next.fetch_add(1); f < n; f = next.fetch_add(1)) {
        try {
          failed[f] = model->files[f].model->CheckAll().ok() ? 0 : 1;
        } catch (...) {
          failed[f] = 1;  // asked again below, on this thread, inside Guard
        }
      }
    };
    modelgate::api::RunOnThreads(modelgate::api::OuterThreads(model->hash_threads, n), work);
    for (size_t f = 0; f < n; ++f) {
      if (!failed[f]) continue;
      core::Status s = model->files[f].model->CheckAll();
      if (!s.ok()) return LoaderError(*model, f, s.error(), err);
    }
    Clear(err);
    return MG_OK;
  });
}

MG_EXPORT size_t mg_model_metadata_count(const mg_model* model, size_t file_index) {
  if (model == nullptr || file_index >= model->files.size()) return 0;
  return model->files[file_index].metadata.size();
}

MG_EXPORT mg_status mg_model_metadata_entry(const mg_model* model, size_t file_index, size_t entry,
                                            const char** key, size_t* key_len, const char** value,
                                            size_t* value_len, mg_error* err) {
  return Guard(err, [&]() -> mg_status {
    if (model == nullptr) return Fill(err, Argument("mg_model_metadata_entry: model is NULL"));
    if (key == nullptr || value == nullptr) {
      return Fill(err, Argument("mg_model_metadata_entry: key or value is NULL"));
    }
    if (file_index >= model->files.size()) {
      return IndexOutOfRange("mg_model_metadata_entry (file)", file_index, model->files.size(), err);
    }
    const auto& md = model->files[file_index].metadata;
    if (entry >= md.size()) {
      return IndexOutOfRange("mg_model_metadata_entry (entry)", entry, md.size(), err);
    }
    *key = md[entry].first.c_str();
    *value = md[entry].second.c_str();
    if (key_len != nullptr) *key_len = md[entry].first.size();
    if (value_len != nullptr) *value_len = md[entry].second.size();
    Clear(err);
    return MG_OK;
  });
}

MG_EXPORT const char* mg_model_verification_json(const mg_model* model) {
  if (model == nullptr) return nullptr;
  return model->verification_json.c_str();
}
