// fuzz_report: the report writers (text, JSON, SARIF) on reports whose
// names, messages and offsets come from the input. Invariants:
//   - the JSON and SARIF documents parse; every path and member reads back:
//     `<field>_bytes` is present exactly when the name is not UTF-8 and
//     decodes to its bytes, else `<field>` is the name itself; SARIF artifact
//     URIs hold only unreserved characters, '/', ':' and %XX;
//   - the text report is valid UTF-8 with no C0 byte but '\n', no DEL, no C1
//     (U+0080-U+009F) and no bidi control or line separator, and has exactly
//     the lines its files, key names and findings make (no forged line).
//
// Input (all reads past the end give zeros or empty strings):
//   u8 files-1 (& 3); per file: str path, u8 format, u8 verdict, u64 size,
//   u8 key count (& 3) then str key name each, u8 finding count (& 7) then per
//   finding: str id, u8 severity, str message, u64 offset, str member,
//   u64 member_offset, str opcode, str global.
//   str = u8 length, then that many bytes; u64 = 8 bytes little-endian.
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli.h"

namespace {

namespace core = modelgate::core;
namespace cli = modelgate::cli;
namespace scanner = modelgate::scanner;

class Input {
 public:
  Input(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  uint8_t U8() { return pos_ < size_ ? data_[pos_++] : 0; }
  uint64_t U64() {
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(U8()) << (8 * i);
    return v;
  }
  std::string Str() {
    size_t n = U8();
    n = std::min(n, size_ - pos_);
    std::string s(reinterpret_cast<const char*>(data_ + pos_), n);
    pos_ += n;
    return s;
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

// Checks `o[key]` and `o[key + "_bytes"]` against the original `name`.
void CheckName(const nlohmann::json& o, const std::string& key, const std::string& name) {
  if (!o.contains(key) || !o[key].is_string()) __builtin_trap();
  const std::string bytes_key = key + "_bytes";
  if (core::IsUtf8(name)) {
    if (o.contains(bytes_key) || o[key].get<std::string>() != name) __builtin_trap();
    return;
  }
  if (!o.contains(bytes_key) || !o[bytes_key].is_string()) __builtin_trap();
  const std::string hex = o[bytes_key].get<std::string>();
  if (hex.size() != 2 * name.size()) __builtin_trap();
  std::vector<uint8_t> raw(name.size());
  if (!core::ParseHexLower(hex, raw)) __builtin_trap();
  if (std::memcmp(raw.data(), name.data(), name.size()) != 0) __builtin_trap();
  if (o[key].get<std::string>() != core::EscapeInvalidUtf8(name)) __builtin_trap();
}

// Decodes one UTF-8 sequence at s[i] (s is known to be valid UTF-8).
uint32_t Next(const std::string& s, size_t* i) {
  const auto c = static_cast<uint8_t>(s[*i]);
  size_t len = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
  uint32_t cp = len == 1 ? c : c & (0x7F >> len);
  for (size_t k = 1; k < len; ++k) cp = (cp << 6) | (static_cast<uint8_t>(s[*i + k]) & 0x3F);
  *i += len;
  return cp;
}

void CheckTerminalText(const std::string& text) {
  if (!core::IsUtf8(text)) __builtin_trap();
  for (size_t i = 0; i < text.size();) {
    const uint32_t cp = Next(text, &i);
    if ((cp < 0x20 && cp != '\n') || cp == 0x7F || (cp >= 0x80 && cp <= 0x9F)) __builtin_trap();
    if (cp == 0x061C || cp == 0x200E || cp == 0x200F || (cp >= 0x2028 && cp <= 0x202E) ||
        (cp >= 0x2066 && cp <= 0x2069)) {
      __builtin_trap();
    }
  }
}

bool UriChar(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
         std::strchr("-._~/%:", c) != nullptr;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Input in(data, size);
  cli::Report report;
  const size_t files = (in.U8() & 3) + 1;
  size_t want_lines = 1 + 1 + 1;  // header, blank, summary
  for (size_t i = 0; i < files; ++i) {
    cli::FileReport f;
    f.scan.path = in.Str();
    f.scan.format = static_cast<scanner::Format>(
        in.U8() % (static_cast<unsigned>(scanner::kLastFormat) + 1));
    f.verdict = static_cast<cli::Verdict>(in.U8() % 3);
    f.scan.size = in.U64();
    const size_t keys = in.U8() & 3;
    if (keys > 0) f.signature.status = "valid";
    for (size_t k = 0; k < keys; ++k) {
      f.signature.key_ids.push_back(std::string(32, 'a'));
      f.signature.key_names.push_back(in.Str());
    }
    const size_t findings = in.U8() & 7;
    for (size_t k = 0; k < findings; ++k) {
      scanner::Finding fd;
      fd.id = in.Str();
      fd.severity = static_cast<core::Severity>(in.U8() % 5);
      fd.message = in.Str();
      fd.offset = in.U64();
      fd.member = in.Str();
      fd.member_offset = in.U64();
      fd.opcode = in.Str();
      fd.global = in.Str();
      f.scan.findings.push_back(std::move(fd));
    }
    want_lines += 1 + keys + findings;
    report.files.push_back(std::move(f));
  }
  report.summary = cli::Summarize(report.files);

  const std::string text = cli::RenderText(report, /*color=*/false);
  CheckTerminalText(text);
  size_t lines = 0;
  for (char c : text) lines += c == '\n';
  if (lines != want_lines) __builtin_trap();
  (void)cli::RenderText(report, /*color=*/true);

  const auto doc = nlohmann::json::parse(cli::RenderJson(report), nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || doc["files"].size() != report.files.size()) __builtin_trap();
  for (size_t i = 0; i < report.files.size(); ++i) {
    const auto& f = report.files[i];
    const auto& j = doc["files"][i];
    CheckName(j, "path", f.scan.path);
    if (j["findings"].size() != f.scan.findings.size()) __builtin_trap();
    for (size_t k = 0; k < f.scan.findings.size(); ++k) {
      const auto& member = f.scan.findings[k].member;
      if (!member.empty()) CheckName(j["findings"][k], "member", member);
    }
  }

  // kNote: every finding is a result, one per finding in order.
  const auto sarif = nlohmann::json::parse(cli::RenderSarif(report, cli::SarifLevel::kNote), nullptr, false);
  if (sarif.is_discarded()) __builtin_trap();
  size_t result = 0;
  for (const auto& f : report.files) {
    for (const auto& fd : f.scan.findings) {
      const auto& r = sarif["runs"][0]["results"][result++];
      const std::string uri =
          r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"].get<std::string>();
      for (char c : uri) {
        if (!UriChar(c)) __builtin_trap();
      }
      if (!fd.member.empty()) CheckName(r["properties"], "member", fd.member);
    }
  }
  if (sarif["runs"][0]["results"].size() != result) __builtin_trap();
  return 0;
}
