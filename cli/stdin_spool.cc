#include "stdin_spool.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace modelgate::cli {
namespace {

core::Error SpoolError(const std::string& what) {
  return core::Error{core::Code::kIoRead, core::kNoOffset, "standard input: " + what};
}

std::string TempDir() {
  const char* dir = std::getenv("TMPDIR");
  return dir != nullptr && *dir != '\0' ? dir : "/tmp";
}

}  // namespace

int NamelessFile(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
  if (fd >= 0 || (errno != EOPNOTSUPP && errno != EISDIR && errno != EINVAL)) return fd;
  std::string name = dir + "/modelgate-spool-XXXXXX";
  fd = ::mkostemp(name.data(), O_CLOEXEC);
  if (fd >= 0) ::unlink(name.c_str());
  return fd;
}

bool WriteAll(int fd, const void* data, size_t n) {
  const auto* p = static_cast<const uint8_t*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}


core::Result<core::OpenedFile> SpoolToTempFile(int in_fd, uint64_t max_bytes) {
  const std::string dir = TempDir();
  core::OpenedFile file;
  file.fd = NamelessFile(dir);
  if (file.fd < 0) {
    return SpoolError("cannot create a temporary file in " + core::Quoted(dir) + ": " +
                      std::strerror(errno));
  }
  std::vector<uint8_t> buf(64 * 1024);
  uint64_t total = 0;
  for (;;) {
    const ssize_t n = ::read(in_fd, buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return SpoolError(std::string("cannot read: ") + std::strerror(errno));
    if (n == 0) break;
    // total <= max_bytes here, so neither side can wrap.
    if (static_cast<uint64_t>(n) > max_bytes - total) {
      return SpoolError("more than " + std::to_string(max_bytes) +
                        " bytes (kMaxStdinBytes); not judged");
    }
    total += static_cast<uint64_t>(n);
    if (!WriteAll(file.fd, buf.data(), static_cast<size_t>(n))) {
      return SpoolError("cannot write the temporary copy in " + core::Quoted(dir) + ": " +
                        std::strerror(errno));
    }
  }
  const int fd = file.fd;
  file.fd = -1;  // AdoptRegularFile owns it now, closing it on error
  auto adopted = core::AdoptRegularFile(fd);
  if (!adopted.ok() || adopted.value().size != total) {
    return SpoolError("the temporary copy does not hold what was read");
  }
  return adopted;
}

}  // namespace modelgate::cli
