#include "progress.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>

#include "cli.h"

namespace modelgate::cli {
namespace {

constexpr int kBarCells = 12;
// The bar is left out when it would leave the path fewer columns than this.
constexpr size_t kMinPathColumns = 16;

uint64_t SteadyMs() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

// Columns of UTF-8 text (code points; the text is already escaped, so no
// control characters remain).
size_t Columns(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

// KeepTail shortens `s` to at most `cols` columns by dropping its start
// (the end of a path names the file), cutting only at code point starts.
std::string KeepTail(const std::string& s, size_t cols) {
  if (Columns(s) <= cols) return s;
  if (cols <= 3) return std::string(cols, '.');
  size_t need = cols - 3, pos = s.size();
  while (pos > 0 && need > 0) {
    --pos;
    if ((static_cast<unsigned char>(s[pos]) & 0xC0) != 0x80) --need;
  }
  return "..." + s.substr(pos);
}

std::string Elapsed(uint64_t ms) {
  uint64_t s = ms / 1000;
  char buf[32];
  if (s >= 3600) {
    std::snprintf(buf, sizeof buf, "%llu:%02llu:%02llu", static_cast<unsigned long long>(s / 3600),
                  static_cast<unsigned long long>(s / 60 % 60), static_cast<unsigned long long>(s % 60));
  } else {
    std::snprintf(buf, sizeof buf, "%02llu:%02llu", static_cast<unsigned long long>(s / 60),
                  static_cast<unsigned long long>(s % 60));
  }
  return buf;
}

uint64_t AddSat(uint64_t a, uint64_t b) { return b > UINT64_MAX - a ? UINT64_MAX : a + b; }

uint64_t SumSat(const std::vector<uint64_t>& v) {
  uint64_t s = 0;
  for (uint64_t x : v) s = AddSat(s, x);
  return s;
}

void WriteAll(int fd, const std::string& s) {
  size_t off = 0;
  while (off < s.size()) {
    ssize_t n = ::write(fd, s.data() + off, s.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // a progress line is best effort
    off += static_cast<size_t>(n);
  }
}

}  // namespace

std::string HumanBytes(uint64_t bytes) {
  static const char* const kUnits[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  if (bytes < 1024) return std::to_string(bytes) + " B";
  double v = static_cast<double>(bytes);
  size_t u = 0;
  v /= 1024;
  while (v >= 1024 && u + 1 < std::size(kUnits)) {
    v /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f %s", v, kUnits[u]);
  return buf;
}

Progress::Progress(std::vector<uint64_t> sizes, Options options)
    : options_(std::move(options)),
      sizes_(std::move(sizes)),
      total_bytes_(SumSat(sizes_)),
      start_ms_(options_.now_ms ? options_.now_ms() : SteadyMs()) {
  if (options_.ticker) {
    ticker_ = std::thread([this] {
      std::unique_lock<std::mutex> lock(mu_);
      while (!finished_) {
        cv_.wait_for(lock, std::chrono::milliseconds(options_.tick_ms));
        if (!finished_) DrawLocked(false);
      }
    });
  }
}

Progress::~Progress() { Finish(); }

uint64_t Progress::Now() const { return options_.now_ms ? options_.now_ms() : SteadyMs(); }

void Progress::StartFile(size_t index, const std::string& path) {
  std::lock_guard<std::mutex> lock(mu_);
  index_ = index;
  path_ = DisplayPath(path);
  phase_ = "scanning";
  file_bytes_ = index < sizes_.size() ? sizes_[index] : 0;
  current_bytes_.store(0, std::memory_order_relaxed);
  // A large file gets its line at once; small ones only in a long run.
  if (file_bytes_ >= options_.large_bytes) DrawLocked(true);
}

void Progress::Phase(const char* name) {
  std::lock_guard<std::mutex> lock(mu_);
  phase_ = name;
  current_bytes_.store(0, std::memory_order_relaxed);
  if (drawn_) DrawLocked(true);
}

core::ProgressFn Progress::Hashed() {
  return [this](uint64_t n) { current_bytes_.fetch_add(n, std::memory_order_relaxed); };
}

void Progress::EndFile() {
  std::lock_guard<std::mutex> lock(mu_);
  done_bytes_ = AddSat(done_bytes_, file_bytes_);
  file_bytes_ = 0;
  current_bytes_.store(0, std::memory_order_relaxed);
}

void Progress::Finish() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (finished_) return;
    finished_ = true;
    if (drawn_) WriteAll(options_.fd, "\r\033[K");
  }
  cv_.notify_all();
  if (ticker_.joinable()) ticker_.join();
}

void Progress::Tick() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!finished_) DrawLocked(false);
}

std::string Progress::Frame() {
  const uint64_t current = std::min(current_bytes_.load(std::memory_order_relaxed), file_bytes_);
  const uint64_t done = AddSat(done_bytes_, current);
  std::string head = std::to_string(std::min(index_ + 1, sizes_.size())) + "/" +
                     std::to_string(sizes_.size()) + " " + phase_ + " ";
  // The bar is the whole run's bytes: finished files plus what has been
  // hashed of this one (a scan reads only what its format needs, so a
  // scanning file counts when it ends).
  std::string bar;
  if (total_bytes_ > 0) {
    const double frac = std::min(1.0, static_cast<double>(done) / static_cast<double>(total_bytes_));
    const int cells = static_cast<int>(frac * kBarCells);
    char pct[8];
    std::snprintf(pct, sizeof pct, "%3d%%", static_cast<int>(frac * 100));
    bar = "[" + std::string(static_cast<size_t>(cells), '#') +
          std::string(static_cast<size_t>(kBarCells - cells), '-') + "] " + pct + " ";
  }
  const std::string tail =
      HumanBytes(done) + "/" + HumanBytes(total_bytes_) + " " + Elapsed(Now() - start_ms_);
  const size_t width = options_.width > 1 ? static_cast<size_t>(options_.width - 1) : 0;
  std::string line = head + bar + tail;
  if (Columns(line) + 2 + kMinPathColumns > width) line = head + tail;  // narrow: no bar
  if (Columns(line) + 2 >= width) return KeepTail(line, width);
  return line + "  " + KeepTail(path_, width - Columns(line) - 2);
}

void Progress::DrawLocked(bool force) {
  const uint64_t now = Now();
  if (!force) {
    if (!drawn_ && now - start_ms_ < options_.delay_ms) return;
    if (drawn_ && now - last_draw_ms_ < options_.tick_ms) return;
  }
  if (path_.empty()) return;  // no file started yet
  WriteAll(options_.fd, "\r" + Frame() + "\033[K");
  drawn_ = true;
  last_draw_ms_ = now;
}

std::unique_ptr<Progress> StderrProgress(bool quiet, const std::vector<Target>& targets) {
  if (quiet || ::isatty(STDERR_FILENO) != 1) return nullptr;
  const char* term = std::getenv("TERM");
  if (term != nullptr && std::strcmp(term, "dumb") == 0) return nullptr;
  Progress::Options o;
  o.fd = STDERR_FILENO;
  struct winsize ws{};
  if (::ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) o.width = ws.ws_col;
  std::vector<uint64_t> sizes;
  sizes.reserve(targets.size());
  for (const auto& t : targets) sizes.push_back(t.size_bytes);  // the walk's stat
  return std::make_unique<Progress>(std::move(sizes), std::move(o));
}

}  // namespace modelgate::cli
