// modelgate scanner: format detection and static analysis of model files.
// Today it detects formats from content and runs the core safetensors rules;
// static pickle analysis, containers, polyglots and YARA arrive with the
// scanner issue (see ../shared/DESIGN.md).
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "modelgate/core.h"

namespace modelgate::scanner {

// Format is what a file's content (not its name) says it is.
enum class Format : uint8_t {
  kUnknown, kSafetensors, kPickle, kPytorchZip, kPytorchTar, kNumpy, kNumpyZip,
  kJoblib, kZip, kTar, kGzip, kBzip2, kXz, kSevenZip, kGguf, kOnnx,
};
// FormatName is the report spelling ("safetensors", "pytorch-zip", ...).
std::string_view FormatName(Format f);

// kSniffBytes is how much of a file's start DetectFormat looks at.
inline constexpr size_t kSniffBytes = 512;

// DetectFormat names the format of a file from its first bytes (`head`, up
// to kSniffBytes) and its size. `name` (the file name) only breaks a tie:
// content that matches nothing else in a file named *.safetensors is parsed
// as safetensors so that its defect is reported.
Format DetectFormat(std::span<const uint8_t> head, uint64_t file_size, std::string_view name);

// Finding is one reported problem or fact about a file.
struct Finding {
  std::string id;  // MG-<AREA>-<NAME>
  core::Severity severity = core::Severity::kInfo;
  std::string message;
  uint64_t offset = core::kNoOffset;
  std::string member;  // path inside an archive, "" for the file itself
};

// FindingFromError turns a core error into a finding with its default
// severity.
Finding FindingFromError(const core::Error& e);

struct ScanOptions {
  core::Limits limits;
};

// FileScan is everything the scanner learned about one file.
struct FileScan {
  std::string path;
  Format format = Format::kUnknown;
  uint64_t size = 0;
  // The gate could not read the file (the verdict is "error", not a judgment
  // on its content).
  bool io_error = false;
  // The file claims a format whose parser rejected it: rejected whatever the
  // severity bar (a file that cannot be parsed is never passed).
  bool unparseable = false;
  std::vector<Finding> findings;
  // The parsed model when the file is safetensors and passed the core rules.
  std::optional<core::Safetensors> safetensors;
};

// ScanFile opens `path` read-only (without following a final symlink unless
// `follow_symlink`), detects its format and analyzes it. Never throws.
FileScan ScanFile(const std::string& path, bool follow_symlink, const ScanOptions& options);

}  // namespace modelgate::scanner
