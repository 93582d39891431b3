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
#include "decompress.h"
#include "npy.h"
#include "source.h"
#include "tar.h"
#include "yara_precompiled.h"
#include "yara_rules.h"
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

// IsTensorStorage: a torch zip's storage member "<archive>/data/<key>"
// (key digits): raw tensor bytes, never scanned by default.
bool IsTensorStorage(std::string_view name) {
  const size_t p = name.rfind("/data/");
  if (p == std::string_view::npos) return false;
  const std::string_view key = name.substr(p + 6);
  return !key.empty() &&
         std::all_of(key.begin(), key.end(), [](char c) { return c >= '0' && c <= '9'; });
}

class Scanner {
 public:
  Scanner(const ScanOptions& options, FileScan& out) : opts_(options), out_(out) {}

  // Yara runs the rule set (if any) over `bytes`, which start `base` bytes
  // into the file or member that `at` names.
  void Yara(std::span<const uint8_t> bytes, std::string_view scope, const Place& at,
            uint64_t base = 0) {
    if (!opts_.yara) return;
    std::vector<Finding> f;
    opts_.yara->Scan(bytes, scope, &f, base);
    for (auto& x : f) out_.findings.push_back(Placed(std::move(x), at));
  }
  bool YaraAll() const { return opts_.yara && opts_.yara_scope == YaraScope::kAll; }

  // SafetensorsYara scans a parsed file's header text ("header") and its
  // decoded metadata ("metadata": one "key<TAB>value" line per entry, so
  // "\u0063url" is seen as "curl"); tensor data only for scope all.
  void SafetensorsYara(const Source& src, std::span<const uint8_t> file,
                       const core::Safetensors& st) {
    if (!opts_.yara) return;
    constexpr uint64_t kHeaderStart = 8;
    auto header = src.ReadVec(kHeaderStart, st.header_bytes);  // within limits: already parsed
    if (!header.ok()) {
      out_.io_error = true;
      out_.findings.push_back(FindingFromError(header.error()));
      return;
    }
    Yara(header.value(), "header", Place{}, kHeaderStart);
    std::string text;
    for (const auto& [k, v] : st.metadata) text += k + "\t" + v + "\n";
    std::vector<Finding> f;
    opts_.yara->Scan({reinterpret_cast<const uint8_t*>(text.data()), text.size()}, "metadata", &f);
    for (auto& x : f) {
      // Offsets in the decoded text are not file offsets: point at the
      // header, and skip what the raw header already showed.
      const bool seen = std::any_of(out_.findings.begin(), out_.findings.end(),
                                    [&](const Finding& y) { return y.id == x.id; });
      if (seen) continue;
      x.offset = kHeaderStart;
      out_.findings.push_back(std::move(x));
    }
    if (YaraAll() && st.data_start < file.size()) {
      Yara(file.subspan(static_cast<size_t>(st.data_start)), "data", Place{}, st.data_start);
    }
  }

  // YaraPickle runs the rules over each top-level stream ("pickle": what
  // the unpickler reads); what lies between and after them (raw storages,
  // joblib arrays) only for scope all.
  void YaraPickle(const PickleAnalysis& a, std::span<const uint8_t> bytes, uint64_t base,
                  const Place& at) {
    if (!opts_.yara) return;
    uint64_t covered = 0;
    for (const auto& st : a.streams) {
      if (st.depth != 0 || st.offset < base || st.end < st.offset) continue;
      const uint64_t from = st.offset - base;
      if (from >= bytes.size()) continue;
      const uint64_t n = std::min<uint64_t>(st.end - st.offset, bytes.size() - from);
      Yara(bytes.subspan(from, n), "pickle", at, st.offset);
      covered = std::max(covered, from + n);
    }
    if (YaraAll() && covered < bytes.size()) Yara(bytes.subspan(covered), "data", at, base + covered);
  }

  // Pickle analyzes `bytes`, which start `base` bytes into the file or
  // member that `at` names.
  void Pickle(std::span<const uint8_t> bytes, const Place& at, uint64_t base = 0) {
    PickleAnalysis a = AnalyzePickle(bytes, opts_.pickle, base);
    Keep(a, at);
    YaraPickle(a, bytes, base, at);
  }

  void Keep(const PickleAnalysis& a, const Place& at) {
    for (auto& f : PickleFindings(a)) {
      // One "pickle format" finding per file, however many streams it holds.
      if (f.id == "MG-PK-PICKLE-FORMAT" && pickle_format_reported_) continue;
      if (f.id == "MG-PK-PICKLE-FORMAT") pickle_format_reported_ = true;
      out_.findings.push_back(Placed(std::move(f), at));
    }
    for (const auto& imp : a.imports) out_.imports.push_back(FileScan::Import{at.member, imp});
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
    Yara(bytes.first(static_cast<size_t>(h->data_offset)), "header", at);
    if (h->has_object) {
      Pickle(bytes.subspan(static_cast<size_t>(h->data_offset)), at, h->data_offset);
      return;
    }
    if (YaraAll()) Yara(bytes.subspan(static_cast<size_t>(h->data_offset)), "data", at, h->data_offset);
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
    for (auto& x : f) out_.findings.push_back(Placed(std::move(x), at));
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
      const bool storage = IsTensorStorage(e.name);
      if (!is_pickle && !is_npy && !is_zip && (!opts_.yara || (storage && !YaraAll()))) continue;
      if (!whole && !Extract(src, e, at, &whole)) return;
      if (!whole) continue;
      Place inner{member, at.absolute && at.member.empty() && e.method == 0 ? e.data_offset : 0,
                  at.absolute && at.member.empty() && e.method == 0};
      if (!is_pickle && !is_npy && !is_zip) {
        // Neither pickle, npy nor archive: rules run over it as "member";
        // tensor storages only for scope all, as "data".
        Yara(*whole, storage ? "data" : "member", inner);
        continue;
      }
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

  // Decompressed analyzes what a compressed stream expands to, within the
  // per-stream and per-file caps.
  void Decompressed(std::span<const uint8_t> in, Codec codec, const Place& at, uint64_t depth) {
    DecompressLimits limits;
    const uint64_t budget = opts_.containers.max_total_decompressed_bytes > decompressed_
                                ? opts_.containers.max_total_decompressed_bytes - decompressed_
                                : 0;
    limits.max_output_bytes = std::min(opts_.containers.max_member_bytes, budget);
    limits.max_expansion_ratio = opts_.containers.max_expansion_ratio;
    std::vector<Finding> f;
    auto out = Decompress(in, codec, limits, &f, 0);
    for (auto& x : f) out_.findings.push_back(Placed(std::move(x), at));
    if (!out) {
      if (at.member.empty()) out_.unparseable = true;
      return;
    }
    decompressed_ += out->size();
    // What was decoded before any failure still reaches a streaming loader.
    const std::string inner = (at.member.empty() ? "" : at.member + "!") + "<" +
                              std::string(CodecName(codec)) + ">";
    Contents(*out, Place{inner, 0, false}, depth + 1);
  }

  // Tar analyzes a tar archive as Python's tarfile lists it; torch's legacy
  // tar is walked member by member as legacy_load reads it.
  void Tar(const Source& src, std::span<const uint8_t> whole, const Place& at, uint64_t depth) {
    std::vector<Finding> f;
    auto tr = ReadTar(src, TarLimits{}, &f);
    if (!tr.ok()) {
      out_.io_error = true;
      out_.findings.push_back(FindingFromError(tr.error()));
      return;
    }
    const TarArchive& tar = tr.value();
    for (auto& x : f) out_.findings.push_back(Placed(std::move(x), at));
    f.clear();
    if (tar.loader_fails) {
      // tarfile raises, so torch.load falls back to unpickling the file
      // from offset 0: analyze exactly that (for the file itself, the
      // pickle view does, claimed by this fallback).
      if (at.member.empty()) {
        torch_pickle_fallback_ = true;
        return;
      }
      Pickle(whole, at);
      return;
    }
    if (LooksLikeTorchTar(tar)) {
      if (at.member.empty()) out_.format = Format::kPytorchTar;
      TorchTarMembers m = FindTorchTarMembers(tar, &f);
      for (auto& x : f) out_.findings.push_back(Placed(std::move(x), at));
      f.clear();
      for (const TarMember* member : {m.storages, m.tensors, m.pickle}) {
        if (member == nullptr) continue;
        std::vector<uint8_t> bytes;
        if (!TarBytes(src, *member, at, &bytes)) return;
        TorchTarLayout layout = SplitTorchTarMember(member->name, bytes, member->data_offset, &f);
        for (auto& x : f) out_.findings.push_back(Placed(std::move(x), at));
        f.clear();
        const std::string name = (at.member.empty() ? "" : at.member + "!") + member->name;
        const Place inner{name, member->data_offset, at.absolute && at.member.empty()};
        for (const auto& p : layout.pickles) {
          Pickle(std::span<const uint8_t>(bytes).subspan(static_cast<size_t>(p.begin),
                                                         static_cast<size_t>(p.end - p.begin)),
                 inner, p.begin);
        }
      }
      return;
    }
    for (const auto& member : tar.members) {
      if (!member.HasData() || !member.data_in_bounds || member.size == 0) continue;
      std::vector<uint8_t> bytes;
      if (!TarBytes(src, member, at, &bytes)) return;
      const std::string name = (at.member.empty() ? "" : at.member + "!") + member.name;
      Contents(bytes, Place{name, member.data_offset, at.absolute && at.member.empty()}, depth + 1);
    }
  }

  // Contents analyzes bytes found inside a container by their own format.
  void Contents(std::span<const uint8_t> bytes, const Place& at, uint64_t depth) {
    if (depth >= opts_.containers.max_nesting_depth) {
      out_.findings.push_back(Placed(MakeFinding(
          "MG-ARCHIVE-LIMIT", Severity::kHigh,
          "containers nested deeper than " + std::to_string(opts_.containers.max_nesting_depth) +
              " (limit max_nesting_depth); not analyzed"), at));
      return;
    }
    const Format f = DetectFormat(bytes.first(std::min<size_t>(bytes.size(), kSniffBytes)),
                                  bytes.size(), "");
    MemorySource src(bytes);
    switch (f) {
      case Format::kPickle: Pickle(bytes, at); break;
      case Format::kNumpy: Npy(bytes, at); break;
      case Format::kZip: case Format::kPytorchZip: case Format::kNumpyZip:
        Zip(src, at, depth);
        break;
      case Format::kTar: Tar(src, bytes, at, depth); break;
      case Format::kGzip: Decompressed(bytes, Codec::kGzip, at, depth); break;
      case Format::kZlib: Decompressed(bytes, Codec::kZlib, at, depth); break;
      case Format::kBzip2: Decompressed(bytes, Codec::kBzip2, at, depth); break;
      case Format::kXz: Decompressed(bytes, Codec::kXz, at, depth); break;
      case Format::kLzma: Decompressed(bytes, Codec::kLzma, at, depth); break;
      case Format::kSevenZip:
        out_.findings.push_back(Placed(UnanalyzedArchiveFinding("7z"), at));
        break;
      default:
        Yara(bytes, "member", at);
        MaybePickle(bytes, at);
        break;
    }
  }

  // MaybePickle runs the pickle machine on bytes no loader's name claims as
  // a pickle (protocol 0 and 1 pickles have no magic). They are a pickle
  // view (findings kept) only when pickle.load would really run them:
  // PicklesLoad. With `claimed` (the file's name says a pickle loader reads
  // it) the findings are kept whatever the stream does.
  bool MaybePickle(std::span<const uint8_t> bytes, const Place& at, bool claimed = false) {
    PickleAnalysis a = AnalyzePickle(bytes, opts_.pickle, 0);
    if (!claimed && !PicklesLoad(a)) return false;
    Keep(a, at);
    YaraPickle(a, bytes, 0, at);
    return true;
  }

  // PicklesLoad: the analysis shows a stream that pickle.load would act on:
  // one that reaches STOP, or one that calls something or imports a
  // code-execution global before it breaks (the call has run by then).
  // Imports of names that merely fail to resolve, as text read as opcodes
  // yields ("certifi==1.0" read as GLOBAL), are not a pickle.
  static bool PicklesLoad(const PickleAnalysis& a) {
    for (const auto& st : a.streams) {
      if (st.depth == 0 && st.complete && st.opcode_count > 1) return true;
    }
    // A persistent id is not a call for pickle.load: without a
    // persistent_load it raises there (zip bytes read as opcodes start
    // with PERSID).
    for (const auto& c : a.calls) {
      if (c.opcode != "PERSID" && c.opcode != "BINPERSID") return true;
    }
    return std::any_of(a.imports.begin(), a.imports.end(),
                       [](const PickleImport& i) { return i.safety == GlobalClass::kCritical; });
  }

  // torch_pickle_fallback: the top-level tar view made tarfile raise, so
  // torch.load unpickles the file from offset 0 (the pickle view).
  bool torch_pickle_fallback() const { return torch_pickle_fallback_; }

  uint64_t decompressed() const { return decompressed_; }

 private:
  static uint64_t SaturatingMul(uint64_t a, uint64_t b) {
    uint64_t r;
    return __builtin_mul_overflow(a, b, &r) ? UINT64_MAX : r;
  }

  bool TarBytes(const Source& src, const TarMember& m, const Place& at, std::vector<uint8_t>* out) {
    if (m.size > opts_.containers.max_member_bytes) {
      out_.findings.push_back(Placed(MakeFinding(
          "MG-TAR-LIMIT", Severity::kHigh,
          "member " + core::Quoted(m.name) + " of " + std::to_string(m.size) +
              " bytes exceeds max_member_bytes; not analyzed", m.data_offset), at));
      return true;
    }
    auto b = ExtractTarMember(src, m, opts_.containers.max_member_bytes);
    if (!b.ok()) {
      if (b.error().code == core::Code::kStTruncated) return true;  // reported by ReadTar
      out_.io_error = true;
      out_.findings.push_back(FindingFromError(b.error()));
      return false;
    }
    *out = std::move(b).value();
    return true;
  }

  bool Extract(const Source& src, const ZipEntry& e, const Place& at,
               std::optional<std::vector<uint8_t>>* whole) {
    std::vector<Finding> f;
    auto m = ExtractZipMember(src, e, opts_.containers.max_member_bytes, &f);
    for (auto& x : f) out_.findings.push_back(Placed(std::move(x), at));
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
  bool pickle_format_reported_ = false;
  bool torch_pickle_fallback_ = false;
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


// --- loader models ---
// Which loaders a file name says will read the file. Loaders ignore names;
// people do not: a name is a claim, and the claimed loader's model always
// runs, so a file that fails it is rejected rather than called "unknown".
struct Claims {
  bool safetensors = false;  // .safetensors: safe_open / load_file
  bool torch = false;        // .pt .pth .bin .ckpt: torch.load
  bool pickle = false;       // .pkl .pickle .joblib: pickle.load / joblib.load
  bool numpy = false;        // .npy .npz: numpy.load(allow_pickle=True)
};

bool EndsWithNoCase(std::string_view s, std::string_view suffix) {
  if (s.size() < suffix.size()) return false;
  const std::string_view tail = s.substr(s.size() - suffix.size());
  for (size_t i = 0; i < tail.size(); ++i) {
    const char c = tail[i] >= 'A' && tail[i] <= 'Z' ? static_cast<char>(tail[i] - 'A' + 'a') : tail[i];
    if (c != suffix[i]) return false;
  }
  return true;
}

Claims ClaimsOf(std::string_view name) {
  Claims c;
  c.safetensors = EndsWithNoCase(name, ".safetensors");
  for (std::string_view ext : {".pt", ".pth", ".bin", ".ckpt"}) c.torch |= EndsWithNoCase(name, ext);
  for (std::string_view ext : {".pkl", ".pickle", ".joblib"}) c.pickle |= EndsWithNoCase(name, ext);
  for (std::string_view ext : {".npy", ".npz"}) c.numpy |= EndsWithNoCase(name, ext);
  return c;
}

bool HasPrefix(std::span<const uint8_t> b, std::string_view magic) {
  return b.size() >= magic.size() && std::memcmp(b.data(), magic.data(), magic.size()) == 0;
}

// kReferenceMaxHeaderBytes is the safetensors reference reader's
// MAX_HEADER_SIZE: a longer header is refused by every safetensors loader.
constexpr uint64_t kReferenceMaxHeaderBytes = 100'000'000;

// SafetensorsShaped: the reference reader would parse this file as
// safetensors, whatever its name: an 8-byte little-endian length N with
// 0 < N <= MAX_HEADER_SIZE and 8 + N <= size, and a header whose first
// byte after JSON whitespace is '{' (serde_json skips leading whitespace;
// the reference's "starts with {" check is commented out).
bool SafetensorsShaped(std::span<const uint8_t> file) {
  core::ByteReader r(file);
  auto n = r.U64Le();
  if (!n.ok() || n.value() == 0 || n.value() > kReferenceMaxHeaderBytes) return false;
  auto header = r.Take(n.value());
  if (!header.ok()) return false;
  for (uint8_t c : header.value()) {
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r') continue;
    return c == '{';
  }
  return false;
}

// LfsPointer: a git-lfs pointer file (spec v1: at most 1024 bytes, the
// first line names the spec) checked out instead of the weights.
std::optional<std::string> LfsPointer(std::span<const uint8_t> file) {
  constexpr uint64_t kMaxPointerBytes = 1024;
  if (file.size() > kMaxPointerBytes) return std::nullopt;
  const std::string_view text(reinterpret_cast<const char*>(file.data()), file.size());
  if (text.rfind("version https://git-lfs.github.com/spec/v1\n", 0) != 0 &&
      text.rfind("version https://hawser.github.com/spec/v1\n", 0) != 0) {
    return std::nullopt;
  }
  std::string size;
  const size_t at = text.find("\nsize ");
  if (at != std::string_view::npos) {
    const size_t end = text.find('\n', at + 1);
    size = std::string(text.substr(at + 6, (end == std::string_view::npos ? text.size() : end) - at - 6));
  }
  return size;
}

// ZipFormat names a zip at offset 0 by its first member, as before.
Format ZipFormat(std::span<const uint8_t> head) {
  const Format f = DetectFormat(head, head.size(), "");
  return f == Format::kPytorchZip || f == Format::kNumpyZip ? f : Format::kZip;
}

// Family groups view formats that are one reading of the bytes: two views
// of different families are two loaders seeing different files.
int Family(Format f) {
  switch (f) {
    case Format::kPytorchZip: case Format::kNumpyZip: case Format::kZip: return 1;
    case Format::kPytorchTar: case Format::kTar: return 2;
    case Format::kPickle: case Format::kJoblib: return 3;
    case Format::kGzip: case Format::kZlib: case Format::kBzip2: case Format::kXz:
    case Format::kLzma: return 4;
    default: return 10 + static_cast<int>(f);
  }
}

// FailClosed: a view that could not be completed (a limit ended it) leaves
// bytes unjudged, so the file is rejected whatever --fail-on says; the
// findings already made are all kept.
void FailClosedOnLimits(FileScan& out) {
  for (const auto& f : out.findings) {
    if (f.id.size() > 6 && f.id.compare(f.id.size() - 6, 6, "-LIMIT") == 0) {
      out.unparseable = true;
      return;
    }
  }
}

// JudgeLoaderViews asks the model of every loader in the threat model what
// it would deserialize from `file` and judges every view that a loader would
// accept (see docs/loader-models.md):
//   safetensors  the reference reader: SafetensorsShaped, or claimed by name
//   torch.load   zip magic at 0 -> its zip reader; else tarfile opens it ->
//                legacy tar members; else (or when tarfile raises) pickle at 0
//   numpy.load   npy magic -> header and object pickles; zip magic -> npz;
//                else (allow_pickle) pickle at 0
//   joblib.load  compressor magic -> the decompressed stream; else pickle at 0
//   pickle.load  pickle at 0
// Pickle at 0 is judged when a name claims it or when it would load
// (MaybePickle). Two views of different families are a polyglot.
void JudgeLoaderViews(Scanner& sc, const Source& src, std::span<const uint8_t> file,
                      std::string_view name, const ScanOptions& options, FileScan& out) {
  const Claims claim = ClaimsOf(name);
  const auto head = file.first(std::min<size_t>(file.size(), kSniffBytes));
  auto view = [&](std::string_view loader, Format f) {
    out.views.push_back(View{std::string(loader), "", 0, f});
  };

  if (auto lfs = LfsPointer(file)) {
    out.format = Format::kLfsPointer;
    out.unparseable = true;
    out.findings.push_back(MakeFinding(
        "MG-FMT-LFS-POINTER", Severity::kHigh,
        "a git-lfs pointer file" + (lfs->empty() ? std::string() : " (for " + *lfs + " bytes)") +
            ", not the weights: they were not fetched; run git lfs pull (actions/checkout: "
            "lfs: true)",
        0));
    return;
  }

  // safetensors (safe_open / load_file)
  // A view is added only where the loader would read the file; a claimed
  // safetensors that is not even shaped like one is still judged (and
  // rejected) by the core, without being a reading of the bytes.
  const bool st_shaped = SafetensorsShaped(file);
  if (st_shaped || claim.safetensors) {
    if (st_shaped) view("safetensors", Format::kSafetensors);
    auto st = core::ParseSafetensors(file, options.limits);
    if (st.ok()) {
      out.safetensors = std::move(st).value();
      sc.SafetensorsYara(src, file, *out.safetensors);
    } else {
      out.unparseable = true;
      out.findings.push_back(FindingFromError(st.error()));
    }
  }

  // torch.load / numpy.load of a zip, a legacy tar
  const bool zip0 = HasPrefix(head, "PK\x03\x04");
  const bool empty_zip0 = HasPrefix(head, "PK\x05\x06");  // numpy.load: an empty npz
  bool pickle_claimed = claim.pickle;
  if (zip0 || empty_zip0) {
    view(zip0 ? "torch.load" : "numpy.load", ZipFormat(head));
    sc.Zip(src, Place{}, 0);
  } else if (file.size() >= 512 && LooksLikeTar(head)) {
    sc.Tar(src, file, Place{}, 0);
    if (sc.torch_pickle_fallback()) {
      pickle_claimed |= claim.torch;
    } else {
      view("torch.load", out.format == Format::kPytorchTar ? Format::kPytorchTar : Format::kTar);
    }
  } else {
    pickle_claimed |= claim.torch;
  }
  if (sc.torch_pickle_fallback()) pickle_claimed = true;

  // numpy.load of an .npy
  const bool npy = HasPrefix(head, "\x93NUMPY");
  if (npy) {
    view("numpy.load", Format::kNumpy);
    sc.Npy(file, Place{});
  } else if (claim.numpy && !zip0 && !empty_zip0) {
    pickle_claimed = true;  // numpy.load(allow_pickle=True) unpickles the rest
  }

  // joblib.load of a compressed file
  if (auto codec = SniffCodec(head)) {
    const Format f = DetectFormat(head, file.size(), "");
    view("joblib.load", f);
    sc.Contents(file, Place{}, 0);
  } else if (HasPrefix(head, "7z\xbc\xaf\x27\x1c")) {
    view("7z", Format::kSevenZip);
    out.findings.push_back(UnanalyzedArchiveFinding("7z"));
  }

  // pickle.load at offset 0 (also torch.load's and numpy.load's fallback),
  // when it would run the bytes.
  if (sc.MaybePickle(file, Place{})) view("pickle.load", Format::kPickle);

  // Formats this version recognises but does not parse.
  if (out.views.empty() && !claim.safetensors &&
      (HasPrefix(head, "GGUF") || EndsWithNoCase(name, ".gguf"))) {
    view("gguf", Format::kGguf);
  }

  // A zip found from the end (self-extractor layout or a polyglot).
  if (!zip0 && !empty_zip0) {
    if (out.views.empty()) {
      std::vector<Finding> probe;
      auto zr = ReadZip(src, ZipLimits{}, &probe);
      if (zr.ok() && zr.value().directory_ok && !zr.value().entries.empty()) {
        view("zipfile", Format::kZip);
        sc.Zip(src, Place{}, 0);
      }
    } else {
      bool probe_zip = false;
      for (const auto& v : out.views) {
        probe_zip |= v.format == Format::kSafetensors || v.format == Format::kPickle ||
                     v.format == Format::kNumpy;
      }
      if (probe_zip) {
        out.format = out.views.front().format;
        sc.ZipPolyglot(src);
      }
    }
  }

  // A claimed pickle is judged even when it breaks at once, unless another
  // loader reads the file (then the claim only mismatches the content).
  if (out.views.empty() && pickle_claimed && sc.MaybePickle(file, Place{}, true)) {
    view("pickle.load", Format::kPickle);
  }

  if (out.views.empty() && claim.safetensors) {
    out.format = Format::kSafetensors;  // judged (and refused) by the core above
  } else if (out.views.empty()) {
    out.format = Format::kUnknown;
    out.findings.push_back(
        MakeFinding("MG-FMT-UNKNOWN", Severity::kInfo, "not a recognized model format"));
    if (sc.YaraAll()) sc.Yara(file, "data", Place{});
  } else {
    // The reported format: what the name claims when that loader reads the
    // file, else the first view.
    Format primary = out.views.front().format;
    for (const auto& v : out.views) {
      if ((claim.safetensors && v.format == Format::kSafetensors) ||
          ((claim.pickle || claim.torch) && Family(v.format) == 3)) {
        primary = v.format;
        break;
      }
    }
    if (Family(primary) == 3) {
      for (const auto& imp : out.imports) {
        if (imp.member.empty() && imp.pickle.module == "joblib.numpy_pickle") primary = Format::kJoblib;
      }
    }
    out.format = primary;
    for (const auto& v : out.views) {
      if (v.format == Format::kGguf) {
        if (sc.YaraAll()) sc.Yara(file, "data", Place{});
        out.findings.push_back(MakeFinding(
            "MG-FMT-NOT-ANALYZED", Severity::kMedium,
            "format " + std::string(FormatName(v.format)) + " is not analyzed by this version"));
      }
    }
  }

  // Two loaders, two readings of the same bytes.
  for (size_t i = 1; i < out.views.size(); ++i) {
    if (Family(out.views[i].format) == Family(out.views[0].format)) continue;
    std::string readings;
    for (const auto& v : out.views) {
      readings += (readings.empty() ? "" : "; ") + v.loader + " reads it as " +
                  std::string(FormatName(v.format));
    }
    out.findings.push_back(MakeFinding(
        "MG-POLY-LOADERS", Severity::kCritical,
        "a polyglot: " + readings + " (each reading is judged; the bytes mean different "
        "things to different loaders)", 0));
    break;
  }
  CheckExtension(out);
  FailClosedOnLimits(out);
}

}  // namespace

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
  JudgeLoaderViews(scanner, src, mapped.value().bytes(), BaseName(path), options, out);
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
