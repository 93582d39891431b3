// findings_docs writes docs/findings/ from the one finding table
// (modelgate/findings.def): a page per fixed id, one page for the dynamic
// MG-YARA-<RULE> ids (listing the shipped rules), and an index.
//
//   findings_docs OUT_DIR [--yara RULES.yar...]
//       writes the pages into OUT_DIR (`ninja findings-docs` writes the
//       committed docs/findings/)
//   findings_docs --check COMMITTED_DIR OUT_DIR [--yara RULES.yar...]
//       writes into OUT_DIR, then fails unless COMMITTED_DIR holds exactly
//       the same .md files with the same bytes (the docs cannot drift)
//   findings_docs --list
//       prints the table, one id a line: ID TAB SEVERITY TAB KIND TAB CODE
//       TAB ENUMERATOR (SEVERITY "-" when it varies; KIND core|fixed|family;
//       CODE the numeric core::Code and ENUMERATOR its name, or "-"), for
//       tests/sarif
//
// A build tool over trusted repository files, not a reader of model files.
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "modelgate/core.h"

namespace {

namespace core = modelgate::core;
namespace fs = std::filesystem;

struct Area {
  std::string_view prefix;
  std::string_view name;
};

enum class Kind { kCore, kFixed, kFamily };

struct Row {
  Kind kind;
  std::string_view id;  // the prefix for a family
  std::string_view page;
  std::optional<core::Severity> severity;  // none: Varies, or a family
  std::string_view code_name;              // kCore only
  int code_value;                          // kCore only
  std::string_view title;
  std::string_view rule;
  std::string_view help;
};

#define MG_SEVERITY_Critical core::Severity::kCritical
#define MG_SEVERITY_High core::Severity::kHigh
#define MG_SEVERITY_Medium core::Severity::kMedium
#define MG_SEVERITY_Low core::Severity::kLow
#define MG_SEVERITY_Info core::Severity::kInfo
#define MG_SEVERITY_Varies std::nullopt

const std::vector<Area> kAreas = {
#define MG_FINDING_AREA(prefix, name) Area{prefix, name},
#include "modelgate/findings.def"
};

const std::vector<Row> kRows = {
#define MG_CORE_FINDING(code, id, severity, title, rule, help)                                \
  Row{Kind::kCore, id, id, MG_SEVERITY_##severity, #code, static_cast<int>(core::Code::code), \
      title, rule, help},
#define MG_FINDING(id, severity, title, rule, help) \
  Row{Kind::kFixed, id, id, MG_SEVERITY_##severity, "", 0, title, rule, help},
#define MG_FINDING_FAMILY(prefix, page, title, rule, help) \
  Row{Kind::kFamily, prefix, page, std::nullopt, "", 0, title, rule, help},
#include "modelgate/findings.def"
};

constexpr std::string_view kGenerated =
    "<!-- Generated from core/include/modelgate/findings.def by core/tools/findings_docs.cc "
    "(`ninja findings-docs`); edit the table, not this page. -->\n";

const char* LevelName(core::Severity s) {
  switch (s) {
    case core::Severity::kCritical:
    case core::Severity::kHigh: return "error";
    case core::Severity::kMedium: return "warning";
    default: return "note";
  }
}

// AreaOf is the area whose "MG-<PREFIX>-" starts `id`; every id has one.
const Area* AreaOf(std::string_view id) {
  for (const auto& a : kAreas) {
    std::string p = "MG-" + std::string(a.prefix) + "-";
    if (id.starts_with(p)) return &a;
  }
  return nullptr;
}

// Prose is the table's plain text as Markdown: outside `code spans`, the
// characters Markdown would read as emphasis or HTML are escaped (so
// __metadata__ stays itself).
std::string Prose(std::string_view s) {
  std::string out;
  bool code = false;
  for (char c : s) {
    if (c == '`') code = !code;
    if (!code && (c == '_' || c == '*' || c == '\\')) out += '\\';
    if (!code && c == '<') {
      out += "&lt;";
    } else if (!code && c == '>') {
      out += "&gt;";
    } else {
      out += c;
    }
  }
  return out;
}

// Cell is Prose for a Markdown table cell.
std::string Cell(std::string_view s) {
  std::string out;
  for (char c : Prose(s)) {
    if (c == '|') {
      out += "\\|";
    } else {
      out += c;
    }
  }
  return out;
}

struct YaraRule {
  std::string name, severity, description;
};

// ReadYaraRules lists `rule NAME` with its `severity` and `description`
// meta (line-based; the shipped files keep one meta per line).
bool ReadYaraRules(const std::vector<std::string>& paths, std::vector<YaraRule>* out) {
  auto quoted = [](const std::string& line) {
    size_t a = line.find('"'), b = line.rfind('"');
    return (a == std::string::npos || b <= a) ? std::string() : line.substr(a + 1, b - a - 1);
  };
  for (const auto& p : paths) {
    std::ifstream in(p);
    if (!in) {
      std::cerr << "findings_docs: cannot read " << p << "\n";
      return false;
    }
    std::string line;
    while (std::getline(in, line)) {
      size_t i = line.find_first_not_of(" \t");
      if (i == std::string::npos) continue;
      std::string_view t = std::string_view(line).substr(i);
      if (t.starts_with("rule ")) {
        std::string_view n = t.substr(5);
        size_t e = n.find_first_of(" \t:{");
        out->push_back(YaraRule{std::string(n.substr(0, e)), "high (default)", ""});
      } else if (!out->empty() && t.starts_with("severity")) {
        out->back().severity = quoted(line);
      } else if (!out->empty() && t.starts_with("description")) {
        out->back().description = quoted(line);
      }
    }
  }
  return true;
}

std::string YaraId(std::string_view name) {
  std::string id = "MG-YARA-";
  for (char c : name) {
    const bool alnum = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
    id += alnum ? static_cast<char>((c >= 'a' && c <= 'z') ? c - 'a' + 'A' : c) : '-';
  }
  return id;
}

std::string SeverityCell(const Row& r) {
  if (r.kind == Kind::kFamily) return "set by the rule";
  if (!r.severity) return "varies";
  return std::string(core::SeverityName(*r.severity));
}

std::string Page(const Row& r, const std::vector<YaraRule>& yara) {
  std::ostringstream o;
  const Area* area = AreaOf(r.id);
  const std::string shown =
      r.kind == Kind::kFamily ? std::string(r.id) + "<RULE>" : std::string(r.id);
  o << "# " << Prose(shown) << ": " << Prose(r.title) << "\n\n" << kGenerated << "\n";
  o << "| | |\n|---|---|\n";
  o << "| Id | `" << shown << "` |\n";
  o << "| Area | " << area->name << " |\n";
  if (r.kind == Kind::kFamily) {
    o << "| Severity | the rule's `severity` meta (high when it has none) |\n";
  } else if (r.severity) {
    const bool blocks = *r.severity <= core::Severity::kHigh;
    o << "| Severity | " << core::SeverityName(*r.severity) << " |\n";
    o << "| SARIF level | " << LevelName(*r.severity) << " |\n";
    o << "| Rejected by default (`--fail-on high`) | " << (blocks ? "yes" : "no") << " |\n";
  } else {
    o << "| Severity | varies: " << Cell(r.rule) << " |\n";
  }
  if (r.kind == Kind::kCore) {
    o << "| Core code | `modelgate::core::Code::" << r.code_name << "` = " << r.code_value
      << " |\n";
  }
  o << "\n## What it means\n\n" << Prose(r.help) << "\n";
  if (!r.rule.empty() && (r.severity || r.kind == Kind::kFamily)) {
    o << "\n## Rule\n\n" << Prose(r.rule) << "\n";
  }
  if (r.kind == Kind::kFamily) {
    o << "\n## Shipped rules\n\n"
         "Rules from a `--yara-rules` directory report their own ids the same way.\n\n"
         "| id | severity | what it matches |\n|---|---|---|\n";
    for (const auto& y : yara) {
      o << "| `" << YaraId(y.name) << "` | " << y.severity << " | " << Cell(y.description)
        << " |\n";
    }
  }
  o << "\n[All finding ids](README.md)\n";
  return o.str();
}

std::string Index() {
  std::ostringstream o;
  o << "# Finding ids\n\n" << kGenerated << "\n";
  o << "Every finding modelgate reports has a stable id; this is the list of them, one page each.\n"
       "A finding's severity decides whether it rejects the file (at or above `--fail-on`,\n"
       "default `high`, or the policy's `failOn`). In SARIF, critical and high findings are `error`\n"
       "results, medium `warning`, low and info `note`; `--sarif-level` (default `warning`)\n"
       "leaves out the results below it.\n\n"
       "Each SARIF rule's `helpUri` is `MG_DOCS_BASE_URI` followed by `ID.md`. `MG_DOCS_BASE_URI`\n"
       "is a CMake cache variable whose default,\n"
       "`https://github.com/OWNER/modelgate/blob/main/docs/findings/`, names a placeholder\n"
       "`OWNER`: a build that publishes alerts sets it to where these pages are served, e.g.\n"
       "`cmake -DMG_DOCS_BASE_URI=https://github.com/acme/modelgate/blob/v1.2.0/docs/findings/`.\n";
  for (const auto& a : kAreas) {
    o << "\n## " << a.name << " (`MG-" << a.prefix
      << "-*`)\n\n| id | severity | title |\n|---|---|---|\n";
    for (const auto& r : kRows) {
      if (AreaOf(r.id) != &a) continue;
      const std::string shown =
          r.kind == Kind::kFamily ? std::string(r.id) + "<RULE>" : std::string(r.id);
      o << "| [" << Cell(shown) << "](" << r.page << ".md) | " << SeverityCell(r) << " | "
        << Cell(r.title) << " |\n";
    }
  }
  return o.str();
}

// CheckTable: every row has an area, a title and help, and its own page.
bool CheckTable() {
  std::set<std::string> ids;
  for (const auto& r : kRows) {
    if (AreaOf(r.id) == nullptr) {
      std::cerr << "findings_docs: " << r.id << " has no MG_FINDING_AREA\n";
      return false;
    }
    if (!ids.insert(std::string(r.page)).second) {
      std::cerr << "findings_docs: " << r.page << " twice in the table\n";
      return false;
    }
    if (r.title.empty() || r.help.empty()) {
      std::cerr << "findings_docs: " << r.id << " lacks a title or help\n";
      return false;
    }
  }
  return true;
}

bool WriteAll(const fs::path& dir, const std::map<std::string, std::string>& pages) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  for (const auto& [name, text] : pages) {
    std::ofstream out(dir / name, std::ios::binary | std::ios::trunc);
    out << text;
    if (!out.flush()) {
      std::cerr << "findings_docs: cannot write " << (dir / name).string() << "\n";
      return false;
    }
  }
  return true;
}

std::optional<std::string> Slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) return std::nullopt;
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

int Usage() {
  std::cerr << "usage: findings_docs OUT_DIR [--yara FILE...]\n"
               "       findings_docs --check COMMITTED_DIR OUT_DIR [--yara FILE...]\n"
               "       findings_docs --list\n";
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.size() == 1 && args[0] == "--list") {
    for (const auto& r : kRows) {
      const char* kind = r.kind == Kind::kCore    ? "core"
                         : r.kind == Kind::kFixed ? "fixed"
                                                  : "family";
      std::cout << r.id << '\t' << (r.severity ? std::string(core::SeverityName(*r.severity)) : "-")
                << '\t' << kind << '\t'
                << (r.kind == Kind::kCore ? std::to_string(r.code_value) : "-") << '\t'
                << (r.kind == Kind::kCore ? r.code_name : "-") << '\n';
    }
    return 0;
  }
  std::string committed;
  if (!args.empty() && args[0] == "--check") {
    if (args.size() < 3) return Usage();
    committed = args[1];
    args.erase(args.begin(), args.begin() + 2);
  }
  if (args.empty() || args[0].starts_with("--")) return Usage();
  const fs::path out_dir = args[0];
  std::vector<std::string> yara_files;
  if (args.size() > 1) {
    if (args[1] != "--yara") return Usage();
    yara_files.assign(args.begin() + 2, args.end());
  }
  std::vector<YaraRule> yara;
  if (!ReadYaraRules(yara_files, &yara)) return 1;

  std::map<std::string, std::string> pages;
  if (!CheckTable()) return 1;
  for (const auto& r : kRows) pages[std::string(r.page) + ".md"] = Page(r, yara);
  pages["README.md"] = Index();
  if (!WriteAll(out_dir, pages)) return 1;
  if (committed.empty()) return 0;

  int differ = 0;
  for (const auto& [name, text] : pages) {
    auto have = Slurp(fs::path(committed) / name);
    if (!have) {
      std::cerr << "findings_docs: " << name << " is missing from " << committed << "\n";
      ++differ;
    } else if (*have != text) {
      std::cerr << "findings_docs: " << name << " differs from the table (regenerated in "
                << out_dir.string() << ")\n";
      ++differ;
    }
  }
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(committed, ec)) {
    const std::string name = e.path().filename().string();
    if (e.path().extension() == ".md" && pages.count(name) == 0) {
      std::cerr << "findings_docs: " << name << " in " << committed
                << " names no id in the table\n";
      ++differ;
    }
  }
  if (ec) {
    std::cerr << "findings_docs: cannot list " << committed << "\n";
    return 1;
  }
  if (differ != 0) {
    std::cerr << "findings_docs: " << differ << " page(s) out of date; run `ninja findings-docs`\n";
    return 1;
  }
  std::cout << pages.size() << " pages match the table\n";
  return 0;
}
