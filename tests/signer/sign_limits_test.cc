// SignFile hygiene (issue 11 point 8): a header the signing would grow past
// a limit verify enforces is refused before anything is written (tested at
// the limit and one below it); a write error names the output, leaves the
// input intact and no temp file; success leaves no temp file either.
#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "signer_test_util.h"

namespace core = modelgate::core;
namespace signer = modelgate::signer;
using namespace sigtest;

namespace {

// Model has `tensors` one-byte tensors and `meta` metadata entries.
Bytes Model(size_t tensors, size_t meta) {
  ojson h;
  for (size_t i = 0; i < tensors; ++i) {
    h["t" + std::to_string(i)] = {{"dtype", "U8"}, {"shape", {1}}, {"data_offsets", {i, i + 1}}};
  }
  for (size_t i = 0; i < meta; ++i) h["__metadata__"]["k" + std::to_string(i)] = "v";
  return Assemble(h.dump(), Bytes(tensors, 0x33));
}

signer::SignOptions WithLimits(const core::Limits& limits) {
  signer::SignOptions o;
  o.created = 7;
  o.limits = limits;
  return o;
}

std::vector<std::string> Entries(const TempDir& dir) {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir.path())) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace

TEST_CASE("sign: refuses a signed header over max_header_bytes, at N and N+1", "[signer][sign][limits]") {
  TempDir dir;
  const Bytes model = Model(200, 0);
  const std::string probe = dir / "probe.safetensors";
  WriteBytes(probe, model);
  auto first = signer::SignFile(probe, TestKey(), WithLimits({}));
  REQUIRE(first.ok());
  const uint64_t signed_header = first.value().header_bytes;  // N the signing produces
  REQUIRE(signed_header > HeaderLen(model));
  std::filesystem::remove(probe);

  const std::string in = dir / "m.safetensors", out = dir / "signed.safetensors";
  WriteBytes(in, model);
  core::Limits limits;
  SECTION("limit = signed header size: signed, and verify under the same limit accepts it") {
    limits.max_header_bytes = signed_header;
    auto r = signer::SignFile(in, TestKey(), WithLimits(limits), out);
    REQUIRE(r.ok());
    CHECK(r.value().header_bytes == signed_header);
    signer::VerifyOptions vo;
    vo.limits = limits;
    std::vector<signer::PublicKey> keys = {TestKey().public_key()};
    auto v = signer::VerifyFile(out, keys, vo);
    REQUIRE(v.ok());
    CHECK(v.value().valid());
    CHECK(Entries(dir) == std::vector<std::string>{"m.safetensors", "signed.safetensors"});
  }
  SECTION("limit one below: refused, says which limit and by how much, writes nothing") {
    limits.max_header_bytes = signed_header - 1;
    auto r = signer::SignFile(in, TestKey(), WithLimits(limits), out);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code == core::Code::kSigOptions);  // the CLI's exit 2
    CHECK_THAT(r.error().message, Catch::Contains("max_header_bytes") &&
                                      Catch::Contains(std::to_string(signed_header) + " bytes") &&
                                      Catch::Contains("1 bytes over") && Catch::Contains("200 tensors") &&
                                      Catch::Contains("nothing was written"));
    CHECK(Entries(dir) == std::vector<std::string>{"m.safetensors"});
    CHECK(ReadBytes(in) == model);
  }
  SECTION("in place, one below: the file is untouched") {
    limits.max_header_bytes = signed_header - 1;
    auto r = signer::SignFile(in, TestKey(), WithLimits(limits));
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code == core::Code::kSigOptions);
    CHECK(ReadBytes(in) == model);
    CHECK(Entries(dir) == std::vector<std::string>{"m.safetensors"});
  }
}

TEST_CASE("sign: refuses a signed header over max_metadata_entries, at N and N+1", "[signer][sign][limits]") {
  // Signing adds the two stsig.* entries to the 3 there are.
  TempDir dir;
  const Bytes model = Model(2, 3);
  const std::string in = dir / "m.safetensors";
  WriteBytes(in, model);
  core::Limits limits;
  limits.max_metadata_entries = 4;  // the input (3) parses; signed (5) would not
  auto refused = signer::SignFile(in, TestKey(), WithLimits(limits));
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.error().code == core::Code::kSigOptions);
  CHECK_THAT(refused.error().message, Catch::Contains("max_metadata_entries"));
  CHECK(ReadBytes(in) == model);
  CHECK(Entries(dir) == std::vector<std::string>{"m.safetensors"});
  limits.max_metadata_entries = 5;
  auto r = signer::SignFile(in, TestKey(), WithLimits(limits));
  REQUIRE(r.ok());
  CHECK(Entries(dir) == std::vector<std::string>{"m.safetensors"});
}

TEST_CASE("sign: a write error names the output, keeps the input, leaves no temp file", "[signer][sign][limits]") {
  TempDir dir;
  Bytes model = Model(4, 0);
  // Make the data big enough to pass a small RLIMIT_FSIZE.
  {
    ojson h;
    h["big"] = {{"dtype", "U8"}, {"shape", {200000}}, {"data_offsets", {0, 200000}}};
    model = Assemble(h.dump(), Bytes(200000, 0x44));
  }
  const std::string in = dir / "m.safetensors";
  WriteBytes(in, model);
  for (bool in_place : {false, true}) {
    CAPTURE(in_place);
    const std::string out = in_place ? in : dir / "out.safetensors";
    int pipe_fds[2];
    REQUIRE(::pipe(pipe_fds) == 0);
    pid_t child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0) {
      ::close(pipe_fds[0]);
      ::signal(SIGXFSZ, SIG_IGN);  // else the kernel kills at the limit, before write() returns EFBIG
      struct rlimit lim {65536, 65536};
      if (::setrlimit(RLIMIT_FSIZE, &lim) != 0) ::_exit(3);
      std::string report;
      {
        auto r = signer::SignFile(in, TestKey(), WithLimits({}), in_place ? std::string() : out);
        report = r.ok() ? "ok" : r.error().message;
      }
      (void)!::write(pipe_fds[1], report.data(), report.size());
      ::_exit(0);
    }
    ::close(pipe_fds[1]);
    std::string report;
    char buf[512];
    for (ssize_t n; (n = ::read(pipe_fds[0], buf, sizeof buf)) > 0;) report.append(buf, static_cast<size_t>(n));
    ::close(pipe_fds[0]);
    int status = 0;
    REQUIRE(::waitpid(child, &status, 0) == child);
    REQUIRE(WIFEXITED(status));
    REQUIRE(WEXITSTATUS(status) == 0);
    CHECK(report == "cannot write " + out + ": " + std::strerror(EFBIG));
    CHECK(ReadBytes(in) == model);
    CHECK(Entries(dir) == std::vector<std::string>{"m.safetensors"});
  }
}
