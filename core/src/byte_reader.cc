#include <algorithm>

#include "modelgate/core.h"

namespace modelgate::core {

Result<std::span<const uint8_t>> ByteReader::Take(uint64_t n) {
  if (n > remaining()) {  // never form pos_ + n first
    return Error{Code::kStTruncated, offset(),
                 "need " + std::to_string(n) + " bytes, have " +
                     std::to_string(remaining())};
  }
  auto out = bytes_.subspan(pos_, static_cast<size_t>(n));
  pos_ += static_cast<size_t>(n);
  return out;
}

Status ByteReader::Skip(uint64_t n) {
  auto r = Take(n);
  if (!r.ok()) return r.error();
  return OkStatus();
}

Status ByteReader::Seek(uint64_t pos) {
  if (pos > bytes_.size()) {
    return Error{Code::kStTruncated, base_ + bytes_.size(),
                 "seek to " + std::to_string(pos) + " past end " +
                     std::to_string(bytes_.size())};
  }
  pos_ = static_cast<size_t>(pos);
  return OkStatus();
}

std::span<const uint8_t> ByteReader::Peek(size_t n) const {
  return bytes_.subspan(pos_, std::min(n, remaining()));
}

Result<uint64_t> ByteReader::UintLe(int width) {
  auto b = Take(static_cast<uint64_t>(width));
  if (!b.ok()) return b.error();
  uint64_t v = 0;
  for (int i = width - 1; i >= 0; --i) v = (v << 8) | b.value()[static_cast<size_t>(i)];
  return v;
}

Result<uint64_t> ByteReader::UintBe(int width) {
  auto b = Take(static_cast<uint64_t>(width));
  if (!b.ok()) return b.error();
  uint64_t v = 0;
  for (int i = 0; i < width; ++i) v = (v << 8) | b.value()[static_cast<size_t>(i)];
  return v;
}

Result<uint8_t> ByteReader::U8() {
  auto b = Take(1);
  if (!b.ok()) return b.error();
  return b.value()[0];
}

namespace {
template <typename T>
Result<T> Narrow(Result<uint64_t> r) {
  if (!r.ok()) return r.error();
  return static_cast<T>(r.value());
}
}  // namespace

Result<uint16_t> ByteReader::U16Le() { return Narrow<uint16_t>(UintLe(2)); }
Result<uint32_t> ByteReader::U32Le() { return Narrow<uint32_t>(UintLe(4)); }
Result<uint64_t> ByteReader::U64Le() { return UintLe(8); }
Result<uint16_t> ByteReader::U16Be() { return Narrow<uint16_t>(UintBe(2)); }
Result<uint32_t> ByteReader::U32Be() { return Narrow<uint32_t>(UintBe(4)); }
Result<uint64_t> ByteReader::U64Be() { return UintBe(8); }

}  // namespace modelgate::core
