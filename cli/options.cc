#include "options.h"

#include <algorithm>

namespace modelgate::cli {
namespace {

// Long spellings of the short options, so one allowlist names both.
std::string_view Canonical(std::string_view a) {
  if (a == "--format") return "-f";
  if (a == "--output") return "-o";
  if (a == "--quiet") return "-q";
  return a;
}

}  // namespace

bool ParseOptions(const std::vector<std::string>& args, const std::vector<std::string_view>& allowed,
                  CommonOptions* opts, std::string* error) {
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
      continue;
    }
    if (a == "--") {
      only_paths = true;
      continue;
    }
    const std::string_view opt = Canonical(a);
    if (std::find(allowed.begin(), allowed.end(), opt) == allowed.end()) {
      *error = "unknown option '" + a + "'";
      return false;
    }
    if (opt == "-f") {
      if (!value(&opts->format)) return false;
      if (opts->format != "text" && opts->format != "json" && opts->format != "sarif") {
        *error = "unknown format '" + opts->format + "' (text, json or sarif)";
        return false;
      }
    } else if (opt == "-o") {
      if (!value(&opts->out_path)) return false;
    } else if (opt == "--fail-on") {
      std::string sev;
      if (!value(&sev)) return false;
      opts->fail_on_given = true;
      if (!core::ParseSeverity(sev, &opts->fail_on)) {
        *error = "unknown severity '" + sev + "' (critical, high, medium, low, info)";
        return false;
      }
    } else if (opt == "-q") {
      opts->quiet = true;
    } else if (opt == "--pubkey") {
      std::string v;
      if (!value(&v)) return false;
      opts->pubkeys.push_back(std::move(v));
    } else if (opt == "--key") {
      if (!value(&opts->key)) return false;
    } else if (opt == "--out") {
      if (!value(&opts->out_prefix)) return false;
    } else if (opt == "--model") {
      if (!value(&opts->model)) return false;
    } else if (opt == "--version") {
      std::string v;
      if (!value(&v)) return false;
      uint64_t n = 0;
      bool ok = !v.empty() && v.size() <= 20;
      for (char c : v) {
        ok = ok && c >= '0' && c <= '9' && !__builtin_mul_overflow(n, 10u, &n) &&
             !__builtin_add_overflow(n, static_cast<uint64_t>(c - '0'), &n);
      }
      if (!ok) {
        *error = "--version needs an unsigned 64-bit integer, not '" + v + "'";
        return false;
      }
      opts->version = n;
    } else if (opt == "--detached") {
      opts->detached = true;
    } else if (opt == "--yara-rules") {
      std::string v;
      if (!value(&v)) return false;
      opts->yara_dirs.push_back(std::move(v));
    } else if (opt == "--yara-scope") {
      if (!value(&opts->yara_scope)) return false;
      if (opts->yara_scope != "header" && opts->yara_scope != "all") {
        *error = "--yara-scope is header or all, not '" + opts->yara_scope + "'";
        return false;
      }
    } else if (opt == "--no-yara") {
      opts->no_yara = true;
    } else if (opt == "--policy") {
      if (!value(&opts->policy)) return false;
    } else if (opt == "--json-output") {
      if (!value(&opts->json_output)) return false;
    } else if (opt == "--sarif-output") {
      if (!value(&opts->sarif_output)) return false;
    }
  }
  return true;
}

}  // namespace modelgate::cli
