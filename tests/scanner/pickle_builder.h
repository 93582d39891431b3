// PickleBuilder writes pickle streams opcode by opcode, in memory, for
// tests: nothing here ever unpickles.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "modelgate/scanner.h"

class PickleBuilder {
 public:
  PickleBuilder& Raw(std::string_view s) {
    bytes_.insert(bytes_.end(), s.begin(), s.end());
    return *this;
  }
  PickleBuilder& Op(uint8_t op) {
    bytes_.push_back(op);
    return *this;
  }
  PickleBuilder& Le(uint64_t v, int width) {
    for (int i = 0; i < width; ++i) bytes_.push_back(static_cast<uint8_t>(v >> (8 * i)));
    return *this;
  }
  PickleBuilder& Proto(int v) { return Op(0x80).Op(static_cast<uint8_t>(v)); }
  PickleBuilder& Frame(uint64_t n) { return Op(0x95).Le(n, 8); }
  PickleBuilder& Global(std::string_view m, std::string_view n) {
    return Op('c').Raw(m).Raw("\n").Raw(n).Raw("\n");
  }
  PickleBuilder& Inst(std::string_view m, std::string_view n) {
    return Op('i').Raw(m).Raw("\n").Raw(n).Raw("\n");
  }
  PickleBuilder& ShortUnicode(std::string_view s) { return Op(0x8c).Le(s.size(), 1).Raw(s); }
  PickleBuilder& BinUnicode(std::string_view s) { return Op('X').Le(s.size(), 4).Raw(s); }
  PickleBuilder& ShortBytes(std::string_view s) { return Op('C').Le(s.size(), 1).Raw(s); }
  PickleBuilder& BinBytes(std::string_view s) { return Op('B').Le(s.size(), 4).Raw(s); }
  PickleBuilder& Bytes(const std::vector<uint8_t>& b) {
    Op('B').Le(b.size(), 4);
    bytes_.insert(bytes_.end(), b.begin(), b.end());
    return *this;
  }
  // STRING takes the quoted literal as written, escapes and all.
  PickleBuilder& String(std::string_view quoted) { return Op('S').Raw(quoted).Raw("\n"); }
  PickleBuilder& Unicode(std::string_view raw) { return Op('V').Raw(raw).Raw("\n"); }
  PickleBuilder& Int(std::string_view text) { return Op('I').Raw(text).Raw("\n"); }
  PickleBuilder& Long(std::string_view text) { return Op('L').Raw(text).Raw("\n"); }
  PickleBuilder& BinInt1(uint8_t v) { return Op('K').Op(v); }
  PickleBuilder& Mark() { return Op('('); }
  PickleBuilder& Tuple() { return Op('t'); }
  PickleBuilder& Tuple1() { return Op(0x85); }
  PickleBuilder& Tuple2() { return Op(0x86); }
  PickleBuilder& Tuple3() { return Op(0x87); }
  PickleBuilder& EmptyTuple() { return Op(')'); }
  PickleBuilder& EmptyDict() { return Op('}'); }
  PickleBuilder& EmptyList() { return Op(']'); }
  PickleBuilder& None() { return Op('N'); }
  PickleBuilder& False() { return Op(0x89); }
  PickleBuilder& Reduce() { return Op('R'); }
  PickleBuilder& Build() { return Op('b'); }
  PickleBuilder& NewObj() { return Op(0x81); }
  PickleBuilder& NewObjEx() { return Op(0x92); }
  PickleBuilder& Obj() { return Op('o'); }
  PickleBuilder& StackGlobal() { return Op(0x93); }
  PickleBuilder& Memoize() { return Op(0x94); }
  PickleBuilder& BinPut(uint8_t i) { return Op('q').Op(i); }
  PickleBuilder& BinGet(uint8_t i) { return Op('h').Op(i); }
  PickleBuilder& Put(std::string_view t) { return Op('p').Raw(t).Raw("\n"); }
  PickleBuilder& Get(std::string_view t) { return Op('g').Raw(t).Raw("\n"); }
  PickleBuilder& SetItems() { return Op('u'); }
  PickleBuilder& SetItem() { return Op('s'); }
  PickleBuilder& Append() { return Op('a'); }
  PickleBuilder& Appends() { return Op('e'); }
  PickleBuilder& Pop() { return Op('0'); }
  PickleBuilder& BinPersId() { return Op('Q'); }
  PickleBuilder& Stop() { return Op('.'); }
  // CallSystem: `module.name("ls")` as protocol 0 GLOBAL + TUPLE + REDUCE.
  PickleBuilder& CallGlobal(std::string_view m, std::string_view n) {
    return Global(m, n).Mark().String("'ls'").Tuple().Reduce();
  }
  size_t size() const { return bytes_.size(); }
  const std::vector<uint8_t>& bytes() const { return bytes_; }

 private:
  std::vector<uint8_t> bytes_;
};

inline modelgate::scanner::PickleAnalysis Analyze(
    const PickleBuilder& b, const modelgate::scanner::PickleOptions& o = {}) {
  return modelgate::scanner::AnalyzePickle(b.bytes(), o);
}

inline std::vector<modelgate::scanner::Finding> FindingsOf(const PickleBuilder& b,
                                                           const modelgate::scanner::PickleOptions& o = {}) {
  return modelgate::scanner::PickleFindings(Analyze(b, o));
}

inline int CountId(const std::vector<modelgate::scanner::Finding>& fs, std::string_view id) {
  int n = 0;
  for (const auto& f : fs) n += f.id == id ? 1 : 0;
  return n;
}

inline const modelgate::scanner::Finding* FindId(const std::vector<modelgate::scanner::Finding>& fs,
                                                 std::string_view id) {
  for (const auto& f : fs) {
    if (f.id == id) return &f;
  }
  return nullptr;
}

inline bool HasAnomaly(const modelgate::scanner::PickleAnalysis& a,
                       modelgate::scanner::PickleAnomalyKind k) {
  for (const auto& x : a.anomalies) {
    if (x.kind == k) return true;
  }
  return false;
}
