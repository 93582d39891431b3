// ScanFile: open, detect the format from content, and analyze the file the
// way its loader would read it — safetensors through the core rules, pickles
// through the pickle machine, zip archives member by member as PyTorch's
// reader finds them, .npy/.npz headers and object-array pickles, compressed
// wrappers decompressed with caps — then look for a second format hiding in
// the same bytes.
#include <sys/mman.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include <zlib.h>

#include "modelgate/scanner.h"
#include "npy.h"
#include "source.h"
#include "zip.h"

namespace modelgate::scanner {
namespace {

using core::Severity;

std::string_view BaseName(std::string_view path) {
  size_t slash = path.rfind('/');
  return slash == std::string_view::npos ? path : path.substr(slash + 1);
}

bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// A read-only private mapping of a whole file (pickle streams are analyzed
// in place; nothing is copied).
class Mapping {
 public:
  Mapping(int fd, uint64_t size) : size_(size) {
    if (size == 0) return;
    void* p = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p != MAP_FAILED) data_ = static_cast<const uint8_t*>(p);
  }
  ~Mapping() {
    if (data_ != nullptr) ::munmap(const_cast<uint8_t*>(data_), size_);
  }
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  bool ok() const { return data_ != nullptr || size_ == 0; }
  std::span<const uint8_t> bytes() const { return {data_, static_cast<size_t>(size_)}; }

 private:
  const uint8_t* data_ = nullptr;
  uint64_t size_;
};

// Where a byte span sits: in the file itself (absolute offsets), or inside
// an archive member (offsets relative to the member's decompressed bytes,
// plus the member's absolute data offset when it is stored uncompressed).
struct Place {
  std::string member;                       // "" = the file itself
  uint64_t file_base = 0;                   // absolute offset of byte 0, if known
  bool absolute = true;                     // byte offsets map to file offsets
};

Finding Placed(Finding f, const Place& at) {
  if (at.member.empty()) return f;
  f.member = f.member.empty() ? at.member : at.member + "!" + f.member;
  if (f.offset != core::kNoOffset) {
    // Inside a member, analysis offsets count from the member's first byte.
    f.member_offset = f.offset;
    f.offset = at.absolute ? at.file_base + f.offset : core::kNoOffset;
  }
  return f;
}

class Scanner {
 public:
  Scanner(const ScanOptions& options, FileScan& out) : opts_(options), out_(out) {}

  // Pickle analyzes `bytes`, which start `base` bytes into the file or
  // member that `at` names.
  void Pickle(std::span<const uint8_t> bytes, const Place& at, uint64_t base = 0) {
    PickleAnalysis a = AnalyzePickle(bytes, opts_.pickle, base);
    for (auto& f : PickleFindings(a)) out_.findings.push_back(Placed(std::move(f), at));
    for (const auto& imp : a.imports) {
      out_.imports.push_back(FileScan::Import{at.member, imp});
      if (imp.module == "joblib.numpy_pickle" && at.member.empty() &&
          out_.format == Format::kPickle) {
        out_.format = Format::kJoblib;
      }
    }
  }

  // Npy analyzes a .npy file or member: header, then either the pickle body
  // of an object array or the exact size of a plain one.
  void Npy(std::span<const uint8_t> bytes, const Place& at) {
    std::vector<Finding> f;
    NpyLimits limits;
    auto h = ParseNpyHeader(bytes, 0, limits, &f);
    for (auto& x : f) out_.findings.push_back(Placed(std::move(x), at));
    if (!h) {
      if (at.member.empty()) out_.unparseable = true;
      return;
    }
    if (h->has_object) {
      Pickle(bytes.subspan(static_cast<size_t>(h->data_offset)), at, h->data_offset);
      return;
    }
    if (!h->body_bytes) return;
    const uint64_t have = bytes.size() - h->data_offset;
    if (have < *h->body_bytes) {
      out_.findings.push_back(Placed(
          MakeFinding("MG-NPY-TRUNCATED", Severity::kHigh,
                      "array body needs " + std::to_string(*h->body_bytes) + " bytes, " +
                          std::to_string(have) + " present",
                      bytes.size()),
          at));
      if (at.member.empty()) out_.unparseable = true;
    } else if (have > *h->body_bytes) {
      out_.findings.push_back(Placed(
          MakeFinding("MG-NPY-TRAILING-DATA", Severity::kHigh,
                      std::to_string(have - *h->body_bytes) +
                          " bytes after the array body (np.load ignores them; another format "
                          "can hide there)",
                      h->data_offset + *h->body_bytes),
          at));
    }
  }

  void Zip(const Source& src, const Place& at, uint64_t depth) {
    std::vector<Finding> f;
    ZipLimits limits;
    limits.max_entries = opts_.containers.max_zip_entries;
    limits.max_central_dir_bytes = opts_.containers.max_central_dir_bytes;
    limits.max_member_bytes = opts_.containers.max_member_bytes;
    auto zr = ReadZip(src, limits, &f);
    if (!zr.ok()) {
      out_.io_error = true;
      out_.findings.push_back(FindingFromError(zr.error()));
      return;
    }
    const ZipArchive& zip = zr.value();
    for (auto& x : f) out_.findings.push_back(PlacedZip(std::move(x), at));
    f.clear();
    if (!zip.directory_ok) {
      if (at.member.empty()) out_.unparseable = true;
      return;
    }
    bool torchscript = false;
    for (const auto& e : zip.entries) {
      if (!e.usable) continue;
      const std::string member = at.member.empty() ? e.name : at.member + "!" + e.name;
      if (!torchscript && (e.name.rfind("code/", 0) == 0 || e.name.find("/code/") != std::string::npos)) {
        torchscript = true;
        out_.findings.push_back(MakeFinding(
            "MG-ZIP-TORCHSCRIPT", Severity::kHigh,
            "TorchScript archive: code in " + core::Quoted(e.name) +
                " runs when the model is loaded with torch.jit.load; needs review",
            at.absolute && at.member.empty() ? e.central_offset : core::kNoOffset, member));
      }
      // Peek at the member's first bytes to learn what it is (by content).
      std::optional<std::vector<uint8_t>> whole;
      std::vector<uint8_t> head;
      if (e.method == 0) {
        auto h = src.ReadVec(e.data_offset, std::min<uint64_t>(e.compressed_bytes, 16));
        if (!h.ok()) {
          out_.io_error = true;
          out_.findings.push_back(FindingFromError(h.error()));
          return;
        }
        head = std::move(h).value();
      } else {
        if (!Extract(src, e, at, &whole)) return;
        if (!whole) continue;
        head.assign(whole->begin(), whole->begin() + static_cast<long>(std::min<size_t>(whole->size(), 16)));
      }
      const bool is_pickle = (head.size() >= 2 && head[0] == 0x80 && head[1] <= 5) ||
                             EndsWith(e.name, ".pkl") || EndsWith(e.name, ".pickle");
      const bool is_npy = head.size() >= kNpyMagic.size() &&
                          std::memcmp(head.data(), kNpyMagic.data(), kNpyMagic.size()) == 0;
      const bool is_zip = head.size() >= 4 && head[0] == 'P' && head[1] == 'K' && head[2] == 3 && head[3] == 4;
      if (!is_pickle && !is_npy && !is_zip) continue;
      if (!whole && !Extract(src, e, at, &whole)) return;
      if (!whole) continue;
      Place inner{member, at.absolute && at.member.empty() && e.method == 0 ? e.data_offset : 0,
                  at.absolute && at.member.empty() && e.method == 0};
      if (is_pickle) {
        Pickle(*whole, inner);
      } else if (is_npy) {
        Npy(*whole, inner);
      } else if (depth + 1 >= opts_.containers.max_nesting_depth) {
        out_.findings.push_back(MakeFinding(
            "MG-ZIP-LIMIT", Severity::kHigh,
            "archive nested deeper than " + std::to_string(opts_.containers.max_nesting_depth) +
                " levels (limit max_nesting_depth); not analyzed",
            core::kNoOffset, member));
      } else {
        MemorySource nested(*whole);
        Zip(nested, Place{member, 0, false}, depth + 1);
      }
    }
  }

  // A second format in the same bytes: zip readers look for the end record
  // from the end of the file, so any file can also be a zip.
  void ZipPolyglot(const Source& src) {
    std::vector<Finding> f;
    auto zr = ReadZip(src, ZipLimits{}, &f);
    if (!zr.ok() || !zr.value().directory_ok || zr.value().entries.empty()) return;
    out_.findings.push_back(MakeFinding(
        "MG-POLY-ZIP", Severity::kCritical,
        "the file is also a zip archive with " + std::to_string(zr.value().entries.size()) +
            " member(s): a zip reader sees other content than a " +
            std::string(FormatName(out_.format)) + " reader",
        zr.value().eocd_offset));
  }

  void Inflate(std::span<const uint8_t> in, int window_bits, const char* what, uint64_t depth) {
    const uint64_t cap = std::min<uint64_t>(
        opts_.containers.max_member_bytes,
        SaturatingMul(std::max<uint64_t>(in.size(), 1), opts_.containers.max_expansion_ratio));
    z_stream zs{};
    if (inflateInit2(&zs, window_bits) != Z_OK) return;
    std::vector<uint8_t> out;
    uint8_t chunk[1 << 16];
    zs.next_in = const_cast<Bytef*>(in.data());
    zs.avail_in = static_cast<uInt>(std::min<size_t>(in.size(), UINT32_MAX));
    int rc = Z_OK;
    bool capped = false;
    while (rc == Z_OK) {
      zs.next_out = chunk;
      zs.avail_out = sizeof chunk;
      rc = inflate(&zs, Z_NO_FLUSH);
      const size_t got = sizeof chunk - zs.avail_out;
      if (out.size() + got > cap || decompressed_ + got > opts_.containers.max_total_decompressed_bytes) {
        capped = true;
        break;
      }
      out.insert(out.end(), chunk, chunk + got);
      decompressed_ += got;
      if (rc == Z_OK && got == 0 && zs.avail_in == 0) break;
    }
    const uint64_t consumed = zs.total_in;
    inflateEnd(&zs);
    if (capped) {
      out_.findings.push_back(MakeFinding(
          "MG-ARCHIVE-LIMIT", Severity::kHigh,
          std::string(what) + " stream expands past " + std::to_string(cap) +
              " bytes (limits max_expansion_ratio / max_member_bytes / max_total_decompressed_bytes); "
              "not fully analyzed"));
      return;
    }
    if (rc != Z_STREAM_END) {
      out_.findings.push_back(MakeFinding("MG-ARCHIVE-MALFORMED", Severity::kHigh,
                                          std::string(what) + " stream is corrupt or truncated"));
      out_.unparseable = true;
      return;
    }
    if (consumed < in.size()) {
      out_.findings.push_back(MakeFinding(
          "MG-ARCHIVE-TRAILING-DATA", Severity::kHigh,
          std::to_string(in.size() - consumed) + " bytes after the " + what + " stream",
          consumed));
    }
    Contents(out, Place{std::string("<") + what + ">", 0, false}, depth + 1);
  }

  // Contents analyzes decompressed bytes by their own format.
  void Contents(std::span<const uint8_t> bytes, const Place& at, uint64_t depth) {
    if (depth >= opts_.containers.max_nesting_depth) {
      out_.findings.push_back(MakeFinding(
          "MG-ARCHIVE-LIMIT", Severity::kHigh,
          "compressed streams nested deeper than " +
              std::to_string(opts_.containers.max_nesting_depth) + " (limit max_nesting_depth)"));
      return;
    }
    const Format f = DetectFormat(bytes.first(std::min<size_t>(bytes.size(), kSniffBytes)),
                                  bytes.size(), "");
    switch (f) {
      case Format::kPickle: Pickle(bytes, at); break;
      case Format::kNumpy: Npy(bytes, at); break;
      case Format::kZip: case Format::kPytorchZip: case Format::kNumpyZip: {
        MemorySource src(bytes);
        Zip(src, at, depth);
        break;
      }
      case Format::kGzip: Inflate(bytes, 16 + MAX_WBITS, "gzip", depth); break;
      case Format::kZlib: Inflate(bytes, MAX_WBITS, "zlib", depth); break;
      default:
        // Unknown inner content could still be a protocol 0/1 pickle: run the
        // machine; it only reports what it can execute.
        Pickle(bytes, at);
        break;
    }
  }

  uint64_t decompressed() const { return decompressed_; }

 private:
  static uint64_t SaturatingMul(uint64_t a, uint64_t b) {
    uint64_t r;
    return __builtin_mul_overflow(a, b, &r) ? UINT64_MAX : r;
  }

  // Zip findings carry absolute offsets when the archive is the file itself.
  Finding PlacedZip(Finding f, const Place& at) {
    if (at.member.empty()) return f;
    f.member = f.member.empty() ? at.member : at.member + "!" + f.member;
    f.member_offset = f.offset;
    f.offset = core::kNoOffset;
    return f;
  }

  bool Extract(const Source& src, const ZipEntry& e, const Place& at,
               std::optional<std::vector<uint8_t>>* whole) {
    std::vector<Finding> f;
    auto m = ExtractZipMember(src, e, opts_.containers.max_member_bytes, &f);
    for (auto& x : f) out_.findings.push_back(PlacedZip(std::move(x), at));
    if (!m.ok()) {
      out_.io_error = true;
      out_.findings.push_back(FindingFromError(m.error()));
      return false;
    }
    if (m.value()) decompressed_ += m.value()->size();
    *whole = std::move(m).value();
    return true;
  }

  const ScanOptions& opts_;
  FileScan& out_;
  uint64_t decompressed_ = 0;
};

// Extensions people trust, and the formats content may have under them.
struct ExtensionRule {
  std::string_view ext;
  std::vector<Format> formats;
};

const std::vector<ExtensionRule>& ExtensionRules() {
  static const std::vector<ExtensionRule> rules = {
      {".safetensors", {Format::kSafetensors}},
      {".npy", {Format::kNumpy}},
      {".npz", {Format::kNumpyZip, Format::kZip}},
      {".pt", {Format::kPytorchZip, Format::kPickle, Format::kPytorchTar, Format::kZip}},
      {".pth", {Format::kPytorchZip, Format::kPickle, Format::kPytorchTar, Format::kZip}},
      {".bin", {Format::kPytorchZip, Format::kPickle, Format::kPytorchTar, Format::kZip,
                Format::kSafetensors, Format::kUnknown}},
      {".ckpt", {Format::kPytorchZip, Format::kPickle, Format::kPytorchTar, Format::kZip}},
      {".pkl", {Format::kPickle, Format::kJoblib}},
      {".pickle", {Format::kPickle, Format::kJoblib}},
      {".joblib", {Format::kJoblib, Format::kPickle, Format::kZlib, Format::kGzip, Format::kBzip2,
                   Format::kXz}},
      {".gguf", {Format::kGguf}},
      {".zip", {Format::kZip, Format::kPytorchZip, Format::kNumpyZip}},
      {".gz", {Format::kGzip}},
  };
  return rules;
}

bool MayCarryCode(Format f) {
  switch (f) {
    case Format::kSafetensors: case Format::kGguf: case Format::kUnknown: case Format::kOnnx:
      return false;
    default:
      return true;
  }
}

void CheckExtension(FileScan& out) {
  const std::string_view name = BaseName(out.path);
  for (const auto& rule : ExtensionRules()) {
    if (!EndsWith(name, rule.ext)) continue;
    if (std::find(rule.formats.begin(), rule.formats.end(), out.format) != rule.formats.end()) return;
    out.findings.push_back(MakeFinding(
        "MG-FMT-EXTENSION-MISMATCH", MayCarryCode(out.format) ? Severity::kHigh : Severity::kLow,
        "named " + std::string(rule.ext) + " but the content is " +
            std::string(FormatName(out.format))));
    return;
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
  FdSource src(f.fd, f.size);
  Scanner scanner(options, out);

  auto map_or_fail = [&](Mapping& m) {
    if (m.ok()) return true;
    out.io_error = true;
    out.findings.push_back(MakeFinding("MG-IO-READ", Severity::kHigh, "cannot map the file"));
    return false;
  };

  switch (out.format) {
    case Format::kSafetensors: {
      auto st = core::ReadSafetensors(f.fd, f.size, options.limits);
      if (st.ok()) {
        out.safetensors = std::move(st).value();
        scanner.ZipPolyglot(src);
      } else {
        const core::Error& e = st.error();
        if (e.code == core::Code::kIoRead || e.code == core::Code::kIoChanged) {
          out.io_error = true;
        } else {
          out.unparseable = true;
        }
        out.findings.push_back(FindingFromError(e));
      }
      break;
    }
    case Format::kPickle: {
      Mapping m(f.fd, f.size);
      if (!map_or_fail(m)) break;
      scanner.Pickle(m.bytes(), Place{});
      scanner.ZipPolyglot(src);
      break;
    }
    case Format::kNumpy: {
      Mapping m(f.fd, f.size);
      if (!map_or_fail(m)) break;
      scanner.Npy(m.bytes(), Place{});
      scanner.ZipPolyglot(src);
      break;
    }
    case Format::kZip: case Format::kPytorchZip: case Format::kNumpyZip:
      scanner.Zip(src, Place{}, 0);
      break;
    case Format::kGzip: case Format::kZlib: {
      Mapping m(f.fd, f.size);
      if (!map_or_fail(m)) break;
      scanner.Contents(m.bytes(), Place{}, 0);
      break;
    }
    case Format::kUnknown: {
      // A zip whose end record is at the end but whose start is not: a zip
      // reader opens it (self-extractor layout, or a polyglot).
      std::vector<Finding> probe;
      auto zr = ReadZip(src, ZipLimits{}, &probe);
      if (zr.ok() && zr.value().directory_ok && !zr.value().entries.empty()) {
        out.format = Format::kZip;
        scanner.Zip(src, Place{}, 0);
      } else {
        out.findings.push_back(
            MakeFinding("MG-FMT-UNKNOWN", Severity::kInfo, "not a recognized model format"));
      }
      break;
    }
    case Format::kGguf: case Format::kOnnx:
      out.findings.push_back(MakeFinding(
          "MG-FMT-NOT-ANALYZED", Severity::kMedium,
          "format " + std::string(FormatName(out.format)) + " is not analyzed by this version"));
      break;
    default:
      out.findings.push_back(MakeFinding(
          "MG-FMT-NOT-ANALYZED", Severity::kHigh,
          "format " + std::string(FormatName(out.format)) +
              " can carry executable pickle data and is not analyzed by this version; rejected"));
      break;
  }
  CheckExtension(out);
  return out;
}

}  // namespace modelgate::scanner
