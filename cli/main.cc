// The modelgate program. Only cli/ prints, reads the environment or exits;
// the command line itself is defined once, in app.cc.
#include <iostream>
#include <string>
#include <vector>

#include "app.h"
#include "exit_code.h"

int main(int argc, char** argv) {
  using namespace modelgate::cli;
  try {
    return RunCli(std::vector<std::string>(argv + 1, argv + argc), std::cout, std::cerr);
  } catch (const std::exception& e) {
    std::cerr << "modelgate: internal error: " << e.what() << "\n";
    return kExitCannotJudge;
  }
}
