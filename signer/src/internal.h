// Private helpers shared by the signer's sources.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "modelgate/core.h"
#include "modelgate/signer.h"

namespace modelgate::signer::internal {

// EnsureSodium initialises libsodium once (thread-safe, idempotent).
core::Status EnsureSodium();

// Base64 is standard base64 with padding (RFC 4648 §4).
std::string Base64(std::span<const uint8_t> bytes);
// ParseBase64Exact decodes canonical padded base64 of exactly out.size()
// bytes: whitespace, missing padding or non-zero spare bits are rejected.
bool ParseBase64Exact(std::string_view text, std::span<uint8_t> out);

// AppendJsonString appends `s` as a JSON string: `"` and `\` escaped, \b \f
// \n \r \t short forms, other bytes < 0x20 as \u00xx, everything else
// (including UTF-8) raw. The same rules as Python's json.dumps(...,
// ensure_ascii=False) and nlohmann's dump(): the vectors' writer.
void AppendJsonString(std::string& out, std::string_view s);

// RecordsJson / DigestsJson are the stsig.v1 / stsig.v1.sha256 values:
// compact, keys sorted. Records are written in the given order.
std::string RecordsJson(std::span<const StsigRecord> records);
std::string DigestsJson(std::span<const TensorDigest> digests);

// SerializeHeader is the header text for `st`'s tensors (data order) and
// `metadata` (written sorted bytewise; may be empty: then __metadata__ is
// omitted), padded with spaces so 8 + size is a multiple of 8.
std::string SerializeHeader(const core::Safetensors& st,
                            std::vector<std::pair<std::string, std::string>> metadata);

// IsStsigKey: the key is reserved (starts "stsig.").
bool IsStsigKey(std::string_view key);

// VerifyHeader is VerifyFd without the tensor hashing: strict parse, stsig
// records, Ed25519 over M. On status kValid the *header* is authentic (not
// yet the tensor bytes) and `digests` holds the signed SHA-256 of each tensor
// in `file.tensors` order. Other statuses and errors as VerifyFd.
core::Result<VerifyResult> VerifyHeader(int fd, uint64_t file_size,
                                        std::span<const PublicKey> trusted,
                                        const VerifyOptions& options,
                                        std::vector<core::Sha256Digest>* digests);

// TensorMismatch is the kSigTensorMismatch error for tensor `t`.
core::Error TensorMismatch(const core::TensorView& t, const core::Sha256Digest& got,
                           const core::Sha256Digest& want);

// FileIdentity is what fstat says identifies a file's content: the inode,
// its size and its modification/change times (nanoseconds).
struct FileIdentity {
  uint64_t dev = 0, ino = 0, size = 0;
  int64_t mtime_sec = 0, mtime_nsec = 0, ctime_sec = 0, ctime_nsec = 0;
  bool operator==(const FileIdentity& o) const;
};
core::Result<FileIdentity> IdentityOf(int fd);
// CheckIdentity fstats `fd` and returns kIoChanged (naming what differs and
// `when`) unless it still matches `expected`.
core::Status CheckIdentity(int fd, const FileIdentity& expected, std::string_view when);

}  // namespace modelgate::signer::internal
