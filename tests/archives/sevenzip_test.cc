// ReadSevenZip / ListSevenZip: archives made at test time by 7-Zip itself
// (Debian's 7zip package, the 7zz program: several codecs, solid blocks,
// encryption, a bomb) and, for what 7zz will not write (unsafe and
// duplicate names, links), by libarchive's own 7z writer.
#include <archive.h>
#include <archive_entry.h>
#include <unistd.h>
#include <zlib.h>

#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <map>
#include <string>

#include "budget.h"
#include "sevenzip.h"
#include "tool_dir.h"

namespace sc = modelgate::scanner;
namespace si = modelgate::scanner::internal;
using Bytes = std::vector<uint8_t>;
using modelgate::test::ToolDir;

namespace {

Bytes Text(size_t n, uint32_t seed = 7) {
  Bytes b(n);
  uint32_t x = seed;
  for (auto& c : b) {
    x = x * 1103515245 + 12345;
    c = static_cast<uint8_t>("pickle\x80\x02q.K}"[(x >> 16) % 12]);
  }
  return b;
}

size_t Count(const std::vector<sc::Finding>& f, const std::string& id) {
  return static_cast<size_t>(
      std::count_if(f.begin(), f.end(), [&](const sc::Finding& x) { return x.id == id; }));
}

struct Read7z {
  bool ok = false;
  std::vector<std::pair<std::string, Bytes>> members;
  std::vector<sc::Finding> findings;
  bool all_in_memfd = true;  // every member's bytes were a mapped memfd
};

Read7z Read(const Bytes& archive, sc::Budget& budget) {
  Read7z r;
  r.ok = si::ReadSevenZip(archive, budget, &r.findings,
                          [&](std::string_view name, std::span<const uint8_t> bytes) {
    r.members.emplace_back(std::string(name), Bytes(bytes.begin(), bytes.end()));
    // The spool is an open memfd named modelgate-7z while the callback runs.
    bool seen = false;
    for (const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) {
      std::error_code ec;
      const auto target = std::filesystem::read_symlink(e.path(), ec).string();
      if (!ec && target.find("memfd:modelgate-7z") != std::string::npos) seen = true;
    }
    r.all_in_memfd = r.all_in_memfd && seen;
  });
  return r;
}

// Write7z writes a 7z archive with libarchive's writer: each entry a name
// and either data (a regular file) or, with a leading '@', a symlink target.
Bytes Write7z(const std::vector<std::pair<std::string, std::string>>& entries) {
  archive* a = archive_write_new();
  REQUIRE(archive_write_set_format_7zip(a) == ARCHIVE_OK);
  std::vector<uint8_t> buf(1 << 20);
  size_t used = 0;
  REQUIRE(archive_write_open_memory(a, buf.data(), buf.size(), &used) == ARCHIVE_OK);
  for (const auto& [name, data] : entries) {
    archive_entry* e = archive_entry_new();
    archive_entry_set_pathname(e, name.c_str());
    archive_entry_set_perm(e, 0644);
    if (!data.empty() && data[0] == '@') {
      archive_entry_set_filetype(e, AE_IFLNK);
      archive_entry_set_symlink(e, data.c_str() + 1);
      REQUIRE(archive_write_header(a, e) == ARCHIVE_OK);
    } else {
      archive_entry_set_filetype(e, AE_IFREG);
      archive_entry_set_size(e, static_cast<la_int64_t>(data.size()));
      REQUIRE(archive_write_header(a, e) == ARCHIVE_OK);
      REQUIRE(archive_write_data(a, data.data(), data.size()) == static_cast<la_ssize_t>(data.size()));
    }
    archive_entry_free(e);
  }
  REQUIRE(archive_write_close(a) == ARCHIVE_OK);
  archive_write_free(a);
  buf.resize(used);
  return buf;
}

// Make7z writes files into `dir` and has 7zz pack them with `options`.
Bytes Make7z(const ToolDir& dir, const std::string& archive, const std::string& options,
             const std::map<std::string, Bytes>& files) {
  std::string names;
  for (const auto& [name, data] : files) {
    const auto parent = std::filesystem::path(dir.path + "/" + name).parent_path();
    std::filesystem::create_directories(parent);
    dir.Write(name, data);
    names += " '" + name + "'";
  }
  dir.Run("7zz", "a -bso0 -bsp0 " + options + " '" + archive + "'" + names);
  return dir.Read(archive);
}

}  // namespace

TEST_CASE("7z made by 7zz: every codec and solid block decodes, members spooled in memfds", "[7z]") {
  ToolDir dir;
  const std::map<std::string, Bytes> files = {
      {"model/data.pkl", Text(300'000)}, {"model/config.json", Text(1000, 3)}, {"empty", {}}};
  for (const char* method : {"-m0=LZMA2", "-m0=LZMA -ms=off", "-m0=PPMd", "-m0=BZip2",
                             "-m0=Deflate", "-m0=Copy", "-mf=BCJ2 -m0=LZMA2"}) {
    INFO(method);
    const std::string name = "x" + std::to_string(std::hash<std::string>{}(method)) + ".7z";
    const Bytes z = Make7z(dir, name, method, files);
    sc::Budget budget;
    auto r = Read(z, budget);
    CHECK(r.ok);
    CHECK(r.findings.empty());
    CHECK(r.all_in_memfd);
    std::map<std::string, Bytes> got(r.members.begin(), r.members.end());
    CHECK(got == files);
    CHECK(budget.inflated_bytes() == 301'000);
    CHECK(budget.members() == 3);  // model/ is a directory entry: no data read
    // The listing agrees, and says which are files.
    std::vector<sc::Finding> f;
    std::vector<si::SevenZipMember> list;
    sc::Budget lb;
    CHECK(si::ListSevenZip(z, lb, &f, &list));
    CHECK(f.empty());
    size_t file_count = 0;
    for (const auto& m : list) {
      if (m.is_file) {
        ++file_count;
        REQUIRE(files.count(m.name) == 1);
        CHECK(m.size == files.at(m.name).size());
      }
    }
    CHECK(file_count == 3);
  }
}

TEST_CASE("7z: encrypted data or headers are not unpacked, and fail closed", "[7z]") {
  ToolDir dir;
  const std::map<std::string, Bytes> files = {{"a.pkl", Text(5000)}};
  int n = 0;
  for (const char* opts : {"-psecret", "-psecret -mhe=on"}) {
    INFO(opts);
    const Bytes z = Make7z(dir, "e" + std::to_string(n++) + ".7z", opts, files);
    sc::Budget budget;
    auto r = Read(z, budget);
    CHECK_FALSE(r.ok);
    CHECK(r.members.empty());
    REQUIRE(Count(r.findings, "MG-ARCHIVE-UNSUPPORTED") == 1);
    CHECK(r.findings[0].severity == modelgate::core::Severity::kHigh);
    CHECK(r.findings[0].message.find("ncrypt") != std::string::npos);
  }
}

TEST_CASE("7z: truncated, corrupt and foreign bytes are MG-ARCHIVE-MALFORMED", "[7z]") {
  ToolDir dir;
  const Bytes z = Make7z(dir, "t.7z", "-m0=LZMA2", {{"a.pkl", Text(200'000)}});
  for (size_t cut : {size_t{3}, size_t{40}, z.size() / 2, z.size() - 1}) {
    INFO(cut);
    sc::Budget budget;
    auto r = Read(Bytes(z.begin(), z.begin() + static_cast<ptrdiff_t>(cut)), budget);
    CHECK_FALSE(r.ok);
    CHECK(Count(r.findings, "MG-ARCHIVE-MALFORMED") == 1);
  }
  Bytes flipped = z;
  flipped[z.size() / 3] ^= 0x20;  // in the packed stream: a CRC or data error
  sc::Budget budget;
  auto r = Read(flipped, budget);
  CHECK_FALSE(r.ok);
  CHECK(Count(r.findings, "MG-ARCHIVE-MALFORMED") == 1);
  CHECK(r.members.empty());
  // An SFX-style prefix: the 7z signature must be at the start.
  Bytes sfx = {'M', 'Z'};
  sfx.insert(sfx.end(), z.begin(), z.end());
  auto s = Read(sfx, budget);
  CHECK_FALSE(s.ok);
  CHECK(Count(s.findings, "MG-ARCHIVE-MALFORMED") == 1);
}

TEST_CASE("7z: a bomb is stopped by the budget, limits at N and N+1", "[7z][limits]") {
  ToolDir dir;
  const Bytes zeros(16u << 20, 0);
  const Bytes bomb = Make7z(dir, "bomb.7z", "-m0=LZMA2", {{"zeros.bin", zeros}});
  REQUIRE(bomb.size() < 16 * 1024);
  sc::Budget budget;  // 1000:1 past 1 MiB
  auto r = Read(bomb, budget);
  CHECK_FALSE(r.ok);
  CHECK(r.members.empty());
  REQUIRE(Count(r.findings, "MG-ARCHIVE-LIMIT") == 1);
  CHECK(r.findings.back().message.find("max_expansion_ratio") != std::string::npos);
  CHECK(budget.inflated_bytes() == budget.StreamCap(bomb.size()));

  const Bytes two = Make7z(dir, "two.7z", "-m0=LZMA2",
                           {{"a", Text(70'000)}, {"b", Text(30'000, 9)}});
  sc::BudgetLimits l;
  l.max_total_decompressed_bytes = 100'000;
  sc::Budget at(l);
  CHECK(Read(two, at).ok);
  l.max_total_decompressed_bytes = 99'999;
  sc::Budget past(l);
  auto p = Read(two, past);
  CHECK_FALSE(p.ok);
  REQUIRE(p.findings.size() == 1);
  CHECK(p.findings[0].message.find("max_total_decompressed_bytes") != std::string::npos);

  sc::BudgetLimits m;
  m.max_members = 2;
  sc::Budget m_at(m);
  CHECK(Read(two, m_at).ok);
  m.max_members = 1;
  sc::Budget m_past(m);
  auto mp = Read(two, m_past);
  CHECK_FALSE(mp.ok);
  CHECK(mp.members.size() == 1);
  REQUIRE(mp.findings.size() == 1);
  CHECK(mp.findings[0].message.find("max_members") != std::string::npos);

  sc::BudgetLimits mb;
  mb.max_member_bytes = 70'000;
  sc::Budget mb_at(mb);
  CHECK(Read(two, mb_at).ok);
  mb.max_member_bytes = 69'999;
  sc::Budget mb_past(mb);
  auto mbp = Read(two, mb_past);
  CHECK_FALSE(mbp.ok);
  REQUIRE(mbp.findings.size() == 1);
  CHECK(mbp.findings[0].message.find("max_member_bytes") != std::string::npos);
}

TEST_CASE("7z member names: unsafe and duplicate names, links", "[7z]") {
  const Bytes z = Write7z({{"../evil.pkl", "x"},
                           {"/abs.pkl", "y"},
                           {"ok/a.pkl", "1"},
                           {"ok/a.pkl", "2"},
                           {"link", "@../../etc/passwd"}});
  sc::Budget budget;
  auto r = Read(z, budget);
  CHECK(r.ok);  // names are findings, not failures
  CHECK(Count(r.findings, "MG-ARCHIVE-UNSAFE-NAME") == 2);
  REQUIRE(Count(r.findings, "MG-ARCHIVE-DUPLICATE-NAME") == 1);
  for (const auto& f : r.findings) {
    if (f.id == "MG-ARCHIVE-DUPLICATE-NAME") {
      CHECK(f.severity == modelgate::core::Severity::kCritical);
    }
  }
  REQUIRE(Count(r.findings, "MG-ARCHIVE-UNSUPPORTED") == 1);  // the link
  // Every regular file is judged, both duplicates included; the link is not.
  REQUIRE(r.members.size() == 4);
  CHECK(r.members[2] == std::pair<std::string, Bytes>{"ok/a.pkl", Bytes{'1'}});
  CHECK(r.members[3] == std::pair<std::string, Bytes>{"ok/a.pkl", Bytes{'2'}});
}

TEST_CASE("7z start header: its CRC and a next header inside the file, checked before libarchive", "[7z]") {
  ToolDir dir;
  const Bytes z = Make7z(dir, "s.7z", "-m0=LZMA2", {{"a.pkl", Text(1000)}});
  auto with_crc = [](Bytes b) {
    const uLong crc = crc32(0L, b.data() + 12, 20);
    for (int i = 0; i < 4; ++i) b[8 + static_cast<size_t>(i)] = static_cast<uint8_t>(crc >> (8 * i));
    return b;
  };
  sc::Budget budget;
  CHECK(Read(with_crc(z), budget).ok);  // recomputing the same CRC changes nothing
  // A next header size of 2^58 with a valid CRC (what fuzz_sevenzip found
  // libarchive allocating): refused.
  Bytes huge = z;
  huge[27] = 0x04;
  auto h = Read(with_crc(huge), budget);
  CHECK_FALSE(h.ok);
  REQUIRE(h.findings.size() == 1);
  CHECK(h.findings[0].id == "MG-ARCHIVE-MALFORMED");
  CHECK(h.findings[0].message.find("outside the file") != std::string::npos);
  // The next header exactly at the end passes the check, one byte past fails.
  const uint64_t offset = [&] {
    uint64_t v = 0;
    for (int i = 7; i >= 0; --i) v = (v << 8) | z[12 + static_cast<size_t>(i)];
    return v;
  }();
  const uint64_t size = z.size() - 32 - offset;  // what 7zz wrote: the header ends the file
  Bytes past = z;
  past[20] = static_cast<uint8_t>(size + 1);
  for (int i = 1; i < 8; ++i) past[20 + static_cast<size_t>(i)] = static_cast<uint8_t>((size + 1) >> (8 * i));
  auto p = Read(with_crc(past), budget);
  CHECK_FALSE(p.ok);
  CHECK(p.findings[0].message.find("outside the file") != std::string::npos);
  // A start header whose CRC does not match.
  Bytes bad = z;
  bad[8] ^= 1;
  auto b = Read(bad, budget);
  CHECK_FALSE(b.ok);
  CHECK(b.findings[0].message.find("CRC") != std::string::npos);
}
