// Tar reading, strict, as Python's tarfile (Debian 12's 3.11, with the
// strict PAX record parser of CVE-2024-6232) lists archives: tarfile.py
// TarFile.next, TarInfo.frombuf, _proc_builtin, _proc_gnulong, _proc_pax,
// _apply_pax_info, _find_link_target. What tarfile accepts but another
// reader may read differently is a finding.
#include "tar.h"

#include "archive_names.h"

#include <algorithm>
#include <array>
#include <numeric>

namespace modelgate::scanner {
namespace {

using core::Severity;

constexpr uint64_t kBlock = 512;
constexpr int kMaxLinkHops = 8;
constexpr uint64_t kMaxTorchPickles = 1'000'000;

void Add(std::vector<Finding>* out, const char* id, Severity sev, std::string message,
         uint64_t offset, const std::string& member = "") {
  out->push_back(MakeFinding(id, sev, std::move(message), offset, member));
}

std::string N(uint64_t v) { return std::to_string(v); }

// BlockUp is tarfile's _block(): `n` rounded up to whole blocks; false on
// overflow.
bool BlockUp(uint64_t n, uint64_t* out) {
  if (n > UINT64_MAX - (kBlock - 1)) return false;
  *out = (n + kBlock - 1) / kBlock * kBlock;
  return true;
}

// CStr is tarfile's nts(): the bytes up to the first NUL.
std::string CStr(std::span<const uint8_t> b) {
  size_t n = 0;
  while (n < b.size() && b[n] != 0) ++n;
  return std::string(reinterpret_cast<const char*>(b.data()), n);
}

bool PyAsciiSpace(char c) {
  return c == ' ' || (c >= '\t' && c <= '\r') || (c >= 0x1c && c <= 0x1f);
}

std::string_view PyStrip(std::string_view s) {
  while (!s.empty() && PyAsciiSpace(s.front())) s.remove_prefix(1);
  while (!s.empty() && PyAsciiSpace(s.back())) s.remove_suffix(1);
  return s;
}

enum class NumForm : uint8_t { kCanonical, kLax, kInvalid, kNegative, kOverflow };
struct Num {
  NumForm form = NumForm::kInvalid;
  uint64_t value = 0;
};

// PyInt mirrors int(s, base) for ASCII text already stripped: an optional
// sign, for base 8 an optional 0o prefix, digits with single underscores
// between them (and after the prefix).
Num PyInt(std::string_view s, int base) {
  Num n;
  bool negative = false;
  if (!s.empty() && (s[0] == '+' || s[0] == '-')) {
    negative = s[0] == '-';
    s.remove_prefix(1);
  }
  bool prefix = false;
  if (base == 8 && s.size() >= 2 && s[0] == '0' && (s[1] == 'o' || s[1] == 'O')) {
    s.remove_prefix(2);
    prefix = true;
  }
  if (prefix && !s.empty() && s[0] == '_') s.remove_prefix(1);
  if (s.empty()) return n;
  bool overflow = false, last_underscore = true;  // no leading '_'
  uint64_t v = 0;
  for (char c : s) {
    if (c == '_') {
      if (last_underscore) return n;
      last_underscore = true;
      continue;
    }
    if (c < '0' || c >= '0' + base) return n;
    last_underscore = false;
    overflow |= __builtin_mul_overflow(v, static_cast<uint64_t>(base), &v);
    overflow |= __builtin_add_overflow(v, static_cast<uint64_t>(c - '0'), &v);
  }
  if (last_underscore) return n;
  n.value = v;
  n.form = overflow || v > static_cast<uint64_t>(INT64_MAX) ? NumForm::kOverflow
           : negative && v != 0                             ? NumForm::kNegative
                                                            : NumForm::kLax;
  return n;
}

// PyNti mirrors tarfile's nti(): base-256 when the first byte is 0x80/0xFF,
// else int(nts(field).strip() or "0", 8). Canonical means spaces, octal
// digits, spaces before the NUL (what every writer produces).
Num PyNti(std::span<const uint8_t> f) {
  Num n;
  if (f[0] == 0x80) {
    uint64_t v = 0;
    bool overflow = false;
    for (size_t i = 1; i < f.size(); ++i) {
      overflow |= __builtin_mul_overflow(v, uint64_t{256}, &v);
      v |= f[i];
    }
    n.value = v;
    n.form = overflow || v > static_cast<uint64_t>(INT64_MAX) ? NumForm::kOverflow
                                                               : NumForm::kCanonical;
    return n;
  }
  if (f[0] == 0xFF) {
    n.form = NumForm::kNegative;
    return n;
  }
  const std::string text = CStr(f);
  for (unsigned char c : text) {
    if (c >= 0x80) return n;  // nts(..., "ascii", "strict") raises
  }
  const std::string_view s = PyStrip(text);
  if (s.empty()) {
    n.form = NumForm::kCanonical;
    for (char c : text) {
      if (c != ' ') n.form = NumForm::kLax;
    }
    return n;
  }
  n = PyInt(s, 8);
  if (n.form == NumForm::kLax) {
    // Canonical: only ' ' around plain octal digits.
    const size_t first = text.find_first_not_of(' ');
    const size_t last = text.find_last_not_of(' ');
    const std::string_view core_text = std::string_view(text).substr(first, last - first + 1);
    if (core_text.find_first_not_of("01234567") == std::string_view::npos) {
      n.form = NumForm::kCanonical;
    }
  }
  return n;
}

// ChecksumOk: tarfile accepts the stored sum if it equals the unsigned or
// the signed byte sum with the checksum field read as spaces.
bool ChecksumOk(std::span<const uint8_t> blk, uint64_t stored) {
  int64_t unsigned_sum = 256, signed_sum = 256;
  for (size_t i = 0; i < kBlock; ++i) {
    if (i >= 148 && i < 156) continue;
    unsigned_sum += blk[i];
    signed_sum += static_cast<int8_t>(blk[i]);
  }
  return static_cast<int64_t>(stored) == unsigned_sum ||
         static_cast<int64_t>(stored) == signed_sum;
}


std::string RStripSlash(std::string s) {
  while (!s.empty() && s.back() == '/') s.pop_back();
  return s;
}

bool StartsWith(std::string_view s, std::string_view p) {
  return s.size() >= p.size() && s.substr(0, p.size()) == p;
}

// A Python dict of PAX keywords: assignment keeps the first position.
using PaxDict = std::vector<std::pair<std::string, std::string>>;

void PaxSet(PaxDict* d, std::string key, std::string value) {
  for (auto& kv : *d) {
    if (kv.first == key) {
      kv.second = std::move(value);
      return;
    }
  }
  d->emplace_back(std::move(key), std::move(value));
}

const std::string* PaxGet(const PaxDict& d, std::string_view key) {
  for (const auto& kv : d) {
    if (kv.first == key) return &kv.second;
  }
  return nullptr;
}

// One extension header ('L', 'K', 'x'/'X', 'g') in front of a member.
struct Ext {
  char type = 0;
  uint64_t offset = 0;
  std::string text;  // 'L'/'K': the name tarfile reads
  PaxDict dict;      // 'x': the globals in force plus its own records
};

TarType TypeOf(char t) {
  switch (t) {
    case '0': case '\0': case '7': return TarType::kRegular;
    case '1': return TarType::kHardlink;
    case '2': return TarType::kSymlink;
    case '3': return TarType::kCharDevice;
    case '4': return TarType::kBlockDevice;
    case '5': return TarType::kDirectory;
    case '6': return TarType::kFifo;
    default: return TarType::kUnknown;
  }
}

// PaxSize mirrors _apply_pax_info for "size": int(value), 0 on ValueError.
// Non-ASCII text (int() takes Unicode digits) is not modelled: nullopt.
std::optional<Num> PaxSize(const std::string& value) {
  for (unsigned char c : value) {
    if (c >= 0x80) return std::nullopt;
  }
  Num n = PyInt(PyStrip(value), 10);
  if (n.form == NumForm::kInvalid) return Num{NumForm::kInvalid, 0};
  if (n.form == NumForm::kLax && !value.empty() &&
      value.find_first_not_of("0123456789") == std::string::npos) {
    n.form = NumForm::kCanonical;
  }
  return n;
}

// Normalize is posixpath.normpath for the names _find_link_target compares.
std::string Normalize(std::string_view path) {
  if (path.empty()) return ".";
  const bool absolute = path[0] == '/';
  const bool two = absolute && path.size() >= 2 && path[1] == '/' &&
                   (path.size() == 2 || path[2] != '/');
  std::vector<std::string_view> parts;
  size_t start = 0;
  while (start <= path.size()) {
    size_t end = path.find('/', start);
    if (end == std::string_view::npos) end = path.size();
    std::string_view c = path.substr(start, end - start);
    start = end + 1;
    if (c.empty() || c == ".") continue;
    if (c != ".." || (!absolute && parts.empty()) || (!parts.empty() && parts.back() == "..")) {
      parts.push_back(c);
    } else if (!parts.empty()) {
      parts.pop_back();
    }  // else: ".." at the root of an absolute path is dropped
  }
  std::string out = absolute ? (two ? "//" : "/") : "";
  for (size_t i = 0; i < parts.size(); ++i) {
    if (i) out += '/';
    out += parts[i];
  }
  return out.empty() ? "." : out;
}

std::string DirName(const std::string& p) {
  const size_t slash = p.rfind('/');
  if (slash == std::string::npos) return "";
  std::string head = p.substr(0, slash + 1);
  if (head.find_first_not_of('/') != std::string::npos) head = RStripSlash(head);
  return head;
}

}  // namespace

std::string_view TarTypeName(TarType t) {
  switch (t) {
    case TarType::kRegular: return "regular";
    case TarType::kDirectory: return "directory";
    case TarType::kSymlink: return "symlink";
    case TarType::kHardlink: return "hardlink";
    case TarType::kCharDevice: return "char-device";
    case TarType::kBlockDevice: return "block-device";
    case TarType::kFifo: return "fifo";
    case TarType::kUnknown: return "unknown";
  }
  return "unknown";
}

bool LooksLikeTar(std::span<const uint8_t> head) {
  if (head.size() < kBlock) return false;
  auto blk = head.first(kBlock);
  if (std::all_of(blk.begin(), blk.end(), [](uint8_t b) { return b == 0; })) return false;
  const Num sum = PyNti(blk.subspan(148, 8));
  if (sum.form != NumForm::kCanonical && sum.form != NumForm::kLax) return false;
  return ChecksumOk(blk, sum.value);
}

core::Result<TarArchive> ReadTar(const Source& src, const TarLimits& limits,
                                 std::vector<Finding>* findings) {
  TarArchive tar;
  const uint64_t size = src.size();
  PaxDict globals;
  std::vector<Ext> chain;
  uint64_t pos = 0;
  uint64_t chain_start = 0;
  uint64_t member_count = 0;

  // Stop: tarfile raises (at offset 0 or inside a chain: TarError) or ends
  // the listing silently (a later header).
  auto fail_or_end = [&](const std::string& why) {
    if (chain_start == 0 || !chain.empty()) {
      tar.loader_fails = true;
      tar.loader_error = why;
    }
  };

  for (;;) {
    if (chain.empty()) chain_start = pos;
    if (pos >= size) {
      tar.end_reason = "end of file";
      if (!chain.empty() || pos == 0) {
        fail_or_end(pos == 0 ? "empty file" : "archive ends after an extension header");
        Add(findings, "MG-TAR-MALFORMED", Severity::kHigh,
            pos == 0 ? "empty file" : "archive ends after an extension header; tarfile raises",
            std::min(pos, size));
      }
      break;
    }
    if (size - pos < kBlock) {
      tar.end_reason = "end of file";
      Add(findings, "MG-TAR-MALFORMED", Severity::kHigh,
          "truncated header: " + N(size - pos) + " bytes at the end of the file", pos);
      fail_or_end("truncated header");
      break;
    }
    auto blk_r = src.ReadVec(pos, kBlock);
    if (!blk_r.ok()) return blk_r.error();
    const std::vector<uint8_t>& blk = blk_r.value();
    const std::span<const uint8_t> b(blk);
    if (std::all_of(blk.begin(), blk.end(), [](uint8_t x) { return x == 0; })) {
      tar.end_reason = "zero block";
      if (!chain.empty()) {
        Add(findings, "MG-TAR-MALFORMED", Severity::kHigh,
            "end-of-archive block right after an extension header; tarfile raises", pos);
        fail_or_end("extension header without a member");
      }
      break;
    }

    // Numeric fields: tarfile rejects the whole header if any fails.
    struct Field {
      const char* name;
      size_t at, len;
    };
    static constexpr std::array<Field, 8> kFields = {{{"checksum", 148, 8},
                                                      {"mode", 100, 8},
                                                      {"uid", 108, 8},
                                                      {"gid", 116, 8},
                                                      {"size", 124, 12},
                                                      {"mtime", 136, 12},
                                                      {"devmajor", 329, 8},
                                                      {"devminor", 337, 8}}};
    std::array<Num, 8> nums;
    bool header_ok = true;
    for (size_t i = 0; i < kFields.size() && header_ok; ++i) {
      const Field& f = kFields[i];
      nums[i] = PyNti(b.subspan(f.at, f.len));
      const NumForm form = nums[i].form;
      if (form == NumForm::kInvalid || form == NumForm::kOverflow ||
          (form == NumForm::kNegative && i == 4)) {
        Add(findings, "MG-TAR-BAD-NUMBER", Severity::kHigh,
            std::string(f.name) + " field of the header at " + N(pos) +
                (form == NumForm::kInvalid    ? " is not a number tarfile reads"
                 : form == NumForm::kOverflow ? " overflows 63 bits"
                                              : " is negative") +
                (chain_start == 0 || !chain.empty()
                     ? "; tarfile cannot open the archive"
                     : "; tarfile ends the archive here and ignores the " + N(size - pos) +
                           " bytes from here on"),
            pos + f.at);
        header_ok = false;
      } else if (form == NumForm::kLax || form == NumForm::kNegative) {
        Add(findings, "MG-TAR-BAD-NUMBER", Severity::kHigh,
            std::string(f.name) + " field of the header at " + N(pos) +
                " is not plain octal (tarfile reads it as " +
                (form == NumForm::kNegative ? std::string("a negative number")
                                            : N(nums[i].value)) +
                "; other readers may not)",
            pos + f.at);
      }
    }
    if (header_ok && !ChecksumOk(b, nums[0].value)) {
      Add(findings, "MG-TAR-BAD-CHECKSUM", Severity::kHigh,
          "header at " + N(pos) + " fails its checksum" +
              (chain_start == 0 || !chain.empty()
                   ? "; tarfile cannot open the archive"
                   : "; tarfile ends the archive here and ignores the " + N(size - pos) +
                         " bytes from here on"),
          pos + 148);
      header_ok = false;
    }
    if (!header_ok) {
      tar.end_reason = "invalid header";
      fail_or_end("invalid header at " + N(pos));
      break;
    }

    const char typeflag = static_cast<char>(b[156]);
    const uint64_t ustar_size = nums[4].value;
    const uint64_t data_offset = pos + kBlock;

    if (typeflag == 'L' || typeflag == 'K' || typeflag == 'x' || typeflag == 'X' ||
        typeflag == 'g') {
      if (chain.size() >= limits.max_extension_chain) {
        Add(findings, "MG-TAR-LIMIT", Severity::kHigh,
            "more than " + N(limits.max_extension_chain) +
                " extension headers before one member (limit max_extension_chain)",
            pos);
        tar.end_reason = "limit";
        break;
      }
      const bool is_name = typeflag == 'L' || typeflag == 'K';
      const uint64_t cap = is_name ? limits.max_long_name_bytes : limits.max_pax_bytes;
      if (ustar_size > cap) {
        Add(findings, "MG-TAR-LIMIT", Severity::kHigh,
            std::string(is_name ? "long name record" : "PAX header") + " of " + N(ustar_size) +
                " bytes exceeds " + N(cap) +
                (is_name ? " (limit max_long_name_bytes)" : " (limit max_pax_bytes)"),
            pos);
        tar.end_reason = "limit";
        break;
      }
      uint64_t padded = 0;
      (void)BlockUp(ustar_size, &padded);  // ustar_size <= cap
      // tarfile reads the padded blocks, short at the end of the file.
      const uint64_t avail = std::min<uint64_t>(padded, size - data_offset);
      auto data_r = src.ReadVec(data_offset, avail);
      if (!data_r.ok()) return data_r.error();
      const std::vector<uint8_t>& data = data_r.value();
      Ext ext;
      ext.type = typeflag;
      ext.offset = pos;
      if (is_name) {
        ext.text = CStr(data);
        const std::string declared =
            CStr(std::span<const uint8_t>(data).first(std::min<uint64_t>(ustar_size, avail)));
        if (ext.text != declared) {
          Add(findings, "MG-TAR-MALFORMED", Severity::kHigh,
              "long name record at " + N(pos) +
                  " has no NUL within its size; tarfile reads the name on into its padding",
              data_offset);
        }
      } else {
        // The strict record parser: "%d %s=%s\n" records until a NUL or the
        // end of the padded buffer. Anything it rejects is InvalidHeaderError.
        PaxDict own;
        size_t p = 0;
        bool bad = false;
        std::string why;
        while (p < data.size() && data[p] != 0) {
          size_t q = p;
          uint64_t len = 0;
          while (q < data.size() && q - p < 20 && data[q] >= '0' && data[q] <= '9') {
            len = len * 10 + (data[q] - '0');
            ++q;
          }
          if (q == p || q >= data.size() || data[q] != ' ') {
            bad = true;
            why = "record length";
            break;
          }
          if (len < 5 || len > data.size() - p) {
            bad = true;
            why = "record length out of range";
            break;
          }
          const size_t last = p + len - 1;
          if (q + 1 > last) {
            bad = true;
            why = "record framing";
            break;
          }
          const std::string kv(reinterpret_cast<const char*>(data.data() + q + 1), last - q - 1);
          const size_t eq = kv.find('=');
          if (eq == std::string::npos || eq == 0 || data[last] != '\n') {
            bad = true;
            why = "record framing";
            break;
          }
          if (p + len > ustar_size) {
            Add(findings, "MG-TAR-PAX-MALFORMED", Severity::kHigh,
                "PAX record at " + N(data_offset + p) +
                    " lies in the header's padding, past its declared size " + N(ustar_size) +
                    " (tarfile reads it; other readers do not)",
                data_offset + p);
          }
          std::string key = kv.substr(0, eq), value = kv.substr(eq + 1);
          if (PaxGet(own, key) != nullptr) {
            Add(findings, "MG-TAR-PAX-MALFORMED", Severity::kHigh,
                "PAX keyword " + core::Quoted(key) + " appears twice in the header at " + N(pos) +
                    " (tarfile takes the last)",
                data_offset + p);
          }
          PaxSet(&own, std::move(key), std::move(value));
          p += len;
        }
        if (bad) {
          Add(findings, "MG-TAR-PAX-MALFORMED", Severity::kHigh,
              "PAX header at " + N(pos) + ": bad " + why + " at " + N(data_offset + p) +
                  (chain_start == pos && chain_start != 0
                       ? "; tarfile ends the archive here"
                       : "; tarfile cannot open the archive"),
              data_offset + p);
          tar.end_reason = "invalid header";
          fail_or_end("invalid PAX header at " + N(pos));
          break;
        }
        for (const auto& kv : own) {
          if (StartsWith(kv.first, "GNU.sparse.")) {
            Add(findings, "MG-TAR-UNSUPPORTED", Severity::kHigh,
                "PAX header at " + N(pos) + " describes a GNU sparse member, which is not analyzed",
                pos);
            tar.end_reason = "unsupported";
            break;
          }
        }
        if (tar.end_reason == "unsupported") break;
        if (typeflag == 'g') {
          for (const auto& kv : own) {
            if (kv.first == "path" || kv.first == "linkpath" || kv.first == "size") {
              Add(findings, "MG-TAR-PAX-GLOBAL", Severity::kHigh,
                  "global PAX header at " + N(pos) + " sets " + core::Quoted(kv.first) +
                      " for every following member",
                  pos);
            }
            PaxSet(&globals, kv.first, kv.second);
          }
        } else {
          ext.dict = globals;
          for (auto& kv : own) PaxSet(&ext.dict, std::move(kv.first), std::move(kv.second));
        }
      }
      if (typeflag != 'g') chain.push_back(std::move(ext));
      pos = data_offset + avail;  // tarfile reads on from here
      if (padded > avail) pos = size;
      continue;
    }
    if (typeflag == 'S') {
      Add(findings, "MG-TAR-UNSUPPORTED", Severity::kHigh,
          "GNU sparse member at " + N(pos) + " is not analyzed", pos);
      tar.end_reason = "unsupported";
      break;
    }

    // A member header.
    if (member_count >= limits.max_members) {
      Add(findings, "MG-TAR-LIMIT", Severity::kHigh,
          "more than " + N(limits.max_members) + " members (limit max_members)", pos);
      tar.end_reason = "limit";
      break;
    }
    ++member_count;
    TarMember m;
    m.typeflag = typeflag;
    m.type = TypeOf(typeflag);
    m.header_offset = chain_start;
    m.member_header_offset = pos;
    m.data_offset = data_offset;
    m.size = ustar_size;
    m.name = CStr(b.subspan(0, 100));
    m.linkname = CStr(b.subspan(157, 100));
    const std::string prefix = CStr(b.subspan(345, 155));
    if (typeflag == '\0' && !m.name.empty() && m.name.back() == '/') m.type = TarType::kDirectory;
    if (m.type == TarType::kDirectory) m.name = RStripSlash(m.name);
    if (!prefix.empty()) m.name = prefix + "/" + m.name;
    const std::string ustar_name = m.name;
    const bool skips_data = m.type == TarType::kRegular || m.type == TarType::kUnknown;

    bool unmodelled = false;
    auto apply = [&](const PaxDict& d) {
      for (const auto& [key, value] : d) {
        if (key == "path") {
          m.name = RStripSlash(value);
        } else if (key == "linkpath") {
          m.linkname = value;
        } else if (key == "size") {
          auto n = PaxSize(value);
          if (!n || n->form == NumForm::kNegative || n->form == NumForm::kOverflow) {
            unmodelled = true;
          } else {
            if (n->form != NumForm::kCanonical) {
              Add(findings, "MG-TAR-PAX-MALFORMED", Severity::kHigh,
                  "PAX size " + core::Quoted(value) + " for the member at " + N(pos) +
                      " is not plain decimal (tarfile reads " + N(n->value) + ")",
                  pos);
            }
            m.size = n->value;
          }
        }
      }
    };
    // _proc_builtin: the skip is computed, then globals are applied.
    uint64_t skip_size = ustar_size;
    apply(globals);
    if (m.type == TarType::kDirectory) m.name = RStripSlash(m.name);
    // The chain, innermost first: the first header of the chain wins.
    int names = 0, paxes = 0, links = 0;
    for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
      if (it->type == 'L') {
        ++names;
        m.name = it->text;
        if (m.type == TarType::kDirectory && !m.name.empty() && m.name.back() == '/') {
          m.name.pop_back();
        }
      } else if (it->type == 'K') {
        ++links;
        m.linkname = it->text;
      } else {
        ++paxes;
        apply(it->dict);
        if (PaxGet(it->dict, "size") != nullptr) skip_size = m.size;
        if (PaxGet(it->dict, "path") != nullptr) ++names;
        if (PaxGet(it->dict, "linkpath") != nullptr) ++links;
      }
    }
    if (unmodelled) {
      Add(findings, "MG-TAR-PAX-MALFORMED", Severity::kHigh,
          "PAX size for the member at " + N(pos) + " is negative, huge or not ASCII; not modelled",
          pos);
      tar.end_reason = "unsupported";
      break;
    }
    if (names > 1 || links > 1 || paxes > 1) {
      Add(findings, "MG-TAR-PAX-MISMATCH", Severity::kHigh,
          "member at " + N(pos) + " has several long-name/PAX headers (tarfile takes the "
          "first, other readers the last)",
          chain_start, m.name);
    }
    if (!chain.empty()) {
      if (m.name != ustar_name && !ustar_name.empty() && !StartsWith(m.name, ustar_name)) {
        Add(findings, "MG-TAR-PAX-MISMATCH", Severity::kHigh,
            "extended name " + core::Quoted(m.name) + " disagrees with the header's name " +
                core::Quoted(ustar_name),
            pos, m.name);
      }
    }
    if (skip_size != ustar_size && ustar_size != 0) {
      Add(findings, "MG-TAR-PAX-MISMATCH", Severity::kHigh,
          "PAX size " + N(skip_size) + " of " + core::Quoted(m.name) +
              " disagrees with the header's size " + N(ustar_size),
          pos, m.name);
    }
    if (m.size != skip_size && skips_data) {
      Add(findings, "MG-TAR-PAX-MISMATCH", Severity::kHigh,
          "global PAX size makes tarfile read " + N(m.size) + " bytes of " +
              core::Quoted(m.name) + " but skip " + N(skip_size),
          pos, m.name);
    }
    if (!skips_data && ustar_size != 0) {
      Add(findings, "MG-TAR-MALFORMED", Severity::kHigh,
          std::string(TarTypeName(m.type)) + " member " + core::Quoted(m.name) + " has size " +
              N(ustar_size) + "; tarfile skips no data for it, other readers skip its blocks",
          pos + 124, m.name);
    }
    if (m.type == TarType::kUnknown) {
      Add(findings, "MG-TAR-UNKNOWN-TYPE", Severity::kHigh,
          "member " + core::Quoted(m.name) + " has type " +
              core::Quoted(std::string(1, typeflag)) +
              ", which tarfile reads as a regular file and other readers may not",
          pos + 156, m.name);
    }

    uint64_t next = data_offset;
    bool overflow = false;
    if (skips_data) {
      uint64_t padded = 0;
      overflow = !BlockUp(skip_size, &padded) || __builtin_add_overflow(next, padded, &next);
    }
    m.data_in_bounds = data_offset <= size && m.size <= size - data_offset;

    if (const char* why = UnsafeNameReason(m.name)) {
      Add(findings, "MG-TAR-UNSAFE-NAME", Severity::kHigh,
          "member name " + core::Quoted(m.name) + ": " + why, pos, m.name);
    }
    if (m.type == TarType::kSymlink || m.type == TarType::kHardlink) {
      const char* target_why =
          m.type == TarType::kHardlink || m.linkname.empty() || m.linkname[0] == '/'
              ? UnsafeNameReason(m.linkname)
              : nullptr;
      if (m.type == TarType::kSymlink) {
        target_why = m.linkname.empty() ? "empty target"
                     : m.linkname[0] == '/' ? "absolute target"
                                            : nullptr;
        if (!target_why && Normalize(DirName(m.name) + "/" + m.linkname).rfind("..", 0) == 0) {
          target_why = "target leaves the archive";
        }
      }
      Add(findings, "MG-TAR-LINK", Severity::kHigh,
          std::string(m.type == TarType::kSymlink ? "symbolic" : "hard") + " link " +
              core::Quoted(m.name) + " -> " + core::Quoted(m.linkname) +
              (target_why ? std::string(" (") + target_why + ")" : std::string()) +
              ": a loader that extracts it writes or reads outside the archive",
          pos, m.name);
    } else if (m.type == TarType::kCharDevice || m.type == TarType::kBlockDevice ||
               m.type == TarType::kFifo) {
      Add(findings, "MG-TAR-SPECIAL", Severity::kHigh,
          std::string(TarTypeName(m.type)) + " member " + core::Quoted(m.name) +
              ": extracting it creates a device node or FIFO",
          pos, m.name);
    }

    if (overflow || next > size || (skips_data && !m.data_in_bounds)) {
      Add(findings, "MG-TAR-OUT-OF-BOUNDS", Severity::kHigh,
          "data of " + core::Quoted(m.name) + " (" + N(m.size) +
              " bytes, padded to whole blocks) runs past the end of the file; tarfile raises",
          data_offset, m.name);
      tar.members.push_back(std::move(m));
      tar.loader_fails = true;
      tar.loader_error = "unexpected end of data";
      tar.end_reason = "end of file";
      pos = size;
      break;
    }
    // Padding after the data: tarfile writes zeros; anything else is hidden.
    if (skips_data && next > data_offset + skip_size) {
      const uint64_t pad_at = data_offset + skip_size;
      auto pad = src.ReadVec(pad_at, next - pad_at);
      if (!pad.ok()) return pad.error();
      if (std::any_of(pad.value().begin(), pad.value().end(), [](uint8_t x) { return x != 0; })) {
        Add(findings, "MG-TAR-HIDDEN-DATA", Severity::kMedium,
            "non-zero bytes in the block padding after " + core::Quoted(m.name), pad_at, m.name);
      }
    }
    tar.members.push_back(std::move(m));
    chain.clear();
    pos = next;
  }
  tar.end_offset = std::min(pos, size);

  // Bytes after the end-of-archive block: tarfile never reads them.
  if (tar.end_reason == "zero block") {
    const uint64_t tail = size - pos;
    if (tail > limits.max_zero_tail_bytes) {
      Add(findings, "MG-TAR-HIDDEN-DATA", Severity::kHigh,
          N(tail) + " bytes after the end of the archive (more than max_zero_tail_bytes " +
              N(limits.max_zero_tail_bytes) + " of padding)",
          pos);
    } else {
      for (uint64_t at = pos; at < size;) {
        const uint64_t n = std::min<uint64_t>(size - at, 1 << 16);
        auto w = src.ReadVec(at, n);
        if (!w.ok()) return w.error();
        auto nz = std::find_if(w.value().begin(), w.value().end(), [](uint8_t x) { return x != 0; });
        if (nz != w.value().end()) {
          const uint64_t first = at + static_cast<uint64_t>(nz - w.value().begin());
          Add(findings, "MG-TAR-HIDDEN-DATA", Severity::kHigh,
              "non-zero bytes after the end of the archive at " + N(first) +
                  " (tarfile stops at the first zero block and never reads them)",
              first);
          break;
        }
        at += n;
      }
    }
  }

  // Duplicate names: getmember/extract take the last; other readers may
  // take the first or refuse.
  std::vector<size_t> order(tar.members.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return tar.members[a].name < tar.members[b].name;
  });
  for (size_t i = 1; i < order.size(); ++i) {
    const auto& m = tar.members[order[i]];
    if (m.name == tar.members[order[i - 1]].name) {
      Add(findings, "MG-TAR-DUPLICATE-NAME", Severity::kCritical,
          "member name " + core::Quoted(m.name) +
              " appears more than once; tarfile takes the last (at " + N(m.header_offset) + ")",
          m.header_offset, m.name);
    }
  }
  return tar;
}

const TarMember* ResolveTarMember(const TarArchive& tar, std::string_view name,
                                  TarAccess access) {
  const std::string want = RStripSlash(std::string(name));
  auto last_named = [&](const std::string& n, size_t limit, bool normalize) -> int64_t {
    const std::string target = normalize ? Normalize(n) : n;
    for (size_t i = limit; i-- > 0;) {
      const std::string& mn = tar.members[i].name;
      if ((normalize ? Normalize(mn) : mn) == target) return static_cast<int64_t>(i);
    }
    return -1;
  };
  int64_t idx = last_named(want, tar.members.size(), false);
  for (int hop = 0; idx >= 0 && hop <= kMaxLinkHops; ++hop) {
    const TarMember& m = tar.members[static_cast<size_t>(idx)];
    if (m.type == TarType::kSymlink) {
      if (access == TarAccess::kExtract) return nullptr;  // open() follows it on the host
      const std::string dir = DirName(m.name);
      const std::string link = dir.empty() ? m.linkname
                               : m.linkname.empty() ? dir
                                                    : dir + "/" + m.linkname;
      idx = last_named(link, tar.members.size(), true);
    } else if (m.type == TarType::kHardlink) {
      if (access == TarAccess::kExtract && UnsafeNameReason(m.linkname) != nullptr) {
        return nullptr;  // os.link(join(tmpdir, linkname)) names a host file
      }
      idx = last_named(m.linkname, static_cast<size_t>(idx), true);
    } else {
      return &m;
    }
  }
  return nullptr;
}

core::Result<std::vector<uint8_t>> ExtractTarMember(const Source& src, const TarMember& member,
                                                    uint64_t max_bytes) {
  if (!member.HasData() || !member.data_in_bounds) {
    return core::Error{core::Code::kStTruncated, member.data_offset,
                       "member " + core::Quoted(member.name) + " has no data inside the file"};
  }
  if (member.size > max_bytes) {
    return core::Error{core::Code::kStTruncated, member.data_offset,
                       "member " + core::Quoted(member.name) + " of " + N(member.size) +
                           " bytes exceeds " + N(max_bytes)};
  }
  return src.ReadVec(member.data_offset, member.size);
}

bool LooksLikeTorchTar(const TarArchive& tar) {
  bool s = false, t = false, p = false;
  for (const auto& m : tar.members) {
    s |= m.name == "storages";
    t |= m.name == "tensors";
    p |= m.name == "pickle";
  }
  return s && t && p;
}

TorchTarMembers FindTorchTarMembers(const TarArchive& tar, std::vector<Finding>* findings) {
  TorchTarMembers out;
  struct Want {
    const char* name;
    TarAccess access;
    const TarMember** slot;
  };
  const Want wants[] = {{"storages", TarAccess::kExtract, &out.storages},
                        {"tensors", TarAccess::kExtract, &out.tensors},
                        {"pickle", TarAccess::kExtractFile, &out.pickle}};
  for (const auto& w : wants) {
    const TarMember* named = nullptr;
    for (const auto& m : tar.members) {
      if (m.name == w.name) named = &m;
    }
    if (named == nullptr) continue;
    *w.slot = ResolveTarMember(tar, w.name, w.access);
    if (named->type != TarType::kSymlink && named->type != TarType::kHardlink) continue;
    if (*w.slot == nullptr) {
      Add(findings, "MG-TAR-LINK", Severity::kCritical,
          std::string("torch member \"") + w.name + "\" is a link the loader follows out of the "
          "archive (to " + core::Quoted(named->linkname) + "); the bytes it loads are not in the file",
          named->header_offset, named->name);
    } else {
      Add(findings, "MG-TAR-LINK", Severity::kHigh,
          std::string("torch member \"") + w.name + "\" is a link; the loader reads " +
              core::Quoted((*w.slot)->name),
          named->header_offset, named->name);
    }
  }
  return out;
}

// --- torch legacy member layout ---
namespace {

// ArgBytes: how many argument bytes opcode `op` takes after itself, for the
// fixed-width opcodes; -1 for a '\n'-terminated argument, -2 for a counted
// one (`count_width` bytes of little-endian length first), -3 if unknown.
int ArgBytes(uint8_t op, int* count_width) {
  *count_width = 0;
  switch (op) {
    // no argument
    case '(': case '.': case '0': case '1': case '2': case 'N': case 'R': case 'a':
    case 'b': case 'd': case 'e': case 'l': case 'o': case 's': case 't': case 'u':
    case ')': case ']': case '}': case 0x81: case 0x85: case 0x86: case 0x87: case 0x88:
    case 0x89: case 0x90: case 0x91: case 0x92: case 0x93: case 0x94: case 0x97:
    case 0x98: case 'Q': case 0x8f:
      return 0;
    case 'K': case 'h': case 'q': case 0x80: case 0x82: return 1;
    case 'M': case 0x83: return 2;
    case 'J': case 'j': case 'r': case 0x84: return 4;
    case 'G': case 0x95: return 8;
    case 'F': case 'I': case 'L': case 'S': case 'V': case 'P': case 'g': case 'p':
      return -1;
    case 'c': case 'i': return -4;  // two '\n'-terminated lines
    case 'U': case 'C': case 0x8c: *count_width = 1; return -2;
    case 'T': case 'X': case 'B': *count_width = 4; return -2;
    case 0x8a: *count_width = 1; return -2;  // LONG1
    case 0x8b: *count_width = 4; return -2;  // LONG4
    case 0x8d: case 0x8e: case 0x96: *count_width = 8; return -2;
    default: return -3;
  }
}

struct Walked {
  bool ok = false;
  uint64_t end = 0;                 // just past STOP
  std::optional<int64_t> int_value;  // the pickle is a lone int
  std::string storage_class;         // last GLOBAL/STACK_GLOBAL name ending "Storage"
};

// WalkPickle finds where the pickle starting at `at` ends (its STOP) by
// opcode lengths only; it also notes a lone int and torch storage globals.
Walked WalkPickle(std::span<const uint8_t> b, uint64_t at) {
  Walked w;
  uint64_t p = at;
  int value_ops = 0;
  std::optional<int64_t> value;
  std::string last_str[2];  // the last two strings pushed (STACK_GLOBAL's)
  std::string global_name;
  while (p < b.size()) {
    const uint8_t op = b[p++];
    int cw = 0;
    const int n = ArgBytes(op, &cw);
    if (n == -3) return w;
    std::span<const uint8_t> arg;
    if (n >= 0) {
      if (b.size() - p < static_cast<uint64_t>(n)) return w;
      arg = b.subspan(p, n);
      p += n;
    } else if (n == -1 || n == -4) {
      std::string lines[2];
      for (int i = 0; i < (n == -1 ? 1 : 2); ++i) {
        const auto from = b.begin() + static_cast<ptrdiff_t>(p);
        const auto nl = std::find(from, b.end(), uint8_t{'\n'});
        if (nl == b.end()) return w;
        lines[i].assign(from, nl);
        if (n == -1) arg = b.subspan(p, static_cast<size_t>(nl - from));
        p += static_cast<uint64_t>(nl - from) + 1;
      }
      if (n == -4) global_name = std::move(lines[1]);
    } else {
      if (b.size() - p < static_cast<uint64_t>(cw)) return w;
      uint64_t len = 0;
      for (int i = cw - 1; i >= 0; --i) len = (len << 8) | b[p + i];
      p += cw;
      if (len > b.size() - p) return w;
      arg = b.subspan(p, len);
      p += len;
      if (op == 0x8c || op == 'X' || op == 0x8d) {  // string pushed for STACK_GLOBAL
        last_str[0] = std::move(last_str[1]);
        last_str[1].assign(arg.begin(), arg.end());
      }
    }
    switch (op) {
      case 'K': value = arg[0]; ++value_ops; break;
      case 'M': value = arg[0] | (arg[1] << 8); ++value_ops; break;
      case 'J': {
        const uint32_t u = arg[0] | arg[1] << 8 | arg[2] << 16 | static_cast<uint32_t>(arg[3]) << 24;
        value = static_cast<int32_t>(u);
        ++value_ops;
        break;
      }
      case 'I': case 'L': {
        std::string s(arg.begin(), arg.end());
        if (!s.empty() && s.back() == 'L') s.pop_back();
        if (!s.empty() && s.size() <= 18 && s.find_first_not_of("0123456789") == std::string::npos) {
          value = std::stoll(s);
        } else {
          value.reset();
        }
        ++value_ops;
        break;
      }
      case 0x8a: {  // LONG1, little-endian two's complement
        if (arg.size() <= 8) {
          uint64_t u = 0;
          for (size_t i = arg.size(); i-- > 0;) u = (u << 8) | arg[i];
          if (!arg.empty() && (arg.back() & 0x80) && arg.size() < 8) u -= uint64_t{1} << (8 * arg.size());
          value = static_cast<int64_t>(u);
        }
        ++value_ops;
        break;
      }
      case 'c': case 'i':
        if (global_name.ends_with("Storage")) w.storage_class = global_name;
        ++value_ops;
        break;
      case 0x93:
        if (last_str[1].ends_with("Storage")) w.storage_class = last_str[1];
        ++value_ops;
        break;
      case 0x80: case 0x95: break;  // PROTO, FRAME
      case '.':
        w.ok = true;
        w.end = p;
        if (value_ops == 1 && value) w.int_value = value;
        return w;
      default: ++value_ops; break;
    }
  }
  return w;
}

uint64_t ElementBytes(std::string_view cls) {
  static constexpr std::pair<std::string_view, uint64_t> kSizes[] = {
      {"DoubleStorage", 8}, {"FloatStorage", 4},   {"HalfStorage", 2},
      {"BFloat16Storage", 2}, {"LongStorage", 8},  {"IntStorage", 4},
      {"ShortStorage", 2},  {"CharStorage", 1},    {"ByteStorage", 1},
      {"BoolStorage", 1},   {"ComplexDoubleStorage", 16}, {"ComplexFloatStorage", 8},
      {"QUInt8Storage", 1}, {"QInt8Storage", 1},   {"QInt32Storage", 4},
      {"QUInt4x2Storage", 1}, {"QUInt2x4Storage", 1}};
  for (const auto& [name, bytes] : kSizes) {
    if (cls == name) return bytes;
  }
  return 0;
}

uint64_t Le64(std::span<const uint8_t> b, uint64_t at) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | b[at + i];
  return v;
}

}  // namespace

TorchTarLayout SplitTorchTarMember(std::string_view member_name, std::span<const uint8_t> bytes,
                                   uint64_t member_base, std::vector<Finding>* findings) {
  TorchTarLayout out;
  const std::string member(member_name);
  uint64_t p = 0;
  // Stop: the loader fails here or we cannot follow it; the pickle machine
  // gets the rest (what runs before a failure still runs).
  auto stop = [&](const std::string& why, const char* role) {
    Add(findings, "MG-TAR-TORCH-LAYOUT", Severity::kHigh,
        "cannot follow the legacy loader through " + core::Quoted(member) + " at " + N(p) + ": " +
            why + "; the rest is analyzed as one pickle stream",
        member_base + p, member);
    if (p < bytes.size()) out.pickles.push_back({p, bytes.size(), role});
    out.consumed = bytes.size();
  };
  auto one = [&](const char* role) -> std::optional<Walked> {
    if (out.pickles.size() >= kMaxTorchPickles) {
      stop("more than " + N(kMaxTorchPickles) + " pickles", role);
      return std::nullopt;
    }
    Walked w = WalkPickle(bytes, p);
    if (!w.ok) {
      stop("no complete pickle", role);
      return std::nullopt;
    }
    out.pickles.push_back({p, w.end, role});
    p = w.end;
    return w;
  };

  if (member_name == "pickle") {
    auto w = one("object");
    if (!w) return out;
    out.complete = true;
    out.consumed = p;
    return out;
  }
  const bool storages = member_name == "storages";
  if (!storages && member_name != "tensors") {
    stop("not a legacy torch member", "object");
    return out;
  }
  auto count = one("count");
  if (!count) return out;
  if (!count->int_value || *count->int_value < 0) {
    stop("the count is not a plain non-negative int", "unknown");
    return out;
  }
  for (int64_t i = 0; i < *count->int_value; ++i) {
    auto args = one(storages ? "storage args" : "tensor args");
    if (!args) return out;
    if (storages) {
      const uint64_t elem = ElementBytes(args->storage_class);
      if (elem == 0) {
        stop("storage type " + core::Quoted(args->storage_class) + " has no known element size",
             "unknown");
        return out;
      }
      if (bytes.size() - p < 8) {
        stop("storage size truncated", "unknown");
        return out;
      }
      const uint64_t numel = Le64(bytes, p);
      uint64_t nbytes = 0;
      if (__builtin_mul_overflow(numel, elem, &nbytes) || nbytes > bytes.size() - p - 8) {
        stop("storage of " + N(numel) + " elements runs past the member", "unknown");
        return out;
      }
      p += 8 + nbytes;
    } else {
      if (bytes.size() - p < 8) {
        stop("tensor metadata truncated", "unknown");
        return out;
      }
      const uint32_t ndim = bytes[p] | bytes[p + 1] << 8 | bytes[p + 2] << 16 |
                            static_cast<uint32_t>(bytes[p + 3]) << 24;
      const uint64_t meta = 8 + 16 * static_cast<uint64_t>(ndim) + 8;
      if ((ndim & 0x80000000u) || meta > bytes.size() - p) {
        stop("tensor metadata of rank " + N(ndim) + " runs past the member", "unknown");
        return out;
      }
      p += meta;
    }
  }
  if (storages && !one("storage views")) return out;
  out.complete = true;
  out.consumed = p;
  return out;
}

}  // namespace modelgate::scanner
