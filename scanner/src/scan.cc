#include <vector>

#include "modelgate/scanner.h"

namespace modelgate::scanner {
namespace {

std::string_view BaseName(std::string_view path) {
  size_t slash = path.rfind('/');
  return slash == std::string_view::npos ? path : path.substr(slash + 1);
}

// Formats that can carry a pickle (or an archive that can hold one). Until
// the static analyzer lands they are rejected: a gate that cannot see inside
// a code-carrying format must not pass it.
bool MayCarryCode(Format f) {
  switch (f) {
    case Format::kPickle: case Format::kPytorchZip: case Format::kPytorchTar:
    case Format::kNumpy: case Format::kNumpyZip: case Format::kJoblib: case Format::kZip:
    case Format::kTar: case Format::kGzip: case Format::kBzip2: case Format::kXz:
    case Format::kSevenZip:
      return true;
    default:
      return false;
  }
}

}  // namespace

Finding FindingFromError(const core::Error& e) {
  return MakeFinding(std::string(core::FindingId(e.code)), core::DefaultSeverity(e.code),
                     e.message, e.offset);
}

FileScan ScanFile(const std::string& path, bool follow_symlink, const ScanOptions& options) {
  FileScan out;
  out.path = path;
  auto opened = core::OpenRegularFile(path, follow_symlink);
  if (!opened.ok()) {
    out.io_error = true;
    out.findings.push_back(FindingFromError(opened.error()));
    return out;
  }
  const core::OpenedFile& f = opened.value();
  out.size = f.size;
  std::vector<uint8_t> head(static_cast<size_t>(std::min<uint64_t>(f.size, kSniffBytes)));
  if (auto s = core::PreadExact(f.fd, 0, head); !s.ok()) {
    out.io_error = true;
    out.findings.push_back(FindingFromError(s.error()));
    return out;
  }
  out.format = DetectFormat(head, f.size, BaseName(path));
  if (out.format == Format::kSafetensors) {
    auto st = core::ReadSafetensors(f.fd, f.size, options.limits);
    if (st.ok()) {
      out.safetensors = std::move(st).value();
    } else {
      const core::Error& e = st.error();
      Finding finding = FindingFromError(e);
      if (e.code == core::Code::kIoRead || e.code == core::Code::kIoChanged) {
        out.io_error = true;
      } else {
        out.unparseable = true;
      }
      out.findings.push_back(std::move(finding));
    }
    return out;
  }
  if (MayCarryCode(out.format)) {
    out.findings.push_back(MakeFinding(
        "MG-FMT-NOT-ANALYZED", core::Severity::kHigh,
        "format " + std::string(FormatName(out.format)) +
            " can carry executable pickle data and is not analyzed by this version; rejected"));
  } else if (out.format == Format::kUnknown) {
    out.findings.push_back(
        MakeFinding("MG-FMT-UNKNOWN", core::Severity::kInfo, "not a recognized model format"));
  } else {
    out.findings.push_back(MakeFinding(
        "MG-FMT-NOT-ANALYZED", core::Severity::kMedium,
        "format " + std::string(FormatName(out.format)) + " is not analyzed by this version"));
  }
  return out;
}

}  // namespace modelgate::scanner
