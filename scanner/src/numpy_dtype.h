// The one numpy type-string parser of the scanner: .npy headers (npy.cc)
// and joblib's pickled numpy.dtype objects (pickle_joblib.cc) both read
// dtypes through it.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace modelgate::scanner {

// TypestrForm is which spelling of a dtype the bytes hold.
enum class TypestrForm : uint8_t {
  // numpy's array-interface string, as .npy headers write descr: an
  // optional byte order ('<', '>', '|', '='), the kind, the size, and a
  // datetime unit ('<f4', '|O', '<U10', '<M8[ns]').
  kArrayInterface,
  // What dtype.__reduce__ writes, "%c%d" % (kind, elsize) (elsize / 4 for
  // 'U'), for the kinds and sizes numpy 1.24 accepts on a 64-bit platform;
  // names such as 'float64', byte-order prefixes and leading zeros are not
  // guessed at.
  kDtypeReduce,
};

// NumpyTypestr is what a type string says.
struct NumpyTypestr {
  bool ok = false;
  char kind = 0;
  uint64_t itemsize = 0;  // bytes per item ('U': 4 per character; 'O': 8)
  bool object = false;    // 'O': items are pickled objects
  bool flexible = false;  // S/U/V/a: the size is part of the type
  std::string why;        // when !ok: why it was refused
};

// ParseNumpyTypestr reads `s` in `form`; every number is overflow-checked.
NumpyTypestr ParseNumpyTypestr(std::string_view s, TypestrForm form);

}  // namespace modelgate::scanner
