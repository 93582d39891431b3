// SignFile: STSIG v1 signing, streamed through an AtomicOutput beside the
// output so memory does not grow with the model and a killed run leaves
// nothing behind.
#include <fcntl.h>
#include <sodium.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <string>
#include <utility>

#include "internal.h"
#include "modelgate/atomic_file.h"

namespace modelgate::signer {
namespace {

using core::Code;
using core::Error;
using core::kNoOffset;

Error IoError(Code code, const std::string& what, const std::string& path) {
  return Error{code, kNoOffset, what + " " + path + ": " + std::strerror(errno)};
}

// CopyRange copies `len` bytes from `in` at `in_off` to `out` at `out_off`:
// copy_file_range (in-kernel, may share extents), else pread/pwrite. Any
// copy_file_range failure falls through to the plain copy, so a write
// error (ENOSPC, EFBIG) is reported by out.WriteAt, naming the output.
core::Status CopyRange(int in, uint64_t in_off, core::AtomicOutput& out, uint64_t out_off,
                       uint64_t len) {
  auto io = static_cast<loff_t>(in_off), oo = static_cast<loff_t>(out_off);
  uint64_t left = len;
  while (left > 0) {
    size_t chunk = static_cast<size_t>(std::min<uint64_t>(left, uint64_t{1} << 30));
    ssize_t n = ::copy_file_range(in, &io, out.fd(), &oo, chunk, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // unsupported here, a write error, or EOF: finish below
    left -= static_cast<uint64_t>(n);
  }
  std::vector<uint8_t> buffer;
  while (left > 0) {
    size_t chunk = static_cast<size_t>(std::min<uint64_t>(left, uint64_t{1} << 20));
    buffer.resize(chunk);
    core::Status r = core::PreadExact(in, static_cast<uint64_t>(io), buffer);
    if (!r.ok()) return r.error();
    core::Status w = out.WriteAt(static_cast<uint64_t>(oo), buffer);
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

// CheckVerifiable refuses a laid-out header that verify, under the same
// `limits`, would reject: checked before anything is written, so a file is
// never signed into one its own gate cannot open (e.g. a 1M-tensor file's
// digest map pushing the header past max_header_bytes). The header's
// length does not depend on digest or signature values, so `layout` (zero
// digests) is judged exactly as the signed header will be.
core::Status CheckVerifiable(const std::string& layout, uint64_t data_bytes,
                             const core::Limits& limits, size_t tensors, size_t records) {
  const uint64_t n = layout.size();
  if (n > limits.max_header_bytes) {
    return Error{Code::kSigOptions, kNoOffset,
                 "the signed header would be " + std::to_string(n) + " bytes (" +
                     std::to_string(tensors) + " tensors, " + std::to_string(records) +
                     " record(s)), " + std::to_string(n - limits.max_header_bytes) +
                     " bytes over the limit max_header_bytes of " +
                     std::to_string(limits.max_header_bytes) +
                     " that verify enforces; nothing was written"};
  }
  uint64_t file_size = 0;
  if (__builtin_add_overflow(uint64_t{8} + n, data_bytes, &file_size)) {
    return Error{Code::kSigOptions, kNoOffset, "the signed file's size would overflow 64 bits; nothing was written"};
  }
  auto parsed = core::ParseSafetensorsHeader(
      std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(layout.data()), layout.size()), file_size,
      limits);
  if (!parsed.ok()) {
    return Error{Code::kSigOptions, kNoOffset,
                 "the signed header would break a rule verify enforces (" +
                     std::string(core::FindingId(parsed.error().code)) + ": " + parsed.error().message +
                     "); nothing was written"};
  }
  return core::OkStatus();
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

  std::vector<core::TensorView> by_name(st.tensors.begin(), st.tensors.end());
  std::sort(by_name.begin(), by_name.end(),
            [](const core::TensorView& a, const core::TensorView& b) { return a.name < b.name; });

  for (int attempt = 0; attempt < 2; ++attempt) {
    std::vector<StsigRecord> records = kept;
    records.push_back(mine);
    std::sort(records.begin(), records.end(), [](const auto& a, const auto& b) { return a.kid < b.kid; });
    std::vector<TensorDigest> digests;
    digests.reserve(by_name.size());
    for (const auto& t : by_name) digests.emplace_back(t.name, core::Sha256Digest{});

    // The header's length does not depend on digest or signature values
    // (fixed-width hex and base64), so the data's place is known now.
    const std::string layout = HeaderFor(st, records, digests);
    const uint64_t data_start = 8 + layout.size();
    core::Status s = CheckVerifiable(layout, st.data_bytes(), options.limits, digests.size(), records.size());
    if (!s.ok()) return s.error();

    auto created = core::AtomicOutput::Create(out_path, mode);
    if (!created.ok()) return created.error();
    core::AtomicOutput tmp = std::move(created).value();
    s = CopyRange(in.fd, st.data_start, tmp, data_start, st.data_bytes());
    if (!s.ok()) return s.error();

    // Hash the copy: the signature covers exactly the bytes written.
    std::vector<core::ByteRange> ranges;
    ranges.reserve(by_name.size());
    for (const auto& t : by_name) ranges.push_back({data_start + t.begin, t.size_bytes()});
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
    // SignBytes, not Sign: a token key can fail. Every signature is checked
    // with the verifier before anything is written (a token whose public key
    // object is not its private key's, or a faulty signer, writes nothing).
    auto made = key.SignBytes(message.value());
    if (!made.ok()) return made.error();
    if (made.value().size() != mine.sig.size() ||
        !VerifySignature(key.public_key(), message.value(), made.value())) {
      return Error{Code::kSigCrypto, kNoOffset,
                   "the signature just made does not verify under the key's public key " +
                       key.public_key().kid_hex() + "; nothing was written"};
    }
    std::copy(made.value().begin(), made.value().end(), mine.sig.begin());
    for (auto& r : records) {
      if (r.kid == mine.kid) r.sig = mine.sig;
    }
    const std::string header = HeaderFor(st, records, digests);
    if (header.size() != layout.size()) {
      return Error{Code::kSigCrypto, kNoOffset, "internal: header length changed after signing"};
    }
    s = tmp.WriteAt(0, LengthPrefixed(header));
    if (!s.ok()) return s.error();
    s = tmp.Commit();
    if (!s.ok()) return s.error();

    result.message = std::move(message).value();
    result.kept_records = kept.size();
    result.header_bytes = header.size();
    result.file_size = data_start + st.data_bytes();
    return result;
  }
  return Error{Code::kSigCrypto, kNoOffset, "internal: layout did not settle"};
}

core::Result<std::string> PlannedHeader(const core::Safetensors& st,
                                        std::vector<std::pair<std::string, std::string>> metadata,
                                        const StsigRecord* record,
                                        std::span<const TensorDigest> digests,
                                        uint64_t data_bytes, const core::Limits& limits) {
  for (const auto& kv : metadata) {
    if (internal::IsStsigKey(kv.first)) {
      return Error{Code::kSigOptions, kNoOffset,
                   "metadata key " + core::Quoted(kv.first) + " is reserved for signatures"};
    }
  }
  if (record != nullptr) {
    metadata.emplace_back(std::string(kStsigRecordsKey), internal::RecordsJson({record, 1}));
    metadata.emplace_back(std::string(kStsigDigestsKey), internal::DigestsJson(digests));
  }
  std::string header = internal::SerializeHeader(st, std::move(metadata));
  core::Status s = CheckVerifiable(header, data_bytes, limits, st.tensors.size(), record ? 1 : 0);
  if (!s.ok()) return s.error();
  return header;
}

core::Status SignPlanned(const core::Safetensors& st,
                         const std::vector<std::pair<std::string, std::string>>& metadata,
                         std::span<const TensorDigest> digests, const PrivateKey& key,
                         StsigRecord* record) {
  core::Status init = internal::EnsureSodium();
  if (!init.ok()) return init.error();
  if (key.alg() != KeyAlg::kEd25519) {
    return Error{Code::kSigOptions, kNoOffset, "embedded STSIG v1 signatures are Ed25519"};
  }
  // SignedMessage reads the metadata from `st`: the planned file's.
  core::Safetensors planned = st;
  planned.metadata = metadata;
  std::sort(planned.metadata.begin(), planned.metadata.end());
  record->kid = key.public_key().kid;
  auto message = SignedMessage(planned, *record, digests);
  if (!message.ok()) return message.error();
  // SignBytes, not Sign: a token key can fail; the signature is checked
  // before it is used, as SignFile does.
  auto made = key.SignBytes(message.value());
  if (!made.ok()) return made.error();
  if (made.value().size() != record->sig.size() ||
      !VerifySignature(key.public_key(), message.value(), made.value())) {
    return Error{Code::kSigCrypto, kNoOffset,
                 "the signature just made does not verify under the key's public key " +
                     key.public_key().kid_hex()};
  }
  std::copy(made.value().begin(), made.value().end(), record->sig.begin());
  return core::OkStatus();
}

}  // namespace modelgate::signer
