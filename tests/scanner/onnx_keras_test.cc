// ONNX wire reader (scanner/src/onnx.h) and Keras config analysis
// (scanner/src/keras.h): every rule on files the real writers made
// (make_onnx_keras.py, run by the scanner_onnx_keras_make fixture into
// MG_ONNX_KERAS_FIXTURE_DIR), every limit at N and N+1, and crafted wire
// bytes for what no writer emits (overlong varints, lengths past the end).
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <linux/futex.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#define MG_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define MG_TEST_ASAN 1
#endif
#endif
#ifndef MG_TEST_ASAN
#define MG_TEST_ASAN 0
#endif

#include "keras.h"
#include "onnx.h"
#include "source.h"
#include "zip.h"

namespace core = modelgate::core;
namespace sc = modelgate::scanner;
namespace in = modelgate::scanner::internal;
using Bytes = std::vector<uint8_t>;

namespace {

Bytes Fixture(const std::string& name) {
  const std::string path = std::string(MG_ONNX_KERAS_FIXTURE_DIR) + "/" + name;
  std::ifstream f(path, std::ios::binary);
  INFO("fixture " << path << " (made by the scanner_onnx_keras_make test)");
  REQUIRE(f.good());
  return Bytes(std::istreambuf_iterator<char>(f), {});
}

size_t Count(const std::vector<sc::Finding>& fs, const std::string& id) {
  return static_cast<size_t>(std::count_if(fs.begin(), fs.end(), [&](const sc::Finding& f) { return f.id == id; }));
}
const sc::Finding* Find(const std::vector<sc::Finding>& fs, const std::string& id) {
  for (const auto& f : fs) {
    if (f.id == id) return &f;
  }
  return nullptr;
}
std::string Ids(const std::vector<sc::Finding>& fs) {
  std::string s;
  for (const auto& f : fs) s += f.id + " (" + f.message + ")\n";
  return s;
}

// A minimal protobuf writer for crafted inputs.
void Varint(Bytes* b, uint64_t v) {
  while (v >= 0x80) {
    b->push_back(static_cast<uint8_t>(v | 0x80));
    v >>= 7;
  }
  b->push_back(static_cast<uint8_t>(v));
}
Bytes& VarintField(Bytes* b, uint32_t field, uint64_t v) {
  Varint(b, uint64_t{field} << 3);
  Varint(b, v);
  return *b;
}
Bytes& LenField(Bytes* b, uint32_t field, const Bytes& payload) {
  Varint(b, (uint64_t{field} << 3) | 2);
  Varint(b, payload.size());
  b->insert(b->end(), payload.begin(), payload.end());
  return *b;
}
Bytes Str(std::string_view s) { return Bytes(s.begin(), s.end()); }

// Model{ir_version 8, graph{nodes...}}, nodes and initializers as given.
Bytes ModelWithGraph(const Bytes& graph) {
  Bytes m;
  VarintField(&m, 1, 8);
  LenField(&m, 7, graph);
  return m;
}
Bytes NodeOf(std::string_view op) {
  Bytes n;
  LenField(&n, 4, Str(op));
  return n;
}

std::optional<in::OnnxInfo> Analyze(const Bytes& b, std::vector<sc::Finding>* fs,
                                    const in::OnnxLimits& limits = {}) {
  return in::AnalyzeOnnx(b, limits, fs);
}

}  // namespace

// ---------------- ONNX: real files ----------------

TEST_CASE("onnx: a plain model from onnx.helper passes with its counts", "[onnx]") {
  std::vector<sc::Finding> fs;
  auto bytes = Fixture("benign.onnx");
  CHECK(in::LooksLikeOnnx(bytes));
  auto info = Analyze(bytes, &fs);
  REQUIRE(info);
  INFO(Ids(fs));
  CHECK(fs.empty());
  CHECK(info->ir_version >= 3);
  CHECK(info->nodes == 1);
  CHECK(info->initializers == 1);
  REQUIRE(info->opset_domains.size() == 1);
  CHECK(info->opset_domains[0].empty());
  CHECK(info->external_locations.empty());
}

TEST_CASE("onnx: standard domains (ai.onnx.ml) are not custom operators", "[onnx]") {
  std::vector<sc::Finding> fs;
  REQUIRE(Analyze(Fixture("standard_domains.onnx"), &fs));
  CHECK(fs.empty());
}

TEST_CASE("onnx: onnx.save's external data file is listed as info", "[onnx]") {
  std::vector<sc::Finding> fs;
  auto info = Analyze(Fixture("external/model.onnx"), &fs);
  REQUIRE(info);
  INFO(Ids(fs));
  REQUIRE(info->external_locations == std::vector<std::string>{"weights.bin"});
  REQUIRE(fs.size() == 1);
  CHECK(fs[0].id == "MG-ONNX-EXTERNAL-DATA");
  CHECK(fs[0].severity == core::Severity::kInfo);
  CHECK(fs[0].message.find("\"weights.bin\"") != std::string::npos);
}

TEST_CASE("onnx: external data locations that leave the directory are critical", "[onnx]") {
  for (const char* name : {"external_absolute.onnx", "external_dotdot.onnx",
                           "external_backslash.onnx", "external_drive.onnx",
                           "subgraph_external.onnx"}) {
    INFO(name);
    std::vector<sc::Finding> fs;
    auto bytes = Fixture(name);
    auto info = Analyze(bytes, &fs);
    REQUIRE(info);
    INFO(Ids(fs));
    const sc::Finding* f = Find(fs, "MG-ONNX-EXTERNAL-PATH");
    REQUIRE(f);
    CHECK(f->severity == core::Severity::kCritical);
    REQUIRE(f->offset < bytes.size());
    CHECK(Count(fs, "MG-ONNX-EXTERNAL-DATA") == 1);  // still listed
  }
}

TEST_CASE("onnx: OnnxExternalPathProblem", "[onnx]") {
  CHECK(in::OnnxExternalPathProblem("weights.bin") == nullptr);
  CHECK(in::OnnxExternalPathProblem("data/w.bin") == nullptr);
  CHECK(in::OnnxExternalPathProblem("a..b/..c") == nullptr);
  CHECK(in::OnnxExternalPathProblem("./w.bin") == nullptr);
  using sv = std::string_view;
  for (sv bad : {sv(""), sv("/abs"), sv(".."), sv("../x"), sv("a/../../x"), sv("a/.."), sv("a\\b"),
                 sv("C:x"), sv("file:///etc/passwd"), sv("w.bin\0/../x", 12)}) {
    INFO(std::string(bad));
    CHECK(in::OnnxExternalPathProblem(bad) != nullptr);
  }
}

TEST_CASE("onnx: an unknown external_data key is high", "[onnx]") {
  std::vector<sc::Finding> fs;
  REQUIRE(Analyze(Fixture("external_unknown_key.onnx"), &fs));
  const sc::Finding* f = Find(fs, "MG-ONNX-EXTERNAL-MALFORMED");
  REQUIRE(f);
  CHECK(f->severity == core::Severity::kHigh);
  CHECK(f->message.find("\"evil\"") != std::string::npos);
}

TEST_CASE("onnx: custom operator domains are high, in nodes, opsets and subgraphs", "[onnx]") {
  for (const char* name : {"custom_op.onnx", "custom_opset.onnx", "subgraph_custom.onnx"}) {
    INFO(name);
    std::vector<sc::Finding> fs;
    auto info = Analyze(Fixture(name), &fs);
    REQUIRE(info);
    INFO(Ids(fs));
    CHECK(Count(fs, "MG-ONNX-CUSTOM-OP") == 1);  // the node and its opset: one finding
    const sc::Finding* f = Find(fs, "MG-ONNX-CUSTOM-OP");
    REQUIRE(f);
    CHECK(f->severity == core::Severity::kHigh);
    CHECK(f->message.find("\"com.evil\"") != std::string::npos);
  }
}

TEST_CASE("onnx: a node calling a model-local function is not a custom operator", "[onnx]") {
  std::vector<sc::Finding> fs;
  auto info = Analyze(Fixture("local_function.onnx"), &fs);
  REQUIRE(info);
  INFO(Ids(fs));
  CHECK(fs.empty());
  CHECK(info->nodes == 2);  // the call and the function's body
}

TEST_CASE("onnx: raw_data of the wrong size and duplicate initializers are high", "[onnx]") {
  std::vector<sc::Finding> fs;
  REQUIRE(Analyze(Fixture("size_mismatch.onnx"), &fs));
  const sc::Finding* f = Find(fs, "MG-ONNX-TENSOR-SIZE");
  REQUIRE(f);
  CHECK(f->severity == core::Severity::kHigh);
  CHECK(f->message.find("12 bytes") != std::string::npos);
  CHECK(f->message.find("need 16") != std::string::npos);
  fs.clear();
  REQUIRE(Analyze(Fixture("duplicate_initializer.onnx"), &fs));
  CHECK(Count(fs, "MG-ONNX-DUPLICATE-INITIALIZER") == 1);
}

TEST_CASE("onnx: a truncated file cannot be parsed", "[onnx]") {
  std::vector<sc::Finding> fs;
  auto bytes = Fixture("truncated.onnx");
  CHECK_FALSE(Analyze(bytes, &fs));
  REQUIRE(fs.size() == 1);
  CHECK(fs[0].id == "MG-ONNX-MALFORMED");
  CHECK(fs[0].severity == core::Severity::kHigh);
  CHECK(fs[0].offset < bytes.size());
}

// ---------------- ONNX: crafted wire bytes ----------------

TEST_CASE("onnx: overlong varints and lengths past the end are malformed", "[onnx]") {
  std::vector<sc::Finding> fs;
  // ir_version with an 11-byte varint.
  Bytes over{0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01};
  CHECK_FALSE(Analyze(over, &fs));
  REQUIRE(fs.size() == 1);
  CHECK(fs[0].id == "MG-ONNX-MALFORMED");
  CHECK(fs[0].offset == 0);
  // 10 bytes whose last carries more than bit 63.
  fs.clear();
  Bytes wide{0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02};
  CHECK_FALSE(Analyze(wide, &fs));
  CHECK(Count(fs, "MG-ONNX-MALFORMED") == 1);
  // graph claiming 2^64-1 bytes: refused before anything is allocated.
  fs.clear();
  Bytes huge;
  VarintField(&huge, 1, 8);
  Varint(&huge, (7u << 3) | 2);
  Varint(&huge, UINT64_MAX);
  CHECK_FALSE(Analyze(huge, &fs));
  REQUIRE(Count(fs, "MG-ONNX-MALFORMED") == 1);
  CHECK(fs[0].offset == 2);
  CHECK(fs[0].message.find("claims 18446744073709551615 bytes") != std::string::npos);
  // A node one byte longer than what remains of its graph.
  fs.clear();
  Bytes graph;
  LenField(&graph, 1, NodeOf("Add"));
  graph[1] += 1;
  CHECK_FALSE(Analyze(ModelWithGraph(graph), &fs));
  CHECK(Count(fs, "MG-ONNX-MALFORMED") == 1);
}

TEST_CASE("onnx: wrong wire types for known fields and groups are malformed", "[onnx]") {
  std::vector<sc::Finding> fs;
  Bytes m;
  LenField(&m, 1, Str("8"));  // ir_version as bytes
  CHECK_FALSE(Analyze(m, &fs));
  CHECK(Count(fs, "MG-ONNX-MALFORMED") == 1);
  fs.clear();
  Bytes g;
  VarintField(&g, 1, 3);  // a node as a varint
  CHECK_FALSE(Analyze(ModelWithGraph(g), &fs));
  CHECK(Count(fs, "MG-ONNX-MALFORMED") == 1);
  fs.clear();
  Bytes group{0x08, 0x08, 0x1b /* field 3, start group */, 0x1c};
  CHECK_FALSE(Analyze(group, &fs));
  CHECK(Count(fs, "MG-ONNX-MALFORMED") == 1);
  fs.clear();
  Bytes packed;  // float_data packed with 5 bytes
  LenField(&packed, 4, Bytes(5, 0));
  Bytes init;
  LenField(&init, 5, packed);
  CHECK_FALSE(Analyze(ModelWithGraph(init), &fs));
  CHECK(Count(fs, "MG-ONNX-MALFORMED") == 1);
}

TEST_CASE("onnx: a ModelProto needs a graph and an ir_version, unknown fields are skipped",
          "[onnx]") {
  std::vector<sc::Finding> fs;
  CHECK_FALSE(Analyze(Bytes{}, &fs));
  CHECK(Count(fs, "MG-ONNX-MALFORMED") == 1);
  fs.clear();
  Bytes no_ir;
  LenField(&no_ir, 7, NodeOf("x"));
  CHECK_FALSE(Analyze(no_ir, &fs));
  CHECK(Count(fs, "MG-ONNX-MALFORMED") == 1);
  fs.clear();
  Bytes m = ModelWithGraph({});
  VarintField(&m, 1000, 5);
  LenField(&m, 1001, Str("future"));
  auto info = Analyze(m, &fs);
  REQUIRE(info);
  CHECK(fs.empty());
}

TEST_CASE("onnx: a negative dim and a dims overflow are tensor size findings", "[onnx]") {
  for (uint64_t dim : {uint64_t(-1), uint64_t(1) << 62}) {
    Bytes t;
    VarintField(&t, 1, dim);
    VarintField(&t, 1, dim == uint64_t(-1) ? 1 : 8);
    VarintField(&t, 2, 1);  // FLOAT
    LenField(&t, 9, Bytes(4, 0));
    Bytes g;
    LenField(&g, 5, t);
    std::vector<sc::Finding> fs;
    REQUIRE(Analyze(ModelWithGraph(g), &fs));
    CHECK(Count(fs, "MG-ONNX-TENSOR-SIZE") == 1);
  }
  {  // a zero dim makes no elements, even beside dims whose product overflows
    Bytes t;
    VarintField(&t, 1, uint64_t(1) << 62);
    VarintField(&t, 1, 8);
    VarintField(&t, 1, 0);
    VarintField(&t, 2, 1);
    LenField(&t, 9, Bytes{});
    Bytes g;
    LenField(&g, 5, t);
    std::vector<sc::Finding> fs;
    REQUIRE(Analyze(ModelWithGraph(g), &fs));
    CHECK(fs.empty());
  }
  // 4-bit types: 3 INT4 elements are 2 bytes.
  Bytes t;
  VarintField(&t, 1, 3);
  VarintField(&t, 2, 22);
  LenField(&t, 9, Bytes(2, 0));
  Bytes g;
  LenField(&g, 5, t);
  std::vector<sc::Finding> fs;
  REQUIRE(Analyze(ModelWithGraph(g), &fs));
  CHECK(fs.empty());
}

TEST_CASE("onnx: max_depth at N passes, N+1 is MG-ONNX-LIMIT", "[onnx][limits]") {
  // Model(1) > graph(2) > node(3) > attribute(4) > g(5) > node(6).
  Bytes inner_graph;
  LenField(&inner_graph, 1, NodeOf("Identity"));
  Bytes attr;
  LenField(&attr, 1, Str("then_branch"));
  LenField(&attr, 6, inner_graph);
  Bytes node = NodeOf("If");
  LenField(&node, 5, attr);
  Bytes graph;
  LenField(&graph, 1, node);
  const Bytes model = ModelWithGraph(graph);
  in::OnnxLimits limits;
  limits.max_depth = 6;
  std::vector<sc::Finding> fs;
  auto info = Analyze(model, &fs, limits);
  REQUIRE(info);
  CHECK(info->nodes == 2);
  CHECK(fs.empty());
  limits.max_depth = 5;
  CHECK_FALSE(Analyze(model, &fs, limits));
  REQUIRE(fs.size() == 1);
  CHECK(fs[0].id == "MG-ONNX-LIMIT");
  CHECK(fs[0].message.find("max_depth") != std::string::npos);
}

TEST_CASE("onnx: a graph nested past the default depth is refused, not a stack overflow",
          "[onnx][limits]") {
  // 10,000 nested If bodies: far past kOnnxMaxDepth.
  Bytes graph;
  LenField(&graph, 1, NodeOf("Identity"));
  for (int i = 0; i < 10'000; ++i) {
    Bytes attr;
    LenField(&attr, 6, graph);
    Bytes node;
    LenField(&node, 5, attr);
    graph.clear();
    LenField(&graph, 1, node);
  }
  std::vector<sc::Finding> fs;
  CHECK_FALSE(Analyze(ModelWithGraph(graph), &fs));
  CHECK(Count(fs, "MG-ONNX-LIMIT") == 1);
}

TEST_CASE("onnx: max_nodes, max_initializers, max_fields at N pass, N+1 fail", "[onnx][limits]") {
  Bytes graph;
  for (int i = 0; i < 3; ++i) LenField(&graph, 1, NodeOf("Relu"));
  for (int i = 0; i < 2; ++i) {
    Bytes t;
    LenField(&t, 8, Str("w" + std::to_string(i)));
    LenField(&graph, 5, t);
  }
  const Bytes model = ModelWithGraph(graph);
  // Fields: ir_version, graph, 3 x (node, op_type), 2 x (initializer, name) = 12.
  struct Case { const char* limit; in::OnnxLimits at, past; };
  in::OnnxLimits nodes_at, nodes_past, init_at, init_past, fields_at, fields_past;
  nodes_at.max_nodes = 3;
  nodes_past.max_nodes = 2;
  init_at.max_initializers = 2;
  init_past.max_initializers = 1;
  fields_at.max_fields = 12;
  fields_past.max_fields = 11;
  for (const Case& c : {Case{"max_nodes", nodes_at, nodes_past},
                        Case{"max_initializers", init_at, init_past},
                        Case{"max_fields", fields_at, fields_past}}) {
    INFO(c.limit);
    std::vector<sc::Finding> fs;
    auto info = Analyze(model, &fs, c.at);
    REQUIRE(info);
    CHECK(info->nodes == 3);
    CHECK(info->initializers == 2);
    CHECK(fs.empty());
    CHECK_FALSE(Analyze(model, &fs, c.past));
    REQUIRE(fs.size() == 1);
    CHECK(fs[0].id == "MG-ONNX-LIMIT");
    CHECK(fs[0].message.find(c.limit) != std::string::npos);
  }
}

TEST_CASE("onnx: LooksLikeOnnx", "[onnx]") {
  CHECK(in::LooksLikeOnnx(Fixture("custom_op.onnx")));
  const Bytes benign = Fixture("benign.onnx");
  CHECK(in::LooksLikeOnnx(std::span(benign).first(3)));  // cut inside a field
  CHECK_FALSE(in::LooksLikeOnnx(Bytes{}));
  CHECK_FALSE(in::LooksLikeOnnx(Str("PK\x03\x04")));
  CHECK_FALSE(in::LooksLikeOnnx(Str("{\"a\": 1}")));
  CHECK_FALSE(in::LooksLikeOnnx(Bytes{0x08, 0x00}));  // ir_version 0
  CHECK_FALSE(in::LooksLikeOnnx(Bytes{0x0a, 0x01, 0x41}));  // field 1 as bytes
  CHECK_FALSE(in::LooksLikeOnnx(Bytes{0x08, 0x07, 0x48, 0x01}));  // field 9 is not ModelProto's
}

// ---------------- Keras ----------------

namespace {

std::string KerasConfig(const std::string& name) {
  const Bytes zip = Fixture(name);
  sc::MemorySource src(zip);
  std::vector<sc::Finding> zf;
  auto archive = sc::ReadZip(src, sc::ZipLimits{}, &zf);
  REQUIRE(archive.ok());
  for (const auto& e : archive.value().entries) {
    if (e.name != "config.json") continue;
    auto bytes = sc::ExtractZipMember(src, e, 1 << 20, &zf);
    REQUIRE(bytes.ok());
    REQUIRE(bytes.value());
    return std::string(bytes.value()->begin(), bytes.value()->end());
  }
  FAIL("no config.json in " << name);
  return {};
}

std::vector<sc::Finding> Keras(const std::string& json) {
  std::vector<sc::Finding> fs;
  in::AnalyzeKerasConfig(json, 7, "config.json", &fs);
  return fs;
}

std::string H5Config(const std::string& name, std::vector<sc::Finding>* fs,
                     in::H5KerasAttributes* attrs = nullptr) {
  auto r = in::ReadH5ModelConfig(Fixture(name), fs, attrs);
  INFO(Ids(*fs));
  REQUIRE(r);
  return *r;
}

}  // namespace

TEST_CASE("keras: a plain .keras config passes", "[keras]") {
  auto fs = Keras(KerasConfig("benign.keras"));
  INFO(Ids(fs));
  CHECK(fs.empty());
}

TEST_CASE("keras: a Lambda layer in a .keras config is critical", "[keras]") {
  auto fs = Keras(KerasConfig("lambda.keras"));
  INFO(Ids(fs));
  REQUIRE(fs.size() == 1);  // the layer, not again its __lambda__ function
  CHECK(fs[0].id == "MG-KERAS-LAMBDA");
  CHECK(fs[0].severity == core::Severity::kCritical);
  CHECK(fs[0].offset == 7);
  CHECK(fs[0].message.find("bytecode") != std::string::npos);
  CHECK(fs[0].message.find("config.layers[1]") != std::string::npos);
}

TEST_CASE("keras: custom modules and registrations are high", "[keras]") {
  for (const char* name : {"custom.keras", "module_builtins.keras"}) {
    INFO(name);
    auto fs = Keras(KerasConfig(name));
    INFO(Ids(fs));
    REQUIRE(fs.size() == 1);
    CHECK(fs[0].id == "MG-KERAS-CUSTOM-OBJECT");
    CHECK(fs[0].severity == core::Severity::kHigh);
  }
}

TEST_CASE("keras: duplicate keys, bad JSON and non-objects are malformed", "[keras]") {
  auto fs = Keras(KerasConfig("duplicate_key.keras"));
  REQUIRE(fs.size() == 1);
  CHECK(fs[0].id == "MG-KERAS-MALFORMED");
  CHECK(fs[0].message.find("duplicate key") != std::string::npos);
  for (const char* text : {"{", "[]", "{\"a\": NaN}", "{} x", ""}) {
    INFO(text);
    auto f2 = Keras(text);
    REQUIRE(f2.size() == 1);
    CHECK(f2[0].id == "MG-KERAS-MALFORMED");
    CHECK(f2[0].severity == core::Severity::kHigh);
  }
}

TEST_CASE("keras: config size and depth limits at N and N+1", "[keras][limits]") {
  const std::string text = R"({"a": [[1]]})";  // depth 3
  in::KerasLimits limits;
  limits.max_config_bytes = text.size();
  limits.max_json_depth = 3;
  std::vector<sc::Finding> fs;
  in::AnalyzeKerasConfig(text, core::kNoOffset, "c", &fs, limits);
  CHECK(fs.empty());
  limits.max_config_bytes = text.size() - 1;
  in::AnalyzeKerasConfig(text, core::kNoOffset, "c", &fs, limits);
  REQUIRE(fs.size() == 1);
  CHECK(fs[0].id == "MG-KERAS-MALFORMED");
  CHECK(fs[0].message.find("max_config_bytes") != std::string::npos);
  fs.clear();
  limits.max_config_bytes = text.size();
  limits.max_json_depth = 2;
  in::AnalyzeKerasConfig(text, core::kNoOffset, "c", &fs, limits);
  REQUIRE(fs.size() == 1);
  CHECK(fs[0].id == "MG-KERAS-MALFORMED");
}

TEST_CASE("keras: Keras 2 Lambda forms and lambdas outside layers are critical", "[keras]") {
  for (const char* text : {
           R"({"class_name": "Lambda", "config": {"function": ["4wEAAA==", null, null]}})",
           R"({"class_name": "Lambda", "config": {"function": "4wEAAA==", "function_type": "lambda"}})",
           R"({"class_name": "Lambda", "config": {"function": "relu", "function_type": "function", "module": "os"}})",
           R"({"class_name": "Dense", "config": {"activation": {"class_name": "__lambda__", "config": {"code": "4wEA"}}}})",
           R"({"class_name": "Dense", "config": {"loss": {"function_type": "lambda"}}})"}) {
    INFO(text);
    auto fs = Keras(text);
    REQUIRE(fs.size() == 1);
    CHECK(fs[0].id == "MG-KERAS-LAMBDA");
    CHECK(fs[0].severity == core::Severity::kCritical);
  }
}

TEST_CASE("keras: keras and tf_keras modules and Keras' own registered names pass", "[keras]") {
  auto fs = Keras(R"({"module": "keras.src.models.functional", "class_name": "Functional",
    "registered_name": "Functional", "config": {"layers": [
      {"module": "tf_keras.layers", "class_name": "Dense", "registered_name": null},
      {"module": "keras.activations", "class_name": "function", "config": "relu",
       "registered_name": "function"}]}})");
  INFO(Ids(fs));
  CHECK(fs.empty());
  for (const char* text : {R"({"module": "kerasx", "class_name": "A"})",
                           R"({"module": "keras", "class_name": "A", "registered_name": "p>A"})",
                           R"({"class_name": "A", "registered_name": "B"})"}) {
    INFO(text);
    auto f2 = Keras(text);
    REQUIRE(f2.size() == 1);
    CHECK(f2[0].id == "MG-KERAS-CUSTOM-OBJECT");
  }
}

TEST_CASE("keras: findings past 100 per id are counted in one more", "[keras]") {
  std::string text = "{\"layers\": [";
  for (int i = 0; i < 150; ++i) text += std::string(i ? "," : "") + "{\"class_name\": \"Lambda\"}";
  text += "]}";
  auto fs = Keras(text);
  REQUIRE(fs.size() == 101);
  CHECK(Count(fs, "MG-KERAS-LAMBDA") == 101);
  CHECK(fs.back().message.find("50 more") != std::string::npos);
}

TEST_CASE("keras: .h5 model_config, fixed and variable length, and its attributes", "[keras][h5]") {
  for (const char* name : {"benign.h5", "benign_vlen.h5", "userblock.h5"}) {
    INFO(name);
    std::vector<sc::Finding> fs;
    in::H5KerasAttributes attrs;
    const std::string config = H5Config(name, &fs, &attrs);
    CHECK(fs.empty());
    CHECK(config.find("\"Sequential\"") != std::string::npos);
    CHECK(config.back() == '}');
    CHECK(attrs.keras_version == "2.13.1");
    CHECK(attrs.backend == "tensorflow");
    in::AnalyzeKerasConfig(config, core::kNoOffset, "model_config", &fs);
    CHECK(fs.empty());
  }
}

TEST_CASE("keras: .h5 Lambda, TFOpLambda and registered custom layers", "[keras][h5]") {
  struct Case { const char* file; const char* id; core::Severity severity; };
  for (const Case& c : {Case{"lambda.h5", "MG-KERAS-LAMBDA", core::Severity::kCritical},
                        Case{"tfop_io.h5", "MG-KERAS-TFOP", core::Severity::kHigh},
                        Case{"custom_registered.h5", "MG-KERAS-CUSTOM-OBJECT", core::Severity::kHigh}}) {
    INFO(c.file);
    std::vector<sc::Finding> fs;
    const std::string config = H5Config(c.file, &fs);
    in::AnalyzeKerasConfig(config, core::kNoOffset, "model_config", &fs);
    INFO(Ids(fs));
    REQUIRE(fs.size() == 1);
    CHECK(fs[0].id == c.id);
    CHECK(fs[0].severity == c.severity);
  }
  std::vector<sc::Finding> fs;
  in::AnalyzeKerasConfig(H5Config("tfop_math.h5", &fs), core::kNoOffset, "model_config", &fs);
  CHECK(fs.empty());  // TFOpLambda of plain math: a TF symbol by name, no bytecode
}

TEST_CASE("keras: a weights-only .h5 has an empty config, unreadable ones are MG-KERAS-H5",
          "[keras][h5]") {
  std::vector<sc::Finding> fs;
  CHECK(H5Config("weights_only.h5", &fs).empty());
  CHECK(fs.empty());
  for (const char* name : {"config_not_string.h5", "truncated.h5", "benign.onnx"}) {
    INFO(name);
    std::vector<sc::Finding> f2;
    CHECK_FALSE(in::ReadH5ModelConfig(Fixture(name), &f2));
    REQUIRE(f2.size() == 1);
    CHECK(f2[0].id == "MG-KERAS-H5");
    CHECK(f2[0].severity == core::Severity::kHigh);
  }
}

TEST_CASE("keras: .h5 image and attribute limits at N and N+1", "[keras][h5][limits]") {
  const Bytes h5 = Fixture("benign.h5");
  std::vector<sc::Finding> fs;
  in::H5Limits limits;
  limits.max_image_bytes = h5.size();
  auto config = in::ReadH5ModelConfig(h5, &fs, nullptr, limits);
  REQUIRE(config);
  limits.max_attribute_bytes = config->size();
  CHECK(in::ReadH5ModelConfig(h5, &fs, nullptr, limits));
  CHECK(fs.empty());
  limits.max_attribute_bytes = config->size() - 1;
  CHECK_FALSE(in::ReadH5ModelConfig(h5, &fs, nullptr, limits));
  REQUIRE(fs.size() == 1);
  CHECK(fs[0].id == "MG-KERAS-H5");
  fs.clear();
  limits = {};
  limits.max_image_bytes = h5.size() - 1;
  CHECK_FALSE(in::ReadH5ModelConfig(h5, &fs, nullptr, limits));
  REQUIRE(fs.size() == 1);
  CHECK(fs[0].message.find("max_image_bytes") != std::string::npos);
}

TEST_CASE("keras: LooksLikeHdf5 at 0 and after a user block", "[keras][h5]") {
  CHECK(in::LooksLikeHdf5(Fixture("benign.h5")));
  const Bytes ub = Fixture("userblock.h5");
  CHECK(in::LooksLikeHdf5(ub));
  CHECK_FALSE(in::LooksLikeHdf5(std::span(ub).first(512)));
  CHECK_FALSE(in::LooksLikeHdf5(Fixture("benign.onnx")));
  Bytes at1000(2048, 0);  // not a power of two
  std::copy(in::kHdf5Magic.begin(), in::kHdf5Magic.end(), at1000.begin() + 1000);
  CHECK_FALSE(in::LooksLikeHdf5(at1000));
}

// ---- the libhdf5 child's sandbox (keras.h: ConfineH5Child) ----

namespace {

struct Confined {
  int status = 0;      // waitpid's
  std::string answer;  // what the child wrote to its answer descriptor
};

// RunConfined forks a child that confines itself (memory_bytes more address
// space) and then runs `body` with its answer descriptor; exit 3 when the
// confinement fails.
template <typename Body>
Confined RunConfined(Body body, uint64_t memory_bytes = in::kH5ChildMemoryBytes) {
  int fds[2];
  REQUIRE(::pipe2(fds, O_CLOEXEC) == 0);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::close(fds[0]);
    std::string why;
    if (!in::ConfineH5Child(fds[1], &why, memory_bytes)) ::_exit(3);
    body(fds[1]);
    ::_exit(0);
  }
  ::close(fds[1]);
  Confined c;
  char buf[256];
  for (;;) {
    const ssize_t n = ::read(fds[0], buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    c.answer.append(buf, static_cast<size_t>(n));
  }
  ::close(fds[0]);
  while (::waitpid(pid, &c.status, 0) < 0 && errno == EINTR) {
  }
  return c;
}

void Say(int fd, const char* text) {
  if (::write(fd, text, std::strlen(text)) < 0) ::_exit(4);
}

bool KilledBySigsys(const Confined& c) {
  return WIFSIGNALED(c.status) && WTERMSIG(c.status) == SIGSYS;
}

}  // namespace

TEST_CASE("keras: the confined child computes, allocates and answers", "[keras][h5][sandbox]") {
  const Confined c = RunConfined([](int fd) {
    std::vector<uint8_t> big(64u << 20, 1);  // malloc's mmap path
    std::string grown;
    for (int i = 0; i < 100000; ++i) grown += "x";  // brk and realloc
    Say(fd, big[12345] == 1 && grown.size() == 100000 ? "ok" : "bad");
  });
  CHECK(WIFEXITED(c.status));
  CHECK(WEXITSTATUS(c.status) == 0);
  CHECK(c.answer == "ok");
}

// StatusField is a "Name:\tvalue" line of /proc/PID/status.
std::string StatusField(pid_t pid, const std::string& name) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind(name + ":", 0) == 0) {
      const size_t v = line.find_first_not_of(" \t", name.size() + 1);
      return v == std::string::npos ? "" : line.substr(v);
    }
  }
  return "";
}

TEST_CASE("keras: the confined child's limits, privileges and filter", "[keras][h5][sandbox]") {
  int fds[2];
  REQUIRE(::pipe2(fds, O_CLOEXEC) == 0);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::close(fds[0]);
    std::string why;
    if (!in::ConfineH5Child(fds[1], &why)) ::_exit(3);
    Say(fds[1], "r");
    static uint32_t word = 0;  // waits (futex is allowed) until killed
    for (;;) ::syscall(SYS_futex, &word, FUTEX_WAIT_PRIVATE, 0, nullptr, nullptr, 0);
  }
  ::close(fds[1]);
  char ready = 0;
  const bool said = ::read(fds[0], &ready, 1) == 1 && ready == 'r';
  ::close(fds[0]);
  std::map<int, std::pair<rlim_t, rlim_t>> got;
  for (int res : {RLIMIT_NOFILE, RLIMIT_FSIZE, RLIMIT_NPROC, RLIMIT_CORE, RLIMIT_CPU, RLIMIT_AS}) {
    rlimit r{};
    if (::prlimit(pid, static_cast<__rlimit_resource>(res), nullptr, &r) == 0) {
      got[res] = {r.rlim_cur, r.rlim_max};
    }
  }
  const std::string no_new_privs = StatusField(pid, "NoNewPrivs");
  const std::string seccomp = StatusField(pid, "Seccomp");
  ::kill(pid, SIGKILL);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  REQUIRE(said);
  using Pair = std::pair<rlim_t, rlim_t>;
  CHECK(got[RLIMIT_NOFILE] == Pair{0, 0});
  CHECK(got[RLIMIT_FSIZE] == Pair{0, 0});
  CHECK(got[RLIMIT_NPROC] == Pair{0, 0});
  CHECK(got[RLIMIT_CORE] == Pair{0, 0});
  CHECK(got[RLIMIT_CPU] == Pair{in::kH5TimeoutSeconds + 1, in::kH5TimeoutSeconds + 2});
#if MG_TEST_ASAN
  CHECK(got[RLIMIT_AS].first == RLIM_INFINITY);  // ASan's shadow: no address space bound
#else
  CHECK(got[RLIMIT_AS].first > in::kH5ChildMemoryBytes);
  CHECK(got[RLIMIT_AS].first < RLIM_INFINITY);
#endif
  CHECK(no_new_privs == "1");
  CHECK(seccomp == "2");  // a filter
}

TEST_CASE("keras: a confined child making a forbidden system call is killed (SIGSYS)",
          "[keras][h5][sandbox]") {
  SECTION("socket") {
    const Confined c = RunConfined([](int fd) {
      Say(fd, "before");
      (void)::socket(AF_INET, SOCK_STREAM, 0);
      Say(fd, "after");
    });
    CHECK(KilledBySigsys(c));
    CHECK(c.answer == "before");
  }
  SECTION("execve") {
    const Confined c = RunConfined([](int) {
      char* const argv[] = {const_cast<char*>("/bin/true"), nullptr};
      ::execve("/bin/true", argv, nullptr);
      ::_exit(5);
    });
    CHECK(KilledBySigsys(c));
  }
  SECTION("fork") {
    const Confined c = RunConfined([](int) {
      (void)::syscall(SYS_fork);
      ::_exit(5);
    });
    CHECK(KilledBySigsys(c));
  }
  SECTION("a write to another descriptor than the answer's") {
    const Confined c = RunConfined([](int fd) {
      const ssize_t r = ::write(fd + 1, "x", 1);
      (void)r;
    });
    CHECK(KilledBySigsys(c));
  }
  SECTION("read") {
    const Confined c = RunConfined([](int fd) {
      char b = 0;
      const ssize_t r = ::read(fd, &b, 1);
      (void)r;
    });
    CHECK(KilledBySigsys(c));
  }
  SECTION("executable memory") {
    const Confined c = RunConfined([](int fd) {
      Say(fd, "before");
      (void)::mmap(nullptr, 4096, PROT_READ | PROT_EXEC, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      Say(fd, "after");
    });
    CHECK(KilledBySigsys(c));
    CHECK(c.answer == "before");
  }
  SECTION("mprotect to executable") {
    const Confined c = RunConfined([](int) {
      static char page[8192];
      auto* p = reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(page) + 4095) & ~uintptr_t{4095});
      (void)::mprotect(p, 4096, PROT_READ | PROT_EXEC);
    });
    CHECK(KilledBySigsys(c));
  }
}

TEST_CASE("keras: a confined child's open and openat fail with ENOENT, nothing is opened",
          "[keras][h5][sandbox]") {
  const Confined c = RunConfined([](int fd) {
    const long a = ::syscall(SYS_openat, AT_FDCWD, "/proc/self/status", O_RDONLY);
    const int ea = errno;
    const long b = ::syscall(SYS_open, "/proc/self/status", O_RDONLY);
    const int eb = errno;
    Say(fd, a == -1 && ea == ENOENT && b == -1 && eb == ENOENT ? "enoent" : "opened");
  });
  CHECK(WIFEXITED(c.status));
  CHECK(c.answer == "enoent");
}

TEST_CASE("keras: the confined child's address space at N and N+1", "[keras][h5][sandbox][limits]") {
  constexpr uint64_t kMemory = 256u << 20;
  // N: a mapping of the whole allowance fits.
  const Confined n = RunConfined(
      [](int fd) {
        void* p = ::mmap(nullptr, kMemory, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        Say(fd, p == MAP_FAILED ? "failed" : "mapped");
      },
      kMemory);
  CHECK(n.answer == "mapped");
  // Past N: the allowance and 16 MiB more (the child's own allocations move
  // its size by less than that).
  const Confined over = RunConfined(
      [](int fd) {
        void* p = ::mmap(nullptr, kMemory + (16u << 20), PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        Say(fd, p == MAP_FAILED ? "failed" : "mapped");
      },
      kMemory);
#if MG_TEST_ASAN
  CHECK(over.answer == "mapped");  // no address space bound under ASan
#else
  CHECK(over.answer == "failed");
#endif
}

TEST_CASE("keras: the crafted H5HG_read file is refused, not a crash of the gate",
          "[keras][h5][sandbox]") {
  std::ifstream f(std::string(MG_FUZZ_SCAN_CORPUS_DIR) + "/regress-hdf5-h5hg-memcpy-overlap.h5",
                  std::ios::binary);
  REQUIRE(f.good());
  Bytes seed(std::istreambuf_iterator<char>(f), {});
  REQUIRE(seed.size() == 5001);
  // fuzz_scan's first byte picks the name (12: m.h5); the file is the rest.
  const Bytes h5(seed.begin() + 1, seed.end());
  std::vector<sc::Finding> fs;
  CHECK_FALSE(in::ReadH5ModelConfig(h5, &fs));
  REQUIRE(fs.size() == 1);
  CHECK(fs[0].id == "MG-KERAS-H5");
  CHECK(fs[0].severity == core::Severity::kHigh);
  // glibc's malloc assertion (or ASan's report) writes to stderr: the
  // filter kills the child first.
  CHECK(fs[0].message.find("(SIGSYS): not judged") != std::string::npos);
}
