#include "app.h"

#include <algorithm>
#include <cstdint>
#include <iostream>

#include "cli.h"
#include "exit_code.h"
#include "modelgate/scanner.h"
#include "modelgate/signer.h"

namespace modelgate::cli {
namespace {

using Commands_ = std::map<const CLI::App*, CommandInfo>;

// Arg quotes a word of the command line for a message: it came from the
// user's shell, possibly pasted, and must not drive the terminal.
std::string Arg(std::string_view word) {
  return "'" + core::EscapeControls(word.substr(0, 200)) + "'";
}

// JoinOr is "a, b or c".
std::string JoinOr(const std::vector<std::string>& words) {
  std::string out;
  for (size_t i = 0; i < words.size(); ++i) {
    if (i > 0) out += i + 1 == words.size() ? " or " : ", ";
    out += words[i];
  }
  return out;
}

// Wrap puts the words of `text` on lines of at most `width` columns (a
// longer word stands alone): the first line goes on from column `start`,
// the next ones start `indent` spaces in.
std::string Wrap(std::string_view text, size_t start, size_t width, size_t indent) {
  std::string out;
  size_t column = start;
  bool line_empty = true;
  while (!text.empty()) {
    const size_t space = text.find(' ');
    const std::string_view word = text.substr(0, space);
    text = space == std::string_view::npos ? std::string_view() : text.substr(space + 1);
    if (word.empty()) continue;
    if (!line_empty && column + 1 + word.size() > width) {
      out += "\n" + std::string(indent, ' ');
      column = indent;
      line_empty = true;
    }
    if (!line_empty) {
      out += ' ';
      ++column;
    }
    out += word;
    column += word.size();
    line_empty = false;
  }
  return out;
}

constexpr size_t kHelpWidth = 80;   // columns of --help text
constexpr size_t kNameColumn = 30;  // where option and command help starts

// HelpFormatter lays out --help: usage first, then what the command does,
// its operands, its options with their defaults, its commands, the footer;
// text wrapped at kHelpWidth.
class HelpFormatter : public CLI::Formatter {
 public:
  explicit HelpFormatter(std::shared_ptr<const Commands_> commands)
      : commands_(std::move(commands)) {
    column_width(kNameColumn);
    label("Positionals", "Operands");
  }

  std::string make_help(const CLI::App* app, std::string name,
                        CLI::AppFormatMode mode) const override {
    if (mode == CLI::AppFormatMode::Sub) return make_expanded(app);
    std::string out = make_usage(app, name);
    if (!app->get_description().empty()) {
      out += "\n" + Wrap(app->get_description(), 0, kHelpWidth, 0) + "\n";
    }
    out += make_positionals(app);
    out += make_groups(app, mode);
    out += make_subcommands(app, mode);
    if (!app->get_footer().empty()) out += "\n" + Wrap(app->get_footer(), 0, kHelpWidth, 0) + "\n";
    return out;
  }
  std::string make_option(const CLI::Option* opt, bool is_positional) const override {
    return Entry(make_option_name(opt, is_positional) + make_option_opts(opt),
                 make_option_desc(opt));
  }
  std::string make_subcommand(const CLI::App* sub) const override {
    return Entry(sub->get_name(), sub->get_description());
  }
  std::string make_usage(const CLI::App* app, std::string) const override {
    auto it = commands_->find(app);
    return "usage: " + (it == commands_->end() ? app->get_name() : it->second.synopsis) + "\n";
  }
  std::string make_option_name(const CLI::Option* opt, bool is_positional) const override {
    return is_positional ? opt->get_name() : OptionNames(*opt);
  }
  std::string make_option_opts(const CLI::Option* opt) const override {
    if (opt->get_positional() || !TakesValue(*opt)) return "";
    return " " + opt->get_type_name();
  }
  std::string make_option_desc(const CLI::Option* opt) const override { return OptionHelp(*opt); }

 private:
  // Entry is "  NAME   help..." with the help from kNameColumn, on the next
  // line when NAME reaches it.
  static std::string Entry(const std::string& name, const std::string& help) {
    std::string out = "  " + name;
    if (out.size() + 1 >= kNameColumn) {
      out += "\n" + std::string(kNameColumn, ' ');
    } else {
      out.append(kNameColumn - out.size(), ' ');
    }
    // "[default: X]" stays on one line: its space is a 0x01 while wrapping.
    std::string text = help;
    for (size_t at = 0; (at = text.find("[default: ", at)) != std::string::npos; at += 9) {
      text[at + 9] = '\x01';
    }
    std::string wrapped = Wrap(text, kNameColumn, kHelpWidth, kNameColumn);
    std::replace(wrapped.begin(), wrapped.end(), '\x01', ' ');
    return out + wrapped + "\n";
  }

  std::shared_ptr<const Commands_> commands_;
};

// Validators return "" or the message of a usage error; CLI11 prefixes the
// option's name.
CLI::Validator OneOf(std::vector<std::string> values, std::string what) {
  return CLI::Validator(
      [values, what](std::string& v) -> std::string {
        if (std::find(values.begin(), values.end(), v) != values.end()) return {};
        return "unknown " + what + " " + Arg(v) + " (" + JoinOr(values) + ")";
      },
      "", "");
}

CLI::Validator NamesAFile() {
  return CLI::Validator(
      [](std::string& v) -> std::string {
        if (v == kStdinPath) return "'-' (standard input) is not accepted here; name a file";
        if (v.empty()) return "needs a file name, not ''";
        return {};
      },
      "", "");
}

// ParseU64 reads a decimal unsigned 64-bit integer, overflow-checked.
bool ParseU64(const std::string& v, uint64_t* out) {
  uint64_t n = 0;
  bool ok = !v.empty() && v.size() <= 20;
  for (char c : v) {
    ok = ok && c >= '0' && c <= '9' && !__builtin_mul_overflow(n, 10u, &n) &&
         !__builtin_add_overflow(n, static_cast<uint64_t>(c - '0'), &n);
  }
  if (ok) *out = n;
  return ok;
}

const std::vector<std::string> kSeverities = {"critical", "high", "medium", "low", "info"};

// Builder adds commands and options to one AppDefinition.
class Builder {
 public:
  Builder(AppDefinition* def, CommonOptions* o) : d_(*def), o_(*o) {}

  CLI::App* Command(CLI::App* parent, const std::string& name, const std::string& about,
                    const std::string& operands, bool reads_stdin,
                    std::function<int(const CommonOptions&)> run) {
    CLI::App* c = parent->add_subcommand(name, about);
    c->group("Commands");
    c->allow_extras();  // unknown words are reported by RunCli, with a hint
    const std::string& parent_path = d_.commands->at(parent).path;
    const std::string path = parent_path.empty() ? name : parent_path + " " + name;
    (*d_.commands)[c] =
        CommandInfo{path, "modelgate " + path + (operands.empty() ? "" : " " + operands),
                    reads_stdin, std::move(run)};
    return c;
  }

  CLI::Option* Value(CLI::App* c, const std::string& names, std::string* target,
                     const std::string& type, const std::string& help, const std::string& def) {
    return c->add_option(names, *target, help)->type_name(type)->default_str(def);
  }
  CLI::Option* File(CLI::App* c, const std::string& names, std::string* target,
                    const std::string& type, const std::string& help, const std::string& def) {
    return Value(c, names, target, type, help, def)->check(NamesAFile());
  }
  CLI::Option* Files(CLI::App* c, const std::string& names, std::vector<std::string>* target,
                     const std::string& type, const std::string& help, const std::string& def) {
    // One value per occurrence: `--pubkey k.pub model.safetensors` keeps
    // the model an operand.
    CLI::Option* opt = c->add_option(names, *target, help)
                           ->type_name(type)
                           ->default_str(def)
                           ->allow_extra_args(false)
                           ->check(NamesAFile());
    d_.repeatable.insert(opt);
    return opt;
  }
  CLI::Option* Choice(CLI::App* c, const std::string& names, std::string* target,
                      const std::string& type, const std::string& help,
                      std::vector<std::string> values, const std::string& what) {
    CLI::Option* opt = Value(c, names, target, type, help, *target);
    opt->check(OneOf(values, what));
    d_.choices[opt] = std::move(values);
    return opt;
  }
  // U64 takes an unsigned 64-bit integer (overflow-checked; ranges are
  // the command's to check, with a message naming its limit).
  CLI::Option* U64(CLI::App* c, const std::string& names, uint64_t* target, const std::string& type,
                   const std::string& help) {
    CLI::Option* opt = c->add_option_function<std::string>(
                            names, [target](const std::string& v) { (void)ParseU64(v, target); }, help)
                           ->type_name(type)
                           ->default_str(std::to_string(*target));
    opt->check(CLI::Validator(
        [](std::string& v) -> std::string {
          uint64_t n = 0;
          return ParseU64(v, &n) ? "" : "needs an unsigned 64-bit integer, not " + Arg(v);
        },
        "", ""));
    return opt;
  }
  CLI::Option* Flag(CLI::App* c, const std::string& names, bool* target, const std::string& help) {
    return c->add_flag(names, *target, help)->default_str("off");
  }

  // The options several commands share.
  void Format(CLI::App* c, std::vector<std::string> values) {
    Choice(c, "-f,--format", &o_.format, "FORMAT", "report format: " + JoinOr(values), values,
           "format");
  }
  void FileList(CLI::App* c) {
    Value(c, "--files-from", &o_.files_from, "FILE",
          "also judge the paths listed in FILE (- for standard input): one per line, or JSON "
          "lines with a \"path\" field (docs/registry-backfill.md)",
          "none");
    Value(c, "--shard", &o_.shard, "I/N",
          "judge only the operands whose SHA-256 of the path, modulo N, is I (0 <= I < N): "
          "N runs with I = 0..N-1 judge every operand once",
          "all");
  }
  void Output(CLI::App* c) {
    File(c, "-o,--output", &o_.out_path, "FILE",
         "write the report to FILE (replaced atomically) instead of stdout", "stdout");
  }
  // KeySecrets: where an encrypted key's passphrase or a token's PIN and
  // module come from (sign, convert).
  void KeySecrets(CLI::App* c) {
    File(c, "--passphrase-file", &o_.passphrase_file, "FILE",
         "the passphrase of an encrypted --key file, read from FILE (mode 0600, not a symlink; "
         "one final newline is dropped) instead of MODELGATE_KEY_PASSPHRASE",
         "none");
    File(c, "--pin-file", &o_.pin_file, "FILE",
         "the user PIN of the token a pkcs11: --key names, read from FILE (mode 0600, not a "
         "symlink; one final newline is dropped) instead of MODELGATE_PKCS11_PIN",
         "none");
    File(c, "--pkcs11-module", &o_.pkcs11_module, "PATH",
         "the PKCS#11 module (shared object) holding a pkcs11: --key, loaded through p11-kit "
         "(or module-path= in the URI)",
         "p11-kit's configured modules");
  }
  void Quiet(CLI::App* c, const std::string& help) { Flag(c, "-q,--quiet", &o_.quiet, help); }
  void FailOn(CLI::App* c) {
    CLI::Option* opt =
        c->add_option_function<std::string>(
             "--fail-on",
             // The Builder is gone when this runs: capture the options.
             [o = &o_](const std::string& v) {
               o->fail_on_given = true;
               // OneOf (below) accepted `v` before this runs.
               (void)core::ParseSeverity(v, &o->fail_on);
             },
             "reject a file with a finding at or above SEVERITY: " + JoinOr(kSeverities))
            ->type_name("SEVERITY")
            ->default_str(std::string(core::SeverityName(o_.fail_on)))
            ->check(OneOf(kSeverities, "severity"));
    d_.choices[opt] = kSeverities;
  }
  void Yara(CLI::App* c) {
    Files(c, "--yara-rules", &o_.yara_dirs, "DIR",
          "also run the YARA rules (*.yar, *.yara) in DIR; repeatable", "the shipped rules only");
    Choice(c, "--yara-scope", &o_.yara_scope, "SCOPE",
           "what YARA rules read: header (headers, metadata, pickles, members that are not "
           "tensors) or all (tensor data too; about 100 MB/s)",
           {"header", "all"}, "YARA scope");
    Flag(c, "--no-yara", &o_.no_yara, "run no YARA rule, not even the shipped ones");
  }
  void ExtraReports(CLI::App* c) {
    File(c, "--json-output", &o_.json_output, "FILE",
         "also write the JSON report to FILE, from the same pass", "none");
    File(c, "--sarif-output", &o_.sarif_output, "FILE",
         "also write the SARIF report to FILE, from the same pass", "none");
  }
  void Color(CLI::App* c) {
    Choice(c, "--color", &o_.color, "WHEN",
           "colour the text report: always, never, or auto (only when stdout is a terminal, "
           "there is no -o, and NO_COLOR is unset or empty)",
           {"auto", "always", "never"}, "colour mode");
  }
  void SarifLevel(CLI::App* c) {
    Choice(c, "--sarif-level", &o_.sarif_level, "LEVEL",
           "lowest SARIF level reported as a result: error (critical, high), warning "
           "(medium) or note (low, info)",
           {"error", "warning", "note"}, "SARIF level");
  }
  void Operands(CLI::App* c, const std::string& name, const std::string& help) {
    c->add_option(name, o_.paths, help)->type_name("");
  }

 private:
  AppDefinition& d_;
  CommonOptions& o_;
};

const char* const kExitStatus =
    "Exit status: 0 every file passed; 1 a file was rejected; 2 a usage error, or a file "
    "could not be judged.";

// The serve command's body, registered by the program (main.cc) so that
// only it links the HTTP server; library users of this code do not.
int (*g_serve)(const CommonOptions&) = nullptr;

}  // namespace

bool TakesValue(const CLI::Option& opt) { return opt.get_expected_max() > 0; }

std::string OptionNames(const CLI::Option& opt) {
  std::string out;
  for (const auto& s : opt.get_snames()) out += (out.empty() ? "-" : ", -") + s;
  for (const auto& l : opt.get_lnames()) out += (out.empty() ? "--" : ", --") + l;
  return out.empty() ? opt.get_name() : out;
}

std::string OptionHelp(const CLI::Option& opt) {
  std::string out = opt.get_description();
  const std::string& def = opt.get_default_str();
  if (def == kRequiredDefault) {
    out += " [required]";
  } else if (!def.empty()) {
    out += " [default: " + def + "]";
  }
  return out;
}

void SetServeCommand(int (*run)(const CommonOptions&)) { g_serve = run; }

AppDefinition BuildApp(CommonOptions* opts) {
  AppDefinition d;
  d.commands = std::make_shared<Commands_>();
  d.app = std::make_unique<CLI::App>(
      "modelgate judges machine-learning model files before anything loads them: a strict "
      "safetensors parser, a static scanner for pickle, zip, tar and numpy files that never "
      "executes them, Ed25519 signatures embedded in safetensors, and policies.",
      "modelgate");
  CLI::App* root = d.app.get();
  (*d.commands)[root] =
      CommandInfo{"", "modelgate [--version] [--help] COMMAND [OPTIONS] [OPERANDS]", false, {}};
  root->formatter(std::make_shared<HelpFormatter>(d.commands));
  root->set_help_flag("-h,--help", "print this help and exit");
  root->require_subcommand(0, 1);
  root->allow_extras();
  root->add_flag("--version", opts->print_version,
                 "print the version of modelgate and of the libraries it links, and exit")
      ->default_str("off");
  root->footer(std::string("Run 'modelgate COMMAND --help' or 'modelgate help COMMAND' for a "
                           "command's options. ") +
               kExitStatus);

  Builder b(&d, opts);
  CLI::App* scan = b.Command(root, "scan",
                             "Judge files and directories by their content (format, pickle "
                             "imports, archive layout, YARA rules): one verdict per file.",
                             "[OPTIONS] PATH...", true, RunScan);
  b.Operands(scan, "PATH",
             "files or directories (walked recursively, links never followed out); - reads "
             "standard input, reported as -");
  b.Format(scan, {"text", "json", "jsonl", "sarif"});
  b.Output(scan);
  b.Quiet(scan, "no progress line and no summary on stderr");
  b.FileList(scan);
  b.FailOn(scan);
  b.Yara(scan);
  b.File(scan, "--policy", &opts->policy, "FILE",
         "judge under the policy in FILE, as check does (the policy sets the bar and the YARA "
         "rules)",
         "none");
  b.ExtraReports(scan);
  b.Color(scan);
  b.SarifLevel(scan);
  scan->footer(kExitStatus);

  CLI::App* inspect = b.Command(root, "inspect",
                                "Describe one file: format, verdict, findings, the globals its "
                                "pickles import, and for safetensors its header, dtypes, "
                                "metadata and tensors.",
                                "[OPTIONS] FILE", true, RunInspect);
  b.Operands(inspect, "FILE", "the file to describe; - reads standard input, reported as -");
  b.Format(inspect, {"text", "json"});
  b.Output(inspect);
  b.Quiet(inspect, "accepted for symmetry with scan (inspect draws no progress line)");
  b.FailOn(inspect);
  b.Yara(inspect);
  b.Color(inspect);
  inspect->footer(kExitStatus);

  CLI::App* keygen = b.Command(root, "keygen",
                               "Make a key pair for sign: PREFIX.key (private, PKCS#8, mode "
                               "0600) and PREFIX.pub.",
                               "--out PREFIX [--alg ALG] [--encrypt]", false, RunKeygen);
  b.File(keygen, "--out", &opts->out_prefix, "PREFIX",
         "write PREFIX.key and PREFIX.pub; neither may exist", std::string(kRequiredDefault));
  b.Choice(keygen, "--alg", &opts->key_alg, "ALG",
           "key algorithm: ed25519 signs embedded and detached signatures; the ECDSA curves "
           "sign detached bundles only (model_signing verifies only these)",
           {"ed25519", "ecdsa-p256", "ecdsa-p384", "ecdsa-p521"}, "algorithm");
  b.Flag(keygen, "--encrypt", &opts->encrypt,
         "write PREFIX.key as an encrypted PKCS#8 key (scrypt, AES-256-CBC) under the passphrase "
         "from --passphrase-file or MODELGATE_KEY_PASSPHRASE");
  b.File(keygen, "--passphrase-file", &opts->passphrase_file, "FILE",
         "with --encrypt: read the passphrase from FILE (mode 0600, not a symlink; one final "
         "newline is dropped) instead of MODELGATE_KEY_PASSPHRASE",
         "none");
  b.Quiet(keygen, "accepted for symmetry (keygen prints its result on stdout)");
  keygen->footer(
      "Exit status: 0 the keys were written; 2 they could not be.\n"
      "Environment: MODELGATE_KEY_PASSPHRASE, the passphrase for --encrypt "
      "(--passphrase-file wins over it).");

  CLI::App* sign = b.Command(root, "sign",
                             "Embed an Ed25519 signature (STSIG v1) in a safetensors file's "
                             "header (a directory or index: every shard, bound into one set); "
                             "or, with --detached, sign a whole model directory into one "
                             "OpenSSF Model Signing bundle.",
                             "--key FILE|URI [OPTIONS] PATH", false, RunSign);
  b.Operands(sign, "PATH",
             "the safetensors file to sign; a directory or *.safetensors.index.json to sign "
             "its shard set; with --detached, the model directory or file");
  b.File(sign, "--key", &opts->key, "FILE|URI",
         "the private key: a PEM file (PREFIX.key from keygen; encrypted keys need a "
         "passphrase), or a key on a PKCS#11 token as an RFC 7512 URI "
         "'pkcs11:token=T;object=O' (a PIN is never part of it)",
         std::string(kRequiredDefault));
  b.KeySecrets(sign);
  b.File(sign, "-o,--output", &opts->out_path, "FILE",
         "write the signed copy to FILE instead of replacing PATH", "PATH, in place");
  b.Value(sign, "--model", &opts->model, "NAME", "model name recorded in the signature", "none");
  CLI::Option* version =
      sign->add_option_function<std::string>(
              "--version",
              [opts](const std::string& v) {
                uint64_t n = 0;
                if (ParseU64(v, &n)) opts->version = n;
              },
              "model version recorded in the signature (unsigned 64-bit integer)")
          ->type_name("N")
          ->default_str("0");
  version->check(CLI::Validator(
      [](std::string& v) -> std::string {
        uint64_t n = 0;
        return ParseU64(v, &n) ? "" : "needs an unsigned 64-bit integer, not " + Arg(v);
      },
      "", ""));
  b.Flag(sign, "--detached", &opts->detached,
         "write a detached OpenSSF Model Signing bundle over every file of PATH (a directory "
         "or one file) instead of embedding; -o sets the bundle (default DIR/model.sig, or "
         "FILE.sig)");
  b.Files(sign, "--ignore", &opts->ignore, "PATH",
          "with --detached: leave PATH (relative to the model directory) out of the bundle; "
          "repeatable",
          "none");
  b.Quiet(sign, "no progress line, and no 'signed' line on stdout");
  sign->footer(
      "Exit status: 0 signed; 1 the file breaks a safetensors rule; 2 a usage error, "
      "not a safetensors file, or the file or key could not be read or written (a wrong "
      "passphrase or PIN included).\n"
      "Environment: MODELGATE_KEY_PASSPHRASE, the passphrase of an encrypted --key file; "
      "MODELGATE_PKCS11_PIN, the PIN of a pkcs11: --key's token (--passphrase-file and "
      "--pin-file win over them). No option takes a passphrase or PIN itself.");

  CLI::App* convert = b.Command(root, "convert",
                                "Convert a PyTorch checkpoint (torch.save zip, legacy or tar: "
                                "pytorch_model.bin, .pt, .pth) to safetensors without unpickling it: the file is "
                                "scanned, then only the allowlisted tensor rebuilding calls are "
                                "followed; anything else refuses it and nothing is written. "
                                "numpy .npy and .npz files and joblib files of numpy arrays "
                                "(compressed or not) convert the same way.",
                                "-o OUT.safetensors [OPTIONS] IN", false, RunConvert);
  b.Operands(convert, "IN", "the checkpoint to convert");
  b.File(convert, "-o,--output", &opts->out_path, "FILE",
         "write the safetensors file to FILE (replaced atomically, only on success)",
         std::string(kRequiredDefault));
  b.File(convert, "--key", &opts->key, "FILE|URI",
         "sign the output (STSIG v1) in the same write with this Ed25519 key: a PEM file "
         "(encrypted keys need a passphrase) or a pkcs11: URI",
         "unsigned");
  b.KeySecrets(convert);
  b.Value(convert, "--model", &opts->model, "NAME", "with --key: model name recorded in the signature",
          "none");
  CLI::Option* cversion =
      convert->add_option_function<std::string>(
              "--version",
              [opts](const std::string& v) {
                uint64_t n = 0;
                if (ParseU64(v, &n)) opts->version = n;
              },
              "with --key: model version recorded in the signature (unsigned 64-bit integer)")
          ->type_name("N")
          ->default_str("0");
  cversion->check(CLI::Validator(
      [](std::string& v) -> std::string {
        uint64_t n = 0;
        return ParseU64(v, &n) ? "" : "needs an unsigned 64-bit integer, not " + Arg(v);
      },
      "", ""));
  b.Flag(convert, "--drop-non-tensors", &opts->drop_non_tensors,
         "drop (and list) leaves that are neither tensors nor strings instead of refusing the file");
  b.FailOn(convert);
  b.Yara(convert);
  b.Format(convert, {"text", "json"});
  b.Quiet(convert, "no summary on stdout (-f json still prints its report)");
  convert->footer(
      "Exit status: 0 converted; 1 refused (a scan finding at or above --fail-on, or an "
      "MG-CONV-* finding: nothing was written); 2 a usage error, or the input or key could not "
      "be read or the output not written.");

  CLI::App* verify = b.Command(root, "verify",
                               "Check the signatures embedded in safetensors files (and "
                               "their shard sets) against trusted public keys; with --sig, a "
                               "whole model against its detached bundle.",
                               "--pubkey FILE [OPTIONS] PATH...", false, RunVerify);
  b.Operands(verify, "PATH", "files or directories to verify");
  b.File(verify, "--sig", &opts->sig_path, "FILE",
         "verify the one PATH (a model directory or file) against the detached bundle FILE "
         "(OpenSSF Model Signing, from sign --detached or model_signing) instead of embedded "
         "signatures",
         "none");
  b.Flag(verify, "--allow-unsigned-files", &opts->allow_unsigned_files,
         "with --sig: files the bundle does not list pass (model_signing's "
         "--ignore-unsigned-files); a listed file that is missing or changed still fails");
  b.Files(verify, "--pubkey", &opts->pubkeys, "FILE",
          "trust the public key in FILE (PREFIX.pub from keygen); repeatable",
          std::string(kRequiredDefault));
  b.Format(verify, {"text", "json", "sarif"});
  b.Output(verify);
  b.Quiet(verify, "no progress line and no summary on stderr");
  b.ExtraReports(verify);
  b.Color(verify);
  b.SarifLevel(verify);
  verify->footer(kExitStatus);

  CLI::App* check = b.Command(root, "check",
                              "Scan and verify files under an operator's policy: the gate for "
                              "CI and deployment. The policy comes only from the command line.",
                              "--policy FILE [OPTIONS] PATH...", false, RunCheck);
  b.Operands(check, "PATH", "files or directories to judge");
  b.File(check, "--policy", &opts->policy, "FILE",
         "the policy (modelgate/v1 YAML; see docs/policy.md)", std::string(kRequiredDefault));
  b.File(check, "--sig", &opts->sig_path, "FILE",
         "the detached bundle covering the one PATH (default: PATH/model.sig when PATH is a "
         "directory holding one)",
         "none");
  b.Format(check, {"text", "json", "jsonl", "sarif"});
  b.Output(check);
  b.Quiet(check, "no progress line and no summary on stderr");
  b.FileList(check);
  b.ExtraReports(check);
  b.Color(check);
  b.SarifLevel(check);
  check->footer(kExitStatus);

  CLI::App* serve = b.Command(
      root, "serve",
      "Serve the gate over HTTP: POST /v1/scan (one file) and /v1/check (a tar of a model "
      "directory) answer the JSON report under the server's policy.",
      "--policy FILE [OPTIONS]", false, [](const CommonOptions& o) {
        return g_serve != nullptr ? g_serve(o)
                                  : Usage("serve", "this build of modelgate has no server");
      });
  b.File(serve, "--policy", &opts->policy, "FILE",
         "the server's policy (modelgate/v1 YAML); clients never send one",
         std::string(kRequiredDefault));
  b.Value(serve, "--listen", &opts->serve.listen, "ADDR:PORT",
          "address and port to listen on ([ADDR]:PORT for IPv6; port 0 picks a free one, logged)",
          opts->serve.listen);
  b.File(serve, "--token-file", &opts->serve.token_file, "FILE",
         "require Authorization: Bearer <the token in FILE>; without it only loopback clients "
         "are served",
         "none");
  b.U64(serve, "--max-body-bytes", &opts->serve.max_body_bytes, "N",
        "largest upload accepted (413 past it, before reading it)");
  b.U64(serve, "--workers", &opts->serve.workers, "N", "requests judged at once (1 to 32)");
  b.U64(serve, "--queue", &opts->serve.queue, "N",
        "connections waiting for a worker; more are answered 503 at once");
  b.Value(serve, "--spool", &opts->serve.spool, "DIR",
          "directory for uploads while they are judged (0700; emptied at start)",
          "$TMPDIR/modelgate-serve-UID");
  b.U64(serve, "--header-timeout", &opts->serve.header_timeout, "SEC",
        "time for a request's line and headers (408 past it)");
  b.U64(serve, "--body-timeout", &opts->serve.body_timeout, "SEC",
        "time for a request's body (408 past it)");
  b.File(serve, "--tls-cert", &opts->serve.tls_cert, "FILE",
         "serve HTTPS with this PEM certificate chain (with --tls-key)", "none");
  b.File(serve, "--tls-key", &opts->serve.tls_key, "FILE", "the certificate's PEM private key",
         "none");
  serve->footer(
      "Runs until SIGTERM or SIGINT, then finishes the requests in flight and exits 0. Exit "
      "status 2: it could not start (options, policy, spool, address).");

  CLI::App* policy = b.Command(root, "policy", "Work with policy files.", "COMMAND", false, {});
  policy->require_subcommand(0, 1);
  policy->footer("Run 'modelgate policy lint --help' for its options.");
  CLI::App* lint =
      b.Command(policy, "lint", "Check a policy file; its errors, warnings and 'ok' go to stderr.",
                "FILE", false, RunPolicyLint);
  b.Operands(lint, "FILE", "the policy file");
  lint->footer("Exit status: 0 the policy is valid (warnings allowed); 2 it has errors.");

  CLI::App* help = b.Command(root, "help", "Show the help of the program or of a command.",
                             "[COMMAND...]", false, {});
  b.Operands(help, "COMMAND", "the command to describe, e.g. scan or policy lint");
  help->footer("Help goes to stdout; exit status 0 (2 for an unknown command).");
  return d;
}

std::vector<const CLI::App*> Commands(const AppDefinition& def) {
  std::vector<const CLI::App*> out;
  std::function<void(const CLI::App*)> walk = [&](const CLI::App* app) {
    for (const CLI::App* sub : app->get_subcommands({})) {
      if (def.commands->count(sub) == 0) continue;
      out.push_back(sub);
      walk(sub);
    }
  };
  walk(def.app.get());
  return out;
}

namespace {

// Distance is the optimal-string-alignment edit distance (an adjacent
// transposition counts one).
size_t Distance(std::string_view a, std::string_view b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
      }
    }
  }
  return d[a.size()][b.size()];
}

std::string_view Undashed(std::string_view s) {
  while (!s.empty() && s.front() == '-') s.remove_prefix(1);
  return s;
}

// Leaf is the deepest command the parse selected (the program itself when
// none).
const CLI::App* Leaf(const CLI::App& app) {
  const CLI::App* at = &app;
  for (;;) {
    const auto& subs = at->get_subcommands();
    if (subs.empty()) return at;
    at = subs.front();
  }
}

std::vector<std::string> OptionSpellings(const CLI::App& app) {
  std::vector<std::string> out;
  for (const CLI::Option* opt : app.get_options()) {
    if (opt->get_positional()) continue;
    for (const auto& s : opt->get_snames()) out.push_back("-" + s);
    for (const auto& l : opt->get_lnames()) out.push_back("--" + l);
  }
  return out;
}

std::vector<std::string> CommandNames(const CLI::App& app) {
  std::vector<std::string> out;
  for (const CLI::App* sub : app.get_subcommands({})) out.push_back(sub->get_name());
  return out;
}

std::string UnknownOption(const std::string& word, const CLI::App& cmd, const AppDefinition& d) {
  const std::string name = word.substr(0, word.find('='));
  std::string msg = "unknown option " + Arg(word);
  if (std::string close = ClosestName(name, OptionSpellings(cmd)); !close.empty()) {
    return msg + " (did you mean " + close + "?)";
  }
  std::vector<std::string> owners;
  for (const CLI::App* c : Commands(d)) {
    const auto names = OptionSpellings(*c);
    if (std::find(names.begin(), names.end(), name) != names.end()) {
      owners.push_back(d.Info(c).path);
    }
  }
  const auto own = OptionSpellings(*d.app);
  if (&cmd != d.app.get() && std::find(own.begin(), own.end(), name) != own.end()) {
    owners.push_back("modelgate itself, before the command");
  }
  if (!owners.empty()) {
    msg += " (" + core::EscapeControls(name) + " is an option of " + JoinOr(owners) + ")";
  }
  return msg;
}

std::string UnknownCommand(const std::string& word, const CLI::App& group, const AppDefinition& d) {
  const std::string& at = d.Info(&group).path;
  std::string msg = "unknown command " + Arg(at.empty() ? word : at + " " + word);
  if (CommandNames(group).empty()) {
    msg += " (" + at + " has no commands)";
  } else if (std::string close = ClosestName(word, CommandNames(group)); !close.empty()) {
    msg += " (did you mean " + close + "?)";
  } else {
    msg += " (" + JoinOr(CommandNames(group)) + ")";
  }
  return msg;
}

// Reworded is a CLI11 parse error as one message of ours.
std::string Reworded(const CLI::ParseError& e) {
  std::string m = e.what();
  // CLI11: "--output: 1 required FILE missing".
  const size_t colon = m.find(": 1 required ");
  const std::string tail = " missing";
  if (colon != std::string::npos && m.size() > tail.size() &&
      m.compare(m.size() - tail.size(), tail.size(), tail) == 0) {
    const size_t type_at = colon + std::string(": 1 required ").size();
    return "option " + m.substr(0, colon) + " needs a value (" +
           m.substr(type_at, m.size() - tail.size() - type_at) + ")";
  }
  // CLI11: "--policy: At Most 1 required but received 2" (a single-valued
  // option given twice: refused, never "the last one wins").
  const size_t at_most = m.find(": At Most 1 required but received ");
  if (at_most != std::string::npos) {
    return "option " + core::EscapeControls(m.substr(0, at_most)) + " given more than once";
  }
  // CLI11: "Could not convert: --no-yara = maybe" (a flag given a value).
  const std::string kConvert = "Could not convert: ";
  const size_t eq = m.find(" = ");
  if (m.compare(0, kConvert.size(), kConvert) == 0 && eq != std::string::npos) {
    return "option " + core::EscapeControls(m.substr(kConvert.size(), eq - kConvert.size())) +
           " does not take the value " + Arg(m.substr(eq + 3));
  }
  return core::EscapeControls(m);
}

int Help(const AppDefinition& d, const std::vector<std::string>& topic, std::ostream& out,
         std::ostream& err) {
  const CLI::App* at = d.app.get();
  for (const std::string& word : topic) {
    const CLI::App* next = nullptr;
    for (const CLI::App* sub : at->get_subcommands({})) {
      if (sub->get_name() == word) next = sub;
    }
    if (next == nullptr) return UsageError(err, "help", UnknownCommand(word, *at, d));
    at = next;
  }
  // Not at->help(): that would describe the command selected, `help`.
  out << at->get_formatter()->make_help(at, at->get_name(), CLI::AppFormatMode::Normal);
  return kExitPass;
}

}  // namespace

std::string ClosestName(std::string_view typed, const std::vector<std::string>& names) {
  std::string best;
  size_t best_distance = SIZE_MAX;
  for (const auto& name : names) {
    const size_t letters = Undashed(name).size();
    const size_t d = Distance(typed, name);
    // Close: at most 2 edits and at most a third of the name's letters, or
    // the start of the name (--out for --output).
    const bool close = (d <= 2 && 3 * d <= letters) ||
                       (Undashed(typed).size() >= 2 && name.size() > typed.size() &&
                        name.compare(0, typed.size(), typed) == 0);
    if (close && d < best_distance) {
      best = name;
      best_distance = d;
    }
  }
  return best;
}

std::string VersionText() {
  return "modelgate " + std::string(core::kVersion) + "\n" + "  " + signer::OpensslVersion() +
         "\n" + "  libsodium " + signer::SodiumVersion() + "\n" + "  YARA " +
         scanner::YaraVersion() + "\n";
}

int UsageError(std::ostream& err, const std::string& command, const std::string& message) {
  err << "modelgate: " << (command.empty() ? "" : command + ": ") << message << "; run 'modelgate "
      << (command.empty() ? "" : command + " ") << "--help' for usage\n";
  return kExitCannotJudge;
}

int Usage(const std::string& command, const std::string& message) {
  return UsageError(std::cerr, command, message);
}

int RunCli(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  CommonOptions opts;
  AppDefinition d = BuildApp(&opts);
  CLI::App& app = *d.app;
  // "--" ends the options. CLI11 2.1 refuses an option-like word after "--"
  // once an operand came before it, so the words after it are operands
  // here, never parsed.
  const auto dashes = std::find(args.begin(), args.end(), "--");
  std::vector<std::string> words(args.begin(), dashes);
  const std::vector<std::string> after(dashes == args.end() ? args.end() : dashes + 1, args.end());
  std::reverse(words.begin(), words.end());  // CLI11 takes them last first
  try {
    app.parse(words);
  } catch (const CLI::CallForHelp&) {
    out << app.help();
    return kExitPass;
  } catch (const CLI::ParseError& e) {
    return UsageError(err, d.Info(Leaf(app)).path, Reworded(e));
  }
  const CLI::App* leaf = Leaf(app);
  const CommandInfo& info = d.Info(leaf);
  const bool has_operands =
      !leaf->get_options([](const CLI::Option* o) { return o->get_positional(); }).empty();
  const bool is_group = !leaf->get_subcommands({}).empty();
  // Words no definition took: an unknown option (with a hint), an unknown
  // command, or an operand the command does not take.
  for (const CLI::App* a = leaf; a != nullptr; a = a->get_parent()) {
    const std::string& at = d.Info(a).path;
    for (const std::string& w : a->remaining()) {
      if (w.size() > 1 && w[0] == '-') {
        std::string msg = UnknownOption(w, *a, d);
        if (a != leaf) msg += "; options go after the command";
        return UsageError(err, at, msg);
      }
      if (is_group && a == leaf) return UsageError(err, at, UnknownCommand(w, *leaf, d));
      return UsageError(err, at, "unexpected operand " + Arg(w));
    }
  }
  if (opts.print_version) {
    out << VersionText();
    return kExitPass;
  }
  if (leaf == &app) return UsageError(err, "", "no command given");
  if (is_group) {
    return UsageError(err, info.path,
                      info.path + " needs a command: " + JoinOr(CommandNames(*leaf)));
  }
  if (!after.empty()) {
    if (!has_operands) {
      return UsageError(err, info.path, "unexpected operand " + Arg(after.front()));
    }
    opts.paths.insert(opts.paths.end(), after.begin(), after.end());
  }
  if (info.path == "help") return Help(d, opts.paths, out, err);
  const auto stdin_count = std::count(opts.paths.begin(), opts.paths.end(), kStdinPath);
  if (stdin_count > 0 && !info.reads_stdin) {
    return UsageError(err, info.path,
                      "'-' (standard input) is not accepted by " + info.path +
                          "; name a file (only scan and inspect read standard input)");
  }
  if (stdin_count > 1) {
    return UsageError(err, info.path, "'-' (standard input) can be given only once");
  }
  return info.run(opts);
}

}  // namespace modelgate::cli
