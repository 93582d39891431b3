// Tamper tests (issue 4 point 5): every forgery fails verification with a
// precise code and a reason naming the record, field or tensor; and the
// opposite, re-formatting the header is not tampering.
#include <catch2/catch.hpp>

#include "signer_test_util.h"

namespace core = modelgate::core;
namespace signer = modelgate::signer;
using namespace sigtest;
using signer::SigStatus;

namespace {

// Three F32 tensors of 16 bytes each; b and c have the same dtype and shape
// so their names can be swapped without breaking the core rules.
Bytes Unsigned(const std::string& note = "x") {
  ojson h;
  h["a.weight"] = {{"dtype", "F32"}, {"shape", {2, 2}}, {"data_offsets", {0, 16}}};
  h["b.bias"] = {{"dtype", "F32"}, {"shape", {4}}, {"data_offsets", {16, 32}}};
  h["c.bias"] = {{"dtype", "F32"}, {"shape", {4}}, {"data_offsets", {32, 48}}};
  h["__metadata__"] = {{"format", "pt"}, {"note", note}};
  Bytes data(48);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>(i + 1);
  return Assemble(h.dump(), data);
}

struct Fixture {
  TempDir dir;
  signer::PrivateKey key = TestKey();
  signer::PrivateKey other = TestKey(100);
  std::vector<signer::PublicKey> trusted = {key.public_key()};

  Bytes Sign(const Bytes& in, const signer::PrivateKey& k, signer::SignOptions opt = {}) {
    const std::string path = dir / "sign.safetensors";
    WriteBytes(path, in);
    if (!opt.created) opt.created = 1764374400;
    auto r = signer::SignFile(path, k, opt);
    REQUIRE(r.ok());
    return ReadBytes(path);
  }
  Bytes Signed() { return Sign(Unsigned(), key); }

  signer::VerifyResult Verify(const Bytes& file, const std::vector<signer::PublicKey>& keys) {
    const std::string path = dir / "verify.safetensors";
    WriteBytes(path, file);
    auto r = signer::VerifyFile(path, keys);
    REQUIRE(r.ok());
    return r.value();
  }
  signer::VerifyResult Verify(const Bytes& file) { return Verify(file, trusted); }
};

void ExpectInvalid(const signer::VerifyResult& r, core::Code code, const std::string& needle) {
  CAPTURE(r.reason.message);
  CHECK(r.status == SigStatus::kInvalid);
  CHECK(core::FindingId(r.reason.code) == core::FindingId(code));
  CHECK(r.reason.message.find(needle) != std::string::npos);
}

}  // namespace

TEST_CASE("tamper: the untouched signed file is valid", "[signer][tamper]") {
  Fixture f;
  auto r = f.Verify(f.Signed());
  CHECK(r.status == SigStatus::kValid);
  CHECK(r.reason.code == core::Code::kOk);
  REQUIRE(r.records.size() == 1);
  CHECK(r.records[0].outcome == signer::RecordCheck::Outcome::kVerified);
}

TEST_CASE("tamper: a flipped byte anywhere in tensor data names the tensor", "[signer][tamper]") {
  Fixture f;
  Bytes good = f.Signed();
  const size_t data_start = 8 + HeaderLen(good);
  const char* names[] = {"a.weight", "b.bias", "c.bias"};
  for (size_t i = data_start; i < good.size(); ++i) {
    CAPTURE(i);
    Bytes bad = good;
    bad[i] ^= 0x01;
    auto r = f.Verify(bad);
    size_t t = (i - data_start) / 16;
    ExpectInvalid(r, core::Code::kSigTensorMismatch, std::string("\"") + names[t] + "\"");
    CHECK(r.reason.offset == data_start + 16 * t);
  }
}

TEST_CASE("tamper: header fields a loader acts on are signed", "[signer][tamper]") {
  Fixture f;
  Bytes good = f.Signed();
  SECTION("dtype") {
    auto r = f.Verify(EditHeader(good, [](ojson& h) { h["a.weight"]["dtype"] = "I32"; }));
    ExpectInvalid(r, core::Code::kSigBadSignature, "signature does not verify");
  }
  SECTION("shape") {
    auto r = f.Verify(EditHeader(good, [](ojson& h) { h["a.weight"]["shape"] = {4}; }));
    ExpectInvalid(r, core::Code::kSigBadSignature, "kid " + f.key.public_key().kid_hex());
  }
  SECTION("offsets: two same-size tensors exchange data and offsets") {
    Bytes bad = EditHeader(good, [](ojson& h) {
      h["b.bias"]["data_offsets"] = {32, 48};
      h["c.bias"]["data_offsets"] = {16, 32};
    });
    // Move the bytes too, so each name's digest still matches its bytes.
    const size_t ds = 8 + HeaderLen(bad);
    std::swap_ranges(bad.begin() + static_cast<long>(ds + 16), bad.begin() + static_cast<long>(ds + 32),
                     bad.begin() + static_cast<long>(ds + 32));
    ExpectInvalid(f.Verify(bad), core::Code::kSigBadSignature, "signature does not verify");
  }
  SECTION("name: renamed tensor") {
    Bytes bad = WithHeader(good, Replace(HeaderText(good), "\"c.bias\":{", "\"d.bias\":{"));
    ExpectInvalid(f.Verify(bad), core::Code::kSigDigestMap, "\"c.bias\"");
  }
  SECTION("name: renamed in the header and in the digest map") {
    Bytes bad = WithHeader(good, Replace(HeaderText(good), "\"c.bias\":{", "\"d.bias\":{"));
    bad = WithHeader(bad, Replace(HeaderText(bad), "\\\"c.bias\\\"", "\\\"d.bias\\\""));
    ExpectInvalid(f.Verify(bad), core::Code::kSigBadSignature, "signature does not verify");
  }
  SECTION("metadata value") {
    auto r = f.Verify(EditHeader(good, [](ojson& h) { h["__metadata__"]["note"] = "y"; }));
    ExpectInvalid(r, core::Code::kSigBadSignature, "signature does not verify");
  }
  SECTION("metadata key added") {
    auto r = f.Verify(EditHeader(good, [](ojson& h) { h["__metadata__"]["extra"] = "1"; }));
    ExpectInvalid(r, core::Code::kSigBadSignature, "signature does not verify");
  }
  SECTION("metadata key removed") {
    auto r = f.Verify(EditHeader(good, [](ojson& h) { h["__metadata__"].erase("note"); }));
    ExpectInvalid(r, core::Code::kSigBadSignature, "signature does not verify");
  }
  SECTION("two tensors' names swapped") {
    std::string h = HeaderText(good);
    h = Replace(h, "\"b.bias\":{", "\"TMP\":{");
    h = Replace(h, "\"c.bias\":{", "\"b.bias\":{");
    h = Replace(h, "\"TMP\":{", "\"c.bias\":{");
    ExpectInvalid(f.Verify(WithHeader(good, h)), core::Code::kSigBadSignature, "signature does not verify");
  }
  SECTION("signed fields of the record") {
    auto r = f.Verify(EditMetaJson(good, "stsig.v1", [](ojson& v) { v[0]["version"] = 1; }));
    ExpectInvalid(r, core::Code::kSigBadSignature, "signature does not verify");
    r = f.Verify(EditMetaJson(good, "stsig.v1", [](ojson& v) { v[0]["model"] = "acme/other"; }));
    ExpectInvalid(r, core::Code::kSigBadSignature, "signature does not verify");
    r = f.Verify(EditMetaJson(good, "stsig.v1", [](ojson& v) { v[0]["created"] = 1; }));
    ExpectInvalid(r, core::Code::kSigBadSignature, "signature does not verify");
    r = f.Verify(EditMetaJson(good, "stsig.v1", [](ojson& v) {
      v[0]["set"] = {{"index", 0}, {"count", 1}, {"digest", std::string(64, 'a')}};
    }));
    ExpectInvalid(r, core::Code::kSigBadSignature, "signature does not verify");
  }
}

TEST_CASE("tamper: tensors added or removed, bytes appended", "[signer][tamper]") {
  Fixture f;
  Bytes good = f.Signed();
  SECTION("added (header entry and data)") {
    Bytes bad = EditHeader(good, [](ojson& h) {
      h["z"] = {{"dtype", "U8"}, {"shape", {4}}, {"data_offsets", {48, 52}}};
    });
    bad.insert(bad.end(), {9, 9, 9, 9});
    ExpectInvalid(f.Verify(bad), core::Code::kSigDigestMap, "\"z\"");
  }
  SECTION("added, with a digest map entry") {
    Bytes bad = EditHeader(good, [](ojson& h) {
      h["z"] = {{"dtype", "U8"}, {"shape", {4}}, {"data_offsets", {48, 52}}};
    });
    bad.insert(bad.end(), {9, 9, 9, 9});
    Bytes z = {9, 9, 9, 9};
    bad = EditMetaJson(bad, "stsig.v1.sha256", [&](ojson& m) { m["z"] = core::HexLower(core::Sha256(z)); });
    ExpectInvalid(f.Verify(bad), core::Code::kSigBadSignature, "signature does not verify");
  }
  SECTION("removed (the last tensor and its bytes)") {
    Bytes bad = EditHeader(good, [](ojson& h) { h.erase("c.bias"); });
    bad.resize(bad.size() - 16);
    ExpectInvalid(f.Verify(bad), core::Code::kSigDigestMap, "\"c.bias\"");
  }
  SECTION("removed, and from the digest map") {
    Bytes bad = EditHeader(good, [](ojson& h) { h.erase("c.bias"); });
    bad.resize(bad.size() - 16);
    bad = EditMetaJson(bad, "stsig.v1.sha256", [](ojson& m) { m.erase("c.bias"); });
    ExpectInvalid(f.Verify(bad), core::Code::kSigBadSignature, "signature does not verify");
  }
  SECTION("bytes appended: the core parser rejects trailing bytes") {
    Bytes bad = good;
    bad.push_back(0);
    ExpectInvalid(f.Verify(bad), core::Code::kStTrailingBytes, "");
  }
}

TEST_CASE("tamper: stripped, foreign and untrusted signatures", "[signer][tamper]") {
  Fixture f;
  Bytes good = f.Signed();
  SECTION("signature stripped: missing, never valid") {
    Bytes bad = EditHeader(good, [](ojson& h) {
      h["__metadata__"].erase("stsig.v1");
      h["__metadata__"].erase("stsig.v1.sha256");
    });
    auto r = f.Verify(bad);
    CHECK(r.status == SigStatus::kMissing);
    CHECK(r.reason.code == core::Code::kSigMissing);
  }
  SECTION("only one of the two keys stripped") {
    ExpectInvalid(f.Verify(EditHeader(good, [](ojson& h) { h["__metadata__"].erase("stsig.v1.sha256"); })),
                  core::Code::kSigDigestMap, "without stsig.v1.sha256");
    ExpectInvalid(f.Verify(EditHeader(good, [](ojson& h) { h["__metadata__"].erase("stsig.v1"); })),
                  core::Code::kSigBadRecord, "without stsig.v1");
  }
  SECTION("another file's signature (different metadata)") {
    Bytes donor = f.Sign(Unsigned("another file"), f.key);
    ojson dm = ojson::parse(HeaderText(donor))["__metadata__"];
    Bytes bad = EditHeader(good, [&](ojson& h) {
      h["__metadata__"]["stsig.v1"] = dm["stsig.v1"];
      h["__metadata__"]["stsig.v1.sha256"] = dm["stsig.v1.sha256"];
    });
    ExpectInvalid(f.Verify(bad), core::Code::kSigBadSignature, "another file");
  }
  SECTION("another file's signature (same header, other tensor bytes)") {
    // Same header and digests verify; the bytes then fail their digest.
    Bytes donor = good;
    donor.back() ^= 0xff;
    Bytes bad = WithHeader(donor, HeaderText(good));
    ExpectInvalid(f.Verify(bad), core::Code::kSigTensorMismatch, "\"c.bias\"");
  }
  SECTION("untrusted key") {
    auto r = f.Verify(good, {f.other.public_key()});
    CHECK(r.status == SigStatus::kUntrusted);
    CHECK(r.reason.code == core::Code::kSigUntrusted);
    CHECK(r.reason.message.find(f.key.public_key().kid_hex()) != std::string::npos);
    REQUIRE(r.records.size() == 1);
    CHECK(r.records[0].outcome == signer::RecordCheck::Outcome::kUntrusted);
    auto none = f.Verify(good, {});
    CHECK(none.status == SigStatus::kUntrusted);
  }
  SECTION("a record's kid rewritten to a trusted key's kid") {
    Bytes bad = f.Sign(Unsigned(), f.other);
    bad = EditMetaJson(bad, "stsig.v1", [&](ojson& v) { v[0]["kid"] = f.key.public_key().kid_hex(); });
    ExpectInvalid(f.Verify(bad), core::Code::kSigBadSignature, "signature does not verify");
  }
}

TEST_CASE("tamper: malformed records and stsig values", "[signer][tamper]") {
  Fixture f;
  Bytes good = f.Signed();
  SECTION("unknown algorithm") {
    ExpectInvalid(f.Verify(EditMetaJson(good, "stsig.v1", [](ojson& v) { v[0]["alg"] = "ed448"; })),
                  core::Code::kSigUnknownAlg, "\"ed448\"");
  }
  SECTION("extra field") {
    ExpectInvalid(f.Verify(EditMetaJson(good, "stsig.v1", [](ojson& v) { v[0]["note"] = "hi"; })),
                  core::Code::kSigBadRecord, "unknown field \"note\"");
  }
  SECTION("missing field") {
    ExpectInvalid(f.Verify(EditMetaJson(good, "stsig.v1", [](ojson& v) { v[0].erase("created"); })),
                  core::Code::kSigBadRecord, "missing field \"created\"");
  }
  SECTION("mistyped fields") {
    auto check = [&](const std::function<void(ojson&)>& edit, const std::string& field) {
      ExpectInvalid(f.Verify(EditMetaJson(good, "stsig.v1", edit)), core::Code::kSigBadRecord,
                    "field \"" + field + "\"");
    };
    check([](ojson& v) { v[0]["created"] = -1; }, "created");
    check([](ojson& v) { v[0]["created"] = 1.5; }, "created");
    check([](ojson& v) { v[0]["version"] = "7"; }, "version");
    check([](ojson& v) { v[0]["kid"] = "A050837D85070582CCF7394B0988847C"; }, "kid");
    check([](ojson& v) { v[0]["sig"] = "AAAA"; }, "sig");
    check([](ojson& v) { v[0]["model"] = nullptr; }, "model");
    check([](ojson& v) { v[0]["set"] = {{"index", 0}, {"count", 1}, {"digest", "00"}}; }, "set.digest");
  }
  SECTION("extra field in set, set index past count, empty array, not JSON") {
    ExpectInvalid(f.Verify(EditMetaJson(good, "stsig.v1", [](ojson& v) {
                    v[0]["set"] = {{"index", 0}, {"count", 1}, {"digest", std::string(64, 'a')}, {"x", 1}};
                  })),
                  core::Code::kSigBadRecord, "unknown field \"x\"");
    ExpectInvalid(f.Verify(EditMetaJson(good, "stsig.v1", [](ojson& v) {
                    v[0]["set"] = {{"index", 1}, {"count", 1}, {"digest", std::string(64, 'a')}};
                  })),
                  core::Code::kSigBadRecord, "not below set.count");
    ExpectInvalid(f.Verify(EditHeader(good, [](ojson& h) { h["__metadata__"]["stsig.v1"] = "[]"; })),
                  core::Code::kSigBadRecord, "non-empty");
    ExpectInvalid(f.Verify(EditHeader(good, [](ojson& h) { h["__metadata__"]["stsig.v1"] = "[{"; })),
                  core::Code::kSigBadRecord, "syntax");
  }
  SECTION("non-canonical base64 signature") {
    Bytes bad = EditMetaJson(good, "stsig.v1", [](ojson& v) {
      std::string s = v[0]["sig"].get<std::string>();
      s.insert(10, "\n");
      v[0]["sig"] = s;
    });
    ExpectInvalid(f.Verify(bad), core::Code::kSigBadRecord, "field \"sig\"");
  }
  SECTION("duplicate key inside a record") {
    std::string h = HeaderText(good);
    h = Replace(h, "{\\\"alg\\\":\\\"ed25519\\\",", "{\\\"alg\\\":\\\"ed448\\\",\\\"alg\\\":\\\"ed25519\\\",");
    ExpectInvalid(f.Verify(WithHeader(good, h)), core::Code::kSigBadRecord, "duplicate key \"alg\"");
  }
  SECTION("duplicate key inside the digest map") {
    std::string h = HeaderText(good);
    std::string digest = core::HexLower(core::Sha256(Bytes(16, 0)));
    h = Replace(h, "\"{\\\"a.weight\\\"", "\"{\\\"a.weight\\\":\\\"" + digest + "\\\",\\\"a.weight\\\"");
    ExpectInvalid(f.Verify(WithHeader(good, h)), core::Code::kSigDigestMap, "duplicate key \"a.weight\"");
  }
  SECTION("duplicate key inside __metadata__ (core rule)") {
    std::string h = HeaderText(good);
    h = Replace(h, "\"format\":\"pt\"", "\"format\":\"pt\",\"format\":\"pt\"");
    auto r = f.Verify(WithHeader(good, h));
    CHECK(r.status == SigStatus::kInvalid);
    CHECK(r.reason.code == core::Code::kStDuplicateKey);
  }
  SECTION("duplicate record by one key") {
    ExpectInvalid(f.Verify(EditMetaJson(good, "stsig.v1", [](ojson& v) { v.push_back(v[0]); })),
                  core::Code::kSigDuplicateKid, "same key");
  }
  SECTION("unknown stsig.* keys") {
    ExpectInvalid(f.Verify(EditHeader(good, [](ojson& h) { h["__metadata__"]["stsig.v2"] = "{}"; })),
                  core::Code::kSigUnknownKey, "\"stsig.v2\"");
    // Even with no v1 signature at all: reserved keys are never "unsigned".
    ExpectInvalid(f.Verify(EditHeader(Unsigned(), [](ojson& h) { h["__metadata__"]["stsig.note"] = ""; })),
                  core::Code::kSigUnknownKey, "\"stsig.note\"");
  }
  SECTION("digest map value not lowercase hex / names a non-tensor") {
    ExpectInvalid(f.Verify(EditMetaJson(good, "stsig.v1.sha256", [](ojson& m) { m["a.weight"] = "00"; })),
                  core::Code::kSigDigestMap, "\"a.weight\"");
    ExpectInvalid(f.Verify(EditMetaJson(good, "stsig.v1.sha256",
                                        [](ojson& m) { m["ghost"] = std::string(64, '0'); })),
                  core::Code::kSigDigestMap, "\"ghost\"");
  }
  SECTION("a digest map edited to match tampered data") {
    Bytes bad = good;
    bad.back() ^= 0xff;  // in c.bias
    Bytes c(bad.end() - 16, bad.end());
    bad = EditMetaJson(bad, "stsig.v1.sha256", [&](ojson& m) { m["c.bias"] = core::HexLower(core::Sha256(c)); });
    ExpectInvalid(f.Verify(bad), core::Code::kSigBadSignature, "signature does not verify");
  }
}

TEST_CASE("tamper: a failed or unknown record is never outvoted", "[signer][tamper]") {
  Fixture f;
  Bytes both = f.Sign(f.Signed(), f.other);  // co-signed by key and other
  std::vector<signer::PublicKey> all = {f.key.public_key(), f.other.public_key()};
  REQUIRE(f.Verify(both, all).status == SigStatus::kValid);
  const std::string other_kid = f.other.public_key().kid_hex();
  Bytes bad = EditMetaJson(both, "stsig.v1", [&](ojson& v) {
    for (auto& r : v) {
      if (r["kid"] == other_kid) r["created"] = r["created"].get<uint64_t>() + 1;
    }
  });
  // Both keys trusted: the other record fails, so the file is invalid.
  ExpectInvalid(f.Verify(bad, all), core::Code::kSigBadSignature, other_kid);
  // An unknown-alg record next to a good one still makes it invalid.
  Bytes alg = EditMetaJson(both, "stsig.v1", [&](ojson& v) {
    for (auto& r : v) {
      if (r["kid"] == other_kid) r["alg"] = "rsa";
    }
  });
  ExpectInvalid(f.Verify(alg, {f.key.public_key()}), core::Code::kSigUnknownAlg, "\"rsa\"");
}

TEST_CASE("formatting is not signed: whitespace and member order", "[signer][tamper]") {
  Fixture f;
  Bytes good = f.Signed();
  SECTION("pretty-printed, members sorted differently (nlohmann::json sorts keys)") {
    nlohmann::json h = nlohmann::json::parse(HeaderText(good));
    Bytes re = WithHeader(good, "  \n" + h.dump(3) + "\n\t ");
    REQUIRE(re != good);
    auto r = f.Verify(WithHeader(good, h.dump(3) + "\n\t "));
    CHECK(r.status == SigStatus::kValid);
  }
  SECTION("reversed member order everywhere, inner stsig JSON re-indented") {
    ojson h = ojson::parse(HeaderText(good));
    ojson rev = ojson::object();
    for (auto it = h.rbegin(); it != h.rend(); ++it) {
      ojson v = ojson::object();
      for (auto jt = it.value().rbegin(); jt != it.value().rend(); ++jt) v[jt.key()] = jt.value();
      rev[it.key()] = v;
    }
    for (const char* k : {"stsig.v1", "stsig.v1.sha256"}) {
      rev["__metadata__"][k] = ojson::parse(rev["__metadata__"][k].get<std::string>()).dump(2);
    }
    Bytes re = WithHeader(good, rev.dump(1));
    REQUIRE(HeaderText(re) != HeaderText(good));
    CHECK(f.Verify(re).status == SigStatus::kValid);
  }
  SECTION("escaped spellings of the same names and values") {
    std::string h = Replace(HeaderText(good), "\"format\":\"pt\"", "\"\\u0066ormat\":\"p\\u0074\"");
    CHECK(f.Verify(WithHeader(good, h)).status == SigStatus::kValid);
  }
}
