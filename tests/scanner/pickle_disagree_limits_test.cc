// Where pickle and pickletools (or pickle.py) read the same bytes
// differently, and every limit at N and N+1.
#include <catch2/catch.hpp>

#include "pickle_builder.h"

namespace sc = modelgate::scanner;
using sc::PickleAnomalyKind;

TEST_CASE("INT literals the C unpickler reads with strtol base 0", "[pickle][disagree]") {
  struct Case {
    const char* text;
    bool disagree;
    bool ok;
  };
  for (Case c : {Case{"0x0", true, true}, Case{"010", true, true}, Case{"0b1", true, true},
                 Case{"0o7", true, true}, Case{" 12", false, true}, Case{"1_0", false, true},
                 Case{"00", false, true}, Case{"01", false, true}, Case{"-5", false, true},
                 Case{"99999999999999999999", false, true}, Case{"0x", false, false},
                 Case{"08", false, false}, Case{"abc", false, false}, Case{"", false, false}}) {
    INFO(c.text);
    PickleBuilder b;
    b.Int(c.text).Stop();
    auto a = Analyze(b);
    CHECK(a.streams[0].complete == c.ok);
    CHECK(HasAnomaly(a, PickleAnomalyKind::kDisagreement) == c.disagree);
  }
  PickleBuilder nul;  // strtol stops at the NUL of the copied line
  nul.Int(std::string_view("1\0x", 3)).Stop();
  auto n = Analyze(nul);
  CHECK(n.streams[0].complete);
  CHECK(HasAnomaly(n, PickleAnomalyKind::kDisagreement));
}

TEST_CASE("I0x0 does not hide the payload after it", "[pickle][disagree]") {
  PickleBuilder b;  // pickletools.genops raises at the INT; pickle reads on
  b.Int("0x0").Pop().CallGlobal("os", "system").Stop();
  auto fs = FindingsOf(b);
  CHECK(CountId(fs, "MG-PK-DISAGREEMENT") == 1);
  CHECK(CountId(fs, "MG-PK-CRITICAL-IMPORT") == 1);
  CHECK(FindId(fs, "MG-PK-DISAGREEMENT")->message.find("INT") != std::string::npos);
}

TEST_CASE("LONG and FLOAT text literals", "[pickle][disagree]") {
  PickleBuilder hex;
  hex.Long("0x10L").Stop();
  auto h = Analyze(hex);
  CHECK(h.streams[0].complete);
  CHECK(HasAnomaly(h, PickleAnomalyKind::kDisagreement));
  PickleBuilder plain;
  plain.Long("123L").Stop();
  CHECK_FALSE(HasAnomaly(Analyze(plain), PickleAnomalyKind::kDisagreement));
  PickleBuilder octal;  // "010" is an error for PyLong_FromString base 0
  octal.Long("010L").Stop();
  CHECK_FALSE(Analyze(octal).streams[0].complete);
  PickleBuilder f;
  f.Op('F').Raw("1.5\n").Stop();
  CHECK_FALSE(HasAnomaly(Analyze(f), PickleAnomalyKind::kDisagreement));
  PickleBuilder under;  // float() accepts 1_0, the C unpickler does not
  under.Op('F').Raw("1_0\n").Stop();
  CHECK_FALSE(Analyze(under).streams[0].complete);
  PickleBuilder big;  // overflow is an error in C, inf for float()
  big.Op('F').Raw("1e999\n").Stop();
  CHECK_FALSE(Analyze(big).streams[0].complete);
}

TEST_CASE("PROTO: twice, not first, lying, above 5", "[pickle][disagree][proto]") {
  PickleBuilder twice;
  twice.Proto(2).Proto(3).None().Stop();
  auto t = Analyze(twice);
  CHECK(t.streams[0].complete);
  CHECK(t.streams[0].declared_protocol == 2);
  CHECK(t.streams[0].protocol == 3);
  CHECK(HasAnomaly(t, PickleAnomalyKind::kDisagreement));
  PickleBuilder late;
  late.None().Pop().Proto(2).None().Stop();
  CHECK(HasAnomaly(Analyze(late), PickleAnomalyKind::kDisagreement));
  PickleBuilder lie;
  lie.Proto(2).ShortUnicode("a").Stop();
  auto l = Analyze(lie);
  CHECK(HasAnomaly(l, PickleAnomalyKind::kDisagreement));
  CHECK(l.streams[0].max_opcode_protocol == 4);
  PickleBuilder none;  // protocol 2 opcodes with no PROTO at all
  none.None().Tuple1().Stop();
  CHECK(HasAnomaly(Analyze(none), PickleAnomalyKind::kDisagreement));
  PickleBuilder honest;
  honest.Proto(4).ShortUnicode("a").Stop();
  CHECK(FindingsOf(honest).size() == 1);
  PickleBuilder six;
  six.Proto(6).None().Stop();
  auto s = Analyze(six);
  CHECK_FALSE(s.streams[0].complete);
  CHECK(s.streams[0].error == "unsupported pickle protocol: 6");
}

TEST_CASE("FRAME boundaries", "[pickle][disagree][frame]") {
  PickleBuilder straddle;  // the frame ends inside BININT1's argument
  straddle.Proto(4).Frame(1).BinInt1(1).Stop();
  auto a = Analyze(straddle);
  CHECK(a.streams[0].complete);
  CHECK(HasAnomaly(a, PickleAnomalyKind::kDisagreement));
  PickleBuilder exact;
  exact.Proto(4).Frame(2).BinInt1(1).Stop();
  CHECK(FindingsOf(exact).size() == 1);
  PickleBuilder early;  // a new frame before the current one ends
  early.Proto(4).Frame(11).None().Frame(1).Pop().Stop();
  CHECK(HasAnomaly(Analyze(early), PickleAnomalyKind::kDisagreement));
  PickleBuilder too_long;
  too_long.Proto(4).Frame(100).None().Stop();
  CHECK_FALSE(Analyze(too_long).streams[0].complete);
}

TEST_CASE("STOP with objects left on the stack", "[pickle][disagree]") {
  PickleBuilder b;
  b.None().None().Stop();
  auto a = Analyze(b);
  CHECK(a.streams[0].complete);
  CHECK(HasAnomaly(a, PickleAnomalyKind::kDisagreement));
}

// Limits: N passes, N+1 is reported (MG-PK-LIMIT) and stops the stream.
TEST_CASE("max_opcodes at N and N+1", "[pickle][limits]") {
  PickleBuilder b;
  b.BinInt1(1).Stop();  // two opcodes
  sc::PickleOptions o;
  o.limits.max_opcodes = 2;
  auto at = Analyze(b, o);
  CHECK(at.streams[0].complete);
  CHECK_FALSE(at.limit_hit);
  o.limits.max_opcodes = 1;
  auto past = Analyze(b, o);
  CHECK_FALSE(past.streams[0].complete);
  CHECK(past.limit_hit);
  CHECK(CountId(sc::PickleFindings(past), "MG-PK-LIMIT") == 1);
  CHECK(CountId(sc::PickleFindings(past), "MG-PK-MALFORMED") == 0);
}

TEST_CASE("max_stack_depth at N and N+1", "[pickle][limits]") {
  PickleBuilder b;
  b.Mark().BinInt1(1).BinInt1(2).Tuple().Stop();  // 1 mark + 2 objects
  sc::PickleOptions o;
  o.limits.max_stack_depth = 3;
  CHECK_FALSE(Analyze(b, o).limit_hit);
  o.limits.max_stack_depth = 2;
  CHECK(Analyze(b, o).limit_hit);
}

TEST_CASE("max_memo_entries at N and N+1", "[pickle][limits]") {
  PickleBuilder b;
  b.None().BinPut(0).BinPut(7).BinPut(0).Stop();  // two distinct indices
  sc::PickleOptions o;
  o.limits.max_memo_entries = 2;
  CHECK_FALSE(Analyze(b, o).limit_hit);
  o.limits.max_memo_entries = 1;
  CHECK(Analyze(b, o).limit_hit);
}

TEST_CASE("max_string_bytes at N and N+1", "[pickle][limits]") {
  PickleBuilder b;
  b.String("'abcd'").Stop();  // four decoded bytes
  sc::PickleOptions o;
  o.limits.max_string_bytes = 4;
  auto at = Analyze(b, o);
  CHECK_FALSE(at.limit_hit);
  o.limits.max_string_bytes = 3;
  auto past = Analyze(b, o);
  CHECK(past.limit_hit);
  CHECK(past.streams[0].complete);  // text is cut, the stream goes on
  // A name built from cut text is never safe.
  PickleBuilder name;
  name.Proto(4).String("'collections'").String("'OrderedDict'").StackGlobal().Stop();
  o.limits.max_string_bytes = 12;
  auto cut = Analyze(name, o);
  REQUIRE(cut.imports.size() == 1);
  CHECK(cut.imports[0].name_truncated);
  CHECK(cut.imports[0].safety != sc::GlobalClass::kSafe);
}

TEST_CASE("max_nesting at N and N+1", "[pickle][limits][nested]") {
  PickleBuilder inner;
  inner.Proto(2).BinInt1(1).Stop();
  PickleBuilder b;
  b.Proto(3).Global("torch.storage", "_load_from_bytes").Bytes(inner.bytes()).Tuple1().Reduce().Stop();
  sc::PickleOptions o;
  o.limits.max_nesting = 1;
  auto at = Analyze(b, o);
  CHECK_FALSE(at.limit_hit);
  CHECK(at.streams.size() == 2);
  o.limits.max_nesting = 0;
  auto past = Analyze(b, o);
  CHECK(past.limit_hit);
  CHECK(past.streams.size() == 1);
}

TEST_CASE("max_streams at N and N+1", "[pickle][limits][streams]") {
  PickleBuilder b;
  b.BinInt1(1).Stop().BinInt1(2).Stop();
  sc::PickleOptions o;
  o.limits.max_streams = 2;
  auto at = Analyze(b, o);
  CHECK(at.streams.size() == 2);
  CHECK_FALSE(at.limit_hit);
  o.limits.max_streams = 1;
  auto past = Analyze(b, o);
  CHECK(past.streams.size() == 1);
  CHECK(past.limit_hit);
  CHECK(FindId(sc::PickleFindings(past), "MG-PK-LIMIT")->offset == 3);
}

TEST_CASE("max_records at N and N+1", "[pickle][limits]") {
  PickleBuilder b;
  b.Proto(2).Global("a", "b").Pop().Global("c", "d").Stop();  // two imports
  sc::PickleOptions o;
  o.limits.max_records = 2;
  auto at = Analyze(b, o);
  CHECK(at.imports.size() == 2);
  CHECK_FALSE(at.limit_hit);
  CHECK_FALSE(at.incomplete);
  o.limits.max_records = 1;
  auto past = Analyze(b, o);
  // Past the cap a distinct unknown import is still listed (a limit never
  // drops what it protects) and the analysis says it is incomplete.
  CHECK(past.imports.size() == 2);
  CHECK(past.limit_hit);
  CHECK(past.incomplete);
  CHECK(past.records_dropped == 0);
  CHECK(CountId(sc::PickleFindings(past), "MG-PK-UNKNOWN-IMPORT") == 2);
}

TEST_CASE("findings: stable ids, folded repeats, opcode names", "[pickle][findings]") {
  PickleBuilder b;
  b.Proto(2).Global("os", "system").Pop().Global("os", "system").Stop();
  auto fs = FindingsOf(b);
  REQUIRE(CountId(fs, "MG-PK-CRITICAL-IMPORT") == 1);
  CHECK(FindId(fs, "MG-PK-CRITICAL-IMPORT")->message.find("(2 times)") != std::string::npos);
  CHECK(FindId(fs, "MG-PK-CRITICAL-IMPORT")->offset == 2);
  for (const auto& f : fs) CHECK(f.id.rfind("MG-PK-", 0) == 0);
  CHECK(sc::PickleOpcodeName('c') == "GLOBAL");
  CHECK(sc::PickleOpcodeName(0x93) == "STACK_GLOBAL");
  CHECK(sc::PickleOpcodeName(0xff).empty());
  // Hostile names are quoted in messages.
  PickleBuilder q;
  q.Proto(4).ShortUnicode("evil\"\n\x1b[31m").ShortUnicode("x").StackGlobal().Stop();
  auto qf = FindingsOf(q);
  REQUIRE(FindId(qf, "MG-PK-UNKNOWN-IMPORT") != nullptr);
  CHECK(FindId(qf, "MG-PK-UNKNOWN-IMPORT")->message.find('\x1b') == std::string::npos);
}
