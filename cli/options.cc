#include "options.h"

#include <iostream>

namespace modelgate::cli {

std::ostream& Diagnostics(const CommonOptions& opts) {
  return opts.diagnostics != nullptr ? *opts.diagnostics : std::cerr;
}

bool UseColor(const CommonOptions& opts, bool stdout_is_terminal, const char* no_color) {
  if (opts.color == "always") return true;
  if (opts.color == "never") return false;
  // no-color.org: NO_COLOR disables colour when set to a non-empty value.
  const bool no_color_set = no_color != nullptr && *no_color != '\0';
  return stdout_is_terminal && opts.out_path.empty() && !no_color_set;
}

}  // namespace modelgate::cli
