// fuzz_oms_bundle: ParseBundle (OMS / model_signing bundles, detached.h) on
// arbitrary text. A bundle comes with the model it signs, so it is parsed as
// untrusted. Invariants:
// - a rejection is kSigBadRecord with a Reason and a message;
// - an accepted bundle has at least one signature and one resource, its
//   resources sorted and unique (ResourceLess), every path canonical (no
//   "", ".", ".." component, no leading '/', no backslash) or "." alone;
// - its root digest is SHA-256 over the resource digests in the order the
//   payload lists them (recomputed here from the payload with nlohmann), and
//   equals RootDigest(resources) when that order was already canonical;
// - shards tile each file: start 0, contiguous, shard_size long but the last;
// - VerifyBundle never crashes, and is never kValid under a key that did not
//   sign (a fixed Ed25519 key);
// - the manifest re-signed by that key (BundleText) parses back to the same
//   manifest and verifies under it.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "modelgate/detached.h"
#include "modelgate/signer.h"

namespace {

namespace core = modelgate::core;
namespace signer = modelgate::signer;
namespace oms = modelgate::signer::oms;

void Check(bool ok) {
  if (!ok) __builtin_trap();
}

const signer::PrivateKey& Key() {
  static signer::PrivateKey* key = [] {
    std::array<uint8_t, signer::kSeedBytes> seed{};
    seed[0] = 7;
    auto k = signer::PrivateKey::FromSeed(seed);
    Check(k.ok());
    return new signer::PrivateKey(std::move(k).value());
  }();
  return *key;
}

bool CanonicalPath(const std::string& p) {
  if (p == ".") return true;
  if (p.empty() || p.front() == '/' || p.find('\\') != std::string::npos) return false;
  size_t start = 0;
  while (true) {
    size_t slash = p.find('/', start);
    std::string comp = p.substr(start, slash == std::string::npos ? std::string::npos : slash - start);
    if (comp.empty() || comp == "." || comp == "..") return false;
    if (slash == std::string::npos) return true;
    start = slash + 1;
  }
}

// ListedRoot: SHA-256 over the digests as the payload lists them.
core::Sha256Digest ListedRoot(const std::string& payload, bool* canonical_order, const oms::Manifest& m) {
  auto st = nlohmann::json::parse(payload);
  core::Sha256Hasher h;
  size_t i = 0;
  *canonical_order = true;
  for (const auto& r : st["predicate"]["resources"]) {
    core::Sha256Digest d{};
    Check(core::ParseHexLower(r["digest"].get<std::string>(), d));
    h.Update(d);
    if (i < m.resources.size() && d != m.resources[i].digest) *canonical_order = false;
    ++i;
  }
  Check(i == m.resources.size());
  return h.Final();
}

void CheckAccepted(const oms::Bundle& b) {
  const oms::Manifest& m = b.manifest;
  Check(!b.signatures.empty());
  Check(!m.resources.empty());
  for (size_t i = 0; i < m.resources.size(); ++i) {
    Check(CanonicalPath(m.resources[i].path));
    if (i > 0) Check(oms::ResourceLess(m.resources[i - 1], m.resources[i]));
    if (m.resources[i].path == ".") Check(m.resources.front().path == m.resources.back().path);
  }
  bool canonical = false;
  Check(ListedRoot(b.payload, &canonical, m) == m.root_digest);
  if (canonical) Check(oms::RootDigest(m.resources) == m.root_digest);
  if (m.method == oms::Method::kShards) {
    Check(m.shard_size > 0);
    for (size_t i = 0; i < m.resources.size(); ++i) {
      const auto& r = m.resources[i];
      const bool first = i == 0 || m.resources[i - 1].path != r.path;
      const bool last = i + 1 == m.resources.size() || m.resources[i + 1].path != r.path;
      Check(first ? r.begin == 0 : r.begin == m.resources[i - 1].end);
      Check(r.end > r.begin && r.end - r.begin <= m.shard_size);
      if (!last) Check(r.end - r.begin == m.shard_size);
    }
  }
  const signer::PublicKey& pub = Key().public_key();
  oms::BundleVerdict v = oms::VerifyBundle(b, std::span<const signer::PublicKey>(&pub, 1));
  Check(v.status != signer::SigStatus::kValid);  // nobody fuzzes an Ed25519 signature
  Check(v.why != oms::Reason::kNone);

  auto text = oms::BundleText(m, Key());
  Check(text.ok());
  auto again = oms::ParseBundle(text.value());
  Check(again.ok());
  const oms::Manifest& m2 = again.value().manifest;
  Check(m2.method == m.method && m2.shard_size == m.shard_size && m2.subject_name == m.subject_name &&
        m2.version == m.version && m2.ignore_paths == m.ignore_paths &&
        m2.allow_symlinks == m.allow_symlinks && m2.resources.size() == m.resources.size());
  for (size_t i = 0; i < m.resources.size(); ++i) {
    Check(m2.resources[i].path == m.resources[i].path && m2.resources[i].begin == m.resources[i].begin &&
          m2.resources[i].end == m.resources[i].end && m2.resources[i].digest == m.resources[i].digest);
  }
  Check(m2.root_digest == oms::RootDigest(m.resources));
  Check(oms::VerifyBundle(again.value(), std::span<const signer::PublicKey>(&pub, 1)).status ==
        signer::SigStatus::kValid);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  oms::Reason why = oms::Reason::kNone;
  auto b = oms::ParseBundle(text, {}, &why);
  if (!b.ok()) {
    Check(b.error().code == core::Code::kSigBadRecord);
    Check(!b.error().message.empty());
    Check(why != oms::Reason::kNone);
    Check(!oms::ReasonId(why).empty());
    return 0;
  }
  Check(why == oms::Reason::kNone);
  CheckAccepted(b.value());
  return 0;
}
