#include "text.h"

#include <cstring>
#include <string>

#include "modelgate/core.h"

namespace modelgate::core {

size_t Utf8SequenceLength(std::span<const uint8_t> b) {
  if (b.empty()) return 0;
  const uint8_t c = b[0];
  if (c < 0x80) return 1;
  size_t len;
  uint8_t lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (c >= 0xC2 && c <= 0xDF) {
    len = 2;
  } else if (c == 0xE0) {
    len = 3, lo = 0xA0;  // no overlongs
  } else if (c == 0xED) {
    len = 3, hi = 0x9F;  // no surrogates
  } else if (c >= 0xE1 && c <= 0xEF) {
    len = 3;
  } else if (c == 0xF0) {
    len = 4, lo = 0x90;  // no overlongs
  } else if (c >= 0xF1 && c <= 0xF3) {
    len = 4;
  } else if (c == 0xF4) {
    len = 4, hi = 0x8F;  // nothing above U+10FFFF
  } else {
    return 0;
  }
  if (b.size() < len) return 0;
  if (b[1] < lo || b[1] > hi) return 0;
  for (size_t i = 2; i < len; ++i) {
    if ((b[i] & 0xC0) != 0x80) return 0;
  }
  return len;
}

size_t FirstInvalidUtf8(std::span<const uint8_t> bytes) {
  size_t i = 0;
  const size_t n = bytes.size();
  while (i < n) {
    // ASCII fast path, 8 bytes at a time.
    if (i + 8 <= n) {
      uint64_t w;
      std::memcpy(&w, bytes.data() + i, 8);
      if ((w & 0x8080808080808080ULL) == 0) {
        i += 8;
        continue;
      }
    }
    if (bytes[i] < 0x80) {
      ++i;
      continue;
    }
    size_t len = Utf8SequenceLength(bytes.subspan(i));
    if (len == 0) return i;
    i += len;
  }
  return kUtf8Valid;
}

namespace {

constexpr char kHex[] = "0123456789abcdef";

void AppendByteEscape(uint8_t c, std::string* out) {
  *out += "\\x";
  *out += kHex[c >> 4];
  *out += kHex[c & 15];
}

// CodePoint decodes the well-formed sequence `b` (1 to 4 bytes).
uint32_t CodePoint(std::span<const uint8_t> b) {
  if (b.size() == 1) return b[0];
  uint32_t cp = b[0] & (0x7F >> b.size());
  for (size_t i = 1; i < b.size(); ++i) cp = (cp << 6) | (b[i] & 0x3F);
  return cp;
}

// Hazard: a code point a terminal or a bidi-aware viewer acts on instead of
// showing. C1 controls (U+0085 breaks lines, U+009B is CSI in 8-bit
// terminals); the bidi marks, embeddings, overrides and isolates (U+061C,
// U+200E, U+200F, U+202A-U+202E, U+2066-U+2069: "Trojan Source" reordering);
// the line and paragraph separators U+2028, U+2029 (a line break to many
// viewers). C0 and DEL are handled as bytes.
bool Hazard(uint32_t cp) {
  return (cp >= 0x80 && cp <= 0x9F) || cp == 0x061C || cp == 0x200E || cp == 0x200F ||
         (cp >= 0x2028 && cp <= 0x202E) || (cp >= 0x2066 && cp <= 0x2069);
}

// AppendEscaped appends `text` with C0, DEL, invalid UTF-8 bytes (\xNN) and
// hazardous code points (\uNNNN) escaped; with `quote`, also '"' and '\\',
// which makes the form reversible. Stops with "..." once `out` exceeds
// `max_bytes`.
void AppendEscaped(std::string_view text, bool quote, size_t max_bytes, std::string* out) {
  auto bytes = std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(text.data()), text.size());
  size_t i = 0;
  while (i < bytes.size()) {
    if (out->size() > max_bytes) {
      *out += "...";
      return;
    }
    const uint8_t c = bytes[i];
    if (c < 0x80) {
      if (quote && (c == '"' || c == '\\')) {
        *out += '\\';
        *out += static_cast<char>(c);
      } else if (c >= 0x20 && c < 0x7F) {
        *out += static_cast<char>(c);
      } else {
        AppendByteEscape(c, out);
      }
      ++i;
      continue;
    }
    const size_t len = Utf8SequenceLength(bytes.subspan(i));
    if (len == 0) {  // a raw 0x80-0x9F (one-byte C1, 0x9B CSI) lands here too
      AppendByteEscape(c, out);
      ++i;
      continue;
    }
    const uint32_t cp = CodePoint(bytes.subspan(i, len));
    if (Hazard(cp)) {
      *out += "\\u";
      for (int shift = 12; shift >= 0; shift -= 4) *out += kHex[(cp >> shift) & 15];
    } else {
      out->append(text.substr(i, len));
    }
    i += len;
  }
}

}  // namespace

std::string Quoted(std::string_view text, size_t max_bytes) {
  std::string out = "\"";
  AppendEscaped(text, /*quote=*/true, max_bytes, &out);
  out += '"';
  return out;
}

std::string EscapeControls(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  AppendEscaped(text, /*quote=*/false, SIZE_MAX, &out);
  return out;
}

bool IsUtf8(std::string_view text) {
  return FirstInvalidUtf8({reinterpret_cast<const uint8_t*>(text.data()), text.size()}) ==
         kUtf8Valid;
}

std::string EscapeInvalidUtf8(std::string_view text) {
  auto bytes = std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(text.data()), text.size());
  if (FirstInvalidUtf8(bytes) == kUtf8Valid) return std::string(text);
  std::string out;
  size_t i = 0;
  while (i < bytes.size()) {
    const uint8_t c = bytes[i];
    if (c == '\\') {
      out += "\\\\";
      ++i;
    } else if (c < 0x80) {
      out += static_cast<char>(c);
      ++i;
    } else if (size_t len = Utf8SequenceLength(bytes.subspan(i)); len != 0) {
      out.append(text.substr(i, len));
      i += len;
    } else {
      AppendByteEscape(c, &out);
      ++i;
    }
  }
  return out;
}

}  // namespace modelgate::core
