// The pickle machine: every technique of issue 3 point 1, with streams
// written opcode by opcode.
#include <catch2/catch.hpp>

#include "pickle_builder.h"

namespace sc = modelgate::scanner;
using sc::GlobalClass;
using sc::PickleAnomalyKind;

TEST_CASE("protocol 0 GLOBAL cos/system + REDUCE is critical at offset 0", "[pickle]") {
  PickleBuilder b;
  b.CallGlobal("os", "system").Stop();
  auto a = Analyze(b);
  REQUIRE(a.streams.size() == 1);
  CHECK(a.streams[0].complete);
  REQUIRE(a.imports.size() == 1);
  CHECK(a.imports[0].module == "os");
  CHECK(a.imports[0].qualname == "system");
  CHECK(a.imports[0].offset == 0);
  CHECK(a.imports[0].opcode == "GLOBAL");
  CHECK(a.imports[0].safety == GlobalClass::kCritical);
  REQUIRE(a.calls.size() == 1);
  CHECK(a.calls[0].opcode == "REDUCE");
  CHECK(a.calls[0].callee == "os.system");
  CHECK(a.calls[0].offset == 19);
  CHECK_FALSE(a.calls[0].allowed);
  auto fs = sc::PickleFindings(a);
  const sc::Finding* f = FindId(fs, "MG-PK-CRITICAL-IMPORT");
  REQUIRE(f != nullptr);
  CHECK(f->severity == modelgate::core::Severity::kCritical);
  CHECK(f->offset == 0);
  CHECK(f->message.find("GLOBAL") != std::string::npos);
  CHECK(f->message.find("\"os.system\"") != std::string::npos);
  CHECK(CountId(fs, "MG-PK-PICKLE-FORMAT") == 1);
}

TEST_CASE("c__builtin__ eval: the Python 2 mapping applies below protocol 3", "[pickle][py2]") {
  PickleBuilder b;
  b.CallGlobal("__builtin__", "eval").Stop();
  auto a = Analyze(b);
  REQUIRE(a.imports.size() == 1);
  CHECK(a.imports[0].module == "builtins");
  CHECK(a.imports[0].qualname == "eval");
  CHECK(a.imports[0].written_module == "__builtin__");
  CHECK(a.imports[0].py2_mapped);
  CHECK(a.imports[0].safety == GlobalClass::kCritical);
  auto fs = sc::PickleFindings(a);
  CHECK(CountId(fs, "MG-PK-PY2-MAPPING") == 1);
  CHECK(CountId(fs, "MG-PK-CRITICAL-IMPORT") == 1);

  // PROTO 3: find_class maps nothing; the written name is still critical.
  PickleBuilder p3;
  p3.Proto(3).CallGlobal("__builtin__", "eval").Stop();
  auto a3 = Analyze(p3);
  REQUIRE(a3.imports.size() == 1);
  CHECK(a3.imports[0].module == "__builtin__");
  CHECK_FALSE(a3.imports[0].py2_mapped);
  CHECK(a3.imports[0].safety == GlobalClass::kCritical);
}

TEST_CASE("py2 name mappings that lead to code execution", "[pickle][py2]") {
  struct Case {
    const char* m;
    const char* n;
    const char* to_m;
    const char* to_n;
  };
  for (Case c : {Case{"commands", "getoutput", "subprocess", "getoutput"},
                 Case{"urllib", "urlopen", "urllib.request", "urlopen"},
                 Case{"cPickle", "loads", "pickle", "loads"},
                 Case{"__builtin__", "reduce", "functools", "reduce"},
                 Case{"__builtin__", "intern", "sys", "intern"}}) {
    PickleBuilder b;
    b.Proto(2).Global(c.m, c.n).Stop();
    auto a = Analyze(b);
    REQUIRE(a.imports.size() == 1);
    CHECK(a.imports[0].module == c.to_m);
    CHECK(a.imports[0].qualname == c.to_n);
    CHECK(a.imports[0].safety == GlobalClass::kCritical);
  }
  // A PROTO 4 later in the stream turns the mapping off from there on.
  PickleBuilder b;
  b.Global("__builtin__", "set").Pop().Proto(4).Global("__builtin__", "set").Stop();
  auto a = Analyze(b);
  REQUIRE(a.imports.size() == 2);
  CHECK(a.imports[0].module == "builtins");
  CHECK(a.imports[1].module == "__builtin__");
}

TEST_CASE("STACK_GLOBAL from memoized strings (BINPUT/BINGET, MEMOIZE)", "[pickle][memo]") {
  PickleBuilder b;
  b.Proto(4)
      .ShortUnicode("os").Memoize()            // memo[0]
      .ShortUnicode("system").BinPut(5)        // memo[5]
      .Pop().Pop()
      .ShortUnicode("x").Memoize()             // memo[len(memo)] = memo[2]
      .Pop()
      .BinGet(0).BinGet(5).StackGlobal()
      .Mark().ShortUnicode("id").Tuple().Reduce().Stop();
  auto a = Analyze(b);
  REQUIRE(a.streams.size() == 1);
  CHECK(a.streams[0].complete);
  REQUIRE(a.imports.size() == 1);
  CHECK(a.imports[0].FullName() == "os.system");
  CHECK(a.imports[0].opcode == "STACK_GLOBAL");
  CHECK(a.imports[0].safety == GlobalClass::kCritical);
  CHECK(a.imports[0].resolved_by.find("SHORT_BINUNICODE at 2") != std::string::npos);

  // MEMOIZE used key 2 (the number of entries), so key 1 is undefined.
  PickleBuilder bad;
  bad.Proto(4).ShortUnicode("a").Memoize().ShortUnicode("b").BinPut(5).ShortUnicode("c")
      .Memoize().BinGet(2).BinGet(1).Stop();
  auto m = Analyze(bad);
  REQUIRE(m.streams.size() == 1);
  CHECK_FALSE(m.streams[0].complete);
  CHECK(m.streams[0].error.find("Memo value not found at index 1") != std::string::npos);
  CHECK(CountId(sc::PickleFindings(m), "MG-PK-MALFORMED") == 1);
}

TEST_CASE("text PUT/GET memo indices", "[pickle][memo]") {
  PickleBuilder b;
  b.Global("os", "system").Put("7").Pop().Get("7").Stop();
  auto a = Analyze(b);
  CHECK(a.streams[0].complete);
  PickleBuilder neg;
  neg.None().Put("-1").Stop();
  CHECK(Analyze(neg).streams[0].error == "negative PUT argument");
}

TEST_CASE("STRING escapes are decoded before the name is resolved", "[pickle][escapes]") {
  PickleBuilder b;  // 'o\x73' == "os", 'sys\164em' == "system" (octal)
  b.Proto(4).String("'o\\x73'").String("\"sys\\164em\"").StackGlobal().Stop();
  auto a = Analyze(b);
  REQUIRE(a.imports.size() == 1);
  CHECK(a.imports[0].FullName() == "os.system");
  CHECK(a.imports[0].resolved_by.find("escapes decoded") != std::string::npos);

  PickleBuilder bad;  // \x needs two hex digits: the load fails there
  bad.Proto(4).String("'o\\x7'").Stop();
  CHECK_FALSE(Analyze(bad).streams[0].complete);
  PickleBuilder unquoted;
  unquoted.String("os").Stop();
  CHECK(Analyze(unquoted).streams[0].error == "the STRING opcode argument must be quoted");
}

TEST_CASE("UNICODE raw-unicode-escape is decoded exactly", "[pickle][escapes]") {
  PickleBuilder b;
  b.Proto(4).Unicode("\\u006fs").Unicode("\\U00000073ystem").StackGlobal().Stop();
  auto a = Analyze(b);
  REQUIRE(a.imports.size() == 1);
  CHECK(a.imports[0].FullName() == "os.system");

  // An even number of backslashes is no escape: the name keeps them.
  PickleBuilder lit;
  lit.Proto(4).Unicode("\\\\u006fs").ShortUnicode("system").StackGlobal().Stop();
  auto l = Analyze(lit);
  REQUIRE(l.imports.size() == 1);
  CHECK(l.imports[0].module == "\\\\u006fs");

  PickleBuilder trunc;
  trunc.Unicode("\\u00").Stop();
  CHECK(Analyze(trunc).streams[0].error == "truncated \\uXXXX escape");
}

TEST_CASE("INST and OBJ import and call", "[pickle][calls]") {
  PickleBuilder inst;
  inst.Mark().String("'ls'").Inst("os", "system").Stop();
  auto a = Analyze(inst);
  REQUIRE(a.imports.size() == 1);
  CHECK(a.imports[0].opcode == "INST");
  CHECK(a.imports[0].offset == 7);
  CHECK(a.imports[0].safety == GlobalClass::kCritical);
  REQUIRE(a.calls.size() == 1);
  CHECK(a.calls[0].opcode == "INST");

  PickleBuilder obj;
  obj.Mark().Global("subprocess", "Popen").String("'ls'").Obj().Stop();
  auto o = Analyze(obj);
  REQUIRE(o.calls.size() == 1);
  CHECK(o.calls[0].opcode == "OBJ");
  CHECK(o.calls[0].callee == "subprocess.Popen");
  CHECK(o.imports[0].safety == GlobalClass::kCritical);
}

TEST_CASE("NEWOBJ and NEWOBJ_EX on an unknown class: one high finding", "[pickle][calls]") {
  PickleBuilder b;
  b.Proto(2).Global("mymodule", "Thing").EmptyTuple().NewObj().Stop();
  auto a = Analyze(b);
  REQUIRE(a.calls.size() == 1);
  CHECK(a.calls[0].opcode == "NEWOBJ");
  CHECK_FALSE(a.calls[0].allowed);
  CHECK_FALSE(a.calls[0].flagged);  // the import finding covers it
  auto fs = sc::PickleFindings(a);
  CHECK(CountId(fs, "MG-PK-UNKNOWN-IMPORT") == 1);
  CHECK(CountId(fs, "MG-PK-CALL-NOT-ALLOWED") == 0);
  CHECK(FindId(fs, "MG-PK-UNKNOWN-IMPORT")->severity == modelgate::core::Severity::kHigh);

  PickleBuilder ex;
  ex.Proto(4).ShortUnicode("mymodule").ShortUnicode("Thing").StackGlobal().EmptyTuple()
      .EmptyDict().NewObjEx().Stop();
  auto e = Analyze(ex);
  REQUIRE(e.calls.size() == 1);
  CHECK(e.calls[0].opcode == "NEWOBJ_EX");

  PickleBuilder not_type;  // NEWOBJ on a str: the C unpickler raises
  not_type.Proto(2).ShortBytes("x").EmptyTuple().NewObj().Stop();
  CHECK_FALSE(Analyze(not_type).streams[0].complete);
}

TEST_CASE("calling the result of a call is not allowed", "[pickle][calls]") {
  PickleBuilder b;
  b.Proto(2).Global("builtins", "str").EmptyTuple().Reduce().EmptyTuple().Reduce().Stop();
  auto fs = FindingsOf(b);
  const sc::Finding* f = FindId(fs, "MG-PK-CALL-NOT-ALLOWED");
  REQUIRE(f != nullptr);
  CHECK(f->severity == modelgate::core::Severity::kCritical);
  CHECK(f->message.find("<result of builtins.str>") != std::string::npos);
  CHECK(CountId(fs, "MG-PK-UNKNOWN-IMPORT") == 0);  // builtins.str itself is safe
}

TEST_CASE("BUILD: __setstate__ on an allowlisted result is fine, on a global it is not",
          "[pickle][build]") {
  PickleBuilder ok;
  ok.Proto(2).Global("collections", "OrderedDict").EmptyTuple().Reduce().EmptyDict().Build().Stop();
  auto fs = FindingsOf(ok);
  CHECK(fs.size() == 1);
  CHECK(fs[0].id == "MG-PK-PICKLE-FORMAT");

  PickleBuilder bad;
  bad.Proto(2).Global("collections", "OrderedDict").EmptyDict().Build().Stop();
  auto a = Analyze(bad);
  REQUIRE(a.calls.size() == 1);
  CHECK(a.calls[0].opcode == "BUILD");
  CHECK(a.calls[0].flagged);
  CHECK(CountId(sc::PickleFindings(a), "MG-PK-CALL-NOT-ALLOWED") == 1);

  PickleBuilder unknown;  // BUILD on an unknown class's instance: recorded, import covers it
  unknown.Proto(2).Global("argparse", "Namespace").EmptyTuple().Reduce().EmptyDict().Build().Stop();
  auto u = Analyze(unknown);
  REQUIRE(u.calls.size() == 2);
  CHECK(u.calls[1].opcode == "BUILD");
  CHECK_FALSE(u.calls[1].allowed);
  CHECK_FALSE(u.calls[1].flagged);

  PickleBuilder native;  // a list has no __dict__: the load fails at BUILD
  native.EmptyList().EmptyDict().Build().Stop();
  CHECK_FALSE(Analyze(native).streams[0].complete);
}

TEST_CASE("SETITEM on an imported global mutates it", "[pickle][build]") {
  PickleBuilder b;
  b.Global("os", "environ").String("'LD_PRELOAD'").String("'/tmp/x.so'").SetItem().Stop();
  auto a = Analyze(b);
  REQUIRE(a.calls.size() == 1);
  CHECK(a.calls[0].flagged);
}

TEST_CASE("EXT1/2/4 are copyreg extension codes: critical", "[pickle][ext]") {
  PickleBuilder b;
  b.Proto(2).Op(0x82).Op(1).EmptyTuple().Reduce().Stop();
  auto a = Analyze(b);
  REQUIRE(a.imports.size() == 1);
  CHECK(a.imports[0].ext_code);
  CHECK(a.imports[0].FullName() == "copyreg.<ext code 1>");
  CHECK(a.imports[0].opcode == "EXT1");
  auto fs = sc::PickleFindings(a);
  REQUIRE(FindId(fs, "MG-PK-EXT-CODE") != nullptr);
  CHECK(FindId(fs, "MG-PK-EXT-CODE")->offset == 2);
  CHECK(FindId(fs, "MG-PK-EXT-CODE")->severity == modelgate::core::Severity::kCritical);

  PickleBuilder ext2;
  ext2.Proto(2).Op(0x83).Le(0x1234, 2).Stop();
  CHECK(Analyze(ext2).imports.at(0).qualname == "<ext code 4660>");
  PickleBuilder zero;  // "EXT specifies code <= 0"
  zero.Proto(2).Op(0x82).Op(0).Stop();
  CHECK_FALSE(Analyze(zero).streams[0].complete);
  PickleBuilder neg;  // EXT4 is signed
  neg.Proto(2).Op(0x84).Le(0xFFFFFFFF, 4).Stop();
  CHECK_FALSE(Analyze(neg).streams[0].complete);
}

TEST_CASE("a call before a truncation still counts", "[pickle][malformed]") {
  PickleBuilder b;
  b.CallGlobal("os", "system");  // no STOP
  auto a = Analyze(b);
  REQUIRE(a.streams.size() == 1);
  CHECK_FALSE(a.streams[0].complete);
  CHECK(a.streams[0].error_offset == b.size());
  REQUIRE(a.calls.size() == 1);
  auto fs = sc::PickleFindings(a);
  CHECK(CountId(fs, "MG-PK-CRITICAL-IMPORT") == 1);
  REQUIRE(FindId(fs, "MG-PK-MALFORMED") != nullptr);
  CHECK(FindId(fs, "MG-PK-MALFORMED")->offset == b.size());

  PickleBuilder cut;  // a BINBYTES claiming far more than remains
  cut.Proto(3).Op('B').Le(0xFFFFFFFF, 4).Raw("abc");
  auto c = Analyze(cut);
  CHECK(c.streams[0].error.find("truncated") != std::string::npos);
  PickleBuilder huge;  // BINBYTES8 claiming 2^63: never allocated
  huge.Proto(4).Op(0x8e).Le(uint64_t{1} << 63, 8).Raw("abc");
  CHECK_FALSE(Analyze(huge).streams[0].complete);
}

TEST_CASE("malformed streams: bad opcode, underflow, undefined memo, empty input", "[pickle][malformed]") {
  PickleBuilder bad_op;
  bad_op.Op(0xff).Stop();
  CHECK(Analyze(bad_op).streams[0].error.find("invalid load key") != std::string::npos);
  PickleBuilder underflow;
  underflow.Reduce().Stop();
  CHECK(Analyze(underflow).streams[0].error == "unpickling stack underflow");
  PickleBuilder memo;
  memo.BinGet(3).Stop();
  CHECK(Analyze(memo).streams[0].error == "Memo value not found at index 3");
  auto empty = sc::AnalyzePickle({}, {});
  REQUIRE(empty.streams.size() == 1);
  CHECK_FALSE(empty.streams[0].complete);
  CHECK(CountId(sc::PickleFindings(empty), "MG-PK-MALFORMED") == 1);
  PickleBuilder stop_empty;  // STOP needs a value above the fence
  stop_empty.BinInt1(1).Mark().Stop();
  CHECK(Analyze(stop_empty).streams[0].error == "unexpected MARK found");
}

TEST_CASE("the MARK fence: nothing below the innermost mark can be popped", "[pickle][marks]") {
  PickleBuilder reduce;  // callable below the mark
  reduce.Global("os", "system").Mark().EmptyTuple().Reduce().Stop();
  auto a = Analyze(reduce);
  CHECK_FALSE(a.streams[0].complete);
  CHECK(a.calls.empty());
  PickleBuilder append;  // APPEND with the list below the mark
  append.EmptyList().Mark().BinInt1(1).Append().Stop();
  CHECK_FALSE(Analyze(append).streams[0].complete);
  PickleBuilder pop;  // POP with nothing above the mark pops the mark
  pop.BinInt1(1).Mark().Pop().Stop();
  CHECK(Analyze(pop).streams[0].complete);
}

TEST_CASE("a second pickle after STOP is analyzed too", "[pickle][streams]") {
  PickleBuilder b;
  b.Proto(2).BinInt1(1).Stop();  // 5 bytes
  b.CallGlobal("os", "system").Stop();
  auto a = Analyze(b);
  REQUIRE(a.streams.size() == 2);
  CHECK(a.streams[1].offset == 5);
  CHECK(a.streams[1].complete);
  REQUIRE(a.imports.size() == 1);
  CHECK(a.imports[0].offset == 5);
  CHECK(a.imports[0].stream == 1);

  PickleBuilder trailing;
  trailing.BinInt1(1).Stop().Raw("\xff\xfe junk");
  auto t = Analyze(trailing);
  CHECK(t.streams.size() == 1);
  auto fs = sc::PickleFindings(t);
  REQUIRE(FindId(fs, "MG-PK-TRAILING-DATA") != nullptr);
  CHECK(FindId(fs, "MG-PK-TRAILING-DATA")->offset == 3);
  CHECK(CountId(fs, "MG-PK-MALFORMED") == 0);
}

TEST_CASE("base_offset makes offsets absolute", "[pickle][streams]") {
  PickleBuilder b;
  b.CallGlobal("os", "system").Stop();
  auto a = sc::AnalyzePickle(b.bytes(), {}, 1000);
  CHECK(a.streams[0].offset == 1000);
  CHECK(a.imports[0].offset == 1000);
}

TEST_CASE("persistent ids are recorded", "[pickle][persid]") {
  PickleBuilder b;
  b.Op('P').Raw("storage0\n").Stop();
  auto a = Analyze(b);
  REQUIRE(a.calls.size() == 1);
  CHECK(a.calls[0].opcode == "PERSID");
  CHECK(a.calls[0].allowed);
  PickleBuilder call;  // calling what persistent_load returned is not allowed
  call.Proto(2).BinInt1(0).BinPersId().EmptyTuple().Reduce().Stop();
  CHECK(CountId(FindingsOf(call), "MG-PK-CALL-NOT-ALLOWED") == 1);
}
