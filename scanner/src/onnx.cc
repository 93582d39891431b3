#include "onnx.h"

#include <set>
#include <string_view>
#include <unordered_set>
#include <utility>

namespace modelgate::scanner::internal {
namespace {

using core::Severity;

// Wire types (protobuf encoding spec). 3 and 4 (groups) are not in
// onnx.proto and are refused: skipping a group needs a nesting walk of its
// own, and no ONNX writer emits one.
constexpr uint8_t kVarint = 0, kFixed64 = 1, kLen = 2, kFixed32 = 5;
// Field numbers are 29 bits (protobuf: kMaxFieldNumber).
constexpr uint64_t kMaxFieldNumber = (1u << 29) - 1;

// Field is one decoded wire-format field.
struct Field {
  uint32_t number = 0;
  uint8_t wire = 0;
  uint64_t offset = 0;  // absolute offset of its tag
  uint64_t varint = 0;  // kVarint, kFixed64, kFixed32 values
  std::span<const uint8_t> bytes;  // kLen payload
  uint64_t bytes_offset = 0;       // absolute offset of the payload
  std::string_view text() const {
    return {reinterpret_cast<const char*>(bytes.data()), bytes.size()};
  }
};

// ReadVarint decodes a base-128 varint of at most 10 bytes whose value fits
// 64 bits (the 10th byte may only carry bit 63). false on truncation or an
// overlong encoding; `r` is then past what was read.
bool ReadVarint(core::ByteReader& r, uint64_t* out, const char** why) {
  uint64_t v = 0;
  for (int i = 0; i < 10; ++i) {
    auto b = r.U8();
    if (!b.ok()) {
      *why = "varint runs past the end";
      return false;
    }
    const uint8_t byte = b.value();
    if (i == 9 && byte > 1) {
      *why = "varint overflows 64 bits";
      return false;
    }
    v |= static_cast<uint64_t>(byte & 0x7f) << (7 * i);
    if (!(byte & 0x80)) {
      *out = v;
      return true;
    }
  }
  *why = "varint longer than 10 bytes";
  return false;
}

// ElementBits is TensorProto.DataType -> element bits (0: no fixed size:
// UNDEFINED, STRING, or a type this reader does not know).
uint32_t ElementBits(uint64_t data_type) {
  switch (data_type) {
    case 1: return 32;   // FLOAT
    case 2: case 3: return 8;     // UINT8, INT8
    case 4: case 5: return 16;    // UINT16, INT16
    case 6: return 32;   // INT32
    case 7: return 64;   // INT64
    case 9: return 8;    // BOOL
    case 10: return 16;  // FLOAT16
    case 11: return 64;  // DOUBLE
    case 12: return 32;  // UINT32
    case 13: return 64;  // UINT64
    case 14: return 64;  // COMPLEX64
    case 15: return 128;  // COMPLEX128
    case 16: return 16;  // BFLOAT16
    case 17: case 18: case 19: case 20: return 8;  // FLOAT8E4M3FN..FLOAT8E5M2FNUZ
    case 21: case 22: case 23: return 4;  // UINT4, INT4, FLOAT4E2M1 (two per byte)
    case 24: return 8;   // FLOAT8E8M0
    default: return 0;
  }
}

// Message kinds the parser descends into.
enum class Msg { kModel, kGraph, kNode, kAttribute, kTensor, kSparseTensor, kFunction,
                 kTraining, kOpset, kEntry };

class OnnxParser {
 public:
  OnnxParser(std::span<const uint8_t> file, const OnnxLimits& limits,
             std::vector<Finding>* findings)
      : file_(file), limits_(limits), findings_(findings) {}

  bool Run() {
    core::ByteReader r(file_, 0);
    bool ok = Model(r, 1);
    // protobuf accepts any field sequence, even none; a loader does not
    // (onnxruntime: "ModelProto does not have a graph", a missing IR version).
    if (ok && (!has_graph_ || info_.ir_version <= 0)) {
      ok = Malformed(!has_graph_ ? "no graph: not an ONNX model"
                                 : "no positive ir_version: not an ONNX model",
                     0);
    }
    JudgeDomains();
    JudgeExternal();
    return ok && !failed_;
  }
  OnnxInfo& info() { return info_; }

 private:
  // ---- failure and findings ----
  bool Fail(const char* id, std::string message, uint64_t offset) {
    if (!failed_) {
      findings_->push_back(MakeFinding(id, Severity::kHigh, std::move(message), offset));
      failed_ = true;
    }
    return false;
  }
  bool Malformed(std::string message, uint64_t offset) {
    return Fail("MG-ONNX-MALFORMED", std::move(message), offset);
  }
  void Add(const char* id, Severity s, std::string message, uint64_t offset) {
    findings_->push_back(MakeFinding(id, s, std::move(message), offset));
  }

  // Next reads one field of the message in `r`; false at its end (`*end`)
  // or on failure.
  bool Next(core::ByteReader& r, Field* f, bool* end) {
    *end = false;
    if (r.empty()) {
      *end = true;
      return false;
    }
    if (++fields_ > limits_.max_fields) {
      return Fail("MG-ONNX-LIMIT",
                  "more than " + std::to_string(limits_.max_fields) +
                      " protobuf fields (limit max_fields)",
                  r.offset());
    }
    f->offset = r.offset();
    const char* why = nullptr;
    uint64_t tag = 0;
    if (!ReadVarint(r, &tag, &why)) return Malformed(std::string("field tag: ") + why, f->offset);
    if (tag > UINT32_MAX) return Malformed("field tag above 32 bits", f->offset);
    const uint64_t number = tag >> 3;
    f->wire = static_cast<uint8_t>(tag & 7);
    if (number == 0 || number > kMaxFieldNumber) {
      return Malformed("field number " + std::to_string(number) + " is invalid", f->offset);
    }
    f->number = static_cast<uint32_t>(number);
    switch (f->wire) {
      case kVarint:
        if (!ReadVarint(r, &f->varint, &why)) {
          return Malformed("field " + std::to_string(number) + ": " + why, f->offset);
        }
        return true;
      case kFixed64: {
        auto v = r.U64Le();
        if (!v.ok()) return Malformed("fixed64 field runs past the end", f->offset);
        f->varint = v.value();
        return true;
      }
      case kFixed32: {
        auto v = r.U32Le();
        if (!v.ok()) return Malformed("fixed32 field runs past the end", f->offset);
        f->varint = v.value();
        return true;
      }
      case kLen: {
        uint64_t len = 0;
        if (!ReadVarint(r, &len, &why)) {
          return Malformed("field " + std::to_string(number) + " length: " + why, f->offset);
        }
        f->bytes_offset = r.offset();
        auto b = r.Take(len);  // checked against what remains before any use
        if (!b.ok()) {
          return Malformed("field " + std::to_string(number) + " claims " + std::to_string(len) +
                               " bytes, " + std::to_string(r.remaining()) + " remain",
                           f->offset);
        }
        f->bytes = b.value();
        return true;
      }
      default:
        return Malformed("field " + std::to_string(number) + " has wire type " +
                             std::to_string(f->wire) + " (groups and 6/7 are not ONNX)",
                         f->offset);
    }
  }

  bool Want(const Field& f, uint8_t wire, const char* message) {
    if (f.wire == wire) return true;
    return Malformed(std::string(message) + " field " + std::to_string(f.number) +
                         " has wire type " + std::to_string(f.wire) + ", expected " +
                         std::to_string(wire),
                     f.offset);
  }
  // Packable repeated scalars arrive unpacked (`scalar` wire type) or packed;
  // packed fixed-width arrays must hold whole elements (protobuf refuses
  // others). Packed varints are decoded only where they are used (dims).
  bool WantPackable(const Field& f, uint8_t scalar, const char* message) {
    if (f.wire == scalar) return true;
    if (f.wire != kLen) return Want(f, scalar, message);
    const size_t width = scalar == kFixed32 ? 4 : scalar == kFixed64 ? 8 : 1;
    if (f.bytes.size() % width != 0) {
      return Malformed(std::string(message) + " packed field " + std::to_string(f.number) +
                           " of " + std::to_string(f.bytes.size()) + " bytes is not whole " +
                           std::to_string(width) + "-byte elements",
                       f.offset);
    }
    return true;
  }

  bool Enter(uint32_t depth, uint64_t offset) {
    if (depth > limits_.max_depth) {
      return Fail("MG-ONNX-LIMIT",
                  "messages nested deeper than " + std::to_string(limits_.max_depth) +
                      " (limit max_depth)",
                  offset);
    }
    return true;
  }
  bool Sub(const Field& f, Msg kind, uint32_t depth) {
    if (!Want(f, kLen, "message")) return false;
    if (!Enter(depth, f.offset)) return false;
    core::ByteReader r(f.bytes, f.bytes_offset);
    switch (kind) {
      case Msg::kModel: return Model(r, depth);
      case Msg::kGraph: return Graph(r, depth);
      case Msg::kNode: return Node(r, depth, f.offset);
      case Msg::kAttribute: return Attribute(r, depth);
      case Msg::kTensor: return Tensor(r, depth, f.offset);
      case Msg::kSparseTensor: return SparseTensor(r, depth);
      case Msg::kFunction: return Function(r, depth);
      case Msg::kTraining: return Training(r, depth);
      case Msg::kOpset: return Opset(r, f.offset, false);
      case Msg::kEntry: return true;  // StringStringEntryProto: read by its owner
    }
    return false;
  }

  // ---- messages (field numbers: onnx/onnx.proto) ----
  bool Model(core::ByteReader& r, uint32_t depth) {
    if (!Enter(depth, r.offset())) return false;
    Field f;
    bool end = false;
    while (Next(r, &f, &end)) {
      switch (f.number) {
        case 1:  // ir_version
          if (!Want(f, kVarint, "ModelProto.ir_version")) return false;
          info_.ir_version = static_cast<int64_t>(f.varint);
          break;
        case 8:  // opset_import
          if (!Want(f, kLen, "ModelProto.opset_import")) return false;
          if (!Enter(depth + 1, f.offset)) return false;
          {
            core::ByteReader sub(f.bytes, f.bytes_offset);
            if (!Opset(sub, f.offset, true)) return false;
          }
          break;
        case 2: case 3: case 4: case 6:  // producer_name/version, domain, doc_string
        case 14: case 26:  // metadata_props, configuration
          if (!Want(f, kLen, "ModelProto")) return false;
          break;
        case 5:  // model_version
          if (!Want(f, kVarint, "ModelProto.model_version")) return false;
          break;
        case 7:
          has_graph_ = true;
          if (!Sub(f, Msg::kGraph, depth + 1)) return false;
          break;
        case 20: if (!Sub(f, Msg::kTraining, depth + 1)) return false; break;
        case 25: if (!Sub(f, Msg::kFunction, depth + 1)) return false; break;
        default: break;  // unknown fields are skipped, as protobuf does
      }
    }
    return end;
  }

  // Opset reads an OperatorSetIdProto: domain (1), version (2).
  bool Opset(core::ByteReader& r, uint64_t offset, bool model_level) {
    Field f;
    bool end = false;
    std::string_view domain;
    while (Next(r, &f, &end)) {
      if (f.number == 1) {
        if (!Want(f, kLen, "OperatorSetIdProto.domain")) return false;
        domain = f.text();
      } else if (f.number == 2) {
        if (!Want(f, kVarint, "OperatorSetIdProto.version")) return false;
      }
    }
    if (!end) return false;
    if (model_level) info_.opset_domains.emplace_back(domain);
    if (!OnnxStandardDomain(domain)) opset_custom_.push_back({std::string(domain), offset});
    return true;
  }

  bool Graph(core::ByteReader& r, uint32_t depth) {
    Field f;
    bool end = false;
    // Initializer names of this graph: two of one name mean two readers
    // may bind different weights (views into the file, no copies).
    std::unordered_set<std::string_view> names;
    while (Next(r, &f, &end)) {
      switch (f.number) {
        case 1:  // node
          if (++info_.nodes > limits_.max_nodes) {
            return Fail("MG-ONNX-LIMIT",
                        "more than " + std::to_string(limits_.max_nodes) +
                            " nodes (limit max_nodes)",
                        f.offset);
          }
          if (!Sub(f, Msg::kNode, depth + 1)) return false;
          break;
        case 5:    // initializer
        case 15:   // sparse_initializer
          if (++info_.initializers > limits_.max_initializers) {
            return Fail("MG-ONNX-LIMIT",
                        "more than " + std::to_string(limits_.max_initializers) +
                            " initializers (limit max_initializers)",
                        f.offset);
          }
          tensor_name_ = {};
          if (!Sub(f, f.number == 5 ? Msg::kTensor : Msg::kSparseTensor, depth + 1)) return false;
          if (!tensor_name_.empty() && !names.insert(tensor_name_).second) {
            Add("MG-ONNX-DUPLICATE-INITIALIZER", Severity::kHigh,
                "initializer " + core::Quoted(tensor_name_) +
                    " is defined twice in one graph; runtimes disagree on which one a node uses",
                f.offset);
          }
          break;
        case 2: case 10: case 11: case 12: case 13: case 14: case 16:
          // name, doc_string, input, output, value_info, quantization_annotation, metadata_props
          if (!Want(f, kLen, "GraphProto")) return false;
          break;
        default: break;
      }
    }
    return end;
  }

  bool Node(core::ByteReader& r, uint32_t depth, uint64_t offset) {
    Field f;
    bool end = false;
    std::string_view domain, op_type;
    while (Next(r, &f, &end)) {
      switch (f.number) {
        case 4:
          if (!Want(f, kLen, "NodeProto.op_type")) return false;
          op_type = f.text();
          break;
        case 7:
          if (!Want(f, kLen, "NodeProto.domain")) return false;
          domain = f.text();
          break;
        case 1: case 2: case 3: case 6: case 8: case 9: case 10:
          // input, output, name, doc_string, overload, metadata_props, device_configurations
          if (!Want(f, kLen, "NodeProto")) return false;
          break;
        case 5: if (!Sub(f, Msg::kAttribute, depth + 1)) return false; break;
        default: break;
      }
    }
    if (!end) return false;
    if (!OnnxStandardDomain(domain)) {
      node_custom_.push_back({std::string(domain), std::string(op_type), offset});
    }
    return true;
  }

  bool Attribute(core::ByteReader& r, uint32_t depth) {
    Field f;
    bool end = false;
    while (Next(r, &f, &end)) {
      switch (f.number) {
        case 1: case 21: case 13: case 4: case 14: case 9: case 15:
          // name, ref_attr_name, doc_string, s, tp, strings, type_protos
          if (!Want(f, kLen, "AttributeProto")) return false;
          break;
        case 20: case 3:  // type, i
          if (!Want(f, kVarint, "AttributeProto")) return false;
          break;
        case 2:  // f
          if (!Want(f, kFixed32, "AttributeProto.f")) return false;
          break;
        case 7:  // floats
          if (!WantPackable(f, kFixed32, "AttributeProto.floats")) return false;
          break;
        case 8:  // ints
          if (!WantPackable(f, kVarint, "AttributeProto.ints")) return false;
          break;
        case 5: case 10:  // t, tensors
          tensor_name_ = {};
          if (!Sub(f, Msg::kTensor, depth + 1)) return false;
          break;
        case 6: case 11:  // g, graphs: subgraphs (If/Loop/Scan bodies)
          if (!Sub(f, Msg::kGraph, depth + 1)) return false;
          break;
        case 22: case 23:  // sparse_tensor, sparse_tensors
          if (!Sub(f, Msg::kSparseTensor, depth + 1)) return false;
          break;
        default: break;
      }
    }
    return end;
  }

  bool SparseTensor(core::ByteReader& r, uint32_t depth) {
    Field f;
    bool end = false;
    std::string_view name;
    while (Next(r, &f, &end)) {
      switch (f.number) {
        case 1: case 2:  // values, indices
          tensor_name_ = {};
          if (!Sub(f, Msg::kTensor, depth + 1)) return false;
          if (f.number == 1) name = tensor_name_;
          break;
        case 3:
          if (!WantPackable(f, kVarint, "SparseTensorProto.dims")) return false;
          break;
        default: break;
      }
    }
    tensor_name_ = name;  // a sparse initializer is named by its values
    return end;
  }

  // ForEachPacked calls fn on every element of a packed (kLen) or single
  // scalar field; false when the packed bytes are malformed.
  template <typename Fn>
  bool ForEachInt(const Field& f, Fn fn) {
    if (f.wire == kVarint) {
      fn(f.varint);
      return true;
    }
    core::ByteReader p(f.bytes, f.bytes_offset);
    while (!p.empty()) {
      uint64_t v = 0;
      const char* why = nullptr;
      if (!ReadVarint(p, &v, &why)) return Malformed(std::string("packed integers: ") + why, f.offset);
      fn(v);
    }
    return true;
  }

  bool Tensor(core::ByteReader& r, uint32_t depth, uint64_t offset) {
    Field f;
    bool end = false;
    uint64_t elements = 1, data_type = 0, data_location = 0;
    bool overflow = false, negative = false, zero = false, has_raw = false, has_segment = false;
    uint64_t raw_bytes = 0;
    std::string_view name;
    struct Entry { std::string_view key, value; uint64_t offset; };
    std::vector<Entry> external;  // bounded by the fields present
    while (Next(r, &f, &end)) {
      switch (f.number) {
        case 1:  // dims (int64)
          if (!WantPackable(f, kVarint, "TensorProto.dims")) return false;
          if (!ForEachInt(f, [&](uint64_t d) {
                if (static_cast<int64_t>(d) < 0) negative = true;
                else if (d == 0) zero = true;
                else overflow |= __builtin_mul_overflow(elements, d, &elements);
              })) {
            return false;
          }
          break;
        case 2:
          if (!Want(f, kVarint, "TensorProto.data_type")) return false;
          data_type = f.varint;
          break;
        case 14:
          if (!Want(f, kVarint, "TensorProto.data_location")) return false;
          data_location = f.varint;
          break;
        case 3:
          if (!Want(f, kLen, "TensorProto.segment")) return false;
          has_segment = true;
          break;
        case 8:
          if (!Want(f, kLen, "TensorProto.name")) return false;
          name = f.text();
          break;
        case 9:
          if (!Want(f, kLen, "TensorProto.raw_data")) return false;
          has_raw = true;
          raw_bytes = f.bytes.size();  // a repeated bytes field: the last one wins
          break;
        case 6: case 12: case 16:  // string_data, doc_string, metadata_props
          if (!Want(f, kLen, "TensorProto")) return false;
          break;
        case 4:
          if (!WantPackable(f, kFixed32, "TensorProto.float_data")) return false;
          break;
        case 5: case 7: case 11:  // int32_data, int64_data, uint64_data
          if (!WantPackable(f, kVarint, "TensorProto")) return false;
          break;
        case 10:
          if (!WantPackable(f, kFixed64, "TensorProto.double_data")) return false;
          break;
        case 13: {  // external_data: StringStringEntryProto key (1), value (2)
          if (!Want(f, kLen, "TensorProto.external_data")) return false;
          if (!Enter(depth + 1, f.offset)) return false;
          core::ByteReader e(f.bytes, f.bytes_offset);
          Field g;
          bool eend = false;
          Entry entry{{}, {}, f.offset};
          while (Next(e, &g, &eend)) {
            if (g.number == 1 || g.number == 2) {
              if (!Want(g, kLen, "StringStringEntryProto")) return false;
              (g.number == 1 ? entry.key : entry.value) = g.text();
              if (g.number == 2) entry.offset = g.bytes_offset;
            }
          }
          if (!eend) return false;
          external.push_back(entry);
          break;
        }
        default: break;
      }
    }
    if (!end) return false;
    tensor_name_ = name;
    const std::string what = "tensor " + core::Quoted(name);

    // External data: onnx.external_data_helper and onnxruntime join
    // `location` to the model's directory; the other keys are offset,
    // length and checksum (onnx.proto). Every location is judged, even
    // when data_location is DEFAULT and a loader would ignore it.
    bool has_location = false;
    std::optional<uint64_t> length;
    std::unordered_set<std::string_view> keys;
    for (const auto& e : external) {
      if (!keys.insert(e.key).second) {
        Add("MG-ONNX-EXTERNAL-MALFORMED", Severity::kHigh,
            what + " repeats external_data key " + core::Quoted(e.key) +
                " (the ONNX helper keeps the last, other readers the first)",
            e.offset);
      }
      if (e.key == "location") {
        has_location = true;
        NoteLocation(e.value, what, e.offset);
      } else if (e.key == "offset" || e.key == "length") {
        uint64_t v = 0;
        bool ok = !e.value.empty();
        for (char c : e.value) {
          ok = ok && c >= '0' && c <= '9' && !__builtin_mul_overflow(v, 10u, &v) &&
               !__builtin_add_overflow(v, static_cast<uint64_t>(c - '0'), &v);
        }
        if (!ok) {
          Add("MG-ONNX-EXTERNAL-MALFORMED", Severity::kHigh,
              what + " external_data " + std::string(e.key) + " " + core::Quoted(e.value) +
                  " is not a decimal 64-bit integer",
              e.offset);
        } else if (e.key == "length") {
          length = v;
        }
      } else if (e.key != "checksum") {
        Add("MG-ONNX-EXTERNAL-MALFORMED", Severity::kHigh,
            what + " has external_data key " + core::Quoted(e.key) +
                " that onnx.proto does not define (the ONNX helper sets it as an attribute)",
            e.offset);
      }
    }
    if (data_location == 1 && !has_location) {
      Add("MG-ONNX-EXTERNAL-MALFORMED", Severity::kHigh,
          what + " has data_location EXTERNAL but no external_data location", offset);
    }

    // Size of the data vs dims x element size (two 4-bit elements per byte).
    const uint32_t bits = ElementBits(data_type);
    if (zero) elements = 0, overflow = false;  // a zero dim: no elements, whatever the others
    const bool external_data = data_location == 1;
    if (bits != 0 && !has_segment && ((has_raw && !external_data) || (external_data && length))) {
      uint64_t total_bits = 0;
      if (negative) {
        Add("MG-ONNX-TENSOR-SIZE", Severity::kHigh, what + " has a negative dimension", offset);
      } else if (overflow || __builtin_mul_overflow(elements, static_cast<uint64_t>(bits), &total_bits)) {
        Add("MG-ONNX-TENSOR-SIZE", Severity::kHigh,
            what + " has dims whose byte size overflows 64 bits", offset);
      } else {
        const uint64_t want = total_bits / 8 + (total_bits % 8 != 0);
        const uint64_t have = external_data ? *length : raw_bytes;
        if (want != have) {
          Add("MG-ONNX-TENSOR-SIZE", Severity::kHigh,
              what + " holds " + std::to_string(have) + " bytes of " +
                  (external_data ? "external" : "raw") + " data, its dims and data_type need " +
                  std::to_string(want),
              offset);
        }
      }
    }
    return true;
  }

  bool Function(core::ByteReader& r, uint32_t depth) {
    Field f;
    bool end = false;
    std::string_view name, domain;
    while (Next(r, &f, &end)) {
      switch (f.number) {
        case 1:
          if (!Want(f, kLen, "FunctionProto.name")) return false;
          name = f.text();
          break;
        case 10:
          if (!Want(f, kLen, "FunctionProto.domain")) return false;
          domain = f.text();
          break;
        case 4: case 5: case 6: case 8: case 12: case 13: case 14:
          // input, output, attribute, doc_string, value_info, overload, metadata_props
          if (!Want(f, kLen, "FunctionProto")) return false;
          break;
        case 7:
          if (++info_.nodes > limits_.max_nodes) {
            return Fail("MG-ONNX-LIMIT",
                        "more than " + std::to_string(limits_.max_nodes) +
                            " nodes (limit max_nodes)",
                        f.offset);
          }
          if (!Sub(f, Msg::kNode, depth + 1)) return false;
          break;
        case 9: if (!Sub(f, Msg::kOpset, depth + 1)) return false; break;
        case 11: if (!Sub(f, Msg::kAttribute, depth + 1)) return false; break;
        default: break;
      }
    }
    if (!end) return false;
    functions_.insert({std::string(domain), std::string(name)});
    function_domains_.insert(std::string(domain));
    return true;
  }

  bool Training(core::ByteReader& r, uint32_t depth) {
    Field f;
    bool end = false;
    while (Next(r, &f, &end)) {
      switch (f.number) {
        case 1: case 2:  // initialization, algorithm
          if (!Sub(f, Msg::kGraph, depth + 1)) return false;
          break;
        case 3: case 4:  // initialization_binding, update_binding
          if (!Want(f, kLen, "TrainingInfoProto")) return false;
          break;
        default: break;
      }
    }
    return end;
  }

  // ---- judgements ----
  void NoteLocation(std::string_view location, const std::string& what, uint64_t offset) {
    const std::string loc(location);
    if (const char* why = OnnxExternalPathProblem(location)) {
      if (bad_locations_.insert(loc).second) {
        Add("MG-ONNX-EXTERNAL-PATH", Severity::kCritical,
            what + " reads external data from " + core::Quoted(location) + ": " + why +
                "; loading the model reads a file outside its directory",
            offset);
      }
    }
    if (seen_locations_.insert(loc).second) {
      info_.external_locations.push_back(loc);
      if (first_external_offset_ == core::kNoOffset) first_external_offset_ = offset;
    }
    ++external_tensors_;
  }

  void JudgeExternal() {
    if (info_.external_locations.empty()) return;
    std::string list;
    constexpr size_t kListed = 8;  // names in the message; the rest counted
    for (size_t i = 0; i < info_.external_locations.size() && i < kListed; ++i) {
      if (i) list += ", ";
      list += core::Quoted(info_.external_locations[i]);
    }
    if (info_.external_locations.size() > kListed) {
      list += " and " + std::to_string(info_.external_locations.size() - kListed) + " more";
    }
    Add("MG-ONNX-EXTERNAL-DATA", Severity::kInfo,
        std::to_string(external_tensors_) + " tensor(s) keep their data in " +
            std::to_string(info_.external_locations.size()) + " external file(s): " + list +
            "; those files are read at load time and must be judged too",
        first_external_offset_);
  }

  // A node in a domain no standard runtime implements is a custom operator
  // (native code registered with the runtime), unless it calls a function
  // the model defines in ONNX itself. An opset_import of such a domain
  // declares the need even when no node is in it.
  void JudgeDomains() {
    std::set<std::pair<std::string, std::string>> reported;
    std::unordered_set<std::string> node_domains;
    for (const auto& n : node_custom_) node_domains.insert(n.domain);
    for (const auto& n : node_custom_) {
      if (functions_.count({n.domain, n.op_type})) continue;
      if (!reported.insert({n.domain, n.op_type}).second) continue;
      Add("MG-ONNX-CUSTOM-OP", Severity::kHigh,
          "node " + core::Quoted(n.op_type) + " is in operator domain " + core::Quoted(n.domain) +
              ", which the ONNX standard does not define and the model does not implement as a "
              "function: running it needs a custom operator library (native code)",
          n.offset);
    }
    std::unordered_set<std::string> domains_reported;
    for (const auto& o : opset_custom_) {
      if (function_domains_.count(o.domain)) continue;
      // A domain its nodes already named is not reported twice.
      if (node_domains.count(o.domain) || !domains_reported.insert(o.domain).second) continue;
      Add("MG-ONNX-CUSTOM-OP", Severity::kHigh,
          "opset_import declares operator domain " + core::Quoted(o.domain) +
              ", which the ONNX standard does not define: a custom operator library (native "
              "code) is expected",
          o.offset);
    }
  }

  struct CustomNode { std::string domain, op_type; uint64_t offset; };
  struct CustomOpset { std::string domain; uint64_t offset; };

  std::span<const uint8_t> file_;
  const OnnxLimits& limits_;
  std::vector<Finding>* findings_;
  OnnxInfo info_;
  bool failed_ = false;
  bool has_graph_ = false;
  uint64_t fields_ = 0;
  std::string_view tensor_name_;  // name of the tensor the last Tensor() read
  std::vector<CustomNode> node_custom_;
  std::vector<CustomOpset> opset_custom_;
  std::set<std::pair<std::string, std::string>> functions_;  // (domain, name)
  std::unordered_set<std::string> function_domains_;
  std::unordered_set<std::string> bad_locations_, seen_locations_;
  uint64_t external_tensors_ = 0;
  uint64_t first_external_offset_ = core::kNoOffset;
};

// ModelProto field numbers and the wire type each must have (for sniffing).
bool ModelFieldWire(uint64_t number, uint8_t* wire) {
  switch (number) {
    case 1: case 5: *wire = kVarint; return true;
    case 2: case 3: case 4: case 6: case 7: case 8: case 14: case 20: case 25: case 26:
      *wire = kLen;
      return true;
    default: return false;
  }
}

// ir_version is 1..11 today; a sniffed start above this is not a model.
constexpr uint64_t kMaxPlausibleIrVersion = 1000;

}  // namespace

bool OnnxStandardDomain(std::string_view d) {
  // The ONNX domains, and onnxruntime's contrib domains: their kernels are
  // compiled into onnxruntime itself (the fused attention and layer-norm
  // ops of every optimized transformer export), no library is registered.
  // ai.onnx.contrib (onnxruntime-extensions) is a separate native library.
  return d.empty() || d == "ai.onnx" || d == "ai.onnx.ml" || d == "ai.onnx.training" ||
         d == "ai.onnx.preview.training" || d == "com.microsoft" || d == "com.microsoft.nchwc" ||
         d == "com.microsoft.experimental";
}

const char* OnnxExternalPathProblem(std::string_view loc) {
  if (loc.empty()) return "an empty location names the model's directory";
  if (loc.find('\0') != std::string_view::npos) {
    return "a zero byte cuts the name differently for C and Python readers";
  }
  if (loc.front() == '/') return "an absolute path";
  if (loc.find('\\') != std::string_view::npos) return "a backslash (a Windows path separator)";
  if (loc.find(':') != std::string_view::npos) {
    return "a ':' (a Windows drive letter, stream name or URL scheme)";
  }
  size_t start = 0;
  while (start <= loc.size()) {
    size_t slash = loc.find('/', start);
    if (slash == std::string_view::npos) slash = loc.size();
    if (loc.substr(start, slash - start) == "..") return "a '..' component leaves the directory";
    start = slash + 1;
  }
  return nullptr;
}

bool LooksLikeOnnx(std::span<const uint8_t> head) {
  core::ByteReader r(head);
  int fields = 0;
  while (!r.empty()) {
    uint64_t tag = 0, value = 0;
    const char* why = nullptr;
    if (!ReadVarint(r, &tag, &why)) return fields > 0 && r.empty();
    uint8_t wire = 0;
    if (tag > UINT32_MAX || !ModelFieldWire(tag >> 3, &wire) || (tag & 7) != wire) return false;
    if (r.empty()) return fields > 0;
    if (!ReadVarint(r, &value, &why)) return r.empty();  // cut by the end of head
    if ((tag >> 3) == 1 && (value == 0 || value > kMaxPlausibleIrVersion)) return false;
    ++fields;
    if (wire == kLen) {
      if (value > r.remaining()) return true;  // continues past head
      (void)r.Skip(value);
    }
  }
  return fields > 0;
}

std::optional<OnnxInfo> AnalyzeOnnx(std::span<const uint8_t> file, const OnnxLimits& limits,
                                    std::vector<Finding>* findings) {
  OnnxParser p(file, limits, findings);
  if (!p.Run()) return std::nullopt;
  return std::move(p.info());
}

}  // namespace modelgate::scanner::internal
