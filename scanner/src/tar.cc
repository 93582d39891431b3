// Tar reading, strict, as Python's tarfile (Debian 12's 3.11, with the
// strict PAX record parser of CVE-2024-6232) lists archives: tarfile.py
// TarFile.next, TarInfo.frombuf, nti, _proc_builtin, _proc_gnulong,
// _proc_pax, _apply_pax_info, _find_link_target. What tarfile accepts but
// another reader may read differently is a finding.
//
// Numbers: tarfile reads every length and count as a Python int, which
// has no bound. Here each is read with checked arithmetic into sign and
// magnitude (Num); a magnitude of 2^64 or more is carried as "does not
// fit", never wrapped, and each use decides what tarfile does with it.
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
// The largest offset Python's seek() takes (off_t): past it, tarfile's
// seek to the next header raises ValueError.
constexpr uint64_t kMaxSeek = static_cast<uint64_t>(INT64_MAX);

void Add(std::vector<Finding>* out, const char* id, Severity sev, std::string message,
         uint64_t offset, const std::string& member = "") {
  out->push_back(MakeFinding(id, sev, std::move(message), offset, member));
}

std::string N(uint64_t v) { return std::to_string(v); }

// BlockUp is tarfile's _block(): `n` rounded up to whole blocks; false on
// overflow.
bool BlockUp(uint64_t n, uint64_t* out) {
  uint64_t up = 0;
  if (__builtin_add_overflow(n, kBlock - 1, &up)) return false;
  *out = up / kBlock * kBlock;
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

// kCanonical: what every writer produces; kLax: tarfile reads it, other
// readers may not; kInvalid: tarfile raises (InvalidHeaderError/ValueError).
enum class NumForm : uint8_t { kCanonical, kLax, kInvalid };

// Num is a Python int read from the file, as sign and magnitude. `fits` is
// false when the magnitude is 2^64 or more (then `magnitude` is unused).
struct Num {
  NumForm form = NumForm::kInvalid;
  bool negative = false;  // never set for zero
  bool fits = true;
  uint64_t magnitude = 0;

  bool Valid() const { return form != NumForm::kInvalid; }
  // Huge: |value| >= 2^63, past what off_t (and other tar readers) hold.
  bool Huge() const { return !fits || magnitude > kMaxSeek; }
  bool Equals(int64_t v) const {
    if (!fits || (v < 0) != negative) return false;
    const uint64_t mag =
        v < 0 ? static_cast<uint64_t>(-(v + 1)) + 1 : static_cast<uint64_t>(v);  // no INT64_MIN overflow
    return mag == magnitude;
  }
  bool operator==(const Num& o) const {
    return negative == o.negative && fits == o.fits && (!fits || magnitude == o.magnitude);
  }
  bool IsZero() const { return fits && magnitude == 0; }
  std::string Text() const {
    if (!fits) return negative ? "-2^64 or less" : "2^64 or more";
    return (negative ? "-" : "") + N(magnitude);
  }
};

// FoldBigEndian accumulates base-`radix` digits into `n` with checked
// arithmetic; a value past 2^64 - 1 clears `n->fits` and stops counting.
void FoldDigit(Num* n, uint64_t radix, uint64_t digit) {
  if (!n->fits) return;
  uint64_t v = 0;
  if (__builtin_mul_overflow(n->magnitude, radix, &v) ||
      __builtin_add_overflow(v, digit, &v)) {
    n->fits = false;
    return;
  }
  n->magnitude = v;
}

// PyInt mirrors int(s, base) for ASCII text already stripped: an optional
// sign, for base 8 an optional 0o prefix, digits with single underscores
// between them (and after the prefix). Any number of digits: Python ints
// have no bound.
Num PyInt(std::string_view s, int base) {
  Num invalid;
  Num n;
  n.form = NumForm::kLax;
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
  if (s.empty()) return invalid;
  bool last_underscore = true;  // no leading '_'
  for (char c : s) {
    if (c == '_') {
      if (last_underscore) return invalid;
      last_underscore = true;
      continue;
    }
    if (c < '0' || c >= '0' + base) return invalid;
    last_underscore = false;
    FoldDigit(&n, static_cast<uint64_t>(base), static_cast<uint64_t>(c - '0'));
  }
  if (last_underscore) return invalid;
  n.negative = negative && !(n.fits && n.magnitude == 0);
  return n;
}

// Base256 mirrors nti()'s GNU binary form: 0x80 then the value big-endian;
// 0xFF then the value as -(256^(len-1) - n), the two's complement.
Num Base256(std::span<const uint8_t> f) {
  Num n;
  n.form = NumForm::kCanonical;
  const bool negative = f[0] == 0xFF;
  if (!negative) {
    for (size_t i = 1; i < f.size(); ++i) FoldDigit(&n, 256, f[i]);
    return n;
  }
  // The magnitude is the two's complement of the digits: invert, add one.
  std::array<uint8_t, 16> mag{};
  const size_t len = f.size() - 1;  // at most 11 digits (12-byte fields)
  for (size_t i = 0; i < len; ++i) mag[i] = static_cast<uint8_t>(~f[i + 1]);
  bool carry = true;
  for (size_t i = len; i > 0 && carry; --i) carry = ++mag[i - 1] == 0;
  if (carry) FoldDigit(&n, 256, 1);  // all digits zero: 256^len itself
  for (size_t i = 0; i < len; ++i) FoldDigit(&n, 256, mag[i]);
  n.form = NumForm::kLax;  // GNU writes it only for negative times
  n.negative = true;       // the magnitude is at least 1
  return n;
}

// PyNti mirrors tarfile's nti(): base-256 when the first byte is 0x80/0xFF,
// else int(nts(field).strip() or "0", 8). Canonical means spaces, octal
// digits, spaces before the NUL (what every writer produces).
Num PyNti(std::span<const uint8_t> f) {
  if (f[0] == 0x80 || f[0] == 0xFF) return Base256(f);
  Num n;
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
// the signed byte sum (calc_chksums) with the checksum field read as
// spaces; the stored value is a signed Python int, so a negative checksum
// can match the signed sum.
bool ChecksumOk(std::span<const uint8_t> blk, const Num& stored) {
  int64_t unsigned_sum = 256, signed_sum = 256;
  for (size_t i = 0; i < kBlock; ++i) {
    if (i >= 148 && i < 156) continue;
    unsigned_sum += blk[i];
    signed_sum += static_cast<int8_t>(blk[i]);
  }
  return stored.Equals(unsigned_sum) || stored.Equals(signed_sum);
}

// int() of a decimal string of more digits than this raises ValueError
// (sys.int_info.default_max_str_digits, Python 3.11); PYTHONINTMAXSTRDIGITS
// or sys.set_int_max_str_digits() move it, so such a value is not modelled.
constexpr size_t kPyMaxStrDigits = 4300;

// PaxSize mirrors _apply_pax_info for "size": int(value), 0 on ValueError.
// nullopt, with `*unmodelled` saying why, for what depends on more than the
// bytes: non-ASCII text (int() takes Unicode digits and spaces) and more
// than kPyMaxStrDigits digits.
std::optional<Num> PaxSize(const std::string& value, const char** unmodelled) {
  for (unsigned char c : value) {
    if (c >= 0x80) {
      *unmodelled = "is not ASCII";
      return std::nullopt;
    }
  }
  if (static_cast<size_t>(std::count_if(value.begin(), value.end(), [](char c) {
        return c >= '0' && c <= '9';
      })) > kPyMaxStrDigits) {
    *unmodelled = "has more digits than Python's int() converts by default (4300)";
    return std::nullopt;
  }
  Num n = PyInt(PyStrip(value), 10);
  if (!n.Valid()) {
    Num zero;
    zero.form = NumForm::kInvalid;  // read as 0, reported as not decimal
    return zero;
  }
  if (!value.empty() && value.find_first_not_of("0123456789") == std::string::npos) {
    n.form = NumForm::kCanonical;
  }
  return n;
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

// The eight numeric fields frombuf() reads; tarfile rejects the header if
// any one fails to parse.
struct Field {
  const char* name;
  size_t at, len;
};
constexpr size_t kChecksum = 0;
constexpr size_t kSize = 4;
constexpr std::array<Field, 8> kFields = {{{"checksum", 148, 8},
                                           {"mode", 100, 8},
                                           {"uid", 108, 8},
                                           {"gid", 116, 8},
                                           {"size", 124, 12},
                                           {"mtime", 136, 12},
                                           {"devmajor", 329, 8},
                                           {"devminor", 337, 8}}};
using HeaderNums = std::array<Num, kFields.size()>;

enum class Next : uint8_t { kContinue, kStop };

// Lister is one ReadTar call: tarfile's TarFile.next() loop, one header
// chain at a time. Each step returns kStop with `tar_.end_reason` set, or
// an Error for I/O failures.
class Lister {
 public:
  Lister(const Source& src, const TarLimits& limits, std::vector<Finding>* findings)
      : src_(src), limits_(limits), findings_(findings), size_(src.size()) {}

  core::Result<TarArchive> Run() {
    for (;;) {
      auto next = Step();
      if (!next.ok()) return next.error();
      if (next.value() == Next::kStop) break;
    }
    tar_.end_offset = std::min(pos_, size_);
    if (tar_.end_reason == "zero block") {
      if (auto s = CheckTail(); !s.ok()) return s.error();
    }
    CheckDuplicates();
    return std::move(tar_);
  }

 private:
  // InChainOrFirst: an error here makes tarfile raise (ReadError at offset
  // 0, SubsequentHeaderError inside a chain) rather than end the listing.
  bool InChainOrFirst() const { return chain_start_ == 0 || !chain_.empty(); }

  // Fail: tarfile raises here, so torch.load falls back to pickle.load.
  void Fail(const std::string& why) {
    tar_.loader_fails = true;
    tar_.loader_error = why;
  }
  void FailOrEnd(const std::string& why) {
    if (InChainOrFirst()) Fail(why);
  }
  // Incomplete: this reader stops where tarfile would go on.
  Next Incomplete(const char* reason) {
    tar_.end_reason = reason;
    tar_.incomplete = true;
    return Next::kStop;
  }
  std::string StopNote() const {
    return InChainOrFirst() ? "; tarfile cannot open the archive"
                            : "; tarfile ends the archive here and ignores the " +
                                  N(size_ - pos_) + " bytes from here on";
  }

  core::Result<Next> Step();
  bool ReadNumbers(std::span<const uint8_t> b, HeaderNums* nums);
  core::Result<Next> Extension(char typeflag, const Num& size_num);
  bool ParsePax(const std::vector<uint8_t>& data, uint64_t declared, PaxDict* own);
  Next ApplyPax(char typeflag, PaxDict own, Ext* ext);
  core::Result<Next> Member(std::span<const uint8_t> b, const HeaderNums& nums);
  bool ApplyChain(TarMember* m, Num* size_num, Num* skip_num);
  void ReportMember(const TarMember& m, const std::string& ustar_name, const Num& ustar_num,
                    const Num& size_num, const Num& skip_num, bool skips_data);
  void ReportLinks(const TarMember& m);
  core::Status CheckPadding(const TarMember& m, uint64_t skip_size, uint64_t next);
  core::Status CheckTail();
  void CheckDuplicates();

  const Source& src_;
  const TarLimits& limits_;
  std::vector<Finding>* const findings_;
  const uint64_t size_;
  TarArchive tar_;
  PaxDict globals_;
  std::vector<Ext> chain_;
  uint64_t pos_ = 0;          // where tarfile reads the next header
  uint64_t chain_start_ = 0;  // the first header of the current chain
  uint64_t member_count_ = 0;
};

core::Result<Next> Lister::Step() {
  if (chain_.empty()) chain_start_ = pos_;
  if (pos_ >= size_) {
    tar_.end_reason = "end of file";
    if (!chain_.empty() || pos_ == 0) {
      FailOrEnd(pos_ == 0 ? "empty file" : "archive ends after an extension header");
      Add(findings_, "MG-TAR-MALFORMED", Severity::kHigh,
          pos_ == 0 ? "empty file" : "archive ends after an extension header; tarfile raises",
          std::min(pos_, size_));
    }
    return Next::kStop;
  }
  if (size_ - pos_ < kBlock) {
    tar_.end_reason = "end of file";
    Add(findings_, "MG-TAR-MALFORMED", Severity::kHigh,
        "truncated header: " + N(size_ - pos_) + " bytes at the end of the file", pos_);
    FailOrEnd("truncated header");
    return Next::kStop;
  }
  auto blk = src_.ReadVec(pos_, kBlock);
  if (!blk.ok()) return blk.error();
  const std::span<const uint8_t> b(blk.value());
  if (std::all_of(b.begin(), b.end(), [](uint8_t x) { return x == 0; })) {
    tar_.end_reason = "zero block";
    if (!chain_.empty()) {
      Add(findings_, "MG-TAR-MALFORMED", Severity::kHigh,
          "end-of-archive block right after an extension header; tarfile raises", pos_);
      FailOrEnd("extension header without a member");
    }
    return Next::kStop;
  }
  HeaderNums nums;
  if (!ReadNumbers(b, &nums)) {
    tar_.end_reason = "invalid header";
    FailOrEnd("invalid header at " + N(pos_));
    return Next::kStop;
  }
  const char typeflag = static_cast<char>(b[156]);
  if (typeflag == 'L' || typeflag == 'K' || typeflag == 'x' || typeflag == 'X' ||
      typeflag == 'g') {
    return Extension(typeflag, nums[kSize]);
  }
  if (typeflag == 'S') {
    Add(findings_, "MG-TAR-UNSUPPORTED", Severity::kHigh,
        "GNU sparse member at " + N(pos_) + " is not analyzed", pos_);
    return Incomplete("unsupported");
  }
  return Member(b, nums);
}

// ReadNumbers parses the numeric fields as frombuf() does and checks the
// checksum; false when tarfile rejects the header. Values tarfile reads
// but other readers may not (lax text, negative, 2^63 or more) are
// reported and kept: tarfile has no bound on a Python int.
bool Lister::ReadNumbers(std::span<const uint8_t> b, HeaderNums* nums) {
  for (size_t i = 0; i < kFields.size(); ++i) {
    const Field& f = kFields[i];
    Num& n = (*nums)[i];
    n = PyNti(b.subspan(f.at, f.len));
    const std::string where = std::string(f.name) + " field of the header at " + N(pos_);
    if (!n.Valid()) {
      Add(findings_, "MG-TAR-BAD-NUMBER", Severity::kHigh,
          where + " is not a number tarfile reads" + StopNote(), pos_ + f.at);
      return false;
    }
    if (n.Huge()) {
      Add(findings_, "MG-TAR-BAD-NUMBER", Severity::kHigh,
          where + " holds " + n.Text() + " (" + (n.negative ? "-" : "") +
              "2^63 or more): tarfile reads it exactly, other readers wrap or refuse it",
          pos_ + f.at);
    } else if (n.form == NumForm::kLax || n.negative) {
      Add(findings_, "MG-TAR-BAD-NUMBER", Severity::kHigh,
          where + " is not plain octal (tarfile reads it as " + n.Text() +
              "; other readers may not)",
          pos_ + f.at);
    }
  }
  if (!ChecksumOk(b, (*nums)[kChecksum])) {
    Add(findings_, "MG-TAR-BAD-CHECKSUM", Severity::kHigh,
        "header at " + N(pos_) + " fails its checksum" + StopNote(), pos_ + 148);
    return false;
  }
  return true;
}

// Extension reads one 'L'/'K' (GNU long name) or 'x'/'X'/'g' (PAX) header
// and its data, as _proc_gnulong and _proc_pax do: the data is
// _block(size) bytes, short at the end of the file.
core::Result<Next> Lister::Extension(char typeflag, const Num& size_num) {
  if (chain_.size() >= limits_.max_extension_chain) {
    Add(findings_, "MG-TAR-LIMIT", Severity::kHigh,
        "more than " + N(limits_.max_extension_chain) +
            " extension headers before one member (limit max_extension_chain)",
        pos_);
    return Incomplete("limit");
  }
  const bool is_name = typeflag == 'L' || typeflag == 'K';
  const char* what = is_name ? "long name record" : "PAX header";
  if (size_num.negative) {
    // read(_block(size)) reads nothing or, below -511, the whole rest.
    Add(findings_, "MG-TAR-UNSUPPORTED", Severity::kHigh,
        std::string(what) + " at " + N(pos_) + " has the negative size " + size_num.Text() +
            "; not modelled",
        pos_ + 124);
    return Incomplete("unsupported");
  }
  const uint64_t cap = is_name ? limits_.max_long_name_bytes : limits_.max_pax_bytes;
  if (!size_num.fits || size_num.magnitude > cap) {
    Add(findings_, "MG-TAR-LIMIT", Severity::kHigh,
        std::string(what) + " of " + size_num.Text() + " bytes exceeds " + N(cap) +
            (is_name ? " (limit max_long_name_bytes)" : " (limit max_pax_bytes)"),
        pos_);
    return Incomplete("limit");
  }
  const uint64_t ustar_size = size_num.magnitude;
  const uint64_t data_offset = pos_ + kBlock;  // pos_ <= size_ - kBlock
  uint64_t padded = 0;
  if (!BlockUp(ustar_size, &padded)) padded = UINT64_MAX;  // unreachable: ustar_size <= cap
  const uint64_t avail = std::min<uint64_t>(padded, size_ - data_offset);
  auto data_r = src_.ReadVec(data_offset, avail);
  if (!data_r.ok()) return data_r.error();
  const std::vector<uint8_t>& data = data_r.value();
  Ext ext;
  ext.type = typeflag;
  ext.offset = pos_;
  if (is_name) {
    ext.text = CStr(data);
    const std::string declared =
        CStr(std::span<const uint8_t>(data).first(std::min<uint64_t>(ustar_size, avail)));
    if (ext.text != declared) {
      Add(findings_, "MG-TAR-MALFORMED", Severity::kHigh,
          "long name record at " + N(pos_) +
              " has no NUL within its size; tarfile reads the name on into its padding",
          data_offset);
    }
  } else {
    PaxDict own;
    if (!ParsePax(data, ustar_size, &own)) return Next::kStop;
    if (ApplyPax(typeflag, std::move(own), &ext) == Next::kStop) return Next::kStop;
  }
  if (typeflag != 'g') chain_.push_back(std::move(ext));
  pos_ = data_offset + avail;  // tarfile reads on from here; avail <= size_ - data_offset
  if (padded > avail) pos_ = size_;
  return Next::kContinue;
}

// ParsePax is _proc_pax's strict record parser: "%d %s=%s\n" records until
// a NUL or the end of the padded buffer. The length is matched by
// ([0-9]{1,20}) and read as a Python int, so 20 digits never wrap: a
// length past the buffer is InvalidHeaderError like any other. False (with
// the finding and the stop recorded) when tarfile rejects the header.
bool Lister::ParsePax(const std::vector<uint8_t>& data, uint64_t declared, PaxDict* own) {
  const uint64_t data_offset = pos_ + kBlock;
  size_t p = 0;
  const char* why = nullptr;
  while (p < data.size() && data[p] != 0) {
    size_t q = p;
    Num len;
    while (q < data.size() && q - p < 20 && data[q] >= '0' && data[q] <= '9') {
      FoldDigit(&len, 10, data[q] - '0');
      ++q;
    }
    if (q == p || q >= data.size() || data[q] != ' ') {
      why = "record length";
      break;
    }
    if (!len.fits || len.magnitude < 5 || len.magnitude > data.size() - p) {
      why = "record length out of range";
      break;
    }
    const size_t last = p + len.magnitude - 1;  // <= data.size() - 1
    if (q + 1 > last) {
      why = "record framing";
      break;
    }
    const std::string kv(reinterpret_cast<const char*>(data.data() + q + 1), last - q - 1);
    const size_t eq = kv.find('=');
    if (eq == std::string::npos || eq == 0 || data[last] != '\n') {
      why = "record framing";
      break;
    }
    if (len.magnitude > declared || p > declared - len.magnitude) {
      Add(findings_, "MG-TAR-PAX-MALFORMED", Severity::kHigh,
          "PAX record at " + N(data_offset + p) +
              " lies in the header's padding, past its declared size " + N(declared) +
              " (tarfile reads it; other readers do not)",
          data_offset + p);
    }
    std::string key = kv.substr(0, eq), value = kv.substr(eq + 1);
    if (PaxGet(*own, key) != nullptr) {
      Add(findings_, "MG-TAR-PAX-MALFORMED", Severity::kHigh,
          "PAX keyword " + core::Quoted(key) + " appears twice in the header at " + N(pos_) +
              " (tarfile takes the last)",
          data_offset + p);
    }
    PaxSet(own, std::move(key), std::move(value));
    p += len.magnitude;
  }
  if (why == nullptr) return true;
  Add(findings_, "MG-TAR-PAX-MALFORMED", Severity::kHigh,
      "PAX header at " + N(pos_) + ": bad " + why + " at " + N(data_offset + p) +
          (InChainOrFirst() ? "; tarfile cannot open the archive"
                            : "; tarfile ends the archive here"),
      data_offset + p);
  tar_.end_reason = "invalid header";
  FailOrEnd("invalid PAX header at " + N(pos_));
  return false;
}

// ApplyPax files the records: a global header updates the globals in
// force, an extended one carries them plus its own to the member.
Next Lister::ApplyPax(char typeflag, PaxDict own, Ext* ext) {
  for (const auto& kv : own) {
    if (StartsWith(kv.first, "GNU.sparse.")) {
      Add(findings_, "MG-TAR-UNSUPPORTED", Severity::kHigh,
          "PAX header at " + N(pos_) + " describes a GNU sparse member, which is not analyzed",
          pos_);
      return Incomplete("unsupported");
    }
  }
  if (typeflag == 'g') {
    for (const auto& kv : own) {
      if (kv.first == "path" || kv.first == "linkpath" || kv.first == "size") {
        Add(findings_, "MG-TAR-PAX-GLOBAL", Severity::kHigh,
            "global PAX header at " + N(pos_) + " sets " + core::Quoted(kv.first) +
                " for every following member",
            pos_);
      }
      PaxSet(&globals_, kv.first, kv.second);
    }
    return Next::kContinue;
  }
  ext->dict = globals_;
  for (auto& kv : own) PaxSet(&ext->dict, std::move(kv.first), std::move(kv.second));
  return Next::kContinue;
}

// Member lists one member header with its chain applied, as _proc_builtin
// and the _proc_gnulong/_proc_pax callers leave it.
core::Result<Next> Lister::Member(std::span<const uint8_t> b, const HeaderNums& nums) {
  if (member_count_ >= limits_.max_members) {
    Add(findings_, "MG-TAR-LIMIT", Severity::kHigh,
        "more than " + N(limits_.max_members) + " members (limit max_members)", pos_);
    return Incomplete("limit");
  }
  ++member_count_;
  const char typeflag = static_cast<char>(b[156]);
  TarMember m;
  m.typeflag = typeflag;
  m.type = TypeOf(typeflag);
  m.header_offset = chain_start_;
  m.member_header_offset = pos_;
  m.data_offset = pos_ + kBlock;  // pos_ <= size_ - kBlock
  m.name = CStr(b.subspan(0, 100));
  m.linkname = CStr(b.subspan(157, 100));
  const std::string prefix = CStr(b.subspan(345, 155));
  if (typeflag == '\0' && !m.name.empty() && m.name.back() == '/') m.type = TarType::kDirectory;
  if (m.type == TarType::kDirectory) m.name = RStripSlash(m.name);
  if (!prefix.empty()) m.name = prefix + "/" + m.name;
  const std::string ustar_name = m.name;
  const bool skips_data = m.type == TarType::kRegular || m.type == TarType::kUnknown;

  // _proc_builtin: the skip is computed from the header, then the chain
  // (and the globals) may replace both sizes.
  Num size_num = nums[kSize];
  Num skip_num = nums[kSize];
  if (!ApplyChain(&m, &size_num, &skip_num)) return Incomplete("unsupported");
  if ((skips_data && skip_num.negative) || (m.HasData() && size_num.negative)) {
    // _block(negative) moves tarfile's offset back (it may re-list earlier
    // members or loop), and extract() copies a remainder of 16 KiB blocks.
    Add(findings_, "MG-TAR-UNSUPPORTED", Severity::kHigh,
        "member " + core::Quoted(m.name) + " at " + N(pos_) + " has the negative size " +
            (skip_num.negative ? skip_num : size_num).Text() +
            "; tarfile's offset and extraction then are not modelled",
        pos_ + 124, m.name);
    return Incomplete("unsupported");
  }
  m.size = !size_num.negative && size_num.fits ? size_num.magnitude : 0;
  if (!size_num.fits) m.size = UINT64_MAX;  // never in bounds
  ReportMember(m, ustar_name, nums[kSize], size_num, skip_num, skips_data);

  // The next header: data_offset + _block(skip) for members with data.
  uint64_t next = m.data_offset;
  bool overflow = false;
  if (skips_data) {
    uint64_t padded = 0;
    overflow = !skip_num.fits || !BlockUp(skip_num.magnitude, &padded) ||
               __builtin_add_overflow(next, padded, &next);
  }
  m.data_in_bounds = m.data_offset <= size_ && m.size <= size_ - m.data_offset;
  if (overflow || next > size_ || (skips_data && !m.data_in_bounds)) {
    // getmembers() goes on to the next header: its seek(offset - 1) past
    // the end reads nothing (ReadError, or OSError past the file system's
    // largest file); past 2^63 the seek itself raises ValueError and
    // torch.load fails without its fallback. Either way tarfile lists
    // nothing, wherever the member is: see TarArchive::loader_fails.
    const bool past_seek = overflow || next - 1 > kMaxSeek;
    Add(findings_, "MG-TAR-OUT-OF-BOUNDS", Severity::kHigh,
        "data of " + core::Quoted(m.name) + " (" + size_num.Text() +
            " bytes, padded to whole blocks) runs past the end of the file; " +
            (past_seek ? "tarfile's seek past 2^63 raises ValueError"
                       : "tarfile raises ReadError"),
        m.data_offset, m.name);
    tar_.members.push_back(std::move(m));
    Fail(past_seek ? "seek past 2^63 (ValueError)" : "unexpected end of data");
    tar_.end_reason = "end of file";
    pos_ = size_;
    return Next::kStop;
  }
  if (skips_data) {
    if (auto s = CheckPadding(m, skip_num.magnitude, next); !s.ok()) return s.error();
  }
  tar_.members.push_back(std::move(m));
  chain_.clear();
  pos_ = next;
  return Next::kContinue;
}

// ApplyChain applies the globals and the chain to `m`, innermost first, so
// the first header of the chain wins; `size_num` becomes what extractfile
// reads and `skip_num` what tarfile skips. False (reported) on a PAX size
// this reader does not model.
bool Lister::ApplyChain(TarMember* m, Num* size_num, Num* skip_num) {
  const char* unmodelled = nullptr;
  auto apply = [&](const PaxDict& d) {
    for (const auto& [key, value] : d) {
      if (key == "path") {
        m->name = RStripSlash(value);
      } else if (key == "linkpath") {
        m->linkname = value;
      } else if (key == "size") {
        auto n = PaxSize(value, &unmodelled);
        if (!n) continue;
        if (n->form != NumForm::kCanonical) {
          Add(findings_, "MG-TAR-PAX-MALFORMED", Severity::kHigh,
              "PAX size " + core::Quoted(value) + " for the member at " + N(pos_) +
                  " is not plain decimal (tarfile reads " + n->Text() + ")",
              pos_);
        }
        *size_num = *n;
      }
    }
  };
  apply(globals_);
  if (m->type == TarType::kDirectory) m->name = RStripSlash(m->name);
  int names = 0, paxes = 0, links = 0;
  for (auto it = chain_.rbegin(); it != chain_.rend(); ++it) {
    if (it->type == 'L') {
      ++names;
      m->name = it->text;
      if (m->type == TarType::kDirectory && !m->name.empty() && m->name.back() == '/') {
        m->name.pop_back();
      }
    } else if (it->type == 'K') {
      ++links;
      m->linkname = it->text;
    } else {
      ++paxes;
      apply(it->dict);
      // _proc_pax: "size" in pax_headers (globals included) re-skips.
      if (PaxGet(it->dict, "size") != nullptr) *skip_num = *size_num;
      if (PaxGet(it->dict, "path") != nullptr) ++names;
      if (PaxGet(it->dict, "linkpath") != nullptr) ++links;
    }
  }
  if (unmodelled != nullptr) {
    Add(findings_, "MG-TAR-UNSUPPORTED", Severity::kHigh,
        "PAX size for the member at " + N(pos_) + " " + unmodelled + "; not modelled", pos_);
    return false;
  }
  if (names > 1 || links > 1 || paxes > 1) {
    Add(findings_, "MG-TAR-PAX-MISMATCH", Severity::kHigh,
        "member at " + N(pos_) + " has several long-name/PAX headers (tarfile takes the "
        "first, other readers the last)",
        chain_start_, m->name);
  }
  return true;
}

// ReportMember reports what other readers may read differently: names,
// sizes, types, links.
void Lister::ReportMember(const TarMember& m, const std::string& ustar_name,
                          const Num& ustar_num, const Num& size_num, const Num& skip_num,
                          bool skips_data) {
  if (!chain_.empty() && m.name != ustar_name && !ustar_name.empty() &&
      !StartsWith(m.name, ustar_name)) {
    Add(findings_, "MG-TAR-PAX-MISMATCH", Severity::kHigh,
        "extended name " + core::Quoted(m.name) + " disagrees with the header's name " +
            core::Quoted(ustar_name),
        pos_, m.name);
  }
  // A header size of 0 with a PAX size is how tarfile writes big members.
  if (!(skip_num == ustar_num) && !ustar_num.IsZero()) {
    Add(findings_, "MG-TAR-PAX-MISMATCH", Severity::kHigh,
        "PAX size " + skip_num.Text() + " of " + core::Quoted(m.name) +
            " disagrees with the header's size " + ustar_num.Text(),
        pos_, m.name);
  }
  if (skips_data && !(size_num == skip_num)) {
    Add(findings_, "MG-TAR-PAX-MISMATCH", Severity::kHigh,
        "global PAX size makes tarfile read " + size_num.Text() + " bytes of " +
            core::Quoted(m.name) + " but skip " + skip_num.Text(),
        pos_, m.name);
  }
  if (!skips_data && !ustar_num.IsZero()) {
    Add(findings_, "MG-TAR-MALFORMED", Severity::kHigh,
        std::string(TarTypeName(m.type)) + " member " + core::Quoted(m.name) + " has size " +
            ustar_num.Text() + "; tarfile skips no data for it, other readers skip its blocks",
        pos_ + 124, m.name);
  }
  if (m.type == TarType::kUnknown) {
    Add(findings_, "MG-TAR-UNKNOWN-TYPE", Severity::kHigh,
        "member " + core::Quoted(m.name) + " has type " +
            core::Quoted(std::string(1, m.typeflag)) +
            ", which tarfile reads as a regular file and other readers may not",
        pos_ + 156, m.name);
  }
  if (const char* why = UnsafeNameReason(m.name)) {
    Add(findings_, "MG-TAR-UNSAFE-NAME", Severity::kHigh,
        "member name " + core::Quoted(m.name) + ": " + why, pos_, m.name);
  }
  ReportLinks(m);
}

void Lister::ReportLinks(const TarMember& m) {
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
    Add(findings_, "MG-TAR-LINK", Severity::kHigh,
        std::string(m.type == TarType::kSymlink ? "symbolic" : "hard") + " link " +
            core::Quoted(m.name) + " -> " + core::Quoted(m.linkname) +
            (target_why ? std::string(" (") + target_why + ")" : std::string()) +
            ": a loader that extracts it writes or reads outside the archive",
        pos_, m.name);
  } else if (m.type == TarType::kCharDevice || m.type == TarType::kBlockDevice ||
             m.type == TarType::kFifo) {
    Add(findings_, "MG-TAR-SPECIAL", Severity::kHigh,
        std::string(TarTypeName(m.type)) + " member " + core::Quoted(m.name) +
            ": extracting it creates a device node or FIFO",
        pos_, m.name);
  }
}

// CheckPadding: tarfile writes zeros after a member's data up to the next
// block; anything else there is hidden. `next` <= size_ (checked).
core::Status Lister::CheckPadding(const TarMember& m, uint64_t skip_size, uint64_t next) {
  const uint64_t pad_at = m.data_offset + skip_size;  // <= next, no overflow
  if (next <= pad_at) return core::OkStatus();
  auto pad = src_.ReadVec(pad_at, next - pad_at);
  if (!pad.ok()) return pad.error();
  if (std::any_of(pad.value().begin(), pad.value().end(), [](uint8_t x) { return x != 0; })) {
    Add(findings_, "MG-TAR-HIDDEN-DATA", Severity::kMedium,
        "non-zero bytes in the block padding after " + core::Quoted(m.name), pad_at, m.name);
  }
  return core::OkStatus();
}

// CheckTail: bytes after the end-of-archive block, which tarfile never
// reads, are zero padding up to max_zero_tail_bytes.
core::Status Lister::CheckTail() {
  const uint64_t tail = size_ - tar_.end_offset;
  if (tail > limits_.max_zero_tail_bytes) {
    Add(findings_, "MG-TAR-HIDDEN-DATA", Severity::kHigh,
        N(tail) + " bytes after the end of the archive (more than max_zero_tail_bytes " +
            N(limits_.max_zero_tail_bytes) + " of padding)",
        tar_.end_offset);
    return core::OkStatus();
  }
  for (uint64_t at = tar_.end_offset; at < size_;) {
    const uint64_t n = std::min<uint64_t>(size_ - at, 1 << 16);
    auto w = src_.ReadVec(at, n);
    if (!w.ok()) return w.error();
    auto nz = std::find_if(w.value().begin(), w.value().end(), [](uint8_t x) { return x != 0; });
    if (nz != w.value().end()) {
      const uint64_t first = at + static_cast<uint64_t>(nz - w.value().begin());
      Add(findings_, "MG-TAR-HIDDEN-DATA", Severity::kHigh,
          "non-zero bytes after the end of the archive at " + N(first) +
              " (tarfile stops at the first zero block and never reads them)",
          first);
      break;
    }
    at += n;
  }
  return core::OkStatus();
}

// CheckDuplicates: getmember/extract take the last member of a name; other
// readers may take the first or refuse.
void Lister::CheckDuplicates() {
  std::vector<size_t> order(tar_.members.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return tar_.members[a].name < tar_.members[b].name;
  });
  for (size_t i = 1; i < order.size(); ++i) {
    const auto& m = tar_.members[order[i]];
    if (m.name == tar_.members[order[i - 1]].name) {
      Add(findings_, "MG-TAR-DUPLICATE-NAME", Severity::kCritical,
          "member name " + core::Quoted(m.name) +
              " appears more than once; tarfile takes the last (at " + N(m.header_offset) + ")",
          m.header_offset, m.name);
    }
  }
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
  return sum.Valid() && ChecksumOk(blk, sum);
}

core::Result<TarArchive> ReadTar(const Source& src, const TarLimits& limits,
                                 std::vector<Finding>* findings) {
  return Lister(src, limits, findings).Run();
}

const TarMember* ResolveTarMember(const TarArchive& tar, std::string_view name,
                                  TarAccess access) {
  const std::string want = RStripSlash(std::string(name));
  auto last_named = [&](const std::string& n, size_t limit, bool normalize) -> int64_t {
    const std::string target = normalize ? Normalize(n) : n;
    for (size_t i = limit; i > 0; --i) {
      const std::string& mn = tar.members[i - 1].name;
      if ((normalize ? Normalize(mn) : mn) == target) return static_cast<int64_t>(i - 1);
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

}  // namespace modelgate::scanner
