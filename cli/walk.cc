#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>

#include "cli.h"
#include "options.h"
#include "progress.h"

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

std::string Join(const std::string& dir, const std::string& name) {
  if (!dir.empty() && dir.back() == '/') return dir + name;
  return dir + "/" + name;
}

scanner::Finding Walk(std::string id, core::Severity sev, std::string message) {
  return scanner::MakeFinding(std::move(id), sev, std::move(message));
}

void WalkDir(const std::string& dir, const std::string& root_real, int depth,
             std::vector<Target>* out) {
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
    std::string path = Join(dir, name);
    struct stat st {};
    if (::lstat(path.c_str(), &st) != 0) {
      Target t{path, false, {}, true};
      t.walk_findings.push_back(
          Walk("MG-IO-OPEN", core::Severity::kHigh, std::string("cannot stat: ") + std::strerror(errno)));
      out->push_back(std::move(t));
    } else if (S_ISDIR(st.st_mode)) {
      WalkDir(path, root_real, depth + 1, out);
    } else if (S_ISREG(st.st_mode)) {
      out->push_back(Target{path, false, {}, false, static_cast<uint64_t>(st.st_size)});
    } else if (S_ISLNK(st.st_mode)) {
      // A loader following this link reads whatever it points at. Inside the
      // tree the target is scanned in its own right; outside, it is not.
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

std::vector<Target> ExpandPaths(const std::vector<std::string>& paths) {
  std::vector<Target> out;
  for (const auto& p : paths) {
    struct stat st {};
    const bool found = ::stat(p.c_str(), &st) == 0;
    if (found && S_ISDIR(st.st_mode)) {
      WalkDir(p, RealPath(p), 0, &out);
    } else {
      const uint64_t size = found && S_ISREG(st.st_mode) ? static_cast<uint64_t>(st.st_size) : 0;
      out.push_back(Target{p, true, {}, false, size});  // ScanFile reports what is wrong
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

Report RunFiles(const CommonOptions& opts, const JudgeFn& one) {
  const std::vector<Target> targets = ExpandPaths(opts.paths);
  std::unique_ptr<Progress> progress = StderrProgress(opts.quiet, targets);
  Report report;
  report.files.reserve(targets.size());
  for (size_t i = 0; i < targets.size(); ++i) {
    if (progress) progress->StartFile(i, targets[i].path);
    report.files.push_back(one(targets[i], progress.get()));
    if (progress) progress->EndFile();
  }
  if (progress) progress->Finish();  // erased before the report is written
  return report;
}

}  // namespace modelgate::cli
