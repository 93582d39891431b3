// Passphrases and PINs: read from a file or the environment, never from the
// command line (no option takes one as its value), and wiped when dropped.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "modelgate/core.h"

namespace modelgate::cli {

// kMaxSecretBytes bounds a passphrase or PIN (file or variable): far above
// any real one, small enough that a wrong file (a model) is refused before
// it is read.
inline constexpr size_t kMaxSecretBytes = 4096;

// The environment variables the CLI reads secrets from.
inline constexpr const char* kPassphraseEnv = "MODELGATE_KEY_PASSPHRASE";
inline constexpr const char* kPinEnv = "MODELGATE_PKCS11_PIN";

// SecretBytes holds a secret and wipes it (explicit_bzero) when destroyed.
class SecretBytes {
 public:
  SecretBytes() = default;
  explicit SecretBytes(std::vector<uint8_t> bytes) : bytes_(std::move(bytes)) {}
  SecretBytes(SecretBytes&& other) noexcept : bytes_(std::move(other.bytes_)) {}
  SecretBytes& operator=(SecretBytes&& other) noexcept;
  SecretBytes(const SecretBytes&) = delete;
  SecretBytes& operator=(const SecretBytes&) = delete;
  ~SecretBytes();
  std::span<const uint8_t> bytes() const { return bytes_; }
  std::span<uint8_t> mutable_bytes() { return bytes_; }

 private:
  std::vector<uint8_t> bytes_;
};

// ReadSecretFile reads a passphrase or PIN file: opened with O_NOFOLLOW
// (a symlink is refused: name the file it points to), a regular file, no
// permission bits for group or others (chmod 600, as ssh asks of its keys:
// a secret others can read is not one), at most kMaxSecretBytes, not empty
// once one trailing "\n" (or "\r\n") is dropped. `what` names it in errors.
// Errors are kIoOpen / kIoRead / kIoNotRegular (exit 2).
core::Result<SecretBytes> ReadSecretFile(const std::string& path, const std::string& what);

// SecretFrom is the secret from `file` when it is not empty, else from the
// environment variable `env` when it is set and not empty (same size rule,
// taken as is), else nullopt.
core::Result<std::optional<SecretBytes>> SecretFrom(const std::string& file, const char* env,
                                                    const std::string& what);

}  // namespace modelgate::cli
