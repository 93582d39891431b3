// GuardedMapping: a read-only mapping of an open file that survives the file
// being truncated under it. Touching a page past a shrunken file's end raises
// SIGBUS, which would kill the process that links the scanner. A process-wide
// SIGBUS handler (installed once, chaining to whatever handler was there)
// looks the faulting address up in a fixed table of live guarded mappings;
// when it is one of ours it maps an anonymous zero page over the faulting page
// and marks the mapping faulted, so the read resumes (seeing zeros) and the
// caller learns afterwards that the bytes it judged were not the file's. An
// address outside every guarded mapping goes to the previous handler (or the
// default action), so other SIGBUS faults behave as before.
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>

#include "modelgate/core.h"

namespace modelgate::core {
namespace {

// Live guarded mappings. The handler reads them without locks, so each slot
// is a pair of atomics; a slot is claimed with a CAS on `begin` (0 = free).
struct Slot {
  std::atomic<bool> used{false};
  std::atomic<uintptr_t> begin{0};
  std::atomic<uintptr_t> end{0};
  std::atomic<bool> faulted{false};
};
constexpr size_t kSlots = 256;
Slot g_slots[kSlots];

struct sigaction g_previous {};
std::once_flag g_install_once;
bool g_installed = false;

void ChainToPrevious(int sig, siginfo_t* info, void* context) {
  if ((g_previous.sa_flags & SA_SIGINFO) != 0 && g_previous.sa_sigaction != nullptr) {
    g_previous.sa_sigaction(sig, info, context);
    return;
  }
  if (g_previous.sa_handler == SIG_IGN) return;
  if (g_previous.sa_handler != SIG_DFL && g_previous.sa_handler != nullptr) {
    g_previous.sa_handler(sig);
    return;
  }
  // Default action: restore it and return; the faulting access runs again
  // and the kernel delivers SIGBUS with its default effect.
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  ::sigaction(SIGBUS, &dfl, nullptr);
}

void OnSigbus(int sig, siginfo_t* info, void* context) {
  const int saved_errno = errno;
  const auto addr = reinterpret_cast<uintptr_t>(info->si_addr);
  for (Slot& s : g_slots) {
    const uintptr_t b = s.begin.load(std::memory_order_acquire);
    if (b == 0 || addr < b || addr >= s.end.load(std::memory_order_acquire)) continue;
    const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
    void* at = reinterpret_cast<void*>(addr & ~(page - 1));
    // mmap is a plain system call here; it replaces only our own page.
    if (::mmap(at, page, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) != MAP_FAILED) {
      s.faulted.store(true, std::memory_order_release);
      errno = saved_errno;
      return;
    }
    break;
  }
  errno = saved_errno;
  ChainToPrevious(sig, info, context);
}

void Install() {
  struct sigaction sa {};
  sa.sa_sigaction = OnSigbus;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigemptyset(&sa.sa_mask);
  g_installed = ::sigaction(SIGBUS, &sa, &g_previous) == 0;
}

Slot* Claim(uintptr_t begin, uintptr_t end) {
  for (Slot& s : g_slots) {
    bool expected = false;
    if (!s.used.compare_exchange_strong(expected, true, std::memory_order_acq_rel)) continue;
    // The handler trusts `end` once `begin` is non-zero: publish it last.
    s.end.store(end, std::memory_order_release);
    s.faulted.store(false, std::memory_order_release);
    s.begin.store(begin, std::memory_order_release);
    return &s;
  }
  return nullptr;
}

}  // namespace

Result<GuardedMapping> GuardedMapping::Map(int fd, uint64_t size) {
  GuardedMapping m;
  m.size_ = size;
  if (size == 0) return m;
  if (size > SIZE_MAX) return Error{Code::kIoRead, kNoOffset, "file too large to map"};
  std::call_once(g_install_once, Install);
  if (!g_installed) return Error{Code::kIoRead, kNoOffset, "cannot install the SIGBUS guard"};
  void* p = ::mmap(nullptr, static_cast<size_t>(size), PROT_READ, MAP_PRIVATE, fd, 0);
  if (p == MAP_FAILED) {
    return Error{Code::kIoRead, kNoOffset, std::string("cannot map the file: ") + std::strerror(errno)};
  }
  const auto b = reinterpret_cast<uintptr_t>(p);
  Slot* slot = Claim(b, b + static_cast<uintptr_t>(size));
  if (slot == nullptr) {
    ::munmap(p, static_cast<size_t>(size));
    return Error{Code::kIoRead, kNoOffset,
                 "more than " + std::to_string(kSlots) + " guarded mappings at once"};
  }
  m.data_ = static_cast<const uint8_t*>(p);
  m.slot_ = slot;
  return m;
}

GuardedMapping::GuardedMapping(GuardedMapping&& o) noexcept
    : data_(o.data_), size_(o.size_), slot_(o.slot_) {
  o.data_ = nullptr;
  o.slot_ = nullptr;
  o.size_ = 0;
}

GuardedMapping& GuardedMapping::operator=(GuardedMapping&& o) noexcept {
  if (this != &o) {
    Release();
    data_ = o.data_, size_ = o.size_, slot_ = o.slot_;
    o.data_ = nullptr, o.slot_ = nullptr, o.size_ = 0;
  }
  return *this;
}

GuardedMapping::~GuardedMapping() { Release(); }

void GuardedMapping::Release() {
  if (data_ == nullptr) return;
  // Unpublish before unmapping, so no later fault at these addresses (a new
  // mapping the kernel may place there) is taken for ours.
  Slot* slot = static_cast<Slot*>(slot_);
  slot->begin.store(0, std::memory_order_release);
  ::munmap(const_cast<uint8_t*>(data_), static_cast<size_t>(size_));
  slot->used.store(false, std::memory_order_release);
  data_ = nullptr;
  slot_ = nullptr;
}

void GuardedMapping::ReleasePages(uint64_t offset, uint64_t size_bytes) const {
  if (data_ == nullptr || offset >= size_ || size_bytes == 0) return;
  const uint64_t end = size_bytes > size_ - offset ? size_ : offset + size_bytes;
  const auto page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  const uint64_t b = (offset + page - 1) / page * page;  // whole pages only
  const uint64_t e = end == size_ ? end : end / page * page;
  if (e <= b) return;
  // The mapping is private and read-only: no page of it was ever written,
  // so dropping one loses nothing (a zero page the SIGBUS guard put there
  // reads as zeros again). Advice only: a failure leaves the pages resident.
  (void)::madvise(const_cast<uint8_t*>(data_) + b, static_cast<size_t>(e - b), MADV_DONTNEED);
}

bool GuardedMapping::faulted() const {
  return slot_ != nullptr && static_cast<const Slot*>(slot_)->faulted.load(std::memory_order_acquire);
}

}  // namespace modelgate::core
