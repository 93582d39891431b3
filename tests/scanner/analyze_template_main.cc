// analyze_template: a test driver for AnalyzeTemplate. Reads one template
// file and prints each finding as "ID SEVERITY OFFSET" (the offset relative
// to the file, base 0), one a line; exits 0 when it ran, 2 when it could not
// read the file. jinja_escape_test.py runs it on the templates it renders.
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "jinja.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: analyze_template FILE\n");
    return 2;
  }
  std::ifstream in(argv[1], std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "cannot open %s\n", argv[1]);
    return 2;
  }
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<modelgate::scanner::Finding> findings;
  modelgate::scanner::internal::AnalyzeTemplate(text, 0, "template", {}, &findings);
  for (const auto& f : findings) {
    std::printf("%s %s %llu\n", f.id.c_str(),
                std::string(modelgate::core::SeverityName(f.severity)).c_str(),
                static_cast<unsigned long long>(f.offset));
  }
  return 0;
}
