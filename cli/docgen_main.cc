// modelgate-docgen writes what is generated from the command-line
// definitions: `modelgate-docgen man|bash|zsh|json OUT`. Built and run at
// build time (cli/CMakeLists.txt); not installed.
#include <fstream>
#include <iostream>
#include <string>

#include "app.h"
#include "docgen.h"

int main(int argc, char** argv) {
  using namespace modelgate::cli;
  if (argc != 3) {
    std::cerr << "usage: modelgate-docgen man|bash|zsh|json OUT\n";
    return 2;
  }
  const std::string what = argv[1];
  CommonOptions opts;
  const AppDefinition def = BuildApp(&opts);
  std::string text;
  if (what == "man") {
    text = RenderManPage(def);
  } else if (what == "bash") {
    text = RenderBashCompletion(def);
  } else if (what == "zsh") {
    text = RenderZshCompletion(def);
  } else if (what == "json") {
    text = RenderDefinitionsJson(def);
  } else {
    std::cerr << "modelgate-docgen: unknown output '" << what << "'\n";
    return 2;
  }
  std::ofstream out(argv[2], std::ios::binary | std::ios::trunc);
  out << text;
  out.close();
  if (!out) {
    std::cerr << "modelgate-docgen: cannot write " << argv[2] << "\n";
    return 2;
  }
  return 0;
}
