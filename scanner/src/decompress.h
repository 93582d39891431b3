// Bounded decompression of the single-stream wrappers model files come in
// (joblib's compress=, .gz/.bz2/.xz copies of checkpoints): gzip, zlib,
// bzip2, xz and lzma-alone. Output grows in chunks with what the decoder
// really produces (never sized by a header's claim) and stops at a cap.
//
// Concatenated streams are decoded like Python's readers decode them
// (gzip.GzipFile, bz2.BZ2File, lzma.LZMAFile continue into the next stream;
// zlib.decompress stops after one): every member is decoded and a second
// member is reported (MG-ARCHIVE-MULTI-MEMBER, low: single-stream readers
// see only the first). Zero padding after a gzip member (which gzip skips)
// and xz stream padding are accepted; any other byte after the last stream
// is MG-ARCHIVE-TRAILING-DATA (high: hidden data that Python's bz2/lzma
// silently ignore and gzip raises on after returning the data).
//
// 7z: not decoded. Python (and so torch/joblib) cannot load a 7z file
// without a third-party package; the scanner reports a 7z file with
// UnanalyzedArchiveFinding (MG-ARCHIVE-UNSUPPORTED, high) rather than
// adding libarchive for a format no loader reads.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "modelgate/scanner.h"

namespace modelgate::scanner {

enum class Codec : uint8_t { kGzip, kZlib, kBzip2, kXz, kLzma };
std::string_view CodecName(Codec c);  // "gzip", "zlib", "bzip2", "xz", "lzma"

struct DecompressLimits {
  // Output bytes held in memory (the caller passes the smaller of
  // ContainerLimits::max_member_bytes and what remains of
  // max_total_decompressed_bytes for the file).
  uint64_t max_output_bytes = 1ull << 30;
  // Output / input. deflate tops out near 1032:1; bzip2 and xz reach far
  // more only on degenerate (bomb) input.
  uint64_t max_expansion_ratio = 1000;
  // The ratio is enforced only past this much output, so that small
  // streams of zeros (an empty tensor, padding) are not bombs.
  uint64_t ratio_floor_bytes = 1ull << 20;
  // Decoder memory (xz/lzma dictionaries; xz -9 needs 65 MiB). A stream
  // that asks for more is MG-ARCHIVE-LIMIT.
  uint64_t max_decoder_memory_bytes = 256ull << 20;
};

// SniffCodec names the wrapper `head` starts with: gzip (1F 8B 08), zlib
// (CMF 0x78, no preset dictionary, header check divisible by 31), bzip2
// ("BZh" + '1'..'9', then a block or end-of-stream magic when present), xz
// (FD "7zXZ" 00), lzma-alone (properties 0x5D, a dictionary size of 2^n or
// 2^n + 2^(n-1), an unknown size or one below 2^40). nullopt otherwise.
std::optional<Codec> SniffCodec(std::span<const uint8_t> head);

// Decompress decodes `in` as `codec`. Returns the decoded bytes, also when
// a cap was hit or the stream is corrupt or truncated (then the bytes
// decoded before that point, which a streaming loader such as
// pickle.load(gzip.open(f)) has already consumed), with a finding:
// MG-ARCHIVE-LIMIT (high) at a cap, MG-ARCHIVE-MALFORMED (high) for a
// corrupt or truncated stream, MG-ARCHIVE-TRAILING-DATA (high),
// MG-ARCHIVE-MULTI-MEMBER (low). nullopt (with MG-ARCHIVE-MALFORMED) when
// `in` does not start a stream of `codec` at all. Finding offsets are into
// `in` plus `base_offset`. Never throws.
std::optional<std::vector<uint8_t>> Decompress(std::span<const uint8_t> in, Codec codec,
                                               const DecompressLimits& limits,
                                               std::vector<Finding>* findings,
                                               uint64_t base_offset = 0);

// UnanalyzedArchiveFinding reports a container the scanner detects but does
// not open (7z): MG-ARCHIVE-UNSUPPORTED, high.
Finding UnanalyzedArchiveFinding(std::string_view format_name);

}  // namespace modelgate::scanner
