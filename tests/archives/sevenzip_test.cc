// ReadSevenZip / ListSevenZip: archives made at test time by 7-Zip itself
// (Debian's 7zip package, the 7zz program: several codecs, solid blocks,
// encryption, a bomb) and, for what 7zz will not write (unsafe and
// duplicate names, links), by libarchive's own 7z writer.
#include <archive.h>
#include <archive_entry.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <string>

#include "budget.h"
#include "sevenzip.h"
#include "tool_dir.h"

// Under ASan the address space is the sanitizer's (terabytes of shadow
// reserved): the RLIMIT_AS child below runs in the other builds.
#if defined(__SANITIZE_ADDRESS__)
#define MG_7Z_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define MG_7Z_ASAN 1
#endif
#endif

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
  // The header declares two files with data: refused before libarchive
  // reads (and allocates for) any of them.
  CHECK(mp.members.empty());
  REQUIRE(mp.findings.size() == 1);
  CHECK(mp.findings[0].message.find("7z header: ") != std::string::npos);
  CHECK(mp.findings[0].message.find("max_members") != std::string::npos);
  CHECK(m_past.limits_hit() == std::vector<std::string>{"max_members"});

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

// --- The header reader (sevenzip_header.h): what a header declares is
// checked before libarchive reads it. Crafted archives are written byte by
// byte here, with correct CRCs, so that only the rule under test is broken.

namespace {

void Append(Bytes& out, const Bytes& more) { out.insert(out.end(), more.begin(), more.end()); }

Bytes Le(uint64_t v, int n) {
  Bytes b;
  for (int i = 0; i < n; ++i) b.push_back(static_cast<uint8_t>(v >> (8 * i)));
  return b;
}

uint32_t Crc(const Bytes& b) {
  return static_cast<uint32_t>(crc32(0L, b.data(), static_cast<uInt>(b.size())));
}

// Num writes 7z's variable-length UINT64: n high bits of the first byte say
// that n little-endian bytes follow; the rest of the first byte holds the
// value's top bits.
Bytes Num(uint64_t v) {
  int n = 0;
  while (n < 8 && v >= (uint64_t{1} << (7 * (n + 1)))) ++n;
  Bytes out;
  if (n == 8) {
    out.push_back(0xFF);
    Append(out, Le(v, 8));
    return out;
  }
  out.push_back(static_cast<uint8_t>((0xFF00u >> n) | (v >> (8 * n))));
  Append(out, Le(v, n));
  return out;
}

// SevenZip wraps packed streams and a next header in a start header.
Bytes SevenZip(const Bytes& packed, const Bytes& header) {
  Bytes tail = Le(packed.size(), 8);
  Append(tail, Le(header.size(), 8));
  Append(tail, Le(Crc(header), 4));
  Bytes out = {'7', 'z', 0xBC, 0xAF, 0x27, 0x1C, 0, 4};
  Append(out, Le(Crc(tail), 4));
  Append(out, tail);
  Append(out, packed);
  Append(out, header);
  return out;
}

Bytes Utf16Names(const std::vector<std::string>& names) {
  Bytes b = {0};  // External = 0
  for (const auto& n : names) {
    for (char c : n) Append(b, {static_cast<uint8_t>(c), 0});
    Append(b, {0, 0});
  }
  return b;
}

// Crafted is a non-solid archive of Copy folders (one per file with data),
// then `empty` empty files; `coder` replaces each folder's coder record.
struct Crafted {
  std::vector<std::pair<std::string, Bytes>> files;
  uint64_t empty = 0;
  Bytes coder = {0x01, 0x00};  // flag (id of 1 byte), id 00: Copy

  Bytes Header() const {
    const uint64_t n = files.size();
    Bytes h = {0x01, 0x04, 0x06};
    Append(h, Num(0));
    Append(h, Num(n));
    h.push_back(0x09);
    for (const auto& f : files) Append(h, Num(f.second.size()));
    Append(h, {0x00, 0x07, 0x0B});
    Append(h, Num(n));
    h.push_back(0x00);
    for (size_t i = 0; i < n; ++i) {
      Append(h, Num(1));
      Append(h, coder);
    }
    h.push_back(0x0C);
    for (const auto& f : files) Append(h, Num(f.second.size()));
    Append(h, {0x0A, 0x01});
    for (const auto& f : files) Append(h, Le(Crc(f.second), 4));
    Append(h, {0x00, 0x08, 0x00, 0x00});  // UnpackInfo end, SubStreamsInfo: one each, end
    h.push_back(0x05);
    Append(h, Num(n + empty));
    std::vector<std::string> names;
    for (const auto& f : files) names.push_back(f.first);
    for (uint64_t i = 0; i < empty; ++i) names.push_back("e" + std::to_string(i));
    if (empty > 0) {
      Bytes bits((n + empty + 7) / 8, 0), file_bits((empty + 7) / 8, 0);
      for (uint64_t i = n; i < n + empty; ++i) bits[i / 8] |= static_cast<uint8_t>(0x80 >> (i % 8));
      for (uint64_t i = 0; i < empty; ++i) file_bits[i / 8] |= static_cast<uint8_t>(0x80 >> (i % 8));
      h.push_back(0x0E);
      Append(h, Num(bits.size()));
      Append(h, bits);
      h.push_back(0x0F);
      Append(h, Num(file_bits.size()));
      Append(h, file_bits);
    }
    const Bytes name_bytes = Utf16Names(names);
    h.push_back(0x11);
    Append(h, Num(name_bytes.size()));
    Append(h, name_bytes);
    Append(h, {0x00, 0x00});
    return h;
  }
  Bytes Build() const {
    Bytes packed;
    for (const auto& f : files) Append(packed, f.second);
    return SevenZip(packed, Header());
  }
};

struct Checked {
  bool ok = false;
  std::vector<sc::Finding> findings;
  si::SevenZipHeader header;
};

Checked Check(const Bytes& z, sc::Budget& budget, const si::SevenZipLimits& limits = {}) {
  Checked c;
  c.ok = si::CheckSevenZipHeader(z, budget, limits, &c.findings, &c.header);
  return c;
}

// Refused: one finding `id`, from the header reader, naming `words`.
void CheckRefused(const Read7z& r, const std::string& id, const std::string& words) {
  CHECK_FALSE(r.ok);
  CHECK(r.members.empty());
  REQUIRE(r.findings.size() == 1);
  CHECK(r.findings[0].id == id);
  CHECK(r.findings[0].message.rfind("7z header: ", 0) == 0);
  CHECK(r.findings[0].message.find(words) != std::string::npos);
}

Read7z ReadWith(const Bytes& z, sc::Budget& budget, const si::SevenZipLimits& limits) {
  Read7z r;
  r.ok = si::ReadSevenZip(
      z, budget, &r.findings,
      [&](std::string_view name, std::span<const uint8_t> bytes) {
        r.members.emplace_back(std::string(name), Bytes(bytes.begin(), bytes.end()));
      },
      limits);
  return r;
}

Bytes EncodedHeaderClaiming(uint64_t unpack_bytes) {
  const Bytes packed(16, 0);
  Bytes h = {0x17, 0x06};
  Append(h, Num(0));
  Append(h, Num(1));
  h.push_back(0x09);
  Append(h, Num(packed.size()));
  Append(h, {0x00, 0x07, 0x0B});
  Append(h, Num(1));
  h.push_back(0x00);
  Append(h, Num(1));
  Append(h, {0x21, 0x21, 0x01, 0x10});  // LZMA2, a 1 MiB dictionary
  h.push_back(0x0C);
  Append(h, Num(unpack_bytes));
  Append(h, {0x00, 0x00});
  return SevenZip(packed, h);
}

}  // namespace

TEST_CASE("7z header: a crafted archive is read as libarchive reads it", "[7z][header]") {
  Crafted c;
  c.files = {{"a.pkl", Text(100)}, {"b.json", Text(50, 2)}};
  c.empty = 1;
  const Bytes z = c.Build();
  sc::Budget budget;
  auto h = Check(z, budget);
  REQUIRE(h.ok);
  CHECK_FALSE(h.header.encoded);
  CHECK(h.header.files == 3);
  CHECK(h.header.folders == 2);
  CHECK(h.header.substreams == 2);
  auto r = Read(z, budget);
  CHECK(r.ok);
  CHECK(r.findings.empty());
  REQUIRE(r.members.size() == 3);
  CHECK(r.members[0] == std::pair<std::string, Bytes>{"a.pkl", Text(100)});
  CHECK(r.members[1] == std::pair<std::string, Bytes>{"b.json", Text(50, 2)});
  CHECK(r.members[2] == std::pair<std::string, Bytes>{"e0", Bytes{}});
}

TEST_CASE("7z header: archives 7zz writes pass, with what they declare", "[7z][header]") {
  ToolDir dir;
  std::map<std::string, Bytes> files;
  for (int i = 0; i < 40; ++i) files["m/file" + std::to_string(i) + ".pkl"] = Text(500, i);
  // Enough names for 7zz to compress the header (a kEncodedHeader).
  const Bytes z = Make7z(dir, "enc.7z", "-m0=LZMA2", files);
  sc::Budget budget;
  auto h = Check(z, budget);
  REQUIRE(h.ok);
  CHECK(h.header.encoded);
  CHECK(h.header.files == 40);  // 7zz lists no entry for m/ when given the files
  CHECK(h.header.substreams == 40);
  const Bytes plain = Make7z(dir, "plain.7z", "-m0=LZMA2 -mhc=off", files);
  auto p = Check(plain, budget);
  REQUIRE(p.ok);
  CHECK_FALSE(p.header.encoded);
  CHECK(p.header.files == 40);
}

TEST_CASE("7z header: max_7z_header_bytes at N and N+1, plain and encoded", "[7z][header][limits]") {
  ToolDir dir;
  std::map<std::string, Bytes> files;
  for (int i = 0; i < 40; ++i) files["f" + std::to_string(i)] = Text(300, i);
  int i = 0;
  for (const char* opts : {"-m0=LZMA2", "-m0=LZMA2 -mhc=off"}) {
    INFO(opts);
    const Bytes z = Make7z(dir, "h" + std::to_string(i) + ".7z", opts, files);
    sc::Budget probe;
    auto h = Check(z, probe);
    REQUIRE(h.ok);
    CHECK(h.header.encoded == (i++ == 0));
    si::SevenZipLimits l;
    l.max_7z_header_bytes = h.header.header_bytes;
    sc::Budget at;
    CHECK(ReadWith(z, at, l).ok);
    l.max_7z_header_bytes = h.header.header_bytes - 1;
    sc::Budget past;
    auto r = ReadWith(z, past, l);
    CheckRefused(r, "MG-ARCHIVE-LIMIT", "max_7z_header_bytes");
    CHECK(past.limits_hit() == std::vector<std::string>{"max_7z_header_bytes"});
  }
}

TEST_CASE("7z header: max_7z_folders and max_7z_coders_per_folder at N and N+1", "[7z][header][limits]") {
  Crafted c;
  c.files = {{"a", Text(10)}, {"b", Text(20, 2)}, {"c", Text(30, 3)}};
  const Bytes z = c.Build();
  si::SevenZipLimits l;
  l.max_7z_folders = 3;
  sc::Budget at;
  auto ok = ReadWith(z, at, l);
  CHECK(ok.ok);
  CHECK(ok.members.size() == 3);
  l.max_7z_folders = 2;
  sc::Budget past;
  CheckRefused(ReadWith(z, past, l), "MG-ARCHIVE-LIMIT", "max_7z_folders 2");

  ToolDir dir;
  const Bytes bcj2 = Make7z(dir, "bcj2.7z", "-mf=BCJ2 -m0=LZMA2", {{"a.pkl", Text(5000)}});
  si::SevenZipLimits cl;
  cl.max_7z_coders_per_folder = 4;
  sc::Budget c_at;
  auto b = ReadWith(bcj2, c_at, cl);
  CHECK(b.ok);
  CHECK(b.members.size() == 1);
  cl.max_7z_coders_per_folder = 3;
  sc::Budget c_past;
  CheckRefused(ReadWith(bcj2, c_past, cl), "MG-ARCHIVE-LIMIT", "a folder of 4 coders");
}

TEST_CASE("7z header: max_decoder_memory_bytes against each coder's dictionary or model, N and N+1", "[7z][header][limits]") {
  ToolDir dir;
  int n = 0;
  for (const char* method : {"-m0=LZMA2", "-m0=LZMA", "-m0=PPMd"}) {
    INFO(method);
    const Bytes z = Make7z(dir, "d" + std::to_string(n++) + ".7z", std::string(method) + " -mhc=off",
                           {{"a.pkl", Text(300'000)}});
    sc::Budget probe;
    auto h = Check(z, probe);
    REQUIRE(h.ok);
    REQUIRE(h.header.coder_memory_bytes > 0);
    si::SevenZipLimits l;
    l.max_decoder_memory_bytes = h.header.coder_memory_bytes;
    sc::Budget at;
    CHECK(ReadWith(z, at, l).ok);
    l.max_decoder_memory_bytes = h.header.coder_memory_bytes - 1;
    sc::Budget past;
    CheckRefused(ReadWith(z, past, l), "MG-ARCHIVE-LIMIT", "max_decoder_memory_bytes");
  }
}

TEST_CASE("7z header: files against max_members and max_records, N and N+1", "[7z][header][limits]") {
  Crafted c;
  c.files = {{"a", Text(10)}};
  c.empty = 2;
  const Bytes z = c.Build();
  for (bool records : {false, true}) {
    INFO(records);
    sc::BudgetLimits l;
    (records ? l.max_records : l.max_members) = 3;
    sc::Budget at(l);
    CHECK(Read(z, at).ok);
    (records ? l.max_records : l.max_members) = 2;
    sc::Budget past(l);
    CheckRefused(Read(z, past), "MG-ARCHIVE-LIMIT",
                 records ? "max_records 2" : "max_members 2");
  }
}

TEST_CASE("7z header: CRC-valid claims of 2^30 files or folders, a 4 GiB dictionary or header, refused before libarchive", "[7z][header]") {
  struct Case {
    const char* what;
    Bytes archive;
    const char* id;
    const char* words;
  };
  std::vector<Case> cases;
  // 2^30 files in a 5-byte header.
  {
    Bytes h = {0x01, 0x05};
    Append(h, Num(1ull << 30));
    Append(h, {0x00, 0x00});
    cases.push_back({"2^30 files", SevenZip({}, h), "MG-ARCHIVE-MALFORMED", "1073741824 files"});
  }
  // 2^30 folders.
  {
    Bytes h = {0x01, 0x04, 0x07, 0x0B};
    Append(h, Num(1ull << 30));
    Append(h, {0x00, 0x01, 0x01, 0x00, 0x0C, 0x00, 0x00, 0x00});
    cases.push_back({"2^30 folders", SevenZip({}, h), "MG-ARCHIVE-MALFORMED", "1073741824 folders"});
  }
  // Dictionaries and models of 4 GiB (LZMA2 byte 40, LZMA 0xFFFFFFFF, PPMd).
  for (const Bytes& coder : {Bytes{0x21, 0x21, 0x01, 40}, Bytes{0x23, 0x03, 0x01, 0x01, 0x05, 0x5D, 0xFF, 0xFF, 0xFF, 0xFF},
                             Bytes{0x23, 0x03, 0x04, 0x01, 0x05, 0x06, 0xDB, 0xFF, 0xFF, 0xFF}}) {
    Crafted c;
    c.files = {{"a", Text(64)}};
    c.coder = coder;
    cases.push_back({"4 GiB coder memory", c.Build(), "MG-ARCHIVE-LIMIT", "max_decoder_memory_bytes"});
  }
  // 10^8 packed streams, and 10^8 substreams in one folder (libarchive's
  // cap: it callocs 1.6 GB and 1.3 GB for their tables before reading them).
  {
    Bytes h = {0x01, 0x04, 0x06};
    Append(h, Num(0));
    Append(h, Num(100'000'000));
    Append(h, {0x09, 0x00, 0x00});
    cases.push_back({"10^8 packed streams", SevenZip({}, h), "MG-ARCHIVE-MALFORMED",
                     "100000000 packed streams"});
    const Bytes data = Text(64);
    Bytes s = {0x01, 0x04, 0x06};
    Append(s, Num(0));
    Append(s, Num(1));
    s.push_back(0x09);
    Append(s, Num(data.size()));
    Append(s, {0x00, 0x07, 0x0B, 0x01, 0x00, 0x01, 0x01, 0x00, 0x0C});
    Append(s, Num(data.size()));
    Append(s, {0x00, 0x08, 0x0D});
    Append(s, Num(100'000'000));
    Append(s, {0x09, 0x00, 0x00});
    cases.push_back({"10^8 substreams", SevenZip(data, s), "MG-ARCHIVE-LIMIT", "max_members"});
  }
  // An encoded header declaring 1 TiB, and one 2^62 bytes.
  cases.push_back({"1 TiB header", EncodedHeaderClaiming(1ull << 40), "MG-ARCHIVE-LIMIT",
                   "an encoded header declaring 1099511627776 bytes"});
  cases.push_back({"2^62 header", EncodedHeaderClaiming(1ull << 62), "MG-ARCHIVE-LIMIT",
                   "max_7z_header_bytes"});
  for (const auto& c : cases) {
    INFO(c.what);
    sc::Budget budget;
    CheckRefused(Read(c.archive, budget), c.id, c.words);
  }
#ifndef MG_7Z_ASAN
  // In a child whose address space may grow by 256 MiB only (libarchive's
  // lazy callocs of what these headers declare would not fit): every case
  // is refused with its own finding, and a real archive still reads.
  ToolDir dir;
  const Bytes real = Make7z(dir, "real.7z", "-m0=LZMA2", {{"a.pkl", Text(200'000)}});
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    long vm_kib = 0;
    if (FILE* f = fopen("/proc/self/status", "r")) {
      char line[256];
      while (fgets(line, sizeof line, f) != nullptr) {
        if (sscanf(line, "VmSize: %ld kB", &vm_kib) == 1) break;
      }
      fclose(f);
    }
    const rlim_t cap = static_cast<rlim_t>(vm_kib) * 1024 + (256u << 20);
    const rlimit rl{cap, cap};
    if (vm_kib == 0 || setrlimit(RLIMIT_AS, &rl) != 0) _exit(3);
    for (const auto& c : cases) {
      sc::Budget b;
      std::vector<sc::Finding> f;
      if (si::ReadSevenZip(c.archive, b, &f, [](std::string_view, std::span<const uint8_t>) {}) ||
          f.size() != 1 || f[0].id != c.id) {
        _exit(4);
      }
    }
    sc::Budget b;
    std::vector<sc::Finding> f;
    _exit(si::ReadSevenZip(real, b, &f, [](std::string_view, std::span<const uint8_t>) {}) ? 0 : 5);
  }
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
#endif
}

TEST_CASE("7z header: layouts libarchive would read unlike 7-Zip are refused", "[7z][header]") {
  sc::Budget budget;
  // [Copy, BCJ] with the bind pair reversed (BCJ's output into Copy): 7-Zip
  // would run BCJ first, libarchive last.
  {
    Crafted c;
    c.files = {{"a", Text(64)}};
    Bytes h = c.Header();
    const Bytes copy_folder = {0x01, 0x01, 0x00};
    auto it = std::search(h.begin(), h.end(), copy_folder.begin(), copy_folder.end());
    REQUIRE(it != h.end());
    const Bytes reversed = {0x02, 0x01, 0x00, 0x04, 0x03, 0x03, 0x01, 0x03, 0x00, 0x01};
    it = h.erase(it, it + 3);
    h.insert(it, reversed.begin(), reversed.end());
    // The folder now has two out streams: one more unpack size.
    const Bytes sizes = {0x0C, 0x40};
    auto s = std::search(h.begin(), h.end(), sizes.begin(), sizes.end());
    REQUIRE(s != h.end());
    h.insert(s + 2, 0x40);
    CheckRefused(Read(SevenZip(Text(64), h), budget), "MG-ARCHIVE-UNSUPPORTED",
                 "layout libarchive does not decode as 7-Zip does");
  }
  // An unknown coder id.
  {
    Crafted c;
    c.files = {{"a", Text(64)}};
    c.coder = {0x03, 0x04, 0x01, 0x09};  // Deflate64
    CheckRefused(Read(c.Build(), budget), "MG-ARCHIVE-UNSUPPORTED", "0x40109");
  }
  // A BCJ filter with a start offset (libarchive ignores it, 7-Zip uses it).
  {
    Crafted c;
    c.files = {{"a", Text(64)}};
    c.coder = {0x24, 0x03, 0x03, 0x01, 0x03, 0x04, 0x00, 0x10, 0x00, 0x00};
    CheckRefused(Read(c.Build(), budget), "MG-ARCHIVE-UNSUPPORTED", "BCJ with 4 property bytes");
  }
}

TEST_CASE("7z header: BCJ2's call and jump streams, decoded whole by libarchive, within StreamCap at N and N+1", "[7z][header][limits]") {
  ToolDir dir;
  // No E8/E9 bytes in Text(): the call and jump streams are empty (unpack
  // size 0), as the first two CodersUnpackSize entries say.
  const Bytes z = Make7z(dir, "b2.7z", "-mf=BCJ2 -m0=LZMA2 -mhc=off", {{"a.pkl", Text(5000)}});
  sc::Budget budget;
  REQUIRE(Check(z, budget).ok);
  uint64_t offset = 0;
  for (int i = 7; i >= 0; --i) offset = (offset << 8) | z[12 + static_cast<size_t>(i)];
  const Bytes packed(z.begin() + 32, z.begin() + 32 + static_cast<ptrdiff_t>(offset));
  const Bytes header(z.begin() + 32 + static_cast<ptrdiff_t>(offset), z.end());
  const Bytes sizes = {0x0C, 0x00, 0x00};
  const auto at = std::search(header.begin(), header.end(), sizes.begin(), sizes.end());
  REQUIRE(at != header.end());
  const size_t pos = static_cast<size_t>(at - header.begin()) + 1;
  // The call stream's packed size: the last of the folder's four.
  const uint64_t cap = budget.StreamCap(5);  // 7zz's LZMA2 of nothing: 5 bytes
  auto with_call_size = [&](uint64_t size) {
    Bytes h(header.begin(), header.begin() + static_cast<ptrdiff_t>(pos));
    Append(h, Num(size));
    h.insert(h.end(), header.begin() + static_cast<ptrdiff_t>(pos) + 1, header.end());
    return SevenZip(packed, h);
  };
  sc::Budget at_cap;
  auto ok = Check(with_call_size(cap), at_cap);
  CHECK(ok.ok);
  sc::Budget past;
  auto r = Check(with_call_size(cap + 1), past);
  CHECK_FALSE(r.ok);
  REQUIRE(r.findings.size() == 1);
  CHECK(r.findings[0].id == "MG-ARCHIVE-LIMIT");
  CHECK(r.findings[0].message.find("max_expansion_ratio") != std::string::npos);
}
