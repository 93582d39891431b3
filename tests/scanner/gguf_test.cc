// ParseGguf (scanner/src/gguf.h): every limit at N and N+1 on files built
// here field by field, claims of 2^60 items that must not allocate, a sparse
// 1 GiB file read by its header only, and (hidden [gguf-files] cases, run by
// the scanner_gguf_files test after make_gguf.py) each fixture's exact ids.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "gguf.h"

namespace core = modelgate::core;
namespace scanner = modelgate::scanner;
using scanner::internal::GgufInfo;
using scanner::internal::GgufLimits;
using scanner::internal::ParseGguf;

namespace {

using Bytes = std::vector<uint8_t>;

constexpr uint32_t kU8 = 0, kU32 = 4, kString = 8, kArray = 9;
constexpr uint32_t kF32 = 0, kQ4_0 = 2;

// GgufBytes writes a GGUF file as the spec lays it out: header, KVs, tensor
// infos, zero padding to the alignment, each tensor's bytes (0x11) padded.
class GgufBytes {
 public:
  explicit GgufBytes(uint32_t version = 3, bool big_endian = false)
      : version_(version), be_(big_endian) {}

  GgufBytes& KvU32(const std::string& key, uint32_t v) {
    Bytes b = Str(key);
    Put(&b, kU32, 4);
    Put(&b, v, 4);
    kvs_.push_back(b);
    return *this;
  }
  GgufBytes& KvStr(const std::string& key, const std::string& v) {
    Bytes b = Str(key);
    Put(&b, kString, 4);
    Append(&b, Str(v));
    kvs_.push_back(b);
    return *this;
  }
  GgufBytes& KvStrArray(const std::string& key, const std::vector<std::string>& items) {
    Bytes b = Str(key);
    Put(&b, kArray, 4);
    Put(&b, kString, 4);
    Put(&b, items.size(), Width());
    for (const auto& s : items) Append(&b, Str(s));
    kvs_.push_back(b);
    return *this;
  }
  GgufBytes& KvU8Array(const std::string& key, size_t n) {
    Bytes b = Str(key);
    Put(&b, kArray, 4);
    Put(&b, kU8, 4);
    Put(&b, n, Width());
    b.insert(b.end(), n, 7);
    kvs_.push_back(b);
    return *this;
  }
  // KvNested: an array nested `depth` deep, innermost one uint8 element.
  GgufBytes& KvNested(const std::string& key, uint32_t depth) {
    Bytes b = Str(key);
    Put(&b, kArray, 4);
    for (uint32_t d = 1; d < depth; ++d) {
      Put(&b, kArray, 4);
      Put(&b, 1, Width());
    }
    Put(&b, kU8, 4);
    Put(&b, 1, Width());
    b.push_back(1);
    kvs_.push_back(b);
    return *this;
  }
  GgufBytes& KvRaw(Bytes b) {
    kvs_.push_back(std::move(b));
    return *this;
  }
  GgufBytes& Tensor(const std::string& name, uint32_t type, std::vector<uint64_t> dims,
                    uint64_t bytes) {
    tensors_.push_back({name, type, std::move(dims), bytes});
    return *this;
  }
  GgufBytes& TensorCount(uint64_t n) {
    tensor_count_ = n;
    return *this;
  }
  // Header is everything before the data section (padded).
  Bytes Header() const {
    Bytes out = {'G', 'G', 'U', 'F'};
    Put(&out, version_, 4);
    Put(&out, tensor_count_ ? *tensor_count_ : tensors_.size(), Width());
    Put(&out, kvs_.size(), Width());
    for (const auto& kv : kvs_) Append(&out, kv);
    uint64_t offset = 0;
    for (const auto& t : tensors_) {
      Append(&out, Str(t.name));
      Put(&out, t.dims.size(), 4);
      for (uint64_t d : t.dims) Put(&out, d, Width());
      Put(&out, t.type, 4);
      Put(&out, offset, 8);
      offset = Pad(offset + t.bytes);
    }
    out.resize(Pad(out.size()), 0);
    return out;
  }
  Bytes Build() const {
    Bytes out = Header();
    for (const auto& t : tensors_) {
      out.insert(out.end(), t.bytes, 0x11);
      out.resize(Pad(out.size()), 0);
    }
    return out;
  }
  Bytes Str(const std::string& s) const {
    Bytes b;
    Put(&b, s.size(), Width());
    b.insert(b.end(), s.begin(), s.end());
    return b;
  }
  void Put(Bytes* b, uint64_t v, int width) const {
    for (int i = 0; i < width; ++i) {
      const int shift = 8 * (be_ ? width - 1 - i : i);
      b->push_back(static_cast<uint8_t>(v >> shift));
    }
  }
  int Width() const { return version_ == 1 ? 4 : 8; }

 private:
  struct T {
    std::string name;
    uint32_t type;
    std::vector<uint64_t> dims;
    uint64_t bytes;
  };
  static void Append(Bytes* b, const Bytes& more) { b->insert(b->end(), more.begin(), more.end()); }
  static uint64_t Pad(uint64_t n) { return (n + 31) / 32 * 32; }

  uint32_t version_;
  bool be_;
  std::vector<Bytes> kvs_;
  std::vector<T> tensors_;
  std::optional<uint64_t> tensor_count_;
};

struct Parsed {
  std::optional<GgufInfo> info;
  std::vector<scanner::Finding> findings;
  std::set<std::string> Ids() const {
    std::set<std::string> ids;
    for (const auto& f : findings) ids.insert(f.id);
    return ids;
  }
  bool Has(const std::string& id) const { return Ids().count(id) > 0; }
};

Parsed Parse(std::span<const uint8_t> bytes, const GgufLimits& limits = {}) {
  Parsed p;
  p.info = ParseGguf(bytes, limits, &p.findings);
  return p;
}

// The invariants fuzz_gguf asserts, checked on every parse here too.
void CheckInvariants(const Parsed& p, uint64_t size) {
  for (const auto& f : p.findings) {
    CHECK(f.id.rfind("MG-GGUF-", 0) == 0);
    CHECK((f.offset == core::kNoOffset || f.offset <= size));
  }
  if (!p.info) {
    bool high = false;
    for (const auto& f : p.findings) high |= f.severity <= core::Severity::kHigh;
    CHECK(high);
    return;
  }
  const GgufInfo& g = *p.info;
  CHECK(g.data_start <= size);
  CHECK(g.data_bytes == size - g.data_start);
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  for (const auto& t : g.tensors) {
    CHECK(g.data_start + t.offset + t.bytes <= size);
    if (t.bytes > 0) ranges.emplace_back(g.data_start + t.offset, g.data_start + t.offset + t.bytes);
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i) CHECK(ranges[i].first >= ranges[i - 1].second);
  for (const auto& s : g.strings) CHECK(s.offset < size);
}

GgufBytes Small() {
  return std::move(GgufBytes()
                       .KvStr("general.architecture", "llama")
                       .KvU32("general.alignment", 32)
                       .KvStr("tokenizer.chat_template", "{{ messages }}")
                       .Tensor("a", kF32, {4, 2}, 32)
                       .Tensor("b", kQ4_0, {64}, 36)
                       .Tensor("c", kF32, {3}, 12));
}

std::string FixtureDir() { return MG_GGUF_FIXTURE_DIR; }

Bytes ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE(in.good());
  return Bytes(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

}  // namespace

TEST_CASE("gguf: a small v3 file parses with its tensors, strings and layout", "[scanner][gguf]") {
  const Bytes file = Small().Build();
  auto p = Parse(file);
  CheckInvariants(p, file.size());
  REQUIRE(p.info);
  CHECK(p.findings.empty());
  const GgufInfo& g = *p.info;
  CHECK(g.version == 3);
  CHECK_FALSE(g.big_endian);
  CHECK(g.alignment == 32);
  CHECK(g.kv_count == 3);
  CHECK(g.data_start == Small().Header().size());
  REQUIRE(g.tensors.size() == 3);
  CHECK(g.tensors[1].name == "b");
  CHECK(g.tensors[1].type == kQ4_0);
  CHECK(g.tensors[1].dims == std::vector<uint64_t>{64});
  CHECK(g.tensors[1].offset == 32);
  CHECK(g.tensors[1].bytes == 36);
  CHECK(g.tensors[2].offset == 96);
  REQUIRE(g.strings.size() == 2);
  CHECK(g.strings[1].key == "tokenizer.chat_template");
  CHECK(g.strings[1].value == "{{ messages }}");
  CHECK(file[g.strings[1].offset] == 14);  // the length field
}

TEST_CASE("gguf: v1 and big-endian files read with their own widths and order", "[scanner][gguf]") {
  for (auto [version, be] : {std::pair{1u, false}, std::pair{2u, true}, std::pair{3u, true}}) {
    CAPTURE(version, be);
    GgufBytes b(version, be);
    b.KvStrArray("tokenizer.ggml.tokens", {"<s>", "h\xc3\xa9llo"}).Tensor("w", kF32, {2, 3}, 24);
    const Bytes file = b.Build();
    auto p = Parse(file);
    CheckInvariants(p, file.size());
    REQUIRE(p.info);
    CHECK(p.findings.empty());
    CHECK(p.info->version == version);
    CHECK(p.info->big_endian == be);
    REQUIRE(p.info->tensors.size() == 1);
    CHECK(p.info->tensors[0].dims == std::vector<uint64_t>{2, 3});
    CHECK(p.info->tensors[0].bytes == 24);
    REQUIRE(p.info->strings.size() == 2);
    CHECK(p.info->strings[1].key == "tokenizer.ggml.tokens[1]");
    CHECK(p.info->strings[1].value == "h\xc3\xa9llo");
  }
}

TEST_CASE("gguf limits: max_tensors and max_kv at N pass, past N are MG-GGUF-LIMIT",
          "[scanner][gguf][limits]") {
  const Bytes file = Small().Build();
  GgufLimits l;
  l.max_tensors = 3;
  l.max_kv = 3;
  CHECK(Parse(file, l).info);
  l.max_tensors = 2;
  auto p = Parse(file, l);
  CHECK_FALSE(p.info);
  CHECK(p.Ids() == std::set<std::string>{"MG-GGUF-LIMIT"});
  CHECK(p.findings[0].offset == 8);  // the tensor count
  l.max_tensors = 3;
  l.max_kv = 2;
  p = Parse(file, l);
  CHECK_FALSE(p.info);
  CHECK(p.Ids() == std::set<std::string>{"MG-GGUF-LIMIT"});
  CHECK(p.findings[0].offset == 16);  // the KV count
}

TEST_CASE("gguf limits: max_string_bytes, max_array_elements, max_dims, max_array_depth",
          "[scanner][gguf][limits]") {
  GgufLimits l;
  // Every string here (keys, value, tensor name) is at most 10 bytes.
  const Bytes s = GgufBytes().KvStr("k", "0123456789").Tensor("t", kF32, {1}, 4).Build();
  l.max_string_bytes = 10;
  CHECK(Parse(s, l).info);
  l.max_string_bytes = 9;
  CHECK(Parse(s, l).Ids() == std::set<std::string>{"MG-GGUF-LIMIT"});

  l = {};
  const Bytes a = GgufBytes().KvU8Array("k", 5).Build();
  l.max_array_elements = 5;
  CHECK(Parse(a, l).info);
  l.max_array_elements = 4;
  CHECK(Parse(a, l).Ids() == std::set<std::string>{"MG-GGUF-LIMIT"});

  l = {};
  const Bytes d = GgufBytes().Tensor("t", kF32, {1, 2, 3}, 24).Build();
  l.max_dims = 3;
  CHECK(Parse(d, l).info);
  l.max_dims = 2;
  auto pd = Parse(d, l);
  CHECK_FALSE(pd.info);
  CHECK(pd.Ids() == std::set<std::string>{"MG-GGUF-DIMS"});

  l = {};
  const Bytes n = GgufBytes().KvNested("k", 3).Build();
  l.max_array_depth = 3;
  auto pn = Parse(n, l);
  CHECK(pn.info);
  CHECK(pn.Ids() == std::set<std::string>{"MG-GGUF-NESTED-ARRAY"});  // medium
  l.max_array_depth = 2;
  CHECK(Parse(n, l).Ids() == std::set<std::string>{"MG-GGUF-NESTED-ARRAY", "MG-GGUF-LIMIT"});
  CHECK_FALSE(Parse(n, l).info);
}

TEST_CASE("gguf limits: max_header_bytes counts up to the padded data start",
          "[scanner][gguf][limits]") {
  const Bytes file = Small().Build();
  const uint64_t header = Small().Header().size();
  GgufLimits l;
  l.max_header_bytes = header;
  auto ok = Parse(file, l);
  REQUIRE(ok.info);
  CHECK(ok.info->data_start == header);
  l.max_header_bytes = header - 1;
  auto p = Parse(file, l);
  CHECK_FALSE(p.info);
  CHECK(p.Ids() == std::set<std::string>{"MG-GGUF-LIMIT"});
  // A limit inside the KVs: the header is cut there, not read past it.
  l.max_header_bytes = 40;
  p = Parse(file, l);
  CHECK(p.Ids() == std::set<std::string>{"MG-GGUF-LIMIT"});
}

TEST_CASE("gguf limits: kept strings at N are all kept, past N are checked and counted",
          "[scanner][gguf][limits]") {
  const Bytes file = GgufBytes().KvStrArray("k", {"a", "bb", "ccc", "dddd", "eeeee"}).Build();
  GgufLimits l;
  l.max_kept_strings = 5;
  auto p = Parse(file, l);
  REQUIRE(p.info);
  CHECK(p.info->strings.size() == 5);
  CHECK(p.findings.empty());
  l.max_kept_strings = 4;
  p = Parse(file, l);
  REQUIRE(p.info);
  CHECK(p.info->strings.size() == 4);
  CHECK(p.Ids() == std::set<std::string>{"MG-GGUF-STRINGS-CAPPED"});

  // Bytes: each kept string costs its key ("k[i]", 4 bytes) and its value.
  l = {};
  l.max_kept_string_bytes = 5 * 4 + 15;
  p = Parse(file, l);
  CHECK(p.info->strings.size() == 5);
  CHECK(p.findings.empty());
  l.max_kept_string_bytes = 5 * 4 + 14;
  p = Parse(file, l);
  CHECK(p.info->strings.size() == 4);
  CHECK(p.Ids() == std::set<std::string>{"MG-GGUF-STRINGS-CAPPED"});
}

TEST_CASE("gguf: claims of 2^60 tensors, bytes or elements are truncation, not allocation",
          "[scanner][gguf][limits]") {
  GgufLimits l;
  l.max_tensors = UINT64_MAX;
  l.max_kv = UINT64_MAX;
  l.max_string_bytes = UINT64_MAX;
  l.max_array_elements = UINT64_MAX;
  const Bytes tensors = GgufBytes().TensorCount(uint64_t{1} << 60).Build();
  auto p = Parse(tensors, l);
  CHECK_FALSE(p.info);
  CHECK(p.Ids() == std::set<std::string>{"MG-GGUF-TRUNCATED"});

  GgufBytes b;
  Bytes kv = b.Str("k");
  b.Put(&kv, kString, 4);
  b.Put(&kv, uint64_t{1} << 60, 8);  // a string of 2^60 bytes
  p = Parse(GgufBytes().KvRaw(kv).Build(), l);
  CHECK(p.Ids() == std::set<std::string>{"MG-GGUF-TRUNCATED"});

  Bytes arr = b.Str("k");
  b.Put(&arr, kArray, 4);
  b.Put(&arr, kString, 4);
  b.Put(&arr, uint64_t{1} << 60, 8);  // 2^60 strings
  p = Parse(GgufBytes().KvRaw(arr).Build(), l);
  CHECK(p.Ids() == std::set<std::string>{"MG-GGUF-TRUNCATED"});
}

TEST_CASE("gguf: a sparse 1 GiB file is judged from its header", "[scanner][gguf]") {
  const uint64_t data = uint64_t{1} << 30;
  GgufBytes b;
  b.KvStr("general.architecture", "llama").Tensor("w", kF32, {uint64_t{1} << 28}, data);
  const Bytes header = b.Header();
  char path[] = "/tmp/mg-gguf-sparse-XXXXXX";
  const int fd = ::mkstemp(path);
  REQUIRE(fd >= 0);
  ::unlink(path);
  REQUIRE(::write(fd, header.data(), header.size()) == static_cast<ssize_t>(header.size()));
  REQUIRE(::ftruncate(fd, static_cast<off_t>(header.size() + data)) == 0);
  const size_t size = header.size() + data;
  void* map = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  REQUIRE(map != MAP_FAILED);
  auto p = Parse({static_cast<const uint8_t*>(map), size});
  CheckInvariants(p, size);
  ::munmap(map, size);
  ::close(fd);
  REQUIRE(p.info);
  CHECK(p.findings.empty());
  CHECK(p.info->data_bytes == data);
  REQUIRE(p.info->tensors.size() == 1);
  CHECK(p.info->tensors[0].bytes == data);
}

TEST_CASE("gguf: findings of one id are capped with a count of the rest", "[scanner][gguf]") {
  GgufBytes b;
  for (int i = 0; i < 150; ++i) b.KvStr("k" + std::to_string(i), "\xff");
  auto p = Parse(b.Build());
  REQUIRE(p.info);
  CHECK(p.findings.size() == 101);
  CHECK(p.findings.back().message.find("50 more MG-GGUF-UTF8") == 0);

  // The summary is as severe as the worst finding it stands for.
  GgufBytes keys;
  for (int i = 0; i < 100; ++i) keys.KvU32("\xc3\xa9" + std::to_string(i), 1);  // medium
  keys.KvU32("", 1);                                                          // high
  auto k = Parse(keys.Build());
  REQUIRE(k.findings.size() == 101);
  CHECK(k.findings[99].severity == core::Severity::kMedium);
  CHECK(k.findings.back().severity == core::Severity::kHigh);
  CHECK(k.findings.back().message.find("1 more MG-GGUF-BAD-KEY") == 0);
}

TEST_CASE("gguf: ggml type names", "[scanner][gguf]") {
  CHECK(scanner::internal::GgmlTypeName(0) == "F32");
  CHECK(scanner::internal::GgmlTypeName(12) == "Q4_K");
  CHECK(scanner::internal::GgmlTypeName(4).empty());   // Q4_2, removed
  CHECK(scanner::internal::GgmlTypeName(31).empty());  // Q4_0_4_4, removed from files
  CHECK(scanner::internal::GgmlTypeName(39) == "MXFP4");
  CHECK(scanner::internal::GgmlTypeName(40).empty());
}

// The files make_gguf.py writes (run by ctest's scanner_gguf_files after
// scanner_gguf_make): each gives exactly its manifest's ids.
TEST_CASE("gguf files: every fixture gives exactly its manifest's ids", "[.gguf-files]") {
  std::ifstream manifest(FixtureDir() + "/manifest.tsv");
  REQUIRE(manifest.good());
  std::string line;
  int files = 0, hostile = 0;
  while (std::getline(manifest, line)) {
    std::istringstream fields(line);
    std::string name, expect, ids;
    REQUIRE(std::getline(fields, name, '\t'));
    REQUIRE(std::getline(fields, expect, '\t'));
    REQUIRE(std::getline(fields, ids, '\t'));
    std::set<std::string> want;
    std::istringstream idlist(ids);
    for (std::string id; std::getline(idlist, id, ',');) {
      if (id != "-") want.insert(id);
    }
    const Bytes file = ReadFile(FixtureDir() + "/" + name);
    auto p = Parse(file);
    std::string got;
    for (const auto& f : p.findings) got += f.id + ": " + f.message + "\n";
    INFO(name + "\n" + got);
    CheckInvariants(p, file.size());
    CHECK(p.info.has_value() == (expect == "ok"));
    CHECK(p.Ids() == want);
    ++files;
    hostile += !want.empty();
  }
  CHECK(files > 50);
  CHECK(hostile > 35);
}

TEST_CASE("gguf files: the benign models of every version and byte order agree",
          "[.gguf-files]") {
  const Bytes le3 = ReadFile(FixtureDir() + "/benign-v3-le.gguf");
  auto ref = Parse(le3);
  REQUIRE(ref.info);
  REQUIRE(ref.info->tensors.size() == 5);
  CHECK(ref.info->tensors[2].name == "blk.0.ffn_down.weight");
  CHECK(ref.info->tensors[2].type == 12);  // Q4_K
  CHECK(ref.info->tensors[2].bytes == 144);
  CHECK(ref.info->tensors[4].dims == std::vector<uint64_t>{32, 3, 1, 2});
  bool template_seen = false;
  for (const auto& s : ref.info->strings) {
    template_seen |= s.key == "tokenizer.chat_template" &&
                     s.value.find("add_generation_prompt") != std::string::npos;
  }
  CHECK(template_seen);
  for (const char* name : {"benign-v1-le.gguf", "benign-v2-le.gguf", "benign-v3-be.gguf",
                           "benign-v2-be.gguf", "benign-align64.gguf"}) {
    CAPTURE(name);
    auto p = Parse(ReadFile(FixtureDir() + "/" + name));
    REQUIRE(p.info);
    CHECK(p.findings.empty());
    REQUIRE(p.info->tensors.size() == ref.info->tensors.size());
    for (size_t i = 0; i < p.info->tensors.size(); ++i) {
      CHECK(p.info->tensors[i].name == ref.info->tensors[i].name);
      CHECK(p.info->tensors[i].type == ref.info->tensors[i].type);
      CHECK(p.info->tensors[i].dims == ref.info->tensors[i].dims);
      CHECK(p.info->tensors[i].bytes == ref.info->tensors[i].bytes);
    }
    REQUIRE(p.info->strings.size() == ref.info->strings.size());
    for (size_t i = 0; i < p.info->strings.size(); ++i) {
      CHECK(p.info->strings[i].key == ref.info->strings[i].key);
      CHECK(p.info->strings[i].value == ref.info->strings[i].value);
    }
  }
  CHECK(Parse(ReadFile(FixtureDir() + "/benign-align64.gguf")).info->alignment == 64);
  CHECK(Parse(ReadFile(FixtureDir() + "/benign-v3-be.gguf")).info->big_endian);
}
