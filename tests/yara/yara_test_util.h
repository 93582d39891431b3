// Helpers for the YARA tests: scratch directories, file writing, reading
// the repository's benign fixtures, and finding lookups.
#pragma once

#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <string_view>
#include <vector>

#include "yara_rules.h"

namespace yara_test {

namespace fs = std::filesystem;
namespace sc = modelgate::scanner;

// TempDir is a fresh directory under $TMPDIR, removed with its contents.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "mg-yara-XXXXXX").string();
    if (::mkdtemp(tmpl.data()) != nullptr) path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) fs::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string operator/(std::string_view rel) const { return path_ + "/" + std::string(rel); }

 private:
  std::string path_;
};

inline void WriteFile(const std::string& path, std::string_view text) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(text.data(), static_cast<std::streamsize>(text.size()));
}

inline std::vector<uint8_t> ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

inline std::vector<uint8_t> Bytes(std::string_view s) { return {s.begin(), s.end()}; }

inline std::string SourcePath(std::string_view rel) {
  return std::string(MG_SOURCE_DIR) + "/" + std::string(rel);
}

inline std::vector<std::string> Ids(const std::vector<sc::Finding>& f) {
  std::vector<std::string> ids;
  for (const auto& x : f) ids.push_back(x.id);
  std::sort(ids.begin(), ids.end());
  return ids;
}

inline const sc::Finding* Find(const std::vector<sc::Finding>& f, std::string_view id) {
  for (const auto& x : f) {
    if (x.id == id) return &x;
  }
  return nullptr;
}

// Describe lists findings for a failure message.
inline std::string Describe(const std::vector<sc::Finding>& f) {
  std::string s;
  for (const auto& x : f) s += x.id + " @" + std::to_string(x.offset) + ": " + x.message + "\n";
  return s.empty() ? "(no findings)" : s;
}

}  // namespace yara_test
