// Configs and code (scanner/src/configs.h): strict JSON with every limit at
// N and N+1, what a loader does with auto_map / custom_pipelines /
// chat_template, and which names are text members.
#include <catch2/catch.hpp>

#include <algorithm>
#include <string>
#include <vector>

#include "configs.h"

namespace {

using modelgate::scanner::FileScan;
using modelgate::scanner::ScanOptions;
namespace in = modelgate::scanner::internal;

struct Judged {
  bool parsed = false;
  std::vector<std::string> ids;
  bool has(const std::string& id) const { return std::find(ids.begin(), ids.end(), id) != ids.end(); }
};

Judged Json(const std::string& text, const in::ConfigLimits& limits = {}) {
  ScanOptions options;  // no YARA rules: the config rules alone
  FileScan out;
  in::Scanner sc(options, out);
  Judged j;
  j.parsed = in::JudgeJson(sc, {reinterpret_cast<const uint8_t*>(text.data()), text.size()},
                           "config.json", 0, in::Place{}, limits, out);
  for (const auto& f : out.findings) j.ids.push_back(f.id);
  return j;
}

std::string Nested(size_t depth) { return std::string(depth, '[') + std::string(depth, ']'); }

}  // namespace

TEST_CASE("configs: max_json_bytes at N and N+1", "[scanner][configs]") {
  in::ConfigLimits limits;
  const std::string text = "{\"model_type\": \"llama\"}";
  limits.max_json_bytes = text.size();
  CHECK(Json(text, limits).parsed);
  CHECK(Json(text, limits).ids.empty());
  limits.max_json_bytes = text.size() - 1;
  const Judged over = Json(text, limits);
  CHECK_FALSE(over.parsed);
  CHECK(over.ids == std::vector<std::string>{"MG-CFG-LIMIT"});
}

TEST_CASE("configs: max_json_depth at N and N+1", "[scanner][configs]") {
  in::ConfigLimits limits;
  CHECK(limits.max_json_depth == 256);
  CHECK(Json(Nested(256)).parsed);
  const Judged over = Json(Nested(257));
  CHECK_FALSE(over.parsed);
  CHECK(over.has("MG-CFG-LIMIT"));
}

TEST_CASE("configs: duplicate keys at any depth, after unescaping", "[scanner][configs]") {
  CHECK(Json(R"({"a": {"b": 1, "b": 2}})").has("MG-CFG-DUPLICATE-KEY"));
  CHECK(Json(R"({"a": 1, "\u0061": 2})").has("MG-CFG-DUPLICATE-KEY"));
  CHECK(Json(R"({"a": 1, "A": 2})").ids.empty());
}

TEST_CASE("configs: not strict JSON", "[scanner][configs]") {
  for (const char* bad : {"{\"a\": 1,}", "{\"a\": NaN}", "{\"a\": 1} x", "", "{'a': 1}"}) {
    INFO(bad);
    const Judged j = Json(bad);
    CHECK_FALSE(j.parsed);
    CHECK(j.has("MG-CFG-JSON-SYNTAX"));
  }
}

TEST_CASE("configs: auto_map and custom_pipelines are code", "[scanner][configs]") {
  CHECK(Json(R"({"auto_map": {"AutoModel": "modeling_x.X"}})").has("MG-CODE-AUTO-MAP"));
  CHECK(Json(R"({"auto_map": {"AutoTokenizer": ["t.T", null]}})").has("MG-CODE-AUTO-MAP"));
  CHECK(Json(R"({"custom_pipelines": {"t": {"impl": "p.P"}}})").has("MG-CODE-CUSTOM-PIPELINE"));
  // Only the top-level keys are what transformers reads.
  CHECK(Json(R"({"nested": {"auto_map": {"AutoModel": "m.M"}}})").ids.empty());
}

TEST_CASE("configs: chat_template shapes", "[scanner][configs]") {
  CHECK(Json(R"({"chat_template": "{{ messages[0]['content'] }}"})").ids.empty());
  CHECK(Json(R"({"chat_template": [{"name": "default", "template": "{{ bos_token }}"}]})").ids.empty());
  CHECK(Json(R"({"chat_template": 7})").has("MG-CFG-TEMPLATE-TYPE"));
  CHECK(Json(R"({"chat_template": [{"name": "x"}]})").has("MG-CFG-TEMPLATE-TYPE"));
  const Judged evil = Json(R"({"chat_template": "{{ cycler.__init__.__globals__.os }}"})");
  CHECK(std::any_of(evil.ids.begin(), evil.ids.end(),
                    [](const std::string& id) { return id.rfind("MG-TMPL-", 0) == 0; }));
}

TEST_CASE("configs: which names are text members", "[scanner][configs]") {
  CHECK(in::TextKindOf("config.json") == in::TextKind::kJson);
  CHECK(in::TextKindOf("CONFIG.JSON") == in::TextKind::kJson);
  CHECK(in::TextKindOf("chat_template.jinja") == in::TextKind::kJinja);
  CHECK(in::TextKindOf("modeling_x.py") == in::TextKind::kPython);
  CHECK(in::TextKindOf("model.safetensors") == in::TextKind::kNone);
  CHECK(in::TextKindOf("json") == in::TextKind::kNone);
}
