#include "npy.h"
#include "numpy_dtype.h"

#include <cctype>
#include <memory>

namespace modelgate::scanner {
namespace {

using core::Severity;

// A Python literal value, as much as an .npy header can hold.
struct Lit {
  enum Kind { kStr, kInt, kBool, kNone, kTuple, kList, kDict } kind = kNone;
  std::string str;
  uint64_t num = 0;
  bool boolean = false;
  std::vector<Lit> items;        // tuple / list items; dict values
  std::vector<std::string> keys;  // dict keys (strings only), parallel to items
};

// LiteralParser parses the strict subset of Python literal syntax that
// numpy's writer emits (dict/tuple/list/str/int/True/False/None), with
// Python 2 `L` long suffixes as numpy's _filter_header drops them.
class LiteralParser {
 public:
  LiteralParser(std::string_view text, uint64_t base, uint64_t max_depth)
      : s_(text), base_(base), max_depth_(max_depth) {}

  bool Parse(Lit* out) {
    SkipSpace();
    if (!Value(out, 0)) return false;
    SkipSpace();
    if (pos_ != s_.size()) return Fail("unexpected text after the header literal");
    return true;
  }
  const std::string& error() const { return error_; }
  uint64_t error_offset() const { return base_ + pos_; }

 private:
  bool Fail(std::string m) {
    if (error_.empty()) error_ = std::move(m);
    return false;
  }
  void SkipSpace() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\n' || s_[pos_] == '\t' ||
                                s_[pos_] == '\r')) {
      ++pos_;
    }
  }
  bool Eat(char c) {
    SkipSpace();
    if (pos_ < s_.size() && s_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  bool Word(std::string_view w) {
    if (s_.substr(pos_, w.size()) != w) return false;
    size_t end = pos_ + w.size();
    if (end < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[end])) || s_[end] == '_')) {
      return false;
    }
    pos_ = end;
    return true;
  }

  bool Value(Lit* out, uint64_t depth) {
    if (depth > max_depth_) return Fail("header literal nested too deeply");
    SkipSpace();
    if (pos_ >= s_.size()) return Fail("header literal ends early");
    const char c = s_[pos_];
    if (c == '\'' || c == '"') {
      out->kind = Lit::kStr;
      return String(&out->str);
    }
    if (c >= '0' && c <= '9') {
      out->kind = Lit::kInt;
      return Int(&out->num);
    }
    if (Word("True")) return out->kind = Lit::kBool, out->boolean = true, true;
    if (Word("False")) return out->kind = Lit::kBool, out->boolean = false, true;
    if (Word("None")) return out->kind = Lit::kNone, true;
    if (c == '(' || c == '[') {
      const char close = c == '(' ? ')' : ']';
      out->kind = c == '(' ? Lit::kTuple : Lit::kList;
      ++pos_;
      bool comma = true;
      while (!Eat(close)) {
        if (!comma) return Fail("expected ',' or a closing bracket");
        Lit item;
        if (!Value(&item, depth + 1)) return false;
        out->items.push_back(std::move(item));
        comma = Eat(',');
      }
      // (x) is x in Python, not a tuple; numpy writes (n,) for rank 1.
      if (out->kind == Lit::kTuple && out->items.size() == 1 && !comma) {
        Lit inner = std::move(out->items[0]);
        *out = std::move(inner);
      }
      return true;
    }
    if (c == '{') {
      out->kind = Lit::kDict;
      ++pos_;
      bool comma = true;
      while (!Eat('}')) {
        if (!comma) return Fail("expected ',' or '}'");
        SkipSpace();
        std::string key;
        if (pos_ >= s_.size() || (s_[pos_] != '\'' && s_[pos_] != '"')) {
          return Fail("dict keys must be strings");
        }
        if (!String(&key)) return false;
        if (!Eat(':')) return Fail("expected ':' after a dict key");
        Lit v;
        if (!Value(&v, depth + 1)) return false;
        for (const auto& k : out->keys) {
          if (k == key) return Fail("duplicate key " + core::Quoted(key) + " in the header");
        }
        out->keys.push_back(std::move(key));
        out->items.push_back(std::move(v));
        comma = Eat(',');
      }
      return true;
    }
    return Fail("unsupported token in the header literal");
  }

  bool Int(uint64_t* out) {
    uint64_t v = 0;
    size_t start = pos_;
    while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') {
      if (__builtin_mul_overflow(v, 10u, &v) ||
          __builtin_add_overflow(v, static_cast<uint64_t>(s_[pos_] - '0'), &v)) {
        return Fail("integer in the header overflows 64 bits");
      }
      ++pos_;
    }
    if (pos_ - start > 1 && s_[start] == '0') return Fail("integer with a leading zero");
    if (pos_ < s_.size() && (s_[pos_] == 'L' || s_[pos_] == 'l')) ++pos_;  // Python 2 long
    *out = v;
    return true;
  }

  bool String(std::string* out) {
    const char quote = s_[pos_++];
    while (pos_ < s_.size() && s_[pos_] != quote) {
      char c = s_[pos_++];
      if (c == '\n') return Fail("newline inside a string");
      if (c != '\\') {
        out->push_back(c);
        continue;
      }
      if (pos_ >= s_.size()) break;
      const char e = s_[pos_++];
      switch (e) {
        case '\\': case '\'': case '"': out->push_back(e); break;
        case 'n': out->push_back('\n'); break;
        case 't': out->push_back('\t'); break;
        case 'r': out->push_back('\r'); break;
        default: return Fail("unsupported escape in a header string");
      }
    }
    if (pos_ >= s_.size()) return Fail("unterminated string in the header");
    ++pos_;
    return true;
  }

  std::string_view s_;
  uint64_t base_;
  uint64_t max_depth_;
  size_t pos_ = 0;
  std::string error_;
};

// DescrInfo walks a descr: a type string, or a structured list of
// (name, descr[, shape]) tuples. Any object field makes the body a pickle.
bool DescrInfo(const Lit& d, bool* object, bool* structured) {
  if (d.kind == Lit::kStr) {
    const NumpyTypestr t = ParseNumpyTypestr(d.str, TypestrForm::kArrayInterface);
    *object |= t.object;
    return t.ok;
  }
  if (d.kind != Lit::kList) return false;
  *structured = true;
  for (const auto& field : d.items) {
    if (field.kind != Lit::kTuple || field.items.size() < 2 || field.items.size() > 3) return false;
    const Lit& name = field.items[0];
    if (name.kind != Lit::kStr && !(name.kind == Lit::kTuple && name.items.size() == 2)) return false;
    if (!DescrInfo(field.items[1], object, structured)) return false;
  }
  return true;
}

}  // namespace

std::optional<NpyHeader> ParseNpyHeader(std::span<const uint8_t> bytes, uint64_t base,
                                        const NpyLimits& limits, std::vector<Finding>* findings) {
  auto fail = [&](const char* id, std::string m, uint64_t off) -> std::optional<NpyHeader> {
    findings->push_back(MakeFinding(id, Severity::kHigh, std::move(m), off));
    return std::nullopt;
  };
  core::ByteReader r(bytes, base);
  auto magic = r.Take(kNpyMagic.size());
  if (!magic.ok() || std::string_view(reinterpret_cast<const char*>(magic.value().data()), 6) != kNpyMagic) {
    return fail("MG-NPY-MALFORMED", "no .npy magic", base);
  }
  auto major = r.U8(), minor = r.U8();
  if (!major.ok() || !minor.ok()) return fail("MG-NPY-MALFORMED", "truncated version", base + 6);
  NpyHeader h;
  h.major = major.value();
  h.minor = minor.value();
  uint64_t len = 0;
  if (h.major == 1 && h.minor == 0) {
    auto l = r.U16Le();
    if (!l.ok()) return fail("MG-NPY-MALFORMED", "truncated header length", r.offset());
    len = l.value();
  } else if ((h.major == 2 || h.major == 3) && h.minor == 0) {
    auto l = r.U32Le();
    if (!l.ok()) return fail("MG-NPY-MALFORMED", "truncated header length", r.offset());
    len = l.value();
  } else {
    return fail("MG-NPY-MALFORMED",
                "unsupported format version " + std::to_string(h.major) + "." +
                    std::to_string(h.minor),
                base + 6);
  }
  if (len > limits.max_header_bytes) {
    return fail("MG-NPY-HEADER-TOO-LARGE",
                "header of " + std::to_string(len) + " bytes exceeds " +
                    std::to_string(limits.max_header_bytes) + " (limit max_header_bytes)",
                base + 8);
  }
  const uint64_t text_offset = r.offset();
  auto text = r.Take(len);
  if (!text.ok()) return fail("MG-NPY-MALFORMED", "header runs past the end of the file", text_offset);
  h.header_bytes = len;
  h.data_offset = r.offset();
  const std::string_view s(reinterpret_cast<const char*>(text.value().data()), text.value().size());

  LiteralParser parser(s, text_offset, limits.max_literal_depth);
  Lit d;
  if (!parser.Parse(&d)) return fail("MG-NPY-HEADER", parser.error(), parser.error_offset());
  if (d.kind != Lit::kDict || d.keys.size() != 3) {
    return fail("MG-NPY-HEADER", "header must be a dict of descr, fortran_order, shape", text_offset);
  }
  const Lit *descr = nullptr, *fortran = nullptr, *shape = nullptr;
  for (size_t i = 0; i < d.keys.size(); ++i) {
    if (d.keys[i] == "descr") descr = &d.items[i];
    else if (d.keys[i] == "fortran_order") fortran = &d.items[i];
    else if (d.keys[i] == "shape") shape = &d.items[i];
  }
  if (!descr || !fortran || !shape) {
    return fail("MG-NPY-HEADER", "header keys must be exactly descr, fortran_order, shape", text_offset);
  }
  if (fortran->kind != Lit::kBool) return fail("MG-NPY-HEADER", "fortran_order must be a bool", text_offset);
  h.fortran_order = fortran->boolean;
  // Shape: a tuple of non-negative ints (a bare int is what "(n)" parses to:
  // numpy rejects it, so do we).
  if (shape->kind != Lit::kTuple) return fail("MG-NPY-HEADER", "shape must be a tuple", text_offset);
  if (shape->items.size() > limits.max_rank) {
    return fail("MG-NPY-HEADER", "shape has more than " + std::to_string(limits.max_rank) +
                                     " dimensions (limit max_rank)", text_offset);
  }
  for (const auto& dim : shape->items) {
    if (dim.kind != Lit::kInt) return fail("MG-NPY-HEADER", "shape entries must be integers", text_offset);
    h.shape.push_back(dim.num);
  }
  bool object = false, structured = false;
  if (!DescrInfo(*descr, &object, &structured)) {
    return fail("MG-NPY-BAD-DESCR", "unknown or malformed descr", text_offset);
  }
  h.has_object = object;
  h.descr = descr->kind == Lit::kStr ? descr->str : std::string("<structured>");
  if (!object && !structured) {
    uint64_t n = ParseNumpyTypestr(descr->str, TypestrForm::kArrayInterface).itemsize;
    bool overflow = false;
    for (uint64_t dim : h.shape) overflow |= __builtin_mul_overflow(n, dim, &n);
    if (overflow) return fail("MG-NPY-SHAPE-OVERFLOW", "array size overflows 64 bits", text_offset);
    h.body_bytes = n;
  }
  return h;
}

}  // namespace modelgate::scanner
