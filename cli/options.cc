#include "options.h"

namespace modelgate::cli {

bool ParseCommon(const std::vector<std::string>& args, CommonOptions* opts, std::string* error) {
  bool only_paths = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto value = [&](std::string* v) {
      if (i + 1 >= args.size()) {
        *error = "option " + a + " needs a value";
        return false;
      }
      *v = args[++i];
      return true;
    };
    if (only_paths || a.empty() || a[0] != '-' || a == "-") {
      opts->paths.push_back(a);
    } else if (a == "--") {
      only_paths = true;
    } else if (a == "-f" || a == "--format") {
      if (!value(&opts->format)) return false;
      if (opts->format == "sarif") {
        *error = "-f sarif is not implemented in this version (use text or json)";
        return false;
      }
      if (opts->format != "text" && opts->format != "json") {
        *error = "unknown format '" + opts->format + "' (text or json)";
        return false;
      }
    } else if (a == "-o" || a == "--output") {
      if (!value(&opts->out_path)) return false;
    } else if (a == "--fail-on") {
      std::string sev;
      if (!value(&sev)) return false;
      if (!core::ParseSeverity(sev, &opts->fail_on)) {
        *error = "unknown severity '" + sev + "' (critical, high, medium, low, info)";
        return false;
      }
    } else if (a == "-q" || a == "--quiet") {
      opts->quiet = true;
    } else if (a == "--policy" || a == "--yara-rules") {
      *error = a + " is not implemented in this version";
      return false;
    } else {
      *error = "unknown option '" + a + "'";
      return false;
    }
  }
  return true;
}

}  // namespace modelgate::cli
