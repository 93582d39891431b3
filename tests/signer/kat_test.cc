// STSIG v1 known-answer vectors (vectors/, the format in docs/stsig.md):
// the test key and kid, M rebuilt byte for byte, the signed files verify,
// and signing the unsigned inputs reproduces signature, M and (where the
// vector's metadata is already sorted) the signed file byte for byte.
#include <catch2/catch.hpp>

#include "signer_test_util.h"

namespace core = modelgate::core;
namespace signer = modelgate::signer;
using namespace sigtest;

namespace {

ojson Vectors() { return ojson::parse(ReadText(VectorPath("vectors.json"))); }

signer::PublicKey TestPub() {
  auto k = signer::LoadPublicKey(VectorPath("test-key.pub"));
  REQUIRE(k.ok());
  return k.value();
}

}  // namespace

TEST_CASE("KAT: test key, SPKI DER and kid", "[signer][kat]") {
  ojson v = Vectors();
  auto priv = signer::LoadPrivateKey(VectorPath("test-key.key"));
  REQUIRE(priv.ok());
  signer::PublicKey pub = TestPub();
  CHECK(pub.kid_hex() == v["key"]["kid"].get<std::string>());
  CHECK(priv.value().public_key().raw == pub.raw);
  CHECK(core::HexLower(signer::SubjectPublicKeyInfoDer(pub)) == v["key"]["spki_der_hex"].get<std::string>());
  signer::PrivateKey from_seed = TestKey();
  CHECK(from_seed.public_key().kid == pub.kid);
  // Our PEM writers produce exactly the vector files.
  CHECK(signer::PublicKeyPem(pub) == ReadText(VectorPath("test-key.pub")));
  TempDir dir;
  REQUIRE(from_seed.WritePem(dir / "k.key").ok());
  CHECK(ReadText(dir / "k.key") == ReadText(VectorPath("test-key.key")));
}

TEST_CASE("KAT: M rebuilt byte for byte and every signed vector verifies", "[signer][kat]") {
  ojson v = Vectors();
  signer::PublicKey pub = TestPub();
  for (const auto& vec : v["vectors"]) {
    const std::string name = vec["name"].get<std::string>();
    CAPTURE(name);
    Bytes file = ReadBytes(VectorPath(vec["signed"].get<std::string>()));
    auto st = core::ParseSafetensors(file, core::Limits{});
    REQUIRE(st.ok());
    CHECK(st.value().data_bytes() == vec["data_len"].get<uint64_t>());
    auto parsed = signer::ParseStsig(st.value());
    REQUIRE(parsed.ok());
    REQUIRE(parsed.value().records.size() == 1);
    const signer::StsigRecord& r = parsed.value().records[0];
    const ojson& rec = vec["record"];
    CHECK(r.alg == rec["alg"].get<std::string>());
    CHECK(core::HexLower(r.kid) == rec["kid"].get<std::string>());
    CHECK(r.created == rec["created"].get<uint64_t>());
    CHECK(r.model == rec["model"].get<std::string>());
    CHECK(r.version == rec["version"].get<uint64_t>());
    CHECK(r.set.has_value() == !rec["set"].is_null());
    if (r.set) {
      CHECK(r.set->index == rec["set"]["index"].get<uint64_t>());
      CHECK(r.set->count == rec["set"]["count"].get<uint64_t>());
      CHECK(core::HexLower(r.set->digest) == rec["set"]["digest"].get<std::string>());
    }
    REQUIRE(parsed.value().digests.size() == vec["sha256"].size());
    for (const auto& [tname, hex] : parsed.value().digests) {
      CHECK(core::HexLower(hex) == vec["sha256"][tname].get<std::string>());
    }
    auto m = signer::SignedMessage(st.value(), r, parsed.value().digests);
    REQUIRE(m.ok());
    CHECK(core::HexLower(m.value()) == vec["message_hex"].get<std::string>());

    auto result = signer::VerifyFile(VectorPath(vec["signed"].get<std::string>()),
                                     std::span<const signer::PublicKey>(&pub, 1));
    REQUIRE(result.ok());
    CHECK(result.value().status == signer::SigStatus::kValid);
    CHECK(result.value().reason.message == "");
    REQUIRE(result.value().verified_kids.size() == 1);
    CHECK(result.value().verified_kids[0] == v["key"]["kid"].get<std::string>());

    // The unsigned input is reported as missing.
    auto unsigned_result = signer::VerifyFile(VectorPath(vec["unsigned"].get<std::string>()),
                                              std::span<const signer::PublicKey>(&pub, 1));
    REQUIRE(unsigned_result.ok());
    CHECK(unsigned_result.value().status == signer::SigStatus::kMissing);
    CHECK(unsigned_result.value().reason.code == core::Code::kSigMissing);
  }
}

TEST_CASE("KAT: signing the unsigned inputs reproduces the signatures", "[signer][kat]") {
  ojson v = Vectors();
  signer::PrivateKey key = TestKey();
  signer::PublicKey pub = key.public_key();
  TempDir dir;
  for (const auto& vec : v["vectors"]) {
    const std::string name = vec["name"].get<std::string>();
    CAPTURE(name);
    const ojson& rec = vec["record"];
    signer::SignOptions opt;
    opt.created = rec["created"].get<uint64_t>();
    opt.model = rec["model"].get<std::string>();
    opt.version = rec["version"].get<uint64_t>();
    if (!rec["set"].is_null()) {
      signer::SetRef s;
      s.index = rec["set"]["index"].get<uint64_t>();
      s.count = rec["set"]["count"].get<uint64_t>();
      REQUIRE(core::ParseHexLower(rec["set"]["digest"].get<std::string>(), s.digest));
      opt.set = s;
    }
    const std::string in = dir / (name + ".in.safetensors");
    const std::string out = dir / (name + ".out.safetensors");
    WriteBytes(in, ReadBytes(VectorPath(vec["unsigned"].get<std::string>())));
    auto signed_result = signer::SignFile(in, key, opt, out);
    REQUIRE(signed_result.ok());
    CHECK(core::HexLower(signed_result.value().message) == vec["message_hex"].get<std::string>());
    // Ed25519 is deterministic: the same record gives the same signature.
    Bytes out_bytes = ReadBytes(out);
    CHECK(HeaderText(out_bytes).find("\\\"sig\\\":\\\"" + rec["sig"].get<std::string>() + "\\\"") !=
          std::string::npos);
    CHECK(DataOf(out_bytes) == DataOf(ReadBytes(in)));  // tensor bytes untouched
    CHECK((8 + HeaderLen(out_bytes)) % 8 == 0);

    Bytes expected = ReadBytes(VectorPath(vec["signed"].get<std::string>()));
    if (name == "v1-model-version-unicode") {
      // The vector keeps the input's metadata order (license, format,
      // note); ours sorts keys. Formatting is not signed: same M, same
      // signature, and both files verify.
      CHECK(out_bytes != expected);
      CHECK(out_bytes.size() == expected.size());
    } else {
      CHECK(out_bytes == expected);
    }
    auto verified = signer::VerifyFile(out, std::span<const signer::PublicKey>(&pub, 1));
    REQUIRE(verified.ok());
    CHECK(verified.value().status == signer::SigStatus::kValid);
    // The input was not touched when signing to -o.
    CHECK(ReadBytes(in) == ReadBytes(VectorPath(vec["unsigned"].get<std::string>())));
  }
}
