// Shard index files: a strict SAX reader (every key seen, limits enforced
// while parsing, no DOM of what the index merely holds), the canonical
// weight_map, and the index-against-shards checks.
#include "modelgate/shard_index.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace modelgate::core {
namespace {

using json = nlohmann::json;

std::string U64(uint64_t v) { return std::to_string(v); }

// kMaxFindingsPerRule: ShardSetErrors names this many tensors per rule, then
// one error counts the rest (a shard swapped for another model's has
// thousands of tensors; the report needs the rule, not each name).
constexpr size_t kMaxFindingsPerRule = 100;

// Where the reader is: which object or array is open.
enum class Ctx : uint8_t { kTop, kMetadata, kWeightMap, kNested };
enum class Pending : uint8_t { kNone, kWeightMap, kMetadata, kTotalSize, kOther, kWeightMapValue };

// IndexReader builds a ShardIndex from SAX events. Keys of every object are
// collected per object and checked for duplicates when it closes (after
// unescaping, as the reader sees them); metadata values are not stored.
class IndexReader : public nlohmann::json_sax<json> {
 public:
  explicit IndexReader(const Limits& limits) : limits_(limits) {}

  bool null() override { return Scalar("null"); }
  bool boolean(bool) override { return Scalar("a boolean"); }
  bool number_integer(number_integer_t v) override {
    if (pending_ == Pending::kTotalSize) {
      return Fail(Code::kSetIndex, "metadata.total_size " + std::to_string(v) + " is negative");
    }
    return Scalar("a number");
  }
  bool number_unsigned(number_unsigned_t v) override {
    if (pending_ == Pending::kTotalSize) {
      out_.total_size = v;
      pending_ = Pending::kNone;
      return true;
    }
    return Scalar("a number");
  }
  bool number_float(number_float_t v, const string_t& text) override {
    if (pending_ == Pending::kTotalSize) {
      // Python writes a size computed in floating point as "123.0": the
      // value, when integral and exact (below 2^53), is what it says.
      if (v >= 0 && v <= 9007199254740992.0 && std::floor(v) == v) {
        out_.total_size = static_cast<uint64_t>(v);
        pending_ = Pending::kNone;
        return true;
      }
      return Fail(Code::kSetIndex, "metadata.total_size " + text + " is not a byte count");
    }
    return Scalar("a number");
  }
  bool string(string_t& v) override {
    if (pending_ == Pending::kWeightMapValue) {
      if (!CheckShardName(v)) return false;
      out_.weight_map.back().second = std::move(v);
      pending_ = Pending::kNone;
      return true;
    }
    return Scalar("a string");
  }
  bool binary(binary_t&) override { return Fail(Code::kSetIndex, "binary value"); }

  bool start_object(std::size_t) override { return Open(true); }
  bool start_array(std::size_t) override { return Open(false); }
  bool end_object() override { return Close(); }
  bool end_array() override { return Close(); }

  bool key(string_t& k) override {
    Frame& f = stack_.back();
    switch (f.ctx) {
      case Ctx::kTop:
        if (k == "weight_map") {
          pending_ = Pending::kWeightMap;
        } else if (k == "metadata") {
          pending_ = Pending::kMetadata;
        } else {
          return Fail(Code::kSetIndex, "unknown top-level key " + Quoted(k) +
                                           " (an index has \"metadata\" and \"weight_map\")");
        }
        break;
      case Ctx::kMetadata:
        pending_ = k == "total_size" ? Pending::kTotalSize : Pending::kOther;
        if (!CountMetadataKey()) return false;
        break;
      case Ctx::kNested:
        pending_ = Pending::kOther;
        if (!CountMetadataKey()) return false;
        break;
      case Ctx::kWeightMap:
        if (out_.weight_map.size() >= limits_.max_tensors) {
          return Fail(Code::kSetLimit, "weight_map has more than " + U64(limits_.max_tensors) +
                                           " entries (limit max_tensors)");
        }
        if (!CheckTensorName(k)) return false;
        out_.weight_map.emplace_back(k, std::string());
        pending_ = Pending::kWeightMapValue;
        return true;  // duplicates: checked on the sorted map at the end
    }
    f.keys.push_back(std::move(k));
    return true;
  }

  bool parse_error(std::size_t position, const std::string&,
                   const nlohmann::detail::exception& ex) override {
    return Fail(Code::kSetIndex, "JSON syntax error at byte " + U64(position) + ": " + ex.what());
  }

  const Error& error() const { return error_; }
  ShardIndex& result() { return out_; }

 private:
  struct Frame {
    Ctx ctx;
    bool object;
    std::vector<std::string> keys;  // top level and metadata objects only
  };

  bool Fail(Code code, std::string why) {
    if (error_.code == Code::kOk) error_ = Error{code, kNoOffset, "index: " + std::move(why)};
    return false;
  }

  // Scalar: a non-container value where `pending_` says what is expected.
  bool Scalar(const char* what) {
    switch (pending_) {
      case Pending::kWeightMap:
        return Fail(Code::kSetIndex, std::string("\"weight_map\" is ") + what + ", not an object");
      case Pending::kMetadata:
        return Fail(Code::kSetIndex, std::string("\"metadata\" is ") + what + ", not an object");
      case Pending::kTotalSize:
        return Fail(Code::kSetIndex, std::string("metadata.total_size is ") + what +
                                         ", not a byte count");
      case Pending::kWeightMapValue:
        return Fail(Code::kSetIndex, "weight_map value of " + Quoted(out_.weight_map.back().first) +
                                         " is " + what + ", not a shard file name");
      case Pending::kOther:
        pending_ = Pending::kNone;
        return true;
      case Pending::kNone:
        if (stack_.empty()) return Fail(Code::kSetIndex, "the index is not a JSON object");
        return true;  // an array element inside metadata
    }
    return true;
  }

  bool Open(bool object) {
    if (stack_.size() >= limits_.max_json_depth) {
      return Fail(Code::kSetLimit,
                  "nested deeper than " + U64(limits_.max_json_depth) + " (limit max_json_depth)");
    }
    Ctx ctx = Ctx::kNested;
    if (stack_.empty()) {
      if (!object) return Fail(Code::kSetIndex, "the index is not a JSON object");
      ctx = Ctx::kTop;
    } else if (pending_ == Pending::kWeightMap || pending_ == Pending::kMetadata) {
      if (!object) return Scalar("an array");
      ctx = pending_ == Pending::kWeightMap ? Ctx::kWeightMap : Ctx::kMetadata;
      if (ctx == Ctx::kWeightMap) seen_weight_map_ = true;
    } else if (pending_ == Pending::kTotalSize || pending_ == Pending::kWeightMapValue) {
      return Scalar(object ? "an object" : "an array");
    }
    pending_ = Pending::kNone;
    stack_.push_back(Frame{ctx, object, {}});
    return true;
  }

  bool Close() {
    Frame& f = stack_.back();
    std::sort(f.keys.begin(), f.keys.end());
    auto dup = std::adjacent_find(f.keys.begin(), f.keys.end());
    if (dup != f.keys.end()) {
      const char* where = f.ctx == Ctx::kTop ? "the index" : "metadata";
      return Fail(Code::kSetIndex, std::string("duplicate key ") + Quoted(*dup) + " in " + where);
    }
    stack_.pop_back();
    pending_ = Pending::kNone;
    return true;
  }

  bool CountMetadataKey() {
    if (++metadata_keys_ > limits_.max_metadata_entries) {
      return Fail(Code::kSetLimit, "metadata has more than " + U64(limits_.max_metadata_entries) +
                                       " keys (limit max_metadata_entries)");
    }
    return true;
  }

  // The safetensors header's rules for a tensor name, so that every name
  // the index may hold can be a header's.
  bool CheckTensorName(const std::string& k) {
    if (k.empty()) return Fail(Code::kSetIndex, "empty tensor name in weight_map");
    if (k.size() > limits_.max_name_bytes) {
      return Fail(Code::kSetLimit, "tensor name of " + U64(k.size()) + " bytes exceeds " +
                                       U64(limits_.max_name_bytes) + " (limit max_name_bytes)");
    }
    for (unsigned char c : k) {
      if (c < 0x20 || c == 0x7F) {
        return Fail(Code::kSetIndex, "tensor name " + Quoted(k) + " contains a control character");
      }
    }
    return true;
  }

  // Loaders join the shard name to the index's directory
  // (os.path.join(folder, name)): only a plain relative path stays inside.
  bool CheckShardName(const std::string& s) {
    const std::string what = "shard " + Quoted(s) + " of tensor " + Quoted(out_.weight_map.back().first);
    if (s.size() > limits_.max_name_bytes) {
      return Fail(Code::kSetLimit, "shard name of " + U64(s.size()) + " bytes exceeds " +
                                       U64(limits_.max_name_bytes) + " (limit max_name_bytes)");
    }
    if (s.empty()) return Fail(Code::kSetShardPath, what + " is empty");
    for (unsigned char c : s) {
      if (c < 0x20 || c == 0x7F) return Fail(Code::kSetShardPath, what + " contains a control character");
      if (c == '\\') return Fail(Code::kSetShardPath, what + " contains a backslash");
    }
    if (s[0] == '/') return Fail(Code::kSetShardPath, what + " is an absolute path");
    size_t start = 0;
    while (true) {
      size_t slash = s.find('/', start);
      std::string_view part = std::string_view(s).substr(start, slash == std::string::npos
                                                                    ? std::string::npos
                                                                    : slash - start);
      if (part.empty()) return Fail(Code::kSetShardPath, what + " has an empty path component");
      if (part == "." || part == "..") {
        return Fail(Code::kSetShardPath, what + " has a \"" + std::string(part) + "\" component");
      }
      if (slash == std::string::npos) break;
      start = slash + 1;
    }
    return true;
  }

  const Limits& limits_;
  ShardIndex out_;
  std::vector<Frame> stack_;
  Pending pending_ = Pending::kNone;
  bool seen_weight_map_ = false;
  uint64_t metadata_keys_ = 0;
  Error error_;

 public:
  bool seen_weight_map() const { return seen_weight_map_; }
};

void PutU64(std::vector<uint8_t>& out, uint64_t v) {
  for (int i = 7; i >= 0; --i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}

void PutB(std::vector<uint8_t>& out, std::string_view s) {
  PutU64(out, s.size());
  out.insert(out.end(), s.begin(), s.end());
}

std::string Names(const std::vector<std::string_view>& names) {
  std::string out;
  for (size_t i = 0; i < names.size(); ++i) {
    if (i) out += i + 1 == names.size() ? " and " : ", ";
    out += Quoted(names[i]);
  }
  return out;
}

// Folder keeps the first kMaxFindingsPerRule errors of each code and counts
// the rest.
class Folder {
 public:
  void Add(Code code, std::string message) {
    size_t& n = counts_[static_cast<size_t>(code) - static_cast<size_t>(Code::kSetIndex)];
    if (n++ < kMaxFindingsPerRule) out_.push_back(Error{code, kNoOffset, std::move(message)});
  }
  std::vector<Error> Finish() {
    for (size_t i = 0; i < counts_.size(); ++i) {
      if (counts_[i] > kMaxFindingsPerRule) {
        out_.push_back(Error{static_cast<Code>(static_cast<size_t>(Code::kSetIndex) + i), kNoOffset,
                             counts_[i] - kMaxFindingsPerRule == 1
                                 ? std::string("1 more tensor breaks this rule (not listed)")
                                 : U64(counts_[i] - kMaxFindingsPerRule) +
                                       " more tensors break this rule (not listed)"});
      }
    }
    return std::move(out_);
  }

 private:
  std::array<size_t, 16> counts_{};
  std::vector<Error> out_;
};

}  // namespace

Result<ShardIndex> ParseShardIndex(std::span<const uint8_t> bytes, const Limits& limits) {
  if (bytes.size() > kMaxIndexBytes) {
    return Error{Code::kSetLimit, kNoOffset,
                 "index: " + U64(bytes.size()) + " bytes exceeds " + U64(kMaxIndexBytes) +
                     " (limit kMaxIndexBytes)"};
  }
  // Python's json.load refuses a BOM ("Unexpected UTF-8 BOM"); nlohmann
  // would skip it.
  if (bytes.size() >= 3 && bytes[0] == 0xEF && bytes[1] == 0xBB && bytes[2] == 0xBF) {
    return Error{Code::kSetIndex, 0, "index: starts with a UTF-8 byte order mark"};
  }
  IndexReader reader(limits);
  const char* first = reinterpret_cast<const char*>(bytes.data());
  bool ok = false;
  try {
    ok = json::sax_parse(first, first + bytes.size(), &reader, json::input_format_t::json,
                         /*strict=*/true, /*ignore_comments=*/false);
  } catch (const std::exception& e) {  // not expected from SAX; never escapes
    return Error{Code::kSetIndex, kNoOffset, std::string("index: invalid JSON: ") + e.what()};
  }
  if (!ok) {
    if (reader.error().code == Code::kOk) return Error{Code::kSetIndex, kNoOffset, "index: invalid JSON"};
    return reader.error();
  }
  ShardIndex& index = reader.result();
  if (!reader.seen_weight_map()) {
    return Error{Code::kSetIndex, kNoOffset, "index: no \"weight_map\" object"};
  }
  if (index.weight_map.empty()) {
    return Error{Code::kSetIndex, kNoOffset, "index: \"weight_map\" is empty"};
  }
  std::sort(index.weight_map.begin(), index.weight_map.end());
  for (size_t i = 1; i < index.weight_map.size(); ++i) {
    if (index.weight_map[i - 1].first == index.weight_map[i].first) {
      return Error{Code::kSetIndex, kNoOffset,
                   "index: duplicate key " + Quoted(index.weight_map[i].first) + " in weight_map"};
    }
  }
  for (const auto& [tensor, shard] : index.weight_map) index.shards.push_back(shard);
  std::sort(index.shards.begin(), index.shards.end());
  index.shards.erase(std::unique(index.shards.begin(), index.shards.end()), index.shards.end());
  return std::move(index);
}

Result<ShardIndex> ReadShardIndex(int fd, uint64_t size, const Limits& limits) {
  if (size > kMaxIndexBytes) {
    return Error{Code::kSetLimit, kNoOffset,
                 "index: " + U64(size) + " bytes exceeds " + U64(kMaxIndexBytes) +
                     " (limit kMaxIndexBytes)"};
  }
  std::vector<uint8_t> bytes(static_cast<size_t>(size));
  Status read = PreadExact(fd, 0, bytes);
  if (!read.ok()) return read.error();
  return ParseShardIndex(bytes, limits);
}

std::vector<uint8_t> CanonicalWeightMap(const ShardIndex& index) {
  std::vector<uint8_t> out;
  PutU64(out, index.weight_map.size());
  for (const auto& [tensor, shard] : index.weight_map) {
    PutB(out, tensor);
    PutB(out, shard);
  }
  return out;
}

std::optional<size_t> ShardPosition(const ShardIndex& index, std::string_view shard) {
  auto it = std::lower_bound(index.shards.begin(), index.shards.end(), shard,
                             [](const std::string& a, std::string_view b) { return a < b; });
  if (it == index.shards.end() || *it != shard) return std::nullopt;
  return static_cast<size_t>(it - index.shards.begin());
}

bool IsShardIndexName(std::string_view name) {
  constexpr std::string_view kMarker = ".safetensors.index.";
  constexpr std::string_view kJson = ".json";
  size_t at = name.rfind(kMarker);
  if (at == std::string_view::npos || at == 0) return false;
  std::string_view rest = name.substr(at + kMarker.size());
  if (rest == "json") return true;
  // transformers' variant: model.safetensors.index.fp16.json
  return rest.size() > kJson.size() && rest.substr(rest.size() - kJson.size()) == kJson &&
         rest.find('/') == std::string_view::npos;
}

std::vector<Error> ShardSetErrors(const ShardIndex& index, const ShardHeaders& shards) {
  Folder out;
  // Which listed shards hold each tensor name (positions in index.shards).
  std::vector<const Safetensors*> present(index.shards.size(), nullptr);
  std::map<std::string_view, std::vector<size_t>> holders;
  bool all_present = true;
  for (size_t i = 0; i < index.shards.size(); ++i) {
    auto it = shards.find(index.shards[i]);
    if (it == shards.end() || it->second == nullptr) {
      all_present = false;
      out.Add(Code::kSetShardMissing,
              "shard " + Quoted(index.shards[i]) +
                  " listed by the index is missing or is not a valid safetensors file");
      continue;
    }
    present[i] = it->second;
    for (const TensorView t : it->second->tensors) holders[t.name].push_back(i);
  }
  auto shard_names = [&](const std::vector<size_t>& at) {
    std::vector<std::string_view> names;
    for (size_t i : at) names.push_back(index.shards[i]);
    return Names(names);
  };
  // Tensors by name: the weight_map's and the shards', merged.
  auto wm = index.weight_map.begin();
  auto held = holders.begin();
  while (wm != index.weight_map.end() || held != holders.end()) {
    const bool in_map = wm != index.weight_map.end() &&
                        (held == holders.end() || std::string_view(wm->first) <= held->first);
    const bool in_shards = held != holders.end() &&
                           (wm == index.weight_map.end() || held->first <= std::string_view(wm->first));
    if (in_shards && held->second.size() > 1) {
      out.Add(Code::kSetTensorDuplicate, "tensor " + Quoted(held->first) + " is in shards " +
                                             shard_names(held->second) +
                                             ": which one a loader keeps depends on its order");
    }
    if (in_map && !in_shards) {
      auto named = ShardPosition(index, wm->second);
      if (named && present[*named] != nullptr) {
        out.Add(Code::kSetTensorMissing, "tensor " + Quoted(wm->first) + " that the index places in " +
                                             Quoted(wm->second) + " is in no shard");
      }
    } else if (in_map && in_shards) {
      auto named = ShardPosition(index, wm->second);
      const auto& at = held->second;
      if (!named || std::find(at.begin(), at.end(), *named) == at.end()) {
        out.Add(Code::kSetTensorMisplaced, "tensor " + Quoted(wm->first) + " is in " +
                                               shard_names(at) + ", but the index places it in " +
                                               Quoted(wm->second));
      }
    } else {
      for (size_t i : held->second) {
        out.Add(Code::kSetTensorExtra, "shard " + Quoted(index.shards[i]) + " holds tensor " +
                                           Quoted(held->first) +
                                           ", which the index does not list");
      }
    }
    if (in_map) ++wm;
    if (in_shards) ++held;
  }
  if (index.total_size && all_present) {
    uint64_t bytes = 0;
    bool overflow = false;
    for (const Safetensors* st : present) {
      for (const TensorView t : st->tensors) overflow |= __builtin_add_overflow(bytes, t.size_bytes(), &bytes);
    }
    if (overflow || bytes != *index.total_size) {
      out.Add(Code::kSetTotalSize,
              "metadata.total_size is " + U64(*index.total_size) + ", but the shards' tensors hold " +
                  (overflow ? std::string("more than 2^64") : U64(bytes)) + " bytes");
    }
  }
  return out.Finish();
}

}  // namespace modelgate::core
