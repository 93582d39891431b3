#include "serve.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <httplib.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/rand.h>
#include <openssl/ssl.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <ctime>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <fstream>
#include <functional>
#include <iostream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "checker.h"
#include "cli.h"
#include <dirent.h>
#include "exit_code.h"
#include "metrics.h"
#include "stdin_spool.h"
#include "upload_tar.h"

namespace modelgate::server {
namespace {

using Clock = std::chrono::steady_clock;
using httplib::Request;
using httplib::Response;

// ---- configuration ----------------------------------------------------

struct Config {
  std::string host;
  int port = 0;
  std::string token;  // empty: loopback clients only
  uint64_t max_body_bytes = 0;
  uint64_t workers = 0, queue = 0;
  std::string spool;
  std::chrono::seconds header_timeout{0}, body_timeout{0};
  std::string tls_cert, tls_key;
};

bool ParseListen(const std::string& s, std::string* host, int* port) {
  std::string h, p;
  if (!s.empty() && s.front() == '[') {
    const size_t close = s.find(']');
    if (close == std::string::npos || close + 1 >= s.size() || s[close + 1] != ':') return false;
    h = s.substr(1, close - 1);
    p = s.substr(close + 2);
  } else {
    const size_t colon = s.rfind(':');
    if (colon == std::string::npos || s.find(':') != colon) return false;
    h = s.substr(0, colon);
    p = s.substr(colon + 1);
  }
  if (h.empty() || p.empty() || p.size() > 5) return false;
  int n = 0;
  for (char c : p) {
    if (c < '0' || c > '9') return false;
    n = n * 10 + (c - '0');
  }
  if (n > 65535) return false;
  unsigned char buf[sizeof(in6_addr)];
  if (inet_pton(AF_INET, h.c_str(), buf) != 1 && inet_pton(AF_INET6, h.c_str(), buf) != 1) return false;
  *host = h;
  *port = n;
  return true;
}

// ReadToken reads the bearer token: the file's bytes without one trailing
// newline (\n or \r\n); it must be non-empty printable ASCII. Unlike the
// CLI's ReadSecretFile (key passphrases, PINs: O_NOFOLLOW, mode 0600) it
// follows a symlink and accepts any mode, on purpose: the token is mounted
// by the orchestrator, and Kubernetes secret volumes are symlinks into
// ..data/ with mode 0644 by default, Docker secrets 0444.
bool ReadToken(const std::string& path, std::string* token, std::string* why) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    *why = "cannot open " + core::Quoted(path) + ": " + std::strerror(errno);
    return false;
  }
  struct stat st {};
  std::string t(kMaxTokenFileBytes + 1, '\0');
  ssize_t n = -1;
  if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) n = ::read(fd, t.data(), t.size());
  ::close(fd);
  if (n < 0) {
    *why = core::Quoted(path) + " is not a readable regular file";
    return false;
  }
  if (static_cast<uint64_t>(n) > kMaxTokenFileBytes) {
    *why = core::Quoted(path) + " is longer than " + std::to_string(kMaxTokenFileBytes) +
           " bytes (kMaxTokenFileBytes)";
    return false;
  }
  t.resize(static_cast<size_t>(n));
  if (!t.empty() && t.back() == '\n') t.pop_back();
  if (!t.empty() && t.back() == '\r') t.pop_back();
  if (t.empty()) {
    *why = core::Quoted(path) + " holds no token";
    return false;
  }
  for (unsigned char c : t) {
    if (c <= 0x20 || c >= 0x7f) {
      *why = core::Quoted(path) + ": the token must be printable ASCII without spaces";
      return false;
    }
  }
  *token = std::move(t);
  return true;
}

// ---- the spool --------------------------------------------------------

// kTreePrefix names the directories /v1/check unpacks uploads into; a
// restart removes what a killed server left of them. Bodies themselves are
// nameless files (NamelessFile): they vanish with their descriptor.
constexpr std::string_view kTreePrefix = "mgs-";

// OpenSpool makes the spool directory (0700, not a symlink, not writable
// by others), locks it against a second server, and clears leftovers.
// Returns the lock's descriptor (held for the server's life), or -1.
int OpenSpool(const std::string& dir, std::string* why) {
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    *why = "cannot create the spool " + core::Quoted(dir) + ": " + std::strerror(errno);
    return -1;
  }
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  struct stat st {};
  if (dfd < 0 || ::fstat(dfd, &st) != 0) {
    *why = "the spool " + core::Quoted(dir) + " is not a directory (or is a symlink)";
    if (dfd >= 0) ::close(dfd);
    return -1;
  }
  if (st.st_uid != ::geteuid() || (st.st_mode & 0022) != 0) {
    *why = "the spool " + core::Quoted(dir) +
           " must be a directory of this user that no one else can write to";
    ::close(dfd);
    return -1;
  }
  if (::flock(dfd, LOCK_EX | LOCK_NB) != 0) {
    *why = "another modelgate serve uses the spool " + core::Quoted(dir);
    ::close(dfd);
    return -1;
  }
  const int list = ::fcntl(dfd, F_DUPFD_CLOEXEC, 0);
  DIR* d = list >= 0 ? ::fdopendir(list) : nullptr;
  std::vector<std::string> stale;
  while (d != nullptr) {
    dirent* e = ::readdir(d);
    if (e == nullptr) break;
    if (std::string_view(e->d_name).substr(0, kTreePrefix.size()) == kTreePrefix) {
      stale.emplace_back(e->d_name);
    }
  }
  if (d != nullptr) ::closedir(d);
  for (const std::string& name : stale) {
    const int sub = ::openat(dfd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (sub >= 0) {
      RemoveTree(sub);
      ::close(sub);
      ::unlinkat(dfd, name.c_str(), AT_REMOVEDIR);
    } else {
      ::unlinkat(dfd, name.c_str(), 0);
    }
  }
  return dfd;
}

// ---- one connection ---------------------------------------------------

// Conn is one client connection as httplib reads and writes it: buffered,
// every read bounded by the current phase's deadline (the headers', then
// the body's), the headers' bytes bounded by kMaxHeaderBytes, optionally
// TLS. The server reads request bodies itself, through Conn, so nothing
// httplib does can hold a body in memory.
class Conn final : public httplib::Stream {
 public:
  enum class Phase { kHeaders, kBody };

  Conn(int sock, SSL* ssl) : sock_(sock), ssl_(ssl) {}
  ~Conn() override {
    if (ssl_ != nullptr) SSL_free(ssl_);
  }
  Conn(const Conn&) = delete;
  Conn& operator=(const Conn&) = delete;

  bool Handshake(Clock::time_point deadline) {
    if (ssl_ == nullptr) return true;
    read_deadline_ = write_deadline_ = deadline;
    for (;;) {
      ERR_clear_error();
      const int rc = SSL_accept(ssl_);
      if (rc == 1) return true;
      if (!WaitSsl(SSL_get_error(ssl_, rc))) return false;
    }
  }

  // StartRequest begins reading a request's headers.
  void StartRequest(std::chrono::seconds header_timeout, Clock::time_point now = Clock::now()) {
    header_text_.clear();
    phase_ = Phase::kHeaders;
    read_deadline_ = now + header_timeout;
    write_deadline_ = now + header_timeout + std::chrono::seconds(kWriteTimeoutSeconds);
    header_bytes_ = 0;
    request_bytes_ = 0;
    handled = false;
    timed_out_ = header_overflow_ = false;
  }
  void StartBody(std::chrono::seconds body_timeout) {
    phase_ = Phase::kBody;
    read_deadline_ = Clock::now() + body_timeout;
  }
  void StartResponse() { write_deadline_ = Clock::now() + std::chrono::seconds(kWriteTimeoutSeconds); }

  // WaitForNext waits for a kept-alive connection's next request, giving
  // up early once `stop` is set (SIGTERM: idle connections close at once).
  bool WaitForNext(std::chrono::seconds idle, const std::atomic<bool>& stop) {
    if (pos_ < len_ || (ssl_ != nullptr && SSL_pending(ssl_) > 0)) return true;
    const auto deadline = Clock::now() + idle;
    while (!stop) {
      const auto step = std::min(deadline, Clock::now() + std::chrono::milliseconds(100));
      if (Poll(POLLIN, step)) return true;
      if (Clock::now() >= deadline) return false;
      timed_out_ = false;
    }
    return false;
  }

  bool is_readable() const override {
    return pos_ < len_ || (ssl_ != nullptr && SSL_pending(ssl_) > 0) || Poll(POLLIN, read_deadline_);
  }
  bool is_writable() const override { return Poll(POLLOUT, write_deadline_); }

  ssize_t read(char* ptr, size_t size) override {
    if (pos_ == len_) {
      const ssize_t n = RawRead(buf_, sizeof buf_);
      if (n <= 0) return n;
      pos_ = 0;
      len_ = static_cast<size_t>(n);
    }
    size_t n = std::min(size, len_ - pos_);
    if (phase_ == Phase::kHeaders) {
      if (header_bytes_ >= kMaxHeaderBytes) {
        header_overflow_ = true;
        return -1;
      }
      n = std::min<size_t>(n, kMaxHeaderBytes - header_bytes_);
      header_bytes_ += n;
      header_text_.append(buf_ + pos_, n);
    }
    std::memcpy(ptr, buf_ + pos_, n);
    pos_ += n;
    request_bytes_ += n;
    return static_cast<ssize_t>(n);
  }

  ssize_t write(const char* ptr, size_t size) override {
    for (;;) {
      ssize_t n;
      if (ssl_ != nullptr) {
        ERR_clear_error();
        const int rc = SSL_write(ssl_, ptr, static_cast<int>(std::min<size_t>(size, 1 << 30)));
        if (rc > 0) return rc;
        if (!WaitSsl(SSL_get_error(ssl_, rc))) return -1;
        continue;
      }
      n = ::send(sock_, ptr, size, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n >= 0) return n;
      if (errno == EINTR) continue;
      if ((errno != EAGAIN && errno != EWOULDBLOCK) || !Poll(POLLOUT, write_deadline_)) return -1;
    }
  }

  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    Address(::getpeername, &ip, &port);
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    Address(::getsockname, &ip, &port);
  }
  socket_t socket() const override { return sock_; }

  // WriteRaw sends a whole response httplib did not write (408, 431).
  void WriteRaw(const std::string& text) {
    StartResponse();
    size_t done = 0;
    while (done < text.size()) {
      const ssize_t n = write(text.data() + done, text.size() - done);
      if (n <= 0) return;
      done += static_cast<size_t>(n);
    }
  }

  Phase phase() const { return phase_; }
  // The request line and headers as received (at most kMaxHeaderBytes).
  const std::string& header_text() const { return header_text_; }
  bool timed_out() const { return timed_out_; }
  bool header_overflow() const { return header_overflow_; }
  uint64_t request_bytes() const { return request_bytes_; }
  bool peer_closed() const { return peer_closed_; }
  bool close_after = false;  // set by a handler that left a body unread
  bool handled = false;      // the request reached Handle

  static void AddressOf(const sockaddr_storage& ss, std::string* ip, int* port) {
    char text[INET6_ADDRSTRLEN] = "";
    if (ss.ss_family == AF_INET) {
      const auto* a = reinterpret_cast<const sockaddr_in*>(&ss);
      inet_ntop(AF_INET, &a->sin_addr, text, sizeof text);
      *port = ntohs(a->sin_port);
    } else if (ss.ss_family == AF_INET6) {
      const auto* a = reinterpret_cast<const sockaddr_in6*>(&ss);
      inet_ntop(AF_INET6, &a->sin6_addr, text, sizeof text);
      *port = ntohs(a->sin6_port);
    }
    *ip = text;
  }
 private:
  void Address(int (*get)(int, sockaddr*, socklen_t*), std::string* ip, int* port) const {
    sockaddr_storage ss {};
    socklen_t len = sizeof ss;
    *port = -1;
    ip->clear();
    if (get(sock_, reinterpret_cast<sockaddr*>(&ss), &len) == 0) AddressOf(ss, ip, port);
  }

  bool Poll(short events, Clock::time_point deadline) const {
    for (;;) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      if (left.count() <= 0) {
        timed_out_ = true;
        return false;
      }
      pollfd p{sock_, events, 0};
      const int rc = ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left.count(), 1000)));
      if (rc > 0) return true;
      if (rc < 0 && errno != EINTR) return false;
    }
  }

  bool WaitSsl(int err) const {
    if (err == SSL_ERROR_WANT_READ) return Poll(POLLIN, read_deadline_);
    if (err == SSL_ERROR_WANT_WRITE) return Poll(POLLOUT, write_deadline_);
    return false;
  }

  ssize_t RawRead(char* p, size_t n) {
    for (;;) {
      if (ssl_ != nullptr) {
        ERR_clear_error();
        const int rc = SSL_read(ssl_, p, static_cast<int>(n));
        if (rc > 0) return rc;
        const int err = SSL_get_error(ssl_, rc);
        if (err == SSL_ERROR_ZERO_RETURN) {
          peer_closed_ = true;
          return 0;
        }
        if (!WaitSsl(err)) return -1;
        continue;
      }
      const ssize_t r = ::recv(sock_, p, n, MSG_DONTWAIT);
      if (r > 0) return r;
      if (r == 0) {
        peer_closed_ = true;
        return 0;
      }
      if (errno == EINTR) continue;
      if ((errno != EAGAIN && errno != EWOULDBLOCK) || !Poll(POLLIN, read_deadline_)) return -1;
    }
  }

  int sock_;
  SSL* ssl_;
  char buf_[16 * 1024];
  size_t pos_ = 0, len_ = 0;
  Phase phase_ = Phase::kHeaders;
  Clock::time_point read_deadline_{}, write_deadline_{};
  uint64_t header_bytes_ = 0, request_bytes_ = 0;
  std::string header_text_;
  mutable bool timed_out_ = false;
  bool header_overflow_ = false, peer_closed_ = false;
};

// The connection the current worker thread serves (a worker serves one at
// a time), and whether this thread only refuses connections.
thread_local Conn* t_conn = nullptr;
thread_local bool t_refuse = false;
// When the connection a worker runs was accepted: its first request's
// headers are due header-timeout after that, not after it left the queue,
// so idle connections waiting in the queue expire there too.
thread_local Clock::time_point t_accepted{};

std::string ErrorJson(const std::string& code, const std::string& message, const std::string& id) {
  nlohmann::json j;
  j["error"] = {{"code", code}, {"message", core::EscapeInvalidUtf8(message)}, {"request_id", id}};
  return j.dump() + "\n";
}

std::string RawResponse(int status, const char* reason, const std::string& body,
                        const std::string& extra_headers = "") {
  return "HTTP/1.1 " + std::to_string(status) + " " + reason +
         "\r\nContent-Type: application/json\r\nConnection: close\r\n" + extra_headers +
         "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
}

// ---- the worker queue -------------------------------------------------

// Queue runs connections on `workers` threads with at most `queue` waiting.
// A connection beyond that is refused at once — answered 503 without
// reading a byte of it — by one refusal thread, so a flood of idle
// connections costs the workers nothing (clamd's MaxQueue). On shutdown
// (SIGTERM) connections still waiting are refused the same way, while
// those being served finish.
class Queue final : public httplib::TaskQueue {
 public:
  Queue(size_t workers, size_t queue, Metrics* metrics) : queue_(queue), metrics_(*metrics) {
    for (size_t i = 0; i < workers; ++i) threads_.emplace_back([this] { Work(); });
    refuser_ = std::thread([this] { Refuse(); });
  }

  void enqueue(std::function<void()> fn) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!stopping_ && jobs_.size() < queue_ + idle_) {
        jobs_.push_back([fn = std::move(fn), at = Clock::now()] {
          t_accepted = at;
          fn();
        });
        metrics_.queued = static_cast<int64_t>(jobs_.size());
        cv_.notify_one();
        return;
      }
      metrics_.refused_connections++;
      if (refusals_.size() < kMaxRefusalBacklog) {
        refusals_.push_back(std::move(fn));
        refuse_cv_.notify_one();
        return;
      }
    }
    RunRefused(fn);  // on the accepting thread: slows accepting, never grows
  }

  void shutdown() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    refuse_cv_.notify_all();
    for (std::thread& t : threads_) t.join();
    refuser_.join();
  }

 private:
  static void RunRefused(std::function<void()>& fn) {
    t_refuse = true;
    fn();
    t_refuse = false;
  }

  void Work() {
    for (;;) {
      std::function<void()> fn;
      bool refuse = false;
      {
        std::unique_lock<std::mutex> lock(mu_);
        ++idle_;
        cv_.wait(lock, [&] { return stopping_ || !jobs_.empty(); });
        --idle_;
        if (jobs_.empty()) return;  // stopping, nothing left
        fn = std::move(jobs_.front());
        jobs_.pop_front();
        metrics_.queued = static_cast<int64_t>(jobs_.size());
        refuse = stopping_;
      }
      if (refuse) {
        RunRefused(fn);
      } else {
        fn();
      }
    }
  }

  void Refuse() {
    for (;;) {
      std::function<void()> fn;
      {
        std::unique_lock<std::mutex> lock(mu_);
        refuse_cv_.wait(lock, [&] { return stopping_ || !refusals_.empty(); });
        if (refusals_.empty()) return;
        fn = std::move(refusals_.front());
        refusals_.pop_front();
      }
      RunRefused(fn);
    }
  }

  const size_t queue_;
  Metrics& metrics_;
  std::mutex mu_;
  std::condition_variable cv_, refuse_cv_;
  std::deque<std::function<void()>> jobs_, refusals_;
  size_t idle_ = 0;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
  std::thread refuser_;
};

// ---- the server -------------------------------------------------------

bool IsLoopback(const std::string& ip) {
  in_addr a4{};
  in6_addr a6{};
  if (inet_pton(AF_INET, ip.c_str(), &a4) == 1) return (ntohl(a4.s_addr) >> 24) == 127;
  if (inet_pton(AF_INET6, ip.c_str(), &a6) != 1) return false;
  if (IN6_IS_ADDR_LOOPBACK(&a6)) return true;
  return IN6_IS_ADDR_V4MAPPED(&a6) && a6.s6_addr[12] == 127;
}

// SameToken compares in constant time: SHA-256 of each side, so neither
// the length nor a common prefix shows in the timing.
bool SameToken(const std::string& given, const std::string& token) {
  const auto a = core::Sha256({reinterpret_cast<const uint8_t*>(given.data()), given.size()});
  const auto b = core::Sha256({reinterpret_cast<const uint8_t*>(token.data()), token.size()});
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

std::string UtcNow() {
  const std::time_t t = std::time(nullptr);
  std::tm tm {};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// LogLine writes one JSON object as one line on stderr, whole.
void LogLine(nlohmann::json j) {
  static std::mutex mu;
  j["time"] = UtcNow();
  const std::string line =
      j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  std::lock_guard<std::mutex> lock(mu);
  size_t done = 0;
  while (done < line.size()) {
    const ssize_t n = ::write(STDERR_FILENO, line.data() + done, line.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    done += static_cast<size_t>(n);
  }
}

// Exchange is what one request's handling learns, for its log line.
struct Exchange {
  std::string id, endpoint = "other", name, verdict = "none", sha256, client;
  uint64_t size = 0;
  int logged_status = 0;  // when not the response's (499: the client left)
  Clock::time_point start = Clock::now();
};

// HeaderSyntax checks the header lines as received (RFC 9112 5): each is
// "name: value" with a token name and no whitespace before the colon, no
// line folded onto the previous, no bare CR or NUL. "" when they are.
std::string HeaderSyntax(std::string_view text) {
  const size_t first = text.find("\r\n");
  if (first == std::string_view::npos) return "";  // httplib read less: it judged it
  size_t at = first + 2;
  for (size_t line_no = 1;; ++line_no) {
    const size_t end = text.find("\r\n", at);
    if (end == std::string_view::npos || end == at) return "";  // the blank line ends them
    const std::string_view line = text.substr(at, end - at);
    const std::string where = "header line " + std::to_string(line_no);
    if (line.front() == ' ' || line.front() == '\t') return where + " is folded (obsolete line folding)";
    const size_t colon = line.find(':');
    if (colon == std::string_view::npos) return where + " has no ':'";
    if (colon == 0) return where + " has an empty field name";
    for (char c : line.substr(0, colon)) {
      const bool token = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                         std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
      if (!token) return where + ": the field name holds a character a token cannot";
    }
    for (char c : line) {
      if (c == '\r' || c == '\0' || c == '\n') return where + " holds a bare CR, LF or NUL";
    }
    at = end + 2;
  }
}

class Gate final : public httplib::Server {
 public:
  Gate(const Config& cfg, const cli::Checker& checker, SSL_CTX* tls)
      : cfg_(cfg), checker_(checker), tls_(tls) {
    unsigned char r[4];
    RAND_bytes(r, sizeof r);
    boot_ = core::HexLower(r);
    set_keep_alive_max_count(kKeepAliveRequests);  // what the Keep-Alive header says
    set_keep_alive_timeout(static_cast<time_t>(kKeepAliveSeconds));
    new_task_queue = [this] { return new Queue(cfg_.workers, cfg_.queue, &metrics_); };
    set_pre_routing_handler([this](const Request& req, Response& res) {
      Handle(req, res);
      return HandlerResponse::Handled;
    });
    // Errors httplib answers itself, before Handle (a malformed request
    // line or header, a URI too long): the same JSON body, counted.
    set_error_handler(HandlerWithResponse([this](const Request&, Response& res) {
      if (t_conn == nullptr || t_conn->handled) return HandlerResponse::Unhandled;
      std::string code = res.status == 414 ? "uri-too-long" : "bad-request";
      std::string message = "malformed HTTP request";
      if (t_conn->header_overflow()) {
        res.status = 431;
        code = "header-too-large";
        message = "request line and headers exceed " + std::to_string(kMaxHeaderBytes) +
                  " bytes (kMaxHeaderBytes)";
      } else if (t_conn->timed_out()) {
        res.status = 408;
        code = "request-timeout";
        message = "the request's headers did not arrive within " +
                  std::to_string(cfg_.header_timeout.count()) + " s (--header-timeout)";
      }
      const std::string id = NewId();
      res.set_header("X-Request-Id", id);
      res.set_content(ErrorJson(code, message, id), "application/json");
      res.set_header("Connection", "close");
      std::string ip;
      int port = -1;
      t_conn->get_remote_ip_and_port(ip, port);
      LogRefused(id, ip + ":" + std::to_string(port), res.status);
      return HandlerResponse::Handled;
    }));
  }

  void Drain() { draining_ = true; }
  // Backlog re-listens on the bound socket with a deeper accept queue than
  // the 5 the Debian library was built with (CPPHTTPLIB_LISTEN_BACKLOG,
  // fixed in the shared library): Linux applies a second listen()'s backlog.
  void Backlog(int n) { (void)::listen(svr_sock_, n); }
  Metrics& metrics() { return metrics_; }

 private:
  // One connection, on a worker: httplib parses each request's line and
  // headers (process_request) and writes each response; Handle does the rest.
  bool process_and_close_socket(socket_t sock) override {
    if (t_refuse) {
      Refuse(sock);
      return true;
    }
    core::UniqueFd owned(sock);
    const int fl = ::fcntl(sock, F_GETFL);
    if (fl >= 0) ::fcntl(sock, F_SETFL, fl | O_NONBLOCK);
    // httplib writes a response's head and body in two sends: without
    // this, a kept-alive client waits out a delayed ACK (~40 ms) on each.
    const int one = 1;
    (void)::setsockopt(sock, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    SSL* ssl = nullptr;
    if (tls_ != nullptr) {
      ssl = SSL_new(tls_);
      if (ssl == nullptr || SSL_set_fd(ssl, sock) != 1) {
        if (ssl != nullptr) SSL_free(ssl);
        return false;
      }
    }
    Conn conn(sock, ssl);
    if (!conn.Handshake(Clock::now() + cfg_.header_timeout)) return false;
    t_conn = &conn;
    for (uint64_t n = 0; n < kKeepAliveRequests && svr_sock_ != INVALID_SOCKET; ++n) {
      if (n > 0 && !conn.WaitForNext(std::chrono::seconds(kKeepAliveSeconds), draining_)) break;
      conn.StartRequest(cfg_.header_timeout, n == 0 ? t_accepted : Clock::now());
      bool closed = false;
      const bool last = n + 1 == kKeepAliveRequests || draining_;
      const bool ok = process_request(conn, last, closed, nullptr);
      if (!ok && conn.phase() == Conn::Phase::kHeaders && conn.request_bytes() > 0) {
        // The request never reached a handler: answer why, once.
        if (conn.header_overflow()) {
          RawError(conn, 431, "Request Header Fields Too Large", "header-too-large",
                   "request line and headers exceed " + std::to_string(kMaxHeaderBytes) +
                       " bytes (kMaxHeaderBytes)");
        } else if (conn.timed_out()) {
          RawError(conn, 408, "Request Timeout", "request-timeout",
                   "the request's headers did not arrive within " +
                       std::to_string(cfg_.header_timeout.count()) + " s (--header-timeout)");
        }
      }
      // A request httplib refused itself (a malformed line or header: its
      // 400, or 414) leaves the stream at an unknown point: close it.
      if (!ok || closed || conn.close_after || !conn.handled) break;
    }
    t_conn = nullptr;
    if (ssl != nullptr) SSL_shutdown(ssl);
    ::shutdown(sock, SHUT_RDWR);
    return true;
  }

  // RawError answers a request that never reached Handle, with an id and
  // a log line like any other.
  void RawError(Conn& conn, int status, const char* reason, const std::string& code,
                const std::string& message) {
    const std::string id = NewId();
    conn.WriteRaw(RawResponse(status, reason, ErrorJson(code, message, id),
                              "X-Request-Id: " + id + "\r\n"));
    std::string ip;
    int port = -1;
    conn.get_remote_ip_and_port(ip, port);
    LogRefused(id, ip + ":" + std::to_string(port), status);
  }

  void LogRefused(const std::string& id, const std::string& client, int status) {
    metrics_.Request("other", "none", status, 0);
    LogLine({{"event", "request"},
             {"request_id", id},
             {"client", client},
             {"endpoint", "other"},
             {"status", status},
             {"verdict", "none"},
             {"ms", 0}});
  }

  // Refuse answers a connection the queue had no room for: 503 at once,
  // without reading it.
  void Refuse(socket_t sock) {
    const std::string id = NewId();
    if (tls_ == nullptr) {
      const std::string r =
          RawResponse(503, "Service Unavailable",
                      ErrorJson(draining_ ? "draining" : "queue-full",
                                draining_ ? "the server is shutting down; retry on another"
                                          : "every worker is busy and the queue is full; retry",
                                id),
                      "Retry-After: 1\r\nX-Request-Id: " + id + "\r\n");
      (void)::send(sock, r.data(), r.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    }
    sockaddr_storage ss {};
    socklen_t len = sizeof ss;
    std::string ip;
    int port = -1;
    if (::getpeername(sock, reinterpret_cast<sockaddr*>(&ss), &len) == 0) Conn::AddressOf(ss, &ip, &port);
    LogRefused(id, ip + ":" + std::to_string(port), 503);
    ::shutdown(sock, SHUT_RDWR);
    ::close(sock);
  }

  void Fail(Response& res, Exchange& x, int status, const std::string& code,
            const std::string& message) {
    res.status = status;
    res.set_content(ErrorJson(code, message, x.id), "application/json");
  }

  std::string NewId() {
    return boot_ + "-" + std::to_string(next_id_.fetch_add(1) + 1);
  }

  bool Authorized(const Request& req, Response& res, Exchange& x) {
    if (cfg_.token.empty()) {
      if (IsLoopback(req.remote_addr)) return true;
      Fail(res, x, 403, "forbidden",
           "this server has no --token-file: it serves loopback clients only");
      return false;
    }
    const std::string auth = req.get_header_value("Authorization");
    if (auth.empty()) {
      res.set_header("WWW-Authenticate", "Bearer");
      Fail(res, x, 401, "unauthorized", "send Authorization: Bearer <token>");
      return false;
    }
    if (auth.size() < 7 || auth.compare(0, 7, "Bearer ") != 0 ||
        !SameToken(auth.substr(7), cfg_.token)) {
      Fail(res, x, 403, "forbidden", "the bearer token is not this server's");
      return false;
    }
    return true;
  }

  void Handle(const Request& req, Response& res) {
    if (t_conn != nullptr) t_conn->handled = true;
    Exchange x;
    x.id = NewId();
    x.client = req.remote_addr + ":" + std::to_string(req.remote_port);
    res.set_header("X-Request-Id", x.id);
    metrics_.in_flight++;
    try {
      Route(req, res, x);
    } catch (const std::exception& e) {
      Fail(res, x, 500, "internal", std::string("internal error: ") + e.what());
      if (t_conn != nullptr) t_conn->close_after = true;
    }
    metrics_.in_flight--;
    if (t_conn != nullptr) {
      t_conn->StartResponse();
      if (t_conn->close_after) res.set_header("Connection", "close");
    }
    const double secs = std::chrono::duration<double>(Clock::now() - x.start).count();
    const int status = x.logged_status != 0 ? x.logged_status : res.status;
    metrics_.Request(x.endpoint, x.verdict, status, secs);
    nlohmann::json j;
    j["event"] = "request";
    j["request_id"] = x.id;
    j["client"] = x.client;
    j["method"] = req.method;
    j["endpoint"] = x.endpoint;
    if (x.endpoint == "scan" || x.endpoint == "check") {
      j["name"] = core::EscapeInvalidUtf8(x.name);
      j["size"] = x.size;
      j["sha256"] = x.sha256.empty() ? nlohmann::json(nullptr) : nlohmann::json(x.sha256);
    }
    j["status"] = status;
    j["verdict"] = x.verdict;
    j["ms"] = std::round(secs * 1e4) / 10;
    LogLine(std::move(j));
  }

  void Route(const Request& req, Response& res, Exchange& x) {
    const std::string& path = req.path;
    if (t_conn != nullptr) {
      if (std::string why = HeaderSyntax(t_conn->header_text()); !why.empty()) {
        // httplib skips a header line it cannot split; another reader of
        // the same bytes might not (request smuggling): refuse them.
        t_conn->close_after = true;
        Fail(res, x, 400, "bad-request", why);
        return;
      }
    }
    const bool upload = path == "/v1/scan" || path == "/v1/check";
    if (path == "/healthz" || path == "/readyz" || path == "/metrics") x.endpoint = path.substr(1);
    if (upload) x.endpoint = path.substr(4);
    // Until the body is read; a body on any other request is never read,
    // so the connection cannot carry on after it either.
    const std::string length = req.get_header_value("Content-Length");
    const bool has_body = req.has_header("Transfer-Encoding") || (!length.empty() && length != "0");
    if (t_conn != nullptr && (upload || has_body)) t_conn->close_after = true;
    if (x.endpoint == "other") {
      Fail(res, x, 404, "not-found", "no such endpoint: POST /v1/scan, POST /v1/check, GET /healthz, /readyz, /metrics");
      return;
    }
    const std::string want = upload ? "POST" : "GET";
    if (req.method != want && !(want == "GET" && req.method == "HEAD")) {
      res.set_header("Allow", want);
      Fail(res, x, 405, "method-not-allowed", path + " takes " + want);
      return;
    }
    if (x.endpoint == "healthz") {
      res.status = 200;
      res.set_content("{\"status\":\"ok\"}\n", "application/json");
      return;
    }
    if (x.endpoint == "readyz") {
      const bool ready = !draining_;
      res.status = ready ? 200 : 503;
      res.set_content(ready ? "{\"status\":\"ready\"}\n" : "{\"status\":\"draining\"}\n",
                      "application/json");
      return;
    }
    if (!Authorized(req, res, x)) return;
    if (x.endpoint == "metrics") {
      res.status = 200;
      res.set_content(metrics_.Render(), "text/plain; version=0.0.4");
      return;
    }
    Upload(req, res, x);
  }

  // ContentLength reads the one Content-Length; 0 when it is fine.
  int ContentLength(const Request& req, uint64_t* out, std::string* why) {
    if (req.has_header("Transfer-Encoding")) {
      *why = "chunked (Transfer-Encoding) bodies are refused: send Content-Length";
      return 411;
    }
    const size_t count = req.get_header_value_count("Content-Length");
    if (count == 0) {
      *why = "the upload needs a Content-Length";
      return 411;
    }
    if (count > 1) {
      *why = "more than one Content-Length";
      return 400;
    }
    const std::string v = req.get_header_value("Content-Length");
    uint64_t n = 0;
    bool ok = !v.empty() && v.size() <= 20;
    for (char c : v) {
      ok = ok && c >= '0' && c <= '9' && !__builtin_mul_overflow(n, 10u, &n) &&
           !__builtin_add_overflow(n, static_cast<uint64_t>(c - '0'), &n);
    }
    if (!ok) {
      *why = "Content-Length is not a decimal number of bytes";
      return 400;
    }
    if (n > cfg_.max_body_bytes) {
      *why = "the upload is " + std::to_string(n) + " bytes; this server takes at most " +
             std::to_string(cfg_.max_body_bytes) + " (--max-body-bytes)";
      return 413;
    }
    *out = n;
    return 0;
  }

  // SpoolGauge counts bytes into the spool gauge and out again when it dies.
  struct SpoolGauge {
    Metrics& m;
    int64_t held = 0;
    void Add(uint64_t n) {
      held += static_cast<int64_t>(n);
      m.spool_bytes += static_cast<int64_t>(n);
    }
    ~SpoolGauge() { m.spool_bytes -= held; }
  };

  void Upload(const Request& req, Response& res, Exchange& x) {
    x.name = req.has_param("name") ? req.get_param_value("name") : "upload";
    if (req.get_param_value_count("name") > 1) {
      Fail(res, x, 400, "bad-request", "name= given more than once");
      return;
    }
    if (x.name.empty() || x.name.size() > kMaxNameBytes || x.name.find('\0') != std::string::npos) {
      Fail(res, x, 400, "bad-request",
           "name= must be 1 to " + std::to_string(kMaxNameBytes) + " bytes without NUL");
      return;
    }
    uint64_t length = 0;
    std::string why;
    if (int status = ContentLength(req, &length, &why); status != 0) {
      Fail(res, x, status,
           status == 411   ? "length-required"
           : status == 413 ? "payload-too-large"
                           : "bad-request",
           why);
      return;
    }
    x.size = length;
    Conn* conn = t_conn;
    if (conn == nullptr) {
      Fail(res, x, 500, "internal", "no connection to read the body from");
      return;
    }
    core::UniqueFd body(cli::NamelessFile(cfg_.spool));
    if (body.get() < 0) {
      Fail(res, x, 500, "internal", std::string("cannot spool the upload: ") + std::strerror(errno));
      return;
    }
    SpoolGauge gauge{metrics_};
    core::Sha256Hasher hasher;
    conn->StartBody(cfg_.body_timeout);
    std::vector<char> buf(256 * 1024);
    uint64_t got = 0;
    while (got < length) {
      const size_t want = static_cast<size_t>(std::min<uint64_t>(buf.size(), length - got));
      const ssize_t n = conn->read(buf.data(), want);
      if (n <= 0) {
        if (conn->timed_out()) {
          Fail(res, x, 408, "request-timeout",
               "the body did not arrive within " + std::to_string(cfg_.body_timeout.count()) +
                   " s (--body-timeout): " + std::to_string(got) + " of " + std::to_string(length) +
                   " bytes");
        } else {
          // The client went away: there is no one to answer.
          Fail(res, x, 400, "client-closed", "the connection closed before the body was complete");
          x.logged_status = 499;
        }
        return;
      }
      if (!cli::WriteAll(body.get(), buf.data(), static_cast<size_t>(n))) {
        Fail(res, x, 500, "internal", std::string("cannot spool the upload: ") + std::strerror(errno));
        return;
      }
      hasher.Update({reinterpret_cast<const uint8_t*>(buf.data()), static_cast<size_t>(n)});
      gauge.Add(static_cast<uint64_t>(n));
      got += static_cast<uint64_t>(n);
    }
    conn->close_after = false;  // the body is read: the connection may carry on
    x.sha256 = core::HexLower(hasher.Final());
    cli::Report report;
    if (x.endpoint == "scan") {
      if (!Scan(body.get(), x, &report, res)) return;
    } else if (!Check(body.get(), length, x, &report, &gauge, res)) {
      return;
    }
    report.summary = cli::Summarize(report.files);
    metrics_.scanned_bytes += length;
    x.verdict = report.summary.errors > 0     ? "error"
                : report.summary.rejected > 0 ? "reject"
                                              : "pass";
    res.status = 200;
    res.set_content(cli::RenderJson(report), "application/json");
  }


  cli::CommonOptions RunOptions() const {
    cli::CommonOptions o;
    o.quiet = true;
    o.format = "json";
    return o;
  }

  // Scan judges the spooled body under the client's name: the name picks
  // how loaders would read the bytes (as for a file on disk), and nothing
  // is ever opened by it (Target::open_fd, CheckTargets).
  bool Scan(int fd, Exchange& x, cli::Report* report, Response&) {
    cli::Target t;
    t.path = x.name;
    t.follow_symlink = false;
    t.open_fd = fd;
    *report = cli::CheckTargets(RunOptions(), checker_, {t});
    return true;
  }

  // Check unpacks the tar into a directory of its own in the spool and
  // judges that directory as `check` judges one, paths reported relative
  // to the archive's root.
  bool Check(int fd, uint64_t length, Exchange& x, cli::Report* report, SpoolGauge* gauge,
             Response& res) {
    std::string dir = cfg_.spool + "/" + std::string(kTreePrefix) + "XXXXXX";
    if (::mkdtemp(dir.data()) == nullptr) {
      Fail(res, x, 500, "internal", std::string("cannot make a spool directory: ") + std::strerror(errno));
      return false;
    }
    core::UniqueFd dfd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    struct Cleanup {
      const std::string& dir;
      const core::UniqueFd& dfd;
      ~Cleanup() {
        if (dfd.get() >= 0) RemoveTree(dfd.get());
        ::rmdir(dir.c_str());
      }
    } cleanup{dir, dfd};
    if (dfd.get() < 0) {
      Fail(res, x, 500, "internal", std::string("cannot open a spool directory: ") + std::strerror(errno));
      return false;
    }
    Unpacked unpacked;
    UploadProblem problem;
    if (!UnpackUpload(fd, length, dfd.get(), UploadLimits{}, &unpacked, &problem,
                      [gauge](uint64_t n) { gauge->Add(n); })) {
      if (problem.io) {
        Fail(res, x, 500, "internal", "cannot unpack the upload: " + problem.message);
      } else {
        Fail(res, x, 400, "bad-archive",
             "the upload is not a model directory tar this server accepts: " + problem.message +
                 " (at byte " + std::to_string(problem.offset) + ")");
      }
      return false;
    }
    cli::CommonOptions o = RunOptions();
    o.paths = {dir};
    auto r = cli::CheckReport(o, checker_);
    if (!r.ok()) {
      Fail(res, x, 500, "internal", r.error().message);
      return false;
    }
    *report = std::move(r).value();
    // The spool is the server's business: paths as the archive names them.
    const std::string prefix = dir + "/";
    const auto relative = [&](std::string& s) {
      for (size_t at; (at = s.find(prefix)) != std::string::npos;) s.erase(at, prefix.size());
      for (size_t at; (at = s.find(dir)) != std::string::npos;) s.replace(at, dir.size(), ".");
    };
    for (cli::FileReport& f : report->files) {
      relative(f.scan.path);
      for (scanner::Finding& finding : f.scan.findings) relative(finding.message);
    }
    return true;
  }

  const Config& cfg_;
  const cli::Checker& checker_;
  SSL_CTX* tls_;
  Metrics metrics_;
  std::string boot_;
  std::atomic<uint64_t> next_id_{0};
  std::atomic<bool> draining_{false};
};

SSL_CTX* TlsContext(const Config& cfg, std::string* why) {
  SSL_CTX* ctx = SSL_CTX_new(TLS_server_method());
  if (ctx == nullptr) {
    *why = "cannot create a TLS context";
    return nullptr;
  }
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  if (SSL_CTX_use_certificate_chain_file(ctx, cfg.tls_cert.c_str()) != 1 ||
      SSL_CTX_use_PrivateKey_file(ctx, cfg.tls_key.c_str(), SSL_FILETYPE_PEM) != 1 ||
      SSL_CTX_check_private_key(ctx) != 1) {
    char err[256] = "";
    ERR_error_string_n(ERR_get_error(), err, sizeof err);
    *why = "TLS: cannot use " + core::Quoted(cfg.tls_cert) + " and " + core::Quoted(cfg.tls_key) +
           ": " + err;
    SSL_CTX_free(ctx);
    return nullptr;
  }
  return ctx;
}

int Usage(const std::string& message) { return cli::Usage("serve", message); }

}  // namespace

int RunServe(const cli::CommonOptions& opts) {
  const cli::ServeOptions& so = opts.serve;
  Config cfg;
  if (!ParseListen(so.listen, &cfg.host, &cfg.port)) {
    return Usage("--listen takes ADDR:PORT with a numeric address (127.0.0.1:8080, [::1]:8080)");
  }
  if (opts.policy.empty()) return Usage("needs --policy FILE (the server's policy)");
  if (so.workers < 1 || so.workers > kMaxWorkers) {
    return Usage("--workers takes 1 to " + std::to_string(kMaxWorkers) + " (kMaxWorkers)");
  }
  if (so.queue > kMaxQueue) return Usage("--queue takes 0 to " + std::to_string(kMaxQueue) + " (kMaxQueue)");
  if (so.max_body_bytes < 1) return Usage("--max-body-bytes must be at least 1");
  for (uint64_t t : {so.header_timeout, so.body_timeout}) {
    if (t < 1 || t > kMaxTimeoutSeconds) {
      return Usage("--header-timeout and --body-timeout take 1 to " +
                   std::to_string(kMaxTimeoutSeconds) + " seconds");
    }
  }
  if (so.tls_cert.empty() != so.tls_key.empty()) return Usage("--tls-cert and --tls-key go together");
  cfg.workers = so.workers;
  cfg.queue = so.queue;
  cfg.max_body_bytes = so.max_body_bytes;
  cfg.header_timeout = std::chrono::seconds(so.header_timeout);
  cfg.body_timeout = std::chrono::seconds(so.body_timeout);
  cfg.tls_cert = so.tls_cert;
  cfg.tls_key = so.tls_key;
  cfg.spool = so.spool;
  if (cfg.spool.empty()) {
    const char* tmp = std::getenv("TMPDIR");
    cfg.spool = std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/modelgate-serve-" +
                std::to_string(::geteuid());
  }
  std::string why;
  if (!so.token_file.empty() && !ReadToken(so.token_file, &cfg.token, &why)) {
    std::cerr << "modelgate: serve: --token-file: " << why << "\n";
    return cli::kExitCannotJudge;
  }
  auto checker = cli::LoadChecker(opts.policy);
  if (!checker.ok()) {
    std::cerr << "modelgate: serve: " << checker.error().message << "\n";
    return cli::kExitCannotJudge;
  }
  const int lock = OpenSpool(cfg.spool, &why);
  if (lock < 0) {
    std::cerr << "modelgate: serve: " << why << "\n";
    return cli::kExitCannotJudge;
  }
  core::UniqueFd lock_owner(lock);
  SSL_CTX* tls = nullptr;
  if (!cfg.tls_cert.empty() && (tls = TlsContext(cfg, &why)) == nullptr) {
    std::cerr << "modelgate: serve: " << why << "\n";
    return cli::kExitCannotJudge;
  }
  struct TlsOwner {
    SSL_CTX* ctx;
    ~TlsOwner() {
      if (ctx != nullptr) SSL_CTX_free(ctx);
    }
  } tls_owner{tls};

  // SIGTERM and SIGINT are taken by one thread (sigwait), never by a
  // handler: it stops accepting and lets the workers finish.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  std::signal(SIGPIPE, SIG_IGN);
  // Every connection is a descriptor: up to the hard limit, not the
  // usual soft 1024, so a burst of clients is answered (503 at worst)
  // rather than left in the backlog by EMFILE.
  rlimit files {};
  if (::getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur < files.rlim_max) {
    files.rlim_cur = files.rlim_max;
    (void)::setrlimit(RLIMIT_NOFILE, &files);
  }

  Gate gate(cfg, checker.value(), tls);
  int port = cfg.port;
  if (port == 0) {
    port = gate.bind_to_any_port(cfg.host);
  } else if (!gate.bind_to_port(cfg.host, port)) {
    port = -1;
  }
  if (port <= 0) {
    std::cerr << "modelgate: serve: cannot listen on " << so.listen << ": " << std::strerror(errno)
              << "\n";
    return cli::kExitCannotJudge;
  }
  gate.Backlog(kListenBacklog);
  std::atomic<bool> done{false};
  std::thread stopper([&] {
    timespec tick{0, 200 * 1000 * 1000};
    while (!done) {
      const int sig = sigtimedwait(&stop_signals, nullptr, &tick);
      if (sig == SIGTERM || sig == SIGINT) {
        gate.Drain();
        LogLine({{"event", "draining"}, {"signal", sig == SIGTERM ? "SIGTERM" : "SIGINT"}});
        gate.stop();
        return;
      }
    }
  });
  LogLine({{"event", "listening"},
           {"address", cfg.host},
           {"port", port},
           {"tls", tls != nullptr},
           {"policy", core::EscapeInvalidUtf8(opts.policy)},
           {"workers", cfg.workers},
           {"queue", cfg.queue},
           {"max_body_bytes", cfg.max_body_bytes},
           {"spool", core::EscapeInvalidUtf8(cfg.spool)},
           {"token", !cfg.token.empty()}});
  const bool ok = gate.listen_after_bind();
  done = true;
  stopper.join();
  LogLine({{"event", "stopped"}, {"clean", ok}});
  return ok ? cli::kExitPass : cli::kExitCannotJudge;
}

}  // namespace modelgate::server
