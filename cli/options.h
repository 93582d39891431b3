// Command-line option parsing shared by the subcommands.
#pragma once

#include <string>
#include <vector>

#include "modelgate/core.h"

namespace modelgate::cli {

struct CommonOptions {
  std::string format = "text";  // text | json
  std::string out_path;         // -o; empty = stdout
  core::Severity fail_on = core::Severity::kHigh;
  bool quiet = false;
  std::vector<std::string> paths;
};

// ParseCommon reads the options every subcommand shares. On a usage error it
// returns false with `*error` set.
bool ParseCommon(const std::vector<std::string>& args, CommonOptions* opts, std::string* error);

}  // namespace modelgate::cli
