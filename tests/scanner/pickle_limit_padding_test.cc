// Regression (issue 9, "limits that drop what they protect"): padding a
// stream with harmless records, calls, memo entries, stack objects or
// opcodes until a limit is reached must not hide a payload after it. The
// payload's critical finding stays, the analysis is incomplete (the scan
// rejects it whatever failOn says) and MG-PK-LIMIT names the limit.
#include <catch2/catch.hpp>

#include <string>

#include "pickle_builder.h"

namespace sc = modelgate::scanner;
using sc::PickleAnomalyKind;

namespace {

// Payload: protocol 0 os.system("ls").
PickleBuilder& Payload(PickleBuilder& b) { return b.CallGlobal("os", "system"); }

bool HasCritical(const std::vector<sc::Finding>& fs) {
  for (const auto& f : fs) {
    if (f.severity == modelgate::core::Severity::kCritical && f.global == "os.system") return true;
  }
  return false;
}

bool LimitNamed(const std::vector<sc::Finding>& fs, const std::string& limit) {
  for (const auto& f : fs) {
    if (f.id == "MG-PK-LIMIT" && f.message.find(limit) != std::string::npos) return true;
  }
  return false;
}

}  // namespace

TEST_CASE("100,001 harmless globals then os.system: still critical", "[pickle][limits][regress]") {
  PickleBuilder b;
  b.Proto(2);
  for (int i = 0; i < 100'001; ++i) b.Global("collections", "OrderedDict").Pop();
  Payload(b).Stop();
  auto a = Analyze(b);  // default limits: max_records = 100,000
  CHECK(a.streams[0].complete);
  CHECK(a.incomplete);
  CHECK(a.incomplete_reason.find("max_records") != std::string::npos);
  CHECK(a.records_folded >= 1);
  auto fs = sc::PickleFindings(a);
  CHECK(HasCritical(fs));
  CHECK(LimitNamed(fs, "max_records"));
  // Folding bounds memory: the safe repeats are one record.
  CHECK(a.imports.size() <= 100'002);
}

TEST_CASE("max_records: exactly N records is complete", "[pickle][limits]") {
  PickleBuilder b;
  b.Proto(2).Global("a", "b").Pop().Global("c", "d").Stop();
  sc::PickleOptions o;
  o.limits.max_records = 2;
  auto at = Analyze(b, o);
  CHECK_FALSE(at.incomplete);
  CHECK(CountId(sc::PickleFindings(at), "MG-PK-LIMIT") == 0);
  o.limits.max_records = 1;
  auto past = Analyze(b, o);
  CHECK(past.incomplete);
  CHECK(LimitNamed(sc::PickleFindings(past), "max_records"));
}

TEST_CASE("many distinct harmless calls then os.system", "[pickle][limits][regress]") {
  PickleBuilder b;
  b.Proto(2);
  const char* safe[] = {"OrderedDict", "Counter"};
  for (int i = 0; i < 40; ++i) {
    b.Global("collections", safe[i % 2]).EmptyTuple().Reduce().Pop();
    b.Global("torch", i % 2 ? "Size" : "device").EmptyTuple().Reduce().Pop();
  }
  Payload(b).Stop();
  sc::PickleOptions o;
  o.limits.max_records = 3;
  auto a = Analyze(b, o);
  CHECK(a.incomplete);
  CHECK(HasCritical(sc::PickleFindings(a)));
}

TEST_CASE("repeats of a flagged record fold past the cap", "[pickle][limits]") {
  PickleBuilder b;
  b.Proto(2).Global("a", "b").Pop();
  for (int i = 0; i < 1000; ++i) Payload(b).Pop();
  b.None().Stop();
  sc::PickleOptions o;
  o.limits.max_records = 1;
  auto a = Analyze(b, o);
  CHECK(a.incomplete);
  // One import record and one call record for the thousand payloads.
  CHECK(a.imports.size() == 2);
  auto fs = sc::PickleFindings(a);
  REQUIRE(FindId(fs, "MG-PK-CRITICAL-IMPORT") != nullptr);
  CHECK(FindId(fs, "MG-PK-CRITICAL-IMPORT")->message.find("(1000 times)") != std::string::npos);
}

TEST_CASE("max_flagged_records at N and N+1", "[pickle][limits]") {
  auto build = [](int distinct) {
    PickleBuilder b;
    b.Proto(2).Global("pad", "x").Pop();  // fills max_records = 1
    for (int i = 0; i < distinct; ++i) b.Global("m" + std::to_string(i), "x").Pop();
    b.None().Stop();
    return b;
  };
  sc::PickleOptions o;
  o.limits.max_records = 1;
  o.limits.max_flagged_records = 3;
  auto at = Analyze(build(3), o);
  CHECK(at.imports.size() == 4);
  CHECK(at.records_dropped == 0);
  auto past = Analyze(build(4), o);
  CHECK(past.imports.size() == 4);
  CHECK(past.records_dropped == 1);
  CHECK(past.incomplete);
  CHECK(LimitNamed(sc::PickleFindings(past), "max_flagged_records"));
  // Past it, a record more severe than every kept one is still kept.
  PickleBuilder b = build(4);
  b = PickleBuilder();
  b.Proto(2).Global("pad", "x").Pop();
  for (int i = 0; i < 4; ++i) b.Global("m" + std::to_string(i), "x").Pop();
  Payload(b).Stop();
  CHECK(HasCritical(sc::PickleFindings(Analyze(b, o))));
}

TEST_CASE("max_opcodes: a payload after the limit is still found", "[pickle][limits][regress]") {
  PickleBuilder b;
  b.Proto(4);
  b.ShortUnicode("os").BinPut(0).ShortUnicode("system").BinPut(1).Pop().Pop();
  for (int i = 0; i < 2000; ++i) b.None().Pop();
  // Literal names, then names taken from the memo written before the limit.
  b.ShortUnicode("posix").ShortUnicode("system").StackGlobal().Pop();
  b.BinGet(0).BinGet(1).StackGlobal().ShortUnicode("ls").Tuple1().Reduce().Stop();
  sc::PickleOptions o;
  o.limits.max_opcodes = 1000;
  auto a = Analyze(b, o);
  CHECK(a.incomplete);
  CHECK_FALSE(a.streams[0].complete);
  auto fs = sc::PickleFindings(a);
  CHECK(HasCritical(fs));
  CHECK(LimitNamed(fs, "max_opcodes"));
  bool posix = false;
  for (const auto& f : fs) posix |= f.global == "posix.system" && f.id == "MG-PK-CRITICAL-IMPORT";
  CHECK(posix);
  // An operand that is not a known string: the import may be anything.
  PickleBuilder u;
  u.Proto(4);
  for (int i = 0; i < 2000; ++i) u.None().Pop();
  u.ShortUnicode("os").None().StackGlobal().Stop();
  auto ua = Analyze(u, o);
  REQUIRE(!ua.imports.empty());
  CHECK(ua.imports.back().safety == sc::GlobalClass::kCritical);
}

TEST_CASE("max_memo_entries: a payload after the limit is still found", "[pickle][limits][regress]") {
  PickleBuilder b;
  b.Proto(2).None();
  for (int i = 0; i < 200; ++i) b.Op('r').Le(static_cast<uint64_t>(i), 4);
  b.Pop();
  Payload(b).Stop();
  sc::PickleOptions o;
  o.limits.max_memo_entries = 100;
  auto a = Analyze(b, o);
  CHECK(a.incomplete);
  auto fs = sc::PickleFindings(a);
  CHECK(HasCritical(fs));
  CHECK(LimitNamed(fs, "max_memo_entries"));
}

TEST_CASE("max_stack_depth: a payload after the limit is still found", "[pickle][limits][regress]") {
  PickleBuilder b;
  b.Proto(2);
  for (int i = 0; i < 100; ++i) b.None();
  Payload(b).Stop();
  sc::PickleOptions o;
  o.limits.max_stack_depth = 50;
  auto a = Analyze(b, o);
  CHECK(a.incomplete);
  CHECK(HasCritical(sc::PickleFindings(a)));
}

TEST_CASE("max_string_bytes: a name from cut text may be any global", "[pickle][limits][regress]") {
  PickleBuilder b;
  b.Proto(4).String("'padding'").Pop().String("'os'").String("'system'").StackGlobal().Stop();
  sc::PickleOptions o;
  o.limits.max_string_bytes = 7;  // "padding" uses it all: 'os' and 'system' are cut to ""
  auto a = Analyze(b, o);
  CHECK(a.incomplete);
  REQUIRE(a.imports.size() == 1);
  CHECK(a.imports[0].name_truncated);
  CHECK(a.imports[0].safety == sc::GlobalClass::kCritical);
  CHECK(CountId(sc::PickleFindings(a), "MG-PK-MALFORMED") == 0);
}

TEST_CASE("max_name_bytes at N and N+1", "[pickle][limits]") {
  sc::PickleOptions o;
  o.limits.max_name_bytes = 8;
  PickleBuilder at;
  at.Proto(2).Global("abcdefgh", "x").Stop();
  auto a = Analyze(at, o);
  REQUIRE(a.imports.size() == 1);
  CHECK(a.imports[0].safety == sc::GlobalClass::kUnknown);
  CHECK_FALSE(a.incomplete);
  PickleBuilder past;
  past.Proto(2).Global("abcdefghi", "x").Stop();
  auto p = Analyze(past, o);
  REQUIRE(p.imports.size() == 1);
  CHECK(p.imports[0].module.size() == 8);
  CHECK(p.imports[0].safety == sc::GlobalClass::kCritical);
  CHECK(p.incomplete);
  CHECK(LimitNamed(sc::PickleFindings(p), "max_name_bytes"));
}

TEST_CASE("max_nesting: a nested payload past the depth is still found", "[pickle][limits][regress]") {
  PickleBuilder inner;
  Payload(inner.Proto(2)).Stop();
  PickleBuilder b;
  b.Proto(3).Global("torch.storage", "_load_from_bytes").Bytes(inner.bytes()).Tuple1().Reduce().Stop();
  sc::PickleOptions o;
  o.limits.max_nesting = 0;
  auto a = Analyze(b, o);
  CHECK(a.incomplete);
  auto fs = sc::PickleFindings(a);
  CHECK(HasCritical(fs));
  CHECK(LimitNamed(fs, "max_nesting"));
}

TEST_CASE("max_streams: a payload in a stream past the cap is still found", "[pickle][limits][regress]") {
  PickleBuilder b;
  b.BinInt1(1).Stop();
  Payload(b).Stop();
  sc::PickleOptions o;
  o.limits.max_streams = 1;
  auto a = Analyze(b, o);
  CHECK(a.incomplete);
  auto fs = sc::PickleFindings(a);
  CHECK(HasCritical(fs));
  CHECK(LimitNamed(fs, "max_streams"));
}

TEST_CASE("a memoized nested pickle loaded again is judged once", "[pickle][limits][nested]") {
  PickleBuilder inner;
  inner.Proto(2);
  for (int i = 0; i < 1000; ++i) inner.None().Pop();
  inner.CallGlobal("os", "system").Stop();
  PickleBuilder b;
  b.Proto(3).Global("torch.storage", "_load_from_bytes").BinPut(0).Bytes(inner.bytes()).BinPut(1)
      .Tuple1().Reduce().Pop();
  for (int i = 0; i < 10'000; ++i) b.BinGet(0).BinGet(1).Tuple1().Reduce().Pop();
  b.None().Stop();
  auto a = Analyze(b);
  CHECK(a.streams.size() == 2);  // not one nested analysis per load
  CHECK(HasCritical(sc::PickleFindings(a)));
}
