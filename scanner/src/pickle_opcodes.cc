// The opcode table (Lib/pickle.py and pickletools.opcodes, protocols 0-5).
#include "pickle_opcodes.h"

#include <array>
#include <cstring>

#include "modelgate/scanner.h"

namespace modelgate::scanner {
namespace pickle_internal {
namespace {

using A = OpArg;

constexpr Opcode kOpcodes[] = {
    {'(', "MARK", 0, A::kNone, 0},
    {'.', "STOP", 0, A::kNone, 0},
    {'0', "POP", 0, A::kNone, 0},
    {'1', "POP_MARK", 1, A::kNone, 0},
    {'2', "DUP", 0, A::kNone, 0},
    {'F', "FLOAT", 0, A::kLine, 0},
    {'I', "INT", 0, A::kLine, 0},
    {'J', "BININT", 1, A::kFixed, 4},
    {'K', "BININT1", 1, A::kFixed, 1},
    {'L', "LONG", 0, A::kLine, 0},
    {'M', "BININT2", 1, A::kFixed, 2},
    {'N', "NONE", 0, A::kNone, 0},
    {'P', "PERSID", 0, A::kLine, 0},
    {'Q', "BINPERSID", 1, A::kNone, 0},
    {'R', "REDUCE", 0, A::kNone, 0},
    {'S', "STRING", 0, A::kLine, 0},
    {'T', "BINSTRING", 1, A::kCounted, 4},
    {'U', "SHORT_BINSTRING", 1, A::kCounted, 1},
    {'V', "UNICODE", 0, A::kLine, 0},
    {'X', "BINUNICODE", 1, A::kCounted, 4},
    {'a', "APPEND", 0, A::kNone, 0},
    {'b', "BUILD", 0, A::kNone, 0},
    {'c', "GLOBAL", 0, A::kTwoLines, 0},
    {'d', "DICT", 0, A::kNone, 0},
    {'}', "EMPTY_DICT", 1, A::kNone, 0},
    {'e', "APPENDS", 1, A::kNone, 0},
    {'g', "GET", 0, A::kLine, 0},
    {'h', "BINGET", 1, A::kFixed, 1},
    {'i', "INST", 0, A::kTwoLines, 0},
    {'j', "LONG_BINGET", 1, A::kFixed, 4},
    {'l', "LIST", 0, A::kNone, 0},
    {']', "EMPTY_LIST", 1, A::kNone, 0},
    {'o', "OBJ", 1, A::kNone, 0},
    {'p', "PUT", 0, A::kLine, 0},
    {'q', "BINPUT", 1, A::kFixed, 1},
    {'r', "LONG_BINPUT", 1, A::kFixed, 4},
    {'s', "SETITEM", 0, A::kNone, 0},
    {'t', "TUPLE", 0, A::kNone, 0},
    {')', "EMPTY_TUPLE", 1, A::kNone, 0},
    {'u', "SETITEMS", 1, A::kNone, 0},
    {'G', "BINFLOAT", 1, A::kFixed, 8},
    {0x80, "PROTO", 2, A::kFixed, 1},
    {0x81, "NEWOBJ", 2, A::kNone, 0},
    {0x82, "EXT1", 2, A::kFixed, 1},
    {0x83, "EXT2", 2, A::kFixed, 2},
    {0x84, "EXT4", 2, A::kFixed, 4},
    {0x85, "TUPLE1", 2, A::kNone, 0},
    {0x86, "TUPLE2", 2, A::kNone, 0},
    {0x87, "TUPLE3", 2, A::kNone, 0},
    {0x88, "NEWTRUE", 2, A::kNone, 0},
    {0x89, "NEWFALSE", 2, A::kNone, 0},
    {0x8a, "LONG1", 2, A::kCounted, 1},
    {0x8b, "LONG4", 2, A::kCounted, 4},
    {'B', "BINBYTES", 3, A::kCounted, 4},
    {'C', "SHORT_BINBYTES", 3, A::kCounted, 1},
    {0x8c, "SHORT_BINUNICODE", 4, A::kCounted, 1},
    {0x8d, "BINUNICODE8", 4, A::kCounted, 8},
    {0x8e, "BINBYTES8", 4, A::kCounted, 8},
    {0x8f, "EMPTY_SET", 4, A::kNone, 0},
    {0x90, "ADDITEMS", 4, A::kNone, 0},
    {0x91, "FROZENSET", 4, A::kNone, 0},
    {0x92, "NEWOBJ_EX", 4, A::kNone, 0},
    {0x93, "STACK_GLOBAL", 4, A::kNone, 0},
    {0x94, "MEMOIZE", 4, A::kNone, 0},
    {0x95, "FRAME", 4, A::kFixed, 8},
    {0x96, "BYTEARRAY8", 5, A::kCounted, 8},
    {0x97, "NEXT_BUFFER", 5, A::kNone, 0},
    {0x98, "READONLY_BUFFER", 5, A::kNone, 0},
};

// kByCode maps each byte to its entry (index + 1; 0 for none).
constexpr std::array<uint8_t, 256> kByCode = [] {
  std::array<uint8_t, 256> t{};
  for (size_t i = 0; i < std::size(kOpcodes); ++i) t[kOpcodes[i].code] = static_cast<uint8_t>(i + 1);
  return t;
}();

bool Line(core::ByteReader& r, std::span<const uint8_t>* out) {
  std::span<const uint8_t> rest = r.Peek(r.remaining());
  const void* nl = rest.empty() ? nullptr : std::memchr(rest.data(), '\n', rest.size());
  if (nl == nullptr) return false;
  size_t n = static_cast<size_t>(static_cast<const uint8_t*>(nl) - rest.data());
  *out = rest.subspan(0, n);
  return r.Take(n + 1).ok();
}

}  // namespace

const Opcode* FindOpcode(uint8_t op) {
  uint8_t i = kByCode[op];
  return i == 0 ? nullptr : &kOpcodes[i - 1];
}

bool ReadOpcodeArgs(const Opcode& op, core::ByteReader& r, OpcodeArgs* out) {
  *out = {};
  switch (op.arg) {
    case OpArg::kNone: return true;
    case OpArg::kFixed: {
      auto b = r.Take(op.width);
      if (!b.ok()) return false;
      out->first = b.value();
      return true;
    }
    case OpArg::kLine: return Line(r, &out->first);
    case OpArg::kTwoLines: {
      size_t start = r.pos();
      if (Line(r, &out->first) && Line(r, &out->second)) return true;
      (void)r.Seek(start);
      return false;
    }
    case OpArg::kCounted: {
      std::span<const uint8_t> len_bytes = r.Peek(r.remaining() < op.width ? 0 : op.width);
      if (len_bytes.size() != op.width) return false;
      uint64_t n = 0;
      for (int i = op.width - 1; i >= 0; --i) n = (n << 8) | len_bytes[static_cast<size_t>(i)];
      if (n > r.remaining() - op.width) return false;
      (void)r.Take(op.width);
      out->first = r.Take(n).value();
      return true;
    }
  }
  return false;
}

}  // namespace pickle_internal

std::string_view PickleOpcodeName(uint8_t op) {
  const pickle_internal::Opcode* o = pickle_internal::FindOpcode(op);
  return o == nullptr ? std::string_view() : std::string_view(o->name);
}

}  // namespace modelgate::scanner
