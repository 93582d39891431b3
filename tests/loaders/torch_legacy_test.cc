// Legacy torch.save files (torch < 1.6, or _use_new_zipfile_serialization=
// False): five pickles, then the raw storages _legacy_load reads. Those
// bytes are the loader's data, not trailing bytes; bytes past the last
// storage torch reads are still reported (issue 10).
#include <unistd.h>

#include <catch2/catch.hpp>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "modelgate/core.h"
#include "modelgate/scanner.h"

namespace core = modelgate::core;
namespace scanner = modelgate::scanner;

namespace {

std::vector<uint8_t> ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE(in);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::string TempFile(const std::vector<uint8_t>& bytes) {
  char name[] = "/tmp/mg-torch-legacy-XXXXXX.pt";
  const int fd = ::mkstemps(name, 3);
  REQUIRE(fd >= 0);
  REQUIRE(::write(fd, bytes.data(), bytes.size()) == static_cast<ssize_t>(bytes.size()));
  ::close(fd);
  return name;
}

scanner::FileScan Scan(const std::vector<uint8_t>& bytes) {
  const std::string path = TempFile(bytes);
  scanner::FileScan s = scanner::ScanFile(path, false, scanner::ScanOptions{});
  ::unlink(path.c_str());
  return s;
}

std::vector<const scanner::Finding*> WithId(const scanner::FileScan& s, const std::string& id) {
  std::vector<const scanner::Finding*> out;
  for (const auto& f : s.findings) {
    if (f.id == id) out.push_back(&f);
  }
  return out;
}
// Pointers into a temporary scan would dangle past the full expression.
std::vector<const scanner::Finding*> WithId(scanner::FileScan&&, const std::string&) = delete;

// Where the fifth pickle of torch-legacy-dtypes.pt ends (pickletools), and
// the file's size: the storages fill the bytes between.
constexpr uint64_t kDtypesPicklesEnd = 824;
constexpr uint64_t kDtypesSize = 947;

const std::string kDtypes = std::string(MG_LOADERS_DATA_DIR) + "/torch-legacy-dtypes.pt";

}  // namespace

TEST_CASE("a real legacy torch.save file has no trailing-data finding", "[loaders][torch-legacy]") {
  for (const std::string name : {"torch-legacy.pt", "torch-legacy-module.pt"}) {
    INFO(name);
    auto s = scanner::ScanFile(std::string(MG_REAL_FIXTURE_DIR) + "/" + name, false, {});
    CHECK(WithId(s, "MG-PK-TRAILING-DATA").empty());
    CHECK(WithId(s, "MG-PK-PICKLE-FORMAT").size() == 1);
  }
}

TEST_CASE("legacy storages of 1-, 2-, 4- and 8-byte elements are read to the end",
          "[loaders][torch-legacy]") {
  const auto bytes = ReadAll(kDtypes);
  REQUIRE(bytes.size() == kDtypesSize);
  auto s = Scan(bytes);
  CHECK(WithId(s, "MG-PK-TRAILING-DATA").empty());
  for (const auto& f : s.findings) CHECK(f.severity > core::Severity::kHigh);
}

TEST_CASE("bytes after the last legacy storage are still trailing data", "[loaders][torch-legacy]") {
  auto bytes = ReadAll(kDtypes);
  for (char c : std::string("extra")) bytes.push_back(static_cast<uint8_t>(c));
  auto s = Scan(bytes);
  auto t = WithId(s, "MG-PK-TRAILING-DATA");
  REQUIRE(t.size() == 1);
  CHECK(t[0]->offset == kDtypesSize);
  CHECK(t[0]->message.find("5 bytes after the storages") == 0);
}

TEST_CASE("legacy storages torch cannot read leave the bytes unexplained", "[loaders][torch-legacy]") {
  SECTION("the last storage is cut short") {
    auto bytes = ReadAll(kDtypes);
    bytes.pop_back();
    const auto scan = Scan(bytes);
    auto t = WithId(scan, "MG-PK-TRAILING-DATA");
    REQUIRE(t.size() == 1);
    CHECK(t[0]->offset == kDtypesPicklesEnd);
  }
  SECTION("a storage key names no storage of the object pickle") {
    auto bytes = ReadAll(kDtypes);
    const std::string key = "753684112";  // the first storage key
    auto at = std::search(bytes.begin() + 736, bytes.begin() + kDtypesPicklesEnd, key.begin(), key.end());
    REQUIRE(at != bytes.begin() + kDtypesPicklesEnd);
    *at = '8';
    const auto scan = Scan(bytes);
    auto t = WithId(scan, "MG-PK-TRAILING-DATA");
    REQUIRE(t.size() == 1);
    CHECK(t[0]->offset == kDtypesPicklesEnd);
  }
  SECTION("another magic number") {
    auto bytes = ReadAll(kDtypes);
    REQUIRE(bytes[4] == 0x6c);  // PROTO 2, LONG1 10: the magic's low byte
    bytes[4] = 0x6d;
    const auto scan = Scan(bytes);
    auto t = WithId(scan, "MG-PK-TRAILING-DATA");
    REQUIRE(t.size() == 1);
    CHECK(t[0]->offset == kDtypesPicklesEnd);
  }
}
