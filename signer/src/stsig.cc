// STSIG v1: strict parsing of the stsig.* metadata values, the signed
// message M, and the deterministic header writer.
#include <sodium.h>

#include <algorithm>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>

#include "internal.h"
#include "modelgate/strict_json.h"

namespace modelgate::signer {
namespace internal {

core::Status EnsureSodium() {
  static std::once_flag once;
  static int rc = -1;
  std::call_once(once, [] { rc = sodium_init(); });
  if (rc < 0) return core::Error{core::Code::kSigCrypto, core::kNoOffset, "libsodium failed to initialise"};
  return core::OkStatus();
}

std::string Base64(std::span<const uint8_t> bytes) {
  std::string out(sodium_base64_ENCODED_LEN(bytes.size(), sodium_base64_VARIANT_ORIGINAL), '\0');
  sodium_bin2base64(out.data(), out.size(), bytes.data(), bytes.size(),
                    sodium_base64_VARIANT_ORIGINAL);
  out.pop_back();  // the NUL terminator
  return out;
}

bool ParseBase64Exact(std::string_view text, std::span<uint8_t> out) {
  size_t len = 0;
  const char* end = nullptr;
  if (sodium_base642bin(out.data(), out.size(), text.data(), text.size(), nullptr, &len, &end,
                        sodium_base64_VARIANT_ORIGINAL) != 0) {
    return false;
  }
  if (len != out.size() || end != text.data() + text.size()) return false;
  // One spelling per value: re-encoding must give the same text.
  return Base64(out) == text;
}

void AppendJsonString(std::string& out, std::string_view s) {
  static constexpr char kHex[] = "0123456789abcdef";
  out.push_back('"');
  for (char ch : s) {
    auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) {
          out += "\\u00";
          out.push_back(kHex[c >> 4]);
          out.push_back(kHex[c & 0xf]);
        } else {
          out.push_back(ch);
        }
    }
  }
  out.push_back('"');
}

std::string RecordsJson(std::span<const StsigRecord> records) {
  std::string out = "[";
  for (size_t i = 0; i < records.size(); ++i) {
    const StsigRecord& r = records[i];
    if (i) out += ',';
    out += "{\"alg\":";
    AppendJsonString(out, r.alg);
    out += ",\"created\":" + std::to_string(r.created);
    out += ",\"kid\":\"" + core::HexLower(r.kid) + "\"";
    out += ",\"model\":";
    AppendJsonString(out, r.model);
    out += ",\"set\":";
    if (r.set) {
      out += "{\"count\":" + std::to_string(r.set->count) + ",\"digest\":\"" +
             core::HexLower(r.set->digest) + "\",\"index\":" + std::to_string(r.set->index) + "}";
    } else {
      out += "null";
    }
    out += ",\"sig\":\"" + Base64(r.sig) + "\"";
    out += ",\"version\":" + std::to_string(r.version) + "}";
  }
  out += "]";
  return out;
}

std::string DigestsJson(std::span<const TensorDigest> digests) {
  std::string out = "{";
  for (size_t i = 0; i < digests.size(); ++i) {
    if (i) out += ',';
    AppendJsonString(out, digests[i].first);
    out += ":\"" + core::HexLower(digests[i].second) + "\"";
  }
  out += "}";
  return out;
}

std::string SerializeHeader(const core::Safetensors& st,
                            std::vector<std::pair<std::string, std::string>> metadata) {
  std::sort(metadata.begin(), metadata.end());
  std::string out = "{";
  bool first = true;
  for (const core::TensorView t : st.tensors) {  // data order, as parsed
    if (!first) out += ',';
    first = false;
    AppendJsonString(out, t.name);
    out += ":{\"dtype\":\"";
    out += core::DtypeName(t.dtype);
    out += "\",\"shape\":[";
    for (size_t i = 0; i < t.shape.size(); ++i) {
      if (i) out += ',';
      out += std::to_string(t.shape[i]);
    }
    out += "],\"data_offsets\":[" + std::to_string(t.begin) + "," + std::to_string(t.end) + "]}";
  }
  if (!metadata.empty()) {
    if (!first) out += ',';
    out += "\"__metadata__\":{";
    for (size_t i = 0; i < metadata.size(); ++i) {
      if (i) out += ',';
      AppendJsonString(out, metadata[i].first);
      out += ':';
      AppendJsonString(out, metadata[i].second);
    }
    out += '}';
  }
  out += '}';
  // 8 + N a multiple of 8, as the reference writer pads.
  out.append((8 - (8 + out.size()) % 8) % 8, ' ');
  return out;
}

bool IsStsigKey(std::string_view key) { return key.substr(0, kStsigPrefix.size()) == kStsigPrefix; }

}  // namespace internal

namespace {

using core::Code;
using core::Error;
using core::kNoOffset;
using core::Result;
using json = nlohmann::json;

// kStsigMaxDepth bounds stsig values: an array of flat records, or a flat
// object of digests.
constexpr size_t kStsigMaxDepth = 8;

Result<json> ParseStrictJson(const std::string& text, std::string_view what, Code code) {
  return core::ParseStrictJson(text, kStsigMaxDepth, code, what);
}

// Fields reads an object with exactly the fields `names`.
Result<std::monostate> ExactFields(const json& obj, std::initializer_list<std::string_view> names,
                                   const std::string& where) {
  if (!obj.is_object()) {
    return Error{Code::kSigBadRecord, kNoOffset, where + " is not an object"};
  }
  for (const auto& [k, v] : obj.items()) {
    if (std::find(names.begin(), names.end(), k) == names.end()) {
      return Error{Code::kSigBadRecord, kNoOffset, where + ": unknown field " + core::Quoted(k)};
    }
  }
  for (std::string_view n : names) {
    if (!obj.contains(n)) {
      return Error{Code::kSigBadRecord, kNoOffset,
                   where + ": missing field \"" + std::string(n) + "\""};
    }
  }
  return std::monostate{};
}

Error FieldError(const std::string& where, std::string_view field, std::string_view want) {
  return Error{Code::kSigBadRecord, kNoOffset,
               where + ": field \"" + std::string(field) + "\" must be " + std::string(want)};
}

Result<StsigRecord> ParseRecord(const json& obj, size_t index) {
  const std::string where = "stsig.v1 record " + std::to_string(index);
  auto fields = ExactFields(obj, {"alg", "kid", "created", "model", "version", "set", "sig"}, where);
  if (!fields.ok()) return fields.error();
  StsigRecord r;
  const json& alg = obj.at("alg");
  if (!alg.is_string()) return FieldError(where, "alg", "a string");
  r.alg = alg.get<std::string>();
  const json& kid = obj.at("kid");
  if (!kid.is_string() || !core::ParseHexLower(kid.get<std::string>(), r.kid)) {
    return FieldError(where, "kid", "32 lowercase hex digits");
  }
  const json& created = obj.at("created");
  if (!created.is_number_unsigned()) return FieldError(where, "created", "an unsigned integer");
  r.created = created.get<uint64_t>();
  const json& model = obj.at("model");
  if (!model.is_string()) return FieldError(where, "model", "a string");
  r.model = model.get<std::string>();
  const json& version = obj.at("version");
  if (!version.is_number_unsigned()) return FieldError(where, "version", "an unsigned integer");
  r.version = version.get<uint64_t>();
  const json& set = obj.at("set");
  if (!set.is_null()) {
    auto set_fields = ExactFields(set, {"index", "count", "digest"}, where + " set");
    if (!set_fields.ok()) return set_fields.error();
    SetRef s;
    const json& idx = set.at("index");
    const json& cnt = set.at("count");
    const json& dig = set.at("digest");
    if (!idx.is_number_unsigned()) return FieldError(where, "set.index", "an unsigned integer");
    if (!cnt.is_number_unsigned()) return FieldError(where, "set.count", "an unsigned integer");
    if (!dig.is_string() || !core::ParseHexLower(dig.get<std::string>(), s.digest)) {
      return FieldError(where, "set.digest", "64 lowercase hex digits");
    }
    s.index = idx.get<uint64_t>();
    s.count = cnt.get<uint64_t>();
    if (s.index >= s.count) {
      return Error{Code::kSigBadRecord, kNoOffset,
                   where + ": set.index " + std::to_string(s.index) + " is not below set.count " +
                       std::to_string(s.count)};
    }
    r.set = s;
  }
  const json& sig = obj.at("sig");
  if (!sig.is_string() || !internal::ParseBase64Exact(sig.get<std::string>(), r.sig)) {
    return FieldError(where, "sig", "canonical base64 of 64 bytes");
  }
  return r;
}

void PutU64(std::vector<uint8_t>& m, uint64_t v) {
  for (int i = 7; i >= 0; --i) m.push_back(static_cast<uint8_t>(v >> (8 * i)));
}
void PutB(std::vector<uint8_t>& m, std::span<const uint8_t> b) {
  PutU64(m, b.size());
  m.insert(m.end(), b.begin(), b.end());
}
void PutB(std::vector<uint8_t>& m, std::string_view s) {
  PutB(m, std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(s.data()), s.size()));
}

// AppendContent appends M from u64(data_len) on.
Result<std::monostate> AppendContent(std::vector<uint8_t>& m, const core::Safetensors& st,
                                     std::span<const TensorDigest> digests) {
  PutU64(m, st.data_bytes());
  std::vector<const std::pair<std::string, std::string>*> meta;
  for (const auto& kv : st.metadata) {
    if (!internal::IsStsigKey(kv.first)) meta.push_back(&kv);
  }
  std::sort(meta.begin(), meta.end(), [](auto* a, auto* b) { return a->first < b->first; });
  PutU64(m, meta.size());
  for (const auto* kv : meta) {
    PutB(m, kv->first);
    PutB(m, kv->second);
  }
  std::vector<core::TensorView> tensors(st.tensors.begin(), st.tensors.end());
  std::sort(tensors.begin(), tensors.end(),
            [](const core::TensorView& a, const core::TensorView& b) { return a.name < b.name; });
  if (digests.size() != tensors.size()) {
    return Error{Code::kSigDigestMap, kNoOffset,
                 "stsig.v1.sha256 has " + std::to_string(digests.size()) + " entries for " +
                     std::to_string(tensors.size()) + " tensors"};
  }
  PutU64(m, tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    const core::TensorView& t = tensors[i];
    if (digests[i].first != t.name) {
      return Error{Code::kSigDigestMap, t.entry_offset,
                   "stsig.v1.sha256 has no entry for tensor " + core::Quoted(t.name)};
    }
    PutB(m, t.name);
    PutB(m, core::DtypeName(t.dtype));
    PutU64(m, t.shape.size());
    for (uint64_t d : t.shape) PutU64(m, d);
    PutU64(m, t.begin);
    PutU64(m, t.end);
    m.insert(m.end(), digests[i].second.begin(), digests[i].second.end());
  }
  return std::monostate{};
}

}  // namespace

core::Result<Stsig> ParseStsig(const core::Safetensors& st) {
  Stsig out;
  const std::string* records_text = nullptr;
  const std::string* digests_text = nullptr;
  for (const auto& [key, value] : st.metadata) {
    if (!internal::IsStsigKey(key)) continue;
    out.present = true;
    if (key == kStsigRecordsKey) {
      records_text = &value;
    } else if (key == kStsigDigestsKey) {
      digests_text = &value;
    } else {
      return Error{Code::kSigUnknownKey, kNoOffset,
                   "__metadata__ key " + core::Quoted(key) + " is reserved and not defined by STSIG v1"};
    }
  }
  if (!out.present) return out;
  if (records_text == nullptr) {
    return Error{Code::kSigBadRecord, kNoOffset, "stsig.v1.sha256 present without stsig.v1"};
  }
  if (digests_text == nullptr) {
    return Error{Code::kSigDigestMap, kNoOffset, "stsig.v1 present without stsig.v1.sha256"};
  }

  auto records = ParseStrictJson(*records_text, "stsig.v1", Code::kSigBadRecord);
  if (!records.ok()) return records.error();
  if (!records.value().is_array() || records.value().empty()) {
    return Error{Code::kSigBadRecord, kNoOffset, "stsig.v1 must be a non-empty JSON array"};
  }
  for (size_t i = 0; i < records.value().size(); ++i) {
    auto r = ParseRecord(records.value()[i], i);
    if (!r.ok()) return r.error();
    out.records.push_back(std::move(r).value());
  }

  auto digests = ParseStrictJson(*digests_text, "stsig.v1.sha256", Code::kSigDigestMap);
  if (!digests.ok()) return digests.error();
  if (!digests.value().is_object()) {
    return Error{Code::kSigDigestMap, kNoOffset, "stsig.v1.sha256 must be a JSON object"};
  }
  for (const auto& [name, hex] : digests.value().items()) {
    core::Sha256Digest d{};
    if (!hex.is_string() || !core::ParseHexLower(hex.get<std::string>(), d)) {
      return Error{Code::kSigDigestMap, kNoOffset,
                   "stsig.v1.sha256 entry " + core::Quoted(name) + " must be 64 lowercase hex digits"};
    }
    out.digests.emplace_back(name, d);
  }
  std::sort(out.digests.begin(), out.digests.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });

  // The name set must equal the tensor set exactly.
  std::set<std::string_view> tensor_names;
  for (const core::TensorView t : st.tensors) tensor_names.insert(t.name);
  for (const auto& [name, d] : out.digests) {
    if (!tensor_names.count(name)) {
      return Error{Code::kSigDigestMap, kNoOffset,
                   "stsig.v1.sha256 names " + core::Quoted(name) + ", which is not a tensor"};
    }
  }
  // Every map name is a tensor and names are unique, so equal sizes mean
  // equal sets; otherwise name the first tensor without an entry.
  if (out.digests.size() != st.tensors.size()) {
    std::set<std::string_view> mapped;
    for (const auto& [name, d] : out.digests) mapped.insert(name);
    for (const core::TensorView t : st.tensors) {
      if (!mapped.count(t.name)) {
        return Error{Code::kSigDigestMap, t.entry_offset,
                     "tensor " + core::Quoted(t.name) + " has no entry in stsig.v1.sha256"};
      }
    }
  }
  return out;
}

core::Result<std::vector<uint8_t>> SignedMessage(const core::Safetensors& st,
                                                 const StsigRecord& record,
                                                 std::span<const TensorDigest> digests) {
  std::vector<uint8_t> m;
  static constexpr std::string_view kMagic = "STSIG/1\n";
  m.insert(m.end(), kMagic.begin(), kMagic.end());
  PutB(m, record.alg);
  PutB(m, std::span<const uint8_t>(record.kid));
  PutU64(m, record.created);
  PutB(m, record.model);
  PutU64(m, record.version);
  PutU64(m, record.set ? 1 : 0);
  if (record.set) {
    PutU64(m, record.set->index);
    PutU64(m, record.set->count);
    PutB(m, std::span<const uint8_t>(record.set->digest));
  }
  auto content = AppendContent(m, st, digests);
  if (!content.ok()) return content.error();
  return m;
}

core::Result<core::Sha256Digest> ContentDigest(const core::Safetensors& st,
                                               std::span<const TensorDigest> digests) {
  std::vector<uint8_t> m;
  auto content = AppendContent(m, st, digests);
  if (!content.ok()) return content.error();
  return core::Sha256(m);
}

}  // namespace modelgate::signer
