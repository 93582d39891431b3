#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "modelgate/atomic_file.h"
#include "modelgate/core.h"

namespace modelgate::core {

void UniqueFd::reset(int fd) {
  if (fd_ >= 0 && fd_ != fd) ::close(fd_);
  fd_ = fd;
}

OpenedFile::OpenedFile(OpenedFile&& o) noexcept
    : fd(o.fd),
      size(o.size),
      dev(o.dev),
      ino(o.ino),
      mtime_sec(o.mtime_sec),
      mtime_nsec(o.mtime_nsec),
      ctime_sec(o.ctime_sec),
      ctime_nsec(o.ctime_nsec) {
  o.fd = -1;
}

OpenedFile& OpenedFile::operator=(OpenedFile&& o) noexcept {
  if (this != &o) {
    if (fd >= 0) ::close(fd);
    fd = o.fd;
    size = o.size;
    dev = o.dev;
    ino = o.ino;
    mtime_sec = o.mtime_sec;
    mtime_nsec = o.mtime_nsec;
    ctime_sec = o.ctime_sec;
    ctime_nsec = o.ctime_nsec;
    o.fd = -1;
  }
  return *this;
}

OpenedFile::~OpenedFile() {
  if (fd >= 0) ::close(fd);
}

Result<OpenedFile> OpenRegularFile(const std::string& path, bool follow_symlink) {
  // O_NONBLOCK: opening a FIFO must not hang the gate waiting for a writer.
  int flags = O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY;
  if (!follow_symlink) flags |= O_NOFOLLOW;
  int fd = ::open(path.c_str(), flags);
  if (fd < 0) {
    int err = errno;
    if (err == ELOOP && !follow_symlink) {
      return Error{Code::kIoNotRegular, kNoOffset, "is a symbolic link"};
    }
    return Error{Code::kIoOpen, kNoOffset, std::string("cannot open: ") + std::strerror(err)};
  }
  return AdoptRegularFile(fd);
}

Result<OpenedFile> AdoptRegularFile(int fd) {
  OpenedFile f;
  f.fd = fd;
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    return Error{Code::kIoOpen, kNoOffset, std::string("cannot stat: ") + std::strerror(errno)};
  }
  if (!S_ISREG(st.st_mode)) {
    return Error{Code::kIoNotRegular, kNoOffset, "not a regular file"};
  }
  // Back to blocking reads for the regular file.
  int fl = ::fcntl(fd, F_GETFL);
  if (fl >= 0) (void)::fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
  f.size = static_cast<uint64_t>(st.st_size);
  f.dev = static_cast<uint64_t>(st.st_dev);
  f.ino = static_cast<uint64_t>(st.st_ino);
  f.mtime_sec = static_cast<int64_t>(st.st_mtim.tv_sec);
  f.mtime_nsec = static_cast<int64_t>(st.st_mtim.tv_nsec);
  f.ctime_sec = static_cast<int64_t>(st.st_ctim.tv_sec);
  f.ctime_nsec = static_cast<int64_t>(st.st_ctim.tv_nsec);
  return f;
}

Status CheckUnchanged(const OpenedFile& file) {
  struct stat st {};
  if (::fstat(file.fd, &st) != 0) {
    return Error{Code::kIoRead, kNoOffset, std::string("cannot stat: ") + std::strerror(errno)};
  }
  std::string what;
  auto add = [&what](const std::string& part) { what += (what.empty() ? "" : ", ") + part; };
  if (static_cast<uint64_t>(st.st_dev) != file.dev || static_cast<uint64_t>(st.st_ino) != file.ino) {
    add("inode");
  }
  if (static_cast<uint64_t>(st.st_size) != file.size) {
    add("size " + std::to_string(file.size) + " -> " + std::to_string(st.st_size));
  }
  if (st.st_mtim.tv_sec != file.mtime_sec || st.st_mtim.tv_nsec != file.mtime_nsec) add("mtime");
  // ctime also moves on chmod/chown/link: conservative, since a verdict names
  // one unchanged inode.
  if (st.st_ctim.tv_sec != file.ctime_sec || st.st_ctim.tv_nsec != file.ctime_nsec) add("ctime");
  if (what.empty()) return OkStatus();
  return Error{Code::kIoChanged, kNoOffset, "file changed while being judged (" + what + ")"};
}

Status PreadExact(int fd, uint64_t offset, std::span<uint8_t> out) {
  size_t done = 0;
  while (done < out.size()) {
    ssize_t n = ::pread(fd, out.data() + done, out.size() - done,
                        static_cast<off_t>(offset + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      return Error{Code::kIoRead, offset + done, std::string("read failed: ") + std::strerror(errno)};
    }
    if (n == 0) {
      return Error{Code::kIoChanged, offset + done,
                   "unexpected end of file (file shrank while being read?)"};
    }
    done += static_cast<size_t>(n);
  }
  return OkStatus();
}

// WriteFileAtomic is one AtomicOutput: no temp file outlives the process.
Status WriteFileAtomic(const std::string& path, std::span<const uint8_t> bytes, unsigned mode) {
  struct stat old {};
  if (::stat(path.c_str(), &old) == 0) mode = old.st_mode & 07777;
  auto out = AtomicOutput::Create(path, static_cast<mode_t>(mode));
  if (!out.ok()) return out.error();
  AtomicOutput file = std::move(out).value();
  if (Status s = file.Write(bytes); !s.ok()) return s;
  return file.Commit();
}

}  // namespace modelgate::core
