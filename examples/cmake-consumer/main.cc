// consumer: a C++ program on libmodelgate's C API (modelgate.h), found with
// find_package(modelgate). Opens a signed model, verified against the keys
// given, and prints how many tensors and bytes it holds.
//
//   consumer --pubkey KEY.pub [--pubkey ...] MODEL
//
// Exit status: 0 verified, 1 rejected ("ID: message" on stderr), 2 usage
// error or unreadable file or key.
#include <modelgate.h>

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string_view>
#include <vector>

namespace {

// The handles are owned by unique_ptrs, so every return path frees them.
struct KeyringFree {
  void operator()(mg_keyring* k) const { mg_keyring_free(k); }
};
struct ModelFree {
  void operator()(mg_model* m) const { mg_model_free(m); }
};
using Keyring = std::unique_ptr<mg_keyring, KeyringFree>;
using Model = std::unique_ptr<mg_model, ModelFree>;

int Fail(const mg_error& err) {
  std::fprintf(stderr, "%s: %s\n", err.id[0] != '\0' ? err.id : mg_status_name(err.status),
               err.message);
  return err.status == MG_ERR_VERIFY || err.status == MG_ERR_FORMAT ? 1 : 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<const char*> key_paths;
  const char* model_path = nullptr;
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (a == "--pubkey" && i + 1 < argc) {
      key_paths.push_back(argv[++i]);
    } else if (model_path == nullptr && !a.empty() && a[0] != '-') {
      model_path = argv[i];
    } else {
      std::fprintf(stderr, "usage: consumer --pubkey KEY.pub [--pubkey ...] MODEL\n");
      return 2;
    }
  }
  if (key_paths.empty() || model_path == nullptr) {
    std::fprintf(stderr, "usage: consumer --pubkey KEY.pub [--pubkey ...] MODEL\n");
    return 2;
  }
  if (mg_api_version() != MG_API_VERSION) {
    std::fprintf(stderr, "libmodelgate ABI %u, built for %d\n", mg_api_version(), MG_API_VERSION);
    return 2;
  }

  mg_error err;
  mg_keyring* raw_keys = nullptr;
  if (mg_keyring_new(&raw_keys, &err) != MG_OK) return Fail(err);
  const Keyring keys(raw_keys);
  for (const char* p : key_paths) {
    if (mg_keyring_add_file(keys.get(), p, nullptr, &err) != MG_OK) return Fail(err);
  }

  mg_model* raw_model = nullptr;
  if (mg_open(model_path, keys.get(), nullptr, &raw_model, &err) != MG_OK) return Fail(err);
  const Model model(raw_model);
  // The sum cannot overflow: the tensors lie in the files, without overlap.
  uint64_t total_bytes = 0;
  for (size_t i = 0; i < mg_model_tensor_count(model.get()); ++i) {
    mg_tensor_info info;
    if (mg_model_tensor_info(model.get(), i, &info, &err) != MG_OK) return Fail(err);
    total_bytes += info.byte_length;
  }
  std::printf("libmodelgate %s: %s verified, %zu tensors, %llu bytes\n", mg_version(), model_path,
              mg_model_tensor_count(model.get()), static_cast<unsigned long long>(total_bytes));
  return 0;
}
