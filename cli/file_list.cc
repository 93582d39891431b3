#include "file_list.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>
#include <unordered_map>

#include "modelgate/core.h"

namespace modelgate::cli {
namespace {

// JsonLinePath reads {"path": "...", ...}: strict JSON, one object, a
// member twice refused (nlohmann would keep the last).
bool JsonLinePath(std::string_view line, std::string* path, std::string* why) {
  std::set<std::string> keys;
  bool duplicate = false;
  nlohmann::json j = nlohmann::json::parse(
      line.begin(), line.end(),
      [&](int depth, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
        if (event == nlohmann::json::parse_event_t::key && depth == 1 &&
            !keys.insert(parsed.get<std::string>()).second) {
          duplicate = true;
        }
        return true;
      },
      /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    *why = "is not a JSON object";
    return false;
  }
  if (duplicate) {
    *why = "names a member twice";
    return false;
  }
  const auto it = j.find("path");
  if (it == j.end() || !it->is_string() || it->get_ref<const std::string&>().empty()) {
    *why = "has no \"path\" string";
    return false;
  }
  *path = it->get<std::string>();
  if (path->find('\0') != std::string::npos) {
    *why = "has a NUL in its path";
    return false;
  }
  return true;
}

bool ReadAll(int fd, std::string* out, uint64_t max_bytes, std::string* why) {
  char buf[64 * 1024];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      *why = std::string("cannot read: ") + std::strerror(errno);
      return false;
    }
    if (n == 0) return true;
    if (static_cast<uint64_t>(n) > max_bytes - out->size()) {
      *why = "is longer than " + std::to_string(max_bytes) +
             " bytes (kMaxListEntries lines of kMaxListLineBytes)";
      return false;
    }
    out->append(buf, static_cast<size_t>(n));
  }
}

}  // namespace

bool ParseFileList(std::string_view text, const ListLimits& limits, std::vector<std::string>* out,
                   std::string* why) {
  std::unordered_map<std::string, uint64_t> seen;
  uint64_t line_no = 0;
  size_t at = 0;
  while (at < text.size()) {
    ++line_no;
    const size_t nl = text.find('\n', at);
    const std::string_view line =
        text.substr(at, nl == std::string_view::npos ? std::string_view::npos : nl - at);
    at = nl == std::string_view::npos ? text.size() : nl + 1;
    const std::string where = "line " + std::to_string(line_no);
    if (line.size() > limits.max_line_bytes) {
      *why = where + " is longer than " + std::to_string(limits.max_line_bytes) +
             " bytes (kMaxListLineBytes)";
      return false;
    }
    if (line.empty()) {
      *why = where + " is empty";
      return false;
    }
    if (line.find('\r') != std::string_view::npos) {
      *why = where + " holds a CR: write the list with LF line ends";
      return false;
    }
    if (line.find('\0') != std::string_view::npos) {
      *why = where + " holds a NUL";
      return false;
    }
    std::string path(line);
    if (line.front() == '{') {
      std::string bad;
      if (!JsonLinePath(line, &path, &bad)) {
        *why = where + " " + bad;
        return false;
      }
    }
    if (out->size() >= limits.max_entries) {
      *why = "more than " + std::to_string(limits.max_entries) + " paths (kMaxListEntries)";
      return false;
    }
    if (auto [it, fresh] = seen.emplace(path, line_no); !fresh) {
      *why = where + " lists " + core::Quoted(path) + " again (first on line " +
             std::to_string(it->second) + ")";
      return false;
    }
    out->push_back(std::move(path));
  }
  return true;
}

bool ParseShard(std::string_view text, uint64_t* index, uint64_t* count) {
  const size_t slash = text.find('/');
  if (slash == std::string_view::npos) return false;
  const auto number = [](std::string_view s, uint64_t* n) {
    if (s.empty() || s.size() > 6) return false;
    *n = 0;
    for (char c : s) {
      if (c < '0' || c > '9') return false;
      *n = *n * 10 + static_cast<uint64_t>(c - '0');
    }
    return true;
  };
  return number(text.substr(0, slash), index) && number(text.substr(slash + 1), count) &&
         *count >= 1 && *count <= kMaxShards && *index < *count;
}

bool InShard(std::string_view path, uint64_t index, uint64_t count) {
  const core::Sha256Digest d = core::Sha256({reinterpret_cast<const uint8_t*>(path.data()), path.size()});
  uint64_t v = 0;
  for (size_t i = 0; i < 8; ++i) v = (v << 8) | d[i];
  return v % count == index;
}

bool ResolveOperands(CommonOptions* opts, std::string* why) {
  if (!opts->files_from.empty()) {
    const bool from_stdin = opts->files_from == kStdinPath;
    const int fd = from_stdin ? STDIN_FILENO
                              : ::open(opts->files_from.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
      *why = "--files-from: cannot open " + core::Quoted(opts->files_from) + ": " + std::strerror(errno);
      return false;
    }
    struct stat st {};
    if (!from_stdin && (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))) {
      ::close(fd);
      *why = "--files-from: " + core::Quoted(opts->files_from) + " is not a regular file";
      return false;
    }
    if (!from_stdin) ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    std::string text, bad;
    // (line + LF) per entry: the most a list within both limits can hold.
    const bool read = ReadAll(fd, &text, kMaxListEntries * (kMaxListLineBytes + 1), &bad);
    if (!from_stdin) ::close(fd);
    std::vector<std::string> listed;
    if (!read || !ParseFileList(text, ListLimits{}, &listed, &bad)) {
      *why = "--files-from " + core::Quoted(opts->files_from) + ": " + bad;
      return false;
    }
    for (std::string& p : listed) {
      if (from_stdin && p == kStdinPath) {
        *why = "--files-from - reads the list from standard input: it cannot also list -";
        return false;
      }
      opts->paths.push_back(std::move(p));
    }
    if (from_stdin) {
      for (const std::string& p : opts->paths) {
        if (p == kStdinPath) {
          *why = "--files-from - reads the list from standard input: - cannot also be a PATH";
          return false;
        }
      }
    }
  }
  if (!opts->shard.empty()) {
    uint64_t index = 0, count = 0;
    if (!ParseShard(opts->shard, &index, &count)) {
      *why = "--shard takes I/N with 0 <= I < N <= " + std::to_string(kMaxShards) + ", not " +
             core::Quoted(opts->shard);
      return false;
    }
    std::vector<std::string> mine;
    for (std::string& p : opts->paths) {
      if (InShard(p, index, count)) mine.push_back(std::move(p));
    }
    opts->paths = std::move(mine);
  }
  return true;
}

}  // namespace modelgate::cli
