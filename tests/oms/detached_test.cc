// OMS bundles (signer/include/modelgate/detached.h): the model_signing 1.1.1
// vectors verify, every strictness rule of issue 11 point 3 rejects, limits
// at N and N+1, and our own bundles round-trip (and pass check_bundle.py,
// which re-implements model_signing's verify key).
#include "modelgate/detached.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "modelgate/signer.h"

namespace fs = std::filesystem;
using namespace modelgate;
using namespace modelgate::signer;
using namespace modelgate::signer::oms;
using ojson = nlohmann::ordered_json;

namespace {

const std::string kFix = MG_OMS_FIXTURES;
const std::string kModel = kFix + "/model";
const std::string kMs = kFix + "/model_signing_1.1.1";

std::string ReadText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void WriteText(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
}

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "mg-oms-XXXXXX").string();
    if (::mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp");
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

PublicKey Pub(const std::string& name) {
  auto k = LoadPublicKey(kFix + "/keys/" + name + ".pub.pem");
  REQUIRE(k.ok());
  return k.value();
}

PrivateKey Priv(const std::string& name) {
  auto k = LoadPrivateKey(kFix + "/keys/" + name + ".priv.pem");
  if (!k.ok()) FAIL(k.error().message);
  return std::move(k).value();
}

// A writable copy of the vector model.
std::string CopyModel(const TempDir& t, const std::string& name = "model") {
  const std::string dst = t / name;
  fs::copy(kModel, dst, fs::copy_options::recursive);
  for (auto& e : fs::recursive_directory_iterator(dst)) {
    fs::permissions(e.path(), fs::perms::owner_write, fs::perm_options::add);
  }
  fs::permissions(dst, fs::perms::owner_all, fs::perm_options::add);
  return dst;
}

std::string Base64(const std::vector<uint8_t>& b) {
  static const char* kA = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  for (size_t i = 0; i < b.size(); i += 3) {
    uint32_t n = static_cast<uint32_t>(b[i]) << 16;
    if (i + 1 < b.size()) n |= static_cast<uint32_t>(b[i + 1]) << 8;
    if (i + 2 < b.size()) n |= b[i + 2];
    out += kA[(n >> 18) & 63];
    out += kA[(n >> 12) & 63];
    out += i + 1 < b.size() ? kA[(n >> 6) & 63] : '=';
    out += i + 2 < b.size() ? kA[n & 63] : '=';
  }
  return out;
}

std::vector<uint8_t> Bytes(const std::string& s) {
  return {s.begin(), s.end()};
}

// The statement of the compact hand-built bundle (files mode over the
// vector model), for edits.
std::string VectorPayload() {
  auto b = ParseBundle(ReadText(kFix + "/handbuilt/files-p256-compact.sig"));
  REQUIRE(b.ok());
  return b.value().payload;
}

// BundleFor wraps `payload` text in the compact bundle form, signed by `key`
// (each of `keys`, one DSSE signature each).
std::string BundleFor(const std::string& payload, const std::vector<const PrivateKey*>& keys,
                      const std::string& media_type = std::string(kBundleMediaType)) {
  ojson b;
  b["mediaType"] = media_type;
  b["verificationMaterial"]["publicKey"]["hint"] = KeyHint(keys.front()->public_key());
  b["dsseEnvelope"]["payload"] = Base64(Bytes(payload));
  b["dsseEnvelope"]["payloadType"] = std::string(kPayloadType);
  b["dsseEnvelope"]["signatures"] = ojson::array();
  for (const PrivateKey* k : keys) {
    auto sig = k->SignBytes(PreAuthEncoding(kPayloadType, payload));
    REQUIRE(sig.ok());
    b["dsseEnvelope"]["signatures"].push_back({{"sig", Base64(sig.value())}});
  }
  return b.dump();
}

// Root-digest-consistent payload from an edited statement.
std::string Reroot(ojson st) {
  core::Sha256Hasher h;
  for (const auto& r : st["predicate"]["resources"]) {
    core::Sha256Digest d{};
    REQUIRE(core::ParseHexLower(r["digest"].get<std::string>(), d));
    h.Update(d);
  }
  st["subject"][0]["digest"]["sha256"] = core::HexLower(h.Final());
  return st.dump();
}

Reason ParseReason(const std::string& text, const BundleLimits& limits = {}) {
  Reason why = Reason::kNone;
  auto b = ParseBundle(text, limits, &why);
  if (b.ok()) return Reason::kNone;
  CHECK(b.error().code == core::Code::kSigBadRecord);
  CHECK(why != Reason::kNone);
  UNSCOPED_INFO(b.error().message);
  return why;
}

// ParseWithResources: the vector payload with `edit` applied to its
// resources, rerooted, as a bundle signed by p256.
Reason ResourcesReason(const std::function<void(ojson&)>& edit) {
  ojson st = ojson::parse(VectorPayload());
  edit(st["predicate"]["resources"]);
  PrivateKey k = Priv("p256");
  return ParseReason(BundleFor(Reroot(st), {&k}));
}

ojson ShardStatement() {
  auto b = ParseBundle(ReadText(kMs + "/shards40-p256.sig"));
  REQUIRE(b.ok());
  return ojson::parse(b.value().payload);
}

DetachedVerifyResult VerifyDir(const std::string& dir, const std::string& bundle,
                               const std::vector<PublicKey>& keys, bool allow_unsigned = false) {
  DetachedVerifyOptions o;
  o.allow_unsigned_files = allow_unsigned;
  auto r = VerifyDetached(dir, bundle, keys, o);
  if (!r.ok()) FAIL(r.error().message);
  return std::move(r).value();
}

const DetachedFile* FileIn(const DetachedVerifyResult& r, const std::string& path) {
  for (const DetachedFile& f : r.files) {
    if (f.path == path) return &f;
  }
  return nullptr;
}

}  // namespace

// ---- vectors ----------------------------------------------------------------------

TEST_CASE("oms: model_signing files-mode bundles verify with their key, P-256/384/521") {
  for (const char* alg : {"p256", "p384", "p521"}) {
    INFO(alg);
    auto r = VerifyDir(kModel, kMs + "/files-" + std::string(alg) + ".sig", {Pub(alg)});
    CHECK(r.bundle.status == SigStatus::kValid);
    CHECK(r.ok());
    CHECK(r.missing.empty());
    REQUIRE(r.files.size() == 7);
    for (const DetachedFile& f : r.files) CHECK(f.state == FileState::kSigned);
    CHECK(r.manifest.subject_name == "model");
    CHECK(r.manifest.method == Method::kFiles);
  }
}

TEST_CASE("oms: the root digest is model_signing's digest, resources in PurePosixPath order") {
  auto b = ParseBundle(ReadText(kMs + "/files-p256.sig"));
  REQUIRE(b.ok());
  const std::string want = ReadText(kMs + "/digest-files.txt");
  CHECK(want.find(core::HexLower(b.value().manifest.root_digest)) != std::string::npos);
  CHECK(RootDigest(b.value().manifest.resources) == b.value().manifest.root_digest);
  std::vector<std::string> paths;
  for (const auto& r : b.value().manifest.resources) paths.push_back(r.path);
  CHECK(paths == std::vector<std::string>{"a-b", "a.txt", "config.json", "model-00001-of-00002.safetensors",
                                          "model-00002-of-00002.safetensors", "model.safetensors.index.json",
                                          "sub/notes.txt"});
  CHECK(PathLess("a/x", "a-b"));  // component "a" before "a-b"
  CHECK_FALSE(PathLess("a-b", "a/x"));
  CHECK(PathLess("a-b", "a.txt"));
  CHECK(PathLess("sub", "sub/x"));
  CHECK_FALSE(PathLess("x", "x"));
  CHECK(b.value().manifest.ignore_paths.size() == 4);
}

TEST_CASE("oms: single-file, shards and hand-built vectors verify") {
  auto single =
      VerifyDir(kModel + "/model-00001-of-00002.safetensors", kMs + "/single-file-p256.sig", {Pub("p256")});
  CHECK(single.ok());
  REQUIRE(single.files.size() == 1);
  CHECK(single.files[0].path == ".");
  CHECK(single.manifest.subject_name == "model-00001-of-00002.safetensors");

  auto shards = VerifyDir(kModel, kMs + "/shards40-p256.sig", {Pub("p256")});
  CHECK(shards.ok());
  CHECK(shards.manifest.method == Method::kShards);
  CHECK(shards.manifest.shard_size == 40);
  CHECK(shards.manifest.resources.size() == 22);

  CHECK(VerifyDir(kModel, kFix + "/handbuilt/files-p256-compact.sig", {Pub("p256")}).ok());
  // model_signing refuses Ed25519 bundles; modelgate verifies them.
  CHECK(VerifyDir(kModel, kFix + "/handbuilt/files-ed25519.sig", {Pub("ed25519")}).ok());
}

TEST_CASE("oms: a one-file bundle does not verify a directory, nor a directory bundle a file") {
  auto r = VerifyDir(kModel, kMs + "/single-file-p256.sig", {Pub("p256")});
  CHECK_FALSE(r.ok());
  CHECK(r.missing == std::vector<std::string>{"."});
  auto r2 = VerifyDir(kModel + "/a.txt", kMs + "/files-p256.sig", {Pub("p256")});
  CHECK_FALSE(r2.ok());
  CHECK(r2.missing.size() == 7);
}

TEST_CASE("oms: another key is untrusted, a trusted key named by the hint that fails is invalid") {
  auto r = VerifyDir(kModel, kMs + "/files-p256.sig", {Pub("p384")});
  CHECK(r.bundle.status == SigStatus::kUntrusted);
  CHECK(r.bundle.why == Reason::kUntrusted);
  CHECK_THAT(r.bundle.reason.message,
             Catch::StartsWith("the bundle's signature does not verify under a trusted key"));
  CHECK(r.files.empty());  // nothing hashed for an untrusted bundle
  CHECK_FALSE(r.ok());

  // The signature's bytes damaged: the hint still names the trusted key.
  ojson b = ojson::parse(ReadText(kMs + "/files-p256.sig"));
  std::string sig = b["dsseEnvelope"]["signatures"][0]["sig"].get<std::string>();
  sig[10] = sig[10] == 'A' ? 'B' : 'A';
  b["dsseEnvelope"]["signatures"][0]["sig"] = sig;
  auto parsed = ParseBundle(b.dump());
  REQUIRE(parsed.ok());
  BundleVerdict v = VerifyBundle(parsed.value(), std::vector<PublicKey>{Pub("p256")});
  CHECK(v.status == SigStatus::kInvalid);
  CHECK(v.why == Reason::kBadSignature);
  CHECK(v.reason.message.find("signature 0") != std::string::npos);
}

TEST_CASE("oms: the key hint is SHA-256 of the key's PEM (model_signing's)") {
  auto b = ParseBundle(ReadText(kMs + "/files-p384.sig"));
  REQUIRE(b.ok());
  CHECK(KeyHint(Pub("p384")) == b.value().hint);
  CHECK(KeyHint(Pub("p256")) == "96a9ccf5bd86be4bdac38def58330eb2f38024f07c8fa468eb7d24a4d4111e4d");
}

// ---- strictness (issue 11 point 3) -------------------------------------------------

TEST_CASE("oms strict: duplicate keys in the bundle, the envelope or the statement") {
  const std::string text = ReadText(kFix + "/handbuilt/files-p256-compact.sig");
  std::string dup_bundle = text;
  dup_bundle.insert(1, "\"mediaType\": \"x\", ");
  CHECK(ParseReason(dup_bundle) == Reason::kMalformed);
  std::string dup_env = text;
  const size_t at = dup_env.find("\"payloadType\"");
  REQUIRE(at != std::string::npos);
  dup_env.insert(at, "\"payloadType\": \"application/vnd.in-toto+json\", ");
  CHECK(ParseReason(dup_env) == Reason::kMalformed);
  // In the statement: a second "predicateType" (the later one would win in
  // Python's json).
  std::string st = VectorPayload();
  st.insert(1, "\"predicateType\":\"https://model_signing/signature/v1.0\",");
  PrivateKey k = Priv("p256");
  CHECK(ParseReason(BundleFor(st, {&k})) == Reason::kMalformed);
  // Inside a resource, with an escaped spelling of the same key.
  std::string res = VectorPayload();
  const size_t r0 = res.find("{\"algorithm\"");
  REQUIRE(r0 != std::string::npos);
  res.insert(r0 + 1, "\"n\\u0061me\":\"zzz\",");
  CHECK(ParseReason(BundleFor(res, {&k})) == Reason::kMalformed);
}

TEST_CASE("oms strict: duplicate resource names") {
  CHECK(ResourcesReason([](ojson& rs) { rs.push_back(rs[0]); }) == Reason::kDuplicate);
  // The same path with another digest.
  CHECK(ResourcesReason([](ojson& rs) {
          ojson r = rs[1];
          r["digest"] = std::string(64, 'a');
          rs.push_back(r);
        }) == Reason::kDuplicate);
}

TEST_CASE("oms strict: resource paths must be canonical relative paths") {
  for (const char* bad : {"./a.txt", "sub/../a.txt", "..", "../x", "/etc/passwd", "sub\\notes.txt",
                          "sub//notes.txt", "sub/", "", "a\x01"}) {
    INFO(bad);
    CHECK(ResourcesReason([&](ojson& rs) { rs[1]["name"] = std::string(bad); }) == Reason::kResourcePath);
  }
  // "." only as the one file of a one-file model.
  CHECK(ResourcesReason([](ojson& rs) { rs[1]["name"] = "."; }) == Reason::kResourcePath);
}

TEST_CASE("oms strict: every DSSE signature must verify, not only the first") {
  PrivateKey p256 = Priv("p256");
  PrivateKey p384 = Priv("p384");
  const std::string payload = VectorPayload();
  const std::vector<PublicKey> both = {Pub("p256"), Pub("p384")};

  auto two = ParseBundle(BundleFor(payload, {&p256, &p384}));
  REQUIRE(two.ok());
  BundleVerdict ok = VerifyBundle(two.value(), both);
  CHECK(ok.status == SigStatus::kValid);
  CHECK(ok.kids.size() == 2);
  // Only one of the two keys trusted: the other signature fails.
  BundleVerdict one = VerifyBundle(two.value(), std::vector<PublicKey>{Pub("p256")});
  CHECK(one.status == SigStatus::kInvalid);
  CHECK(one.reason.message.find("signature 1 of 2") != std::string::npos);

  // A garbage second signature after a good one.
  ojson b = ojson::parse(BundleFor(payload, {&p256}));
  b["dsseEnvelope"]["signatures"].push_back({{"sig", Base64(Bytes("garbage garbage"))}});
  auto g = ParseBundle(b.dump());
  REQUIRE(g.ok());
  BundleVerdict gv = VerifyBundle(g.value(), both);
  CHECK(gv.status == SigStatus::kInvalid);
  CHECK(gv.why == Reason::kBadSignature);
  CHECK(gv.reason.message.find("signature 1") != std::string::npos);
}

TEST_CASE("oms strict: an unknown media type") {
  PrivateKey k = Priv("p256");
  CHECK(ParseReason(BundleFor(VectorPayload(), {&k}, "application/vnd.dev.sigstore.bundle.v0.2+json")) ==
        Reason::kMediaType);
  CHECK(ParseReason(BundleFor(VectorPayload(), {&k},
                              "application/vnd.dev.sigstore.bundle+json;version=0.3")) == Reason::kMediaType);
}

TEST_CASE("oms strict: shards must tile their file exactly") {
  PrivateKey k = Priv("p256");
  auto with = [&](const std::function<void(ojson&)>& edit) {
    ojson st = ShardStatement();
    edit(st["predicate"]["resources"]);
    return ParseReason(BundleFor(Reroot(st), {&k}));
  };
  auto find = [](ojson& rs, const std::string& name) -> ojson& {
    for (auto& r : rs) {
      if (r["name"] == name) return r;
    }
    FAIL("no resource " << name);
    return rs[0];
  };
  CHECK(with([](ojson&) {}) == Reason::kNone);
  // A gap: the shard [40,80) dropped.
  CHECK(with([](ojson& rs) {
          for (size_t i = 0; i < rs.size(); ++i) {
            if (rs[i]["name"] == "model-00001-of-00002.safetensors:40:80") rs.erase(i);
          }
        }) == Reason::kShardTiling);
  // The first shard not at 0.
  CHECK(with([&](ojson& rs) { find(rs, "a-b:0:17")["name"] = "a-b:1:17"; }) == Reason::kShardTiling);
  // A middle shard shorter than shard_size (and the next one moved to follow).
  CHECK(with([&](ojson& rs) {
          find(rs, "model-00001-of-00002.safetensors:40:80")["name"] =
              "model-00001-of-00002.safetensors:40:79";
          find(rs, "model-00001-of-00002.safetensors:80:120")["name"] =
              "model-00001-of-00002.safetensors:79:120";
        }) == Reason::kShardTiling);
  // A last shard longer than shard_size.
  CHECK(with([&](ojson& rs) { find(rs, "sub/notes.txt:0:12")["name"] = "sub/notes.txt:0:41"; }) ==
        Reason::kShardTiling);
  // An empty shard.
  CHECK(with([&](ojson& rs) {
          rs.push_back({{"algorithm", "sha256-sharded-40"},
                        {"digest", std::string(64, 'b')},
                        {"name", "sub/notes.txt:12:12"}});
        }) == Reason::kShardTiling);
  // Not PATH:START:END decimal.
  CHECK(with([&](ojson& rs) { find(rs, "a-b:0:17")["name"] = "a-b:00:17"; }) == Reason::kResourcePath);
  CHECK(with([&](ojson& rs) { find(rs, "a-b:0:17")["name"] = "a-b:+0:17"; }) == Reason::kResourcePath);
  CHECK(with([&](ojson& rs) { find(rs, "a-b:0:17")["name"] = "a:b:0:17"; }) == Reason::kResourcePath);
  // The algorithm must name the shard size.
  CHECK(with([&](ojson& rs) { find(rs, "a-b:0:17")["algorithm"] = "sha256-sharded-41"; }) ==
        Reason::kMalformed);
}

TEST_CASE("oms strict: in shard mode an empty extra file is rejected (model_signing lists none)") {
  TempDir t;
  const std::string dir = CopyModel(t);
  CHECK(VerifyDir(dir, kMs + "/shards40-p256.sig", {Pub("p256")}).ok());
  WriteText(dir + "/empty.bin", "");
  auto r = VerifyDir(dir, kMs + "/shards40-p256.sig", {Pub("p256")});
  CHECK_FALSE(r.ok());
  const DetachedFile* f = FileIn(r, "empty.bin");
  REQUIRE(f != nullptr);
  CHECK(f->state == FileState::kAdded);
  std::vector<Reason> reasons;
  auto problems = r.Problems(&reasons);
  REQUIRE(problems.size() == 1);
  CHECK(reasons[0] == Reason::kFileUnsigned);
  CHECK(problems[0].message.find("empty.bin") != std::string::npos);
  CHECK(RangesFor(r.manifest, 0).empty());
  CHECK(RangesFor(r.manifest, 81).size() == 3);
  CHECK(RangesFor(r.manifest, 81)[2].offset == 80);
  CHECK(RangesFor(r.manifest, 81)[2].size_bytes == 1);
}

TEST_CASE("oms strict: the subject digest must be over the resources as listed") {
  ojson st = ojson::parse(VectorPayload());
  st["subject"][0]["digest"]["sha256"] = std::string(64, '0');
  PrivateKey k = Priv("p256");
  CHECK(ParseReason(BundleFor(st.dump(), {&k})) == Reason::kRootDigest);
  // Reordered resources keep model_signing's order-as-listed digest: a
  // bundle whose subject was computed over another order is refused.
  ojson swapped = ojson::parse(VectorPayload());
  std::swap(swapped["predicate"]["resources"][0], swapped["predicate"]["resources"][1]);
  CHECK(ParseReason(BundleFor(swapped.dump(), {&k})) == Reason::kRootDigest);
  // ... and accepted (then sorted) when it was computed over that order.
  auto re = ParseBundle(BundleFor(Reroot(swapped), {&k}));
  REQUIRE(re.ok());
  CHECK(re.value().manifest.resources[0].path == "a-b");
}

TEST_CASE("oms strict: fields, types and encodings") {
  PrivateKey k = Priv("p256");
  const std::string good = BundleFor(VectorPayload(), {&k});
  CHECK(ParseReason(good) == Reason::kNone);
  auto edit_bundle = [&](const std::function<void(ojson&)>& f) {
    ojson b = ojson::parse(good);
    f(b);
    return ParseReason(b.dump());
  };
  auto edit_statement = [&](const std::function<void(ojson&)>& f) {
    ojson st = ojson::parse(VectorPayload());
    f(st);
    return ParseReason(BundleFor(st.dump(), {&k}));
  };
  CHECK(edit_bundle([](ojson& b) { b["extra"] = 1; }) == Reason::kMalformed);
  CHECK(edit_bundle([](ojson& b) { b["verificationMaterial"]["certificate"] = "x"; }) == Reason::kMalformed);
  CHECK(edit_bundle([](ojson& b) { b["verificationMaterial"]["tlogEntries"] = ojson::array({1}); }) ==
        Reason::kMalformed);
  CHECK(edit_bundle([](ojson& b) { b["verificationMaterial"]["tlogEntries"] = ojson::array(); }) ==
        Reason::kNone);
  CHECK(edit_bundle([](ojson& b) { b["verificationMaterial"]["publicKey"]["hint"] = "ABC"; }) ==
        Reason::kMalformed);
  CHECK(edit_bundle([](ojson& b) { b["dsseEnvelope"]["payloadType"] = "application/json"; }) ==
        Reason::kMalformed);
  CHECK(edit_bundle([](ojson& b) { b["dsseEnvelope"]["signatures"] = ojson::array(); }) ==
        Reason::kMalformed);
  CHECK(edit_bundle([](ojson& b) {
          std::string p = b["dsseEnvelope"]["payload"].get<std::string>();
          b["dsseEnvelope"]["payload"] = p.substr(0, p.size() - 1);  // padding cut
        }) == Reason::kMalformed);
  CHECK(edit_bundle([](ojson& b) {
          b["dsseEnvelope"]["payload"] = " " + b["dsseEnvelope"]["payload"].get<std::string>();
        }) == Reason::kMalformed);
  CHECK(edit_bundle([](ojson& b) { b["dsseEnvelope"]["signatures"][0]["extra"] = ""; }) ==
        Reason::kMalformed);
  CHECK(edit_statement([](ojson& s) { s["_type"] = "https://in-toto.io/Statement/v0.1"; }) ==
        Reason::kMalformed);
  CHECK(edit_statement([](ojson& s) { s["predicateType"] = "https://model_signing/Digests/v0.1"; }) ==
        Reason::kMalformed);
  CHECK(edit_statement([](ojson& s) { s["subject"].push_back(s["subject"][0]); }) == Reason::kMalformed);
  CHECK(edit_statement([](ojson& s) { s["predicate"]["serialization"]["hash_type"] = "blake2"; }) ==
        Reason::kMalformed);
  CHECK(edit_statement([](ojson& s) { s["predicate"]["serialization"]["method"] = "digest"; }) ==
        Reason::kMalformed);
  CHECK(edit_statement([](ojson& s) { s["predicate"]["serialization"]["allow_symlinks"] = "false"; }) ==
        Reason::kMalformed);
  CHECK(edit_statement([](ojson& s) { s["predicate"]["extra"] = 1; }) == Reason::kMalformed);
  CHECK(edit_statement([](ojson& s) { s["predicate"]["resources"] = ojson::array(); }) == Reason::kMalformed);
  CHECK(edit_statement([](ojson& s) { s["predicate"]["resources"][0]["digest"] = std::string(64, 'A'); }) ==
        Reason::kMalformed);
  CHECK(edit_statement([](ojson& s) { s["predicate"]["serialization"]["ignore_paths"].push_back("a-b"); }) ==
        Reason::kMalformed);  // a resource under an ignore path
  CHECK(edit_statement([](ojson& s) { s["predicate"]["serialization"]["ignore_paths"].push_back("../x"); }) ==
        Reason::kResourcePath);
  CHECK(edit_statement([](ojson& s) {
          s["subject"][0]["annotations"] = {{"modelgate.version", "07"}};
        }) == Reason::kMalformed);
  CHECK(ParseReason("[]") == Reason::kMalformed);
  CHECK(ParseReason("{\"mediaType\": 3}") == Reason::kMalformed);
  CHECK(ParseReason(good + " x") == Reason::kMalformed);
}

TEST_CASE("oms limits: bundle bytes and resources at N and N+1") {
  PrivateKey k = Priv("p256");
  const std::string good = BundleFor(VectorPayload(), {&k});
  BundleLimits at;
  at.max_bundle_bytes = good.size();
  CHECK(ParseReason(good, at) == Reason::kNone);
  at.max_bundle_bytes = good.size() - 1;
  CHECK(ParseReason(good, at) == Reason::kLimit);

  BundleLimits res;
  res.max_resources = 7;  // the vector model's file count
  CHECK(ParseReason(good, res) == Reason::kNone);
  res.max_resources = 6;
  CHECK(ParseReason(good, res) == Reason::kLimit);
  CHECK(kMaxBundleBytes == 64ull << 20);
  CHECK(kMaxResources == 1000000);

  // The file read is bounded the same way (a verdict, not an error).
  TempDir t;
  WriteText(t / "b.sig", good);
  DetachedVerifyOptions o;
  o.limits.max_bundle_bytes = good.size() - 1;
  auto r = VerifyDetached(kModel, t / "b.sig", std::vector<PublicKey>{Pub("p256")}, o);
  REQUIRE(r.ok());
  CHECK(r.value().bundle.why == Reason::kLimit);
  o.limits.max_bundle_bytes = good.size();
  auto r2 = VerifyDetached(kModel, t / "b.sig", std::vector<PublicKey>{Pub("p256")}, o);
  REQUIRE(r2.ok());
  CHECK(r2.value().ok());
}

// ---- signing --------------------------------------------------------------------

TEST_CASE("oms sign: our bundle of the vector model has model_signing's root digest and verifies") {
  TempDir t;
  const std::string dir = CopyModel(t);
  fs::create_directories(dir + "/.git/objects");
  WriteText(dir + "/.git/HEAD", "ref: refs/heads/main\n");
  WriteText(dir + "/.gitattributes", "*.safetensors filter=lfs\n");
  PrivateKey key = Priv("p256");
  DetachedSignOptions so;
  auto s = SignDetached(dir, key, dir + "/model.sig", so);
  if (!s.ok()) FAIL(s.error().message);
  CHECK(s.value().files == 7);
  CHECK(s.value().bytes == 17 + 17 + 22 + 200 + 184 + 287 + 12);
  const std::string want = ReadText(kMs + "/digest-files.txt");
  CHECK(want.find(core::HexLower(s.value().manifest.root_digest)) != std::string::npos);
  const auto& ip = s.value().manifest.ignore_paths;
  CHECK(std::find(ip.begin(), ip.end(), "model.sig") != ip.end());
  CHECK(std::find(ip.begin(), ip.end(), ".git") != ip.end());
  CHECK(ReadText(dir + "/model.sig") == s.value().bundle_text);

  auto r = VerifyDir(dir, dir + "/model.sig", {Pub("p256")});
  CHECK(r.ok());
  const DetachedFile* sig = FileIn(r, "model.sig");
  REQUIRE(sig != nullptr);
  CHECK(sig->state == FileState::kIgnored);
  CHECK(sig->size == s.value().bundle_text.size());  // an ignored file is listed with its size
  const DetachedFile* ga = FileIn(r, ".gitattributes");
  REQUIRE(ga != nullptr);
  CHECK(ga->state == FileState::kIgnored);
  const DetachedFile* cfg = FileIn(r, "config.json");
  REQUIRE(cfg != nullptr);
  CHECK(cfg->sha256 == core::Sha256(Bytes(ReadText(kModel + "/config.json"))));

  // The bundle still verifies after the model is copied elsewhere.
  TempDir t2;
  fs::copy(dir, t2 / "moved", fs::copy_options::recursive);
  CHECK(VerifyDir(t2 / "moved", t2 / "moved/model.sig", {Pub("p256")}).ok());

  // model_signing's verify key steps accept it (tests/oms/check_bundle.py).
  const std::string cmd = std::string(MG_PYTHON3) + " " + MG_CHECK_BUNDLE + " --bundle " + dir +
                          "/model.sig --pubkey " + kFix + "/keys/p256.pub.pem --model " + dir +
                          " > /dev/null";
  CHECK(std::system(cmd.c_str()) == 0);
  // ... and would reject it after a byte changes (the check can fail).
  WriteText(dir + "/a.txt", "changed content!\n");
  CHECK(std::system(cmd.c_str()) != 0);
}

TEST_CASE("oms sign: Ed25519, P-384, one file, version and model name round-trip") {
  TempDir t;
  const std::string dir = CopyModel(t);
  for (const char* alg : {"ed25519", "p384", "p521"}) {
    INFO(alg);
    PrivateKey key = Priv(alg);
    DetachedSignOptions so;
    so.version = 42;
    so.model = "org/model";
    const std::string out = t / (std::string(alg) + ".sig");
    auto s = SignDetached(dir, key, out, so);
    REQUIRE(s.ok());
    auto r = VerifyDir(dir, out, {Pub(alg)});
    CHECK(r.ok());
    CHECK(r.manifest.version == std::optional<uint64_t>(42));
    CHECK(r.manifest.subject_name == "org/model");
    CHECK(r.bundle.kids == std::vector<std::string>{Pub(alg).kid_hex()});
  }
  PrivateKey key = Priv("p256");
  const std::string one = dir + "/model-00002-of-00002.safetensors";
  auto s = SignDetached(one, key, t / "one.sig", {});
  REQUIRE(s.ok());
  CHECK(s.value().manifest.resources.size() == 1);
  CHECK(s.value().manifest.resources[0].path == ".");
  CHECK(s.value().manifest.subject_name == "model-00002-of-00002.safetensors");
  CHECK(VerifyDir(one, t / "one.sig", {Pub("p256")}).ok());
  const std::string cmd = std::string(MG_PYTHON3) + " " + MG_CHECK_BUNDLE + " --bundle " + t / "one.sig" +
                          " --pubkey " + kFix + "/keys/p256.pub.pem --model " + one + " > /dev/null";
  CHECK(std::system(cmd.c_str()) == 0);
}

TEST_CASE("oms sign: --ignore, an empty model, symlinks and special files") {
  TempDir t;
  const std::string dir = CopyModel(t);
  PrivateKey key = Priv("p256");
  DetachedSignOptions so;
  so.ignore = {"sub/", "./a-b"};
  auto s = SignDetached(dir, key, t / "m.sig", so);
  REQUIRE(s.ok());
  CHECK(s.value().files == 5);
  auto r = VerifyDir(dir, t / "m.sig", {Pub("p256")});
  CHECK(r.ok());
  CHECK(FileIn(r, "sub/notes.txt") == nullptr);  // an ignored directory is not entered
  CHECK(FileIn(r, "a-b")->state == FileState::kIgnored);

  so.ignore = {"../x"};
  CHECK_FALSE(SignDetached(dir, key, t / "m2.sig", so).ok());

  fs::create_directories(t / "empty/.git");
  WriteText(t / "empty/.gitignore", "x\n");
  auto e = SignDetached(t / "empty", key, t / "e.sig", {});
  REQUIRE_FALSE(e.ok());
  CHECK(e.error().message.find("no file to sign") != std::string::npos);
  CHECK_FALSE(fs::exists(t / "e.sig"));

  fs::create_symlink("a.txt", dir + "/link");
  auto l = SignDetached(dir, key, t / "l.sig", {});
  REQUIRE_FALSE(l.ok());
  CHECK(l.error().message.find("\"link\" is a symlink") != std::string::npos);
  // A symlink inside an ignored path is not looked at.
  fs::remove(dir + "/link");
  fs::create_directories(dir + "/.git");
  fs::create_symlink("/etc/passwd", dir + "/.git/evil");
  CHECK(SignDetached(dir, key, t / "l2.sig", {}).ok());

  REQUIRE(::mkfifo((dir + "/fifo").c_str(), 0600) == 0);
  auto f = SignDetached(dir, key, t / "f.sig", {});
  REQUIRE_FALSE(f.ok());
  CHECK(f.error().message.find("\"fifo\"") != std::string::npos);
  fs::remove(dir + "/fifo");

  // The root itself a symlink.
  fs::create_symlink(dir, t / "rootlink");
  CHECK_FALSE(SignDetached(t / "rootlink", key, t / "r.sig", {}).ok());
}

TEST_CASE("oms limits: model files at N and N+1") {
  TempDir t;
  const std::string dir = CopyModel(t);  // 7 files
  PrivateKey key = Priv("p256");
  DetachedSignOptions so;
  so.max_files = 7;
  CHECK(SignDetached(dir, key, t / "a.sig", so).ok());
  so.max_files = 6;
  auto s = SignDetached(dir, key, t / "b.sig", so);
  REQUIRE_FALSE(s.ok());
  CHECK(s.error().message.find("more than 6 files") != std::string::npos);
  DetachedVerifyOptions vo;
  vo.max_files = 6;
  CHECK_FALSE(VerifyDetached(dir, t / "a.sig", std::vector<PublicKey>{Pub("p256")}, vo).ok());
  vo.max_files = 7;
  CHECK(VerifyDetached(dir, t / "a.sig", std::vector<PublicKey>{Pub("p256")}, vo).ok());
}

// ---- tamper -----------------------------------------------------------------------

TEST_CASE("oms tamper: changed, added, removed, renamed, moved files are named") {
  const std::string bundle = kMs + "/files-p256.sig";
  const std::vector<PublicKey> keys = {Pub("p256")};
  auto reasons_of = [](const DetachedVerifyResult& r) {
    std::vector<Reason> why;
    std::vector<std::string> msgs;
    for (const auto& e : r.Problems(&why)) msgs.push_back(e.message);
    return std::make_pair(why, msgs);
  };
  {
    TempDir t;
    const std::string dir = CopyModel(t);
    std::string b = ReadText(dir + "/model-00002-of-00002.safetensors");
    b[150] = static_cast<char>(b[150] ^ 1);
    WriteText(dir + "/model-00002-of-00002.safetensors", b);
    auto r = VerifyDir(dir, bundle, keys);
    CHECK_FALSE(r.ok());
    CHECK(FileIn(r, "model-00002-of-00002.safetensors")->state == FileState::kChanged);
    auto [why, msgs] = reasons_of(r);
    REQUIRE(why.size() == 1);
    CHECK(why[0] == Reason::kFileChanged);
    CHECK(msgs[0].find("model-00002-of-00002.safetensors") != std::string::npos);
  }
  {
    TempDir t;
    const std::string dir = CopyModel(t);
    WriteText(dir + "/extra.py", "import os\n");
    auto r = VerifyDir(dir, bundle, keys);
    CHECK_FALSE(r.ok());
    CHECK(FileIn(r, "extra.py")->state == FileState::kAdded);
    CHECK(VerifyDir(dir, bundle, keys, /*allow_unsigned=*/true).ok());
  }
  {
    TempDir t;
    const std::string dir = CopyModel(t);
    fs::remove(dir + "/config.json");
    auto r = VerifyDir(dir, bundle, keys, true);
    CHECK_FALSE(r.ok());  // a missing file always fails
    CHECK(r.missing == std::vector<std::string>{"config.json"});
    auto [why, msgs] = reasons_of(r);
    REQUIRE(why.size() == 1);
    CHECK(why[0] == Reason::kFileMissing);
  }
  {
    TempDir t;
    const std::string dir = CopyModel(t);
    fs::rename(dir + "/a.txt", dir + "/sub/a.txt");  // moved into a subdirectory
    auto r = VerifyDir(dir, bundle, keys);
    CHECK(r.missing == std::vector<std::string>{"a.txt"});
    CHECK(FileIn(r, "sub/a.txt")->state == FileState::kAdded);
  }
  {
    TempDir t;
    const std::string dir = CopyModel(t);
    // Two files renamed into each other.
    fs::rename(dir + "/a.txt", dir + "/tmp");
    fs::rename(dir + "/a-b", dir + "/a.txt");
    fs::rename(dir + "/tmp", dir + "/a-b");
    auto r = VerifyDir(dir, bundle, keys);
    CHECK_FALSE(r.ok());
    CHECK(FileIn(r, "a.txt")->state == FileState::kChanged);
    CHECK(FileIn(r, "a-b")->state == FileState::kChanged);
  }
  {
    TempDir t;
    const std::string dir = CopyModel(t);
    fs::create_symlink("a.txt", dir + "/link");
    DetachedVerifyOptions o;
    auto r = VerifyDetached(dir, bundle, keys, o);
    REQUIRE_FALSE(r.ok());  // cannot judge a model holding a symlink
    CHECK(r.error().message.find("symlink") != std::string::npos);
  }
}

TEST_CASE("oms tamper: a truncated bundle or one from another model") {
  TempDir t;
  const std::string text = ReadText(kMs + "/files-p256.sig");
  WriteText(t / "cut.sig", text.substr(0, text.size() / 2));
  auto r = VerifyDir(kModel, t / "cut.sig", {Pub("p256")});
  CHECK(r.bundle.status == SigStatus::kInvalid);
  CHECK(r.bundle.why == Reason::kMalformed);

  const std::string dir = CopyModel(t, "other");
  WriteText(dir + "/config.json", "{\"other\": true}\n");
  PrivateKey key = Priv("p256");
  REQUIRE(SignDetached(dir, key, t / "other.sig", {}).ok());
  auto x = VerifyDir(kModel, t / "other.sig", {Pub("p256")});
  CHECK_FALSE(x.ok());
  CHECK(FileIn(x, "config.json")->state == FileState::kChanged);
}

TEST_CASE("oms: Compare and Missing on a manifest") {
  Manifest m;
  m.method = Method::kFiles;
  m.ignore_paths = {".git", "docs"};
  core::Sha256Digest d1{}, d2{};
  d1[0] = 1;
  d2[0] = 2;
  m.resources = {{"a", 0, 0, d1}, {"b/c", 0, 0, d2}};
  CHECK(Compare(m, "a", std::vector<core::Sha256Digest>{d1}, 5) == FileState::kSigned);
  CHECK(Compare(m, "a", std::vector<core::Sha256Digest>{d2}, 5) == FileState::kChanged);
  CHECK(Compare(m, "z", std::vector<core::Sha256Digest>{d2}, 5) == FileState::kAdded);
  CHECK(Compare(m, "docs/x", std::vector<core::Sha256Digest>{d2}, 5) == FileState::kIgnored);
  CHECK(Compare(m, "docsx", std::vector<core::Sha256Digest>{d2}, 5) == FileState::kAdded);
  CHECK(IsIgnored(m, ".git"));
  CHECK_FALSE(IsIgnored(m, ".gitx"));
  CHECK(Missing(m, std::vector<std::string>{"a"}) == std::vector<std::string>{"b/c"});
  CHECK(Missing(m, std::vector<std::string>{"b/c", "a"}).empty());
  CHECK(ReasonId(Reason::kShardTiling) == "MG-OMS-SHARD-TILING");
}

TEST_CASE("oms limits: JSON nesting and directory depth at N and N+1") {
  PrivateKey k = Priv("p256");
  ojson b = ojson::parse(BundleFor(VectorPayload(), {&k}));
  // The bundle object, verificationMaterial and tlogEntries are 3 levels.
  auto nested = [&](size_t levels) {
    ojson v = ojson::array();
    for (size_t i = 1; i < levels; ++i) v = ojson::array({v});
    ojson copy = b;
    copy["verificationMaterial"]["tlogEntries"] = v;
    auto r = ParseBundle(copy.dump());
    REQUIRE_FALSE(r.ok());
    return r.error().message;
  };
  CHECK(nested(kMaxBundleJsonDepth - 2).find("tlogEntries is not empty") != std::string::npos);
  CHECK(nested(kMaxBundleJsonDepth - 1).find("nested deeper than 16") != std::string::npos);

  TempDir t;
  PrivateKey key = Priv("p256");
  std::string dir = t / "m";
  fs::create_directories(dir);
  std::string deep = dir;
  for (size_t i = 0; i < kMaxWalkDepth; ++i) deep += "/d";
  fs::create_directories(deep);
  WriteText(deep + "/f", "x");
  auto ok = SignDetached(dir, key, t / "a.sig", {});
  if (!ok.ok()) FAIL(ok.error().message);
  CHECK(VerifyDir(dir, t / "a.sig", {Pub("p256")}).ok());
  fs::create_directories(deep + "/d");
  WriteText(deep + "/d/f", "y");
  auto over = SignDetached(dir, key, t / "b.sig", {});
  REQUIRE_FALSE(over.ok());
  CHECK(over.error().message.find("nested deeper than 128 directories") != std::string::npos);
}
