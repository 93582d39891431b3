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
#include <initializer_list>
#include <set>
#include <tuple>
#include <cstring>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "modelgate/scanner.h"
#include "pickle_internal.h"
#include "pickle_opcodes.h"
#include "pickle_records.h"

namespace modelgate::scanner {
namespace {

namespace pi = pickle_internal;
using core::ByteReader;
using core::kNoOffset;
using core::Quoted;

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

// Special marks the call results that joblib's reading depends on.
enum class Special : uint8_t {
  kNone,
  kJoblibWrapper,  // joblib.numpy_pickle.NumpyArrayWrapper instance
  kNdArrayWrapper,  // joblib's NDArrayWrapper (reads a separate file)
  kNumpyDtype,     // numpy.dtype(typestr, ...)
};

struct Value;
using Ref = std::shared_ptr<Value>;

// Attr is one dict entry or instance attribute as far as a joblib wrapper's
// read can see it: the kind of the value, and the value itself only for
// int tuples and numpy dtypes (which hold no references, so no cycles).
struct Attr {
  std::string name;
  VKind kind = VKind::kNone;
  Ref held;
};

struct Value {
  // Rare parts live apart so that the common value (an int, a literal
  // string or bytes in place, a counted container) stays small.
  struct Extra {
    std::string owned;         // decoded text
    std::vector<Ref> items;    // tuples/frozensets: first kKeptItems items
    std::string module, qualname;  // kGlobal: what find_class returned
    std::string callee;        // kResult/kPersistent: what made it
    // Native dicts: their entries whose str key a joblib wrapper's read
    // could see; joblib wrappers: their instance attributes. A later
    // entry replaces an earlier one of the same name.
    std::vector<Attr> attrs;
    // Why `attrs` (or a kNumpyDtype's typestr and state) may be wrong or
    // incomplete; "" while they are exact.
    std::string unknown;
    // kNumpyDtype: numpy.dtype(typestr, align, copy).
    std::string typestr;
  };

  VKind kind = VKind::kNone;
  bool int_fits = true;
  bool use_owned = false;
  bool truncated = false;
  bool py2_string = false;  // STRING/BINSTRING: bytes under encoding='bytes'
  bool callee_safe = false;
  // Built from literals only (see Literal): tuples and frozensets when
  // made, containers until a non-literal goes in, results of value types.
  bool literal = false;
  Special special = Special::kNone;
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
  // `joblib`: read array data after NumpyArrayWrapper BUILDs as joblib's
  // NumpyUnpickler does (top-level streams of the joblib view only).
  Machine(const PickleOptions& options, PickleAnalysis* out, pi::Recorder* rec, uint32_t depth,
          uint64_t parent_offset, bool joblib)
      : opt_(options), lim_(options.limits), out_(out), rec_(rec), depth_(depth),
        parent_offset_(parent_offset), joblib_(joblib), none_(std::make_shared<Value>()),
        true_(std::make_shared<Value>()), false_(std::make_shared<Value>()),
        float_(std::make_shared<Value>()) {
    true_->kind = false_->kind = VKind::kBool;
    true_->int_value = 1;
    float_->kind = VKind::kFloat;
  }

  // joblib_divergence is the offset just past the first BUILD where joblib
  // reads array data (or where the machine stopped at one), kNoOffset if
  // there was none: from there on, joblib and pickle read different opcodes.
  uint64_t joblib_divergence() const { return joblib_divergence_; }

  // RunStreams analyzes the pickle at the start of `bytes` and each one
  // that follows a STOP, up to `stream_cap` streams.
  void RunStreams(std::span<const uint8_t> bytes, uint64_t base, uint64_t stream_cap,
                  bool report_trailing);

 private:
  // --- stream lifecycle
  // RunOne runs one stream; past a limit it walks the rest of the input,
  // this stream and `streams_after` more, for imports.
  bool RunOne(ByteReader& r, uint64_t streams_after);
  void ResetStream();
  [[noreturn]] void Fail(const std::string& why);
  [[noreturn]] void Underflow();
  // LimitHit reports limit `name` ("max_opcodes") and stops the stream;
  // RunOne then walks the rest of the input for imports (Salvage).
  [[noreturn]] void LimitHit(const char* name, uint64_t value, const std::string& where = "");
  void Anomaly(PickleAnomalyKind kind, core::Severity sev, uint64_t offset, std::string msg,
               std::string limit = "");
  // Salvage: see "--- salvage"; `own_memo`: `r` continues the stream
  // whose memo the machine holds.
  void Salvage(ByteReader& r, const std::string& after, uint64_t streams, bool own_memo);
  void SalvageImport(std::string module, std::string qualname, const std::string& after,
                     const char* unresolved);

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
  PickleImport Classify(std::string module, std::string qualname, const std::string& resolved_by,
                        bool truncated);
  void FindClass(std::string module, std::string qualname, const std::string& resolved_by,
                 bool truncated);
  PickleImport ExtImport(int64_t code);
  void Extension(uint64_t code);
  void Call(const Ref& callee, const Ref& args, const Ref& kwargs);
  void Build(ByteReader& r);
  // --- joblib (see "--- joblib" below)
  void NoteEntry(Value& dict, const Value& key, const Ref& value);
  void SetAttr(Value& obj, std::string_view name, const Ref& value);
  void MergeState(Value& inst, const Ref& state, const char* what);
  void Specialize(const Value& callee, const Ref& args, const Ref& kwargs, Value* result);
  void DtypeSetState(Value& dtype, const Value& state);
  void JoblibRead(ByteReader& r, Value& wrapper);
  void Mutate(size_t target_index, const char* what, bool keys_at_even);
  void DoAppend(int64_t x);
  void DoSetItems(int64_t x);
  void AddItems();
  void Persistent(const Ref& pid, std::string desc);
  void Nested(const Ref& arg);
  void RecordCall(std::string callee, int64_t import_index, bool allowed, bool flagged,
                  std::string reason);
  std::string Describe(const Value& v) const;
  bool AllLiteral(size_t start) const;  // stack_[start, end) are all Literal
  // ValueCall judges a call of an allowlisted value type (datetime,
  // Decimal, ...): true when its arguments make it a plain value.
  bool ValueCall(const Value& callee, const Ref& args, const Ref& kwargs, Ref* result,
                 std::string* why);

  const PickleOptions& opt_;
  const PickleLimits& lim_;
  PickleAnalysis* out_;
  pi::Recorder* rec_;
  uint32_t depth_;
  uint64_t parent_offset_;
  bool joblib_;
  uint64_t joblib_divergence_ = kNoOffset;

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
  bool salvage_ = false;  // a limit stopped the stream: walk the rest
  uint64_t op_offset_ = 0;
  const char* op_name_ = "";
  std::unordered_map<std::string, size_t> allowed_calls_;
  // Immutable scalars: shared.
  Ref none_, true_, false_, float_;
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
  salvage_ = false;
  allowed_calls_.clear();
}

void Machine::Anomaly(PickleAnomalyKind kind, core::Severity sev, uint64_t offset,
                      std::string msg, std::string limit) {
  PickleAnomaly a;
  a.kind = kind;
  a.severity = sev;
  a.offset = offset;
  a.opcode = op_name_;
  a.message = std::move(msg);
  a.stream = static_cast<uint32_t>(stream_index_);
  a.limit = std::move(limit);
  rec_->Anomaly(std::move(a));
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

void Machine::LimitHit(const char* name, uint64_t value, const std::string& where) {
  std::string what = std::string(name) + " (" + U64(value) + ")" + where;
  Anomaly(PickleAnomalyKind::kLimit, core::Severity::kHigh, op_offset_,
          what + " reached at " + std::string(op_name_[0] ? op_name_ : "stream start") +
              "; the rest of the input is only walked for imports",
          name);
  PickleStream& st = out_->streams[stream_index_];
  st.error = "limit: " + what;
  st.error_offset = op_offset_;
  salvage_ = true;
  throw Stop{};
}

// --- salvage -----------------------------------------------------------------
// Past a limit the machine stops, but what it did not read still runs on
// load: Salvage walks the rest of the input opcode by opcode (the table's
// argument shapes: exact, since opcodes delimit themselves), up to
// `streams` STOPs, keeping no stack and judging no call, and records every
// import. So padding before a payload cannot hide it: the analysis is
// incomplete (rejected) and still names the payload. STACK_GLOBAL takes the
// two strings pushed just before it, directly or through the memo; anything
// else leaves its name unresolved, and an unresolved name may be any global.

void Machine::SalvageImport(std::string module, std::string qualname, const std::string& after,
                            const char* unresolved) {
  std::string by = "walk past " + after;
  PickleImport imp;
  if (unresolved != nullptr) {
    imp.module = imp.written_module = "<unresolved>";
    imp.qualname = imp.written_qualname = "<unresolved>";
    imp.offset = op_offset_;
    imp.opcode = op_name_;
    imp.resolved_by = by;
    imp.stream = static_cast<uint32_t>(stream_index_);
    imp.safety = GlobalClass::kCritical;
    imp.reason = std::string(unresolved) + " past " + after + ", so it may import any global";
  } else {
    imp = Classify(std::move(module), std::move(qualname), by, false);
    if (imp.nesting) {  // its argument is not scanned past a limit
      imp.safety = GlobalClass::kUnknown;
      imp.nesting = false;
      imp.reason = "loads a nested pickle that is not scanned past " + after;
    }
  }
  rec_->Import(std::move(imp));
}

void Machine::Salvage(ByteReader& r, const std::string& after, uint64_t streams, bool own_memo) {
  struct Item {
    bool str = false;
    std::string_view text;
  };
  auto as_text = [](std::span<const uint8_t> b) {
    return std::string_view(reinterpret_cast<const char*>(b.data()), b.size());
  };
  Item last[2];  // the two most recent pushes, last[1] the newest
  auto push = [&](Item it) {
    last[0] = last[1];
    last[1] = it;
  };
  // Strings put in the memo, as views into the input; the machine's own
  // memo holds what the stream memoized before the limit.
  std::unordered_map<uint64_t, std::string_view> memo;
  bool machine_memo = own_memo;
  uint64_t memoized = own_memo ? memo_.size() : 0;
  auto get = [&](uint64_t idx) {
    if (auto it = memo.find(idx); it != memo.end()) return Item{true, it->second};
    if (machine_memo) {
      if (auto it = memo_.find(idx); it != memo_.end() && it->second->kind == VKind::kStr &&
                                     !it->second->truncated) {
        return Item{true, it->second->text()};
      }
    }
    return Item{};
  };
  auto put = [&](uint64_t idx) {
    if (!last[1].str) {
      memo.erase(idx);
    } else if (memo.size() < lim_.max_memo_entries || memo.count(idx) != 0) {
      memo[idx] = last[1].text;
    }
  };
  uint64_t stops = 0;
  while (!r.empty() && stops < streams) {
    op_offset_ = r.offset();
    const pi::Opcode* info = pi::FindOpcode(r.U8().value());
    if (info == nullptr) return;
    op_name_ = info->name;
    pi::OpcodeArgs a;
    if (!pi::ReadOpcodeArgs(*info, r, &a)) return;
    auto uint_arg = [&] {
      uint64_t v = 0;
      for (size_t i = a.first.size(); i > 0; --i) v = (v << 8) | a.first[i - 1];
      return v;
    };
    std::string_view t = as_text(a.first);
    switch (info->code) {
      case 'c':
      case 'i':
        SalvageImport(std::string(t), std::string(as_text(a.second)), after, nullptr);
        push({});
        break;
      case 0x93:
        if (last[0].str && last[1].str) {
          SalvageImport(std::string(last[0].text), std::string(last[1].text), after, nullptr);
        } else {
          SalvageImport("", "", after, "STACK_GLOBAL's operands are not two known strings");
        }
        push({});
        break;
      case 0x82:
      case 0x83:
      case 0x84:
        rec_->Import(ExtImport(static_cast<int64_t>(uint_arg())));
        push({});
        break;
      case 'X': case 0x8c: case 0x8d: case 'T': case 'U':
        push({true, t});
        break;
      case 'S':  // quoted; only escape-free text is taken as is
      case 'V':
        if (info->code == 'S' && t.size() >= 2) t = t.substr(1, t.size() - 2);
        push(t.find('\\') == std::string_view::npos ? Item{true, t} : Item{});
        break;
      case 'h': case 'j': push(get(uint_arg())); break;
      case 'g': {
        pi::IntParse i = pi::CMemoIndex(t);
        push(i.ok && i.fits && i.value >= 0 ? get(static_cast<uint64_t>(i.value)) : Item{});
        break;
      }
      case 'q': case 'r': put(uint_arg()); break;
      case 'p': {
        pi::IntParse i = pi::CMemoIndex(t);
        if (i.ok && i.fits && i.value >= 0) put(static_cast<uint64_t>(i.value));
        break;
      }
      case 0x94: put(memoized++); break;
      case '0': last[1] = last[0]; last[0] = Item{}; break;
      case 0x80: case 0x95: case '(': break;
      case '.':
        ++stops;
        memo.clear();
        machine_memo = false;
        memoized = 0;
        last[0] = last[1] = Item{};
        break;
      default: push({}); break;
    }
  }
}

void Machine::RunStreams(std::span<const uint8_t> bytes, uint64_t base, uint64_t stream_cap,
                         bool report_trailing) {
  ByteReader r(bytes, base);
  uint64_t count = 0;
  do {
    if (count == stream_cap) {
      // Nested (torch's legacy format): what follows its pickles is storage
      // data, not opcodes.
      if (depth_ == 0) {
        op_name_ = "";
        op_offset_ = r.offset();
        Anomaly(PickleAnomalyKind::kLimit, core::Severity::kHigh, r.offset(),
                "max_streams (" + U64(stream_cap) + ") reached; the " + U64(r.remaining()) +
                    " more bytes are only walked for imports",
                "max_streams");
        Salvage(r, "max_streams", UINT64_MAX, false);
      }
      return;
    }
    size_t imports_before = out_->imports.size(), calls_before = out_->calls.size(),
           anomalies_before = out_->anomalies.size(), streams_before = out_->streams.size();
    uint64_t start = r.offset();
    bool proto_start = r.remaining() >= 2 && r.Peek(2)[0] == 0x80 && r.Peek(2)[1] <= kHighestProtocol;
    bool complete = RunOne(r, stream_cap - count - 1);
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

bool Machine::RunOne(ByteReader& r, uint64_t streams_after) {
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
        LimitHit("max_opcodes", lim_.max_opcodes);
      }
      auto b = r.U8();
      if (!b.ok()) Fail("ran out of input: no STOP");
      uint8_t op = b.value();
      const pi::Opcode* info = pi::FindOpcode(op);
      if (info == nullptr) {
        op_name_ = "";
        char buf[8];
        std::snprintf(buf, sizeof buf, "\\x%02x", op);
        Fail(std::string("invalid load key '") + buf + "'");
      }
      op_name_ = info->name;
      ++out_->streams[stream_index_].opcode_count;
      if (info->protocol > out_->streams[stream_index_].max_opcode_protocol) {
        out_->streams[stream_index_].max_opcode_protocol = info->protocol;
      }
      // A PROTO header that lies: an opcode newer than the declared
      // protocol (or than 1 with no PROTO at all).
      if (op != 0x80 && !lie_reported_ && info->protocol >= 2 && info->protocol > proto_) {
        lie_reported_ = true;
        Anomaly(PickleAnomalyKind::kDisagreement, core::Severity::kHigh, op_offset_,
                std::string(info->name) + " is a protocol " + std::to_string(info->protocol) +
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
                  std::string(info->name) + " straddles the FRAME boundary at " +
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
  if (salvage_) Salvage(r, out_->streams[stream_index_].error.substr(7), streams_after + 1, true);
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
    LimitHit("max_stack_depth", lim_.max_stack_depth);
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
  v->literal = k == VKind::kList || k == VKind::kDict || k == VKind::kSet;
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
                  op_name_ + "; longer strings are cut",
              "max_string_bytes");
    }
  }
  string_bytes_ += text.size();
  v->x().owned = std::move(text);
  return v;
}

Ref Machine::MakeSequence(VKind k, size_t start) {
  Ref v = Make(k);
  v->count = stack_.size() - start;
  v->literal = AllLiteral(start);
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

// Literal: a value that runs no code of its own when a value type reads
// it: None, bool, int, float, str, bytes (never cut), and tuples,
// containers and value-type results made only of those.
bool Literal(const Value& v) {
  switch (v.kind) {
    case VKind::kNone:
    case VKind::kBool:
    case VKind::kInt:
    case VKind::kFloat:
      return true;
    case VKind::kStr:
    case VKind::kBytes:
    case VKind::kByteArray:
      return !v.truncated;
    case VKind::kTuple:
    case VKind::kFrozenSet:
    case VKind::kList:
    case VKind::kDict:
    case VKind::kSet:
    case VKind::kResult:
      return v.literal;
    default:
      return false;
  }
}

bool AllLiteralItems(const std::vector<Ref>& items, size_t from) {
  for (size_t i = from; i < items.size(); ++i) {
    if (!Literal(*items[i])) return false;
  }
  return true;
}

bool Machine::AllLiteral(size_t start) const {
  for (size_t i = start; i < stack_.size(); ++i) {
    if (!Literal(*stack_[i])) return false;
  }
  return true;
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
    LimitHit("max_memo_entries", lim_.max_memo_entries);
  }
  memo_.emplace(idx, v);
}

void Machine::MemoGet(uint64_t idx) {
  auto it = memo_.find(idx);
  if (it == memo_.end()) Fail("Memo value not found at index " + U64(idx));
  Push(it->second);
}

// Classify fills the import record of `module`.`qualname` as find_class
// would resolve it: the Python 2 mapping when proto < 3 (fix_imports), the
// allowlist (with the policy's extra globals and the TorchScript helpers in
// a TorchScript member), and what can no longer be trusted: a name cut at a
// limit may be any global.
PickleImport Machine::Classify(std::string module, std::string qualname,
                               const std::string& resolved_by, bool truncated) {
  PickleImport imp;
  if (module.size() > lim_.max_name_bytes || qualname.size() > lim_.max_name_bytes) {
    Anomaly(PickleAnomalyKind::kLimit, core::Severity::kHigh, op_offset_,
            std::string(op_name_) + " imports a name longer than max_name_bytes (" +
                U64(lim_.max_name_bytes) + "); it is judged as any global",
            "max_name_bytes");
    module.resize(std::min<size_t>(module.size(), lim_.max_name_bytes));
    qualname.resize(std::min<size_t>(qualname.size(), lim_.max_name_bytes));
    truncated = true;
  }
  imp.written_module = module;
  imp.written_qualname = qualname;
  if (proto_ < 3 && pi::MapPy2Name(&module, &qualname)) imp.py2_mapped = true;
  imp.module = std::move(module);
  imp.qualname = std::move(qualname);
  imp.offset = op_offset_;
  imp.opcode = op_name_;
  imp.resolved_by = resolved_by;
  imp.name_truncated = truncated;
  imp.stream = static_cast<uint32_t>(stream_index_);
  imp.safety = ClassifyGlobal(imp.module, imp.qualname, &imp.reason);
  if (imp.py2_mapped) {  // the written name counts too
    std::string why;
    if (ClassifyGlobal(imp.written_module, imp.written_qualname, &why) == GlobalClass::kCritical &&
        imp.safety != GlobalClass::kCritical) {
      imp.safety = GlobalClass::kCritical;
      imp.reason = why;
    }
  }
  if (opt_.torchscript && imp.safety != GlobalClass::kSafe &&
      pi::IsTorchScriptHelper(imp.module, imp.qualname)) {
    imp.safety = GlobalClass::kSafe;
    imp.reason.clear();
  }
  if (imp.safety == GlobalClass::kUnknown) {
    for (const auto& [m, q] : opt_.extra_safe_globals) {
      if (m == imp.module && q == imp.qualname) {
        imp.safety = GlobalClass::kSafe;
        imp.reason.clear();
      }
    }
  }
  if (truncated) {
    imp.safety = GlobalClass::kCritical;
    imp.reason = "its name was cut at max_string_bytes or max_name_bytes, so it may be any global";
  }
  imp.nesting = imp.safety == GlobalClass::kSafe && pi::IsNestingLoader(imp.module, imp.qualname);
  return imp;
}

// FindClass mirrors Unpickler.find_class: import + getattr (a dotted walk
// in proto 4+) of the classified name.
void Machine::FindClass(std::string module, std::string qualname, const std::string& resolved_by,
                        bool truncated) {
  if (module.empty() && !truncated) Fail("Empty module name");
  PickleImport imp = Classify(std::move(module), std::move(qualname), resolved_by, truncated);
  if (imp.py2_mapped) {
    Anomaly(PickleAnomalyKind::kPy2Mapping, core::Severity::kInfo, op_offset_,
            std::string(op_name_) + " " + Quoted(imp.written_module + "." + imp.written_qualname) +
                " is imported as " + Quoted(imp.FullName()) + " (Python 2 name mapping, protocol " +
                std::to_string(proto_) + ")");
  }
  Ref v = Make(VKind::kGlobal);
  v->x().module = imp.module;
  v->x().qualname = imp.qualname;
  v->safety = imp.safety;
  v->import_index = rec_->Import(std::move(imp));
  Push(std::move(v));
}

// ExtImport is the record of EXT1/2/4 `code`: load_extension looks it up
// in copyreg's registry (empty in CPython unless the loading program
// registered codes), so what it imports cannot be known statically.
PickleImport Machine::ExtImport(int64_t code) {
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
  return imp;
}

// Extension mirrors load_extension: code <= 0 is an error.
void Machine::Extension(uint64_t code_bits) {
  int64_t code = static_cast<int64_t>(code_bits);
  if (std::strcmp(op_name_, "EXT4") == 0) code = static_cast<int32_t>(static_cast<uint32_t>(code_bits));
  if (code <= 0) Fail("EXT specifies code <= 0");
  PickleImport imp = ExtImport(code);
  Ref v = Make(VKind::kGlobal);
  v->x().module = imp.module;
  v->x().qualname = imp.qualname;
  v->safety = GlobalClass::kCritical;
  v->import_index = rec_->Import(std::move(imp));
  Push(std::move(v));
}

void Machine::RecordCall(std::string callee, int64_t import_index, bool allowed, bool flagged,
                         std::string reason) {
  std::string key;
  if (allowed && !flagged) {
    key = std::string(op_name_) + "\n" + callee;
    auto it = allowed_calls_.find(key);
    if (it != allowed_calls_.end()) {
      ++out_->calls[it->second].count;
      return;
    }
    if (rec_->Full()) {  // a new allowed call past max_records: counted
      rec_->CountFolded();
      return;
    }
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
  int64_t at = rec_->Call(std::move(c));
  if (!key.empty() && at >= 0) allowed_calls_.emplace(std::move(key), static_cast<size_t>(at));
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
      // A value type is called there with arguments not judged here.
      if (func == nullptr || func->kind != VKind::kGlobal || func->safety != GlobalClass::kSafe ||
          pi::ValueTypeOf(func->x().module, func->x().qualname) != pi::ValueType::kNone) {
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
    std::string why;
    if (safe && !ValueCall(*callee, args, kwargs, &result, &why)) {
      // Not a plain value: the type reads objects that may run code. The
      // import is downgraded to "needs review"; its finding covers the call.
      allowed = false;
      reason = full + " " + why;
      if (callee->import_index >= 0) {
        PickleImport& imp = out_->imports[static_cast<size_t>(callee->import_index)];
        imp.safety = GlobalClass::kUnknown;
        imp.reason = reason;
        imp.nesting = false;
      } else {
        flagged = true;  // no import record to carry it
      }
    }
    RecordCall(full, callee->import_index, allowed, flagged, reason);
    result->callee_safe = allowed;
    if (safe) Specialize(*callee, args, kwargs, result.get());
  } else {
    RecordCall(Describe(*callee), -1, false, true,
               callee->kind == VKind::kPersistent
                   ? "calls an object returned by persistent_load"
                   : "calls the result of a call (" + callee->x().callee + ")");
  }
  Push(std::move(result));
}

bool Machine::ValueCall(const Value& callee, const Ref& args, const Ref& kwargs, Ref* result,
                        std::string* why) {
  pi::ValueType vt = pi::ValueTypeOf(callee.x().module, callee.x().qualname);
  if (vt == pi::ValueType::kNone) return true;
  const Value* a = args.get();
  bool known = a != nullptr && a->kind == VKind::kTuple && a->x().items.size() == a->count;
  if (kwargs && !(kwargs->kind == VKind::kDict && kwargs->count == 0)) {
    *why = "is called with keyword arguments";
    return false;
  }
  if (!known) {
    *why = "is called with arguments that are not a literal tuple";
    return false;
  }
  const std::vector<Ref>& items = a->x().items;
  switch (vt) {
    case pi::ValueType::kNone: return true;
    case pi::ValueType::kLiteralArgs:
      if (!Literal(*a)) {
        *why = "is called with arguments that are not all literals";
        return false;
      }
      break;
    case pi::ValueType::kDefaultDict:
      // defaultdict(default_factory): the factory runs on every missing key.
      if (!items.empty() && items[0]->kind != VKind::kNone &&
          !(items[0]->kind == VKind::kGlobal && items[0]->safety == GlobalClass::kSafe)) {
        *why = "is given a default_factory that is not None or an allowlisted type";
        return false;
      }
      if (items.size() > 1 && !AllLiteralItems(items, 1)) {
        *why = "is called with arguments that are not all literals";
        return false;
      }
      break;
    case pi::ValueType::kLatin1: {
      // pickle.py protocol < 3 writes bytes as codecs.encode(str, 'latin1'):
      // evaluated here, so that what they hold (a nested pickle) is seen.
      if (items.size() != 2 || items[0]->kind != VKind::kStr || items[0]->py2_string ||
          items[0]->truncated || items[1]->kind != VKind::kStr ||
          (items[1]->text() != "latin1" && items[1]->text() != "latin-1")) {
        *why = "is called with other than (str literal, 'latin1')";
        return false;
      }
      std::string bytes;
      if (!pi::Latin1FromUtf8(items[0]->text(), &bytes)) {
        Fail("'latin-1' codec can't encode a character of the str at " + U64(items[0]->data_offset));
      }
      Ref b = MakeOwnedText(VKind::kBytes, std::move(bytes), items[0]->data_offset);
      b->x().callee = (*result)->x().callee;
      *result = std::move(b);
      return true;
    }
  }
  (*result)->literal = true;
  return true;
}

// Nested scans the bytes a nesting loader unpickles (torch's legacy format:
// its first five pickles) with the same machine, one level deeper.
void Machine::Nested(const Ref& arg) {
  std::string_view data = arg->text();
  uint64_t at = op_offset_;
  if (arg->truncated) {
    Anomaly(PickleAnomalyKind::kLimit, core::Severity::kHigh, at,
            "nested pickle argument was cut at max_string_bytes; not fully analyzed",
            "max_string_bytes");
  }
  std::span<const uint8_t> nested(reinterpret_cast<const uint8_t*>(data.data()), data.size());
  const uint64_t nested_base = arg->data_offset == kNoOffset ? at : arg->data_offset;
  if (depth_ + 1 > lim_.max_nesting) {
    Anomaly(PickleAnomalyKind::kLimit, core::Severity::kHigh, at,
            "max_nesting (" + U64(lim_.max_nesting) + ") reached: nested pickle at " +
                U64(arg->data_offset) + " is only walked for imports",
            "max_nesting");
    const size_t saved_stream = stream_index_;
    const char* saved_op = op_name_;
    ByteReader nr(nested, nested_base);
    Salvage(nr, "max_nesting", kNestedStreams, false);
    stream_index_ = saved_stream;
    op_name_ = saved_op;
    op_offset_ = at;
    return;
  }
  if (data.size() >= 4 && data.substr(0, 4) == std::string_view("PK\x03\x04", 4)) {
    Anomaly(PickleAnomalyKind::kNested, core::Severity::kHigh, at,
            "torch.storage._load_from_bytes loads a zip archive (at " + U64(arg->data_offset) +
                ") that the pickle machine does not open");
    rec_->Incomplete("a nested zip archive (torch.storage._load_from_bytes) is not opened");
    return;
  }
  Anomaly(PickleAnomalyKind::kNested, core::Severity::kInfo, at,
          "torch.storage._load_from_bytes at " + U64(at) + " loads a nested pickle (" +
              U64(data.size()) + " bytes at " + U64(arg->data_offset) + "); scanned");
  size_t saved_stream = stream_index_;
  const char* saved_op = op_name_;
  uint64_t saved_offset = op_offset_;
  Machine inner(opt_, out_, rec_, depth_ + 1, at, false);
  inner.RunStreams(nested, nested_base, kNestedStreams, false);
  stream_index_ = saved_stream;
  op_name_ = saved_op;
  op_offset_ = saved_offset;
}

void Machine::Persistent(const Ref& pid, std::string desc) {
  // torch's legacy persistent_load (torch/serialization.py _legacy_load):
  // ('module', cls, source_file, source) returns cls itself, after
  // comparing the source: the class is what later opcodes call, judged as
  // its import (unknown: a module class needs review).
  if (pid && pid->kind == VKind::kTuple && pid->count == 4 && pid->x().items.size() == 4 &&
      pid->x().items[0]->kind == VKind::kStr && pid->x().items[0]->text() == "module" &&
      pid->x().items[1]->kind == VKind::kGlobal) {
    RecordCall("persistent_load", -1, true, false, "");
    Push(pid->x().items[1]);
    return;
  }
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
  t.literal = t.literal && AllLiteral(xi);
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
    for (size_t i = xi; i + 1 < stack_.size(); i += 2) NoteEntry(t, *stack_[i], stack_[i + 1]);
  }
  Mutate(xi - 1, "__setitem__", true);
  t.literal = t.literal && AllLiteral(xi);
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
  t.literal = t.literal && AllLiteral(mark);
  t.count += len - mark;
  stack_.resize(mark);
}

// Build mirrors load_build: inst.__setstate__(state), else inst.__dict__
// updates and setattr for slot state.
void Machine::Build(ByteReader& r) {
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
  if (inst.special == Special::kNumpyDtype) DtypeSetState(inst, *state);
  if (inst.special == Special::kJoblibWrapper || inst.special == Special::kNdArrayWrapper) {
    MergeState(inst, state, "state");
  }
  Mutate(stack_.size() - 1, "__setstate__", false);
  if (!joblib_) return;
  if (inst.special == Special::kJoblibWrapper) {
    JoblibRead(r, inst);
  } else if (inst.special == Special::kNdArrayWrapper) {
    // reference: joblib/numpy_pickle_compat.py NDArrayWrapper.read:
    // np.load(os.path.join(dirname, self.filename), allow_pickle=True).
    std::string file = "a file it names";
    for (const Attr& a : inst.x().attrs) {
      if (a.name == "filename" && a.held && a.held->kind == VKind::kStr) {
        file = Quoted(a.held->text(), 60);
      }
    }
    RecordCall("joblib NDArrayWrapper.read", inst.import_index, false, true,
               "joblib.load then runs numpy.load(" + file +
                   ", allow_pickle=True) on a file outside this one (joblib < 0.10 format): "
                   "a pickle that cannot be scanned here");
  }
}

// --- joblib ------------------------------------------------------------------
// joblib.load unpickles with NumpyUnpickler, whose load_build, after the
// ordinary BUILD, replaces a NumpyArrayWrapper on the stack by
// wrapper.read(unpickler), which reads the array from the file right there
// (reference: joblib/numpy_pickle.py, joblib 1.2):
//   read_array: count = 1 if len(self.shape) == 0 else
//                 np.multiply.reduce([np.int64(x) for x in self.shape])
//     if self.dtype.hasobject: array = pickle.load(unpickler.file_handle)
//     else:
//       if safe_get_numpy_array_alignment_bytes() is not None:   # getattr(..., None)
//         padding_length = int.from_bytes(file_handle.read(1), 'little')
//         if padding_length != 0: file_handle.read(padding_length)
//       max_read_count = BUFFER_SIZE // min(BUFFER_SIZE, self.dtype.itemsize)
//       ... _read_bytes(file_handle, read_count * self.dtype.itemsize) ...
//       if self.order == 'F': ... (then read() checks self.subclass)
//   read_mmap (mmap_mode, allow_mmap) seeks past the same bytes:
//     offset += padding_length + 1; seek(offset + marray.nbytes).
// NDArrayWrapper (joblib < 0.10, and its subclass ZNDArrayWrapper) read a
// separate file instead: no bytes follow in this one.

// JoblibHazard: a name whose presence in the instance changes how the
// wrapper behaves (a dunder, or one of its method names): not followed.
bool JoblibHazard(std::string_view k) {
  return (k.size() >= 2 && k.substr(0, 2) == "__") || k == "read" || k == "read_array" ||
         k == "read_mmap" || k == "write_array" || k == "safe_get_numpy_array_alignment_bytes";
}
// JoblibKey: a dict key the read above can see, or a hazard.
bool JoblibKey(std::string_view k) {
  return JoblibHazard(k) || k == "shape" || k == "dtype" || k == "order" || k == "subclass" ||
         k == "numpy_array_alignment_bytes" || k == "allow_mmap" || k == "filename";
}

// DtypeSize is what a numpy typestr gives: itemsize and hasobject.
struct DtypeSize {
  bool ok = false;
  uint64_t itemsize = 0;
  bool object = false;
  bool flexible = false;  // S/U/V: a BUILD state's elsize would set the size
  std::string why;
};

// ParseTypestr accepts exactly what numpy's dtype.__reduce__ writes,
// "%c%d" % (kind, elsize) (elsize / 4 for 'U'), for the kinds and sizes
// numpy 1.24 accepts on a 64-bit platform; anything else (names such as
// 'float64', byte-order prefixes, structured dtypes) is not guessed at.
DtypeSize ParseTypestr(std::string_view s) {
  DtypeSize d;
  d.why = "its dtype " + Quoted(s, 40) + " is not a typestr whose itemsize is known here";
  if (s.size() < 2 || s.size() > 11) return d;
  uint64_t n = 0;
  for (size_t i = 1; i < s.size(); ++i) {
    if (s[i] < '0' || s[i] > '9') return d;
    n = n * 10 + static_cast<uint64_t>(s[i] - '0');
  }
  if (s.size() > 2 && s[1] == '0') return d;  // numpy reads "f08" too; it never writes it
  auto one_of = [n](std::initializer_list<uint64_t> sizes) {
    return std::find(sizes.begin(), sizes.end(), n) != sizes.end();
  };
  const uint64_t kIntMax = INT32_MAX;
  switch (s[0]) {
    case 'b': d.ok = n == 1; break;
    case 'i':
    case 'u': d.ok = one_of({1, 2, 4, 8}); break;
    case 'f': d.ok = one_of({2, 4, 8, 16}); break;  // f16: long double (x86-64, aarch64)
    case 'c': d.ok = one_of({8, 16, 32}); break;
    case 'M':
    case 'm': d.ok = n == 8; break;
    case 'O':
      d.ok = n == 8;
      d.object = true;
      break;
    case 'S':
    case 'V':
      d.ok = n <= kIntMax;
      d.flexible = true;
      break;
    case 'U':
      d.ok = n <= kIntMax / 4;
      d.flexible = true;
      n *= 4;  // UCS4
      break;
    default: break;
  }
  d.itemsize = n;
  if (d.ok) d.why.clear();
  return d;
}

void MarkUnknown(Value& v, std::string why) {
  if (v.x().unknown.empty()) v.x().unknown = std::move(why);
}

void PutAttr(Value& obj, Attr a) {
  std::vector<Attr>& attrs = obj.x().attrs;
  for (Attr& e : attrs) {
    if (e.name == a.name) {
      e = std::move(a);
      return;
    }
  }
  if (attrs.size() >= kKeptItems) {
    MarkUnknown(obj, "more than " + U64(kKeptItems) + " of its names are set");
    return;
  }
  attrs.push_back(std::move(a));
}

void Machine::SetAttr(Value& obj, std::string_view name, const Ref& value) {
  Attr a;
  a.name = std::string(name);
  a.kind = value->kind;
  // Held only when it holds no references itself: no cycles.
  bool ints = value->kind == VKind::kTuple && value->x().items.size() == value->count;
  for (const Ref& item : value->x().items) {
    ints &= (item->kind == VKind::kInt && item->int_fits) || item->kind == VKind::kBool;
  }
  if (ints || value->special == Special::kNumpyDtype || value->kind == VKind::kStr) a.held = value;
  PutAttr(obj, std::move(a));
}

void Machine::NoteEntry(Value& dict, const Value& key, const Ref& value) {
  if (key.kind == VKind::kStr) {
    if (key.truncated) {
      MarkUnknown(dict, "a key of its state was cut at max_string_bytes");
    } else if (JoblibKey(key.text())) {
      SetAttr(dict, key.text(), value);
    }
  } else if (!key.Native()) {  // an object that may compare equal to a name
    MarkUnknown(dict, "a key of its state is " + Describe(key) + ", not a literal");
  }
}

// MergeState mirrors pickle.py load_build for an instance without
// __setstate__: a (state, slotstate) pair splits; a truthy state updates
// inst.__dict__, a truthy slotstate is setattr'd item by item.
void Machine::MergeState(Value& inst, const Ref& state, const char* what) {
  const Value* st = state.get();
  const Value* slots = nullptr;
  if (st->kind == VKind::kTuple && st->count == 2) {
    if (st->x().items.size() != 2) return MarkUnknown(inst, "its BUILD state tuple is not kept");
    slots = st->x().items[1].get();
    st = st->x().items[0].get();
  }
  for (const Value* v : {st, slots}) {
    if (v == nullptr || v->kind == VKind::kNone || (v->kind == VKind::kTuple && v->count == 0)) continue;
    if (v->kind != VKind::kDict) {
      return MarkUnknown(inst, std::string("its BUILD ") + what + " is " + Describe(*v) + ", not a dict");
    }
    if (!v->x().unknown.empty()) MarkUnknown(inst, v->x().unknown);
    for (const Attr& a : v->x().attrs) PutAttr(inst, a);
  }
}

// Specialize marks the results joblib's reading depends on: instances of
// the wrappers (with the attributes __init__ gives them) and dtypes.
void Machine::Specialize(const Value& callee, const Ref& args, const Ref& kwargs, Value* result) {
  const std::string& m = callee.x().module;
  const std::string& q = callee.x().qualname;
  std::string_view op = op_name_;
  bool newobj = op == "NEWOBJ" || op == "NEWOBJ_EX";
  const Value* a = args.get();
  bool args_known = a != nullptr && a->kind == VKind::kTuple && a->x().items.size() == a->count;
  // pickle.py: NEWOBJ calls cls.__new__ (no __init__); OBJ/INST without
  // arguments too (_instantiate); REDUCE and OBJ/INST with arguments call cls(*args).
  bool init = !newobj && !(op != "REDUCE" && args_known && a->count == 0);
  if (m == "joblib.numpy_pickle" && q == "NumpyArrayWrapper") {
    result->special = Special::kJoblibWrapper;
    if (!init) return;
    if (!args_known || a->count < 4 || a->count > 6) {
      return MarkUnknown(*result, "the arguments of its __init__ are not known");
    }
    static constexpr const char* kParams[] = {"subclass", "shape", "order", "dtype", "allow_mmap",
                                              "numpy_array_alignment_bytes"};
    for (size_t i = 0; i < a->count; ++i) SetAttr(*result, kParams[i], a->x().items[i]);
    Attr d;  // defaults: allow_mmap=False, numpy_array_alignment_bytes=16
    d.name = "allow_mmap";
    d.kind = VKind::kBool;
    if (a->count < 5) PutAttr(*result, d);
    d.name = "numpy_array_alignment_bytes";
    d.kind = VKind::kInt;
    if (a->count < 6) PutAttr(*result, d);
  } else if ((m == "joblib.numpy_pickle" || m == "joblib.numpy_pickle_compat") &&
             q == "NDArrayWrapper") {
    result->special = Special::kNdArrayWrapper;
    if (init && args_known && a->count >= 1) SetAttr(*result, "filename", a->x().items[0]);
  } else if (m == "numpy" && q == "dtype") {
    result->special = Special::kNumpyDtype;
    if (kwargs && !(kwargs->kind == VKind::kDict && kwargs->count == 0)) {
      return MarkUnknown(*result, "numpy.dtype is called with keyword arguments");
    }
    if (!args_known || a->count < 1 || a->count > 4) {
      return MarkUnknown(*result, "the arguments of numpy.dtype are not known");
    }
    const Value& t = *a->x().items[0];
    if ((t.kind != VKind::kStr && t.kind != VKind::kBytes) || t.truncated) {
      return MarkUnknown(*result, "numpy.dtype is called with " + Describe(t) +
                                      ", not a typestr (structured dtypes are not followed)");
    }
    result->x().typestr = std::string(t.text());
    // copy=True makes even a builtin dtype a fresh object that a BUILD
    // state can change; its truth value must be known.
    if (a->count >= 3) {
      const Value& c = *a->x().items[2];
      if (c.kind != VKind::kNone && c.kind != VKind::kBool && c.kind != VKind::kInt) {
        return MarkUnknown(*result, "numpy.dtype's copy argument is " + Describe(c));
      }
    }
  }
}

// DtypeSetState checks a BUILD state on a numpy dtype (numpy's
// arraydescr_setstate): (version, byteorder, subarray, names, fields,
// elsize, alignment, flags[, metadata]). numpy lets it set hasobject
// (flags & 1) and, for S/U/V, the itemsize; whether it applies depends on
// the copy argument and the numpy version. So a state is accepted only
// where it agrees with the typestr, and nothing is computed from it.
void Machine::DtypeSetState(Value& dtype, const Value& st) {
  if (!dtype.x().unknown.empty()) return;
  auto int32 = [](const Value& v, int64_t* out) {
    if (!((v.kind == VKind::kInt && v.int_fits) || v.kind == VKind::kBool)) return false;
    *out = v.int_value;
    return v.int_value >= INT32_MIN && v.int_value <= INT32_MAX;
  };
  const std::vector<Ref>& it = st.x().items;
  int64_t version = 0, elsize = 0, alignment = 0, flags = 0;
  if (st.kind != VKind::kTuple || (st.count != 8 && st.count != 9) || it.size() != st.count ||
      !int32(*it[0], &version) || (version != 3 && version != 4) || it[1]->kind != VKind::kStr ||
      it[2]->kind != VKind::kNone || it[3]->kind != VKind::kNone || it[4]->kind != VKind::kNone ||
      !int32(*it[5], &elsize) || !int32(*it[6], &alignment) || !int32(*it[7], &flags)) {
    return MarkUnknown(dtype, "its BUILD state is not the plain (3|4, byteorder, None, None, None, "
                              "elsize, alignment, flags) that numpy writes for a typestr dtype");
  }
  DtypeSize d = ParseTypestr(dtype.x().typestr);
  if (!d.ok) return;  // reported when a wrapper uses it
  if (((flags & 1) != 0) != d.object) {
    return MarkUnknown(dtype, "its BUILD state's flags " + std::to_string(flags) +
                                  " disagree with its typestr about object items");
  }
  if (d.flexible && static_cast<uint64_t>(elsize) != d.itemsize) {
    return MarkUnknown(dtype, "its BUILD state's elsize " + std::to_string(elsize) +
                                  " disagrees with its typestr " + Quoted(dtype.x().typestr, 40));
  }
}

// JoblibRead follows NumpyArrayWrapper.read after the BUILD at op_offset_:
// it skips the bytes joblib reads, or analyzes the nested pickle of an
// object array, then puts the array where the wrapper was.
void Machine::JoblibRead(ByteReader& r, Value& wrapper) {
  const uint64_t build_offset = op_offset_;
  if (joblib_divergence_ == kNoOffset) joblib_divergence_ = r.offset();
  auto cannot = [&](const std::string& why) {
    Fail("joblib.numpy_pickle.NumpyArrayWrapper: " + why +
         "; the bytes joblib.load reads after this BUILD cannot be computed exactly");
  };
  auto past_end = [&](uint64_t at, const std::string& what, uint64_t n, uint64_t have) {
    op_name_ = "";
    op_offset_ = at;
    Fail("joblib.load reads " + what + " of " + U64(n) + " bytes here for the NumpyArrayWrapper BUILD at " +
         U64(build_offset) + ", " + U64(have) + " remain");
  };
  if (frame_active_) {
    // pickle.py reads the rest of a frame from memory: joblib's reads come
    // from after the frame. joblib's writer always ends the frame here.
    if (r.pos() < frame_end_) {
      cannot("its data would follow the FRAME that ends at " + U64(r.offset() + (frame_end_ - r.pos())) +
             ", not this BUILD");
    }
    frame_active_ = false;
  }
  const Value::Extra& x = wrapper.x();
  if (!x.unknown.empty()) cannot(x.unknown);
  const Attr *shape = nullptr, *dtype = nullptr, *order = nullptr, *subclass = nullptr,
             *align = nullptr;
  for (const Attr& a : x.attrs) {
    if (JoblibHazard(a.name)) cannot("its state sets " + Quoted(a.name, 40));
    if (a.name == "shape") shape = &a;
    if (a.name == "dtype") dtype = &a;
    if (a.name == "order") order = &a;
    if (a.name == "subclass") subclass = &a;
    if (a.name == "numpy_array_alignment_bytes") align = &a;
  }
  if (shape == nullptr || dtype == nullptr || subclass == nullptr) {
    cannot(std::string("it has no '") + (shape == nullptr ? "shape" : dtype == nullptr ? "dtype" : "subclass") +
           "' (joblib.load raises)");
  }
  if (!shape->held) {
    cannot(std::string("its shape is a ") + KindName(shape->kind) +
           ", not a tuple of at most " + U64(kKeptItems) + " ints");
  }
  uint64_t count = 1;  // shape (): one element
  for (const Ref& dim : shape->held->x().items) {
    if (dim->int_value < 0) cannot("its shape has the negative dimension " + std::to_string(dim->int_value));
    if (__builtin_mul_overflow(count, static_cast<uint64_t>(dim->int_value), &count) ||
        count > static_cast<uint64_t>(INT64_MAX)) {
      cannot("the element count of its shape overflows int64");
    }
  }
  if (!dtype->held || dtype->held->special != Special::kNumpyDtype) {
    cannot(std::string("its dtype is a ") + KindName(dtype->kind) + ", not the result of numpy.dtype");
  }
  const Value& dt = *dtype->held;
  if (!dt.x().unknown.empty()) cannot("its dtype: " + dt.x().unknown);
  DtypeSize ds = ParseTypestr(dt.x().typestr);
  if (!ds.ok) cannot(ds.why);

  PickleArray rec;
  rec.build_offset = build_offset;
  rec.offset = r.offset();
  rec.stream = static_cast<uint32_t>(stream_index_);
  if (ds.object) {
    // pickle.load(unpickler.file_handle): the C unpickler on the same file,
    // which it leaves just past the nested STOP.
    if (depth_ + 1 > lim_.max_nesting) {
      LimitHit("max_nesting", lim_.max_nesting, " at a joblib object array");
    }
    const uint64_t at = r.offset();
    const size_t inner_index = out_->streams.size();
    const size_t saved_stream = stream_index_;
    Machine inner(opt_, out_, rec_, depth_ + 1, build_offset, false);
    inner.RunStreams(r.Peek(r.remaining()), at, 1, false);
    stream_index_ = saved_stream;
    op_name_ = "BUILD";
    op_offset_ = build_offset;
    const PickleStream& ns = out_->streams[inner_index];
    if (!ns.complete) {
      Fail("the pickle of the object array at " + U64(at) + " does not complete, so joblib.load fails here");
    }
    rec.object_pickle = true;
    rec.nested_stream = static_cast<uint32_t>(inner_index);
    rec.data_bytes = ns.end - at;
    Take(r, rec.data_bytes);
  } else {
    if (order == nullptr) cannot("it has no 'order' (joblib.load raises after reading)");
    if (align != nullptr && (align->kind == VKind::kResult || align->kind == VKind::kPersistent)) {
      cannot("whether its numpy_array_alignment_bytes is None is not known");
    }
    if (align != nullptr && align->kind != VKind::kNone) {
      if (r.remaining() < 1) past_end(r.offset(), "the padding-length byte", 1, 0);
      uint64_t pad = r.Peek(1)[0];
      if (pad > r.remaining() - 1) past_end(r.offset() + 1, "alignment padding", pad, r.remaining() - 1);
      rec.padding_bytes = 1 + pad;
    }
    // BUFFER_SIZE // min(BUFFER_SIZE, itemsize) divides by zero.
    if (ds.itemsize == 0) cannot("its dtype's itemsize is 0 (joblib.load fails)");
    uint64_t n = 0;
    if (__builtin_mul_overflow(count, ds.itemsize, &n) || n > static_cast<uint64_t>(INT64_MAX)) {
      cannot("its byte count (" + U64(count) + " elements of " + U64(ds.itemsize) + " bytes) overflows int64");
    }
    uint64_t have = r.remaining() - rec.padding_bytes;
    if (n > have) past_end(r.offset() + rec.padding_bytes, "array data", n, have);
    Take(r, rec.padding_bytes);
    Take(r, n);
    rec.data_bytes = n;
  }
  rec_->Array(rec);
  Ref array = Make(VKind::kResult);  // the wrapper's place: the array it read
  array->x().callee = "joblib.numpy_pickle.NumpyArrayWrapper.read";
  array->callee_safe = true;
  stack_.back() = std::move(array);
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
        LimitHit("max_stack_depth", lim_.max_stack_depth);
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
    case 0x88: Push(true_); return;
    case 0x89: Push(false_); return;
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
      Ref d = Make(VKind::kDict);
      d->literal = AllLiteral(i);
      for (size_t k = i; k + 1 < stack_.size(); k += 2) NoteEntry(*d, *stack_[k], stack_[k + 1]);
      d->count = (stack_.size() - i) / 2;
      stack_.resize(i);
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
    case 'b': Build(r); return;
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

namespace {

// MergePlainView adds to `out` (the joblib view) what `plain` (the same
// bytes read as opcodes throughout, as pickle.load, torch.load and every
// unpickler but joblib's read them) imports or calls from `from` on that
// the joblib view does not: a file must not hide a payload in bytes that
// joblib reads as array data.
void MergePlainView(const PickleAnalysis& plain, uint64_t from, const PickleLimits& lim,
                    PickleAnalysis* out) {
  pi::Recorder rec(out, lim);
  if (plain.incomplete) rec.Incomplete("pickle.load's reading: " + plain.incomplete_reason);
  auto stream_at = [&](uint64_t offset) {
    uint32_t best = 0;
    for (size_t i = 0; i < out->streams.size(); ++i) {
      if (out->streams[i].depth == 0 && out->streams[i].offset <= offset) best = static_cast<uint32_t>(i);
    }
    return best;
  };
  std::set<std::tuple<uint64_t, std::string, std::string>> seen;
  for (const PickleImport& i : out->imports) seen.emplace(i.offset, i.opcode, i.FullName());
  for (const PickleCall& c : out->calls) seen.emplace(c.offset, c.opcode, c.callee);
  std::vector<int64_t> remap(plain.imports.size(), -1);
  std::string first;
  uint64_t first_at = core::kNoOffset;
  auto note = [&](uint64_t at, const std::string& what) {
    if (first_at == core::kNoOffset) {
      first_at = at;
      first = what;
    }
  };
  for (size_t k = 0; k < plain.imports.size(); ++k) {
    PickleImport imp = plain.imports[k];
    if (imp.offset < from || imp.safety == GlobalClass::kSafe) continue;
    if (!seen.emplace(imp.offset, imp.opcode, imp.FullName()).second) continue;
    note(imp.offset, imp.opcode + " at " + std::to_string(imp.offset) + " imports " + Quoted(imp.FullName()));
    imp.stream = stream_at(imp.offset);
    remap[k] = rec.Import(std::move(imp));
  }
  for (const PickleCall& pc : plain.calls) {
    if (pc.offset < from || pc.allowed) continue;
    if (!seen.emplace(pc.offset, pc.opcode, pc.callee).second) continue;
    PickleCall c = pc;
    note(c.offset, c.opcode + " at " + std::to_string(c.offset) + " calls " + Quoted(c.callee));
    c.import_index = c.import_index >= 0 ? remap[static_cast<size_t>(c.import_index)] : -1;
    c.stream = stream_at(c.offset);
    rec.Call(std::move(c));
  }
  for (const PickleAnomaly& pa : plain.anomalies) {
    // What the plain view could not judge (limits, nested archives) counts;
    // that it breaks on array bytes does not.
    if (pa.offset == core::kNoOffset || pa.offset < from || pa.severity > core::Severity::kHigh ||
        (pa.kind != PickleAnomalyKind::kLimit && pa.kind != PickleAnomalyKind::kNested)) {
      continue;
    }
    PickleAnomaly a = pa;
    note(a.offset, a.message);
    a.stream = stream_at(a.offset);
    rec.Anomaly(std::move(a));
  }
  if (first_at != core::kNoOffset) {
    PickleAnomaly a;
    a.kind = PickleAnomalyKind::kDisagreement;
    a.severity = core::Severity::kHigh;
    a.offset = first_at;
    a.message = "joblib.load reads the bytes from " + std::to_string(from) +
                " on as array data, but pickle.load and other unpicklers read them as opcodes: " + first;
    a.stream = stream_at(first_at);
    rec.Anomaly(std::move(a));
  }
}

}  // namespace

PickleAnalysis AnalyzePickle(std::span<const uint8_t> bytes, const PickleOptions& options,
                             uint64_t base_offset) {
  PickleAnalysis out;
  pi::Recorder rec(&out, options.limits);
  Machine m(options, &out, &rec, 0, core::kNoOffset, true);
  m.RunStreams(bytes, base_offset, options.limits.max_streams, true);
  if (m.joblib_divergence() == core::kNoOffset) return out;
  PickleAnalysis plain;
  pi::Recorder plain_rec(&plain, options.limits);
  Machine p(options, &plain, &plain_rec, 0, core::kNoOffset, false);
  p.RunStreams(bytes, base_offset, options.limits.max_streams, true);
  MergePlainView(plain, m.joblib_divergence(), options.limits, &out);
  return out;
}

}  // namespace modelgate::scanner
