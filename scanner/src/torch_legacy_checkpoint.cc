// ReadTorchLegacyCheckpoint / ReadTorchTarCheckpoint: torch's legacy
// checkpoints (scanner.h), read as torch.serialization._legacy_load reads
// them (torch 1.13), for `modelgate convert`. Pickles are located by opcode
// lengths (torch_legacy.h) and the object pickle's graph is built by the
// pickle machine with graph capture; nothing here judges: the caller has
// scanned the file.
#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "modelgate/scanner.h"
#include "source.h"
#include "tar.h"
#include "torch_legacy.h"

namespace modelgate::scanner {
namespace {

using core::Code;
using Kind = PickleNode::Kind;

core::Error Err(Code code, uint64_t offset, std::string message) {
  return core::Error{code, offset, std::move(message)};
}

std::string N(uint64_t v) { return std::to_string(v); }

uint64_t Le64(std::span<const uint8_t> b, uint64_t at) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | b[at + static_cast<uint64_t>(i)];
  return v;
}

// OnePickle is the graph of the one pickle that is exactly `bytes` (at
// file offset `base`): the object torch unpickles there.
core::Result<PickleAnalysis> OnePickle(std::span<const uint8_t> bytes, uint64_t base, const ScanOptions& options,
                                       const std::string& what) {
  PickleOptions po = options.pickle;
  po.capture_graph = true;
  po.limits.max_streams = 1;
  PickleAnalysis a = AnalyzePickle(bytes, po, base);
  if (!a.graph_cut.empty()) {
    bool limit = a.graph_cut.find("max_graph_refs") != std::string::npos;
    return Err(limit ? Code::kConvLimit : Code::kConvUnsupported, base, what + ": " + a.graph_cut);
  }
  if (a.streams.empty() || !a.streams.front().complete || a.graphs.size() != 1 ||
      a.streams.front().end != base + bytes.size()) {
    std::string why = a.streams.empty()                  ? "no pickle"
                      : !a.streams.front().complete      ? a.streams.front().error
                                                         : "bytes follow its STOP";
    uint64_t at = a.streams.empty() ? base : a.streams.front().error_offset;
    return Err(Code::kConvUnsupported, at == core::kNoOffset ? base : at, what + " is not one whole pickle: " + why);
  }
  return a;
}

const PickleNode* NodeAt(const PickleGraph& g, uint32_t id) { return id < g.nodes.size() ? &g.nodes[id] : nullptr; }

// NonNegative: a plain int node >= 0 (not a bool).
std::optional<uint64_t> NonNegative(const PickleNode* n) {
  if (n == nullptr || n->kind != Kind::kInt || !n->int_fits || n->int_value < 0) return std::nullopt;
  return static_cast<uint64_t>(n->int_value);
}

// Storage ids of a legacy file: every persistent id in the object graph,
// in the order the unpickler meets them (node order). The first id of a
// key makes the storage (its type and element count); torch keeps it, so a
// later id with another type or count would read other bytes than the
// planner thinks: refused here, for ids the planner never reaches too.
struct LegacyId {
  std::string type;
  uint64_t numel = 0;
};

core::Status LegacyIds(const PickleGraph& g, std::map<std::string, LegacyId>* out) {
  for (const PickleNode& n : g.nodes) {
    if (n.kind != Kind::kPersistent) continue;
    const PickleNode* pid = NodeAt(g, n.args);
    if (pid == nullptr || pid->kind != Kind::kTuple || pid->items.size() != 6) {
      return Err(Code::kConvNotAllowed, n.offset, "a persistent id that is not a legacy torch storage id");
    }
    const PickleNode* tag = NodeAt(g, pid->items[0]);
    const PickleNode* type = NodeAt(g, pid->items[1]);
    const PickleNode* key = NodeAt(g, pid->items[2]);
    const PickleNode* view = NodeAt(g, pid->items[5]);
    auto numel = NonNegative(NodeAt(g, pid->items[4]));
    if (tag == nullptr || tag->kind != Kind::kStr || tag->text != "storage" || type == nullptr ||
        type->kind != Kind::kGlobal || key == nullptr || key->kind != Kind::kStr || key->truncated ||
        key->text.empty() || !numel) {
      return Err(Code::kConvNotAllowed, n.offset, "a persistent id that is not a legacy torch storage id");
    }
    if (view == nullptr || view->kind != Kind::kNone) {
      // torch >= 0.4 never writes one (is_view is always False).
      return Err(Code::kConvUnsupported, n.offset,
                 "storage " + core::Quoted(key->text, 60) +
                     " is a storage view (view_metadata is not None): views are not converted");
    }
    auto [it, fresh] = out->emplace(key->text, LegacyId{type->qualname, *numel});
    if (!fresh && (it->second.type != type->qualname || it->second.numel != *numel)) {
      return Err(Code::kConvStorage, n.offset,
                 "storage " + core::Quoted(key->text, 60) + " is named with two dtypes or element counts");
    }
  }
  return core::OkStatus();
}

// ReadStorage reads one storage as _new_with_file / _set_from_file do:
// an int64 LE count at `*p` of `b` (whose byte 0 is file offset `base`),
// then count * element size bytes; `*p` moves past them.
core::Status ReadStorage(std::span<const uint8_t> b, uint64_t base, uint64_t* p, const std::string& key,
                         const std::string& type, const char* where, TorchLegacyStorage* out) {
  const uint64_t elem = TorchStorageElementBytes(type);
  if (elem == 0) {
    return Err(Code::kConvUnsupported, base + *p, "storage " + core::Quoted(key, 60) + " has type " +
                                                     core::Quoted(type, 60) + ", of no known element size");
  }
  if (b.size() - *p < 8) {
    return Err(Code::kConvStorage, base + *p,
               "storage " + core::Quoted(key, 60) + ": its element count runs past " + where);
  }
  const uint64_t numel = Le64(b, *p);
  uint64_t nbytes = 0;
  if (__builtin_mul_overflow(numel, elem, &nbytes) || nbytes > b.size() - *p - 8) {
    return Err(Code::kConvStorage, base + *p,
               "storage " + core::Quoted(key, 60) + " of " + N(numel) + " elements runs past " + where);
  }
  out->key = key;
  out->storage_type = type;
  out->numel = numel;
  out->count_offset = base + *p;
  out->offset = base + *p + 8;
  out->bytes = nbytes;
  *p += 8 + nbytes;
  return core::OkStatus();
}

}  // namespace

core::Result<TorchLegacyCheckpoint> ReadTorchLegacyCheckpoint(std::span<const uint8_t> file,
                                                              const ScanOptions& options,
                                                              uint64_t max_records) {
  // _legacy_load: five pickles back to back, then the storages.
  static const char* const kRoles[] = {"the magic number", "the protocol version", "sys_info",
                                       "the object pickle", "the storage key list"};
  uint64_t begin[5], end[5];
  uint64_t p = 0;
  std::optional<int64_t> version;
  for (int i = 0; i < 5; ++i) {
    std::optional<int64_t> value;
    auto e = TorchPickleEnd(file, p, &value);
    if (!e) {
      return Err(Code::kConvUnsupported, p,
                 std::string("not a legacy torch checkpoint: ") + kRoles[i] + " is not a whole pickle");
    }
    if (i == 1) version = value;
    begin[i] = p;
    end[i] = *e;
    p = *e;
  }
  auto slice = [&](int i) { return file.subspan(begin[i], end[i] - begin[i]); };
  if (!IsTorchLegacyMagic(slice(0))) {
    return Err(Code::kConvUnsupported, 0, "not a legacy torch checkpoint: no torch magic number");
  }
  if (version != 1001) {
    return Err(Code::kConvUnsupported, begin[1], "not a legacy torch checkpoint: protocol version is not 1001");
  }
  // sys_info (byte order, type sizes) is unpickled and then unused by
  // torch 1.13: the storages are read as little-endian whatever it says.
  auto info = OnePickle(slice(2), begin[2], options, "sys_info");
  if (!info.ok()) return info.error();
  auto object = OnePickle(slice(3), begin[3], options, "the object pickle");
  if (!object.ok()) return object.error();
  TorchLegacyCheckpoint out;
  out.pickle_offset = begin[3];
  out.graph = std::move(object.value().graphs.front());
  std::map<std::string, LegacyId> ids;
  if (auto s = LegacyIds(out.graph, &ids); !s.ok()) return s.error();
  auto keys = TorchLegacyStorageKeys(slice(4));
  if (!keys) {
    return Err(Code::kConvUnsupported, begin[4], "the storage key list is not a plain list of str");
  }
  if (keys->size() > max_records) {
    return Err(Code::kConvLimit, begin[4],
               N(keys->size()) + " storages listed, over max_tensors (" + N(max_records) + ")");
  }
  std::set<std::string_view> seen;
  for (std::string_view key : *keys) {
    if (!seen.insert(key).second) {
      return Err(Code::kConvStorage, begin[4], "storage " + core::Quoted(key, 60) + " is listed twice");
    }
    auto id = ids.find(std::string(key));
    if (id == ids.end()) {  // torch: `assert key in deserialized_objects`
      return Err(Code::kConvStorage, begin[4],
                 "storage " + core::Quoted(key, 60) + " is listed but no persistent id names it");
    }
    TorchLegacyStorage s;
    if (auto st = ReadStorage(file, 0, &p, std::string(key), id->second.type, "the end of the file", &s); !st.ok()) {
      return st.error();
    }
    out.storages.push_back(std::move(s));
  }
  return out;
}

namespace {

// TarMemberBytes: the data of one of torch's members, which must be a
// regular member whose bytes lie in the file (extract() writes them, so a
// link would load a host file or another member).
core::Status TarMemberBytes(std::span<const uint8_t> file, const TarArchive& tar, const char* name,
                            const TarMember* m, std::span<const uint8_t>* out) {
  const TarMember* named = nullptr;
  for (const auto& x : tar.members) {
    if (x.name == name) named = &x;
  }
  if (m == nullptr || named == nullptr) {
    return Err(Code::kConvUnsupported, 0, std::string("the tar has no usable \"") + name + "\" member");
  }
  if (named != m || m->type != TarType::kRegular) {
    return Err(Code::kConvUnsupported, named->header_offset,
               std::string("tar member \"") + name + "\" is a " + std::string(TarTypeName(named->type)) +
                   ", not a regular member: not converted");
  }
  if (!m->data_in_bounds || m->data_offset > file.size() || m->size > file.size() - m->data_offset) {
    return Err(Code::kConvStorage, m->header_offset,
               std::string("tar member \"") + name + "\" runs past the end of the file");
  }
  *out = file.subspan(m->data_offset, m->size);
  return core::OkStatus();
}

// Count reads a member's leading pickle, an int: how many records follow.
core::Result<uint64_t> Count(std::span<const uint8_t> b, uint64_t base, uint64_t* p, const char* member,
                             uint64_t max_records) {
  std::optional<int64_t> value;
  auto e = TorchPickleEnd(b, *p, &value);
  if (!e || !value || *value < 0) {
    return Err(Code::kConvUnsupported, base + *p,
               std::string("tar member \"") + member + "\" does not start with a count pickle");
  }
  if (static_cast<uint64_t>(*value) > max_records) {
    return Err(Code::kConvLimit, base + *p,
               std::string("tar member \"") + member + "\" holds " + N(static_cast<uint64_t>(*value)) +
                   " records, over max_tensors (" + N(max_records) + ")");
  }
  *p = *e;
  return static_cast<uint64_t>(*value);
}

// Record reads one record pickle at `*p`: a tuple of three.
core::Result<PickleAnalysis> Record(std::span<const uint8_t> b, uint64_t base, uint64_t* p, const ScanOptions& options,
                                    const char* member) {
  auto e = TorchPickleEnd(b, *p, nullptr);
  if (!e) {
    return Err(Code::kConvUnsupported, base + *p,
               std::string("tar member \"") + member + "\": no whole record pickle");
  }
  auto a = OnePickle(b.subspan(*p, *e - *p), base + *p, options, std::string("a record of \"") + member + "\"");
  if (!a.ok()) return a.error();
  const PickleGraph& g = a.value().graphs.front();
  const PickleNode* root = NodeAt(g, g.root);
  if (root == nullptr || root->kind != Kind::kTuple || root->items.size() != 3) {
    return Err(Code::kConvUnsupported, base + *p,
               std::string("a record of \"") + member + "\" is not a tuple of three");
  }
  *p = *e;
  return a;
}

}  // namespace

core::Result<TorchLegacyCheckpoint> ReadTorchTarCheckpoint(std::span<const uint8_t> file,
                                                           const ScanOptions& options,
                                                           uint64_t max_records) {
  MemorySource src(file);
  std::vector<Finding> findings;
  auto tr = ReadTar(src, TarLimits{}, &findings);
  if (!tr.ok()) return tr.error();
  const TarArchive& tar = tr.value();
  if (tar.loader_fails || tar.incomplete || !LooksLikeTorchTar(tar)) {
    return Err(Code::kConvUnsupported, 0, "not a tar that torch's legacy loader reads whole");
  }
  TorchTarMembers m = FindTorchTarMembers(tar, &findings);
  std::span<const uint8_t> sb, tb, pb;
  if (auto s = TarMemberBytes(file, tar, "storages", m.storages, &sb); !s.ok()) return s.error();
  if (auto s = TarMemberBytes(file, tar, "tensors", m.tensors, &tb); !s.ok()) return s.error();
  if (auto s = TarMemberBytes(file, tar, "pickle", m.pickle, &pb); !s.ok()) return s.error();
  // Each member its own bytes: a global PAX size can stretch one over
  // the next; such a file is refused rather than read twice.
  const TarMember* ms[3] = {m.storages, m.tensors, m.pickle};
  for (int i = 0; i < 3; ++i) {
    for (int j = i + 1; j < 3; ++j) {
      const TarMember& a = *ms[i];
      const TarMember& b = *ms[j];
      if (a.data_offset < b.data_offset + b.size && b.data_offset < a.data_offset + a.size) {
        return Err(Code::kConvStorage, std::max(a.data_offset, b.data_offset),
                   "tar members " + core::Quoted(a.name, 40) + " and " + core::Quoted(b.name, 40) + " overlap");
      }
    }
  }
  TorchLegacyCheckpoint out;
  out.tar = true;
  std::set<std::string> keys;  // storages and tensors share legacy_load's one dict
  std::map<std::string, uint64_t> storage_numel;

  // "storages": count, then (key, location, storage_type) and raw bytes.
  const uint64_t sbase = m.storages->data_offset;
  uint64_t p = 0;
  auto count = Count(sb, sbase, &p, "storages", max_records);
  if (!count.ok()) return count.error();
  for (uint64_t i = 0; i < count.value(); ++i) {
    const uint64_t at = sbase + p;
    auto rec = Record(sb, sbase, &p, options, "storages");
    if (!rec.ok()) return rec.error();
    const PickleGraph& g = rec.value().graphs.front();
    const auto& items = g.nodes[g.root].items;
    auto key = NonNegative(NodeAt(g, items[0]));
    const PickleNode* loc = NodeAt(g, items[1]);
    const PickleNode* type = NodeAt(g, items[2]);
    if (!key || loc == nullptr || loc->kind != Kind::kStr || type == nullptr || type->kind != Kind::kGlobal ||
        type->text != "torch") {
      return Err(Code::kConvUnsupported, at, "a storage record is not (int key, str location, torch.<T>Storage)");
    }
    if (!keys.insert(N(*key)).second) {
      return Err(Code::kConvStorage, at, "storage key " + N(*key) + " is used twice");
    }
    TorchLegacyStorage s;
    if (auto st = ReadStorage(sb, sbase, &p, N(*key), type->qualname, "the \"storages\" member", &s); !st.ok()) {
      return st.error();
    }
    storage_numel[s.key] = s.numel;
    out.storages.push_back(std::move(s));
  }
  {
    const uint64_t at = sbase + p;
    auto e = TorchPickleEnd(sb, p, nullptr);
    if (!e) return Err(Code::kConvUnsupported, at, "the \"storages\" member has no storage_views pickle");
    auto views = OnePickle(sb.subspan(p, *e - p), at, options, "storage_views");
    if (!views.ok()) return views.error();
    const PickleGraph& g = views.value().graphs.front();
    const PickleNode* root = NodeAt(g, g.root);
    if (root == nullptr || root->kind != Kind::kList || !root->items.empty()) {
      return Err(Code::kConvUnsupported, at, "storage views (a non-empty storage_views list) are not converted");
    }
  }

  // "tensors": count, then (key, storage_id, tensor_type) and metadata.
  const uint64_t tbase = m.tensors->data_offset;
  p = 0;
  count = Count(tb, tbase, &p, "tensors", max_records);
  if (!count.ok()) return count.error();
  for (uint64_t i = 0; i < count.value(); ++i) {
    const uint64_t at = tbase + p;
    auto rec = Record(tb, tbase, &p, options, "tensors");
    if (!rec.ok()) return rec.error();
    const PickleGraph& g = rec.value().graphs.front();
    const auto& items = g.nodes[g.root].items;
    auto key = NonNegative(NodeAt(g, items[0]));
    auto sid = NonNegative(NodeAt(g, items[1]));
    if (!key || !sid) return Err(Code::kConvUnsupported, at, "a tensor record is not (int key, int storage id, type)");
    TorchTarTensor t;
    t.key = N(*key);
    t.storage_key = N(*sid);
    t.offset = at;
    if (!keys.insert(t.key).second) return Err(Code::kConvStorage, at, "tensor key " + t.key + " is used twice");
    if (storage_numel.find(t.storage_key) == storage_numel.end()) {
      return Err(Code::kConvStorage, at, "tensor " + t.key + " names storage " + t.storage_key + ", which is not stored");
    }
    // int32 ndim, 4 unused bytes, ndim int64 sizes and strides, int64 offset.
    if (tb.size() - p < 8) return Err(Code::kConvStorage, tbase + p, "tensor metadata runs past the member");
    const uint32_t nd = tb[p] | tb[p + 1] << 8 | tb[p + 2] << 16 | static_cast<uint32_t>(tb[p + 3]) << 24;
    if (nd & 0x80000000u) return Err(Code::kConvStorage, tbase + p, "tensor " + t.key + " has a negative rank");
    const uint64_t meta = 8 + 16 * static_cast<uint64_t>(nd) + 8;
    if (meta > tb.size() - p) {
      return Err(Code::kConvStorage, tbase + p, "tensor metadata of rank " + N(nd) + " runs past the member");
    }
    auto field = [&](uint64_t k) { return static_cast<int64_t>(Le64(tb, p + 8 + 8 * k)); };
    for (uint64_t d = 0; d < 2 * static_cast<uint64_t>(nd) + 1; ++d) {
      if (field(d) < 0) {
        return Err(Code::kConvStorage, tbase + p + 8 + 8 * d,
                   "tensor " + t.key + " has a negative size, stride or storage offset");
      }
    }
    for (uint64_t d = 0; d < nd; ++d) {
      t.sizes.push_back(static_cast<uint64_t>(field(d)));
      t.strides.push_back(static_cast<uint64_t>(field(nd + d)));
    }
    t.storage_offset = static_cast<uint64_t>(field(2 * static_cast<uint64_t>(nd)));
    p += meta;
    out.tensors.push_back(std::move(t));
  }

  // "pickle": one pickle, its ids naming tensors by key.
  auto object = OnePickle(pb, m.pickle->data_offset, options, "the \"pickle\" member");
  if (!object.ok()) return object.error();
  out.pickle_offset = m.pickle->data_offset;
  out.graph = std::move(object.value().graphs.front());
  return out;
}

}  // namespace modelgate::scanner
