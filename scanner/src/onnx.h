// A bounded reader of the protobuf wire format for ONNX ModelProto files
// (onnx/onnx.proto, proto2). It walks every message a loader would decode --
// the graph, nested graphs in node attributes (If/Loop/Scan bodies),
// model-local functions, training graphs -- and judges what makes loading
// the model reach outside its bytes: external tensor data whose location
// leaves the model's directory (the ONNX path traversals, CVE-2024-27318 and
// CVE-2024-27319), and operator domains no standard runtime implements
// (custom operators are native code the user must register). Nothing is
// allocated from what a length merely claims; every length is checked
// against what remains; recursion is bounded by OnnxLimits::max_depth.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "modelgate/scanner.h"

namespace modelgate::scanner::internal {

// protobuf's default recursion limit (io::CodedInputStream, 100): the ONNX
// loaders refuse messages nested deeper, so a deeper file is not a model.
inline constexpr uint32_t kOnnxMaxDepth = 100;
// Nodes in all graphs and functions together. Large transformer exports
// hold ~100k; this is two orders of magnitude above.
inline constexpr uint64_t kOnnxMaxNodes = 10'000'000;
// Initializers (dense and sparse) in all graphs together.
inline constexpr uint64_t kOnnxMaxInitializers = 10'000'000;
// Wire-format fields decoded in all (a packed array is one field). Bounds
// the walk's time on files of unpacked repeated scalars; protobuf refuses
// messages over 2 GiB, which hold at most ~1e9 fields.
inline constexpr uint64_t kOnnxMaxFields = 200'000'000;

// OnnxLimits bound one analysis; hitting one is MG-ONNX-LIMIT (high) and the
// file is not judged further (AnalyzeOnnx returns nullopt).
struct OnnxLimits {
  // Message nesting: ModelProto is depth 1, its GraphProto 2, a node 3, ...
  uint32_t max_depth = kOnnxMaxDepth;
  uint64_t max_nodes = kOnnxMaxNodes;
  uint64_t max_initializers = kOnnxMaxInitializers;
  uint64_t max_fields = kOnnxMaxFields;
};

// OnnxInfo is what AnalyzeOnnx read of a model.
struct OnnxInfo {
  int64_t ir_version = 0;
  // opset_import domains of the model, in file order ("" is ai.onnx).
  std::vector<std::string> opset_domains;
  // Distinct external data locations of every tensor, in file order.
  std::vector<std::string> external_locations;
  uint64_t nodes = 0;         // in all graphs and functions
  uint64_t initializers = 0;  // dense and sparse, in all graphs
};

// LooksLikeOnnx says whether `head` (a file's first bytes, e.g. kSniffBytes)
// parses as the start of a ModelProto: ONNX has no magic, so every complete
// field in `head` must be a ModelProto field with its wire type, the first
// one included, and the field cut by the end of `head` must start like one.
// Meant for files named *.onnx; alone it is only a weak signal.
bool LooksLikeOnnx(std::span<const uint8_t> head);

// AnalyzeOnnx parses `file` (the whole .onnx file) as a ModelProto and
// appends MG-ONNX-* findings with absolute offsets. Returns nullopt when the
// file cannot be parsed or a limit ends the walk (a finding, high, says
// why: the caller fails closed); findings made before that are kept.
std::optional<OnnxInfo> AnalyzeOnnx(std::span<const uint8_t> file, const OnnxLimits& limits,
                                    std::vector<Finding>* findings);

// OnnxExternalPathProblem is why an external data `location` could resolve
// outside the model's directory ("absolute path", "'..' component", ...),
// or nullptr when it is a plain relative path inside it.
const char* OnnxExternalPathProblem(std::string_view location);

// OnnxStandardDomain: `domain` is one the ONNX standard defines ("",
// "ai.onnx", "ai.onnx.ml", "ai.onnx.training", "ai.onnx.preview.training").
bool OnnxStandardDomain(std::string_view domain);

}  // namespace modelgate::scanner::internal
