// Convert: scan, plan (rebuild.cc), lay out, stream each tensor from its
// storage record into an AtomicOutput, sign, commit. See convert.h.
#include <algorithm>
#include <ctime>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <zlib.h>

#include "modelgate/atomic_file.h"
#include "modelgate/convert.h"
#include "readers.h"

namespace modelgate::convert {
namespace {

using core::Code;
using core::Error;
using core::Quoted;

// Reads of a storage are at most this many bytes at a time; a view's
// storage window up to ConvertLimits::gather_window_bytes is read whole and
// gathered in memory, a larger one run by run (never the whole model in
// memory; PlanStateDict bounded those reads by max_view_reads).
constexpr uint64_t kChunkBytes = 4ull << 20;

uint64_t ElemBytes(core::Dtype d) { return core::DtypeBits(d) / 8; }

void SwapElements(std::span<uint8_t> b, core::Dtype d) {
  uint64_t w = d == core::Dtype::kC64 ? 4 : ElemBytes(d);  // complex64: two float32
  if (w <= 1) return;
  for (size_t i = 0; i + w <= b.size(); i += w) std::reverse(b.begin() + i, b.begin() + i + w);
}

// Writer streams one tensor's bytes to the output, hashing them.
class Writer {
 public:
  Writer(core::AtomicOutput& out, uint64_t at, bool swap, core::Dtype dtype, bool hash)
      : out_(out), at_(at), swap_(swap), dtype_(dtype), hash_(hash) {}
  core::Status Put(std::span<const uint8_t> b) {
    buf_.insert(buf_.end(), b.begin(), b.end());
    return buf_.size() >= kChunkBytes ? Flush() : core::OkStatus();
  }
  core::Status Flush() {
    if (buf_.empty()) return core::OkStatus();
    if (swap_) SwapElements(buf_, dtype_);
    if (hash_) hasher_.Update(buf_);
    auto s = out_.WriteAt(at_, buf_);
    at_ += buf_.size();
    buf_.clear();
    return s;
  }
  core::Sha256Digest Digest() { return hasher_.Final(); }

 private:
  core::AtomicOutput& out_;
  uint64_t at_;
  bool swap_;
  core::Dtype dtype_;
  bool hash_;
  std::vector<uint8_t> buf_;
  core::Sha256Hasher hasher_;
};

// CopyTensor writes tensor `t` (its storage at `rec_offset` of `fd`) row-major.
core::Status CopyTensor(int fd, uint64_t rec_offset, const TensorPlan& t, uint64_t gather_window_bytes,
                        Writer& w) {
  const uint64_t el = ElemBytes(t.dtype);
  uint64_t numel = 1;
  for (uint64_t d : t.shape) numel *= d;  // checked by the plan's byte count
  if (numel == 0) return w.Flush();
  // Dims [inner, rank) are one contiguous run when their strides are
  // row-major; a size-1 dim's stride is never read.
  size_t rank = t.shape.size();
  size_t inner = rank;
  uint64_t run = 1;
  while (inner > 0 && (t.shape[inner - 1] == 1 || t.stride[inner - 1] == run)) {
    --inner;
    run *= t.shape[inner];
  }
  std::vector<uint8_t> buf;
  if (inner == 0) {  // contiguous: one range
    uint64_t pos = rec_offset + t.offset * el, left = numel * el;
    while (left > 0) {
      uint64_t n = std::min(left, kChunkBytes);
      buf.resize(n);
      if (auto s = core::PreadExact(fd, pos, buf); !s.ok()) return s;
      if (auto s = w.Put(buf); !s.ok()) return s;
      pos += n;
      left -= n;
    }
    return w.Flush();
  }
  uint64_t last = t.offset;
  for (size_t i = 0; i < rank; ++i) last += (t.shape[i] - 1) * t.stride[i];
  const uint64_t window = (last - t.offset + 1) * el;
  std::vector<uint8_t> win;
  if (window <= gather_window_bytes) {
    win.resize(window);
    if (auto s = core::PreadExact(fd, rec_offset + t.offset * el, win); !s.ok()) return s;
  }
  std::vector<uint64_t> idx(inner, 0);
  buf.resize(run * el);
  for (;;) {
    uint64_t e = 0;
    for (size_t i = 0; i < inner; ++i) e += idx[i] * t.stride[i];
    if (win.empty()) {
      if (auto s = core::PreadExact(fd, rec_offset + (t.offset + e) * el, buf); !s.ok()) return s;
      if (auto s = w.Put(buf); !s.ok()) return s;
    } else {
      if (auto s = w.Put({win.data() + e * el, buf.size()}); !s.ok()) return s;
    }
    size_t d = inner;
    while (d > 0) {
      --d;
      if (++idx[d] < t.shape[d]) break;
      idx[d] = 0;
      if (d == 0) return w.Flush();
    }
  }
}

// Inflater reads a zip member's raw deflate stream (StorageBytes::kDeflate)
// forward only, at most kChunkBytes of packed input in memory; Finish()
// checks that the stream ends at exactly member_bytes with member_crc32.
class Inflater {
 public:
  Inflater(int fd, const StorageBytes& sb) : fd_(fd), sb_(sb), crc_(crc32(0L, Z_NULL, 0)) {
    init_ = inflateInit2(&z_, -MAX_WBITS) == Z_OK;  // raw deflate, as zip stores it
  }
  ~Inflater() {
    if (init_) inflateEnd(&z_);
  }
  Inflater(const Inflater&) = delete;
  Inflater& operator=(const Inflater&) = delete;

  // Read fills all of `out` with the next inflated bytes.
  core::Status Read(std::span<uint8_t> out) {
    if (!init_) return Fail(sb_.packed_offset, "zlib could not start an inflate stream");
    size_t filled = 0;
    while (filled < out.size()) {
      if (ended_) {
        return Fail(sb_.packed_offset, "the deflate stream ends after " + std::to_string(produced_) +
                                           " bytes, short of the " + std::to_string(sb_.member_bytes) +
                                           " the member declares");
      }
      if (auto s = Refill(); !s.ok()) return s;
      const size_t want = std::min<size_t>(out.size() - filled, kChunkBytes);
      z_.next_out = out.data() + filled;
      z_.avail_out = static_cast<uInt>(want);
      const uInt had_in = z_.avail_in;
      const int r = inflate(&z_, Z_NO_FLUSH);
      const size_t got = want - z_.avail_out;
      if (r == Z_STREAM_END) {
        ended_ = true;
      } else if (r == Z_BUF_ERROR || (r == Z_OK && got == 0 && had_in == z_.avail_in)) {
        if (z_.avail_in == 0 && packed_read_ == sb_.packed_bytes) {
          return Fail(sb_.packed_offset + sb_.packed_bytes, "the deflate stream is cut short");
        }
      } else if (r != Z_OK) {
        return Fail(sb_.packed_offset + packed_read_ - z_.avail_in,
                    std::string("the deflate stream is corrupt (") + (z_.msg ? z_.msg : "zlib error") + ")");
      }
      crc_ = crc32(crc_, out.data() + filled, static_cast<uInt>(got));
      produced_ += got;
      filled += got;
      if (produced_ > sb_.member_bytes) {
        return Fail(sb_.packed_offset, "the member inflates past its declared " + std::to_string(sb_.member_bytes) +
                                           " bytes");
      }
    }
    return core::OkStatus();
  }

  core::Status Skip(uint64_t n) {
    std::vector<uint8_t> buf;
    while (n > 0) {
      buf.resize(std::min(n, kChunkBytes));
      if (auto s = Read(buf); !s.ok()) return s;
      n -= buf.size();
    }
    return core::OkStatus();
  }

  // Finish reads the member to its end and checks its size and CRC-32, as
  // zipfile does when numpy reads it (BadZipFile otherwise).
  core::Status Finish() {
    if (produced_ > sb_.member_bytes) return Fail(sb_.packed_offset, "the member is longer than declared");
    if (auto s = Skip(sb_.member_bytes - produced_); !s.ok()) return s;
    if (!ended_) {  // exactly member_bytes so far: the stream must end here
      uint8_t extra = 0;
      z_.next_out = &extra;
      z_.avail_out = 1;
      for (;;) {
        if (auto s = Refill(); !s.ok()) return s;
        const uInt had_in = z_.avail_in;
        const int r = inflate(&z_, Z_NO_FLUSH);
        if (z_.avail_out == 0) {
          return Fail(sb_.packed_offset, "the member inflates past its declared " +
                                             std::to_string(sb_.member_bytes) + " bytes");
        }
        if (r == Z_STREAM_END) break;
        if ((r != Z_OK && r != Z_BUF_ERROR) || (had_in == z_.avail_in && z_.avail_in == 0 &&
                                                packed_read_ == sb_.packed_bytes)) {
          return Fail(sb_.packed_offset, "the deflate stream does not end after its declared " +
                                             std::to_string(sb_.member_bytes) + " bytes");
        }
      }
    }
    if (static_cast<uint32_t>(crc_) != sb_.member_crc32) {
      return Fail(sb_.packed_offset, "the member's CRC-32 does not match the zip directory's");
    }
    return core::OkStatus();
  }

 private:
  // Refill reads the next packed chunk once zlib has used the last one.
  core::Status Refill() {
    if (z_.avail_in != 0 || packed_read_ >= sb_.packed_bytes) return core::OkStatus();
    in_.resize(std::min(kChunkBytes, sb_.packed_bytes - packed_read_));
    if (auto s = core::PreadExact(fd_, sb_.packed_offset + packed_read_, in_); !s.ok()) return s;
    packed_read_ += in_.size();
    z_.next_in = in_.data();
    z_.avail_in = static_cast<uInt>(in_.size());
    return core::OkStatus();
  }

  Error Fail(uint64_t at, std::string why) const {
    return Error{Code::kConvStorage, at, "deflated member at " + std::to_string(sb_.packed_offset) + ": " + why};
  }

  int fd_;
  StorageBytes sb_;
  z_stream z_{};
  bool init_ = false;
  bool ended_ = false;
  uint64_t packed_read_ = 0;
  uint64_t produced_ = 0;
  uLong crc_;
  std::vector<uint8_t> in_;
};

// CopyDeflated writes tensor `t` of a deflated storage row-major: streamed
// when contiguous, else its window gathered in memory (the reader bounded
// it by gather_window_bytes). The member is inflated to its end either way.
core::Status CopyDeflated(int fd, const StorageBytes& sb, const TensorPlan& t, uint64_t gather_window_bytes,
                          Writer& w) {
  const uint64_t el = ElemBytes(t.dtype);
  uint64_t numel = 1;
  for (uint64_t d : t.shape) numel *= d;  // checked by the plan's byte count
  Inflater inf(fd, sb);
  if (auto s = inf.Skip(sb.offset + t.offset * el); !s.ok()) return s;
  size_t rank = t.shape.size(), inner = rank;
  uint64_t run = 1;
  while (inner > 0 && (t.shape[inner - 1] == 1 || t.stride[inner - 1] == run)) {
    --inner;
    run *= t.shape[inner];
  }
  if (numel == 0) {
  } else if (inner == 0) {
    std::vector<uint8_t> buf;
    for (uint64_t left = numel * el; left > 0;) {
      buf.resize(std::min(left, kChunkBytes));
      if (auto s = inf.Read(buf); !s.ok()) return s;
      if (auto s = w.Put(buf); !s.ok()) return s;
      left -= buf.size();
    }
  } else {
    uint64_t last = 0;
    for (size_t i = 0; i < rank; ++i) last += (t.shape[i] - 1) * t.stride[i];
    const uint64_t window = (last + 1) * el;
    if (window > gather_window_bytes) {
      return Error{Code::kConvLimit, sb.packed_offset,
                   Quoted(t.name, 120) + ": a deflated view of " + std::to_string(window) +
                       " bytes is over gather_window_bytes (" + std::to_string(gather_window_bytes) + ")"};
    }
    std::vector<uint8_t> win(window);
    if (auto s = inf.Read(win); !s.ok()) return s;
    std::vector<uint64_t> idx(inner, 0);
    for (bool more = true; more;) {
      uint64_t e = 0;
      for (size_t i = 0; i < inner; ++i) e += idx[i] * t.stride[i];
      if (auto s = w.Put({win.data() + e * el, run * el}); !s.ok()) return s;
      more = false;
      for (size_t d = inner; d > 0; --d) {
        if (++idx[d - 1] < t.shape[d - 1]) {
          more = true;
          break;
        }
        idx[d - 1] = 0;
      }
    }
  }
  if (auto s = w.Flush(); !s.ok()) return s;
  return inf.Finish();
}

scanner::Finding Refusal(const Error& e) { return scanner::FindingFromError(e); }

}  // namespace

ConvertReport Convert(const core::OpenedFile& in, const std::string& in_path,
                      const std::string& out_path, const ConvertOptions& options) {
  ConvertReport rep;
  auto refuse = [&](const Error& e) {
    rep.blocking.push_back(Refusal(e));
    rep.io_error = e.code == Code::kIoOpen || e.code == Code::kIoRead || e.code == Code::kIoChanged;
    return rep;
  };
  // 1. The scan's verdict, from the same descriptor.
  scanner::FileScan scan = scanner::ScanOpened(in, in_path, options.scan);
  rep.format = scan.format;
  for (scanner::Finding& f : scan.findings) {
    bool blocks = !f.waived && f.severity <= options.fail_on;
    (blocks ? rep.blocking : rep.scan_findings).push_back(std::move(f));
  }
  if (scan.io_error) {
    rep.io_error = true;
    return rep;
  }
  if (!rep.blocking.empty()) return rep;
  if (scan.unparseable) {
    return refuse(Error{Code::kConvUnsupported, core::kNoOffset, "the scan could not judge the whole file"});
  }
  // 2. The format's reader: the tensors to write and where their bytes lie.
  core::Result<Checkpoint> read = core::Error{Code::kConvUnsupported, 0, ""};
  switch (scan.format) {
    case scanner::Format::kPytorchZip:
      read = ReadTorchZip(in, options);
      break;
    case scanner::Format::kPickle:  // torch.save(..., _use_new_zipfile_serialization=False)
      read = ReadTorchLegacy(in, options);
      break;
    case scanner::Format::kPytorchTar:
      read = ReadTorchTar(in, options);
      break;
    case scanner::Format::kNumpy:
    case scanner::Format::kNumpyZip:
      read = ReadNumpy(in, options);
      break;
    case scanner::Format::kJoblib:
      read = ReadJoblib(in, options);
      break;
    case scanner::Format::kZlib:  // joblib.dump(..., compress=...)
    case scanner::Format::kGzip:
    case scanner::Format::kBzip2:
    case scanner::Format::kXz:
    case scanner::Format::kLzma:
    case scanner::Format::kZstd:
    case scanner::Format::kLz4:
      read = ReadJoblib(in, options);
      break;
    default:
      return refuse(Error{Code::kConvUnsupported, 0,
                          "format " + std::string(scanner::FormatName(scan.format)) + " is not converted"});
  }
  if (!read.ok()) return refuse(read.error());
  Checkpoint& ck = read.value();
  StateDictPlan& plan = ck.plan;

  // 3. Layout: tensors in name order, each its own contiguous bytes.
  core::Safetensors st;
  uint64_t data_bytes = 0;
  std::map<std::string, std::vector<std::string>> by_storage;
  for (const TensorPlan& t : plan.tensors) {
    auto rec = ck.storages.find(t.key);
    if (rec == ck.storages.end()) {
      return refuse(Error{Code::kConvStorage, t.node_offset, Quoted(t.name, 120) + ": no storage " + Quoted(t.key, 120)});
    }
    const uint64_t el = ElemBytes(t.dtype);
    uint64_t want = 0, numel = 1, bytes = 0;
    bool overflow = __builtin_mul_overflow(t.storage_numel, el, &want);
    if (overflow || want != rec->second.bytes) {
      return refuse(Error{Code::kConvStorage, rec->second.offset,
                          "storage record " + Quoted(t.key, 60) + " holds " + std::to_string(rec->second.bytes) +
                              " bytes, not " + std::to_string(t.storage_numel) + " elements of " +
                              std::to_string(el) + " bytes"});
    }
    for (uint64_t d : t.shape) overflow |= __builtin_mul_overflow(numel, d, &numel);
    overflow |= __builtin_mul_overflow(numel, el, &bytes);
    if (overflow || bytes > options.limits.max_tensor_bytes) {
      return refuse(Error{Code::kConvLimit, t.node_offset,
                          Quoted(t.name, 120) + " is " + (overflow ? std::string("over 2^64") : std::to_string(bytes)) +
                              " bytes, over max_tensor_bytes (" + std::to_string(options.limits.max_tensor_bytes) + ")"});
    }
    if (__builtin_add_overflow(data_bytes, bytes, &data_bytes) || data_bytes > options.limits.max_total_bytes) {
      return refuse(Error{Code::kConvLimit, t.node_offset,
                          "the tensors pass max_total_bytes (" + std::to_string(options.limits.max_total_bytes) +
                              ") at " + Quoted(t.name, 120)});
    }
    core::TensorInfo ti;
    ti.name = t.name;
    ti.dtype = t.dtype;
    ti.shape = t.shape;
    ti.end = data_bytes;
    ti.begin = data_bytes - bytes;
    st.tensors.push_back(std::move(ti));
    by_storage[t.key].push_back(t.name);
    ConvertedTensor ct;
    ct.name = t.name;
    ct.dtype = t.dtype;
    ct.shape = t.shape;
    ct.storage = t.key;
    ct.bytes = bytes;
    uint64_t run = 1;
    for (size_t i = t.shape.size(); i > 0; --i) {
      if (t.shape[i - 1] != 1 && t.stride[i - 1] != run) ct.contiguous = false;
      run *= t.shape[i - 1];
    }
    rep.tensors.push_back(std::move(ct));
  }
  for (auto& [key, names] : by_storage) {
    if (names.size() > 1) rep.shared.push_back(names);
  }
  // 4. The source's digest, from the same descriptor.
  core::HashOptions ho;
  ho.threads = 1;
  std::vector<core::ByteRange> whole{{0, in.size}};
  auto sha = core::HashRanges(in.fd, whole, ho);
  if (!sha.ok()) return refuse(sha.error());
  rep.source_sha256 = core::HexLower(sha.value()[0]);

  std::vector<std::pair<std::string, std::string>> meta;
  // "format" is what transformers checks before loading: "pt" for torch's
  // checkpoints; arrays from numpy or joblib are "np", not a torch claim.
  const bool torch_source = scan.format == scanner::Format::kPytorchZip || scan.format == scanner::Format::kPickle ||
                            scan.format == scanner::Format::kPytorchTar;
  meta.emplace_back("format", torch_source ? "pt" : "np");
  meta.emplace_back("modelgate.source.sha256", rep.source_sha256);
  for (const auto& [k, v] : plan.string_leaves) {
    if (k == "format" || k == "modelgate.source.sha256" || k.rfind("stsig.", 0) == 0) {
      return refuse(Error{Code::kConvName, core::kNoOffset,
                          "the string leaf " + Quoted(k, 120) + " would replace reserved metadata"});
    }
    meta.emplace_back(k, v);
  }
  rep.string_leaves = plan.string_leaves;
  rep.dropped = plan.dropped;

  signer::StsigRecord record;
  std::vector<signer::TensorDigest> digests;
  const bool sign = options.key != nullptr;
  if (sign) {
    if (options.key->alg() != signer::KeyAlg::kEd25519) {
      return refuse(Error{Code::kSigOptions, core::kNoOffset, "embedded STSIG v1 signatures are Ed25519"});
    }
    record.kid = options.key->public_key().kid;
    record.created = options.created ? *options.created : static_cast<uint64_t>(std::time(nullptr));
    record.model = options.model;
    record.version = options.version;
    for (const auto& t : st.tensors) digests.emplace_back(t.name, core::Sha256Digest{});  // name order
  }
  core::Limits verify_limits = options.scan.limits;
  auto layout = signer::PlannedHeader(st, meta, sign ? &record : nullptr, digests, data_bytes, verify_limits);
  if (!layout.ok()) return refuse(layout.error());
  const uint64_t data_start = 8 + layout.value().size();
  st.header_bytes = layout.value().size();
  st.data_start = data_start;
  st.file_size = data_start + data_bytes;
  st.tensors.set_data_start(data_start);

  // 5. The data, then the header; committed only when all is written.
  auto created = core::AtomicOutput::Create(out_path, 0644);
  if (!created.ok()) return refuse(created.error());
  core::AtomicOutput out = std::move(created).value();
  for (size_t i = 0; i < plan.tensors.size(); ++i) {
    const TensorPlan& t = plan.tensors[i];
    const StorageBytes& sb = ck.storages.at(t.key);
    Writer w(out, data_start + st.tensors[i].begin, sb.big_endian, t.dtype, sign);
    const int data_fd = ck.data_fd >= 0 ? ck.data_fd : in.fd;
    auto copied = sb.codec == StorageBytes::Codec::kDeflate
                      ? CopyDeflated(data_fd, sb, t, options.limits.gather_window_bytes, w)
                      : CopyTensor(data_fd, sb.offset, t, options.limits.gather_window_bytes, w);
    if (!copied.ok()) return refuse(copied.error());
    if (sign) digests[i].second = w.Digest();
  }
  std::string header = layout.value();
  if (sign) {
    if (auto s = signer::SignPlanned(st, meta, digests, *options.key, &record); !s.ok()) return refuse(s.error());
    auto h = signer::PlannedHeader(st, meta, &record, digests, data_bytes, verify_limits);
    if (!h.ok()) return refuse(h.error());
    if (h.value().size() != header.size()) {
      return refuse(Error{Code::kSigCrypto, core::kNoOffset, "internal: header length changed after signing"});
    }
    header = std::move(h).value();
    rep.signed_output = true;
    rep.kid = record.kid;
  }
  std::vector<uint8_t> head(8 + header.size());
  for (int i = 0; i < 8; ++i) head[static_cast<size_t>(i)] = static_cast<uint8_t>(header.size() >> (8 * i));
  std::copy(header.begin(), header.end(), head.begin() + 8);
  if (auto s = out.WriteAt(0, head); !s.ok()) return refuse(s.error());
  // The output reads back as valid safetensors, and the source is the
  // file that was judged (nothing rewrote it while it was read).
  auto check = core::ReadSafetensors(out.fd(), st.file_size, verify_limits);
  if (!check.ok()) {
    return refuse(Error{Code::kConvUnsupported, core::kNoOffset,
                        "internal: the output does not parse (" + std::string(core::FindingId(check.error().code)) +
                            ": " + check.error().message + ")"});
  }
  if (auto s = core::CheckUnchanged(in); !s.ok()) return refuse(s.error());
  if (auto s = out.Commit(); !s.ok()) return refuse(s.error());
  rep.converted = true;
  rep.file_size = st.file_size;
  rep.header_bytes = header.size();
  return rep;
}

}  // namespace modelgate::convert
