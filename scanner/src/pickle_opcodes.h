// Private to the scanner: the one table of pickle opcodes (Lib/pickle.py,
// pickletools): name, protocol and argument shape. The pickle machine, the
// salvage walk, PickleOpcodeName and any walker that only needs opcode
// lengths read it from here.
#pragma once

#include <cstdint>
#include <span>

#include "modelgate/core.h"

namespace modelgate::scanner::pickle_internal {

// OpArg is the shape of an opcode's argument in the stream.
enum class OpArg : uint8_t {
  kNone,      // no argument
  kFixed,     // `width` bytes
  kLine,      // bytes up to '\n'
  kTwoLines,  // two '\n'-terminated lines (GLOBAL, INST)
  kCounted,   // a `width`-byte little-endian length, then that many bytes
};

struct Opcode {
  uint8_t code;
  const char* name;  // pickletools' name
  int protocol;      // the protocol that introduced it
  OpArg arg;
  uint8_t width;
};

// FindOpcode is the table entry of `op`, or nullptr if `op` is no opcode.
const Opcode* FindOpcode(uint8_t op);

// OpcodeArgs is what ReadOpcodeArgs found: the argument payload (a line
// without its '\n', the counted bytes, or the fixed bytes) and, for two
// lines, the second.
struct OpcodeArgs {
  std::span<const uint8_t> first, second;
};

// ReadOpcodeArgs reads the argument of `op` (the opcode byte already read)
// through `r`; false, with `r` where the argument starts, when the input
// ends first. Counted lengths are checked against what remains before use.
bool ReadOpcodeArgs(const Opcode& op, core::ByteReader& r, OpcodeArgs* out);

}  // namespace modelgate::scanner::pickle_internal
