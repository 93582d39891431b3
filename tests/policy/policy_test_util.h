// Helpers for the policy tests: a temp directory, file writing, a fixed
// test key, and parse shortcuts.
#pragma once

#include <stdlib.h>

#include <array>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

#include "modelgate/policy.h"

namespace modelgate::testing {

// TempDir is a fresh directory removed with everything in it.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "mg-policy-XXXXXX").string();
    char* p = mkdtemp(tmpl.data());
    if (p) path_ = p;
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string operator/(std::string_view name) const { return path_ + "/" + std::string(name); }

 private:
  std::string path_;
};

inline void WriteFile(const std::string& path, std::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// TestKey is a deterministic Ed25519 key (seed = `n` repeated).
inline signer::PrivateKey TestKey(uint8_t n) {
  std::array<uint8_t, signer::kSeedBytes> seed{};
  seed.fill(n);
  return std::move(signer::PrivateKey::FromSeed(seed)).value();
}

// IndentLines is `text` with each line prefixed by `indent` (a PEM block
// placed under a YAML `publicKey: |`).
inline std::string IndentLines(const std::string& text, std::string_view indent) {
  std::string out;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    out += std::string(indent) + text.substr(start, end - start) + "\n";
    start = end + 1;
  }
  return out;
}

// IndentedPem is the public PEM of TestKey(n), each line prefixed by `indent`.
inline std::string IndentedPem(uint8_t n, std::string_view indent) {
  return IndentLines(signer::PublicKeyPem(TestKey(n).public_key()), indent);
}

// ParseError is the error message for `yaml` ("OK" when it parses).
inline std::string ParseError(std::string_view yaml, const std::string& base_dir = "/nonexistent") {
  auto r = policy::ParsePolicy(yaml, "p.yaml", base_dir);
  return r.ok() ? "OK" : r.error().message;
}

inline constexpr std::string_view kHead = "apiVersion: modelgate/v1\nkind: Policy\n";

}  // namespace modelgate::testing
