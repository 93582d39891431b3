// `-` on the command line: standard input copied to a file the gate owns.
#pragma once

#include <cstdint>
#include <string>

#include "modelgate/core.h"

namespace modelgate::cli {

// kMaxStdinBytes caps what `scan -` and `inspect -` read from standard
// input. It mirrors ContainerLimits::max_total_decompressed_bytes (4 GiB):
// both are bytes the gate stores for one file it did not open itself. Past
// it the input is an error, not a partial verdict.
inline constexpr uint64_t kMaxStdinBytes = 4ull << 30;

// NamelessFile opens a new file (read-write, 0600, close-on-exec) in `dir`
// that no other process can open by name: O_TMPFILE, or, where the file
// system lacks it, a mkstemp name unlinked at once. It vanishes with its
// last descriptor, even when the process is killed. -1 and errno on failure.
int NamelessFile(const std::string& dir);

// WriteAll writes all `n` bytes to `fd`, retrying short writes and EINTR;
// false (errno set) on failure.
bool WriteAll(int fd, const void* data, size_t n);

// SpoolToTempFile copies everything `in_fd` yields until end of input into
// a new temporary file that has no name (O_TMPFILE in $TMPDIR, else /tmp;
// where the file system lacks O_TMPFILE, mkstemp then unlink) and returns
// it as an OpenedFile of its final size and identity, so the verdict reads
// that one descriptor as it would a named file's. More than `max_bytes`
// is kIoRead naming the limit (fail closed: bytes not read were not
// judged); so are read and write failures.
core::Result<core::OpenedFile> SpoolToTempFile(int in_fd, uint64_t max_bytes);

}  // namespace modelgate::cli
