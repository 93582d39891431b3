// The command line, defined once on CLI11: parsing, --help, the man page
// and the shell completions all read the same definitions.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <map>
#include <memory>
#include <ostream>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "options.h"

namespace modelgate::cli {

// CommandInfo is what CLI11 does not hold of a command.
struct CommandInfo {
  std::string path;          // "scan", "policy lint"; "" for the program itself
  std::string synopsis;      // "modelgate scan [OPTIONS] PATH..."
  bool reads_stdin = false;  // an operand "-" is standard input
  // The command's body; empty for a group (policy) and for help.
  std::function<int(const CommonOptions&)> run;
};

// AppDefinition is the whole command line: one CLI11 App whose commands
// (scan, inspect, keygen, sign, verify, check, policy lint, help) bind
// their options to one CommonOptions, and the facts CLI11 has no field for.
struct AppDefinition {
  std::unique_ptr<CLI::App> app;
  // Values an option accepts, when it takes one of a fixed few.
  std::map<const CLI::Option*, std::vector<std::string>> choices;
  // Every command, the program itself and groups included.
  std::shared_ptr<std::map<const CLI::App*, CommandInfo>> commands;
  // Options whose value may be given more than once (--pubkey, --yara-rules).
  std::set<const CLI::Option*> repeatable;

  const CommandInfo& Info(const CLI::App* command) const { return commands->at(command); }
};

// SetServeCommand gives `serve` its body (server::RunServe). The program
// sets it before RunCli; without it `serve` says the build has no server.
void SetServeCommand(int (*run)(const CommonOptions&));

// BuildApp defines every command and option, bound to `*opts` (which must
// outlive the result).
AppDefinition BuildApp(CommonOptions* opts);

// Commands lists the program's commands depth first in definition order
// (scan, ..., policy, policy lint, help): every App that CommandInfo knows
// but the program itself.
std::vector<const CLI::App*> Commands(const AppDefinition& def);

// TakesValue: the option takes a value (false for a flag).
bool TakesValue(const CLI::Option& opt);
// OptionNames is "-f, --format" (short spellings first); OptionHelp the
// help text with its default, "... [default: text]" or "... [required]":
// what --help, the man page and the completions show.
std::string OptionNames(const CLI::Option& opt);
std::string OptionHelp(const CLI::Option& opt);
// kRequiredDefault is the default text of an option the command needs.
inline constexpr std::string_view kRequiredDefault = "required";

// RunCli parses `args` (argv without the program name), prints help or the
// version on `out`, a usage error as one line on `err` (exit 2), and
// otherwise runs the command.
int RunCli(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

// ClosestName is the name in `names` that `typed` most likely misspells
// (edit distance with transpositions, or a prefix of it), or "" when none
// is close enough to suggest.
std::string ClosestName(std::string_view typed, const std::vector<std::string>& names);

// VersionText is `modelgate --version`: the program's version, then the
// versions of OpenSSL, libsodium and YARA it links.
std::string VersionText();

// UsageError writes "modelgate: COMMAND: MESSAGE; run 'modelgate COMMAND
// --help' for usage" on `err` as one line; returns exit code 2.
int UsageError(std::ostream& err, const std::string& command, const std::string& message);

}  // namespace modelgate::cli
