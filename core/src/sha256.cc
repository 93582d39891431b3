// SHA-256 via OpenSSL EVP, and the parallel range hasher.
#include <openssl/evp.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <numeric>
#include <optional>
#include <thread>

#include "modelgate/core.h"

namespace modelgate::core {
namespace {

EVP_MD_CTX* NewCtx() {
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  // Allocation failure or a missing default provider leaves nothing sane to
  // report a digest from: stop rather than return a wrong one.
  if (ctx == nullptr || EVP_DigestInit_ex(ctx, EVP_sha256(), nullptr) != 1) std::abort();
  return ctx;
}

unsigned WorkerCount(const HashOptions& options, size_t jobs) {
  unsigned n = options.threads;
  if (n == 0) n = std::max(1u, std::thread::hardware_concurrency());
  if (jobs < n) n = static_cast<unsigned>(std::max<size_t>(jobs, 1));
  return n;
}

// LargestFirst orders job indices by size, descending (ties: input order),
// so the dynamic queue below is LPT list scheduling.
template <typename SizeOf>
std::vector<size_t> LargestFirst(size_t count, SizeOf size_of) {
  std::vector<size_t> order(count);
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return size_of(a) > size_of(b); });
  return order;
}

// RunQueue runs job(i, scratch) for every i in `order` on `workers` threads,
// each taking the next index from a shared counter; `scratch` is a buffer
// owned by the worker, freed when it ends.
template <typename Job>
void RunQueue(const std::vector<size_t>& order, unsigned workers, Job job) {
  std::atomic<size_t> next{0};
  auto loop = [&] {
    std::vector<uint8_t> scratch;
    for (;;) {
      size_t k = next.fetch_add(1, std::memory_order_relaxed);
      if (k >= order.size()) return;
      if (!job(order[k], scratch)) return;
    }
  };
  if (workers <= 1) {
    loop();
    return;
  }
  std::vector<std::thread> threads;
  threads.reserve(workers - 1);
  for (unsigned t = 1; t < workers; ++t) {
    // A thread that cannot start (EAGAIN) leaves its share to the others:
    // throwing here would destroy the started ones joinable (terminate).
    try {
      threads.emplace_back(loop);
    } catch (...) {
      break;
    }
  }
  loop();
  for (auto& t : threads) t.join();
}

}  // namespace

Sha256Hasher::Sha256Hasher() : ctx_(NewCtx()) {}

Sha256Hasher::Sha256Hasher(Sha256Hasher&& o) noexcept : ctx_(o.ctx_) { o.ctx_ = nullptr; }

Sha256Hasher& Sha256Hasher::operator=(Sha256Hasher&& o) noexcept {
  if (this != &o) {
    EVP_MD_CTX_free(static_cast<EVP_MD_CTX*>(ctx_));
    ctx_ = o.ctx_;
    o.ctx_ = nullptr;
  }
  return *this;
}

Sha256Hasher::~Sha256Hasher() { EVP_MD_CTX_free(static_cast<EVP_MD_CTX*>(ctx_)); }

void Sha256Hasher::Update(std::span<const uint8_t> bytes) {
  if (ctx_ == nullptr) ctx_ = NewCtx();  // a moved-from hasher starts over
  if (bytes.empty()) return;
  if (EVP_DigestUpdate(static_cast<EVP_MD_CTX*>(ctx_), bytes.data(), bytes.size()) != 1) {
    std::abort();
  }
}

Sha256Digest Sha256Hasher::Final() {
  if (ctx_ == nullptr) ctx_ = NewCtx();
  auto* ctx = static_cast<EVP_MD_CTX*>(ctx_);
  Sha256Digest out{};
  unsigned int len = 0;
  if (EVP_DigestFinal_ex(ctx, out.data(), &len) != 1 || len != out.size() ||
      EVP_DigestInit_ex(ctx, EVP_sha256(), nullptr) != 1) {
    std::abort();
  }
  return out;
}

Sha256Digest Sha256(std::span<const uint8_t> bytes) {
  Sha256Hasher h;
  h.Update(bytes);
  return h.Final();
}

std::string HexLower(std::span<const uint8_t> bytes) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.resize(bytes.size() * 2);
  for (size_t i = 0; i < bytes.size(); ++i) {
    out[2 * i] = kHex[bytes[i] >> 4];
    out[2 * i + 1] = kHex[bytes[i] & 0xf];
  }
  return out;
}

bool ParseHexLower(std::string_view hex, std::span<uint8_t> out) {
  if (hex.size() != out.size() * 2) return false;
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  for (size_t i = 0; i < out.size(); ++i) {
    int hi = nibble(hex[2 * i]), lo = nibble(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return false;
    out[i] = static_cast<uint8_t>((hi << 4) | lo);
  }
  return true;
}

namespace {

// HashPipelined hashes one range with two threads: one preads chunks into a
// small ring of buffers while the other hashes them in order. One SHA-256
// chain cannot be split, but the copy out of the page cache (~15% of the
// work) then runs on the second core instead of stalling the hash.
Result<Sha256Digest> HashPipelined(int fd, const ByteRange& r, size_t buffer_bytes,
                                   const ProgressFn& progress) {
  constexpr size_t kSlots = 4;
  std::vector<std::vector<uint8_t>> slots(kSlots, std::vector<uint8_t>(buffer_bytes));
  std::array<size_t, kSlots> len{};
  std::mutex mu;
  std::condition_variable cv;
  uint64_t produced = 0, consumed = 0;  // chunks
  bool done = false;
  std::optional<Error> error;
  std::thread reader([&] {
    uint64_t pos = r.offset, left = r.size_bytes;
    for (uint64_t k = 0; left > 0; ++k) {
      {
        std::unique_lock<std::mutex> lock(mu);
        cv.wait(lock, [&] { return produced - consumed < kSlots; });
      }
      const size_t n = static_cast<size_t>(std::min<uint64_t>(left, buffer_bytes));
      Status s = PreadExact(fd, pos, std::span<uint8_t>(slots[k % kSlots].data(), n));
      {
        std::lock_guard<std::mutex> lock(mu);
        if (!s.ok()) {
          error = s.error();
          done = true;
        } else {
          len[k % kSlots] = n;
          ++produced;
        }
      }
      cv.notify_all();
      if (!s.ok()) return;
      pos += n;
      left -= n;
    }
    {
      std::lock_guard<std::mutex> lock(mu);
      done = true;
    }
    cv.notify_all();
  });
  Sha256Hasher h;
  for (uint64_t k = 0;; ++k) {
    size_t n = 0;
    {
      std::unique_lock<std::mutex> lock(mu);
      cv.wait(lock, [&] { return produced > consumed || done; });
      if (produced == consumed) break;  // done, and every chunk hashed
      n = len[k % kSlots];
    }
    h.Update(std::span<const uint8_t>(slots[k % kSlots].data(), n));
    if (progress) progress(n);
    {
      std::lock_guard<std::mutex> lock(mu);
      ++consumed;
    }
    cv.notify_all();
  }
  reader.join();
  if (error) return *error;
  return h.Final();
}

// Named is `e` with `name` (when given) before its message.
Error Named(Error e, std::string_view name) {
  if (!name.empty()) e.message = std::string(name) + ": " + e.message;
  return e;
}

}  // namespace

Result<std::vector<Sha256Digest>> HashFdRanges(std::span<const FdRange> ranges,
                                               const HashOptions& options) {
  std::vector<Sha256Digest> digests(ranges.size());
  auto order = LargestFirst(ranges.size(), [&](size_t i) { return ranges[i].range.size_bytes; });
  const size_t buffer_bytes = std::max<size_t>(options.buffer_bytes, 4096);

  // A range holding more than half of all bytes bounds the wall time however
  // the rest is scheduled: give it both threads (read + hash) first. (The
  // sum cannot overflow for ranges of real files; saturate anyway.)
  if (!order.empty() && WorkerCount(options, 2) >= 2) {
    const FdRange& big = ranges[order.front()];
    uint64_t total = 0;
    for (const auto& r : ranges) {
      if (__builtin_add_overflow(total, r.range.size_bytes, &total)) total = UINT64_MAX;
    }
    if (big.range.size_bytes > total / 2 && big.range.size_bytes >= 4 * uint64_t{buffer_bytes}) {
      auto d = HashPipelined(big.fd, big.range, buffer_bytes, options.progress);
      if (!d.ok()) return Named(d.error(), big.name);
      digests[order.front()] = d.value();
      order.erase(order.begin());
    }
  }
  const unsigned workers = WorkerCount(options, order.size());

  std::mutex error_mu;
  std::optional<Error> first_error;
  std::atomic<bool> failed{false};

  // Each call hashes one range with a buffer owned by the calling thread.
  auto job = [&](size_t i, std::vector<uint8_t>& buffer) -> bool {
    if (failed.load(std::memory_order_relaxed)) return false;
    if (buffer.size() < buffer_bytes) buffer.resize(buffer_bytes);
    Sha256Hasher h;
    const int fd = ranges[i].fd;
    uint64_t pos = ranges[i].range.offset;
    uint64_t left = ranges[i].range.size_bytes;
    while (left > 0) {
      size_t n = static_cast<size_t>(std::min<uint64_t>(left, buffer_bytes));
      Status s = PreadExact(fd, pos, std::span<uint8_t>(buffer.data(), n));
      if (!s.ok()) {
        std::lock_guard<std::mutex> lock(error_mu);
        if (!first_error) first_error = Named(s.error(), ranges[i].name);
        failed.store(true, std::memory_order_relaxed);
        return false;
      }
      h.Update(std::span<const uint8_t>(buffer.data(), n));
      if (options.progress) options.progress(n);
      pos += n;
      left -= n;
    }
    digests[i] = h.Final();
    return true;
  };
  RunQueue(order, workers, job);
  if (first_error) return *first_error;
  return digests;
}

Result<std::vector<Sha256Digest>> HashRanges(int fd, std::span<const ByteRange> ranges,
                                             const HashOptions& options) {
  std::vector<FdRange> fd_ranges;
  fd_ranges.reserve(ranges.size());
  for (const ByteRange& r : ranges) fd_ranges.push_back({fd, r, {}});
  return HashFdRanges(fd_ranges, options);
}

std::vector<Sha256Digest> HashSpans(std::span<const std::span<const uint8_t>> spans,
                                    const HashOptions& options) {
  std::vector<Sha256Digest> digests(spans.size());
  const auto order = LargestFirst(spans.size(), [&](size_t i) { return spans[i].size(); });
  RunQueue(order, WorkerCount(options, spans.size()), [&](size_t i, std::vector<uint8_t>&) {
    digests[i] = Sha256(spans[i]);
    return true;
  });
  return digests;
}

}  // namespace modelgate::core
