#include "gguf.h"

#include <algorithm>
#include <array>
#include <map>
#include <unordered_set>

namespace modelgate::scanner::internal {
namespace {

using core::Severity;

// The ids (docs/findings/MG-GGUF-*.md); every one is high unless noted.
constexpr std::string_view kIdMagic = "MG-GGUF-MAGIC";
constexpr std::string_view kIdVersion = "MG-GGUF-VERSION";
constexpr std::string_view kIdTruncated = "MG-GGUF-TRUNCATED";
constexpr std::string_view kIdLimit = "MG-GGUF-LIMIT";
constexpr std::string_view kIdValueType = "MG-GGUF-VALUE-TYPE";
constexpr std::string_view kIdUtf8 = "MG-GGUF-UTF8";
constexpr std::string_view kIdBadKey = "MG-GGUF-BAD-KEY";  // varies
constexpr std::string_view kIdNul = "MG-GGUF-NUL-IN-NAME";
constexpr std::string_view kIdDuplicateKey = "MG-GGUF-DUPLICATE-KEY";
constexpr std::string_view kIdDuplicateTensor = "MG-GGUF-DUPLICATE-TENSOR";
constexpr std::string_view kIdBadBool = "MG-GGUF-BAD-BOOL";          // medium
constexpr std::string_view kIdNestedArray = "MG-GGUF-NESTED-ARRAY";  // medium
constexpr std::string_view kIdAlignment = "MG-GGUF-ALIGNMENT";
constexpr std::string_view kIdDims = "MG-GGUF-DIMS";
constexpr std::string_view kIdDimZero = "MG-GGUF-DIM-ZERO";  // medium
constexpr std::string_view kIdShapeOverflow = "MG-GGUF-SHAPE-OVERFLOW";
constexpr std::string_view kIdTensorType = "MG-GGUF-TENSOR-TYPE";
constexpr std::string_view kIdBlockSize = "MG-GGUF-BLOCK-SIZE";
constexpr std::string_view kIdNameTooLong = "MG-GGUF-NAME-TOO-LONG";  // medium
constexpr std::string_view kIdMisaligned = "MG-GGUF-MISALIGNED";
constexpr std::string_view kIdOutOfBounds = "MG-GGUF-OUT-OF-BOUNDS";
constexpr std::string_view kIdOverlap = "MG-GGUF-OVERLAP";
constexpr std::string_view kIdTensorOrder = "MG-GGUF-TENSOR-ORDER";  // medium
constexpr std::string_view kIdHiddenData = "MG-GGUF-HIDDEN-DATA";
constexpr std::string_view kIdStringsCapped = "MG-GGUF-STRINGS-CAPPED";

// Findings kept per id: a header of a million bad names reports the first
// ones and how many more, not a million findings.
constexpr uint64_t kMaxFindingsPerId = 100;
// GGML_MAX_NAME: llama.cpp refuses a tensor name of this many bytes or more.
constexpr uint64_t kGgmlMaxName = 64;
// Longest key the spec allows (2^16 - 1 bytes).
constexpr uint64_t kMaxKeyBytes = 65'535;
// Nested arrays are read by recursion; whatever max_array_depth says, the
// stack never holds more frames than this.
constexpr uint32_t kHardArrayDepth = 256;
constexpr uint64_t kInt64Max = uint64_t{INT64_MAX};

constexpr std::string_view kMagic{"GGUF", 4};
constexpr std::string_view kAlignmentKey = "general.alignment";

// Metadata value types (gguf_type).
enum ValueType : uint32_t {
  kU8 = 0, kI8, kU16, kI16, kU32, kI32, kF32, kBool, kString, kArray, kU64, kI64, kF64,
  kValueTypeCount,
};
constexpr std::array<uint8_t, kValueTypeCount> kValueBytes = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0,
                                                               8, 8, 8};
constexpr std::array<std::string_view, kValueTypeCount> kValueNames = {
    "uint8", "int8", "uint16", "int16", "uint32", "int32", "float32",
    "bool", "string", "array", "uint64", "int64", "float64"};

// GgmlType is a tensor type's block: `block` elements stored in `type_bytes`
// bytes (gguf-py GGML_QUANT_SIZES; ggml's type traits). block 0: unknown
// (never defined, or removed from GGUF files: 4, 5, 31-33, 36-38).
struct GgmlType {
  std::string_view name;
  uint32_t block = 0;
  uint32_t type_bytes = 0;
};
constexpr uint32_t kQkK = 256;
constexpr std::array<GgmlType, 40> kGgmlTypes = {{
    {"F32", 1, 4},  {"F16", 1, 2},  {"Q4_0", 32, 2 + 16}, {"Q4_1", 32, 2 + 2 + 16},
    {},             {},             {"Q5_0", 32, 2 + 4 + 16}, {"Q5_1", 32, 2 + 2 + 4 + 16},
    {"Q8_0", 32, 2 + 32}, {"Q8_1", 32, 4 + 4 + 32},
    {"Q2_K", kQkK, 2 + 2 + kQkK / 16 + kQkK / 4},
    {"Q3_K", kQkK, 2 + kQkK / 4 + kQkK / 8 + 12},
    {"Q4_K", kQkK, 2 + 2 + kQkK / 2 + 12},
    {"Q5_K", kQkK, 2 + 2 + kQkK / 2 + kQkK / 8 + 12},
    {"Q6_K", kQkK, 2 + kQkK / 2 + kQkK / 4 + kQkK / 16},
    {"Q8_K", kQkK, 4 + kQkK + kQkK / 8},
    {"IQ2_XXS", kQkK, 2 + kQkK / 4},
    {"IQ2_XS", kQkK, 2 + kQkK / 4 + kQkK / 32},
    {"IQ3_XXS", kQkK, 2 + kQkK / 4 + kQkK / 8},
    {"IQ1_S", kQkK, 2 + kQkK / 8 + kQkK / 16},
    {"IQ4_NL", 32, 2 + 16},
    {"IQ3_S", kQkK, 2 + kQkK / 4 + kQkK / 8 + kQkK / 32 + 4},
    {"IQ2_S", kQkK, 2 + kQkK / 4 + kQkK / 16},
    {"IQ4_XS", kQkK, 2 + 2 + kQkK / 2 + kQkK / 64},
    {"I8", 1, 1},   {"I16", 1, 2},  {"I32", 1, 4}, {"I64", 1, 8}, {"F64", 1, 8},
    {"IQ1_M", kQkK, kQkK / 8 + kQkK / 16 + kQkK / 32},
    {"BF16", 1, 2},
    {},             {},             {},
    {"TQ1_0", kQkK, 2 + 4 * 13},
    {"TQ2_0", kQkK, 2 + 64},
    {},             {},             {},
    {"MXFP4", 32, 1 + 16},
}};

const GgmlType* FindGgmlType(uint32_t type) {
  if (type >= kGgmlTypes.size() || kGgmlTypes[type].block == 0) return nullptr;
  return &kGgmlTypes[type];
}

std::string_view AsText(std::span<const uint8_t> b) {
  return {reinterpret_cast<const char*>(b.data()), b.size()};
}

// CutAtNul is `s` as a C string reads it: llama.cpp compares names with
// strcmp, so "a\0x" and "a\0y" are one name there and two in gguf-py.
std::string_view CutAtNul(std::string_view s) { return s.substr(0, s.find('\0')); }

bool AlignUp(uint64_t v, uint64_t alignment, uint64_t* out) {
  const uint64_t rem = v % alignment;
  if (rem == 0) {
    *out = v;
    return true;
  }
  return !__builtin_add_overflow(v, alignment - rem, out);
}

std::string Num(uint64_t v) { return std::to_string(v); }

class Parser {
 public:
  Parser(std::span<const uint8_t> file, const GgufLimits& limits, std::vector<Finding>* findings)
      : file_(file),
        limits_(limits),
        findings_(findings),
        r_(file.first(static_cast<size_t>(std::min<uint64_t>(file.size(), limits.max_header_bytes)))) {}

  std::optional<GgufInfo> Run() {
    const bool read = ReadHeader();
    FlushFindingCounts();
    if (!read || broken_) return std::nullopt;
    return std::move(info_);
  }

 private:
  // --- findings ---
  void Report(std::string_view id, Severity sev, uint64_t offset, std::string message) {
    IdCount& c = per_id_[id];
    // The summary of those not listed carries the worst of them.
    if (++c.count > kMaxFindingsPerId) {
      c.dropped_worst = std::min(c.dropped_worst, sev);
      return;
    }
    findings_->push_back(MakeFinding(std::string(id), sev, std::move(message), offset));
  }
  // Break reports a high finding that leaves the tensors unlocatable: the
  // header is still read on, but no value is returned.
  void Break(std::string_view id, uint64_t offset, std::string message) {
    broken_ = true;
    Report(id, Severity::kHigh, offset, std::move(message));
  }
  // Stop reports a high finding after which nothing more can be read.
  bool Stop(std::string_view id, uint64_t offset, std::string message) {
    Break(id, offset, std::move(message));
    return false;
  }
  void FlushFindingCounts() {
    for (const auto& [id, c] : per_id_) {
      if (c.count <= kMaxFindingsPerId) continue;
      findings_->push_back(MakeFinding(std::string(id), c.dropped_worst,
                                       Num(c.count - kMaxFindingsPerId) + " more " +
                                           std::string(id) +
                                           " findings in this header are not listed"));
    }
  }

  // Short says why `need` bytes at the reader's position cannot be read: the
  // file ends first (truncated) or max_header_bytes does (a limit).
  bool Short(uint64_t need, std::string_view what) {
    const uint64_t at = r_.offset();
    const uint64_t in_file = file_.size() - at;
    if (need > in_file) {
      return Stop(kIdTruncated, at,
                  std::string(what) + " needs " + Num(need) + " bytes at offset " + Num(at) +
                      ", the file has " + Num(in_file) + " more");
    }
    return Stop(kIdLimit, at,
                std::string(what) + " ends past max_header_bytes (" +
                    Num(limits_.max_header_bytes) + ")");
  }

  // --- reads, in the file's byte order ---
  bool U8(uint8_t* out, std::string_view what) {
    auto v = r_.U8();
    if (!v.ok()) return Short(1, what);
    *out = v.value();
    return true;
  }
  bool U32(uint32_t* out, std::string_view what) {
    auto v = info_.big_endian ? r_.U32Be() : r_.U32Le();
    if (!v.ok()) return Short(4, what);
    *out = v.value();
    return true;
  }
  bool U64(uint64_t* out, std::string_view what) {
    auto v = info_.big_endian ? r_.U64Be() : r_.U64Le();
    if (!v.ok()) return Short(8, what);
    *out = v.value();
    return true;
  }
  // Count reads a count or length: uint32 in GGUF v1, uint64 since v2.
  bool Count(uint64_t* out, std::string_view what) {
    if (info_.version != 1) return U64(out, what);
    uint32_t v = 0;
    if (!U32(&v, what)) return false;
    *out = v;
    return true;
  }
  uint64_t CountBytes() const { return info_.version == 1 ? 4 : 8; }
  bool Take(uint64_t n, std::span<const uint8_t>* out, std::string_view what) {
    auto v = r_.Take(n);
    if (!v.ok()) return Short(n, what);
    *out = v.value();
    return true;
  }
  // Str reads a string (length, bytes) as a view into the file.
  bool Str(std::string_view* out, std::string_view what) {
    const uint64_t at = r_.offset();
    uint64_t len = 0;
    if (!Count(&len, what)) return false;
    if (len > limits_.max_string_bytes) {
      return Stop(kIdLimit, at,
                  std::string(what) + " of " + Num(len) + " bytes exceeds max_string_bytes (" +
                      Num(limits_.max_string_bytes) + ")");
    }
    std::span<const uint8_t> b;
    if (!Take(len, &b, what)) return false;
    *out = AsText(b);
    return true;
  }
  // Fits says whether `count` items of at least `min_bytes` each can lie in
  // what remains, before anything is reserved for them.
  bool Fits(uint64_t count, uint64_t min_bytes, std::string_view what) {
    uint64_t need = 0;
    if (__builtin_mul_overflow(count, min_bytes, &need)) need = UINT64_MAX;
    if (need <= r_.remaining()) return true;
    return Short(need, what);
  }

  // --- the header ---
  bool ReadHeader() {
    std::span<const uint8_t> magic;
    if (file_.size() < 4 || AsText(file_.first(4)) != kMagic) {
      return Stop(kIdMagic, 0, "the file does not start with the GGUF magic \"GGUF\"");
    }
    if (!Take(4, &magic, "the magic")) return false;
    // The version tells the byte order: a big-endian file's version 3 reads
    // as 0x03000000 little-endian (gguf-py's reader and llama.cpp's check).
    std::span<const uint8_t> vb;
    if (!Take(4, &vb, "the version")) return false;
    const uint32_t le = uint32_t{vb[0]} | uint32_t{vb[1]} << 8 | uint32_t{vb[2]} << 16 |
                        uint32_t{vb[3]} << 24;
    const uint32_t be = __builtin_bswap32(le);
    if (le >= 1 && le <= 3) {
      info_.version = le;
    } else if (be >= 1 && be <= 3) {
      info_.version = be;
      info_.big_endian = true;
    } else {
      return Stop(kIdVersion, 4,
                  "GGUF version " + Num(le) + " (0x" + Hex(le) +
                      ") is not 1, 2 or 3 in either byte order");
    }
    uint64_t tensor_count = 0, kv_count = 0;
    const uint64_t counts_at = r_.offset();
    if (!Count(&tensor_count, "the tensor count") || !Count(&kv_count, "the metadata count")) {
      return false;
    }
    info_.kv_count = kv_count;
    if (tensor_count > limits_.max_tensors) {
      return Stop(kIdLimit, counts_at,
                  "the header claims " + Num(tensor_count) + " tensors, over max_tensors (" +
                      Num(limits_.max_tensors) + ")");
    }
    if (kv_count > limits_.max_kv) {
      return Stop(kIdLimit, counts_at + CountBytes(),
                  "the header claims " + Num(kv_count) + " metadata keys, over max_kv (" +
                      Num(limits_.max_kv) + ")");
    }
    // Smallest KV: a key length, a type and a one-byte value; smallest tensor
    // info: a name length, n_dims, a type and an offset.
    const uint64_t min_kv = CountBytes() + 4 + 1, min_tensor = CountBytes() + 4 + 4 + 8;
    uint64_t min_kv_total = 0, min_tensor_total = 0, min_total = 0;
    if (__builtin_mul_overflow(kv_count, min_kv, &min_kv_total) ||
        __builtin_mul_overflow(tensor_count, min_tensor, &min_tensor_total) ||
        __builtin_add_overflow(min_kv_total, min_tensor_total, &min_total)) {
      min_total = UINT64_MAX;
    }
    if (!Fits(min_total, 1, "the " + Num(kv_count) + " metadata keys and " +
                                Num(tensor_count) + " tensor infos the header claims")) {
      return false;
    }

    for (uint64_t i = 0; i < kv_count; ++i) {
      if (!ReadKv()) return false;
    }
    if (alignment_bad_) broken_ = true;

    info_.tensors.reserve(static_cast<size_t>(
        std::min<uint64_t>(tensor_count, r_.remaining() / min_tensor)));
    tensor_at_.reserve(info_.tensors.capacity());
    for (uint64_t i = 0; i < tensor_count; ++i) {
      if (!ReadTensorInfo()) return false;
    }

    const uint64_t header_end = r_.offset();
    // Without a valid alignment the data section has no defined start.
    if (alignment_bad_) return true;
    uint64_t data_start = 0;
    if (!AlignUp(header_end, info_.alignment, &data_start) ||
        data_start > limits_.max_header_bytes) {
      return Stop(kIdLimit, header_end,
                  "the data section would start past max_header_bytes (" +
                      Num(limits_.max_header_bytes) + ")");
    }
    if (data_start > file_.size()) {
      return Stop(kIdOutOfBounds, header_end,
                  "the data section starts at " + Num(data_start) + " (the header's end " +
                      Num(header_end) + " padded to " + Num(info_.alignment) +
                      "), past the end of the file (" + Num(file_.size()) + " bytes)");
    }
    info_.data_start = data_start;
    info_.data_bytes = file_.size() - data_start;
    CheckPadding(header_end, data_start, "after the header");
    if (!broken_) CheckLayout();
    if (dropped_strings_ > 0) {
      Report(kIdStringsCapped, Severity::kHigh, core::kNoOffset,
             Num(dropped_strings_) + " string values past max_kept_strings (" +
                 Num(limits_.max_kept_strings) + ") or max_kept_string_bytes (" +
                 Num(limits_.max_kept_string_bytes) +
                 ") were checked but not kept for content analysis");
    }
    return true;
  }

  static std::string Hex(uint32_t v) {
    static constexpr char kDigits[] = "0123456789abcdef";
    std::string s(8, '0');
    for (int i = 7; i >= 0; --i, v >>= 4) s[static_cast<size_t>(i)] = kDigits[v & 15];
    return s;
  }

  // CheckName applies the name rules shared by keys and tensor names.
  void CheckName(std::string_view name, uint64_t at, std::string_view what) {
    if (!core::IsUtf8(name)) {
      Report(kIdUtf8, Severity::kHigh, at,
             std::string(what) + " " + core::Quoted(name) +
                 " is not UTF-8 (gguf-py refuses it, llama.cpp reads the bytes)");
    }
    if (name.find('\0') != std::string_view::npos) {
      Report(kIdNul, Severity::kHigh, at,
             std::string(what) + " " + core::Quoted(name) +
                 " holds a zero byte: llama.cpp reads it as " + core::Quoted(CutAtNul(name)) +
                 ", gguf-py as the whole name");
    }
  }

  bool ReadKv() {
    const uint64_t at = r_.offset();
    std::string_view key;
    if (!Str(&key, "a metadata key")) return false;
    CheckName(key, at, "metadata key");
    if (key.empty()) {
      // llama.cpp asserts on an empty key (GGML_ASSERT(!key.empty())): the
      // loading process aborts.
      Report(kIdBadKey, Severity::kHigh, at, "a metadata key is empty (llama.cpp aborts on it)");
    } else if (key.size() > kMaxKeyBytes ||
               std::any_of(key.begin(), key.end(), [](char c) { return c & 0x80; })) {
      Report(kIdBadKey, Severity::kMedium, at,
             "metadata key " + core::Quoted(key) +
                 " is not an ASCII key of at most 65,535 bytes as the spec requires");
    }
    if (!keys_.insert(key).second || !keys_cut_.insert(CutAtNul(key)).second) {
      Report(kIdDuplicateKey, Severity::kHigh, at,
             "metadata key " + core::Quoted(key) +
                 " appears twice: readers differ in which value wins (llama.cpp refuses "
                 "the file)");
    }
    uint32_t type = 0;
    const uint64_t type_at = r_.offset();
    if (!U32(&type, "a metadata value type")) return false;
    if (key == kAlignmentKey && !alignment_seen_) {
      alignment_seen_ = true;
      if (type != kU32) {
        alignment_bad_ = true;
        Report(kIdAlignment, Severity::kHigh, type_at,
               "general.alignment is " +
                   std::string(type < kValueTypeCount ? kValueNames[type] : "an unknown type") +
                   ", not uint32 (llama.cpp aborts, gguf-py raises)");
      } else {
        uint32_t a = 0;
        const uint64_t value_at = r_.offset();
        if (!U32(&a, "general.alignment")) return false;
        if (a == 0 || (a & (a - 1)) != 0) {
          alignment_bad_ = true;
          Report(kIdAlignment, Severity::kHigh, value_at,
                 "general.alignment is " + Num(a) + ", not a power of two");
        } else {
          info_.alignment = a;
        }
        return true;
      }
    }
    return ReadValue(type, type_at, key, 0);
  }

  // ReadValue reads one value of `type` (already read at `type_at`). `path`
  // names it for kept strings ("k", "k[3]"); `depth` is its array nesting.
  bool ReadValue(uint32_t type, uint64_t type_at, std::string_view path, uint32_t depth) {
    if (type >= kValueTypeCount) {
      return Stop(kIdValueType, type_at,
                  "value type " + Num(type) + " of " + core::Quoted(path) +
                      " is not a GGUF type: what follows cannot be read");
    }
    if (type == kString) return ReadStringValue(path);
    if (type == kBool) {
      const uint64_t at = r_.offset();
      uint8_t b = 0;
      if (!U8(&b, "a bool value")) return false;
      if (b > 1) BadBool(path, at, b);
      return true;
    }
    if (type != kArray) {
      std::span<const uint8_t> skipped;
      return Take(kValueBytes[type], &skipped, "a value");
    }
    return ReadArray(type_at, path, depth + 1);
  }

  void BadBool(std::string_view path, uint64_t at, uint8_t b) {
    Report(kIdBadBool, Severity::kMedium, at,
           "bool " + core::Quoted(path) + " is " + Num(b) +
               ", not 0 or 1 (readers disagree on its truth)");
  }

  bool ReadStringValue(std::string_view path) {
    const uint64_t at = r_.offset();
    std::string_view value;
    if (!Str(&value, "a string value")) return false;
    if (!core::IsUtf8(value)) {
      Report(kIdUtf8, Severity::kHigh, at,
             "string value " + core::Quoted(path) + " is not UTF-8 (gguf-py refuses it)");
    }
    Keep(path, value, at);
    return true;
  }

  void Keep(std::string_view path, std::string_view value, uint64_t at) {
    const uint64_t bytes = path.size() + value.size();
    if (info_.strings.size() >= limits_.max_kept_strings ||
        bytes > limits_.max_kept_string_bytes - std::min(kept_bytes_, limits_.max_kept_string_bytes)) {
      ++dropped_strings_;
      return;
    }
    kept_bytes_ += bytes;
    info_.strings.push_back(GgufString{std::string(path), std::string(value), at});
  }

  bool ReadArray(uint64_t type_at, std::string_view path, uint32_t depth) {
    if (depth > limits_.max_array_depth || depth > kHardArrayDepth) {
      return Stop(kIdLimit, type_at,
                  "arrays nested " + Num(depth) + " deep in " + core::Quoted(path) +
                      " exceed max_array_depth (" + Num(limits_.max_array_depth) + ")");
    }
    uint32_t elem = 0;
    const uint64_t elem_at = r_.offset();
    if (!U32(&elem, "an array's element type")) return false;
    const uint64_t count_at = r_.offset();
    uint64_t count = 0;
    if (!Count(&count, "an array's length")) return false;
    if (count > limits_.max_array_elements) {
      return Stop(kIdLimit, count_at,
                  "array " + core::Quoted(path) + " claims " + Num(count) +
                      " elements, over max_array_elements (" +
                      Num(limits_.max_array_elements) + ")");
    }
    if (elem >= kValueTypeCount) {
      return Stop(kIdValueType, elem_at,
                  "element type " + Num(elem) + " of array " + core::Quoted(path) +
                      " is not a GGUF type: what follows cannot be read");
    }
    if (elem == kArray && !nested_reported_) {
      nested_reported_ = true;
      Report(kIdNestedArray, Severity::kMedium, elem_at,
             "array " + core::Quoted(path) +
                 " holds arrays: gguf-py reads them, llama.cpp refuses the file");
    }
    if (elem != kString && elem != kArray && elem != kBool) {
      uint64_t bytes = 0;
      if (__builtin_mul_overflow(count, uint64_t{kValueBytes[elem]}, &bytes)) bytes = UINT64_MAX;
      std::span<const uint8_t> skipped;
      return Take(bytes, &skipped, "an array's values");
    }
    if (elem == kBool) {
      std::span<const uint8_t> b;
      if (!Take(count, &b, "an array's values")) return false;
      for (size_t i = 0; i < b.size(); ++i) {
        if (b[i] > 1) {
          BadBool(path, elem_at + 4 + CountBytes() + i, b[i]);
          break;
        }
      }
      return true;
    }
    const uint64_t min_elem = elem == kString ? CountBytes() : 4 + CountBytes();
    if (!Fits(count, min_elem, "the " + Num(count) + " elements of array " + core::Quoted(path))) {
      return false;
    }
    std::string item;
    for (uint64_t i = 0; i < count; ++i) {
      item.assign(path).append("[").append(Num(i)).append("]");
      if (elem == kString) {
        if (!ReadStringValue(item)) return false;
      } else if (!ReadValue(kArray, r_.offset(), item, depth)) {
        return false;
      }
    }
    return true;
  }

  bool ReadTensorInfo() {
    const uint64_t at = r_.offset();
    std::string_view name;
    if (!Str(&name, "a tensor name")) return false;
    CheckName(name, at, "tensor name");
    if (name.size() >= kGgmlMaxName) {
      Report(kIdNameTooLong, Severity::kMedium, at,
             "tensor name " + core::Quoted(name) + " is " + Num(name.size()) +
                 " bytes: llama.cpp refuses names of 64 bytes or more, gguf-py reads them");
    }
    if (!names_.insert(name).second || !names_cut_.insert(CutAtNul(name)).second) {
      Report(kIdDuplicateTensor, Severity::kHigh, at,
             "tensor " + core::Quoted(name) +
                 " is named twice: readers differ in which tensor the name loads");
    }
    const uint64_t dims_at = r_.offset();
    uint32_t n_dims = 0;
    if (!U32(&n_dims, "a tensor's dimension count")) return false;
    if (n_dims > limits_.max_dims) {
      return Stop(kIdDims, dims_at,
                  "tensor " + core::Quoted(name) + " has " + Num(n_dims) +
                      " dimensions, over max_dims (" + Num(limits_.max_dims) + ")");
    }
    GgufTensor t;
    t.name = std::string(name);
    if (n_dims == 0) {
      Report(kIdDims, Severity::kHigh, dims_at,
             "tensor " + core::Quoted(name) + " has no dimensions (1 to " +
                 Num(limits_.max_dims) + " expected)");
    }
    t.dims.reserve(n_dims);
    for (uint32_t d = 0; d < n_dims; ++d) {
      uint64_t dim = 0;
      if (info_.version == 1) {
        uint32_t v = 0;
        if (!U32(&v, "a tensor dimension")) return false;
        dim = v;
      } else if (!U64(&dim, "a tensor dimension")) {
        return false;
      }
      t.dims.push_back(dim);
    }
    const uint64_t type_at = r_.offset();
    if (!U32(&t.type, "a tensor type") || !U64(&t.offset, "a tensor offset")) return false;
    TensorBytes(&t, at, type_at);
    tensor_at_.push_back(at);
    info_.tensors.push_back(std::move(t));
    return true;
  }

  // TensorBytes sets t->bytes, or breaks the parse when it cannot be known.
  // Reference order (gguf.cpp): ne[0] a multiple of the block, then
  // elements / block * type size.
  void TensorBytes(GgufTensor* t, uint64_t at, uint64_t type_at) {
    const std::string q = core::Quoted(t->name);
    const GgmlType* type = FindGgmlType(t->type);
    if (type == nullptr) {
      return Break(kIdTensorType, type_at,
                   "tensor " + q + " has ggml type " + Num(t->type) +
                       ", which no GGUF reader defines (or which was removed)");
    }
    uint64_t elements = 1;
    bool overflow = false;
    for (uint64_t d : t->dims) {
      overflow |= d > kInt64Max || __builtin_mul_overflow(elements, d, &elements);
      if (d == 0) {
        Report(kIdDimZero, Severity::kMedium, at, "tensor " + q + " has a dimension of 0 (no elements)");
      }
    }
    overflow |= elements > kInt64Max;
    if (overflow) {
      return Break(kIdShapeOverflow, at,
                   "the element count of tensor " + q + " overflows 63 bits");
    }
    const uint64_t ne0 = t->dims.empty() ? 1 : t->dims[0];
    if (ne0 % type->block != 0) {
      return Break(kIdBlockSize, type_at,
                   "tensor " + q + " of type " + std::string(type->name) + " has " + Num(ne0) +
                       " elements per row, not a multiple of its block of " + Num(type->block));
    }
    if (__builtin_mul_overflow(elements / type->block, uint64_t{type->type_bytes}, &t->bytes) ||
        t->bytes > kInt64Max) {
      t->bytes = 0;
      return Break(kIdShapeOverflow, at, "the byte size of tensor " + q + " overflows 63 bits");
    }
  }

  // CheckPadding: bytes [begin, end) of the file are alignment padding and
  // must be zero; anything else there belongs to no tensor.
  void CheckPadding(uint64_t begin, uint64_t end, std::string_view where) {
    for (uint64_t p = begin; p < end; ++p) {
      if (file_[p] != 0) {
        Report(kIdHiddenData, Severity::kHigh, p,
               "non-zero byte in the alignment padding " + std::string(where) + " [" + Num(begin) +
                   "," + Num(end) + ")");
        return;
      }
    }
  }

  // CheckLayout: every tensor aligned, inside the file, sharing no byte with
  // another, and the data section exactly their bytes and padding.
  void CheckLayout() {
    const uint64_t size = file_.size();
    const uint64_t align = info_.alignment;
    struct Range {
      uint64_t begin, end;  // absolute
      size_t index;
    };
    std::vector<Range> ranges;
    ranges.reserve(info_.tensors.size());
    bool ordered = true;
    uint64_t prev_offset = 0;
    for (size_t i = 0; i < info_.tensors.size(); ++i) {
      const GgufTensor& t = info_.tensors[i];
      const std::string q = core::Quoted(t.name);
      if (t.offset % align != 0) {
        Report(kIdMisaligned, Severity::kHigh, tensor_at_[i],
               "tensor " + q + " starts at data offset " + Num(t.offset) +
                   ", not a multiple of the alignment " + Num(align));
      }
      if (t.offset < prev_offset) ordered = false;
      prev_offset = t.offset;
      uint64_t begin = 0, end = 0;
      if (__builtin_add_overflow(info_.data_start, t.offset, &begin) ||
          __builtin_add_overflow(begin, t.bytes, &end) || end > size) {
        Break(kIdOutOfBounds, tensor_at_[i],
              "tensor " + q + " [data offset " + Num(t.offset) + ", " + Num(t.bytes) +
                  " bytes) ends past the end of the file (" + Num(size) + " bytes, data at " +
                  Num(info_.data_start) + ")");
        continue;
      }
      ranges.push_back(Range{begin, end, i});
    }
    if (broken_) return;
    if (!ordered) {
      Report(kIdTensorOrder, Severity::kMedium, core::kNoOffset,
             "tensor offsets are not in declaration order: llama.cpp refuses the file, "
             "gguf-py reads it");
    }
    std::sort(ranges.begin(), ranges.end(), [](const Range& a, const Range& b) {
      return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
    });
    // Overlaps: a non-empty range starting before the furthest end so far.
    uint64_t furthest = info_.data_start;
    size_t furthest_index = 0;
    for (const Range& r : ranges) {
      if (r.end > r.begin && r.begin < furthest) {
        Break(kIdOverlap, tensor_at_[r.index],
              "tensor " + core::Quoted(info_.tensors[r.index].name) + " [" + Num(r.begin) + "," +
                  Num(r.end) + ") overlaps tensor " +
                  core::Quoted(info_.tensors[furthest_index].name));
      }
      if (r.end > furthest) {
        furthest = r.end;
        furthest_index = r.index;
      }
    }
    if (broken_) return;
    // Cover: from the data start, each tensor at the next aligned offset
    // (the gap zero padding), the file ending at the last tensor's end or its
    // padded end.
    uint64_t pos = info_.data_start;
    for (const Range& r : ranges) {
      if (r.begin > pos) {
        uint64_t padded = 0;
        const bool fits = AlignUp(pos - info_.data_start, align, &padded);
        if (fits && r.begin - info_.data_start == padded) {
          CheckPadding(pos, r.begin, "between tensors");
        } else {
          Report(kIdHiddenData, Severity::kHigh, pos,
                 Num(r.begin - pos) + " bytes [" + Num(pos) + "," + Num(r.begin) +
                     ") before tensor " + core::Quoted(info_.tensors[r.index].name) +
                     " belong to no tensor (more than alignment padding)");
        }
      }
      pos = std::max(pos, r.end);
    }
    uint64_t padded_end = 0;
    if (!AlignUp(pos - info_.data_start, align, &padded_end) ||
        padded_end > size - info_.data_start) {
      padded_end = size - info_.data_start;
    }
    const uint64_t allowed_end = info_.data_start + padded_end;
    CheckPadding(pos, allowed_end, "after the last tensor");
    if (size > allowed_end) {
      Report(kIdHiddenData, Severity::kHigh, allowed_end,
             Num(size - allowed_end) + " bytes after the last tensor's padded end (" +
                 Num(allowed_end) + ") belong to no tensor");
    }
  }

  std::span<const uint8_t> file_;
  const GgufLimits& limits_;
  std::vector<Finding>* findings_;
  core::ByteReader r_;
  GgufInfo info_;
  std::vector<uint64_t> tensor_at_;  // absolute offset of each tensor info
  std::unordered_set<std::string_view> keys_, keys_cut_, names_, names_cut_;
  struct IdCount {
    uint64_t count = 0;
    Severity dropped_worst = Severity::kInfo;
  };
  std::map<std::string_view, IdCount> per_id_;
  uint64_t kept_bytes_ = 0;
  uint64_t dropped_strings_ = 0;
  bool broken_ = false;
  bool alignment_seen_ = false;
  bool alignment_bad_ = false;
  bool nested_reported_ = false;
};

}  // namespace

std::string_view GgmlTypeName(uint32_t type) {
  const GgmlType* t = FindGgmlType(type);
  return t ? t->name : std::string_view();
}

std::optional<GgufInfo> ParseGguf(std::span<const uint8_t> file, const GgufLimits& limits,
                                  std::vector<Finding>* findings) {
  Parser parser(file, limits, findings);
  return parser.Run();
}

}  // namespace modelgate::scanner::internal
