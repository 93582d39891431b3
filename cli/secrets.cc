#include "secrets.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace modelgate::cli {
namespace {

using core::Code;
using core::Error;
using core::kNoOffset;

}  // namespace

SecretBytes& SecretBytes::operator=(SecretBytes&& other) noexcept {
  if (this != &other) {
    if (!bytes_.empty()) explicit_bzero(bytes_.data(), bytes_.size());
    bytes_ = std::move(other.bytes_);
  }
  return *this;
}

SecretBytes::~SecretBytes() {
  if (!bytes_.empty()) explicit_bzero(bytes_.data(), bytes_.size());
}

core::Result<SecretBytes> ReadSecretFile(const std::string& path, const std::string& what) {
  // O_NONBLOCK: a FIFO must not block the open; it is refused below.
  core::UniqueFd f{::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK)};
  if (f.get() < 0) {
    const int err = errno;
    return Error{Code::kIoOpen, kNoOffset,
                 "cannot open the " + what + " file " + path + ": " + std::strerror(err) +
                     (err == ELOOP ? " (a symbolic link: name the file itself)" : "")};
  }
  struct stat st {};
  if (::fstat(f.get(), &st) != 0) {
    return Error{Code::kIoRead, kNoOffset, "cannot stat " + path + ": " + std::strerror(errno)};
  }
  if (!S_ISREG(st.st_mode)) {
    return Error{Code::kIoNotRegular, kNoOffset, "the " + what + " file " + path + " is not a regular file"};
  }
  if ((st.st_mode & 077) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
    return Error{Code::kIoOpen, kNoOffset,
                 "the " + what + " file " + path + " has mode " + mode +
                     ": group and others must have no access (chmod 600 " + path + ")"};
  }
  if (static_cast<uint64_t>(st.st_size) > kMaxSecretBytes + 2) {  // + a final "\r\n"
    return Error{Code::kIoRead, kNoOffset,
                 "the " + what + " file " + path + " is " + std::to_string(st.st_size) +
                     " bytes, over the limit of " + std::to_string(kMaxSecretBytes)};
  }
  SecretBytes out(std::vector<uint8_t>(static_cast<size_t>(st.st_size)));
  uint8_t* data = out.mutable_bytes().data();
  size_t done = 0;
  while (done < out.bytes().size()) {
    const ssize_t n = ::read(f.get(), data + done, out.bytes().size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      return Error{Code::kIoRead, kNoOffset, "cannot read the " + what + " file " + path};
    }
    done += static_cast<size_t>(n);
  }
  size_t len = out.bytes().size();
  if (len > 0 && data[len - 1] == '\n') {
    --len;
    if (len > 0 && data[len - 1] == '\r') --len;
  }
  if (len == 0) return Error{Code::kIoRead, kNoOffset, "the " + what + " file " + path + " is empty"};
  if (len > kMaxSecretBytes) {
    return Error{Code::kIoRead, kNoOffset,
                 "the " + what + " in " + path + " is " + std::to_string(len) +
                     " bytes, over the limit of " + std::to_string(kMaxSecretBytes)};
  }
  return SecretBytes(std::vector<uint8_t>(data, data + len));  // `out` is wiped as it goes
}

core::Result<std::optional<SecretBytes>> SecretFrom(const std::string& file, const char* env,
                                                    const std::string& what) {
  if (!file.empty()) {
    auto s = ReadSecretFile(file, what);
    if (!s.ok()) return s.error();
    return std::optional<SecretBytes>(std::move(s).value());
  }
  const char* value = std::getenv(env);
  if (value == nullptr || *value == '\0') return std::optional<SecretBytes>();
  const size_t len = std::strlen(value);
  if (len > kMaxSecretBytes) {
    return Error{Code::kIoRead, kNoOffset,
                 std::string("the ") + what + " in " + env + " is " + std::to_string(len) +
                     " bytes, over the limit of " + std::to_string(kMaxSecretBytes)};
  }
  return std::optional<SecretBytes>(SecretBytes(std::vector<uint8_t>(value, value + len)));
}

}  // namespace modelgate::cli
