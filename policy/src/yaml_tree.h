// Strict YAML reading for policy files: yaml-cpp's event parser turned into a
// small tree that keeps every key with its position. yaml-cpp's Node API
// silently keeps one of two duplicate keys and resolves anchors and tags,
// so the policy never uses it. Private to the policy module.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace modelgate::policy::internal {

// YNode is one YAML node with its 1-based position.
struct YNode {
  enum class Kind : uint8_t { kNull, kScalar, kMap, kSeq };
  Kind kind = Kind::kNull;
  int line = 0;
  int column = 0;
  int pos = -1;        // byte offset in the text
  bool plain = false;  // scalar written without quotes or block style
  std::string value;   // scalar text
  // kSeq: the items. kMap: key, value, key, value, ... (keys are scalars).
  std::vector<YNode> children;
};

// YamlError is the first problem found, at a 1-based position (0: none).
struct YamlError {
  int line = 0;
  int column = 0;
  int pos = -1;
  std::string message;
};

inline constexpr int kMaxYamlDepth = 32;

// ParseYamlStrict reads exactly one YAML document from `text` and rejects
// what a policy must not contain: invalid UTF-8 or control bytes, tags,
// anchors, aliases, non-scalar or null keys, duplicate keys (compared
// after unquoting), nesting deeper than kMaxYamlDepth, a second document,
// and an empty stream or document.
std::variant<YNode, YamlError> ParseYamlStrict(std::string_view text);

}  // namespace modelgate::policy::internal
