// ReadTar, ResolveTarMember, ExtractTarMember and the torch legacy layout:
// every MG-TAR-* finding, every TarLimits limit at N and N+1, and
// agreement with Python's tarfile on the committed cases.
#include <catch2/catch.hpp>

#include <algorithm>
#include <fstream>
#include <iterator>
#include <sstream>

#include "tar.h"
#include "tar_builder.h"

namespace sc = modelgate::scanner;
using mg_test::TarBuilder;
using mg_test::TarHeader;

namespace {

struct Listed {
  sc::TarArchive tar;
  std::vector<sc::Finding> findings;
};

Listed List(const std::vector<uint8_t>& bytes, const sc::TarLimits& limits = {}) {
  sc::MemorySource src(bytes);
  Listed out;
  auto r = sc::ReadTar(src, limits, &out.findings);
  REQUIRE(r.ok());
  out.tar = r.value();
  return out;
}

size_t Count(const std::vector<sc::Finding>& f, const std::string& id) {
  return static_cast<size_t>(
      std::count_if(f.begin(), f.end(), [&](const sc::Finding& x) { return x.id == id; }));
}

const sc::Finding* First(const std::vector<sc::Finding>& f, const std::string& id) {
  for (const auto& x : f) {
    if (x.id == id) return &x;
  }
  return nullptr;
}

std::vector<uint8_t> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE(in.good());
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

}  // namespace

TEST_CASE("a plain ustar archive lists cleanly", "[tar]") {
  auto bytes = TarBuilder().File("a", "abc").File("dir/b.bin", std::string(600, 'x')).End().Build();
  auto l = List(bytes);
  CHECK(l.findings.empty());
  REQUIRE(l.tar.members.size() == 2);
  CHECK(l.tar.members[0].name == "a");
  CHECK(l.tar.members[0].size == 3);
  CHECK(l.tar.members[0].data_offset == 512);
  CHECK(l.tar.members[1].name == "dir/b.bin");
  CHECK(l.tar.members[1].data_offset == 1536);
  CHECK(l.tar.end_reason == "zero block");
  CHECK_FALSE(l.tar.loader_fails);
  CHECK(sc::LooksLikeTar(bytes));
  sc::MemorySource src(bytes);
  auto data = sc::ExtractTarMember(src, l.tar.members[0], 3);
  REQUIRE(data.ok());
  CHECK(std::string(data.value().begin(), data.value().end()) == "abc");
  CHECK_FALSE(sc::ExtractTarMember(src, l.tar.members[0], 2).ok());  // over max_bytes
}

TEST_CASE("ReadTar agrees with Python's tarfile on the committed cases", "[tar][python]") {
  const std::string dir = std::string(MG_ARCHIVE_DATA_DIR) + "/tarfile-cases/";
  std::ifstream manifest(dir + "manifest.tsv");
  REQUIRE(manifest.good());
  std::string line;
  int cases = 0;
  while (std::getline(manifest, line)) {
    std::istringstream cells(line);
    std::string name, cell;
    std::getline(cells, name, '\t');
    std::vector<std::string> expected;
    while (std::getline(cells, cell, '\t')) expected.push_back(cell);
    INFO("case " << name);
    auto l = List(ReadFile(dir + name + ".tar"));
    ++cases;
    // "error:ReadError" falls back to pickle.load; "error:ValueError" (a
    // seek past 2^63) fails torch.load: both are loader_fails here.
    if (expected.size() == 1 && expected[0].rfind("error:", 0) == 0) {
      CHECK(l.tar.loader_fails);
      continue;
    }
    CHECK_FALSE(l.tar.loader_fails);
    std::vector<std::string> got;
    for (const auto& m : l.tar.members) {
      std::string type = m.typeflag == '\0' ? "\\0" : std::string(1, m.typeflag);
      if (m.type == sc::TarType::kDirectory) type = "5";
      got.push_back(m.name + "|" + std::to_string(m.size) + "|" + std::to_string(m.data_offset) +
                    "|" + type);
    }
    CHECK(got == expected);
  }
  CHECK(cases >= 29);
}

TEST_CASE("MG-TAR-BAD-CHECKSUM: first header fails the load, a later one ends it", "[tar]") {
  TarHeader bad;
  bad.name = "a";
  bad.size = 1;
  bad.break_checksum = true;
  auto first = List(TarBuilder().Header(bad).Data("1").End().Build());
  REQUIRE(Count(first.findings, "MG-TAR-BAD-CHECKSUM") == 1);
  CHECK(First(first.findings, "MG-TAR-BAD-CHECKSUM")->offset == 148);
  CHECK(first.tar.loader_fails);
  CHECK(first.tar.members.empty());

  auto later = List(TarBuilder().File("ok", "1").Header(bad).Data("1").End().Build());
  REQUIRE(Count(later.findings, "MG-TAR-BAD-CHECKSUM") == 1);
  CHECK(First(later.findings, "MG-TAR-BAD-CHECKSUM")->offset == 1024 + 148);
  CHECK_FALSE(later.tar.loader_fails);
  CHECK(later.tar.members.size() == 1);
  CHECK(later.tar.end_reason == "invalid header");
  CHECK_FALSE(sc::LooksLikeTar(TarBuilder().Header(bad).Data("1").Build()));
}

TEST_CASE("MG-TAR-BAD-NUMBER: lax octal is followed, invalid and negative stop", "[tar]") {
  TarHeader h;
  h.size_field = std::string("+0o3 \0\0\0\0\0\0\0", 12);
  auto lax = List(TarBuilder().Header(h).Data("abc").End().Build());
  CHECK(Count(lax.findings, "MG-TAR-BAD-NUMBER") == 1);
  REQUIRE(lax.tar.members.size() == 1);
  CHECK(lax.tar.members[0].size == 3);
  CHECK(First(lax.findings, "MG-TAR-BAD-NUMBER")->offset == 124);

  h.size_field = std::string("0_3\0\0\0\0\0\0\0\0\0", 12);
  auto underscore = List(TarBuilder().Header(h).Data("abc").End().Build());
  CHECK(Count(underscore.findings, "MG-TAR-BAD-NUMBER") == 1);
  CHECK(underscore.tar.members.at(0).size == 3);

  h.size_field = std::string("00000000009\0", 12);  // not octal: tarfile rejects the header
  auto invalid = List(TarBuilder().Header(h).Data("abc").End().Build());
  CHECK(Count(invalid.findings, "MG-TAR-BAD-NUMBER") == 1);
  CHECK(invalid.tar.loader_fails);
  CHECK(invalid.tar.members.empty());

  h.size_field = std::string("\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xfe", 12);
  auto negative = List(TarBuilder().Header(h).End().Build());
  CHECK(Count(negative.findings, "MG-TAR-BAD-NUMBER") == 1);
  CHECK(negative.tar.members.empty());

  h.size_field = std::string("\x80\0\0\0\0\0\0\0\0\0\0\x03", 12);  // base-256: supported
  auto b256 = List(TarBuilder().Header(h).Data("abc").End().Build());
  CHECK(b256.findings.empty());
  CHECK(b256.tar.members.at(0).size == 3);

  h.size_field = std::string("\x80\x01\0\0\0\0\0\0\0\0\0\0", 12);  // 2^80: overflows
  auto huge = List(TarBuilder().Header(h).End().Build());
  CHECK(Count(huge.findings, "MG-TAR-BAD-NUMBER") == 1);
}

TEST_CASE("MG-TAR-OUT-OF-BOUNDS: data past EOF makes tarfile raise", "[tar]") {
  TarHeader h;
  h.size = 4096;
  auto bytes = TarBuilder().Header(h).Data("short").Build();
  auto l = List(bytes);
  REQUIRE(Count(l.findings, "MG-TAR-OUT-OF-BOUNDS") == 1);
  CHECK(First(l.findings, "MG-TAR-OUT-OF-BOUNDS")->offset == 512);
  CHECK(l.tar.loader_fails);
  REQUIRE(l.tar.members.size() == 1);
  CHECK_FALSE(l.tar.members[0].data_in_bounds);
  sc::MemorySource src(bytes);
  CHECK_FALSE(sc::ExtractTarMember(src, l.tar.members[0], 1 << 20).ok());
  // Data that fits but whose block padding does not: tarfile also raises.
  auto unpadded = TarBuilder().File("a", "abc").Build();
  unpadded.resize(512 + 3);
  auto u = List(unpadded);
  CHECK(Count(u.findings, "MG-TAR-OUT-OF-BOUNDS") == 1);
  CHECK(u.tar.loader_fails);
}

TEST_CASE("MG-TAR-UNSAFE-NAME: parent steps and absolute paths", "[tar]") {
  auto l = List(TarBuilder().File("../evil", "x").File("/etc/x", "y").File("ok/name", "z").End().Build());
  CHECK(Count(l.findings, "MG-TAR-UNSAFE-NAME") == 2);
}

TEST_CASE("MG-TAR-DUPLICATE-NAME: critical, and the loader's member is the last", "[tar]") {
  auto l = List(TarBuilder().File("pickle", "first").File("pickle", "second!").End().Build());
  REQUIRE(Count(l.findings, "MG-TAR-DUPLICATE-NAME") == 1);
  CHECK(First(l.findings, "MG-TAR-DUPLICATE-NAME")->severity == modelgate::core::Severity::kCritical);
  const sc::TarMember* m = sc::ResolveTarMember(l.tar, "pickle", sc::TarAccess::kExtractFile);
  REQUIRE(m != nullptr);
  CHECK(m->size == 7);
  CHECK(m == &l.tar.members[1]);
}

TEST_CASE("MG-TAR-LINK and MG-TAR-SPECIAL: links resolve as tarfile resolves them", "[tar]") {
  auto l = List(TarBuilder()
                    .File("payload", "cos\nsystem\n.")
                    .Link("pickle", "payload", '2')
                    .Link("storages", "/etc/passwd", '2')
                    .Link("tensors", "payload", '1')
                    .Link("dev", "", '3')
                    .Link("fifo", "", '6')
                    .End()
                    .Build());
  CHECK(Count(l.findings, "MG-TAR-LINK") == 3);
  CHECK(Count(l.findings, "MG-TAR-SPECIAL") == 2);
  const sc::TarMember* p = sc::ResolveTarMember(l.tar, "pickle", sc::TarAccess::kExtractFile);
  REQUIRE(p != nullptr);
  CHECK(p->name == "payload");
  // extract() writes the symlink; open() then reads the host's file.
  CHECK(sc::ResolveTarMember(l.tar, "pickle", sc::TarAccess::kExtract) == nullptr);
  const sc::TarMember* t = sc::ResolveTarMember(l.tar, "tensors", sc::TarAccess::kExtract);
  REQUIRE(t != nullptr);
  CHECK(t->name == "payload");
  CHECK(sc::LooksLikeTorchTar(l.tar));

  std::vector<sc::Finding> f;
  auto torch = sc::FindTorchTarMembers(l.tar, &f);
  CHECK(torch.pickle != nullptr);
  CHECK(torch.tensors != nullptr);
  CHECK(torch.storages == nullptr);
  REQUIRE(Count(f, "MG-TAR-LINK") == 3);
  CHECK(std::count_if(f.begin(), f.end(), [](const sc::Finding& x) {
          return x.severity == modelgate::core::Severity::kCritical;
        }) == 1);
  // A hard link only sees members before it; a symlink loop resolves to nothing.
  auto loop = List(TarBuilder().Link("a", "b", '2').Link("b", "a", '2').End().Build());
  CHECK(sc::ResolveTarMember(loop.tar, "a", sc::TarAccess::kExtractFile) == nullptr);
  auto forward = List(TarBuilder().Link("h", "later", '1').File("later", "x").End().Build());
  CHECK(sc::ResolveTarMember(forward.tar, "h", sc::TarAccess::kExtractFile) == nullptr);
}

TEST_CASE("MG-TAR-HIDDEN-DATA: bytes after the end and in padding", "[tar]") {
  auto clean = TarBuilder().File("a", "abc").End().Build();
  CHECK(List(clean).findings.empty());
  auto after = clean;
  after.push_back('X');
  auto l = List(after);
  REQUIRE(Count(l.findings, "MG-TAR-HIDDEN-DATA") == 1);
  CHECK(First(l.findings, "MG-TAR-HIDDEN-DATA")->offset == clean.size());
  // A second archive after a single zero block: tarfile never reads it.
  auto second = List(TarBuilder().File("a", "1").Raw(std::string(512, '\0')).File("b", "2").End().Build());
  CHECK(second.tar.members.size() == 1);
  CHECK(Count(second.findings, "MG-TAR-HIDDEN-DATA") == 1);
  // Non-zero block padding after member data.
  auto pad = TarBuilder().File("a", "abc").Build();
  pad[512 + 3] = 'Z';
  auto p = List(TarBuilder().Raw(std::string(pad.begin(), pad.end())).End().Build());
  REQUIRE(Count(p.findings, "MG-TAR-HIDDEN-DATA") == 1);
  CHECK(First(p.findings, "MG-TAR-HIDDEN-DATA")->severity == modelgate::core::Severity::kMedium);
  CHECK(First(p.findings, "MG-TAR-HIDDEN-DATA")->offset == 515);
}

TEST_CASE("zero tail: max_zero_tail_bytes at N and N+1", "[tar][limits]") {
  sc::TarLimits limits;
  limits.max_zero_tail_bytes = 2048;
  auto at = TarBuilder().File("a", "1").Raw(std::string(2048, '\0')).Build();
  CHECK(List(at, limits).findings.empty());
  auto past = TarBuilder().File("a", "1").Raw(std::string(2049, '\0')).Build();
  CHECK(Count(List(past, limits).findings, "MG-TAR-HIDDEN-DATA") == 1);
}

TEST_CASE("PAX and GNU long names: tarfile's order, and disagreements", "[tar][pax]") {
  // The first header of a chain wins.
  auto lx = List(TarBuilder().LongName("gnu-n").Pax({{"path", "pax-n"}}).File("short", "x").End().Build());
  REQUIRE(lx.tar.members.size() == 1);
  CHECK(lx.tar.members[0].name == "gnu-n");
  CHECK(lx.tar.members[0].header_offset == 0);
  CHECK(Count(lx.findings, "MG-TAR-PAX-MISMATCH") >= 1);
  auto xl = List(TarBuilder().Pax({{"path", "pax-n"}}).LongName("gnu-n").File("short", "x").End().Build());
  CHECK(xl.tar.members.at(0).name == "pax-n");

  // A long name that extends the truncated ustar name agrees.
  const std::string long_name = std::string(120, 'n');
  auto ok = List(TarBuilder().Pax({{"path", long_name}}).File(long_name.substr(0, 100), "x").End().Build());
  CHECK(ok.findings.empty());
  CHECK(ok.tar.members.at(0).name == long_name);

  // PAX size overrides the header's size, which disagrees.
  TarHeader h;
  h.size = 3;
  auto sized = List(TarBuilder().Pax({{"size", "5"}}).Header(h).Data("abcde").End().Build());
  CHECK(sized.tar.members.at(0).size == 5);
  CHECK(Count(sized.findings, "MG-TAR-PAX-MISMATCH") == 1);
  // Size 0 in the header with a PAX size is how tarfile writes big members.
  h.size = 0;
  auto big = List(TarBuilder().Pax({{"size", "5"}}).Header(h).Data("abcde").End().Build());
  CHECK(big.findings.empty());
}

TEST_CASE("MG-TAR-PAX-GLOBAL: global path/size override every member", "[tar][pax]") {
  auto path = List(TarBuilder().Pax({{"path", "same"}}, 'g').File("a", "1").File("b", "2").End().Build());
  CHECK(Count(path.findings, "MG-TAR-PAX-GLOBAL") == 1);
  CHECK(Count(path.findings, "MG-TAR-DUPLICATE-NAME") == 1);
  REQUIRE(path.tar.members.size() == 2);
  CHECK(path.tar.members[1].name == "same");
  auto size = List(TarBuilder().Pax({{"size", "2"}}, 'g').File("a", "abc").File("b", "z").End().Build());
  CHECK(Count(size.findings, "MG-TAR-PAX-GLOBAL") == 1);
  REQUIRE(size.tar.members.size() == 2);
  CHECK(size.tar.members[0].size == 2);        // what extractfile reads
  CHECK(size.tar.members[1].data_offset == 2560);  // where the next header was (skip 3)
  CHECK(Count(size.findings, "MG-TAR-PAX-MISMATCH") == 2);
  // A harmless global record is not reported.
  CHECK(List(TarBuilder().Pax({{"comment", "hi"}}, 'g').File("a", "1").End().Build()).findings.empty());
}

TEST_CASE("MG-TAR-PAX-MALFORMED: bad framing, duplicates, lax sizes, records in padding", "[tar][pax]") {
  auto framing = List(TarBuilder().File("first", "1").PaxRaw("8 path=x\n").File("a", "1").End().Build());
  CHECK(Count(framing.findings, "MG-TAR-PAX-MALFORMED") == 1);
  CHECK(framing.tar.members.size() == 1);  // tarfile ends the archive there
  CHECK_FALSE(framing.tar.loader_fails);
  auto at0 = List(TarBuilder().PaxRaw("8 path=x\n").File("a", "1").End().Build());
  CHECK(at0.tar.loader_fails);
  auto dup = List(TarBuilder().Pax({{"path", "a"}, {"path", "b"}}).File("a", "1").End().Build());
  CHECK(Count(dup.findings, "MG-TAR-PAX-MALFORMED") == 1);
  CHECK(dup.tar.members.at(0).name == "b");
  auto lax = List(TarBuilder().Pax({{"size", " +1_0"}}).Header(TarHeader{}).Data(std::string(10, 'x')).End().Build());
  CHECK(Count(lax.findings, "MG-TAR-PAX-MALFORMED") == 1);
  CHECK(lax.tar.members.at(0).size == 10);
  // A record in the padding after the declared size: tarfile reads it.
  TarHeader x;
  x.name = "././@PaxHeader";
  x.type = 'x';
  x.size = 1;
  auto padded = List(TarBuilder().Header(x).Data("\n" + TarBuilder::Records({{"path", "hidden"}}), true)
                         .File("a", "1").End().Build());
  CHECK(Count(padded.findings, "MG-TAR-PAX-MALFORMED") == 1);  // '\n' is not a record
  CHECK(padded.tar.loader_fails);
  auto in_pad = List(TarBuilder().Header(x).Data(TarBuilder::Records({{"path", "hidden"}}))
                         .File("a", "1").End().Build());
  CHECK(Count(in_pad.findings, "MG-TAR-PAX-MALFORMED") == 1);
  CHECK(in_pad.tar.members.at(0).name == "hidden");
}

TEST_CASE("MG-TAR-UNKNOWN-TYPE, MG-TAR-UNSUPPORTED, MG-TAR-MALFORMED", "[tar]") {
  auto unknown = List(TarBuilder().File("weird", "zz", 'Z').End().Build());
  CHECK(Count(unknown.findings, "MG-TAR-UNKNOWN-TYPE") == 1);
  CHECK(unknown.tar.members.at(0).HasData());
  auto sparse = List(TarBuilder().File("s", "zz", 'S').End().Build());
  CHECK(Count(sparse.findings, "MG-TAR-UNSUPPORTED") == 1);
  auto gnu_sparse = List(TarBuilder().Pax({{"GNU.sparse.size", "4"}}).File("s", "zz").End().Build());
  CHECK(Count(gnu_sparse.findings, "MG-TAR-UNSUPPORTED") == 1);
  auto truncated = List(TarBuilder().File("a", "1").Raw("partial").Build());
  CHECK(Count(truncated.findings, "MG-TAR-MALFORMED") == 1);
  CHECK(truncated.tar.members.size() == 1);
  TarHeader dir;
  dir.name = "d";
  dir.size = 512;
  dir.type = '5';
  auto dir_size = List(TarBuilder().Header(dir).File("a", "1").End().Build());
  CHECK(Count(dir_size.findings, "MG-TAR-MALFORMED") == 1);
  CHECK(dir_size.tar.members.at(1).data_offset == 1024);  // tarfile skipped nothing
  auto dangling = List(TarBuilder().LongName("x").Build());
  CHECK(Count(dangling.findings, "MG-TAR-MALFORMED") == 1);
  CHECK(dangling.tar.loader_fails);
  // A long name without its NUL runs on into the padding in tarfile.
  TarHeader l;
  l.name = "././@LongLink";
  l.type = 'L';
  l.size = 3;
  auto bytes = TarBuilder().Header(l).Data("abcdef", true).File("x", "1").End().Build();
  auto runon = List(bytes);
  CHECK(Count(runon.findings, "MG-TAR-MALFORMED") == 1);
  CHECK(runon.tar.members.at(0).name == "abcdef");
  CHECK(List({}).tar.loader_fails);  // empty file
}

TEST_CASE("limits: members, long names, PAX bytes, chains at N and N+1", "[tar][limits]") {
  sc::TarLimits limits;
  limits.max_members = 3;
  TarBuilder three;
  for (int i = 0; i < 3; ++i) three.File("m" + std::to_string(i), "x");
  CHECK(List(TarBuilder(three).End().Build(), limits).findings.empty());
  auto four = List(TarBuilder(three).File("m3", "x").End().Build(), limits);
  CHECK(Count(four.findings, "MG-TAR-LIMIT") == 1);
  CHECK(four.tar.members.size() == 3);

  limits = {};
  limits.max_long_name_bytes = 101;  // 100 characters + NUL
  CHECK(List(TarBuilder().LongName(std::string(100, 'n')).File("n", "1").End().Build(), limits).findings.empty());
  CHECK(Count(List(TarBuilder().LongName(std::string(101, 'n')).File("n", "1").End().Build(), limits).findings,
              "MG-TAR-LIMIT") == 1);

  limits = {};
  const std::string body = TarBuilder::Records({{"comment", std::string(50, 'c')}});
  limits.max_pax_bytes = body.size();
  CHECK(List(TarBuilder().PaxRaw(body).File("a", "1").End().Build(), limits).findings.empty());
  const std::string body1 = TarBuilder::Records({{"comment", std::string(51, 'c')}});
  CHECK(Count(List(TarBuilder().PaxRaw(body1).File("a", "1").End().Build(), limits).findings,
              "MG-TAR-LIMIT") == 1);

  limits = {};
  limits.max_extension_chain = 2;
  auto chain2 = TarBuilder().Pax({{"comment", "1"}}).Pax({{"comment", "2"}}).File("a", "1").End().Build();
  CHECK(Count(List(chain2, limits).findings, "MG-TAR-LIMIT") == 0);
  auto chain3 = TarBuilder().Pax({{"comment", "1"}}).Pax({{"comment", "2"}}).Pax({{"comment", "3"}})
                    .File("a", "1").End().Build();
  CHECK(Count(List(chain3, limits).findings, "MG-TAR-LIMIT") == 1);
}

TEST_CASE("a real legacy torch tar: members, layout and pickle spans", "[tar][torch]") {
  // Written by make_archive_fixtures.py and loaded back by torch 1.13.
  auto bytes = ReadFile(std::string(MG_ARCHIVE_DATA_DIR) + "/torch-legacy.tar");
  auto l = List(bytes);
  CHECK(l.findings.empty());
  REQUIRE(sc::LooksLikeTorchTar(l.tar));
  std::vector<sc::Finding> f;
  auto torch = sc::FindTorchTarMembers(l.tar, &f);
  CHECK(f.empty());
  REQUIRE(torch.storages != nullptr);
  REQUIRE(torch.tensors != nullptr);
  REQUIRE(torch.pickle != nullptr);
  sc::MemorySource src(bytes);

  auto storages = sc::ExtractTarMember(src, *torch.storages, 1 << 20);
  REQUIRE(storages.ok());
  auto s = sc::SplitTorchTarMember("storages", storages.value(), torch.storages->data_offset, &f);
  CHECK(f.empty());
  CHECK(s.complete);
  CHECK(s.consumed == storages.value().size());
  REQUIRE(s.pickles.size() == 3);
  CHECK(s.pickles[0].role == "count");
  CHECK(s.pickles[1].role == "storage args");
  CHECK(s.pickles[2].role == "storage views");
  CHECK(s.pickles[2].begin == s.pickles[1].end + 8 + 6 * 4);  // int64 count + 6 floats

  auto tensors = sc::ExtractTarMember(src, *torch.tensors, 1 << 20);
  REQUIRE(tensors.ok());
  auto t = sc::SplitTorchTarMember("tensors", tensors.value(), torch.tensors->data_offset, &f);
  CHECK(t.complete);
  REQUIRE(t.pickles.size() == 2);
  CHECK(t.pickles[1].role == "tensor args");
  CHECK(t.consumed == tensors.value().size());
  CHECK(t.consumed == t.pickles[1].end + 8 + 2 * 16 + 8);  // rank 2

  auto pickle = sc::ExtractTarMember(src, *torch.pickle, 1 << 20);
  REQUIRE(pickle.ok());
  auto p = sc::SplitTorchTarMember("pickle", pickle.value(), torch.pickle->data_offset, &f);
  CHECK(p.complete);
  REQUIRE(p.pickles.size() == 1);
  CHECK(p.pickles[0].end == pickle.value().size());
  CHECK(f.empty());
}

TEST_CASE("MG-TAR-TORCH-LAYOUT: what the walk cannot follow goes to the pickle machine", "[tar][torch]") {
  std::vector<sc::Finding> f;
  // An unknown storage class: no element size.
  std::string storages = std::string("\x80\x02K\x01.", 5) +
                         std::string("\x80\x02(K\x00X\x03\x00\x00\x00" "cpucevil\nEvilStorage\nt.", 33) +
                         std::string(8, '\0');
  std::vector<uint8_t> bytes(storages.begin(), storages.end());
  auto s = sc::SplitTorchTarMember("storages", bytes, 1000, &f);
  CHECK_FALSE(s.complete);
  REQUIRE(Count(f, "MG-TAR-TORCH-LAYOUT") == 1);
  CHECK(f[0].offset == 1000 + 5 + 33);
  CHECK(f[0].member == "storages");
  REQUIRE(s.pickles.size() == 3);
  CHECK(s.pickles[2].begin == 5 + 33);
  CHECK(s.pickles[2].end == bytes.size());

  // A count that is not a plain int (a call): the rest is one stream.
  f.clear();
  const std::string call = "cos\nsystem\n(S'id'\ntR.";
  std::vector<uint8_t> c(call.begin(), call.end());
  auto t = sc::SplitTorchTarMember("tensors", c, 0, &f);
  CHECK(Count(f, "MG-TAR-TORCH-LAYOUT") == 1);
  REQUIRE(t.pickles.size() == 1);  // the whole member is the "count" pickle
  CHECK(t.pickles[0].end == c.size());

  // A truncated pickle member: the whole member is one stream.
  f.clear();
  std::vector<uint8_t> cut = {0x80, 0x02, 'c', 'o', 's'};
  auto p = sc::SplitTorchTarMember("pickle", cut, 0, &f);
  CHECK(Count(f, "MG-TAR-TORCH-LAYOUT") == 1);
  REQUIRE(p.pickles.size() == 1);
  CHECK(p.pickles[0].end == cut.size());
}

// --- checked arithmetic: every number read as Python's int, never wrapped ---

namespace {

// Base256 is a GNU base-256 field of `width` bytes: 0x80, then `value_be`
// right-aligned (big-endian bytes of the value).
std::string Base256(size_t width, const std::string& value_be) {
  std::string f(width, '\0');
  f[0] = '\x80';
  for (size_t i = 0; i < value_be.size(); ++i) f[width - value_be.size() + i] = value_be[i];
  return f;
}

}  // namespace

TEST_CASE("PAX record length of 20 digits: parsed exactly, never wrapped", "[tar][pax][overflow]") {
  // 2^64 + 31 wraps to 31 in uint64_t, the true length of this record; the
  // length is 20 digits, which tarfile's regex ([0-9]{1,20}) accepts, then
  // finds longer than the header: InvalidHeaderError, ReadError at offset 0.
  const std::string wrapped = "18446744073709551647 path=evil\n";
  REQUIRE(wrapped.size() == 31);
  auto first = List(TarBuilder().PaxRaw(wrapped).File("a", "1").End().Build());
  CHECK(Count(first.findings, "MG-TAR-PAX-MALFORMED") == 1);
  CHECK(first.tar.loader_fails);
  CHECK(first.tar.members.empty());
  // Later in the archive, tarfile ends the listing there without raising.
  auto later = List(TarBuilder().File("z", "1").PaxRaw(wrapped).File("a", "1").End().Build());
  CHECK(Count(later.findings, "MG-TAR-PAX-MALFORMED") == 1);
  CHECK_FALSE(later.tar.loader_fails);
  REQUIRE(later.tar.members.size() == 1);
  CHECK(later.tar.members[0].name == "z");
  // Twenty digits with leading zeros are a valid small length; 21 are not.
  const std::string zeros = "00000000000000000031 path=evil\n";
  auto ok = List(TarBuilder().PaxRaw(zeros).File("a", "1").End().Build());
  CHECK_FALSE(ok.tar.loader_fails);
  REQUIRE(ok.tar.members.size() == 1);
  CHECK(ok.tar.members[0].name == "evil");
  auto digits21 = List(TarBuilder().PaxRaw("000000000000000000032 path=evil\n").File("a", "1").End().Build());
  CHECK(digits21.tar.loader_fails);
  CHECK(digits21.tar.members.empty());
}

TEST_CASE("PAX size past 2^63 or 2^64: tarfile's seek fails, never a small size", "[tar][pax][overflow]") {
  TarHeader h;
  h.size = 1;
  // 2^64 + 1 wraps to 1 (the bytes present); 2^64 - 1 fits uint64_t but not
  // the block rounding; 2^63 fits neither off_t nor the file.
  for (const std::string size : {"18446744073709551617", "18446744073709551615",
                                 "9223372036854775808", "99999999999999999999999999"}) {
    INFO("size=" << size);
    auto l = List(TarBuilder().Pax({{"size", size}}).Header(h).Data("1").End().Build());
    CHECK(Count(l.findings, "MG-TAR-OUT-OF-BOUNDS") == 1);
    CHECK(l.tar.loader_fails);
    REQUIRE(l.tar.members.size() == 1);
    CHECK_FALSE(l.tar.members[0].data_in_bounds);
    CHECK(l.tar.members[0].size != 1);
    // Later members change nothing: getmembers() raises all the same.
    auto later = List(TarBuilder().File("z", "1").Pax({{"size", size}}).Header(h).Data("1").End().Build());
    CHECK(later.tar.loader_fails);
  }
  // A negative size moves tarfile's offset backwards: not modelled, and the
  // listing says it is incomplete.
  auto negative = List(TarBuilder().Pax({{"size", "-512"}}).Header(h).Data("1").End().Build());
  CHECK(Count(negative.findings, "MG-TAR-UNSUPPORTED") == 1);
  CHECK(negative.tar.incomplete);
  CHECK_FALSE(negative.tar.loader_fails);
}

TEST_CASE("PAX size past int()'s 4300 digits: not modelled, never read as its digits", "[tar][pax][overflow]") {
  // Debian's python3.11 raises ValueError for int() of 4301 digits, so
  // tarfile reads size 0 and lists the member's data as headers; the limit
  // is a setting (PYTHONINTMAXSTRDIGITS), so the reader stops there.
  TarHeader h;
  const std::string at_limit = std::string(4296, '0') + "1024";
  auto ok = List(TarBuilder().Pax({{"size", at_limit}}).Header(h).Data(std::string(1024, 'x')).End().Build());
  CHECK_FALSE(ok.tar.incomplete);
  REQUIRE(ok.tar.members.size() == 1);
  CHECK(ok.tar.members[0].size == 1024);
  const std::string past = std::string(4297, '0') + "1024";
  auto l = List(TarBuilder().Pax({{"size", past}}).Header(h).Data(std::string(1024, 'x')).End().Build());
  CHECK(Count(l.findings, "MG-TAR-UNSUPPORTED") == 1);
  CHECK(l.tar.incomplete);
  CHECK(l.tar.members.empty());
}

TEST_CASE("base-256 size of 2^63, 2^64 or more than 8 bytes: out of bounds, not invalid", "[tar][overflow]") {
  const std::string cases[] = {
      Base256(12, std::string("\x80\0\0\0\0\0\0\0", 8)),  // 2^63
      Base256(12, std::string("\x01\0\0\0\0\0\0\0\0", 9)),  // 2^64
      Base256(12, std::string("\xff\xff\xff\xff\xff\xff\xff\xff", 8)),  // 2^64 - 1
      Base256(12, std::string("\x01\0\0\0\0\0\0\0\0\0\x01", 11)),  // 2^80 + 1
  };
  for (const auto& field : cases) {
    TarHeader h;
    h.name = "b";
    h.size_field = field;
    // tarfile reads the header (Python ints have no bound), then its seek to
    // the next header raises: getmembers() fails wherever the member is.
    auto l = List(TarBuilder().File("z", "1").Header(h).Data("1").End().Build());
    CHECK(Count(l.findings, "MG-TAR-OUT-OF-BOUNDS") == 1);
    CHECK(Count(l.findings, "MG-TAR-BAD-NUMBER") == 1);
    CHECK(Count(l.findings, "MG-TAR-PAX-MISMATCH") == 0);
    CHECK(l.tar.loader_fails);
    REQUIRE(l.tar.members.size() == 2);
    CHECK(l.tar.members[1].name == "b");
    CHECK_FALSE(l.tar.members[1].data_in_bounds);
  }
  // Leading zero bytes do not count: 11 bytes holding 3 are 3.
  TarHeader small;
  small.size_field = Base256(12, "\x03");
  CHECK(List(TarBuilder().Header(small).Data("abc").End().Build()).tar.members.at(0).size == 3);
}

TEST_CASE("huge base-256 values in other fields are what tarfile accepts", "[tar][overflow]") {
  // mtime 2^88 - 1: tarfile lists the member; other readers may wrap it.
  TarHeader h;
  h.mtime_field = std::string("\x80") + std::string(11, '\xff');
  auto l = List(TarBuilder().Header(h).End().Build());
  CHECK_FALSE(l.tar.loader_fails);
  CHECK(l.tar.members.size() == 1);
  CHECK(Count(l.findings, "MG-TAR-BAD-NUMBER") == 1);
  CHECK(sc::LooksLikeTar(TarBuilder().Header(h).End().Build()));
}

TEST_CASE("a negative checksum that matches the signed sum is accepted", "[tar][overflow]") {
  // Bytes >= 0x80 make the signed-char sum negative; tarfile compares the
  // checksum field, read as a signed Python int, with it.
  TarHeader h;
  h.name = std::string(100, '\x80');
  h.linkname = std::string(100, '\x80');
  h.signed_checksum = true;
  auto bytes = TarBuilder().Header(h).End().Build();
  REQUIRE(bytes[148] == '-');
  CHECK(sc::LooksLikeTar(bytes));
  auto l = List(bytes);
  CHECK_FALSE(l.tar.loader_fails);
  CHECK(l.tar.members.size() == 1);
  CHECK(Count(l.findings, "MG-TAR-BAD-CHECKSUM") == 0);
  CHECK(Count(l.findings, "MG-TAR-BAD-NUMBER") == 1);  // not plain octal
}

TEST_CASE("negative sizes are not modelled: the listing is incomplete", "[tar][overflow]") {
  // tarfile reads "-1" as -1, skips _block(-1) == 0 bytes and reads the
  // next header from the member's data; extract() then copies 16 KiB - 1.
  TarHeader h;
  h.size_field = std::string("-1\0\0\0\0\0\0\0\0\0\0", 12);
  auto octal = List(TarBuilder().Header(h).File("b", "1").End().Build());
  CHECK(Count(octal.findings, "MG-TAR-UNSUPPORTED") == 1);
  CHECK(octal.tar.incomplete);
  CHECK_FALSE(octal.tar.loader_fails);
  h.size_field = std::string(12, '\xff');  // base-256 -1
  auto b256 = List(TarBuilder().Header(h).File("b", "1").End().Build());
  CHECK(Count(b256.findings, "MG-TAR-UNSUPPORTED") == 1);
  CHECK(b256.tar.incomplete);
  CHECK_FALSE(b256.tar.loader_fails);
  // A directory's size is never used to skip: negative is only reported.
  TarHeader d;
  d.name = "d";
  d.type = '5';
  d.size_field = std::string("-1\0\0\0\0\0\0\0\0\0\0", 12);
  auto dir = List(TarBuilder().Header(d).File("b", "1").End().Build());
  CHECK_FALSE(dir.tar.incomplete);
  CHECK(dir.tar.members.size() == 2);
}

TEST_CASE("the widest octal size is read exactly", "[tar][overflow]") {
  // Twelve octal digits without a NUL (2^36 - 1): far past the file.
  TarHeader h;
  h.size_field = "777777777777";
  auto l = List(TarBuilder().Header(h).Data("1").End().Build());
  REQUIRE(l.tar.members.size() == 1);
  CHECK(l.tar.members[0].size == 68719476735u);
  CHECK(l.tar.loader_fails);
  CHECK(Count(l.findings, "MG-TAR-OUT-OF-BOUNDS") == 1);
}

TEST_CASE("limits make the listing incomplete", "[tar][limits]") {
  sc::TarLimits limits;
  limits.max_members = 1;
  auto at = List(TarBuilder().File("a", "1").End().Build(), limits);
  CHECK_FALSE(at.tar.incomplete);
  auto past = List(TarBuilder().File("a", "1").File("b", "1").End().Build(), limits);
  CHECK(past.tar.incomplete);
}
