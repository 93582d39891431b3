// The pickle machine: stream lifecycle, stack, memo, imports, calls and
// the opcode dispatch (see pickle_machine.h).
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "pickle_machine.h"

namespace modelgate::scanner::pickle_internal {

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
  GraphRelease();
  graph_refs_ = 0;
  graph_cut_.clear();
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

void Machine::RunStreams(std::span<const uint8_t> bytes, uint64_t base, uint64_t stream_cap,
                         bool report_trailing) {
  input_ = bytes;
  input_base_ = base;
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
      span_begin_ = span_end_ = 0;  // an opcode that failed leaves none behind
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
  if (graph_ && GraphHold(v, v->count)) {
    v->x().g_items.assign(stack_.begin() + static_cast<std::ptrdiff_t>(start), stack_.end());
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

namespace {

bool AllLiteralItems(const std::vector<Ref>& items, size_t from) {
  for (size_t i = from; i < items.size(); ++i) {
    if (!Literal(*items[i])) return false;
  }
  return true;
}

}  // namespace

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
  // pickle.py load_int (and pickletools): "00" and "01" are False and
  // True, how protocols 0 and 1 write bools (requires_grad in torch.save).
  if (!is_long && (line == "00" || line == "01")) {
    Push(line == "01" ? true_ : false_);
    return;
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
  imp.span_begin = std::exchange(span_begin_, 0);
  imp.span_end = std::exchange(span_end_, 0);
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
        GraphCall(result, callee, args, kwargs);
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
  GraphCall(result, callee, args, kwargs);
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
  // The same bytes (a memoized literal loaded again) are judged once: their
  // findings would be the same, and judging each load is quadratic.
  if (!rec_->FirstNested(nested)) return;
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
  // Offsets of decoded bytes do not name bytes of the input.
  inner.spans_ = spans_ && !arg->use_owned && arg->data_offset != kNoOffset;
  inner.RunStreams(nested, nested_base, kNestedStreams, false);
  stream_index_ = saved_stream;
  op_name_ = saved_op;
  op_offset_ = saved_offset;
}

// MemoPutsOnly: the input bytes [from, to) are nothing but MEMOIZE, BINPUT
// and LONG_BINPUT opcodes (what a pickler writes between pushes).
bool Machine::MemoPutsOnly(uint64_t from, uint64_t to) const {
  if (from > to || from < input_base_ || to - input_base_ > input_.size()) return false;
  for (uint64_t p = from - input_base_, end = to - input_base_; p < end;) {
    const uint8_t op = input_[static_cast<size_t>(p)];
    const uint64_t n = op == 0x94 ? 1 : op == 'q' ? 2 : op == 'r' ? 5 : 0;
    if (n == 0 || n > end - p) return false;
    p += n;
  }
  return true;
}

// NoteTorchStorage records a persistent id shaped as torch's legacy
// storage id: ('storage', <name>Storage, key, location, numel,
// view_metadata), typename str or bytes (_maybe_decode_ascii), key a str.
void Machine::NoteTorchStorage(const Value& pid) {
  if (depth_ != 0 || pid.kind != VKind::kTuple || pid.count != 6 || pid.x().items.size() != 6) return;
  const auto& items = pid.x().items;
  const Value& type_name = *items[0];
  const Value& storage_type = *items[1];
  const Value& key = *items[2];
  if ((type_name.kind != VKind::kStr && type_name.kind != VKind::kBytes) ||
      type_name.text() != "storage" || storage_type.kind != VKind::kGlobal ||
      key.kind != VKind::kStr || key.truncated) {
    return;
  }
  if (out_->torch_storages.size() >= lim_.max_records) {
    out_->torch_storages_cut = true;
    return;
  }
  PickleTorchStorage t;
  t.key = std::string(key.text());
  t.storage_type = storage_type.x().qualname;
  t.offset = op_offset_;
  t.stream = static_cast<uint32_t>(stream_index_);
  out_->torch_storages.push_back(std::move(t));
}

void Machine::Persistent(const Ref& pid, std::string desc) {
  if (pid) NoteTorchStorage(*pid);
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
  if (pid && GraphHold(v, 1)) v->x().g_args = pid;
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
  if (graph_ && (t.kind == VKind::kList || t.kind == VKind::kResult) &&
      GraphHold(stack_[xi - 1], stack_.size() - xi)) {
    t.x().g_items.insert(t.x().g_items.end(), stack_.begin() + static_cast<std::ptrdiff_t>(xi),
                         stack_.end());
  } else if (graph_ && t.kind == VKind::kByteArray) {
    GraphCut("APPENDS on a bytearray at " + U64(op_offset_));
  }
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
  if (graph_ && (t.kind == VKind::kDict || t.kind == VKind::kResult) &&
      GraphHold(stack_[xi - 1], stack_.size() - xi)) {
    for (size_t i = xi; i + 1 < stack_.size(); i += 2) t.x().g_entries.emplace_back(stack_[i], stack_[i + 1]);
  } else if (graph_ && t.Native() && t.kind != VKind::kDict) {
    // A list item replaced by index: not followed; the graph would be wrong.
    GraphCut("SETITEMS on " + WithArticle(KindName(t.kind)) + " at " + U64(op_offset_));
  }
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
  if (graph_ && (t.kind == VKind::kSet || t.kind == VKind::kResult) &&
      GraphHold(stack_[mark - 1], len - mark)) {
    t.x().g_items.insert(t.x().g_items.end(), stack_.begin() + static_cast<std::ptrdiff_t>(mark),
                         stack_.end());
  }
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
      Fail("BUILD on " + WithArticle(std::string("'") + KindName(inst.kind) + "'") + " that has no __dict__");
    }
    return;
  }
  if (inst.special == Special::kNumpyDtype) DtypeSetState(inst, *state);
  if (inst.special == Special::kJoblibWrapper || inst.special == Special::kNdArrayWrapper) {
    MergeState(inst, state, "state");
  }
  Mutate(stack_.size() - 1, "__setstate__", false);
  if (graph_ && GraphHold(Top(), 1)) Top()->x().g_states.push_back(state);
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
      Ref result = Pop();
      ExportGraph(result);
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
      if (graph_ && GraphHold(d, 2 * d->count)) {
        for (size_t k = i; k + 1 < stack_.size(); k += 2) d->x().g_entries.emplace_back(stack_[k], stack_[k + 1]);
      }
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
      span_begin_ = spans_ ? op_offset_ : 0;
      span_end_ = spans_ ? r.offset() : 0;
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
      // The bytes that name the import: the two string pushes (wherever they
      // are: a memo get hands over the very value they made), when the
      // module's comes first and only memo puts lie between them.
      auto end_of = [](const Value& v) { return v.data_offset + v.view.size(); };
      const bool named = spans_ && !module->use_owned && !name->use_owned &&
                         module->data_offset != kNoOffset && name->data_offset != kNoOffset &&
                         module->origin_offset < name->origin_offset &&
                         MemoPutsOnly(end_of(*module), name->origin_offset);
      span_begin_ = named ? module->origin_offset : 0;
      span_end_ = named ? end_of(*name) : 0;
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
      span_begin_ = spans_ ? op_offset_ : 0;
      span_end_ = spans_ ? r.offset() : 0;
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
      // pickle.py hands persistent_load the line as a str (a protocol 0
      // tar checkpoint's tensor key); a captured graph keeps it as the id.
      Persistent(graph_ ? MakeOwnedText(VKind::kStr, std::string(line), op_offset_ + 1) : nullptr,
                 Quoted(line, 60));
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

}  // namespace modelgate::scanner::pickle_internal
