// core::AtomicOutput: the output appears only on Commit, whole, with the
// mode asked for; an uncommitted or failed output leaves the directory as
// it was (no temp file, the old file intact); temps of dead writers are
// swept, live ones are not; every error names the output path.
#include <catch2/catch.hpp>

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "modelgate/atomic_file.h"

namespace core = modelgate::core;
using core::AtomicOutput;

namespace {

class Dir {
 public:
  Dir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "mg-atomic-XXXXXX").string();
    if (::mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp");
    path_ = tmpl;
  }
  ~Dir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }
  const std::string& path() const { return path_; }

  std::vector<std::string> Entries() const {
    std::vector<std::string> names;
    for (const auto& e : std::filesystem::directory_iterator(path_)) {
      names.push_back(e.path().filename().string());
    }
    std::sort(names.begin(), names.end());
    return names;
  }

 private:
  std::string path_;
};

std::span<const uint8_t> Bytes(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

std::string Read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void WriteText(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

mode_t ModeOf(const std::string& path) {
  struct stat st {};
  REQUIRE(::stat(path.c_str(), &st) == 0);
  return st.st_mode & 07777;
}

const AtomicOutput::Temp kBothTemps[] = {AtomicOutput::Temp::kAuto, AtomicOutput::Temp::kNamed};

}  // namespace

TEST_CASE("AtomicOutput: a new output appears only on Commit, with the mode asked", "[core][atomic]") {
  for (auto temp : kBothTemps) {
    CAPTURE(static_cast<int>(temp));
    Dir dir;
    const std::string out_path = dir / "out.bin";
    auto out = AtomicOutput::Create(out_path, 0640, temp);
    REQUIRE(out.ok());
    AtomicOutput file = std::move(out).value();
    CHECK(file.named_temp() == (temp == AtomicOutput::Temp::kNamed));
    REQUIRE(file.Write(Bytes("hello ")).ok());
    REQUIRE(file.Write(Bytes("world")).ok());
    REQUIRE(file.WriteAt(0, Bytes("J")).ok());
    CHECK_FALSE(std::filesystem::exists(out_path));  // nothing visible yet
    // Readable through fd(): callers hash what they wrote.
    char back[5] = {};
    REQUIRE(::pread(file.fd(), back, sizeof back, 6) == 5);
    CHECK(std::string(back, 5) == "world");
    REQUIRE(file.Commit().ok());
    CHECK(Read(out_path) == "Jello world");
    CHECK(ModeOf(out_path) == 0640);
    CHECK(dir.Entries() == std::vector<std::string>{"out.bin"});
    CHECK_FALSE(file.Commit().ok());  // once
  }
}

TEST_CASE("AtomicOutput: replacing an existing file, discard keeps it", "[core][atomic]") {
  for (auto temp : kBothTemps) {
    CAPTURE(static_cast<int>(temp));
    Dir dir;
    const std::string out_path = dir / "model.safetensors";
    WriteText(out_path, "old contents");
    struct stat before {};
    REQUIRE(::stat(out_path.c_str(), &before) == 0);
    {
      auto out = AtomicOutput::Create(out_path, 0600, temp);
      REQUIRE(out.ok());
      AtomicOutput file = std::move(out).value();
      REQUIRE(file.Write(Bytes("half-written")).ok());
      // Destroyed uncommitted.
    }
    CHECK(Read(out_path) == "old contents");
    CHECK(dir.Entries() == std::vector<std::string>{"model.safetensors"});
    {
      auto out = AtomicOutput::Create(out_path, 0600, temp);
      REQUIRE(out.ok());
      AtomicOutput file = std::move(out).value();
      REQUIRE(file.Write(Bytes("x")).ok());
      file.Discard();
      file.Discard();
      CHECK_FALSE(file.Commit().ok());
    }
    CHECK(Read(out_path) == "old contents");
    auto out = AtomicOutput::Create(out_path, 0604, temp);
    REQUIRE(out.ok());
    AtomicOutput file = std::move(out).value();
    REQUIRE(file.Write(Bytes("new contents")).ok());
    CHECK(Read(out_path) == "old contents");
    REQUIRE(file.Commit().ok());
    CHECK(Read(out_path) == "new contents");
    CHECK(ModeOf(out_path) == 0604);
    struct stat after {};
    REQUIRE(::stat(out_path.c_str(), &after) == 0);
    CHECK(after.st_ino != before.st_ino);  // a new inode, never the old one rewritten
    CHECK(dir.Entries() == std::vector<std::string>{"model.safetensors"});
  }
}

TEST_CASE("AtomicOutput: moved-to object owns the file", "[core][atomic]") {
  Dir dir;
  auto out = AtomicOutput::Create(dir / "a", 0644);
  REQUIRE(out.ok());
  AtomicOutput first = std::move(out).value();
  REQUIRE(first.Write(Bytes("abc")).ok());
  AtomicOutput second;
  second = std::move(first);
  CHECK(first.fd() == -1);
  CHECK_FALSE(first.Commit().ok());
  REQUIRE(second.Commit().ok());
  CHECK(Read(dir / "a") == "abc");
}

TEST_CASE("AtomicOutput: Create sweeps temps of dead writers only", "[core][atomic]") {
  Dir dir;
  const std::string out_path = dir / "m.safetensors";
  WriteText(out_path, "keep");
  // What a killed older version (mkostemp) or a kill between link and
  // rename leaves: an unlocked temp of this output.
  WriteText(dir / "m.safetensors.mg-tmp-AbC123", "stale");
  // A live writer's temp: locked.
  WriteText(dir / "m.safetensors.mg-tmp-Live00", "live");
  int live = ::open((dir / "m.safetensors.mg-tmp-Live00").c_str(), O_RDONLY | O_CLOEXEC);
  REQUIRE(live >= 0);
  REQUIRE(::flock(live, LOCK_EX) == 0);
  // Names that are not temps of this output.
  WriteText(dir / "other.mg-tmp-AbC123", "other output");
  WriteText(dir / "m.safetensors.mg-tmp-AbC12", "short suffix");
  WriteText(dir / "m.safetensors.mg-tmp-AbC12!", "not alphanumeric");
  std::filesystem::create_directory(dir / "m.safetensors.mg-tmp-Dir000");

  // The sweep runs in a child so the live temp's lock is another
  // process's (flock conflicts between open file descriptions, as across
  // processes).
  pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    auto out = AtomicOutput::Create(out_path, 0644);
    ::_exit(out.ok() ? 0 : 1);
  }
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  CHECK(dir.Entries() == std::vector<std::string>{"m.safetensors", "m.safetensors.mg-tmp-AbC12",
                                                  "m.safetensors.mg-tmp-AbC12!", "m.safetensors.mg-tmp-Dir000",
                                                  "m.safetensors.mg-tmp-Live00", "other.mg-tmp-AbC123"});
  CHECK(Read(out_path) == "keep");
  ::close(live);
  // Its writer gone, the next Create takes it.
  auto out = AtomicOutput::Create(out_path, 0644);
  REQUIRE(out.ok());
  CHECK_FALSE(std::filesystem::exists(dir / "m.safetensors.mg-tmp-Live00"));
}

TEST_CASE("AtomicOutput: a named temp lives only while its writer does", "[core][atomic]") {
  Dir dir;
  const std::string out_path = dir / "o";
  auto out = AtomicOutput::Create(out_path, 0644, AtomicOutput::Temp::kNamed);
  REQUIRE(out.ok());
  AtomicOutput file = std::move(out).value();
  auto entries = dir.Entries();
  REQUIRE(entries.size() == 1);
  CHECK(entries[0].rfind("o.mg-tmp-", 0) == 0);
  // Another process's Create does not sweep it: it is locked.
  pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) ::_exit(AtomicOutput::Create(out_path, 0644).ok() ? 0 : 1);
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  CHECK(dir.Entries() == entries);
  file.Discard();
  CHECK(dir.Entries().empty());
}

TEST_CASE("AtomicOutput: errors name the output and the errno text", "[core][atomic]") {
  Dir dir;
  SECTION("no such directory") {
    const std::string out_path = dir / "missing/out";
    auto out = AtomicOutput::Create(out_path, 0644);
    REQUIRE_FALSE(out.ok());
    CHECK(out.error().code == core::Code::kIoOpen);
    CHECK_THAT(out.error().message, Catch::Contains(out_path) && Catch::Contains(std::strerror(ENOENT)));
  }
  SECTION("not a file name") {
    auto out = AtomicOutput::Create(dir.path() + "/", 0644);
    REQUIRE_FALSE(out.ok());
    CHECK_THAT(out.error().message, Catch::Contains(dir.path() + "/"));
  }
  SECTION("committing onto a directory fails, leaves no temp") {
    for (auto temp : kBothTemps) {
      const std::string out_path = dir / "isdir";
      std::filesystem::create_directory(out_path);
      auto out = AtomicOutput::Create(out_path, 0644, temp);
      REQUIRE(out.ok());
      AtomicOutput file = std::move(out).value();
      REQUIRE(file.Write(Bytes("x")).ok());
      auto s = file.Commit();
      REQUIRE_FALSE(s.ok());
      CHECK_THAT(s.error().message, Catch::Contains(out_path));
      CHECK(dir.Entries() == std::vector<std::string>{"isdir"});
      CHECK(std::filesystem::is_directory(out_path));
    }
  }
  SECTION("a write beyond RLIMIT_FSIZE is EFBIG naming the output") {
    for (auto temp : kBothTemps) {
      const std::string out_path = dir / "big.out";
      WriteText(out_path, "original");
      // In a child: the limit and SIGXFSZ's disposition are per process.
      int pipe_fds[2];
      REQUIRE(::pipe(pipe_fds) == 0);
      pid_t child = ::fork();
      REQUIRE(child >= 0);
      if (child == 0) {
        ::close(pipe_fds[0]);
        ::signal(SIGXFSZ, SIG_IGN);
        struct rlimit lim {4096, 4096};
        if (::setrlimit(RLIMIT_FSIZE, &lim) != 0) ::_exit(3);
        std::string report;
        {
          auto out = AtomicOutput::Create(out_path, 0644, temp);
          if (!out.ok()) ::_exit(4);
          AtomicOutput file = std::move(out).value();
          std::string chunk(3000, 'a');
          auto s1 = file.Write(Bytes(chunk));
          auto s2 = file.Write(Bytes(chunk));
          auto s3 = file.WriteAt(10000, Bytes("z"));
          report = (s1.ok() ? "ok1|" : "fail1|") + (s2.ok() ? std::string("ok2") : s2.error().message) + "|" +
                   (s3.ok() ? std::string("ok3") : s3.error().message);
        }  // discarded, as the signer does on error
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
      const std::string efbig = "cannot write " + out_path + ": " + std::strerror(EFBIG);
      CHECK(report == "ok1|" + efbig + "|" + efbig);
      CHECK(Read(out_path) == "original");
      CHECK(dir.Entries() == std::vector<std::string>{"big.out"});
    }
  }
}
