#include "yaml_tree.h"

#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/exceptions.h>
#include <yaml-cpp/mark.h>
#include <yaml-cpp/parser.h>

#include <exception>
#include <sstream>
#include <utility>

#include "modelgate/core.h"

namespace modelgate::policy::internal {
namespace {

// Position of byte `pos` in `text`, 1-based (columns count bytes, as
// yaml-cpp's marks do for UTF-8 input).
YamlError ErrorAtByte(std::string_view text, size_t pos, std::string message) {
  YamlError e;
  e.line = 1;
  e.column = 1;
  for (size_t i = 0; i < pos && i < text.size(); ++i) {
    if (text[i] == '\n') {
      ++e.line;
      e.column = 1;
    } else {
      ++e.column;
    }
  }
  e.pos = static_cast<int>(pos);
  e.message = std::move(message);
  return e;
}

// CheckText: strict UTF-8 (no overlongs, surrogates or values past
// U+10FFFF), no control bytes but tab, LF and CR, no BOM (yaml-cpp would
// switch to UTF-16/32 on one).
std::optional<YamlError> CheckText(std::string_view text) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  size_t n = text.size(), i = 0;
  while (i < n) {
    unsigned c = s[i];
    if (c < 0x80) {
      if ((c < 0x20 && c != '\t' && c != '\n' && c != '\r') || c == 0x7f) {
        return ErrorAtByte(text, i, "control character 0x" +
                                        core::HexLower(std::span<const uint8_t>(s + i, 1)) +
                                        " in policy text");
      }
      ++i;
      continue;
    }
    size_t len = 0;
    unsigned cp = 0, min = 0;
    if (c >= 0xc2 && c <= 0xdf) {
      len = 2, cp = c & 0x1f, min = 0x80;
    } else if (c >= 0xe0 && c <= 0xef) {
      len = 3, cp = c & 0x0f, min = 0x800;
    } else if (c >= 0xf0 && c <= 0xf4) {
      len = 4, cp = c & 0x07, min = 0x10000;
    } else {
      return ErrorAtByte(text, i, "invalid UTF-8 in policy text");
    }
    if (n - i < len) return ErrorAtByte(text, i, "invalid UTF-8 in policy text");
    for (size_t k = 1; k < len; ++k) {
      if ((s[i + k] & 0xc0) != 0x80) return ErrorAtByte(text, i, "invalid UTF-8 in policy text");
      cp = (cp << 6) | (s[i + k] & 0x3f);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) {
      return ErrorAtByte(text, i, "invalid UTF-8 in policy text");
    }
    if (cp == 0xfeff) return ErrorAtByte(text, i, "byte order mark in policy text");
    i += len;
  }
  return std::nullopt;
}

class TreeBuilder : public YAML::EventHandler {
 public:
  explicit TreeBuilder(std::string_view text) : text_(text) {}

  std::optional<YamlError>& error() { return error_; }
  std::optional<YNode>& root() { return root_; }
  int documents() const { return documents_; }

  void Fail(const YAML::Mark& mark, std::string message) {
    if (error_) return;
    YamlError e;
    e.line = mark.line + 1;
    e.column = mark.column + 1;
    e.pos = mark.pos;
    e.message = std::move(message);
    error_ = std::move(e);
  }

  void OnDocumentStart(const YAML::Mark& mark) override {
    ++documents_;
    if (documents_ > 1) Fail(mark, "a policy is a single YAML document; found a second one");
    doc_mark_ = mark;
  }
  void OnDocumentEnd() override {}

  void OnNull(const YAML::Mark& mark, YAML::anchor_t anchor) override {
    CheckProperties(mark, "", anchor);
    Add(Node(YNode::Kind::kNull, mark));
  }
  void OnAlias(const YAML::Mark& mark, YAML::anchor_t) override {
    Fail(mark, "aliases (*name) are not allowed in a policy");
    Add(Node(YNode::Kind::kNull, mark));
  }
  void OnAnchor(const YAML::Mark& mark, const std::string&) override {
    Fail(mark, "anchors (&name) are not allowed in a policy");
  }
  void OnScalar(const YAML::Mark& mark, const std::string& tag, YAML::anchor_t anchor,
                const std::string& value) override {
    CheckProperties(mark, tag, anchor);
    YNode n = Node(YNode::Kind::kScalar, mark);
    n.plain = tag == "?";
    n.value = value;
    Add(std::move(n));
  }
  void OnSequenceStart(const YAML::Mark& mark, const std::string& tag, YAML::anchor_t anchor,
                       YAML::EmitterStyle::value) override {
    Open(Node(YNode::Kind::kSeq, mark), tag, anchor);
  }
  void OnSequenceEnd() override { Close(); }
  void OnMapStart(const YAML::Mark& mark, const std::string& tag, YAML::anchor_t anchor,
                  YAML::EmitterStyle::value) override {
    Open(Node(YNode::Kind::kMap, mark), tag, anchor);
  }
  void OnMapEnd() override { Close(); }

 private:
  static YNode Node(YNode::Kind kind, const YAML::Mark& mark) {
    YNode n;
    n.kind = kind;
    n.line = mark.line + 1;
    n.column = mark.column + 1;
    n.pos = mark.pos;
    return n;
  }

  // Tags: yaml-cpp reports "?" for an untagged plain node and "!" for an
  // untagged quoted or block scalar; anything else was written. An explicit
  // non-specific "! x" also reports "!", so the byte at the node's mark
  // (which points at its first property) is checked too.
  void CheckProperties(const YAML::Mark& mark, const std::string& tag, YAML::anchor_t anchor) {
    bool written = mark.pos >= 0 && static_cast<size_t>(mark.pos) < text_.size() &&
                   text_[static_cast<size_t>(mark.pos)] == '!';
    if (written || (!tag.empty() && tag != "?" && tag != "!")) {
      Fail(mark, "tags (" + core::Quoted(tag.empty() ? "!" : tag) + ") are not allowed in a policy");
    }
    if (anchor != YAML::NullAnchor) Fail(mark, "anchors (&name) are not allowed in a policy");
  }

  void Open(YNode n, const std::string& tag, YAML::anchor_t anchor) {
    YAML::Mark mark;
    mark.line = n.line - 1;
    mark.column = n.column - 1;
    mark.pos = n.pos;
    CheckProperties(mark, tag, anchor);
    if (stack_.size() >= static_cast<size_t>(kMaxYamlDepth)) {
      Fail(mark, "nesting deeper than " + std::to_string(kMaxYamlDepth) + " levels");
    }
    stack_.push_back(std::move(n));
  }

  void Close() {
    if (stack_.empty()) return;
    YNode n = std::move(stack_.back());
    stack_.pop_back();
    Add(std::move(n));
  }

  void Add(YNode n) {
    if (documents_ > 1) return;  // the second document is only an error
    if (stack_.empty()) {
      if (!root_) root_ = std::move(n);
      return;
    }
    YNode& parent = stack_.back();
    if (parent.kind == YNode::Kind::kMap && parent.children.size() % 2 == 0) {
      YAML::Mark mark;
      mark.line = n.line - 1;
      mark.column = n.column - 1;
      mark.pos = n.pos;
      if (n.kind != YNode::Kind::kScalar) {
        Fail(mark, "a mapping key must be a string");
      } else {
        for (size_t i = 0; i < parent.children.size(); i += 2) {
          const YNode& other = parent.children[i];
          if (other.kind == YNode::Kind::kScalar && other.value == n.value) {
            Fail(mark, "duplicate key " + core::Quoted(n.value) + " (first at line " +
                           std::to_string(other.line) + ", column " +
                           std::to_string(other.column) + ")");
            break;
          }
        }
      }
    }
    parent.children.push_back(std::move(n));
  }

  std::string_view text_;
  std::vector<YNode> stack_;
  std::optional<YNode> root_;
  std::optional<YamlError> error_;
  int documents_ = 0;
  YAML::Mark doc_mark_;
};

}  // namespace

std::variant<YNode, YamlError> ParseYamlStrict(std::string_view text) {
  if (auto bad = CheckText(text)) return *bad;
  TreeBuilder builder(text);
  try {
    std::istringstream in{std::string(text)};
    YAML::Parser parser(in);
    if (parser.HandleNextDocument(builder) && !builder.error()) {
      // A second document is an error; parsing it finds where it starts.
      parser.HandleNextDocument(builder);
    }
  } catch (const YAML::Exception& e) {
    // An alias to an undefined anchor throws before OnAlias: same rule.
    bool alias = e.mark.pos >= 0 && static_cast<size_t>(e.mark.pos) < text.size() &&
                 text[static_cast<size_t>(e.mark.pos)] == '*';
    if (!builder.error()) {
      builder.Fail(e.mark, alias ? "aliases (*name) are not allowed in a policy" : e.msg);
    }
  } catch (const std::exception& e) {
    if (!builder.error()) {
      YamlError err;
      err.message = std::string("YAML parser failed: ") + e.what();
      return err;
    }
  }
  if (builder.error()) return *builder.error();
  if (builder.documents() == 0) return YamlError{0, 0, -1, "empty policy (no YAML document)"};
  if (!builder.root() || builder.root()->kind == YNode::Kind::kNull) {
    const YNode* r = builder.root() ? &*builder.root() : nullptr;
    return YamlError{r ? r->line : 0, r ? r->column : 0, r ? r->pos : -1,
                     "empty policy (the document has no content)"};
  }
  return std::move(*builder.root());
}

}  // namespace modelgate::policy::internal
