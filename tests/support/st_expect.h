// Test helpers shared by the core tests: printing codes and checking that a
// Result failed with an exact code and offset. Include after catch.hpp.
#pragma once

#include <algorithm>
#include <cstdint>
#include <ostream>
#include <vector>

#include "modelgate/core.h"

namespace modelgate::core {
// Catch2 prints codes by finding id instead of a bare number.
inline std::ostream& operator<<(std::ostream& os, Code code) {
  std::string_view id = FindingId(code);
  if (id.empty()) return os << "Code(" << static_cast<int>(code) << ")";
  return os << id;
}
}  // namespace modelgate::core

// MG_CHECK_ERROR requires `result` to have failed, then checks its code and
// its absolute offset exactly; the message is shown on failure.
#define MG_CHECK_ERROR(result, expected_code, expected_offset)   \
  do {                                                            \
    const auto& mg_r = (result);                                  \
    REQUIRE_FALSE(mg_r.ok());                                     \
    INFO("message: " << mg_r.error().message);                    \
    CHECK(mg_r.error().code == (expected_code));                  \
    CHECK(mg_r.error().offset == static_cast<uint64_t>(expected_offset)); \
  } while (0)

// MG_CHECK_CODE is MG_CHECK_ERROR for rules whose offset is not pinned down
// by the rule; the offset must still lie inside the file.
#define MG_CHECK_CODE(result, expected_code, file_size)          \
  do {                                                            \
    const auto& mg_r = (result);                                  \
    REQUIRE_FALSE(mg_r.ok());                                     \
    INFO("message: " << mg_r.error().message);                    \
    CHECK(mg_r.error().code == (expected_code));                  \
    CHECK(mg_r.error().offset <= static_cast<uint64_t>(file_size)); \
  } while (0)

// MG_CHECK_ERROR_ANY is MG_CHECK_ERROR where the rule allows one of a few
// offsets (e.g. the entry's name or the offending value).
#define MG_CHECK_ERROR_ANY(result, expected_code, ...)                     \
  do {                                                                     \
    const auto& mg_r = (result);                                           \
    REQUIRE_FALSE(mg_r.ok());                                              \
    INFO("message: " << mg_r.error().message);                             \
    CHECK(mg_r.error().code == (expected_code));                           \
    const std::vector<uint64_t> mg_allowed{__VA_ARGS__};                   \
    INFO("offset " << mg_r.error().offset << " is not one of the allowed"); \
    CHECK(std::find(mg_allowed.begin(), mg_allowed.end(),                  \
                    mg_r.error().offset) != mg_allowed.end());             \
  } while (0)

// MG_REQUIRE_OK requires `result` to have succeeded, showing the error if not.
#define MG_REQUIRE_OK(result)                                              \
  do {                                                                     \
    const auto& mg_r = (result);                                           \
    if (!mg_r.ok()) {                                                      \
      FAIL("unexpected " << mg_r.error().code << " at "                   \
                         << mg_r.error().offset << ": " << mg_r.error().message); \
    }                                                                      \
  } while (0)

namespace modelgate::testing {
namespace core = ::modelgate::core;
// Parse runs the in-memory parser with `limits` (defaults if omitted).
inline core::Result<core::Safetensors> Parse(const std::vector<uint8_t>& file,
                                             const core::Limits& limits = {}) {
  return core::ParseSafetensors(file, limits);
}
}  // namespace modelgate::testing
