#include "formats.h"

#include <string>
#include <vector>

#include "configs.h"
#include "gguf.h"
#include "keras.h"
#include "onnx.h"
#include "sevenzip.h"

namespace modelgate::scanner::internal {
namespace {

// IsChatTemplateKey: the keys llama.cpp reads templates from
// ("tokenizer.chat_template", and "tokenizer.chat_template.<name>" for the
// named ones such as tool_use).
bool IsChatTemplateKey(std::string_view key) {
  constexpr std::string_view kKey = "tokenizer.chat_template";
  return key == kKey || (key.size() > kKey.size() && key.substr(0, kKey.size()) == kKey &&
                         key[kKey.size()] == '.');
}

}  // namespace

void JudgeGguf(Scanner& sc, std::span<const uint8_t> file, const Place& at, FileScan& out) {
  std::vector<Finding> f;
  auto info = ParseGguf(file, GgufLimits{}, &f);
  for (auto& x : f) out.findings.push_back(Placed(std::move(x), at));
  if (!info) {
    out.unparseable = true;  // not read to its end: not judged, not passed
    return;
  }
  // The string's bytes follow its length field (u32 in v1, u64 after).
  const uint64_t length_bytes = info->version == 1 ? 4 : 8;
  const ConfigLimits limits;
  std::string text;
  for (const GgufString& s : info->strings) {
    if (IsChatTemplateKey(s.key)) {
      JudgeTemplateText(sc, s.value, s.offset + length_bytes, "GGUF " + s.key, at, limits, out);
      continue;  // its text was scanned there, at its own offset
    }
    // One "key<TAB>value" line per string, as safetensors metadata is
    // scanned: offsets in this text are not file offsets.
    text += s.key;
    text += '\t';
    text += s.value;
    text += '\n';
  }
  const size_t before = out.findings.size();
  sc.Yara({reinterpret_cast<const uint8_t*>(text.data()), text.size()}, "metadata", at);
  for (size_t i = before; i < out.findings.size(); ++i) {
    out.findings[i].offset = core::kNoOffset;
    out.findings[i].member_offset = core::kNoOffset;
  }
  if (sc.YaraAll() && info->data_start < file.size()) {
    sc.Yara(file.subspan(static_cast<size_t>(info->data_start)), "data", at, info->data_start);
  }
}

void JudgeOnnx(Scanner& sc, std::span<const uint8_t> file, FileScan& out) {
  (void)sc;
  std::vector<Finding> f;
  auto info = AnalyzeOnnx(file, OnnxLimits{}, &f);
  for (auto& x : f) out.findings.push_back(std::move(x));
  if (!info) out.unparseable = true;
}

void JudgeHdf5(Scanner& sc, std::span<const uint8_t> file, const Place& at, FileScan& out) {
  std::vector<Finding> f;
  auto config = ReadH5ModelConfig(file, &f);
  for (auto& x : f) out.findings.push_back(Placed(std::move(x), at));
  if (!config) {
    out.unparseable = true;
    return;
  }
  if (config->empty()) return;  // weights only
  f.clear();
  // The attribute's bytes are libhdf5's copy, not a file range.
  AnalyzeKerasConfig(*config, core::kNoOffset, "the model_config attribute", &f);
  for (auto& x : f) out.findings.push_back(Placed(std::move(x), at));
  const size_t before = out.findings.size();
  sc.Yara({reinterpret_cast<const uint8_t*>(config->data()), config->size()}, "metadata", at);
  for (size_t i = before; i < out.findings.size(); ++i) {
    out.findings[i].offset = core::kNoOffset;
    out.findings[i].member_offset = core::kNoOffset;
  }
}

void SevenZip(Scanner& sc, std::span<const uint8_t> bytes, const Place& at, uint64_t depth,
              FileScan& out) {
  std::vector<Finding> f;
  const bool ok = ReadSevenZip(bytes, sc.budget(), &f,
                               [&](std::string_view name, std::span<const uint8_t> member) {
    const std::string path = (at.member.empty() ? "" : at.member + "!") + std::string(name);
    const Place inner{path, 0, false};
    if (IsTextMember(name)) {
      JudgeTextMember(sc, member, core::BaseName(name), inner, out);
    } else {
      sc.Contents(member, inner, depth + 1);
    }
  });
  for (auto& x : f) out.findings.push_back(Placed(std::move(x), at));
  // A recognised container that cannot be unpacked is not judged.
  if (!ok) out.unparseable = true;
}

}  // namespace modelgate::scanner::internal
