// The rebuild step (convert::PlanStateDict) on graphs built here, node by
// node, and the pickle machine's graph capture (AnalyzePickle with
// capture_graph) on hand-assembled pickles: each rule, each limit at N and
// N+1.
#include <catch2/catch.hpp>

#include <string>
#include <utility>
#include <vector>

#include "graph_builder.h"
#include "modelgate/convert.h"

namespace convert = modelgate::convert;
namespace core = modelgate::core;
namespace scanner = modelgate::scanner;
using Kind = scanner::PickleNode::Kind;

using convert_test::CodeOf;
using convert_test::G;

TEST_CASE("a state dict of tensors plans in name order", "[convert]") {
  G g;
  uint32_t d = g.Dict({{g.Str("z"), g.Simple("0", 4)}, {g.Str("a"), g.Tensor(g.Storage("1", 6, "HalfStorage"), 2, {2, 2}, {1, 2})}});
  auto r = convert::PlanStateDict(g.Root(d), {}, false);
  REQUIRE(r.ok());
  const auto& t = r.value().tensors;
  REQUIRE(t.size() == 2);
  CHECK(t[0].name == "a");
  CHECK(t[0].dtype == core::Dtype::kF16);
  CHECK(t[0].offset == 2);
  CHECK(t[0].stride == std::vector<uint64_t>{1, 2});
  CHECK(t[1].name == "z");
  CHECK(t[1].dtype == core::Dtype::kF32);
}

TEST_CASE("max_tensors: N passes, N+1 is refused", "[convert][limits]") {
  convert::ConvertLimits lim;
  lim.max_tensors = 2;
  G a;
  uint32_t two = a.Dict({{a.Str("x"), a.Simple("0", 1)}, {a.Str("y"), a.Simple("1", 1)}});
  CHECK(convert::PlanStateDict(a.Root(two), lim, false).ok());
  G b;
  uint32_t three = b.Dict({{b.Str("x"), b.Simple("0", 1)}, {b.Str("y"), b.Simple("1", 1)}, {b.Str("z"), b.Simple("2", 1)}});
  auto r = convert::PlanStateDict(b.Root(three), lim, false);
  CHECK(CodeOf(r) == core::Code::kConvLimit);
  CHECK(r.error().message.find("max_tensors (2)") != std::string::npos);
}

TEST_CASE("max_depth: N passes, N+1 is refused", "[convert][limits]") {
  convert::ConvertLimits lim;
  lim.max_depth = 2;
  G a;
  uint32_t d2 = a.Dict({{a.Str("m"), a.Dict({{a.Str("w"), a.Simple("0", 1)}})}});
  auto ok = convert::PlanStateDict(a.Root(d2), lim, false);
  REQUIRE(ok.ok());
  CHECK(ok.value().tensors[0].name == "m.w");
  G b;
  uint32_t d3 = b.Dict({{b.Str("m"), b.Dict({{b.Str("n"), b.Dict({{b.Str("w"), b.Simple("0", 1)}})}})}});
  CHECK(CodeOf(convert::PlanStateDict(b.Root(d3), lim, false)) == core::Code::kConvLimit);
}

TEST_CASE("max_rank: N passes, N+1 is refused", "[convert][limits]") {
  convert::ConvertLimits lim;
  lim.max_rank = 3;
  G a;
  uint32_t r3 = a.Dict({{a.Str("t"), a.Tensor(a.Storage("0", 1), 0, {1, 1, 1}, {1, 1, 1})}});
  CHECK(convert::PlanStateDict(a.Root(r3), lim, false).ok());
  G b;
  uint32_t r4 = b.Dict({{b.Str("t"), b.Tensor(b.Storage("0", 1), 0, {1, 1, 1, 1}, {1, 1, 1, 1})}});
  CHECK(CodeOf(convert::PlanStateDict(b.Root(r4), lim, false)) == core::Code::kConvLimit);
}

TEST_CASE("a view ending at its storage's last element passes and one further is refused", "[convert][storage]") {
  // offset 1 + (2-1)*2 + (2-1)*1 = 4: the last element of a 5-element storage.
  G a;
  uint32_t in = a.Dict({{a.Str("t"), a.Tensor(a.Storage("0", 5), 1, {2, 2}, {2, 1})}});
  CHECK(convert::PlanStateDict(a.Root(in), {}, false).ok());
  G b;
  uint32_t past = b.Dict({{b.Str("t"), b.Tensor(b.Storage("0", 5), 2, {2, 2}, {2, 1})}});
  auto r = convert::PlanStateDict(b.Root(past), {}, false);
  CHECK(CodeOf(r) == core::Code::kConvStorage);
  CHECK(r.error().message.find("element 5") != std::string::npos);
  // Strides whose products overflow are refused, not wrapped.
  G c;
  uint32_t big = c.Dict({{c.Str("t"), c.Tensor(c.Storage("0", 5), 0, {3, 2}, {INT64_MAX, INT64_MAX})}});
  CHECK(CodeOf(convert::PlanStateDict(c.Root(big), {}, false)) == core::Code::kConvStorage);
  // An empty view reads nothing, wherever it points.
  G e;
  uint32_t empty = e.Dict({{e.Str("t"), e.Tensor(e.Storage("0", 0), 9, {0, 4}, {4, 1})}});
  CHECK(convert::PlanStateDict(e.Root(empty), {}, false).ok());
}

TEST_CASE("max_view_reads: N passes, N+1 is refused", "[convert][limits]") {
  // A transposed 4x3 F32 view (run of 1 element, 12 reads) over a 48-byte
  // window, beside a contiguous tensor (no reads) and a view that fits the
  // gather window (no reads).
  convert::ConvertLimits lim;
  lim.gather_window_bytes = 47;
  auto graph = [](int64_t extra_rows) {
    G g;
    uint32_t d = g.Dict({{g.Str("t"), g.Tensor(g.Storage("0", 12), 0, {4, 3}, {1, 4})},
                         {g.Str("c"), g.Simple("1", 100)},
                         {g.Str("s"), g.Tensor(g.Storage("2", 4 + extra_rows), 0, {2}, {2})}});
    return g.Root(d);
  };
  lim.max_view_reads = 12;
  CHECK(convert::PlanStateDict(graph(0), lim, false).ok());
  lim.max_view_reads = 11;
  auto r = convert::PlanStateDict(graph(0), lim, false);
  CHECK(CodeOf(r) == core::Code::kConvLimit);
  CHECK(r.error().message.find("max_view_reads (11)") != std::string::npos);
  // The window bound: 48 bytes is read whole at gather_window_bytes 48.
  lim.gather_window_bytes = 48;
  lim.max_view_reads = 0;
  CHECK(convert::PlanStateDict(graph(0), lim, false).ok());
}

TEST_CASE("one storage key read as two dtypes is refused", "[convert][storage]") {
  G g;
  uint32_t d = g.Dict({{g.Str("a"), g.Simple("0", 4)},
                       {g.Str("b"), g.Tensor(g.Storage("0", 4, "IntStorage"), 0, {4}, {1})}});
  CHECK(CodeOf(convert::PlanStateDict(g.Root(d), {}, false)) == core::Code::kConvStorage);
}

TEST_CASE("only the allowlisted rebuild path is followed", "[convert]") {
  SECTION("a call of another global") {
    G g;
    uint32_t d = g.Dict({{g.Str("a"), g.Call(g.Global("os", "system"), g.Tuple({g.Str("id")}))}});
    auto r = convert::PlanStateDict(g.Root(d), {}, false);
    CHECK(CodeOf(r) == core::Code::kConvNotAllowed);
    CHECK(r.error().message.find("os.system") != std::string::npos);
  }
  SECTION("a storage that is not a torch storage id") {
    G g;
    uint32_t d = g.Dict({{g.Str("a"), g.Tensor(g.Str("nope"), 0, {1}, {1})}});
    CHECK(CodeOf(convert::PlanStateDict(g.Root(d), {}, false)) == core::Code::kConvNotAllowed);
  }
  SECTION("a tensor with backward hooks") {
    G g;
    uint32_t hooks = g.Dict({{g.Str("h"), g.Int(1)}});
    uint32_t t = g.Call(g.Global("torch._utils", "_rebuild_tensor_v2"),
                        g.Tuple({g.Storage("0", 1), g.Int(0), g.Ints({1}), g.Ints({1}), g.Bool(false), hooks}));
    CHECK(CodeOf(convert::PlanStateDict(g.Root(g.Dict({{g.Str("a"), t}})), {}, false)) ==
          core::Code::kConvNotAllowed);
  }
  SECTION("a storage without a safetensors dtype") {
    G g;
    uint32_t d = g.Dict({{g.Str("a"), g.Tensor(g.Storage("0", 1, "ComplexDoubleStorage"), 0, {1}, {1})}});
    CHECK(CodeOf(convert::PlanStateDict(g.Root(d), {}, false)) == core::Code::kConvUnsupported);
  }
  SECTION("a parameter over a tensor") {
    G g;
    uint32_t p = g.Call(g.Global("torch._utils", "_rebuild_parameter"),
                        g.Tuple({g.Simple("0", 3), g.Bool(true), g.OrderedDict()}));
    auto r = convert::PlanStateDict(g.Root(g.Dict({{g.Str("w"), p}})), {}, false);
    REQUIRE(r.ok());
    CHECK(r.value().tensors.at(0).name == "w");
  }
  SECTION("the root is not a dict") {
    G g;
    CHECK(CodeOf(convert::PlanStateDict(g.Root(g.Simple("0", 1)), {}, false)) == core::Code::kConvUnsupported);
  }
}

TEST_CASE("names: str keys that flatten uniquely", "[convert]") {
  SECTION("an int key") {
    G g;
    CHECK(CodeOf(convert::PlanStateDict(g.Root(g.Dict({{g.Int(1), g.Simple("0", 1)}})), {}, false)) ==
          core::Code::kConvName);
  }
  SECTION("two values flatten to one name") {
    G g;
    uint32_t d = g.Dict({{g.Str("a.b"), g.Simple("0", 1)}, {g.Str("a"), g.Dict({{g.Str("b"), g.Simple("1", 1)}})}});
    CHECK(CodeOf(convert::PlanStateDict(g.Root(d), {}, false)) == core::Code::kConvName);
  }
  SECTION("a dict that holds itself ends, refused") {
    G g;
    uint32_t d = g.Dict({});
    uint32_t key = g.Str("self");
    g.g.nodes[d].entries.emplace_back(key, d);
    CHECK(CodeOf(convert::PlanStateDict(g.Root(d), {}, false)) == core::Code::kConvNotAllowed);
  }
}

TEST_CASE("non-tensor leaves: strings kept and others refused or dropped and listed", "[convert]") {
  G g;
  uint32_t d = g.Dict({{g.Str("w"), g.Simple("0", 1)}, {g.Str("name"), g.Str("tiny")}, {g.Str("epoch"), g.Int(3)}});
  auto graph = g.Root(d);
  auto refused = convert::PlanStateDict(graph, {}, false);
  CHECK(CodeOf(refused) == core::Code::kConvNotTensor);
  CHECK(refused.error().message.find("\"epoch\" (int)") != std::string::npos);
  auto dropped = convert::PlanStateDict(graph, {}, true);
  REQUIRE(dropped.ok());
  CHECK(dropped.value().dropped == std::vector<std::string>{"\"epoch\" (int)"});
  CHECK(dropped.value().string_leaves ==
        std::vector<std::pair<std::string, std::string>>{{"name", "tiny"}});
}

// ---- graph capture ---------------------------------------------------------

namespace {
std::vector<uint8_t> Bytes(const std::string& s) { return {s.begin(), s.end()}; }
scanner::PickleOptions Capture(uint64_t max_refs = 20'000'000) {
  scanner::PickleOptions o;
  o.capture_graph = true;
  o.limits.max_graph_refs = max_refs;
  return o;
}
}  // namespace

TEST_CASE("graph capture: a dict's entries in order", "[convert][graph]") {
  // PROTO 2, EMPTY_DICT, MARK, 'a' 1 'b' 'x', SETITEMS, STOP
  auto p = Bytes(std::string("\x80\x02}(X\x01\x00\x00\x00" "aK\x01X\x01\x00\x00\x00" "bX\x01\x00\x00\x00xu.", 26));
  auto a = scanner::AnalyzePickle(p, Capture());
  REQUIRE(a.graphs.size() == 1);
  const auto& g = a.graphs[0];
  const auto& root = g.nodes.at(g.root);
  REQUIRE(root.kind == Kind::kDict);
  REQUIRE(root.entries.size() == 2);
  CHECK(g.nodes[root.entries[0].first].text == "a");
  CHECK(g.nodes[root.entries[0].second].int_value == 1);
  CHECK(g.nodes[root.entries[1].second].text == "x");
  // Without capture_graph there is no graph, and the analysis is the same.
  auto plain = scanner::AnalyzePickle(p);
  CHECK(plain.graphs.empty());
  CHECK(plain.imports.size() == a.imports.size());
  CHECK(plain.calls.size() == a.calls.size());
}

TEST_CASE("graph capture: max_graph_refs at N and N+1", "[convert][graph][limits]") {
  auto p = Bytes(std::string("\x80\x02}(X\x01\x00\x00\x00" "aK\x01X\x01\x00\x00\x00" "bX\x01\x00\x00\x00xu.", 26));
  auto at = scanner::AnalyzePickle(p, Capture(4));  // SETITEMS holds 4 references
  CHECK(at.graphs.size() == 1);
  CHECK(at.graph_cut.empty());
  auto past = scanner::AnalyzePickle(p, Capture(3));
  CHECK(past.graphs.empty());
  CHECK(past.graph_cut.find("max_graph_refs (3)") != std::string::npos);
  // The analysis itself is untouched by the cut.
  CHECK_FALSE(past.incomplete);
}

TEST_CASE("graph capture: a list that holds itself exports as a cycle", "[convert][graph]") {
  // PROTO 2, EMPTY_LIST, BINPUT 0, BINGET 0, APPEND, STOP
  auto p = Bytes(std::string("\x80\x02]q\x00h\x00" "a.", 9));
  auto a = scanner::AnalyzePickle(p, Capture());
  REQUIRE(a.graphs.size() == 1);
  const auto& g = a.graphs[0];
  REQUIRE(g.nodes.at(g.root).kind == Kind::kList);
  CHECK(g.nodes[g.root].items == std::vector<uint32_t>{g.root});
}

TEST_CASE("graph capture: a call keeps its callee and arguments", "[convert][graph]") {
  // PROTO 2, GLOBAL collections OrderedDict, EMPTY_TUPLE, REDUCE, 'k' 'v' SETITEM, STOP
  auto p = Bytes(std::string("\x80\x02" "ccollections\nOrderedDict\n)RX\x01\x00\x00\x00kX\x01\x00\x00\x00vs.", 43));
  auto a = scanner::AnalyzePickle(p, Capture());
  REQUIRE(a.graphs.size() == 1);
  const auto& g = a.graphs[0];
  const auto& root = g.nodes.at(g.root);
  REQUIRE(root.kind == Kind::kCall);
  CHECK(g.nodes.at(root.callee).qualname == "OrderedDict");
  CHECK(g.nodes.at(root.args).kind == Kind::kTuple);
  REQUIRE(root.entries.size() == 1);
  CHECK(g.nodes[root.entries[0].first].text == "k");
}
