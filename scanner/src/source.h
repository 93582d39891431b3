// Random access to untrusted bytes: a file read with pread, or memory (fuzz
// targets, nested members). Container readers fetch bounded windows through
// it and parse each window with core::ByteReader.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include "modelgate/core.h"

namespace modelgate::scanner {

class Source {
 public:
  virtual ~Source() = default;
  virtual uint64_t size() const = 0;
  // Read fills `out` from `offset`; fails (without reading) past the end.
  virtual core::Status Read(uint64_t offset, std::span<uint8_t> out) const = 0;

  // ReadVec reads `n` bytes at `offset` into a new vector. The caller bounds
  // `n` by a limit before calling; this checks it against size() first, so
  // nothing is allocated for bytes that do not exist.
  core::Result<std::vector<uint8_t>> ReadVec(uint64_t offset, uint64_t n) const {
    if (offset > size() || n > size() - offset) {
      return core::Error{core::Code::kStTruncated, offset,
                         "need " + std::to_string(n) + " bytes at " + std::to_string(offset) +
                             ", file has " + std::to_string(size())};
    }
    std::vector<uint8_t> v(static_cast<size_t>(n));
    if (auto s = Read(offset, v); !s.ok()) return s.error();
    return v;
  }
};

class FdSource : public Source {
 public:
  FdSource(int fd, uint64_t size) : fd_(fd), size_(size) {}
  uint64_t size() const override { return size_; }
  core::Status Read(uint64_t offset, std::span<uint8_t> out) const override {
    if (offset > size_ || out.size() > size_ - offset) {
      return core::Error{core::Code::kStTruncated, offset, "read past the end of the file"};
    }
    return core::PreadExact(fd_, offset, out);
  }

 private:
  int fd_;
  uint64_t size_;
};

class MemorySource : public Source {
 public:
  explicit MemorySource(std::span<const uint8_t> bytes) : bytes_(bytes) {}
  uint64_t size() const override { return bytes_.size(); }
  core::Status Read(uint64_t offset, std::span<uint8_t> out) const override {
    if (offset > bytes_.size() || out.size() > bytes_.size() - offset) {
      return core::Error{core::Code::kStTruncated, offset, "read past the end of the buffer"};
    }
    std::copy_n(bytes_.data() + offset, out.size(), out.data());
    return core::OkStatus();
  }

 private:
  std::span<const uint8_t> bytes_;
};

}  // namespace modelgate::scanner
