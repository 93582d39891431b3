// Shard sets: the set digest, signing every shard of an index with its set
// record, and checking the set records of verified shards (docs/stsig.md
// "Shard sets").
#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <set>

#include "internal.h"

namespace modelgate::signer {
namespace {

using core::Code;
using core::Error;
using core::kNoOffset;

constexpr std::string_view kSetMagic = "STSIG-SET/1\n";

void PutU64(core::Sha256Hasher& h, uint64_t v) {
  std::array<uint8_t, 8> b{};
  for (int i = 0; i < 8; ++i) b[static_cast<size_t>(i)] = static_cast<uint8_t>(v >> (8 * (7 - i)));
  h.Update(b);
}

std::string DirName(const std::string& path) {
  size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

std::string Short(const core::Sha256Digest& d) { return core::HexLower(d).substr(0, 16); }

// NoSymlinkBelow refuses a shard path whose directories under `dir` (the
// index's) are symlinks: what is signed must be the files the index's
// directory holds, not what a link points to. The final component is opened
// with O_NOFOLLOW.
core::Status NoSymlinkBelow(const std::string& dir, const std::string& name) {
  size_t slash = 0;
  while ((slash = name.find('/', slash)) != std::string::npos) {
    const std::string sub = dir + "/" + name.substr(0, slash);
    struct stat st {};
    if (::lstat(sub.c_str(), &st) != 0) {
      return Error{Code::kIoOpen, kNoOffset, "cannot stat " + sub + ": " + std::strerror(errno)};
    }
    if (!S_ISDIR(st.st_mode)) {
      return Error{Code::kIoNotRegular, kNoOffset, sub + " is not a directory (a symlink is not followed)"};
    }
    ++slash;
  }
  return core::OkStatus();
}

// Prepared is one shard read and hashed before anything is written.
struct Prepared {
  std::string path;
  core::Safetensors header;
  core::Sha256Digest content{};
  uint64_t dev = 0, ino = 0;
};

core::Result<core::Sha256Digest> ContentOfFile(const core::OpenedFile& f, const SignOptions& options,
                                               core::Safetensors* header_out) {
  auto parsed = core::ReadSafetensors(f.fd, f.size, options.limits);
  if (!parsed.ok()) return parsed.error();
  const core::Safetensors& st = parsed.value();
  std::vector<core::TensorView> by_name(st.tensors.begin(), st.tensors.end());
  std::sort(by_name.begin(), by_name.end(),
            [](const core::TensorView& a, const core::TensorView& b) { return a.name < b.name; });
  std::vector<core::ByteRange> ranges;
  for (const auto& t : by_name) ranges.push_back({t.file_begin(), t.size_bytes()});
  auto hashed = core::HashRanges(f.fd, ranges, options.hash);
  if (!hashed.ok()) return hashed.error();
  std::vector<TensorDigest> digests;
  for (size_t i = 0; i < by_name.size(); ++i) digests.emplace_back(by_name[i].name, hashed.value()[i]);
  auto d = ContentDigest(st, digests);
  if (!d.ok()) return d.error();
  *header_out = std::move(parsed).value();
  return d.value();
}

// WrittenContent is D of the signed file at `path` from its stsig digest map
// (header only: SignFile hashed the bytes it wrote).
core::Result<core::Sha256Digest> WrittenContent(const std::string& path, const core::Limits& limits) {
  auto f = core::OpenRegularFile(path, /*follow_symlink=*/false);
  if (!f.ok()) return f.error();
  auto st = core::ReadSafetensors(f.value().fd, f.value().size, limits);
  if (!st.ok()) return st.error();
  auto stsig = ParseStsig(st.value());
  if (!stsig.ok()) return stsig.error();
  return ContentDigest(st.value(), stsig.value().digests);
}

}  // namespace

core::Sha256Digest SetDigest(std::span<const core::Sha256Digest> contents, const core::ShardIndex& index) {
  core::Sha256Hasher h;
  h.Update(std::span(reinterpret_cast<const uint8_t*>(kSetMagic.data()), kSetMagic.size()));
  PutU64(h, contents.size());
  for (const auto& d : contents) h.Update(d);
  const std::vector<uint8_t> map = core::CanonicalWeightMap(index);
  PutU64(h, map.size());
  h.Update(map);
  return h.Final();
}

core::Result<std::string> FindShardIndex(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) {
    return Error{Code::kIoOpen, kNoOffset, "cannot stat " + path + ": " + std::strerror(errno)};
  }
  if (!S_ISDIR(st.st_mode)) return path;
  DIR* dir = ::opendir(path.c_str());
  if (dir == nullptr) {
    return Error{Code::kIoOpen, kNoOffset, "cannot open directory " + path + ": " + std::strerror(errno)};
  }
  std::vector<std::string> found;
  while (const dirent* e = ::readdir(dir)) {
    if (core::IsShardIndexName(e->d_name)) found.emplace_back(e->d_name);
  }
  ::closedir(dir);
  std::sort(found.begin(), found.end());
  if (found.size() != 1) {
    std::string names;
    for (const auto& n : found) names += (names.empty() ? "" : ", ") + core::Quoted(n);
    return Error{Code::kSigOptions, kNoOffset,
                 found.empty() ? "no *.safetensors.index.json in " + path +
                                     " (sign a single file by its name)"
                               : "several shard indexes in " + path + " (" + names +
                                     "): name the one to sign"};
  }
  return (path.size() > 1 && path.back() == '/' ? path.substr(0, path.size() - 1) : path) + "/" +
         found[0];
}

core::Result<SignSetResult> SignSet(const std::string& path, const PrivateKey& key,
                                    const SignOptions& options) {
  if (options.set) {
    return Error{Code::kSigOptions, kNoOffset, "a set's records are computed by SignSet: options.set must be unset"};
  }
  // SignFile refuses such a key too, but only after every shard was hashed.
  if (key.alg() != KeyAlg::kEd25519) {
    return Error{Code::kSigOptions, kNoOffset,
                 "embedded STSIG v1 signatures are Ed25519; sign an ECDSA key's models with "
                 "--detached"};
  }
  auto index_path = FindShardIndex(path);
  if (!index_path.ok()) return index_path.error();
  SignSetResult result;
  result.index_path = index_path.value();
  {
    auto f = core::OpenRegularFile(result.index_path, /*follow_symlink=*/false);
    if (!f.ok()) return f.error();
    auto index = core::ReadShardIndex(f.value().fd, f.value().size, options.limits);
    if (!index.ok()) return index.error();
    result.index = std::move(index).value();
  }
  const core::ShardIndex& index = result.index;
  const std::string dir = DirName(result.index_path);

  // Everything is read, hashed and checked before the first write.
  std::vector<Prepared> prepared(index.shards.size());
  std::set<std::pair<uint64_t, uint64_t>> inodes;
  core::ShardHeaders headers;
  for (size_t i = 0; i < index.shards.size(); ++i) {
    Prepared& p = prepared[i];
    p.path = dir + "/" + index.shards[i];
    core::Status below = NoSymlinkBelow(dir, index.shards[i]);
    if (!below.ok()) return below.error();
    if (struct stat st {}; ::lstat(p.path.c_str(), &st) != 0 && errno == ENOENT) {
      return Error{Code::kSetShardMissing, kNoOffset,
                   "shard " + core::Quoted(index.shards[i]) + " listed by " + result.index_path +
                       " does not exist"};
    }
    auto f = core::OpenRegularFile(p.path, /*follow_symlink=*/false);
    if (!f.ok()) return f.error();
    if (!inodes.emplace(f.value().dev, f.value().ino).second) {
      return Error{Code::kSigOptions, kNoOffset,
                   "shard " + core::Quoted(index.shards[i]) +
                       " is the same file as another shard of the index (a hard link)"};
    }
    p.dev = f.value().dev;
    p.ino = f.value().ino;
    auto d = ContentOfFile(f.value(), options, &p.header);
    if (!d.ok()) {
      Error e = d.error();
      e.message = p.path + ": " + e.message;
      return e;
    }
    p.content = d.value();
    core::Status same = core::CheckUnchanged(f.value());
    if (!same.ok()) return same.error();
  }
  for (size_t i = 0; i < prepared.size(); ++i) headers.emplace(index.shards[i], &prepared[i].header);
  std::vector<Error> problems = core::ShardSetErrors(index, headers);
  problems.erase(std::remove_if(problems.begin(), problems.end(),
                                [](const Error& e) { return e.code == Code::kSetTotalSize; }),
                 problems.end());
  if (!problems.empty()) {
    Error e = problems.front();
    e.message = "not signing a set the index does not describe: " + e.message +
                (problems.size() > 1 ? " (and " + std::to_string(problems.size() - 1) + " more)" : "");
    return e;
  }

  std::vector<core::Sha256Digest> contents;
  for (const Prepared& p : prepared) contents.push_back(p.content);
  result.digest = SetDigest(contents, index);

  const uint64_t n = prepared.size();
  for (uint64_t i = 0; i < n; ++i) {
    const Prepared& p = prepared[i];
    SignOptions so = options;
    so.set = SetRef{i, n, result.digest};
    auto signed_one = SignFile(p.path, key, so);
    core::Result<core::Sha256Digest> written =
        signed_one.ok() ? WrittenContent(p.path, options.limits) : core::Result<core::Sha256Digest>(signed_one.error());
    Error failure;
    if (!written.ok()) {
      failure = written.error();
    } else if (written.value() != p.content) {
      failure = Error{Code::kIoChanged, kNoOffset,
                      "its content changed while the set was being signed (content digest " +
                          Short(p.content) + "... became " + Short(written.value()) + "...)"};
    }
    if (failure.code != Code::kOk) {
      failure.message = "set signing stopped at shard " + core::Quoted(index.shards[i]) + " (" +
                        std::to_string(i + 1) + " of " + std::to_string(n) + "): " + failure.message +
                        "; " + std::to_string(i) + " shard(s) before it were signed with the new set, "
                        "the rest are unchanged: sign the set again to complete it";
      return failure;
    }
    result.shards.push_back(SignSetShard{p.path, *so.set, p.content, std::move(signed_one).value()});
  }
  return result;
}

std::vector<core::Error> CheckSet(const core::ShardIndex& index, const SetVerifications& verified) {
  const size_t n = index.shards.size();
  std::vector<std::optional<core::Sha256Digest>> contents(n);
  std::vector<std::vector<SetRef>> refs(n);
  std::vector<bool> valid(n, false);
  bool any_set = false;
  for (size_t i = 0; i < n; ++i) {
    auto it = verified.find(index.shards[i]);
    if (it == verified.end() || it->second == nullptr || !it->second->valid()) continue;
    const VerifyResult& v = *it->second;
    auto stsig = ParseStsig(v.file);
    if (!stsig.ok()) continue;
    auto d = ContentDigest(v.file, stsig.value().digests);
    if (!d.ok()) continue;
    valid[i] = true;
    contents[i] = d.value();
    for (const RecordCheck& rc : v.records) {
      if (rc.outcome != RecordCheck::Outcome::kVerified || !rc.record.set) continue;
      if (std::find(refs[i].begin(), refs[i].end(), *rc.record.set) == refs[i].end()) {
        refs[i].push_back(*rc.record.set);
      }
    }
    any_set |= !refs[i].empty();
  }
  std::vector<Error> out;
  auto add = [&](Code code, std::string message) { out.push_back(Error{code, kNoOffset, std::move(message)}); };
  std::optional<core::Sha256Digest> expected;
  if (std::all_of(contents.begin(), contents.end(), [](const auto& c) { return c.has_value(); })) {
    std::vector<core::Sha256Digest> ds;
    for (const auto& c : contents) ds.push_back(*c);
    expected = SetDigest(ds, index);
  } else if (any_set) {
    std::vector<std::string> absent;
    for (size_t i = 0; i < n; ++i) {
      if (!contents[i]) absent.push_back(core::Quoted(index.shards[i]));
    }
    std::string names;
    for (size_t i = 0; i < absent.size() && i < 10; ++i) names += (i ? ", " : "") + absent[i];
    if (absent.size() > 10) names += " and " + std::to_string(absent.size() - 10) + " more";
    add(Code::kSetIncomplete, "the shards are signed as a set, but " + names +
                                  (absent.size() == 1 ? " is" : " are") +
                                  " missing or did not verify: the set digest cannot be checked");
  }
  for (size_t i = 0; i < n; ++i) {
    const std::string shard = core::Quoted(index.shards[i]);
    if (valid[i] && refs[i].empty()) {
      add(Code::kSetNotSigned, "shard " + shard + " is signed without a set record: nothing ties it to "
                               "the other " + std::to_string(n - 1) + " shard(s) of the index");
    }
    for (const SetRef& r : refs[i]) {
      if (r.index != i || r.count != n) {
        add(Code::kSetPosition, "shard " + shard + " is signed as shard " + std::to_string(r.index + 1) +
                                    " of " + std::to_string(r.count) + ", but the index lists it as " +
                                    std::to_string(i + 1) + " of " + std::to_string(n));
      }
      if (expected && r.digest != *expected) {
        add(Code::kSetDigest, "shard " + shard + " was signed in a set with digest " + Short(r.digest) +
                                  "..., but these shards and this index give " + Short(*expected) +
                                  "...: a shard from another release, a renamed shard or an edited "
                                  "weight_map");
      }
    }
  }
  return out;
}

}  // namespace modelgate::signer
