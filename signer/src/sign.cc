// SignFile: STSIG v1 signing, streamed through a temp file beside the
// output so memory does not grow with the model.
#include <fcntl.h>
#include <sodium.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>

#include "internal.h"

namespace modelgate::signer {
namespace {

using core::Code;
using core::Error;
using core::kNoOffset;

std::string DirName(const std::string& path) {
  size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

Error IoError(Code code, const std::string& what, const std::string& path) {
  return Error{code, kNoOffset, what + " " + path + ": " + std::strerror(errno)};
}

// TempFile is a file created (0600, O_EXCL) beside the output; removed
// unless Commit() renamed it into place.
class TempFile {
 public:
  TempFile() = default;
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  ~TempFile() { Discard(); }

  core::Status Create(const std::string& out_path) {
    Discard();
    path_ = out_path + ".mg-tmp-XXXXXX";
    fd_ = ::mkostemp(path_.data(), O_CLOEXEC);
    if (fd_ < 0) {
      Error e = IoError(Code::kIoOpen, "cannot create a temp file beside", out_path);
      path_.clear();
      return e;
    }
    return core::OkStatus();
  }
  int fd() const { return fd_; }

  // Commit sets `mode`, fsyncs, and renames onto `out_path`, then fsyncs
  // the directory (best effort: the rename is already visible).
  core::Status Commit(const std::string& out_path, mode_t mode) {
    if (::fchmod(fd_, mode) != 0) return IoError(Code::kIoRead, "cannot chmod", path_);
    if (::fsync(fd_) != 0) return IoError(Code::kIoRead, "cannot fsync", path_);
    int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) return IoError(Code::kIoRead, "cannot close", path_);
    if (::rename(path_.c_str(), out_path.c_str()) != 0) {
      return IoError(Code::kIoOpen, "cannot rename onto", out_path);
    }
    path_.clear();
    int dfd = ::open(DirName(out_path).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
      (void)::fsync(dfd);
      ::close(dfd);
    }
    return core::OkStatus();
  }

  void Discard() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
    if (!path_.empty()) ::unlink(path_.c_str());
    path_.clear();
  }

 private:
  std::string path_;
  int fd_ = -1;
};

core::Status PwriteAll(int fd, std::span<const uint8_t> bytes, uint64_t offset) {
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::pwrite(fd, bytes.data() + done, bytes.size() - done,
                         static_cast<off_t>(offset + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      return Error{Code::kIoRead, offset + done, std::string("write failed: ") + std::strerror(errno)};
    }
    done += static_cast<size_t>(n);
  }
  return core::OkStatus();
}

// CopyRange copies `len` bytes from `in` at `in_off` to `out` at `out_off`:
// copy_file_range (in-kernel, may share extents), else pread/pwrite.
core::Status CopyRange(int in, uint64_t in_off, int out, uint64_t out_off, uint64_t len) {
  auto io = static_cast<loff_t>(in_off), oo = static_cast<loff_t>(out_off);
  uint64_t left = len;
  while (left > 0) {
    size_t chunk = static_cast<size_t>(std::min<uint64_t>(left, uint64_t{1} << 30));
    ssize_t n = ::copy_file_range(in, &io, out, &oo, chunk, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // unsupported here, or EOF: finish below
    left -= static_cast<uint64_t>(n);
  }
  std::vector<uint8_t> buffer;
  while (left > 0) {
    size_t chunk = static_cast<size_t>(std::min<uint64_t>(left, uint64_t{1} << 20));
    buffer.resize(chunk);
    core::Status r = core::PreadExact(in, static_cast<uint64_t>(io), buffer);
    if (!r.ok()) return r.error();
    core::Status w = PwriteAll(out, buffer, static_cast<uint64_t>(oo));
    if (!w.ok()) return w.error();
    io += static_cast<loff_t>(chunk);
    oo += static_cast<loff_t>(chunk);
    left -= chunk;
  }
  return core::OkStatus();
}

std::vector<uint8_t> LengthPrefixed(const std::string& header) {
  std::vector<uint8_t> out(8 + header.size());
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[static_cast<size_t>(i)] = static_cast<uint8_t>(n >> (8 * i));
  std::copy(header.begin(), header.end(), out.begin() + 8);
  return out;
}

// HeaderFor is the padded header for `st` with `records` and `digests`
// as its stsig.* values.
std::string HeaderFor(const core::Safetensors& st, std::span<const StsigRecord> records,
                      std::span<const TensorDigest> digests) {
  std::vector<std::pair<std::string, std::string>> meta;
  for (const auto& kv : st.metadata) {
    if (!internal::IsStsigKey(kv.first)) meta.push_back(kv);
  }
  meta.emplace_back(std::string(kStsigRecordsKey), internal::RecordsJson(records));
  meta.emplace_back(std::string(kStsigDigestsKey), internal::DigestsJson(digests));
  return internal::SerializeHeader(st, std::move(meta));
}

}  // namespace

core::Result<SignResult> SignFile(const std::string& path, const PrivateKey& key,
                                  const SignOptions& options, const std::string& out_path_arg) {
  core::Status init = internal::EnsureSodium();
  if (!init.ok()) return init.error();
  if (key.alg() != KeyAlg::kEd25519) {
    return Error{Code::kSigOptions, kNoOffset,
                 "embedded STSIG v1 signatures are Ed25519; sign an ECDSA key's models with "
                 "--detached"};
  }
  if (options.set && (options.set->count == 0 || options.set->index >= options.set->count)) {
    return Error{Code::kSigOptions, kNoOffset, "set index must be below set count"};
  }
  const std::string out_path = out_path_arg.empty() ? path : out_path_arg;

  auto opened = core::OpenRegularFile(path, /*follow_symlink=*/false);
  if (!opened.ok()) return opened.error();
  const core::OpenedFile& in = opened.value();
  struct stat in_stat {};
  if (::fstat(in.fd, &in_stat) != 0) return IoError(Code::kIoRead, "cannot stat", path);
  mode_t mode = in_stat.st_mode & 07777;
  struct stat out_stat {};
  if (out_path != path && ::stat(out_path.c_str(), &out_stat) == 0) mode = out_stat.st_mode & 07777;

  auto parsed = core::ReadSafetensors(in.fd, in.size, options.limits);
  if (!parsed.ok()) return parsed.error();
  const core::Safetensors& st = parsed.value();

  SignResult result;
  StsigRecord& mine = result.record;
  mine.kid = key.public_key().kid;
  mine.created = options.created ? *options.created : static_cast<uint64_t>(std::time(nullptr));
  mine.model = options.model;
  mine.version = options.version;
  mine.set = options.set;

  // Old records: re-signing with our key replaces ours; other keys'
  // records are kept when still valid for this content (co-signing).
  std::vector<StsigRecord> kept;
  std::vector<TensorDigest> old_digests;
  auto old = ParseStsig(st);
  if (old.ok()) {
    old_digests = old.value().digests;
    for (const StsigRecord& r : old.value().records) {
      bool keep = options.keep_cosignatures && r.kid != mine.kid && r.alg == kAlgEd25519 &&
                  std::none_of(kept.begin(), kept.end(), [&](auto& k) { return k.kid == r.kid; });
      if (keep) {
        for (const PublicKey& pk : options.cosigner_keys) {
          if (pk.kid != r.kid) continue;
          auto m = SignedMessage(st, r, old_digests);
          keep = m.ok() && crypto_sign_verify_detached(r.sig.data(), m.value().data(),
                                                       m.value().size(), pk.raw.data()) == 0;
        }
      }
      if (keep) {
        kept.push_back(r);
      } else {
        ++result.dropped_records;
      }
    }
  } else {
    ++result.dropped_records;  // malformed stsig.*: nothing in it can verify
  }

  std::vector<const core::TensorInfo*> by_name;
  for (const auto& t : st.tensors) by_name.push_back(&t);
  std::sort(by_name.begin(), by_name.end(), [](auto* a, auto* b) { return a->name < b->name; });

  for (int attempt = 0; attempt < 2; ++attempt) {
    std::vector<StsigRecord> records = kept;
    records.push_back(mine);
    std::sort(records.begin(), records.end(), [](const auto& a, const auto& b) { return a.kid < b.kid; });
    std::vector<TensorDigest> digests;
    digests.reserve(by_name.size());
    for (auto* t : by_name) digests.emplace_back(t->name, core::Sha256Digest{});

    // The header's length does not depend on digest or signature values
    // (fixed-width hex and base64), so the data's place is known now.
    const std::string layout = HeaderFor(st, records, digests);
    const uint64_t data_start = 8 + layout.size();

    TempFile tmp;
    core::Status s = tmp.Create(out_path);
    if (!s.ok()) return s.error();
    s = CopyRange(in.fd, st.data_start, tmp.fd(), data_start, st.data_bytes());
    if (!s.ok()) return s.error();

    // Hash the copy: the signature covers exactly the bytes written.
    std::vector<core::ByteRange> ranges;
    ranges.reserve(by_name.size());
    for (auto* t : by_name) ranges.push_back({data_start + t->begin, t->size_bytes()});
    auto hashed = core::HashRanges(tmp.fd(), ranges, options.hash);
    if (!hashed.ok()) return hashed.error();
    for (size_t i = 0; i < digests.size(); ++i) digests[i].second = hashed.value()[i];

    if (!kept.empty() && digests != old_digests) {
      // The old digest map does not describe these bytes: what the other
      // keys signed is not this content. Drop them and lay out again.
      result.dropped_records += kept.size();
      kept.clear();
      continue;
    }

    auto message = SignedMessage(st, mine, digests);
    if (!message.ok()) return message.error();
    mine.sig = key.Sign(message.value());
    for (auto& r : records) {
      if (r.kid == mine.kid) r.sig = mine.sig;
    }
    const std::string header = HeaderFor(st, records, digests);
    if (header.size() != layout.size()) {
      return Error{Code::kSigCrypto, kNoOffset, "internal: header length changed after signing"};
    }
    s = PwriteAll(tmp.fd(), LengthPrefixed(header), 0);
    if (!s.ok()) return s.error();
    s = tmp.Commit(out_path, mode);
    if (!s.ok()) return s.error();

    result.message = std::move(message).value();
    result.kept_records = kept.size();
    result.header_bytes = header.size();
    result.file_size = data_start + st.data_bytes();
    return result;
  }
  return Error{Code::kSigCrypto, kNoOffset, "internal: layout did not settle"};
}

}  // namespace modelgate::signer
