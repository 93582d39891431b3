// The pickle machine's graph capture (PickleOptions::capture_graph): the
// object a top-level stream returns, with every item, entry, BUILD state
// and call it holds, exported as index-linked PickleNodes. Used by
// `modelgate convert`, which rebuilds tensors from the allowlisted calls;
// the analysis (imports, calls, findings) is the same with or without it.
#include <algorithm>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "pickle_machine.h"

namespace modelgate::scanner::pickle_internal {

bool Machine::GraphHold(const Ref& v, uint64_t n) {
  if (!graph_ || !graph_cut_.empty()) return false;
  if (n > lim_.max_graph_refs - std::min(graph_refs_, lim_.max_graph_refs)) {
    GraphCut("max_graph_refs (" + U64(lim_.max_graph_refs) + ") reached at " + op_name_ + " at " +
             U64(op_offset_));
    return false;
  }
  graph_refs_ += n;
  Value::Extra& x = v->x();
  if (!x.g_held) {
    x.g_held = true;
    graph_held_.push_back(v);
  }
  return true;
}

void Machine::GraphCut(const std::string& why) {
  if (!graph_cut_.empty()) return;
  graph_cut_ = why;
  if (out_->graph_cut.empty()) out_->graph_cut = "stream " + U64(stream_index_) + ": " + why;
  out_->graphs.clear();  // one input, one answer: no graphs beside a cut
  GraphRelease();
}

void Machine::GraphCall(const Ref& result, const Ref& callee, const Ref& args, const Ref& kwargs) {
  if (!graph_ || result->kind != VKind::kResult || result->x().g_callee) return;
  if (kwargs && !(kwargs->kind == VKind::kDict && kwargs->count == 0)) {
    GraphCut(std::string(op_name_) + " at " + U64(op_offset_) + " passes keyword arguments");
    return;
  }
  if (!GraphHold(result, 2)) return;
  result->x().g_callee = callee;
  result->x().g_args = args;
}

void Machine::GraphRelease() {
  for (const std::weak_ptr<Value>& w : graph_held_) {
    if (Ref v = w.lock()) {
      Value::Extra& x = v->x();
      x.g_held = false;
      x.g_items.clear();
      x.g_entries.clear();
      x.g_states.clear();
      x.g_callee.reset();
      x.g_args.reset();
    }
  }
  graph_held_.clear();
}

namespace {

PickleNode::Kind NodeKind(VKind k) {
  switch (k) {
    case VKind::kNone: return PickleNode::Kind::kNone;
    case VKind::kBool: return PickleNode::Kind::kBool;
    case VKind::kInt: return PickleNode::Kind::kInt;
    case VKind::kFloat: return PickleNode::Kind::kFloat;
    case VKind::kStr: return PickleNode::Kind::kStr;
    case VKind::kBytes:
    case VKind::kByteArray: return PickleNode::Kind::kBytes;
    case VKind::kTuple: return PickleNode::Kind::kTuple;
    case VKind::kList: return PickleNode::Kind::kList;
    case VKind::kDict: return PickleNode::Kind::kDict;
    case VKind::kSet: return PickleNode::Kind::kSet;
    case VKind::kFrozenSet: return PickleNode::Kind::kFrozenSet;
    case VKind::kGlobal: return PickleNode::Kind::kGlobal;
    case VKind::kResult: return PickleNode::Kind::kCall;
    case VKind::kPersistent: return PickleNode::Kind::kPersistent;
    case VKind::kBuffer: return PickleNode::Kind::kOther;
  }
  return PickleNode::Kind::kOther;
}

}  // namespace

void Machine::ExportGraph(const Ref& root) {
  if (!graph_ || !graph_cut_.empty() || !out_->graph_cut.empty()) return;
  PickleGraph g;
  g.stream = static_cast<uint32_t>(stream_index_);
  std::unordered_map<const Value*, uint32_t> ids;
  std::vector<std::pair<const Value*, uint32_t>> todo;
  // Nodes are at most the references held plus the root (each node but the
  // root is reached through one), so uint32 indices hold while the limit
  // is below 2^32 - 1.
  bool too_many = false;
  auto id_of = [&](const Ref& v) -> uint32_t {
    if (!v) return kNoNode;
    if (g.nodes.size() >= kNoNode - 1) {
      too_many = true;
      return kNoNode;
    }
    auto [it, fresh] = ids.emplace(v.get(), static_cast<uint32_t>(g.nodes.size()));
    if (fresh) {
      g.nodes.emplace_back();
      todo.emplace_back(v.get(), it->second);
    }
    return it->second;
  };
  g.root = id_of(root);
  while (!todo.empty() && !too_many) {
    auto [v, id] = todo.back();
    todo.pop_back();
    PickleNode n;
    n.kind = NodeKind(v->kind);
    n.offset = v->origin_offset;
    n.int_value = v->int_value;
    n.int_fits = v->int_fits;
    n.truncated = v->truncated;
    if (v->kind == VKind::kStr) n.text = std::string(v->text());
    const Value::Extra& x = v->x();
    if (v->kind == VKind::kGlobal) {
      n.text = x.module;
      n.qualname = x.qualname;
    }
    if (v->kind == VKind::kResult) n.callee = id_of(x.g_callee);
    n.joblib_array = x.joblib_array;
    n.args = id_of(x.g_args);
    n.items.reserve(x.g_items.size());
    for (const Ref& i : x.g_items) n.items.push_back(id_of(i));
    n.entries.reserve(x.g_entries.size());
    for (const auto& [k, val] : x.g_entries) n.entries.emplace_back(id_of(k), id_of(val));
    for (const Ref& s : x.g_states) n.states.push_back(id_of(s));
    g.nodes[id] = std::move(n);
  }
  if (too_many) {
    GraphCut("more than 2^32 - 2 graph nodes");
    return;
  }
  out_->graphs.push_back(std::move(g));
}

}  // namespace modelgate::scanner::pickle_internal
