// load_verified: load a signed safetensors model through the verified
// loader and print what a model server would get.
//
//   load_verified --pubkey KEY.pub [--pubkey KEY2.pub ...] [--mode eager|lazy|copy] MODEL
//
// Prints each tensor's name, dtype, shape and, for F32, its first values.
// Exit codes follow the modelgate contract: 0 loaded and verified, 1 the
// file was rejected (unsigned, untrusted, tampered), 2 usage error or the
// file could not be read.
#include <bit>
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "modelgate/signer.h"

namespace core = modelgate::core;
namespace signer = modelgate::signer;

namespace {

constexpr int kExitPass = 0, kExitRejected = 1, kExitCannotJudge = 2;
constexpr size_t kShownValues = 4;

int Usage(const std::string& why) {
  std::cerr << "load_verified: " << why << "\n"
            << "usage: load_verified --pubkey KEY.pub [--pubkey ...] [--mode eager|lazy|copy] "
               "MODEL.safetensors\n";
  return kExitCannotJudge;
}

bool IsIoCode(core::Code c) {
  return c == core::Code::kIoOpen || c == core::Code::kIoRead ||
         c == core::Code::kIoNotRegular || c == core::Code::kIoChanged;
}

// Fail prints `e` as the CLI does (path:offset: ID: message) and picks the
// exit code: an I/O problem means the file could not be judged.
int Fail(const std::string& path, const core::Error& e) {
  std::cerr << path;
  if (e.offset != core::kNoOffset) std::cerr << ":" << e.offset;
  std::cerr << ": " << core::FindingId(e.code) << ": " << e.message << "\n";
  return IsIoCode(e.code) ? kExitCannotJudge : kExitRejected;
}

std::string Shape(std::span<const uint64_t> shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// F32Values renders the first few little-endian F32 values of `bytes`.
std::string F32Values(std::span<const uint8_t> bytes) {
  std::string s;
  const size_t count = bytes.size() / 4;
  for (size_t i = 0; i < count && i < kShownValues; ++i) {
    uint32_t bits = 0;
    for (int b = 3; b >= 0; --b) bits = (bits << 8) | bytes[4 * i + static_cast<size_t>(b)];
    char buf[32];
    std::snprintf(buf, sizeof buf, "%s%g", i ? " " : "", static_cast<double>(std::bit_cast<float>(bits)));
    s += buf;
  }
  if (count > kShownValues) s += " ...";
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> key_paths;
  std::string model_path;
  signer::LoadOptions options;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if ((a == "--pubkey" || a == "--mode") && i + 1 >= argc) return Usage(a + " needs a value");
    if (a == "--pubkey") {
      key_paths.push_back(argv[++i]);
    } else if (a == "--mode") {
      const std::string m = argv[++i];
      if (m == "eager") {
        options.mode = signer::LoadMode::kEager;
      } else if (m == "lazy") {
        options.mode = signer::LoadMode::kLazy;
      } else if (m == "copy") {
        options.mode = signer::LoadMode::kCopy;
      } else {
        return Usage("unknown mode '" + m + "' (eager, lazy or copy)");
      }
    } else if (!a.empty() && a[0] == '-') {
      return Usage("unknown option '" + a + "'");
    } else if (model_path.empty()) {
      model_path = a;
    } else {
      return Usage("one model file at a time");
    }
  }
  if (key_paths.empty()) return Usage("at least one --pubkey is required");
  if (model_path.empty()) return Usage("no model file given");

  // Trust comes from these keys only, never from the file.
  std::vector<signer::PublicKey> trusted;
  for (const std::string& p : key_paths) {
    auto key = signer::LoadPublicKey(p);
    if (!key.ok()) return Fail(p, key.error());
    trusted.push_back(key.value());
  }

  auto model = signer::OpenVerified(model_path, trusted, options);
  if (!model.ok()) return Fail(model_path, model.error());
  const signer::VerifiedModel& m = model.value();
  // Lazy mode has checked only the header so far: say so.
  std::cout << model_path << ": "
            << (m.mode() == signer::LoadMode::kLazy ? "header verified (lazy; each tensor is "
                                                      "checked when loaded)"
                                                    : "verified (" +
                                                          std::string(signer::LoadModeName(m.mode())) +
                                                          ")")
            << ", kid " << m.verification().verified_kids.front() << ", " << m.tensor_count()
            << " tensors\n";

  // In lazy mode each Tensor() call is where that tensor's hash is checked.
  for (size_t i = 0; i < m.tensor_count(); ++i) {
    auto t = m.Tensor(i);
    if (!t.ok()) return Fail(model_path, t.error());
    const signer::TensorView& v = t.value();
    std::cout << "  " << core::Quoted(v.name) << "  " << core::DtypeName(v.dtype) << "  "
              << Shape(v.shape);
    if (v.dtype == core::Dtype::kF32) std::cout << "  " << F32Values(v.bytes);
    std::cout << "\n";
  }
  return kExitPass;
}
