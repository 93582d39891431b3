// TarBuilder writes tar archives byte by byte for the tests: ustar headers
// with any field overridden, GNU long names, PAX records, raw bytes.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace mg_test {

struct TarHeader {
  std::string name = "a";
  uint64_t size = 0;
  char type = '0';
  std::string linkname;
  std::string prefix;
  std::string size_field;   // raw 12 bytes instead of the octal size, if set
  std::string mtime_field;  // raw 12 bytes instead of mtime 0, if set
  bool ustar = true;
  bool break_checksum = false;
  // The checksum tarfile also accepts: the sum of the bytes read as signed
  // char, written in signed octal ("-62000" when bytes >= 0x80 dominate).
  bool signed_checksum = false;
};

class TarBuilder {
 public:
  TarBuilder& Header(const TarHeader& h) {
    std::vector<uint8_t> b(512, 0);
    Put(&b, 0, h.name, 100);
    Put(&b, 100, "0000644", 8);
    Put(&b, 108, "0000000", 8);
    Put(&b, 116, "0000000", 8);
    if (!h.size_field.empty()) {
      for (size_t i = 0; i < 12 && i < h.size_field.size(); ++i) b[124 + i] = static_cast<uint8_t>(h.size_field[i]);
    } else {
      char buf[16];
      std::snprintf(buf, sizeof buf, "%011llo", static_cast<unsigned long long>(h.size));
      Put(&b, 124, buf, 12);
    }
    if (!h.mtime_field.empty()) {
      for (size_t i = 0; i < 12 && i < h.mtime_field.size(); ++i) b[136 + i] = static_cast<uint8_t>(h.mtime_field[i]);
    } else {
      Put(&b, 136, "00000000000", 12);
    }
    b[156] = static_cast<uint8_t>(h.type);
    Put(&b, 157, h.linkname, 100);
    if (h.ustar) {
      Put(&b, 257, std::string("ustar\0" "00", 8), 8);
    }
    Put(&b, 345, h.prefix, 155);
    for (int i = 148; i < 156; ++i) b[i] = ' ';
    long sum = 0;
    for (uint8_t c : b) sum += h.signed_checksum ? static_cast<int8_t>(c) : c;
    if (h.break_checksum) sum += 1;
    char cs[16];
    std::snprintf(cs, sizeof cs, sum < 0 ? "-%05lo" : "%06lo", static_cast<unsigned long>(sum < 0 ? -sum : sum));
    for (int i = 0; i < 6; ++i) b[148 + i] = static_cast<uint8_t>(cs[i]);
    b[154] = 0;
    b[155] = ' ';
    bytes_.insert(bytes_.end(), b.begin(), b.end());
    return *this;
  }
  // File: a regular member with its data, padded.
  TarBuilder& File(const std::string& name, const std::string& data, char type = '0') {
    TarHeader h;
    h.name = name;
    h.size = data.size();
    h.type = type;
    return Header(h).Data(data);
  }
  TarBuilder& Link(const std::string& name, const std::string& target, char type) {
    TarHeader h;
    h.name = name;
    h.type = type;
    h.linkname = target;
    return Header(h);
  }
  TarBuilder& Data(const std::string& data, bool pad = true) {
    bytes_.insert(bytes_.end(), data.begin(), data.end());
    if (pad) bytes_.resize(bytes_.size() + (512 - data.size() % 512) % 512, 0);
    return *this;
  }
  TarBuilder& LongName(const std::string& name, char type = 'L') {
    TarHeader h;
    h.name = "././@LongLink";
    h.type = type;
    h.size = name.size() + 1;
    return Header(h).Data(name + std::string(1, '\0'));
  }
  // Pax: one 'x' (or 'g') header holding the records.
  TarBuilder& Pax(const std::vector<std::pair<std::string, std::string>>& records, char type = 'x') {
    return PaxRaw(Records(records), type);
  }
  TarBuilder& PaxRaw(const std::string& body, char type = 'x') {
    TarHeader h;
    h.name = "././@PaxHeader";
    h.type = type;
    h.size = body.size();
    return Header(h).Data(body);
  }
  static std::string Records(const std::vector<std::pair<std::string, std::string>>& records) {
    std::string body;
    for (const auto& [k, v] : records) {
      const std::string rec = " " + k + "=" + v + "\n";
      size_t n = rec.size() + 1;
      while (std::to_string(n).size() + rec.size() != n) ++n;
      body += std::to_string(n) + rec;
    }
    return body;
  }
  TarBuilder& End() {
    bytes_.resize(bytes_.size() + 1024, 0);
    return *this;
  }
  TarBuilder& Raw(const std::string& s) {
    bytes_.insert(bytes_.end(), s.begin(), s.end());
    return *this;
  }
  std::vector<uint8_t> Build() const { return bytes_; }

 private:
  static void Put(std::vector<uint8_t>* b, size_t at, const std::string& s, size_t max) {
    for (size_t i = 0; i < s.size() && i < max; ++i) (*b)[at + i] = static_cast<uint8_t>(s[i]);
  }
  std::vector<uint8_t> bytes_;
};

}  // namespace mg_test
