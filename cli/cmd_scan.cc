#include <unistd.h>

#include <cstdlib>
#include <optional>
#include <iostream>

#include "cli.h"
#include "exit_code.h"
#include "file_list.h"
#include "model_dir.h"
#include "options.h"

namespace modelgate::cli {

bool ConfigureYara(const CommonOptions& opts, scanner::ScanOptions* scan_options) {
  if (opts.no_yara) {
    if (!opts.yara_dirs.empty()) {
      Diagnostics(opts) << "modelgate: --no-yara and --yara-rules contradict each other\n";
      return false;
    }
    return true;
  }
  auto rules = scanner::CompileYaraRules(opts.yara_dirs, /*with_default=*/true);
  if (!rules.ok()) {
    Diagnostics(opts) << "modelgate: YARA rules: " << rules.error().message << "\n";
    return false;
  }
  scan_options->yara = std::move(rules).value();
  scan_options->yara_scope = opts.yara_scope == "all" ? scanner::YaraScope::kAll
                                                      : scanner::YaraScope::kHeader;
  return true;
}

bool StreamJsonl(const FileReport& file) {
  const bool may_change = (file.side && file.side->index) ||
                          (file.signature.kind == "detached" && file.signature.detached_state == "ignored");
  if (may_change) return false;
  std::cout << RenderJsonLine(file) << std::flush;
  return static_cast<bool>(std::cout);
}

// WithOperands is `given` with --files-from and --shard applied, and the
// jsonl stream hooked in; nullopt after a usage error.
std::optional<CommonOptions> WithOperands(const CommonOptions& given, const std::string& command,
                                          int* exit_code) {
  CommonOptions opts = given;
  std::string why;
  if (!ResolveOperands(&opts, &why)) {
    *exit_code = Usage(command, why);
    return std::nullopt;
  }
  if (opts.paths.empty() && opts.files_from.empty() && opts.shard.empty()) {
    *exit_code = Usage(command, "needs at least one PATH");
    return std::nullopt;
  }
  if (opts.format == "jsonl" && opts.out_path.empty() && opts.report_text == nullptr) {
    opts.on_file = StreamJsonl;
  }
  return opts;
}

int RunScan(const CommonOptions& given) {
  int code = 0;
  const std::optional<CommonOptions> resolved = WithOperands(given, "scan", &code);
  if (!resolved) return code;
  const CommonOptions& opts = *resolved;
  if (!opts.policy.empty()) {
    // Under a policy, the policy sets the bar, the rules and the limits.
    if (!opts.yara_dirs.empty() || opts.no_yara || opts.yara_scope != "header") {
      return Usage("scan", "--policy sets the YARA rules (policy yara:); drop --yara-* / --no-yara");
    }
    if (opts.fail_on_given) {
      return Usage("scan", "--policy sets the bar (policy failOn:); drop --fail-on");
    }
    return RunChecked(opts, opts.policy);
  }

  scanner::ScanOptions scan_options;
  if (!ConfigureYara(opts, &scan_options)) return kExitCannotJudge;
  Report report = RunFiles(opts, [&](const Target& target, const core::OpenedFile* file, Progress*) {
    FileReport fr;
    if (!WalkFindings(target, &fr)) fr.scan = scanner::ScanOpened(*file, target.path, scan_options);
    fr.verdict = Judge(fr.scan, opts.fail_on);
    return fr;
  });
  FinishSets(opts.fail_on, &report);
  return EmitReport(report, opts);
}

int EmitReport(Report& report, const CommonOptions& opts) {
  report.summary = Summarize(report.files);
  if (report.files.empty() && !opts.quiet) std::cerr << "modelgate: no files found\n";
  const bool color = UseColor(opts, ::isatty(STDOUT_FILENO) == 1, std::getenv("NO_COLOR"));
  SarifLevel level = SarifLevel::kWarning;
  (void)ParseSarifLevel(opts.sarif_level, &level);  // the parser accepted only these
  std::string jsonl;
  if (opts.format == "jsonl") {
    for (const FileReport& f : report.files) {
      if (!f.streamed) jsonl += RenderJsonLine(f);
    }
    jsonl += RenderJsonlEnd(report);
  }
  const std::string text = opts.format == "json"    ? RenderJson(report)
                           : opts.format == "jsonl" ? jsonl
                           : opts.format == "sarif" ? RenderSarif(report, level)
                                                    : RenderText(report, color);
  if (opts.report_text != nullptr) {
    *opts.report_text = text;
  } else if (!WriteOutput(opts.out_path, text)) {
    return kExitCannotJudge;
  }
  if (!opts.out_path.empty() && !opts.quiet) {
    // The report went to a file: say on stderr what it holds (a log; -q drops it).
    std::cerr << "modelgate: " << SummaryLine(report.summary) << "; report in "
              << DisplayPath(opts.out_path) << "\n";
  }
  // Extra formats from the same pass: multi-GB files are hashed once.
  if (!opts.json_output.empty() && !WriteOutput(opts.json_output, RenderJson(report))) {
    return kExitCannotJudge;
  }
  if (!opts.sarif_output.empty() && !WriteOutput(opts.sarif_output, RenderSarif(report, level))) {
    return kExitCannotJudge;
  }
  if (report.summary.errors > 0) return kExitCannotJudge;
  if (report.summary.rejected > 0) return kExitRejected;
  return kExitPass;
}

}  // namespace modelgate::cli
