// fuzz_scan: the whole ScanFile path — every loader model at once — on a
// memfd named by the first input byte (the name is a claim: .safetensors,
// .pt, .pkl, .npy, .joblib, .gguf, .json, .jinja, .py, .onnx, .h5, .keras,
// .7z or none). Invariants:
// - nothing is an I/O error (the descriptor never changes under the scan);
// - a file no loader model reads (no view) is never judged as a format: it
//   is "unknown" (or a git-lfs pointer, or a refused .safetensors claim);
// - a reported format always comes from a view a loader would read;
// - any *-LIMIT finding rejects the file (fail closed), whatever the bar;
// - two views of different formats carry MG-POLY-LOADERS;
// - offsets of the file's own findings lie inside the file.
#include <sys/mman.h>
#include <unistd.h>

#include <array>
#include <cstdint>
#include <cstdio>
#include <string>

#include "modelgate/scanner.h"

namespace core = modelgate::core;
namespace scanner = modelgate::scanner;
using scanner::Format;

namespace {

bool Family(Format a, Format b) { return scanner::FormatFamily(a) == scanner::FormatFamily(b); }

bool HasId(const scanner::FileScan& s, std::string_view id) {
  for (const auto& f : s.findings) {
    if (f.id == id) return true;
  }
  return false;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  static const std::array<const char*, 15> kNames = {
      "f", "m.safetensors", "m.pt", "m.pkl", "m.npy", "m.joblib", "m.gguf", "m.bin",
      "config.json", "chat_template.jinja", "m.py", "m.onnx", "m.h5", "m.keras", "m.7z"};
  const std::string name = kNames[data[0] % kNames.size()];
  ++data, --size;

  const int memfd = ::memfd_create("fuzz_scan", MFD_CLOEXEC);
  if (memfd < 0) return 0;
  size_t written = 0;
  while (written < size) {
    const ssize_t n = ::write(memfd, data + written, size - written);
    if (n <= 0) break;
    written += static_cast<size_t>(n);
  }
  auto opened = core::OpenRegularFile("/proc/self/fd/" + std::to_string(memfd), true);
  ::close(memfd);
  if (written != size || !opened.ok()) __builtin_trap();

  static const scanner::ScanOptions options = [] {
    scanner::ScanOptions o;
    // Small budgets keep each run fast; the invariants hold at any budget.
    o.containers.max_total_decompressed_bytes = 64ull << 20;
    o.containers.max_member_bytes = 16ull << 20;
    o.pickle.limits.max_opcodes = 1'000'000;
    return o;
  }();
  const scanner::FileScan s = scanner::ScanOpened(opened.value(), name, options);

  if (s.io_error) __builtin_trap();
  if (s.views.empty()) {
    const bool refused_claim = name == "m.safetensors" && s.format == Format::kSafetensors &&
                               s.unparseable;
    if (s.format != Format::kUnknown && s.format != Format::kLfsPointer && !refused_claim) {
      __builtin_trap();
    }
  } else {
    bool from_view = false;
    for (const auto& v : s.views) from_view |= Family(v.format, s.format);
    if (!from_view) __builtin_trap();
  }
  for (const auto& f : s.findings) {
    if (f.id.size() > 6 && f.id.compare(f.id.size() - 6, 6, "-LIMIT") == 0 && !s.unparseable) {
      __builtin_trap();
    }
    if (f.member.empty() && f.offset != core::kNoOffset && f.offset > size) __builtin_trap();
  }
  for (size_t i = 1; i < s.views.size(); ++i) {
    if (!Family(s.views[i].format, s.views[0].format) && !HasId(s, "MG-POLY-LOADERS")) {
      __builtin_trap();
    }
  }
  return 0;
}
