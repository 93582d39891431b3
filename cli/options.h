// Command-line option parsing shared by the subcommands.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "modelgate/core.h"

namespace modelgate::cli {

struct CommonOptions {
  std::string format = "text";  // text | json | sarif
  std::string out_path;         // -o; empty = stdout
  core::Severity fail_on = core::Severity::kHigh;
  bool fail_on_given = false;   // --fail-on was on the command line
  bool quiet = false;
  std::vector<std::string> pubkeys;  // --pubkey (repeatable)
  std::string key;                   // --key
  std::string out_prefix;            // keygen --out
  std::string model;                 // sign --model
  std::optional<uint64_t> version;   // sign --version
  bool detached = false;             // sign --detached
  std::vector<std::string> yara_dirs;  // --yara-rules DIR (repeatable)
  std::string yara_scope = "header";   // --yara-scope header|all
  bool no_yara = false;                // --no-yara: not even the shipped rules
  std::string policy;                  // --policy FILE
  std::string json_output;             // --json-output FILE (extra report)
  std::string sarif_output;            // --sarif-output FILE (extra report)
  std::vector<std::string> paths;
};

// ParseOptions reads `args`, accepting only the options named in `allowed`
// (their long spellings, e.g. "--pubkey"; "-f", "-o" and "-q" by their
// short ones). On a usage error it returns false with `*error` set.
bool ParseOptions(const std::vector<std::string>& args, const std::vector<std::string_view>& allowed,
                  CommonOptions* opts, std::string* error);

}  // namespace modelgate::cli
