// Private text helpers for core.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace modelgate::core {

inline constexpr size_t kUtf8Valid = SIZE_MAX;

// FirstInvalidUtf8 returns the index of the first byte that starts an
// ill-formed UTF-8 sequence (overlong forms, surrogates, values above
// U+10FFFF and truncated sequences are ill-formed), or kUtf8Valid.
size_t FirstInvalidUtf8(std::span<const uint8_t> bytes);

// Utf8SequenceLength is the length of the well-formed sequence starting at
// bytes[0], or 0 if it is ill-formed.
size_t Utf8SequenceLength(std::span<const uint8_t> bytes);

}  // namespace modelgate::core
