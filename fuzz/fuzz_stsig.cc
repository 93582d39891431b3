// fuzz_stsig: STSIG v1 records and the digest map (signer::ParseStsig) and
// verification (signer::VerifyFd, on a memfd) against one fixed trusted key,
// the TEST-ONLY key of tests/signer/vectors (seed 00 01 .. 1f). The first
// input byte picks how the rest becomes a file:
//   0  the rest is the whole file (raw header bytes, seeds: the vectors);
//   1  the rest is split at NUL bytes into the stsig.v1 text, the
//      stsig.v1.sha256 text and tensor data, written into a safetensors
//      file (one or two U8 tensors) whose __metadata__ carries them;
//   2  as 1, but the digest map is the true one and every record by the
//      trusted key is re-signed by it (internal::RecordsJson writes them).
// (the low nibble mod 3 is the mode; bit 0x10 asks for two tensors).
// Invariants:
// - errors carry a real code (never kOk) and a message;
// - "valid" only when an independent check agrees: some record's kid is the
//   trusted key's and its Ed25519 signature verifies (libsodium, here) over
//   SignedMessage, every record is ed25519 with a distinct kid, and every
//   tensor's bytes hash to its signed digest;
// - "missing" exactly when no stsig.* key exists;
// - RecordsJson output parses back to the same records;
// - mode 2: a file whose records are all ed25519, by distinct keys, one of
//   them the trusted key, is valid (signing and verifying agree).
#include <sodium.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "internal.h"
#include "modelgate/core.h"
#include "modelgate/signer.h"

namespace {

namespace core = modelgate::core;
namespace signer = modelgate::signer;
using Bytes = std::vector<uint8_t>;

void Check(bool ok) {
  if (!ok) __builtin_trap();
}

const signer::PrivateKey& TrustedKey() {
  static const signer::PrivateKey key = [] {
    std::array<uint8_t, signer::kSeedBytes> seed{};
    for (size_t i = 0; i < seed.size(); ++i) seed[i] = static_cast<uint8_t>(i);
    auto k = signer::PrivateKey::FromSeed(seed);
    Check(k.ok() && sodium_init() >= 0);
    return std::move(k).value();
  }();
  return key;
}

void CheckError(const core::Error& e) {
  Check(e.code != core::Code::kOk);
  Check(!e.message.empty());
}

// SplitNul splits `rest` at its first two NUL bytes (missing parts: empty).
std::vector<std::string_view> SplitNul(std::string_view rest) {
  std::vector<std::string_view> parts;
  for (int i = 0; i < 2; ++i) {
    size_t nul = rest.find('\0');
    if (nul == std::string_view::npos) break;
    parts.push_back(rest.substr(0, nul));
    rest.remove_prefix(nul + 1);
  }
  parts.push_back(rest);
  while (parts.size() < 3) parts.emplace_back();
  return parts;
}

// BuildFile writes a safetensors file: tensors "a" (and "b" when `two`)
// splitting `data`, __metadata__ {"stsig.v1": records, "stsig.v1.sha256":
// digests} (each key only when its text is non-empty). Invalid UTF-8 in the
// texts is replaced, as a writer would have to.
Bytes BuildFile(std::string_view records, std::string_view digests, std::string_view data,
                bool two) {
  nlohmann::ordered_json h = nlohmann::ordered_json::object();
  size_t cut = two ? data.size() / 2 : data.size();
  auto entry = [](size_t begin, size_t end) {
    nlohmann::ordered_json e = nlohmann::ordered_json::object();
    e["dtype"] = "U8";
    e["shape"] = nlohmann::ordered_json::array({end - begin});
    e["data_offsets"] = nlohmann::ordered_json::array({begin, end});
    return e;
  };
  h["a"] = entry(0, cut);
  if (two) h["b"] = entry(cut, data.size());
  nlohmann::ordered_json meta = nlohmann::ordered_json::object();
  if (!records.empty()) meta[std::string(signer::kStsigRecordsKey)] = std::string(records);
  if (!digests.empty()) meta[std::string(signer::kStsigDigestsKey)] = std::string(digests);
  if (!meta.empty()) h["__metadata__"] = meta;
  std::string text = h.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  while ((8 + text.size()) % 8 != 0) text += ' ';
  // Sized once and filled in place (growing an 8-byte vector by insert
  // trips a GCC 12 -O3 -Warray-bounds false positive).
  Bytes file(8 + text.size() + data.size());
  uint64_t n = text.size();
  for (int i = 0; i < 8; ++i) file[i] = static_cast<uint8_t>(n >> (8 * i));
  std::copy(text.begin(), text.end(), file.begin() + 8);
  std::copy(data.begin(), data.end(), file.begin() + 8 + static_cast<std::ptrdiff_t>(text.size()));
  return file;
}

// TrueDigests is the digest map of `st`'s tensors in `file`, sorted by name.
std::vector<signer::TensorDigest> TrueDigests(const core::Safetensors& st, const Bytes& file) {
  std::vector<signer::TensorDigest> out;
  for (const auto& t : st.tensors) {
    out.emplace_back(t.name, core::Sha256(std::span<const uint8_t>(file).subspan(
                                 t.file_begin(), t.size_bytes())));
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::optional<signer::VerifyResult> Verify(const Bytes& file) {
  int fd = memfd_create("fuzz_stsig", MFD_CLOEXEC);
  Check(fd >= 0);
  Check(file.empty() || write(fd, file.data(), file.size()) == static_cast<ssize_t>(file.size()));
  signer::PublicKey trusted = TrustedKey().public_key();
  trusted.name = "fuzz";
  auto r = signer::VerifyFd(fd, file.size(), std::span<const signer::PublicKey>(&trusted, 1));
  close(fd);
  if (!r.ok()) {
    CheckError(r.error());
    return std::nullopt;
  }
  return std::move(r).value();
}

// CheckVerdict holds the verdict on `file` to the independent checks.
void CheckVerdict(const Bytes& file, const signer::VerifyResult& v) {
  auto st = core::ParseSafetensors(file, core::Limits{});
  bool any_stsig_key = false;
  if (st.ok()) {
    for (const auto& [k, value] : st.value().metadata) any_stsig_key |= signer::internal::IsStsigKey(k);
  }
  Check((v.status == signer::SigStatus::kMissing) == (st.ok() && !any_stsig_key));
  if (v.status != signer::SigStatus::kValid) {
    if (v.status != signer::SigStatus::kMissing) {
      CheckError(v.reason);
    }
    Check(v.verified_kids.empty() || v.status != signer::SigStatus::kUntrusted);
    return;
  }
  Check(st.ok());
  auto sig = signer::ParseStsig(st.value());
  Check(sig.ok() && sig.value().present);
  const signer::PublicKey& key = TrustedKey().public_key();
  bool verified = false;
  const auto& records = sig.value().records;
  for (size_t i = 0; i < records.size(); ++i) {
    const signer::StsigRecord& r = records[i];
    Check(r.alg == signer::kAlgEd25519);
    for (size_t j = 0; j < i; ++j) Check(records[j].kid != r.kid);
    if (r.kid != key.kid) continue;
    auto m = signer::SignedMessage(st.value(), r, sig.value().digests);
    Check(m.ok());
    Check(crypto_sign_verify_detached(r.sig.data(), m.value().data(), m.value().size(),
                                      key.raw.data()) == 0);
    verified = true;
  }
  Check(verified);
  Check(v.verified_kids.size() == 1 && v.verified_kids[0] == key.kid_hex());
  Check(sig.value().digests == TrueDigests(st.value(), file));
}

// Resign gives every record by the trusted key a true signature over `st`
// with the true digests; false when the records cannot be signed.
bool Resign(const core::Safetensors& st, std::span<const signer::TensorDigest> digests,
            std::vector<signer::StsigRecord>& records) {
  const signer::PrivateKey& key = TrustedKey();
  for (auto& r : records) {
    if (r.kid != key.public_key().kid) continue;
    auto m = signer::SignedMessage(st, r, digests);
    if (!m.ok()) return false;
    r.sig = key.Sign(m.value());
  }
  return true;
}

int RunResign(std::string_view records_text, std::string_view data, bool two) {
  // A first build fixes the tensors, so the true digest map can be written.
  Bytes draft = BuildFile(records_text, "", data, two);
  auto draft_st = core::ParseSafetensors(draft, core::Limits{});
  if (!draft_st.ok()) return 0;
  std::vector<signer::TensorDigest> digests = TrueDigests(draft_st.value(), draft);
  Bytes file = BuildFile(records_text, signer::internal::DigestsJson(digests), data, two);
  auto st = core::ParseSafetensors(file, core::Limits{});
  if (!st.ok()) return 0;
  auto sig = signer::ParseStsig(st.value());
  if (!sig.ok()) {
    CheckError(sig.error());
    return 0;
  }
  std::vector<signer::StsigRecord> records = sig.value().records;
  if (!Resign(st.value(), digests, records)) return 0;
  std::string rewritten = signer::internal::RecordsJson(records);
  Bytes signed_file = BuildFile(rewritten, signer::internal::DigestsJson(digests), data, two);
  auto signed_st = core::ParseSafetensors(signed_file, core::Limits{});
  Check(signed_st.ok());
  auto reparsed = signer::ParseStsig(signed_st.value());
  Check(reparsed.ok());
  const auto& back = reparsed.value().records;
  Check(back.size() == records.size());
  for (size_t i = 0; i < back.size(); ++i) {
    Check(back[i].alg == records[i].alg && back[i].kid == records[i].kid &&
          back[i].created == records[i].created && back[i].model == records[i].model &&
          back[i].version == records[i].version && back[i].set == records[i].set &&
          back[i].sig == records[i].sig);
  }

  auto v = Verify(signed_file);
  Check(v.has_value());
  CheckVerdict(signed_file, *v);
  bool signable = !records.empty();
  bool ours = false;
  for (size_t i = 0; i < records.size(); ++i) {
    signable &= records[i].alg == signer::kAlgEd25519;
    ours |= records[i].kid == TrustedKey().public_key().kid;
    for (size_t j = 0; j < i; ++j) signable &= records[j].kid != records[i].kid;
  }
  if (signable && ours) Check(v->status == signer::SigStatus::kValid);
  return 0;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t mode = data[0];
  std::string_view rest(reinterpret_cast<const char*>(data + 1), size - 1);
  Bytes file;
  switch ((mode & 0x0f) % 3) {
    case 0:
      file.assign(rest.begin(), rest.end());
      break;
    case 1: {
      auto parts = SplitNul(rest);
      file = BuildFile(parts[0], parts[1], parts[2], (mode & 0x10) != 0);
      break;
    }
    default: {
      auto parts = SplitNul(rest);
      return RunResign(parts[0], parts[2], (mode & 0x10) != 0);
    }
  }
  auto st = core::ParseSafetensors(file, core::Limits{});
  if (st.ok()) {
    auto sig = signer::ParseStsig(st.value());
    if (!sig.ok()) CheckError(sig.error());
  }
  auto v = Verify(file);
  if (v) CheckVerdict(file, *v);
  return 0;
}
