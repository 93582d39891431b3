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

}  // namespace

Result<Safetensors> ParseSafetensorsHeader(std::span<const uint8_t> header, uint64_t file_size,
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
  st.tensors = std::move(tensors);
  st.metadata.reserve(meta.size());
  for (auto& m : meta) st.metadata.emplace_back(std::move(m.key), std::move(m.value));
  return st;
}

Result<Safetensors> ParseSafetensors(std::span<const uint8_t> file, const Limits& limits) {
  if (file.size() < kLengthFieldBytes) return TooShort(file.size());
  const uint64_t n = LeU64(file.data());
  if (Status s = CheckLengthField(n, file.size(), limits); !s.ok()) return s.error();
  return ParseSafetensorsHeader(file.subspan(kLengthFieldBytes, static_cast<size_t>(n)),
                                file.size(), limits);
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
  for (const auto& t : st.tensors) covered += t.size_bytes();
  return covered;
}

}  // namespace modelgate::core
