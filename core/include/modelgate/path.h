// Path text helpers the scanner, the CLI and the C API share. They look at
// the text only: nothing here touches the filesystem.
#pragma once

#include <string>
#include <string_view>

namespace modelgate::core {

// BaseName is the part of `path` after its last '/' (all of it without one).
inline std::string_view BaseName(std::string_view path) {
  const size_t slash = path.rfind('/');
  return slash == std::string_view::npos ? path : path.substr(slash + 1);
}

// EndsWith: `s` ends with `suffix`.
inline bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// JoinPath is `dir`/`rel` with one '/' between them; `dir` itself for rel
// "" or "." (a bundle's name for the one file of a one-file model).
inline std::string JoinPath(const std::string& dir, const std::string& rel) {
  if (rel.empty() || rel == ".") return dir;
  if (!dir.empty() && dir.back() == '/') return dir + rel;
  return dir + "/" + rel;
}

}  // namespace modelgate::core
