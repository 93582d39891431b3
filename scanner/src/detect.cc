#include <array>
#include <cstring>
#include <initializer_list>
#include <string>

#include "decompress.h"
#include "modelgate/scanner.h"
#include "tar.h"

namespace modelgate::scanner {
namespace {

constexpr std::array<std::string_view, 27> kFormatNames = {
    "unknown", "safetensors", "pickle", "pytorch-zip", "pytorch-tar", "numpy", "numpy-zip",
    "joblib", "zip", "tar", "gzip", "bzip2", "xz", "7z", "gguf", "onnx", "zlib", "lzma",
    "lfs-pointer", "zstd", "lz4", "joblib-zf", "keras", "hdf5", "json", "jinja", "python",
};
static_assert(kFormatNames.size() == static_cast<size_t>(kLastFormat) + 1);

bool StartsWith(std::span<const uint8_t> b, std::string_view magic, size_t at = 0) {
  if (at > b.size() || b.size() - at < magic.size()) return false;
  return std::memcmp(b.data() + at, magic.data(), magic.size()) == 0;
}

bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// The first local header's member name, if the zip starts with one.
std::string_view FirstZipMember(std::span<const uint8_t> head) {
  if (head.size() < 30) return {};
  size_t name_len = head[26] | (head[27] << 8);
  if (head.size() - 30 < name_len) return {};
  return {reinterpret_cast<const char*>(head.data() + 30), name_len};
}

}  // namespace

std::string_view FormatName(Format f) { return kFormatNames[static_cast<size_t>(f)]; }

std::string WithArticle(std::string_view word) {
  size_t start = 0;
  while (start < word.size() && (word[start] == '\'' || word[start] == '"' || word[start] == '(')) ++start;
  // The leading run of letters or digits, lowercased, decides.
  std::string w;
  bool upper = true;
  for (size_t i = start; i < word.size() && w.size() < 16; ++i) {
    const char c = word[i];
    const bool letter = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
    if (!letter && !(c >= '0' && c <= '9')) break;
    upper &= !(c >= 'a' && c <= 'z');
    w += (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
  }
  auto starts = [&](std::initializer_list<std::string_view> prefixes) {
    for (std::string_view p : prefixes) {
      if (w.rfind(p, 0) == 0) return true;
    }
    return false;
  };
  bool an;
  if (w.empty()) {
    an = false;
  } else if (w[0] >= '0' && w[0] <= '9') {  // "an 8", "an 11", "an 18", "a 7z"
    const bool two = w.size() == 2 || (w.size() > 2 && !(w[2] >= '0' && w[2] <= '9'));
    an = w[0] == '8' || ((w.rfind("11", 0) == 0 || w.rfind("18", 0) == 0) && two);
  } else if (starts({"one", "once", "uni", "use", "usu", "usa", "ure", "uti", "utf", "ubi", "eu",
                     "str"})) {
    an = false;  // a "w"/"y" sound, or read as a word ("a str")
  } else if (starts({"hour", "honest", "heir", "lzma"})) {
    an = true;
  } else if ((upper && w.size() > 1) || w.find_first_of("aeiouy") == std::string::npos) {
    an = std::string_view("aefhilmnorsx").find(w[0]) != std::string_view::npos;  // letter names
  } else {
    an = std::string_view("aeiou").find(w[0]) != std::string_view::npos;
  }
  return std::string(an ? "an " : "a ") + std::string(word);
}

Format DetectFormat(std::span<const uint8_t> head, uint64_t file_size, std::string_view name) {
  // Safetensors: 8-byte length, then the JSON header's '{'.
  if (head.size() >= 9 && head[8] == '{') return Format::kSafetensors;
  if (StartsWith(head, "PK\x03\x04") || StartsWith(head, "PK\x05\x06")) {
    std::string_view member = FirstZipMember(head);
    if (EndsWith(member, "data.pkl") || member.find("/data/") != std::string_view::npos ||
        EndsWith(member, "/version") || EndsWith(member, "/.format_version")) {
      return Format::kPytorchZip;
    }
    if (EndsWith(member, ".npy")) return Format::kNumpyZip;
    return Format::kZip;
  }
  if (StartsWith(head, "\x93NUMPY")) return Format::kNumpy;
  // Pickle protocol 2+ opens with PROTO n.
  if (head.size() >= 2 && head[0] == 0x80 && head[1] <= 5) return Format::kPickle;
  if (auto codec = SniffCodec(head)) {
    switch (*codec) {
      case Codec::kGzip: return Format::kGzip;
      case Codec::kZlib: return Format::kZlib;
      case Codec::kBzip2: return Format::kBzip2;
      case Codec::kXz: return Format::kXz;
      case Codec::kLzma: return Format::kLzma;
      case Codec::kZstd: return Format::kZstd;
      case Codec::kLz4: return Format::kLz4;
      case Codec::kJoblibZf: return Format::kJoblibZf;
    }
  }
  if (StartsWith(head, "7z\xbc\xaf\x27\x1c")) return Format::kSevenZip;
  // What Python's tarfile opens: a first header with a valid checksum
  // (ustar magic or not). Whether it is torch's legacy tar needs a listing.
  if (head.size() >= 512 && LooksLikeTar(head)) return Format::kTar;
  if (StartsWith(head, "GGUF")) return Format::kGguf;
  if (StartsWith(head, "\x89HDF\r\n\x1a\n")) return Format::kHdf5;
  // Protocol 0/1 pickles have no magic: ScanFile runs the pickle machine on
  // files nothing else claims and calls them pickles when a stream loads.
  if (EndsWith(name, ".safetensors") && file_size >= 8) return Format::kSafetensors;
  return Format::kUnknown;
}

}  // namespace modelgate::scanner
