#include "configs.h"

#include <algorithm>
#include <iterator>
#include <string>
#include <vector>

#include "jinja.h"
#include "keras.h"
#include "modelgate/strict_json.h"

namespace modelgate::scanner::internal {
namespace {

using json = nlohmann::json;

uint64_t At(uint64_t base, uint64_t pos) {
  return base == core::kNoOffset || pos == std::string_view::npos ? core::kNoOffset : base + pos;
}

// KeyOffset: where `"key"` followed by a colon first appears in the text
// (the key as written; an escaped spelling is not found: kNoOffset).
uint64_t KeyOffset(std::string_view text, std::string_view key, uint64_t base) {
  const std::string quoted = "\"" + std::string(key) + "\"";
  for (size_t p = text.find(quoted); p != std::string_view::npos; p = text.find(quoted, p + 1)) {
    size_t q = p + quoted.size();
    while (q < text.size() && (text[q] == ' ' || text[q] == '\t' || text[q] == '\n' || text[q] == '\r')) ++q;
    if (q < text.size() && text[q] == ':') return At(base, p);
  }
  return core::kNoOffset;
}

// SyntaxOffset: the byte StrictDom's message names ("... at byte N: ...";
// nlohmann counts from 1, the byte after the one it stopped on).
uint64_t SyntaxOffset(const std::string& message, uint64_t base) {
  const std::string_view tag = "at byte ";
  const size_t p = message.find(tag);
  if (p == std::string::npos) return core::kNoOffset;
  uint64_t n = 0;
  size_t i = p + tag.size();
  bool any = false;
  for (; i < message.size() && message[i] >= '0' && message[i] <= '9' && n < (1ull << 60); ++i) {
    n = n * 10 + static_cast<uint64_t>(message[i] - '0');
    any = true;
  }
  if (!any) return core::kNoOffset;
  return At(base, n > 0 ? n - 1 : 0);
}

// CodeRefs lists the "module.Class" references of an auto_map value: a
// string, or a list of strings and nulls (tokenizers: [slow, fast]).
void CodeRefs(const json& v, std::vector<std::string>* refs) {
  if (v.is_string()) {
    refs->push_back(v.get<std::string>());
  } else if (v.is_array()) {
    for (const auto& e : v) {
      if (e.is_string()) refs->push_back(e.get<std::string>());
    }
  }
}

std::string JoinRefs(const std::vector<std::string>& refs) {
  std::string s;
  for (size_t i = 0; i < refs.size() && i < 8; ++i) s += (i ? ", " : "") + core::Quoted(refs[i]);
  if (refs.size() > 8) s += ", ... (" + std::to_string(refs.size()) + " in all)";
  return s;
}

void AutoMap(const json& doc, std::string_view text, std::string_view name, uint64_t base,
             const Place& at, FileScan& out) {
  const auto it = doc.find("auto_map");
  if (it == doc.end()) return;
  std::vector<std::string> refs;
  if (it->is_object()) {
    for (const auto& [cls, v] : it->items()) CodeRefs(v, &refs);
  } else {
    CodeRefs(*it, &refs);
  }
  bool remote = false;
  for (const auto& r : refs) remote |= r.find("--") != std::string::npos;
  std::string message = std::string(name) + " maps Auto classes to the model's own code (auto_map";
  message += refs.empty() ? ")" : ": " + JoinRefs(refs) + ")";
  message += ": this model runs its own code under trust_remote_code=True";
  if (remote) message += "; a \"repo--module.Class\" reference fetches code from another repository, which this scan never saw";
  out.findings.push_back(
      Placed(MakeFinding("MG-CODE-AUTO-MAP", Severity::kHigh, message, KeyOffset(text, "auto_map", base)), at));
}

void CustomPipelines(const json& doc, std::string_view text, std::string_view name, uint64_t base,
                     const Place& at, FileScan& out) {
  const auto it = doc.find("custom_pipelines");
  if (it == doc.end()) return;
  std::vector<std::string> refs;
  if (it->is_object()) {
    for (const auto& [task, v] : it->items()) {
      refs.push_back(task);
      if (v.is_object()) {
        const auto impl = v.find("impl");
        if (impl != v.end() && impl->is_string()) refs.back() += " -> " + impl->get<std::string>();
      }
    }
  }
  out.findings.push_back(Placed(
      MakeFinding("MG-CODE-CUSTOM-PIPELINE", Severity::kHigh,
                  std::string(name) + " registers custom pipelines" +
                      (refs.empty() ? std::string() : " (" + JoinRefs(refs) + ")") +
                      ": this model runs its own code under trust_remote_code=True",
                  KeyOffset(text, "custom_pipelines", base)),
      at));
}

// ChatTemplates: `chat_template` is one template string, or a list of
// {"name", "template"} objects (named templates: tool_use, rag, ...).
void ChatTemplates(Scanner& sc, const json& doc, std::string_view text, std::string_view name,
                   uint64_t base, const Place& at, const ConfigLimits& limits, FileScan& out) {
  const auto it = doc.find("chat_template");
  if (it == doc.end()) return;
  // The template's text sits in the file JSON-escaped: findings point at
  // the key (decoded offsets are not file offsets).
  const uint64_t key_at = KeyOffset(text, "chat_template", base);
  auto one = [&](const std::string& tmpl, const std::string& label) {
    const std::string where = label + " of " + std::string(name);
    JudgeTemplateText(sc, tmpl, core::kNoOffset, where, at, limits, out);
  };
  const size_t before = out.findings.size();
  if (it->is_string()) {
    one(it->get<std::string>(), "chat_template");
  } else if (it->is_array()) {
    for (const auto& e : *it) {
      if (e.is_object() && e.contains("template") && e["template"].is_string()) {
        const std::string label = e.contains("name") && e["name"].is_string()
                                      ? "chat_template " + core::Quoted(e["name"].get<std::string>())
                                      : std::string("chat_template");
        one(e["template"].get<std::string>(), label);
      } else {
        out.findings.push_back(Placed(
            MakeFinding("MG-CFG-TEMPLATE-TYPE", Severity::kHigh,
                        std::string(name) + ": a chat_template list entry is not a {name, template} object",
                        key_at),
            at));
      }
    }
  } else if (!it->is_null()) {
    out.findings.push_back(Placed(
        MakeFinding("MG-CFG-TEMPLATE-TYPE", Severity::kHigh,
                    std::string(name) + ": chat_template is " + WithArticle(it->type_name()) +
                        ", not a template string or a list of named templates",
                    key_at),
        at));
  }
  for (size_t i = before; i < out.findings.size(); ++i) {
    if (out.findings[i].offset == core::kNoOffset && at.member.empty()) out.findings[i].offset = key_at;
  }
}

// KerasShaped: a Keras model config (Keras 3 config.json in a .keras zip,
// or a Keras 2 model_config): {"class_name": ..., "config": {...}}.
bool KerasShaped(const json& doc) {
  const auto c = doc.find("class_name");
  const auto k = doc.find("config");
  return c != doc.end() && c->is_string() && k != doc.end() && k->is_object();
}

}  // namespace

bool EndsWithNoCase(std::string_view s, std::string_view suffix) {
  if (s.size() < suffix.size()) return false;
  for (size_t i = 0; i < suffix.size(); ++i) {
    char c = s[s.size() - suffix.size() + i];
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    if (c != suffix[i]) return false;
  }
  return true;
}

TextKind TextKindOf(std::string_view name) {
  if (EndsWithNoCase(name, ".json")) return TextKind::kJson;
  if (EndsWithNoCase(name, ".jinja") || EndsWithNoCase(name, ".jinja2") ||
      EndsWithNoCase(name, ".j2")) {
    return TextKind::kJinja;
  }
  if (EndsWithNoCase(name, ".py")) return TextKind::kPython;
  return TextKind::kNone;
}

bool JudgeJson(Scanner& sc, std::span<const uint8_t> bytes, std::string_view name, uint64_t base,
               const Place& at, const ConfigLimits& limits, FileScan& out) {
  if (bytes.size() > limits.max_json_bytes) {
    out.findings.push_back(Placed(
        MakeFinding("MG-CFG-LIMIT", Severity::kHigh,
                    std::string(name) + " is " + std::to_string(bytes.size()) +
                        " bytes, above max_json_bytes (" + std::to_string(limits.max_json_bytes) +
                        "): not parsed, so not judged",
                    At(base, 0)),
        at));
    return false;
  }
  const std::string_view text(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  sc.Yara(bytes, "metadata", at, base == core::kNoOffset ? 0 : base);
  auto parsed = core::ParseStrictJson(text, limits.max_json_depth, core::Code::kStJsonSyntax, std::string(name));
  if (!parsed.ok()) {
    const std::string& m = parsed.error().message;
    const bool dup = m.find("duplicate key") != std::string::npos;
    const bool deep = m.find("nested deeper than") != std::string::npos;
    uint64_t offset = SyntaxOffset(m, base);
    if (dup) {
      // The message quotes the key: point at its second spelling.
      const size_t q = m.find("duplicate key ");
      const std::string key = m.substr(q + 14);
      const size_t first = text.find(key);
      const size_t second = first == std::string_view::npos ? first : text.find(key, first + 1);
      offset = At(base, second);
    }
    out.findings.push_back(Placed(
        MakeFinding(dup ? "MG-CFG-DUPLICATE-KEY" : deep ? "MG-CFG-LIMIT" : "MG-CFG-JSON-SYNTAX",
                    Severity::kHigh,
                    m + (dup ? " (json.load keeps the last value, other readers the first: a "
                               "differential)"
                             : deep ? " (max_json_depth): not judged"
                                    : " (not strict JSON: no loader reading it can be assumed to "
                                      "see what this scan saw)"),
                    offset),
        at));
    return false;
  }
  const json& doc = parsed.value();
  if (!doc.is_object()) return true;
  AutoMap(doc, text, name, base, at, out);
  CustomPipelines(doc, text, name, base, at, out);
  ChatTemplates(sc, doc, text, name, base, at, limits, out);
  if (KerasShaped(doc)) {
    std::vector<Finding> f;
    AnalyzeKerasConfig(text, base, name, &f);
    for (auto& x : f) out.findings.push_back(Placed(std::move(x), at));
  }
  return true;
}

void JudgeTemplateText(Scanner& sc, std::string_view text, uint64_t base, std::string_view where,
                       const Place& at, const ConfigLimits& limits, FileScan& out) {
  (void)limits;
  std::vector<Finding> f;
  AnalyzeTemplate(text, base, where, TemplateLimits{}, &f);
  for (auto& x : f) out.findings.push_back(Placed(std::move(x), at));
  const size_t before = out.findings.size();
  sc.Yara({reinterpret_cast<const uint8_t*>(text.data()), text.size()}, "metadata", at,
          base == core::kNoOffset ? 0 : base);
  if (base != core::kNoOffset) return;
  // A decoded template (a JSON string, a GGUF value) has no file offsets;
  // a rule the raw text already matched is not reported twice.
  std::vector<Finding> decoded(std::make_move_iterator(out.findings.begin() + static_cast<long>(before)),
                               std::make_move_iterator(out.findings.end()));
  out.findings.resize(before);
  for (auto& x : decoded) {
    const bool seen = std::any_of(out.findings.begin(), out.findings.end(),
                                  [&](const Finding& y) { return y.id == x.id && y.member == x.member; });
    if (seen) continue;
    x.offset = core::kNoOffset;
    x.member_offset = core::kNoOffset;
    out.findings.push_back(std::move(x));
  }
}

bool IsTextMember(std::string_view name) { return TextKindOf(name) != TextKind::kNone; }

void JudgeTextMember(Scanner& sc, std::span<const uint8_t> bytes, std::string_view name,
                     const Place& at, FileScan& out) {
  const ConfigLimits limits;
  switch (TextKindOf(name)) {
    case TextKind::kJson:
      // What the gate cannot read, it does not pass, wherever it sits.
      if (!JudgeJson(sc, bytes, name, 0, at, limits, out)) out.unparseable = true;
      break;
    case TextKind::kJinja:
      JudgeTemplateText(sc, {reinterpret_cast<const char*>(bytes.data()), bytes.size()}, 0, name, at,
                        limits, out);
      break;
    case TextKind::kPython:
      JudgePython(sc, bytes, at, out);
      break;
    case TextKind::kNone:
      break;
  }
}

void JudgePython(Scanner& sc, std::span<const uint8_t> text, const Place& at, FileScan& out) {
  out.findings.push_back(Placed(
      MakeFinding("MG-CODE-PYTHON", Severity::kHigh,
                  "Python source in the model: this model runs its own code under "
                  "trust_remote_code=True (transformers imports the modules config.json's auto_map "
                  "names); review it as code, not as weights",
                  at.member.empty() ? 0 : core::kNoOffset),
      at));
  sc.YaraMember(text, text.size(), "code", at);
}


}  // namespace modelgate::scanner::internal
