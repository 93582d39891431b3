// The pickle machine: a symbolic copy of CPython's C unpickler
// (Modules/_pickle.c, load()). It keeps the same object stack, mark stack
// (with the same "fence": nothing below the innermost MARK can be popped),
// memo (an index -> object table whose MEMOIZE key is the number of entries)
// and protocol state, but its objects are symbols: exact strings and bytes,
// small ints, bounded tuples, containers that only count their items, the
// globals find_class would return, and the opaque results of calls, which
// remember their callee. Where a real load would fail, the stream stops
// there and everything before it still counts: those calls ran.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "modelgate/scanner.h"
#include "pickle_internal.h"

namespace modelgate::scanner {
namespace {

namespace pi = pickle_internal;
using core::ByteReader;
using core::kNoOffset;
using core::Quoted;

// Opcodes (Lib/pickle.py). The value is the protocol that introduced it.
struct OpInfo {
  const char* name;
  int proto;
};
OpInfo Info(uint8_t op) {
  switch (op) {
    case '(': return {"MARK", 0};
    case '.': return {"STOP", 0};
    case '0': return {"POP", 0};
    case '1': return {"POP_MARK", 1};
    case '2': return {"DUP", 0};
    case 'F': return {"FLOAT", 0};
    case 'I': return {"INT", 0};
    case 'J': return {"BININT", 1};
    case 'K': return {"BININT1", 1};
    case 'L': return {"LONG", 0};
    case 'M': return {"BININT2", 1};
    case 'N': return {"NONE", 0};
    case 'P': return {"PERSID", 0};
    case 'Q': return {"BINPERSID", 1};
    case 'R': return {"REDUCE", 0};
    case 'S': return {"STRING", 0};
    case 'T': return {"BINSTRING", 1};
    case 'U': return {"SHORT_BINSTRING", 1};
    case 'V': return {"UNICODE", 0};
    case 'X': return {"BINUNICODE", 1};
    case 'a': return {"APPEND", 0};
    case 'b': return {"BUILD", 0};
    case 'c': return {"GLOBAL", 0};
    case 'd': return {"DICT", 0};
    case '}': return {"EMPTY_DICT", 1};
    case 'e': return {"APPENDS", 1};
    case 'g': return {"GET", 0};
    case 'h': return {"BINGET", 1};
    case 'i': return {"INST", 0};
    case 'j': return {"LONG_BINGET", 1};
    case 'l': return {"LIST", 0};
    case ']': return {"EMPTY_LIST", 1};
    case 'o': return {"OBJ", 1};
    case 'p': return {"PUT", 0};
    case 'q': return {"BINPUT", 1};
    case 'r': return {"LONG_BINPUT", 1};
    case 's': return {"SETITEM", 0};
    case 't': return {"TUPLE", 0};
    case ')': return {"EMPTY_TUPLE", 1};
    case 'u': return {"SETITEMS", 1};
    case 'G': return {"BINFLOAT", 1};
    case 0x80: return {"PROTO", 2};
    case 0x81: return {"NEWOBJ", 2};
    case 0x82: return {"EXT1", 2};
    case 0x83: return {"EXT2", 2};
    case 0x84: return {"EXT4", 2};
    case 0x85: return {"TUPLE1", 2};
    case 0x86: return {"TUPLE2", 2};
    case 0x87: return {"TUPLE3", 2};
    case 0x88: return {"NEWTRUE", 2};
    case 0x89: return {"NEWFALSE", 2};
    case 0x8a: return {"LONG1", 2};
    case 0x8b: return {"LONG4", 2};
    case 'B': return {"BINBYTES", 3};
    case 'C': return {"SHORT_BINBYTES", 3};
    case 0x8c: return {"SHORT_BINUNICODE", 4};
    case 0x8d: return {"BINUNICODE8", 4};
    case 0x8e: return {"BINBYTES8", 4};
    case 0x8f: return {"EMPTY_SET", 4};
    case 0x90: return {"ADDITEMS", 4};
    case 0x91: return {"FROZENSET", 4};
    case 0x92: return {"NEWOBJ_EX", 4};
    case 0x93: return {"STACK_GLOBAL", 4};
    case 0x94: return {"MEMOIZE", 4};
    case 0x95: return {"FRAME", 4};
    case 0x96: return {"BYTEARRAY8", 5};
    case 0x97: return {"NEXT_BUFFER", 5};
    case 0x98: return {"READONLY_BUFFER", 5};
    default: return {nullptr, -1};
  }
}

constexpr int kHighestProtocol = 5;
// Tuples keep their first items (calls need their arguments) down to a
// bounded depth; deeper or wider structure is only counted. A per-stream
// budget of kept references bounds memory whatever the stream does.
constexpr size_t kKeptItems = 16;
constexpr uint8_t kKeptDepth = 24;
constexpr uint64_t kKeptBudget = 1'000'000;
// torch's legacy format (what _load_from_bytes reads) has five pickles:
// magic number, protocol version, sys info, the object, storage keys.
constexpr uint64_t kNestedStreams = 5;
constexpr size_t kMaxDisagreementsPerStream = 32;

enum class VKind : uint8_t {
  kNone, kBool, kInt, kFloat, kStr, kBytes, kByteArray, kTuple, kList, kDict, kSet,
  kFrozenSet, kGlobal, kResult, kPersistent, kBuffer,
};

struct Value;
using Ref = std::shared_ptr<Value>;

struct Value {
  // Rare parts live apart so that the common value (an int, a literal
  // string or bytes in place, a counted container) stays small.
  struct Extra {
    std::string owned;         // decoded text
    std::vector<Ref> items;    // tuples/frozensets: first kKeptItems items
    std::string module, qualname;  // kGlobal: what find_class returned
    std::string callee;        // kResult/kPersistent: what made it
  };

  VKind kind = VKind::kNone;
  bool int_fits = true;
  bool use_owned = false;
  bool truncated = false;
  bool py2_string = false;  // STRING/BINSTRING: bytes under encoding='bytes'
  bool callee_safe = false;
  uint8_t depth = 0;
  GlobalClass safety = GlobalClass::kUnknown;
  int64_t int_value = 0;
  // Text (kStr, kBytes, kByteArray): the literal in the input, or a decoded
  // copy for escaped protocol 0 text.
  std::span<const uint8_t> view;
  uint64_t data_offset = kNoOffset;  // absolute offset of the payload
  const char* origin_op = "";
  uint64_t origin_offset = kNoOffset;
  uint64_t count = 0;  // container items
  int64_t import_index = -1;
  std::unique_ptr<Extra> extra;

  Extra& x() {
    if (!extra) extra = std::make_unique<Extra>();
    return *extra;
  }
  const Extra& x() const {
    static const Extra kEmpty;
    return extra ? *extra : kEmpty;
  }
  std::string_view text() const {
    if (use_owned) return x().owned;
    return {reinterpret_cast<const char*>(view.data()), view.size()};
  }
  bool Native() const {
    return kind != VKind::kGlobal && kind != VKind::kResult && kind != VKind::kPersistent;
  }
  // Hashable: the builtin mutable containers are not (dict/set keys).
  bool Unhashable() const {
    return kind == VKind::kList || kind == VKind::kDict || kind == VKind::kSet ||
           kind == VKind::kByteArray;
  }
};

const char* KindName(VKind k) {
  switch (k) {
    case VKind::kNone: return "NoneType";
    case VKind::kBool: return "bool";
    case VKind::kInt: return "int";
    case VKind::kFloat: return "float";
    case VKind::kStr: return "str";
    case VKind::kBytes: return "bytes";
    case VKind::kByteArray: return "bytearray";
    case VKind::kTuple: return "tuple";
    case VKind::kList: return "list";
    case VKind::kDict: return "dict";
    case VKind::kSet: return "set";
    case VKind::kFrozenSet: return "frozenset";
    case VKind::kGlobal: return "global";
    case VKind::kResult: return "call result";
    case VKind::kPersistent: return "persistent object";
    case VKind::kBuffer: return "buffer";
  }
  return "object";
}

std::string U64(uint64_t v) { return std::to_string(v); }

// Stop is how an opcode ends the stream: the reason is already recorded.
struct Stop {};

class Machine {
 public:
  Machine(const PickleOptions& options, PickleAnalysis* out, uint32_t depth,
          uint64_t parent_offset)
      : opt_(options), lim_(options.limits), out_(out), depth_(depth),
        parent_offset_(parent_offset), none_(std::make_shared<Value>()),
        bool_(std::make_shared<Value>()), float_(std::make_shared<Value>()) {
    bool_->kind = VKind::kBool;
    float_->kind = VKind::kFloat;
  }

  // RunStreams analyzes the pickle at the start of `bytes` and each one
  // that follows a STOP, up to `stream_cap` streams.
  void RunStreams(std::span<const uint8_t> bytes, uint64_t base, uint64_t stream_cap,
                  bool report_trailing);

 private:
  // --- stream lifecycle
  bool RunOne(ByteReader& r);
  void ResetStream();
  [[noreturn]] void Fail(const std::string& why);
  [[noreturn]] void Underflow();
  [[noreturn]] void LimitHit(const std::string& what);
  void Anomaly(PickleAnomalyKind kind, core::Severity sev, uint64_t offset, std::string msg);
  bool RecordRoom();

  // --- reading
  std::string_view ReadLine(ByteReader& r);
  std::span<const uint8_t> Take(ByteReader& r, uint64_t n);
  uint64_t ReadUint(ByteReader& r, int width);

  // --- stack
  size_t fence() const { return marks_.empty() ? 0 : marks_.back(); }
  void Push(Ref v);
  Ref Pop();
  size_t Marker();
  Ref& Top();

  // --- values
  Ref Make(VKind k);
  Ref MakeInt(int64_t v, bool fits);
  Ref MakeText(VKind k, std::span<const uint8_t> bytes, uint64_t offset);
  Ref MakeOwnedText(VKind k, std::string text, uint64_t offset);
  Ref MakeSequence(VKind k, size_t start);  // from stack[start, end), popped

  // --- semantics
  void Dispatch(ByteReader& r, uint8_t op, bool* stop);
  void Frame(ByteReader& r);
  void IntText(std::string_view line, bool is_long);
  size_t MemoIndexText(std::string_view line);
  void MemoPut(uint64_t idx, const Ref& v);
  void MemoGet(uint64_t idx);
  void FindClass(std::string module, std::string qualname, const std::string& resolved_by,
                 bool truncated);
  void Extension(uint64_t code);
  void Call(const Ref& callee, const Ref& args, const Ref& kwargs);
  void Build();
  void Mutate(size_t target_index, const char* what, bool keys_at_even);
  void DoAppend(int64_t x);
  void DoSetItems(int64_t x);
  void AddItems();
  void Persistent(const Ref& pid, std::string desc);
  void Nested(const Ref& arg);
  void RecordCall(std::string callee, int64_t import_index, bool allowed, bool flagged,
                  std::string reason);
  std::string Describe(const Value& v) const;

  const PickleOptions& opt_;
  const PickleLimits& lim_;
  PickleAnalysis* out_;
  uint32_t depth_;
  uint64_t parent_offset_;

  // Per stream.
  size_t stream_index_ = 0;
  std::vector<Ref> stack_;
  std::vector<size_t> marks_;
  std::unordered_map<uint64_t, Ref> memo_;
  int proto_ = 0;
  bool saw_proto_ = false;
  bool lie_reported_ = false;
  bool straddle_reported_ = false;
  bool frame_active_ = false;
  size_t frame_end_ = 0;  // reader position where the current frame ends
  uint64_t string_bytes_ = 0;
  bool string_limit_reported_ = false;
  uint64_t kept_budget_ = 0;
  size_t disagreements_ = 0;
  uint64_t op_offset_ = 0;
  const char* op_name_ = "";
  std::unordered_map<std::string, size_t> allowed_calls_;
  // Immutable scalars whose value the analysis never needs: shared.
  Ref none_, bool_, float_;
};

// --- stream lifecycle --------------------------------------------------------

void Machine::ResetStream() {
  stack_.clear();
  marks_.clear();
  memo_.clear();
  proto_ = 0;
  saw_proto_ = false;
  lie_reported_ = false;
  straddle_reported_ = false;
  frame_active_ = false;
  frame_end_ = 0;
  string_bytes_ = 0;
  string_limit_reported_ = false;
  kept_budget_ = kKeptBudget;
  disagreements_ = 0;
  allowed_calls_.clear();
}

bool Machine::RecordRoom() {
  size_t n = out_->imports.size() + out_->calls.size() + out_->anomalies.size();
  if (n < lim_.max_records) return true;
  ++out_->records_dropped;
  if (!out_->limit_hit) {
    out_->limit_hit = true;
    PickleAnomaly a;  // the one record allowed past the cap: say it was hit
    a.kind = PickleAnomalyKind::kLimit;
    a.severity = core::Severity::kHigh;
    a.offset = op_offset_;
    a.opcode = op_name_;
    a.message = "more than max_records (" + U64(lim_.max_records) +
                ") imports, calls and anomalies; the rest are not listed";
    a.stream = static_cast<uint32_t>(stream_index_);
    out_->anomalies.push_back(std::move(a));
  }
  return false;
}

void Machine::Anomaly(PickleAnomalyKind kind, core::Severity sev, uint64_t offset,
                      std::string msg) {
  if (kind == PickleAnomalyKind::kLimit) out_->limit_hit = true;
  if (!RecordRoom()) return;
  PickleAnomaly a;
  a.kind = kind;
  a.severity = sev;
  a.offset = offset;
  a.opcode = op_name_;
  a.message = std::move(msg);
  a.stream = static_cast<uint32_t>(stream_index_);
  out_->anomalies.push_back(std::move(a));
}

void Machine::Fail(const std::string& why) {
  PickleStream& st = out_->streams[stream_index_];
  st.error = why;
  st.error_offset = op_offset_;
  throw Stop{};
}

void Machine::Underflow() {
  Fail(marks_.empty() ? "unpickling stack underflow" : "unexpected MARK found");
}

void Machine::LimitHit(const std::string& what) {
  Anomaly(PickleAnomalyKind::kLimit, core::Severity::kHigh, op_offset_,
          what + " reached at " + std::string(op_name_) + "; the rest of the stream is not analyzed");
  PickleStream& st = out_->streams[stream_index_];
  st.error = "limit: " + what;
  st.error_offset = op_offset_;
  throw Stop{};
}

void Machine::RunStreams(std::span<const uint8_t> bytes, uint64_t base, uint64_t stream_cap,
                         bool report_trailing) {
  ByteReader r(bytes, base);
  uint64_t count = 0;
  do {
    if (count == stream_cap) {
      if (depth_ == 0) {
        op_name_ = "";
        op_offset_ = r.offset();
        Anomaly(PickleAnomalyKind::kLimit, core::Severity::kHigh, r.offset(),
                "max_streams (" + U64(stream_cap) + ") reached; " + U64(r.remaining()) +
                    " more bytes are not analyzed");
      }
      return;
    }
    size_t imports_before = out_->imports.size(), calls_before = out_->calls.size(),
           anomalies_before = out_->anomalies.size(), streams_before = out_->streams.size();
    uint64_t start = r.offset();
    bool proto_start = r.remaining() >= 2 && r.Peek(2)[0] == 0x80 && r.Peek(2)[1] <= kHighestProtocol;
    bool complete = RunOne(r);
    ++count;
    if (!complete && count > 1 && !proto_start && out_->imports.size() == imports_before &&
        out_->calls.size() == calls_before) {
      // Not a pickle: bytes after the last STOP that run nothing.
      out_->imports.resize(imports_before);
      out_->anomalies.resize(std::min(anomalies_before, out_->anomalies.size()));
      out_->streams.resize(streams_before);
      if (report_trailing) {
        op_name_ = "";
        stream_index_ = streams_before - 1;
        Anomaly(PickleAnomalyKind::kTrailingData, core::Severity::kLow, start,
                U64(base + bytes.size() - start) + " bytes after the last pickle are not a pickle");
      }
      return;
    }
    if (!complete) return;
  } while (!r.empty());
}

bool Machine::RunOne(ByteReader& r) {
  ResetStream();
  PickleStream st;
  st.offset = r.offset();
  st.depth = depth_;
  st.parent_offset = parent_offset_;
  stream_index_ = out_->streams.size();
  out_->streams.push_back(st);
  bool complete = false;
  try {
    for (;;) {
      op_offset_ = r.offset();
      op_name_ = "";
      size_t op_pos = r.pos();
      PickleStream& s = out_->streams[stream_index_];
      if (s.opcode_count == lim_.max_opcodes) {
        LimitHit("max_opcodes (" + U64(lim_.max_opcodes) + ")");
      }
      auto b = r.U8();
      if (!b.ok()) Fail("ran out of input: no STOP");
      uint8_t op = b.value();
      OpInfo info = Info(op);
      if (info.name == nullptr) {
        op_name_ = "";
        char buf[8];
        std::snprintf(buf, sizeof buf, "\\x%02x", op);
        Fail(std::string("invalid load key '") + buf + "'");
      }
      op_name_ = info.name;
      ++out_->streams[stream_index_].opcode_count;
      if (info.proto > out_->streams[stream_index_].max_opcode_protocol) {
        out_->streams[stream_index_].max_opcode_protocol = info.proto;
      }
      // A PROTO header that lies: an opcode newer than the declared
      // protocol (or than 1 with no PROTO at all).
      if (op != 0x80 && !lie_reported_ && info.proto >= 2 && info.proto > proto_) {
        lie_reported_ = true;
        Anomaly(PickleAnomalyKind::kDisagreement, core::Severity::kHigh, op_offset_,
                std::string(info.name) + " is a protocol " + std::to_string(info.proto) +
                    " opcode but the stream " +
                    (saw_proto_ ? "declares protocol " + std::to_string(proto_)
                                : std::string("has no PROTO")));
      }
      bool stop = false;
      Dispatch(r, op, &stop);
      if (frame_active_ && op != 0x95) {
        if (op_pos < frame_end_ && r.pos() > frame_end_ && !straddle_reported_) {
          straddle_reported_ = true;
          Anomaly(PickleAnomalyKind::kDisagreement, core::Severity::kHigh, op_offset_,
                  std::string(info.name) + " straddles the FRAME boundary at " +
                      U64(op_offset_ - op_pos + frame_end_) +
                      " (the C unpickler reads on, pickle.py raises)");
        }
        if (r.pos() >= frame_end_) frame_active_ = false;
      }
      if (stop) {
        complete = true;
        break;
      }
    }
  } catch (const Stop&) {
    complete = false;
  }
  PickleStream& s = out_->streams[stream_index_];
  s.protocol = proto_;
  s.complete = complete;
  s.end = complete ? r.offset() : s.error_offset;
  if (!complete && s.error.rfind("limit: ", 0) != 0) {
    Anomaly(PickleAnomalyKind::kMalformed, core::Severity::kHigh, s.error_offset,
            std::string(op_name_[0] ? op_name_ : "stream") + " at " + U64(s.error_offset) +
                ": " + s.error + "; calls before it still run on load");
  }
  return complete;
}

// --- reading -----------------------------------------------------------------

std::string_view Machine::ReadLine(ByteReader& r) {
  std::span<const uint8_t> rest = r.Peek(r.remaining());
  const void* nl = rest.empty() ? nullptr : std::memchr(rest.data(), '\n', rest.size());
  if (nl == nullptr) Fail("pickle data was truncated (no newline)");
  size_t n = static_cast<size_t>(static_cast<const uint8_t*>(nl) - rest.data());
  auto line = r.Take(n + 1);
  if (!line.ok()) Fail("pickle data was truncated");
  return {reinterpret_cast<const char*>(line.value().data()), n};
}

std::span<const uint8_t> Machine::Take(ByteReader& r, uint64_t n) {
  // Checked against what remains before anything is kept: a claimed size is
  // never allocated.
  auto b = r.Take(n);
  if (!b.ok()) {
    Fail("pickle data was truncated: " + std::string(op_name_) + " needs " + U64(n) +
         " bytes, " + U64(r.remaining()) + " remain");
  }
  return b.value();
}

uint64_t Machine::ReadUint(ByteReader& r, int width) {
  std::span<const uint8_t> b = Take(r, static_cast<uint64_t>(width));
  uint64_t v = 0;
  for (int i = width - 1; i >= 0; --i) v = (v << 8) | b[static_cast<size_t>(i)];
  return v;
}

// --- stack -------------------------------------------------------------------

void Machine::Push(Ref v) {
  if (stack_.size() + marks_.size() >= lim_.max_stack_depth) {
    LimitHit("max_stack_depth (" + U64(lim_.max_stack_depth) + ")");
  }
  stack_.push_back(std::move(v));
}

Ref Machine::Pop() {
  if (stack_.size() <= fence()) Underflow();
  Ref v = std::move(stack_.back());
  stack_.pop_back();
  return v;
}

size_t Machine::Marker() {
  if (marks_.empty()) Fail("could not find MARK");
  size_t m = marks_.back();
  marks_.pop_back();
  return m;
}

Ref& Machine::Top() {
  if (stack_.size() <= fence()) Underflow();
  return stack_.back();
}

// --- values ------------------------------------------------------------------

Ref Machine::Make(VKind k) {
  auto v = std::make_shared<Value>();
  v->kind = k;
  v->origin_op = op_name_;
  v->origin_offset = op_offset_;
  return v;
}

Ref Machine::MakeInt(int64_t value, bool fits) {
  Ref v = Make(VKind::kInt);
  v->int_value = value;
  v->int_fits = fits;
  return v;
}

Ref Machine::MakeText(VKind k, std::span<const uint8_t> bytes, uint64_t offset) {
  Ref v = Make(k);
  v->view = bytes;
  v->data_offset = offset;
  return v;
}

Ref Machine::MakeOwnedText(VKind k, std::string text, uint64_t offset) {
  Ref v = Make(k);
  v->use_owned = true;
  v->data_offset = offset;
  if (text.size() > lim_.max_string_bytes - std::min(string_bytes_, lim_.max_string_bytes)) {
    // Kept only up to the budget; the value is marked so that a name built
    // from it is never trusted.
    size_t keep = static_cast<size_t>(lim_.max_string_bytes - std::min(string_bytes_, lim_.max_string_bytes));
    text.resize(keep);
    v->truncated = true;
    if (!string_limit_reported_) {
      string_limit_reported_ = true;
      Anomaly(PickleAnomalyKind::kLimit, core::Severity::kHigh, op_offset_,
              "max_string_bytes (" + U64(lim_.max_string_bytes) + ") of decoded text reached at " +
                  op_name_ + "; longer strings are cut");
    }
  }
  string_bytes_ += text.size();
  v->x().owned = std::move(text);
  return v;
}

Ref Machine::MakeSequence(VKind k, size_t start) {
  Ref v = Make(k);
  v->count = stack_.size() - start;
  bool keep = k == VKind::kTuple || k == VKind::kFrozenSet;
  if (keep) {
    size_t n = std::min<size_t>(v->count, kKeptItems);
    uint8_t depth = 0;
    for (size_t i = 0; i < n; ++i) depth = std::max(depth, stack_[start + i]->depth);
    if (depth < kKeptDepth && n <= kept_budget_) {
      kept_budget_ -= n;
      v->depth = static_cast<uint8_t>(depth + 1);
      v->x().items.assign(stack_.begin() + static_cast<std::ptrdiff_t>(start),
                      stack_.begin() + static_cast<std::ptrdiff_t>(start + n));
    }
  }
  stack_.resize(start);
  return v;
}

std::string Machine::Describe(const Value& v) const {
  switch (v.kind) {
    case VKind::kGlobal: return v.x().module + "." + v.x().qualname;
    case VKind::kResult: return "<result of " + v.x().callee + ">";
    case VKind::kPersistent: return "<persistent object " + v.x().callee + ">";
    default: return std::string("<") + KindName(v.kind) + ">";
  }
}

// --- semantics ---------------------------------------------------------------

void Machine::IntText(std::string_view line, bool is_long) {
  pi::IntParse c = is_long ? pi::CLongOpcode(line) : pi::CIntOpcode(line);
  if (!c.ok) Fail("could not convert string to int: " + Quoted(line, 60));
  pi::IntParse t = pi::PickletoolsInt(line, is_long);
  bool differ = !t.ok || t.fits != c.fits || (c.fits && t.value != c.value);
  if (differ && disagreements_ < kMaxDisagreementsPerStream) {
    ++disagreements_;
    std::string ours = c.fits ? std::to_string(c.value) : std::string("a big int");
    std::string theirs = !t.ok ? std::string("rejects it") : t.fits ? "reads " + std::to_string(t.value) : "reads a big int";
    Anomaly(PickleAnomalyKind::kDisagreement, core::Severity::kHigh, op_offset_,
            std::string(op_name_) + " " + Quoted(line, 60) + ": pickle reads " + ours +
                ", pickletools " + theirs);
  }
  Push(MakeInt(c.value, c.fits));
}

size_t Machine::MemoIndexText(std::string_view line) {
  pi::IntParse c = pi::CMemoIndex(line);
  if (!c.ok) Fail("invalid literal for int(): " + Quoted(line, 60));
  pi::IntParse t = pi::PickletoolsInt(line, false);
  if ((!t.ok || t.value != c.value || t.fits != c.fits) &&
      disagreements_ < kMaxDisagreementsPerStream) {
    ++disagreements_;
    Anomaly(PickleAnomalyKind::kDisagreement, core::Severity::kHigh, op_offset_,
            std::string(op_name_) + " " + Quoted(line, 60) + ": pickle and pickletools read different memo keys");
  }
  if (!c.fits) Fail("memo index out of range: " + Quoted(line, 60));
  if (c.value < 0) {
    if (std::strcmp(op_name_, "PUT") == 0) Fail("negative PUT argument");
    Fail("Memo value not found at index " + std::to_string(c.value));
  }
  return static_cast<size_t>(c.value);
}

void Machine::MemoPut(uint64_t idx, const Ref& v) {
  auto it = memo_.find(idx);
  if (it != memo_.end()) {
    it->second = v;
    return;
  }
  if (memo_.size() >= lim_.max_memo_entries) {
    LimitHit("max_memo_entries (" + U64(lim_.max_memo_entries) + ")");
  }
  memo_.emplace(idx, v);
}

void Machine::MemoGet(uint64_t idx) {
  auto it = memo_.find(idx);
  if (it == memo_.end()) Fail("Memo value not found at index " + U64(idx));
  Push(it->second);
}

// FindClass mirrors Unpickler.find_class: the Python 2 mapping when
// proto < 3 (fix_imports), then import + getattr (dotted walk in proto 4+).
void Machine::FindClass(std::string module, std::string qualname, const std::string& resolved_by,
                        bool truncated) {
  PickleImport imp;
  imp.written_module = module;
  imp.written_qualname = qualname;
  if (proto_ < 3 && pi::MapPy2Name(&module, &qualname)) {
    imp.py2_mapped = true;
    Anomaly(PickleAnomalyKind::kPy2Mapping, core::Severity::kInfo, op_offset_,
            std::string(op_name_) + " " + Quoted(imp.written_module + "." + imp.written_qualname) +
                " is imported as " + Quoted(module + "." + qualname) +
                " (Python 2 name mapping, protocol " + std::to_string(proto_) + ")");
  }
  imp.module = module;
  imp.qualname = qualname;
  imp.offset = op_offset_;
  imp.opcode = op_name_;
  imp.resolved_by = resolved_by;
  imp.name_truncated = truncated;
  imp.stream = static_cast<uint32_t>(stream_index_);
  imp.safety = ClassifyGlobal(module, qualname, &imp.reason);
  if (imp.py2_mapped) {  // the written name counts too
    std::string why;
    if (ClassifyGlobal(imp.written_module, imp.written_qualname, &why) == GlobalClass::kCritical &&
        imp.safety != GlobalClass::kCritical) {
      imp.safety = GlobalClass::kCritical;
      imp.reason = why;
    }
  }
  if (imp.safety == GlobalClass::kUnknown) {
    for (const auto& [m, q] : opt_.extra_safe_globals) {
      if (m == module && q == qualname) {
        imp.safety = GlobalClass::kSafe;
        imp.reason.clear();
      }
    }
  }
  if (truncated && imp.safety == GlobalClass::kSafe) {
    imp.safety = GlobalClass::kUnknown;
    imp.reason = "name was cut at max_string_bytes";
  }
  imp.nesting = imp.safety == GlobalClass::kSafe && pi::IsNestingLoader(module, qualname);
  if (module.empty()) Fail("Empty module name");
  Ref v = Make(VKind::kGlobal);
  v->x().module = std::move(module);
  v->x().qualname = std::move(qualname);
  v->safety = imp.safety;
  if (RecordRoom()) {
    v->import_index = static_cast<int64_t>(out_->imports.size());
    out_->imports.push_back(std::move(imp));
  }
  Push(std::move(v));
}

// Extension mirrors load_extension: code <= 0 is an error; any other code
// is looked up in copyreg's registry (empty in CPython unless the loading
// program registered codes), so what it imports cannot be known statically.
void Machine::Extension(uint64_t code_bits) {
  int64_t code = static_cast<int64_t>(code_bits);
  if (std::strcmp(op_name_, "EXT4") == 0) code = static_cast<int32_t>(static_cast<uint32_t>(code_bits));
  if (code <= 0) Fail("EXT specifies code <= 0");
  PickleImport imp;
  imp.module = imp.written_module = "copyreg";
  imp.qualname = imp.written_qualname = "<ext code " + std::to_string(code) + ">";
  imp.offset = op_offset_;
  imp.opcode = op_name_;
  imp.resolved_by = "copyreg extension registry";
  imp.safety = GlobalClass::kCritical;
  imp.reason = "extension code " + std::to_string(code) +
               " imports whatever the loading process registered (CPython registers none)";
  imp.ext_code = true;
  imp.stream = static_cast<uint32_t>(stream_index_);
  Ref v = Make(VKind::kGlobal);
  v->x().module = imp.module;
  v->x().qualname = imp.qualname;
  v->safety = GlobalClass::kCritical;
  if (RecordRoom()) {
    v->import_index = static_cast<int64_t>(out_->imports.size());
    out_->imports.push_back(std::move(imp));
  }
  Push(std::move(v));
}

void Machine::RecordCall(std::string callee, int64_t import_index, bool allowed, bool flagged,
                         std::string reason) {
  if (allowed && !flagged) {
    std::string key = std::string(op_name_) + "\n" + callee;
    auto it = allowed_calls_.find(key);
    if (it != allowed_calls_.end()) {
      ++out_->calls[it->second].count;
      return;
    }
    if (!RecordRoom()) return;
    allowed_calls_.emplace(std::move(key), out_->calls.size());
  } else if (!RecordRoom()) {
    return;
  }
  PickleCall c;
  c.opcode = op_name_;
  c.callee = std::move(callee);
  c.import_index = import_index;
  c.offset = op_offset_;
  c.allowed = allowed;
  c.flagged = flagged;
  c.reason = std::move(reason);
  c.stream = static_cast<uint32_t>(stream_index_);
  out_->calls.push_back(std::move(c));
}

// Call covers REDUCE, NEWOBJ(_EX), OBJ and INST: `callee` is called with
// `args` (a tuple, or an opaque object that may be one).
void Machine::Call(const Ref& callee, const Ref& args, const Ref& kwargs) {
  std::string_view op = op_name_;
  bool newobj = op == "NEWOBJ" || op == "NEWOBJ_EX";
  if (callee->Native()) {
    if (newobj) Fail(std::string(op) + " class argument must be a type, not " + KindName(callee->kind));
    Fail(std::string("'") + KindName(callee->kind) + "' object is not callable");
  }
  if (args && args->Native() && args->kind != VKind::kTuple) {
    Fail(std::string(op) + " args must be a tuple, not " + KindName(args->kind));
  }
  if (kwargs && kwargs->Native() && kwargs->kind != VKind::kDict) {
    Fail(std::string(op) + " kwargs must be a dict, not " + KindName(kwargs->kind));
  }
  Ref result = Make(VKind::kResult);
  result->x().callee = Describe(*callee);
  if (callee->kind == VKind::kGlobal) {
    bool safe = callee->safety == GlobalClass::kSafe;
    std::string full = callee->x().module + "." + callee->x().qualname;
    bool allowed = safe, flagged = false;
    std::string reason = safe ? "" : "callee " + std::string(GlobalClassName(callee->safety)) + ": " + full;
    if (safe && pi::IsCallableArgRebuild(callee->x().module, callee->x().qualname)) {
      // _rebuild_from_type_v2(func, new_type, args, state) calls func.
      const Value* func = args && !args->x().items.empty() ? args->x().items[0].get() : nullptr;
      if (func == nullptr || func->kind != VKind::kGlobal || func->safety != GlobalClass::kSafe) {
        allowed = false;
        flagged = true;
        reason = full + " calls its first argument, " +
                 (func ? Quoted(Describe(*func)) : std::string("which is unknown")) +
                 ", which is not an allowlisted global";
      }
    }
    if (safe && pi::IsNestingLoader(callee->x().module, callee->x().qualname) && !newobj) {
      const Ref arg = args && !args->x().items.empty() ? args->x().items[0] : nullptr;
      if (!arg || !(arg->kind == VKind::kBytes || arg->kind == VKind::kByteArray ||
                    (arg->kind == VKind::kStr && arg->py2_string))) {
        allowed = false;
        flagged = true;
        reason = full + " loads a pickle from " +
                 (arg ? Quoted(Describe(*arg)) : std::string("an unknown argument")) +
                 ", which is not a bytes literal and cannot be scanned";
      } else {
        RecordCall(full, callee->import_index, allowed, flagged, reason);
        Nested(arg);
        result->callee_safe = true;
        Push(std::move(result));
        return;
      }
    }
    RecordCall(full, callee->import_index, allowed, flagged, reason);
    result->callee_safe = allowed;
  } else {
    RecordCall(Describe(*callee), -1, false, true,
               callee->kind == VKind::kPersistent
                   ? "calls an object returned by persistent_load"
                   : "calls the result of a call (" + callee->x().callee + ")");
  }
  Push(std::move(result));
}

// Nested scans the bytes a nesting loader unpickles (torch's legacy format:
// its first five pickles) with the same machine, one level deeper.
void Machine::Nested(const Ref& arg) {
  std::string_view data = arg->text();
  uint64_t at = op_offset_;
  if (arg->truncated) {
    Anomaly(PickleAnomalyKind::kLimit, core::Severity::kHigh, at,
            "nested pickle argument was cut at max_string_bytes; not fully analyzed");
  }
  if (depth_ + 1 > lim_.max_nesting) {
    Anomaly(PickleAnomalyKind::kLimit, core::Severity::kHigh, at,
            "max_nesting (" + U64(lim_.max_nesting) + ") reached: nested pickle at " +
                U64(arg->data_offset) + " is not analyzed");
    return;
  }
  if (data.size() >= 4 && data.substr(0, 4) == std::string_view("PK\x03\x04", 4)) {
    Anomaly(PickleAnomalyKind::kNested, core::Severity::kHigh, at,
            "torch.storage._load_from_bytes loads a zip archive (at " + U64(arg->data_offset) +
                ") that the pickle machine does not open");
    return;
  }
  Anomaly(PickleAnomalyKind::kNested, core::Severity::kInfo, at,
          "torch.storage._load_from_bytes at " + U64(at) + " loads a nested pickle (" +
              U64(data.size()) + " bytes at " + U64(arg->data_offset) + "); scanned");
  size_t saved_stream = stream_index_;
  const char* saved_op = op_name_;
  uint64_t saved_offset = op_offset_;
  Machine inner(opt_, out_, depth_ + 1, at);
  inner.RunStreams({reinterpret_cast<const uint8_t*>(data.data()), data.size()},
                   arg->data_offset == kNoOffset ? at : arg->data_offset, kNestedStreams, false);
  stream_index_ = saved_stream;
  op_name_ = saved_op;
  op_offset_ = saved_offset;
}

void Machine::Persistent(const Ref& pid, std::string desc) {
  Ref v = Make(VKind::kPersistent);
  if (desc.empty() && pid) {
    desc = Describe(*pid);
    if (pid->kind == VKind::kTuple) {
      desc = "(";
      for (size_t i = 0; i < pid->x().items.size() && i < 2; ++i) {
        const Value& item = *pid->x().items[i];
        if (i > 0) desc += ", ";
        desc += item.kind == VKind::kStr ? std::string(item.text().substr(0, 40)) : Describe(item);
      }
      desc += pid->count > 2 ? ", ...)" : ")";
    }
  }
  v->x().callee = desc;
  RecordCall("persistent_load", -1, true, false, "");
  Push(std::move(v));
}

// Mutate is APPEND(S)/SETITEM(S)/ADDITEMS/BUILD reaching an object that is
// not a builtin container: they call its methods.
void Machine::Mutate(size_t target_index, const char* what, bool /*keys_at_even*/) {
  const Value& t = *stack_[target_index];
  if (t.kind == VKind::kResult) {
    RecordCall(std::string(what) + " on " + Describe(t), -1, t.callee_safe, false,
               t.callee_safe ? "" : "method of an object made by a global that is not allowlisted");
  } else if (t.kind == VKind::kGlobal) {
    RecordCall(std::string(what) + " on " + Describe(t), t.import_index, false, true,
               "mutates the imported global " + Describe(t));
  } else if (t.kind == VKind::kPersistent) {
    RecordCall(std::string(what) + " on " + Describe(t), -1, false, true,
               "mutates an object returned by persistent_load");
  }
}

void Machine::DoAppend(int64_t x) {
  int64_t len = static_cast<int64_t>(stack_.size());
  if (x > len || x <= static_cast<int64_t>(fence())) Underflow();
  if (len == x) return;
  size_t xi = static_cast<size_t>(x);
  Value& t = *stack_[xi - 1];
  if (t.Native() && t.kind != VKind::kList && t.kind != VKind::kByteArray) {
    Fail(std::string("'") + KindName(t.kind) + "' object has no attribute 'append'");
  }
  Mutate(xi - 1, "extend/append", false);
  t.count += stack_.size() - xi;
  stack_.resize(xi);
}

void Machine::DoSetItems(int64_t x) {
  int64_t len = static_cast<int64_t>(stack_.size());
  if (x > len || x <= static_cast<int64_t>(fence())) Underflow();
  if (len == x) return;
  if ((len - x) % 2 != 0) Fail("odd number of items for SETITEMS");
  size_t xi = static_cast<size_t>(x);
  Value& t = *stack_[xi - 1];
  if (t.Native() && t.kind != VKind::kDict && t.kind != VKind::kList &&
      t.kind != VKind::kByteArray) {
    Fail(std::string("'") + KindName(t.kind) + "' object does not support item assignment");
  }
  if (t.kind == VKind::kDict) {
    for (size_t i = xi; i < stack_.size(); i += 2) {
      if (stack_[i]->Unhashable()) Fail(std::string("unhashable type: '") + KindName(stack_[i]->kind) + "'");
    }
  }
  Mutate(xi - 1, "__setitem__", true);
  t.count += (stack_.size() - xi) / 2;
  stack_.resize(xi);
}

void Machine::AddItems() {
  size_t mark = Marker();
  size_t len = stack_.size();
  if (mark > len || mark <= fence()) Underflow();
  if (len == mark) return;
  Value& t = *stack_[mark - 1];
  if (t.Native() && t.kind != VKind::kSet) {
    Fail(std::string("'") + KindName(t.kind) + "' object has no attribute 'add'");
  }
  for (size_t i = mark; i < len; ++i) {
    if (stack_[i]->Unhashable()) Fail(std::string("unhashable type: '") + KindName(stack_[i]->kind) + "'");
  }
  Mutate(mark - 1, "add", false);
  t.count += len - mark;
  stack_.resize(mark);
}

// Build mirrors load_build: inst.__setstate__(state), else inst.__dict__
// updates and setattr for slot state.
void Machine::Build() {
  if (static_cast<int64_t>(stack_.size()) - 2 < static_cast<int64_t>(fence())) Underflow();
  Ref state = Pop();
  Value& inst = *Top();
  if (inst.Native()) {
    // Builtin values have no __setstate__ and no __dict__.
    bool empty_slots = state->kind == VKind::kTuple && state->count == 2 && state->x().items.size() == 2 &&
                       state->x().items[0]->kind == VKind::kNone &&
                       state->x().items[1]->kind == VKind::kDict && state->x().items[1]->count == 0;
    if (state->kind != VKind::kNone && !empty_slots) {
      Fail(std::string("BUILD on a '") + KindName(inst.kind) + "' that has no __dict__");
    }
    return;
  }
  Mutate(stack_.size() - 1, "__setstate__", false);
}

void Machine::Frame(ByteReader& r) {
  if (frame_active_ && r.pos() - 1 < frame_end_) {
    Anomaly(PickleAnomalyKind::kDisagreement, core::Severity::kHigh, op_offset_,
            "FRAME begins before the current frame ends (the C unpickler reads on, pickle.py raises)");
  }
  uint64_t len = ReadUint(r, 8);
  if (len > static_cast<uint64_t>(INT64_MAX)) Fail("FRAME length exceeds system's maximum");
  if (len > r.remaining()) {
    Fail("pickle data was truncated: FRAME of " + U64(len) + " bytes, " + U64(r.remaining()) +
         " remain");
  }
  frame_active_ = len > 0;
  frame_end_ = r.pos() + static_cast<size_t>(len);
}

void Machine::Dispatch(ByteReader& r, uint8_t op, bool* stop) {
  switch (op) {
    case '(':  // MARK
      if (stack_.size() + marks_.size() >= lim_.max_stack_depth) {
        LimitHit("max_stack_depth (" + U64(lim_.max_stack_depth) + ")");
      }
      marks_.push_back(stack_.size());
      return;
    case '.': {  // STOP: the result must be above the fence
      Pop();
      if (!stack_.empty() || !marks_.empty()) {
        Anomaly(PickleAnomalyKind::kDisagreement, core::Severity::kHigh, op_offset_,
                "STOP leaves " + U64(stack_.size()) + " object(s) and " + U64(marks_.size()) +
                    " mark(s) on the stack (pickle ignores them, pickletools.dis raises)");
      }
      *stop = true;
      return;
    }
    case '0':  // POP: pops the innermost mark when nothing is above it
      if (!marks_.empty() && marks_.back() == stack_.size()) {
        marks_.pop_back();
      } else {
        Pop();
      }
      return;
    case '1':  // POP_MARK
      stack_.resize(Marker());
      return;
    case '2': {  // DUP
      Ref top = Top();
      Push(std::move(top));
      return;
    }
    case 'F': {  // FLOAT
      std::string_view line = ReadLine(r);
      if (!pi::CFloatOk(line)) Fail("could not convert string to float: " + Quoted(line, 60));
      if (!pi::PickletoolsFloatOk(line) && disagreements_ < kMaxDisagreementsPerStream) {
        ++disagreements_;
        Anomaly(PickleAnomalyKind::kDisagreement, core::Severity::kHigh, op_offset_,
                "FLOAT " + Quoted(line, 60) + ": pickle accepts it, pickletools rejects it");
      }
      Push(float_);
      return;
    }
    case 'G':  // BINFLOAT
      Take(r, 8);
      Push(float_);
      return;
    case 'I':  // INT
      IntText(ReadLine(r), false);
      return;
    case 'L':  // LONG
      IntText(ReadLine(r), true);
      return;
    case 'J':
      Push(MakeInt(static_cast<int32_t>(static_cast<uint32_t>(ReadUint(r, 4))), true));
      return;
    case 'K':
      Push(MakeInt(static_cast<int64_t>(ReadUint(r, 1)), true));
      return;
    case 'M':
      Push(MakeInt(static_cast<int64_t>(ReadUint(r, 2)), true));
      return;
    case 0x8a:    // LONG1
    case 0x8b: {  // LONG4
      uint64_t n = ReadUint(r, op == 0x8a ? 1 : 4);
      if (op == 0x8b && static_cast<int32_t>(static_cast<uint32_t>(n)) < 0) {
        Fail("LONG pickle has negative byte count");
      }
      std::span<const uint8_t> b = Take(r, n);
      if (n > 8) {
        Push(MakeInt(0, false));
      } else {
        uint64_t v = 0;
        for (size_t i = n; i > 0; --i) v = (v << 8) | b[i - 1];
        if (n > 0 && n < 8 && (b[n - 1] & 0x80)) v |= ~uint64_t{0} << (8 * n);  // sign-extend
        Push(MakeInt(static_cast<int64_t>(v), true));
      }
      return;
    }
    case 'N': Push(none_); return;
    case 0x88:
    case 0x89: Push(bool_); return;
    case 'S': {  // STRING: quoted, Python-literal escapes
      std::string_view line = ReadLine(r);
      uint64_t payload = op_offset_ + 2;
      if (!(line.size() >= 2 && line.front() == line.back() &&
            (line.front() == '\'' || line.front() == '"'))) {
        Fail("the STRING opcode argument must be quoted");
      }
      std::string decoded, err;
      if (!pi::DecodeEscape(line.substr(1, line.size() - 2), &decoded, &err)) Fail(err);
      Ref v = MakeOwnedText(VKind::kStr, std::move(decoded), payload);
      v->py2_string = true;
      Push(std::move(v));
      return;
    }
    case 'T':    // BINSTRING
    case 'U': {  // SHORT_BINSTRING: decoded with the loader's encoding
      uint64_t n = ReadUint(r, op == 'T' ? 4 : 1);
      uint64_t at = r.offset();
      Ref v = MakeText(VKind::kStr, Take(r, n), at);
      v->py2_string = true;
      Push(std::move(v));
      return;
    }
    case 'V': {  // UNICODE: raw-unicode-escape
      std::string_view line = ReadLine(r);
      std::string decoded, err;
      if (!pi::DecodeRawUnicodeEscape(line, &decoded, &err)) Fail(err);
      Push(MakeOwnedText(VKind::kStr, std::move(decoded), op_offset_ + 1));
      return;
    }
    case 'X':
    case 0x8c:
    case 0x8d: {  // BINUNICODE, SHORT_BINUNICODE, BINUNICODE8: UTF-8, surrogatepass
      uint64_t n = ReadUint(r, op == 'X' ? 4 : op == 0x8c ? 1 : 8);
      if (n > static_cast<uint64_t>(INT64_MAX)) Fail("BINUNICODE exceeds system's maximum size");
      uint64_t at = r.offset();
      std::span<const uint8_t> b = Take(r, n);
      if (!pi::Utf8Valid({reinterpret_cast<const char*>(b.data()), b.size()}, true)) {
        Fail("'utf-8' codec can't decode the string");
      }
      Push(MakeText(VKind::kStr, b, at));
      return;
    }
    case 'B':
    case 'C':
    case 0x8e:
    case 0x96: {  // BINBYTES, SHORT_BINBYTES, BINBYTES8, BYTEARRAY8
      uint64_t n = ReadUint(r, op == 'B' ? 4 : op == 'C' ? 1 : 8);
      if (n > static_cast<uint64_t>(INT64_MAX)) Fail(std::string(op_name_) + " exceeds system's maximum size");
      uint64_t at = r.offset();
      Push(MakeText(op == 0x96 ? VKind::kByteArray : VKind::kBytes, Take(r, n), at));
      return;
    }
    case 0x97:  // NEXT_BUFFER
      Fail("pickle stream refers to out-of-band data but no *buffers* argument was given");
    case 0x98: {  // READONLY_BUFFER
      Value& top = *Top();
      if (top.Native() && top.kind != VKind::kBytes && top.kind != VKind::kByteArray &&
          top.kind != VKind::kBuffer) {
        Fail(std::string("a bytes-like object is required, not '") + KindName(top.kind) + "'");
      }
      return;
    }
    case ')': Push(MakeSequence(VKind::kTuple, stack_.size())); return;
    case 0x85:
    case 0x86:
    case 0x87: {  // TUPLE1..3
      size_t n = static_cast<size_t>(op - 0x84);
      if (stack_.size() < n || stack_.size() - n < fence()) Underflow();
      Push(MakeSequence(VKind::kTuple, stack_.size() - n));
      return;
    }
    case 't': Push(MakeSequence(VKind::kTuple, Marker())); return;
    case ']': Push(Make(VKind::kList)); return;
    case 'l': Push(MakeSequence(VKind::kList, Marker())); return;
    case '}': Push(Make(VKind::kDict)); return;
    case 0x8f: Push(Make(VKind::kSet)); return;
    case 'd': {  // DICT
      size_t i = Marker();
      if ((stack_.size() - i) % 2 != 0) Fail("odd number of items for DICT");
      for (size_t k = i; k < stack_.size(); k += 2) {
        if (stack_[k]->Unhashable()) Fail(std::string("unhashable type: '") + KindName(stack_[k]->kind) + "'");
      }
      Ref d = MakeSequence(VKind::kDict, i);
      d->count /= 2;
      Push(std::move(d));
      return;
    }
    case 0x91: {  // FROZENSET
      size_t i = Marker();
      for (size_t k = i; k < stack_.size(); ++k) {
        if (stack_[k]->Unhashable()) Fail(std::string("unhashable type: '") + KindName(stack_[k]->kind) + "'");
      }
      Push(MakeSequence(VKind::kFrozenSet, i));
      return;
    }
    case 0x90: AddItems(); return;
    case 'a': {  // APPEND
      if (static_cast<int64_t>(stack_.size()) - 1 <= static_cast<int64_t>(fence())) Underflow();
      DoAppend(static_cast<int64_t>(stack_.size()) - 1);
      return;
    }
    case 'e': DoAppend(static_cast<int64_t>(Marker())); return;
    case 's': DoSetItems(static_cast<int64_t>(stack_.size()) - 2); return;
    case 'u': DoSetItems(static_cast<int64_t>(Marker())); return;
    case 'b': Build(); return;
    case 'c': {  // GLOBAL: two UTF-8 lines
      std::string_view m = ReadLine(r);
      if (m.empty()) Fail("pickle data was truncated (empty GLOBAL module)");
      if (!pi::Utf8Valid(m, false)) Fail("GLOBAL module name is not UTF-8");
      std::string module(m);
      std::string_view q = ReadLine(r);
      if (q.empty()) Fail("pickle data was truncated (empty GLOBAL name)");
      if (!pi::Utf8Valid(q, false)) Fail("GLOBAL name is not UTF-8");
      FindClass(std::move(module), std::string(q), "text", false);
      return;
    }
    case 0x93: {  // STACK_GLOBAL
      Ref name = Pop();
      Ref module = Pop();
      if (module->kind != VKind::kStr || name->kind != VKind::kStr) Fail("STACK_GLOBAL requires str");
      auto from = [](const Value& v) {
        return std::string(v.origin_op) + " at " + U64(v.origin_offset) +
               (v.use_owned ? " (escapes decoded)" : "");
      };
      FindClass(std::string(module->text()), std::string(name->text()),
                "module from " + from(*module) + ", name from " + from(*name),
                module->truncated || name->truncated);
      return;
    }
    case 'i': {  // INST: MARK first, then two ASCII lines, then the call
      size_t mark = Marker();
      std::string_view m = ReadLine(r);
      if (m.empty()) Fail("pickle data was truncated (empty INST module)");
      if (!pi::AsciiOnly(m)) Fail("INST module name is not ASCII");
      std::string module(m);
      std::string_view q = ReadLine(r);
      if (q.empty()) Fail("pickle data was truncated (empty INST name)");
      if (!pi::AsciiOnly(q)) Fail("INST class name is not ASCII");
      FindClass(std::move(module), std::string(q), "text", false);
      Ref cls = std::move(stack_.back());
      stack_.pop_back();
      if (mark < fence() || mark > stack_.size()) Underflow();
      Ref args = MakeSequence(VKind::kTuple, mark);
      Call(cls, args, nullptr);
      return;
    }
    case 'o': {  // OBJ
      size_t i = Marker();
      if (stack_.size() < i + 1) Underflow();
      Ref args = MakeSequence(VKind::kTuple, i + 1);
      Ref cls = Pop();
      Call(cls, args, nullptr);
      return;
    }
    case 'R': {  // REDUCE
      Ref args = Pop();
      Ref callable = Pop();
      Call(callable, args, nullptr);
      return;
    }
    case 0x81:
    case 0x92: {  // NEWOBJ, NEWOBJ_EX: cls.__new__(cls, *args, **kwargs)
      Ref kwargs = op == 0x92 ? Pop() : nullptr;
      Ref args = Pop();
      Ref cls = Pop();
      Call(cls, args, kwargs);
      return;
    }
    case 'P': {  // PERSID: an ASCII line
      std::string_view line = ReadLine(r);
      if (!pi::AsciiOnly(line)) Fail("persistent IDs in protocol 0 must be ASCII strings");
      Persistent(nullptr, Quoted(line, 60));
      return;
    }
    case 'Q': {  // BINPERSID
      Ref pid = Pop();
      Persistent(pid, "");
      return;
    }
    case 'g': MemoGet(MemoIndexText(ReadLine(r))); return;
    case 'h': MemoGet(ReadUint(r, 1)); return;
    case 'j': MemoGet(ReadUint(r, 4)); return;
    case 'p': {  // PUT: line, then the stack check, then the index
      std::string_view line = ReadLine(r);
      Ref v = Top();
      MemoPut(MemoIndexText(line), v);
      return;
    }
    case 'q':
    case 'r': {
      uint64_t idx = ReadUint(r, op == 'q' ? 1 : 4);
      Ref v = Top();
      MemoPut(idx, v);
      return;
    }
    case 0x94: {  // MEMOIZE: the key is the number of memo entries
      Ref v = Top();
      MemoPut(memo_.size(), v);
      return;
    }
    case 0x80: {  // PROTO
      uint64_t v = ReadUint(r, 1);
      if (v > kHighestProtocol) Fail("unsupported pickle protocol: " + U64(v));
      PickleStream& st = out_->streams[stream_index_];
      if (saw_proto_) {
        Anomaly(PickleAnomalyKind::kDisagreement, core::Severity::kHigh, op_offset_,
                "PROTO " + U64(v) + " appears again (was " + std::to_string(proto_) + ")");
      } else if (op_offset_ != st.offset) {
        Anomaly(PickleAnomalyKind::kDisagreement, core::Severity::kHigh, op_offset_,
                "PROTO " + U64(v) + " is not the first opcode of the stream");
      }
      if (!saw_proto_) st.declared_protocol = static_cast<int>(v);
      saw_proto_ = true;
      proto_ = static_cast<int>(v);
      return;
    }
    case 0x95: Frame(r); return;
    case 0x82: Extension(ReadUint(r, 1)); return;
    case 0x83: Extension(ReadUint(r, 2)); return;
    case 0x84: Extension(ReadUint(r, 4)); return;
    default: Fail("invalid load key");
  }
}

}  // namespace

std::string_view PickleOpcodeName(uint8_t op) {
  const char* n = Info(op).name;
  return n == nullptr ? std::string_view() : std::string_view(n);
}

PickleAnalysis AnalyzePickle(std::span<const uint8_t> bytes, const PickleOptions& options,
                             uint64_t base_offset) {
  PickleAnalysis out;
  Machine m(options, &out, 0, core::kNoOffset);
  m.RunStreams(bytes, base_offset, options.limits.max_streams, true);
  return out;
}

}  // namespace modelgate::scanner
