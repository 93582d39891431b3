#include "numpy_dtype.h"

#include <algorithm>
#include <cstdint>
#include <initializer_list>

#include "modelgate/core.h"

namespace modelgate::scanner {
namespace {

// Digits reads decimal digits from `s` at `*i` into `*n` with checked
// arithmetic; false on overflow. `*any` says whether there was one.
bool Digits(std::string_view s, size_t* i, uint64_t* n, bool* any) {
  *n = 0;
  *any = false;
  while (*i < s.size() && s[*i] >= '0' && s[*i] <= '9') {
    if (__builtin_mul_overflow(*n, uint64_t{10}, n) ||
        __builtin_add_overflow(*n, static_cast<uint64_t>(s[*i] - '0'), n)) {
      return false;
    }
    *any = true;
    ++*i;
  }
  return true;
}

NumpyTypestr ArrayInterface(std::string_view t) {
  NumpyTypestr info;
  size_t i = 0;
  if (i < t.size() && (t[i] == '<' || t[i] == '>' || t[i] == '|' || t[i] == '=')) ++i;
  if (i >= t.size()) return info;
  info.kind = t[i++];
  uint64_t n = 0;
  bool digits = false;
  if (!Digits(t, &i, &n, &digits)) return info;
  const std::string_view rest = t.substr(i);
  switch (info.kind) {
    case 'O':
      info.ok = rest.empty() && (!digits || n == 8 || n == 4);
      info.object = true;
      info.itemsize = digits ? n : 8;
      return info;
    case 'b': case 'i': case 'u': case 'f': case 'c': case 'S': case 'a': case 'V':
      info.ok = digits && rest.empty();
      info.flexible = info.kind == 'S' || info.kind == 'a' || info.kind == 'V';
      info.itemsize = n;
      return info;
    case 'U':
      info.ok = digits && rest.empty() && !__builtin_mul_overflow(n, uint64_t{4}, &n);
      info.flexible = true;
      info.itemsize = n;
      return info;
    case 'M': case 'm':
      info.ok = digits && n == 8 && (rest.empty() || (rest.front() == '[' && rest.back() == ']'));
      info.itemsize = n;
      return info;
    default:
      return info;
  }
}

NumpyTypestr DtypeReduce(std::string_view s) {
  NumpyTypestr d;
  if (s.size() < 2 || s.size() > 11) return d;
  size_t i = 1;
  uint64_t n = 0;
  bool digits = false;
  if (!Digits(s, &i, &n, &digits) || i != s.size()) return d;
  if (s.size() > 2 && s[1] == '0') return d;  // numpy reads "f08" too; it never writes it
  auto one_of = [n](std::initializer_list<uint64_t> sizes) {
    return std::find(sizes.begin(), sizes.end(), n) != sizes.end();
  };
  const uint64_t kIntMax = INT32_MAX;
  d.kind = s[0];
  switch (s[0]) {
    case 'b': d.ok = n == 1; break;
    case 'i':
    case 'u': d.ok = one_of({1, 2, 4, 8}); break;
    case 'f': d.ok = one_of({2, 4, 8, 16}); break;  // f16: long double (x86-64, aarch64)
    case 'c': d.ok = one_of({8, 16, 32}); break;
    case 'M':
    case 'm': d.ok = n == 8; break;
    case 'O':
      d.ok = n == 8;
      d.object = true;
      break;
    case 'S':
    case 'V':
      d.ok = n <= kIntMax;
      d.flexible = true;
      break;
    case 'U':
      d.ok = n <= kIntMax / 4;
      d.flexible = true;
      n *= 4;  // UCS4; cannot overflow below INT32_MAX / 4
      break;
    default: break;
  }
  d.itemsize = n;
  return d;
}

}  // namespace

NumpyTypestr ParseNumpyTypestr(std::string_view s, TypestrForm form) {
  NumpyTypestr t = form == TypestrForm::kArrayInterface ? ArrayInterface(s) : DtypeReduce(s);
  if (!t.ok) t.why = "its dtype " + core::Quoted(s, 40) + " is not a typestr whose itemsize is known here";
  return t;
}

}  // namespace modelgate::scanner
