#include "upload_tar.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <algorithm>
#include <cstring>
#include <set>
#include <string_view>
#include <vector>

#include "modelgate/scanner.h"
#include "source.h"
#include "stdin_spool.h"
#include "tar.h"

namespace modelgate::server {
namespace {

bool Refuse(UploadProblem* p, uint64_t offset, std::string message) {
  p->io = false;
  p->offset = offset;
  p->message = std::move(message);
  return false;
}

bool Io(UploadProblem* p, const std::string& what) {
  p->io = true;
  p->message = what + ": " + std::strerror(errno);
  return false;
}

// Components splits a member name into canonical components: a leading
// "./" (what `tar -C DIR .` writes) and, for directories, one trailing '/'
// are dropped; anything else that is not plain — absolute, empty, "." or
// ".." components, a NUL — is refused (empty result, `why` set). "." alone
// (the archive's root) gives no components and no `why`.
std::vector<std::string> Components(std::string_view name, bool directory, std::string* why) {
  std::vector<std::string> out;
  if (name.find('\0') != std::string_view::npos) {
    *why = "holds a NUL byte";
    return out;
  }
  if (name.substr(0, 2) == "./") name.remove_prefix(2);
  if (directory && !name.empty() && name.back() == '/') name.remove_suffix(1);
  if (name.empty() || name == ".") return out;
  if (name.front() == '/') {
    *why = "is absolute";
    return out;
  }
  size_t start = 0;
  for (;;) {
    const size_t slash = name.find('/', start);
    const std::string_view c =
        name.substr(start, slash == std::string_view::npos ? std::string_view::npos : slash - start);
    if (c.empty() || c == "." || c == "..") {
      *why = c.empty() ? "has an empty component" : "has a '" + std::string(c) + "' component";
      out.clear();
      return out;
    }
    if (c.size() > 255) {
      *why = "has a component longer than 255 bytes";
      out.clear();
      return out;
    }
    out.emplace_back(c);
    if (slash == std::string_view::npos) break;
    start = slash + 1;
  }
  return out;
}

std::string Join(const std::vector<std::string>& parts, size_t n) {
  std::string s;
  for (size_t i = 0; i < n; ++i) {
    if (i > 0) s += '/';
    s += parts[i];
  }
  return s;
}

// OpenDirs opens (creating as needed) the directories `parts[0..n)` below
// `root`, never through a symlink; -1 with errno on failure.
int OpenDirs(int root, const std::vector<std::string>& parts, size_t n, bool create,
             uint64_t* created) {
  int cur = ::fcntl(root, F_DUPFD_CLOEXEC, 0);
  for (size_t i = 0; i < n && cur >= 0; ++i) {
    if (create && ::mkdirat(cur, parts[i].c_str(), 0700) == 0) ++*created;
    const int next = ::openat(cur, parts[i].c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    const int saved = errno;
    ::close(cur);
    errno = saved;
    cur = next;
  }
  return cur;
}

bool CopyRange(int from, uint64_t offset, uint64_t n, int to,
               const std::function<void(uint64_t)>& on_write) {
  std::vector<uint8_t> buf(static_cast<size_t>(std::min<uint64_t>(n, 1 << 20)));
  while (n > 0) {
    const size_t want = static_cast<size_t>(std::min<uint64_t>(n, buf.size()));
    const ssize_t r = ::pread(from, buf.data(), want, static_cast<off_t>(offset));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      if (r == 0) errno = EIO;  // the spool shrank under us
      return false;
    }
    if (!cli::WriteAll(to, buf.data(), static_cast<size_t>(r))) return false;
    if (on_write) on_write(static_cast<uint64_t>(r));
    offset += static_cast<uint64_t>(r);
    n -= static_cast<uint64_t>(r);
  }
  return true;
}

}  // namespace

bool UnpackUpload(int tar_fd, uint64_t size, int dir_fd, const UploadLimits& limits,
                  Unpacked* out, UploadProblem* problem,
                  const std::function<void(uint64_t)>& on_write) {
  *out = Unpacked{};
  scanner::FdSource src(tar_fd, size);
  std::vector<uint8_t> head(std::min<uint64_t>(size, 512));
  if (size < 512) return Refuse(problem, 0, "not a tar archive (shorter than one 512-byte header)");
  if (auto s = src.Read(0, head); !s.ok()) return Io(problem, "cannot read the upload");
  if (!scanner::LooksLikeTar(head)) {
    return Refuse(problem, 0, "not an uncompressed tar archive (no valid header at offset 0)");
  }
  std::vector<scanner::Finding> findings;
  scanner::TarLimits tar_limits;
  tar_limits.max_members = limits.max_files + limits.max_directories;
  auto tar = scanner::ReadTar(src, tar_limits, &findings);
  if (!tar.ok()) return Io(problem, "cannot read the upload");
  const scanner::TarArchive& t = tar.value();
  // Anything a second tar reader could list otherwise, or that tarfile
  // itself would not finish listing, refuses the upload: the tree judged
  // must be the one the client meant, whoever unpacks it.
  if (!findings.empty()) {
    const scanner::Finding& f = findings.front();
    return Refuse(problem, f.offset, f.id + ": " + f.message);
  }
  if (t.loader_fails || t.incomplete) {
    return Refuse(problem, t.end_offset,
                  "the archive cannot be listed to its end: " +
                      (t.loader_error.empty() ? t.end_reason : t.loader_error));
  }
  std::set<std::string> files, dirs;
  for (const scanner::TarMember& m : t.members) {
    const std::string shown = core::Quoted(m.name);
    const bool is_dir = m.type == scanner::TarType::kDirectory;
    if (!is_dir && m.type != scanner::TarType::kRegular) {
      return Refuse(problem, m.header_offset,
                    "member " + shown + " is a " + std::string(scanner::TarTypeName(m.type)) +
                        ": a model upload holds only files and directories");
    }
    if (m.name.size() > limits.max_name_bytes) {
      return Refuse(problem, m.header_offset,
                    "a member name is longer than " + std::to_string(limits.max_name_bytes) +
                        " bytes (UploadLimits::max_name_bytes)");
    }
    std::string why;
    const std::vector<std::string> parts = Components(m.name, is_dir, &why);
    if (!why.empty()) return Refuse(problem, m.header_offset, "member " + shown + " " + why);
    if (parts.empty()) {
      if (is_dir) continue;  // "." or "./": the root, which exists
      return Refuse(problem, m.header_offset, "member " + shown + " is a file with no name");
    }
    if (parts.size() > limits.max_depth) {
      return Refuse(problem, m.header_offset,
                    "member " + shown + " is nested deeper than " + std::to_string(limits.max_depth) +
                        " directories (UploadLimits::max_depth)");
    }
    const std::string canon = Join(parts, parts.size());
    // A name twice (tarfile would extract the last one; another reader the
    // first), or a file that is also a directory: refused, not resolved.
    for (size_t i = 1; i <= parts.size(); ++i) {
      const std::string prefix = Join(parts, i);
      if (files.count(prefix) != 0 || (i == parts.size() && !is_dir && dirs.count(prefix) != 0)) {
        return Refuse(problem, m.header_offset,
                      "member " + shown + " names " + core::Quoted(prefix) +
                          ", which an earlier member already named");
      }
    }
    uint64_t created = 0;
    if (is_dir) {
      core::UniqueFd d(OpenDirs(dir_fd, parts, parts.size(), true, &created));
      if (d.get() < 0) return Io(problem, "cannot create directory " + shown);
      for (size_t i = 1; i <= parts.size(); ++i) dirs.insert(Join(parts, i));
    } else {
      if (files.size() >= limits.max_files) {
        return Refuse(problem, m.header_offset,
                      "more than " + std::to_string(limits.max_files) +
                          " files (UploadLimits::max_files)");
      }
      if (!m.data_in_bounds) {
        return Refuse(problem, m.header_offset, "member " + shown + " runs past the end of the upload");
      }
      core::UniqueFd parent(OpenDirs(dir_fd, parts, parts.size() - 1, true, &created));
      if (parent.get() < 0) return Io(problem, "cannot create the directory of " + shown);
      core::UniqueFd f(::openat(parent.get(), parts.back().c_str(),
                    O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
      if (f.get() < 0) return Io(problem, "cannot create " + shown);
      if (!CopyRange(tar_fd, m.data_offset, m.size, f.get(), on_write)) {
        return Io(problem, "cannot write " + shown);
      }
      out->bytes += m.size;
      files.insert(canon);
      for (size_t i = 1; i < parts.size(); ++i) dirs.insert(Join(parts, i));
      ++out->files;
    }
    out->directories += created;
    if (out->directories > limits.max_directories) {
      return Refuse(problem, m.header_offset,
                    "more than " + std::to_string(limits.max_directories) +
                        " directories (UploadLimits::max_directories)");
    }
  }
  return true;
}

bool RemoveTree(int dir_fd) {
  // A descriptor of its own: a dup would share dir_fd's read position, and
  // a directory listed through dir_fd before would list empty here.
  const int fd = ::openat(dir_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return false;
  DIR* d = ::fdopendir(fd);
  if (d == nullptr) {
    ::close(fd);
    return false;
  }
  bool ok = true;
  std::vector<std::string> names;
  while (dirent* e = ::readdir(d)) {
    const std::string_view n = e->d_name;
    if (n != "." && n != "..") names.emplace_back(n);
  }
  for (const std::string& n : names) {
    if (::unlinkat(dir_fd, n.c_str(), 0) == 0) continue;
    if (errno != EISDIR && errno != EPERM) {
      ok = false;
      continue;
    }
    const int sub = ::openat(dir_fd, n.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (sub < 0) {
      ok = false;
      continue;
    }
    ok = RemoveTree(sub) && ok;
    ::close(sub);
    ok = ::unlinkat(dir_fd, n.c_str(), AT_REMOVEDIR) == 0 && ok;
  }
  ::closedir(d);
  return ok;
}

}  // namespace modelgate::server
