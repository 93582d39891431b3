// AtomicOutput: O_TMPFILE + linkat, a locked named temp where that is
// missing, and the sweep of temps whose writer died.
#include "modelgate/atomic_file.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <utility>
#include <vector>

namespace modelgate::core {
namespace {

constexpr std::string_view kTempInfix = ".mg-tmp-";
constexpr size_t kTempSuffixBytes = 6;  // as mkostemp's XXXXXX, which older versions used
constexpr std::string_view kAlphabet =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
constexpr int kNameAttempts = 100;

std::string DirName(const std::string& path) {
  size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

std::string BaseName(const std::string& path) {
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

Error OutputError(Code code, std::string_view what, const std::string& path, int err,
                  uint64_t offset = kNoOffset) {
  return Error{code, offset, std::string(what) + " " + path + ": " + std::strerror(err)};
}

// TempName is `base` + ".mg-tmp-" + a random suffix.
std::string TempName(const std::string& base) {
  uint8_t random[kTempSuffixBytes] = {};
  size_t got = 0;
  while (got < sizeof random) {
    ssize_t n = ::getrandom(random + got, sizeof random - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // only uniqueness depends on it: O_EXCL / EEXIST retry
    got += static_cast<size_t>(n);
  }
  static std::atomic<unsigned> counter{0};
  const unsigned salt = counter.fetch_add(1, std::memory_order_relaxed) + static_cast<unsigned>(::getpid());
  std::string name = base + std::string(kTempInfix);
  for (size_t i = 0; i < kTempSuffixBytes; ++i) {
    name += kAlphabet[(random[i] + salt * (i + 1)) % kAlphabet.size()];
  }
  return name;
}

// IsTempName: `name` is `base` + ".mg-tmp-" + 6 alphanumerics, the names
// this file (and mkostemp in older versions) gives temps of `base`.
bool IsTempName(std::string_view name, std::string_view base) {
  if (name.size() != base.size() + kTempInfix.size() + kTempSuffixBytes) return false;
  if (name.substr(0, base.size()) != base) return false;
  if (name.substr(base.size(), kTempInfix.size()) != kTempInfix) return false;
  for (char c : name.substr(base.size() + kTempInfix.size())) {
    if (kAlphabet.find(c) == std::string_view::npos) return false;
  }
  return true;
}

// SweepStale removes the temps of `base` in `dir_fd` whose writer is gone:
// a live AtomicOutput holds an exclusive flock on its temp until it is
// committed or discarded, so a temp we can lock has none. The name is
// unlinked only if it still names the inode we locked. Best effort: a temp
// we cannot open or lock is left alone.
void SweepStale(int dir_fd, const std::string& base) {
  int list_fd = ::openat(dir_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (list_fd < 0) return;
  DIR* dir = ::fdopendir(list_fd);
  if (dir == nullptr) {
    ::close(list_fd);
    return;
  }
  std::vector<std::string> candidates;
  while (const dirent* e = ::readdir(dir)) {
    if (IsTempName(e->d_name, base)) candidates.emplace_back(e->d_name);
  }
  ::closedir(dir);
  for (const std::string& name : candidates) {
    int fd = ::openat(dir_fd, name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) continue;
    struct stat locked {}, now {};
    if (::fstat(fd, &locked) == 0 && S_ISREG(locked.st_mode) && ::flock(fd, LOCK_EX | LOCK_NB) == 0 &&
        ::fstatat(dir_fd, name.c_str(), &now, AT_SYMLINK_NOFOLLOW) == 0 &&
        now.st_dev == locked.st_dev && now.st_ino == locked.st_ino) {
      (void)::unlinkat(dir_fd, name.c_str(), 0);
    }
    ::close(fd);
  }
}

std::string ProcFdPath(int fd) { return "/proc/self/fd/" + std::to_string(fd); }

// Lock takes the exclusive flock that marks the temp behind `fd` as alive
// (a sweeper holds it only for an instant: wait for it).
bool Lock(int fd) {
  for (;;) {
    if (::flock(fd, LOCK_EX) == 0) return true;
    if (errno != EINTR) return false;
  }
}

}  // namespace

Result<AtomicOutput> AtomicOutput::Create(const std::string& path, mode_t mode, Temp temp) {
  AtomicOutput out;
  out.path_ = path;
  out.base_ = BaseName(path);
  out.mode_ = mode & 07777;
  if (out.base_.empty() || out.base_ == "." || out.base_ == "..") {
    return Error{Code::kIoOpen, kNoOffset, "cannot write " + path + ": not a file name"};
  }
  out.dir_fd_ = ::open(DirName(path).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (out.dir_fd_ < 0) return OutputError(Code::kIoOpen, "cannot open the directory of", path, errno);
  SweepStale(out.dir_fd_, out.base_);

  // Linking an O_TMPFILE needs /proc/self/fd (or CAP_DAC_READ_SEARCH for
  // AT_EMPTY_PATH): without /proc, use the named fallback from the start
  // rather than fail at Commit after all the writing.
  if (temp == Temp::kAuto) out.fd_ = ::openat(out.dir_fd_, ".", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
  if (out.fd_ >= 0) {
    struct stat st {};
    if (::stat(ProcFdPath(out.fd_).c_str(), &st) != 0 || !Lock(out.fd_)) {
      ::close(out.fd_);
      out.fd_ = -1;
    }
  }
  if (out.fd_ >= 0) return out;

  // The fallback (no O_TMPFILE here): any O_TMPFILE failure lands here, and
  // a real problem (EACCES, ENOSPC, EROFS) fails the same way below.
  int err = 0;
  for (int attempt = 0; attempt < kNameAttempts; ++attempt) {
    std::string name = TempName(out.base_);
    int fd = ::openat(out.dir_fd_, name.c_str(), O_CREAT | O_EXCL | O_RDWR | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) {
      err = errno;
      if (err == EEXIST) continue;
      break;
    }
    struct stat st {};
    // A sweeper that locked the new file before we did has unlinked it.
    if (!Lock(fd) || ::fstat(fd, &st) != 0 || st.st_nlink == 0) {
      err = errno != 0 ? errno : EAGAIN;
      ::close(fd);
      continue;
    }
    out.fd_ = fd;
    out.temp_path_ = std::move(name);
    return out;
  }
  return OutputError(Code::kIoOpen, "cannot create a temp file for", path, err == 0 ? EEXIST : err);
}

AtomicOutput::AtomicOutput(AtomicOutput&& o) noexcept
    : path_(std::move(o.path_)),
      base_(std::move(o.base_)),
      temp_path_(std::move(o.temp_path_)),
      fd_(std::exchange(o.fd_, -1)),
      dir_fd_(std::exchange(o.dir_fd_, -1)),
      mode_(o.mode_) {
  o.temp_path_.clear();
}

AtomicOutput& AtomicOutput::operator=(AtomicOutput&& o) noexcept {
  if (this != &o) {
    Discard();
    path_ = std::move(o.path_);
    base_ = std::move(o.base_);
    temp_path_ = std::move(o.temp_path_);
    o.temp_path_.clear();
    fd_ = std::exchange(o.fd_, -1);
    dir_fd_ = std::exchange(o.dir_fd_, -1);
    mode_ = o.mode_;
  }
  return *this;
}

AtomicOutput::~AtomicOutput() { Discard(); }

Error AtomicOutput::WriteError(int err, uint64_t offset) const {
  return OutputError(Code::kIoRead, "cannot write", path_, err, offset);
}

Status AtomicOutput::Write(std::span<const uint8_t> bytes) {
  if (fd_ < 0) return WriteError(EBADF, kNoOffset);
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::write(fd_, bytes.data() + done, bytes.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      const off_t at = ::lseek(fd_, 0, SEEK_CUR);
      return WriteError(err, at < 0 ? kNoOffset : static_cast<uint64_t>(at));
    }
    done += static_cast<size_t>(n);
  }
  return OkStatus();
}

Status AtomicOutput::WriteAt(uint64_t offset, std::span<const uint8_t> bytes) {
  if (fd_ < 0) return WriteError(EBADF, offset);
  size_t done = 0;
  while (done < bytes.size()) {
    uint64_t at = 0;
    if (__builtin_add_overflow(offset, done, &at) || at > static_cast<uint64_t>(INT64_MAX)) {
      return WriteError(EFBIG, offset);
    }
    ssize_t n = ::pwrite(fd_, bytes.data() + done, bytes.size() - done, static_cast<off_t>(at));
    if (n < 0) {
      if (errno == EINTR) continue;
      return WriteError(errno, at);
    }
    done += static_cast<size_t>(n);
  }
  return OkStatus();
}

Status AtomicOutput::Commit() {
  if (fd_ < 0) return Error{Code::kIoOpen, kNoOffset, "cannot write " + path_ + ": already committed or discarded"};
  auto fail = [this](Error e) {
    Discard();
    return e;
  };
  if (::fchmod(fd_, mode_) != 0) return fail(OutputError(Code::kIoOpen, "cannot set the mode of", path_, errno));
  // Delayed allocation reports ENOSPC/EIO here, not at write().
  if (::fsync(fd_) != 0) return fail(WriteError(errno, kNoOffset));

  if (temp_path_.empty()) {
    const std::string proc = ProcFdPath(fd_);
    if (::linkat(AT_FDCWD, proc.c_str(), dir_fd_, base_.c_str(), AT_SYMLINK_FOLLOW) != 0) {
      if (errno != EEXIST) return fail(OutputError(Code::kIoOpen, "cannot link the new file as", path_, errno));
      // `path` exists: link under a temp name (still flock'ed by us), then
      // rename over it. A kill between the two leaves that complete temp,
      // which the next Create for `path` sweeps.
      int err = EEXIST;
      for (int attempt = 0; attempt < kNameAttempts && err == EEXIST; ++attempt) {
        std::string name = TempName(base_);
        if (::linkat(AT_FDCWD, proc.c_str(), dir_fd_, name.c_str(), AT_SYMLINK_FOLLOW) == 0) {
          temp_path_ = std::move(name);
          err = 0;
        } else {
          err = errno;
        }
      }
      if (err != 0) return fail(OutputError(Code::kIoOpen, "cannot link a temp file for", path_, err));
    }
  }
  if (!temp_path_.empty()) {
    if (::renameat(dir_fd_, temp_path_.c_str(), dir_fd_, base_.c_str()) != 0) {
      return fail(OutputError(Code::kIoOpen, "cannot rename a temp file onto", path_, errno));
    }
    temp_path_.clear();
  }
  // The data is on disk (fsync above) and in place: a close error now says
  // nothing about it.
  ::close(fd_);
  fd_ = -1;
  (void)::fsync(dir_fd_);  // best effort: the new name is already visible
  ::close(dir_fd_);
  dir_fd_ = -1;
  return OkStatus();
}

void AtomicOutput::Discard() {
  // Unlink before closing: the temp stays locked until its name is gone.
  if (!temp_path_.empty() && dir_fd_ >= 0) (void)::unlinkat(dir_fd_, temp_path_.c_str(), 0);
  temp_path_.clear();
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  if (dir_fd_ >= 0) ::close(dir_fd_);
  dir_fd_ = -1;
}

}  // namespace modelgate::core
