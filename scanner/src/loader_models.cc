// Loader models: for each loader, the byte views it would deserialize, as
// its source decides them (docs/loader-models.md names the versions).
#include "loader_models.h"

#include "configs.h"
#include "formats.h"
#include "keras.h"
#include "onnx.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <exception>
#include <mutex>
#include <optional>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

namespace modelgate::scanner {

int FormatFamily(Format f) {
  switch (f) {
    case Format::kPytorchZip: case Format::kNumpyZip: case Format::kZip: case Format::kKeras:
      return 1;
    case Format::kPytorchTar: case Format::kTar: return 2;
    case Format::kPickle: case Format::kJoblib: return 3;
    case Format::kGzip: case Format::kZlib: case Format::kBzip2: case Format::kXz:
    case Format::kLzma: case Format::kZstd: case Format::kLz4: case Format::kJoblibZf: return 4;
    default: return 10 + static_cast<int>(f);
  }
}

}  // namespace modelgate::scanner

namespace modelgate::scanner::internal {
namespace {

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
      // joblib < 0.10 wrote its ZF container under any name it was given.
      {".pkl", {Format::kPickle, Format::kJoblib, Format::kJoblibZf}},
      {".pickle", {Format::kPickle, Format::kJoblib, Format::kJoblibZf}},
      // joblib.dump(compress=...): zlib, gzip, bz2, xz, and 'lzma' (the
      // lzma-alone format, joblib's LZMACompressorWrapper).
      {".joblib", {Format::kJoblib, Format::kPickle, Format::kZlib, Format::kGzip, Format::kBzip2,
                   Format::kXz, Format::kLzma, Format::kZstd, Format::kLz4, Format::kJoblibZf}},
      {".zst", {Format::kZstd}},
      {".lz4", {Format::kLz4}},
      {".7z", {Format::kSevenZip}},
      {".gguf", {Format::kGguf}},
      {".zip", {Format::kZip, Format::kPytorchZip, Format::kNumpyZip}},
      {".gz", {Format::kGzip}},
      {".json", {Format::kJson}},
      {".jinja", {Format::kJinja}},
      {".py", {Format::kPython}},
      {".onnx", {Format::kOnnx}},
      {".h5", {Format::kHdf5}},
      {".keras", {Format::kKeras}},
  };
  return rules;
}

bool MayCarryCode(Format f) {
  switch (f) {
    case Format::kSafetensors: case Format::kGguf: case Format::kUnknown: case Format::kOnnx:
    case Format::kJson:
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

// kOverlapYaraHeaderBytes: a mapped safetensors header this long or longer
// has its YARA pass on a second thread, beside the parse (below that, a
// thread costs more than it saves).
constexpr uint64_t kOverlapYaraHeaderBytes = 1ull << 20;

// BackgroundTask runs one task on a thread of its own and joins it at
// Join() or, on every path (an exception in the caller), at destruction.
// An exception in the task is rethrown by Join().
class BackgroundTask {
 public:
  BackgroundTask() = default;
  BackgroundTask(const BackgroundTask&) = delete;
  BackgroundTask& operator=(const BackgroundTask&) = delete;
  ~BackgroundTask() {
    if (thread_.joinable()) thread_.join();
  }
  // Start runs `task` on a new thread; false when no thread could be made
  // (the caller then runs it itself).
  template <typename F>
  bool Start(F task) {
    try {
      thread_ = std::thread([this, task]() mutable {
        try {
          task();
        } catch (...) {
          error_ = std::current_exception();
        }
      });
    } catch (const std::system_error&) {
      return false;
    }
    return true;
  }
  void Join() {
    if (!thread_.joinable()) return;
    thread_.join();
    if (error_) std::rethrow_exception(error_);
  }

 private:
  std::thread thread_;
  std::exception_ptr error_;
};

// Ticker calls one function every kTickMicros on a thread of its own, from
// Start() until it is destroyed.
class Ticker {
 public:
  static constexpr int kTickMicros = 500;
  Ticker() = default;
  Ticker(const Ticker&) = delete;
  Ticker& operator=(const Ticker&) = delete;
  ~Ticker() {
    if (!thread_.joinable()) return;
    {
      std::lock_guard<std::mutex> lock(m_);
      stop_ = true;
    }
    cv_.notify_one();
    thread_.join();
  }
  // Start: false when no thread could be made.
  template <typename F>
  bool Start(F tick) {
    try {
      thread_ = std::thread([this, tick] {
        std::unique_lock<std::mutex> lock(m_);
        while (!cv_.wait_for(lock, std::chrono::microseconds(kTickMicros), [this] { return stop_; })) {
          tick();
        }
      });
    } catch (const std::system_error&) {
      return false;
    }
    return true;
  }

 private:
  std::thread thread_;
  std::mutex m_;
  std::condition_variable cv_;
  bool stop_ = false;
};

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
}  // namespace

void JudgeLoaderViews(Scanner& sc, const Source& src, std::span<const uint8_t> file,
                      std::string_view name, const ScanOptions& options, FileScan& out,
                      const core::GuardedMapping* mapping) {
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
  std::optional<PickleAnalysis> file_pickle;
  // Drops a long safetensors header's pages while the views below read it
  // (from the parse to the end of this function).
  Ticker header_dropper;
  if (st_shaped || claim.safetensors) {
    if (st_shaped) view("safetensors", Format::kSafetensors);
    // pickle.load at 0 (judged below), the rules and the parse each read
    // the header once. Over a mapping of a header of
    // kOverlapYaraHeaderBytes or more, the rules run on a second thread
    // beside the parse, and a third drops the header's pages every tick
    // (issue 16): what stays resident is what the readers touched since the
    // last drop, never the whole header beside the tensor table; a page
    // read after a drop comes again from the page cache. The findings wait
    // for the parse either way.
    std::vector<Finding> header_yara;
    uint64_t n = 0;  // the header's length, when the rules can read it
    if (file.size() >= 8) {
      for (int i = 7; i >= 0; --i) n = (n << 8) | file[static_cast<size_t>(i)];
      if (n == 0 || n > options.limits.max_header_bytes || n > file.size() - 8) n = 0;
    }
    const bool overlap = mapping != nullptr && n >= kOverlapYaraHeaderBytes &&
                         header_dropper.Start([mapping, n] { mapping->ReleasePages(8, n); });
    BackgroundTask rules_task;  // the rules, the longest of the three, start first
    const bool rules_apart = overlap && rules_task.Start([&sc, file, n, &header_yara] {
      sc.SafetensorsHeaderYara(file, n, &header_yara, /*guarded=*/true);
    });
    if (mapping != nullptr) file_pickle = sc.FilePickle(file);
    if (!rules_apart && n > 0) sc.SafetensorsHeaderYara(file, n, &header_yara);
    if (mapping != nullptr) mapping->ReleasePages(8, n);
    core::HeaderReleaseFn release;
    if (rules_apart) {
      // The rules may be ahead of the parse: each MiB, drop all the header
      // (the ticker does too, but it may wait for a core on a busy machine).
      release = [mapping, n](uint64_t) { mapping->ReleasePages(8, n); };
    } else if (mapping != nullptr) {
      release = [mapping](uint64_t offset) { mapping->ReleasePages(8, offset - 8); };
    }
    auto st = core::ParseSafetensors(file, options.limits, release);
    rules_task.Join();
    if (mapping != nullptr) {
      mapping->ReleasePages(8, st.ok() ? st.value().header_bytes : n);
    }
    if (st.ok()) {
      out.safetensors = std::move(st).value();
      sc.SafetensorsYara(file, *out.safetensors, std::move(header_yara));
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
    if (EndsWithNoCase(name, ".keras")) {
      view("keras.saving.load_model", Format::kKeras);  // config.json judged as a member
    } else {
      view(zip0 ? "torch.load" : "numpy.load", ZipFormat(head));
    }
    sc.Zip(src, file, Place{}, 0);
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
    SevenZip(sc, file, Place{}, 0, out);
  }

  // pickle.load at offset 0 (also torch.load's and numpy.load's fallback),
  // when it would run the bytes.
  std::optional<PickleAnalysis> unkept_pickle;
  if (file_pickle ? sc.MaybePickleAnalyzed(std::move(*file_pickle), file, Place{}, false, &unkept_pickle)
                  : sc.MaybePickle(file, Place{}, false, &unkept_pickle)) {
    view("pickle.load", Format::kPickle);
  }

  // GGUF (llama.cpp, gguf-py: the magic at 0; a .gguf name is a claim).
  if (!claim.safetensors && (HasPrefix(head, "GGUF") || EndsWithNoCase(name, ".gguf"))) {
    view("gguf", Format::kGguf);
    JudgeGguf(sc, file, Place{}, out);
  }
  // ONNX has no magic: onnx.load / onnxruntime read what they are given,
  // so the name decides; content that does not parse is rejected.
  if (!claim.safetensors && EndsWithNoCase(name, ".onnx")) {
    view("onnx", Format::kOnnx);
    JudgeOnnx(sc, file, out);
  }
  // HDF5 (h5py, keras.models.load_model of an .h5): the superblock
  // signature at 0 or after a user block.
  // libhdf5 searches 0, 512, 1024, ... for the signature, so the whole
  // file is searched: a pickle in the user block is no hiding place.
  const bool hdf5 = !claim.safetensors && LooksLikeHdf5(file);
  if (!claim.safetensors &&
      (hdf5 || EndsWithNoCase(name, ".h5") || EndsWithNoCase(name, ".hdf5"))) {
    if (hdf5) view("h5py", Format::kHdf5);
    JudgeHdf5(sc, file, Place{}, out);  // a claimed .h5 that is not HDF5 fails here
  }

  // A zip found from the end (self-extractor layout or a polyglot).
  if (!zip0 && !empty_zip0) {
    if (out.views.empty()) {
      std::vector<Finding> probe;
      auto zr = ReadZip(src, ZipLimits{}, &probe);
      if (zr.ok() && zr.value().directory_ok && !zr.value().entries.empty()) {
        view("zipfile", Format::kZip);
        sc.Zip(src, file, Place{}, 0);
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
  if (out.views.empty() && pickle_claimed && unkept_pickle) {
    sc.KeepPickle(*unkept_pickle, file, 0, Place{});
    view("pickle.load", Format::kPickle);
  }

  // Configs, templates and code (configs.cc), by name: what json.load, a
  // Jinja sandbox or an import would read, when no model loader reads it.
  if (out.views.empty() && !claim.safetensors) {
    const std::string_view text(reinterpret_cast<const char*>(file.data()), file.size());
    switch (TextKindOf(name)) {
      case TextKind::kJson:
        view("json.load", Format::kJson);
        if (!JudgeJson(sc, file, name, 0, Place{}, ConfigLimits{}, out)) out.unparseable = true;
        break;
      case TextKind::kJinja:
        view("jinja2", Format::kJinja);
        JudgeTemplateText(sc, text, 0, name, Place{}, ConfigLimits{}, out);
        break;
      case TextKind::kPython:
        view("import", Format::kPython);
        JudgePython(sc, file, Place{}, out);
        break;
      case TextKind::kNone:
        break;
    }
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
          ((claim.pickle || claim.torch) && FormatFamily(v.format) == 3)) {
        primary = v.format;
        break;
      }
    }
    if (FormatFamily(primary) == 3) {
      for (const auto& imp : out.imports) {
        if (imp.member.empty() && imp.pickle.module == "joblib.numpy_pickle") primary = Format::kJoblib;
      }
    }
    out.format = primary;
  }

  // Two loaders, two readings of the same bytes.
  for (size_t i = 1; i < out.views.size(); ++i) {
    if (FormatFamily(out.views[i].format) == FormatFamily(out.views[0].format)) continue;
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


}  // namespace modelgate::scanner::internal
