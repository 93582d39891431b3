// Escaping untrusted text for terminals (Quoted, EscapeControls) and for
// JSON (EscapeInvalidUtf8): every class a terminal or a bidi-aware viewer
// acts on is escaped, and two different names never escape alike.
#include <set>
#include <string>

#include <catch2/catch.hpp>

#include "modelgate/core.h"

namespace core = modelgate::core;

namespace {

// Utf8 encodes one code point (tests only use valid scalar values).
std::string Utf8(uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else if (cp < 0x800) {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    s += static_cast<char>(0xE0 | (cp >> 12));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    s += static_cast<char>(0xF0 | (cp >> 18));
    s += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

std::string Hex4(uint32_t cp) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string s = "\\u";
  for (int shift = 12; shift >= 0; shift -= 4) s += kHex[(cp >> shift) & 15];
  return s;
}

// Safe is what a terminal may be shown: no C0 (no newline either), no DEL,
// valid UTF-8 only, and none of the escaped code points.
bool Safe(const std::string& s) {
  if (!core::IsUtf8(s)) return false;
  for (size_t i = 0; i < s.size(); ++i) {
    const auto c = static_cast<uint8_t>(s[i]);
    if (c < 0x20 || c == 0x7F) return false;
    if (c == 0xC2 && i + 1 < s.size() && static_cast<uint8_t>(s[i + 1]) <= 0x9F) return false;
    if (c == 0xD8 && i + 1 < s.size() && static_cast<uint8_t>(s[i + 1]) == 0x9C) return false;
    if (c == 0xE2 && i + 2 < s.size() && static_cast<uint8_t>(s[i + 1]) == 0x80) {
      const auto d = static_cast<uint8_t>(s[i + 2]);
      if (d == 0x8E || d == 0x8F || (d >= 0xA8 && d <= 0xAE)) return false;
    }
    if (c == 0xE2 && i + 2 < s.size() && static_cast<uint8_t>(s[i + 1]) == 0x81) {
      const auto d = static_cast<uint8_t>(s[i + 2]);
      if (d >= 0xA6 && d <= 0xA9) return false;
    }
  }
  return true;
}

}  // namespace

TEST_CASE("Quoted escapes C0 and DEL as bytes, quotes and backslashes by a backslash",
          "[core][text]") {
  CHECK(core::Quoted("a\nb") == "\"a\\x0ab\"");
  CHECK(core::Quoted(std::string("\0\x1b[2J", 5)) == "\"\\x00\\x1b[2J\"");
  CHECK(core::Quoted("\x7f") == "\"\\x7f\"");
  CHECK(core::Quoted("say \"hi\" \\o/") == "\"say \\\"hi\\\" \\\\o/\"");
  for (int c = 0; c < 0x20; ++c) CHECK(Safe(core::Quoted(std::string(1, static_cast<char>(c)))));
}

TEST_CASE("Quoted escapes the one-byte C1 controls (raw 0x80-0x9F, e.g. CSI 0x9B) as bytes",
          "[core][text]") {
  CHECK(core::Quoted("\x9b" "31mRED") == "\"\\x9b31mRED\"");
  for (int c = 0x80; c <= 0x9F; ++c) {
    const std::string q = core::Quoted(std::string(1, static_cast<char>(c)));
    CHECK(q.size() == 6);
    CHECK(q.substr(1, 2) == "\\x");
    CHECK(Safe(q));
  }
}

TEST_CASE("Quoted escapes encoded C1 controls U+0080-U+009F as code points", "[core][text]") {
  CHECK(core::Quoted("x" + Utf8(0x9B) + "2J") == "\"x\\u009b2J\"");
  CHECK(core::Quoted(Utf8(0x85)) == "\"\\u0085\"");  // NEL: a line break
  for (uint32_t cp = 0x80; cp <= 0x9F; ++cp) {
    CHECK(core::Quoted(Utf8(cp)) == "\"" + Hex4(cp) + "\"");
  }
  CHECK(core::Quoted(Utf8(0xA0)) == "\"" + Utf8(0xA0) + "\"");  // first printable after C1
}

TEST_CASE("Quoted escapes bidi controls and line separators, and keeps other UTF-8",
          "[core][text]") {
  // "Trojan Source": RLO makes "exe.txt" read as "txt.exe".
  CHECK(core::Quoted("evil" + Utf8(0x202E) + "txt.exe") == "\"evil\\u202etxt.exe\"");
  const uint32_t escaped[] = {0x061C, 0x200E, 0x200F, 0x2028, 0x2029, 0x202A, 0x202B, 0x202C,
                              0x202D, 0x202E, 0x2066, 0x2067, 0x2068, 0x2069};
  for (uint32_t cp : escaped) {
    CHECK(core::Quoted(Utf8(cp)) == "\"" + Hex4(cp) + "\"");
    CHECK(core::EscapeControls(Utf8(cp)) == Hex4(cp));
  }
  // Neighbours of each escaped range are ordinary text.
  const uint32_t kept[] = {0x061B, 0x061D, 0x200D, 0x2010, 0x2027, 0x202F, 0x2065, 0x206A,
                           0x00E9, 0x4E2D, 0x1F600};
  for (uint32_t cp : kept) CHECK(core::Quoted(Utf8(cp)) == "\"" + Utf8(cp) + "\"");
}

TEST_CASE("Quoted escapes every byte of ill-formed UTF-8", "[core][text]") {
  CHECK(core::Quoted("\xc0\xaf") == "\"\\xc0\\xaf\"");          // overlong '/'
  CHECK(core::Quoted("\xed\xa0\x80") == "\"\\xed\\xa0\\x80\"");  // surrogate
  CHECK(core::Quoted("\xf4\x90\x80\x80") == "\"\\xf4\\x90\\x80\\x80\"");  // > U+10FFFF
  CHECK(core::Quoted("a\xe2\x80") == "\"a\\xe2\\x80\"");        // truncated sequence
  CHECK(core::Quoted("\xff") == "\"\\xff\"");
}

TEST_CASE("Quoted is reversible: different names never quote alike", "[core][text]") {
  // Each pair is a name and the text that its escape spells literally.
  const std::string pairs[][2] = {
      {"\x9b", "\\x9b"},
      {Utf8(0x9B), "\\u009b"},
      {Utf8(0x202E), "\\u202e"},
      {"\n", "\\x0a"},
      {"\"", "\\\""},
      {"\xc2", "\\xc2"},
  };
  for (const auto& p : pairs) CHECK(core::Quoted(p[0]) != core::Quoted(p[1]));
  std::set<std::string> seen;
  for (int c = 0; c < 256; ++c) seen.insert(core::Quoted(std::string(1, static_cast<char>(c))));
  CHECK(seen.size() == 256);
}

TEST_CASE("Quoted cuts long text only between escapes", "[core][text]") {
  const std::string q = core::Quoted(std::string(300, '\x9b'), 200);
  CHECK(q.size() < 220);
  CHECK(q.substr(q.size() - 4) == "...\"");
  CHECK(Safe(q));
  CHECK(core::Quoted(std::string(10, 'a'), 200) == "\"aaaaaaaaaa\"");
}

TEST_CASE("EscapeControls keeps quotes and backslashes and leaves Quoted text unchanged",
          "[core][text]") {
  const std::string hostile = "x\"\\\n\x9b" + Utf8(0x9B) + Utf8(0x2066) + "\xff";
  const std::string quoted = core::Quoted(hostile);
  CHECK(core::EscapeControls(quoted) == quoted);
  CHECK(core::EscapeControls("a \"b\" \\c") == "a \"b\" \\c");
  CHECK(core::EscapeControls(hostile) == "x\"\\\\x0a\\x9b\\u009b\\u2066\\xff");
  CHECK(Safe(core::EscapeControls(hostile)));
}

TEST_CASE("EscapeInvalidUtf8 keeps valid UTF-8 and tells apart names differing in one bad byte",
          "[core][text]") {
  CHECK(core::IsUtf8("models/a.safetensors"));
  CHECK(core::IsUtf8("caf" + Utf8(0xE9) + Utf8(0x202E)));
  CHECK_FALSE(core::IsUtf8("a\x9b"));
  // Valid UTF-8 is unchanged, backslashes and controls included (JSON
  // escapes those itself).
  CHECK(core::EscapeInvalidUtf8("dir\\a\n" + Utf8(0x9B)) == "dir\\a\n" + Utf8(0x9B));
  const std::string a = core::EscapeInvalidUtf8("m/\xff.pt");
  const std::string b = core::EscapeInvalidUtf8("m/\xfe.pt");
  CHECK(a == "m/\\xff.pt");
  CHECK(b == "m/\\xfe.pt");
  CHECK(core::IsUtf8(a));
  // A literal backslash in an invalid name is doubled, so "\xff" spelled
  // out and the byte 0xFF cannot meet.
  CHECK(core::EscapeInvalidUtf8("\\xff\xfe") == "\\\\xff\\xfe");
  CHECK(core::EscapeInvalidUtf8("\xff\xfe") == "\\xff\\xfe");
  CHECK(core::EscapeInvalidUtf8("\xe2\x80" "a" + Utf8(0xE9)) == "\\xe2\\x80a" + Utf8(0xE9));
  std::set<std::string> seen;
  for (int c = 0x80; c < 256; ++c) {
    seen.insert(core::EscapeInvalidUtf8("\\" + std::string(1, static_cast<char>(c))));
  }
  CHECK(seen.size() == 128);
}
