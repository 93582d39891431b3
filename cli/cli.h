// Internal interfaces of the modelgate program.
#pragma once

#include <cstdio>
#include <functional>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "modelgate/scanner.h"
#include "modelgate/signer.h"

namespace modelgate::cli {

// Verdict of one file.
enum class Verdict { kPass, kReject, kError };
const char* VerdictName(Verdict v);

struct ModelSide;  // model_dir.h

// SignatureReport is the `signature` object of a file's report.
struct SignatureReport {
  std::string status = "not-checked";  // valid|invalid|missing|untrusted|not-checked
  std::vector<std::string> key_ids;     // records that verified
  std::vector<std::string> key_names;   // their trusted keys' names
  // Key ids of well-formed records by keys not trusted (the text report's
  // "untrusted (key id X not trusted)"; not in the JSON report).
  std::vector<std::string> untrusted_key_ids;
  // The kind of signature `status` is about: "embedded" (STSIG records in
  // the file), "detached" (an OMS bundle covering it) or "" (none).
  std::string kind;
  // The signed model identity and version, when a signature satisfied the
  // check ("" / nullopt when none was signed; an STSIG version 0 is none).
  std::string model;
  std::optional<uint64_t> version;
  // Against a detached bundle: "signed" | "changed" | "added" | "ignored"
  // (oms::FileStateName); "" when no bundle covers the file's tree. The
  // missing files a bundle lists are entries of their own.
  std::string detached_state;
};

// SignatureFrom fills a report's signature object from a verification:
// its status, and the key id and trusted name of every record that verified.
SignatureReport SignatureFrom(const signer::VerifyResult& v);

// FileReport is one file's line in a report.
struct FileReport {
  scanner::FileScan scan;
  Verdict verdict = Verdict::kPass;
  SignatureReport signature;
  // The Hugging Face cache blob judged under scan.path (Target::blob); the
  // JSON `target` field. Empty for every other file.
  std::string target;
  // SHA-256 of the whole file, when the verdict hashed it (JSON `sha256`).
  std::optional<core::Sha256Digest> sha256;
  // The Target's operand and relative path (not reported: the model-level
  // checks after the walk find a directory's files by them).
  size_t operand = 0;
  std::string rel;
  // What the model-level checks need of this file (model_dir.h), if any.
  std::shared_ptr<ModelSide> side;
  // -f jsonl: the line was written as the file finished (RunTargets).
  bool streamed = false;
};

struct Summary {
  size_t files = 0, passed = 0, rejected = 0, errors = 0;
};

struct Report {
  std::vector<FileReport> files;
  Summary summary;
  // The policy the run was judged under (check, scan --policy): its path as
  // given and the SHA-256 of the bytes read (policy::Policy::sha256). Empty
  // path: no policy, and no `policy` object in the reports.
  std::string policy_path;
  std::optional<core::Sha256Digest> policy_sha256;
};

// Judge applies the default policy: reject at or above `fail_on`; a file the
// gate could not read is an error.
Verdict Judge(const scanner::FileScan& scan, core::Severity fail_on);
Summary Summarize(const std::vector<FileReport>& files);
// SummaryLine is "2 files: 1 passed, 1 rejected, 0 errors" (no newline).
std::string SummaryLine(const Summary& s);

// Target is one file to scan, found on the command line or by a walk.
struct Target {
  std::string path;
  bool follow_symlink = true;  // named on the command line
  // Set when the walk itself judged the entry (a symlink leading out of
  // the tree, a special file): the finding to report instead of scanning.
  std::vector<scanner::Finding> walk_findings;
  bool walk_error = false;
  // Size of a regular file as the walk's stat saw it (the progress line's
  // total; display only, the scan opens and measures the file itself).
  uint64_t size_bytes = 0;
  // Set when `path` is a link in a Hugging Face cache snapshot
  // (models--X/snapshots/<rev>/...) that resolves to a regular file directly
  // in models--X/blobs/: that blob's real path, which is opened (O_NOFOLLOW)
  // and judged in the link's name. Empty for every other target.
  std::string blob{};
  // Set for the operand "-": standard input, spooled (SpoolToTempFile) and
  // reported under the path "-".
  bool standard_input = false;
  // Which command-line operand the target came from (index into
  // opts.paths), and its path relative to that operand when the operand is a
  // directory ('/'-separated; "" for an operand that is itself the file).
  // A detached bundle names files this way.
  size_t operand = 0;
  std::string rel{};
  // When >= 0: the bytes are this open regular file, owned by the caller
  // (the server's spool), and `path` is only the name they are judged and
  // reported under (the client's name: data, never opened). OpenTarget
  // duplicates the descriptor; TargetUnchanged re-checks it alone.
  int open_fd = -1;
};

// ExpandPaths turns command-line paths into files: directories are walked
// recursively in sorted order, never following a symlink out of the tree
// (except a Hugging Face snapshot link into its own repository's blobs/).
// `prune`, when set, is asked for every entry of a directory operand
// (operand index, path relative to it): true leaves the entry out, and a
// directory is then not descended into (check: a top-level .git its
// operand's valid bundle ignores).
using PruneFn = std::function<bool(size_t operand, std::string_view rel)>;
std::vector<Target> ExpandPaths(const std::vector<std::string>& paths, const PruneFn& prune = {});

class Progress;
struct CommonOptions;
// RunFiles expands opts.paths and judges each target with `one`, in order,
// with a progress line on stderr when stderr is a terminal and -q is not
// given. One verdict reads one descriptor: RunFiles opens each file target
// once (OpenTarget) and hands `one` that open file, which every read of the
// verdict (scan, signature, file SHA-256) must use; it never reopens the
// path. After `one`, RunFiles re-checks the file (TargetUnchanged): a change
// makes the verdict "error" with MG-IO-CHANGED. `file` is null when the walk
// already judged the target (WalkFindings); a target that cannot be opened
// is an error report without calling `one`. `one` gets the progress line
// (null when none is drawn) to name its phases and feed hashing progress
// (Progress::Phase, Progress::Hashed).
using JudgeFn = std::function<FileReport(const Target&, const core::OpenedFile* file, Progress*)>;
Report RunFiles(const CommonOptions& opts, const JudgeFn& one, const PruneFn& prune = {});
// RunTargets is RunFiles on targets already listed (ExpandPaths, or the
// server's spooled uploads).
Report RunTargets(const CommonOptions& opts, const std::vector<Target>& targets, const JudgeFn& one);

// OpenTarget opens what `target` names, once: its path (a final symlink
// followed only for a path named on the command line) or, for a Hugging
// Face snapshot link, its blob with O_NOFOLLOW. Only regular files. For
// the operand "-" it spools standard input (SpoolToTempFile).
core::Result<core::OpenedFile> OpenTarget(const Target& target);
// TargetUnchanged is the identity re-check before a verdict: the open file
// is unchanged (core::CheckUnchanged) and the name still leads to that inode
// (for a snapshot link, still to the same blob). Else kIoChanged.
core::Status TargetUnchanged(const Target& target, const core::OpenedFile& file);

// WalkFindings fills `fr` from the walk's own judgement of `target` (a
// symlink out of the tree, a special file) and returns true; false when
// the target is a file to open.
bool WalkFindings(const Target& target, FileReport* fr);

std::string RenderText(const Report& report, bool color);
// FindingLine is one finding as a text line: `  PATH[!MEMBER][:OFFSET]: ID
// (severity): message`, with `path` already made displayable.
std::string FindingLine(const std::string& path, const scanner::Finding& f, bool color);
std::string RenderJson(const Report& report);
// -f jsonl: RenderJsonLine is one file's object (the JSON report's files[]
// entry) on one line; RenderJsonlEnd the last line, the report's head
// (schema, tool, policy) with its summary.
std::string RenderJsonLine(const FileReport& file);
std::string RenderJsonlEnd(const Report& report);
// StreamJsonl is the CommonOptions::on_file of -f jsonl to standard output:
// it writes a file's line at once unless the model checks after the walk
// may still change it (a shard index, a detached bundle's own entry),
// which EmitReport writes at the end.
bool StreamJsonl(const FileReport& file);
// SarifLevel is a SARIF result level, most important first. Severities map
// critical|high -> error, medium -> warning, low|info -> note.
enum class SarifLevel { kError, kWarning, kNote };
// ParseSarifLevel reads "error", "warning" or "note" (exactly); false, and
// `out` untouched, for anything else.
bool ParseSarifLevel(std::string_view s, SarifLevel* out);
// RenderSarif is SARIF 2.1.0 for code scanning. Findings whose level is
// below `min_level` are not results, and their ids are not rules (the rules
// list exactly the ids of the results); invocation, notifications and the
// summary cover every file whatever the level. The CLI's default is kWarning.
std::string RenderSarif(const Report& report, SarifLevel min_level);

// DisplayPath returns `path` as is when it is printable UTF-8, else quoted
// with escapes, so a hostile file name cannot forge report lines.
std::string DisplayPath(const std::string& path);

// NameBytes is "" when `name` is UTF-8, else its raw bytes in lowercase hex:
// the JSON reports' `<field>_bytes` (path_bytes, member_bytes, ...), written
// only then, beside `<field>` as core::EscapeInvalidUtf8 renders it.
std::string NameBytes(const std::string& name);

// WriteOutput writes `text` to `out_path` atomically, or to stdout when
// empty. Returns false (after a message on stderr) on failure.
bool WriteOutput(const std::string& out_path, const std::string& text);

// StreamOutput is WriteOutput for a document too large to hold in memory:
// `write` sends it to the stream it is given (stdout, or a temp file that
// then atomically replaces `out_path`) and returns false on failure.
// Returns false, after a message on stderr, when anything failed.
bool StreamOutput(const std::string& out_path, const std::function<bool(std::ostream&)>& write);

// WithOperands is `given` with --files-from and --shard applied
// (file_list.h) and, for -f jsonl to standard output, StreamJsonl as
// on_file; nullopt, with the exit code in *exit_code, after a usage error.
std::optional<CommonOptions> WithOperands(const CommonOptions& given, const std::string& command,
                                          int* exit_code);

// The commands' bodies, on the options RunCli (app.h) parsed for them.
int RunScan(const CommonOptions& opts);
int RunInspect(const CommonOptions& opts);
int RunKeygen(const CommonOptions& opts);
int RunSign(const CommonOptions& opts);
int RunConvert(const CommonOptions& opts);
int RunVerify(const CommonOptions& opts);
int RunCheck(const CommonOptions& opts);
int RunPolicyLint(const CommonOptions& opts);

// EmitReport renders `report` as opts say, writes it, and returns the exit
// code the contract gives it (2 if anything could not be judged or the
// report could not be written, else 1 if anything was rejected, else 0).
int EmitReport(Report& report, const CommonOptions& opts);
// ConfigureYara compiles the shipped rules plus --yara-rules directories
// once for the run (unless --no-yara); false, after a message, on error.
bool ConfigureYara(const CommonOptions& opts, scanner::ScanOptions* scan_options);
// RunChecked scans and verifies opts.paths under the policy at
// `policy_path` (check, and scan --policy) and emits the report.
int RunChecked(const CommonOptions& opts, const std::string& policy_path);

// Usage prints a usage error of `command` ("scan", "policy lint") as one
// line on stderr, with where to find its usage (UsageError); returns 2.
int Usage(const std::string& command, const std::string& message);

}  // namespace modelgate::cli
