// PlanStateDict: the tensors of a pickle's object graph, following only
// the calls torch.save writes for plain tensors and parameters (see
// torch/_utils.py and torch/_tensor.py __reduce_ex__; torch/serialization.py
// persistent_id for the storage ids). Nothing else is followed: an object
// made any other way refuses the file.
#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "modelgate/convert.h"
#include "readers.h"

namespace modelgate::convert {
namespace {

using core::Code;
using core::Error;
using core::Quoted;
using scanner::PickleGraph;
using scanner::PickleNode;
using Kind = PickleNode::Kind;

// The typed storages torch.save names in a persistent id, and the
// safetensors dtype each holds (one to one). Others (ComplexDoubleStorage,
// quantized storages) have no safetensors dtype.
struct StorageDtype {
  std::string_view qualname;
  core::Dtype dtype;
};
constexpr StorageDtype kStorages[] = {
    {"FloatStorage", core::Dtype::kF32},   {"DoubleStorage", core::Dtype::kF64},
    {"HalfStorage", core::Dtype::kF16},    {"BFloat16Storage", core::Dtype::kBF16},
    {"LongStorage", core::Dtype::kI64},    {"IntStorage", core::Dtype::kI32},
    {"ShortStorage", core::Dtype::kI16},   {"CharStorage", core::Dtype::kI8},
    {"ByteStorage", core::Dtype::kU8},     {"BoolStorage", core::Dtype::kBool},
    {"ComplexFloatStorage", core::Dtype::kC64},
};

const char* KindName(Kind k) {
  switch (k) {
    case Kind::kNone: return "None";
    case Kind::kBool: return "bool";
    case Kind::kInt: return "int";
    case Kind::kFloat: return "float";
    case Kind::kStr: return "str";
    case Kind::kBytes: return "bytes";
    case Kind::kTuple: return "tuple";
    case Kind::kList: return "list";
    case Kind::kDict: return "dict";
    case Kind::kSet: return "set";
    case Kind::kFrozenSet: return "frozenset";
    case Kind::kGlobal: return "global";
    case Kind::kCall: return "call result";
    case Kind::kPersistent: return "persistent object";
    case Kind::kOther: return "object";
  }
  return "object";
}

class Planner {
 public:
  Planner(const PickleGraph& g, const ConvertLimits& limits, bool drop, const PlanIds& ids,
          const PlanHooks* hooks = nullptr)
      : g_(g), lim_(limits), drop_(drop), ids_(ids), hooks_(hooks) {}

  core::Result<StateDictPlan> Run() {
    const PickleNode* root = Node(g_.root);
    if (root == nullptr) return Fail(Code::kConvUnsupported, nullptr, "the pickle has no object");
    const std::vector<std::pair<uint32_t, uint32_t>>* entries = nullptr;
    if (auto s = DictEntries(*root, &entries); !s.ok()) return s.error();
    if (entries != nullptr) {
      on_path_.insert(root);
      if (auto s = Walk(*root, *entries, "", 1); !s.ok()) return s.error();
    } else if (hooks_ != nullptr && (root->joblib_array || root->kind == Kind::kList || root->kind == Kind::kTuple)) {
      if (auto s = OtherRoot(*root); !s.ok()) return s.error();
    } else {
      return Fail(Code::kConvUnsupported, root,
                  std::string("the checkpoint holds ") + Describe(*root) +
                      ", not a state dict (a dict of tensors)");
    }
    if (!non_tensors_.empty() && !drop_) {
      std::string list;
      for (size_t i = 0; i < non_tensors_.size() && i < 8; ++i) {
        list += (i ? ", " : "") + non_tensors_[i];
      }
      if (non_tensors_.size() > 8) list += ", ... (" + std::to_string(non_tensors_.size()) + " in all)";
      return Error{Code::kConvNotTensor, first_non_tensor_,
                   std::to_string(non_tensors_.size()) +
                       " leaf value(s) are neither tensors nor strings: " + list +
                       "; --drop-non-tensors drops them"};
    }
    if (auto s = CheckViewReads(tensors_, lim_); !s.ok()) return s.error();
    StateDictPlan plan;
    plan.tensors = std::move(tensors_);
    std::sort(plan.tensors.begin(), plan.tensors.end(),
              [](const TensorPlan& a, const TensorPlan& b) { return a.name < b.name; });
    plan.string_leaves = std::move(strings_);
    std::sort(plan.string_leaves.begin(), plan.string_leaves.end());
    if (drop_) plan.dropped = std::move(non_tensors_);
    // One name per value across tensors and strings.
    std::vector<std::string_view> names;
    for (const auto& t : plan.tensors) names.push_back(t.name);
    for (const auto& s : plan.string_leaves) names.push_back(s.first);
    std::sort(names.begin(), names.end());
    for (size_t i = 1; i < names.size(); ++i) {
      if (names[i] == names[i - 1]) {
        return Error{Code::kConvName, core::kNoOffset,
                     "two values flatten to the name " + Quoted(names[i], 120)};
      }
    }
    return plan;
  }

 private:
  // OtherRoot plans a root that is not a dict (PlanHooks only): a list or
  // tuple names its items 0, 1, ...; a leaf is one value named root_name.
  core::Status OtherRoot(const PickleNode& root) {
    if (root.joblib_array) return Value(hooks_->root_name, root, 1);
    if (!root.states.empty() || !root.entries.empty()) {
      return Fail(Code::kConvNotAllowed, &root, "a list or tuple with BUILD state");
    }
    on_path_.insert(&root);
    for (size_t i = 0; i < root.items.size(); ++i) {
      const PickleNode* item = Node(root.items[i]);
      if (item == nullptr) return Fail(Code::kConvUnsupported, &root, "an incomplete list");
      if (auto s = Value(std::to_string(i), *item, 1); !s.ok()) return s;
    }
    return core::OkStatus();
  }

  const PickleNode* Node(uint32_t id) const {
    return id < g_.nodes.size() ? &g_.nodes[id] : nullptr;
  }

  Error Fail(Code code, const PickleNode* at, std::string message) const {
    return Error{code, at ? at->offset : core::kNoOffset, std::move(message)};
  }

  std::string Describe(const PickleNode& n) const {
    if (n.kind == Kind::kGlobal) return Quoted(n.text + "." + n.qualname, 120);
    if (n.kind == Kind::kCall) {
      const PickleNode* c = Node(n.callee);
      if (c && c->kind == Kind::kGlobal) return "the result of " + Quoted(c->text + "." + c->qualname, 120);
      return "the result of a call of " + std::string(c ? KindName(c->kind) : "an unknown object");
    }
    return std::string("a ") + KindName(n.kind);
  }

  // Global: the call's callee when it is the global module.qualname.
  static bool IsGlobal(const PickleNode* n, std::string_view module, std::string_view qualname) {
    return n && n->kind == Kind::kGlobal && n->text == module && n->qualname == qualname;
  }
  const PickleNode* Callee(const PickleNode& n) const {
    return n.kind == Kind::kCall ? Node(n.callee) : nullptr;
  }
  // Args: the items of a call's argument tuple (null when it is not one).
  const std::vector<uint32_t>* Args(const PickleNode& n) const {
    const PickleNode* a = Node(n.args);
    return a && a->kind == Kind::kTuple ? &a->items : nullptr;
  }

  // DictEntries: `entries` of a dict, or of collections.OrderedDict() with
  // its SETITEMS; null for anything else. An OrderedDict's BUILD state (a
  // state dict's `_metadata` attribute) sets attributes, not entries, and
  // must be a dict; it is not converted (safetensors has no place for it;
  // torch's save_file drops it too).
  core::Status DictEntries(const PickleNode& n,
                           const std::vector<std::pair<uint32_t, uint32_t>>** entries) const {
    *entries = nullptr;
    if (n.kind == Kind::kDict) {
      if (!n.states.empty() || !n.items.empty()) {
        return Fail(Code::kConvNotAllowed, &n, "a dict with BUILD state");
      }
      *entries = &n.entries;
      return core::OkStatus();
    }
    if (n.kind == Kind::kCall && IsGlobal(Callee(n), "collections", "OrderedDict")) {
      const auto* args = Args(n);
      if (args == nullptr || !args->empty() || !n.items.empty()) {
        return Fail(Code::kConvNotAllowed, &n, "collections.OrderedDict called with arguments");
      }
      for (uint32_t s : n.states) {
        const PickleNode* st = Node(s);
        if (!st || !(st->kind == Kind::kDict || st->kind == Kind::kNone)) {
          return Fail(Code::kConvNotAllowed, &n, "an OrderedDict whose BUILD state is not a dict");
        }
      }
      *entries = &n.entries;
    }
    return core::OkStatus();
  }

  core::Status Walk(const PickleNode& dict, const std::vector<std::pair<uint32_t, uint32_t>>& entries,
                    const std::string& prefix, uint64_t depth) {
    if (depth > lim_.max_depth) {
      return Fail(Code::kConvLimit, &dict,
                  "max_depth (" + std::to_string(lim_.max_depth) + ") of nested dicts reached at " +
                      Quoted(prefix, 120));
    }
    for (const auto& [k, v] : entries) {
      const PickleNode* key = Node(k);
      const PickleNode* val = Node(v);
      if (key == nullptr || val == nullptr) return Fail(Code::kConvUnsupported, &dict, "an incomplete entry");
      if (key->kind != Kind::kStr || key->truncated || key->text.empty()) {
        return Fail(Code::kConvName, key,
                    "a key under " + Quoted(prefix.empty() ? "<root>" : prefix, 120) + " is " +
                        (key->kind == Kind::kStr ? std::string("empty or cut") : Describe(*key)) +
                        ", not a non-empty str");
      }
      std::string name = prefix.empty() ? key->text : prefix + "." + key->text;
      if (name == "__metadata__") return Fail(Code::kConvName, key, "a value named \"__metadata__\"");
      if (auto s = Value(std::move(name), *val, depth); !s.ok()) return s;
    }
    return core::OkStatus();
  }

  static bool Scalar(const PickleNode& n) {
    return n.kind == Kind::kNone || n.kind == Kind::kBool || n.kind == Kind::kInt || n.kind == Kind::kFloat ||
           n.kind == Kind::kStr || n.kind == Kind::kBytes;
  }

  // Value places one value named `name` found at nesting `depth`.
  core::Status Value(std::string name, const PickleNode& val, uint64_t depth) {
    const std::vector<std::pair<uint32_t, uint32_t>>* sub = nullptr;
    if (auto s = DictEntries(val, &sub); !s.ok()) return s;
    if (sub != nullptr) {
      if (!on_path_.insert(&val).second) return Fail(Code::kConvNotAllowed, &val, "a dict that holds itself");
      auto s = Walk(val, *sub, name, depth + 1);
      on_path_.erase(&val);
      return s;
    }
    // A list or tuple that holds more than plain scalars (e.g. a list of
    // tensors, as a ModuleList's state would be if saved by hand): its
    // items are named name.0, name.1, ... A list of scalars stays one
    // non-tensor leaf.
    if ((val.kind == Kind::kList || val.kind == Kind::kTuple) &&
        std::any_of(val.items.begin(), val.items.end(), [&](uint32_t i) {
          const PickleNode* n = Node(i);
          return n == nullptr || !Scalar(*n);
        })) {
      if (!val.states.empty() || !val.entries.empty()) {
        return Fail(Code::kConvNotAllowed, &val, Quoted(name, 120) + ": a list or tuple with BUILD state");
      }
      if (depth + 1 > lim_.max_depth) {
        return Fail(Code::kConvLimit, &val,
                    "max_depth (" + std::to_string(lim_.max_depth) + ") of nested containers reached at " +
                        Quoted(name, 120));
      }
      if (!on_path_.insert(&val).second) return Fail(Code::kConvNotAllowed, &val, "a list that holds itself");
      for (size_t i = 0; i < val.items.size(); ++i) {
        const PickleNode* item = Node(val.items[i]);
        if (item == nullptr) return Fail(Code::kConvUnsupported, &val, "an incomplete list");
        auto s = Value(name + "." + std::to_string(i), *item, depth + 1);
        if (!s.ok()) return s;
      }
      on_path_.erase(&val);
      return core::OkStatus();
    }
    if (val.kind == Kind::kStr) {
      if (val.truncated) return Fail(Code::kConvUnsupported, &val, "a string cut by max_string_bytes");
      strings_.emplace_back(std::move(name), val.text);
      return core::OkStatus();
    }
    if (val.joblib_array && hooks_ != nullptr && hooks_->leaf) {
      if (tensors_.size() >= lim_.max_tensors) {
        return Fail(Code::kConvLimit, &val,
                    "max_tensors (" + std::to_string(lim_.max_tensors) + ") reached at " + Quoted(name, 120));
      }
      TensorPlan t;
      t.name = std::move(name);
      t.node_offset = val.offset;
      if (auto s = hooks_->leaf(val, &t); !s.ok()) return s;
      tensors_.push_back(std::move(t));
      return core::OkStatus();
    }
    if (val.kind == Kind::kCall || (val.kind == Kind::kPersistent && TarIds())) {
      if (tensors_.size() >= lim_.max_tensors) {
        return Fail(Code::kConvLimit, &val,
                    "max_tensors (" + std::to_string(lim_.max_tensors) + ") reached at " + Quoted(name, 120));
      }
      TensorPlan t;
      t.name = std::move(name);
      if (auto s = Tensor(val, 0, &t); !s.ok()) return s;
      tensors_.push_back(std::move(t));
      return core::OkStatus();
    }
    if (val.kind == Kind::kGlobal || val.kind == Kind::kPersistent || val.kind == Kind::kOther) {
      return Fail(Code::kConvNotAllowed, &val, Quoted(name, 120) + " is " + Describe(val));
    }
    // A plain value that is no tensor: listed (refused or dropped). Its
    // items are not followed: nothing in them is written.
    if (non_tensors_.empty()) first_non_tensor_ = val.offset;
    non_tensors_.push_back(Quoted(name, 120) + " (" + KindName(val.kind) + ")");
    return core::OkStatus();
  }

  core::Status Int(uint32_t id, const char* what, uint64_t* out) const {
    const PickleNode* n = Node(id);
    if (!n || n->kind != Kind::kInt || !n->int_fits || n->int_value < 0) {
      return Fail(Code::kConvNotAllowed, n, std::string(what) + " is not a non-negative int");
    }
    *out = static_cast<uint64_t>(n->int_value);
    return core::OkStatus();
  }

  core::Status IntTuple(uint32_t id, const char* what, std::vector<uint64_t>* out) const {
    const PickleNode* n = Node(id);
    if (!n || n->kind != Kind::kTuple) return Fail(Code::kConvNotAllowed, n, std::string(what) + " is not a tuple");
    if (n->items.size() > lim_.max_rank) {
      return Fail(Code::kConvLimit, n,
                  std::string(what) + " has " + std::to_string(n->items.size()) + " dimensions, over max_rank (" +
                      std::to_string(lim_.max_rank) + ")");
    }
    for (uint32_t i : n->items) {
      uint64_t v = 0;
      if (auto s = Int(i, what, &v); !s.ok()) return s;
      out->push_back(v);
    }
    return core::OkStatus();
  }

  // EmptyHooks: backward_hooks as torch.save writes them, an empty
  // OrderedDict (or dict).
  bool EmptyHooks(uint32_t id) const {
    const PickleNode* n = Node(id);
    if (!n) return false;
    if (n->kind == Kind::kDict) return n->entries.empty() && n->states.empty();
    const auto* args = n->kind == Kind::kCall && IsGlobal(Callee(*n), "collections", "OrderedDict") ? Args(*n) : nullptr;
    return args && args->empty() && n->entries.empty() && n->items.empty() && n->states.empty();
  }

  bool TarIds() const { return ids_.form == PlanIds::Form::kTarTensor; }

  // TarTensor: a tar checkpoint's persistent id, a tensor key as
  // legacy_load's int(saved_id) reads it; only plain decimal digits (or an
  // int) are taken, a strict subset of what int() accepts.
  core::Status TarTensor(const PickleNode& n, TensorPlan* t) {
    const PickleNode* pid = Node(n.args);
    std::string key;
    if (pid && pid->kind == Kind::kInt && pid->int_fits && pid->int_value >= 0) {
      key = std::to_string(pid->int_value);
    } else if (pid && pid->kind == Kind::kStr && !pid->truncated && !pid->text.empty() && pid->text.size() <= 18 &&
               pid->text.find_first_not_of("0123456789") == std::string::npos) {
      key = std::to_string(std::stoull(pid->text));
    } else {
      return Fail(Code::kConvNotAllowed, &n, Quoted(t->name, 120) + ": a persistent id that is not a tensor key");
    }
    static const std::map<std::string, TensorPlan> kNone;
    const std::map<std::string, TensorPlan>& tensors = ids_.tar_tensors ? *ids_.tar_tensors : kNone;
    auto it = tensors.find(key);
    if (it == tensors.end()) {
      return Fail(Code::kConvNotAllowed, &n,
                  Quoted(t->name, 120) + ": persistent id " + Quoted(key, 40) + " names no tensor record");
    }
    std::string name = std::move(t->name);
    *t = it->second;
    t->name = std::move(name);
    t->node_offset = n.offset;
    if (t->shape.size() > lim_.max_rank) {
      return Fail(Code::kConvLimit, &n,
                  Quoted(t->name, 120) + " has " + std::to_string(t->shape.size()) + " dimensions, over max_rank (" +
                      std::to_string(lim_.max_rank) + ")");
    }
    auto [st, fresh] = storages_.emplace(t->key, std::make_pair(t->dtype, t->storage_numel));
    if (!fresh && st->second != std::make_pair(t->dtype, t->storage_numel)) {
      return Fail(Code::kConvStorage, &n, "storage " + Quoted(t->key, 60) + " is named with two dtypes or element counts");
    }
    return CheckView(*t, n.offset);
  }

  core::Status Tensor(const PickleNode& n, int depth, TensorPlan* t) {
    if (n.kind == Kind::kPersistent && TarIds()) return TarTensor(n, t);
    const PickleNode* callee = Callee(n);
    const auto* args = Args(n);
    if (callee == nullptr || callee->kind != Kind::kGlobal || args == nullptr) {
      return Fail(Code::kConvNotAllowed, &n, Quoted(t->name, 120) + " is " + Describe(n));
    }
    if (!n.items.empty() || !n.entries.empty() || !n.states.empty()) {
      return Fail(Code::kConvNotAllowed, &n, Quoted(t->name, 120) + ": a tensor changed after it was made");
    }
    t->node_offset = n.offset;
    const bool param = IsGlobal(callee, "torch._utils", "_rebuild_parameter");
    const bool param_state = IsGlobal(callee, "torch._utils", "_rebuild_parameter_with_state");
    if (param || param_state) {
      // _rebuild_parameter(data, requires_grad, backward_hooks[, state]):
      // a Parameter over data; its Python attributes (state) are not data.
      if (depth > 0 || args->size() != (param ? 3u : 4u)) {
        return Fail(Code::kConvNotAllowed, &n, Quoted(t->name, 120) + ": an unexpected parameter call");
      }
      const PickleNode* grad = Node((*args)[1]);
      if (!grad || grad->kind != Kind::kBool || !EmptyHooks((*args)[2])) {
        return Fail(Code::kConvNotAllowed, &n, Quoted(t->name, 120) + ": a parameter with hooks or odd arguments");
      }
      if (param_state) {
        const PickleNode* st = Node((*args)[3]);
        if (!st || !(st->kind == Kind::kDict || st->kind == Kind::kNone || st->kind == Kind::kTuple)) {
          return Fail(Code::kConvNotAllowed, &n, Quoted(t->name, 120) + ": a parameter state that is not plain");
        }
      }
      const PickleNode* data = Node((*args)[0]);
      if (!data || !(data->kind == Kind::kCall || (data->kind == Kind::kPersistent && TarIds()))) {
        return Fail(Code::kConvNotAllowed, &n, Quoted(t->name, 120) + ": a parameter over " +
                                                   (data ? Describe(*data) : std::string("nothing")));
      }
      return Tensor(*data, depth + 1, t);
    }
    const bool v2 = IsGlobal(callee, "torch._utils", "_rebuild_tensor_v2");
    const bool v1 = IsGlobal(callee, "torch._utils", "_rebuild_tensor");
    if (!v1 && !v2) {
      return Fail(Code::kConvNotAllowed, &n, Quoted(t->name, 120) + " is " + Describe(n));
    }
    if (TarIds()) {  // its tensors come from the "tensors" member, not rebuilt
      return Fail(Code::kConvNotAllowed, &n, Quoted(t->name, 120) + ": a rebuilt tensor in a tar checkpoint");
    }
    // _rebuild_tensor(storage, storage_offset, size, stride);
    // _rebuild_tensor_v2(..., requires_grad, backward_hooks[, metadata]).
    if (v1 ? args->size() != 4 : (args->size() != 6 && args->size() != 7)) {
      return Fail(Code::kConvNotAllowed, &n, Quoted(t->name, 120) + ": " + std::to_string(args->size()) +
                                                 " arguments to " + callee->qualname);
    }
    if (v2) {
      const PickleNode* grad = Node((*args)[4]);
      if (!grad || grad->kind != Kind::kBool || !EmptyHooks((*args)[5])) {
        return Fail(Code::kConvNotAllowed, &n, Quoted(t->name, 120) + ": a tensor with hooks or odd arguments");
      }
      if (args->size() == 7) {
        const PickleNode* md = Node((*args)[6]);
        if (!md || !(md->kind == Kind::kNone || (md->kind == Kind::kDict && md->entries.empty()) ||
                     EmptyHooks((*args)[6]))) {
          return Fail(Code::kConvNotAllowed, &n, Quoted(t->name, 120) + ": tensor metadata that is not empty");
        }
      }
    }
    if (auto s = Storage((*args)[0], t); !s.ok()) return s;
    if (auto s = Int((*args)[1], "storage_offset", &t->offset); !s.ok()) return s;
    if (auto s = IntTuple((*args)[2], "size", &t->shape); !s.ok()) return s;
    if (auto s = IntTuple((*args)[3], "stride", &t->stride); !s.ok()) return s;
    if (t->shape.size() != t->stride.size()) {
      return Fail(Code::kConvStorage, &n, Quoted(t->name, 120) + ": size and stride differ in rank");
    }
    return CheckView(*t, n.offset);
  }

  // Storage: torch.save's persistent id ('storage', torch.<T>Storage, key,
  // location, numel), and for a legacy file a sixth item, None (a storage
  // view's (view_key, offset, size) is not converted).
  core::Status Storage(uint32_t id, TensorPlan* t) {
    const PickleNode* n = Node(id);
    const PickleNode* pid = n && n->kind == Kind::kPersistent ? Node(n->args) : nullptr;
    const size_t items = ids_.form == PlanIds::Form::kLegacyStorage ? 6 : 5;
    if (!pid || pid->kind != Kind::kTuple || pid->items.size() != items) {
      return Fail(Code::kConvNotAllowed, n, Quoted(t->name, 120) + ": storage is " +
                                                (n ? Describe(*n) : std::string("missing")) +
                                                ", not a torch storage id");
    }
    const PickleNode* tag = Node(pid->items[0]);
    const PickleNode* type = Node(pid->items[1]);
    const PickleNode* key = Node(pid->items[2]);
    const PickleNode* loc = Node(pid->items[3]);
    if (!tag || tag->kind != Kind::kStr || tag->text != "storage" || !type || type->kind != Kind::kGlobal ||
        type->text != "torch" || !key || key->kind != Kind::kStr || key->truncated || key->text.empty() ||
        !loc || loc->kind != Kind::kStr) {
      return Fail(Code::kConvNotAllowed, pid, Quoted(t->name, 120) + ": a persistent id that is not a torch storage");
    }
    if (items == 6) {
      const PickleNode* view = Node(pid->items[5]);
      if (!view || view->kind != Kind::kNone) {
        return Fail(Code::kConvUnsupported, pid,
                    Quoted(t->name, 120) + ": storage " + Quoted(key->text, 60) +
                        " is a storage view (view_metadata is not None): views are not converted");
      }
    }
    if (!TorchStorageDtype(type->qualname, &t->dtype)) {
      return Fail(Code::kConvUnsupported, type,
                  Quoted(t->name, 120) + ": torch." + Quoted(type->qualname, 60) +
                      " has no safetensors dtype");
    }
    t->key = key->text;
    if (auto s = Int(pid->items[4], "storage numel", &t->storage_numel); !s.ok()) return s;
    // One key is one storage: torch's loader keeps the first typed view of
    // it; two readings of its bytes would be two different files.
    auto [it, fresh] = storages_.emplace(t->key, std::make_pair(t->dtype, t->storage_numel));
    if (!fresh && it->second != std::make_pair(t->dtype, t->storage_numel)) {
      return Fail(Code::kConvStorage, pid,
                  "storage " + Quoted(t->key, 60) + " is named with two dtypes or element counts");
    }
    return core::OkStatus();
  }

  const PickleGraph& g_;
  const ConvertLimits& lim_;
  bool drop_;
  const PlanIds& ids_;
  const PlanHooks* hooks_;
  std::vector<TensorPlan> tensors_;
  std::vector<std::pair<std::string, std::string>> strings_;
  std::vector<std::string> non_tensors_;
  uint64_t first_non_tensor_ = core::kNoOffset;
  std::map<std::string, std::pair<core::Dtype, uint64_t>> storages_;
  std::set<const PickleNode*> on_path_;
};

}  // namespace

core::Status CheckView(const TensorPlan& t, uint64_t offset) {
  // The view stays inside its storage: the last element it reads is
  // offset + sum((size_i - 1) * stride_i); an empty view reads nothing.
  if (t.shape.size() != t.stride.size()) {
    return Error{Code::kConvStorage, offset, Quoted(t.name, 120) + ": size and stride differ in rank"};
  }
  if (std::find(t.shape.begin(), t.shape.end(), 0) != t.shape.end()) return core::OkStatus();
  uint64_t last = t.offset;
  bool overflow = false;
  for (size_t i = 0; i < t.shape.size(); ++i) {
    uint64_t step = 0;
    overflow |= __builtin_mul_overflow(t.shape[i] - 1, t.stride[i], &step);
    overflow |= __builtin_add_overflow(last, step, &last);
  }
  if (overflow || last >= t.storage_numel) {
    return Error{Code::kConvStorage, offset,
                 Quoted(t.name, 120) + " reads " +
                     (overflow ? std::string("past 2^64 elements") : "element " + std::to_string(last)) +
                     " of storage " + Quoted(t.key, 60) + ", which holds " + std::to_string(t.storage_numel)};
  }
  return core::OkStatus();
}

// ViewReads is how many preads CopyTensor makes for `t`: 0 when it is
// contiguous or its window fits gather_window_bytes, else one per run.
// The view was checked to stay inside its storage (no overflow below).
uint64_t ViewReads(const TensorPlan& t, const ConvertLimits& limits) {
  uint64_t numel = 1;
  for (uint64_t d : t.shape) {
    if (d == 0) return 0;
    if (__builtin_mul_overflow(numel, d, &numel)) return UINT64_MAX / 2;
  }
  uint64_t run = 1;
  size_t inner = t.shape.size();
  while (inner > 0 && (t.shape[inner - 1] == 1 || t.stride[inner - 1] == run)) {
    --inner;
    run *= t.shape[inner];
  }
  if (inner == 0) return 0;
  uint64_t span = 1;  // elements of the window
  for (size_t i = 0; i < t.shape.size(); ++i) span += (t.shape[i] - 1) * t.stride[i];
  const uint64_t el = core::DtypeBits(t.dtype) / 8;
  if (span <= limits.gather_window_bytes / el) return 0;
  return numel / run;
}

core::Status CheckViewReads(const std::vector<TensorPlan>& tensors, const ConvertLimits& limits) {
  // Views too wide to gather in memory are read run by run: bounded.
  uint64_t reads = 0;
  for (const TensorPlan& t : tensors) {
    reads += ViewReads(t, limits);  // each term <= 2^64 / 2: numel * element bytes fit
    if (reads > limits.max_view_reads) {
      return Error{Code::kConvLimit, t.node_offset,
                   "max_view_reads (" + std::to_string(limits.max_view_reads) + ") passed at " +
                       Quoted(t.name, 120) + ": strided views over more than gather_window_bytes (" +
                       std::to_string(limits.gather_window_bytes) + ") need one read per run"};
    }
  }
  return core::OkStatus();
}

core::Result<StateDictPlan> PlanPickleGraph(const scanner::PickleGraph& graph, const ConvertLimits& limits,
                                            bool drop_non_tensors, const PlanHooks& hooks) {
  return Planner(graph, limits, drop_non_tensors, PlanIds{}, &hooks).Run();
}

bool TorchStorageDtype(std::string_view qualname, core::Dtype* out) {
  for (const StorageDtype& s : kStorages) {
    if (qualname == s.qualname) {
      *out = s.dtype;
      return true;
    }
  }
  return false;
}

core::Result<StateDictPlan> PlanStateDict(const scanner::PickleGraph& graph, const ConvertLimits& limits,
                                          bool drop_non_tensors, const PlanIds& ids) {
  return Planner(graph, limits, drop_non_tensors, ids).Run();
}

core::Result<StateDictPlan> PlanStateDict(const scanner::PickleGraph& graph,
                                          const ConvertLimits& limits, bool drop_non_tensors) {
  return PlanStateDict(graph, limits, drop_non_tensors, PlanIds{});
}

}  // namespace modelgate::convert
