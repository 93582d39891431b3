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

std::string Quoted(std::string_view text, size_t max_bytes) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out = "\"";
  auto bytes = std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(text.data()), text.size());
  size_t i = 0;
  while (i < bytes.size()) {
    if (out.size() > max_bytes) {
      out += "...";
      break;
    }
    const uint8_t c = bytes[i];
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
      ++i;
    } else if (c >= 0x20 && c < 0x7F) {
      out += static_cast<char>(c);
      ++i;
    } else if (c < 0x80) {
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
      ++i;
    } else {
      size_t len = Utf8SequenceLength(bytes.subspan(i));
      if (len == 0) {
        out += "\\x";
        out += kHex[c >> 4];
        out += kHex[c & 15];
        ++i;
      } else {
        out.append(text.substr(i, len));
        i += len;
      }
    }
  }
  out += '"';
  return out;
}

}  // namespace modelgate::core
