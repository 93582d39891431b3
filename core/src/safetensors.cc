// The strict safetensors parser. Rules: README.md "What the safetensors core
// checks". The JSON header goes through nlohmann's SAX interface so that
// every key is seen (duplicates), every value's JSON type is known (integers
// vs floats) and nothing is built that the rules do not need.
#include <algorithm>
#include <cstring>
#include <iterator>
#include <numeric>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "modelgate/core.h"
#include "tensor_table.h"
#include "text.h"

namespace modelgate::core {
namespace {

constexpr uint64_t kLengthFieldBytes = 8;
constexpr std::string_view kMetadataKey = "__metadata__";

std::string U64(uint64_t v) { return std::to_string(v); }

std::string Range(uint64_t b, uint64_t e) { return "[" + U64(b) + "," + U64(e) + ")"; }

// TrackingIter walks the header bytes and publishes how far the JSON lexer
// has read, so SAX callbacks can name byte offsets.
class TrackingIter {
 public:
  using iterator_category = std::forward_iterator_tag;
  using value_type = char;
  using difference_type = std::ptrdiff_t;
  using pointer = const char*;
  using reference = const char&;

  TrackingIter() = default;
  TrackingIter(const char* p, const char** read_to) : p_(p), read_to_(read_to) {}
  reference operator*() const { return *p_; }
  TrackingIter& operator++() {
    ++p_;
    if (read_to_ != nullptr) *read_to_ = p_;
    return *this;
  }
  TrackingIter operator++(int) {
    TrackingIter t = *this;
    ++*this;
    return t;
  }
  bool operator==(const TrackingIter& o) const { return p_ == o.p_; }
  bool operator!=(const TrackingIter& o) const { return p_ != o.p_; }

 private:
  const char* p_ = nullptr;
  const char** read_to_ = nullptr;
};

enum class Ctx : uint8_t { kTop, kMeta, kEntry, kShape, kOffsets };
enum class Field : uint8_t { kNone, kDtype, kShape, kOffsets };
enum class Pending : uint8_t { kNone, kTensor, kMetadata };

struct MetaEntry {
  std::string key;
  std::string value;
  uint64_t key_offset;
};

// HeaderHandler is the SAX consumer. It stops at the first broken rule
// (returns false) and records it in `error`.
class HeaderHandler {
 public:
  using number_integer_t = nlohmann::json::number_integer_t;
  using number_unsigned_t = nlohmann::json::number_unsigned_t;
  using number_float_t = nlohmann::json::number_float_t;
  using string_t = nlohmann::json::string_t;
  using binary_t = nlohmann::json::binary_t;

  HeaderHandler(const char* begin, const Limits& limits, uint64_t data_start)
      : begin_(begin), read_to_(begin), limits_(limits), data_start_(data_start) {}

  const char** read_to() { return &read_to_; }

  Error error;
  bool has_metadata = false;
  std::vector<TensorInfo> tensors;
  std::vector<MetaEntry> metadata;

  // --- SAX interface ---
  bool null() { return BadValue("null"); }
  bool boolean(bool) { return BadValue("a boolean"); }
  bool number_integer(number_integer_t) { return BadValue("a negative integer"); }
  bool number_float(number_float_t, const string_t&) { return BadValue("a non-integer number"); }
  bool binary(binary_t&) { return BadValue("binary"); }

  bool number_unsigned(number_unsigned_t v) {
    if (stack_.empty()) return BadValue("a number");
    switch (stack_.back()) {
      case Ctx::kShape: {
        auto& t = tensors.back();
        if (t.shape.size() >= limits_.max_rank) {
          return Fail(Code::kStRankTooLarge, t.entry_offset,
                      "tensor " + Quoted(t.name) + " has more than " + U64(limits_.max_rank) +
                          " dimensions (limit max_rank)");
        }
        if (t.shape.size() >= kMaxTableRank) {
          return Fail(Code::kStRankTooLarge, t.entry_offset,
                      "tensor " + Quoted(t.name) + " has more than " + U64(kMaxTableRank) +
                          " dimensions (a tensor table record's cap)");
        }
        t.shape.push_back(v);
        return true;
      }
      case Ctx::kOffsets: {
        auto& t = tensors.back();
        if (offsets_seen_ >= 2) {
          return Fail(Code::kStFieldType, t.entry_offset,
                      "tensor " + Quoted(t.name) + ": data_offsets must be [begin, end]");
        }
        (offsets_seen_ == 0 ? t.begin : t.end) = v;
        ++offsets_seen_;
        return true;
      }
      default:
        return BadValue("a number");
    }
  }

  bool string(string_t& v) {
    if (!stack_.empty() && stack_.back() == Ctx::kMeta) {
      metadata.back().value = std::move(v);
      return true;
    }
    if (!stack_.empty() && stack_.back() == Ctx::kEntry && field_ == Field::kDtype) {
      auto& t = tensors.back();
      if (!ParseDtype(v, &t.dtype)) {
        return Fail(Code::kStUnknownDtype, t.entry_offset,
                    "tensor " + Quoted(t.name) + " has unknown dtype " + Quoted(v, 40));
      }
      return true;
    }
    return BadValue("a string");
  }

  bool start_object(std::size_t) {
    if (!EnterNesting()) return false;
    if (stack_.empty()) {
      stack_.push_back(Ctx::kTop);
      return true;
    }
    if (stack_.back() == Ctx::kTop && pending_ == Pending::kTensor) {
      stack_.push_back(Ctx::kEntry);
      field_ = Field::kNone;
      seen_dtype_ = seen_shape_ = seen_offsets_ = false;
      return true;
    }
    if (stack_.back() == Ctx::kTop && pending_ == Pending::kMetadata) {
      stack_.push_back(Ctx::kMeta);
      return true;
    }
    return BadValue("an object");
  }

  bool start_array(std::size_t) {
    if (!EnterNesting()) return false;
    if (!stack_.empty() && stack_.back() == Ctx::kEntry) {
      if (field_ == Field::kShape) {
        stack_.push_back(Ctx::kShape);
        return true;
      }
      if (field_ == Field::kOffsets) {
        stack_.push_back(Ctx::kOffsets);
        offsets_seen_ = 0;
        return true;
      }
    }
    return BadValue("an array");
  }

  bool end_array() {
    --depth_;
    if (stack_.back() == Ctx::kOffsets && offsets_seen_ != 2) {
      const auto& t = tensors.back();
      return Fail(Code::kStFieldType, t.entry_offset,
                  "tensor " + Quoted(t.name) + ": data_offsets must be [begin, end]");
    }
    stack_.pop_back();
    return true;
  }

  bool end_object() {
    --depth_;
    if (stack_.back() == Ctx::kEntry) {
      const auto& t = tensors.back();
      const char* missing = !seen_dtype_ ? "dtype" : !seen_shape_ ? "shape"
                          : !seen_offsets_ ? "data_offsets" : nullptr;
      if (missing != nullptr) {
        return Fail(Code::kStEntryMissingField, t.entry_offset,
                    "tensor " + Quoted(t.name) + " has no \"" + missing + "\"");
      }
    }
    stack_.pop_back();
    return true;
  }

  bool key(string_t& k) {
    const uint64_t at = KeyOffset();
    switch (stack_.back()) {
      case Ctx::kTop:
        if (k == kMetadataKey) {
          // The reference decodes escapes and reads "\u005f_metadata__" as
          // metadata; a parser that matches bytes reads a tensor. A gate
          // refuses the differential rather than pick a side.
          if (!RawKeyIs(at, kMetadataKey)) {
            return Fail(Code::kStReservedEscaped, at,
                        "the reserved key \"__metadata__\" is spelled with escapes "
                        "(readers disagree on whether it is metadata or a tensor)");
          }
          if (has_metadata) {
            return Fail(Code::kStDuplicateKey, at, "second \"__metadata__\" object");
          }
          has_metadata = true;
          metadata_key_offset_ = at;
          pending_ = Pending::kMetadata;
          return true;
        }
        if (!CheckName(k, at)) return false;
        if (tensors.size() >= limits_.max_tensors) {
          return Fail(Code::kStTooManyTensors, at,
                      "more than " + U64(limits_.max_tensors) + " tensors (limit max_tensors)");
        }
        pending_ = Pending::kTensor;
        tensors.emplace_back();
        tensors.back().name = std::move(k);
        tensors.back().entry_offset = at;
        tensors.back().data_start = data_start_;
        return true;
      case Ctx::kMeta:
        if (!CheckName(k, at)) return false;
        if (metadata.size() >= limits_.max_metadata_entries) {
          return Fail(Code::kStTooManyKeys, at,
                      "more than " + U64(limits_.max_metadata_entries) +
                          " __metadata__ entries (limit max_metadata_entries)");
        }
        metadata.push_back(MetaEntry{std::move(k), std::string(), at});
        return true;
      case Ctx::kEntry: {
        auto& t = tensors.back();
        bool* seen = nullptr;
        if (k == "dtype") {
          field_ = Field::kDtype, seen = &seen_dtype_;
        } else if (k == "shape") {
          field_ = Field::kShape, seen = &seen_shape_;
        } else if (k == "data_offsets") {
          field_ = Field::kOffsets, seen = &seen_offsets_;
        } else {
          return Fail(Code::kStEntryUnknownField, at,
                      "tensor " + Quoted(t.name) + " has unknown field " + Quoted(k, 40) +
                          " (allowed: dtype, shape, data_offsets)");
        }
        if (*seen) {
          return Fail(Code::kStDuplicateKey, at,
                      "tensor " + Quoted(t.name) + " repeats field " + Quoted(k));
        }
        *seen = true;
        return true;
      }
      default:
        return Fail(Code::kStJsonSyntax, at, "unexpected key");
    }
  }

  bool parse_error(std::size_t position, const std::string&,
                   const nlohmann::detail::exception& ex) {
    // `position` counts characters read, the failing one included.
    uint64_t index = position > 0 ? position - 1 : 0;
    return Fail(Code::kStJsonSyntax, index, std::string("invalid JSON: ") + ex.what(),
                /*relative=*/true);
  }

 private:
  // Offset (absolute) of the opening quote of the key the lexer just read:
  // scan back from its closing quote to the first quote not escaped.
  uint64_t KeyOffset() const {
    const char* close = read_to_ - 1;  // the closing quote
    const char* p = close;
    while (p > begin_) {
      --p;
      if (*p != '"') continue;
      size_t backslashes = 0;
      for (const char* q = p; q > begin_ && q[-1] == '\\'; --q) ++backslashes;
      if (backslashes % 2 == 0) break;
    }
    return kLengthFieldBytes + static_cast<uint64_t>(p - begin_);
  }

  // RawKeyIs: the key token whose opening quote is at absolute offset `at`
  // is written exactly as `"` + `name` + `"` (no escapes).
  bool RawKeyIs(uint64_t at, std::string_view name) const {
    const char* open = begin_ + (at - kLengthFieldBytes);
    const char* close = read_to_ - 1;
    return static_cast<size_t>(close - open) == name.size() + 1 &&
           std::string_view(open + 1, name.size()) == name;
  }

  // Offset (absolute) of the last byte the lexer read.
  uint64_t LastReadOffset() const {
    return kLengthFieldBytes + static_cast<uint64_t>(read_to_ - begin_) - (read_to_ > begin_ ? 1 : 0);
  }

  bool EnterNesting() {
    if (++depth_ > limits_.max_json_depth) {
      return Fail(Code::kStJsonDepth, LastReadOffset(),
                  "JSON nesting deeper than " + U64(limits_.max_json_depth) +
                      " (limit max_json_depth)");
    }
    return true;
  }

  bool CheckName(const std::string& k, uint64_t at) {
    const char* what = stack_.back() == Ctx::kTop ? "tensor name" : "__metadata__ key";
    if (k.empty()) return Fail(Code::kStBadName, at, std::string("empty ") + what);
    if (k.size() > limits_.max_name_bytes) {
      return Fail(Code::kStNameTooLong, at,
                  std::string(what) + " of " + U64(k.size()) + " bytes exceeds " +
                      U64(limits_.max_name_bytes) + " (limit max_name_bytes)");
    }
    if (k.size() > kMaxTableNameBytes) {
      return Fail(Code::kStNameTooLong, at,
                  std::string(what) + " of " + U64(k.size()) + " bytes exceeds " +
                      U64(kMaxTableNameBytes) + " (a tensor table record's cap)");
    }
    for (unsigned char c : k) {
      if (c < 0x20 || c == 0x7F) {
        return Fail(Code::kStBadName, at,
                    std::string(what) + " " + Quoted(k) + " contains a control character");
      }
    }
    return true;
  }

  // BadValue reports a JSON value of the wrong type for where it appears.
  bool BadValue(const std::string& what) {
    if (stack_.empty()) return Fail(Code::kStJsonSyntax, LastReadOffset(), "header is not an object");
    switch (stack_.back()) {
      case Ctx::kTop:
        if (pending_ == Pending::kMetadata) {
          return Fail(Code::kStMetadataType, metadata_key_offset_,
                      "\"__metadata__\" must be an object of strings, not " + what);
        }
        return Fail(Code::kStEntryType, tensors.back().entry_offset,
                    "tensor " + Quoted(tensors.back().name) + " must be an object, not " + what);
      case Ctx::kMeta:
        return Fail(Code::kStMetadataType, metadata.back().key_offset,
                    "__metadata__ value of " + Quoted(metadata.back().key) +
                        " must be a string, not " + what);
      case Ctx::kEntry: {
        const auto& t = tensors.back();
        const char* field = field_ == Field::kDtype ? "dtype must be a string"
                            : field_ == Field::kShape ? "shape must be an array of non-negative integers"
                                                      : "data_offsets must be [begin, end]";
        return Fail(Code::kStFieldType, t.entry_offset,
                    "tensor " + Quoted(t.name) + ": " + field + ", not " + what);
      }
      case Ctx::kShape:
        return Fail(Code::kStFieldType, tensors.back().entry_offset,
                    "tensor " + Quoted(tensors.back().name) +
                        ": shape must be an array of non-negative integers, not contain " + what);
      case Ctx::kOffsets:
        return Fail(Code::kStFieldType, tensors.back().entry_offset,
                    "tensor " + Quoted(tensors.back().name) +
                        ": data_offsets must be non-negative integers, not contain " + what);
    }
    return false;
  }

  bool Fail(Code code, uint64_t offset, std::string message, bool relative = false) {
    if (error.code == Code::kOk) {
      error = Error{code, relative ? kLengthFieldBytes + offset : offset, std::move(message)};
    }
    return false;
  }

  const char* begin_;
  const char* read_to_;
  const Limits& limits_;
  uint64_t data_start_;
  std::vector<Ctx> stack_;
  uint64_t depth_ = 0;
  Pending pending_ = Pending::kNone;
  uint64_t metadata_key_offset_ = 0;
  Field field_ = Field::kNone;
  bool seen_dtype_ = false, seen_shape_ = false, seen_offsets_ = false;
  int offsets_seen_ = 0;
};

// CheckLengthField applies the rules on N before anything is allocated.
Status CheckLengthField(uint64_t n, uint64_t file_size, const Limits& limits) {
  if (n > limits.max_header_bytes) {
    return Error{Code::kStHeaderTooLarge, 0,
                 "header length " + U64(n) + " exceeds " + U64(limits.max_header_bytes) +
                     " bytes (limit max_header_bytes)"};
  }
  if (n > file_size - kLengthFieldBytes) {  // file_size >= 8 checked by caller
    return Error{Code::kStHeaderLength, 0,
                 "header length " + U64(n) + " runs past the end of the " + U64(file_size) +
                     "-byte file"};
  }
  if (n == 0) return Error{Code::kStHeaderEmpty, 0, "header length is 0"};
  return OkStatus();
}

Error TooShort(uint64_t file_size) {
  return Error{Code::kStTruncated, 0,
               "file is " + U64(file_size) + " bytes; the header length field alone needs 8"};
}

uint64_t LeU64(const uint8_t* b) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | b[i];
  return v;
}

// CheckTensor applies the per-tensor size rules (reference: InvalidOffset,
// ValidationOverflow, MisalignedSlice, TensorInvalidInfo).
Status CheckTensor(const TensorInfo& t) {
  if (t.end < t.begin) {
    return Error{Code::kStOffsetsReversed, t.entry_offset,
                 "tensor " + Quoted(t.name) + " data_offsets " + Range(t.begin, t.end) +
                     " end before begin"};
  }
  uint64_t n = 1;
  bool overflow = false;
  for (uint64_t dim : t.shape) overflow |= __builtin_mul_overflow(n, dim, &n);
  uint64_t bits = 0;
  overflow |= __builtin_mul_overflow(n, uint64_t{DtypeBits(t.dtype)}, &bits);
  if (overflow) {
    return Error{Code::kStShapeOverflow, t.entry_offset,
                 "tensor " + Quoted(t.name) + ": shape size in bits overflows 64 bits"};
  }
  if (bits % 8 != 0) {
    return Error{Code::kStPartialByte, t.entry_offset,
                 "tensor " + Quoted(t.name) + ": " + U64(n) + " x " +
                     std::string(DtypeName(t.dtype)) + " is " + U64(bits) +
                     " bits, not a whole number of bytes"};
  }
  if (bits / 8 != t.end - t.begin) {
    return Error{Code::kStSizeMismatch, t.entry_offset,
                 "tensor " + Quoted(t.name) + ": " + std::string(DtypeName(t.dtype)) +
                     " shape needs " + U64(bits / 8) + " bytes but data_offsets " +
                     Range(t.begin, t.end) + " hold " + U64(t.end - t.begin)};
  }
  return OkStatus();
}

bool OffsetLess(const TensorInfo& a, const TensorInfo& b) {
  if (a.begin != b.begin) return a.begin < b.begin;
  if (a.end != b.end) return a.end < b.end;
  return a.name < b.name;
}

// CheckLayout: sorted by begin, tensors tile [0, data_bytes) exactly.
Status CheckLayout(std::vector<TensorInfo>& tensors, uint64_t data_start, uint64_t data_bytes) {
  if (!std::is_sorted(tensors.begin(), tensors.end(), OffsetLess)) {
    std::sort(tensors.begin(), tensors.end(), OffsetLess);
  }
  uint64_t cursor = 0;
  const TensorInfo* prev = nullptr;  // the tensor that ends at `cursor`
  for (const auto& t : tensors) {
    if (t.end > data_bytes) {
      return Error{Code::kStOutOfBounds, t.entry_offset,
                   "tensor " + Quoted(t.name) + " data_offsets " + Range(t.begin, t.end) +
                       " run past the " + U64(data_bytes) + "-byte data section"};
    }
    if (t.begin > cursor) {
      return Error{Code::kStGap, data_start + cursor,
                   "data bytes " + Range(cursor, t.begin) + " belong to no tensor (before " +
                       Quoted(t.name) + ")"};
    }
    if (t.begin < cursor) {
      bool alias = prev != nullptr && prev->begin == t.begin && prev->end == t.end;
      return Error{alias ? Code::kStAlias : Code::kStOverlap, data_start + t.begin,
                   "tensor " + Quoted(t.name) + " " + Range(t.begin, t.end) +
                       (alias ? " aliases " : " overlaps ") +
                       (prev ? Quoted(prev->name) + " " + Range(prev->begin, prev->end)
                             : std::string("another tensor"))};
    }
    if (t.end > t.begin || prev == nullptr) prev = &t;
    cursor = t.end;
  }
  if (cursor != data_bytes) {
    return Error{Code::kStTrailingBytes, data_start + cursor,
                 U64(data_bytes - cursor) + " bytes after the last tensor's data " +
                     "(tensors end at data offset " + U64(cursor) + ")"};
  }
  return OkStatus();
}


// --- the one-pass parse -------------------------------------------------------
//
// FastHeader reads a header in one pass over its bytes, straight into a
// TensorTable, checking every rule the SAX parse below checks. It names no
// rule: on the first byte it cannot accept (a broken rule, or anything it
// was not written for) it gives up, and ParseSafetensorsHeader runs the SAX
// parse from the start, which names the first broken rule and its offset
// exactly as before. So an accepted header costs one pass; a rejected one
// at most this pass up to the fault plus the SAX parse.

// kReleaseStepBytes: how often (in header bytes) the parse tells its caller
// which bytes it has finished with.
constexpr uint64_t kReleaseStepBytes = 1ull << 20;

class FastHeader {
 public:
  FastHeader(std::span<const uint8_t> header, const Limits& limits, uint64_t data_start,
             const HeaderReleaseFn* release)
      : base_(header.data()), p_(header.data()), end_(header.data() + header.size()),
        limits_(limits), data_start_(data_start), release_(release), released_(header.data()) {}

  TensorTable table;
  std::vector<MetaEntry> metadata;
  bool has_metadata = false;

  bool Run() {
    // Depth: the top object, an entry or __metadata__, a shape array.
    if (limits_.max_json_depth < 3) return false;
    // Room for the plausible tensor count (untouched capacity is not
    // resident); one record per ~64 header bytes, as an entry takes.
    table.reserve(static_cast<size_t>(std::min<uint64_t>(
        limits_.max_tensors, static_cast<uint64_t>(end_ - base_) / 64 + 1)));
    TableAccess::Words(table).reserve(static_cast<size_t>((end_ - base_) / 32 + 1));
    TableAccess::SetDataStart(table, data_start_);
    if (!Eat('{')) return false;
    Ws();
    if (Eat('}')) return Tail();
    for (;;) {
      const uint8_t* open = p_;
      bool escaped = false;
      if (!String(&key_, &escaped)) return false;
      Ws();
      if (!Eat(':')) return false;
      Ws();
      if (Is(key_, "__metadata__")) {
        if (escaped || has_metadata) return false;  // MG-ST-RESERVED-ESCAPED, a second one
        has_metadata = true;
        if (!Metadata()) return false;
      } else {
        if (!NameOk(key_) || table.size() >= limits_.max_tensors) return false;
        if (!Entry(kLengthFieldBytes + static_cast<uint64_t>(open - base_))) return false;
      }
      Ws();
      if (Eat(',')) {
        Ws();
        Release();
        continue;
      }
      if (Eat('}')) return Tail();
      return false;
    }
  }

 private:
  bool Tail() {
    Ws();
    return p_ == end_;
  }

  void Release() {
    if (release_ != nullptr && *release_ && p_ - released_ >= static_cast<ptrdiff_t>(kReleaseStepBytes)) {
      released_ = p_;
      (*release_)(kLengthFieldBytes + static_cast<uint64_t>(p_ - base_));
    }
  }

  void Ws() {
    // JSON whitespace is all at or below ' ': most calls (compact text)
    // end at the first test.
    if (p_ < end_ && *p_ > ' ') return;
    while (p_ < end_ && (*p_ == ' ' || *p_ == '\n' || *p_ == '\r' || *p_ == '\t')) ++p_;
  }
  bool Eat(uint8_t c) {
    if (p_ < end_ && *p_ == c) {
      ++p_;
      return true;
    }
    return false;
  }

  // NameOk: CheckName's rules (non-empty, max_name_bytes, no C0 or DEL).
  bool NameOk(std::string_view k) const {
    if (k.empty() || k.size() > limits_.max_name_bytes || k.size() > kMaxTableNameBytes) return false;
    for (unsigned char c : k) {
      if (c < 0x20 || c == 0x7F) return false;
    }
    return true;
  }

  static int Hex(uint8_t c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  }
  bool U4(uint32_t* out) {
    if (end_ - p_ < 4) return false;
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) {
      const int h = Hex(p_[i]);
      if (h < 0) return false;
      v = v << 4 | static_cast<uint32_t>(h);
    }
    p_ += 4;
    *out = v;
    return true;
  }

  // String reads a JSON string at p_ into *out (a view of the header when it
  // has no escapes, else of scratch_): decoded as nlohmann decodes it, or
  // false where nlohmann would raise (raw control characters, bad escapes,
  // unpaired surrogates) or the bytes are not UTF-8.
  bool String(std::string_view* out, bool* escaped) {
    if (!Eat('"')) return false;
    const uint8_t* start = p_;
    uint8_t high = 0;
    while (p_ < end_) {
      const uint8_t c = *p_;
      if (c == '"') {
        *out = std::string_view(reinterpret_cast<const char*>(start), static_cast<size_t>(p_ - start));
        ++p_;
        *escaped = false;
        return (high & 0x80) == 0 || FirstInvalidUtf8({start, static_cast<size_t>(p_ - 1 - start)}) == kUtf8Valid;
      }
      if (c == '\\') break;
      if (c < 0x20) return false;
      high |= c;
      ++p_;
    }
    if (p_ >= end_) return false;
    // Escapes: decode into scratch_.
    *escaped = true;
    scratch_.assign(reinterpret_cast<const char*>(start), static_cast<size_t>(p_ - start));
    while (p_ < end_) {
      const uint8_t c = *p_;
      if (c == '"') {
        ++p_;
        *out = scratch_;
        return FirstInvalidUtf8({reinterpret_cast<const uint8_t*>(scratch_.data()), scratch_.size()}) ==
               kUtf8Valid;
      }
      if (c < 0x20) return false;
      if (c != '\\') {
        scratch_.push_back(static_cast<char>(c));
        ++p_;
        continue;
      }
      if (end_ - p_ < 2) return false;
      const uint8_t e = p_[1];
      p_ += 2;
      switch (e) {
        case '"': scratch_.push_back('"'); break;
        case '\\': scratch_.push_back('\\'); break;
        case '/': scratch_.push_back('/'); break;
        case 'b': scratch_.push_back('\b'); break;
        case 'f': scratch_.push_back('\f'); break;
        case 'n': scratch_.push_back('\n'); break;
        case 'r': scratch_.push_back('\r'); break;
        case 't': scratch_.push_back('\t'); break;
        case 'u': {
          uint32_t cp = 0;
          if (!U4(&cp)) return false;
          if (cp >= 0xDC00 && cp <= 0xDFFF) return false;
          if (cp >= 0xD800 && cp <= 0xDBFF) {
            uint32_t lo = 0;
            if (end_ - p_ < 2 || p_[0] != '\\' || p_[1] != 'u') return false;
            p_ += 2;
            if (!U4(&lo) || lo < 0xDC00 || lo > 0xDFFF) return false;
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          }
          AppendUtf8(cp);
          break;
        }
        default:
          return false;
      }
    }
    return false;
  }

  void AppendUtf8(uint32_t cp) {
    if (cp < 0x80) {
      scratch_.push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
      scratch_.push_back(static_cast<char>(0xC0 | (cp >> 6)));
      scratch_.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
      scratch_.push_back(static_cast<char>(0xE0 | (cp >> 12)));
      scratch_.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      scratch_.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else {
      scratch_.push_back(static_cast<char>(0xF0 | (cp >> 18)));
      scratch_.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
      scratch_.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      scratch_.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
  }

  // Number: a JSON integer nlohmann reports as number_unsigned (no sign,
  // fraction or exponent; no leading zero; fits 64 bits).
  bool Number(uint64_t* out) {
    if (p_ >= end_ || *p_ < '0' || *p_ > '9') return false;
    uint64_t v = 0;
    if (*p_ == '0') {
      ++p_;
    } else {
      while (p_ < end_ && *p_ >= '0' && *p_ <= '9') {
        if (__builtin_mul_overflow(v, uint64_t{10}, &v) ||
            __builtin_add_overflow(v, static_cast<uint64_t>(*p_ - '0'), &v)) {
          return false;  // nlohmann: a float
        }
        ++p_;
      }
    }
    if (p_ < end_ && ((*p_ >= '0' && *p_ <= '9') || *p_ == '.' || *p_ == 'e' || *p_ == 'E')) return false;
    *out = v;
    return true;
  }

  bool Entry(uint64_t entry_offset) {
    if (!Eat('{')) return false;
    // The record: its name first (the key is in key_, maybe in scratch_).
    auto& words = TableAccess::Words(table);
    TableAccess::Rec r{};
    r.at = TableAccess::AppendName(table, key_);
    r.name_bytes = static_cast<uint32_t>(key_.size());
    r.entry_offset = entry_offset;
    if (CompactBody(r)) {
      TableAccess::Recs(table).push_back(r);
      return true;
    }
    bool seen_dtype = false, seen_shape = false, seen_offsets = false;
    Ws();
    for (;;) {
      bool escaped = false;
      std::string_view field;
      if (!String(&field, &escaped)) return false;
      Ws();
      if (!Eat(':')) return false;
      Ws();
      if (Is(field, "dtype")) {
        if (seen_dtype) return false;
        seen_dtype = true;
        std::string_view v;
        if (!String(&v, &escaped)) return false;
        // Entries mostly repeat one dtype: compare with the last one first.
        if (!last_dtype_name_.empty() && v.size() == last_dtype_name_.size() &&
            std::memcmp(v.data(), last_dtype_name_.data(), v.size()) == 0) {
          r.dtype = last_dtype_;
        } else {
          if (!ParseDtype(v, &r.dtype)) return false;
          last_dtype_ = r.dtype;
          last_dtype_name_ = DtypeName(r.dtype);
        }
      } else if (Is(field, "shape")) {
        if (seen_shape) return false;
        seen_shape = true;
        if (!Eat('[')) return false;
        // The dims go after the name's words (only one shape per entry).
        const size_t dims_at = words.size();
        Ws();
        if (!Eat(']')) {
          for (;;) {
            uint64_t d = 0;
            if (!Number(&d)) return false;
            if (words.size() - dims_at >= limits_.max_rank || words.size() - dims_at >= kMaxTableRank) {
              return false;
            }
            words.push_back(d);
            Ws();
            if (Eat(',')) {
              Ws();
              continue;
            }
            if (Eat(']')) break;
            return false;
          }
        }
        r.rank = static_cast<uint16_t>(words.size() - dims_at);
      } else if (Is(field, "data_offsets")) {
        if (seen_offsets) return false;
        seen_offsets = true;
        if (!Eat('[')) return false;
        Ws();
        if (!Number(&r.begin)) return false;
        Ws();
        if (!Eat(',')) return false;
        Ws();
        if (!Number(&r.end)) return false;
        Ws();
        if (!Eat(']')) return false;
      } else {
        return false;
      }
      Ws();
      if (Eat(',')) {
        Ws();
        continue;
      }
      if (Eat('}')) break;
      return false;
    }
    if (!seen_dtype || !seen_shape || !seen_offsets) return false;
    TableAccess::Recs(table).push_back(r);
    return true;
  }

  // Literal: the bytes at p_ are `lit` (then skipped).
  template <size_t N>
  bool Literal(const char (&lit)[N]) {
    if (end_ - p_ < static_cast<ptrdiff_t>(N - 1) || std::memcmp(p_, lit, N - 1) != 0) return false;
    p_ += N - 1;
    return true;
  }

  // CompactBody reads an entry's body after its '{' when it is written as
  // the reference writer writes it: compact, the fields in its order, the
  // dtype without escapes (`"dtype":"F32","shape":[2,3],"data_offsets":[0,24]}`),
  // into `r` and the shape's words. At the first byte it does not expect
  // it puts p_ and the words back and returns false: Entry then reads the
  // body in full (whitespace, escapes, any field order), so it accepts
  // exactly what Entry accepts, only sooner.
  bool CompactBody(TableAccess::Rec& r) {
    const uint8_t* start = p_;
    auto& words = TableAccess::Words(table);
    const size_t dims_at = words.size();
    auto back = [&] {
      p_ = start;
      words.resize(dims_at);
      return false;
    };
    if (!Literal("\"dtype\":\"")) return back();
    const uint8_t* d = p_;
    while (p_ < end_ && *p_ != '"' && *p_ > ' ' && *p_ != '\\' && *p_ < 0x80) ++p_;
    if (p_ >= end_ || *p_ != '"') return back();
    const std::string_view v(reinterpret_cast<const char*>(d), static_cast<size_t>(p_ - d));
    ++p_;
    if (!v.empty() && v == last_dtype_name_) {
      r.dtype = last_dtype_;
    } else {
      if (!ParseDtype(v, &r.dtype)) return back();
      last_dtype_ = r.dtype;
      last_dtype_name_ = DtypeName(r.dtype);
    }
    if (!Literal(",\"shape\":[")) return back();
    if (!Eat(']')) {
      for (;;) {
        uint64_t dim = 0;
        if (!Number(&dim)) return back();
        if (words.size() - dims_at >= limits_.max_rank || words.size() - dims_at >= kMaxTableRank) {
          return back();
        }
        words.push_back(dim);
        if (Eat(',')) continue;
        if (Eat(']')) break;
        return back();
      }
    }
    r.rank = static_cast<uint16_t>(words.size() - dims_at);
    if (!Literal(",\"data_offsets\":[") || !Number(&r.begin) || !Eat(',') || !Number(&r.end) ||
        !Literal("]}")) {
      return back();
    }
    return true;
  }

  bool Metadata() {
    if (!Eat('{')) return false;
    Ws();
    if (Eat('}')) return true;
    for (;;) {
      const uint8_t* open = p_;
      bool escaped = false;
      std::string_view k;
      if (!String(&k, &escaped) || !NameOk(k) || metadata.size() >= limits_.max_metadata_entries) {
        return false;
      }
      MetaEntry m{std::string(k), std::string(), kLengthFieldBytes + static_cast<uint64_t>(open - base_)};
      Ws();
      if (!Eat(':')) return false;
      Ws();
      std::string_view v;
      if (!String(&v, &escaped)) return false;
      m.value = std::string(v);
      metadata.push_back(std::move(m));
      Ws();
      if (Eat(',')) {
        Ws();
        continue;
      }
      if (Eat('}')) return true;
      return false;
    }
  }

  // Is: `s` is the literal `lit` (a fixed-size compare the compiler inlines).
  template <size_t N>
  static bool Is(std::string_view s, const char (&lit)[N]) {
    return s.size() == N - 1 && std::memcmp(s.data(), lit, N - 1) == 0;
  }

  Dtype last_dtype_ = Dtype::kU8;
  std::string_view last_dtype_name_;  // DtypeName's static text; empty at first
  const uint8_t* base_;
  const uint8_t* p_;
  const uint8_t* end_;
  const Limits& limits_;
  uint64_t data_start_;
  const HeaderReleaseFn* release_;
  const uint8_t* released_;
  std::string scratch_;
  std::string_view key_;
};

// FastChecks applies the rules that need the whole table (duplicate names,
// duplicate metadata keys, each tensor's size, the tiling) to what
// FastHeader read, sorting the table by offset; false when any fails.
bool FastChecks(FastHeader& f, uint64_t data_bytes) {
  TensorTable& table = f.table;
  auto& recs = TableAccess::Recs(table);
  const size_t n = recs.size();
  if (n > UINT32_MAX - 1) return false;
  // Duplicate names (a hash set, or a sort when the names collide).
  if (TableAccess::FindDuplicateName(table).duplicate) return false;
  auto& meta = f.metadata;
  std::stable_sort(meta.begin(), meta.end(),
                   [](const MetaEntry& a, const MetaEntry& b) { return a.key < b.key; });
  for (size_t i = 1; i < meta.size(); ++i) {
    if (meta[i].key == meta[i - 1].key) return false;
  }
  // CheckTensor's rules.
  for (const auto& r : recs) {
    if (r.end < r.begin) return false;
    uint64_t count = 1;
    bool overflow = false;
    for (uint64_t dim : TableAccess::Shape(table, r)) overflow |= __builtin_mul_overflow(count, dim, &count);
    uint64_t bits = 0;
    overflow |= __builtin_mul_overflow(count, uint64_t{DtypeBits(r.dtype)}, &bits);
    if (overflow || bits % 8 != 0 || bits / 8 != r.end - r.begin) return false;
  }
  // CheckLayout's order (begin, end, name) and tiling.
  auto less = [&](const TableAccess::Rec& a, const TableAccess::Rec& b) {
    if (a.begin != b.begin) return a.begin < b.begin;
    if (a.end != b.end) return a.end < b.end;
    return TableAccess::Name(table, a) < TableAccess::Name(table, b);
  };
  if (!std::is_sorted(recs.begin(), recs.end(), less)) std::sort(recs.begin(), recs.end(), less);
  uint64_t cursor = 0;
  for (const auto& r : recs) {
    if (r.end > data_bytes || r.begin != cursor) return false;
    cursor = r.end;
  }
  return cursor == data_bytes;
}

}  // namespace

namespace {

// SlowParse is the SAX parse: it names the first broken rule and its offset.
Result<Safetensors> SlowParse(std::span<const uint8_t> header, uint64_t file_size,
                              const Limits& limits) {
  if (file_size < kLengthFieldBytes) return TooShort(file_size);
  if (Status s = CheckLengthField(header.size(), file_size, limits); !s.ok()) return s.error();

  // reference: from_utf8 over the whole header -> InvalidHeader.
  if (size_t bad = FirstInvalidUtf8(header); bad != kUtf8Valid) {
    return Error{Code::kStHeaderUtf8, kLengthFieldBytes + bad, "header is not valid UTF-8"};
  }
  // reference: starts_with('{') -> InvalidHeaderStart (no whitespace, no BOM).
  if (header[0] != '{') {
    return Error{Code::kStHeaderStart, kLengthFieldBytes,
                 "header must start with '{', not byte 0x" +
                     std::string(1, "0123456789abcdef"[header[0] >> 4]) +
                     std::string(1, "0123456789abcdef"[header[0] & 15])};
  }

  // A raw NUL is never valid JSON text, but nlohmann's lexer takes it for the
  // end of input: without this check `{}\0<anything>` would be accepted with
  // the bytes after the NUL unread (a second header could hide there).
  if (const void* nul = std::memchr(header.data(), 0, header.size()); nul != nullptr) {
    const auto at = static_cast<const uint8_t*>(nul) - header.data();
    return Error{Code::kStJsonSyntax, kLengthFieldBytes + static_cast<uint64_t>(at),
                 "raw NUL byte in the header"};
  }
  const uint64_t data_start = kLengthFieldBytes + header.size();
  const char* text = reinterpret_cast<const char*>(header.data());
  HeaderHandler handler(text, limits, data_start);
  // Reserve for the tensors the header plausibly names (each real entry has
  // a "dtype" key), so a 1.4 M-tensor header is not copied by vector growth.
  // Only an estimate: escaped keys are not counted and the vector grows.
  {
    const std::string_view view(text, header.size());
    uint64_t estimate = 0;
    for (size_t at = view.find("\"dtype\""); at != std::string_view::npos && estimate < limits.max_tensors;
         at = view.find("\"dtype\"", at + 7)) {
      ++estimate;
    }
    handler.tensors.reserve(static_cast<size_t>(estimate));
  }
  bool parsed = false;
  try {
    TrackingIter first(text, handler.read_to());
    TrackingIter last(text + header.size(), nullptr);
    parsed = nlohmann::json::sax_parse(first, last, &handler, nlohmann::json::input_format_t::json,
                                       /*strict=*/true, /*ignore_comments=*/false);
  } catch (const std::exception& e) {  // not expected from SAX; never escape as an exception
    if (handler.error.code == Code::kOk) {
      handler.error = Error{Code::kStJsonSyntax, kLengthFieldBytes, std::string("invalid JSON: ") + e.what()};
    }
  }
  if (!parsed || handler.error.code != Code::kOk) {
    if (handler.error.code == Code::kOk) {
      handler.error = Error{Code::kStJsonSyntax, kLengthFieldBytes, "invalid JSON"};
    }
    return std::move(handler.error);
  }

  Safetensors st;
  st.file_size = file_size;
  st.header_bytes = header.size();
  st.data_start = data_start;
  st.has_metadata = handler.has_metadata;

  // Duplicate tensor names: sort indices by name; a stable sort keeps the
  // file order among equals, so the later entry is the one reported.
  auto& tensors = handler.tensors;
  {
    std::vector<uint32_t> idx(tensors.size());
    std::iota(idx.begin(), idx.end(), 0u);
    std::stable_sort(idx.begin(), idx.end(),
                     [&](uint32_t a, uint32_t b) { return tensors[a].name < tensors[b].name; });
    const TensorInfo* dup = nullptr;
    for (size_t i = 1; i < idx.size(); ++i) {
      const auto& a = tensors[idx[i - 1]];
      const auto& b = tensors[idx[i]];
      if (a.name == b.name && (dup == nullptr || b.entry_offset < dup->entry_offset)) dup = &b;
    }
    if (dup != nullptr) {
      return Error{Code::kStDuplicateTensor, dup->entry_offset,
                   "tensor name " + Quoted(dup->name) + " appears more than once"};
    }
  }
  // Metadata: sorted bytewise by key, duplicates (after unescaping) rejected.
  auto& meta = handler.metadata;
  std::stable_sort(meta.begin(), meta.end(),
                   [](const MetaEntry& a, const MetaEntry& b) { return a.key < b.key; });
  {
    const MetaEntry* dup = nullptr;
    for (size_t i = 1; i < meta.size(); ++i) {
      if (meta[i].key == meta[i - 1].key &&
          (dup == nullptr || meta[i].key_offset < dup->key_offset)) {
        dup = &meta[i];
      }
    }
    if (dup != nullptr) {
      return Error{Code::kStDuplicateKey, dup->key_offset,
                   "__metadata__ key " + Quoted(dup->key) + " appears more than once"};
    }
  }
  for (const auto& t : tensors) {
    if (Status s = CheckTensor(t); !s.ok()) return s.error();
  }
  if (Status s = CheckLayout(tensors, data_start, file_size - data_start); !s.ok()) {
    return s.error();
  }
  st.tensors = TensorTable(tensors);
  st.metadata.reserve(meta.size());
  for (auto& m : meta) st.metadata.emplace_back(std::move(m.key), std::move(m.value));
  return st;
}

Result<Safetensors> ParseHeader(std::span<const uint8_t> header, uint64_t file_size,
                                const Limits& limits, const HeaderReleaseFn* release) {
  if (file_size < kLengthFieldBytes) return TooShort(file_size);
  if (Status s = CheckLengthField(header.size(), file_size, limits); !s.ok()) return s.error();
  const uint64_t data_start = kLengthFieldBytes + header.size();
  {
    FastHeader fast(header, limits, data_start, release);
    if (fast.Run() && FastChecks(fast, file_size - data_start)) {
      Safetensors st;
      st.file_size = file_size;
      st.header_bytes = header.size();
      st.data_start = data_start;
      st.has_metadata = fast.has_metadata;
      st.tensors = std::move(fast.table);
      st.metadata.reserve(fast.metadata.size());
      for (auto& m : fast.metadata) st.metadata.emplace_back(std::move(m.key), std::move(m.value));
      return st;
    }
  }
  return SlowParse(header, file_size, limits);
}

}  // namespace

Result<Safetensors> ParseSafetensorsHeader(std::span<const uint8_t> header, uint64_t file_size,
                                           const Limits& limits) {
  return ParseHeader(header, file_size, limits, nullptr);
}

Result<Safetensors> ParseSafetensors(std::span<const uint8_t> file, const Limits& limits,
                                     const HeaderReleaseFn& release) {
  if (file.size() < kLengthFieldBytes) return TooShort(file.size());
  const uint64_t n = LeU64(file.data());
  if (Status s = CheckLengthField(n, file.size(), limits); !s.ok()) return s.error();
  return ParseHeader(file.subspan(kLengthFieldBytes, static_cast<size_t>(n)), file.size(), limits,
                     &release);
}

Result<Safetensors> ParseSafetensors(std::span<const uint8_t> file, const Limits& limits) {
  return ParseSafetensors(file, limits, HeaderReleaseFn());
}

Result<Safetensors> ParseSafetensorsSax(std::span<const uint8_t> file, const Limits& limits) {
  if (file.size() < kLengthFieldBytes) return TooShort(file.size());
  const uint64_t n = LeU64(file.data());
  if (Status s = CheckLengthField(n, file.size(), limits); !s.ok()) return s.error();
  return SlowParse(file.subspan(kLengthFieldBytes, static_cast<size_t>(n)), file.size(), limits);
}

Result<Safetensors> ReadSafetensors(int fd, uint64_t file_size, const Limits& limits) {
  if (file_size < kLengthFieldBytes) return TooShort(file_size);
  uint8_t length_field[kLengthFieldBytes];
  if (Status s = PreadExact(fd, 0, length_field); !s.ok()) return s.error();
  const uint64_t n = LeU64(length_field);
  // Checked before allocating: the buffer is never sized by an unchecked claim.
  if (Status s = CheckLengthField(n, file_size, limits); !s.ok()) return s.error();
  std::vector<uint8_t> header(static_cast<size_t>(n));
  if (Status s = PreadExact(fd, kLengthFieldBytes, header); !s.ok()) return s.error();
  return ParseSafetensorsHeader(header, file_size, limits);
}

uint64_t CoveredBytes(const Safetensors& st) {
  uint64_t covered = st.data_start;
  for (const TensorView t : st.tensors) covered += t.size_bytes();
  return covered;
}

}  // namespace modelgate::core
