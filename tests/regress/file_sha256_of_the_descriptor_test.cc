// Issue 9 point 4: the SHA-256 that policy exceptions are pinned to is the
// digest of the descriptor the scan read, not of whatever the path names by
// the time it is hashed (before, check reopened the path for it).
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "modelgate/policy.h"

namespace core = modelgate::core;
namespace policy = modelgate::policy;
namespace fs = std::filesystem;

namespace {

std::string WriteFile(const fs::path& p, const std::string& bytes) {
  std::ofstream(p, std::ios::binary) << bytes;
  return p.string();
}

core::Sha256Digest Sha(const std::string& s) {
  return core::Sha256({reinterpret_cast<const uint8_t*>(s.data()), s.size()});
}

}  // namespace

TEST_CASE("FileSha256 over a descriptor hashes the file that was opened",
          "[regress][policy][sha256]") {
  std::string tmpl = (fs::temp_directory_path() / "mg-sha-XXXXXX").string();
  REQUIRE(::mkdtemp(tmpl.data()) != nullptr);
  const fs::path dir = tmpl;
  const std::string judged(100'000, 'a'), swapped(100'000, 'b');
  const std::string path = WriteFile(dir / "w.pkl", judged);
  auto opened = core::OpenRegularFile(path, false);
  REQUIRE(opened.ok());
  // Another file renamed over the path after the open (a swap).
  REQUIRE(std::rename(WriteFile(dir / "other", swapped).c_str(), path.c_str()) == 0);
  auto by_fd = policy::FileSha256(opened.value().fd, opened.value().size);
  REQUIRE(by_fd.ok());
  CHECK(by_fd.value() == Sha(judged));
  auto by_path = policy::FileSha256(path);
  REQUIRE(by_path.ok());
  CHECK(by_path.value() == Sha(swapped));  // what the old, reopening check hashed
  // Shrunk under the descriptor: an error, never the digest of a prefix.
  auto again = core::OpenRegularFile(path, false);
  REQUIRE(again.ok());
  REQUIRE(::truncate(path.c_str(), 10) == 0);
  auto shrunk = policy::FileSha256(again.value().fd, again.value().size);
  REQUIRE_FALSE(shrunk.ok());
  CHECK(shrunk.error().code == core::Code::kIoChanged);
  fs::remove_all(dir);
}
