// StBuilder crafts safetensors files in memory, valid or hostile, for tests.
// Header-only. The header text is either given raw (Header()) or built from
// metadata and tensor entries; the length field, padding, data bytes and
// trailing bytes can each be set independently of what the header claims.
#pragma once

#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "modelgate/core.h"

namespace modelgate::testing {

// JsonQuote returns `s` as a JSON string literal (quotes included), escaping
// only what JSON requires: '"', '\\' and bytes below 0x20.
inline std::string JsonQuote(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    auto u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (u < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", u);
      out += buf;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

// ShapeJson renders a shape as a compact JSON array.
inline std::string ShapeJson(const std::vector<uint64_t>& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) out += ',';
    out += std::to_string(shape[i]);
  }
  return out + "]";
}

// StBuilder builds one file. Unless overridden, the length field is the
// header size (after padding) and the data section is as long as the largest
// `end` among the entries, filled with a byte pattern.
class StBuilder {
 public:
  // Header sets the raw header text; entries and metadata are then ignored.
  StBuilder& Header(std::string text) {
    raw_header_ = std::move(text);
    return *this;
  }
  // HeaderBytes makes the header "{}" padded with spaces to `n` bytes.
  StBuilder& HeaderBytes(size_t n) {
    std::string text = "{}";
    if (n > text.size()) text.append(n - text.size(), ' ');
    return Header(std::move(text));
  }
  // Metadata adds one __metadata__ entry (kept in insertion order).
  StBuilder& Metadata(std::string key, std::string value) {
    metadata_.emplace_back(std::move(key), std::move(value));
    return *this;
  }
  // Entry adds a tensor entry with explicit data_offsets.
  StBuilder& Entry(std::string name, std::string dtype,
                   std::vector<uint64_t> shape, uint64_t begin, uint64_t end) {
    std::string body = "{\"dtype\":" + JsonQuote(dtype) +
                       ",\"shape\":" + ShapeJson(shape) +
                       ",\"data_offsets\":[" + std::to_string(begin) + "," +
                       std::to_string(end) + "]}";
    return RawEntry(JsonQuote(name), std::move(body), end);
  }
  // Tensor adds a tensor entry laid out right after the largest `end` so far.
  StBuilder& Tensor(std::string name, std::string dtype,
                    std::vector<uint64_t> shape) {
    modelgate::core::Dtype d{};
    uint64_t bits = 8;
    if (modelgate::core::ParseDtype(dtype, &d)) bits = modelgate::core::DtypeBits(d);
    uint64_t count = 1;
    for (uint64_t dim : shape) count *= dim;
    uint64_t bytes = count * bits / 8;
    uint64_t begin = auto_data_bytes_;
    return Entry(std::move(name), std::move(dtype), std::move(shape), begin,
                 begin + bytes);
  }
  // RawEntry adds `key_json: value_json` verbatim as a top-level member.
  // `data_end` widens the default data section.
  StBuilder& RawEntry(std::string key_json, std::string value_json,
                      uint64_t data_end = 0) {
    entries_.emplace_back(std::move(key_json), std::move(value_json));
    if (data_end > auto_data_bytes_) auto_data_bytes_ = data_end;
    return *this;
  }
  // MetadataRaw sets the __metadata__ value verbatim (e.g. "null").
  StBuilder& MetadataRaw(std::string value_json) {
    metadata_raw_ = std::move(value_json);
    return *this;
  }
  // Pad appends `n` bytes of `fill` after the header text.
  StBuilder& Pad(size_t n, char fill = ' ') {
    padding_.append(n, fill);
    return *this;
  }
  // AlignTo8 pads with spaces so the header size is a multiple of 8, as the
  // reference writer does.
  StBuilder& AlignTo8() {
    align8_ = true;
    return *this;
  }
  // LengthField overrides the 8-byte header length.
  StBuilder& LengthField(uint64_t n) {
    length_field_ = n;
    return *this;
  }
  // DataBytes sets the data section size (pattern-filled).
  StBuilder& DataBytes(uint64_t n) {
    data_bytes_ = n;
    return *this;
  }
  // Data sets the data section bytes exactly.
  StBuilder& Data(std::vector<uint8_t> bytes) {
    data_ = std::move(bytes);
    return *this;
  }
  // Trailing appends bytes after the data section.
  StBuilder& Trailing(std::string_view bytes) {
    trailing_.insert(trailing_.end(), bytes.begin(), bytes.end());
    return *this;
  }

  // HeaderText is the header as written (padding included).
  std::string HeaderText() const {
    std::string text;
    if (raw_header_) {
      text = *raw_header_;
    } else {
      text = "{";
      bool first = true;
      if (metadata_raw_ || !metadata_.empty()) {
        text += "\"__metadata__\":";
        if (metadata_raw_) {
          text += *metadata_raw_;
        } else {
          text += "{";
          for (size_t i = 0; i < metadata_.size(); ++i) {
            if (i) text += ',';
            text += JsonQuote(metadata_[i].first) + ":" + JsonQuote(metadata_[i].second);
          }
          text += "}";
        }
        first = false;
      }
      for (const auto& [key, value] : entries_) {
        if (!first) text += ',';
        first = false;
        text += key + ":" + value;
      }
      text += "}";
    }
    text += padding_;
    if (align8_) text.append((8 - text.size() % 8) % 8, ' ');
    return text;
  }
  // HeaderSize is N as built (not the overridden length field).
  uint64_t HeaderSize() const { return HeaderText().size(); }
  // DataStart is 8 + N.
  uint64_t DataStart() const { return 8 + HeaderSize(); }
  // At is the absolute file offset of the first occurrence of `needle` in
  // the header at or after header position `from` (8 + index); fails the
  // caller's expectations loudly with UINT64_MAX if absent.
  uint64_t At(std::string_view needle, size_t from = 0) const {
    size_t pos = HeaderText().find(needle, from);
    return pos == std::string::npos ? UINT64_MAX : 8 + pos;
  }
  // AtNth is At for the `nth` (0-based) occurrence.
  uint64_t AtNth(std::string_view needle, size_t nth) const {
    std::string text = HeaderText();
    size_t pos = text.find(needle);
    while (nth-- > 0 && pos != std::string::npos) pos = text.find(needle, pos + 1);
    return pos == std::string::npos ? UINT64_MAX : 8 + pos;
  }
  // DataSize is the data section size as built.
  uint64_t DataSize() const {
    if (data_) return data_->size();
    return data_bytes_ ? *data_bytes_ : auto_data_bytes_;
  }

  std::vector<uint8_t> Build() const {
    std::string text = HeaderText();
    uint64_t n = length_field_ ? *length_field_ : text.size();
    std::vector<uint8_t> out;
    out.reserve(8 + text.size() + DataSize() + trailing_.size());
    for (int i = 0; i < 8; ++i) out.push_back(static_cast<uint8_t>(n >> (8 * i)));
    out.insert(out.end(), text.begin(), text.end());
    if (data_) {
      out.insert(out.end(), data_->begin(), data_->end());
    } else {
      uint64_t size = DataSize();
      for (uint64_t i = 0; i < size; ++i) out.push_back(static_cast<uint8_t>(i * 7 + 1));
    }
    out.insert(out.end(), trailing_.begin(), trailing_.end());
    return out;
  }

 private:
  std::optional<std::string> raw_header_;
  std::optional<std::string> metadata_raw_;
  std::vector<std::pair<std::string, std::string>> metadata_;
  std::vector<std::pair<std::string, std::string>> entries_;
  std::string padding_;
  bool align8_ = false;
  std::optional<uint64_t> length_field_;
  std::optional<uint64_t> data_bytes_;
  std::optional<std::vector<uint8_t>> data_;
  std::vector<uint8_t> trailing_;
  uint64_t auto_data_bytes_ = 0;  // largest `end` among the entries
};

// Bytes converts a string literal (which may hold NULs) to file bytes.
inline std::vector<uint8_t> Bytes(std::string_view s) {
  return std::vector<uint8_t>(s.begin(), s.end());
}

}  // namespace modelgate::testing

using modelgate::testing::StBuilder;
