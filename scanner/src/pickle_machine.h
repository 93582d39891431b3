// Private to the pickle machine: its values and the Machine class, a
// symbolic copy of CPython's C unpickler (Modules/_pickle.c, load()). It
// keeps the same object stack, mark stack (with the same "fence": nothing
// below the innermost MARK can be popped), memo (an index -> object table
// whose MEMOIZE key is the number of entries) and protocol state, but its
// objects are symbols: exact strings and bytes, small ints, bounded tuples,
// containers that only count their items, the globals find_class would
// return, and the opaque results of calls, which remember their callee.
// Where a real load would fail, the stream stops there and everything
// before it still counts: those calls ran.
//   pickle_machine.cc  stream lifecycle, stack, memo, calls, opcodes
//   pickle_salvage.cc  the walk past a limit
//   pickle_joblib.cc   joblib's NumpyArrayWrapper reading
//   pickle.cc          AnalyzePickle: the views and how they merge
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "modelgate/scanner.h"
#include "pickle_internal.h"
#include "pickle_opcodes.h"
#include "pickle_records.h"

namespace modelgate::scanner::pickle_internal {

namespace pi = ::modelgate::scanner::pickle_internal;
// The machine's files use these throughout.
using core::ByteReader;
using core::kNoOffset;
using core::Quoted;

inline constexpr int kHighestProtocol = 5;
// Tuples keep their first items (calls need their arguments) down to a
// bounded depth; deeper or wider structure is only counted. A per-stream
// budget of kept references bounds memory whatever the stream does.
inline constexpr size_t kKeptItems = 16;
inline constexpr uint8_t kKeptDepth = 24;
inline constexpr uint64_t kKeptBudget = 1'000'000;
// torch's legacy format (what _load_from_bytes reads) has five pickles:
// magic number, protocol version, sys info, the object, storage keys.
inline constexpr uint64_t kNestedStreams = 5;
inline constexpr size_t kMaxDisagreementsPerStream = 32;

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
    // kNumpyDtype: numpy.dtype(typestr, align, copy), and the byte order
    // its last plain BUILD state gave ('<', '>', '|'; 0 when none did).
    std::string typestr;
    char byteorder = 0;
    // Graph capture: the array a joblib wrapper's read put here.
    std::shared_ptr<const PickleJoblibArray> joblib_array;
    // Graph capture only (PickleOptions::capture_graph; see GraphHold):
    // every item, entry and BUILD state, a call's callee and arguments, a
    // persistent object's pid. Cleared when the stream ends (cycles).
    bool g_held = false;
    std::vector<Ref> g_items;
    std::vector<std::pair<Ref, Ref>> g_entries;
    std::vector<Ref> g_states;
    Ref g_callee, g_args;
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

inline const char* KindName(VKind k) {
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

inline std::string U64(uint64_t v) { return std::to_string(v); }

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
    graph_ = options.capture_graph && depth == 0;
  }
  ~Machine() { GraphRelease(); }
  Machine(const Machine&) = delete;
  Machine& operator=(const Machine&) = delete;

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

  // --- graph capture (PickleOptions::capture_graph, top-level streams)
  // GraphHold charges `n` references held by `v` to max_graph_refs and
  // registers `v` for release; false (the graph is cut) past the limit.
  bool GraphHold(const Ref& v, uint64_t n);
  void GraphCut(const std::string& why);
  void GraphCall(const Ref& result, const Ref& callee, const Ref& args, const Ref& kwargs);
  void GraphRelease();
  void ExportGraph(const Ref& root);

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
  void NoteTorchStorage(const Value& pid);
  bool MemoPutsOnly(uint64_t from, uint64_t to) const;
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
  // The input RunStreams walks (import spans look at the bytes between
  // opcodes), and the bytes of the import being read (PickleImport::span_*).
  std::span<const uint8_t> input_;
  uint64_t input_base_ = 0;
  uint64_t span_begin_ = 0, span_end_ = 0;
  // False in a nested machine over decoded bytes: no import spans.
  bool spans_ = true;

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
  // Graph capture: on for a top-level machine asked to; per stream, the
  // references held, why the graph was cut ("" while whole), and the
  // values holding graph references (released when the stream ends).
  bool graph_ = false;
  uint64_t graph_refs_ = 0;
  std::string graph_cut_;
  std::vector<std::weak_ptr<Value>> graph_held_;
  // Immutable scalars: shared.
  Ref none_, true_, false_, float_;
};

// Literal: a value that runs no code of its own when a value type reads
// it (see pickle_machine.cc).
bool Literal(const Value& v);

}  // namespace modelgate::scanner::pickle_internal
