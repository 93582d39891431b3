// The model formats besides the pickle family and safetensors, each judged
// by its reader (gguf.cc, onnx.cc, keras.cc, sevenzip.cc) and wired into
// the loader models here: what their metadata carries (GGUF chat templates
// and strings, Keras configs) goes through the same template and YARA
// checks as a repository's configs (configs.cc). Each reader fails closed:
// a file it recognises but cannot read to its end is unparseable, so it is
// rejected whatever --fail-on says. Internal to the scanner.
#pragma once

#include <span>
#include <string_view>

#include "judge.h"

namespace modelgate::scanner::internal {

// JudgeGguf: the GGUF header (every count, string, tensor info and the data
// section's layout), its chat templates (tokenizer.chat_template and the
// named tokenizer.chat_template.* ones) and YARA over its metadata strings.
void JudgeGguf(Scanner& sc, std::span<const uint8_t> file, const Place& at, FileScan& out);

// JudgeOnnx: the whole ModelProto (external data paths, custom operator
// domains, nested graphs, initializer sizes).
void JudgeOnnx(Scanner& sc, std::span<const uint8_t> file, FileScan& out);


// SevenZip (declared in judge.h): every member of a 7z archive, decoded
// within the file's budget and judged as what it is (by content, and by
// name for configs, templates and code).

}  // namespace modelgate::scanner::internal
