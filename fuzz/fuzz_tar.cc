// fuzz_tar: the tar lister, member extraction and the torch legacy member
// walk, in memory. Invariants: no crash; every finding is an MG-TAR-* id
// with an offset inside the input; data_in_bounds is exactly "the data
// lies inside the input" (no wrapped offset or size); member headers move
// strictly forward; a listing tarfile opens (no loader_fails) that is
// complete has every data member inside the input; an incomplete listing
// says why (limit or unsupported, with its finding); a header LooksLikeTar
// accepts never fails its checksum in ReadTar; extraction returns exactly
// the member's bytes; the torch walk returns ordered pickle spans inside
// the member.
#include <cstdint>
#include <cstring>

#include "tar.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace modelgate::scanner;
  MemorySource src({data, size});
  std::vector<Finding> findings;
  TarLimits limits;
  limits.max_members = 4096;
  limits.max_pax_bytes = 1 << 16;
  auto tar = ReadTar(src, limits, &findings);
  if (!tar.ok()) __builtin_trap();  // memory sources have no I/O errors
  const TarArchive& a = tar.value();
  if (a.end_offset > size) __builtin_trap();
  if (a.loader_fails && a.loader_error.empty()) __builtin_trap();
  auto has = [&](const char* id) {
    for (const auto& f : findings) {
      if (f.id == id) return true;
    }
    return false;
  };
  if (a.incomplete) {
    if (a.end_reason != "limit" && a.end_reason != "unsupported") __builtin_trap();
    if (!has(a.end_reason == "limit" ? "MG-TAR-LIMIT" : "MG-TAR-UNSUPPORTED")) __builtin_trap();
  }
  if (LooksLikeTar({data, size})) {
    for (const auto& f : findings) {
      if (f.id == "MG-TAR-BAD-CHECKSUM" && f.offset == 148) __builtin_trap();
    }
  }
  size_t extracted = 0;
  uint64_t prev_header_end = 0;
  for (const auto& m : a.members) {
    if (m.header_offset > m.member_header_offset || m.member_header_offset > size ||
        size - m.member_header_offset < 512 || m.data_offset != m.member_header_offset + 512) {
      __builtin_trap();
    }
    if (m.header_offset < prev_header_end) __builtin_trap();  // never backwards
    prev_header_end = m.data_offset;
    const bool inside = m.data_offset <= size && m.size <= size - m.data_offset;
    if (m.data_in_bounds != inside) __builtin_trap();
    if (!a.loader_fails && !a.incomplete && m.HasData() && !m.data_in_bounds) __builtin_trap();
    if (!m.HasData() || !m.data_in_bounds || ++extracted > 16) continue;
    auto bytes = ExtractTarMember(src, m, 1 << 20);
    if (m.size > (1 << 20)) {
      if (bytes.ok()) __builtin_trap();
      continue;
    }
    if (!bytes.ok() || bytes.value().size() != m.size) __builtin_trap();
    if (m.size && std::memcmp(bytes.value().data(), data + m.data_offset, m.size) != 0) {
      __builtin_trap();
    }
    std::vector<Finding> layout_findings;
    for (const char* name : {"storages", "tensors", "pickle"}) {
      auto layout = SplitTorchTarMember(name, bytes.value(), m.data_offset, &layout_findings);
      uint64_t prev = 0;
      for (const auto& p : layout.pickles) {
        if (p.begin < prev || p.end < p.begin || p.end > m.size) __builtin_trap();
        prev = p.end;
      }
      if (layout.consumed > m.size) __builtin_trap();
    }
    for (const auto& f : layout_findings) {
      if (f.id != "MG-TAR-TORCH-LAYOUT" || f.offset > size) __builtin_trap();
    }
  }
  (void)LooksLikeTorchTar(a);
  (void)FindTorchTarMembers(a, &findings);
  for (const char* name : {"pickle", "storages", "x/../pickle"}) {
    for (TarAccess acc : {TarAccess::kExtract, TarAccess::kExtractFile}) {
      const TarMember* m = ResolveTarMember(a, name, acc);
      if (m != nullptr && !m->HasData() && m->type != TarType::kDirectory &&
          m->type != TarType::kCharDevice && m->type != TarType::kBlockDevice &&
          m->type != TarType::kFifo) {
        __builtin_trap();  // links are always followed to a non-link
      }
    }
  }
  for (const auto& f : findings) {
    if (f.id.rfind("MG-TAR-", 0) != 0 || f.message.empty()) __builtin_trap();
    if (f.offset != modelgate::core::kNoOffset && f.offset > size) __builtin_trap();
  }
  return 0;
}
