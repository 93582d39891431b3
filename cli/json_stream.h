// JsonStream: a JSON document written value by value (inspect's tensor
// list, convert's report), laid out as nlohmann's dump(2) would lay out
// the same tree.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli.h"
#include "modelgate/core.h"
#include "modelgate/scanner.h"

namespace modelgate::cli {

// JsonStream writes one JSON document value by value, laid out exactly as
// nlohmann's dump(2) lays out the same tree, without building the tree: a
// tree costs about 1 KB per tensor (1.1 GB for a 69 MB header of 1,000,000
// tensors), the stream a few bytes. Output reaches `out` in 64 KiB pieces.
class JsonStream {
 public:
  explicit JsonStream(std::ostream& out) : out_(out) {}
  void BeginObject() { Open('{'); }
  void EndObject() { Close('}'); }
  void BeginArray() { Open('['); }
  void EndArray() { Close(']'); }
  void Key(std::string_view key) {
    Separate();
    AppendString(key);
    buf_ += ": ";
    after_key_ = true;
  }
  void String(std::string_view s) {
    Separate();
    AppendString(s);
  }
  void Number(uint64_t v) {
    Separate();
    buf_ += std::to_string(v);
  }
  void Bool(bool v) {
    Separate();
    buf_ += v ? "true" : "false";
  }
  // Json writes a small tree (e.g. one finding) as dump(2) would inside
  // this document: its lines indented to the current depth.
  void Json(const nlohmann::ordered_json& v) {
    Separate();
    const std::string text =
        v.dump(2, ' ', false, nlohmann::json::error_handler_t::replace);
    const std::string indent(2 * empty_.size(), ' ');
    for (char c : text) {
      buf_ += c;
      if (c == '\n') buf_ += indent;
    }
  }
  void Member(std::string_view key, std::string_view s) {
    Key(key);
    String(s);
  }
  void Member(std::string_view key, uint64_t v) {
    Key(key);
    Number(v);
  }
  // Name writes `key` as the JSON report does (PutName in report.cc): a
  // name that is not UTF-8 escaped, its raw bytes in `<key>_bytes`.
  void Name(std::string_view key, const std::string& name) {
    Member(key, core::EscapeInvalidUtf8(name));
    if (std::string hex = NameBytes(name); !hex.empty()) Member(std::string(key) + "_bytes", hex);
  }
  // Finish ends the document with a newline and flushes; false when `out`
  // failed.
  bool Finish() {
    buf_ += '\n';
    Flush();
    out_.flush();
    return static_cast<bool>(out_);
  }

 private:
  static constexpr size_t kFlushBytes = 64 * 1024;

  // Separate starts a value: after a key nothing, else a newline (and a
  // comma after a sibling) and the indent.
  void Separate() {
    if (after_key_) {
      after_key_ = false;
      return;
    }
    if (empty_.empty()) return;
    buf_ += empty_.back() ? "\n" : ",\n";
    empty_.back() = false;
    buf_.append(2 * empty_.size(), ' ');
    if (buf_.size() >= kFlushBytes) Flush();
  }
  void Open(char c) {
    Separate();
    buf_ += c;
    empty_.push_back(true);
  }
  void Close(char c) {
    const bool empty = empty_.back();
    empty_.pop_back();
    if (!empty) {  // dump(2) writes {} and [] when nothing is inside
      buf_ += '\n';
      buf_.append(2 * empty_.size(), ' ');
    }
    buf_ += c;
  }
  void AppendString(std::string_view s) {
    // Printable ASCII without '"' or '\' needs no escape (most names).
    bool plain = true;
    for (char c : s) plain &= c >= 0x20 && c < 0x7F && c != '"' && c != '\\';
    if (plain) {
      buf_ += '"';
      buf_ += s;
      buf_ += '"';
      return;
    }
    // Else nlohmann's own escaping, so strings read exactly as before;
    // invalid UTF-8 left in a message becomes U+FFFD rather than an exception.
    buf_ += nlohmann::json(std::string(s)).dump(-1, ' ', false,
                                                  nlohmann::json::error_handler_t::replace);
  }
  void Flush() {
    out_.write(buf_.data(), static_cast<std::streamsize>(buf_.size()));
    buf_.clear();
  }

  std::ostream& out_;
  std::string buf_;
  std::vector<bool> empty_;  // per open container: nothing written in it yet
  bool after_key_ = false;
};

// FindingJson is one finding as the JSON report writes it (report.cc).
nlohmann::ordered_json FindingJson(const scanner::Finding& f);

}  // namespace modelgate::cli
