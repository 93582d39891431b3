// A progress line on stderr while files are scanned and hashed. Drawn only
// when stderr is a terminal (never into a pipe or a log file) and -q is not
// given; the report itself always goes to stdout or -o, never here.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "modelgate/core.h"

namespace modelgate::cli {

struct Target;

class Progress {
 public:
  struct Options {
    int fd = 2;                   // where frames are written
    int width = 80;               // terminal columns
    uint64_t delay_ms = 500;      // draw nothing for runs shorter than this...
    uint64_t large_bytes = 64ull << 20;  // ...unless a file this large starts
    uint64_t tick_ms = 100;       // redraw period
    bool ticker = true;           // false: no thread; frames only via Tick()
    std::function<uint64_t()> now_ms;  // monotonic clock; default steady_clock
  };

  // `sizes` are the run's files' sizes as stat saw them (for display only;
  // 0 where unknown).
  Progress(std::vector<uint64_t> sizes, Options options);
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  // StartFile begins file `index` (0-based) in phase "scanning".
  void StartFile(size_t index, const std::string& path);
  // Phase names what is happening to the current file ("hashing", ...).
  void Phase(const char* name);
  // Hashed returns a callback, safe to call from any thread, that counts
  // bytes of the current file as processed (core::HashOptions::progress).
  core::ProgressFn Hashed();
  void EndFile();
  // Finish stops redrawing and erases the line. Called by the destructor.
  void Finish();

  // Tick draws a frame now if one is due (the ticker thread calls it).
  void Tick();
  // Frame is the text of the current frame, at most `width - 1` columns.
  std::string Frame();

 private:
  void DrawLocked(bool force);
  uint64_t Now() const;

  Options options_;
  const std::vector<uint64_t> sizes_;
  const uint64_t total_bytes_;  // saturating sum of sizes_
  const uint64_t start_ms_;

  std::mutex mu_;
  size_t index_ = 0;
  std::string path_;
  std::string phase_ = "scanning";
  uint64_t file_bytes_ = 0;
  uint64_t done_bytes_ = 0;  // sizes of finished files
  std::atomic<uint64_t> current_bytes_{0};
  bool drawn_ = false;
  bool finished_ = false;
  uint64_t last_draw_ms_ = 0;

  std::condition_variable cv_;
  std::thread ticker_;
};

// StderrProgress returns a progress line for a run over `targets`, or null
// when it must not draw: -q, stderr not a terminal, or TERM=dumb.
std::unique_ptr<Progress> StderrProgress(bool quiet, const std::vector<Target>& targets);

// HumanBytes is `bytes` as "512 B", "1.5 KiB", "3.2 GiB" (one decimal).
std::string HumanBytes(uint64_t bytes);

}  // namespace modelgate::cli
