// fuzz_shard_index: the strict shard index reader (core::ParseShardIndex),
// the canonical weight_map and the index-against-shards checks, under
// default and tight limits. Any broken invariant is a __builtin_trap():
// - a rejection carries an MG-SET code (kSetIndex, kSetShardPath, kSetLimit)
//   and a message starting "index: ";
// - an accepted index has a non-empty weight_map sorted with unique names
//   (each clean: non-empty, no control character, within max_name_bytes),
//   shards equal to the distinct values, sorted, each a relative path
//   without empty, "." or ".." components, backslashes or control
//   characters;
// - CanonicalWeightMap is exactly u64(n) || (B(name) || B(shard))* (decoded
//   back here);
// - ShardSetErrors with no headers names every shard missing (up to the fold)
//   and nothing else; with headers built from the weight_map itself (each
//   tensor 0 bytes, in its named shard) it finds nothing unless total_size
//   is non-zero, and then exactly one kSetTotalSize;
// - limits are monotone: accepted under tight limits => accepted, equal,
//   under the defaults.
#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "modelgate/shard_index.h"

namespace {

namespace core = modelgate::core;
using core::Code;

#define MG_FUZZ_CHECK(cond)        \
  do {                             \
    if (!(cond)) __builtin_trap(); \
  } while (0)

bool CleanName(std::string_view s, const core::Limits& limits) {
  if (s.empty() || s.size() > limits.max_name_bytes) return false;
  for (unsigned char c : s) {
    if (c < 0x20 || c == 0x7F) return false;
  }
  return true;
}

bool InsideDir(std::string_view s) {
  if (s.empty() || s.front() == '/' || s.find('\\') != std::string_view::npos) return false;
  size_t start = 0;
  while (true) {
    size_t slash = s.find('/', start);
    std::string_view part = s.substr(start, slash == std::string_view::npos ? s.npos : slash - start);
    if (part.empty() || part == "." || part == "..") return false;
    if (slash == std::string_view::npos) return true;
    start = slash + 1;
  }
}

uint64_t ReadU64(std::span<const uint8_t> b, size_t& at) {
  MG_FUZZ_CHECK(b.size() - at >= 8 && at <= b.size());
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = (v << 8) | b[at++];
  return v;
}

std::string_view ReadB(std::span<const uint8_t> b, size_t& at) {
  uint64_t n = ReadU64(b, at);
  MG_FUZZ_CHECK(n <= b.size() - at);
  std::string_view out(reinterpret_cast<const char*>(b.data() + at), n);
  at += n;
  return out;
}

void CheckAccepted(const core::ShardIndex& index, const core::Limits& limits) {
  MG_FUZZ_CHECK(!index.weight_map.empty());
  MG_FUZZ_CHECK(index.weight_map.size() <= limits.max_tensors);
  for (size_t i = 0; i < index.weight_map.size(); ++i) {
    const auto& [tensor, shard] = index.weight_map[i];
    if (i) MG_FUZZ_CHECK(index.weight_map[i - 1].first < tensor);
    MG_FUZZ_CHECK(CleanName(tensor, limits));
    MG_FUZZ_CHECK(CleanName(shard, limits) && InsideDir(shard));
    MG_FUZZ_CHECK(core::ShardPosition(index, shard).has_value());
  }
  for (size_t i = 1; i < index.shards.size(); ++i) MG_FUZZ_CHECK(index.shards[i - 1] < index.shards[i]);
  for (const auto& s : index.shards) {
    bool used = false;
    for (const auto& e : index.weight_map) used |= e.second == s;
    MG_FUZZ_CHECK(used);
  }

  const std::vector<uint8_t> canon = core::CanonicalWeightMap(index);
  size_t at = 0;
  MG_FUZZ_CHECK(ReadU64(canon, at) == index.weight_map.size());
  for (const auto& [tensor, shard] : index.weight_map) {
    MG_FUZZ_CHECK(ReadB(canon, at) == tensor);
    MG_FUZZ_CHECK(ReadB(canon, at) == shard);
  }
  MG_FUZZ_CHECK(at == canon.size());

  const auto none = core::ShardSetErrors(index, {});
  const size_t want_missing = std::min<size_t>(index.shards.size(), 100) + (index.shards.size() > 100);
  MG_FUZZ_CHECK(none.size() == want_missing);
  for (const auto& e : none) MG_FUZZ_CHECK(e.code == Code::kSetShardMissing);

  std::map<std::string, core::Safetensors> built;
  for (const auto& [tensor, shard] : index.weight_map) {
    core::TensorInfo t;
    t.name = tensor;
    built[shard].tensors.push_back(t);
  }
  core::ShardHeaders headers;
  for (const auto& [name, st] : built) headers.emplace(name, &st);
  const auto consistent = core::ShardSetErrors(index, headers);
  if (index.total_size.value_or(0) == 0) {
    MG_FUZZ_CHECK(consistent.empty());
  } else {
    MG_FUZZ_CHECK(consistent.size() == 1 && consistent[0].code == Code::kSetTotalSize);
  }
}

core::Limits TightLimits() {
  core::Limits l;
  l.max_tensors = 8;
  l.max_name_bytes = 16;
  l.max_json_depth = 4;
  l.max_metadata_entries = 8;
  return l;
}

bool SameIndex(const core::ShardIndex& a, const core::ShardIndex& b) {
  return a.total_size == b.total_size && a.weight_map == b.weight_map && a.shards == b.shards;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::span<const uint8_t> bytes(data, size);
  const core::Limits defaults;
  const core::Limits tight = TightLimits();
  auto full = core::ParseShardIndex(bytes, defaults);
  auto small = core::ParseShardIndex(bytes, tight);
  for (const auto* r : {&full, &small}) {
    if (r->ok()) continue;
    const Code c = r->error().code;
    MG_FUZZ_CHECK(c == Code::kSetIndex || c == Code::kSetShardPath || c == Code::kSetLimit);
    MG_FUZZ_CHECK(r->error().message.rfind("index: ", 0) == 0);
  }
  if (full.ok()) CheckAccepted(full.value(), defaults);
  if (small.ok()) {
    CheckAccepted(small.value(), tight);
    MG_FUZZ_CHECK(full.ok() && SameIndex(full.value(), small.value()));
  }
  return 0;
}
