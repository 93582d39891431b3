// modelgate core: the bounds-checked reader, error codes, limits and the
// strict safetensors parser. Every module reads untrusted bytes through
// ByteReader; every module reports problems as an Error (code + offset +
// message). No third-party types appear here.
#pragma once

#include <algorithm>
#include <array>
#include <compare>
#include <cassert>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <functional>
#include <initializer_list>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace modelgate::core {

inline constexpr std::string_view kVersion = "0.1.0";

// Code is a stable error code. Append-only: never renumber or reuse a value;
// each maps to one finding id (FindingId) and one default severity.
enum class Code : uint16_t {
  kOk = 0,
  // I/O (the gate could not read the file: not a verdict on its content).
  kIoOpen = 10,         // MG-IO-OPEN
  kIoRead = 11,         // MG-IO-READ
  kIoNotRegular = 12,   // MG-IO-NOT-REGULAR
  kIoChanged = 13,      // MG-IO-CHANGED
  // Safetensors framing.
  kStTruncated = 100,        // MG-ST-TRUNCATED
  kStHeaderTooLarge = 101,   // MG-ST-HEADER-TOO-LARGE
  kStOverlap = 102,          // MG-ST-OVERLAP
  kStShapeOverflow = 103,    // MG-ST-SHAPE-OVERFLOW
  kStHeaderLength = 104,     // MG-ST-HEADER-LENGTH
  kStHeaderEmpty = 105,      // MG-ST-HEADER-EMPTY
  kStHeaderUtf8 = 106,       // MG-ST-HEADER-UTF8
  kStHeaderStart = 107,      // MG-ST-HEADER-START
  kStJsonSyntax = 108,       // MG-ST-JSON-SYNTAX
  kStJsonDepth = 109,        // MG-ST-JSON-DEPTH
  kStDuplicateTensor = 110,  // MG-ST-DUPLICATE-TENSOR
  kStDuplicateKey = 111,     // MG-ST-DUPLICATE-KEY
  kStBadName = 112,          // MG-ST-BAD-NAME
  kStNameTooLong = 113,      // MG-ST-NAME-TOO-LONG
  kStTooManyTensors = 114,   // MG-ST-TOO-MANY-TENSORS
  kStMetadataType = 115,     // MG-ST-METADATA-TYPE
  kStEntryType = 116,        // MG-ST-ENTRY-TYPE
  kStEntryUnknownField = 117,  // MG-ST-ENTRY-UNKNOWN-FIELD
  kStEntryMissingField = 118,  // MG-ST-ENTRY-MISSING-FIELD
  kStFieldType = 119,        // MG-ST-FIELD-TYPE
  kStUnknownDtype = 120,     // MG-ST-UNKNOWN-DTYPE
  kStRankTooLarge = 121,     // MG-ST-RANK-TOO-LARGE
  kStPartialByte = 122,      // MG-ST-PARTIAL-BYTE
  kStSizeMismatch = 123,     // MG-ST-SIZE-MISMATCH
  kStOffsetsReversed = 124,  // MG-ST-OFFSETS-REVERSED
  kStGap = 125,              // MG-ST-GAP
  kStAlias = 126,            // MG-ST-ALIAS
  kStOutOfBounds = 127,      // MG-ST-OUT-OF-BOUNDS
  kStTrailingBytes = 128,    // MG-ST-TRAILING-BYTES
  kStTooManyKeys = 129,      // MG-ST-TOO-MANY-KEYS
  kStReservedEscaped = 130,  // MG-ST-RESERVED-ESCAPED: "__metadata__" spelled with escapes
  // Signatures (STSIG v1, keys). 300-399.
  kSigMissing = 300,          // MG-SIG-MISSING: no stsig.* keys
  kSigUntrusted = 301,        // MG-SIG-UNTRUSTED: no record by a trusted key
  kSigBadRecord = 302,        // MG-SIG-BAD-RECORD: stsig.v1 malformed (JSON, fields, types)
  kSigUnknownAlg = 303,       // MG-SIG-UNKNOWN-ALG: alg outside the allowlist
  kSigUnknownKey = 304,       // MG-SIG-UNKNOWN-KEY: an stsig.* key v1 does not define
  kSigBadSignature = 305,     // MG-SIG-BAD-SIGNATURE: Ed25519 check of M failed
  kSigDigestMap = 306,        // MG-SIG-DIGEST-MAP: stsig.v1.sha256 malformed or names differ
  kSigTensorMismatch = 307,   // MG-SIG-TENSOR-MISMATCH: tensor bytes differ from the digest
  kSigDuplicateKid = 308,     // MG-SIG-DUPLICATE-KID: two records by one key
  kSigKeyFormat = 309,        // MG-SIG-KEY-FORMAT: key file/PEM not an Ed25519 key
  kSigKeyWrite = 310,         // MG-SIG-KEY-WRITE: cannot create a key file (exists?)
  kSigCrypto = 311,           // MG-SIG-CRYPTO: libsodium/OpenSSL failure
  kSigOptions = 312,          // MG-SIG-OPTIONS: bad signing options
  kSigKeyEncrypted = 313,     // MG-SIG-KEY-ENCRYPTED: encrypted key, no passphrase given
  kSigKeyPassphrase = 314,    // MG-SIG-KEY-PASSPHRASE: the passphrase does not decrypt the key
  kSigPkcs11Uri = 315,        // MG-SIG-PKCS11-URI: the pkcs11: URI is malformed or refused
  kSigPkcs11Token = 316,      // MG-SIG-PKCS11-TOKEN: no token, or several, match the URI
  kSigPkcs11Login = 317,      // MG-SIG-PKCS11-LOGIN: wrong, locked or missing PIN
  kSigPkcs11Object = 318,     // MG-SIG-PKCS11-OBJECT: no (or no one usable) private key matches
  kSigPkcs11 = 319,           // MG-SIG-PKCS11: module load or other PKCS#11 failure
  // Sharded safetensors sets (modelgate/shard_index.h, signer set checks). 400-499.
  kSetIndex = 400,            // MG-SET-INDEX: index file malformed
  kSetShardPath = 401,        // MG-SET-SHARD-PATH: shard name leaves the directory
  kSetLimit = 402,            // MG-SET-LIMIT: index over a limit
  kSetShardMissing = 403,     // MG-SET-SHARD-MISSING: listed shard absent or not parsed
  kSetTensorMissing = 404,    // MG-SET-TENSOR-MISSING: weight_map tensor in no shard
  kSetTensorMisplaced = 405,  // MG-SET-TENSOR-MISPLACED: tensor in another shard than named
  kSetTensorDuplicate = 406,  // MG-SET-TENSOR-DUPLICATE: tensor in several shards
  kSetTensorExtra = 407,      // MG-SET-TENSOR-EXTRA: shard tensor the weight_map lacks
  kSetTotalSize = 408,        // MG-SET-TOTAL-SIZE: metadata.total_size wrong
  kSetDigest = 409,           // MG-SET-DIGEST: signed set digest differs from the set's
  kSetPosition = 410,         // MG-SET-POSITION: signed set index/count disagree with the index
  kSetIncomplete = 411,       // MG-SET-INCOMPLETE: signed set cannot be recomputed
  kSetNotSigned = 412,        // MG-SET-NOT-SIGNED: shard signed without a set record
  // Conversion of pickle checkpoints (`modelgate convert`).
  kConvUnsupported = 500,     // MG-CONV-UNSUPPORTED: format, dtype or construct not rebuilt
  kConvNotAllowed = 501,      // MG-CONV-NOT-ALLOWED: an object outside the rebuild allowlist
  kConvNotTensor = 502,       // MG-CONV-NOT-TENSOR: a non-tensor leaf that is not a string
  kConvStorage = 503,         // MG-CONV-STORAGE: a view past its storage, a bad record
  kConvName = 504,            // MG-CONV-NAME: a key that makes no tensor name, or a duplicate
  kConvLimit = 505,           // MG-CONV-LIMIT: a conversion limit
};

// Severity of a finding, most severe first.
enum class Severity : uint8_t { kCritical = 0, kHigh, kMedium, kLow, kInfo };

std::string_view SeverityName(Severity s);
// ParseSeverity maps "critical".."info" to a Severity; false if unknown.
bool ParseSeverity(std::string_view name, Severity* out);

// FindingId is the stable `MG-<AREA>-<NAME>` id of `code` ("" for kOk).
std::string_view FindingId(Code code);
// DefaultSeverity is the severity a finding with `code` carries.
Severity DefaultSeverity(Code code);
// AllCodes lists every defined code except kOk (for tests and docs).
std::span<const Code> AllCodes();

inline constexpr uint64_t kNoOffset = UINT64_MAX;

// Quoted renders untrusted text for a terminal or a message: in double
// quotes, cut to `max_bytes` (marked with "...") so a hostile name cannot
// flood a report, and escaped so it can neither drive a terminal nor be
// misread: '"' and '\' as \" and \\; C0 controls, DEL and every byte of
// ill-formed UTF-8 (including a lone 0x80-0x9F, the one-byte C1 controls
// such as CSI 0x9B) as \xNN; the encoded C1 controls U+0080-U+009F, the bidi
// controls U+061C, U+200E, U+200F, U+202A-U+202E, U+2066-U+2069 and the
// separators U+2028, U+2029 as \uNNNN. Other UTF-8 is kept. Uncut, the
// form is reversible: two different texts never quote alike.
std::string Quoted(std::string_view text, size_t max_bytes = 200);
// EscapeControls escapes what Quoted escapes except '"' and '\', without
// quotes or a cut: for text that already holds Quoted names (a finding's
// message) on its way to a terminal. Quoted output passes unchanged.
std::string EscapeControls(std::string_view text);
// IsUtf8: `text` is well-formed UTF-8.
bool IsUtf8(std::string_view text);
// EscapeInvalidUtf8 is `text` unchanged when it is well-formed UTF-8, else
// with each byte of an ill-formed sequence as \xNN and each '\' as \\: a
// valid UTF-8 string (for JSON) that differs for any two ill-formed inputs.
// Callers carry the raw bytes beside it (the reports' *_bytes fields).
std::string EscapeInvalidUtf8(std::string_view text);

// Error is a rule that failed: its code, the absolute byte offset in the
// file where it failed (or kNoOffset), and a message naming the tensor and
// values involved. The CLI prefixes the path.
struct Error {
  Code code = Code::kOk;
  uint64_t offset = kNoOffset;
  std::string message;
};

// Result holds a T or the Error that prevented it.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Error error) : v_(std::move(error)) {}  // NOLINT
  bool ok() const { return v_.index() == 0; }
  const T& value() const& { assert(ok()); return *std::get_if<0>(&v_); }
  T& value() & { assert(ok()); return *std::get_if<0>(&v_); }
  T&& value() && { assert(ok()); return std::move(*std::get_if<0>(&v_)); }
  const Error& error() const { assert(!ok()); return *std::get_if<1>(&v_); }

 private:
  std::variant<T, Error> v_;
};
using Status = Result<std::monostate>;
inline Status OkStatus() { return std::monostate{}; }

// ByteReader reads untrusted bytes. It checks what remains before every
// read, never forms pos + n, and does not move on failure. `base` is the
// absolute file offset of the first byte, so errors carry file offsets.
class ByteReader {
 public:
  explicit ByteReader(std::span<const uint8_t> bytes, uint64_t base = 0)
      : bytes_(bytes), base_(base) {}

  uint64_t offset() const { return base_ + pos_; }
  size_t pos() const { return pos_; }
  size_t size() const { return bytes_.size(); }
  size_t remaining() const { return bytes_.size() - pos_; }
  bool empty() const { return pos_ == bytes_.size(); }

  Result<std::span<const uint8_t>> Take(uint64_t n);
  Status Skip(uint64_t n);
  // Seek moves to `pos` (relative to the start of the span).
  Status Seek(uint64_t pos);
  // Peek returns up to `n` bytes without moving.
  std::span<const uint8_t> Peek(size_t n) const;
  Result<uint8_t> U8();
  Result<uint16_t> U16Le();
  Result<uint32_t> U32Le();
  Result<uint64_t> U64Le();
  Result<uint16_t> U16Be();
  Result<uint32_t> U32Be();
  Result<uint64_t> U64Be();

 private:
  Result<uint64_t> UintLe(int width);
  Result<uint64_t> UintBe(int width);

  std::span<const uint8_t> bytes_;
  uint64_t base_;
  size_t pos_ = 0;
};

// Limits bound what a parser will accept and allocate. Each has a reason, a
// default, a policy override (a policy may only tighten) and tests at N and
// N+1.
struct Limits {
  // Same cap as the reference reader (safetensors MAX_HEADER_SIZE).
  uint64_t max_header_bytes = 100'000'000;
  // The reference has no cap; real shards hold thousands of tensors.
  uint64_t max_tensors = 1'000'000;
  // numpy's NPY_MAXDIMS.
  uint64_t max_rank = 64;
  // Longest tensor or metadata key name, in bytes after unescaping.
  uint64_t max_name_bytes = 65'536;
  // JSON nesting; a valid header needs 3 (object > entry > shape array).
  uint64_t max_json_depth = 16;
  // Entries in __metadata__ (bounded by the header size anyway; named so a
  // policy can tighten it).
  uint64_t max_metadata_entries = 1'000'000;
};

// Dtype is a safetensors element type.
enum class Dtype : uint8_t {
  kBool, kU8, kI8, kF8E5M2, kF8E4M3, kF8E8M0, kF8E4M3Fnuz, kF8E5M2Fnuz,
  kF4, kF6E2M3, kF6E3M2, kI16, kU16, kF16, kBF16, kI32, kU32, kF32, kI64,
  kU64, kF64, kC64,
};
// DtypeName is the header spelling ("F32"). DtypeBits is the element width.
std::string_view DtypeName(Dtype d);
uint32_t DtypeBits(Dtype d);
// ParseDtype maps an exact header spelling to a Dtype; false if unknown.
bool ParseDtype(std::string_view name, Dtype* out);
std::span<const Dtype> AllDtypes();

// TensorInfo is one tensor entry as a value that owns its name and shape
// (for building a table by hand, or a copy of one entry of a parsed file).
// Offsets are relative to the start of the data section as written in the
// header; file_begin()/file_end() are absolute file offsets.
struct TensorInfo {
  std::string name;
  Dtype dtype = Dtype::kU8;
  std::vector<uint64_t> shape;
  uint64_t begin = 0;  // data_offsets[0]
  uint64_t end = 0;    // data_offsets[1]
  uint64_t entry_offset = 0;  // absolute offset of the entry's name in the header
  uint64_t data_start = 0;    // absolute offset of the data section

  uint64_t file_begin() const { return data_start + begin; }
  uint64_t file_end() const { return data_start + end; }
  uint64_t size_bytes() const { return end - begin; }
  // ElementCount: product of the shape (validated not to overflow).
  uint64_t ElementCount() const;
};

// Dims is a view of one tensor's shape inside a TensorTable. It compares
// equal to another Dims or a std::vector<uint64_t> with the same values.
class Dims {
 public:
  Dims() = default;
  explicit Dims(std::span<const uint64_t> dims) : dims_(dims) {}
  size_t size() const { return dims_.size(); }
  bool empty() const { return dims_.empty(); }
  const uint64_t* data() const { return dims_.data(); }
  const uint64_t* begin() const { return dims_.data(); }
  const uint64_t* end() const { return dims_.data() + dims_.size(); }
  uint64_t operator[](size_t i) const { return dims_[i]; }
  std::span<const uint64_t> span() const { return dims_; }
  operator std::vector<uint64_t>() const { return {begin(), end()}; }  // NOLINT: a copy on request

  friend bool operator==(Dims a, Dims b) {
    return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin());
  }
  friend bool operator==(Dims a, const std::vector<uint64_t>& b) {
    return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin());
  }

 private:
  std::span<const uint64_t> dims_;
};

// TensorName is a tensor's name in a TensorTable: a string_view into the
// table's arena that also converts to a std::string where a copy is wanted.
class TensorName : public std::string_view {
 public:
  TensorName() = default;
  TensorName(std::string_view v) : std::string_view(v) {}  // NOLINT
  operator std::string() const { return std::string(data(), size()); }  // NOLINT
};

// TensorView is one entry of a TensorTable, viewing the table's name arena
// and dims: valid while the table lives unchanged. The same fields as
// TensorInfo; converts to one (a copy) where an owning value is wanted.
struct TensorView {
  TensorName name;
  Dtype dtype = Dtype::kU8;
  Dims shape;
  uint64_t begin = 0;
  uint64_t end = 0;
  uint64_t entry_offset = 0;
  uint64_t data_start = 0;

  uint64_t file_begin() const { return data_start + begin; }
  uint64_t file_end() const { return data_start + end; }
  uint64_t size_bytes() const { return end - begin; }
  uint64_t ElementCount() const;
  operator TensorInfo() const {  // NOLINT: a copy on request
    return TensorInfo{std::string(name), dtype, shape, begin, end, entry_offset, data_start};
  }
};

// TensorTable holds the tensors of one file in three allocations, never a
// node per tensor: fixed-size records, every name in one arena and every
// dimension in one array (issue 16: a 650k-tensor header must not cost
// more memory than its text). Indexing and iteration yield TensorViews by
// value. All tensors of a table share one data_start (one file's data
// section): a TensorInfo pushed with another is a programming error.
class TensorTable {
 public:
  TensorTable() = default;
  TensorTable(const std::vector<TensorInfo>& tensors);  // NOLINT: `st.tensors = vec`
  TensorTable(std::initializer_list<TensorInfo> tensors);  // NOLINT: `st.tensors = {a, b}`

  size_t size() const { return recs_.size(); }
  bool empty() const { return recs_.empty(); }
  TensorView operator[](size_t i) const;
  // at is operator[] with a bounds check (std::out_of_range, as vector::at).
  TensorView at(size_t i) const;
  TensorView front() const { return (*this)[0]; }
  TensorView back() const { return (*this)[size() - 1]; }
  void push_back(const TensorInfo& t);
  void pop_back();
  void clear();
  void reserve(size_t tensor_count);
  // set_data_start places every tensor of the table in a data section that
  // starts at `data_start` (a writer learns it after laying out the header).
  void set_data_start(uint64_t data_start) { data_start_ = data_start; }
  // HeapBytes is what the table holds on the heap (capacity, not size).
  size_t HeapBytes() const;

  class iterator {
   public:
    using iterator_category = std::random_access_iterator_tag;
    using value_type = TensorView;
    using difference_type = std::ptrdiff_t;
    using pointer = void;
    using reference = TensorView;
    iterator() = default;
    iterator(const TensorTable* table, size_t i) : table_(table), i_(i) {}
    TensorView operator*() const { return (*table_)[i_]; }
    TensorView operator[](difference_type n) const { return (*table_)[i_ + n]; }
    iterator& operator++() { ++i_; return *this; }
    iterator operator++(int) { iterator t = *this; ++i_; return t; }
    iterator& operator--() { --i_; return *this; }
    iterator operator--(int) { iterator t = *this; --i_; return t; }
    iterator& operator+=(difference_type n) { i_ += n; return *this; }
    iterator& operator-=(difference_type n) { i_ -= n; return *this; }
    friend iterator operator+(iterator a, difference_type n) { return a += n; }
    friend iterator operator+(difference_type n, iterator a) { return a += n; }
    friend iterator operator-(iterator a, difference_type n) { return a -= n; }
    friend difference_type operator-(iterator a, iterator b) {
      return static_cast<difference_type>(a.i_) - static_cast<difference_type>(b.i_);
    }
    friend bool operator==(iterator a, iterator b) { return a.i_ == b.i_; }
    friend auto operator<=>(iterator a, iterator b) { return a.i_ <=> b.i_; }

   private:
    const TensorTable* table_ = nullptr;
    size_t i_ = 0;
  };
  using const_iterator = iterator;
  iterator begin() const { return {this, 0}; }
  iterator end() const { return {this, size()}; }

 private:
  // Rec is one tensor in 40 bytes. Its name is the first name_bytes bytes
  // of words_[at...], its shape the `rank` words after the name's words.
  struct Rec {
    uint64_t begin;
    uint64_t end;
    uint64_t entry_offset;
    uint64_t at;
    uint32_t name_bytes;
    uint16_t rank;
    Dtype dtype;
  };
  static_assert(sizeof(Rec) == 40);
  friend struct TableAccess;  // the parser (safetensors.cc) builds tables in place

  std::vector<Rec> recs_;
  std::vector<uint64_t> words_;  // names (8-byte aligned, zero padded) and dims
  uint64_t data_start_ = 0;
};

// kMaxTableRank and kMaxTableNameBytes are what one TensorTable record can
// hold; a parse under Limits raised past them refuses a tensor beyond them
// (kStRankTooLarge, kStNameTooLong) instead of truncating it.
inline constexpr uint64_t kMaxTableRank = UINT16_MAX;
inline constexpr uint64_t kMaxTableNameBytes = UINT32_MAX;

// Safetensors is a parsed, fully validated file: tensors in data-offset
// order (ties broken by end, then name), metadata sorted bytewise by key.
struct Safetensors {
  uint64_t file_size = 0;
  uint64_t header_bytes = 0;  // N, the header length field
  uint64_t data_start = 0;    // 8 + N
  bool has_metadata = false;  // an __metadata__ object was present
  TensorTable tensors;
  std::vector<std::pair<std::string, std::string>> metadata;

  uint64_t data_bytes() const { return file_size - data_start; }
};

// ParseSafetensors checks `file` (the whole file in memory) against every
// core rule. On failure, names the first broken rule and its offset.
// Allocates within `limits`, not within what the file claims.
Result<Safetensors> ParseSafetensors(std::span<const uint8_t> file,
                                     const Limits& limits);

// HeaderReleaseFn is told, as the parse moves through the header, the
// absolute file offset before which it has finished with the bytes: the
// owner of a file mapping may drop those pages from memory (they must stay
// readable: a header the one-pass parse refuses is read again from the
// start, by the parse that names the broken rule).
using HeaderReleaseFn = std::function<void(uint64_t file_offset)>;
// ParseSafetensors as above, telling `release` what it has finished with.
Result<Safetensors> ParseSafetensors(std::span<const uint8_t> file, const Limits& limits,
                                     const HeaderReleaseFn& release);

// ParseSafetensorsSax is ParseSafetensors by the SAX parse alone, the parse
// that names a broken rule, without the one-pass parse that accepted files
// take: for tests and the fuzz target, which check both give one answer.
Result<Safetensors> ParseSafetensorsSax(std::span<const uint8_t> file, const Limits& limits);

// ParseSafetensorsHeader checks a header given its bytes (the N bytes after
// the length field) and the total file size. The length field itself must
// already have been checked against the limit and the file size.
Result<Safetensors> ParseSafetensorsHeader(std::span<const uint8_t> header,
                                           uint64_t file_size,
                                           const Limits& limits);

// ReadSafetensors parses the file open at `fd` without reading tensor data:
// it preads the 8-byte length, checks it, then preads only the header bytes.
// `file_size` is the size from fstat.
Result<Safetensors> ReadSafetensors(int fd, uint64_t file_size,
                                    const Limits& limits);

// CoveredBytes is 8 + N + the bytes covered by tensors; equal to the file
// size for every accepted file (a fuzz invariant).
uint64_t CoveredBytes(const Safetensors& st);

// UniqueFd owns one descriptor and closes it when dropped (file.cc).
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& o) noexcept : fd_(o.release()) {}
  UniqueFd& operator=(UniqueFd&& o) noexcept {
    if (this != &o) reset(o.release());
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd() { reset(); }
  int get() const { return fd_; }
  // release gives the descriptor up without closing it.
  int release() {
    int fd = fd_;
    fd_ = -1;
    return fd;
  }
  // reset closes the descriptor held (if any) and holds `fd`.
  void reset(int fd = -1);

 private:
  int fd_ = -1;
};

// OpenedFile is a read-only regular file opened without following a final
// symlink and without blocking on FIFOs. The identity fields are its fstat
// at the open: what CheckUnchanged compares before a verdict.
struct OpenedFile {
  int fd = -1;
  uint64_t size = 0;
  uint64_t dev = 0, ino = 0;
  int64_t mtime_sec = 0, mtime_nsec = 0;
  int64_t ctime_sec = 0, ctime_nsec = 0;
  OpenedFile() = default;
  OpenedFile(const OpenedFile&) = delete;
  OpenedFile& operator=(const OpenedFile&) = delete;
  OpenedFile(OpenedFile&& o) noexcept;
  OpenedFile& operator=(OpenedFile&& o) noexcept;
  ~OpenedFile();
};
// OpenRegularFile opens `path` O_RDONLY|O_NONBLOCK|O_CLOEXEC (plus
// O_NOFOLLOW when `follow_symlink` is false) and fstats it; only regular
// files are accepted.
Result<OpenedFile> OpenRegularFile(const std::string& path, bool follow_symlink);
// AdoptRegularFile takes ownership of the open descriptor `fd` (closed on
// error too) and fstats it as OpenRegularFile does: only a regular file.
Result<OpenedFile> AdoptRegularFile(int fd);
// CheckUnchanged fstats `file.fd` again and compares dev, ino, size, mtime
// and ctime (with nanoseconds) with the open's: a file written, truncated
// or touched since then is kIoChanged, the message naming what changed
// (e.g. "file changed while being judged (size 4096 -> 8, mtime)"). What was
// read before and after such a change need not be one file's bytes, so the
// caller cannot judge it. A failing fstat is kIoRead.
Status CheckUnchanged(const OpenedFile& file);
// PreadExact reads exactly out.size() bytes at `offset`, retrying on EINTR
// and short reads; an early EOF is kIoChanged (the file shrank after it was
// sized), any other failure kIoRead.
Status PreadExact(int fd, uint64_t offset, std::span<uint8_t> out);

// WriteFileAtomic replaces `path` with `bytes` through one AtomicOutput
// (modelgate/atomic_file.h): at any interruption the old file (or no file)
// is what a reader sees, and no temp file is left behind. `mode` is used for a new
// file; an existing file's mode is kept.
Status WriteFileAtomic(const std::string& path, std::span<const uint8_t> bytes,
                       unsigned mode = 0644);

// GuardedMapping is a read-only private mapping of an open file that a
// concurrent truncation cannot turn into a crash: a page that vanished reads
// as zeros (a process-wide SIGBUS handler, installed on first use, maps a
// zero page there and chains every other SIGBUS to the previous handler),
// and faulted() tells the caller that what it read is not the file. Callers
// check faulted() (and re-check the file's identity) before trusting any
// judgement made on the bytes. At most 256 guarded mappings live at once.
class GuardedMapping {
 public:
  static Result<GuardedMapping> Map(int fd, uint64_t size);
  GuardedMapping() = default;
  GuardedMapping(GuardedMapping&& o) noexcept;
  GuardedMapping& operator=(GuardedMapping&& o) noexcept;
  GuardedMapping(const GuardedMapping&) = delete;
  GuardedMapping& operator=(const GuardedMapping&) = delete;
  ~GuardedMapping();
  std::span<const uint8_t> bytes() const { return {data_, static_cast<size_t>(size_)}; }
  // faulted: some page of the mapping was gone when read (the file shrank).
  bool faulted() const;
  // ReleasePages drops the whole pages inside [offset, offset + size_bytes)
  // from this process's memory (madvise MADV_DONTNEED): they stay mapped and
  // read the same bytes again from the page cache when touched. For a file
  // read once, so that it costs no resident memory once judged.
  void ReleasePages(uint64_t offset, uint64_t size_bytes) const;

 private:
  void Release();
  const uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
  void* slot_ = nullptr;
};

// --- hashing ---
// SHA-256 through OpenSSL EVP (SHA-NI where the CPU has it; libsodium's
// SHA-256 is several times slower), and a parallel hasher for byte ranges of
// one file or of many.

inline constexpr size_t kSha256Bytes = 32;
using Sha256Digest = std::array<uint8_t, kSha256Bytes>;

// Sha256 is the SHA-256 of `bytes`.
Sha256Digest Sha256(std::span<const uint8_t> bytes);

// Sha256Hasher hashes a byte stream given in pieces. Move-only.
class Sha256Hasher {
 public:
  Sha256Hasher();
  Sha256Hasher(Sha256Hasher&& o) noexcept;
  Sha256Hasher& operator=(Sha256Hasher&& o) noexcept;
  Sha256Hasher(const Sha256Hasher&) = delete;
  Sha256Hasher& operator=(const Sha256Hasher&) = delete;
  ~Sha256Hasher();
  void Update(std::span<const uint8_t> bytes);
  // Final returns the digest and resets the hasher for a new stream.
  Sha256Digest Final();

 private:
  void* ctx_ = nullptr;  // EVP_MD_CTX*
};

// HexLower is `bytes` as lowercase hex. ParseHexLower is the inverse; it
// accepts only lowercase hex of exactly 2 * out.size() characters.
std::string HexLower(std::span<const uint8_t> bytes);
bool ParseHexLower(std::string_view hex, std::span<uint8_t> out);

// ByteRange is `size_bytes` bytes at absolute file offset `offset`.
struct ByteRange {
  uint64_t offset = 0;
  uint64_t size_bytes = 0;
};

// ProgressFn is told how many more bytes were processed (read and hashed,
// or read by a scan). Callers may invoke it from several threads at once:
// it must be thread-safe, and cheap (it runs once per buffer).
using ProgressFn = std::function<void(uint64_t bytes)>;

struct HashOptions {
  // Worker threads; 0 means std::thread::hardware_concurrency().
  unsigned threads = 0;
  // Per-thread read buffer.
  size_t buffer_bytes = size_t{1} << 20;
  // Told the size of every buffer hashed (progress bars); may be empty.
  ProgressFn progress;
};

// FdRange is one range of the file open at `fd`. `name` (e.g. the file's
// path relative to a model root) prefixes the message of an error on this
// range, so a caller hashing many files learns which one failed; it must
// outlive the call.
struct FdRange {
  int fd = -1;
  ByteRange range;
  std::string_view name;
};

// HashFdRanges returns the SHA-256 of each range, in the order of `ranges`;
// the ranges may lie in any number of files (read with pread, so no fd's
// position moves; ranges may share an fd). Ranges are scheduled largest
// first over the worker threads (LPT): many ranges, of one file or of a
// directory's files, keep every thread busy. One range is always one
// sequential SHA-256 (a digest cannot be split), so a range holding more
// than half the bytes is hashed first on two threads, one reading ahead into
// a ring of buffers while the other hashes: the hash runs at the core's full
// SHA-256 speed instead of also paying for the copy. A read error or early
// EOF (the file shrank) is returned as an Error with the failing offset in
// that range's file (and its `name`); the other workers stop early.
Result<std::vector<Sha256Digest>> HashFdRanges(std::span<const FdRange> ranges,
                                               const HashOptions& options = {});

// HashRanges is HashFdRanges for ranges of the one file open at `fd`.
Result<std::vector<Sha256Digest>> HashRanges(int fd, std::span<const ByteRange> ranges,
                                             const HashOptions& options = {});

// HashSpans is HashRanges for bytes already in memory (e.g. a mapping).
std::vector<Sha256Digest> HashSpans(std::span<const std::span<const uint8_t>> spans,
                                    const HashOptions& options = {});
// --- end hashing ---

}  // namespace modelgate::core
