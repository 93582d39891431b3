// Private to the pickle machine: text decoding that mirrors CPython's C
// helpers, the Python 2 name mapping and the allowlist tables.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace modelgate::scanner::pickle_internal {

// IntParse is how one loader reads an integer text argument.
struct IntParse {
  bool ok = false;
  bool fits = false;   // value fits int64 (else a big int)
  int64_t value = 0;
};

// CIntOpcode mirrors _pickle.c load_int: strtol(s, &end, 0), falling back to
// PyLong_FromString(s, NULL, 0). `line` is the argument without its '\n'.
IntParse CIntOpcode(std::string_view line);
// CLongOpcode mirrors load_long: drop one trailing 'L', PyLong_FromString base 0.
IntParse CLongOpcode(std::string_view line);
// CMemoIndex mirrors load_get/load_put: PyLong_FromString(s, NULL, 10).
IntParse CMemoIndex(std::string_view line);
// PickletoolsInt mirrors pickletools' read_decimalnl_short/long: int(s) in
// base 10 over the whole line ("00"/"01" are False/True; `strip_l` drops a
// trailing 'L' first).
IntParse PickletoolsInt(std::string_view line, bool strip_l);

// CFloatOk mirrors load_float (PyOS_string_to_double, overflow is an
// error); PickletoolsFloatOk mirrors float(s).
bool CFloatOk(std::string_view line);
bool PickletoolsFloatOk(std::string_view line);

// DecodeEscape mirrors PyBytes_DecodeEscape (STRING's Python-literal
// escapes). False (and `error` set) where CPython raises.
bool DecodeEscape(std::string_view in, std::string* out, std::string* error);
// DecodeRawUnicodeEscape mirrors the strict raw-unicode-escape codec
// (UNICODE); the result is UTF-8 (lone surrogates encoded as 3 bytes).
bool DecodeRawUnicodeEscape(std::string_view in, std::string* out, std::string* error);
// Utf8Valid: strict UTF-8; with `surrogatepass`, encoded surrogates
// (ED A0..BF xx) are accepted as the "surrogatepass" handler does.
bool Utf8Valid(std::string_view s, bool surrogatepass);
bool AsciiOnly(std::string_view s);

// MapPy2Name applies _compat_pickle.NAME_MAPPING, else IMPORT_MAPPING, as
// find_class does when proto < 3 and fix_imports. Returns true if changed.
bool MapPy2Name(std::string* module, std::string* qualname);

// IsNestingLoader: an allowed global whose bytes argument is itself a
// pickle stream loaded recursively (torch.storage._load_from_bytes).
bool IsNestingLoader(std::string_view module, std::string_view qualname);
// ValueType: an allowlisted type that is a plain value only when its
// arguments are (CPython's reductions: datetime's __reduce__, Decimal's,
// defaultdict's, pickle.py's bytes for protocol < 3).
enum class ValueType : uint8_t {
  kNone,         // not one: no condition on its arguments
  kLiteralArgs,  // every argument a literal (int/float/str/bytes/bool/None/tuple...)
  kDefaultDict,  // collections.defaultdict: default_factory None or an allowlisted type
  kLatin1,       // _codecs.encode(str, 'latin1'): evaluated to bytes
};
ValueType ValueTypeOf(std::string_view module, std::string_view qualname);

// Latin1FromUtf8 encodes UTF-8 text `s` as latin-1 (str.encode('latin1'));
// false when a code point is above U+00FF (the encode raises).
bool Latin1FromUtf8(std::string_view s, std::string* out);

// IsTorchScriptHelper: a global that torch.jit.load's unpickler resolves
// to one of its own data constructors (torch/csrc/jit/serialization/
// unpickler.cpp): safe only in a TorchScript archive member.
bool IsTorchScriptHelper(std::string_view module, std::string_view qualname);
// IsCallableArgRebuild: a safe global that calls its first argument
// (torch._tensor._rebuild_from_type_v2).
bool IsCallableArgRebuild(std::string_view module, std::string_view qualname);

}  // namespace modelgate::scanner::pickle_internal
