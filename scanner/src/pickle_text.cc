// Text arguments of protocol 0/1 opcodes, read the way CPython reads them.
// Each helper cites the C function it mirrors: the gate must accept exactly
// the lines the C unpickler accepts, and notice where pickletools (which
// most Python scanners use) reads the same bytes differently.
#include <cmath>
#include <cstdlib>
#include <string>

#include "pickle_internal.h"

namespace modelgate::scanner::pickle_internal {
namespace {

// Py_ISSPACE and C isspace in the "C" locale agree on these six.
bool IsSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}
int DigitValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'z') return c - 'a' + 10;
  if (c >= 'A' && c <= 'Z') return c - 'A' + 10;
  return 99;
}

// CString is what a C function sees of a line copied by _Unpickler_CopyLine:
// the bytes up to the first NUL, plus the '\n' when no NUL cut it short.
std::string CString(std::string_view line, bool keep_newline) {
  size_t nul = line.find('\0');
  std::string s(line.substr(0, nul));
  if (nul == std::string_view::npos && keep_newline) s.push_back('\n');
  return s;
}

struct Accum {
  bool fits = true;
  uint64_t magnitude = 0;  // valid while fits
  void Add(int base, int digit) {
    if (!fits) return;
    uint64_t v = 0;
    if (__builtin_mul_overflow(magnitude, static_cast<uint64_t>(base), &v) ||
        __builtin_add_overflow(v, static_cast<uint64_t>(digit), &v) || v > (uint64_t{1} << 63)) {
      fits = false;
    } else {
      magnitude = v;
    }
  }
  IntParse Result(bool negative) const {
    IntParse r;
    r.ok = true;
    if (!fits || (!negative && magnitude > static_cast<uint64_t>(INT64_MAX))) return r;
    r.fits = true;
    r.value = negative ? static_cast<int64_t>(0 - magnitude) : static_cast<int64_t>(magnitude);
    return r;
  }
};

// PyLongParse mirrors PyLong_FromString(str, NULL, base) for base 0 or 10
// on a NUL-terminated `s` (the view ends where the NUL is): whitespace,
// sign, 0x/0o/0b prefixes (base 0), single underscores between digits,
// "old octal" only when zero, trailing whitespace, nothing else; and the
// 4300-digit limit on decimal strings (sys.int_info.default_max_str_digits).
IntParse PyLongParse(std::string_view s, int base) {
  IntParse fail;
  size_t i = 0;
  while (i < s.size() && IsSpace(s[i])) ++i;
  bool negative = false;
  if (i < s.size() && s[i] == '+') {
    ++i;
  } else if (i < s.size() && s[i] == '-') {
    negative = true;
    ++i;
  }
  auto at = [&](size_t k) -> char { return k < s.size() ? s[k] : '\0'; };
  bool error_if_nonzero = false;
  if (base == 0) {
    if (at(i) != '0') {
      base = 10;
    } else if (at(i + 1) == 'x' || at(i + 1) == 'X') {
      base = 16;
    } else if (at(i + 1) == 'o' || at(i + 1) == 'O') {
      base = 8;
    } else if (at(i + 1) == 'b' || at(i + 1) == 'B') {
      base = 2;
    } else {
      error_if_nonzero = true;
      base = 10;
    }
  }
  if (at(i) == '0' &&
      ((base == 16 && (at(i + 1) == 'x' || at(i + 1) == 'X')) ||
       (base == 8 && (at(i + 1) == 'o' || at(i + 1) == 'O')) ||
       (base == 2 && (at(i + 1) == 'b' || at(i + 1) == 'B')))) {
    i += 2;
    if (at(i) == '_') ++i;  // one underscore allowed after the prefix
  }
  if (at(i) == '_') return fail;
  Accum acc;
  size_t digit_count = 0;
  char prev = '\0';
  while (i < s.size()) {
    char c = s[i];
    if (c == '_') {
      if (prev == '_') return fail;
    } else {
      int d = DigitValue(c);
      if (d >= base) break;
      acc.Add(base, d);
      ++digit_count;
    }
    prev = c;
    ++i;
  }
  if (digit_count == 0 || prev == '_') return fail;
  if (base == 10 && digit_count > 4300) return fail;
  if (error_if_nonzero && !(acc.fits && acc.magnitude == 0)) return fail;
  while (i < s.size() && IsSpace(s[i])) ++i;
  if (i != s.size()) return fail;
  return acc.Result(negative);
}

// Strtol0 mirrors glibc strtol(s, &end, 0) in the "C" locale.
struct StrtolResult {
  int64_t value = 0;
  size_t end = 0;
  bool overflow = false;
};
StrtolResult Strtol0(std::string_view s) {
  StrtolResult r;
  size_t i = 0;
  while (i < s.size() && IsSpace(s[i])) ++i;
  bool negative = false;
  if (i < s.size() && (s[i] == '+' || s[i] == '-')) {
    negative = s[i] == '-';
    ++i;
  }
  int base = 10;
  if (i < s.size() && s[i] == '0') {
    if (i + 1 < s.size() && (s[i + 1] == 'x' || s[i + 1] == 'X')) {
      if (i + 2 < s.size() && DigitValue(s[i + 2]) < 16) {
        base = 16;
        i += 2;
      } else {
        r.end = i + 1;  // "0x" without a hex digit: the "0" alone
        return r;
      }
    } else {
      base = 8;
    }
  }
  Accum acc;
  size_t start = i;
  while (i < s.size() && DigitValue(s[i]) < base) {
    acc.Add(base, DigitValue(s[i]));
    ++i;
  }
  if (i == start) return r;  // no conversion: end = nptr
  r.end = i;
  IntParse v = acc.Result(negative);
  if (!v.fits) {
    r.overflow = true;
    r.value = negative ? INT64_MIN : INT64_MAX;
  } else {
    r.value = v.value;
  }
  return r;
}

// FloatGrammar matches a float at the start of `s` as _PyOS_ascii_strtod
// does (no leading space): sign, inf/infinity/nan, or digits[.digits][e±d].
// Returns the length matched, 0 for none.
size_t FloatGrammar(std::string_view s) {
  size_t i = 0;
  if (i < s.size() && (s[i] == '+' || s[i] == '-')) ++i;
  auto starts_ci = [&](size_t at, std::string_view word) {
    if (s.size() - at < word.size()) return false;
    for (size_t k = 0; k < word.size(); ++k) {
      char c = s[at + k];
      if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
      if (c != word[k]) return false;
    }
    return true;
  };
  if (starts_ci(i, "infinity")) return i + 8;
  if (starts_ci(i, "inf") || starts_ci(i, "nan")) return i + 3;
  size_t digits = 0;
  while (i < s.size() && s[i] >= '0' && s[i] <= '9') ++i, ++digits;
  if (i < s.size() && s[i] == '.') {
    ++i;
    while (i < s.size() && s[i] >= '0' && s[i] <= '9') ++i, ++digits;
  }
  if (digits == 0) return 0;
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    size_t j = i + 1;
    if (j < s.size() && (s[j] == '+' || s[j] == '-')) ++j;
    size_t exp_start = j;
    while (j < s.size() && s[j] >= '0' && s[j] <= '9') ++j;
    if (j > exp_start) i = j;
  }
  return i;
}

bool FloatOverflows(std::string_view text) {
  std::string copy(text);
  double d = std::strtod(copy.c_str(), nullptr);
  if (!std::isinf(d)) return false;
  for (char c : text) {
    if (c == 'i' || c == 'I') return false;  // a literal inf
  }
  return true;
}

void AppendUtf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

}  // namespace

IntParse CIntOpcode(std::string_view line) {
  if (line.size() + 1 < 2) return {};  // bad_readline
  std::string cs = CString(line, true);
  StrtolResult r = Strtol0(cs);
  if (!r.overflow && (r.end == cs.size() || cs[r.end] == '\n')) {
    IntParse p;
    p.ok = p.fits = true;
    p.value = r.value;
    return p;
  }
  return PyLongParse(cs, 0);
}

IntParse CLongOpcode(std::string_view line) {
  if (line.size() + 1 < 2) return {};
  if (line.back() == 'L') return PyLongParse(CString(line.substr(0, line.size() - 1), false), 0);
  return PyLongParse(CString(line, true), 0);
}

IntParse CMemoIndex(std::string_view line) {
  if (line.size() + 1 < 2) return {};
  return PyLongParse(CString(line, true), 10);
}

IntParse PickletoolsInt(std::string_view line, bool strip_l) {
  if (!strip_l && (line == "00" || line == "01")) {
    IntParse p;
    p.ok = p.fits = true;
    p.value = line == "01" ? 1 : 0;
    return p;
  }
  if (strip_l && !line.empty() && line.back() == 'L') line.remove_suffix(1);
  if (line.find('\0') != std::string_view::npos) return {};  // int(bytes) sees it all
  return PyLongParse(line, 10);
}

bool CFloatOk(std::string_view line) {
  if (line.size() + 1 < 2) return false;
  std::string cs = CString(line, true);
  size_t n = FloatGrammar(cs);
  if (n == 0) return false;
  if (n != cs.size() && cs[n] != '\n') return false;
  return !FloatOverflows(std::string_view(cs).substr(0, n));
}

bool PickletoolsFloatOk(std::string_view line) {
  if (line.find('\0') != std::string_view::npos) return false;
  while (!line.empty() && IsSpace(line.front())) line.remove_prefix(1);
  while (!line.empty() && IsSpace(line.back())) line.remove_suffix(1);
  std::string s;
  for (size_t i = 0; i < line.size(); ++i) {
    if (line[i] == '_') {
      bool between = i > 0 && i + 1 < line.size() && DigitValue(line[i - 1]) < 10 &&
                     DigitValue(line[i + 1]) < 10;
      if (!between) return false;
      continue;
    }
    s.push_back(line[i]);
  }
  size_t n = FloatGrammar(s);
  return n != 0 && n == s.size();
}

bool DecodeEscape(std::string_view in, std::string* out, std::string* error) {
  out->clear();
  size_t i = 0;
  while (i < in.size()) {
    char c = in[i++];
    if (c != '\\') {
      out->push_back(c);
      continue;
    }
    if (i == in.size()) {
      *error = "Trailing \\ in string";
      return false;
    }
    char e = in[i++];
    switch (e) {
      case '\n': break;
      case '\\': out->push_back('\\'); break;
      case '\'': out->push_back('\''); break;
      case '"': out->push_back('"'); break;
      case 'b': out->push_back('\b'); break;
      case 'f': out->push_back('\f'); break;
      case 't': out->push_back('\t'); break;
      case 'n': out->push_back('\n'); break;
      case 'r': out->push_back('\r'); break;
      case 'v': out->push_back('\v'); break;
      case 'a': out->push_back('\a'); break;
      case '0': case '1': case '2': case '3': case '4': case '5': case '6': case '7': {
        unsigned v = static_cast<unsigned>(e - '0');
        for (int k = 0; k < 2 && i < in.size() && in[i] >= '0' && in[i] <= '7'; ++k) {
          v = (v << 3) + static_cast<unsigned>(in[i++] - '0');
        }
        out->push_back(static_cast<char>(v & 0xFF));  // > 0377 only warns
        break;
      }
      case 'x':
        if (i + 1 < in.size() && DigitValue(in[i]) < 16 &&
            DigitValue(in[i + 1]) < 16) {
          out->push_back(static_cast<char>((DigitValue(in[i]) << 4) + DigitValue(in[i + 1])));
          i += 2;
          break;
        }
        *error = "invalid \\x escape at position " + std::to_string(i - 2);
        return false;
      default:
        out->push_back('\\');  // unknown escape: kept (DeprecationWarning only)
        --i;
        break;
    }
  }
  return true;
}

bool DecodeRawUnicodeEscape(std::string_view in, std::string* out, std::string* error) {
  out->clear();
  size_t i = 0;
  while (i < in.size()) {
    unsigned char c = static_cast<unsigned char>(in[i++]);
    if (c != '\\' || i >= in.size()) {
      AppendUtf8(c, out);  // bytes are code points U+0000..U+00FF
      continue;
    }
    unsigned char e = static_cast<unsigned char>(in[i++]);
    int count = e == 'u' ? 4 : e == 'U' ? 8 : 0;
    if (count == 0) {
      out->push_back('\\');
      AppendUtf8(e, out);
      continue;
    }
    uint32_t cp = 0;
    for (int k = 0; k < count; ++k) {
      if (i >= in.size()) {
        *error = count == 4 ? "truncated \\uXXXX escape" : "truncated \\UXXXXXXXX escape";
        return false;
      }
      int d = DigitValue(in[i]);
      if (d >= 16) {
        *error = count == 4 ? "truncated \\uXXXX escape" : "truncated \\UXXXXXXXX escape";
        return false;
      }
      cp = (cp << 4) | static_cast<uint32_t>(d);
      ++i;
    }
    if (cp > 0x10FFFF) {
      *error = "\\Uxxxxxxxx out of range";
      return false;
    }
    AppendUtf8(cp, out);
  }
  return true;
}

bool Utf8Valid(std::string_view s, bool surrogatepass) {
  size_t i = 0;
  while (i < s.size()) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      ++i;
      continue;
    }
    int n;
    uint32_t cp;
    if (c >= 0xC2 && c <= 0xDF) {
      n = 1;
      cp = c & 0x1F;
    } else if (c >= 0xE0 && c <= 0xEF) {
      n = 2;
      cp = c & 0x0F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      n = 3;
      cp = c & 0x07;
    } else {
      return false;
    }
    if (s.size() - i - 1 < static_cast<size_t>(n)) return false;
    for (int k = 1; k <= n; ++k) {
      unsigned char cc = static_cast<unsigned char>(s[i + static_cast<size_t>(k)]);
      if ((cc & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (cc & 0x3F);
    }
    if ((n == 2 && cp < 0x800) || (n == 3 && (cp < 0x10000 || cp > 0x10FFFF))) return false;
    if (cp >= 0xD800 && cp <= 0xDFFF && !surrogatepass) return false;
    i += static_cast<size_t>(n) + 1;
  }
  return true;
}

bool AsciiOnly(std::string_view s) {
  for (char c : s) {
    if (static_cast<unsigned char>(c) >= 0x80) return false;
  }
  return true;
}

bool Latin1FromUtf8(std::string_view s, std::string* out) {
  // Input is valid UTF-8 (checked when pushed): U+0000..U+007F is one byte,
  // U+0080..U+00FF is C2/C3 + one continuation byte; anything else is
  // above U+00FF.
  out->clear();
  out->reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      out->push_back(static_cast<char>(c));
    } else if ((c == 0xC2 || c == 0xC3) && i + 1 < s.size()) {
      auto d = static_cast<unsigned char>(s[++i]);
      out->push_back(static_cast<char>(((c & 0x03) << 6) | (d & 0x3F)));
    } else {
      return false;
    }
  }
  return true;
}

}  // namespace modelgate::scanner::pickle_internal
