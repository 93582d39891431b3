// ScanFile / ScanOpened: one open descriptor, every loader's view of it
// (loader_models.cc), judged by one Scanner (judge.h).
#include "modelgate/scanner.h"
#include "loader_models.h"
#include "text_region.h"
#include "yara_precompiled.h"
#include "yara_rules.h"

namespace modelgate::scanner {

using internal::BaseName;
using internal::Scanner;
using core::Severity;


Finding FindingFromError(const core::Error& e) {
  return MakeFinding(std::string(core::FindingId(e.code)), core::DefaultSeverity(e.code),
                     e.message, e.offset);
}

core::Result<std::shared_ptr<const YaraRules>> CompileYaraRules(
    const std::vector<std::string>& dirs, bool with_default) {
  // The shipped rules alone load precompiled; other directories compile
  // with them in one pass.
  auto r = dirs.empty() && with_default ? YaraRules::Deserialize(DefaultCompiledRules())
                                        : YaraRules::Compile(dirs, with_default);
  if (!r.ok()) return r.error();
  return std::shared_ptr<const YaraRules>(std::make_shared<YaraRules>(std::move(r).value()));
}

FileScan ScanFile(const std::string& path, bool follow_symlink, const ScanOptions& options) {
  auto opened = core::OpenRegularFile(path, follow_symlink);
  if (!opened.ok()) {
    FileScan out;
    out.path = path;
    out.io_error = true;
    out.findings.push_back(FindingFromError(opened.error()));
    return out;
  }
  return ScanOpened(opened.value(), path, options);
}

FileScan ScanOpened(const core::OpenedFile& f, const std::string& path, const ScanOptions& options) {
  FileScan out;
  out.path = path;
  out.size = f.size;
  // Every view reads this one descriptor: pread for containers, a guarded
  // mapping for whole-file views (a truncation reads zeros and is caught
  // below, never a SIGBUS).
  auto mapped = core::GuardedMapping::Map(f.fd, f.size);
  if (!mapped.ok()) {
    out.io_error = true;
    out.findings.push_back(FindingFromError(mapped.error()));
    return out;
  }
  FdSource src(f.fd, f.size);
  Scanner scanner(options, out);
  internal::JudgeLoaderViews(scanner, src, mapped.value().bytes(), BaseName(path), options, out,
                             &mapped.value());
  internal::AddTextRegions(src, out);
  if (mapped.value().faulted()) {
    out.io_error = true;
    out.findings.push_back(MakeFinding(
        "MG-IO-CHANGED", Severity::kHigh,
        "the file shrank while it was read (pages past its new end read as zeros); "
        "not judged"));
  }
  return out;
}

}  // namespace modelgate::scanner
