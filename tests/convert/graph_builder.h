// G builds a scanner::PickleGraph node by node, as the pickle machine
// exports it, for the planner's tests (plan_test.cc, legacy_test.cc).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "modelgate/convert.h"

namespace convert_test {

namespace scanner = modelgate::scanner;
using Kind = scanner::PickleNode::Kind;

struct G {
  scanner::PickleGraph g;
  uint32_t Add(scanner::PickleNode n) {
    n.offset = g.nodes.size();
    g.nodes.push_back(std::move(n));
    return static_cast<uint32_t>(g.nodes.size() - 1);
  }
  uint32_t Str(const std::string& s) {
    scanner::PickleNode n;
    n.kind = Kind::kStr;
    n.text = s;
    return Add(n);
  }
  uint32_t Int(int64_t v) {
    scanner::PickleNode n;
    n.kind = Kind::kInt;
    n.int_value = v;
    return Add(n);
  }
  uint32_t Bool(bool v) {
    scanner::PickleNode n;
    n.kind = Kind::kBool;
    n.int_value = v;
    return Add(n);
  }
  uint32_t None() {
    scanner::PickleNode n;
    n.kind = Kind::kNone;
    return Add(n);
  }
  uint32_t Global(const std::string& m, const std::string& q) {
    scanner::PickleNode n;
    n.kind = Kind::kGlobal;
    n.text = m;
    n.qualname = q;
    return Add(n);
  }
  uint32_t Tuple(std::vector<uint32_t> items) {
    scanner::PickleNode n;
    n.kind = Kind::kTuple;
    n.items = std::move(items);
    return Add(n);
  }
  uint32_t Ints(const std::vector<int64_t>& v) {
    std::vector<uint32_t> items;
    for (int64_t x : v) items.push_back(Int(x));
    return Tuple(items);
  }
  uint32_t Dict(std::vector<std::pair<uint32_t, uint32_t>> entries) {
    scanner::PickleNode n;
    n.kind = Kind::kDict;
    n.entries = std::move(entries);
    return Add(n);
  }
  uint32_t Call(uint32_t callee, uint32_t args) {
    scanner::PickleNode n;
    n.kind = Kind::kCall;
    n.callee = callee;
    n.args = args;
    return Add(n);
  }
  uint32_t Persistent(uint32_t pid) {
    scanner::PickleNode n;
    n.kind = Kind::kPersistent;
    n.args = pid;
    return Add(n);
  }
  uint32_t OrderedDict() { return Call(Global("collections", "OrderedDict"), Tuple({})); }
  // torch.save's id: ('storage', torch.<type>, key, 'cpu', numel).
  uint32_t Storage(const std::string& key, int64_t numel, const std::string& type = "FloatStorage") {
    return Persistent(Tuple({Str("storage"), Global("torch", type), Str(key), Str("cpu"), Int(numel)}));
  }
  // _legacy_save's id: ('storage', torch.FloatStorage, key, 'cpu', numel, view).
  uint32_t LegacyStorage(const std::string& key, int64_t numel, uint32_t view) {
    return Persistent(Tuple({Str("storage"), Global("torch", "FloatStorage"), Str(key), Str("cpu"), Int(numel), view}));
  }
  uint32_t Tensor(uint32_t storage, int64_t offset, const std::vector<int64_t>& size,
                  const std::vector<int64_t>& stride) {
    return Call(Global("torch._utils", "_rebuild_tensor_v2"),
                Tuple({storage, Int(offset), Ints(size), Ints(stride), Bool(false), OrderedDict()}));
  }
  uint32_t Simple(const std::string& key, int64_t n) { return Tensor(Storage(key, n), 0, {n}, {1}); }
  scanner::PickleGraph Root(uint32_t root) {
    g.root = root;
    return g;
  }
};

inline modelgate::core::Code CodeOf(const modelgate::core::Result<modelgate::convert::StateDictPlan>& r) {
  return r.ok() ? modelgate::core::Code::kOk : r.error().code;
}

}  // namespace convert_test
