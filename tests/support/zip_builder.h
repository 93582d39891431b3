// ZipBuilder writes zip archives in memory for tests: stored or deflated
// members, with knobs to make every kind of disagreement a hostile archive
// can carry (local vs central names, flags, sizes, prepended and appended
// bytes, duplicate names, gaps). Header-only; needs zlib.
#pragma once

#include <zlib.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

class ZipBuilder {
 public:
  struct Member {
    std::string name;
    std::vector<uint8_t> data;
    bool deflate = false;
    std::optional<std::string> local_name;  // differs from the central name
    uint16_t central_flags = 0, local_flags = 0;
    std::optional<uint32_t> crc_override;   // both headers
    std::optional<uint32_t> local_crc;      // local header only
    std::optional<uint16_t> method_override;
    std::vector<uint8_t> gap_after;         // bytes after this member's data
    // A central record only: it points at member `*alias_of`'s local header
    // (with that member's sizes and CRC, minus `alias_compressed_cut`
    // compressed bytes), as a hostile archive reuses one stream.
    std::optional<size_t> alias_of;
    uint32_t alias_compressed_cut = 0;
  };

  ZipBuilder& Add(std::string name, std::vector<uint8_t> data, bool deflate = false) {
    Member m;
    m.name = std::move(name);
    m.data = std::move(data);
    m.deflate = deflate;
    members_.push_back(std::move(m));
    return *this;
  }
  ZipBuilder& Add(std::string name, std::string_view text, bool deflate = false) {
    return Add(std::move(name), std::vector<uint8_t>(text.begin(), text.end()), deflate);
  }
  // Alias adds a central record `name` for member `of`'s data.
  ZipBuilder& Alias(std::string name, size_t of, uint32_t compressed_cut = 0) {
    Member m;
    m.name = std::move(name);
    m.alias_of = of;
    m.alias_compressed_cut = compressed_cut;
    members_.push_back(std::move(m));
    return *this;
  }
  Member& Last() { return members_.back(); }
  ZipBuilder& Prepend(std::vector<uint8_t> b) { prefix_ = std::move(b); return *this; }
  ZipBuilder& Append(std::vector<uint8_t> b) { suffix_ = std::move(b); return *this; }
  ZipBuilder& Comment(std::string c) { comment_ = std::move(c); return *this; }
  // Offsets in the central directory count from the archive's own start
  // (false, as a self-extractor would) or from the file's start (true).
  ZipBuilder& AbsoluteOffsets(bool v) { absolute_ = v; return *this; }

  std::vector<uint8_t> Build() const {
    std::vector<uint8_t> out = prefix_;
    const uint64_t shift = absolute_ ? 0 : prefix_.size();
    std::vector<uint8_t> central;
    struct Written {
      uint64_t local_at;
      uint32_t crc, compressed, uncompressed;
      uint16_t method;
    };
    std::vector<Written> written;
    for (const auto& m : members_) {
      if (m.alias_of) {
        const Written w = written.at(*m.alias_of);  // a copy: push_back reallocates
        written.push_back(w);
        CentralRecord(central, m.name, 0, w.method, w.crc, w.compressed - m.alias_compressed_cut,
                      w.uncompressed, w.local_at);
        continue;
      }
      std::vector<uint8_t> body = m.deflate ? Deflate(m.data) : m.data;
      const uint32_t crc = m.crc_override ? *m.crc_override : Crc(m.data);
      const uint16_t method = m.method_override ? *m.method_override : (m.deflate ? 8 : 0);
      const uint64_t local_at = out.size() - shift;
      written.push_back(Written{local_at, crc, static_cast<uint32_t>(body.size()),
                                static_cast<uint32_t>(m.data.size()), method});
      const std::string& lname = m.local_name ? *m.local_name : m.name;
      U32(out, 0x04034b50);
      U16(out, 20);
      U16(out, m.local_flags);
      U16(out, method);
      U32(out, 0);
      U32(out, m.local_crc ? *m.local_crc : crc);
      U32(out, static_cast<uint32_t>(body.size()));
      U32(out, static_cast<uint32_t>(m.data.size()));
      U16(out, static_cast<uint16_t>(lname.size()));
      U16(out, 0);
      out.insert(out.end(), lname.begin(), lname.end());
      out.insert(out.end(), body.begin(), body.end());
      out.insert(out.end(), m.gap_after.begin(), m.gap_after.end());

      CentralRecord(central, m.name, m.central_flags, method, crc,
                    static_cast<uint32_t>(body.size()), static_cast<uint32_t>(m.data.size()),
                    local_at);
    }
    const uint64_t cd_at = out.size() - shift;
    out.insert(out.end(), central.begin(), central.end());
    U32(out, 0x06054b50);
    U16(out, 0);
    U16(out, 0);
    U16(out, static_cast<uint16_t>(members_.size()));
    U16(out, static_cast<uint16_t>(members_.size()));
    U32(out, static_cast<uint32_t>(central.size()));
    U32(out, static_cast<uint32_t>(cd_at));
    U16(out, static_cast<uint16_t>(comment_.size()));
    out.insert(out.end(), comment_.begin(), comment_.end());
    out.insert(out.end(), suffix_.begin(), suffix_.end());
    return out;
  }

  static uint32_t Crc(const std::vector<uint8_t>& d) {
    return static_cast<uint32_t>(crc32(crc32(0L, Z_NULL, 0), d.data(), static_cast<uInt>(d.size())));
  }
  static std::vector<uint8_t> Deflate(const std::vector<uint8_t>& d) {
    z_stream zs{};
    deflateInit2(&zs, 6, Z_DEFLATED, -MAX_WBITS, 8, Z_DEFAULT_STRATEGY);
    std::vector<uint8_t> out(deflateBound(&zs, static_cast<uLong>(d.size())));
    zs.next_in = const_cast<Bytef*>(d.data());
    zs.avail_in = static_cast<uInt>(d.size());
    zs.next_out = out.data();
    zs.avail_out = static_cast<uInt>(out.size());
    deflate(&zs, Z_FINISH);
    out.resize(zs.total_out);
    deflateEnd(&zs);
    return out;
  }

 private:
  static void CentralRecord(std::vector<uint8_t>& central, const std::string& name,
                            uint16_t flags, uint16_t method, uint32_t crc, uint32_t compressed,
                            uint32_t uncompressed, uint64_t local_at) {
    U32(central, 0x02014b50);
    U16(central, 20);
    U16(central, 20);
    U16(central, flags);
    U16(central, method);
    U32(central, 0);
    U32(central, crc);
    U32(central, compressed);
    U32(central, uncompressed);
    U16(central, static_cast<uint16_t>(name.size()));
    U16(central, 0);
    U16(central, 0);
    U16(central, 0);
    U16(central, 0);
    U32(central, 0);
    U32(central, static_cast<uint32_t>(local_at));
    central.insert(central.end(), name.begin(), name.end());
  }
  static void U16(std::vector<uint8_t>& o, uint16_t v) {
    o.push_back(static_cast<uint8_t>(v));
    o.push_back(static_cast<uint8_t>(v >> 8));
  }
  static void U32(std::vector<uint8_t>& o, uint32_t v) {
    for (int i = 0; i < 4; ++i) o.push_back(static_cast<uint8_t>(v >> (8 * i)));
  }

  std::vector<Member> members_;
  std::vector<uint8_t> prefix_, suffix_;
  std::string comment_;
  bool absolute_ = true;
};
