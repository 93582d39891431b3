// fuzz_upload: UnpackUpload, the tar of `modelgate serve`'s POST /v1/check,
// written into a fresh directory. Invariants: no crash; a refusal says why;
// an accepted upload wrote only regular files and directories (no link,
// nothing else) below the directory, as many files and bytes as it
// reports, never more bytes than the input holds; RemoveTree then leaves
// the directory empty.
#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <string>

#include "upload_tar.h"

namespace {

struct Walked {
  uint64_t files = 0, bytes = 0, others = 0;
};

void Walk(int dfd, Walked* w) {
  const int fd = ::openat(dfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  DIR* d = fd >= 0 ? ::fdopendir(fd) : nullptr;
  if (d == nullptr) __builtin_trap();
  while (dirent* e = ::readdir(d)) {
    const std::string n = e->d_name;
    if (n == "." || n == "..") continue;
    struct stat st {};
    if (::fstatat(dfd, n.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) __builtin_trap();
    if (S_ISREG(st.st_mode)) {
      ++w->files;
      w->bytes += static_cast<uint64_t>(st.st_size);
    } else if (S_ISDIR(st.st_mode)) {
      const int sub = ::openat(dfd, n.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (sub < 0) __builtin_trap();
      Walk(sub, w);
      ::close(sub);
    } else {
      ++w->others;
    }
  }
  ::closedir(d);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace modelgate::server;
  static const std::string root = [] {
    std::string t = "/tmp/mg-fuzz-upload-XXXXXX";
    if (::mkdtemp(t.data()) == nullptr) __builtin_trap();
    return t;
  }();
  static const int removed_at_exit = std::atexit([] { ::rmdir(root.c_str()); });
  (void)removed_at_exit;
  const int in = ::memfd_create("upload", MFD_CLOEXEC);
  if (in < 0 || ::write(in, data, size) != static_cast<ssize_t>(size)) __builtin_trap();
  const int dfd = ::open(root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) __builtin_trap();
  UploadLimits limits;
  limits.max_files = 64;
  limits.max_directories = 64;
  Unpacked out;
  UploadProblem problem;
  const bool ok = UnpackUpload(in, size, dfd, limits, &out, &problem);
  if (!ok && problem.message.empty()) __builtin_trap();
  Walked w;
  Walk(dfd, &w);
  if (w.others != 0 || w.bytes > size) __builtin_trap();
  if (ok && (w.files != out.files || w.bytes != out.bytes || out.files > limits.max_files)) {
    __builtin_trap();
  }
  if (!RemoveTree(dfd)) __builtin_trap();
  Walked after;
  Walk(dfd, &after);
  if (after.files != 0) __builtin_trap();
  ::close(dfd);
  ::close(in);
  return 0;
}
