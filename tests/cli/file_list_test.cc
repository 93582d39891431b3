// --files-from and --shard (cli/file_list.h): each refusal rule of a list
// with its line number, both limits at N and N+1, and shards that cover
// every path exactly once.
#include <catch2/catch.hpp>

#include <set>
#include <string>
#include <vector>

#include "file_list.h"

namespace mc = modelgate::cli;

namespace {

struct Parsed {
  bool ok;
  std::vector<std::string> paths;
  std::string why;
};

Parsed Parse(const std::string& text, mc::ListLimits limits = {}) {
  Parsed p;
  p.ok = mc::ParseFileList(text, limits, &p.paths, &p.why);
  return p;
}

}  // namespace

TEST_CASE("a list is paths or JSON lines with a path, the last line's LF optional", "[cli][list]") {
  Parsed p = Parse("a.safetensors\n{\"path\": \"dir/b.pt\", \"size\": 3}\n c d \nlast");
  REQUIRE(p.ok);
  CHECK(p.paths == std::vector<std::string>{"a.safetensors", "dir/b.pt", " c d ", "last"});
  CHECK(Parse("").ok);
  CHECK(Parse("").paths.empty());
  CHECK(Parse("{\"path\": \"\\u0061\"}\n").paths == std::vector<std::string>{"a"});
}

TEST_CASE("each refusal names its line", "[cli][list]") {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"a\n\nb\n", "line 2 is empty"},
      {"a\r\n", "line 1 holds a CR"},
      {std::string("a\0b\n", 4), "line 1 holds a NUL"},
      {"a\n{\"path\": 3}\n", "line 2 has no \"path\" string"},
      {"{\"path\": \"\"}\n", "line 1 has no \"path\" string"},
      {"{\"path\": \"a\"\n", "line 1 is not a JSON object"},
      {"{\"path\": \"a\", \"path\": \"b\"}\n", "line 1 names a member twice"},
      {"a\nb\na\n", "line 3 lists \"a\" again (first on line 1)"},
      {"a\n{\"path\": \"a\"}\n", "line 2 lists \"a\" again"},
  };
  for (const auto& [text, want] : cases) {
    CAPTURE(text);
    Parsed p = Parse(text);
    CHECK_FALSE(p.ok);
    CHECK(p.why.find(want) != std::string::npos);
  }
}

TEST_CASE("list limits: entries and line bytes at N and N+1", "[cli][list][limits]") {
  mc::ListLimits limits;
  limits.max_entries = 3;
  limits.max_line_bytes = 8;
  CHECK(Parse("a\nb\nc\n", limits).ok);
  Parsed over = Parse("a\nb\nc\nd\n", limits);
  CHECK_FALSE(over.ok);
  CHECK(over.why.find("kMaxListEntries") != std::string::npos);
  CHECK(Parse("12345678\n", limits).ok);
  Parsed longer = Parse("123456789\n", limits);
  CHECK_FALSE(longer.ok);
  CHECK(longer.why.find("kMaxListLineBytes") != std::string::npos);
  CHECK(mc::kMaxListEntries == 1'000'000);
  CHECK(mc::kMaxListLineBytes == 64 * 1024);
}

TEST_CASE("shard I of N: the shards of N cover every path once, the same on every run", "[cli][list]") {
  uint64_t i = 0, n = 0;
  CHECK(mc::ParseShard("0/1", &i, &n));
  CHECK(mc::ParseShard("65535/65536", &i, &n));
  CHECK((i == 65535 && n == 65536));
  for (const char* bad : {"1/1", "0/0", "0/65537", "-1/2", "1", "a/b", "0/2/3", "/2", "0/"}) {
    CAPTURE(bad);
    CHECK_FALSE(mc::ParseShard(bad, &i, &n));
  }
  std::vector<std::string> paths;
  for (int k = 0; k < 2000; ++k) paths.push_back("models/m" + std::to_string(k) + ".safetensors");
  for (uint64_t count : {1u, 2u, 7u, 64u}) {
    std::vector<int> hits(paths.size(), 0);
    std::vector<size_t> sizes(count, 0);
    for (uint64_t shard = 0; shard < count; ++shard) {
      for (size_t k = 0; k < paths.size(); ++k) {
        if (mc::InShard(paths[k], shard, count)) {
          ++hits[k];
          ++sizes[shard];
        }
      }
    }
    for (int h : hits) CHECK(h == 1);
    for (size_t s : sizes) CHECK(s > paths.size() / count / 2);  // roughly even
  }
  // The first 8 bytes of SHA-256(path), big-endian, mod N, as Python's
  // int.from_bytes(hashlib.sha256(p).digest()[:8], "big") % N computes it:
  // another machine, another build, another tool agree on the slice.
  CHECK(mc::InShard("models/m0.safetensors", 3, 7));
  CHECK(mc::InShard("models/m0.safetensors", 529, 1000));
  CHECK(mc::InShard("a", 4, 7));
  CHECK(mc::InShard("a", 250, 1000));
  CHECK_FALSE(mc::InShard("a", 3, 7));
}
