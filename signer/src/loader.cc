// OpenVerified: hand out tensor bytes only after they matched a trusted
// signature. The mapping (or private copy) is made from the fd that was
// verified, never by reopening the path. See signer.h for what each mode
// does and does not protect against.
#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <numeric>
#include <optional>
#include <thread>

#include "internal.h"

namespace modelgate::signer {
namespace {

using core::Code;
using core::Error;
using core::kNoOffset;

// Slot is one tensor's lazy check: run once, remembered for every later call.
struct Slot {
  std::once_flag once;
  std::optional<Error> failure;
};

// RangeMismatch is the kSigTensorMismatch error for a detached range.
Error RangeMismatch(const SignedRange& r, const core::Sha256Digest& got) {
  return Error{Code::kSigTensorMismatch, r.range.offset,
               "bytes [" + std::to_string(r.range.offset) + ", " +
                   std::to_string(r.range.offset + r.range.size_bytes) + ") hash to " +
                   core::HexLower(got) + ", the bundle's digest is " + core::HexLower(r.digest)};
}

// CheckRanges hashes `ranges` of the file open at `fd` (core::HashRanges:
// parallel pread) and compares each with its signed digest.
core::Status CheckRanges(int fd, std::span<const SignedRange> ranges,
                         const core::HashOptions& hash) {
  std::vector<core::ByteRange> plain;
  plain.reserve(ranges.size());
  for (const SignedRange& r : ranges) plain.push_back(r.range);
  auto hashed = core::HashRanges(fd, plain, hash);
  if (!hashed.ok()) return hashed.error();
  for (size_t k = 0; k < ranges.size(); ++k) {
    if (hashed.value()[k] != ranges[k].digest) return RangeMismatch(ranges[k], hashed.value()[k]);
  }
  return core::OkStatus();
}

// ReadAndHash preads `size` bytes at `offset` of `fd` into `dest` in pieces
// of `piece_bytes`, hashing each piece right after reading it (while it is
// in cache), so what is hashed is exactly what is handed out.
core::Result<core::Sha256Digest> ReadAndHash(int fd, uint64_t offset, uint64_t size,
                                             uint8_t* dest, size_t piece_bytes) {
  core::Sha256Hasher h;
  for (uint64_t done = 0; done < size;) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(piece_bytes, size - done));
    std::span<uint8_t> piece(dest + done, n);
    core::Status s = core::PreadExact(fd, offset + done, piece);
    if (!s.ok()) return s.error();
    h.Update(piece);
    done += n;
  }
  return h.Final();
}

Error ErrnoError(Code code, const std::string& what) {
  return Error{code, kNoOffset, what + ": " + std::strerror(errno)};
}

unsigned ThreadCount(const core::HashOptions& options, size_t jobs) {
  unsigned n = options.threads;
  if (n == 0) n = std::max(1u, std::thread::hardware_concurrency());
  return static_cast<unsigned>(std::clamp<size_t>(jobs, 1, n));
}

// ParallelLargestFirst runs job(i) for every tensor on up to `threads`
// threads, largest tensor first (LPT), so one big tensor starts early
// instead of last.
template <typename Job>
void ParallelLargestFirst(const core::TensorTable& tensors, unsigned threads,
                          Job job) {
  std::vector<size_t> order(tensors.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return tensors[a].size_bytes() > tensors[b].size_bytes();
  });
  std::atomic<size_t> next{0};
  auto loop = [&] {
    for (size_t k = next.fetch_add(1); k < order.size(); k = next.fetch_add(1)) job(order[k]);
  };
  std::vector<std::thread> pool;
  for (unsigned t = 1; t < threads; ++t) {
    // A thread that cannot start (EAGAIN) leaves its share to the others:
    // throwing here would destroy the started ones joinable (terminate).
    try {
      pool.emplace_back(loop);
    } catch (...) {
      break;
    }
  }
  loop();
  for (auto& t : pool) t.join();
}

}  // namespace

std::string_view LoadModeName(LoadMode mode) {
  switch (mode) {
    case LoadMode::kEager: return "eager";
    case LoadMode::kLazy: return "lazy";
    case LoadMode::kCopy: return "copy";
  }
  return "eager";
}

struct VerifiedModel::State {
  LoadMode mode = LoadMode::kEager;
  core::HashOptions hash;
  VerifyResult verification;
  std::vector<core::Sha256Digest> digests;  // signed digests, data order (lazy)
  std::vector<size_t> by_name;              // tensor indices sorted by name
  core::OpenedFile file;                    // kept open in lazy mode only
  internal::FileIdentity identity;          // fstat at open
  void* region = nullptr;                   // mapping or private buffer
  size_t region_bytes = 0;
  const uint8_t* data = nullptr;            // first byte of the data section
  std::unique_ptr<Slot[]> slots;            // lazy
  std::vector<SignedRange> detached;        // lazy detached: what the file must hash to
  bool is_detached = false;
  mutable Slot file_slot;                   // lazy detached: the whole file, once

  State() = default;
  State(const State&) = delete;
  State& operator=(const State&) = delete;
  ~State() {
    if (region != nullptr) ::munmap(region, region_bytes);
  }

  const core::Safetensors& st() const { return verification.file; }

  // CheckLazy hashes tensor `i` from the fd (the bytes the mapping shows,
  // read without touching the mapping, so a truncation is an error here, not
  // a SIGBUS) between two identity checks.
  std::optional<Error> CheckLazy(size_t i) const {
    const core::TensorView t = st().tensors[i];
    core::Status same = internal::CheckIdentity(file.fd, identity, "before tensor was hashed");
    if (!same.ok()) return same.error();
    core::HashOptions one = hash;
    one.threads = 1;
    const core::ByteRange range{t.file_begin(), t.size_bytes()};
    auto hashed = core::HashRanges(file.fd, std::span<const core::ByteRange>(&range, 1), one);
    if (!hashed.ok()) return hashed.error();
    if (hashed.value()[0] != digests[i]) {
      return internal::TensorMismatch(t, hashed.value()[0], digests[i]);
    }
    same = internal::CheckIdentity(file.fd, identity, "while tensor was hashed");
    if (!same.ok()) return same.error();
    return std::nullopt;
  }

  // CheckLazyFile hashes every signed range of the file from the fd
  // between two identity checks (lazy detached).
  std::optional<Error> CheckLazyFile() const {
    core::Status same = internal::CheckIdentity(file.fd, identity, "before file was hashed");
    if (!same.ok()) return same.error();
    core::Status hashed = CheckRanges(file.fd, detached, hash);
    if (!hashed.ok()) return hashed.error();
    same = internal::CheckIdentity(file.fd, identity, "while file was hashed");
    if (!same.ok()) return same.error();
    return std::nullopt;
  }

  std::optional<Error> EnsureChecked(size_t i) const {
    if (mode != LoadMode::kLazy) return std::nullopt;
    if (is_detached) {
      Slot& slot = file_slot;
      std::call_once(slot.once, [&] { slot.failure = CheckLazyFile(); });
      return slot.failure;
    }
    Slot& slot = slots[i];
    std::call_once(slot.once, [&] { slot.failure = CheckLazy(i); });
    return slot.failure;
  }
};

VerifiedModel::VerifiedModel(std::unique_ptr<State> state) : state_(std::move(state)) {}
VerifiedModel::VerifiedModel(VerifiedModel&& other) noexcept = default;
VerifiedModel& VerifiedModel::operator=(VerifiedModel&& other) noexcept = default;
VerifiedModel::~VerifiedModel() = default;

LoadMode VerifiedModel::mode() const { return state_->mode; }
const core::Safetensors& VerifiedModel::header() const { return state_->st(); }
const VerifyResult& VerifiedModel::verification() const { return state_->verification; }
size_t VerifiedModel::tensor_count() const { return state_->st().tensors.size(); }

std::optional<size_t> VerifiedModel::Find(std::string_view name) const {
  const auto& tensors = state_->st().tensors;
  auto it = std::lower_bound(state_->by_name.begin(), state_->by_name.end(), name,
                             [&](size_t i, std::string_view n) { return tensors[i].name < n; });
  if (it == state_->by_name.end() || tensors[*it].name != name) return std::nullopt;
  return *it;
}

core::Result<TensorView> VerifiedModel::Tensor(size_t index) const {
  const auto& tensors = state_->st().tensors;
  if (index >= tensors.size()) {
    return Error{Code::kSigOptions, kNoOffset,
                 "tensor index " + std::to_string(index) + " out of range (" +
                     std::to_string(tensors.size()) + " tensors)"};
  }
  if (auto failure = state_->EnsureChecked(index)) return *failure;
  const core::TensorView t = tensors[index];
  TensorView v;
  v.name = t.name;
  v.dtype = t.dtype;
  v.shape = t.shape.span();
  if (t.size_bytes() > 0) {
    v.bytes = std::span<const uint8_t>(state_->data + t.begin, static_cast<size_t>(t.size_bytes()));
  }
  return v;
}

core::Result<TensorView> VerifiedModel::Tensor(std::string_view name) const {
  auto index = Find(name);
  if (!index) {
    return Error{Code::kSigOptions, kNoOffset, "no tensor named " + core::Quoted(name)};
  }
  return Tensor(*index);
}

core::Status VerifiedModel::CheckAll() const {
  const auto& tensors = state_->st().tensors;
  if (state_->is_detached) {
    if (auto failure = state_->EnsureChecked(0)) return *failure;
    return core::OkStatus();
  }
  if (state_->mode == LoadMode::kLazy) {
    ParallelLargestFirst(tensors, ThreadCount(state_->hash, tensors.size()),
                         [&](size_t i) { (void)state_->EnsureChecked(i); });
  }
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (auto failure = state_->EnsureChecked(i)) return *failure;
  }
  return core::OkStatus();
}

namespace {

// ReadAndHashInto preads every tensor of `st` into `dest` (the data section's
// copy) with ReadAndHash, in parallel, and compares it with its digest.
core::Status ReadAndHashInto(int fd, const core::Safetensors& st, uint8_t* dest,
                             std::span<const core::Sha256Digest> digests,
                             const core::HashOptions& options) {
  const size_t piece_bytes = std::max<size_t>(options.buffer_bytes, 4096);
  std::mutex mu;
  std::optional<Error> first;  // lowest tensor index that failed
  size_t first_index = SIZE_MAX;
  std::atomic<bool> failed{false};
  ParallelLargestFirst(st.tensors, ThreadCount(options, st.tensors.size()), [&](size_t i) {
    if (failed.load(std::memory_order_relaxed)) return;
    const core::TensorView t = st.tensors[i];
    std::optional<Error> error;
    auto got = ReadAndHash(fd, t.file_begin(), t.size_bytes(), dest + t.begin, piece_bytes);
    if (!got.ok()) {
      error = got.error();
    } else if (got.value() != digests[i]) {
      error = internal::TensorMismatch(t, got.value(), digests[i]);
    }
    if (error) {
      std::lock_guard<std::mutex> lock(mu);
      if (i < first_index) {
        first_index = i;
        first = std::move(error);
      }
      failed.store(true, std::memory_order_relaxed);
    }
  });
  if (first) return *first;
  return core::OkStatus();
}

// CheckTiling: `ranges` cover [0, size) in order, without gap or overlap.
core::Status CheckTiling(std::span<const SignedRange> ranges, uint64_t size) {
  uint64_t at = 0;
  for (const SignedRange& r : ranges) {
    uint64_t end = 0;
    if (r.range.offset != at || __builtin_add_overflow(at, r.range.size_bytes, &end)) {
      return Error{Code::kSigOptions, kNoOffset,
                   "detached ranges do not tile the file: a range starts at " +
                       std::to_string(r.range.offset) + ", expected " + std::to_string(at)};
    }
    at = end;
  }
  if (at != size) {
    return Error{Code::kSigOptions, kNoOffset,
                 "detached ranges cover " + std::to_string(at) + " bytes of a " +
                     std::to_string(size) + "-byte file"};
  }
  return core::OkStatus();
}

// ReadAndHashWhole preads the whole file into `dest` range by range with
// ReadAndHash and compares each range with its signed digest.
core::Status ReadAndHashWhole(int fd, std::span<const SignedRange> ranges, uint8_t* dest,
                              const core::HashOptions& options) {
  const size_t piece_bytes = std::max<size_t>(options.buffer_bytes, 4096);
  for (const SignedRange& r : ranges) {
    auto got = ReadAndHash(fd, r.range.offset, r.range.size_bytes, dest + r.range.offset,
                           piece_bytes);
    if (!got.ok()) return got.error();
    if (got.value() != r.digest) return RangeMismatch(r, got.value());
  }
  return core::OkStatus();
}

// Placed is where a loader's bytes live: the mapping or private copy
// (region, unmapped by its owner even on failure) and the data section.
struct Placed {
  void* region = nullptr;
  size_t region_bytes = 0;
  const uint8_t* data = nullptr;
};

// VerifyDetachedUpFront does what each mode checks of a detached file open
// at `fd` before mapping: parses the header into *verification (copy: from
// the verified copy it makes in *placed) and, eager and copy, hashes every
// range; lazy keeps the ranges in *lazy_ranges for the first access.
core::Status VerifyDetachedUpFront(int fd, uint64_t size, const LoadOptions& options,
                                   Placed* placed, VerifyResult* out,
                                   std::vector<SignedRange>* lazy_ranges) {
  const std::vector<SignedRange>& ranges = *options.detached;
  const core::HashOptions& hash = options.verify.hash;
  core::Status tiled = CheckTiling(ranges, size);
  if (!tiled.ok()) return tiled;
  VerifyResult verification;
  verification.status = SigStatus::kValid;
  if (options.mode == LoadMode::kCopy) {
    if (size == 0) return Error{Code::kStTruncated, 0, "file is empty"};
    const size_t bytes = static_cast<size_t>(size);
    void* buffer = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (buffer == MAP_FAILED) return ErrnoError(Code::kIoRead, "cannot allocate the copy");
    placed->region = buffer;
    placed->region_bytes = bytes;
    core::Status copied = ReadAndHashWhole(fd, ranges, static_cast<uint8_t*>(buffer), hash);
    if (!copied.ok()) return copied;
    auto st = core::ParseSafetensors(std::span<const uint8_t>(static_cast<const uint8_t*>(buffer), bytes),
                                     options.verify.limits);
    if (!st.ok()) return st.error();
    verification.file = std::move(st).value();
    if (!options.writable && ::mprotect(buffer, bytes, PROT_READ) != 0) {
      return ErrnoError(Code::kIoRead, "cannot make the copy read-only");
    }
    placed->data = static_cast<const uint8_t*>(buffer) + verification.file.data_start;
    *out = std::move(verification);
    return core::OkStatus();
  }
  // Eager hashes before parsing, and lazy hashes when the parse fails: a
  // changed file is reported as changed bytes, not as a parse error of a
  // file nobody signed.
  if (options.mode == LoadMode::kEager) {
    core::Status same = CheckRanges(fd, ranges, hash);
    if (!same.ok()) return same;
  } else {
    *lazy_ranges = ranges;
  }
  auto st = core::ReadSafetensors(fd, size, options.verify.limits);
  if (!st.ok()) {
    if (options.mode == LoadMode::kLazy) {
      core::Status same = CheckRanges(fd, ranges, hash);
      if (!same.ok()) return same;
    }
    return st.error();
  }
  verification.file = std::move(st).value();
  *out = std::move(verification);
  return core::OkStatus();
}

}  // namespace

core::Result<VerifiedModel> OpenVerified(const std::string& path,
                                         std::span<const PublicKey> trusted,
                                         const LoadOptions& options) {
  auto opened = core::OpenRegularFile(path, options.verify.follow_symlink);
  if (!opened.ok()) return opened.error();
  return OpenVerifiedFile(std::move(opened).value(), path, trusted, options);
}

core::Result<VerifiedModel> OpenVerifiedFile(core::OpenedFile file, const std::string& path,
                                             std::span<const PublicKey> trusted,
                                             const LoadOptions& options) {
  auto state = std::make_unique<VerifiedModel::State>();
  state->mode = options.mode;
  state->hash = options.verify.hash;
  state->is_detached = options.detached.has_value();

  state->file = std::move(file);
  const int fd = state->file.fd;
  auto identity = internal::IdentityOf(fd);
  if (!identity.ok()) return identity.error();
  state->identity = identity.value();
  if (state->identity.size != state->file.size) {
    return Error{Code::kIoChanged, kNoOffset, "file changed while it was being opened"};
  }

  if (state->is_detached) {
    // 1-2. Detached: the bundle's ranges cover the whole file.
    Placed placed;
    core::Status checked = VerifyDetachedUpFront(fd, state->file.size, options, &placed,
                                                 &state->verification, &state->detached);
    state->region = placed.region;  // unmapped by ~State, even on failure
    state->region_bytes = placed.region_bytes;
    state->data = placed.data;
    if (!checked.ok()) return checked.error();
  } else {
    // 1. The header signature (all modes); eager also hashes every tensor
    //    from this fd here (VerifyFd: parallel pread + SHA-256).
    core::Result<VerifyResult> verified =
        options.mode == LoadMode::kEager
            ? VerifyFd(fd, state->file.size, trusted, options.verify)
            : internal::VerifyHeader(fd, state->file.size, trusted, options.verify,
                                     &state->digests);
    if (!verified.ok()) return verified.error();
    if (!verified.value().valid()) return verified.value().reason;
    state->verification = std::move(verified).value();
  }
  const core::Safetensors& st = state->st();

  // 2. Copy mode: read + hash into private memory, then seal it read-only
  //    (unless the caller asked for writable tensors).
  if (!state->is_detached && options.mode == LoadMode::kCopy && st.data_bytes() > 0) {
    const size_t bytes = static_cast<size_t>(st.data_bytes());
    void* buffer = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (buffer == MAP_FAILED) return ErrnoError(Code::kIoRead, "cannot allocate the copy");
    state->region = buffer;
    state->region_bytes = bytes;
    // Not MADV_HUGEPAGE: it halves the fill time once memory is defragmented
    // but stalled the first load of 1 GiB for 2.4-3.8 s in compaction here.
    core::Status copied =
        ReadAndHashInto(fd, st, static_cast<uint8_t*>(buffer), state->digests, state->hash);
    if (!copied.ok()) return copied.error();
    if (!options.writable && ::mprotect(buffer, bytes, PROT_READ) != 0) {
      return ErrnoError(Code::kIoRead, "cannot make the copy read-only");
    }
    state->data = static_cast<const uint8_t*>(buffer);
  }

  if (options.before_map_for_testing) options.before_map_for_testing(path);

  // 3. Eager and lazy: map the very fd that was verified (never the path).
  //    Writable: a private copy-on-write mapping, so writes stay in memory.
  if (options.mode != LoadMode::kCopy) {
    const size_t bytes = static_cast<size_t>(state->file.size);
    const int prot = options.writable ? PROT_READ | PROT_WRITE : PROT_READ;
    const int flags =
        options.writable || options.sharing == MapSharing::kPrivate ? MAP_PRIVATE : MAP_SHARED;
    void* map = ::mmap(nullptr, bytes, prot, flags, fd, 0);
    if (map == MAP_FAILED) return ErrnoError(Code::kIoRead, "cannot map the file");
    state->region = map;
    state->region_bytes = bytes;
    state->data = static_cast<const uint8_t*>(map) + st.data_start;
  }

  // 4. Same inode, size and times as at the open, after mapping.
  core::Status same = internal::CheckIdentity(fd, state->identity, "between open and mapping");
  if (!same.ok()) return same.error();

  if (options.mode == LoadMode::kLazy) {
    state->slots = std::make_unique<Slot[]>(st.tensors.size());
  } else {
    state->file = core::OpenedFile();  // the mapping or copy outlives the fd
  }
  state->by_name.resize(st.tensors.size());
  std::iota(state->by_name.begin(), state->by_name.end(), size_t{0});
  std::sort(state->by_name.begin(), state->by_name.end(),
            [&](size_t a, size_t b) { return st.tensors[a].name < st.tensors[b].name; });
  return VerifiedModel(std::move(state));
}

}  // namespace modelgate::signer
