// torch's legacy checkpoints for conversion: the planner's persistent-id
// forms (PlanIds) on graphs built node by node, and
// scanner::ReadTorchLegacyCheckpoint on legacy files assembled here opcode
// by opcode (protocol 0 text, BINPERSID): each rule, and the record cap
// (max_tensors) at N and N+1.
#include <catch2/catch.hpp>

#include <cstdio>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "graph_builder.h"
#include "modelgate/convert.h"

namespace convert = modelgate::convert;
namespace core = modelgate::core;
namespace scanner = modelgate::scanner;
using Kind = scanner::PickleNode::Kind;

namespace {

using convert_test::CodeOf;
using convert_test::G;

convert::PlanIds Legacy() {
  convert::PlanIds ids;
  ids.form = convert::PlanIds::Form::kLegacyStorage;
  return ids;
}

}  // namespace

TEST_CASE("legacy storage ids: view_metadata None passes, a view or a zip id is refused", "[convert][legacy]") {
  auto graph = [](int form) {
    G g;
    uint32_t view = form == 1 ? g.Tuple({g.Str("v"), g.Int(0), g.Int(2)}) : g.None();
    uint32_t pid = form == 2 ? g.Persistent(g.Tuple({g.Str("storage"), g.Global("torch", "FloatStorage"), g.Str("0"),
                                                      g.Str("cpu"), g.Int(4)}))
                             : g.LegacyStorage("0", 4, view);
    scanner::PickleNode b;
    b.kind = Kind::kBool;
    uint32_t f = g.Add(b);
    uint32_t t = g.Call(g.Global("torch._utils", "_rebuild_tensor_v2"),
                        g.Tuple({pid, g.Int(0), g.Ints({4}), g.Ints({1}), f, g.Dict({})}));
    return g.Root(g.Dict({{g.Str("w"), t}}));
  };
  auto ok = convert::PlanStateDict(graph(0), {}, false, Legacy());
  REQUIRE(ok.ok());
  CHECK(ok.value().tensors[0].key == "0");
  CHECK(ok.value().tensors[0].storage_numel == 4);
  CHECK(CodeOf(convert::PlanStateDict(graph(1), {}, false, Legacy())) == core::Code::kConvUnsupported);
  CHECK(CodeOf(convert::PlanStateDict(graph(2), {}, false, Legacy())) == core::Code::kConvNotAllowed);
  // And the zip form refuses the legacy id.
  CHECK(CodeOf(convert::PlanStateDict(graph(0), {}, false)) == core::Code::kConvNotAllowed);
}

TEST_CASE("tar tensor ids: plain decimal keys name tensor records", "[convert][legacy]") {
  std::map<std::string, convert::TensorPlan> tensors;
  convert::TensorPlan t;
  t.dtype = core::Dtype::kI16;
  t.key = "5";
  t.storage_numel = 6;
  t.offset = 2;
  t.shape = {2, 2};
  t.stride = {1, 2};
  tensors.emplace("7", t);
  convert::PlanIds ids;
  ids.form = convert::PlanIds::Form::kTarTensor;
  ids.tar_tensors = &tensors;
  auto graph = [](uint32_t (*pid)(G&)) {
    G g;
    uint32_t p = g.Persistent(pid(g));
    return g.Root(g.Dict({{g.Str("w"), p}}));
  };
  auto r = convert::PlanStateDict(graph([](G& g) { return g.Str("7"); }), {}, false, ids);
  REQUIRE(r.ok());
  CHECK(r.value().tensors[0].name == "w");
  CHECK(r.value().tensors[0].dtype == core::Dtype::kI16);
  CHECK(r.value().tensors[0].offset == 2);
  CHECK(convert::PlanStateDict(graph([](G& g) { return g.Int(7); }), {}, false, ids).ok());
  // int() would take these; the planner takes plain digits only.
  for (const char* odd : {" 7", "+7", "7_0", "", "-7"}) {
    G g;
    uint32_t p = g.Persistent(g.Str(odd));
    CHECK(CodeOf(convert::PlanStateDict(g.Root(g.Dict({{g.Str("w"), p}})), {}, false, ids)) ==
          core::Code::kConvNotAllowed);
  }
  CHECK(CodeOf(convert::PlanStateDict(graph([](G& g) { return g.Str("8"); }), {}, false, ids)) ==
        core::Code::kConvNotAllowed);
  // A module container id (a tuple) is no tensor.
  CHECK(CodeOf(convert::PlanStateDict(graph([](G& g) { return g.Tuple({g.Str("x")}); }), {}, false, ids)) ==
        core::Code::kConvNotAllowed);
  // max_rank applies to the record: rank 2 at N = 2 passes, N = 1 refuses.
  convert::ConvertLimits lim;
  lim.max_rank = 2;
  CHECK(convert::PlanStateDict(graph([](G& g) { return g.Str("7"); }), lim, false, ids).ok());
  lim.max_rank = 1;
  CHECK(CodeOf(convert::PlanStateDict(graph([](G& g) { return g.Str("7"); }), lim, false, ids)) ==
        core::Code::kConvLimit);
  // A record whose view runs past its storage: offset 2 + 1 + 2 = 5 is the
  // last of 6; one more element is past it.
  tensors["7"].storage_numel = 5;
  CHECK(CodeOf(convert::PlanStateDict(graph([](G& g) { return g.Str("7"); }), {}, false, ids)) ==
        core::Code::kConvStorage);
}

namespace {

// Protocol 0 text: a legacy file whose object is a list of storage ids, one
// per key, each storage one float32 element.
std::vector<uint8_t> LegacyFile(const std::vector<std::string>& named, const std::vector<std::string>& listed,
                                size_t cut = 0) {
  std::string s;
  s += "\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19.";  // MAGIC_NUMBER
  s += "\x80\x02M\xe9\x03.";                                          // 1001
  s += "}.";                                                          // sys_info
  s += "(";
  for (const auto& k : named) s += "(Vstorage\nctorch\nFloatStorage\nV" + k + "\nVcpu\nI1\nNtQ";
  s += "l.";
  s += "(";
  for (const auto& k : listed) s += "V" + k + "\n";
  s += "l.";
  for (size_t i = 0; i < listed.size(); ++i) {
    s += std::string("\x01\0\0\0\0\0\0\0", 8);
    s += std::string("\0\0\x80\x3f", 4);  // 1.0f
  }
  std::vector<uint8_t> out(s.begin(), s.end());
  out.resize(out.size() - cut);
  return out;
}

core::Code ReadCode(const std::vector<uint8_t>& file, uint64_t max_records = 1'000'000) {
  auto r = scanner::ReadTorchLegacyCheckpoint(file, scanner::ScanOptions{}, max_records);
  return r.ok() ? core::Code::kOk : r.error().code;
}

}  // namespace

TEST_CASE("legacy reader: storages in list order, after the five pickles", "[convert][legacy]") {
  auto file = LegacyFile({"a", "b"}, {"b", "a"});
  auto r = scanner::ReadTorchLegacyCheckpoint(file, scanner::ScanOptions{}, 10);
  REQUIRE(r.ok());
  const auto& s = r.value().storages;
  REQUIRE(s.size() == 2);
  CHECK(s[0].key == "b");
  CHECK(s[1].key == "a");
  CHECK(s[0].numel == 1);
  CHECK(s[0].bytes == 4);
  CHECK(s[0].offset == file.size() - 24 + 8);
  CHECK(s[1].offset == file.size() - 4);
  CHECK(s[1].storage_type == "FloatStorage");
  CHECK_FALSE(r.value().tar);
}

TEST_CASE("legacy reader: what torch would fail on or read otherwise is refused", "[convert][legacy]") {
  CHECK(ReadCode(LegacyFile({"a"}, {"a", "a"})) == core::Code::kConvStorage);  // listed twice
  CHECK(ReadCode(LegacyFile({"a"}, {"a", "b"})) == core::Code::kConvStorage);  // named by no id
  auto cut = LegacyFile({"a"}, {"a"}, 1);
  auto r = scanner::ReadTorchLegacyCheckpoint(cut, scanner::ScanOptions{}, 10);
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code == core::Code::kConvStorage);  // runs past the file
  CHECK(r.error().offset == cut.size() - 11);         // its count
  CHECK(ReadCode(LegacyFile({"a"}, {"a"}, 10)) == core::Code::kConvStorage);  // count cut
  // Not the layout: another magic number, a file of one pickle.
  auto other = LegacyFile({"a"}, {"a"});
  other[5] ^= 1;
  CHECK(ReadCode(other) == core::Code::kConvUnsupported);
  std::vector<uint8_t> one = {0x80, 0x02, '}', '.'};
  CHECK(ReadCode(one) == core::Code::kConvUnsupported);
}

TEST_CASE("legacy reader: storage records at max_tensors N pass, N+1 are refused", "[convert][legacy][limits]") {
  auto file = LegacyFile({"a", "b", "c"}, {"a", "b", "c"});
  CHECK(ReadCode(file, 3) == core::Code::kOk);
  auto r = scanner::ReadTorchLegacyCheckpoint(file, scanner::ScanOptions{}, 2);
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code == core::Code::kConvLimit);
  CHECK(r.error().message.find("max_tensors (2)") != std::string::npos);
}

namespace {

std::string Le(uint64_t v, int bytes) {
  std::string s;
  for (int i = 0; i < bytes; ++i) s += static_cast<char>((v >> (8 * i)) & 0xff);
  return s;
}

// A ustar member as Python's tarfile writes one: a 512-byte header (octal
// fields, checksum over the header with its own field as spaces), then the
// data padded to 512 bytes.
std::string TarMember(const std::string& name, const std::string& data) {
  std::string h(512, '\0');
  auto field = [&](size_t at, size_t width, uint64_t v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%0*llo", static_cast<int>(width - 1), static_cast<unsigned long long>(v));
    h.replace(at, width - 1, buf);
  };
  h.replace(0, name.size(), name);
  field(100, 8, 0644);
  field(108, 8, 0);
  field(116, 8, 0);
  field(124, 12, data.size());
  field(136, 12, 0);
  h[156] = '0';
  h.replace(257, 8, std::string("ustar\0" "00", 8));
  h.replace(148, 8, "        ");
  unsigned sum = 0;
  for (unsigned char c : h) sum += c;
  char buf[8];
  std::snprintf(buf, sizeof buf, "%06o", sum);
  h.replace(148, 8, std::string(buf, 6) + std::string("\0 ", 2));
  std::string padded = data + std::string((512 - data.size() % 512) % 512, '\0');
  return h + padded;
}

// A tar checkpoint of `storages` float storages of one element (keys
// 100...) and `tensors` tensor records over the first, in protocol 0.
std::vector<uint8_t> TarFile(int storages, int tensors) {
  std::string s = "I" + std::to_string(storages) + "\n.";
  for (int i = 0; i < storages; ++i) {
    s += "(I" + std::to_string(100 + i) + "\nVcpu\nctorch\nFloatStorage\nt.";
    s += Le(1, 8) + Le(0x3f800000, 4);
  }
  s += "(l.";
  std::string t = "I" + std::to_string(tensors) + "\n.";
  for (int i = 0; i < tensors; ++i) {
    t += "(I" + std::to_string(i) + "\nI100\nctorch\nFloatTensor\nt.";
    t += Le(1, 4) + Le(0, 4) + Le(1, 8) + Le(1, 8) + Le(0, 8);
  }
  std::string tar = TarMember("pickle", "(dp0\nVw\nP0\ns.") + TarMember("tensors", t) + TarMember("storages", s) +
                    std::string(1024, '\0');
  return std::vector<uint8_t>(tar.begin(), tar.end());
}

core::Code TarCode(const std::vector<uint8_t>& file, uint64_t max_records) {
  auto r = scanner::ReadTorchTarCheckpoint(file, scanner::ScanOptions{}, max_records);
  return r.ok() ? core::Code::kOk : r.error().code;
}

}  // namespace

TEST_CASE("tar reader: members, records and the object's ids", "[convert][legacy]") {
  auto file = TarFile(2, 1);
  auto r = scanner::ReadTorchTarCheckpoint(file, scanner::ScanOptions{}, 10);
  REQUIRE(r.ok());
  const auto& ck = r.value();
  CHECK(ck.tar);
  REQUIRE(ck.storages.size() == 2);
  CHECK(ck.storages[1].key == "101");
  CHECK(ck.storages[0].bytes == 4);
  REQUIRE(ck.tensors.size() == 1);
  CHECK(ck.tensors[0].storage_key == "100");
  CHECK(ck.tensors[0].sizes == std::vector<uint64_t>{1});
  convert::ConvertOptions opts;
  auto plan = convert::PlanTorchLegacy(ck, opts);
  REQUIRE(plan.ok());
  REQUIRE(plan.value().plan.tensors.size() == 1);
  CHECK(plan.value().plan.tensors[0].name == "w");  // protocol 0 PERSID "0"
  CHECK(plan.value().plan.tensors[0].dtype == core::Dtype::kF32);
}

TEST_CASE("tar reader: storage and tensor records at max_tensors N pass, N+1 are refused", "[convert][legacy][limits]") {
  CHECK(TarCode(TarFile(3, 1), 3) == core::Code::kOk);
  CHECK(TarCode(TarFile(3, 1), 2) == core::Code::kConvLimit);
  CHECK(TarCode(TarFile(1, 3), 3) == core::Code::kOk);
  CHECK(TarCode(TarFile(1, 3), 2) == core::Code::kConvLimit);
}

TEST_CASE("graph capture: protocol 0/1 bools (I00, I01) are bools, other INTs ints", "[convert][graph]") {
  const std::string text = "(I00\nI01\nI2\nI001\nt.";
  std::vector<uint8_t> b(text.begin(), text.end());
  scanner::PickleOptions po;
  po.capture_graph = true;
  auto a = scanner::AnalyzePickle(b, po);
  REQUIRE(a.graphs.size() == 1);
  const auto& g = a.graphs[0];
  const auto& items = g.nodes[g.root].items;
  REQUIRE(items.size() == 4);
  CHECK(g.nodes[items[0]].kind == Kind::kBool);
  CHECK(g.nodes[items[0]].int_value == 0);
  CHECK(g.nodes[items[1]].kind == Kind::kBool);
  CHECK(g.nodes[items[1]].int_value == 1);
  CHECK(g.nodes[items[2]].kind == Kind::kInt);
  CHECK(g.nodes[items[3]].kind == Kind::kInt);  // only "01" exactly is True
}
