#include <array>

#include "modelgate/core.h"

namespace modelgate::core {
namespace {

struct DtypeInfo {
  Dtype dtype;
  std::string_view name;
  uint32_t bits;
};

// The reference's Dtype enum (safetensors 0.5+), with each element width.
constexpr std::array kDtypes = {
    DtypeInfo{Dtype::kBool, "BOOL", 8},
    DtypeInfo{Dtype::kU8, "U8", 8},
    DtypeInfo{Dtype::kI8, "I8", 8},
    DtypeInfo{Dtype::kF8E5M2, "F8_E5M2", 8},
    DtypeInfo{Dtype::kF8E4M3, "F8_E4M3", 8},
    DtypeInfo{Dtype::kF8E8M0, "F8_E8M0", 8},
    DtypeInfo{Dtype::kF8E4M3Fnuz, "F8_E4M3FNUZ", 8},
    DtypeInfo{Dtype::kF8E5M2Fnuz, "F8_E5M2FNUZ", 8},
    DtypeInfo{Dtype::kF4, "F4", 4},
    DtypeInfo{Dtype::kF6E2M3, "F6_E2M3", 6},
    DtypeInfo{Dtype::kF6E3M2, "F6_E3M2", 6},
    DtypeInfo{Dtype::kI16, "I16", 16},
    DtypeInfo{Dtype::kU16, "U16", 16},
    DtypeInfo{Dtype::kF16, "F16", 16},
    DtypeInfo{Dtype::kBF16, "BF16", 16},
    DtypeInfo{Dtype::kI32, "I32", 32},
    DtypeInfo{Dtype::kU32, "U32", 32},
    DtypeInfo{Dtype::kF32, "F32", 32},
    DtypeInfo{Dtype::kI64, "I64", 64},
    DtypeInfo{Dtype::kU64, "U64", 64},
    DtypeInfo{Dtype::kF64, "F64", 64},
    DtypeInfo{Dtype::kC64, "C64", 64},
};

constexpr std::array<Dtype, kDtypes.size()> MakeDtypeList() {
  std::array<Dtype, kDtypes.size()> out{};
  for (size_t i = 0; i < kDtypes.size(); ++i) out[i] = kDtypes[i].dtype;
  return out;
}
constexpr auto kDtypeList = MakeDtypeList();

// Enumerators are declared in table order, so the enum value indexes it.
constexpr bool TableMatchesEnum() {
  for (size_t i = 0; i < kDtypes.size(); ++i) {
    if (static_cast<size_t>(kDtypes[i].dtype) != i) return false;
  }
  return true;
}
static_assert(TableMatchesEnum());

}  // namespace

std::string_view DtypeName(Dtype d) { return kDtypes[static_cast<size_t>(d)].name; }
uint32_t DtypeBits(Dtype d) { return kDtypes[static_cast<size_t>(d)].bits; }
std::span<const Dtype> AllDtypes() { return kDtypeList; }

bool ParseDtype(std::string_view name, Dtype* out) {
  for (const auto& d : kDtypes) {
    if (d.name == name) {
      *out = d.dtype;
      return true;
    }
  }
  return false;
}

uint64_t TensorInfo::ElementCount() const {
  uint64_t n = 1;
  for (uint64_t dim : shape) n *= dim;  // validated by the parser not to overflow
  return n;
}

uint64_t TensorView::ElementCount() const {
  uint64_t n = 1;
  for (uint64_t dim : shape) n *= dim;  // validated by the parser not to overflow
  return n;
}

}  // namespace modelgate::core
