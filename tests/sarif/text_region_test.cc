// Line and column of findings in text-like files (scanner/src/text_region.h):
// the counting, the limit, and what is not text.
#include "text_region.h"

#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "source.h"

namespace ms = modelgate::scanner;
namespace mi = modelgate::scanner::internal;

namespace {

std::vector<uint8_t> Bytes(const std::string& s) { return {s.begin(), s.end()}; }

mi::TextPosition At(const std::string& text, uint64_t offset,
                    uint64_t limit = mi::kMaxTextRegionOffsetBytes) {
  const auto bytes = Bytes(text);
  ms::MemorySource src(bytes);
  const uint64_t offsets[] = {offset};
  return mi::TextPositions(src, offsets, limit).at(0);
}

// Source that counts the bytes read, to check the bound.
class CountingSource : public ms::Source {
 public:
  explicit CountingSource(uint64_t size) : size_(size) {}
  uint64_t size() const override { return size_; }
  modelgate::core::Status Read(uint64_t offset, std::span<uint8_t> out) const override {
    if (offset > size_ || out.size() > size_ - offset) {
      return modelgate::core::Error{modelgate::core::Code::kStTruncated, offset, "past the end"};
    }
    for (auto& b : out) b = 'a';
    read_bytes += out.size();
    return modelgate::core::OkStatus();
  }
  mutable uint64_t read_bytes = 0;

 private:
  uint64_t size_;
};

}  // namespace

TEST_CASE("text region: lines and 1-based columns", "[sarif][region]") {
  const std::string t = "ab\ncd\n\nef";
  CHECK(At(t, 0).line == 1);
  CHECK(At(t, 0).column == 1);
  CHECK(At(t, 1).column == 2);
  CHECK(At(t, 3).line == 2);
  CHECK(At(t, 3).column == 1);
  CHECK(At(t, 4).column == 2);
  CHECK(At(t, 7).line == 4);
  CHECK(At(t, 7).column == 1);
  // The end of the file is a position (an empty last line).
  CHECK(At(t, t.size()).line == 4);
  CHECK(At(t, t.size()).column == 3);
}

TEST_CASE("text region: CR, LF and CRLF each end one line", "[sarif][region]") {
  CHECK(At("a\r\nb", 3).line == 2);
  CHECK(At("a\r\nb", 3).column == 1);
  CHECK(At("a\rb", 2).line == 2);
  CHECK(At("a\n\rb", 3).line == 3);  // LF then CR: two lines
  CHECK(At("a\r\n\r\nb", 5).line == 3);
}

TEST_CASE("text region: columns count UTF-16 code units", "[sarif][region]") {
  // é is 2 bytes and 1 unit; 😀 is 4 bytes and 2 units (a surrogate pair);
  // 日 is 3 bytes and 1 unit.
  const std::string t = "x\xC3\xA9\xF0\x9F\x98\x80\xE6\x97\xA5z";
  CHECK(At(t, 1).column == 2);
  CHECK(At(t, 3).column == 3);
  CHECK(At(t, 7).column == 5);
  CHECK(At(t, 10).column == 6);
  // Inside a character: placed at that character.
  CHECK(At(t, 2).column == 2);
  CHECK(At(t, 5).column == 3);
  CHECK(At(t, 8).column == 5);
}

TEST_CASE("text region: binary bytes give no position", "[sarif][region]") {
  CHECK(At(std::string("ab\0cd", 5), 4).line == 0);
  CHECK(At("ab\xFF"
           "cd",
           4)
            .line == 0);  // not a UTF-8 byte
  CHECK(At("ab\xC3"
           "cd",
           4)
            .line == 0);  // lead byte without continuation
  CHECK(At("ab\x80"
           "cd",
           4)
            .line == 0);  // stray continuation
  CHECK(At("ab\xC0\x80"
           "cd",
           5)
            .line == 0);  // overlong lead
  // Binary after the offset is not read.
  CHECK(At(std::string("ab\ncd\0\xFF", 7), 4).line == 2);
  // A NUL before the last offset unplaces every offset (the file is binary).
  const std::string t("a\nb\0c", 5);
  ms::MemorySource src(
      std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(t.data()), t.size()));
  const uint64_t offsets[] = {2, 4};
  const auto p = mi::TextPositions(src, offsets);
  CHECK(p.at(0).line == 0);
  CHECK(p.at(1).line == 0);
}

TEST_CASE("text region: several offsets, one pass, past the file unplaced", "[sarif][region]") {
  const std::string t = "one\ntwo\nthree";
  const auto bytes = Bytes(t);
  ms::MemorySource src(bytes);
  const uint64_t offsets[] = {0, 4, 5, 8, 100};
  const auto p = mi::TextPositions(src, offsets);
  REQUIRE(p.size() == 5);
  CHECK((p[0].line == 1 && p[0].column == 1));
  CHECK((p[1].line == 2 && p[1].column == 1));
  CHECK((p[2].line == 2 && p[2].column == 2));
  CHECK((p[3].line == 3 && p[3].column == 1));
  CHECK(p[4].line == 0);
  // Unsorted input is refused rather than misplaced.
  const uint64_t unsorted[] = {5, 4};
  const auto q = mi::TextPositions(src, unsorted);
  CHECK(q.at(0).line == 0);
  CHECK(q.at(1).line == 0);
}

TEST_CASE("text region: kMaxTextRegionOffsetBytes at the limit and past it", "[sarif][region]") {
  CHECK(mi::kMaxTextRegionOffsetBytes == uint64_t{16} << 20);
  const uint64_t limit = mi::kMaxTextRegionOffsetBytes;
  CountingSource src(limit + 2);
  {
    const uint64_t offsets[] = {limit};
    const auto p = mi::TextPositions(src, offsets);
    CHECK(p.at(0).line == 1);
    CHECK(p.at(0).column == limit + 1);
    CHECK(src.read_bytes == limit);  // only the bytes before the offset
  }
  src.read_bytes = 0;
  {
    const uint64_t offsets[] = {limit + 1};
    const auto p = mi::TextPositions(src, offsets);
    CHECK(p.at(0).line == 0);
    CHECK(src.read_bytes == 0);  // nothing read past the limit
  }
  src.read_bytes = 0;
  {
    // One offset past the limit leaves the others placed.
    const uint64_t offsets[] = {3, limit + 1};
    const auto p = mi::TextPositions(src, offsets);
    CHECK(p.at(0).column == 4);
    CHECK(p.at(1).line == 0);
    CHECK(src.read_bytes == 3);
  }
}

TEST_CASE("text region: AddTextRegions only for text-like files' own bytes", "[sarif][region]") {
  const std::string t = "{\n  \"a\": 1\n}\n";
  const auto bytes = Bytes(t);
  ms::MemorySource src(bytes);
  ms::FileScan scan;
  scan.format = ms::Format::kUnknown;
  scan.findings.push_back(ms::MakeFinding("MG-YARA-X", modelgate::core::Severity::kHigh, "m", 4));
  scan.findings.push_back(ms::MakeFinding("MG-FMT-UNKNOWN", modelgate::core::Severity::kInfo, "m"));
  scan.findings.push_back(
      ms::MakeFinding("MG-YARA-X", modelgate::core::Severity::kHigh, "m", 4, "inner"));
  scan.findings.push_back(ms::MakeFinding("MG-YARA-Y", modelgate::core::Severity::kHigh, "m", 4));
  mi::AddTextRegions(src, scan);
  CHECK(scan.findings[0].line == 2);
  CHECK(scan.findings[0].column == 3);
  CHECK(scan.findings[1].line == 0);  // no offset
  CHECK(scan.findings[2].line == 0);  // in a member
  CHECK(scan.findings[3].line == 2);  // same offset, same place

  for (ms::Format f : {ms::Format::kSafetensors, ms::Format::kPickle, ms::Format::kZip}) {
    ms::FileScan bin;
    bin.format = f;
    bin.findings.push_back(ms::MakeFinding("MG-YARA-X", modelgate::core::Severity::kHigh, "m", 4));
    mi::AddTextRegions(src, bin);
    CHECK(bin.findings[0].line == 0);
  }
  ms::FileScan lfs;
  lfs.format = ms::Format::kLfsPointer;
  lfs.findings.push_back(
      ms::MakeFinding("MG-FMT-LFS-POINTER", modelgate::core::Severity::kHigh, "m", 0));
  mi::AddTextRegions(src, lfs);
  CHECK(lfs.findings[0].line == 1);
  CHECK(lfs.findings[0].column == 1);
}
