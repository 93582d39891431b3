// shard_index: the index file of a sharded safetensors model
// (`model.safetensors.index.json`, as transformers and huggingface_hub write
// it) parsed strictly, its canonical weight_map form (the set digest's input,
// docs/stsig.md), and the checks of an index against the headers of its
// shards (MG-SET-*).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "modelgate/core.h"

namespace modelgate::core {

// kMaxIndexBytes bounds an index file read whole: a 100,000-tensor model's
// index is about 10 MB.
inline constexpr uint64_t kMaxIndexBytes = 64ull << 20;

// ShardIndex is a parsed index: the weight_map and metadata.total_size.
struct ShardIndex {
  std::optional<uint64_t> total_size;                            // metadata.total_size
  std::vector<std::pair<std::string, std::string>> weight_map;   // sorted bytewise by tensor name
  std::vector<std::string> shards;                               // distinct shard names, sorted bytewise
};

// ParseShardIndex reads an index strictly (docs/stsig.md "Shard index
// files"): one JSON object whose keys are "weight_map" (required: an object
// of tensor name -> shard file name) and "metadata" (optional: an object,
// whose "total_size", when present, is a non-negative integer; its other
// keys, e.g. transformers' "total_parameters", are allowed and ignored).
// Any other top-level key, a duplicate key at any level (Python's json keeps
// the last one, another reader the first), a UTF-8 BOM, or a wrong type is
// kSetIndex. Tensor names follow the safetensors header's name rules
// (non-empty, no control characters, at most limits.max_name_bytes). Shard
// names must stay inside the index's directory: relative, '/'-separated
// components that are not empty, "." or "..", no backslash, no control
// character (kSetShardPath). Bounds: kMaxIndexBytes, limits.max_tensors
// entries, limits.max_json_depth nesting (kSetLimit). An empty weight_map
// is kSetIndex: there is nothing to load.
Result<ShardIndex> ParseShardIndex(std::span<const uint8_t> bytes, const Limits& limits);

// ReadShardIndex is ParseShardIndex on the file open at `fd` (`size` from
// fstat): a file over kMaxIndexBytes is kSetLimit before anything is read.
Result<ShardIndex> ReadShardIndex(int fd, uint64_t size, const Limits& limits);

// CanonicalWeightMap is u64(n) || (B(tensor name) || B(shard file name))*
// in weight_map order (sorted bytewise by tensor name), where u64 is 8
// bytes big-endian and B(x) = u64(len x) || x.
std::vector<uint8_t> CanonicalWeightMap(const ShardIndex& index);

// ShardPosition is the place of `shard` in index.shards (the set record's
// `index`), if the index lists it.
std::optional<size_t> ShardPosition(const ShardIndex& index, std::string_view shard);

// IsShardIndexName: `file_name` (a base name) names a safetensors index:
// "*.safetensors.index.json", or transformers' variant form
// "*.safetensors.index.<variant>.json".
bool IsShardIndexName(std::string_view file_name);

// ShardHeaders maps a shard name (relative to the index's directory, as the
// index spells it) to its parsed header; null, or no entry, when the file is
// missing or did not parse.
using ShardHeaders = std::map<std::string, const Safetensors*, std::less<>>;

// ShardSetErrors lists every rule the shards break against `index`, each
// naming the tensor and shards involved, in a stable order (shards, then
// tensors by name, then total_size):
//  - kSetShardMissing: a listed shard has no parsed header;
//  - kSetTensorMissing: a weight_map tensor is in no present shard;
//  - kSetTensorMisplaced: it is in another shard than the one named;
//  - kSetTensorDuplicate: a tensor name is in two or more shards;
//  - kSetTensorExtra: a listed shard holds a tensor the weight_map lacks;
//  - kSetTotalSize: metadata.total_size differs from the bytes of the
//    tensors the listed shards hold (checked only when every listed shard
//    is present).
// Entries of `shards` the index does not list are not judged.
std::vector<Error> ShardSetErrors(const ShardIndex& index, const ShardHeaders& shards);

}  // namespace modelgate::core
