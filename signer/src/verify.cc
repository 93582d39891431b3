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

struct Identity {
  dev_t dev;
  ino_t ino;
  off_t size;
  timespec mtime, ctime;
  bool operator==(const Identity& o) const {
    return dev == o.dev && ino == o.ino && size == o.size && mtime.tv_sec == o.mtime.tv_sec &&
           mtime.tv_nsec == o.mtime.tv_nsec && ctime.tv_sec == o.ctime.tv_sec &&
           ctime.tv_nsec == o.ctime.tv_nsec;
  }
};

core::Result<Identity> IdentityOf(int fd) {
  struct stat s {};
  if (::fstat(fd, &s) != 0) {
    return Error{Code::kIoRead, kNoOffset, std::string("cannot stat: ") + std::strerror(errno)};
  }
  return Identity{s.st_dev, s.st_ino, s.st_size, s.st_mtim, s.st_ctim};
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

core::Result<VerifyResult> VerifyFd(int fd, uint64_t file_size, std::span<const PublicKey> trusted,
                                    const VerifyOptions& options) {
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
      if (k.kid == r.kid) {
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

  // The header is authentic; now the bytes each tensor name points at.
  std::vector<core::ByteRange> ranges;
  ranges.reserve(st.tensors.size());
  for (const auto& t : st.tensors) ranges.push_back({t.file_begin(), t.size_bytes()});
  auto hashed = core::HashRanges(fd, ranges, options.hash);
  if (!hashed.ok()) return hashed.error();
  for (size_t i = 0; i < st.tensors.size(); ++i) {
    const core::TensorInfo& t = st.tensors[i];
    auto it = std::lower_bound(sig.digests.begin(), sig.digests.end(), t.name,
                               [](const TensorDigest& d, const std::string& n) { return d.first < n; });
    if (it == sig.digests.end() || it->first != t.name) {  // ParseStsig rules this out
      return Judged(std::move(out), SigStatus::kInvalid,
                    Error{Code::kSigDigestMap, t.entry_offset,
                          "tensor " + core::Quoted(t.name) + " has no signed digest"});
    }
    if (it->second != hashed.value()[i]) {
      return Judged(std::move(out), SigStatus::kInvalid,
                    Error{Code::kSigTensorMismatch, t.file_begin(),
                          "tensor " + core::Quoted(t.name) + " bytes [" + std::to_string(t.file_begin()) +
                              ", " + std::to_string(t.file_end()) + ") hash to " +
                              core::HexLower(hashed.value()[i]) + ", signed digest is " +
                              core::HexLower(it->second)});
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
  auto before = IdentityOf(f.fd);
  if (!before.ok()) return before.error();
  auto result = VerifyFd(f.fd, f.size, trusted, options);
  if (!result.ok()) return result;
  auto after = IdentityOf(f.fd);
  if (!after.ok()) return after.error();
  if (!(after.value() == before.value())) {
    return Error{Code::kIoChanged, kNoOffset, "file changed while it was being verified"};
  }
  return result;
}

}  // namespace modelgate::signer
