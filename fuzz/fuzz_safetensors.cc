// fuzz_safetensors: the strict safetensors parser, in memory, under default
// and tight limits. Any broken invariant is a __builtin_trap():
// - a rejection carries a real code and an offset inside the input;
// - an accepted file is covered exactly: tensors sorted by begin tile the
//   data section from 0 to its end, each tensor's byte size is its element
//   count times its dtype width, names are unique and clean, metadata is
//   sorted with unique keys, every limit was honoured, and the header is
//   one JSON object plus whitespace (no NUL, last non-space byte '}');
// - limits are monotone: accepted under tight limits => accepted (with the
//   same result) under the defaults;
// - ParseSafetensorsHeader agrees with ParseSafetensors once the length
//   field is in range.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "modelgate/core.h"

namespace {

namespace core = modelgate::core;

#define MG_FUZZ_CHECK(cond) \
  do {                      \
    if (!(cond)) __builtin_trap(); \
  } while (0)

core::Limits TightLimits() {
  core::Limits l;
  l.max_header_bytes = 4096;
  l.max_tensors = 4;
  l.max_rank = 3;
  l.max_name_bytes = 16;
  l.max_json_depth = 4;
  l.max_metadata_entries = 4;
  return l;
}

bool IsKnownCode(core::Code code) {
  for (core::Code c : core::AllCodes()) {
    if (c == code) return true;
  }
  return false;
}

void CheckRejection(const core::Error& e, size_t size) {
  MG_FUZZ_CHECK(e.code != core::Code::kOk);
  MG_FUZZ_CHECK(IsKnownCode(e.code));
  MG_FUZZ_CHECK(!core::FindingId(e.code).empty());
  MG_FUZZ_CHECK(e.offset == core::kNoOffset || e.offset <= size);
  MG_FUZZ_CHECK(!e.message.empty());
}

// ByteSize is element count x dtype bits / 8, trapping on overflow or a
// partial byte (the parser must have refused both).
uint64_t ByteSize(const core::TensorView& t) {
  uint64_t n = 1;
  for (uint64_t dim : t.shape) MG_FUZZ_CHECK(!__builtin_mul_overflow(n, dim, &n));
  MG_FUZZ_CHECK(n == t.ElementCount());
  uint64_t bits = 0;
  MG_FUZZ_CHECK(!__builtin_mul_overflow(n, uint64_t{core::DtypeBits(t.dtype)}, &bits));
  MG_FUZZ_CHECK(bits % 8 == 0);
  return bits / 8;
}

// CheckHeaderText: the header of an accepted file is one JSON object text
// plus JSON whitespace. Such text never holds a raw NUL (not whitespace, not
// allowed unescaped in a string), and its last non-whitespace byte is '}'.
void CheckHeaderText(std::span<const uint8_t> header) {
  MG_FUZZ_CHECK(!header.empty() && header[0] == '{');
  for (uint8_t b : header) MG_FUZZ_CHECK(b != 0);
  size_t end = header.size();
  while (end > 0 && (header[end - 1] == ' ' || header[end - 1] == '\t' ||
                     header[end - 1] == '\n' || header[end - 1] == '\r')) {
    --end;
  }
  MG_FUZZ_CHECK(end > 0 && header[end - 1] == '}');
}

void CheckAccepted(const core::Safetensors& st, std::span<const uint8_t> file,
                   const core::Limits& limits) {
  const size_t size = file.size();
  MG_FUZZ_CHECK(st.file_size == size);
  MG_FUZZ_CHECK(st.header_bytes >= 2);  // at least "{}"
  MG_FUZZ_CHECK(st.header_bytes <= limits.max_header_bytes);
  MG_FUZZ_CHECK(st.data_start == 8 + st.header_bytes);
  MG_FUZZ_CHECK(st.data_start <= size);
  CheckHeaderText(file.subspan(8, st.header_bytes));
  MG_FUZZ_CHECK(core::CoveredBytes(st) == size);
  MG_FUZZ_CHECK(st.tensors.size() <= limits.max_tensors);
  MG_FUZZ_CHECK(st.metadata.size() <= limits.max_metadata_entries);
  if (!st.has_metadata) MG_FUZZ_CHECK(st.metadata.empty());

  // Exact tiling in data-offset order.
  uint64_t expect_begin = 0;
  for (size_t i = 0; i < st.tensors.size(); ++i) {
    const core::TensorView t = st.tensors[i];
    MG_FUZZ_CHECK(t.begin == expect_begin);
    MG_FUZZ_CHECK(t.begin <= t.end);
    MG_FUZZ_CHECK(t.data_start == st.data_start);
    MG_FUZZ_CHECK(t.file_end() <= size);
    MG_FUZZ_CHECK(t.size_bytes() == ByteSize(t));
    MG_FUZZ_CHECK(t.shape.size() <= limits.max_rank);
    MG_FUZZ_CHECK(!t.name.empty());
    MG_FUZZ_CHECK(t.name.size() <= limits.max_name_bytes);
    MG_FUZZ_CHECK(t.name != "__metadata__");
    for (char c : t.name) MG_FUZZ_CHECK(static_cast<unsigned char>(c) >= 0x20);
    MG_FUZZ_CHECK(t.entry_offset >= 8 && t.entry_offset < st.data_start);
    MG_FUZZ_CHECK(!core::DtypeName(t.dtype).empty());
    if (i > 0) {
      const core::TensorView p = st.tensors[i - 1];
      MG_FUZZ_CHECK(p.begin < t.begin || (p.begin == t.begin && p.end <= t.end));
      if (p.begin == t.begin && p.end == t.end) MG_FUZZ_CHECK(p.name < t.name);
    }
    expect_begin = t.end;
  }
  MG_FUZZ_CHECK(expect_begin == st.data_bytes());

  // Unique tensor names (quadratic only for small sets; fuzz inputs are).
  if (st.tensors.size() <= 4096) {
    for (size_t i = 0; i < st.tensors.size(); ++i) {
      for (size_t j = i + 1; j < st.tensors.size(); ++j) {
        MG_FUZZ_CHECK(st.tensors[i].name != st.tensors[j].name);
      }
    }
  }

  // Metadata: strictly increasing keys (sorted, no duplicates).
  for (size_t i = 1; i < st.metadata.size(); ++i) {
    MG_FUZZ_CHECK(st.metadata[i - 1].first < st.metadata[i].first);
  }
  for (const auto& kv : st.metadata) {
    MG_FUZZ_CHECK(kv.first.size() <= limits.max_name_bytes);
  }
}

bool SameResult(const core::Safetensors& a, const core::Safetensors& b) {
  if (a.file_size != b.file_size || a.header_bytes != b.header_bytes ||
      a.data_start != b.data_start || a.has_metadata != b.has_metadata ||
      a.tensors.size() != b.tensors.size() || a.metadata != b.metadata) {
    return false;
  }
  for (size_t i = 0; i < a.tensors.size(); ++i) {
    const core::TensorView x = a.tensors[i];
    const core::TensorView y = b.tensors[i];
    if (x.name != y.name || x.dtype != y.dtype || x.shape != y.shape || x.begin != y.begin ||
        x.end != y.end || x.entry_offset != y.entry_offset || x.data_start != y.data_start) {
      return false;
    }
  }
  return true;
}

// Parse runs both entry points on the input and checks they agree.
core::Result<core::Safetensors> Parse(std::span<const uint8_t> file,
                                      const core::Limits& limits) {
  auto r = core::ParseSafetensors(file, limits);
  if (r.ok()) {
    CheckAccepted(r.value(), file, limits);
  } else {
    CheckRejection(r.error(), file.size());
  }
  // The one-pass parse and the SAX parse (which alone names rules) agree:
  // what one accepts the other accepts, with the same table.
  auto sax = core::ParseSafetensorsSax(file, limits);
  MG_FUZZ_CHECK(sax.ok() == r.ok());
  if (sax.ok()) {
    MG_FUZZ_CHECK(SameResult(sax.value(), r.value()));
  } else {
    MG_FUZZ_CHECK(sax.error().code == r.error().code);
    MG_FUZZ_CHECK(sax.error().offset == r.error().offset);
    MG_FUZZ_CHECK(sax.error().message == r.error().message);
  }
  // A release callback sees offsets inside the header, never decreasing.
  uint64_t released = 0;
  bool release_ok = true;
  auto with_release = core::ParseSafetensors(file, limits, [&](uint64_t offset) {
    release_ok &= offset >= released && offset >= 8 && offset <= file.size();
    released = offset;
  });
  MG_FUZZ_CHECK(release_ok);
  MG_FUZZ_CHECK(with_release.ok() == r.ok());
  if (with_release.ok()) MG_FUZZ_CHECK(SameResult(with_release.value(), r.value()));
  if (file.size() >= 8) {
    uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | file[static_cast<size_t>(i)];
    if (n <= file.size() - 8 && n <= limits.max_header_bytes) {
      auto h = core::ParseSafetensorsHeader(file.subspan(8, n), file.size(), limits);
      MG_FUZZ_CHECK(h.ok() == r.ok());
      if (h.ok()) {
        MG_FUZZ_CHECK(SameResult(h.value(), r.value()));
      } else {
        CheckRejection(h.error(), file.size());
        MG_FUZZ_CHECK(h.error().code == r.error().code);
        MG_FUZZ_CHECK(h.error().offset == r.error().offset);
      }
    }
  }
  return r;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::span<const uint8_t> file(data, size);
  static const core::Limits kDefault{};
  static const core::Limits kTight = TightLimits();

  auto loose = Parse(file, kDefault);
  auto tight = Parse(file, kTight);
  if (tight.ok()) {  // monotone: tightening limits never admits more
    MG_FUZZ_CHECK(loose.ok());
    MG_FUZZ_CHECK(SameResult(tight.value(), loose.value()));
  }
  return 0;
}
