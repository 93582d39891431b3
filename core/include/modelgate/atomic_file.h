// modelgate core: AtomicOutput, a file written in full and then put in place
// in one step, so that readers see the old file or the new one, and a process
// killed at any moment leaves no temporary file behind.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "modelgate/core.h"

namespace modelgate::core {

// AtomicOutput is a new file that becomes `path` only when Commit()
// succeeds; destroying it uncommitted discards everything written. Move-only.
//
// It is an O_TMPFILE in the output's directory (same filesystem, so it can be
// linked there): an unnamed inode that the kernel frees when the last
// descriptor closes, which is also what SIGKILL does. Commit links it into
// place: straight to `path` when nothing is there; otherwise (linkat cannot
// replace a file) to a unique `<path>.mg-tmp-XXXXXX` name, renamed over
// `path` right after. A kill between that link and the rename (a few
// microseconds) leaves the complete new output under the temp name; the next
// AtomicOutput for the same path removes it (below).
//
// Where the filesystem or kernel has no O_TMPFILE (or /proc is missing, so
// the inode cannot be linked without privileges), the file is a named
// `<path>.mg-tmp-XXXXXX` from the start: the process unlinks it when it is
// discarded, but a kill leaves it. So every AtomicOutput holds an exclusive
// flock on its file while it lives, and Create removes the `<path>.mg-tmp-*`
// regular files beside `path` that nobody holds locked: their writer is
// dead (the kernel drops a dead process's locks), whichever way it died.
//
// Every Error names the OUTPUT path (never the temp name alone, never the
// input) and the errno text, e.g. "cannot write model.safetensors: No space
// left on device". Create and Commit failures are kIoOpen, write failures
// kIoRead (the gate's one I/O failure code), with the offset of a failed
// write.
class AtomicOutput {
 public:
  // Create makes the temporary file beside `path`, opened read-write (a
  // caller may read back what it wrote, e.g. to hash it), position 0.
  // `mode` is the final file's permission bits, set exactly (no umask) on
  // Commit; the file is 0600 until then.
  // `temp` kNamed forces the named fallback (tests use it to cover that
  // path on filesystems that have O_TMPFILE).
  enum class Temp : uint8_t { kAuto, kNamed };
  static Result<AtomicOutput> Create(const std::string& path, mode_t mode, Temp temp = Temp::kAuto);

  AtomicOutput() = default;
  AtomicOutput(AtomicOutput&& o) noexcept;
  AtomicOutput& operator=(AtomicOutput&& o) noexcept;
  AtomicOutput(const AtomicOutput&) = delete;
  AtomicOutput& operator=(const AtomicOutput&) = delete;
  ~AtomicOutput();

  int fd() const { return fd_; }
  const std::string& path() const { return path_; }
  // named_temp: the file has a name (the fallback) rather than being an
  // O_TMPFILE. For tests and diagnostics.
  bool named_temp() const { return !temp_path_.empty(); }

  // Write appends `bytes` at the descriptor's position; WriteAt writes them
  // at `offset` (pwrite, the position untouched). Both retry short writes
  // and EINTR.
  Status Write(std::span<const uint8_t> bytes);
  Status WriteAt(uint64_t offset, std::span<const uint8_t> bytes);

  // WriteError is the Error for a failed write of this output through fd()
  // done by the caller itself (e.g. copy_file_range): "cannot write <path>:
  // <strerror(err)>" at `offset`.
  Error WriteError(int err, uint64_t offset) const;

  // Commit sets the mode, fsyncs the file, links it into place as `path`
  // (see above), and fsyncs the directory. After a failure nothing has
  // replaced `path`, and the object is discarded.
  Status Commit();

  // Discard drops what was written (closes; unlinks a named temp). Idempotent.
  void Discard();

 private:
  std::string path_;       // the output
  std::string base_;       // the output's name in its directory
  std::string temp_path_;  // the named temp's name in that directory, while it has one
  int fd_ = -1;
  int dir_fd_ = -1;        // the output's directory
  mode_t mode_ = 0600;
};

}  // namespace modelgate::core
