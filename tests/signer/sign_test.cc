// SignFile: in place and -o, mode kept, deterministic header, co-signing,
// re-signing, dropping records that no longer hold, option checks.
#include <catch2/catch.hpp>

#include <sys/stat.h>

#include "signer_test_util.h"

namespace core = modelgate::core;
namespace signer = modelgate::signer;
using namespace sigtest;
using signer::SigStatus;

namespace {

Bytes Model() {
  ojson h;
  h["w"] = {{"dtype", "BF16"}, {"shape", {3, 2}}, {"data_offsets", {0, 12}}};
  h["e"] = {{"dtype", "I64"}, {"shape", {0}}, {"data_offsets", {12, 12}}};
  h["s"] = {{"dtype", "U8"}, {"shape", ojson::array()}, {"data_offsets", {12, 13}}};
  Bytes data(13, 0x5a);
  return Assemble(h.dump(), data);
}

signer::SignOptions At(uint64_t created) {
  signer::SignOptions o;
  o.created = created;
  return o;
}

signer::VerifyResult Check(const std::string& path, std::vector<signer::PublicKey> keys) {
  auto r = signer::VerifyFile(path, keys);
  REQUIRE(r.ok());
  return r.value();
}

std::vector<std::string> Kids(const std::string& path) {
  Bytes f = ReadBytes(path);
  auto st = core::ParseSafetensors(f, core::Limits{});
  REQUIRE(st.ok());
  auto s = signer::ParseStsig(st.value());
  REQUIRE(s.ok());
  std::vector<std::string> out;
  for (const auto& r : s.value().records) out.push_back(core::HexLower(r.kid));
  return out;
}

}  // namespace

TEST_CASE("sign: in place keeps the mode, output is a valid, padded safetensors file",
          "[signer][sign]") {
  TempDir dir;
  const std::string p = dir / "m.safetensors";
  WriteBytes(p, Model());
  REQUIRE(::chmod(p.c_str(), 0640) == 0);
  signer::PrivateKey key = TestKey();
  signer::SignOptions opt = At(42);
  opt.model = "acme/\"q\"\n";
  opt.version = 3;
  auto r = signer::SignFile(p, key, opt);
  REQUIRE(r.ok());
  CHECK(ModeOf(p) == 0640);
  Bytes f = ReadBytes(p);
  CHECK(f.size() == r.value().file_size);
  CHECK(HeaderLen(f) == r.value().header_bytes);
  CHECK((8 + HeaderLen(f)) % 8 == 0);
  CHECK(DataOf(f) == DataOf(Model()));
  auto st = core::ParseSafetensors(f, core::Limits{});
  REQUIRE(st.ok());  // still a strict, valid safetensors file
  for (const auto& [k, v] : st.value().metadata) CHECK(k.rfind("stsig.v1", 0) == 0);
  // No temp file left behind.
  size_t entries = 0;
  for (auto& e : std::filesystem::directory_iterator(dir.path())) (void)e, ++entries;
  CHECK(entries == 1);

  auto v = Check(p, {key.public_key()});
  CHECK(v.status == SigStatus::kValid);
  REQUIRE(v.records.size() == 1);
  CHECK(v.records[0].record.model == opt.model);
  CHECK(v.records[0].record.version == 3);
  CHECK(v.records[0].record.created == 42);

  // Deterministic: signing the same input with the same options again gives
  // the same bytes.
  const std::string q = dir / "again.safetensors";
  WriteBytes(q, Model());
  REQUIRE(signer::SignFile(q, key, opt).ok());
  CHECK(ReadBytes(q) == f);
}

TEST_CASE("sign: -o writes elsewhere, leaves the input, replaces an existing output keeping its mode",
          "[signer][sign]") {
  TempDir dir;
  const std::string in = dir / "in.safetensors", out = dir / "out.safetensors";
  WriteBytes(in, Model());
  WriteBytes(out, Bytes{1, 2, 3});
  REQUIRE(::chmod(out.c_str(), 0600) == 0);
  signer::PrivateKey key = TestKey();
  REQUIRE(signer::SignFile(in, key, At(1), out).ok());
  CHECK(ReadBytes(in) == Model());
  CHECK(ModeOf(out) == 0600);
  CHECK(Check(out, {key.public_key()}).status == SigStatus::kValid);
}

TEST_CASE("sign: co-signing keeps the first record, re-signing replaces only its own",
          "[signer][sign]") {
  TempDir dir;
  const std::string p = dir / "m.safetensors";
  WriteBytes(p, Model());
  signer::PrivateKey a = TestKey(0), b = TestKey(50);
  REQUIRE(signer::SignFile(p, a, At(1)).ok());
  auto second = signer::SignFile(p, b, At(2));
  REQUIRE(second.ok());
  CHECK(second.value().kept_records == 1);
  CHECK(Kids(p).size() == 2);
  CHECK(Check(p, {a.public_key()}).status == SigStatus::kValid);
  CHECK(Check(p, {b.public_key()}).status == SigStatus::kValid);
  auto both = Check(p, {a.public_key(), b.public_key()});
  CHECK(both.status == SigStatus::kValid);
  CHECK(both.verified_kids.size() == 2);

  // Re-sign with a, new version: still two records, a's replaced.
  signer::SignOptions o = At(3);
  o.version = 9;
  o.cosigner_keys = {b.public_key()};
  auto again = signer::SignFile(p, a, o);
  REQUIRE(again.ok());
  CHECK(again.value().kept_records == 1);
  CHECK(again.value().dropped_records == 1);
  CHECK(Kids(p).size() == 2);
  auto v = Check(p, {a.public_key(), b.public_key()});
  CHECK(v.status == SigStatus::kValid);
  for (const auto& rc : v.records) {
    if (rc.record.kid == a.public_key().kid) CHECK(rc.record.version == 9);
  }

  // keep_cosignatures = false: only the new record.
  signer::SignOptions solo = At(4);
  solo.keep_cosignatures = false;
  REQUIRE(signer::SignFile(p, a, solo).ok());
  CHECK(Kids(p) == std::vector<std::string>{a.public_key().kid_hex()});
}

TEST_CASE("sign: records that no longer hold are dropped, never carried into a new signature",
          "[signer][sign]") {
  TempDir dir;
  const std::string p = dir / "m.safetensors";
  WriteBytes(p, Model());
  signer::PrivateKey a = TestKey(0), b = TestKey(50);
  REQUIRE(signer::SignFile(p, b, At(1)).ok());

  SECTION("tensor bytes changed since b signed") {
    Bytes f = ReadBytes(p);
    f.back() ^= 1;
    WriteBytes(p, f);
    auto r = signer::SignFile(p, a, At(2));
    REQUIRE(r.ok());
    CHECK(r.value().kept_records == 0);
    CHECK(r.value().dropped_records == 1);
    CHECK(Kids(p) == std::vector<std::string>{a.public_key().kid_hex()});
    CHECK(Check(p, {a.public_key(), b.public_key()}).status == SigStatus::kValid);
  }
  SECTION("b's record forged, b known as a co-signer") {
    Bytes f = EditMetaJson(ReadBytes(p), "stsig.v1", [](ojson& v) { v[0]["version"] = 5; });
    WriteBytes(p, f);
    signer::SignOptions o = At(2);
    o.cosigner_keys = {b.public_key()};
    auto r = signer::SignFile(p, a, o);
    REQUIRE(r.ok());
    CHECK(r.value().kept_records == 0);
    CHECK(Kids(p) == std::vector<std::string>{a.public_key().kid_hex()});
  }
  SECTION("malformed stsig.* values are dropped") {
    WriteBytes(p, EditHeader(ReadBytes(p), [](ojson& h) { h["__metadata__"]["stsig.v9"] = "?"; }));
    auto r = signer::SignFile(p, a, At(2));
    REQUIRE(r.ok());
    CHECK(r.value().kept_records == 0);
    CHECK(Check(p, {a.public_key()}).status == SigStatus::kValid);
  }
}

TEST_CASE("sign: refuses bad options, symlinks and files the core rejects", "[signer][sign]") {
  TempDir dir;
  const std::string p = dir / "m.safetensors";
  WriteBytes(p, Model());
  signer::PrivateKey key = TestKey();
  signer::SignOptions o = At(1);
  o.set = signer::SetRef{3, 3, {}};
  auto bad_set = signer::SignFile(p, key, o);
  REQUIRE_FALSE(bad_set.ok());
  CHECK(bad_set.error().code == core::Code::kSigOptions);

  std::filesystem::create_symlink(p, dir / "link.safetensors");
  auto link = signer::SignFile(dir / "link.safetensors", key, At(1));
  REQUIRE_FALSE(link.ok());
  CHECK(link.error().code == core::Code::kIoNotRegular);

  Bytes trailing = Model();
  trailing.push_back(0);
  WriteBytes(p, trailing);
  auto rejected = signer::SignFile(p, key, At(1));
  REQUIRE_FALSE(rejected.ok());
  CHECK(rejected.error().code == core::Code::kStTrailingBytes);
  CHECK(ReadBytes(p) == trailing);  // untouched
}

TEST_CASE("verify: symlinks, non-regular files and missing files cannot be judged",
          "[signer][verify]") {
  TempDir dir;
  const std::string p = dir / "m.safetensors";
  WriteBytes(p, Model());
  signer::PrivateKey key = TestKey();
  REQUIRE(signer::SignFile(p, key, At(1)).ok());
  std::vector<signer::PublicKey> keys = {key.public_key()};
  std::filesystem::create_symlink(p, dir / "link");
  auto link = signer::VerifyFile(dir / "link", keys);
  REQUIRE_FALSE(link.ok());
  CHECK(link.error().code == core::Code::kIoNotRegular);
  signer::VerifyOptions follow;
  follow.follow_symlink = true;
  auto followed = signer::VerifyFile(dir / "link", keys, follow);
  REQUIRE(followed.ok());
  CHECK(followed.value().valid());
  CHECK_FALSE(signer::VerifyFile(dir.path(), keys).ok());
  CHECK_FALSE(signer::VerifyFile(dir / "nope", keys).ok());
  CHECK(signer::SigStatusName(SigStatus::kUntrusted) == "untrusted");
}

TEST_CASE("sign/verify: many tensors on several threads", "[signer][sign]") {
  TempDir dir;
  ojson h = ojson::object();
  Bytes data;
  for (int i = 0; i < 300; ++i) {
    uint64_t n = static_cast<uint64_t>((i * 7919) % 5000);
    h["t" + std::to_string(i)] = {{"dtype", "U8"}, {"shape", {n}}, {"data_offsets", {data.size(), data.size() + n}}};
    for (uint64_t j = 0; j < n; ++j) data.push_back(static_cast<uint8_t>(i + j));
  }
  const std::string p = dir / "m.safetensors";
  WriteBytes(p, Assemble(h.dump(), data));
  signer::PrivateKey key = TestKey();
  signer::SignOptions o = At(1);
  o.hash.threads = 4;
  REQUIRE(signer::SignFile(p, key, o).ok());
  signer::VerifyOptions vo;
  vo.hash.threads = 3;
  std::vector<signer::PublicKey> keys = {key.public_key()};
  auto r = signer::VerifyFile(p, keys, vo);
  REQUIRE(r.ok());
  CHECK(r.value().valid());
  Bytes f = ReadBytes(p);
  f[8 + HeaderLen(f) + data.size() / 2] ^= 0x80;
  WriteBytes(p, f);
  auto bad = signer::VerifyFile(p, keys, vo);
  REQUIRE(bad.ok());
  CHECK(bad.value().reason.code == core::Code::kSigTensorMismatch);
}
