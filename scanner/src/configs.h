// Configs, templates and code: the text files a model repository carries
// next to its weights, judged as the libraries that read them would use
// them. transformers json.loads every *.json it is given (config.json,
// tokenizer_config.json, generation_config.json, chat_template.json...),
// imports the modules a config's `auto_map` names (and diffusers the
// `custom_pipelines` ones) when trust_remote_code=True, and renders a chat
// template in a Jinja2 sandbox; llama.cpp bindings render GGUF's
// tokenizer.chat_template. None of them is a weight file, and each can run
// code. Internal to the scanner.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "judge.h"

namespace modelgate::scanner::internal {

// ConfigLimits bound what one text file may cost. Each has a test at N and
// N+1 (tests/scanner/configs_test.cc); past one the file is MG-CFG-LIMIT
// (high): not judged, so not passed.
struct ConfigLimits {
  // A JSON document is parsed into a DOM (duplicate keys must be seen at
  // every level): ~10x its size in memory. The largest real tokenizer.json
  // files are ~35 MB.
  uint64_t max_json_bytes = 64ull << 20;
  // Objects and arrays nested deeper than this (Keras functional configs
  // nest layers in layers: tens of levels; CPython's json recursion limit
  // is ~1000).
  size_t max_json_depth = 256;
  // A chat template's own limits are jinja.h's TemplateLimits.
};

// EndsWithNoCase: `s` ends with `suffix` (lowercase ASCII), ignoring the
// case of ASCII letters in `s`: how file names claim a loader.
bool EndsWithNoCase(std::string_view s, std::string_view suffix);

// TextKind is which text loader a file name claims, from its extension.
enum class TextKind : uint8_t { kNone, kJson, kJinja, kPython };
TextKind TextKindOf(std::string_view name);

// JudgeJson judges `text` as strict JSON (RFC 8259, duplicate keys an error
// at any depth, as in safetensors headers) and, when it parses, what a
// loader does with its keys: `auto_map` / `custom_pipelines` (MG-CODE-*),
// `chat_template` (the template rules), a Keras model config. Returns false
// when it is not JSON at all (the finding says why). `base` is the text's
// offset in the file (kNoOffset when it is not file-placed).
bool JudgeJson(Scanner& sc, std::span<const uint8_t> text, std::string_view name, uint64_t base,
               const Place& at, const ConfigLimits& limits, FileScan& out);

// JudgeTemplateText runs the template rules over one template and YARA
// ("metadata" scope) over its text.
void JudgeTemplateText(Scanner& sc, std::string_view text, uint64_t base, std::string_view where,
                       const Place& at, const ConfigLimits& limits, FileScan& out);

// JudgePython: a .py file is code a loader imports (trust_remote_code):
// MG-CODE-PYTHON, and YARA over it in scope "code".
void JudgePython(Scanner& sc, std::span<const uint8_t> text, const Place& at, FileScan& out);

}  // namespace modelgate::scanner::internal
