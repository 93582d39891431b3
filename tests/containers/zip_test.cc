#include <catch2/catch.hpp>

#include <algorithm>

#include "support/zip_builder.h"
#include "zip.h"

namespace sc = modelgate::scanner;

namespace {

struct Read {
  sc::ZipArchive zip;
  std::vector<sc::Finding> findings;
};

Read ReadBytes(const std::vector<uint8_t>& bytes, sc::ZipLimits limits = {}) {
  sc::MemorySource src(bytes);
  Read r;
  auto z = sc::ReadZip(src, limits, &r.findings);
  REQUIRE(z.ok());
  r.zip = std::move(z).value();
  return r;
}

std::vector<std::string> Ids(const std::vector<sc::Finding>& f) {
  std::vector<std::string> ids;
  for (const auto& x : f) ids.push_back(x.id);
  return ids;
}

bool Has(const std::vector<sc::Finding>& f, const std::string& id) {
  auto ids = Ids(f);
  return std::find(ids.begin(), ids.end(), id) != ids.end();
}

std::vector<uint8_t> Bytes(std::string_view s) { return {s.begin(), s.end()}; }

}  // namespace

TEST_CASE("a clean archive reads with no findings and extracts", "[zip]") {
  ZipBuilder b;
  b.Add("archive/data.pkl", "\x80\x02}q\x00.").Add("archive/data/0", std::string(64, 'x'), true);
  auto bytes = b.Build();
  auto r = ReadBytes(bytes);
  CHECK(r.findings.empty());
  REQUIRE(r.zip.directory_ok);
  REQUIRE(r.zip.entries.size() == 2);
  CHECK(r.zip.entries[0].name == "archive/data.pkl");
  sc::MemorySource src(bytes);
  std::vector<sc::Finding> f;
  auto m = sc::ExtractZipMember(src, r.zip.entries[1], 1 << 20, &f);
  REQUIRE(m.ok());
  REQUIRE(m.value().has_value());
  CHECK(*m.value() == std::vector<uint8_t>(64, 'x'));
  CHECK(f.empty());
}

TEST_CASE("local and central names that differ are critical", "[zip]") {
  ZipBuilder b;
  b.Add("archive/data.pkl", "x").Last().local_name = "archive/evil.pkl";
  auto r = ReadBytes(b.Build());
  REQUIRE(Has(r.findings, "MG-ZIP-NAME-MISMATCH"));
  CHECK(r.findings[0].severity == modelgate::core::Severity::kCritical);
  CHECK(r.findings[0].offset == 0);
}

TEST_CASE("duplicate member names are critical", "[zip]") {
  ZipBuilder b;
  b.Add("archive/data.pkl", "a").Add("archive/data.pkl", "b");
  CHECK(Has(ReadBytes(b.Build()).findings, "MG-ZIP-DUPLICATE-NAME"));
}

TEST_CASE("unsafe member names", "[zip]") {
  for (const char* name : {"../evil.pkl", "a/../../b", "/etc/passwd", "C:evil", "a\\b"}) {
    ZipBuilder b;
    b.Add(name, "x");
    INFO(name);
    CHECK(Has(ReadBytes(b.Build()).findings, "MG-ZIP-UNSAFE-NAME"));
  }
  ZipBuilder ok;
  ok.Add("a/..b/c", "x").Add("a..", "y");
  CHECK_FALSE(Has(ReadBytes(ok.Build()).findings, "MG-ZIP-UNSAFE-NAME"));
}

TEST_CASE("encryption and flag disagreements", "[zip]") {
  ZipBuilder enc;
  enc.Add("a", "x").Last().central_flags = 1;
  enc.Last().local_flags = 1;
  auto r = ReadBytes(enc.Build());
  CHECK(Has(r.findings, "MG-ZIP-ENCRYPTED"));
  CHECK_FALSE(Has(r.findings, "MG-ZIP-FIELD-MISMATCH"));

  ZipBuilder utf;
  utf.Add("a", "x").Last().local_flags = 1 << 11;
  CHECK(Has(ReadBytes(utf.Build()).findings, "MG-ZIP-FIELD-MISMATCH"));
}

TEST_CASE("local CRC or method that disagrees with the central one", "[zip]") {
  ZipBuilder crc;
  crc.Add("a", "x").Last().local_crc = 1234;
  CHECK(Has(ReadBytes(crc.Build()).findings, "MG-ZIP-FIELD-MISMATCH"));
}

TEST_CASE("bad CRC is found on extraction", "[zip]") {
  ZipBuilder b;
  b.Add("a.pkl", "hello").Last().crc_override = 42;
  auto bytes = b.Build();
  auto r = ReadBytes(bytes);
  CHECK(r.findings.empty());
  sc::MemorySource src(bytes);
  std::vector<sc::Finding> f;
  auto m = sc::ExtractZipMember(src, r.zip.entries[0], 1 << 20, &f);
  REQUIRE(m.ok());
  CHECK(m.value().has_value());
  CHECK(Has(f, "MG-ZIP-BAD-CRC"));
}

TEST_CASE("data before the archive, between members and after it", "[zip]") {
  ZipBuilder pre;
  pre.Prepend(Bytes("\x80\x02K\x01.")).Add("a", "x");
  auto r = ReadBytes(pre.Build());
  REQUIRE(Has(r.findings, "MG-ZIP-PREPENDED-DATA"));
  CHECK(r.findings[0].offset == 0);

  ZipBuilder gap;
  gap.Add("a", "x").Last().gap_after = Bytes("hidden payload bytes here!!");
  gap.Add("b", "y");
  CHECK(Has(ReadBytes(gap.Build()).findings, "MG-ZIP-HIDDEN-DATA"));

  ZipBuilder post;
  post.Add("a", "x").Append(Bytes("trailing"));
  auto p = ReadBytes(post.Build());
  CHECK(Has(p.findings, "MG-ZIP-TRAILING-DATA"));
  CHECK(p.zip.directory_ok);

  ZipBuilder comment;
  comment.Add("a", "x").Comment("a comment is part of the archive");
  CHECK(ReadBytes(comment.Build()).findings.empty());
}

TEST_CASE("overlapping members are critical", "[zip]") {
  ZipBuilder b;
  b.Add("a", "x").Add("b", "y");
  auto bytes = b.Build();
  // Point b's central record at a's local header.
  const size_t cd = bytes.size() - 22 - (46 + 1) * 2;
  const size_t b_rec = cd + 46 + 1;
  for (int i = 0; i < 4; ++i) bytes[b_rec + 42 + i] = 0;
  auto r = ReadBytes(bytes);
  CHECK((Has(r.findings, "MG-ZIP-OVERLAP") || Has(r.findings, "MG-ZIP-NAME-MISMATCH")));
  CHECK(Has(r.findings, "MG-ZIP-NAME-MISMATCH"));  // local header says "a"
}

TEST_CASE("malformed archives never read past the end", "[zip]") {
  ZipBuilder b;
  b.Add("archive/data.pkl", "\x80\x02K\x01.");
  auto good = b.Build();
  for (size_t cut = 0; cut < good.size(); ++cut) {
    std::vector<uint8_t> part(good.begin(), good.begin() + static_cast<long>(cut));
    sc::MemorySource src(part);
    std::vector<sc::Finding> f;
    auto z = sc::ReadZip(src, {}, &f);
    REQUIRE(z.ok());
    INFO("cut at " << cut);
    CHECK_FALSE(f.empty());  // every truncation is noticed
  }
}

TEST_CASE("entry and directory limits at N and N+1", "[zip][limits]") {
  ZipBuilder b;
  b.Add("a", "x").Add("b", "y");
  auto bytes = b.Build();
  sc::ZipLimits at;
  at.max_entries = 2;
  CHECK(ReadBytes(bytes, at).findings.empty());
  sc::ZipLimits past;
  past.max_entries = 1;
  CHECK(Has(ReadBytes(bytes, past).findings, "MG-ZIP-LIMIT"));

  sc::ZipLimits cd_at;
  cd_at.max_central_dir_bytes = 2 * (46 + 1);
  CHECK(ReadBytes(bytes, cd_at).findings.empty());
  sc::ZipLimits cd_past;
  cd_past.max_central_dir_bytes = 2 * (46 + 1) - 1;
  CHECK(Has(ReadBytes(bytes, cd_past).findings, "MG-ZIP-LIMIT"));
}

TEST_CASE("member extraction limit at N and N+1, and inflation past the declared size", "[zip][limits]") {
  ZipBuilder b;
  b.Add("a", std::string(100, 'z'), true);
  auto bytes = b.Build();
  auto r = ReadBytes(bytes);
  sc::MemorySource src(bytes);
  std::vector<sc::Finding> f;
  auto at = sc::ExtractZipMember(src, r.zip.entries[0], 100, &f);
  REQUIRE(at.ok());
  CHECK(at.value().has_value());
  CHECK(f.empty());
  auto past = sc::ExtractZipMember(src, r.zip.entries[0], 99, &f);
  REQUIRE(past.ok());
  CHECK_FALSE(past.value().has_value());
  CHECK(Has(f, "MG-ZIP-LIMIT"));

  // A deflate stream that yields more than the central directory declares.
  auto lying = r.zip.entries[0];
  lying.uncompressed_bytes = 10;
  std::vector<sc::Finding> g;
  auto bomb = sc::ExtractZipMember(src, lying, 1 << 20, &g);
  REQUIRE(bomb.ok());
  REQUIRE(bomb.value().has_value());
  CHECK(bomb.value()->size() == 10);
  CHECK(Has(g, "MG-ZIP-FIELD-MISMATCH"));
}

TEST_CASE("unsupported compression methods are reported on extraction", "[zip]") {
  ZipBuilder b;
  b.Add("a", "x").Last().method_override = 12;  // bzip2
  auto bytes = b.Build();
  auto r = ReadBytes(bytes);
  sc::MemorySource src(bytes);
  std::vector<sc::Finding> f;
  auto m = sc::ExtractZipMember(src, r.zip.entries[0], 1 << 20, &f);
  REQUIRE(m.ok());
  CHECK_FALSE(m.value().has_value());
  CHECK(Has(f, "MG-ZIP-UNSUPPORTED-METHOD"));
}

TEST_CASE("an archive shifted by prepended bytes is read as Python's zipfile reads it", "[zip]") {
  ZipBuilder b;
  b.Prepend(Bytes("#!/bin/sh\nexit 0\n")).AbsoluteOffsets(false).Add("a.pkl", "\x80\x02K\x01.");
  auto bytes = b.Build();
  auto r = ReadBytes(bytes);
  REQUIRE(r.zip.directory_ok);
  REQUIRE(r.zip.entries.size() == 1);
  CHECK(r.zip.entries[0].usable);
  CHECK(r.zip.entries[0].local_offset == 17);
  CHECK(Ids(r.findings) == std::vector<std::string>{"MG-ZIP-PREPENDED-DATA"});
  sc::MemorySource src(bytes);
  std::vector<sc::Finding> f;
  auto m = sc::ExtractZipMember(src, r.zip.entries[0], 1 << 20, &f);
  REQUIRE(m.ok());
  REQUIRE(m.value().has_value());
  CHECK(*m.value() == Bytes("\x80\x02K\x01."));
}
