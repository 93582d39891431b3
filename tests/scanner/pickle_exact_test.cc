// Exact, not broad (issue 9 point 9): real benign constructs pass with the
// medium "pickle format" finding only, each for the reason the loader has;
// every known code-execution gadget is critical.
#include <catch2/catch.hpp>

#include <fstream>
#include <iterator>
#include <string>
#include <tuple>
#include <vector>

#include <zlib.h>

#include "pickle_builder.h"

namespace sc = modelgate::scanner;
using modelgate::core::Severity;
using sc::GlobalClass;

namespace {

std::vector<uint8_t> ReadReal(const std::string& name) {
  std::ifstream f(std::string(MG_REAL_FIXTURE_DIR) + "/" + name, std::ios::binary);
  REQUIRE(f.good());
  return {std::istreambuf_iterator<char>(f), {}};
}

// Worst severity among findings other than the format fact.
Severity Worst(const std::vector<sc::Finding>& fs) {
  Severity w = Severity::kInfo;
  for (const auto& f : fs) {
    if (f.id != "MG-PK-PICKLE-FORMAT" && f.severity < w) w = f.severity;
  }
  return w;
}

}  // namespace

TEST_CASE("a tensor pickled with plain pickle: the latin1 literal is evaluated and scanned",
          "[pickle][exact][torch]") {
  for (const char* name : {"torch-tensor-p2.pkl", "torch-tensor-p4.pkl"}) {
    INFO(name);
    auto a = sc::AnalyzePickle(ReadReal(name));
    // The outer pickle plus the five of torch's legacy format inside.
    CHECK(a.streams.size() == 6);
    CHECK_FALSE(a.incomplete);
    for (const auto& imp : a.imports) {
      INFO(imp.FullName());
      CHECK(imp.safety == GlobalClass::kSafe);
    }
    auto fs = sc::PickleFindings(a);
    CHECK(Worst(fs) >= Severity::kMedium);
    CHECK(CountId(fs, "MG-PK-NESTED-PICKLE") == 1);
  }
}

TEST_CASE("_codecs.encode: only (str, 'latin1') is a value, and it is scanned", "[pickle][exact]") {
  PickleBuilder inner;
  inner.Proto(2).CallGlobal("os", "system").Stop();
  std::string latin1;  // the nested bytes as pickle.py protocol 2 writes them: latin-1 -> str
  for (uint8_t c : inner.bytes()) {
    if (c < 0x80) {
      latin1.push_back(static_cast<char>(c));
    } else {
      latin1.push_back(static_cast<char>(0xC0 | (c >> 6)));
      latin1.push_back(static_cast<char>(0x80 | (c & 0x3F)));
    }
  }
  PickleBuilder b;
  b.Proto(2).Global("torch.storage", "_load_from_bytes").Global("_codecs", "encode")
      .BinUnicode(latin1).BinUnicode("latin1").Tuple2().Reduce().Tuple1().Reduce().Stop();
  auto fs = FindingsOf(b);
  REQUIRE(FindId(fs, "MG-PK-CRITICAL-IMPORT") != nullptr);
  CHECK(FindId(fs, "MG-PK-CRITICAL-IMPORT")->global == "os.system");
  // Another codec, or a non-literal, is not evaluated: needs review.
  PickleBuilder rot;
  rot.Proto(2).Global("_codecs", "encode").BinUnicode("abc").BinUnicode("rot13").Tuple2().Reduce().Stop();
  auto ra = Analyze(rot);
  REQUIRE(ra.imports.size() == 1);
  CHECK(ra.imports[0].safety == GlobalClass::kUnknown);
  // A code point above U+00FF: the encode raises there.
  PickleBuilder wide;
  wide.Proto(2).Global("_codecs", "encode").BinUnicode("\xc4\x80").BinUnicode("latin1").Tuple2().Reduce().Stop();
  CHECK_FALSE(Analyze(wide).streams[0].complete);
}

TEST_CASE("value types: safe with literal arguments only", "[pickle][exact][stdlib]") {
  // datetime.datetime(bytes) and Decimal('1.5'): plain values.
  PickleBuilder ok;
  ok.Proto(3).Global("datetime", "datetime").ShortBytes("\x07\xe8\x01\x02\x03\x04\x05\x00\x00\x06")
      .Tuple1().Reduce().Pop()
      .Global("decimal", "Decimal").BinUnicode("1.5").Tuple1().Reduce().Pop()
      .Global("collections", "defaultdict").Global("builtins", "list").Tuple1().Reduce().Pop()
      .Global("collections", "defaultdict").None().Tuple1().Reduce().Pop()
      .Global("datetime", "timezone").Global("datetime", "timedelta").BinInt1(0).Tuple1().Reduce()
      .Tuple1().Reduce().Stop();
  auto a = Analyze(ok);
  for (const auto& imp : a.imports) {
    INFO(imp.FullName());
    CHECK(imp.safety == GlobalClass::kSafe);
  }
  CHECK(Worst(sc::PickleFindings(a)) >= Severity::kMedium);
  // The same types with an argument that is an object: needs review.
  using Case = std::tuple<const char*, const char*>;
  for (auto [m, q] : {Case{"decimal", "Decimal"}, Case{"datetime", "datetime"},
                      Case{"builtins", "complex"}, Case{"builtins", "range"},
                      Case{"collections", "Counter"}, Case{"builtins", "set"},
                      Case{"fractions", "Fraction"}, Case{"collections", "deque"}}) {
    INFO(m << "." << q);
    PickleBuilder bad;
    bad.Proto(2).Global(m, q).Global("collections", "OrderedDict").EmptyTuple().Reduce()
        .Tuple1().Reduce().Stop();
    auto ba = Analyze(bad);
    REQUIRE(ba.imports.size() == 2);
    CHECK(ba.imports[0].safety == GlobalClass::kUnknown);
    CHECK(FindId(sc::PickleFindings(ba), "MG-PK-UNKNOWN-IMPORT") != nullptr);
  }
  // defaultdict's factory runs on every missing key: only None or an
  // allowlisted type.
  PickleBuilder factory;
  factory.Proto(2).Global("collections", "defaultdict").Global("some_pkg", "make")
      .Tuple1().Reduce().Stop();
  auto fa = Analyze(factory);
  REQUIRE(fa.imports.size() == 2);
  CHECK(fa.imports[0].safety == GlobalClass::kUnknown);
}

TEST_CASE("legacy torch.save(model): the module class is an import to review, not a call",
          "[pickle][exact][torch]") {
  auto a = sc::AnalyzePickle(ReadReal("torch-legacy-module.pt"));
  auto fs = sc::PickleFindings(a);
  CHECK(CountId(fs, "MG-PK-CALL-NOT-ALLOWED") == 0);
  REQUIRE(FindId(fs, "MG-PK-UNKNOWN-IMPORT") != nullptr);
  CHECK(FindId(fs, "MG-PK-UNKNOWN-IMPORT")->global == "torch.nn.modules.linear.Linear");
  CHECK(Worst(fs) == Severity::kHigh);
  // A persistent id that is not ('module', cls, file, source) stays an
  // object persistent_load made, and calling it is still not allowed.
  PickleBuilder fixed;
  fixed.Proto(2).Mark().BinUnicode("storage").Global("x", "Y").BinUnicode("f").BinUnicode("s")
      .Tuple().BinPersId().EmptyTuple().NewObj().Stop();
  CHECK(CountId(FindingsOf(fixed), "MG-PK-CALL-NOT-ALLOWED") == 1);
}

TEST_CASE("TorchScript helpers: data constructors in a TorchScript member only",
          "[pickle][exact][torchscript]") {
  PickleBuilder b;
  b.Proto(2).Global("torch.jit._pickle", "build_intlist").Mark().BinInt1(1).BinInt1(2)
      .Op('l').Tuple1().Reduce().Pop()
      .Global("torch.jit._pickle", "restore_type_tag").EmptyList().BinUnicode("List[int]")
      .Tuple2().Reduce().Stop();
  auto plain = Analyze(b);
  REQUIRE(plain.imports.size() == 2);
  CHECK(plain.imports[0].safety == GlobalClass::kCritical);
  sc::PickleOptions ts;
  ts.torchscript = true;
  auto a = Analyze(b, ts);
  for (const auto& imp : a.imports) CHECK(imp.safety == GlobalClass::kSafe);
  CHECK(Worst(sc::PickleFindings(a)) >= Severity::kMedium);
  // Other torch.jit globals stay critical there too.
  PickleBuilder other;
  other.Proto(2).Global("torch.jit", "load").Stop();
  CHECK(Analyze(other, ts).imports[0].safety == GlobalClass::kCritical);
  // __torch__ classes: their __setstate__ is TorchScript code: needs review.
  PickleBuilder cls;
  cls.Proto(2).Global("__torch__.torch.nn.modules.linear", "Linear").EmptyTuple().NewObj().Stop();
  CHECK(Analyze(cls, ts).imports[0].safety == GlobalClass::kUnknown);
}

TEST_CASE("a real torch.jit.save archive: helpers safe in its members, classes to review",
          "[pickle][exact][torchscript]") {
  // Members by the central directory (torch.jit.save's local headers use
  // data descriptors); the .debug_pkl is deflated.
  std::vector<uint8_t> z = ReadReal("torchscript-linear.pt");
  auto le = [&](size_t at, int n) {
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; --i) v = (v << 8) | z.at(at + static_cast<size_t>(i));
    return static_cast<size_t>(v);
  };
  size_t eocd = z.size() - 22;
  while (eocd > 0 && le(eocd, 4) != 0x06054b50) --eocd;
  REQUIRE(le(eocd, 4) == 0x06054b50);
  sc::PickleOptions ts;
  ts.torchscript = true;
  int pickles = 0;
  for (size_t c = le(eocd + 16, 4), n = le(eocd + 10, 2); n > 0; --n) {
    REQUIRE(le(c, 4) == 0x02014b50);
    const size_t method = le(c + 10, 2);
    size_t size = le(c + 20, 4), usize = le(c + 24, 4), name_len = le(c + 28, 2);
    size_t next = c + 46 + name_len + le(c + 30, 2) + le(c + 32, 2);
    std::string name(z.begin() + static_cast<long>(c + 46), z.begin() + static_cast<long>(c + 46 + name_len));
    size_t local = le(c + 42, 4);
    size_t data = local + 30 + le(local + 26, 2) + le(local + 28, 2);
    REQUIRE(data + size <= z.size());
    c = next;
    if (!name.ends_with(".pkl") && !name.ends_with(".debug_pkl")) continue;
    INFO(name);
    std::vector<uint8_t> member(z.begin() + static_cast<long>(data),
                                z.begin() + static_cast<long>(data + size));
    if (method == 8) {
      std::vector<uint8_t> out(usize);
      z_stream zs{};
      REQUIRE(inflateInit2(&zs, -15) == Z_OK);
      zs.next_in = member.data();
      zs.avail_in = static_cast<uInt>(member.size());
      zs.next_out = out.data();
      zs.avail_out = static_cast<uInt>(out.size());
      CHECK(inflate(&zs, Z_FINISH) == Z_STREAM_END);
      inflateEnd(&zs);
      member = std::move(out);
    } else {
      REQUIRE(method == 0);
    }
    ++pickles;
    auto fs = sc::PickleFindings(sc::AnalyzePickle(member, ts));
    CHECK(Worst(fs) >= Severity::kHigh);
    if (name.ends_with("data.pkl")) {
      REQUIRE(FindId(fs, "MG-PK-UNKNOWN-IMPORT") != nullptr);
      CHECK(FindId(fs, "MG-PK-UNKNOWN-IMPORT")->global == "__torch__.torch.nn.modules.linear.Linear");
    } else {
      CHECK(Worst(fs) >= Severity::kMedium);
    }
    if (name.ends_with(".debug_pkl")) {
      CHECK(Worst(sc::PickleFindings(sc::AnalyzePickle(member))) == Severity::kCritical);
    }
  }
  CHECK(pickles == 3);
}

TEST_CASE("every known code-execution gadget is critical", "[pickle][exact][allowlist]") {
  using Case = std::pair<const char*, const char*>;
  const Case kCritical[] = {
      {"builtins", "exec"}, {"builtins", "eval"}, {"builtins", "compile"},
      {"builtins", "__import__"}, {"builtins", "getattr"}, {"builtins", "setattr"},
      {"builtins", "globals"}, {"builtins", "open"}, {"builtins", "breakpoint"},
      {"builtins", "input"}, {"__builtin__", "eval"}, {"code", "InteractiveInterpreter"},
      {"codeop", "compile_command"}, {"importlib", "import_module"},
      {"importlib.machinery", "SourceFileLoader"}, {"runpy", "run_path"}, {"pydoc", "locate"},
      {"operator", "attrgetter"}, {"operator", "methodcaller"}, {"functools", "partial"},
      {"os", "system"}, {"os", "popen"}, {"os", "execv"}, {"os", "spawnlp"}, {"os", "fork"},
      {"posix", "system"}, {"nt", "system"}, {"subprocess", "Popen"}, {"subprocess", "run"},
      {"pty", "spawn"}, {"multiprocessing", "Process"}, {"asyncio.subprocess", "create_subprocess_shell"},
      {"pdb", "run"}, {"bdb", "Bdb"}, {"trace", "Trace"}, {"sys", "settrace"},
      {"sys", "setprofile"}, {"cProfile", "run"}, {"profile", "run"}, {"timeit", "timeit"},
      {"torch.fx", "GraphModule"}, {"torch.fx.graph_module", "reduce_graph_module"},
      {"torch.jit", "load"}, {"torch.jit._pickle", "build_intlist"},
      {"torch._dynamo", "optimize"}, {"torch._inductor.codecache", "PyCodeCache"},
      {"torch.hub", "load"}, {"torch.utils.cpp_extension", "load_inline"},
      {"torch.serialization", "load"}, {"torch.serialization", "_load"},
      {"torch.serialization", "_legacy_load"}, {"torch", "load"},
      {"torch._C", "_jit_script_compile"},
      {"cloudpickle.cloudpickle", "_make_function"}, {"cloudpickle.cloudpickle", "_builtin_type"},
      {"types", "CodeType"}, {"types", "FunctionType"}, {"dill._dill", "_create_code"},
      {"joblib.externals.loky.backend.reduction", "_rebuild"}, {"loky", "get_reusable_executor"},
      {"webbrowser", "open"}, {"socket", "socket"}, {"shutil", "rmtree"}, {"ctypes", "CDLL"},
      {"marshal", "loads"}, {"pickle", "loads"}, {"_pickle", "loads"},
  };
  for (auto [m, q] : kCritical) {
    INFO(m << "." << q);
    CHECK(sc::ClassifyGlobal(m, q) == GlobalClass::kCritical);
  }
  const Case kSafe[] = {
      {"torch._utils", "_rebuild_tensor_v2"}, {"torch.storage", "_load_from_bytes"},
      {"collections", "OrderedDict"}, {"datetime", "datetime"}, {"decimal", "Decimal"},
      {"_codecs", "encode"}, {"numpy.core.multiarray", "_reconstruct"},
  };
  for (auto [m, q] : kSafe) {
    INFO(m << "." << q);
    CHECK(sc::ClassifyGlobal(m, q) == GlobalClass::kSafe);
  }
}
