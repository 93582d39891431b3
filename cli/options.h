// The parsed command line: what BuildApp (app.h) binds every option to.
#pragma once

#include <cstdint>
#include <functional>
#include <iosfwd>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "modelgate/core.h"

namespace modelgate::cli {

struct FileReport;  // cli.h

// ServeOptions are `modelgate serve`'s (server/serve.h reads them).
struct ServeOptions {
  std::string listen = "127.0.0.1:8080";  // --listen ADDR:PORT ([ADDR]:PORT for IPv6)
  std::string token_file;                 // --token-file F
  uint64_t max_body_bytes = 4ull << 30;   // --max-body-bytes N
  uint64_t workers = 4;                   // --workers N
  uint64_t queue = 64;                    // --queue N
  std::string spool;                      // --spool DIR ("" = $TMPDIR/modelgate-serve-UID)
  uint64_t header_timeout = 10;           // --header-timeout SEC
  uint64_t body_timeout = 600;            // --body-timeout SEC
  std::string tls_cert, tls_key;          // --tls-cert F --tls-key F
};

// CommonOptions holds every option of every command; a command reads only
// the ones it defines (app.cc). Defaults here are the ones --help shows.
struct CommonOptions {
  std::string format = "text";  // -f text | json | sarif
  std::string out_path;         // -o; empty = stdout (sign: in place)
  core::Severity fail_on = core::Severity::kHigh;
  bool fail_on_given = false;   // --fail-on was on the command line
  bool quiet = false;
  bool print_version = false;           // the program's own --version
  std::string color = "auto";          // --color auto | always | never
  std::string sarif_level = "warning";  // --sarif-level error | warning | note
  std::vector<std::string> pubkeys;    // --pubkey (repeatable)
  std::string key;                     // --key
  std::string out_prefix;              // keygen --out
  std::string key_alg = "ed25519";     // keygen --alg (signer::KeyAlgName)
  bool encrypt = false;                // keygen --encrypt
  std::string passphrase_file;         // keygen/sign --passphrase-file FILE
  std::string pin_file;                // sign --pin-file FILE (a pkcs11: --key)
  std::string pkcs11_module;           // sign --pkcs11-module PATH
  std::string model;                   // sign --model
  std::optional<uint64_t> version;     // sign --version
  bool detached = false;               // sign --detached
  bool drop_non_tensors = false;       // convert --drop-non-tensors
  std::vector<std::string> ignore;     // sign --detached --ignore PATH (repeatable)
  std::string sig_path;                // verify/check --sig FILE (a detached bundle)
  bool allow_unsigned_files = false;   // verify --sig: files the bundle lacks pass
  std::vector<std::string> yara_dirs;  // --yara-rules DIR (repeatable)
  std::string yara_scope = "header";   // --yara-scope header|all
  bool no_yara = false;                // --no-yara: not even the shipped rules
  std::string policy;                  // --policy FILE
  std::string json_output;             // --json-output FILE (extra report)
  std::string sarif_output;            // --sarif-output FILE (extra report)
  ServeOptions serve;                  // serve's options
  std::string files_from;              // scan/check --files-from FILE|- (file_list.h)
  std::string shard;                   // scan/check --shard I/N (file_list.h)
  // -f jsonl to standard output: called with each file's final report as
  // RunTargets finishes it; true when it wrote the line (report.cc).
  std::function<bool(const FileReport&)> on_file;
  // Library callers (libmodelgate's mg_scan) instead of the terminal: when
  // set, EmitReport stores the rendered report in *report_text instead of
  // writing it, and scan/check write their messages (what the program says
  // on stderr before exiting 2) to *diagnostics.
  std::string* report_text = nullptr;
  std::ostream* diagnostics = nullptr;
  // Positional operands: PATH... (scan, verify, check), FILE (inspect,
  // policy lint), PATH (sign), COMMAND... (help). "-" is standard input
  // for scan and inspect only.
  std::vector<std::string> paths;
};

// UseColor: --color always or never as said; auto (the default) colours
// only a report going to a terminal (stdout, no -o) when NO_COLOR (its value
// `no_color`, null when unset) is unset or empty, as no-color.org asks.
bool UseColor(const CommonOptions& opts, bool stdout_is_terminal, const char* no_color);

// Diagnostics is where scan and check write their messages: *opts.diagnostics,
// else std::cerr.
std::ostream& Diagnostics(const CommonOptions& opts);

// kStdinPath is the operand that names standard input, and the path under
// which its spooled bytes are reported.
inline constexpr std::string_view kStdinPath = "-";

}  // namespace modelgate::cli
