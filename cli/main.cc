// The modelgate program: argument dispatch. Only cli/ prints, reads the
// environment or exits.
#include <iostream>
#include <string>
#include <vector>

#include "cli.h"
#include "exit_code.h"

namespace modelgate::cli {

int Usage(const std::string& message) {
  if (!message.empty()) std::cerr << "modelgate: " << message << "\n";
  std::cerr <<
      "usage:\n"
      "  modelgate scan    [-f text|json|sarif] [-o FILE] [--fail-on SEV] [-q]\n"
      "                    [--yara-rules DIR]... [--yara-scope header|all] [--no-yara]\n"
      "                    [--policy FILE] PATH...\n"
      "  modelgate inspect [-f text|json] [-o FILE] FILE\n"
      "  modelgate keygen  --out PREFIX        (PREFIX.key 0600, PREFIX.pub)\n"
      "  modelgate sign    --key FILE [-o OUT] [--model ID] [--version N] PATH\n"
      "  modelgate verify  --pubkey FILE [--pubkey FILE...] [-f text|json|sarif] [-o FILE] PATH...\n"
      "  modelgate check   --policy FILE [-f text|json|sarif] [-o FILE] PATH...\n"
      "  (scan, verify, check: --json-output FILE / --sarif-output FILE add reports)\n"
      "  modelgate policy lint FILE\n"
      "  modelgate --version\n"
      "SEV is critical|high|medium|low|info (default high).\n"
      "Exit codes: 0 every file passed, 1 a file was rejected, 2 usage/IO error.\n";
  return kExitCannotJudge;
}

}  // namespace modelgate::cli

int main(int argc, char** argv) {
  using namespace modelgate::cli;
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty()) return Usage("no command given");
  const std::string cmd = args[0];
  args.erase(args.begin());
  try {
    if (cmd == "--version" || cmd == "version") {
      std::cout << "modelgate " << modelgate::core::kVersion << "\n";
      return kExitPass;
    }
    if (cmd == "-h" || cmd == "--help" || cmd == "help") {
      Usage("");
      return kExitPass;
    }
    if (cmd == "scan") return RunScan(args);
    if (cmd == "inspect") return RunInspect(args);
    if (cmd == "keygen") return RunKeygen(args);
    if (cmd == "sign") return RunSign(args);
    if (cmd == "verify") return RunVerify(args);
    if (cmd == "check") return RunCheck(args);
    if (cmd == "policy") return RunPolicy(args);
    return Usage("unknown command '" + cmd + "'");
  } catch (const std::exception& e) {
    std::cerr << "modelgate: internal error: " << e.what() << "\n";
    return kExitCannotJudge;
  }
}
