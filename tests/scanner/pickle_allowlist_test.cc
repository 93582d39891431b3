// The allowlist (issue 3 point 2): real weight files pass with one medium
// finding; walks, unknown modules and code-execution globals do not.
#include <catch2/catch.hpp>

#include "pickle_builder.h"

namespace sc = modelgate::scanner;
using sc::GlobalClass;

namespace {

// TorchDataPkl is a torch.save data.pkl for {"layer.weight": 2x3 float32},
// as torch writes it (protocol 2, memoized, storages by persistent id).
PickleBuilder TorchDataPkl() {
  PickleBuilder b;
  b.Proto(2)
      .Global("collections", "OrderedDict").BinPut(0)
      .EmptyTuple().Reduce().BinPut(1)
      .Mark()
      .BinUnicode("layer.weight").BinPut(2)
      .Global("torch._utils", "_rebuild_tensor_v2").BinPut(3)
      .Mark()
      .Mark().BinUnicode("storage").BinPut(4)
      .Global("torch", "FloatStorage").BinPut(5)
      .BinUnicode("0").BinPut(6).BinUnicode("cpu").BinPut(7).BinInt1(6)
      .Tuple().BinPut(8).BinPersId()
      .BinInt1(0)
      .BinInt1(2).BinInt1(3).Tuple2().BinPut(9)
      .BinInt1(3).BinInt1(1).Tuple2().BinPut(10)
      .False()
      .BinGet(0).EmptyTuple().Reduce().BinPut(11)
      .Tuple().BinPut(12).Reduce().BinPut(13)
      .SetItems()
      .EmptyDict().BinUnicode("_metadata").BinGet(0).EmptyTuple().Reduce().SetItem().Build()
      .Stop();
  return b;
}

}  // namespace

TEST_CASE("a hand-assembled torch.save data.pkl is safe: only the medium finding", "[allowlist][torch]") {
  auto a = Analyze(TorchDataPkl());
  REQUIRE(a.streams.size() == 1);
  CHECK(a.streams[0].complete);
  CHECK(a.streams[0].protocol == 2);
  for (const auto& imp : a.imports) {
    INFO(imp.FullName());
    CHECK(imp.safety == GlobalClass::kSafe);
  }
  for (const auto& c : a.calls) {
    INFO(c.opcode << " " << c.callee);
    CHECK(c.allowed);
  }
  auto fs = sc::PickleFindings(a);
  REQUIRE(fs.size() == 1);
  CHECK(fs[0].id == "MG-PK-PICKLE-FORMAT");
  CHECK(fs[0].severity == modelgate::core::Severity::kMedium);
  CHECK(fs[0].offset == 0);
}

TEST_CASE("numpy.core.multiarray._reconstruct + dtype + BUILD is safe", "[allowlist][numpy]") {
  std::string raw(24, '\0');
  PickleBuilder b;
  b.Proto(3)
      .Global("numpy.core.multiarray", "_reconstruct").BinPut(0)
      .Global("numpy", "ndarray").BinPut(1)
      .BinInt1(0).Tuple1().ShortBytes("b").Tuple3().Reduce().BinPut(2)
      .Mark().BinInt1(1).BinInt1(3).Tuple1()
      .Global("numpy", "dtype").BinUnicode("f8").False().Op(0x88).Tuple3().Reduce()
      .Mark().BinInt1(3).BinUnicode("<").None().None().None().Op('J').Le(0xFFFFFFFF, 4)
      .Op('J').Le(0xFFFFFFFF, 4).BinInt1(0).Tuple().Build()
      .False().ShortBytes(raw).Tuple().Build()
      .Stop();
  auto fs = FindingsOf(b);
  REQUIRE(fs.size() == 1);
  CHECK(fs[0].id == "MG-PK-PICKLE-FORMAT");

  PickleBuilder p2;  // protocol 2 writes the bytes through _codecs.encode
  p2.Proto(2).Global("_codecs", "encode").BinUnicode("b").BinUnicode("latin1").Tuple2().Reduce().Stop();
  CHECK(FindingsOf(p2).size() == 1);
  PickleBuilder core2;  // numpy 2 moved it to numpy._core
  core2.Proto(2).Global("numpy._core.multiarray", "_reconstruct").Stop();
  CHECK(FindingsOf(core2).size() == 1);
}

TEST_CASE("dotted walks from an allowed module are not allowed", "[allowlist][walk]") {
  struct Case {
    const char* module;
    const char* name;
    GlobalClass want;
  };
  for (Case c : {Case{"pathlib", "os.system", GlobalClass::kCritical},
                 Case{"torch._utils", "os.system", GlobalClass::kCritical},
                 Case{"collections", "OrderedDict.__init__.__globals__", GlobalClass::kCritical},
                 Case{"builtins", "print.__self__", GlobalClass::kCritical},
                 Case{"torch._utils", "_rebuild_tensor_v2.something", GlobalClass::kUnknown},
                 Case{"torch", "_utils._rebuild_tensor_v2", GlobalClass::kUnknown},
                 Case{"numpy", "core.multiarray._reconstruct", GlobalClass::kUnknown}}) {
    INFO(c.module << " " << c.name);
    PickleBuilder b;
    b.Proto(4).ShortUnicode(c.module).ShortUnicode(c.name).StackGlobal().Stop();
    auto a = Analyze(b);
    REQUIRE(a.imports.size() == 1);
    CHECK(a.imports[0].safety == c.want);
  }
}

TEST_CASE("builtins.getattr is critical, an unknown module is high", "[allowlist]") {
  PickleBuilder g;
  g.Proto(2).Global("builtins", "getattr").Stop();
  auto fs = FindingsOf(g);
  REQUIRE(FindId(fs, "MG-PK-CRITICAL-IMPORT") != nullptr);
  CHECK(FindId(fs, "MG-PK-CRITICAL-IMPORT")->message.find("\"builtins.getattr\"") != std::string::npos);

  PickleBuilder u;
  u.Proto(2).Global("sklearn.linear_model", "LogisticRegression").Stop();
  auto ufs = FindingsOf(u);
  REQUIRE(FindId(ufs, "MG-PK-UNKNOWN-IMPORT") != nullptr);
  CHECK(FindId(ufs, "MG-PK-UNKNOWN-IMPORT")->severity == modelgate::core::Severity::kHigh);
  CHECK(FindId(ufs, "MG-PK-UNKNOWN-IMPORT")->message.find("unknown import; needs review") !=
        std::string::npos);
}

TEST_CASE("ClassifyGlobal: the named code-execution set and its C aliases", "[allowlist]") {
  for (const char* full :
       {"os.system", "posix.system", "nt.system", "subprocess.Popen", "_posixsubprocess.fork_exec",
        "builtins.eval", "builtins.exec", "builtins.compile", "builtins.open", "builtins.__import__",
        "builtins.breakpoint", "builtins.vars", "runpy._run_code", "importlib.import_module",
        "pkgutil.resolve_name", "pty.spawn", "socket.create_connection", "shutil.rmtree",
        "sys.modules", "ctypes.CDLL", "marshal.loads", "types.FunctionType", "types.CodeType",
        "code.InteractiveInterpreter", "codeop.compile_command", "cProfile.run", "profile.run",
        "pdb.run", "timeit.timeit", "site.main", "webbrowser.open", "logging.config.listen",
        "operator.attrgetter", "_operator.methodcaller", "operator.getitem", "functools.partial",
        "_functools.reduce", "pickle.loads", "_pickle.loads", "dill.loads", "torch.load",
        "torch.hub.load", "torch.jit.load", "numpy.load", "numpy.lib.npyio.load",
        "pandas.read_pickle", "joblib.load", "_io.open", "io.FileIO", "tempfile.mkstemp",
        "asyncio.create_subprocess_shell", "mymodule.system", "foo.bar.os"}) {
    std::string s(full);
    size_t dot = s.rfind('.');
    std::string module = s.substr(0, dot), name = s.substr(dot + 1);
    INFO(full);
    CHECK(sc::ClassifyGlobal(module, name) == GlobalClass::kCritical);
  }
  for (const char* full : {"torch._utils._rebuild_tensor_v2", "torch._utils._rebuild_parameter",
                           "torch._utils._rebuild_qtensor", "torch._utils._rebuild_sparse_tensor",
                           "torch.FloatStorage", "torch.BFloat16Storage", "torch.float32",
                           "torch.bfloat16", "torch.device", "torch.Size",
                           "collections.OrderedDict", "numpy.ndarray", "numpy.dtype",
                           "numpy.core.multiarray.scalar", "numpy._core.multiarray.scalar",
                           "_codecs.encode", "joblib.numpy_pickle.NumpyArrayWrapper",
                           "builtins.set", "builtins.frozenset", "builtins.bytearray",
                           "builtins.complex", "torch._tensor._rebuild_from_type_v2",
                           "torch.nn.parameter.Parameter", "torch.storage._load_from_bytes"}) {
    std::string s(full);
    size_t dot = s.rfind('.');
    INFO(full);
    CHECK(sc::ClassifyGlobal(s.substr(0, dot), s.substr(dot + 1)) == GlobalClass::kSafe);
  }
  CHECK(sc::ClassifyGlobal("argparse", "Namespace") == GlobalClass::kUnknown);
  CHECK(sc::ClassifyGlobal("copyreg", "_reconstructor") == GlobalClass::kUnknown);
  CHECK(sc::GlobalClassName(GlobalClass::kCritical) == "critical");
}

TEST_CASE("extra safe globals: unknown becomes safe, critical stays critical", "[allowlist]") {
  sc::PickleOptions o;
  o.extra_safe_globals = {{"argparse", "Namespace"}, {"os", "system"}};
  PickleBuilder b;
  b.Proto(2).Global("argparse", "Namespace").EmptyTuple().NewObj().Global("os", "system").Stop();
  auto a = Analyze(b, o);
  REQUIRE(a.imports.size() == 2);
  CHECK(a.imports[0].safety == GlobalClass::kSafe);
  CHECK(a.imports[1].safety == GlobalClass::kCritical);
}

TEST_CASE("_rebuild_from_type_v2 must be fed an allowlisted function", "[allowlist][torch]") {
  PickleBuilder ok;
  ok.Proto(2).Global("torch._tensor", "_rebuild_from_type_v2")
      .Mark().Global("torch._utils", "_rebuild_tensor_v2").Global("torch", "Tensor").EmptyTuple()
      .EmptyDict().Tuple().Reduce().Stop();
  CHECK(CountId(FindingsOf(ok), "MG-PK-CALL-NOT-ALLOWED") == 0);
  PickleBuilder bad;  // func is the result of a call
  bad.Proto(2).Global("torch._tensor", "_rebuild_from_type_v2")
      .Mark().Global("builtins", "str").EmptyTuple().Reduce().Global("torch", "Tensor")
      .EmptyTuple().EmptyDict().Tuple().Reduce().Stop();
  CHECK(CountId(FindingsOf(bad), "MG-PK-CALL-NOT-ALLOWED") == 1);
}

TEST_CASE("torch.storage._load_from_bytes: the nested stream is scanned", "[allowlist][nested]") {
  PickleBuilder inner;
  inner.CallGlobal("os", "system").Stop();
  PickleBuilder b;
  b.Proto(3).Global("torch.storage", "_load_from_bytes").Bytes(inner.bytes()).Tuple1().Reduce().Stop();
  auto a = Analyze(b);
  REQUIRE(a.streams.size() == 2);
  CHECK(a.streams[1].depth == 1);
  CHECK(a.streams[1].offset == 39);
  CHECK(a.streams[1].parent_offset == 39 + inner.size() + 1);
  bool found = false;
  for (const auto& imp : a.imports) {
    if (imp.FullName() == "os.system") {
      found = true;
      CHECK(imp.offset == 39);
      CHECK(imp.stream == 1);
    }
  }
  CHECK(found);
  auto fs = sc::PickleFindings(a);
  CHECK(CountId(fs, "MG-PK-CRITICAL-IMPORT") == 1);
  CHECK(CountId(fs, "MG-PK-NESTED-PICKLE") == 1);

  PickleBuilder opaque;  // the argument is not a literal: cannot be scanned
  opaque.Proto(3).Global("torch.storage", "_load_from_bytes")
      .Global("builtins", "bytes").EmptyTuple().Reduce().Tuple1().Reduce().Stop();
  CHECK(CountId(FindingsOf(opaque), "MG-PK-CALL-NOT-ALLOWED") == 1);
}
