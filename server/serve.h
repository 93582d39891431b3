// `modelgate serve`: the gate as an HTTP/1.1 service for a registry's
// pre-upload check (the service contract in README "Service"). Uploads are
// spooled to files no one else can open, judged under the server's one
// policy exactly as `modelgate check` judges files, and answered with the
// same modelgate.report/v1 document.
#pragma once

#include <cstdint>

#include "options.h"

namespace modelgate::server {

// kMaxWorkers bounds --workers: libyara runs at most YR_MAX_THREADS (32)
// scans at once over one compiled rule set, and every worker may scan.
inline constexpr uint64_t kMaxWorkers = 32;
// kMaxQueue bounds --queue (connections accepted and waiting for a worker).
inline constexpr uint64_t kMaxQueue = 65536;
// kMaxRefusalBacklog is how many connections over the queue wait to be
// answered 503; past it the accepting thread answers them itself.
inline constexpr uint64_t kMaxRefusalBacklog = 4096;
// kMaxHeaderBytes bounds a request line plus its headers (431 past it).
inline constexpr uint64_t kMaxHeaderBytes = 64 * 1024;
// kMaxNameBytes bounds ?name= (the client's file name: data, never a path).
inline constexpr uint64_t kMaxNameBytes = 4096;
// kMaxTokenFileBytes bounds --token-file.
inline constexpr uint64_t kMaxTokenFileBytes = 4096;
// kMaxTimeoutSeconds bounds --header-timeout and --body-timeout (a day).
inline constexpr uint64_t kMaxTimeoutSeconds = 86400;
// kWriteTimeoutSeconds is how long one response may take to be sent.
inline constexpr uint64_t kWriteTimeoutSeconds = 60;
// kKeepAliveSeconds is how long an idle kept-alive connection holds its
// worker; kKeepAliveRequests how many requests one connection may make.
inline constexpr uint64_t kKeepAliveSeconds = 5;
inline constexpr uint64_t kKeepAliveRequests = 100;
// kListenBacklog is the kernel's queue of connections not yet accepted
// (capped by net.core.somaxconn).
inline constexpr int kListenBacklog = 1024;

// RunServe serves until SIGTERM or SIGINT, then lets in-flight requests
// finish and returns 0. 2 when it cannot start (bad options, policy, port,
// spool).
int RunServe(const cli::CommonOptions& opts);

}  // namespace modelgate::server
