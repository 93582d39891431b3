#include "metrics.h"

#include <cstdio>

namespace modelgate::server {
namespace {

std::string Number(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

}  // namespace

void Metrics::Request(const std::string& endpoint, const std::string& verdict, int status,
                      double seconds) {
  std::lock_guard<std::mutex> lock(mu_);
  ++requests_[{endpoint, verdict}];
  ++responses_[status];
  Histogram& h = latency_[endpoint];
  for (size_t i = 0; i < kLatencyBuckets.size(); ++i) {
    if (seconds <= kLatencyBuckets[i]) ++h.buckets[i];
  }
  ++h.count;
  h.sum += seconds;
}

std::string Metrics::Render() const {
  // Labels are the server's own words (endpoints, verdicts, codes): no
  // client text reaches this page, so nothing here needs escaping.
  std::string out;
  std::lock_guard<std::mutex> lock(mu_);
  out += "# HELP modelgate_requests_total Requests answered, by endpoint and verdict.\n";
  out += "# TYPE modelgate_requests_total counter\n";
  for (const auto& [key, n] : requests_) {
    out += "modelgate_requests_total{endpoint=\"" + key.first + "\",verdict=\"" + key.second +
           "\"} " + std::to_string(n) + "\n";
  }
  out += "# HELP modelgate_responses_total Responses, by HTTP status code.\n";
  out += "# TYPE modelgate_responses_total counter\n";
  for (const auto& [code, n] : responses_) {
    out += "modelgate_responses_total{code=\"" + std::to_string(code) + "\"} " + std::to_string(n) +
           "\n";
  }
  out += "# HELP modelgate_request_duration_seconds Time from the request's headers to its response.\n";
  out += "# TYPE modelgate_request_duration_seconds histogram\n";
  for (const auto& [endpoint, h] : latency_) {
    const std::string label = "endpoint=\"" + endpoint + "\"";
    for (size_t i = 0; i < kLatencyBuckets.size(); ++i) {
      out += "modelgate_request_duration_seconds_bucket{" + label + ",le=\"" +
             Number(kLatencyBuckets[i]) + "\"} " + std::to_string(h.buckets[i]) + "\n";
    }
    out += "modelgate_request_duration_seconds_bucket{" + label + ",le=\"+Inf\"} " +
           std::to_string(h.count) + "\n";
    out += "modelgate_request_duration_seconds_sum{" + label + "} " + Number(h.sum) + "\n";
    out += "modelgate_request_duration_seconds_count{" + label + "} " + std::to_string(h.count) + "\n";
  }
  const auto gauge = [&](const char* name, const char* help, const char* type, auto value) {
    out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n" + name +
           " " + std::to_string(value) + "\n";
  };
  gauge("modelgate_scanned_bytes_total", "Upload bytes judged.", "counter", scanned_bytes.load());
  gauge("modelgate_requests_in_flight", "Requests being handled.", "gauge", in_flight.load());
  gauge("modelgate_requests_queued", "Connections waiting for a worker.", "gauge", queued.load());
  gauge("modelgate_spool_bytes", "Bytes held in the spool now.", "gauge", spool_bytes.load());
  gauge("modelgate_refused_connections_total", "Connections answered 503 because the queue was full.",
        "counter", refused_connections.load());
  return out;
}

}  // namespace modelgate::server
