// The server's counters, rendered in the Prometheus text exposition format
// (version 0.0.4) for GET /metrics.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>

namespace modelgate::server {

class Metrics {
 public:
  // kLatencyBuckets are the histogram's upper bounds in seconds: a
  // small file is judged in milliseconds, a large one in tens of seconds.
  static constexpr std::array<double, 12> kLatencyBuckets = {
      0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30};

  // Request records a finished request: its endpoint ("scan", "check",
  // "healthz", ...), its verdict ("pass" "reject" "error", or "none" when
  // it was refused before a verdict), its status code and duration.
  void Request(const std::string& endpoint, const std::string& verdict, int status, double seconds);

  std::atomic<uint64_t> scanned_bytes{0};  // upload bytes judged
  std::atomic<int64_t> in_flight{0};       // requests being handled
  std::atomic<int64_t> queued{0};          // connections waiting for a worker
  std::atomic<int64_t> spool_bytes{0};     // bytes in the spool now
  std::atomic<uint64_t> refused_connections{0};  // answered 503 by the queue

  std::string Render() const;

 private:
  struct Histogram {
    std::array<uint64_t, kLatencyBuckets.size()> buckets{};
    uint64_t count = 0;
    double sum = 0;
  };
  mutable std::mutex mu_;
  std::map<std::pair<std::string, std::string>, uint64_t> requests_;
  std::map<int, uint64_t> responses_;
  std::map<std::string, Histogram> latency_;
};

}  // namespace modelgate::server
