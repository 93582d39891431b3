// The .npy header (format versions 1.0, 2.0, 3.0), read as numpy's
// read_array_header does — a Python dict literal with exactly `descr`,
// `fortran_order` and `shape` — but with a strict literal parser instead of
// ast.literal_eval. An object dtype anywhere in `descr` means the array body
// is a pickle (np.load with allow_pickle=True unpickles it).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "modelgate/scanner.h"

namespace modelgate::scanner {

struct NpyLimits {
  // numpy >= 1.24 refuses headers above 10,000 bytes unless max_header_size
  // is raised (numpy.lib.format._MAX_HEADER_SIZE).
  uint64_t max_header_bytes = 10'000;
  uint64_t max_rank = 64;       // NPY_MAXDIMS
  uint64_t max_literal_depth = 16;  // nesting in the header literal (structured dtypes)
};

struct NpyHeader {
  int major = 0, minor = 0;
  uint64_t header_bytes = 0;  // the dict text, as the length field says
  uint64_t data_offset = 0;   // absolute offset of the array body
  std::string descr;          // descr as written (a string, or a list's repr)
  bool fortran_order = false;
  std::vector<uint64_t> shape;
  bool has_object = false;    // the body is a pickle
  // Bytes of the body for plain (non-object) dtypes; nullopt when the dtype
  // has no fixed size this parser knows.
  std::optional<uint64_t> body_bytes;
};

// kNpyMagic is the 6-byte prefix of every .npy file.
inline constexpr std::string_view kNpyMagic{"\x93NUMPY", 6};

// ParseNpyHeader reads the header at the start of `bytes` (which need only
// hold the header: at most 12 + max_header_bytes). `base` is the absolute
// offset of bytes[0]. On failure, appends an MG-NPY-* finding and returns
// nullopt.
std::optional<NpyHeader> ParseNpyHeader(std::span<const uint8_t> bytes, uint64_t base,
                                        const NpyLimits& limits, std::vector<Finding>* findings);

}  // namespace modelgate::scanner
