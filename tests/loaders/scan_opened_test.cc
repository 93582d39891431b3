// One descriptor per verdict: ScanOpened reads only the descriptor it is
// given, and a file that shrinks under it is a clear error (MG-IO-CHANGED),
// never a SIGBUS that kills the process linking the library.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/wait.h>
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

std::string TempFile(const std::vector<uint8_t>& bytes) {
  char name[] = "/tmp/mg-scan-opened-XXXXXX";
  const int fd = ::mkstemp(name);
  REQUIRE(fd >= 0);
  REQUIRE(::write(fd, bytes.data(), bytes.size()) == static_cast<ssize_t>(bytes.size()));
  ::close(fd);
  return name;
}

// A protocol-2 pickle of a long list of ints: big enough to span many pages.
std::vector<uint8_t> BigPickle(size_t pages) {
  std::vector<uint8_t> b = {0x80, 0x02, ']', '('};
  while (b.size() < pages * 4096) {
    b.push_back('K');
    b.push_back(7);
  }
  b.push_back('e');
  b.push_back('.');
  return b;
}

}  // namespace

TEST_CASE("a guarded mapping reads zeros past a truncation and says so", "[loaders][io]") {
  const std::string path = TempFile(std::vector<uint8_t>(8 * 4096, 0xAB));
  auto opened = core::OpenRegularFile(path, false);
  REQUIRE(opened.ok());
  auto m = core::GuardedMapping::Map(opened.value().fd, opened.value().size);
  REQUIRE(m.ok());
  CHECK(m.value().bytes()[5 * 4096] == 0xAB);  // page resident before the cut
  CHECK_FALSE(m.value().faulted());
  REQUIRE(::truncate(path.c_str(), 4096) == 0);
  uint64_t sum = 0;
  for (uint8_t b : m.value().bytes()) sum += b;  // would be SIGBUS unguarded
  CHECK(sum == 4096u * 0xAB);
  CHECK(m.value().faulted());
  ::unlink(path.c_str());
}

TEST_CASE("an unguarded SIGBUS elsewhere is not swallowed", "[loaders][io]") {
  // The handler only answers for its own mappings: a fault in another
  // mapping keeps the default action (here: the child dies of SIGBUS).
  const std::string path = TempFile(std::vector<uint8_t>(2 * 4096, 1));
  {  // install the guard in this process first
    auto opened = core::OpenRegularFile(path, false);
    REQUIRE(opened.ok());
    auto m = core::GuardedMapping::Map(opened.value().fd, opened.value().size);
    REQUIRE(m.ok());
  }
  fflush(nullptr);
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    const int fd = ::open(path.c_str(), O_RDONLY);
    auto* p = static_cast<volatile const uint8_t*>(::mmap(nullptr, 2 * 4096, PROT_READ, MAP_PRIVATE, fd, 0));
    if (::truncate(path.c_str(), 0) != 0) ::_exit(3);
    const uint8_t v = p[4096];
    ::_exit(v == 0 ? 4 : 5);
  }
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  CHECK(WIFSIGNALED(status));
  CHECK(WTERMSIG(status) == SIGBUS);
  ::unlink(path.c_str());
}

TEST_CASE("a file truncated after it was opened is MG-IO-CHANGED, not a crash", "[loaders][io]") {
  const std::string path = TempFile(BigPickle(64));
  std::rename(path.c_str(), (path + ".pkl").c_str());
  const std::string pkl = path + ".pkl";
  auto opened = core::OpenRegularFile(pkl, false);
  REQUIRE(opened.ok());
  {
    const scanner::FileScan whole = scanner::ScanOpened(opened.value(), pkl, scanner::ScanOptions{});
    CHECK_FALSE(whole.io_error);
  }
  REQUIRE(::truncate(pkl.c_str(), 4096) == 0);
  const scanner::FileScan cut = scanner::ScanOpened(opened.value(), pkl, scanner::ScanOptions{});
  CHECK(cut.io_error);
  bool changed = false;
  for (const auto& f : cut.findings) changed |= f.id == "MG-IO-CHANGED";
  CHECK(changed);
  ::unlink(pkl.c_str());
}
