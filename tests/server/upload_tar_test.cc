// UnpackUpload (the tar of POST /v1/check) and RemoveTree: what is written
// is exactly the listed files under their names inside the request's
// directory; every member kind, name and limit that could put a byte
// elsewhere, or that two tar readers could list differently, refuses the
// whole upload. Each UploadLimits limit at N and N+1.
#include <catch2/catch.hpp>

#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tar_builder.h"
#include "upload_tar.h"

namespace ms = modelgate::server;
using mg_test::TarBuilder;
using mg_test::TarHeader;

namespace {

// Scratch is a fresh directory, removed with everything in it.
struct Scratch {
  std::string path;
  Scratch() {
    std::string t = "/tmp/mg-upload-test-XXXXXX";
    REQUIRE(::mkdtemp(t.data()) != nullptr);
    path = t;
  }
  ~Scratch() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};

struct Outcome {
  bool ok = false;
  ms::Unpacked unpacked;
  ms::UploadProblem problem;
};

Outcome Unpack(const std::vector<uint8_t>& tar, const std::string& dir,
               const ms::UploadLimits& limits = {}) {
  const int fd = ::memfd_create("upload", MFD_CLOEXEC);
  REQUIRE(fd >= 0);
  REQUIRE(::write(fd, tar.data(), tar.size()) == static_cast<ssize_t>(tar.size()));
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  REQUIRE(dfd >= 0);
  Outcome o;
  o.ok = ms::UnpackUpload(fd, tar.size(), dfd, limits, &o.unpacked, &o.problem);
  ::close(dfd);
  ::close(fd);
  return o;
}

std::string Read(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// Entries lists everything below `dir` ("a", "a/b"...), sorted.
void Entries(const std::string& dir, const std::string& rel, std::vector<std::string>* out) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return;
  while (dirent* e = ::readdir(d)) {
    const std::string n = e->d_name;
    if (n == "." || n == "..") continue;
    const std::string r = rel.empty() ? n : rel + "/" + n;
    out->push_back(r);
    struct stat st {};
    if (::lstat((dir + "/" + n).c_str(), &st) == 0 && S_ISDIR(st.st_mode)) Entries(dir + "/" + n, r, out);
  }
  ::closedir(d);
  std::sort(out->begin(), out->end());
}

std::vector<std::string> Entries(const std::string& dir) {
  std::vector<std::string> out;
  Entries(dir, "", &out);
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<uint8_t> Dir(TarBuilder b, const std::string& name) {
  TarHeader h;
  h.name = name;
  h.type = '5';
  return b.Header(h).End().Build();
}

}  // namespace

TEST_CASE("a model directory unpacks as listed: files 0600, directories 0700", "[upload]") {
  Scratch s;
  TarHeader root;
  root.name = "./";
  root.type = '5';
  TarHeader sub;
  sub.name = "./shards/";
  sub.type = '5';
  auto tar = TarBuilder()
                 .Header(root)
                 .File("./config.json", "{}")
                 .Header(sub)
                 .File("./shards/a.safetensors", std::string(1000, 'x'))
                 .File("deep/er/b.bin", "bb")
                 .End()
                 .Build();
  Outcome o = Unpack(tar, s.path);
  REQUIRE(o.ok);
  CHECK(o.unpacked.files == 3);
  CHECK(o.unpacked.bytes == 1004);
  CHECK(o.unpacked.directories == 3);  // shards, deep, deep/er
  CHECK(Entries(s.path) == std::vector<std::string>{"config.json", "deep", "deep/er", "deep/er/b.bin",
                                                      "shards", "shards/a.safetensors"});
  CHECK(Read(s.path + "/shards/a.safetensors") == std::string(1000, 'x'));
  CHECK(Read(s.path + "/deep/er/b.bin") == "bb");
  struct stat st {};
  REQUIRE(::stat((s.path + "/config.json").c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);
  REQUIRE(::stat((s.path + "/deep").c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0700);
}

TEST_CASE("links, devices, FIFOs and unknown member types refuse the upload", "[upload]") {
  for (char type : {'1', '2', '3', '4', '6', 'Z'}) {
    CAPTURE(type);
    Scratch s;
    auto tar = TarBuilder().File("ok.json", "{}").Link("x", "/etc/passwd", type).End().Build();
    Outcome o = Unpack(tar, s.path);
    CHECK_FALSE(o.ok);
    CHECK_FALSE(o.problem.io);
    CHECK(o.problem.message.find("\"x\"") != std::string::npos);
    CHECK(o.problem.offset >= 1024);  // in the member's header
    CHECK(o.problem.offset < 1536);
    for (const std::string& e : Entries(s.path)) CHECK(e == "ok.json");
  }
}

TEST_CASE("a name that is not a plain relative path refuses the upload, nothing lands outside",
          "[upload]") {
  for (const std::string name : {"/abs", "../up", "a/../../up", "a/./b", "a//b", "./../up", "..",
                                 "a/..", "./"}) {
    CAPTURE(name);
    Scratch s;
    const std::string inner = s.path + "/in";
    REQUIRE(::mkdir(inner.c_str(), 0700) == 0);
    Outcome o = Unpack(TarBuilder().File(name, "payload").End().Build(), inner);
    CHECK_FALSE(o.ok);
    CHECK_FALSE(o.problem.io);
    CHECK(Entries(s.path) == std::vector<std::string>{"in"});
  }
  Scratch s;
  const std::string long_component(256, 'c');
  Outcome o = Unpack(TarBuilder().LongName(long_component).File("c", "x").End().Build(), s.path);
  CHECK_FALSE(o.ok);
  CHECK(o.problem.message.find("longer than 255") != std::string::npos);
  Scratch t;
  CHECK(Unpack(TarBuilder().LongName(long_component.substr(1)).File("c", "x").End().Build(), t.path).ok);
}

TEST_CASE("a name twice, or a file that is also a directory, refuses the upload", "[upload]") {
  Scratch a;
  Outcome twice = Unpack(TarBuilder().File("m.bin", "1").File("./m.bin", "2").End().Build(), a.path);
  CHECK_FALSE(twice.ok);
  CHECK(twice.problem.message.find("earlier member") != std::string::npos);
  Scratch b;
  CHECK_FALSE(Unpack(Dir(TarBuilder().File("m", "1"), "m/"), b.path).ok);
  Scratch c;
  CHECK_FALSE(Unpack(TarBuilder().File("m", "1").File("m/x", "2").End().Build(), c.path).ok);
  Scratch d;
  CHECK_FALSE(Unpack(TarBuilder().File("m/x", "1").File("m", "2").End().Build(), d.path).ok);
  Scratch e;  // even the same directory twice (MG-TAR-DUPLICATE-NAME)
  TarHeader dir;
  dir.name = "d/";
  dir.type = '5';
  Outcome dirs = Unpack(TarBuilder().Header(dir).Header(dir).File("d/x", "1").End().Build(), e.path);
  CHECK_FALSE(dirs.ok);
  CHECK(dirs.problem.message.find("MG-TAR-DUPLICATE-NAME") != std::string::npos);
}

TEST_CASE("what another tar reader could list otherwise refuses the upload", "[upload]") {
  Scratch s;
  // A PAX path that disagrees with the ustar name: a reader without PAX
  // support would write another file than tarfile lists.
  auto tar = TarBuilder().Pax({{"path", "other.bin"}}).File("shown.bin", "x").End().Build();
  Outcome o = Unpack(tar, s.path);
  CHECK_FALSE(o.ok);
  CHECK(o.problem.message.find("MG-TAR-PAX-MISMATCH") != std::string::npos);
  CHECK(Entries(s.path).empty());
  Scratch t;
  CHECK_FALSE(Unpack(std::vector<uint8_t>(100, 0), t.path).ok);     // shorter than a header
  CHECK_FALSE(Unpack(std::vector<uint8_t>(2048, 'A'), t.path).ok);  // no valid header
  TarHeader past;
  past.name = "big";
  past.size = 1 << 20;  // runs past the end
  Scratch u;
  CHECK_FALSE(Unpack(TarBuilder().Header(past).Data("short").Build(), u.path).ok);
}

TEST_CASE("UploadLimits: files, directories, depth and name length at N and N+1", "[upload][limits]") {
  ms::UploadLimits limits;
  limits.max_files = 3;
  limits.max_directories = 2;
  limits.max_depth = 3;
  limits.max_name_bytes = 20;
  const auto files = [](size_t n) {
    TarBuilder b;
    for (size_t i = 0; i < n; ++i) b.File("f" + std::to_string(i), "x");
    return b.End().Build();
  };
  {
    Scratch s;
    CHECK(Unpack(files(3), s.path, limits).ok);
    Scratch t;
    Outcome o = Unpack(files(4), t.path, limits);
    CHECK_FALSE(o.ok);
    CHECK(o.problem.message.find("max_files") != std::string::npos);
  }
  {
    Scratch s;
    CHECK(Unpack(TarBuilder().File("a/b/f", "x").End().Build(), s.path, limits).ok);
    Scratch t;
    Outcome o = Unpack(TarBuilder().File("a/b/c/f", "x").End().Build(), t.path, limits);
    CHECK_FALSE(o.ok);
    CHECK(o.problem.message.find("max_depth") != std::string::npos);
  }
  {
    Scratch s;
    CHECK(Unpack(TarBuilder().File("a/x", "1").File("b/y", "1").End().Build(), s.path, limits).ok);
    Scratch t;
    Outcome o = Unpack(TarBuilder().File("a/x", "1").File("b/y", "1").File("c/z", "1").End().Build(),
                       t.path, limits);
    CHECK_FALSE(o.ok);
    CHECK(o.problem.message.find("max_directories") != std::string::npos);
  }
  {
    Scratch s;
    CHECK(Unpack(TarBuilder().File(std::string(20, 'n'), "1").End().Build(), s.path, limits).ok);
    Scratch t;
    Outcome o = Unpack(TarBuilder().File(std::string(21, 'n'), "1").End().Build(), t.path, limits);
    CHECK_FALSE(o.ok);
    CHECK(o.problem.message.find("max_name_bytes") != std::string::npos);
  }
}

TEST_CASE("RemoveTree empties a tree without following a symlink out of it", "[upload]") {
  Scratch s;
  const std::string outside = s.path + "/outside";
  const std::string tree = s.path + "/tree";
  REQUIRE(::mkdir(outside.c_str(), 0700) == 0);
  REQUIRE(::mkdir(tree.c_str(), 0700) == 0);
  std::ofstream(outside + "/keep") << "keep";
  REQUIRE(Unpack(TarBuilder().File("a/b/c.bin", "x").File("d.bin", "y").End().Build(), tree).ok);
  REQUIRE(::symlink(outside.c_str(), (tree + "/a/link").c_str()) == 0);
  const int dfd = ::open(tree.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  REQUIRE(dfd >= 0);
  // Listed to its end through this descriptor first: RemoveTree must not
  // inherit that read position (a dup of it would list nothing).
  DIR* listed = ::fdopendir(::fcntl(dfd, F_DUPFD_CLOEXEC, 0));
  REQUIRE(listed != nullptr);
  while (::readdir(listed) != nullptr) {
  }
  ::closedir(listed);
  CHECK(ms::RemoveTree(dfd));
  ::close(dfd);
  CHECK(Entries(tree).empty());
  CHECK(Read(outside + "/keep") == "keep");
}
