#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string_view>

#include "cli.h"
#include "model_dir.h"
#include "options.h"
#include "progress.h"
#include "stdin_spool.h"

namespace modelgate::cli {
namespace {

// Directory nesting the walk follows before it reports instead of descending.
constexpr int kMaxWalkDepth = 256;

std::string RealPath(const std::string& path) {
  char buf[PATH_MAX];
  if (::realpath(path.c_str(), buf) == nullptr) return {};
  return buf;
}

bool Inside(const std::string& path, const std::string& root) {
  if (root == "/") return true;
  return path == root || (path.size() > root.size() && path.compare(0, root.size(), root) == 0 &&
                          path[root.size()] == '/');
}

scanner::Finding Walk(std::string id, core::Severity sev, std::string message) {
  return scanner::MakeFinding(std::move(id), sev, std::move(message));
}

std::string ParentOf(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

// HfRepoOf returns R when the real directory `dir` lies inside
// R/snapshots/<rev>/ and R's last component is "models--<name>" (the
// innermost such R), else "". `dir` must be a realpath.
std::string HfRepoOf(const std::string& dir) {
  std::vector<std::string> parts;
  for (size_t at = 1; at <= dir.size();) {
    size_t next = dir.find('/', at);
    if (next == std::string::npos) next = dir.size();
    if (next > at) parts.push_back(dir.substr(at, next - at));
    at = next + 1;
  }
  constexpr std::string_view kPrefix = "models--";
  for (size_t i = parts.size(); i-- > 0;) {
    if (i + 2 < parts.size() && parts[i].size() > kPrefix.size() &&
        parts[i].compare(0, kPrefix.size(), kPrefix) == 0 && parts[i + 1] == "snapshots") {
      std::string repo;
      for (size_t k = 0; k <= i; ++k) repo += "/" + parts[k];
      return repo;
    }
  }
  return {};
}

// HfBlob returns the blob a Hugging Face cache link resolves to, or "" when
// `link` is not such a link. The Hub's cache stores each file once in
// models--X/blobs/<hash> and lists a revision as relative links in
// models--X/snapshots/<rev>/; a loader reading the snapshot reads the blob.
// Accepted only when: the link's own directory lies in R/snapshots/<rev>/
// of a repository R (HfRepoOf); the link's text, read once, names an entry
// whose directory resolves to R/blobs, itself a real directory; and that
// entry is a regular file, not another link. Anything else keeps the
// ordinary symlink rules.
std::string HfBlob(const std::string& link, uint64_t* size_bytes) {
  const std::string dir = RealPath(ParentOf(link));
  if (dir.empty()) return {};
  const std::string repo = HfRepoOf(dir);
  if (repo.empty()) return {};
  char text[PATH_MAX];
  const ssize_t n = ::readlink(link.c_str(), text, sizeof text);
  if (n <= 0 || static_cast<size_t>(n) >= sizeof text) return {};
  const std::string raw(text, static_cast<size_t>(n));
  const std::string candidate = raw[0] == '/' ? raw : dir + "/" + raw;
  const std::string name = candidate.substr(candidate.rfind('/') + 1);
  if (name.empty() || name == "." || name == "..") return {};
  const std::string blobs = repo + "/blobs";
  struct stat st {};
  if (::lstat(blobs.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) return {};
  if (RealPath(ParentOf(candidate)) != blobs) return {};
  const std::string blob = blobs + "/" + name;
  if (::lstat(blob.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return {};
  if (RealPath(link) != blob) return {};  // the kernel's reading agrees
  *size_bytes = static_cast<uint64_t>(st.st_size);
  return blob;
}

// Skip says whether the walk leaves out an entry (by its path), and so
// does not descend into it; null skips nothing.
using Skip = std::function<bool(const std::string& path)>;

void WalkDir(const std::string& dir, const std::string& root_real, int depth,
             std::vector<Target>* out, const Skip& skip);

// WalkOperand walks the directory operand `index` and labels every target
// with it and its path relative to the operand; `prune` leaves entries out.
void WalkOperand(const std::string& root, size_t index, const PruneFn& prune,
                 std::vector<Target>* out) {
  const size_t first = out->size();
  const size_t skip = root.empty() || root.back() == '/' ? root.size() : root.size() + 1;
  Skip skip_fn;
  if (prune) {
    skip_fn = [&](const std::string& path) {
      return path.size() > skip && prune(index, std::string_view(path).substr(skip));
    };
  }
  WalkDir(root, RealPath(root), 0, out, skip_fn);
  for (size_t i = first; i < out->size(); ++i) {
    Target& t = (*out)[i];
    t.operand = index;
    t.rel = t.path.size() > skip ? t.path.substr(skip) : std::string();
  }
}

void WalkDir(const std::string& dir, const std::string& root_real, int depth,
             std::vector<Target>* out, const Skip& skip) {
  if (depth > kMaxWalkDepth) {
    Target t{dir, false, {}, true};
    t.walk_findings.push_back(Walk("MG-IO-OPEN", core::Severity::kHigh,
                                   "directory nesting deeper than " +
                                       std::to_string(kMaxWalkDepth) + "; not walked"));
    out->push_back(std::move(t));
    return;
  }
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) {
    Target t{dir, false, {}, true};
    t.walk_findings.push_back(Walk("MG-IO-OPEN", core::Severity::kHigh,
                                   std::string("cannot open directory: ") + std::strerror(errno)));
    out->push_back(std::move(t));
    return;
  }
  std::vector<std::string> names;
  while (struct dirent* e = ::readdir(d)) {
    std::string name = e->d_name;
    if (name != "." && name != "..") names.push_back(std::move(name));
  }
  ::closedir(d);
  std::sort(names.begin(), names.end());
  for (const auto& name : names) {
    std::string path = JoinPath(dir, name);
    if (skip && skip(path)) continue;
    struct stat st {};
    if (::lstat(path.c_str(), &st) != 0) {
      Target t{path, false, {}, true};
      t.walk_findings.push_back(
          Walk("MG-IO-OPEN", core::Severity::kHigh, std::string("cannot stat: ") + std::strerror(errno)));
      out->push_back(std::move(t));
    } else if (S_ISDIR(st.st_mode)) {
      WalkDir(path, root_real, depth + 1, out, skip);
    } else if (S_ISREG(st.st_mode)) {
      out->push_back(Target{path, false, {}, false, static_cast<uint64_t>(st.st_size)});
    } else if (S_ISLNK(st.st_mode)) {
      // A loader following this link reads whatever it points at. A Hugging
      // Face snapshot link is judged as its blob, in the link's name. Other
      // links: inside the tree the target is scanned in its own right;
      // outside, it is not.
      uint64_t blob_bytes = 0;
      if (std::string blob = HfBlob(path, &blob_bytes); !blob.empty()) {
        out->push_back(Target{path, false, {}, false, blob_bytes, std::move(blob)});
        continue;
      }
      std::string target = RealPath(path);
      Target t{path, false, {}, false};
      if (target.empty()) {
        t.walk_findings.push_back(Walk("MG-FS-SYMLINK-ESCAPE", core::Severity::kHigh,
                                       "symbolic link does not resolve (dangling or a loop)"));
      } else if (!Inside(target, root_real)) {
        t.walk_findings.push_back(Walk("MG-FS-SYMLINK-ESCAPE", core::Severity::kHigh,
                                       "symbolic link leads out of the scanned tree to " +
                                           core::Quoted(target)));
      } else {
        t.walk_findings.push_back(Walk("MG-FS-SYMLINK", core::Severity::kInfo,
                                       "symbolic link to " + core::Quoted(target) +
                                           " inside the tree; scanned there, not followed"));
      }
      out->push_back(std::move(t));
    } else {
      Target t{path, false, {}, false};
      t.walk_findings.push_back(Walk("MG-FS-SPECIAL-FILE", core::Severity::kHigh,
                                     "not a regular file (FIFO, socket or device)"));
      out->push_back(std::move(t));
    }
  }
}

}  // namespace

std::vector<Target> ExpandPaths(const std::vector<std::string>& paths, const PruneFn& prune) {
  std::vector<Target> out;
  for (size_t index = 0; index < paths.size(); ++index) {
    const std::string& p = paths[index];
    if (p == kStdinPath) {  // read at its turn, by OpenTarget
      Target t{p, true, {}, false, 0};
      t.standard_input = true;
      t.operand = index;
      out.push_back(std::move(t));
      continue;
    }
    struct stat st {};
    const bool found = ::stat(p.c_str(), &st) == 0;
    if (found && S_ISDIR(st.st_mode)) {
      WalkOperand(p, index, prune, &out);
    } else {
      const uint64_t size = found && S_ISREG(st.st_mode) ? static_cast<uint64_t>(st.st_size) : 0;
      Target t{p, true, {}, false, size};  // ScanFile reports what is wrong
      t.operand = index;
      out.push_back(std::move(t));
    }
  }
  return out;
}

bool WalkFindings(const Target& target, FileReport* fr) {
  if (target.walk_findings.empty() && !target.walk_error) return false;
  fr->scan.path = target.path;
  fr->scan.io_error = target.walk_error;
  fr->scan.findings = target.walk_findings;
  return true;
}

core::Result<core::OpenedFile> OpenTarget(const Target& target) {
  if (target.open_fd >= 0) {
    const int fd = ::fcntl(target.open_fd, F_DUPFD_CLOEXEC, 0);
    if (fd < 0) {
      return core::Error{core::Code::kIoRead, core::kNoOffset,
                         std::string("cannot duplicate the spooled file: ") + std::strerror(errno)};
    }
    return core::AdoptRegularFile(fd);
  }
  if (target.standard_input) return SpoolToTempFile(STDIN_FILENO, kMaxStdinBytes);
  if (!target.blob.empty()) return core::OpenRegularFile(target.blob, /*follow_symlink=*/false);
  return core::OpenRegularFile(target.path, target.follow_symlink);
}

core::Status TargetUnchanged(const Target& target, const core::OpenedFile& file) {
  if (auto same = core::CheckUnchanged(file); !same.ok()) return same;
  // A spool has no name to re-check.
  if (target.standard_input || target.open_fd >= 0) return core::OkStatus();
  // The name must still lead to the inode judged: a rename over the path
  // after the open would attach this verdict to another file.
  const std::string& name = target.blob.empty() ? target.path : target.blob;
  struct stat st {};
  const int rc = target.blob.empty() && target.follow_symlink ? ::stat(name.c_str(), &st)
                                                                : ::lstat(name.c_str(), &st);
  std::string what;
  if (rc != 0) {
    what = std::string("the path no longer resolves: ") + std::strerror(errno);
  } else if (static_cast<uint64_t>(st.st_dev) != file.dev ||
             static_cast<uint64_t>(st.st_ino) != file.ino) {
    what = "the path now names another file";
  } else if (!target.blob.empty() && RealPath(target.path) != target.blob) {
    what = "the snapshot link now leads elsewhere";
  }
  if (what.empty()) return core::OkStatus();
  return core::Error{core::Code::kIoChanged, core::kNoOffset,
                     "file changed while being judged (" + what + ")"};
}

Report RunFiles(const CommonOptions& opts, const JudgeFn& one, const PruneFn& prune) {
  return RunTargets(opts, ExpandPaths(opts.paths, prune), one);
}

Report RunTargets(const CommonOptions& opts, const std::vector<Target>& targets, const JudgeFn& one) {
  std::unique_ptr<Progress> progress = StderrProgress(opts.quiet, targets);
  Report report;
  report.files.reserve(targets.size());
  for (size_t i = 0; i < targets.size(); ++i) {
    const Target& target = targets[i];
    if (progress) progress->StartFile(i, target.path);
    FileReport fr;
    if (!target.walk_findings.empty() || target.walk_error) {
      fr = one(target, nullptr, progress.get());
    } else if (auto opened = OpenTarget(target); !opened.ok()) {
      fr.scan.path = target.path;
      fr.scan.io_error = true;
      fr.scan.findings.push_back(scanner::FindingFromError(opened.error()));
      fr.verdict = Verdict::kError;
    } else {
      fr = one(target, &opened.value(), progress.get());
      ReadIndexIfAny(target, opened.value(), &fr);  // a sharded set's index, from this fd
      const bool seen = std::any_of(fr.scan.findings.begin(), fr.scan.findings.end(),
                                    [](const scanner::Finding& f) { return f.id == "MG-IO-CHANGED"; });
      if (auto same = TargetUnchanged(target, opened.value()); !same.ok() && !seen) {
        // What was read need not be one file's bytes: no verdict on them.
        fr.scan.io_error = true;
        fr.scan.findings.push_back(scanner::FindingFromError(same.error()));
        fr.verdict = Verdict::kError;
      }
    }
    fr.target = target.blob;
    fr.operand = target.operand;
    fr.rel = target.rel;
    if (opts.on_file) fr.streamed = opts.on_file(fr);
    report.files.push_back(std::move(fr));
    if (progress) progress->EndFile();
  }
  if (progress) progress->Finish();  // erased before the report is written
  return report;
}

}  // namespace modelgate::cli
