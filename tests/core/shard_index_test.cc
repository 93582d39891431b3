// Shard index files (modelgate/shard_index.h): what transformers writes
// parses; every strictness rule and limit (N and N+1) is rejected with its
// code; the canonical weight_map bytes; each MG-SET rule of an index against
// its shards' headers.
#include <catch2/catch.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "modelgate/shard_index.h"

namespace core = modelgate::core;
using core::Code;

namespace {

std::vector<uint8_t> B(std::string_view s) { return {s.begin(), s.end()}; }

core::Result<core::ShardIndex> Parse(std::string_view text, const core::Limits& limits = {}) {
  return core::ParseShardIndex(B(text), limits);
}

void CheckRejected(std::string_view text, Code code, const core::Limits& limits = {}) {
  auto r = Parse(text, limits);
  INFO(text);
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code == code);
  CHECK(r.error().message.rfind("index: ", 0) == 0);
}

// transformers' save_pretrained: json.dumps(index, indent=2, sort_keys=True)
// + "\n", metadata with total_parameters (4.47+) and total_size.
constexpr std::string_view kTransformers = R"({
  "metadata": {
    "total_parameters": 12,
    "total_size": 48
  },
  "weight_map": {
    "empty": "model-00002-of-00002.safetensors",
    "layer.0.bias": "model-00001-of-00002.safetensors",
    "layer.0.weight": "model-00001-of-00002.safetensors",
    "layer.1.weight": "model-00002-of-00002.safetensors"
  }
}
)";

std::string WithShard(std::string_view shard_json) {
  return std::string(R"({"metadata":{},"weight_map":{"w":)") + std::string(shard_json) + "}}";
}

core::TensorInfo T(std::string name, uint64_t begin, uint64_t end) {
  core::TensorInfo t;
  t.name = std::move(name);
  t.begin = begin;
  t.end = end;
  t.shape = {end - begin};
  return t;
}

core::Safetensors Shard(std::vector<core::TensorInfo> tensors) {
  core::Safetensors st;
  st.tensors = std::move(tensors);
  return st;
}

std::vector<Code> Codes(const std::vector<core::Error>& errors) {
  std::vector<Code> out;
  for (const auto& e : errors) out.push_back(e.code);
  return out;
}

}  // namespace

TEST_CASE("an index as transformers writes it parses, sorted", "[core][shard_index]") {
  auto r = Parse(kTransformers);
  REQUIRE(r.ok());
  const core::ShardIndex& index = r.value();
  CHECK(index.total_size == std::optional<uint64_t>(48));
  REQUIRE(index.weight_map.size() == 4);
  CHECK(index.weight_map[0] == std::pair<std::string, std::string>("empty", "model-00002-of-00002.safetensors"));
  CHECK(index.weight_map[3].first == "layer.1.weight");
  CHECK(index.shards == std::vector<std::string>{"model-00001-of-00002.safetensors",
                                                 "model-00002-of-00002.safetensors"});
  CHECK(core::ShardPosition(index, "model-00002-of-00002.safetensors") == std::optional<size_t>(1));
  CHECK_FALSE(core::ShardPosition(index, "model-00003-of-00002.safetensors").has_value());
}

TEST_CASE("metadata and total_size are optional, other metadata is allowed", "[core][shard_index]") {
  auto no_meta = Parse(R"({"weight_map":{"w":"a.safetensors"}})");
  REQUIRE(no_meta.ok());
  CHECK_FALSE(no_meta.value().total_size.has_value());
  auto other = Parse(R"({"metadata":{"format":"mmfp4","nested":{"a":[1,{"b":null}],"c":true},"x":-1.5},)"
                     R"("weight_map":{"w":"sub/a.safetensors"}})");
  REQUIRE(other.ok());
  CHECK(other.value().shards == std::vector<std::string>{"sub/a.safetensors"});
  // Python writes a size computed in floating point with ".0".
  auto f = Parse(R"({"metadata":{"total_size":48.0},"weight_map":{"w":"a"}})");
  REQUIRE(f.ok());
  CHECK(f.value().total_size == std::optional<uint64_t>(48));
}

TEST_CASE("total_size must be a byte count", "[core][shard_index]") {
  CheckRejected(R"({"metadata":{"total_size":48.5},"weight_map":{"w":"a"}})", Code::kSetIndex);
  CheckRejected(R"({"metadata":{"total_size":-1},"weight_map":{"w":"a"}})", Code::kSetIndex);
  CheckRejected(R"({"metadata":{"total_size":"48"},"weight_map":{"w":"a"}})", Code::kSetIndex);
  CheckRejected(R"({"metadata":{"total_size":[48]},"weight_map":{"w":"a"}})", Code::kSetIndex);
  CheckRejected(R"({"metadata":{"total_size":1e300},"weight_map":{"w":"a"}})", Code::kSetIndex);
}

TEST_CASE("duplicate keys are rejected at every level, after unescaping", "[core][shard_index]") {
  CheckRejected(R"({"weight_map":{"w":"a","w":"b"}})", Code::kSetIndex);
  CheckRejected(R"({"weight_map":{"w":"a","\u0077":"b"}})", Code::kSetIndex);
  CheckRejected(R"({"weight_map":{"w":"a"},"weight_map":{"v":"b"}})", Code::kSetIndex);
  CheckRejected(R"({"metadata":{},"metadata":{},"weight_map":{"w":"a"}})", Code::kSetIndex);
  CheckRejected(R"({"metadata":{"total_size":1,"total_size":2},"weight_map":{"w":"a"}})", Code::kSetIndex);
  CheckRejected(R"({"metadata":{"n":{"k":1,"k":2}},"weight_map":{"w":"a"}})", Code::kSetIndex);
  CheckRejected(R"({"metadata":{"n":[{"k":1,"k":2}]},"weight_map":{"w":"a"}})", Code::kSetIndex);
  // The same key in two different objects is not a duplicate.
  CHECK(Parse(R"({"metadata":{"a":{"k":1},"b":{"k":1}},"weight_map":{"k":"a"}})").ok());
}

TEST_CASE("the index's shape is fixed", "[core][shard_index]") {
  CheckRejected(R"({"metadata":{},"weight_map":{"w":"a"},"extra":1})", Code::kSetIndex);
  CheckRejected(R"({"metadata":{}})", Code::kSetIndex);
  CheckRejected(R"({"weight_map":{}})", Code::kSetIndex);
  CheckRejected(R"({"weight_map":["a"]})", Code::kSetIndex);
  CheckRejected(R"({"weight_map":"a"})", Code::kSetIndex);
  CheckRejected(R"({"weight_map":{"w":1}})", Code::kSetIndex);
  CheckRejected(R"({"weight_map":{"w":null}})", Code::kSetIndex);
  CheckRejected(R"({"weight_map":{"w":["a"]}})", Code::kSetIndex);
  CheckRejected(R"({"weight_map":{"w":{"a":1}}})", Code::kSetIndex);
  CheckRejected(R"({"metadata":[],"weight_map":{"w":"a"}})", Code::kSetIndex);
  CheckRejected(R"({"metadata":null,"weight_map":{"w":"a"}})", Code::kSetIndex);
  CheckRejected(R"([{"weight_map":{"w":"a"}}])", Code::kSetIndex);
  CheckRejected(R"("weight_map")", Code::kSetIndex);
  CheckRejected(R"({"weight_map":{"w":"a"}} x)", Code::kSetIndex);
  CheckRejected(R"({"weight_map":{"w":"a"})", Code::kSetIndex);
  CheckRejected(R"({"weight_map":{"w":"a"},"metadata":{"x":NaN}})", Code::kSetIndex);
  CheckRejected("\xEF\xBB\xBF{\"weight_map\":{\"w\":\"a\"}}", Code::kSetIndex);
  CheckRejected("{\"weight_map\":{\"w\":\"a\xFF\"}}", Code::kSetIndex);
  CheckRejected("", Code::kSetIndex);
}

TEST_CASE("tensor names follow the header's name rules", "[core][shard_index]") {
  CheckRejected(R"({"weight_map":{"":"a"}})", Code::kSetIndex);
  CheckRejected(R"({"weight_map":{"a\nb":"a"}})", Code::kSetIndex);
  CheckRejected(R"({"weight_map":{"a\u007fb":"a"}})", Code::kSetIndex);
}

TEST_CASE("shard names stay inside the index's directory", "[core][shard_index]") {
  for (const char* bad : {R"("/etc/passwd")", R"("../model.safetensors")", R"("a/../../b")",
                          R"("sub/..")", R"("./a.safetensors")", R"("a//b")", R"("a/")",
                          R"("a\\b")", R"("..\\a")", R"("a\u0000b")", R"("a\tb")", R"("")",
                          R"("..")", R"(".")"}) {
    CheckRejected(WithShard(bad), Code::kSetShardPath);
  }
  for (const char* good : {R"("a.safetensors")", R"("sub/dir/a.safetensors")", R"("..a")",
                           R"("a..")", R"(".hidden")", R"("a b")", R"("\u00e9.safetensors")"}) {
    INFO(good);
    CHECK(Parse(WithShard(good)).ok());
  }
}

TEST_CASE("max_tensors: N entries pass, N+1 are kSetLimit", "[core][shard_index][limits]") {
  core::Limits limits;
  limits.max_tensors = 3;
  CHECK(Parse(R"({"weight_map":{"a":"s","b":"s","c":"s"}})", limits).ok());
  CheckRejected(R"({"weight_map":{"a":"s","b":"s","c":"s","d":"s"}})", Code::kSetLimit, limits);
}

TEST_CASE("max_name_bytes bounds tensor and shard names", "[core][shard_index][limits]") {
  core::Limits limits;
  limits.max_name_bytes = 8;
  CHECK(Parse(R"({"weight_map":{"12345678":"s"}})", limits).ok());
  CheckRejected(R"({"weight_map":{"123456789":"s"}})", Code::kSetLimit, limits);
  CHECK(Parse(R"({"weight_map":{"w":"12345678"}})", limits).ok());
  CheckRejected(R"({"weight_map":{"w":"123456789"}})", Code::kSetLimit, limits);
}

TEST_CASE("max_json_depth bounds nesting in metadata", "[core][shard_index][limits]") {
  core::Limits limits;
  limits.max_json_depth = 4;
  // Depth 4: the index, metadata, and two more.
  CHECK(Parse(R"({"metadata":{"a":{"b":[]}},"weight_map":{"w":"s"}})", limits).ok());
  CheckRejected(R"({"metadata":{"a":{"b":[[]]}},"weight_map":{"w":"s"}})", Code::kSetLimit, limits);
}

TEST_CASE("max_metadata_entries bounds metadata keys at every level", "[core][shard_index][limits]") {
  core::Limits limits;
  limits.max_metadata_entries = 3;
  CHECK(Parse(R"({"metadata":{"a":1,"b":{"c":2}},"weight_map":{"w":"s"}})", limits).ok());
  CheckRejected(R"({"metadata":{"a":1,"b":{"c":2,"d":3}},"weight_map":{"w":"s"}})", Code::kSetLimit,
                limits);
}

TEST_CASE("kMaxIndexBytes: N bytes are read, N+1 are kSetLimit unread", "[core][shard_index][limits]") {
  std::string text = R"({"weight_map":{"w":"s"}})";
  std::vector<uint8_t> at = B(text);
  at.resize(core::kMaxIndexBytes, ' ');  // trailing whitespace is valid JSON
  CHECK(core::ParseShardIndex(at, {}).ok());
  at.push_back(' ');
  auto r = core::ParseShardIndex(at, {});
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code == Code::kSetLimit);
}

TEST_CASE("the canonical weight_map is u64(n) || (B(name) || B(shard))* by name", "[core][shard_index]") {
  auto r = Parse(R"({"weight_map":{"b":"s2","a":"s1"}})");
  REQUIRE(r.ok());
  const std::vector<uint8_t> want = {
      0, 0, 0, 0, 0, 0, 0, 2,                        // n
      0, 0, 0, 0, 0, 0, 0, 1, 'a',                   // B("a")
      0, 0, 0, 0, 0, 0, 0, 2, 's', '1',              // B("s1")
      0, 0, 0, 0, 0, 0, 0, 1, 'b',                   // B("b")
      0, 0, 0, 0, 0, 0, 0, 2, 's', '2'};             // B("s2")
  CHECK(core::CanonicalWeightMap(r.value()) == want);
}

TEST_CASE("IsShardIndexName", "[core][shard_index]") {
  CHECK(core::IsShardIndexName("model.safetensors.index.json"));
  CHECK(core::IsShardIndexName("diffusion_pytorch_model.safetensors.index.json"));
  CHECK(core::IsShardIndexName("model.safetensors.index.fp16.json"));
  CHECK_FALSE(core::IsShardIndexName("model.safetensors"));
  CHECK_FALSE(core::IsShardIndexName("pytorch_model.bin.index.json"));
  CHECK_FALSE(core::IsShardIndexName(".safetensors.index.json"));
  CHECK_FALSE(core::IsShardIndexName("model.safetensors.index..json"));
  CHECK_FALSE(core::IsShardIndexName("model.safetensors.index.json.bak"));
}

// ---- an index against its shards ----------------------------------------------

namespace {

struct Set {
  core::ShardIndex index;
  core::Safetensors one = Shard({T("layer.0.bias", 0, 8), T("layer.0.weight", 8, 24)});
  core::Safetensors two = Shard({T("empty", 0, 0), T("layer.1.weight", 0, 24)});
  Set() {
    auto r = Parse(kTransformers);
    REQUIRE(r.ok());
    index = r.value();
  }
  core::ShardHeaders Headers() const {
    return {{"model-00001-of-00002.safetensors", &one}, {"model-00002-of-00002.safetensors", &two}};
  }
};

}  // namespace

TEST_CASE("a consistent set has no errors", "[core][shard_index][set]") {
  Set s;
  CHECK(core::ShardSetErrors(s.index, s.Headers()).empty());
  // Shards the index does not list are not judged here.
  core::Safetensors other = Shard({T("x", 0, 4)});
  auto h = s.Headers();
  h.emplace("model.safetensors", &other);
  CHECK(core::ShardSetErrors(s.index, h).empty());
}

TEST_CASE("MG-SET-SHARD-MISSING: absent or unparsed", "[core][shard_index][set]") {
  Set s;
  auto h = s.Headers();
  h.erase("model-00002-of-00002.safetensors");
  auto e = core::ShardSetErrors(s.index, h);
  // Its tensors are not listed one by one; total_size is not judged.
  REQUIRE(Codes(e) == std::vector<Code>{Code::kSetShardMissing});
  CHECK(e[0].message.find("\"model-00002-of-00002.safetensors\"") != std::string::npos);
  h["model-00002-of-00002.safetensors"] = nullptr;
  CHECK(Codes(core::ShardSetErrors(s.index, h)) == std::vector<Code>{Code::kSetShardMissing});
}

TEST_CASE("MG-SET-TENSOR-MISSING: a weight_map tensor in no shard", "[core][shard_index][set]") {
  Set s;
  s.one = Shard({T("layer.0.weight", 0, 16)});
  auto e = core::ShardSetErrors(s.index, s.Headers());
  REQUIRE(Codes(e) == std::vector<Code>{Code::kSetTensorMissing, Code::kSetTotalSize});
  CHECK(e[0].message.find("\"layer.0.bias\"") != std::string::npos);
}

TEST_CASE("MG-SET-TENSOR-EXTRA: a shard tensor the weight_map lacks", "[core][shard_index][set]") {
  Set s;
  s.two.tensors.push_back(T("lm_head.weight", 24, 24));
  auto e = core::ShardSetErrors(s.index, s.Headers());
  REQUIRE(Codes(e) == std::vector<Code>{Code::kSetTensorExtra});
  CHECK(e[0].message.find("\"lm_head.weight\"") != std::string::npos);
  CHECK(e[0].message.find("\"model-00002-of-00002.safetensors\"") != std::string::npos);
}

TEST_CASE("MG-SET-TENSOR-DUPLICATE: one name in two shards", "[core][shard_index][set]") {
  Set s;
  s.two.tensors.push_back(T("layer.0.bias", 24, 32));
  auto e = core::ShardSetErrors(s.index, s.Headers());
  REQUIRE(Codes(e) == std::vector<Code>{Code::kSetTensorDuplicate, Code::kSetTotalSize});
  CHECK(e[0].message.find("model-00001-of-00002.safetensors\" and \"model-00002-of-00002") !=
        std::string::npos);
}

TEST_CASE("MG-SET-TENSOR-MISPLACED: in another shard than named", "[core][shard_index][set]") {
  Set s;
  s.one = Shard({T("layer.0.weight", 0, 16)});
  s.two.tensors.push_back(T("layer.0.bias", 24, 32));
  auto e = core::ShardSetErrors(s.index, s.Headers());
  REQUIRE(Codes(e) == std::vector<Code>{Code::kSetTensorMisplaced});
  CHECK(e[0].message.find("\"layer.0.bias\" is in \"model-00002-of-00002.safetensors\"") !=
        std::string::npos);
}

TEST_CASE("MG-SET-TOTAL-SIZE: metadata.total_size against the tensor bytes", "[core][shard_index][set]") {
  Set s;
  s.index.total_size = 47;
  auto e = core::ShardSetErrors(s.index, s.Headers());
  REQUIRE(Codes(e) == std::vector<Code>{Code::kSetTotalSize});
  CHECK(e[0].message.find("47") != std::string::npos);
  CHECK(e[0].message.find("48 bytes") != std::string::npos);
  s.index.total_size.reset();
  CHECK(core::ShardSetErrors(s.index, s.Headers()).empty());
}

TEST_CASE("each rule names 100 tensors, then counts the rest", "[core][shard_index][set]") {
  Set s;
  for (int i = 0; i < 101; ++i) s.two.tensors.push_back(T("x" + std::to_string(1000 + i), 24, 24));
  auto e = core::ShardSetErrors(s.index, s.Headers());
  REQUIRE(e.size() == 101);
  CHECK(e[100].code == Code::kSetTensorExtra);
  CHECK(e[100].message == "1 more tensor breaks this rule (not listed)");
  s.two.tensors.pop_back();
  CHECK(core::ShardSetErrors(s.index, s.Headers()).size() == 100);
}
