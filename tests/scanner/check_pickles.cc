// check_pickles DIR: reads DIR/manifest.tsv (written by make_pickles.py) and
// analyzes each pickle in it. Each line is
//   file <TAB> ids it must carry <TAB> ids it must not carry
// (comma-separated, "-" for none). Exit 0 when every file matches.
#include <cstdio>
#include <fstream>
#include <iterator>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "modelgate/scanner.h"

namespace {

std::vector<std::string> SplitOn(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::stringstream in(s);
  std::string part;
  while (std::getline(in, part, sep)) out.push_back(part);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: check_pickles DIR\n");
    return 2;
  }
  std::string dir = argv[1];
  std::ifstream manifest(dir + "/manifest.tsv");
  if (!manifest) {
    std::fprintf(stderr, "check_pickles: cannot read %s/manifest.tsv\n", dir.c_str());
    return 2;
  }
  int failures = 0, checked = 0;
  std::string line;
  while (std::getline(manifest, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::vector<std::string> cols = SplitOn(line, '\t');
    if (cols.size() != 3) {
      std::fprintf(stderr, "check_pickles: bad manifest line: %s\n", line.c_str());
      return 2;
    }
    std::ifstream f(dir + "/" + cols[0], std::ios::binary);
    std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    auto findings = modelgate::scanner::PickleFindings(modelgate::scanner::AnalyzePickle(bytes));
    std::set<std::string> ids;
    for (const auto& x : findings) ids.insert(x.id);
    bool ok = true;
    for (const std::string& want : SplitOn(cols[1], ',')) {
      if (want != "-" && ids.count(want) == 0) {
        std::fprintf(stderr, "%s: missing %s\n", cols[0].c_str(), want.c_str());
        ok = false;
      }
    }
    for (const std::string& bad : SplitOn(cols[2], ',')) {
      if (bad != "-" && ids.count(bad) != 0) {
        std::fprintf(stderr, "%s: unexpected %s\n", cols[0].c_str(), bad.c_str());
        ok = false;
      }
    }
    if (!ok) {
      for (const auto& x : findings) {
        std::fprintf(stderr, "  %s:%llu: %s: %s\n", cols[0].c_str(),
                     static_cast<unsigned long long>(x.offset), x.id.c_str(), x.message.c_str());
      }
      ++failures;
    }
    ++checked;
  }
  std::fprintf(stderr, "check_pickles: %d file(s), %d failed\n", checked, failures);
  return failures == 0 && checked > 0 ? 0 : 1;
}
