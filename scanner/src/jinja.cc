// Jinja2 template analyzer: a lexer with jinja2 3.1's rules (lexer.py), a
// recursive-descent parser of its grammar (parser.py) into an AST, and a
// judge of that AST against what the sandbox (sandbox.py) refuses and what a
// chat template needs. Facts this file relies on, from jinja2 3.1:
//  - `x.name`, `x['name']` and `x|attr('name')` all end in Python getattr
//    (getitem falls back to getattr for string keys); so do the attribute
//    paths of map/selectattr/rejectattr/sort/groupby/sum/unique/min/max.
//  - string literals are decoded with Python's unicode-escape codec after
//    non-ASCII characters were backslash-replaced, and adjacent literals are
//    joined: '\x5f\x5fclass\x5f\x5f' is "__class__".
//  - SandboxedEnvironment refuses attributes starting with "_" and Python's
//    frame/code internals; plain Environment refuses nothing, which is how
//    CVE-2024-34359 ran commands from a GGUF chat template.
//  - transformers renders chat templates in ImmutableSandboxedEnvironment with
//    the loopcontrols extension, its own {% generation %} tag, the filter
//    tojson and the globals raise_exception and strftime_now.
#include "jinja.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <functional>
#include <initializer_list>
#include <map>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>

namespace modelgate::scanner::internal {
namespace {

using core::Severity;

// ---------------------------------------------------------------- text

// Python's str.isspace(), which is what `\s` matches in jinja2's lexer.
bool IsPySpace(uint32_t c) {
  return (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xa0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 ||
         c == 0x202f || c == 0x205f || c == 0x3000;
}

// DecodeUtf8 reads one code point at s[i] the way Python's strict UTF-8
// decoder does (no overlongs, no surrogates, at most U+10FFFF). Returns its
// length, 0 when the bytes are not UTF-8.
size_t DecodeUtf8(std::string_view s, size_t i, uint32_t* cp) {
  const auto b = [&](size_t k) { return static_cast<uint8_t>(s[k]); };
  const uint8_t c = b(i);
  if (c < 0x80) {
    *cp = c;
    return 1;
  }
  size_t len;
  uint32_t v, min;
  if (c >= 0xc2 && c <= 0xdf) {
    len = 2, v = c & 0x1f, min = 0x80;
  } else if (c >= 0xe0 && c <= 0xef) {
    len = 3, v = c & 0x0f, min = 0x800;
  } else if (c >= 0xf0 && c <= 0xf4) {
    len = 4, v = c & 0x07, min = 0x10000;
  } else {
    return 0;
  }
  if (s.size() - i < len) return 0;
  for (size_t k = 1; k < len; ++k) {
    if ((b(i + k) & 0xc0) != 0x80) return 0;
    v = (v << 6) | (b(i + k) & 0x3f);
  }
  if (v < min || v > 0x10ffff || (v >= 0xd800 && v <= 0xdfff)) return 0;
  *cp = v;
  return len;
}

void AppendUtf8(uint32_t c, std::string* out) {
  // Lone surrogates (from \ud800 escapes) are encoded like any other code
  // point: they only need to compare unequal to real names.
  if (c < 0x80) {
    out->push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out->push_back(static_cast<char>(0xc0 | (c >> 6)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3f)));
  } else if (c < 0x10000) {
    out->push_back(static_cast<char>(0xe0 | (c >> 12)));
    out->push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3f)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3f)));
  } else {
    out->push_back(static_cast<char>(0xf0 | (c >> 18)));
    out->push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3f)));
    out->push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3f)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3f)));
  }
}

bool IsAsciiDigit(char c) { return c >= '0' && c <= '9'; }
bool IsAsciiAlpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Characters a \N{...} escape names that this analyzer resolves; names not
// here leave the string "opaque" (its value unknown), which is judged as a
// computed name wherever the value matters. Python matches the names case-
// insensitively.
bool LookupCharName(std::string name, uint32_t* cp) {
  for (char& c : name) {
    if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
  }
  static const std::map<std::string, uint32_t, std::less<>> kNames = {
      {"LOW LINE", '_'},        {"SPACE", ' '},          {"FULL STOP", '.'},
      {"COMMA", ','},           {"COLON", ':'},          {"SEMICOLON", ';'},
      {"HYPHEN-MINUS", '-'},    {"SOLIDUS", '/'},        {"REVERSE SOLIDUS", '\\'},
      {"APOSTROPHE", '\''},     {"QUOTATION MARK", '"'}, {"LEFT SQUARE BRACKET", '['},
      {"RIGHT SQUARE BRACKET", ']'}, {"LEFT PARENTHESIS", '('}, {"RIGHT PARENTHESIS", ')'},
      {"LINE FEED", '\n'},      {"LF", '\n'},            {"CHARACTER TABULATION", '\t'},
      {"VERTICAL LINE", '|'},   {"TILDE", '~'},          {"PERCENT SIGN", '%'},
      {"LEFT CURLY BRACKET", '{'}, {"RIGHT CURLY BRACKET", '}'}, {"NUMBER SIGN", '#'},
      {"EQUALS SIGN", '='},     {"PLUS SIGN", '+'},      {"ASTERISK", '*'},
  };
  if (auto it = kNames.find(name); it != kNames.end()) {
    *cp = it->second;
    return true;
  }
  static constexpr std::string_view kSmall = "LATIN SMALL LETTER ";
  static constexpr std::string_view kCapital = "LATIN CAPITAL LETTER ";
  static constexpr std::string_view kDigit = "DIGIT ";
  if (name.size() == kSmall.size() + 1 && name.compare(0, kSmall.size(), kSmall) == 0 &&
      name.back() >= 'A' && name.back() <= 'Z') {
    *cp = static_cast<uint32_t>(name.back() - 'A' + 'a');
    return true;
  }
  if (name.size() == kCapital.size() + 1 && name.compare(0, kCapital.size(), kCapital) == 0 &&
      name.back() >= 'A' && name.back() <= 'Z') {
    *cp = static_cast<uint32_t>(name.back());
    return true;
  }
  if (name.compare(0, kDigit.size(), kDigit) == 0) {
    static constexpr std::array<std::string_view, 10> kDigits = {
        "ZERO", "ONE", "TWO", "THREE", "FOUR", "FIVE", "SIX", "SEVEN", "EIGHT", "NINE"};
    const std::string_view rest = std::string_view(name).substr(kDigit.size());
    for (size_t d = 0; d < kDigits.size(); ++d) {
      if (rest == kDigits[d]) {
        *cp = static_cast<uint32_t>('0' + d);
        return true;
      }
    }
  }
  return false;
}

// DecodeJinjaString turns the text between a string literal's quotes into its
// value as jinja2 does: newlines normalized, non-ASCII characters backslash-
// replaced, then Python's unicode-escape codec. On a codec error returns false
// with the codec's message. `opaque` is set when a \N{} name is not known here.
bool DecodeJinjaString(std::string_view raw, std::string* out, bool* opaque, std::string* error) {
  std::string ascii;
  ascii.reserve(raw.size());
  for (size_t i = 0; i < raw.size();) {
    const char c = raw[i];
    if (c == '\r') {  // lexer._normalize_newlines: \r\n and \r become \n
      ascii.push_back('\n');
      i += (i + 1 < raw.size() && raw[i + 1] == '\n') ? 2 : 1;
      continue;
    }
    uint32_t cp = 0;
    const size_t n = DecodeUtf8(raw, i, &cp);
    if (n == 0) {  // the template was checked to be UTF-8 before lexing
      *error = "invalid UTF-8 in a string literal";
      return false;
    }
    if (cp < 0x80) {
      ascii.push_back(c);
    } else {  // .encode("ascii", "backslashreplace")
      char buf[16];
      if (cp < 0x100) {
        snprintf(buf, sizeof buf, "\\x%02x", cp);
      } else if (cp < 0x10000) {
        snprintf(buf, sizeof buf, "\\u%04x", cp);
      } else {
        snprintf(buf, sizeof buf, "\\U%08x", cp);
      }
      ascii += buf;
    }
    i += n;
  }
  // .decode("unicode-escape")
  out->clear();
  for (size_t i = 0; i < ascii.size();) {
    if (ascii[i] != '\\') {
      out->push_back(ascii[i++]);
      continue;
    }
    if (i + 1 >= ascii.size()) {
      *error = "\\ at end of string";
      return false;
    }
    const char d = ascii[i + 1];
    i += 2;
    switch (d) {
      case '\n': break;  // line continuation
      case '\\': case '\'': case '"': out->push_back(d); break;
      case 'a': out->push_back('\a'); break;
      case 'b': out->push_back('\b'); break;
      case 'f': out->push_back('\f'); break;
      case 'n': out->push_back('\n'); break;
      case 'r': out->push_back('\r'); break;
      case 't': out->push_back('\t'); break;
      case 'v': out->push_back('\v'); break;
      case '0': case '1': case '2': case '3': case '4': case '5': case '6': case '7': {
        uint32_t v = static_cast<uint32_t>(d - '0');
        for (int k = 0; k < 2 && i < ascii.size() && ascii[i] >= '0' && ascii[i] <= '7'; ++k) {
          v = v * 8 + static_cast<uint32_t>(ascii[i++] - '0');
        }
        AppendUtf8(v, out);
        break;
      }
      case 'x': case 'u': case 'U': {
        const int digits = d == 'x' ? 2 : d == 'u' ? 4 : 8;
        uint32_t v = 0;
        for (int k = 0; k < digits; ++k) {
          const int h = i < ascii.size() ? HexValue(ascii[i]) : -1;
          if (h < 0) {
            *error = d == 'x' ? "truncated \\xXX escape"
                              : d == 'u' ? "truncated \\uXXXX escape" : "truncated \\UXXXXXXXX escape";
            return false;
          }
          v = (v << 4) | static_cast<uint32_t>(h);
          ++i;
        }
        if (v > 0x10ffff) {
          *error = "illegal Unicode character";
          return false;
        }
        AppendUtf8(v, out);
        break;
      }
      case 'N': {
        const size_t close = ascii.find('}', i);
        if (i >= ascii.size() || ascii[i] != '{' || close == std::string::npos || close == i + 1) {
          *error = "malformed \\N character escape";
          return false;
        }
        uint32_t cp = 0;
        if (LookupCharName(ascii.substr(i + 1, close - i - 1), &cp)) {
          AppendUtf8(cp, out);
        } else {
          *opaque = true;
          AppendUtf8(0xfffd, out);
        }
        i = close + 1;
        break;
      }
      default:  // Python keeps unknown escapes as written
        out->push_back('\\');
        out->push_back(d);
    }
  }
  return true;
}

// ---------------------------------------------------------------- lexer

enum class Tok : uint8_t { kData, kVarBegin, kVarEnd, kBlockBegin, kBlockEnd, kName, kString,
                           kInteger, kFloat, kOp, kEof };

struct Token {
  Tok type = Tok::kEof;
  bool opaque = false;  // kString: a \N{} name not known here
  bool int_ok = false;  // kInteger: fits 64 bits
  uint64_t pos = 0;     // byte offset in the template
  uint64_t int_value = 0;
  std::string value;    // name, decoded string, operator
};

struct Failure {
  bool limit = false;  // a limit (MG-TMPL-LIMIT), else a syntax error
  uint64_t pos = 0;
  std::string message;
};

class Lexer {
 public:
  Lexer(std::string_view s, const TemplateLimits& limits) : s_(s), limits_(limits) {}

  bool Run(std::vector<Token>* out, Failure* fail) {
    out_ = out;
    fail_ = fail;
    size_t pos = 0;
    while (pos < s_.size()) {
      const size_t tag = FindTagStart(pos);
      if (tag == std::string_view::npos) {
        if (!Emit(Tok::kData, pos)) return false;
        break;
      }
      if (tag > pos && !Emit(Tok::kData, pos)) return false;
      const char kind = s_[tag + 1];
      size_t raw_end = 0;
      if (kind == '%' && RawBegin(tag, &raw_end)) {
        const size_t end = FindEndRaw(raw_end);
        if (end == std::string_view::npos) return Fail(tag, "Missing end of raw directive");
        if (!Emit(Tok::kData, raw_end)) return false;
        pos = end;
        continue;
      }
      size_t p = tag + 2;
      if (p < s_.size() && (s_[p] == '-' || s_[p] == '+')) ++p;
      if (kind == '#') {
        const size_t close = s_.find("#}", p);
        if (close == std::string_view::npos) return Fail(tag, "Missing end of comment tag");
        pos = close + 2;
        continue;
      }
      if (!Emit(kind == '{' ? Tok::kVarBegin : Tok::kBlockBegin, tag)) return false;
      if (!LexTag(kind == '{', &p)) return false;
      pos = p;
    }
    Token eof;
    eof.type = Tok::kEof;
    eof.pos = s_.size();
    out_->push_back(std::move(eof));
    return true;
  }

 private:
  bool Fail(size_t pos, std::string m) {
    fail_->limit = false;
    fail_->pos = pos;
    fail_->message = std::move(m);
    return false;
  }
  bool Emit(Tok type, size_t pos, std::string value = {}) {
    if (out_->size() >= limits_.max_tokens) {
      fail_->limit = true;
      fail_->pos = pos;
      fail_->message = "more than " + std::to_string(limits_.max_tokens) + " tokens";
      return false;
    }
    Token t;
    t.type = type;
    t.pos = pos;
    t.value = std::move(value);
    out_->push_back(std::move(t));
    return true;
  }
  bool At(size_t p, std::string_view w) const { return s_.substr(p, w.size()) == w; }
  // SkipSpace: `\s*` from p.
  size_t SkipSpace(size_t p) const {
    while (p < s_.size()) {
      uint32_t cp = 0;
      const size_t n = DecodeUtf8(s_, p, &cp);
      if (n == 0 || !IsPySpace(cp)) break;
      p += n;
    }
    return p;
  }
  // The root rule's lazy `(.*?)` stops at the first `{{`, `{%` or `{#`.
  size_t FindTagStart(size_t pos) const {
    for (size_t p = s_.find('{', pos); p != std::string_view::npos; p = s_.find('{', p + 1)) {
      if (p + 1 < s_.size() && (s_[p + 1] == '{' || s_[p + 1] == '%' || s_[p + 1] == '#')) return p;
    }
    return std::string_view::npos;
  }
  // `{%(-|+|)\s*raw\s*(?:-%}\s*|%})`
  bool RawBegin(size_t p, size_t* after) const {
    p += 2;
    if (p < s_.size() && (s_[p] == '-' || s_[p] == '+')) ++p;
    p = SkipSpace(p);
    if (!At(p, "raw")) return false;
    p = SkipSpace(p + 3);
    if (At(p, "-%}")) {
      *after = p + 3;
      return true;
    }
    if (At(p, "%}")) {
      *after = p + 2;
      return true;
    }
    return false;
  }
  // `(.*?)((?:{%(-|+|))\s*endraw\s*(?:+%}|-%}\s*|%}))`: the end of the first
  // endraw tag at or after p.
  size_t FindEndRaw(size_t p) const {
    for (size_t q = s_.find("{%", p); q != std::string_view::npos; q = s_.find("{%", q + 1)) {
      size_t r = q + 2;
      if (r < s_.size() && (s_[r] == '-' || s_[r] == '+')) ++r;
      r = SkipSpace(r);
      if (!At(r, "endraw")) continue;
      r = SkipSpace(r + 6);
      if (At(r, "+%}") || At(r, "-%}")) return r + 3;
      if (At(r, "%}")) return r + 2;
    }
    return std::string_view::npos;
  }

  // LexTag lexes a `{{ }}` or `{% %}` body from *p to its end delimiter.
  // End delimiters count only while brackets are balanced (jinja2's
  // balancing_stack), so `{{ {'a': {}} }}` ends at the last `}}`. At the end
  // of the text it stops without a close: the parser reports that.
  bool LexTag(bool variable, size_t* p) {
    std::string stack;
    size_t pos = *p;
    while (pos < s_.size()) {
      if (stack.empty()) {
        if (variable) {
          if (At(pos, "-}}") || At(pos, "}}")) {
            if (!Emit(Tok::kVarEnd, pos)) return false;
            *p = pos + (s_[pos] == '-' ? 3 : 2);
            return true;
          }
        } else if (At(pos, "+%}") || At(pos, "-%}") || At(pos, "%}")) {
          if (!Emit(Tok::kBlockEnd, pos)) return false;
          *p = pos + (s_[pos] == '%' ? 2 : 3);
          return true;
        }
      }
      const char c = s_[pos];
      uint32_t cp = 0;
      const size_t n = DecodeUtf8(s_, pos, &cp);
      if (n == 0) return Fail(pos, "invalid UTF-8");
      if (IsPySpace(cp)) {
        pos += n;
        continue;
      }
      if (IsAsciiDigit(c)) {
        if (!Number(&pos)) return false;
        continue;
      }
      if (IsAsciiAlpha(c) || c == '_' || cp >= 0x80) {
        // jinja2's name rule is Unicode identifier characters; other
        // non-ASCII characters are a syntax error there and a name here,
        // which can only make this analyzer see a name jinja2 refuses.
        const size_t start = pos;
        while (pos < s_.size()) {
          const char d = s_[pos];
          uint32_t dc = 0;
          const size_t m = DecodeUtf8(s_, pos, &dc);
          if (m == 0) return Fail(pos, "invalid UTF-8");
          if (!(IsAsciiAlpha(d) || IsAsciiDigit(d) || d == '_' || (dc >= 0x80 && !IsPySpace(dc)))) break;
          pos += m;
        }
        if (!Emit(Tok::kName, start, std::string(s_.substr(start, pos - start)))) return false;
        continue;
      }
      if (c == '\'' || c == '"') {
        if (!String(&pos)) return false;
        continue;
      }
      static constexpr std::array<std::string_view, 6> kTwo = {"//", "**", "==", "!=", ">=", "<="};
      std::string op;
      for (std::string_view t : kTwo) {
        if (At(pos, t)) op = t;
      }
      if (op.empty() && std::string_view("+-/*%~[](){}><=.:|,;").find(c) != std::string_view::npos) {
        op = std::string(1, c);
      }
      if (op.empty()) return Fail(pos, std::string("unexpected char ") + Printable(c));
      if (op == "(" || op == "[" || op == "{") {
        stack.push_back(op == "(" ? ')' : op == "[" ? ']' : '}');
      } else if (op == ")" || op == "]" || op == "}") {
        if (stack.empty()) return Fail(pos, "unexpected '" + op + "'");
        if (stack.back() != op[0]) {
          return Fail(pos, "unexpected '" + op + "', expected '" + std::string(1, stack.back()) + "'");
        }
        stack.pop_back();
      }
      if (!Emit(Tok::kOp, pos, op)) return false;
      pos += op.size();
    }
    *p = pos;
    return true;
  }

  static std::string Printable(char c) {
    if (c >= 0x20 && c < 0x7f) return std::string("'") + c + "'";
    char buf[8];
    snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned>(static_cast<uint8_t>(c)));
    return buf;
  }

  // Digits(p): `(\d+_)*\d+` from p; returns the end, or p when no digit.
  size_t Digits(size_t p) const {
    if (p >= s_.size() || !IsAsciiDigit(s_[p])) return p;
    while (p < s_.size() && IsAsciiDigit(s_[p])) ++p;
    while (p + 1 < s_.size() && s_[p] == '_' && IsAsciiDigit(s_[p + 1])) {
      ++p;
      while (p < s_.size() && IsAsciiDigit(s_[p])) ++p;
    }
    return p;
  }
  // Number: jinja2 tries its float rule, then its integer rule (binary,
  // octal, hex, decimal, zero: the first alternative that matches).
  bool Number(size_t* p) {
    const size_t start = *p;
    if (start == 0 || s_[start - 1] != '.') {  // (?<!\.)
      const size_t int_end = Digits(start);
      size_t end = 0;
      // ((\.D)?e[+-]?D | \.D)
      size_t q = int_end;
      if (q < s_.size() && s_[q] == '.' && Digits(q + 1) > q + 1) q = Digits(q + 1);
      auto exponent = [&](size_t r) -> size_t {
        if (r < s_.size() && (s_[r] == 'e' || s_[r] == 'E')) {
          size_t t = r + 1;
          if (t < s_.size() && (s_[t] == '+' || s_[t] == '-')) ++t;
          if (Digits(t) > t) return Digits(t);
        }
        return 0;
      };
      if (size_t e = exponent(q)) {
        end = e;
      } else if (q != int_end && (end = exponent(int_end)) != 0) {
      } else if (q != int_end) {
        end = q;
      }
      if (end != 0) {
        *p = end;
        return Emit(Tok::kFloat, start, std::string(s_.substr(start, end - start)));
      }
    }
    size_t end = start + 1;
    int base = 10;
    auto run = [&](size_t from, auto is_digit) {
      size_t r = from;
      while (true) {
        if (r < s_.size() && is_digit(s_[r])) {
          ++r;
        } else if (r + 1 < s_.size() && s_[r] == '_' && is_digit(s_[r + 1])) {
          r += 2;
        } else {
          break;
        }
      }
      return r;
    };
    const char c1 = start + 1 < s_.size() ? static_cast<char>(s_[start + 1] | 0x20) : '\0';
    const auto bin = [](char c) { return c == '0' || c == '1'; };
    const auto oct = [](char c) { return c >= '0' && c <= '7'; };
    const auto hex = [](char c) { return HexValue(c) >= 0; };
    const auto dec = [](char c) { return IsAsciiDigit(c); };
    const auto zero = [](char c) { return c == '0'; };
    size_t r = 0;
    if (s_[start] == '0' && c1 == 'b' && (r = run(start + 2, bin)) > start + 2) {
      end = r, base = 2;
    } else if (s_[start] == '0' && c1 == 'o' && (r = run(start + 2, oct)) > start + 2) {
      end = r, base = 8;
    } else if (s_[start] == '0' && c1 == 'x' && (r = run(start + 2, hex)) > start + 2) {
      end = r, base = 16;
    } else if (s_[start] != '0') {
      end = run(start + 1, dec);
    } else {
      end = run(start + 1, zero);
    }
    Token t;
    t.type = Tok::kInteger;
    t.pos = start;
    t.value = std::string(s_.substr(start, end - start));
    uint64_t v = 0;
    bool ok = true;
    for (size_t k = (base == 10 ? start : start + 2); k < end; ++k) {
      if (s_[k] == '_') continue;
      ok = ok && !__builtin_mul_overflow(v, static_cast<uint64_t>(base), &v) &&
           !__builtin_add_overflow(v, static_cast<uint64_t>(HexValue(s_[k])), &v);
    }
    t.int_ok = ok;
    t.int_value = ok ? v : 0;
    if (out_->size() >= limits_.max_tokens) return Emit(Tok::kInteger, start);  // fails on the limit
    out_->push_back(std::move(t));
    *p = end;
    return true;
  }
  // String: `'([^'\\]*(?:\\.[^'\\]*)*)'` or the same with `"`.
  bool String(size_t* p) {
    const size_t start = *p;
    const char q = s_[start];
    size_t i = start + 1;
    while (i < s_.size() && s_[i] != q) i += (s_[i] == '\\') ? 2 : 1;
    if (i >= s_.size()) return Fail(start, std::string("unexpected char ") + Printable(q));
    Token t;
    t.type = Tok::kString;
    t.pos = start;
    std::string error;
    if (!DecodeJinjaString(s_.substr(start + 1, i - start - 1), &t.value, &t.opaque, &error)) {
      return Fail(start, error);
    }
    if (out_->size() >= limits_.max_tokens) return Emit(Tok::kString, start);  // fails on the limit
    out_->push_back(std::move(t));
    *p = i + 1;
    return true;
  }

  std::string_view s_;
  const TemplateLimits& limits_;
  std::vector<Token>* out_ = nullptr;
  Failure* fail_ = nullptr;
};

// ---------------------------------------------------------------- AST

enum class K : uint8_t {
  // expressions
  kConst, kName, kGetattr, kGetitem, kSlice, kCall, kFilter, kTest, kKeyword, kStarArgs,
  kStarKwargs, kUnary, kBinary, kConcat, kCompare, kOperand, kCondExpr, kTuple, kList, kDict,
  kPair, kNsRef,
  // statements
  kBody, kData, kOutput, kFor, kIf, kSet, kSetBlock, kMacro, kParams, kCallBlock, kFilterBlock,
  kWith, kBlock, kLoad, kAutoescape, kGeneration, kLoopControl, kDo,
};
enum class CK : uint8_t { kStr, kInt, kFloat, kBool, kNone };

constexpr int32_t kAbsent = -1;  // an optional child that is not there
constexpr int32_t kErr = -2;     // a parse failure (Parser::fail_ says why)

// Node is one AST node; children are indices into the node arena. Layouts:
//  Getattr {obj} text=attr   Getitem {obj, key}   Slice {start, stop, step}
//  Call {callee, args...}    Filter {obj|absent, args...} text=name
//  Test {obj, args...}       Keyword {value} text=key   StarArgs/StarKwargs {value}
//  Unary {x} text=op   Binary {l, r} text=op   Concat {parts...}
//  Compare {x, Operand...}   Operand {x} text=op   CondExpr {test, then, else|absent}
//  Tuple/List {items...}     Dict {Pair...}   Pair {key, value}   NsRef text=name text2=attr
//  Body {stmts...}  Output {exprs...}  For {target, iter, test|absent, body, else|absent}
//  If {test, body, test, body, ..., else|absent}   Set {target, value}
//  SetBlock {target, filter|absent, body}   Macro {Params, body} text=name
//  Params {Name | Keyword(default)...}   CallBlock {Params, call, body}
//  FilterBlock {filter, body}   With {Pair(target, value)..., body}   Block {body} text=name
//  Load {template, Name(imported)...} text=tag   Autoescape {x, body}   Generation {body}
//  Do {x}
struct Node {
  K kind = K::kConst;
  CK ck = CK::kNone;
  bool opaque = false;  // kConst string with an unknown \N{} name
  bool int_ok = false;
  uint32_t height = 1;
  uint64_t pos = 0;
  uint64_t int_value = 0;
  std::string text;
  std::string text2;
  std::vector<int32_t> kids;
};

// ---------------------------------------------------------------- parser

class Parser {
 public:
  Parser(const std::vector<Token>& tokens, const TemplateLimits& limits, std::vector<Node>* nodes)
      : t_(tokens), limits_(limits), nodes_(*nodes) {}

  int32_t Parse(Failure* fail) {
    fail_ = fail;
    const int32_t body = Subparse({});
    return failed_ ? kErr : body;
  }

 private:
  // Depth counts the recursions of the grammar (expressions in brackets,
  // `not`, unary signs, conditional else-branches, statement bodies): every
  // cycle of the recursive descent passes one of them.
  class Depth {
   public:
    explicit Depth(Parser* p) : p_(p) { ok_ = ++p_->depth_ <= p_->limits_.max_depth || p_->Limit(); }
    ~Depth() { --p_->depth_; }
    bool ok() const { return ok_; }
   private:
    Parser* p_;
    bool ok_;
  };

  const Token& Cur() const { return t_[i_]; }
  const Token& Look() const { return t_[std::min(i_ + 1, t_.size() - 1)]; }
  void Next() {
    if (i_ + 1 < t_.size()) ++i_;
  }
  bool IsName(std::string_view v) const { return Cur().type == Tok::kName && Cur().value == v; }
  bool IsOp(std::string_view v) const { return Cur().type == Tok::kOp && Cur().value == v; }
  static bool IsOpTok(const Token& t, std::string_view v) { return t.type == Tok::kOp && t.value == v; }
  static bool IsNameTok(const Token& t, std::string_view v) {
    return t.type == Tok::kName && t.value == v;
  }

  int32_t Fail(std::string m) {
    if (!failed_) {
      failed_ = true;
      fail_->limit = false;
      fail_->pos = Cur().pos;
      fail_->message = std::move(m);
    }
    return kErr;
  }
  bool Limit() {
    if (!failed_) {
      failed_ = true;
      fail_->limit = true;
      fail_->pos = Cur().pos;
      fail_->message = "nesting deeper than " + std::to_string(limits_.max_depth);
    }
    return false;
  }
  std::string Describe(const Token& t) const {
    switch (t.type) {
      case Tok::kName: case Tok::kOp: return "'" + t.value.substr(0, 40) + "'";
      case Tok::kString: return "string";
      case Tok::kInteger: case Tok::kFloat: return "number";
      case Tok::kVarBegin: return "'{{'";
      case Tok::kVarEnd: return "end of print statement";
      case Tok::kBlockBegin: return "'{%'";
      case Tok::kBlockEnd: return "end of statement block";
      case Tok::kData: return "template data";
      case Tok::kEof: return "end of template";
    }
    return "token";
  }
  bool ExpectOp(std::string_view op) {
    if (IsOp(op)) {
      Next();
      return true;
    }
    Fail("expected '" + std::string(op) + "', got " + Describe(Cur()));
    return false;
  }
  bool ExpectType(Tok type, std::string_view what) {
    if (Cur().type == type) {
      Next();
      return true;
    }
    Fail("expected " + std::string(what) + ", got " + Describe(Cur()));
    return false;
  }
  bool ExpectName(std::string* name) {
    if (Cur().type != Tok::kName) {
      Fail("expected a name, got " + Describe(Cur()));
      return false;
    }
    *name = Cur().value;
    Next();
    return true;
  }
  bool ExpectKeyword(std::string_view v) {
    if (IsName(v)) {
      Next();
      return true;
    }
    Fail("expected '" + std::string(v) + "', got " + Describe(Cur()));
    return false;
  }

  // Make appends a node; its height past max_depth is a limit (long
  // left-associative chains are loops in the parser but deep trees here).
  int32_t Make(K kind, uint64_t pos, std::vector<int32_t> kids = {}, std::string text = {}) {
    uint32_t h = 0;
    for (int32_t k : kids) {
      if (k >= 0) h = std::max(h, nodes_[static_cast<size_t>(k)].height);
    }
    if (h + 1 > limits_.max_depth) {
      Limit();
      return kErr;
    }
    Node n;
    n.kind = kind;
    n.pos = pos;
    n.height = h + 1;
    n.kids = std::move(kids);
    n.text = std::move(text);
    nodes_.push_back(std::move(n));
    return static_cast<int32_t>(nodes_.size() - 1);
  }
  Node& At(int32_t n) { return nodes_[static_cast<size_t>(n)]; }

#define MG_TRY(x)              \
  do {                         \
    if ((x) == kErr) return kErr; \
  } while (0)
#define MG_TRYB(x)             \
  do {                         \
    if (!(x)) return kErr;     \
  } while (0)

  // ---- statements

  int32_t Subparse(std::initializer_list<std::string_view> ends) {
    Depth depth(this);
    MG_TRYB(depth.ok());
    const uint64_t pos = Cur().pos;
    std::vector<int32_t> body;
    while (Cur().type != Tok::kEof) {
      const Token& tok = Cur();
      if (tok.type == Tok::kData) {
        int32_t d = Make(K::kData, tok.pos);
        MG_TRY(d);
        body.push_back(d);
        Next();
      } else if (tok.type == Tok::kVarBegin) {
        const uint64_t p = tok.pos;
        Next();
        int32_t e = ParseTuple(false, true, {}, false);
        MG_TRY(e);
        MG_TRYB(ExpectType(Tok::kVarEnd, "end of print statement"));
        int32_t o = Make(K::kOutput, p, {e});
        MG_TRY(o);
        body.push_back(o);
      } else if (tok.type == Tok::kBlockBegin) {
        Next();
        if (Cur().type == Tok::kName) {
          for (std::string_view e : ends) {
            if (Cur().value == e) return Make(K::kBody, pos, std::move(body));
          }
        }
        int32_t s = ParseStatement();
        MG_TRY(s);
        MG_TRYB(ExpectType(Tok::kBlockEnd, "end of statement block"));
        body.push_back(s);
      } else {
        return Fail("unexpected " + Describe(tok));
      }
    }
    if (ends.size() != 0) {
      std::string want;
      for (std::string_view e : ends) want += (want.empty() ? "'" : " or '") + std::string(e) + "'";
      return Fail("unexpected end of template, looking for " + want);
    }
    return Make(K::kBody, pos, std::move(body));
  }

  int32_t ParseStatements(std::initializer_list<std::string_view> ends, bool drop_needle) {
    if (IsOp(":")) Next();
    MG_TRYB(ExpectType(Tok::kBlockEnd, "end of statement block"));
    int32_t body = Subparse(ends);
    MG_TRY(body);
    if (drop_needle) Next();
    return body;
  }

  int32_t ParseStatement() {
    if (Cur().type != Tok::kName) return Fail("tag name expected");
    const std::string tag = Cur().value;
    const uint64_t pos = Cur().pos;
    if (tag == "for") return ParseFor();
    if (tag == "if") return ParseIf();
    if (tag == "block") return ParseBlock();
    if (tag == "extends" || tag == "include" || tag == "import" || tag == "from") return ParseLoad();
    if (tag == "print") {
      Next();
      std::vector<int32_t> items;
      while (Cur().type != Tok::kBlockEnd) {
        if (!items.empty()) MG_TRYB(ExpectOp(","));
        int32_t e = ParseExpression(true);
        MG_TRY(e);
        items.push_back(e);
      }
      return Make(K::kOutput, pos, std::move(items));
    }
    if (tag == "macro") {
      Next();
      std::string name;
      MG_TRYB(ExpectName(&name));
      int32_t params = ParseSignature();
      MG_TRY(params);
      int32_t body = ParseStatements({"endmacro"}, true);
      MG_TRY(body);
      return Make(K::kMacro, pos, {params, body}, name);
    }
    if (tag == "set") return ParseSet();
    if (tag == "with") return ParseWith();
    if (tag == "autoescape") {
      Next();
      int32_t e = ParseExpression(true);
      MG_TRY(e);
      int32_t body = ParseStatements({"endautoescape"}, true);
      MG_TRY(body);
      return Make(K::kAutoescape, pos, {e, body});
    }
    if (tag == "call") {
      Next();
      int32_t params = kAbsent;
      if (IsOp("(")) {
        params = ParseSignature();
        MG_TRY(params);
      } else {
        params = Make(K::kParams, pos);
        MG_TRY(params);
      }
      int32_t call = ParseExpression(true);
      MG_TRY(call);
      if (At(call).kind != K::kCall) return Fail("expected call");
      int32_t body = ParseStatements({"endcall"}, true);
      MG_TRY(body);
      return Make(K::kCallBlock, pos, {params, call, body});
    }
    if (tag == "filter") {
      Next();
      int32_t f = ParseFilter(kAbsent, true);
      MG_TRY(f);
      int32_t body = ParseStatements({"endfilter"}, true);
      MG_TRY(body);
      return Make(K::kFilterBlock, pos, {f, body});
    }
    // Extensions: jinja2.ext.loopcontrols and transformers' AssistantTracker
    // (both enabled by transformers), and jinja2.ext.do, which some other
    // renderers enable; its expression is judged like any other.
    if (tag == "break" || tag == "continue") {
      Next();
      return Make(K::kLoopControl, pos, {}, tag);
    }
    if (tag == "generation") {
      Next();
      int32_t body = ParseStatements({"endgeneration"}, true);
      MG_TRY(body);
      return Make(K::kGeneration, pos, {body});
    }
    if (tag == "do") {
      Next();
      int32_t e = ParseTuple(false, true, {}, false);
      MG_TRY(e);
      return Make(K::kDo, pos, {e});
    }
    return Fail("Encountered unknown tag '" + tag.substr(0, 40) + "'");
  }

  int32_t ParseFor() {
    const uint64_t pos = Cur().pos;
    Next();
    int32_t target = ParseAssignTarget(true, false, "in", false);
    MG_TRY(target);
    MG_TRYB(ExpectKeyword("in"));
    int32_t iter = ParseTuple(false, false, "recursive", false);
    MG_TRY(iter);
    int32_t test = kAbsent;
    if (IsName("if")) {
      Next();
      test = ParseExpression(true);
      MG_TRY(test);
    }
    if (IsName("recursive")) Next();
    int32_t body = ParseStatements({"endfor", "else"}, false);
    MG_TRY(body);
    int32_t else_body = kAbsent;
    if (IsName("endfor")) {
      Next();
    } else {
      Next();
      else_body = ParseStatements({"endfor"}, true);
      MG_TRY(else_body);
    }
    return Make(K::kFor, pos, {target, iter, test, body, else_body});
  }

  int32_t ParseIf() {
    const uint64_t pos = Cur().pos;
    Next();
    std::vector<int32_t> kids;
    while (true) {
      int32_t test = ParseTuple(false, false, {}, false);
      MG_TRY(test);
      int32_t body = ParseStatements({"elif", "else", "endif"}, false);
      MG_TRY(body);
      kids.push_back(test);
      kids.push_back(body);
      const bool is_elif = IsName("elif"), is_else = IsName("else");
      Next();
      if (is_elif) continue;
      int32_t else_body = kAbsent;
      if (is_else) {
        else_body = ParseStatements({"endif"}, true);
        MG_TRY(else_body);
      }
      kids.push_back(else_body);
      break;
    }
    return Make(K::kIf, pos, std::move(kids));
  }

  int32_t ParseBlock() {
    const uint64_t pos = Cur().pos;
    Next();
    std::string name;
    MG_TRYB(ExpectName(&name));
    if (IsName("scoped")) Next();
    if (IsName("required")) Next();
    if (IsOp("-")) return Fail("Block names in Jinja have to be valid Python identifiers");
    int32_t body = ParseStatements({"endblock"}, true);
    MG_TRY(body);
    if (IsName(name)) Next();
    return Make(K::kBlock, pos, {body}, name);
  }

  bool ImportContext() {
    if ((IsName("with") || IsName("without")) && IsNameTok(Look(), "context")) {
      Next();
      Next();
      return true;
    }
    return false;
  }

  int32_t ParseLoad() {
    const std::string tag = Cur().value;
    const uint64_t pos = Cur().pos;
    Next();
    int32_t tmpl = ParseExpression(true);
    MG_TRY(tmpl);
    std::vector<int32_t> kids = {tmpl};
    if (tag == "include") {
      if (IsName("ignore") && IsNameTok(Look(), "missing")) {
        Next();
        Next();
      }
      ImportContext();
    } else if (tag == "import") {
      MG_TRYB(ExpectKeyword("as"));
      const uint64_t npos = Cur().pos;
      std::string name;
      MG_TRYB(ExpectName(&name));
      int32_t n = Make(K::kName, npos, {}, name);
      MG_TRY(n);
      kids.push_back(n);
      ImportContext();
    } else if (tag == "from") {
      MG_TRYB(ExpectKeyword("import"));
      bool any = false;
      while (true) {
        if (any) MG_TRYB(ExpectOp(","));
        if (Cur().type != Tok::kName) {
          std::string ignored;
          MG_TRYB(ExpectName(&ignored));
        }
        if (ImportContext()) break;
        const uint64_t npos = Cur().pos;
        std::string name;
        MG_TRYB(ExpectName(&name));
        if (!name.empty() && name[0] == '_') {
          return Fail("names starting with an underline can not be imported");
        }
        if (IsName("as")) {
          Next();
          MG_TRYB(ExpectName(&name));
        }
        int32_t n = Make(K::kName, npos, {}, name);
        MG_TRY(n);
        kids.push_back(n);
        any = true;
        if (ImportContext() || !IsOp(",")) break;
      }
    }
    return Make(K::kLoad, pos, std::move(kids), tag);
  }

  int32_t ParseSignature() {
    const uint64_t pos = Cur().pos;
    MG_TRYB(ExpectOp("("));
    std::vector<int32_t> params;
    bool defaults = false;
    while (!IsOp(")")) {
      if (!params.empty()) MG_TRYB(ExpectOp(","));
      const uint64_t apos = Cur().pos;
      std::string name;
      MG_TRYB(ExpectName(&name));
      int32_t p;
      if (IsOp("=")) {
        Next();
        int32_t d = ParseExpression(true);
        MG_TRY(d);
        p = Make(K::kKeyword, apos, {d}, name);
        defaults = true;
      } else if (defaults) {
        return Fail("non-default argument follows default argument");
      } else {
        p = Make(K::kName, apos, {}, name);
      }
      MG_TRY(p);
      params.push_back(p);
    }
    MG_TRYB(ExpectOp(")"));
    return Make(K::kParams, pos, std::move(params));
  }

  int32_t ParseSet() {
    const uint64_t pos = Cur().pos;
    Next();
    int32_t target = ParseAssignTarget(true, false, {}, true);
    MG_TRY(target);
    if (IsOp("=")) {
      Next();
      int32_t v = ParseTuple(false, true, {}, false);
      MG_TRY(v);
      return Make(K::kSet, pos, {target, v});
    }
    int32_t f = ParseFilter(kAbsent, false);
    MG_TRY(f);
    int32_t body = ParseStatements({"endset"}, true);
    MG_TRY(body);
    return Make(K::kSetBlock, pos, {target, f, body});
  }

  int32_t ParseWith() {
    const uint64_t pos = Cur().pos;
    Next();
    std::vector<int32_t> kids;
    while (Cur().type != Tok::kBlockEnd) {
      if (!kids.empty()) MG_TRYB(ExpectOp(","));
      int32_t target = ParseAssignTarget(true, false, {}, false);
      MG_TRY(target);
      MG_TRYB(ExpectOp("="));
      int32_t v = ParseExpression(true);
      MG_TRY(v);
      int32_t pair = Make(K::kPair, At(target).pos, {target, v});
      MG_TRY(pair);
      kids.push_back(pair);
    }
    int32_t body = ParseStatements({"endwith"}, true);
    MG_TRY(body);
    kids.push_back(body);
    return Make(K::kWith, pos, std::move(kids));
  }

  bool CanAssign(int32_t n) {
    const Node& node = At(n);
    if (node.kind == K::kName || node.kind == K::kNsRef) return true;
    if (node.kind != K::kTuple) return false;
    for (int32_t k : node.kids) {
      if (!CanAssign(k)) return false;
    }
    return true;
  }

  int32_t ParseAssignTarget(bool with_tuple, bool name_only, std::string_view extra_end,
                            bool with_namespace) {
    const uint64_t pos = Cur().pos;
    int32_t target;
    if (with_namespace && IsOpTok(Look(), ".")) {
      std::string name, attr;
      MG_TRYB(ExpectName(&name));
      Next();
      MG_TRYB(ExpectName(&attr));
      target = Make(K::kNsRef, pos, {}, name);
      MG_TRY(target);
      At(target).text2 = attr;
      return target;
    }
    if (name_only) {
      std::string name;
      MG_TRYB(ExpectName(&name));
      return Make(K::kName, pos, {}, name);
    }
    target = with_tuple ? ParseTuple(true, true, extra_end, false) : ParsePrimary();
    MG_TRY(target);
    if (!CanAssign(target)) return Fail("can't assign to this target");
    return target;
  }

  // ---- expressions

  int32_t ParseExpression(bool with_condexpr) {
    return with_condexpr ? ParseCondExpr() : ParseOr();
  }

  int32_t ParseCondExpr() {
    Depth depth(this);
    MG_TRYB(depth.ok());
    const uint64_t pos = Cur().pos;
    int32_t e1 = ParseOr();
    MG_TRY(e1);
    while (IsName("if")) {
      Next();
      int32_t e2 = ParseOr();
      MG_TRY(e2);
      int32_t e3 = kAbsent;
      if (IsName("else")) {
        Next();
        e3 = ParseCondExpr();
        MG_TRY(e3);
      }
      e1 = Make(K::kCondExpr, pos, {e2, e1, e3});
      MG_TRY(e1);
    }
    return e1;
  }

  int32_t ParseOr() {
    int32_t left = ParseAnd();
    MG_TRY(left);
    while (IsName("or")) {
      Next();
      int32_t right = ParseAnd();
      MG_TRY(right);
      left = Make(K::kBinary, At(left).pos, {left, right}, "or");
      MG_TRY(left);
    }
    return left;
  }

  int32_t ParseAnd() {
    int32_t left = ParseNot();
    MG_TRY(left);
    while (IsName("and")) {
      Next();
      int32_t right = ParseNot();
      MG_TRY(right);
      left = Make(K::kBinary, At(left).pos, {left, right}, "and");
      MG_TRY(left);
    }
    return left;
  }

  int32_t ParseNot() {
    if (IsName("not")) {
      Depth depth(this);
      MG_TRYB(depth.ok());
      const uint64_t pos = Cur().pos;
      Next();
      int32_t x = ParseNot();
      MG_TRY(x);
      return Make(K::kUnary, pos, {x}, "not");
    }
    return ParseCompare();
  }

  int32_t ParseCompare() {
    int32_t e = ParseMath1();
    MG_TRY(e);
    std::vector<int32_t> kids = {e};
    while (true) {
      const uint64_t pos = Cur().pos;
      std::string op;
      if (Cur().type == Tok::kOp && (Cur().value == "==" || Cur().value == "!=" || Cur().value == "<" ||
                                     Cur().value == "<=" || Cur().value == ">" || Cur().value == ">=")) {
        op = Cur().value;
        Next();
      } else if (IsName("in")) {
        op = "in";
        Next();
      } else if (IsName("not") && IsNameTok(Look(), "in")) {
        op = "notin";
        Next();
        Next();
      } else {
        break;
      }
      int32_t x = ParseMath1();
      MG_TRY(x);
      int32_t operand = Make(K::kOperand, pos, {x}, op);
      MG_TRY(operand);
      kids.push_back(operand);
    }
    if (kids.size() == 1) return e;
    return Make(K::kCompare, At(e).pos, std::move(kids));
  }

  int32_t ParseMath1() {
    int32_t left = ParseConcat();
    MG_TRY(left);
    while (IsOp("+") || IsOp("-")) {
      const std::string op = Cur().value;
      Next();
      int32_t right = ParseConcat();
      MG_TRY(right);
      left = Make(K::kBinary, At(left).pos, {left, right}, op);
      MG_TRY(left);
    }
    return left;
  }

  int32_t ParseConcat() {
    int32_t first = ParseMath2();
    MG_TRY(first);
    std::vector<int32_t> args = {first};
    while (IsOp("~")) {
      Next();
      int32_t x = ParseMath2();
      MG_TRY(x);
      args.push_back(x);
    }
    if (args.size() == 1) return first;
    return Make(K::kConcat, At(first).pos, std::move(args));
  }

  int32_t ParseMath2() {
    int32_t left = ParsePow();
    MG_TRY(left);
    while (IsOp("*") || IsOp("/") || IsOp("//") || IsOp("%")) {
      const std::string op = Cur().value;
      Next();
      int32_t right = ParsePow();
      MG_TRY(right);
      left = Make(K::kBinary, At(left).pos, {left, right}, op);
      MG_TRY(left);
    }
    return left;
  }

  int32_t ParsePow() {
    int32_t left = ParseUnary(true);
    MG_TRY(left);
    while (IsOp("**")) {
      Next();
      int32_t right = ParseUnary(true);
      MG_TRY(right);
      left = Make(K::kBinary, At(left).pos, {left, right}, "**");
      MG_TRY(left);
    }
    return left;
  }

  int32_t ParseUnary(bool with_filter) {
    int32_t node;
    if (IsOp("-") || IsOp("+")) {
      Depth depth(this);
      MG_TRYB(depth.ok());
      const uint64_t pos = Cur().pos;
      const std::string op = Cur().value;
      Next();
      int32_t x = ParseUnary(false);
      MG_TRY(x);
      node = Make(K::kUnary, pos, {x}, op);
    } else {
      node = ParsePrimary();
    }
    MG_TRY(node);
    node = ParsePostfix(node);
    MG_TRY(node);
    if (with_filter) node = ParseFilterExpr(node);
    return node;
  }

  int32_t ParsePrimary() {
    const Token& tok = Cur();
    const uint64_t pos = tok.pos;
    if (tok.type == Tok::kName) {
      int32_t n;
      if (tok.value == "true" || tok.value == "false" || tok.value == "True" || tok.value == "False") {
        n = Make(K::kConst, pos);
        MG_TRY(n);
        At(n).ck = CK::kBool;
        At(n).int_value = (tok.value == "true" || tok.value == "True") ? 1 : 0;
      } else if (tok.value == "none" || tok.value == "None") {
        n = Make(K::kConst, pos);
        MG_TRY(n);
        At(n).ck = CK::kNone;
      } else {
        n = Make(K::kName, pos, {}, tok.value);
        MG_TRY(n);
      }
      Next();
      return n;
    }
    if (tok.type == Tok::kString) {  // adjacent literals are one string
      std::string value;
      bool opaque = false;
      while (Cur().type == Tok::kString) {
        value += Cur().value;
        opaque = opaque || Cur().opaque;
        Next();
      }
      int32_t n = Make(K::kConst, pos);
      MG_TRY(n);
      At(n).ck = CK::kStr;
      At(n).text = std::move(value);
      At(n).opaque = opaque;
      return n;
    }
    if (tok.type == Tok::kInteger || tok.type == Tok::kFloat) {
      const bool is_int = tok.type == Tok::kInteger, ok = tok.int_ok;
      const uint64_t v = tok.int_value;
      Next();
      int32_t n = Make(K::kConst, pos);
      MG_TRY(n);
      At(n).ck = is_int ? CK::kInt : CK::kFloat;
      At(n).int_ok = is_int && ok;
      At(n).int_value = v;
      return n;
    }
    if (IsOp("(")) {
      Next();
      int32_t t = ParseTuple(false, true, {}, true);
      MG_TRY(t);
      MG_TRYB(ExpectOp(")"));
      return t;
    }
    if (IsOp("[")) {
      Next();
      std::vector<int32_t> items;
      while (!IsOp("]")) {
        if (!items.empty()) MG_TRYB(ExpectOp(","));
        if (IsOp("]")) break;
        int32_t e = ParseExpression(true);
        MG_TRY(e);
        items.push_back(e);
      }
      MG_TRYB(ExpectOp("]"));
      return Make(K::kList, pos, std::move(items));
    }
    if (IsOp("{")) {
      Next();
      std::vector<int32_t> items;
      while (!IsOp("}")) {
        if (!items.empty()) MG_TRYB(ExpectOp(","));
        if (IsOp("}")) break;
        int32_t k = ParseExpression(true);
        MG_TRY(k);
        MG_TRYB(ExpectOp(":"));
        int32_t v = ParseExpression(true);
        MG_TRY(v);
        int32_t pair = Make(K::kPair, At(k).pos, {k, v});
        MG_TRY(pair);
        items.push_back(pair);
      }
      MG_TRYB(ExpectOp("}"));
      return Make(K::kDict, pos, std::move(items));
    }
    return Fail("unexpected " + Describe(tok));
  }

  bool IsTupleEnd(std::string_view extra_end) const {
    if (Cur().type == Tok::kVarEnd || Cur().type == Tok::kBlockEnd || IsOp(")")) return true;
    return !extra_end.empty() && IsName(extra_end);
  }

  int32_t ParseTuple(bool simplified, bool with_condexpr, std::string_view extra_end,
                     bool explicit_parentheses) {
    const uint64_t pos = Cur().pos;
    std::vector<int32_t> args;
    bool is_tuple = false;
    while (true) {
      if (!args.empty()) MG_TRYB(ExpectOp(","));
      if (IsTupleEnd(extra_end)) break;
      int32_t e = simplified ? ParsePrimary() : ParseExpression(with_condexpr);
      MG_TRY(e);
      args.push_back(e);
      if (IsOp(",")) {
        is_tuple = true;
      } else {
        break;
      }
    }
    if (!is_tuple) {
      if (!args.empty()) return args[0];
      if (!explicit_parentheses) return Fail("Expected an expression, got " + Describe(Cur()));
    }
    return Make(K::kTuple, pos, std::move(args));
  }

  int32_t ParsePostfix(int32_t node) {
    while (true) {
      if (IsOp(".") || IsOp("[")) {
        node = ParseSubscript(node);
      } else if (IsOp("(")) {
        node = ParseCall(node);
      } else {
        break;
      }
      MG_TRY(node);
    }
    return node;
  }

  int32_t ParseFilterExpr(int32_t node) {
    while (true) {
      if (IsOp("|")) {
        node = ParseFilter(node, false);
      } else if (IsName("is")) {
        node = ParseTest(node);
      } else if (IsOp("(")) {
        node = ParseCall(node);
      } else {
        break;
      }
      MG_TRY(node);
    }
    return node;
  }

  int32_t ParseSubscript(int32_t node) {
    const uint64_t pos = Cur().pos;
    if (IsOp(".")) {
      Next();
      const Token& attr = Cur();
      if (attr.type == Tok::kName) {
        const uint64_t apos = attr.pos;
        std::string name = attr.value;
        Next();
        return Make(K::kGetattr, apos, {node}, std::move(name));
      }
      if (attr.type != Tok::kInteger) return Fail("expected name or number");
      const bool ok = attr.int_ok;
      const uint64_t v = attr.int_value, apos = attr.pos;
      Next();
      int32_t key = Make(K::kConst, apos);
      MG_TRY(key);
      At(key).ck = CK::kInt;
      At(key).int_ok = ok;
      At(key).int_value = v;
      return Make(K::kGetitem, pos, {node, key});
    }
    Next();  // [
    std::vector<int32_t> args;
    while (!IsOp("]")) {
      if (!args.empty()) MG_TRYB(ExpectOp(","));
      int32_t a = ParseSubscribed();
      MG_TRY(a);
      args.push_back(a);
    }
    MG_TRYB(ExpectOp("]"));
    int32_t key = args.size() == 1 ? args[0] : Make(K::kTuple, pos, std::move(args));
    MG_TRY(key);
    return Make(K::kGetitem, pos, {node, key});
  }

  int32_t ParseSubscribed() {
    const uint64_t pos = Cur().pos;
    std::vector<int32_t> parts;
    if (IsOp(":")) {
      Next();
      parts.push_back(kAbsent);
    } else {
      int32_t e = ParseExpression(true);
      MG_TRY(e);
      if (!IsOp(":")) return e;
      Next();
      parts.push_back(e);
    }
    if (IsOp(":")) {
      parts.push_back(kAbsent);
    } else if (!IsOp("]") && !IsOp(",")) {
      int32_t e = ParseExpression(true);
      MG_TRY(e);
      parts.push_back(e);
    } else {
      parts.push_back(kAbsent);
    }
    if (IsOp(":")) {
      Next();
      if (!IsOp("]") && !IsOp(",")) {
        int32_t e = ParseExpression(true);
        MG_TRY(e);
        parts.push_back(e);
      } else {
        parts.push_back(kAbsent);
      }
    } else {
      parts.push_back(kAbsent);
    }
    return Make(K::kSlice, pos, std::move(parts));
  }

  // ParseCallArgs appends positional, keyword (kKeyword), *args and
  // **kwargs arguments in jinja2's order rules.
  bool ParseCallArgs(std::vector<int32_t>* out) {
    if (!ExpectOp("(")) return false;
    bool dyn_args = false, dyn_kwargs = false, kwargs = false, require_comma = false;
    auto ensure = [&](bool ok) {
      if (!ok) Fail("invalid syntax for function call expression");
      return ok;
    };
    while (!IsOp(")")) {
      if (require_comma) {
        if (!ExpectOp(",")) return false;
        if (IsOp(")")) break;
      }
      const uint64_t pos = Cur().pos;
      int32_t arg;
      if (IsOp("*")) {
        if (!ensure(!dyn_args && !dyn_kwargs)) return false;
        Next();
        int32_t e = ParseExpression(true);
        if (e == kErr) return false;
        arg = Make(K::kStarArgs, pos, {e});
        dyn_args = true;
      } else if (IsOp("**")) {
        if (!ensure(!dyn_kwargs)) return false;
        Next();
        int32_t e = ParseExpression(true);
        if (e == kErr) return false;
        arg = Make(K::kStarKwargs, pos, {e});
        dyn_kwargs = true;
      } else if (Cur().type == Tok::kName && IsOpTok(Look(), "=")) {
        if (!ensure(!dyn_kwargs)) return false;
        std::string key = Cur().value;
        Next();
        Next();
        int32_t e = ParseExpression(true);
        if (e == kErr) return false;
        arg = Make(K::kKeyword, pos, {e}, std::move(key));
        kwargs = true;
      } else {
        if (!ensure(!dyn_args && !dyn_kwargs && !kwargs)) return false;
        arg = ParseExpression(true);
      }
      if (arg == kErr) return false;
      out->push_back(arg);
      require_comma = true;
    }
    return ExpectOp(")");
  }

  int32_t ParseCall(int32_t node) {
    std::vector<int32_t> kids = {node};
    MG_TRYB(ParseCallArgs(&kids));
    return Make(K::kCall, At(node).pos, std::move(kids));
  }

  int32_t ParseFilter(int32_t node, bool start_inline) {
    while (IsOp("|") || start_inline) {
      if (!start_inline) Next();
      const uint64_t pos = Cur().pos;
      std::string name;
      MG_TRYB(ExpectName(&name));
      while (IsOp(".")) {
        Next();
        std::string part;
        MG_TRYB(ExpectName(&part));
        name += "." + part;
      }
      std::vector<int32_t> kids = {node};
      if (IsOp("(")) MG_TRYB(ParseCallArgs(&kids));
      node = Make(K::kFilter, pos, std::move(kids), std::move(name));
      MG_TRY(node);
      start_inline = false;
    }
    return node;
  }

  int32_t ParseTest(int32_t node) {
    const uint64_t pos = Cur().pos;
    Next();  // is
    bool negated = false;
    if (IsName("not")) {
      Next();
      negated = true;
    }
    std::string name;
    MG_TRYB(ExpectName(&name));
    while (IsOp(".")) {
      Next();
      std::string part;
      MG_TRYB(ExpectName(&part));
      name += "." + part;
    }
    std::vector<int32_t> kids = {node};
    const Token& c = Cur();
    if (IsOp("(")) {
      MG_TRYB(ParseCallArgs(&kids));
    } else if ((c.type == Tok::kName || c.type == Tok::kString || c.type == Tok::kInteger ||
                c.type == Tok::kFloat || IsOp("[") || IsOp("{")) &&
               !IsName("else") && !IsName("or") && !IsName("and")) {
      if (IsName("is")) return Fail("You cannot chain multiple tests with is");
      int32_t arg = ParsePrimary();
      MG_TRY(arg);
      arg = ParsePostfix(arg);
      MG_TRY(arg);
      kids.push_back(arg);
    }
    node = Make(K::kTest, pos, std::move(kids), std::move(name));
    MG_TRY(node);
    if (negated) node = Make(K::kUnary, pos, {node}, "not");
    return node;
  }

#undef MG_TRY
#undef MG_TRYB

  const std::vector<Token>& t_;
  const TemplateLimits& limits_;
  std::vector<Node>& nodes_;
  Failure* fail_ = nullptr;
  size_t i_ = 0;
  uint32_t depth_ = 0;
  bool failed_ = false;
};

// ---------------------------------------------------------------- judge

bool InList(std::string_view s, std::initializer_list<std::string_view> list) {
  return std::find(list.begin(), list.end(), s) != list.end();
}

// jinja2 3.1 filters.FILTERS, with transformers' own tojson.
bool IsKnownFilter(std::string_view f) {
  return InList(f, {"abs", "attr", "batch", "capitalize", "center", "count", "d", "default",
                    "dictsort", "e", "escape", "filesizeformat", "first", "float", "forceescape",
                    "format", "groupby", "indent", "int", "join", "last", "length", "list",
                    "lower", "items", "map", "min", "max", "pprint", "random", "reject",
                    "rejectattr", "replace", "reverse", "round", "safe", "select", "selectattr",
                    "slice", "sort", "string", "striptags", "sum", "title", "trim", "truncate",
                    "unique", "upper", "urlencode", "urlize", "wordcount", "wordwrap", "xmlattr",
                    "tojson"});
}

// jinja2 3.1 tests.TESTS.
bool IsKnownTest(std::string_view t) {
  return InList(t, {"odd", "even", "divisibleby", "defined", "undefined", "filter", "test", "none",
                    "boolean", "false", "true", "integer", "float", "lower", "upper", "string",
                    "mapping", "number", "sequence", "iterable", "callable", "sameas", "escaped",
                    "in", "==", "eq", "equalto", "!=", "ne", ">", "gt", "greaterthan", "ge", ">=",
                    "<", "lt", "lessthan", "<=", "le"});
}

// Callables a chat template may name: jinja2's DEFAULT_NAMESPACE, the
// transformers globals, and names jinja2 itself binds (caller in a macro
// called by {% call %}, super() in a block, loop() in a recursive for).
bool IsKnownGlobalCallable(std::string_view n) {
  return InList(n, {"range", "dict", "lipsum", "cycler", "joiner", "namespace", "raise_exception",
                    "strftime_now", "caller", "super", "loop"});
}

// Methods of str, list and dict (and loop/cycler helpers) that templates
// call. Mutating ones are here too: ImmutableSandboxedEnvironment refuses
// them at render time, but they reach no code.
bool IsKnownMethod(std::string_view m) {
  return InList(m, {"capitalize", "casefold", "center", "count", "encode", "endswith",
                    "expandtabs", "find", "index", "isalnum", "isalpha", "isascii", "isdecimal",
                    "isdigit", "isidentifier", "islower", "isnumeric", "isprintable", "isspace",
                    "istitle", "isupper", "join", "ljust", "lower", "lstrip", "partition",
                    "removeprefix", "removesuffix", "replace", "rfind", "rindex", "rjust",
                    "rpartition", "rsplit", "rstrip", "split", "splitlines", "startswith", "strip",
                    "swapcase", "title", "upper", "zfill", "get", "items", "keys", "values", "copy",
                    "append", "extend", "insert", "pop", "remove", "update", "clear", "setdefault",
                    "popitem", "sort", "reverse", "add", "discard", "cycle", "changed", "next",
                    "reset"});
}

// Python internals reachable without a leading underscore: frame, code and
// generator attributes (jinja2.sandbox's UNSAFE_* sets and
// is_internal_attribute) and Python 2's function attributes.
bool IsInternalAttr(std::string_view a) {
  return InList(a, {"gi_frame", "gi_code", "gi_yieldfrom", "cr_frame", "cr_code", "cr_await",
                    "ag_code", "ag_frame", "ag_await", "f_globals", "f_builtins", "f_locals",
                    "f_back", "f_code", "tb_frame", "tb_next", "co_code", "func_globals",
                    "func_code", "func_closure", "func_defaults", "func_dict", "im_func", "im_self",
                    "im_class", "mro"});
}

bool IsDunder(std::string_view a) {
  return a.size() > 4 && a.substr(0, 2) == "__" && a.substr(a.size() - 2) == "__";
}

bool IsIdentifierShaped(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (!(IsAsciiAlpha(c) || IsAsciiDigit(c) || c == '_')) return false;
  }
  return true;
}

// A string that names (or starts) a dunder, a name-mangled private
// attribute or a Python internal: no chat template needs one as text.
bool IsSuspiciousString(std::string_view s) {
  if (!IsIdentifierShaped(s)) return false;
  if (s.substr(0, 2) == "__" && s.size() > 2) return true;
  if (IsInternalAttr(s) && s != "mro") return true;
  // _TemplateReference__context: Python's mangled form of a private name.
  return s.size() > 3 && s[0] == '_' && IsAsciiAlpha(s[1]) && s.find("__", 1) != std::string_view::npos;
}

// Folded: the constant value of an expression, where the analyzer can
// compute it as jinja2 would.
struct Folded {
  enum Kind : uint8_t { kNo, kStr, kInt, kOther, kOpaque } kind = kNo;
  std::string s;   // kStr; kOther: str() of the value, for ~
  int64_t i = 0;   // kInt
};

// Folding stops past this many bytes: no attribute name is that long, and a
// longer string is judged as computed.
constexpr size_t kMaxFoldedBytes = 4096;
// Constant values remembered for one variable before it counts as computed.
constexpr size_t kMaxBoundValues = 32;

struct Binding {
  bool computed = false;         // holds a string the template built
  std::set<std::string> values;  // constant strings it may hold
};

class Judge {
 public:
  Judge(const std::vector<Node>& nodes, std::string_view where, uint64_t base,
        std::vector<Finding>* out)
      : n_(nodes), where_(where), base_(base), out_(out), fold_(nodes.size()), folded_(nodes.size()),
        used_(nodes.size()) {}

  void Run(int32_t root) {
    Declarations(root);
    Bindings(root);
    Propagate();
    Visit(root);
    UnsafeStrings(root);
    for (const auto& [id, count] : suppressed_) {
      for (auto it = out_->rbegin(); it != out_->rend(); ++it) {
        if (it->id == id) {
          it->message += " (" + std::to_string(count) + " more like it not listed)";
          break;
        }
      }
    }
  }

 private:
  const Node& N(int32_t i) const { return n_[static_cast<size_t>(i)]; }

  void Emit(std::string_view id, Severity sev, uint64_t pos, std::string message) {
    if (!emitted_.insert({std::string(id), pos}).second) return;
    if (++per_id_[std::string(id)] > kMaxTemplateFindingsPerId) {
      ++suppressed_[std::string(id)];
      return;
    }
    uint64_t offset = core::kNoOffset;
    if (base_ != core::kNoOffset && __builtin_add_overflow(base_, pos, &offset)) offset = core::kNoOffset;
    out_->push_back(MakeFinding(std::string(id), sev, std::string(where_) + ": " + std::move(message),
                                offset));
  }

  // ---- rendering for messages

  static void Escaped(std::string_view s, std::string* out) {
    for (char c : s) {
      const auto u = static_cast<uint8_t>(c);
      if (u >= 0x20 && u < 0x7f && c != '\\') {
        out->push_back(c);
      } else {
        char buf[8];
        snprintf(buf, sizeof buf, "\\x%02x", u);
        *out += buf;
      }
    }
  }
  std::string Quote(std::string_view s) const {
    std::string out = "\"";
    Escaped(s.substr(0, 80), &out);
    if (s.size() > 80) out += "...";
    return out + "\"";
  }
  void Render(int32_t i, std::string* out) const {
    if (out->size() > 120) return;
    if (i < 0) return;
    const Node& n = N(i);
    switch (n.kind) {
      case K::kName: Escaped(n.text, out); return;
      case K::kConst:
        if (n.ck == CK::kStr) {
          *out += "'";
          Escaped(n.text.substr(0, 40), out);
          *out += n.text.size() > 40 ? "...'" : "'";
        } else if (n.ck == CK::kInt && n.int_ok) {
          *out += std::to_string(n.int_value);
        } else if (n.ck == CK::kBool) {
          *out += n.int_value ? "true" : "false";
        } else if (n.ck == CK::kNone) {
          *out += "none";
        } else {
          *out += "<number>";
        }
        return;
      case K::kGetattr:
        Render(n.kids[0], out);
        *out += ".";
        Escaped(n.text, out);
        return;
      case K::kGetitem:
        Render(n.kids[0], out);
        *out += "[";
        Render(n.kids[1], out);
        *out += "]";
        return;
      case K::kCall:
        Render(n.kids[0], out);
        *out += n.kids.size() > 1 ? "(...)" : "()";
        return;
      case K::kFilter:
        if (n.kids[0] >= 0) Render(n.kids[0], out);
        *out += "|";
        Escaped(n.text, out);
        if (n.kids.size() > 1) {
          *out += "(";
          if (N(n.kids[1]).kind == K::kConst) Render(n.kids[1], out);
          *out += n.kids.size() > 2 || N(n.kids[1]).kind != K::kConst ? "...)" : ")";
        }
        return;
      default: *out += "(...)"; return;
    }
  }
  std::string R(int32_t i) const {
    std::string s;
    Render(i, &s);
    if (s.size() > 120) s = s.substr(0, 117) + "...";
    return s;
  }

  // ---- constant folding

  const Folded& Fold(int32_t i) {
    const auto k = static_cast<size_t>(i);
    if (!folded_[k]) {
      fold_[k] = ComputeFold(i);
      folded_[k] = true;
    }
    return fold_[k];
  }
  static bool HasNonAscii(std::string_view s) {
    return std::any_of(s.begin(), s.end(), [](char c) { return static_cast<uint8_t>(c) >= 0x80; });
  }
  // Positional argument `index` of a call/filter node (kids from 1), or -1.
  int32_t Positional(const Node& n, size_t index) const {
    size_t seen = 0;
    for (size_t k = 1; k < n.kids.size(); ++k) {
      const Node& a = N(n.kids[k]);
      if (a.kind == K::kKeyword || a.kind == K::kStarArgs || a.kind == K::kStarKwargs) continue;
      if (seen++ == index) return n.kids[k];
    }
    return -1;
  }
  int32_t KeywordArg(const Node& n, std::string_view key) const {
    for (size_t k = 1; k < n.kids.size(); ++k) {
      const Node& a = N(n.kids[k]);
      if (a.kind == K::kKeyword && a.text == key) return a.kids[0];
    }
    return -1;
  }
  bool HasStarArgs(const Node& n) const {
    for (size_t k = 1; k < n.kids.size(); ++k) {
      const K kind = N(n.kids[k]).kind;
      if (kind == K::kStarArgs || kind == K::kStarKwargs) return true;
    }
    return false;
  }
  Folded ComputeFold(int32_t i) {
    const Node& n = N(i);
    Folded f;
    switch (n.kind) {
      case K::kConst:
        if (n.ck == CK::kStr) {
          f.kind = n.opaque ? Folded::kOpaque : Folded::kStr;
          f.s = n.text;
        } else if (n.ck == CK::kInt && n.int_ok && n.int_value <= static_cast<uint64_t>(INT64_MAX)) {
          f.kind = Folded::kInt;
          f.i = static_cast<int64_t>(n.int_value);
          f.s = std::to_string(f.i);
        } else if (n.ck == CK::kBool) {
          f.kind = Folded::kOther;
          f.s = n.int_value ? "True" : "False";
        } else if (n.ck == CK::kNone) {
          f.kind = Folded::kOther;
          f.s = "None";
        }
        return f;
      case K::kConcat: {  // str() of each part, joined
        bool opaque = false;
        std::string s;
        for (int32_t k : n.kids) {
          const Folded& p = Fold(k);
          if (p.kind == Folded::kNo) return f;
          opaque = opaque || p.kind == Folded::kOpaque;
          s += p.s;
          if (s.size() > kMaxFoldedBytes) return f;
        }
        f.kind = opaque ? Folded::kOpaque : Folded::kStr;
        f.s = std::move(s);
        return f;
      }
      case K::kBinary: {
        const Folded& l = Fold(n.kids[0]);
        const Folded& r = Fold(n.kids[1]);
        const bool ls = l.kind == Folded::kStr || l.kind == Folded::kOpaque;
        const bool rs = r.kind == Folded::kStr || r.kind == Folded::kOpaque;
        const bool opaque = l.kind == Folded::kOpaque || r.kind == Folded::kOpaque;
        if (n.text == "+" && ls && rs) {
          if (l.s.size() + r.s.size() > kMaxFoldedBytes) return f;
          f.kind = opaque ? Folded::kOpaque : Folded::kStr;
          f.s = l.s + r.s;
        } else if (n.text == "*" && ((ls && r.kind == Folded::kInt) || (rs && l.kind == Folded::kInt))) {
          const std::string& s = ls ? l.s : r.s;
          const int64_t times = ls ? r.i : l.i;
          if (times > 0 && !s.empty() && static_cast<uint64_t>(times) > kMaxFoldedBytes / s.size()) return f;
          f.kind = opaque ? Folded::kOpaque : Folded::kStr;
          for (int64_t t = 0; t < times; ++t) f.s += s;
        } else if (l.kind == Folded::kInt && r.kind == Folded::kInt &&
                   (n.text == "+" || n.text == "-" || n.text == "*")) {
          int64_t v = 0;
          const bool overflow = n.text == "+"   ? __builtin_add_overflow(l.i, r.i, &v)
                                : n.text == "-" ? __builtin_sub_overflow(l.i, r.i, &v)
                                                : __builtin_mul_overflow(l.i, r.i, &v);
          if (overflow) return f;
          f.kind = Folded::kInt;
          f.i = v;
          f.s = std::to_string(v);
        }
        return f;
      }
      case K::kFilter: {
        if (n.kids[0] < 0 || HasStarArgs(n)) return f;
        const Node& obj = N(n.kids[0]);
        if (n.text == "join" && (obj.kind == K::kList || obj.kind == K::kTuple)) {
          std::string sep;
          bool opaque = false;
          if (int32_t d = Positional(n, 0); d >= 0 || (d = KeywordArg(n, "d")) >= 0) {
            const Folded& fd = Fold(d);
            if (fd.kind != Folded::kStr && fd.kind != Folded::kOpaque) return f;
            opaque = fd.kind == Folded::kOpaque;
            sep = fd.s;
          }
          if (KeywordArg(n, "attribute") >= 0) return f;
          std::string s;
          for (size_t k = 0; k < obj.kids.size(); ++k) {
            const Folded& p = Fold(obj.kids[k]);
            if (p.kind == Folded::kNo) return f;
            opaque = opaque || p.kind == Folded::kOpaque;
            if (k) s += sep;
            s += p.s;
            if (s.size() > kMaxFoldedBytes) return f;
          }
          f.kind = opaque ? Folded::kOpaque : Folded::kStr;
          f.s = std::move(s);
          return f;
        }
        const Folded& v = Fold(n.kids[0]);
        if (v.kind == Folded::kNo) return f;
        if (n.text == "string") {
          f = v;
          if (f.kind != Folded::kOpaque) f.kind = Folded::kStr;
          return f;
        }
        if (v.kind != Folded::kStr && v.kind != Folded::kOpaque) return f;
        // Python's str methods are Unicode-aware; fold ASCII only.
        if (HasNonAscii(v.s)) return f;
        f.kind = v.kind;
        f.s = v.s;
        if (n.text == "lower" || n.text == "upper") {
          if (n.kids.size() > 1) return Folded{};
          for (char& c : f.s) {
            if (n.text == "lower" && c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
            if (n.text == "upper" && c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
          }
        } else if (n.text == "trim") {
          if (n.kids.size() > 1) return Folded{};
          const size_t b = f.s.find_first_not_of(" \t\n\r\f\v\x1c\x1d\x1e\x1f");
          const size_t e = f.s.find_last_not_of(" \t\n\r\f\v\x1c\x1d\x1e\x1f");
          f.s = b == std::string::npos ? std::string() : f.s.substr(b, e - b + 1);
        } else if (n.text == "reverse") {
          if (n.kids.size() > 1) return Folded{};
          std::reverse(f.s.begin(), f.s.end());
        } else if (n.text == "replace") {
          const int32_t a = Positional(n, 0), b = Positional(n, 1);
          if (a < 0 || b < 0 || Positional(n, 2) >= 0 || n.kids.size() != 3) return Folded{};
          const Folded fa = Fold(a), fb = Fold(b);
          if (fa.kind != Folded::kStr || (fb.kind != Folded::kStr && fb.kind != Folded::kOpaque) ||
              HasNonAscii(fa.s) || fa.s.empty()) {
            return Folded{};
          }
          if (fb.kind == Folded::kOpaque) f.kind = Folded::kOpaque;
          std::string r;
          for (size_t p = 0; p < f.s.size();) {
            if (f.s.compare(p, fa.s.size(), fa.s) == 0) {
              r += fb.s;
              p += fa.s.size();
            } else {
              r += f.s[p++];
            }
            if (r.size() > kMaxFoldedBytes) return Folded{};
          }
          f.s = std::move(r);
        } else {
          return Folded{};
        }
        return f;
      }
      default:
        return f;
    }
  }
  bool IsStr(const Folded& f) const { return f.kind == Folded::kStr; }

  // ---- declarations and bindings

  void Walk(int32_t i, const std::function<void(int32_t)>& fn) {
    if (i < 0) return;
    fn(i);
    for (int32_t k : N(i).kids) Walk(k, fn);
  }

  void Declarations(int32_t root) {
    Walk(root, [&](int32_t i) {
      const Node& n = N(i);
      if (n.kind == K::kMacro) {
        std::vector<std::string>& params = macros_[n.text];
        for (int32_t p : N(n.kids[0]).kids) params.push_back(N(p).text);
      } else if (n.kind == K::kCallBlock) {
        std::vector<std::string>& params = macros_["caller"];
        for (int32_t p : N(n.kids[0]).kids) params.push_back(N(p).text);
      } else if (n.kind == K::kBlock) {
        blocks_.insert(n.text);
      } else if (n.kind == K::kLoad) {
        for (size_t k = 1; k < n.kids.size(); ++k) imported_.insert(N(n.kids[k]).text);
      } else if (n.kind == K::kSet && N(n.kids[0]).kind == K::kName) {
        const Node& v = N(n.kids[1]);
        if (v.kind == K::kCall && N(v.kids[0]).kind == K::kName && N(v.kids[0]).text == "joiner") {
          callable_locals_.insert(N(n.kids[0]).text);
        }
      }
    });
  }

  // Sources: whether an expression makes string content of its own
  // (literals, ~, %, stringifying or joining filters, dict()/namespace()
  // keyword names); names count through the alias/taint edges instead.
  bool MakesString(int32_t i) const {
    if (i < 0) return false;
    const Node& n = N(i);
    switch (n.kind) {
      case K::kConst:
        if (n.ck == CK::kStr) return true;
        break;
      case K::kConcat: return true;
      case K::kBinary:
        if (n.text == "%") return true;
        break;
      case K::kFilter:
        if (InList(n.text, {"string", "format", "join", "replace", "pprint", "tojson", "xmlattr",
                            "urlencode", "filesizeformat", "center", "indent", "wordwrap",
                            "truncate"})) {
          return true;
        }
        break;
      case K::kCall: {
        const Node& c = N(n.kids[0]);
        if (c.kind == K::kName && (c.text == "dict" || c.text == "namespace") && n.kids.size() > 1) {
          return true;
        }
        break;
      }
      default: break;
    }
    for (int32_t k : n.kids) {
      if (MakesString(k)) return true;
    }
    return false;
  }
  void NamesIn(int32_t i, std::vector<std::string>* out) const {
    if (i < 0) return;
    const Node& n = N(i);
    if (n.kind == K::kName) out->push_back(n.text);
    if (n.kind == K::kGetattr) out->push_back("." + n.text);
    for (int32_t k : n.kids) NamesIn(k, out);
  }
  Binding& B(const std::string& name) { return bindings_[name]; }
  void AddValue(const std::string& name, const std::string& v) {
    Binding& b = B(name);
    if (b.values.size() >= kMaxBoundValues) {
      b.computed = true;
    } else {
      b.values.insert(v);
    }
  }
  // Bind records that `name` may hold the value of `expr`.
  void Bind(const std::string& name, int32_t expr) {
    if (expr < 0) return;
    B(name);
    const Node& e = N(expr);
    const Folded& f = Fold(expr);
    if (f.kind == Folded::kStr) {
      AddValue(name, f.s);
      return;
    }
    if (f.kind == Folded::kOpaque) {
      B(name).computed = true;
      return;
    }
    if (f.kind != Folded::kNo) return;
    if (e.kind == K::kName) {
      alias_[e.text].push_back(name);
      return;
    }
    if (e.kind == K::kGetattr && bindings_.count("." + e.text)) {
      alias_["." + e.text].push_back(name);
    }
    if (e.kind == K::kCondExpr) {
      Bind(name, e.kids[1]);
      Bind(name, e.kids[2]);
      return;
    }
    if (MakesString(expr)) {
      B(name).computed = true;
      return;
    }
    std::vector<std::string> refs;
    NamesIn(expr, &refs);
    for (const std::string& r : refs) taint_[r].push_back(name);
  }
  void TargetNames(int32_t t, std::vector<std::string>* out) const {
    const Node& n = N(t);
    if (n.kind == K::kName) out->push_back(n.text);
    if (n.kind == K::kNsRef) out->push_back("." + n.text2);
    if (n.kind == K::kTuple) {
      for (int32_t k : n.kids) TargetNames(k, out);
    }
  }
  void BindTarget(int32_t target, int32_t value) {
    std::vector<std::string> names;
    TargetNames(target, &names);
    const bool single = N(target).kind != K::kTuple;
    for (const std::string& name : names) {
      if (single) {
        Bind(name, value);
      } else if (MakesString(value)) {  // unpacking: judge the whole value
        B(name).computed = true;
      } else {
        Bind(name, value);
      }
    }
  }
  void BindCallArgs(const std::vector<std::string>& params, const Node& call) {
    size_t index = 0;
    for (size_t k = 1; k < call.kids.size(); ++k) {
      const Node& a = N(call.kids[k]);
      if (a.kind == K::kKeyword) {
        Bind(a.text, a.kids[0]);
      } else if (a.kind == K::kStarArgs || a.kind == K::kStarKwargs) {
        for (const std::string& p : params) Bind(p, a.kids[0]);
      } else if (index < params.size()) {
        Bind(params[index++], call.kids[k]);
      }
    }
  }
  void Bindings(int32_t root) {
    Walk(root, [&](int32_t i) {
      const Node& n = N(i);
      switch (n.kind) {
        case K::kSet:
          BindTarget(n.kids[0], n.kids[1]);
          break;
        case K::kSetBlock: {  // a block set's value is text the template made
          std::vector<std::string> names;
          TargetNames(n.kids[0], &names);
          for (const std::string& name : names) B(name).computed = true;
          break;
        }
        case K::kWith:
          for (size_t k = 0; k + 1 < n.kids.size(); ++k) {
            BindTarget(N(n.kids[k]).kids[0], N(n.kids[k]).kids[1]);
          }
          break;
        case K::kFor: {
          const Node& it = N(n.kids[1]);
          if (it.kind == K::kList || it.kind == K::kTuple) {
            for (int32_t item : it.kids) BindTarget(n.kids[0], item);
          } else {
            std::vector<std::string> names;
            TargetNames(n.kids[0], &names);
            for (const std::string& name : names) {
              // Elements of a constant string are single characters; of
              // anything else the template made, unknown.
              if (MakesString(n.kids[1])) {
                B(name).computed = true;
              } else {
                B(name);
                std::vector<std::string> refs;
                NamesIn(n.kids[1], &refs);
                for (const std::string& r : refs) taint_[r].push_back(name);
              }
            }
          }
          break;
        }
        case K::kMacro:
        case K::kCallBlock:
          for (int32_t p : N(n.kids[0]).kids) {
            if (N(p).kind == K::kKeyword) Bind(N(p).text, N(p).kids[0]);
          }
          break;
        case K::kCall: {
          const Node& c = N(n.kids[0]);
          if (c.kind == K::kName) {
            if (auto it = macros_.find(c.text); it != macros_.end()) BindCallArgs(it->second, n);
            if (c.text == "namespace") {
              for (size_t k = 1; k < n.kids.size(); ++k) {
                const Node& a = N(n.kids[k]);
                if (a.kind == K::kKeyword) Bind("." + a.text, a.kids[0]);
              }
            }
          }
          break;
        }
        default: break;
      }
    });
  }
  // Propagate: copy values along aliases and computed-ness along aliases and
  // taint edges until nothing changes. Each binding changes at most
  // kMaxBoundValues + 1 times, so this ends.
  void Propagate() {
    std::vector<std::string> work;
    for (const auto& [name, b] : bindings_) work.push_back(name);
    while (!work.empty()) {
      const std::string src = work.back();
      work.pop_back();
      const Binding s = B(src);
      if (auto it = alias_.find(src); it != alias_.end()) {
        for (const std::string& dst : it->second) {
          Binding& d = B(dst);
          const size_t before = d.values.size();
          const bool was = d.computed;
          for (const std::string& v : s.values) AddValue(dst, v);
          d.computed = d.computed || s.computed;
          if (d.values.size() != before || d.computed != was) work.push_back(dst);
        }
      }
      if (auto it = taint_.find(src); it != taint_.end()) {
        for (const std::string& dst : it->second) {
          Binding& d = B(dst);
          if (!d.computed && (s.computed || !s.values.empty())) {
            d.computed = true;
            work.push_back(dst);
          }
        }
      }
    }
  }

  // ---- judging

  enum class Names : uint8_t { kPlain, kComputed };
  // NameValues collects the constant strings an attribute-name expression
  // may be; kComputed when the template builds it in a way not folded here.
  Names NameValues(int32_t i, std::vector<std::pair<std::string, int32_t>>* out) {
    if (i < 0) return Names::kPlain;
    const Node& n = N(i);
    const Folded& f = Fold(i);
    if (f.kind == Folded::kStr) {
      used_[static_cast<size_t>(i)] = true;
      out->push_back({f.s, i});
      return Names::kPlain;
    }
    if (f.kind == Folded::kOpaque) return Names::kComputed;
    if (f.kind != Folded::kNo) return Names::kPlain;
    if (n.kind == K::kCondExpr) {
      const Names a = NameValues(n.kids[1], out);
      const Names b = NameValues(n.kids[2], out);
      return (a == Names::kComputed || b == Names::kComputed) ? Names::kComputed : Names::kPlain;
    }
    std::string key;
    if (n.kind == K::kName) key = n.text;
    if (n.kind == K::kGetattr && bindings_.count("." + n.text)) key = "." + n.text;
    if (!key.empty()) {
      const Binding& b = B(key);
      for (const std::string& v : b.values) out->push_back({v, i});
      return b.computed ? Names::kComputed : Names::kPlain;
    }
    if (MakesString(i)) return Names::kComputed;
    // A filter of a variable the template built (k|lower) is built too.
    if (n.kind == K::kFilter && n.kids[0] >= 0) {
      std::vector<std::pair<std::string, int32_t>> inner;
      const Names sub = NameValues(n.kids[0], &inner);
      if (sub == Names::kComputed || !inner.empty()) return Names::kComputed;
    }
    return Names::kPlain;
  }

  std::string Root(int32_t i) const {
    while (i >= 0) {
      const Node& n = N(i);
      if (n.kind == K::kGetattr || n.kind == K::kGetitem || n.kind == K::kCall ||
          n.kind == K::kFilter) {
        i = n.kids[0];
        continue;
      }
      if (n.kind == K::kName) return n.text;
      return "";
    }
    return "";
  }

  // CheckAttr judges one attribute name read at node `at` of object `obj`;
  // true when it is critical (the rest of the chain then stays quiet).
  bool CheckAttr(std::string_view attr, int32_t at, int32_t obj, std::string_view how) {
    const uint64_t pos = N(at).pos;
    std::string chain = R(obj) + std::string(how);
    if (IsDunder(attr) || IsInternalAttr(attr)) {
      std::string m = chain + " reads the Python attribute " + Quote(attr) + ": ";
      m += IsDunder(attr) ? "dunder attributes lead from any template object to its class, function "
                            "globals and builtins"
                          : "frame and code attributes lead to the interpreter's globals";
      const std::string root = Root(obj);
      if (InList(root, {"cycler", "joiner", "namespace", "lipsum", "range", "dict", "self", "loop",
                        "caller", "raise_exception", "strftime_now", "varargs", "kwargs"})) {
        m += "; it starts at " + Quote(root) + ", a global every jinja2 (or transformers) "
             "environment provides, whose functions' __globals__ hold modules such as os";
      }
      m += ". A plain jinja2.Environment (CVE-2024-34359) runs code this way; the sandbox refuses it.";
      Emit("MG-TMPL-UNSAFE-ATTR", Severity::kCritical, pos, std::move(m));
      return true;
    }
    if (!attr.empty() && attr[0] == '_') {
      Emit("MG-TMPL-PRIVATE-ATTR", Severity::kHigh, pos,
           chain + " reads the private attribute " + Quote(attr) +
               ", which jinja2's sandbox refuses (names starting with '_'); outside it, private "
               "attributes such as self._TemplateReference__context reach the render context");
    }
    return false;
  }
  // CheckNameExpr judges a computed attribute name (a subscript key, attr's
  // argument, an attribute path). `dynamic_is_high`: a non-constant name that
  // the template did not build is still unjudgeable (attr(), attribute paths)
  // rather than ordinary indexing (x[i]).
  bool CheckNameExpr(int32_t name_expr, int32_t at, int32_t obj, bool dynamic_is_high,
                     bool dotted, std::string_view what) {
    std::vector<std::pair<std::string, int32_t>> values;
    const Names kind = NameValues(name_expr, &values);
    bool critical = false;
    for (const auto& [v, node] : values) {
      if (dotted) {  // jinja2's make_attrgetter: parts split at '.', digits index
        size_t start = 0;
        while (start <= v.size()) {
          const size_t dot = std::min(v.find('.', start), v.size());
          const std::string_view part = std::string_view(v).substr(start, dot - start);
          const bool digits = !part.empty() && std::all_of(part.begin(), part.end(), IsAsciiDigit);
          if (!digits) critical = CheckAttr(part, at, obj, "|" + std::string(what) + "(...)") || critical;
          start = dot + 1;
        }
      } else {
        critical = CheckAttr(v, at, obj, std::string(what)) || critical;
      }
    }
    const bool plain_nonconstant = values.empty() && kind == Names::kPlain && Fold(name_expr).kind == Folded::kNo;
    if (!critical && (kind == Names::kComputed || (dynamic_is_high && plain_nonconstant))) {
      Emit("MG-TMPL-DYNAMIC-ATTR", Severity::kHigh, N(at).pos,
           R(obj) + std::string(what) + " reads an attribute whose name is " +
               (kind == Names::kComputed ? "built by the template" : "not a constant") +
               " (" + R(name_expr) + "): this analyzer cannot tell which attribute, and a built "
               "name such as '_'*2 ~ 'class' ~ '_'*2 reaches Python internals");
    }
    return critical;
  }

  void CheckKeywordNames(const Node& n) {
    for (size_t k = 1; k < n.kids.size(); ++k) {
      const Node& a = N(n.kids[k]);
      if (a.kind == K::kKeyword && IsSuspiciousString(a.text)) {
        Emit("MG-TMPL-UNSAFE-STRING", Severity::kHigh, a.pos,
             "keyword argument " + Quote(a.text) +
                 " names a Python internal; as a key of dict() it becomes that string, a way to "
                 "build attribute names without writing them");
      }
    }
  }

  // CheckMethodCall judges a call of attribute `m` of `obj`.
  void CheckMethodCall(std::string_view m, int32_t obj, int32_t call) {
    const uint64_t pos = N(call).pos;
    if (m == "format" || m == "format_map") {
      Emit("MG-TMPL-FORMAT-METHOD", Severity::kHigh, pos,
           R(obj) + "." + std::string(m) + "(...) calls str." + std::string(m) +
               ", whose replacement fields ({0.__class__}) read attributes without attribute syntax; "
               "it is how jinja2's sandbox was escaped before (CVE-2016-10745, CVE-2019-10906)");
      return;
    }
    if (!m.empty() && (m[0] == '_' || IsInternalAttr(m))) return;  // judged as an attribute
    if (IsKnownMethod(m)) return;
    const std::string root = N(obj).kind == K::kName ? N(obj).text : "";
    if (root == "self" && blocks_.count(std::string(m))) return;
    Emit("MG-TMPL-UNKNOWN-CALL", Severity::kHigh, pos,
         "calls the method " + Quote(m) + " of " + R(obj) +
             ", which is not a str, list or dict method a chat template needs");
  }

  void CheckCall(int32_t i) {
    const Node& n = N(i);
    const Node& c = N(n.kids[0]);
    CheckKeywordNames(n);
    if (c.kind == K::kName) {
      if (IsKnownGlobalCallable(c.text) || macros_.count(c.text) || imported_.count(c.text) ||
          callable_locals_.count(c.text)) {
        return;
      }
      Emit("MG-TMPL-UNKNOWN-CALL", Severity::kHigh, n.pos,
           "calls " + Quote(c.text) +
               ", which is neither a jinja2 global, a transformers global (raise_exception, "
               "strftime_now) nor a macro of this template");
      return;
    }
    if (c.kind == K::kGetattr) {
      CheckMethodCall(c.text, c.kids[0], i);
      return;
    }
    if (c.kind == K::kGetitem || (c.kind == K::kFilter && c.text == "attr")) {
      const int32_t key = c.kind == K::kGetitem ? c.kids[1] : Positional(c, 0);
      const Folded f = key >= 0 ? Fold(key) : Folded{};
      if (f.kind == Folded::kStr) {
        CheckMethodCall(f.s, c.kids[0], i);
        return;
      }
    }
    Emit("MG-TMPL-UNKNOWN-CALL", Severity::kHigh, n.pos,
         "calls the value of " + R(n.kids[0]) + ", not a named function or method");
  }

  // CheckFilter judges a filter and the attribute names, filter names and
  // test names its arguments carry; true when critical.
  bool CheckFilter(int32_t i) {
    const Node& n = N(i);
    const std::string& f = n.text;
    const int32_t obj = n.kids[0];
    CheckKeywordNames(n);
    if (!IsKnownFilter(f)) {
      Emit("MG-TMPL-UNKNOWN-FILTER", Severity::kHigh, n.pos,
           "uses the filter " + Quote(f) + ", which is neither a jinja2 builtin nor transformers' tojson");
      return false;
    }
    if (HasStarArgs(n) && InList(f, {"attr", "map", "select", "reject", "selectattr", "rejectattr",
                                     "sort", "sum", "unique", "min", "max", "groupby"})) {
      Emit("MG-TMPL-DYNAMIC-ATTR", Severity::kHigh, n.pos,
           "passes *args or **kwargs to the filter " + Quote(f) +
               ", so the attribute, filter or test it applies cannot be told");
      return false;
    }
    auto filter_name = [&](int32_t arg) {
      const Folded& v = Fold(arg);
      if (v.kind == Folded::kStr) {
        used_[static_cast<size_t>(arg)] = true;
        if (!IsKnownFilter(v.s)) {
          Emit("MG-TMPL-UNKNOWN-FILTER", Severity::kHigh, N(arg).pos,
               "map applies the filter " + Quote(v.s) + ", which is not a jinja2 builtin");
        }
        return true;
      }
      Emit("MG-TMPL-DYNAMIC-ATTR", Severity::kHigh, n.pos,
           "map applies a filter whose name is not a constant (" + R(arg) + ")");
      return false;
    };
    auto test_name = [&](int32_t arg) {
      if (arg < 0) return;
      const Folded& v = Fold(arg);
      if (v.kind == Folded::kStr) {
        used_[static_cast<size_t>(arg)] = true;
        if (!IsKnownTest(v.s)) {
          Emit("MG-TMPL-UNKNOWN-TEST", Severity::kHigh, N(arg).pos,
               Quote(f) + " applies the test " + Quote(v.s) + ", which is not a jinja2 builtin");
        }
        return;
      }
      Emit("MG-TMPL-DYNAMIC-ATTR", Severity::kHigh, n.pos,
           Quote(f) + " applies a test whose name is not a constant (" + R(arg) + ")");
    };
    auto path = [&](int32_t arg) {
      return arg >= 0 && CheckNameExpr(arg, i, obj, true, true, f);
    };
    if (f == "attr") {
      int32_t name = Positional(n, 0);
      if (name < 0) name = KeywordArg(n, "name");
      return name >= 0 && CheckNameExpr(name, i, obj, true, false, "|attr(...)");
    }
    if (f == "map") {
      if (int32_t a = KeywordArg(n, "attribute"); a >= 0) return path(a);
      const int32_t fname = Positional(n, 0);
      if (fname >= 0 && filter_name(fname) && Fold(fname).s == "attr") {
        const int32_t name = Positional(n, 1);
        return name >= 0 && CheckNameExpr(name, i, obj, true, false, "|map('attr', ...)");
      }
      return false;
    }
    if (f == "select" || f == "reject") {
      test_name(Positional(n, 0));
      return false;
    }
    if (f == "selectattr" || f == "rejectattr") {
      const bool critical = path(Positional(n, 0));
      test_name(Positional(n, 1));
      return critical;
    }
    if (f == "groupby") {
      int32_t a = Positional(n, 0);
      if (a < 0) a = KeywordArg(n, "attribute");
      return path(a);
    }
    if (InList(f, {"sort", "sum", "unique", "min", "max"})) {
      // attribute is keyword-only in use; positionally it is sort's third,
      // sum's first, unique's/min's/max's second parameter.
      int32_t a = KeywordArg(n, "attribute");
      if (a < 0) a = Positional(n, f == "sort" ? 2 : f == "sum" ? 0 : 1);
      return path(a);
    }
    return false;
  }

  // Visit judges node i and below. For the spine of an attribute chain it
  // returns true once a critical finding was made, so `x.__class__.__mro__`
  // is one critical finding, not one per link.
  bool Visit(int32_t i) {
    if (i < 0) return false;
    const Node& n = N(i);
    switch (n.kind) {
      case K::kGetattr:
        if (Visit(n.kids[0])) return true;
        return CheckAttr(n.text, i, n.kids[0], "." + n.text);
      case K::kGetitem: {
        const bool tainted = Visit(n.kids[0]);
        Visit(n.kids[1]);
        if (tainted) return true;
        if (N(n.kids[1]).kind == K::kSlice || N(n.kids[1]).kind == K::kTuple) return false;
        return CheckNameExpr(n.kids[1], i, n.kids[0], false, false, "[" + R(n.kids[1]) + "]");
      }
      case K::kCall: {
        const bool tainted = Visit(n.kids[0]);
        for (size_t k = 1; k < n.kids.size(); ++k) Visit(n.kids[k]);
        if (tainted) return true;
        CheckCall(i);
        return false;
      }
      case K::kFilter: {
        const bool tainted = Visit(n.kids[0]);
        for (size_t k = 1; k < n.kids.size(); ++k) Visit(n.kids[k]);
        if (tainted) return true;
        return CheckFilter(i);
      }
      case K::kTest:
        for (int32_t k : n.kids) Visit(k);
        CheckKeywordNames(n);
        if (!IsKnownTest(n.text)) {
          Emit("MG-TMPL-UNKNOWN-TEST", Severity::kHigh, n.pos,
               "uses the test " + Quote(n.text) + ", which is not a jinja2 builtin");
        }
        return false;
      case K::kNsRef:
        CheckAttr(n.text2, i, -1, n.text + "." + n.text2);
        return false;
      case K::kLoad:
        Emit("MG-TMPL-LOAD", Severity::kHigh, n.pos,
             "{% " + n.text + " %} loads another template (" + R(n.kids[0]) +
                 "): a chat template is one self-contained file, and what it would load was not "
                 "judged");
        for (int32_t k : n.kids) Visit(k);
        return false;
      case K::kFilterBlock:
      case K::kSetBlock:
        for (int32_t k : n.kids) Visit(k);
        return false;
      default:
        for (int32_t k : n.kids) Visit(k);
        return false;
    }
  }

  // UnsafeStrings flags constant strings (after folding) that name Python
  // internals but were not read as attributes above: they are the pieces of
  // names built elsewhere ({% set k = '__class__' %} ... x[k]).
  void UnsafeStrings(int32_t i) {
    if (i < 0) return;
    const Node& n = N(i);
    if (used_[static_cast<size_t>(i)]) return;
    const bool expr = n.kind == K::kConst || n.kind == K::kConcat || n.kind == K::kBinary ||
                      n.kind == K::kFilter;
    if (expr) {
      const Folded& f = Fold(i);
      if (f.kind == Folded::kStr) {
        if (IsSuspiciousString(f.s)) {
          Emit("MG-TMPL-UNSAFE-STRING", Severity::kHigh, n.pos,
               "the string " + Quote(f.s) +
                   " names a Python internal (a dunder, mangled private or frame attribute); no "
                   "chat template needs it as text, and a subscript or attr() can use it as a name");
        }
        return;
      }
      if (f.kind == Folded::kOpaque) return;
    }
    for (int32_t k : n.kids) UnsafeStrings(k);
  }

  const std::vector<Node>& n_;
  std::string_view where_;
  uint64_t base_;
  std::vector<Finding>* out_;
  std::vector<Folded> fold_;
  std::vector<bool> folded_;
  std::vector<bool> used_;
  std::map<std::string, std::vector<std::string>> macros_;
  std::set<std::string> blocks_, imported_, callable_locals_;
  std::unordered_map<std::string, Binding> bindings_;
  std::unordered_map<std::string, std::vector<std::string>> alias_, taint_;
  std::set<std::pair<std::string, uint64_t>> emitted_;
  std::map<std::string, uint64_t> per_id_, suppressed_;
};

}  // namespace

void AnalyzeTemplate(std::string_view text, uint64_t base, std::string_view where,
                     const TemplateLimits& limits, std::vector<Finding>* findings) {
  auto offset = [&](uint64_t pos) {
    uint64_t o = core::kNoOffset;
    if (base == core::kNoOffset || __builtin_add_overflow(base, pos, &o)) return core::kNoOffset;
    return o;
  };
  const std::string w(where);
  if (text.size() > limits.max_template_bytes) {
    findings->push_back(MakeFinding(
        "MG-TMPL-LIMIT", Severity::kHigh,
        w + ": template of " + std::to_string(text.size()) + " bytes exceeds the limit of " +
            std::to_string(limits.max_template_bytes) + "; it was not judged",
        offset(0)));
    return;
  }
  // Python decodes the template (or the JSON/GGUF string holding it) as
  // strict UTF-8 before jinja2 sees it.
  for (size_t i = 0; i < text.size();) {
    uint32_t cp = 0;
    const size_t n = DecodeUtf8(text, i, &cp);
    if (n == 0) {
      findings->push_back(MakeFinding("MG-TMPL-UNPARSEABLE", Severity::kHigh,
                                      w + ": template is not valid UTF-8 at byte " + std::to_string(i) +
                                          "; it was not judged",
                                      offset(i)));
      return;
    }
    i += n;
  }
  std::vector<Token> tokens;
  Failure fail;
  std::vector<Node> nodes;
  int32_t root = kErr;
  if (Lexer(text, limits).Run(&tokens, &fail)) {
    nodes.reserve(tokens.size() + 1);
    root = Parser(tokens, limits, &nodes).Parse(&fail);
  }
  if (root == kErr) {
    if (fail.limit) {
      findings->push_back(MakeFinding("MG-TMPL-LIMIT", Severity::kHigh,
                                      w + ": " + fail.message + " at byte " + std::to_string(fail.pos) +
                                          "; the template was not judged",
                                      offset(fail.pos)));
    } else {
      std::string m;
      for (char c : fail.message) {
        m.push_back(static_cast<uint8_t>(c) >= 0x20 && static_cast<uint8_t>(c) < 0x7f ? c : '?');
      }
      findings->push_back(MakeFinding("MG-TMPL-UNPARSEABLE", Severity::kHigh,
                                      w + ": not a template jinja2 can parse: " + m + " (at byte " +
                                          std::to_string(fail.pos) + "); it was not judged",
                                      offset(fail.pos)));
    }
    return;
  }
  tokens.clear();
  tokens.shrink_to_fit();
  Judge(nodes, where, base, findings).Run(root);
}

}  // namespace modelgate::scanner::internal
