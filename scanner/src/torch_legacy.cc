// The legacy torch tar layout, as torch.serialization._legacy_load's
// legacy_load reads it (torch < 1.6 wrote it; torch.load still reads it
// when tarfile lists the file). The pickle streams are located by opcode
// lengths only; the pickle machine judges each of them.
#include "torch_legacy.h"

#include <algorithm>
#include <optional>
#include <unordered_map>
#include <utility>

#include "pickle_opcodes.h"

namespace modelgate::scanner {
namespace {

using core::Severity;

// One pickle per storage and per tensor: bounded so a member of tiny
// pickles cannot make the list unbounded.
constexpr uint64_t kMaxTorchPickles = 1'000'000;

void Add(std::vector<Finding>* out, const char* id, Severity sev, std::string message,
         uint64_t offset, const std::string& member = "") {
  out->push_back(MakeFinding(id, sev, std::move(message), offset, member));
}

std::string N(uint64_t v) { return std::to_string(v); }

}  // namespace

bool LooksLikeTorchTar(const TarArchive& tar) {
  bool s = false, t = false, p = false;
  for (const auto& m : tar.members) {
    s |= m.name == "storages";
    t |= m.name == "tensors";
    p |= m.name == "pickle";
  }
  return s && t && p;
}

TorchTarMembers FindTorchTarMembers(const TarArchive& tar, std::vector<Finding>* findings) {
  TorchTarMembers out;
  struct Want {
    const char* name;
    TarAccess access;
    const TarMember** slot;
  };
  const Want wants[] = {{"storages", TarAccess::kExtract, &out.storages},
                        {"tensors", TarAccess::kExtract, &out.tensors},
                        {"pickle", TarAccess::kExtractFile, &out.pickle}};
  for (const auto& w : wants) {
    const TarMember* named = nullptr;
    for (const auto& m : tar.members) {
      if (m.name == w.name) named = &m;
    }
    if (named == nullptr) continue;
    *w.slot = ResolveTarMember(tar, w.name, w.access);
    if (named->type != TarType::kSymlink && named->type != TarType::kHardlink) continue;
    if (*w.slot == nullptr) {
      Add(findings, "MG-TAR-LINK", Severity::kCritical,
          std::string("torch member \"") + w.name + "\" is a link the loader follows out of the "
          "archive (to " + core::Quoted(named->linkname) + "); the bytes it loads are not in the file",
          named->header_offset, named->name);
    } else {
      Add(findings, "MG-TAR-LINK", Severity::kHigh,
          std::string("torch member \"") + w.name + "\" is a link; the loader reads " +
              core::Quoted((*w.slot)->name),
          named->header_offset, named->name);
    }
  }
  return out;
}

namespace {

struct Walked {
  bool ok = false;
  uint64_t end = 0;                 // just past STOP
  std::optional<int64_t> int_value;  // the pickle is a lone int
  std::string storage_class;         // last GLOBAL/STACK_GLOBAL name ending "Storage"
};

// WalkPickle finds where the pickle starting at `at` ends (its STOP) by
// opcode lengths only; it also notes a lone int and torch storage globals.
Walked WalkPickle(std::span<const uint8_t> b, uint64_t at) {
  Walked w;
  uint64_t p = at;
  uint64_t value_ops = 0;  // opcodes that push a value (a lone int is one)
  std::optional<int64_t> value;
  std::string last_str[2];  // the last two strings pushed (STACK_GLOBAL's)
  std::string global_name;
  // Opcode lengths come from the scanner's one opcode table.
  core::ByteReader r(b);
  if (!r.Skip(at).ok()) return w;
  while (r.remaining() > 0) {
    const uint8_t op = r.Take(1).value()[0];
    const pickle_internal::Opcode* code = pickle_internal::FindOpcode(op);
    if (code == nullptr) return w;
    pickle_internal::OpcodeArgs args;
    if (!pickle_internal::ReadOpcodeArgs(*code, r, &args)) return w;
    const std::span<const uint8_t> arg = args.first;
    p = r.offset();
    if (code->arg == pickle_internal::OpArg::kTwoLines) {
      global_name.assign(args.second.begin(), args.second.end());
    }
    if (op == 0x8c || op == 'X' || op == 0x8d) {  // string pushed for STACK_GLOBAL
      last_str[0] = std::move(last_str[1]);
      last_str[1].assign(arg.begin(), arg.end());
    }
    switch (op) {
      case 'K': value = arg[0]; ++value_ops; break;
      case 'M': value = arg[0] | (arg[1] << 8); ++value_ops; break;
      case 'J': {
        const uint32_t u = arg[0] | arg[1] << 8 | arg[2] << 16 | static_cast<uint32_t>(arg[3]) << 24;
        value = static_cast<int32_t>(u);
        ++value_ops;
        break;
      }
      case 'I': case 'L': {
        std::string s(arg.begin(), arg.end());
        if (!s.empty() && s.back() == 'L') s.pop_back();
        if (!s.empty() && s.size() <= 18 && s.find_first_not_of("0123456789") == std::string::npos) {
          value = std::stoll(s);
        } else {
          value.reset();
        }
        ++value_ops;
        break;
      }
      case 0x8a: {  // LONG1, little-endian two's complement
        if (arg.size() <= 8) {
          uint64_t u = 0;
          for (size_t i = arg.size(); i > 0; --i) u = (u << 8) | arg[i - 1];
          // Negative: sign-extend the two's complement to 64 bits.
          if (!arg.empty() && (arg.back() & 0x80) && arg.size() < 8) u |= ~uint64_t{0} << (8 * arg.size());
          value = static_cast<int64_t>(u);
        }
        ++value_ops;
        break;
      }
      case 'c': case 'i':
        if (global_name.ends_with("Storage")) w.storage_class = global_name;
        ++value_ops;
        break;
      case 0x93:
        if (last_str[1].ends_with("Storage")) w.storage_class = last_str[1];
        ++value_ops;
        break;
      case 0x80: case 0x95: break;  // PROTO, FRAME
      case '.':
        w.ok = true;
        w.end = p;
        if (value_ops == 1 && value) w.int_value = value;
        return w;
      default: ++value_ops; break;
    }
  }
  return w;
}

uint64_t ElementBytes(std::string_view cls) {
  static constexpr std::pair<std::string_view, uint64_t> kSizes[] = {
      {"DoubleStorage", 8}, {"FloatStorage", 4},   {"HalfStorage", 2},
      {"BFloat16Storage", 2}, {"LongStorage", 8},  {"IntStorage", 4},
      {"ShortStorage", 2},  {"CharStorage", 1},    {"ByteStorage", 1},
      {"BoolStorage", 1},   {"ComplexDoubleStorage", 16}, {"ComplexFloatStorage", 8},
      {"QUInt8Storage", 1}, {"QInt8Storage", 1},   {"QInt32Storage", 4},
      {"QUInt4x2Storage", 1}, {"QUInt2x4Storage", 1}};
  for (const auto& [name, bytes] : kSizes) {
    if (cls == name) return bytes;
  }
  return 0;
}

uint64_t Le64(std::span<const uint8_t> b, uint64_t at) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | b[at + i];
  return v;
}

// TorchWalk follows legacy_load through one member, pickle by pickle.
class TorchWalk {
 public:
  TorchWalk(std::string_view member_name, std::span<const uint8_t> bytes, uint64_t member_base,
            std::vector<Finding>* findings)
      : member_(member_name), bytes_(bytes), base_(member_base), findings_(findings) {}

  TorchTarLayout Run() {
    if (member_ == "pickle") {
      if (One("object")) Complete();
      return std::move(out_);
    }
    const bool storages = member_ == "storages";
    if (!storages && member_ != "tensors") {
      Stop("not a legacy torch member", "object");
      return std::move(out_);
    }
    auto count = One("count");
    if (!count) return std::move(out_);
    if (!count->int_value || *count->int_value < 0) {
      Stop("the count is not a plain non-negative int", "unknown");
      return std::move(out_);
    }
    for (int64_t i = 0; i < *count->int_value; ++i) {
      auto args = One(storages ? "storage args" : "tensor args");
      if (!args || !(storages ? StorageBytes(*args) : TensorMetadata())) return std::move(out_);
    }
    if (storages && !One("storage views")) return std::move(out_);
    Complete();
    return std::move(out_);
  }

 private:
  // Stop: the loader fails here or the walk cannot follow it; the pickle
  // machine gets the rest (what runs before a failure still runs).
  void Stop(const std::string& why, const char* role) {
    Add(findings_, "MG-TAR-TORCH-LAYOUT", Severity::kHigh,
        "cannot follow the legacy loader through " + core::Quoted(member_) + " at " + N(p_) +
            ": " + why + "; the rest is analyzed as one pickle stream",
        base_ + p_, member_);
    if (p_ < bytes_.size()) out_.pickles.push_back({p_, bytes_.size(), role});
    out_.consumed = bytes_.size();
  }

  void Complete() {
    out_.complete = true;
    out_.consumed = p_;
  }

  std::optional<Walked> One(const char* role) {
    if (out_.pickles.size() >= kMaxTorchPickles) {
      Stop("more than " + N(kMaxTorchPickles) + " pickles", role);
      return std::nullopt;
    }
    Walked w = WalkPickle(bytes_, p_);
    if (!w.ok) {
      Stop("no complete pickle", role);
      return std::nullopt;
    }
    out_.pickles.push_back({p_, w.end, role});
    p_ = w.end;
    return w;
  }

  // StorageBytes skips one storage's raw bytes: int64 LE element count,
  // then count * element size bytes (_load_from_bytes/readinto).
  bool StorageBytes(const Walked& args) {
    const uint64_t elem = ElementBytes(args.storage_class);
    if (elem == 0) {
      Stop("storage type " + core::Quoted(args.storage_class) + " has no known element size",
           "unknown");
      return false;
    }
    if (bytes_.size() - p_ < 8) {
      Stop("storage size truncated", "unknown");
      return false;
    }
    const uint64_t numel = Le64(bytes_, p_);
    uint64_t nbytes = 0;
    if (__builtin_mul_overflow(numel, elem, &nbytes) || nbytes > bytes_.size() - p_ - 8) {
      Stop("storage of " + N(numel) + " elements runs past the member", "unknown");
      return false;
    }
    p_ += 8 + nbytes;
    return true;
  }

  // TensorMetadata skips one tensor's raw metadata: int32 ndim, 4 unused
  // bytes, ndim int64 sizes and strides, an int64 storage offset.
  bool TensorMetadata() {
    if (bytes_.size() - p_ < 8) {
      Stop("tensor metadata truncated", "unknown");
      return false;
    }
    const uint32_t ndim = bytes_[p_] | bytes_[p_ + 1] << 8 | bytes_[p_ + 2] << 16 |
                          static_cast<uint32_t>(bytes_[p_ + 3]) << 24;
    // ndim < 2^31 here, so the sum fits easily in 64 bits.
    const uint64_t meta = 8 + 16 * static_cast<uint64_t>(ndim) + 8;
    if ((ndim & 0x80000000u) || meta > bytes_.size() - p_) {
      Stop("tensor metadata of rank " + N(ndim) + " runs past the member", "unknown");
      return false;
    }
    p_ += meta;
    return true;
  }

  const std::string member_;
  const std::span<const uint8_t> bytes_;
  const uint64_t base_;
  std::vector<Finding>* const findings_;
  TorchTarLayout out_;
  uint64_t p_ = 0;  // member offset the loader reads next; always <= bytes_.size()
};

}  // namespace

TorchTarLayout SplitTorchTarMember(std::string_view member_name, std::span<const uint8_t> bytes,
                                   uint64_t member_base, std::vector<Finding>* findings) {
  return TorchWalk(member_name, bytes, member_base, findings).Run();
}

namespace {

// WithoutProtoFrame is `b` after a leading PROTO and FRAME (either optional).
std::span<const uint8_t> WithoutProtoFrame(std::span<const uint8_t> b) {
  if (b.size() >= 2 && b[0] == 0x80) b = b.subspan(2);
  if (b.size() >= 9 && b[0] == 0x95) b = b.subspan(9);
  return b;
}

// IsTorchMagic: the pickle is torch's MAGIC_NUMBER, 0x1950a86a20f9469cfc6c,
// as pickle writes it: LONG1 (protocol 2+) or a text LONG (protocols 0, 1).
bool IsTorchMagic(std::span<const uint8_t> b) {
  static constexpr uint8_t kLong1[] = {0x8a, 0x0a, 0x6c, 0xfc, 0x9c, 0x46, 0xf9,
                                       0x20, 0x6a, 0xa8, 0x50, 0x19, '.'};
  static constexpr std::string_view kText = "L119547037146038801333356L\n.";
  b = WithoutProtoFrame(b);
  const std::string_view text(reinterpret_cast<const char*>(b.data()), b.size());
  return text == kText || std::equal(b.begin(), b.end(), std::begin(kLong1), std::end(kLong1));
}

// StorageKeys reads the fifth pickle, a list of str (pickle.dump of
// torch's sorted storage keys), written by any protocol: the keys in list
// order, or nullopt for anything but such a list.
std::optional<std::vector<std::string_view>> StorageKeys(std::span<const uint8_t> b) {
  enum class Item : uint8_t { kList, kMark, kStr };
  std::vector<Item> stack;
  std::vector<std::string_view> strs;  // the str items on `stack`, in order
  std::vector<std::string_view> keys;
  core::ByteReader r(b);
  auto pop_to_list = [&](size_t from) {  // stack[from..] are strs, appended
    for (size_t i = from; i < stack.size(); ++i) {
      if (stack[i] != Item::kStr) return false;
    }
    const size_t n = stack.size() - from;
    keys.insert(keys.end(), strs.end() - static_cast<long>(n), strs.end());
    strs.resize(strs.size() - n);
    stack.resize(from);
    return !stack.empty() && stack.back() == Item::kList;
  };
  auto last_mark = [&]() -> std::optional<size_t> {
    for (size_t i = stack.size(); i > 0; --i) {
      if (stack[i - 1] == Item::kMark) return i - 1;
    }
    return std::nullopt;
  };
  while (r.remaining() > 0) {
    const uint8_t op = r.Take(1).value()[0];
    const pickle_internal::Opcode* code = pickle_internal::FindOpcode(op);
    if (code == nullptr) return std::nullopt;
    pickle_internal::OpcodeArgs args;
    if (!pickle_internal::ReadOpcodeArgs(*code, r, &args)) return std::nullopt;
    const std::string_view arg(reinterpret_cast<const char*>(args.first.data()), args.first.size());
    switch (op) {
      case 0x80: case 0x95: case 'q': case 'r': case 0x94: case 'p': break;  // PROTO FRAME puts
      case ']':
        if (!stack.empty()) return std::nullopt;
        stack.push_back(Item::kList);
        break;
      case '(': stack.push_back(Item::kMark); break;
      case 'l': {  // LIST: the items since the mark
        auto m = last_mark();
        if (!m || *m != 0) return std::nullopt;
        stack.erase(stack.begin());
        stack.insert(stack.begin(), Item::kList);
        if (!pop_to_list(1)) return std::nullopt;
        break;
      }
      case 'V':  // UNICODE: raw-unicode-escape; plain ASCII reads as itself
        if (arg.find('\\') != std::string_view::npos ||
            std::any_of(arg.begin(), arg.end(), [](char c) { return (c & 0x80) != 0; })) {
          return std::nullopt;
        }
        [[fallthrough]];
      case 'X': case 0x8c: case 0x8d:
        stack.push_back(Item::kStr);
        strs.push_back(arg);
        break;
      case 'a':
        if (stack.size() < 2 || !pop_to_list(stack.size() - 1)) return std::nullopt;
        break;
      case 'e': {
        auto m = last_mark();
        if (!m) return std::nullopt;
        stack.erase(stack.begin() + static_cast<long>(*m));
        if (!pop_to_list(*m)) return std::nullopt;
        break;
      }
      case '.':
        if (stack.size() != 1 || stack[0] != Item::kList || r.remaining() != 0) return std::nullopt;
        return keys;
      default: return std::nullopt;
    }
  }
  return std::nullopt;
}

}  // namespace

std::optional<uint64_t> TorchLegacyStoragesEnd(std::span<const uint8_t> bytes, uint64_t base,
                                               const PickleAnalysis& a) {
  std::vector<const PickleStream*> top;
  for (const auto& st : a.streams) {
    if (st.depth == 0) top.push_back(&st);
  }
  if (top.size() != 5 || a.torch_storages_cut || a.incomplete) return std::nullopt;
  auto slice = [&](const PickleStream& st) -> std::optional<std::span<const uint8_t>> {
    if (!st.complete || st.offset < base || st.end < st.offset || st.end - base > bytes.size()) {
      return std::nullopt;
    }
    return bytes.subspan(static_cast<size_t>(st.offset - base), static_cast<size_t>(st.end - st.offset));
  };
  std::span<const uint8_t> pickles[5];
  for (size_t i = 0; i < 5; ++i) {
    auto b = slice(*top[i]);
    if (!b) return std::nullopt;
    pickles[i] = *b;
  }
  // torch raises on another magic number or protocol version.
  if (!IsTorchMagic(pickles[0])) return std::nullopt;
  const Walked version = WalkPickle(pickles[1], 0);
  if (!version.ok || version.end != pickles[1].size() || version.int_value != 1001) return std::nullopt;
  auto keys = StorageKeys(pickles[4]);
  if (!keys) return std::nullopt;
  // persistent_load keeps the first id of each key; element sizes by the
  // storage type's name (UnpicklerWrapper.find_class -> StorageType).
  const uint32_t object_stream = static_cast<uint32_t>(top[3] - a.streams.data());
  std::unordered_map<std::string_view, uint64_t> element_bytes;
  for (const auto& t : a.torch_storages) {
    if (t.stream == object_stream) element_bytes.try_emplace(t.key, ElementBytes(t.storage_type));
  }
  uint64_t p = top[4]->end - base;  // <= bytes.size(): checked by slice
  for (std::string_view key : *keys) {
    auto it = element_bytes.find(key);  // absent: `assert key in deserialized_objects` fails
    const uint64_t elem = it == element_bytes.end() ? 0 : it->second;
    if (elem == 0 || bytes.size() - p < 8) return std::nullopt;
    const uint64_t numel = Le64(bytes, p);
    uint64_t nbytes = 0;
    if (__builtin_mul_overflow(numel, elem, &nbytes) || nbytes > bytes.size() - p - 8) {
      return std::nullopt;
    }
    p += 8 + nbytes;
  }
  return base + p;
}

void ExplainTorchLegacyStorages(std::span<const uint8_t> bytes, uint64_t base, PickleAnalysis* a) {
  auto trailing = std::find_if(a->anomalies.begin(), a->anomalies.end(), [](const PickleAnomaly& an) {
    return an.kind == PickleAnomalyKind::kTrailingData;
  });
  if (trailing == a->anomalies.end()) return;
  auto end = TorchLegacyStoragesEnd(bytes, base, *a);
  if (!end) return;
  // The anomaly sits where the fifth pickle ends: the storages start there.
  const PickleStream* fifth = nullptr;
  for (const auto& st : a->streams) {
    if (st.depth == 0) fifth = &st;
  }
  if (fifth == nullptr || trailing->offset != fifth->end) return;
  const uint64_t input_end = base + bytes.size();
  if (*end == input_end) {
    a->anomalies.erase(trailing);
    return;
  }
  trailing->offset = *end;
  trailing->message = N(input_end - *end) + " bytes after the storages that torch.load reads "
                      "(legacy format) are read by no loader";
}

std::optional<uint64_t> TorchPickleEnd(std::span<const uint8_t> bytes, uint64_t at,
                                       std::optional<int64_t>* int_value) {
  const Walked w = WalkPickle(bytes, at);
  if (int_value != nullptr) *int_value = w.int_value;
  if (!w.ok) return std::nullopt;
  return w.end;
}

bool IsTorchLegacyMagic(std::span<const uint8_t> pickle) { return IsTorchMagic(pickle); }

std::optional<std::vector<std::string_view>> TorchLegacyStorageKeys(std::span<const uint8_t> pickle) {
  return StorageKeys(pickle);
}

uint64_t TorchStorageElementBytes(std::string_view name) { return ElementBytes(name); }

}  // namespace modelgate::scanner
