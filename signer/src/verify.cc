// VerifyFile: the header signature first, then every tensor's SHA-256 from
// the same fd, then the file's identity again.
#include <sodium.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "internal.h"

namespace modelgate::signer {
namespace {

using core::Code;
using core::Error;
using core::kNoOffset;

bool IsIoCode(Code c) {
  return c == Code::kIoOpen || c == Code::kIoRead || c == Code::kIoNotRegular ||
         c == Code::kIoChanged;
}

VerifyResult Judged(VerifyResult r, SigStatus status, Error reason) {
  r.status = status;
  r.reason = std::move(reason);
  return r;
}

std::string RecordName(size_t i, const StsigRecord& r, const std::string& key_name) {
  std::string s = "stsig.v1 record " + std::to_string(i) + " (kid " + core::HexLower(r.kid);
  if (!key_name.empty()) s += ", key " + core::Quoted(key_name);
  return s + ")";
}

}  // namespace

std::string_view SigStatusName(SigStatus status) {
  switch (status) {
    case SigStatus::kValid: return "valid";
    case SigStatus::kInvalid: return "invalid";
    case SigStatus::kMissing: return "missing";
    case SigStatus::kUntrusted: return "untrusted";
  }
  return "invalid";
}

namespace internal {

core::Result<VerifyResult> VerifyHeader(int fd, uint64_t file_size,
                                        std::span<const PublicKey> trusted,
                                        const VerifyOptions& options,
                                        std::vector<core::Sha256Digest>* digests) {
  core::Status init = internal::EnsureSodium();
  if (!init.ok()) return init.error();
  VerifyResult out;

  auto parsed = core::ReadSafetensors(fd, file_size, options.limits);
  if (!parsed.ok()) {
    if (IsIoCode(parsed.error().code)) return parsed.error();
    return Judged(std::move(out), SigStatus::kInvalid, parsed.error());  // unparseable: rejected
  }
  out.file = std::move(parsed).value();
  const core::Safetensors& st = out.file;

  auto stsig = ParseStsig(st);
  if (!stsig.ok()) return Judged(std::move(out), SigStatus::kInvalid, stsig.error());
  if (!stsig.value().present) {
    return Judged(std::move(out), SigStatus::kMissing,
                  Error{Code::kSigMissing, kNoOffset, "no STSIG signature (no stsig.* metadata)"});
  }
  const Stsig& sig = stsig.value();

  // Every record is judged; the first failure decides the reason. A record
  // that fails or cannot be understood makes the file invalid, whatever
  // the other records say.
  std::optional<Error> failure;
  for (size_t i = 0; i < sig.records.size(); ++i) {
    const StsigRecord& r = sig.records[i];
    RecordCheck check;
    check.record = r;
    for (size_t j = 0; j < i && !failure; ++j) {
      if (sig.records[j].kid == r.kid) {
        failure = Error{Code::kSigDuplicateKid, kNoOffset,
                        RecordName(i, r, "") + ": a second record by the same key"};
      }
    }
    const PublicKey* key = nullptr;
    for (const PublicKey& k : trusted) {
      // Embedded records are Ed25519: an ECDSA key in the list (it may be
      // there for detached bundles) is never this record's key.
      if (k.alg == KeyAlg::kEd25519 && k.kid == r.kid) {
        key = &k;
        break;
      }
    }
    if (key) check.key_name = key->name;
    if (r.alg != kAlgEd25519) {
      check.outcome = RecordCheck::Outcome::kUnknownAlg;
      if (!failure) {
        failure = Error{Code::kSigUnknownAlg, kNoOffset,
                        RecordName(i, r, check.key_name) + ": algorithm " + core::Quoted(r.alg) +
                            " is not allowed (allowed: ed25519)"};
      }
    } else if (key == nullptr) {
      check.outcome = RecordCheck::Outcome::kUntrusted;
    } else {
      auto m = SignedMessage(st, r, sig.digests);
      if (!m.ok()) return Judged(std::move(out), SigStatus::kInvalid, m.error());
      if (crypto_sign_verify_detached(r.sig.data(), m.value().data(), m.value().size(),
                                      key->raw.data()) == 0) {
        check.outcome = RecordCheck::Outcome::kVerified;
        out.verified_kids.push_back(core::HexLower(r.kid));
      } else {
        check.outcome = RecordCheck::Outcome::kBadSignature;
        if (!failure) {
          failure = Error{Code::kSigBadSignature, kNoOffset,
                          RecordName(i, r, check.key_name) +
                              ": signature does not verify over this header (a signed field, "
                              "tensor entry, metadata value or digest changed, or the record "
                              "belongs to another file)"};
        }
      }
    }
    out.records.push_back(std::move(check));
  }
  if (failure) return Judged(std::move(out), SigStatus::kInvalid, std::move(*failure));
  if (out.verified_kids.empty()) {
    std::string kids;
    for (const auto& r : sig.records) kids += (kids.empty() ? "" : ", ") + core::HexLower(r.kid);
    return Judged(std::move(out), SigStatus::kUntrusted,
                  Error{Code::kSigUntrusted, kNoOffset,
                        "no record by a trusted key (signed by kid " + kids + ")"});
  }

  // Signed digests in st.tensors order (ParseStsig checked the name sets are
  // equal, so every lookup succeeds; a miss is still reported, not assumed).
  digests->clear();
  digests->reserve(st.tensors.size());
  for (const auto& t : st.tensors) {
    auto it = std::lower_bound(sig.digests.begin(), sig.digests.end(), t.name,
                               [](const TensorDigest& d, std::string_view n) { return d.first < n; });
    if (it == sig.digests.end() || it->first != t.name) {
      Error missing{Code::kSigDigestMap, t.entry_offset,
                    "tensor " + core::Quoted(t.name) + " has no signed digest"};
      return Judged(std::move(out), SigStatus::kInvalid, std::move(missing));
    }
    digests->push_back(it->second);
  }
  out.status = SigStatus::kValid;
  out.reason = Error{};
  return out;
}

Error TensorMismatch(const core::TensorView& t, const core::Sha256Digest& got,
                     const core::Sha256Digest& want) {
  return Error{Code::kSigTensorMismatch, t.file_begin(),
               "tensor " + core::Quoted(t.name) + " bytes [" + std::to_string(t.file_begin()) +
                   ", " + std::to_string(t.file_end()) + ") hash to " + core::HexLower(got) +
                   ", signed digest is " + core::HexLower(want)};
}

bool FileIdentity::operator==(const FileIdentity& o) const {
  return dev == o.dev && ino == o.ino && size == o.size && mtime_sec == o.mtime_sec &&
         mtime_nsec == o.mtime_nsec && ctime_sec == o.ctime_sec && ctime_nsec == o.ctime_nsec;
}

core::Result<FileIdentity> IdentityOf(int fd) {
  struct stat s {};
  if (::fstat(fd, &s) != 0) {
    return Error{Code::kIoRead, kNoOffset, std::string("cannot stat: ") + std::strerror(errno)};
  }
  return FileIdentity{static_cast<uint64_t>(s.st_dev),        static_cast<uint64_t>(s.st_ino),
                      static_cast<uint64_t>(s.st_size),       static_cast<int64_t>(s.st_mtim.tv_sec),
                      static_cast<int64_t>(s.st_mtim.tv_nsec), static_cast<int64_t>(s.st_ctim.tv_sec),
                      static_cast<int64_t>(s.st_ctim.tv_nsec)};
}

core::Status CheckIdentity(int fd, const FileIdentity& expected, std::string_view when) {
  auto now = IdentityOf(fd);
  if (!now.ok()) return now.error();
  if (!(now.value() == expected)) {
    const FileIdentity& n = now.value();
    std::string what;
    if (n.dev != expected.dev || n.ino != expected.ino) what = "inode";
    if (n.size != expected.size) {
      what += std::string(what.empty() ? "" : ", ") + "size " + std::to_string(expected.size) +
              " -> " + std::to_string(n.size);
    }
    if (n.mtime_sec != expected.mtime_sec || n.mtime_nsec != expected.mtime_nsec) {
      what += std::string(what.empty() ? "" : ", ") + "mtime";
    }
    if (n.ctime_sec != expected.ctime_sec || n.ctime_nsec != expected.ctime_nsec) {
      what += std::string(what.empty() ? "" : ", ") + "ctime";
    }
    return Error{Code::kIoChanged, kNoOffset,
                 "file changed " + std::string(when) + " (" + what + ")"};
  }
  return core::OkStatus();
}

}  // namespace internal

core::Result<VerifyResult> VerifyFd(int fd, uint64_t file_size, std::span<const PublicKey> trusted,
                                    const VerifyOptions& options) {
  std::vector<core::Sha256Digest> signed_digests;
  auto checked = internal::VerifyHeader(fd, file_size, trusted, options, &signed_digests);
  if (!checked.ok() || !checked.value().valid()) return checked;
  VerifyResult out = std::move(checked).value();
  const core::Safetensors& st = out.file;

  // The header is authentic; now the bytes each tensor name points at.
  std::vector<core::ByteRange> ranges;
  ranges.reserve(st.tensors.size());
  for (const auto& t : st.tensors) ranges.push_back({t.file_begin(), t.size_bytes()});
  auto hashed = core::HashRanges(fd, ranges, options.hash);
  if (!hashed.ok()) return hashed.error();
  for (size_t i = 0; i < st.tensors.size(); ++i) {
    if (signed_digests[i] != hashed.value()[i]) {
      // Built before `out` is moved from (`st` refers into it).
      Error mismatch = internal::TensorMismatch(st.tensors[i], hashed.value()[i], signed_digests[i]);
      return Judged(std::move(out), SigStatus::kInvalid, std::move(mismatch));
    }
  }
  out.status = SigStatus::kValid;
  out.reason = Error{};
  return out;
}

core::Result<VerifyResult> VerifyFile(const std::string& path, std::span<const PublicKey> trusted,
                                      const VerifyOptions& options) {
  auto opened = core::OpenRegularFile(path, options.follow_symlink);
  if (!opened.ok()) return opened.error();
  const core::OpenedFile& f = opened.value();
  auto before = internal::IdentityOf(f.fd);
  if (!before.ok()) return before.error();
  auto result = VerifyFd(f.fd, f.size, trusted, options);
  if (!result.ok()) return result;
  core::Status same = internal::CheckIdentity(f.fd, before.value(), "while it was being verified");
  if (!same.ok()) return same.error();
  return result;
}

}  // namespace modelgate::signer
