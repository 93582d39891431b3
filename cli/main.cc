// The modelgate program. Only cli/ prints, reads the environment or exits;
// the command line itself is defined once, in app.cc.
#include <csignal>
#include <iostream>
#include <string>
#include <vector>

#include "app.h"
#include "exit_code.h"
#include "serve.h"

int main(int argc, char** argv) {
  using namespace modelgate::cli;
  // Past a file-size limit (ulimit -f) a write fails with EFBIG, which the
  // writers report naming the output (exit 2); by default the kernel would
  // kill the process with SIGXFSZ instead, with no message at all.
  std::signal(SIGXFSZ, SIG_IGN);
  SetServeCommand(modelgate::server::RunServe);
  try {
    return RunCli(std::vector<std::string>(argv + 1, argv + argc), std::cout, std::cerr);
  } catch (const std::exception& e) {
    std::cerr << "modelgate: internal error: " << e.what() << "\n";
    return kExitCannotJudge;
  }
}
