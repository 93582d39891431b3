// The legacy torch.save tar layout (torch < 1.6): which members
// torch.serialization's legacy_load reads from a tar that tarfile lists,
// and how it walks each member (pickles and raw storage bytes in turn), so
// that every pickle stream it would unpickle is judged on its own.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "modelgate/scanner.h"
#include "tar.h"

namespace modelgate::scanner {

// LooksLikeTorchTar: the archive has members named "storages", "tensors"
// and "pickle", the three torch's legacy loader reads. Such a file (a tar
// at offset 0 that tarfile lists without error) loads through
// torch.serialization legacy_load.
bool LooksLikeTorchTar(const TarArchive& tar);

// TorchTarMembers are the members legacy_load reads, resolved as it reads
// them ("storages" and "tensors" with extract(), "pickle" with
// extractfile()); nullptr where absent or unresolvable.
struct TorchTarMembers {
  const TarMember* storages = nullptr;
  const TarMember* tensors = nullptr;
  const TarMember* pickle = nullptr;
};

// FindTorchTarMembers resolves the three members. A link among them that
// the loader follows out of the archive (or that cannot be resolved) is
// MG-TAR-LINK (critical): the bytes loaded are not in the file. A link that
// resolves inside is MG-TAR-LINK (high): the analyzed bytes are the
// target's.
TorchTarMembers FindTorchTarMembers(const TarArchive& tar, std::vector<Finding>* findings);

// --- torch legacy tar members ---
// torch.serialization._legacy_load(…).legacy_load reads, in this order:
//  1. "storages" (extracted to disk): pickle N (the storage count); then N
//     times: pickle (key, location, storage_type) followed by raw storage
//     bytes (int64 LE element count, then count * element_size bytes, the
//     element size from storage_type's dtype); then pickle storage_views.
//  2. "tensors" (extracted to disk): pickle M (the tensor count); then M
//     times: pickle (key, storage_id, tensor_type) followed by raw metadata
//     (int32 LE ndim, 4 unused bytes, ndim int64 sizes, ndim int64 strides,
//     int64 storage offset).
//  3. "pickle" (extractfile): one pickle, loaded with persistent_load and a
//     find_class that maps any name containing "Storage" to a StorageType.
// Every pickle above is unpickled with the full unpickler (not weights-only
// in torch < 2.6), so every one of them can run code.

// TorchTarPickle is one pickle stream inside a member, in load order.
struct TorchTarPickle {
  uint64_t begin = 0;  // member-relative offset of its first byte
  uint64_t end = 0;    // just past STOP, or the member's end when the walk failed
  std::string role;    // "count", "storage args", "storage views", "tensor args", "object"
};

// TorchTarLayout is how the loader walks one member.
struct TorchTarLayout {
  std::vector<TorchTarPickle> pickles;  // run the pickle machine on each, alone
  // False when the walk could not follow the loader to the member's end
  // (the last pickle then runs to the member's end, and a finding says why).
  bool complete = false;
  uint64_t consumed = 0;  // member bytes the loader reads
};

// SplitTorchTarMember walks `bytes` (the member `member_name`, which is
// "storages", "tensors" or "pickle") as legacy_load reads it and returns the
// pickle streams to analyze. Counts and element sizes are read from simple
// pickles (an int; a tuple holding a torch.*Storage global); anything else
// stops the walk with MG-TAR-TORCH-LAYOUT (high) and hands the rest to the
// pickle machine as one stream. `findings` get `member_name` as member and
// `member_base` + member offset as offset.
TorchTarLayout SplitTorchTarMember(std::string_view member_name, std::span<const uint8_t> bytes,
                                   uint64_t member_base, std::vector<Finding>* findings);

// --- torch legacy file (not a tar) ---
// When tarfile cannot open the file, torch.serialization._legacy_load reads
// five pickles back to back — the magic number 0x1950a86a20f9469cfc6c, the
// protocol version 1001, sys_info, the object (its persistent ids name
// each storage's key and type) and the list of storage keys — then, for
// each key in that list, the storage's raw bytes (_set_from_file: int64 LE
// element count, then count * element size bytes). Those bytes are data
// the loader reads, not trailing bytes.

// TorchLegacyStoragesEnd is the offset (in `a`'s absolute offsets, the
// input being `bytes` from `base`) just past the last storage torch reads
// after the five pickles of `a`, or nullopt when the streams are not that
// layout exactly or the loader would fail on the storages (a key without a
// storage id of a known type, a count or size past the input): then what
// follows the pickles stays unexplained.
std::optional<uint64_t> TorchLegacyStoragesEnd(std::span<const uint8_t> bytes, uint64_t base,
                                               const PickleAnalysis& a);

// ExplainTorchLegacyStorages replaces `a`'s trailing-data anomaly after the
// fifth pickle by one after the storages torch reads (none when they end
// the input). Only for the analysis of a whole file at offset 0, which is
// what torch.load reads this way.
void ExplainTorchLegacyStorages(std::span<const uint8_t> bytes, uint64_t base, PickleAnalysis* a);

// --- shared with the conversion readers (torch_legacy_checkpoint.cc) ---

// TorchPickleEnd is just past the STOP of the pickle starting at `at` of
// `bytes`, found by opcode lengths only (nullopt when none ends there);
// `int_value` is set when the pickle is a lone int.
std::optional<uint64_t> TorchPickleEnd(std::span<const uint8_t> bytes, uint64_t at,
                                       std::optional<int64_t>* int_value);

// IsTorchLegacyMagic: the pickle is torch's MAGIC_NUMBER.
bool IsTorchLegacyMagic(std::span<const uint8_t> pickle);

// TorchLegacyStorageKeys is the fifth pickle's list of str, in order.
std::optional<std::vector<std::string_view>> TorchLegacyStorageKeys(std::span<const uint8_t> pickle);

// TorchStorageElementBytes is the element size of torch.<name>, 0 when
// `name` is no storage type torch knows.
uint64_t TorchStorageElementBytes(std::string_view name);

}  // namespace modelgate::scanner
