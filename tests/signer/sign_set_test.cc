// Shard sets: SetDigest against an independent Python reading of the spec
// (set_digest_ref.py), SignSet round trips (every shard verifies with its
// set record), CheckSet catching a shard from another signed release, an
// edited index, swapped, missing and separately signed shards, and SignSet's
// refusals (nothing written).
#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>

#include "signer_test_util.h"

namespace core = modelgate::core;
namespace signer = modelgate::signer;
namespace fs = std::filesystem;
using namespace sigtest;
using core::Code;

namespace {

const std::string kOne = "model-00001-of-00002.safetensors";
const std::string kTwo = "model-00002-of-00002.safetensors";
const std::string kIndexName = "model.safetensors.index.json";

std::string IndexText(const std::string& one, const std::string& two, uint64_t total_size = 48) {
  return "{\n  \"metadata\": {\n    \"total_parameters\": 12,\n    \"total_size\": " +
         std::to_string(total_size) + "\n  },\n  \"weight_map\": {\n    \"empty\": \"" + two +
         "\",\n    \"layer.0.bias\": \"" + one + "\",\n    \"layer.0.weight\": \"" + one +
         "\",\n    \"layer.1.weight\": \"" + two + "\"\n  }\n}\n";
}

Bytes Data(size_t n, uint8_t release) {
  Bytes d(n);
  for (size_t i = 0; i < n; ++i) d[i] = static_cast<uint8_t>(release * 31 + i);
  return d;
}

// MakeSet writes a two-shard model as transformers lays it out; `release`
// changes the tensor values only.
void MakeSet(const TempDir& dir, uint8_t release) {
  ojson h1;
  h1["__metadata__"] = {{"format", "pt"}};
  h1["layer.0.bias"] = {{"dtype", "F32"}, {"shape", {2}}, {"data_offsets", {0, 8}}};
  h1["layer.0.weight"] = {{"dtype", "F32"}, {"shape", {2, 2}}, {"data_offsets", {8, 24}}};
  WriteBytes(dir / kOne, Assemble(h1.dump(), Data(24, release)));
  ojson h2;
  h2["__metadata__"] = {{"format", "pt"}};
  h2["empty"] = {{"dtype", "F32"}, {"shape", {0}}, {"data_offsets", {0, 0}}};
  h2["layer.1.weight"] = {{"dtype", "F32"}, {"shape", {2, 3}}, {"data_offsets", {0, 24}}};
  WriteBytes(dir / kTwo, Assemble(h2.dump(), Data(24, static_cast<uint8_t>(release + 100))));
  WriteBytes(dir / kIndexName, [] {
    std::string t = IndexText(kOne, kTwo);
    return Bytes(t.begin(), t.end());
  }());
}

signer::SignOptions At(uint64_t created) {
  signer::SignOptions o;
  o.created = created;
  return o;
}

signer::SignSetResult SignOk(const std::string& path, uint64_t created = 1764374400) {
  auto r = signer::SignSet(path, TestKey(), At(created));
  if (!r.ok()) FAIL(r.error().message);
  return std::move(r).value();
}

std::string RefDigest(const std::string& index_path) {
  const std::string cmd = "/usr/bin/python3 " + std::string(MG_STSIG_VECTORS) +
                          "/../set_digest_ref.py '" + index_path + "'";
  FILE* p = ::popen(cmd.c_str(), "r");
  REQUIRE(p != nullptr);
  char buf[128] = {};
  std::string out;
  while (size_t n = std::fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  REQUIRE(::pclose(p) == 0);
  while (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

core::ShardIndex IndexOf(const std::string& path) {
  Bytes b = ReadBytes(path);
  auto r = core::ParseShardIndex(b, {});
  REQUIRE(r.ok());
  return r.value();
}

// Verified is every listed shard's VerifyFile result (absent files left out).
struct Verified {
  std::vector<signer::VerifyResult> results;
  signer::SetVerifications map;
  Verified(const TempDir& dir, const core::ShardIndex& index) {
    std::vector<signer::PublicKey> keys = {TestKey().public_key()};
    results.reserve(index.shards.size());
    for (const auto& s : index.shards) {
      if (!fs::exists(dir / s)) continue;
      auto r = signer::VerifyFile(dir / s, keys);
      REQUIRE(r.ok());
      results.push_back(r.value());
      map[s] = &results.back();
    }
  }
};

std::vector<Code> Codes(const std::vector<core::Error>& errors) {
  std::vector<Code> out;
  for (const auto& e : errors) out.push_back(e.code);
  return out;
}

std::vector<core::Error> CheckDir(const TempDir& dir) {
  core::ShardIndex index = IndexOf(dir / kIndexName);
  Verified v(dir, index);
  return signer::CheckSet(index, v.map);
}

}  // namespace

TEST_CASE("SetDigest equals an independent Python computation", "[signer][set]") {
  TempDir dir;
  MakeSet(dir, 1);
  const std::string before = RefDigest(dir / kIndexName);
  REQUIRE(before.size() == 64);
  signer::SignSetResult r = SignOk(dir.path());
  CHECK(core::HexLower(r.digest) == before);
  // Signing changes no content digest: the signed shards give the same set.
  CHECK(RefDigest(dir / kIndexName) == before);
  // Another release's values give another digest.
  TempDir other;
  MakeSet(other, 2);
  CHECK(RefDigest(other / kIndexName) != before);
  CHECK(core::HexLower(SignOk(other / kIndexName).digest) == RefDigest(other / kIndexName));
}

TEST_CASE("SignSet: every shard verifies with its set record", "[signer][set]") {
  TempDir dir;
  MakeSet(dir, 1);
  signer::SignSetResult r = SignOk(dir.path());
  CHECK(r.index_path == dir / kIndexName);
  REQUIRE(r.shards.size() == 2);
  std::vector<signer::PublicKey> keys = {TestKey().public_key()};
  for (uint64_t i = 0; i < 2; ++i) {
    const std::string path = dir / (i == 0 ? kOne : kTwo);
    CHECK(r.shards[i].path == path);
    auto v = signer::VerifyFile(path, keys);
    REQUIRE(v.ok());
    REQUIRE(v.value().valid());
    REQUIRE(v.value().records.size() == 1);
    const auto& set = v.value().records[0].record.set;
    REQUIRE(set.has_value());
    CHECK(*set == signer::SetRef{i, 2, r.digest});
  }
  CHECK(CheckDir(dir).empty());
  // Signing again (by index path) gives the same digest and still checks.
  signer::SignSetResult again = SignOk(dir / kIndexName, 1764374500);
  CHECK(again.digest == r.digest);
  CHECK(CheckDir(dir).empty());
}

TEST_CASE("CheckSet: a shard from another signed release", "[signer][set]") {
  TempDir a, b;
  MakeSet(a, 1);
  MakeSet(b, 2);
  SignOk(a.path());
  SignOk(b.path());
  fs::copy_file(b / kTwo, a / kTwo, fs::copy_options::overwrite_existing);
  // Both shards still verify on their own, and the index still matches them.
  auto e = CheckDir(a);
  CHECK(Codes(e) == std::vector<Code>{Code::kSetDigest, Code::kSetDigest});
  CHECK(e[0].message.find("\"" + kOne + "\"") != std::string::npos);
}

TEST_CASE("CheckSet: an edited index", "[signer][set]") {
  TempDir dir;
  MakeSet(dir, 1);
  SignOk(dir.path());
  // Shard 2 renamed, and the index edited to match: consistent, but not the
  // set that was signed.
  const std::string renamed = "model-00002-of-00002-b.safetensors";
  fs::rename(dir / kTwo, dir / renamed);
  std::string t = IndexText(kOne, renamed);
  WriteBytes(dir / kIndexName, Bytes(t.begin(), t.end()));
  core::ShardIndex index = IndexOf(dir / kIndexName);
  Verified v(dir, index);
  core::Safetensors h1 = v.results[0].file, h2 = v.results[1].file;
  CHECK(core::ShardSetErrors(index, {{kOne, &h1}, {renamed, &h2}}).empty());
  CHECK(Codes(signer::CheckSet(index, v.map)) == std::vector<Code>{Code::kSetDigest, Code::kSetDigest});
  // total_size is not in the set digest; the index check catches it.
  t = IndexText(kOne, renamed, 47);
  WriteBytes(dir / kIndexName, Bytes(t.begin(), t.end()));
  index = IndexOf(dir / kIndexName);
  CHECK(Codes(core::ShardSetErrors(index, {{kOne, &h1}, {renamed, &h2}})) ==
        std::vector<Code>{Code::kSetTotalSize});
}

TEST_CASE("CheckSet: two shards renamed into each other", "[signer][set]") {
  TempDir dir;
  MakeSet(dir, 1);
  SignOk(dir.path());
  fs::rename(dir / kOne, dir / "tmp");
  fs::rename(dir / kTwo, dir / kOne);
  fs::rename(dir / "tmp", dir / kTwo);
  auto e = CheckDir(dir);
  CHECK(Codes(e) ==
        std::vector<Code>{Code::kSetPosition, Code::kSetDigest, Code::kSetPosition, Code::kSetDigest});
  CHECK(e[0].message.find("signed as shard 2 of 2, but the index lists it as 1 of 2") != std::string::npos);
}

TEST_CASE("CheckSet: a missing shard", "[signer][set]") {
  TempDir dir;
  MakeSet(dir, 1);
  SignOk(dir.path());
  fs::remove(dir / kTwo);
  auto e = CheckDir(dir);
  REQUIRE(Codes(e) == std::vector<Code>{Code::kSetIncomplete});
  CHECK(e[0].message.find("\"" + kTwo + "\" is missing or did not verify") != std::string::npos);
}

TEST_CASE("CheckSet: a tampered shard leaves the set unchecked", "[signer][set]") {
  TempDir dir;
  MakeSet(dir, 1);
  SignOk(dir.path());
  Bytes f = ReadBytes(dir / kTwo);
  f.back() ^= 1;
  WriteBytes(dir / kTwo, f);
  CHECK(Codes(CheckDir(dir)) == std::vector<Code>{Code::kSetIncomplete});
}

TEST_CASE("CheckSet: shards signed one by one carry no set", "[signer][set]") {
  TempDir dir;
  MakeSet(dir, 1);
  // Unsigned: nothing to judge.
  CHECK(CheckDir(dir).empty());
  SignOk(dir.path());
  // Shard 2 re-signed alone: its content is unchanged, so shard 1's set
  // record still holds; shard 2 is no longer tied to the set.
  auto one = signer::SignFile(dir / kTwo, TestKey(), At(1764374400));
  REQUIRE(one.ok());
  auto e = CheckDir(dir);
  REQUIRE(Codes(e) == std::vector<Code>{Code::kSetNotSigned});
  CHECK(e[0].message.find("\"" + kTwo + "\"") != std::string::npos);
  // A record by a key the verifier does not trust is not judged.
  core::ShardIndex index = IndexOf(dir / kIndexName);
  std::vector<signer::PublicKey> other = {TestKey(7).public_key()};
  std::vector<signer::VerifyResult> untrusted;
  for (const auto& s : index.shards) {
    auto r = signer::VerifyFile(dir / s, other);
    REQUIRE(r.ok());
    CHECK(r.value().status == signer::SigStatus::kUntrusted);
    untrusted.push_back(r.value());
  }
  CHECK(signer::CheckSet(index, {{kOne, &untrusted[0]}, {kTwo, &untrusted[1]}}).empty());
}

TEST_CASE("SignSet signs a set whose total_size is off (an index finding, not a set one)", "[signer][set]") {
  TempDir dir;
  MakeSet(dir, 1);
  std::string t = IndexText(kOne, kTwo, 50);
  WriteBytes(dir / kIndexName, Bytes(t.begin(), t.end()));
  SignOk(dir.path());
  CHECK(CheckDir(dir).empty());
}

TEST_CASE("SignSet refuses, writing nothing", "[signer][set]") {
  TempDir dir;
  MakeSet(dir, 1);
  const Bytes one = ReadBytes(dir / kOne), two = ReadBytes(dir / kTwo);
  auto unchanged = [&] {
    CHECK(ReadBytes(dir / kOne) == one);
    CHECK(ReadBytes(dir / kTwo) == two);
  };
  auto refused = [&](const std::string& path, const signer::SignOptions& o, Code code) {
    auto r = signer::SignSet(path, TestKey(), o);
    REQUIRE_FALSE(r.ok());
    INFO(r.error().message);
    CHECK(r.error().code == code);
    unchanged();
    return r.error().message;
  };

  SECTION("options.set given") {
    signer::SignOptions o = At(1);
    o.set = signer::SetRef{0, 2, {}};
    refused(dir.path(), o, Code::kSigOptions);
  }
  SECTION("an ECDSA key (embedded signatures are Ed25519)") {
    auto ecdsa = signer::PrivateKey::Generate(signer::KeyAlg::kEcdsaP256);
    REQUIRE(ecdsa.ok());
    auto r = signer::SignSet(dir.path(), ecdsa.value(), At(1));
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code == Code::kSigOptions);
    CHECK(r.error().message.find("--detached") != std::string::npos);
    unchanged();
  }
  SECTION("a shard holds a tensor the index does not list") {
    std::string t = IndexText(kOne, kTwo);
    t = Replace(t, "    \"layer.1.weight\": \"" + kTwo + "\"\n", "");
    t = Replace(t, "\"" + kOne + "\",\n  }", "\"" + kOne + "\"\n  }");
    WriteBytes(dir / kIndexName, Bytes(t.begin(), t.end()));
    const std::string m = refused(dir.path(), At(1), Code::kSetTensorExtra);
    CHECK(m.find("not signing a set the index does not describe") != std::string::npos);
  }
  SECTION("a listed shard is missing") {
    std::string t = Replace(IndexText(kOne, kTwo), "\"empty\": \"" + kTwo, "\"empty\": \"gone.safetensors");
    WriteBytes(dir / kIndexName, Bytes(t.begin(), t.end()));
    refused(dir.path(), At(1), Code::kSetShardMissing);
  }
  SECTION("the index escapes the directory") {
    std::string t = Replace(IndexText(kOne, kTwo), "\"empty\": \"" + kTwo, "\"empty\": \"../" + kTwo);
    WriteBytes(dir / kIndexName, Bytes(t.begin(), t.end()));
    refused(dir.path(), At(1), Code::kSetShardPath);
  }
  SECTION("two shards are one file") {
    fs::remove(dir / kTwo);
    fs::create_hard_link(dir / kOne, dir / kTwo);
    auto r = signer::SignSet(dir.path(), TestKey(), At(1));
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code == Code::kSigOptions);
    CHECK(r.error().message.find("hard link") != std::string::npos);
    CHECK(ReadBytes(dir / kOne) == one);
  }
  SECTION("a shard is a symlink") {
    fs::rename(dir / kTwo, dir / "real.safetensors");
    fs::create_symlink("real.safetensors", dir / kTwo);
    auto r = signer::SignSet(dir.path(), TestKey(), At(1));
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code == Code::kIoNotRegular);
    CHECK(ReadBytes(dir / kOne) == one);
  }
  SECTION("a directory below the index is a symlink") {
    fs::create_directory(dir / "real");
    fs::rename(dir / kTwo, dir / ("real/" + kTwo));
    fs::create_directory_symlink("real", dir / "sub");
    std::string t = IndexText(kOne, "sub/" + kTwo);
    WriteBytes(dir / kIndexName, Bytes(t.begin(), t.end()));
    auto r = signer::SignSet(dir.path(), TestKey(), At(1));
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code == Code::kIoNotRegular);
    CHECK(ReadBytes(dir / kOne) == one);
  }
  SECTION("no index in the directory") {
    fs::remove(dir / kIndexName);
    refused(dir.path(), At(1), Code::kSigOptions);
  }
  SECTION("two indexes in the directory") {
    fs::copy_file(dir / kIndexName, dir / "model.safetensors.index.fp16.json");
    const std::string m = refused(dir.path(), At(1), Code::kSigOptions);
    CHECK(m.find("name the one to sign") != std::string::npos);
  }
  SECTION("a malformed index") {
    std::string t = Replace(IndexText(kOne, kTwo), "\"total_parameters\": 12,", "\"total_size\": 1,");
    WriteBytes(dir / kIndexName, Bytes(t.begin(), t.end()));
    refused(dir.path(), At(1), Code::kSetIndex);
  }
}

TEST_CASE("SignSet: shards in a subdirectory", "[signer][set]") {
  TempDir dir;
  MakeSet(dir, 1);
  fs::create_directory(dir / "weights");
  fs::rename(dir / kTwo, dir / ("weights/" + kTwo));
  std::string t = IndexText(kOne, "weights/" + kTwo);
  WriteBytes(dir / kIndexName, Bytes(t.begin(), t.end()));
  signer::SignSetResult r = SignOk(dir.path());
  CHECK(core::HexLower(r.digest) == RefDigest(dir / kIndexName));
  CHECK(CheckDir(dir).empty());
}

TEST_CASE("the set digest of tests/fixtures/oms/model is docs/stsig.md's", "[signer][set]") {
  const std::string kDoc = "c4af30489db925799a7af6637528224fba2d3ebda1c28cebac8af51d3e494524";
  const std::string model = std::string(MG_STSIG_VECTORS) + "/../../fixtures/oms/model";
  CHECK(RefDigest(model + "/" + kIndexName) == kDoc);
  TempDir dir;
  for (const auto& name : {kOne, kTwo, kIndexName}) fs::copy_file(model + "/" + name, dir / name);
  for (const auto& name : {kOne, kTwo}) fs::permissions(dir / name, fs::perms::owner_write, fs::perm_options::add);
  CHECK(core::HexLower(SignOk(dir.path()).digest) == kDoc);
  CHECK(CheckDir(dir).empty());
}
