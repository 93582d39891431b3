// A long safetensors header (kOverlapYaraHeaderBytes, 1 MiB, or more) has
// its YARA pass on a second thread beside the parse, while a third drops the
// header's pages (loader_models.cc): the rules still see every header byte,
// from the first to the last, and a file that shrinks under the scan is
// MG-IO-CHANGED on that thread too, never a crash or a hang.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "modelgate/core.h"
#include "modelgate/scanner.h"

namespace core = modelgate::core;
namespace scanner = modelgate::scanner;

namespace {

// LongHeaderFile: `count` one-byte U8 tensors named by `name(i)`, compact,
// space padded to 8 (as the reference writer does), then the data.
struct LongHeaderFile {
  std::string header;
  std::vector<uint8_t> bytes;
};

template <typename Name>
LongHeaderFile MakeFile(size_t count, Name name) {
  LongHeaderFile f;
  f.header = "{";
  for (size_t i = 0; i < count; ++i) {
    if (i > 0) f.header += ',';
    f.header += "\"" + name(i) + "\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[" +
                std::to_string(i) + "," + std::to_string(i + 1) + "]}";
  }
  f.header += "}";
  while ((8 + f.header.size()) % 8 != 0) f.header += ' ';
  const uint64_t n = f.header.size();
  for (int i = 0; i < 8; ++i) f.bytes.push_back(static_cast<uint8_t>(n >> (8 * i)));
  f.bytes.insert(f.bytes.end(), f.header.begin(), f.header.end());
  f.bytes.insert(f.bytes.end(), count, uint8_t{0});
  return f;
}

std::string TempSafetensors(const std::vector<uint8_t>& bytes) {
  char name[] = "/tmp/mg-header-overlap-XXXXXX";
  const int fd = ::mkstemp(name);
  REQUIRE(fd >= 0);
  REQUIRE(::write(fd, bytes.data(), bytes.size()) == static_cast<ssize_t>(bytes.size()));
  ::close(fd);
  const std::string path = std::string(name) + ".safetensors";
  REQUIRE(std::rename(name, path.c_str()) == 0);
  return path;
}

scanner::ScanOptions WithShippedRules() {
  scanner::ScanOptions o;
  auto rules = scanner::CompileYaraRules({}, /*with_default=*/true);
  REQUIRE(rules.ok());
  o.yara = rules.value();
  return o;
}

const scanner::Finding* Find(const scanner::FileScan& s, const std::string& id) {
  for (const auto& f : s.findings) {
    if (f.id == id) return &f;
  }
  return nullptr;
}

char Name[32];

}  // namespace

TEST_CASE("a long header's rules see its first and its last bytes", "[loaders][yara][overlap]") {
  // ~3.3 MB of header: past the 1 MiB overlap threshold and past several
  // of the parse's 1 MiB page drops. A credential path in the first name,
  // a shell path in the last.
  constexpr size_t kCount = 50'000;
  const LongHeaderFile f = MakeFile(kCount, [](size_t i) {
    if (i == 0) return std::string("/etc/passwd");
    if (i == kCount - 1) return std::string("run /bin/sh now");
    std::snprintf(Name, sizeof Name, "layers.%06zu.w", i);
    return std::string(Name);
  });
  REQUIRE(f.header.size() > 3'000'000);
  const std::string path = TempSafetensors(f.bytes);
  const scanner::ScanOptions options = WithShippedRules();
  auto opened = core::OpenRegularFile(path, false);
  REQUIRE(opened.ok());
  const scanner::FileScan s = scanner::ScanOpened(opened.value(), path, options);
  CHECK_FALSE(s.io_error);
  REQUIRE(s.safetensors.has_value());
  CHECK(s.safetensors->tensors.size() == kCount);

  const scanner::Finding* first = Find(s, "MG-YARA-PERSISTENCE-OR-CREDENTIAL-ACCESS");
  REQUIRE(first != nullptr);
  CHECK(first->offset == 8 + f.header.find("/etc/passwd"));
  const scanner::Finding* last = Find(s, "MG-YARA-SHELL-COMMAND-INVOCATION");
  REQUIRE(last != nullptr);
  CHECK(last->offset == 8 + f.header.find("/bin/sh"));

  // The same header under 1 MiB (the rules on this thread, before the parse)
  // reports the same rules.
  const LongHeaderFile small = MakeFile(2, [](size_t i) {
    return std::string(i == 0 ? "/etc/passwd" : "run /bin/sh now");
  });
  const std::string small_path = TempSafetensors(small.bytes);
  auto small_opened = core::OpenRegularFile(small_path, false);
  REQUIRE(small_opened.ok());
  const scanner::FileScan t = scanner::ScanOpened(small_opened.value(), small_path, options);
  CHECK(Find(t, "MG-YARA-PERSISTENCE-OR-CREDENTIAL-ACCESS") != nullptr);
  CHECK(Find(t, "MG-YARA-SHELL-COMMAND-INVOCATION") != nullptr);
  CHECK(s.findings.size() == t.findings.size());
  ::unlink(path.c_str());
  ::unlink(small_path.c_str());
}

TEST_CASE("a long header that shrank under the scan is MG-IO-CHANGED on every thread",
          "[loaders][yara][overlap][io]") {
  const LongHeaderFile f = MakeFile(50'000, [](size_t i) {
    std::snprintf(Name, sizeof Name, "layers.%06zu.w", i);
    return std::string(Name);
  });
  const std::string path = TempSafetensors(f.bytes);
  const scanner::ScanOptions options = WithShippedRules();
  auto opened = core::OpenRegularFile(path, false);
  REQUIRE(opened.ok());
  // Opened at full size, then cut to half the header: every reader of the
  // mapping (the rules' thread too) meets pages past the end.
  REQUIRE(::truncate(path.c_str(), static_cast<off_t>(f.header.size() / 2)) == 0);
  const scanner::FileScan s = scanner::ScanOpened(opened.value(), path, options);
  CHECK(s.io_error);
  CHECK(Find(s, "MG-IO-CHANGED") != nullptr);
  ::unlink(path.c_str());
}
