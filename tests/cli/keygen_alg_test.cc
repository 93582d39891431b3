// keygen --alg (issue 11, point 1): each algorithm writes a key pair the
// signer loads as that algorithm, Ed25519 stays the default, and anything
// else is a usage error that lists the choices.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "app.h"
#include "modelgate/signer.h"

namespace mc = modelgate::cli;
namespace signer = modelgate::signer;

namespace {

struct Run {
  int code;
  std::string out, err;
};

Run Cli(std::vector<std::string> args) {
  std::ostringstream out, err;
  const int code = mc::RunCli(args, out, err);
  return {code, out.str(), err.str()};
}

struct TempDir {
  std::string path;
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "mg-keygen-XXXXXX").string();
    if (::mkdtemp(tmpl.data()) != nullptr) path = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};

}  // namespace

TEST_CASE("keygen --alg writes a key pair of that algorithm, ed25519 by default",
          "[cli][keygen]") {
  TempDir dir;
  REQUIRE_FALSE(dir.path.empty());
  struct Case {
    std::vector<std::string> alg_args;
    signer::KeyAlg alg;
  };
  const std::vector<Case> cases = {
      {{}, signer::KeyAlg::kEd25519},
      {{"--alg", "ed25519"}, signer::KeyAlg::kEd25519},
      {{"--alg", "ecdsa-p256"}, signer::KeyAlg::kEcdsaP256},
      {{"--alg=ecdsa-p384"}, signer::KeyAlg::kEcdsaP384},
      {{"--alg", "ecdsa-p521"}, signer::KeyAlg::kEcdsaP521},
  };
  int n = 0;
  for (const Case& c : cases) {
    const std::string prefix = dir.path + "/k" + std::to_string(n++);
    std::vector<std::string> args = {"keygen", "--out", prefix};
    args.insert(args.end(), c.alg_args.begin(), c.alg_args.end());
    CAPTURE(args);
    const Run r = Cli(args);
    CHECK(r.err.empty());
    REQUIRE(r.code == 0);
    auto priv = signer::LoadPrivateKey(prefix + ".key");
    auto pub = signer::LoadPublicKey(prefix + ".pub");
    REQUIRE(priv.ok());
    REQUIRE(pub.ok());
    CHECK(priv.value().alg() == c.alg);
    CHECK(pub.value().alg == c.alg);
    CHECK(pub.value().kid == priv.value().public_key().kid);
  }
}

TEST_CASE("keygen --alg refuses other names, writing nothing", "[cli][keygen]") {
  TempDir dir;
  REQUIRE_FALSE(dir.path.empty());
  for (const char* bad : {"rsa", "ECDSA-P256", "ecdsa-p224", ""}) {
    CAPTURE(bad);
    const Run r = Cli({"keygen", "--out", dir.path + "/k", "--alg", bad});
    CHECK(r.code == 2);
    CHECK(r.err.find("modelgate: keygen: ") == 0);
    CHECK(r.err.find("ecdsa-p256") != std::string::npos);
    CHECK_FALSE(std::filesystem::exists(dir.path + "/k.key"));
    CHECK_FALSE(std::filesystem::exists(dir.path + "/k.pub"));
  }
}
