// The C API's mg_open: finds a model's files and its signature (embedded
// STSIG records or a detached OMS bundle), opens each file once and hands
// the descriptor to the signer's loader, which verifies before it maps.
#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <stdexcept>
#include <thread>

#include "api_internal.h"
#include "modelgate/detached.h"
#include "modelgate/path.h"
#include "modelgate/shard_index.h"

namespace modelgate::api {
namespace {

namespace oms = signer::oms;
using core::Code;

using core::BaseName;
using core::EndsWith;
using core::JoinPath;
using oms::kBundleName;

std::string DirName(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

// Prefixed is a core error about `file`, its message naming the file.
ApiError About(const core::Error& e, const std::string& file) {
  ApiError out = FromCore(e, file);
  out.message = core::Quoted(file, 512) + ": " + out.message;
  return out;
}

ApiError Layout(const std::string& path, std::string message) {
  return Make(MG_ERR_FORMAT, "MG-API-LAYOUT", core::Quoted(path, 512) + ": " + message, path);
}

ApiError TooManyFiles(const std::string& path) {
  return Layout(path, "a model of more than " + std::to_string(kMaxModelFiles) +
                          " safetensors files (kMaxModelFiles)");
}

// Shape is what mg_open found at the path.
struct Shape {
  std::string dir;                  // the model's root: the directory, or the file's directory
  std::optional<std::string> index; // the shard index file, when there is one
  std::vector<std::string> files;   // the safetensors files (full paths), in load order
  bool single_file = false;         // the operand is one safetensors file
  std::string default_bundle;       // DIR/model.sig or FILE.sig
};

// Survey lstats `path` and lists a directory once. A symlink is refused
// (the loader opens nothing through one).
std::optional<ApiError> Survey(const std::string& path, Shape* shape) {
  struct stat sb {};
  if (::lstat(path.c_str(), &sb) != 0) {
    return About(core::Error{Code::kIoOpen, core::kNoOffset,
                             std::string("cannot open: ") + std::strerror(errno)},
                 path);
  }
  if (S_ISLNK(sb.st_mode)) {
    return About(core::Error{Code::kIoNotRegular, core::kNoOffset, "is a symlink"}, path);
  }
  if (S_ISREG(sb.st_mode)) {
    if (core::IsShardIndexName(BaseName(path))) {
      shape->dir = DirName(path);
      shape->index = path;
      shape->default_bundle = JoinPath(shape->dir, std::string(kBundleName));
    } else {
      shape->dir = DirName(path);
      shape->files.push_back(path);
      shape->single_file = true;
      shape->default_bundle = path + ".sig";
    }
    return std::nullopt;
  }
  if (!S_ISDIR(sb.st_mode)) {
    return About(core::Error{Code::kIoNotRegular, core::kNoOffset,
                             "is neither a regular file nor a directory"},
                 path);
  }
  shape->dir = path;
  shape->default_bundle = JoinPath(path, std::string(kBundleName));
  DIR* d = ::opendir(path.c_str());
  if (d == nullptr) {
    return About(core::Error{Code::kIoOpen, core::kNoOffset,
                             std::string("cannot list: ") + std::strerror(errno)},
                 path);
  }
  // Only what is loaded is kept: the first two index names (one is the
  // model, two an error) and at most kMaxModelFiles + 1 safetensors names.
  std::vector<std::string> indexes, tensors_files;
  size_t index_count = 0;
  for (errno = 0; dirent* e = ::readdir(d); errno = 0) {
    const std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    if (core::IsShardIndexName(name)) {
      if (++index_count <= 2) indexes.push_back(name);
    } else if (EndsWith(name, ".safetensors") && tensors_files.size() <= kMaxModelFiles) {
      tensors_files.push_back(name);
    }
  }
  const int read_errno = errno;
  ::closedir(d);
  if (read_errno != 0) {
    return About(core::Error{Code::kIoRead, core::kNoOffset,
                             std::string("cannot list: ") + std::strerror(read_errno)},
                 path);
  }
  if (index_count > 1) {
    std::sort(indexes.begin(), indexes.end());
    return Layout(path, "holds " + std::to_string(index_count) + " shard indexes (" +
                            core::Quoted(indexes[0]) + ", " + core::Quoted(indexes[1]) +
                            "): open the one to load");
  }
  if (indexes.size() == 1) {
    shape->index = JoinPath(path, indexes[0]);
    return std::nullopt;
  }
  if (tensors_files.empty()) return Layout(path, "holds no .safetensors file and no shard index");
  if (tensors_files.size() > kMaxModelFiles) return TooManyFiles(path);
  std::sort(tensors_files.begin(), tensors_files.end());
  for (const std::string& n : tensors_files) shape->files.push_back(JoinPath(path, n));
  return std::nullopt;
}

// IndexFile is the shard index read once from one descriptor.
struct IndexFile {
  std::vector<uint8_t> bytes;
  core::ShardIndex index;
};

// ReadIndexBytes reads the index file whole (bounded) from one descriptor.
std::optional<ApiError> ReadIndexBytes(const std::string& path, IndexFile* out) {
  auto opened = core::OpenRegularFile(path, false);
  if (!opened.ok()) return About(opened.error(), path);
  const core::OpenedFile& f = opened.value();
  if (f.size > core::kMaxIndexBytes) {
    return About(core::Error{Code::kSetLimit, core::kNoOffset,
                             "index is " + std::to_string(f.size) + " bytes, over the limit of " +
                                 std::to_string(core::kMaxIndexBytes)},
                 path);
  }
  out->bytes.resize(static_cast<size_t>(f.size));
  core::Status read = core::PreadExact(f.fd, 0, out->bytes);
  if (!read.ok()) return About(read.error(), path);
  core::Status same = core::CheckUnchanged(f);
  if (!same.ok()) return About(same.error(), path);
  return std::nullopt;
}

ApiError OmsError(oms::Reason why, std::string message, const std::string& file,
                  uint64_t offset = core::kNoOffset) {
  mg_status status = MG_ERR_VERIFY;
  switch (why) {
    case oms::Reason::kMalformed:
    case oms::Reason::kMediaType:
    case oms::Reason::kResourcePath:
    case oms::Reason::kDuplicate:
    case oms::Reason::kShardTiling:
    case oms::Reason::kLimit: status = MG_ERR_FORMAT; break;
    default: break;
  }
  return Make(status, oms::ReasonId(why), core::Quoted(file, 512) + ": " + message, file, offset);
}

// SignedRangesFor is what the bundle signed of the file `rel` of `size`
// bytes: its ranges with their digests, tiling the file. A file the
// manifest does not list (or ignores) is unsigned; one listed with other
// ranges (shards mode: another size) changed.
std::optional<ApiError> SignedRangesFor(const oms::Manifest& m, const std::string& rel,
                                        uint64_t size, const std::string& file,
                                        std::vector<signer::SignedRange>* out) {
  std::vector<const oms::Resource*> listed;
  if (!oms::IsIgnored(m, rel)) {
    for (const oms::Resource& r : m.resources) {
      if (r.path == rel) listed.push_back(&r);
    }
  }
  if (listed.empty()) {
    return OmsError(oms::Reason::kFileUnsigned,
                    "file " + core::Quoted(rel) + " is not covered by the detached signature",
                    file);
  }
  const std::vector<core::ByteRange> ranges = oms::RangesToHash(m, rel, size);
  bool same = ranges.size() == listed.size();
  if (same && m.method == oms::Method::kShards) {
    for (size_t k = 0; k < ranges.size(); ++k) {
      same = same && listed[k]->begin == ranges[k].offset &&
             listed[k]->end - listed[k]->begin == ranges[k].size_bytes;
    }
  }
  if (!same) {
    return OmsError(oms::Reason::kFileChanged,
                    "file " + core::Quoted(rel) + " changed since it was signed (" +
                        std::to_string(size) + " bytes, not the size signed)",
                    file);
  }
  out->clear();
  for (size_t k = 0; k < ranges.size(); ++k) out->push_back({ranges[k], listed[k]->digest});
  return std::nullopt;
}

// Detached is the verified bundle of a model and where its files lie in it.
struct Detached {
  std::string path;
  oms::LoadedBundle loaded;
  const oms::Manifest& manifest() const { return loaded.bundle->manifest; }
};

std::optional<ApiError> LoadVerifiedBundle(const std::string& path, bool named,
                                           std::span<const signer::PublicKey> keys,
                                           Detached* out) {
  out->path = path;
  auto loaded = oms::LoadBundle(path, keys);
  if (!loaded.ok()) {
    if (!named && loaded.error().code == Code::kIoNotRegular) {
      // Found where the bundle belongs, not named by the caller: a link or
      // special file there is the model's fault, an invalid bundle.
      return OmsError(oms::Reason::kMalformed, "the bundle " + loaded.error().message, path);
    }
    return About(loaded.error(), path);
  }
  out->loaded = std::move(loaded).value();
  const oms::BundleVerdict& v = out->loaded.verdict;
  if (v.status != signer::SigStatus::kValid || !out->loaded.bundle) {
    const oms::Reason why = v.why == oms::Reason::kNone ? oms::Reason::kMalformed : v.why;
    return OmsError(why, v.reason.message, path);
  }
  return std::nullopt;
}

// RelInModel is `file`'s resource name in the bundle: "." for a model that
// is one file signed alone, else its path relative to the model root (for
// one file, the directory of the bundle that signed its directory).
std::string RelInModel(const Shape& shape, const std::string& file, const Detached& detached) {
  if (shape.single_file) {
    for (const oms::Resource& r : detached.manifest().resources) {
      if (r.path == ".") return ".";
    }
    const std::string rel = oms::RelInside(DirName(detached.path), file);
    return rel.empty() ? "." : rel;
  }
  const std::string prefix = shape.dir.back() == '/' ? shape.dir : shape.dir + "/";
  return file.substr(0, prefix.size()) == prefix ? file.substr(prefix.size()) : file;
}

// SetRefsAgree judges the set records of a directory's files when there is
// no index to recompute the set digest from: files that carry one must all
// carry one, of one set (digest, count), in distinct places, and be all of
// it. Several files none of which carries one are refused: each signature
// speaks for its own file only, so nothing says they belong to one model
// (a file of another release or another model signed by the same key could
// be added or swapped in, and its tensors would be loaded with the rest).
std::optional<ApiError> SetRefsAgree(const std::vector<mg_model::File>& files) {
  std::vector<std::optional<signer::SetRef>> refs;
  bool any = false;
  for (const mg_model::File& f : files) {
    std::optional<signer::SetRef> ref;
    for (const signer::RecordCheck& rc : f.model->verification().records) {
      if (rc.outcome == signer::RecordCheck::Outcome::kVerified && rc.record.set) ref = rc.record.set;
    }
    any = any || ref.has_value();
    refs.push_back(ref);
  }
  if (!any) {
    return About(core::Error{Code::kSetNotSigned, core::kNoOffset,
                             std::to_string(files.size()) +
                                 " separately signed .safetensors files and no index: no "
                                 "signature binds them into one model (sign them as a set with "
                                 "an index, or the directory with a detached bundle, or open "
                                 "each file by its path)"},
                 DirName(files[0].path));
  }
  std::set<uint64_t> places;
  for (size_t i = 0; i < files.size(); ++i) {
    const std::string& path = files[i].path;
    if (!refs[i]) {
      return About(core::Error{Code::kSetNotSigned, core::kNoOffset,
                               "signed without a set record, beside shards of a signed set"},
                   path);
    }
    if (refs[i]->digest != refs[0]->digest) {
      return About(core::Error{Code::kSetDigest, core::kNoOffset,
                               "a shard of another signed set than " + core::Quoted(BaseName(files[0].path))},
                   path);
    }
    if (refs[i]->count != files.size() || !places.insert(refs[i]->index).second) {
      return About(core::Error{Code::kSetIncomplete, core::kNoOffset,
                               "shard " + std::to_string(refs[i]->index) + " of a set of " +
                                   std::to_string(refs[i]->count) + ", among " +
                                   std::to_string(files.size()) +
                                   " files and no index: open the set's index"},
                   path);
    }
  }
  return std::nullopt;
}

std::string Utf8(std::string_view s) { return core::EscapeInvalidUtf8(s); }

std::string KeyName(std::span<const signer::PublicKey> keys, const std::string& kid) {
  for (const signer::PublicKey& k : keys) {
    if (k.kid_hex() == kid) return k.name;
  }
  return "";
}

std::string VerificationJson(const mg_model& model, mg_mode mode,
                             std::span<const signer::PublicKey> keys, const Detached* detached) {
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  j["kind"] = detached != nullptr ? "detached" : "embedded";
  j["mode"] = mode == MG_MODE_LAZY ? "lazy" : mode == MG_MODE_COPY ? "copy" : "eager";
  nlohmann::ordered_json key_list = nlohmann::ordered_json::array();
  std::set<std::string> seen;
  auto add_key = [&](const std::string& kid, const std::string& name) {
    if (!seen.insert(kid).second) return;
    key_list.push_back({{"name", Utf8(name)}, {"key_id", kid}});
  };
  nlohmann::ordered_json model_name = nullptr, version = nullptr;
  if (detached != nullptr) {
    const oms::BundleVerdict& v = detached->loaded.verdict;
    for (size_t i = 0; i < v.kids.size(); ++i) {
      add_key(v.kids[i], i < v.key_names.size() ? v.key_names[i] : KeyName(keys, v.kids[i]));
    }
    if (!detached->manifest().subject_name.empty()) {
      model_name = Utf8(detached->manifest().subject_name);
    }
    if (detached->manifest().version) version = *detached->manifest().version;
  } else {
    for (const mg_model::File& f : model.files) {
      for (const signer::RecordCheck& rc : f.model->verification().records) {
        if (rc.outcome != signer::RecordCheck::Outcome::kVerified) continue;
        const std::string kid = core::HexLower(rc.record.kid);
        add_key(kid, rc.key_name.empty() ? KeyName(keys, kid) : rc.key_name);
        // As the reports: an empty model name and version 0 are "none".
        if (model_name.is_null() && !rc.record.model.empty()) model_name = Utf8(rc.record.model);
        if (version.is_null() && rc.record.version != 0) version = rc.record.version;
      }
    }
  }
  j["keys"] = std::move(key_list);
  j["model"] = std::move(model_name);
  j["version"] = std::move(version);
  if (detached != nullptr) {
    j["bundle"] = {{"path", Utf8(detached->path)},
                   {"sha256", detached->loaded.sha256 ? nlohmann::ordered_json(core::HexLower(
                                                            *detached->loaded.sha256))
                                                      : nlohmann::ordered_json(nullptr)}};
  } else {
    j["bundle"] = nullptr;
  }
  nlohmann::ordered_json files = nlohmann::ordered_json::array();
  for (const mg_model::File& f : model.files) {
    files.push_back({{"path", Utf8(f.path)},
                     {"sha256", f.sha256 ? nlohmann::ordered_json(core::HexLower(*f.sha256))
                                         : nlohmann::ordered_json(nullptr)}});
  }
  j["files"] = std::move(files);
  return j.dump();
}

// LoadOne opens `file` once and verifies it (embedded, or against the
// bundle's ranges for it); on failure *err says why and nothing is kept.
std::optional<mg_model::File> LoadOne(const Shape& shape, bool from_index,
                                      const Detached* detached,
                                      std::span<const signer::PublicKey> keys,
                                      const signer::LoadOptions& load, const std::string& file,
                                      std::optional<ApiError>* err) {
  mg_model::File f;
  f.path = file;
  auto opened = core::OpenRegularFile(file, false);
  if (!opened.ok()) {
    *err = About(opened.error(), file);
    struct stat sb {};
    if (from_index && ::lstat(file.c_str(), &sb) != 0 && errno == ENOENT) {
      *err = About(core::Error{Code::kSetShardMissing, core::kNoOffset,
                               "shard listed by the index is missing"},
                   file);
    }
    return std::nullopt;
  }
  signer::LoadOptions one = load;
  if (detached != nullptr) {
    std::vector<signer::SignedRange> ranges;
    if (auto e = SignedRangesFor(detached->manifest(), RelInModel(shape, file, *detached),
                                 opened.value().size, file, &ranges)) {
      *err = std::move(e);
      return std::nullopt;
    }
    if (detached->manifest().method == oms::Method::kFiles && ranges.size() == 1) {
      f.sha256 = ranges[0].digest;
    }
    one.detached = std::move(ranges);
  }
  auto verified = signer::OpenVerifiedFile(std::move(opened).value(), file, keys, one);
  if (!verified.ok()) {
    if (detached != nullptr && verified.error().code == Code::kSigTensorMismatch) {
      *err = OmsError(oms::Reason::kFileChanged,
                      "changed since it was signed: " + verified.error().message, file,
                      verified.error().offset);
    } else {
      *err = About(verified.error(), file);
    }
    return std::nullopt;
  }
  f.model = std::make_unique<signer::VerifiedModel>(std::move(verified).value());
  for (const auto& kv : f.model->header().metadata) {
    if (kv.first.compare(0, signer::kStsigPrefix.size(), signer::kStsigPrefix) != 0) {
      f.metadata.push_back(kv);
    }
  }
  return f;
}

}  // namespace

std::unique_ptr<mg_model> OpenModel(const std::string& path, const mg_keyring& keyring,
                                    const mg_open_options& opts, ApiError* err) {
  auto fail = [&](ApiError e) -> std::unique_ptr<mg_model> {
    *err = std::move(e);
    return nullptr;
  };
  const std::span<const signer::PublicKey> keys = keyring.keys;
  Shape shape;
  if (auto e = Survey(path, &shape)) return fail(*e);

  // Which signature: a bundle named, or found where it belongs, is used
  // alone (never a fallback to embedded records when it fails).
  std::optional<std::string> bundle_path;
  bool named = false;
  if (opts.signature != MG_SIGNATURE_EMBEDDED) {
    if (opts.bundle_path != nullptr) {
      bundle_path = opts.bundle_path;
      named = true;
    } else {
      struct stat sb {};
      if (::lstat(shape.default_bundle.c_str(), &sb) == 0) bundle_path = shape.default_bundle;
    }
    if (!bundle_path && opts.signature == MG_SIGNATURE_DETACHED) {
      return fail(Make(MG_ERR_VERIFY, "MG-API-NO-BUNDLE",
                       core::Quoted(shape.default_bundle, 512) +
                           ": no detached signature bundle (MG_SIGNATURE_DETACHED requires one)",
                       shape.default_bundle));
    }
  }
  std::optional<Detached> detached;
  if (bundle_path) {
    detached.emplace();
    if (auto e = LoadVerifiedBundle(*bundle_path, named, keys, &*detached)) return fail(*e);
  }

  signer::LoadOptions load;
  load.mode = opts.mode == MG_MODE_LAZY  ? signer::LoadMode::kLazy
              : opts.mode == MG_MODE_COPY ? signer::LoadMode::kCopy
                                          : signer::LoadMode::kEager;
  load.writable = (opts.flags & MG_OPEN_WRITABLE) != 0;
  load.verify.hash.threads = opts.hash_threads;

  // The index: read once; under a bundle its bytes must be the signed
  // ones before they are parsed (a changed index is changed, whatever its
  // new bytes break).
  std::optional<IndexFile> index;
  if (shape.index) {
    index.emplace();
    if (auto e = ReadIndexBytes(*shape.index, &*index)) return fail(*e);
    if (detached) {
      std::vector<signer::SignedRange> ranges;
      const std::string rel = RelInModel(shape, *shape.index, *detached);
      if (auto e = SignedRangesFor(detached->manifest(), rel, index->bytes.size(), *shape.index,
                                   &ranges)) {
        return fail(*e);
      }
      for (const signer::SignedRange& r : ranges) {
        const auto got = core::Sha256(std::span<const uint8_t>(
            index->bytes.data() + r.range.offset, static_cast<size_t>(r.range.size_bytes)));
        if (got != r.digest) {
          return fail(OmsError(oms::Reason::kFileChanged,
                               "file " + core::Quoted(rel) + " changed since it was signed",
                               *shape.index, r.range.offset));
        }
      }
    }
    auto parsed = core::ParseShardIndex(index->bytes, load.verify.limits);
    if (!parsed.ok()) return fail(About(parsed.error(), *shape.index));
    index->index = std::move(parsed).value();
    if (index->index.shards.size() > kMaxModelFiles) return fail(TooManyFiles(*shape.index));
    for (const std::string& shard : index->index.shards) shape.files.push_back(JoinPath(shape.dir, shard));
  }

  auto model = std::make_unique<mg_model>();
  model->detached = detached.has_value();
  model->hash_threads = opts.hash_threads;
  // Files are verified in parallel (a detached file's one digest is one
  // sequential SHA-256, so many shards need many threads); the error
  // reported is the first file's in load order, as a sequential run gives.
  const size_t n = shape.files.size();
  const unsigned threads = OuterThreads(opts.hash_threads, n);
  signer::LoadOptions per_file = load;
  per_file.verify.hash.threads = std::max(1u, HashThreads(opts.hash_threads) / threads);
  std::vector<std::optional<mg_model::File>> loaded(n);
  std::vector<std::optional<ApiError>> errors(n);
  // A worker must not throw (std::terminate): an exception is remembered
  // here, without allocating, and becomes MG_ERR_INTERNAL below.
  std::vector<char> threw(n, 0);
  std::atomic<size_t> next{0}, first_failed{SIZE_MAX};
  auto work = [&]() noexcept {
    for (size_t i = next.fetch_add(1); i < n; i = next.fetch_add(1)) {
      if (i > first_failed.load()) continue;  // a file before it failed: not needed
      try {
        loaded[i] = LoadOne(shape, index.has_value(), detached ? &*detached : nullptr, keys,
                            per_file, shape.files[i], &errors[i]);
      } catch (...) {
        threw[i] = 1;
      }
      if (errors[i] || threw[i]) {
        size_t seen = first_failed.load();
        while (i < seen && !first_failed.compare_exchange_weak(seen, i)) {
        }
      }
    }
  };
  RunOnThreads(threads, work);
  for (size_t i = 0; i < n; ++i) {
    if (threw[i]) throw std::runtime_error("verifying " + shape.files[i] + " failed");
    if (errors[i]) return fail(*errors[i]);
    model->files.push_back(std::move(*loaded[i]));
  }

  // The set: the shards against the index (both signed, or covered by the
  // bundle), and embedded set records against each other.
  if (index) {
    core::ShardHeaders headers;
    signer::SetVerifications verifications;
    for (size_t i = 0; i < model->files.size(); ++i) {
      const std::string& name = index->index.shards[i];
      headers[name] = &model->files[i].model->header();
      verifications[name] = &model->files[i].model->verification();
    }
    for (const core::Error& e : core::ShardSetErrors(index->index, headers)) {
      // No loader reads metadata.total_size.
      if (e.code != Code::kSetTotalSize) return fail(About(e, *shape.index));
    }
    if (!detached) {
      std::vector<core::Error> set_errors = signer::CheckSet(index->index, verifications);
      if (!set_errors.empty()) return fail(About(set_errors[0], *shape.index));
    }
  } else if (!detached && model->files.size() > 1) {
    if (auto e = SetRefsAgree(model->files)) return fail(*e);
  }

  // Tensors across the files, by name; a name twice is two tensors a
  // loader would pick between.
  for (size_t fi = 0; fi < model->files.size(); ++fi) {
    const core::Safetensors& st = model->files[fi].model->header();
    for (size_t ti = 0; ti < st.tensors.size(); ++ti) {
      const core::TensorView t = st.tensors[ti];
      mg_model::Tensor out;
      out.name = t.name;
      out.dtype = std::string(core::DtypeName(t.dtype));
      out.dtype_bits = core::DtypeBits(t.dtype);
      out.shape = t.shape;
      out.byte_length = t.size_bytes();
      out.file_index = fi;
      out.index_in_file = ti;
      model->tensors.push_back(std::move(out));
    }
  }
  std::sort(model->tensors.begin(), model->tensors.end(),
            [](const mg_model::Tensor& a, const mg_model::Tensor& b) { return a.name < b.name; });
  for (size_t i = 1; i < model->tensors.size(); ++i) {
    if (model->tensors[i].name == model->tensors[i - 1].name) {
      const std::string& a = model->files[model->tensors[i - 1].file_index].path;
      const std::string& b = model->files[model->tensors[i].file_index].path;
      return fail(About(core::Error{Code::kSetTensorDuplicate, core::kNoOffset,
                                    "tensor " + core::Quoted(model->tensors[i].name) +
                                        " is also in " + core::Quoted(a, 512)},
                        b));
    }
  }
  model->verification_json =
      VerificationJson(*model, opts.mode, keys, detached ? &*detached : nullptr);
  return model;
}

}  // namespace modelgate::api
