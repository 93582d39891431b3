// A model directory uploaded to `POST /v1/check` as a tar, unpacked into a
// directory the server made for the request. The tar is transport, not a
// file a loader reads: it is listed by the scanner's strict tar reader
// (what Python's tarfile lists), and anything another reader could list
// otherwise (MG-TAR-* findings), or any member that is not a plain file or
// directory under a canonical relative name, refuses the whole upload. What
// is written is exactly the listed members' bytes, under their names,
// inside the request's directory and nowhere else.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

namespace modelgate::server {

// UploadLimits bound one unpacked upload. Their bytes are bounded by the
// body itself (--max-body-bytes): members are byte ranges of the spooled
// tar, so what is written never exceeds what was received.
struct UploadLimits {
  // Files in one model directory: libmodelgate's kMaxModelFiles (4096).
  uint64_t max_files = 4096;
  // Directories created, nesting depth and the length of one name.
  uint64_t max_directories = 4096;
  uint64_t max_depth = 64;
  uint64_t max_name_bytes = 4096;
};

struct Unpacked {
  uint64_t files = 0;
  uint64_t directories = 0;
  uint64_t bytes = 0;  // file bytes written
};

// UploadProblem is why an upload was not unpacked: the client's archive
// (`io` false: a 400 bad-archive) or the server's disk (`io` true: a 500).
struct UploadProblem {
  bool io = false;
  uint64_t offset = 0;  // the member's header in the tar, when it is one's
  std::string message;  // names the member
};

// UnpackUpload lists the tar in `tar_fd` (`size` bytes) and writes its
// members below `dir_fd`, an empty directory: directories 0700, files
// 0600, created with O_EXCL and never through a symlink. False, with
// `problem` filled, when the upload is refused or cannot be written; what
// was written by then stays for the caller's RemoveTree. `on_write` is
// told every count of bytes written (the server's spool gauge).
bool UnpackUpload(int tar_fd, uint64_t size, int dir_fd, const UploadLimits& limits,
                  Unpacked* out, UploadProblem* problem,
                  const std::function<void(uint64_t)>& on_write = {});

// RemoveTree deletes everything below `dir_fd` without following a symlink
// (the server's cleanup of a request's directory). False when something
// could not be removed.
bool RemoveTree(int dir_fd);

}  // namespace modelgate::server
