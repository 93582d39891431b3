// Helpers for the signer tests: temp dirs, file bytes, a tiny safetensors
// builder, and header editing (via nlohmann::ordered_json, which keeps
// member order, so an edit changes only what it names).
#pragma once

#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "modelgate/signer.h"

namespace sigtest {

using Bytes = std::vector<uint8_t>;
using ojson = nlohmann::ordered_json;

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "mg-signer-XXXXXX").string();
    if (::mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp");
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

inline Bytes ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return Bytes(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

inline void WriteBytes(const std::string& path, const Bytes& b) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

inline std::string ReadText(const std::string& path) {
  Bytes b = ReadBytes(path);
  return std::string(b.begin(), b.end());
}

inline uint64_t HeaderLen(const Bytes& f) {
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | f[static_cast<size_t>(i)];
  return n;
}

inline std::string HeaderText(const Bytes& f) {
  return std::string(f.begin() + 8, f.begin() + 8 + static_cast<std::ptrdiff_t>(HeaderLen(f)));
}

inline Bytes DataOf(const Bytes& f) {
  return Bytes(f.begin() + 8 + static_cast<std::ptrdiff_t>(HeaderLen(f)), f.end());
}

// Assemble: 8-byte length + header (space-padded to 8) + data.
inline Bytes Assemble(std::string header, const Bytes& data) {
  header.append((8 - (8 + header.size()) % 8) % 8, ' ');
  Bytes out(8);
  for (int i = 0; i < 8; ++i) {
    out[static_cast<size_t>(i)] = static_cast<uint8_t>(static_cast<uint64_t>(header.size()) >> (8 * i));
  }
  out.insert(out.end(), header.begin(), header.end());
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

inline Bytes WithHeader(const Bytes& f, const std::string& header) {
  return Assemble(header, DataOf(f));
}

// EditHeader parses the header, applies `edit`, and re-serializes compactly.
inline Bytes EditHeader(const Bytes& f, const std::function<void(ojson&)>& edit) {
  ojson h = ojson::parse(HeaderText(f));
  edit(h);
  return WithHeader(f, h.dump());
}

// EditMeta edits the JSON text stored in a metadata value.
inline Bytes EditMetaJson(const Bytes& f, const std::string& key,
                          const std::function<void(ojson&)>& edit) {
  return EditHeader(f, [&](ojson& h) {
    ojson v = ojson::parse(h["__metadata__"][key].get<std::string>());
    edit(v);
    h["__metadata__"][key] = v.dump();
  });
}

inline std::string Replace(std::string s, const std::string& from, const std::string& to) {
  size_t at = s.find(from);
  if (at == std::string::npos) throw std::runtime_error("Replace: not found: " + from);
  return s.replace(at, from.size(), to);
}

// The TEST-ONLY key of the vectors: seed 00 01 .. 1f.
inline modelgate::signer::PrivateKey TestKey(uint8_t first = 0) {
  std::array<uint8_t, 32> seed{};
  for (size_t i = 0; i < seed.size(); ++i) seed[i] = static_cast<uint8_t>(first + i);
  auto k = modelgate::signer::PrivateKey::FromSeed(seed);
  if (!k.ok()) throw std::runtime_error("FromSeed");
  return std::move(k).value();
}

inline std::string VectorPath(const std::string& name) { return std::string(MG_STSIG_VECTORS) + "/" + name; }

inline mode_t ModeOf(const std::string& path) {
  struct stat s {};
  ::lstat(path.c_str(), &s);
  return s.st_mode & 07777;
}

}  // namespace sigtest
