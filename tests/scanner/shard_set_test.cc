// CheckShardSet: each core set rule becomes a finding with the table's id
// and severity, naming the tensor and shard.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "modelgate/scanner.h"

namespace core = modelgate::core;
namespace scanner = modelgate::scanner;

namespace {

core::TensorInfo T(std::string name, uint64_t begin, uint64_t end) {
  core::TensorInfo t;
  t.name = std::move(name);
  t.begin = begin;
  t.end = end;
  t.shape = {end - begin};
  return t;
}

}  // namespace

TEST_CASE("CheckShardSet: findings carry the MG-SET ids and severities", "[scanner][shard_set]") {
  const std::string text =
      R"({"metadata":{"total_size":20},"weight_map":{"a":"s1.safetensors","b":"s2.safetensors",)"
      R"("c":"s3.safetensors","d":"s1.safetensors"}})";
  auto index = core::ParseShardIndex(std::vector<uint8_t>(text.begin(), text.end()), {});
  REQUIRE(index.ok());
  core::Safetensors s1, s2;
  s1.tensors = {T("a", 0, 4), T("x", 4, 8)};  // "d" missing, "x" extra
  s2.tensors = {T("b", 0, 4), T("a", 4, 8)};  // "a" duplicated
  const core::ShardHeaders headers{{"s1.safetensors", &s1}, {"s2.safetensors", &s2}};
  auto findings = scanner::CheckShardSet(index.value(), headers);
  std::vector<std::pair<std::string, core::Severity>> got;
  for (const auto& f : findings) got.emplace_back(f.id, f.severity);
  const std::vector<std::pair<std::string, core::Severity>> want = {
      {"MG-SET-SHARD-MISSING", core::Severity::kHigh},
      {"MG-SET-TENSOR-DUPLICATE", core::Severity::kCritical},
      {"MG-SET-TENSOR-MISSING", core::Severity::kHigh},
      {"MG-SET-TENSOR-EXTRA", core::Severity::kCritical},
  };
  CHECK(got == want);
  REQUIRE(findings.size() == 4);
  CHECK(findings[0].message.find("\"s3.safetensors\"") != std::string::npos);
  CHECK(findings[2].message.find("\"d\"") != std::string::npos);
  CHECK(findings[3].message.find("\"x\"") != std::string::npos);
  // A complete, consistent set: nothing.
  core::Safetensors ok1, ok2, ok3;
  ok1.tensors = {T("a", 0, 4), T("d", 4, 8)};
  ok2.tensors = {T("b", 0, 8)};
  ok3.tensors = {T("c", 0, 4)};
  CHECK(scanner::CheckShardSet(index.value(), {{"s1.safetensors", &ok1}, {"s2.safetensors", &ok2},
                                               {"s3.safetensors", &ok3}})
            .empty());
  ok3.tensors = {T("c", 0, 5)};
  auto size = scanner::CheckShardSet(index.value(), {{"s1.safetensors", &ok1}, {"s2.safetensors", &ok2},
                                                     {"s3.safetensors", &ok3}});
  REQUIRE(size.size() == 1);
  CHECK(size[0].id == "MG-SET-TOTAL-SIZE");
  CHECK(size[0].severity == core::Severity::kMedium);
}
