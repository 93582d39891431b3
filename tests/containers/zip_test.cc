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

// --- one budget, one decoder, each member's data once ---

namespace {

bool NamesLimit(const std::vector<sc::Finding>& f, const std::string& limit) {
  return std::any_of(f.begin(), f.end(), [&](const sc::Finding& x) {
    return x.id == "MG-ARCHIVE-LIMIT" && x.message.find("(limit " + limit + " ") != std::string::npos;
  });
}

}  // namespace

TEST_CASE("records that reuse one member's data are marked alias_of", "[zip]") {
  ZipBuilder b;
  b.Add("a.pkl", std::string(1000, 'a'), true).Add("b", "other");
  b.Alias("c.pkl", 0).Alias("d.pkl", 0).Alias("e.pkl", 0, /*compressed_cut=*/1);
  auto r = ReadBytes(b.Build());
  REQUIRE(r.zip.entries.size() == 5);
  CHECK(r.zip.entries[0].alias_of == -1);
  CHECK(r.zip.entries[1].alias_of == -1);
  CHECK(r.zip.entries[2].alias_of == 0);
  CHECK(r.zip.entries[3].alias_of == 0);
  // Same start, other sizes: not the same bytes, so not an alias (and still
  // an overlap, charged each time it is read).
  CHECK(r.zip.entries[4].alias_of == -1);
  CHECK(Has(r.findings, "MG-ZIP-OVERLAP"));
}

TEST_CASE("a prefix read inflates no more than it returns", "[zip][budget]") {
  ZipBuilder b;
  b.Add("archive/data.pkl", std::vector<uint8_t>(64u << 20, 0), true);  // 64 MiB of zeros
  auto bytes = b.Build();
  auto r = ReadBytes(bytes);
  sc::MemorySource src(bytes);
  sc::Budget budget;
  std::vector<sc::Finding> f;
  auto p = sc::ReadZipMemberPrefix(src, r.zip.entries[0], budget, sc::kSniffBytes64K, &f);
  REQUIRE(p.ok());
  REQUIRE(p.value().has_value());
  CHECK(p.value()->bytes.size() == sc::kSniffBytes64K);
  CHECK_FALSE(p.value()->whole);
  CHECK(budget.inflated_bytes() == sc::kSniffBytes64K);
  CHECK(budget.members() == 1);
  CHECK(f.empty());  // no CRC verdict on a prefix
}

TEST_CASE("a prefix that holds the whole member is checked as a whole", "[zip][budget]") {
  ZipBuilder b;
  b.Add("a.pkl", "\x80\x02K\x01.", true).Last().crc_override = 7;
  auto bytes = b.Build();
  auto r = ReadBytes(bytes);
  sc::MemorySource src(bytes);
  sc::Budget budget;
  std::vector<sc::Finding> f;
  auto p = sc::ReadZipMemberPrefix(src, r.zip.entries[0], budget, sc::kSniffBytes64K, &f);
  REQUIRE(p.ok());
  REQUIRE(p.value().has_value());
  CHECK(p.value()->whole);
  CHECK(p.value()->bytes == Bytes("\x80\x02K\x01."));
  CHECK(Has(f, "MG-ZIP-BAD-CRC"));
}

TEST_CASE("budget max_member_bytes refuses a member by its declared size, before decoding", "[zip][budget][limits]") {
  ZipBuilder b;
  b.Add("a", std::string(1000, 'z'), true);
  auto bytes = b.Build();
  auto r = ReadBytes(bytes);
  sc::MemorySource src(bytes);
  sc::BudgetLimits l;
  l.max_member_bytes = 1000;
  sc::Budget at(l);
  std::vector<sc::Finding> f;
  auto ok = sc::ExtractZipMember(src, r.zip.entries[0], at, &f);
  REQUIRE(ok.ok());
  REQUIRE(ok.value().has_value());
  CHECK(ok.value()->whole);
  CHECK(ok.value()->bytes.size() == 1000);
  CHECK(f.empty());
  l.max_member_bytes = 999;
  sc::Budget past(l);
  auto refused = sc::ExtractZipMember(src, r.zip.entries[0], past, &f);
  REQUIRE(refused.ok());
  CHECK_FALSE(refused.value().has_value());
  CHECK(NamesLimit(f, "max_member_bytes"));
  CHECK(past.inflated_bytes() == 0);
  CHECK(past.exhausted());
}

TEST_CASE("budget max_total_decompressed_bytes spans members of one archive", "[zip][budget][limits]") {
  ZipBuilder b;
  b.Add("a", std::string(600, 'a'), true).Add("b", std::string(400, 'b'), true);
  auto bytes = b.Build();
  auto r = ReadBytes(bytes);
  sc::MemorySource src(bytes);
  for (uint64_t total : {1000u, 999u}) {
    INFO(total);
    sc::BudgetLimits l;
    l.max_total_decompressed_bytes = total;
    sc::Budget budget(l);
    std::vector<sc::Finding> f;
    auto a = sc::ExtractZipMember(src, r.zip.entries[0], budget, &f);
    auto m = sc::ExtractZipMember(src, r.zip.entries[1], budget, &f);
    REQUIRE(a.ok());
    REQUIRE(m.ok());
    CHECK(a.value().has_value());
    CHECK(m.value().has_value() == (total == 1000));
    CHECK(NamesLimit(f, "max_total_decompressed_bytes") == (total == 999));
    CHECK(budget.exhausted() == (total == 999));
  }
}

TEST_CASE("budget max_members counts every member read", "[zip][budget][limits]") {
  ZipBuilder b;
  b.Add("a", "1").Add("b", "2").Add("c", "3");
  auto bytes = b.Build();
  auto r = ReadBytes(bytes);
  sc::MemorySource src(bytes);
  sc::BudgetLimits l;
  l.max_members = 2;
  sc::Budget budget(l);
  std::vector<sc::Finding> f;
  for (size_t i = 0; i < 2; ++i) {
    auto m = sc::ReadZipMemberPrefix(src, r.zip.entries[i], budget, sc::kSniffBytes64K, &f);
    REQUIRE(m.ok());
    CHECK(m.value().has_value());
  }
  CHECK(f.empty());
  auto third = sc::ReadZipMemberPrefix(src, r.zip.entries[2], budget, sc::kSniffBytes64K, &f);
  REQUIRE(third.ok());
  CHECK_FALSE(third.value().has_value());
  CHECK(NamesLimit(f, "max_members"));
}

TEST_CASE("budget max_records: a directory past it is not read", "[zip][budget][limits]") {
  ZipBuilder b;
  b.Add("a", "1").Add("b", "2");
  auto bytes = b.Build();
  sc::MemorySource src(bytes);
  for (uint64_t max : {2u, 1u}) {
    sc::BudgetLimits l;
    l.max_records = max;
    sc::Budget budget(l);
    std::vector<sc::Finding> f;
    auto z = sc::ReadZip(src, {}, budget, &f);
    REQUIRE(z.ok());
    CHECK(z.value().directory_ok == (max == 2));
    CHECK(NamesLimit(f, "max_records") == (max == 1));
  }
}

TEST_CASE("zip deflate obeys the ratio, the old form charges no budget", "[zip][budget][limits]") {
  ZipBuilder b;
  b.Add("zeros", std::vector<uint8_t>(4u << 20, 0), true);
  auto bytes = b.Build();
  auto r = ReadBytes(bytes);
  sc::MemorySource src(bytes);
  sc::Budget budget;  // 1000:1 past 1 MiB; deflate of zeros is ~1030:1
  std::vector<sc::Finding> f;
  auto m = sc::ExtractZipMember(src, r.zip.entries[0], budget, &f);
  REQUIRE(m.ok());
  CHECK_FALSE(m.value().has_value());
  CHECK(NamesLimit(f, "max_expansion_ratio"));
  std::vector<sc::Finding> g;
  auto old = sc::ExtractZipMember(src, r.zip.entries[0], 8u << 20, &g);
  REQUIRE(old.ok());
  REQUIRE(old.value().has_value());
  CHECK(old.value()->size() == 4u << 20);
  CHECK(g.empty());
}

TEST_CASE("a member as a Source: stored is a slice, deflated a spool", "[zip][budget]") {
  const std::string text(100'000, 'q');
  ZipBuilder b;
  b.Add("stored.zip", text).Add("deflated.zip", text, true);
  auto bytes = b.Build();
  auto r = ReadBytes(bytes);
  sc::MemorySource src(bytes);
  sc::Budget budget;
  std::vector<sc::Finding> f;
  for (const auto& e : r.zip.entries) {
    INFO(e.name);
    auto s = sc::OpenZipMemberSource(src, e, budget, &f);
    REQUIRE(s.ok());
    REQUIRE(s.value().source);
    const sc::Source& m = *s.value().source;
    REQUIRE(m.size() == text.size());
    auto all = m.ReadVec(0, m.size());
    REQUIRE(all.ok());
    CHECK(all.value() == Bytes(text));
  }
  CHECK(budget.inflated_bytes() == text.size());  // only the deflated one decodes
  CHECK(budget.members() == 2);
  CHECK(f.empty());
}
