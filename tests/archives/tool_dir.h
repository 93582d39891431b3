// ToolDir: a scratch directory in which a test runs the real writers
// (zstd, pzstd, lz4, 7zz) and reads back what they wrote.
#pragma once

#include <catch2/catch.hpp>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace modelgate::test {

// Tool runs a shell command in a fresh directory; the test fails (not
// skips) when the program is missing: ci/install-deps.sh installs zstd,
// lz4 and 7zip.
struct ToolDir {
  ToolDir() {
    char tmpl[] = "/tmp/mg-archive-test-XXXXXX";
    REQUIRE(mkdtemp(tmpl) != nullptr);
    path = tmpl;
  }
  ~ToolDir() {
    if (std::system(("rm -rf '" + path + "'").c_str()) != 0) {
      // best effort: a leftover /tmp directory fails nothing
    }
  }
  void Write(const std::string& name, const std::vector<uint8_t>& b) const {
    FILE* fp = std::fopen((path + "/" + name).c_str(), "wb");
    REQUIRE(fp != nullptr);
    REQUIRE(std::fwrite(b.data(), 1, b.size(), fp) == b.size());
    std::fclose(fp);
  }
  std::vector<uint8_t> Read(const std::string& name) const {
    FILE* fp = std::fopen((path + "/" + name).c_str(), "rb");
    REQUIRE(fp != nullptr);
    std::vector<uint8_t> b;
    for (int ch; (ch = std::fgetc(fp)) != EOF;) b.push_back(static_cast<uint8_t>(ch));
    std::fclose(fp);
    return b;
  }
  void Run(const std::string& program, const std::string& args) const {
    const std::string which = "command -v " + program + " >/dev/null 2>&1";
    if (std::system(which.c_str()) != 0) FAIL(program + " is not installed (ci/install-deps.sh)");
    const std::string cmd = "cd '" + path + "' && " + program + " " + args + " >/dev/null 2>&1";
    REQUIRE(std::system(cmd.c_str()) == 0);
  }
  std::string path;
};


}  // namespace modelgate::test
