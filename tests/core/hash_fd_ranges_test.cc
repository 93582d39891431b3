// core::HashFdRanges: ranges spread over many files hash to the Sha256 of
// each range on any thread count and buffer size (also when one range
// dominates and takes the two-thread read-ahead path), and a read error
// names the range's file.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "modelgate/core.h"

namespace core = modelgate::core;

namespace {

class Dir {
 public:
  Dir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "mg-hashfd-XXXXXX").string();
    if (::mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp");
    path_ = tmpl;
  }
  ~Dir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

std::vector<uint8_t> Pattern(size_t n, uint32_t seed) {
  std::vector<uint8_t> b(n);
  uint32_t x = seed;
  for (auto& v : b) {
    x = x * 1664525u + 1013904223u;
    v = static_cast<uint8_t>(x >> 24);
  }
  return b;
}

int WriteAndOpen(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()),
                                              static_cast<std::streamsize>(bytes.size()));
  return ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
}

core::Sha256Digest Want(const std::vector<uint8_t>& file, const core::ByteRange& r) {
  return core::Sha256(std::span<const uint8_t>(file).subspan(r.offset, r.size_bytes));
}

}  // namespace

TEST_CASE("HashFdRanges: ranges over several files equal Sha256 of each", "[core][hash]") {
  Dir dir;
  // Four "shards" and two small "configs", as a model directory.
  const std::vector<size_t> sizes = {700'001, 700'000, 699'999, 512 * 1024 + 3, 17, 0};
  std::vector<std::vector<uint8_t>> files;
  std::vector<int> fds;
  for (size_t i = 0; i < sizes.size(); ++i) {
    files.push_back(Pattern(sizes[i], static_cast<uint32_t>(i + 1)));
    fds.push_back(WriteAndOpen(dir / ("f" + std::to_string(i)), files.back()));
    REQUIRE(fds.back() >= 0);
  }
  std::vector<core::FdRange> ranges;
  std::vector<size_t> file_of;
  for (size_t i = 0; i < files.size(); ++i) {
    ranges.push_back({fds[i], {0, files[i].size()}, {}});  // whole file (files mode)
    file_of.push_back(i);
  }
  // Shard-mode style pieces, interleaved across files, sharing fds.
  for (uint64_t k = 0; k < 5; ++k) {
    ranges.push_back({fds[k % 4], {k * 100'000, 100'000 + k}, {}});
    file_of.push_back(k % 4);
  }
  for (unsigned threads : {1u, 2u, 3u, 8u}) {
    for (size_t buffer : {size_t{4096}, size_t{1} << 20}) {
      CAPTURE(threads, buffer);
      core::HashOptions opt;
      opt.threads = threads;
      opt.buffer_bytes = buffer;
      std::atomic<uint64_t> progressed{0};
      opt.progress = [&](uint64_t n) { progressed += n; };
      auto r = core::HashFdRanges(ranges, opt);
      REQUIRE(r.ok());
      REQUIRE(r.value().size() == ranges.size());
      uint64_t total = 0;
      for (size_t i = 0; i < ranges.size(); ++i) {
        CAPTURE(i);
        CHECK(r.value()[i] == Want(files[file_of[i]], ranges[i].range));
        total += ranges[i].range.size_bytes;
      }
      CHECK(progressed.load() == total);
    }
  }
  // The digests do not depend on which file a range is in: the same bytes
  // through HashRanges on each fd agree.
  for (size_t i = 0; i < 4; ++i) {
    std::vector<core::ByteRange> one = {{0, files[i].size()}};
    auto r = core::HashRanges(fds[i], one);
    REQUIRE(r.ok());
    CHECK(r.value()[0] == Want(files[i], one[0]));
  }
  for (int fd : fds) ::close(fd);
}

TEST_CASE("HashFdRanges: one dominant file takes the read-ahead path", "[core][hash]") {
  Dir dir;
  const auto big = Pattern(3 * 1024 * 1024 + 5, 7);
  const auto small = Pattern(1000, 8);
  int big_fd = WriteAndOpen(dir / "big", big);
  int small_fd = WriteAndOpen(dir / "small", small);
  REQUIRE(big_fd >= 0);
  REQUIRE(small_fd >= 0);
  std::vector<core::FdRange> ranges = {{small_fd, {0, small.size()}, "small"},
                                       {big_fd, {0, big.size()}, "big"},
                                       {small_fd, {10, 20}, "small"}};
  for (unsigned threads : {1u, 2u}) {
    core::HashOptions opt;
    opt.threads = threads;
    opt.buffer_bytes = 64 * 1024;  // big >= 4 buffers and > half: pipelined on 2 threads
    auto r = core::HashFdRanges(ranges, opt);
    REQUIRE(r.ok());
    CHECK(r.value()[0] == Want(small, ranges[0].range));
    CHECK(r.value()[1] == Want(big, ranges[1].range));
    CHECK(r.value()[2] == Want(small, ranges[2].range));
  }
  ::close(big_fd);
  ::close(small_fd);
}

TEST_CASE("HashFdRanges: a read past the end names the range's file", "[core][hash]") {
  Dir dir;
  const auto a = Pattern(5000, 1), b = Pattern(100, 2);
  int fa = WriteAndOpen(dir / "a", a), fb = WriteAndOpen(dir / "b", b);
  REQUIRE(fa >= 0);
  REQUIRE(fb >= 0);
  for (unsigned threads : {1u, 2u}) {
    // Each alone and in a mix, including the dominant (pipelined) range.
    for (bool dominant : {false, true}) {
      CAPTURE(threads, dominant);
      core::HashOptions opt;
      opt.threads = threads;
      opt.buffer_bytes = 4096;
      const uint64_t claimed = dominant ? 64 * 1024 : 200;  // "b" is 100 bytes: it shrank
      std::vector<core::FdRange> ranges = {{fa, {0, a.size()}, "dir/a"}, {fb, {0, claimed}, "dir/b"}};
      auto r = core::HashFdRanges(ranges, opt);
      REQUIRE_FALSE(r.ok());
      CHECK(r.error().code == core::Code::kIoChanged);
      CHECK(r.error().message.rfind("dir/b: ", 0) == 0);
      CHECK(r.error().offset <= 100);
    }
  }
  // A bad descriptor is a read error, named too.
  std::vector<core::FdRange> bad = {{-1, {0, 10}, "gone"}};
  auto r = core::HashFdRanges(bad);
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code == core::Code::kIoRead);
  CHECK(r.error().message.rfind("gone: ", 0) == 0);
  // No ranges: no digests, no error.
  auto none = core::HashFdRanges({});
  REQUIRE(none.ok());
  CHECK(none.value().empty());
  ::close(fa);
  ::close(fb);
}
