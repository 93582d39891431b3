// ReadSafetensors and the file helpers on real temporary files.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "support/st_builder.h"
#include "support/st_expect.h"

namespace core = modelgate::core;
namespace fs = std::filesystem;
using modelgate::testing::Parse;

namespace {

// TempDir is a fresh directory removed with its contents at scope exit.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "mg-core-test-XXXXXX").string();
    if (::mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  // Write creates `name` holding `bytes` and returns its path.
  std::string Write(const std::string& name, const std::vector<uint8_t>& bytes) const {
    std::string p = (path_ / name).string();
    int fd = ::open(p.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) throw std::runtime_error("cannot create " + p);
    size_t done = 0;
    while (done < bytes.size()) {
      ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
      if (n <= 0) {
        ::close(fd);
        throw std::runtime_error("cannot write " + p);
      }
      done += static_cast<size_t>(n);
    }
    ::close(fd);
    return p;
  }
  fs::path path() const { return path_; }

 private:
  fs::path path_;
};

void CheckSameParse(const core::Safetensors& a, const core::Safetensors& b) {
  CHECK(a.file_size == b.file_size);
  CHECK(a.header_bytes == b.header_bytes);
  CHECK(a.data_start == b.data_start);
  CHECK(a.has_metadata == b.has_metadata);
  CHECK(a.metadata == b.metadata);
  REQUIRE(a.tensors.size() == b.tensors.size());
  for (size_t i = 0; i < a.tensors.size(); ++i) {
    CAPTURE(i);
    CHECK(a.tensors[i].name == b.tensors[i].name);
    CHECK(a.tensors[i].dtype == b.tensors[i].dtype);
    CHECK(a.tensors[i].shape == b.tensors[i].shape);
    CHECK(a.tensors[i].begin == b.tensors[i].begin);
    CHECK(a.tensors[i].end == b.tensors[i].end);
    CHECK(a.tensors[i].entry_offset == b.tensors[i].entry_offset);
    CHECK(a.tensors[i].data_start == b.tensors[i].data_start);
  }
}

}  // namespace

TEST_CASE("ReadSafetensors matches ParseSafetensors on a real file", "[core][file]") {
  TempDir dir;
  auto bytes = StBuilder()
                   .Metadata("format", "pt")
                   .Metadata("a", "b")
                   .Tensor("layer.0.weight", "F16", {4, 4})
                   .Tensor("layer.0.bias", "F16", {4})
                   .Tensor("step", "I64", {})
                   .AlignTo8()
                   .Build();
  std::string path = dir.Write("model.safetensors", bytes);
  auto opened = core::OpenRegularFile(path, /*follow_symlink=*/false);
  MG_REQUIRE_OK(opened);
  CHECK(opened.value().size == bytes.size());
  auto from_fd = core::ReadSafetensors(opened.value().fd, opened.value().size, core::Limits{});
  MG_REQUIRE_OK(from_fd);
  auto in_memory = Parse(bytes);
  MG_REQUIRE_OK(in_memory);
  CheckSameParse(from_fd.value(), in_memory.value());
  CHECK(from_fd.value().tensors.size() == 3);
}

TEST_CASE("ReadSafetensors reports the same rule and offset as ParseSafetensors", "[core][file]") {
  TempDir dir;
  struct Case {
    const char* name;
    std::vector<uint8_t> bytes;
  };
  auto gap = StBuilder().Entry("a", "F32", {1}, 0, 4).Entry("b", "F32", {1}, 8, 12);
  const std::vector<Case> cases = {
      {"gap", gap.Build()},
      {"trailing", StBuilder().Tensor("a", "F32", {1}).Trailing("evil").Build()},
      {"syntax", StBuilder().Header("{}x").Build()},
      {"short", std::vector<uint8_t>(5, 0)},
      {"empty header", std::vector<uint8_t>(8, 0)},
  };
  for (const Case& c : cases) {
    CAPTURE(c.name);
    std::string path = dir.Write(c.name, c.bytes);
    auto opened = core::OpenRegularFile(path, false);
    MG_REQUIRE_OK(opened);
    auto from_fd = core::ReadSafetensors(opened.value().fd, opened.value().size, core::Limits{});
    auto in_memory = Parse(c.bytes);
    REQUIRE_FALSE(in_memory.ok());
    MG_CHECK_ERROR(from_fd, in_memory.error().code, in_memory.error().offset);
  }
}

TEST_CASE("ReadSafetensors never reads tensor data", "[core][file]") {
  // The file on disk stops at the end of the header. Told that the file is
  // longer (as fstat would say of the full file), a reader that touched the
  // data section would hit end of file; one that reads only the header
  // validates the layout against the size it was given.
  TempDir dir;
  auto full = StBuilder().Tensor("w", "F32", {1024}).AlignTo8();
  auto bytes = full.Build();
  std::vector<uint8_t> header_only(bytes.begin(), bytes.begin() + static_cast<long>(full.DataStart()));
  std::string path = dir.Write("header-only.safetensors", header_only);
  auto opened = core::OpenRegularFile(path, false);
  MG_REQUIRE_OK(opened);
  auto r = core::ReadSafetensors(opened.value().fd, bytes.size(), core::Limits{});
  MG_REQUIRE_OK(r);
  CHECK(r.value().file_size == bytes.size());
  REQUIRE(r.value().tensors.size() == 1);
  CHECK(r.value().tensors[0].size_bytes() == 4096);
}

TEST_CASE("ReadSafetensors rejects a header longer than the file without reading it", "[core][file]") {
  TempDir dir;
  // The length field claims 1000 bytes; the file holds 2. Reading would
  // fail with an I/O error; the check must come first.
  auto bytes = StBuilder().Header("{}").LengthField(1000).Build();
  std::string path = dir.Write("short-header.safetensors", bytes);
  auto opened = core::OpenRegularFile(path, false);
  MG_REQUIRE_OK(opened);
  MG_CHECK_ERROR(core::ReadSafetensors(opened.value().fd, opened.value().size, core::Limits{}),
                 core::Code::kStHeaderLength, 0);
}

TEST_CASE("ReadSafetensors checks the header limit before reading", "[core][file]") {
  TempDir dir;
  auto bytes = StBuilder().Header("{}").LengthField(UINT64_MAX).Build();
  std::string path = dir.Write("huge.safetensors", bytes);
  auto opened = core::OpenRegularFile(path, false);
  MG_REQUIRE_OK(opened);
  MG_CHECK_ERROR(core::ReadSafetensors(opened.value().fd, opened.value().size, core::Limits{}),
                 core::Code::kStHeaderTooLarge, 0);
  core::Limits tight;
  tight.max_header_bytes = 1;
  MG_CHECK_ERROR(core::ReadSafetensors(opened.value().fd, opened.value().size, tight),
                 core::Code::kStHeaderTooLarge, 0);
}

TEST_CASE("ReadSafetensors on a file shorter than 8 bytes is truncated", "[core][file]") {
  TempDir dir;
  std::string path = dir.Write("tiny", {0x02, 0, 0});
  auto opened = core::OpenRegularFile(path, false);
  MG_REQUIRE_OK(opened);
  MG_CHECK_ERROR(core::ReadSafetensors(opened.value().fd, opened.value().size, core::Limits{}),
                 core::Code::kStTruncated, 0);
}

TEST_CASE("OpenRegularFile accepts only regular files", "[core][file]") {
  TempDir dir;
  std::string target = dir.Write("real.safetensors", StBuilder().Header("{}").Build());
  SECTION("missing file") {
    auto r = core::OpenRegularFile((dir.path() / "missing").string(), false);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code == core::Code::kIoOpen);
  }
  SECTION("directory") {
    auto r = core::OpenRegularFile(dir.path().string(), false);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code == core::Code::kIoNotRegular);
  }
  SECTION("FIFO does not block") {
    std::string fifo = (dir.path() / "fifo").string();
    REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
    auto r = core::OpenRegularFile(fifo, true);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code == core::Code::kIoNotRegular);
  }
  SECTION("symlink is not followed unless asked") {
    fs::path link = dir.path() / "link.safetensors";
    fs::create_symlink(target, link);
    auto refused = core::OpenRegularFile(link.string(), false);
    REQUIRE_FALSE(refused.ok());
    CHECK((refused.error().code == core::Code::kIoNotRegular ||
           refused.error().code == core::Code::kIoOpen));
    auto followed = core::OpenRegularFile(link.string(), true);
    MG_REQUIRE_OK(followed);
    CHECK(followed.value().size == 10);
  }
  SECTION("regular file reports size and identity") {
    auto r = core::OpenRegularFile(target, false);
    MG_REQUIRE_OK(r);
    struct stat st {};
    REQUIRE(::stat(target.c_str(), &st) == 0);
    CHECK(r.value().size == 10);
    CHECK(r.value().ino == static_cast<uint64_t>(st.st_ino));
    CHECK(r.value().dev == static_cast<uint64_t>(st.st_dev));
    CHECK(r.value().fd >= 0);
  }
}

TEST_CASE("PreadExact reads exactly or fails at end of file", "[core][file]") {
  TempDir dir;
  std::string path = dir.Write("bytes", {1, 2, 3, 4, 5, 6});
  auto opened = core::OpenRegularFile(path, false);
  MG_REQUIRE_OK(opened);
  std::vector<uint8_t> buf(4);
  MG_REQUIRE_OK(core::PreadExact(opened.value().fd, 2, buf));
  CHECK(buf == std::vector<uint8_t>{3, 4, 5, 6});
  auto past = core::PreadExact(opened.value().fd, 4, buf);
  REQUIRE_FALSE(past.ok());
  // core.h: "an early EOF is kIoChanged (the file shrank after it was sized)".
  CHECK(past.error().code == core::Code::kIoChanged);
}

TEST_CASE("OpenedFile closes its descriptor and moves ownership", "[core][file]") {
  TempDir dir;
  std::string path = dir.Write("f", {0});
  int fd = -1;
  {
    auto opened = core::OpenRegularFile(path, false);
    MG_REQUIRE_OK(opened);
    core::OpenedFile moved = std::move(opened).value();
    fd = moved.fd;
    REQUIRE(fd >= 0);
    CHECK(::fcntl(fd, F_GETFD) != -1);
  }
  // Closed once, by the last owner.
  CHECK(::fcntl(fd, F_GETFD) == -1);
}

// ---- CheckUnchanged: the identity re-check before a verdict ----------------

namespace {

// Append adds `bytes` to the end of `path` through a second descriptor, as
// a concurrent writer would.
void Append(const std::string& path, const std::vector<uint8_t>& bytes) {
  int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);
  REQUIRE(fd >= 0);
  REQUIRE(::write(fd, bytes.data(), bytes.size()) == static_cast<ssize_t>(bytes.size()));
  ::close(fd);
}

}  // namespace

TEST_CASE("CheckUnchanged passes an untouched file, also after a move", "[core][file][changed]") {
  TempDir dir;
  std::string path = dir.Write("f.safetensors", {1, 2, 3, 4});
  auto opened = core::OpenRegularFile(path, false);
  MG_REQUIRE_OK(opened);
  struct stat st {};
  REQUIRE(::stat(path.c_str(), &st) == 0);
  CHECK(opened.value().mtime_sec == st.st_mtim.tv_sec);
  CHECK(opened.value().mtime_nsec == st.st_mtim.tv_nsec);
  CHECK(opened.value().ctime_sec == st.st_ctim.tv_sec);
  CHECK(opened.value().ctime_nsec == st.st_ctim.tv_nsec);
  MG_REQUIRE_OK(core::CheckUnchanged(opened.value()));
  core::OpenedFile moved = std::move(opened).value();
  MG_REQUIRE_OK(core::CheckUnchanged(moved));
  core::OpenedFile assigned;
  assigned = std::move(moved);
  MG_REQUIRE_OK(core::CheckUnchanged(assigned));
}

TEST_CASE("CheckUnchanged: a file written after the open is MG-IO-CHANGED", "[core][file][changed]") {
  TempDir dir;
  std::string path = dir.Write("f.safetensors", {1, 2, 3, 4});
  auto opened = core::OpenRegularFile(path, false);
  MG_REQUIRE_OK(opened);
  Append(path, {5, 6});
  auto r = core::CheckUnchanged(opened.value());
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code == core::Code::kIoChanged);
  CHECK(core::FindingId(r.error().code) == "MG-IO-CHANGED");
  CHECK(r.error().offset == core::kNoOffset);
  CHECK_THAT(r.error().message, Catch::Contains("size 4 -> 6"));
}

TEST_CASE("CheckUnchanged: a touched mtime of the same size is MG-IO-CHANGED",
          "[core][file][changed]") {
  TempDir dir;
  std::string path = dir.Write("f.safetensors", {1, 2, 3, 4});
  auto opened = core::OpenRegularFile(path, false);
  MG_REQUIRE_OK(opened);
  // One nanosecond later than the open saw: only the nanoseconds differ.
  struct timespec times[2];
  times[0].tv_sec = 0;
  times[0].tv_nsec = UTIME_OMIT;
  times[1].tv_sec = opened.value().mtime_sec;
  times[1].tv_nsec = (opened.value().mtime_nsec + 1) % 1'000'000'000;
  REQUIRE(::utimensat(AT_FDCWD, path.c_str(), times, 0) == 0);
  auto r = core::CheckUnchanged(opened.value());
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code == core::Code::kIoChanged);
  CHECK_THAT(r.error().message, Catch::Contains("mtime"));
  CHECK_THAT(r.error().message, !Catch::Contains("size"));
}

TEST_CASE("CheckUnchanged: same bytes rewritten, mtime put back, is MG-IO-CHANGED by ctime",
          "[core][file][changed]") {
  TempDir dir;
  std::string path = dir.Write("f.safetensors", {1, 2, 3, 4});
  auto opened = core::OpenRegularFile(path, false);
  MG_REQUIRE_OK(opened);
  // A writer that restores mtime (touch -r) cannot restore ctime. The
  // kernel stamps ctime from a coarse clock: write again until it moved.
  int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  REQUIRE(fd >= 0);
  struct stat st {};
  for (int attempt = 0; attempt < 200; ++attempt) {
    const uint8_t other[4] = {9, 9, 9, static_cast<uint8_t>(attempt)};
    REQUIRE(::pwrite(fd, other, sizeof other, 0) == 4);
    struct timespec times[2];
    times[0].tv_sec = 0;
    times[0].tv_nsec = UTIME_OMIT;
    times[1].tv_sec = opened.value().mtime_sec;
    times[1].tv_nsec = opened.value().mtime_nsec;
    REQUIRE(::futimens(fd, times) == 0);
    REQUIRE(::fstat(fd, &st) == 0);
    if (st.st_ctim.tv_sec != opened.value().ctime_sec ||
        st.st_ctim.tv_nsec != opened.value().ctime_nsec) {
      break;
    }
    ::usleep(5000);
  }
  ::close(fd);
  REQUIRE(st.st_size == 4);
  REQUIRE(st.st_mtim.tv_sec == opened.value().mtime_sec);  // really put back
  REQUIRE(st.st_mtim.tv_nsec == opened.value().mtime_nsec);
  auto r = core::CheckUnchanged(opened.value());
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code == core::Code::kIoChanged);
  CHECK_THAT(r.error().message, Catch::Contains("ctime"));
  CHECK_THAT(r.error().message, !Catch::Contains("mtime"));
}
