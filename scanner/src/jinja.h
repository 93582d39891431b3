// Static analysis of Jinja2 chat templates (tokenizer_config.json
// "chat_template", chat_template.jinja, GGUF tokenizer.chat_template).
//
// A template is code: transformers renders it in jinja2's
// ImmutableSandboxedEnvironment, but other loaders have used a plain
// jinja2.Environment (CVE-2024-34359, llama-cpp-python), where
// `cycler.__init__.__globals__.os` runs commands. The analyzer lexes and
// parses the template as jinja2 3.1 does (its lexer rules, its recursive-
// descent grammar, string escapes decoded as Python's unicode-escape) into an
// AST and judges what the template can reach: attributes, calls, filters,
// tests and other files. docs/templates.md lists what is flagged and why.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "modelgate/scanner.h"

namespace modelgate::scanner::internal {

// Real chat templates are a few KiB (the largest with tool-calling logic are
// tens of KiB); a MiB is far past any and still cheap to lex.
inline constexpr uint64_t kMaxTemplateBytes = 1u << 20;
// Nesting of statements and expressions, and the height of the AST. jinja2's
// own recursive parser and the Python compiler behind it fail long before a
// few hundred levels; real templates stay under 40.
inline constexpr uint32_t kMaxTemplateDepth = 200;
// Tokens of one template (a 1 MiB template of short tokens has fewer).
inline constexpr uint64_t kMaxTemplateTokens = 200'000;
// Findings of one id listed per template: a hostile template repeating one
// construct a thousand times is judged by the first few; the last listed
// one says how many more there were.
inline constexpr uint64_t kMaxTemplateFindingsPerId = 20;

struct TemplateLimits {
  uint64_t max_template_bytes = kMaxTemplateBytes;
  uint32_t max_depth = kMaxTemplateDepth;
  uint64_t max_tokens = kMaxTemplateTokens;
};

// AnalyzeTemplate parses `text` (one Jinja2 template, UTF-8) and appends
// MG-TMPL-* findings to `findings`. Each finding's offset is base + the byte
// offset of the construct in `text` (kNoOffset when base is kNoOffset).
// `where` names the template in messages ("chat_template of
// tokenizer_config.json"). A template that cannot be parsed, or that breaks
// a limit, gets MG-TMPL-UNPARSEABLE or MG-TMPL-LIMIT (high): what could not
// be read was not judged. Never allocates more than the limits allow.
void AnalyzeTemplate(std::string_view text, uint64_t base, std::string_view where,
                     const TemplateLimits& limits, std::vector<Finding>* findings);

}  // namespace modelgate::scanner::internal
