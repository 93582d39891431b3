// The command line (issue 10, point 1): every command's --help is checked
// against the option definitions BuildApp holds, not against pasted text;
// parsing, hints, colour, the stdin spool and the generated man page and
// completions.
#include "app.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "cli.h"
#include "docgen.h"
#include "modelgate/scanner.h"
#include "modelgate/signer.h"
#include "stdin_spool.h"

namespace mc = modelgate::cli;
namespace core = modelgate::core;

namespace {

// Squeezed collapses every run of blanks and line breaks into one space:
// --help wraps its text, the words stay in order.
std::string Squeezed(const std::string& s) {
  std::string out;
  for (char c : s) {
    const bool blank = c == ' ' || c == '\n';
    if (blank && (out.empty() || out.back() == ' ')) continue;
    out += blank ? ' ' : c;
  }
  return out;
}

std::vector<std::string> Words(const std::string& path) {
  std::vector<std::string> out;
  std::istringstream in(path);
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

struct Run {
  int code;
  std::string out, err;
};

Run Cli(std::vector<std::string> args) {
  std::ostringstream out, err;
  const int code = mc::RunCli(args, out, err);
  return {code, out.str(), err.str()};
}

std::vector<std::string> Spellings(const CLI::Option& opt) {
  std::vector<std::string> out;
  for (const auto& s : opt.get_snames()) out.push_back("-" + s);
  for (const auto& l : opt.get_lnames()) out.push_back("--" + l);
  return out;
}

}  // namespace

TEST_CASE("every command's --help lists each of its options with its help text and default",
          "[cli][help]") {
  mc::CommonOptions opts;
  const mc::AppDefinition def = mc::BuildApp(&opts);
  std::vector<const CLI::App*> commands = mc::Commands(def);
  commands.insert(commands.begin(), def.app.get());
  REQUIRE(commands.size() == 12);  // the program, 9 commands, policy, policy lint, help
  for (const CLI::App* c : commands) {
    const std::string& path = def.Info(c).path;
    CAPTURE(path);
    std::vector<std::string> args = Words(path);
    args.push_back("--help");
    const Run r = Cli(args);
    CHECK(r.code == 0);
    CHECK(r.err.empty());
    const std::string help = Squeezed(r.out);
    CHECK(help.find("usage: " + def.Info(c).synopsis) == 0);
    for (const CLI::Option* opt : c->get_options()) {
      CAPTURE(opt->get_name());
      REQUIRE_FALSE(opt->get_description().empty());
      if (opt->get_positional()) {
        CHECK(help.find(opt->get_name() + " " + Squeezed(opt->get_description())) !=
              std::string::npos);
        continue;
      }
      // The names, the value's name and the help, in that order...
      std::string names;
      for (const auto& s : Spellings(*opt)) names += (names.empty() ? "" : ", ") + s;
      if (mc::TakesValue(*opt)) names += " " + opt->get_type_name();
      CHECK(help.find(names + " " + Squeezed(opt->get_description())) != std::string::npos);
      // ... and the default (every option but --help has one).
      if (opt == c->get_help_ptr()) continue;
      const std::string& dflt = opt->get_default_str();
      REQUIRE_FALSE(dflt.empty());
      const std::string shown =
          dflt == mc::kRequiredDefault ? "[required]" : "[default: " + dflt + "]";
      CHECK(help.find(Squeezed(opt->get_description()) + " " + shown) != std::string::npos);
    }
    for (const CLI::App* sub : c->get_subcommands({})) {
      CHECK(help.find(sub->get_name() + " " + Squeezed(sub->get_description())) !=
            std::string::npos);
    }
    // `modelgate help COMMAND` is the same text.
    std::vector<std::string> via_help = Words(path);
    via_help.insert(via_help.begin(), "help");
    const Run h = Cli(via_help);
    CHECK(h.code == 0);
    CHECK(h.out == r.out);
  }
  const Run bare = Cli({"help"});
  CHECK(bare.code == 0);
  CHECK(bare.out == Cli({"--help"}).out);
  CHECK(Cli({"-h"}).out == bare.out);
}

TEST_CASE(
    "option values: --opt=value and --opt value parse alike, and short options take attached "
    "values",
    "[cli][parse]") {
  auto parse = [](std::vector<std::string> words) {
    mc::CommonOptions o;
    const mc::AppDefinition def = mc::BuildApp(&o);
    std::reverse(words.begin(), words.end());
    def.app->parse(words);
    return o;
  };
  const auto a = parse(
      {"scan", "--fail-on=low", "--format=json", "--yara-rules=r1", "--yara-rules", "r2", "x"});
  const auto b =
      parse({"scan", "--fail-on", "low", "-fjson", "--yara-rules", "r1", "--yara-rules=r2", "x"});
  for (const auto* o : {&a, &b}) {
    CHECK(o->fail_on == core::Severity::kLow);
    CHECK(o->fail_on_given);
    CHECK(o->format == "json");
    CHECK(o->yara_dirs == std::vector<std::string>{"r1", "r2"});
    CHECK(o->paths == std::vector<std::string>{"x"});
  }
  // A repeatable option takes one value per occurrence: the operand stays one.
  const auto v = parse({"verify", "--pubkey", "a.pub", "--pubkey=b.pub", "m.safetensors"});
  CHECK(v.pubkeys == std::vector<std::string>{"a.pub", "b.pub"});
  CHECK(v.paths == std::vector<std::string>{"m.safetensors"});
  const auto s = parse({"sign", "--key", "k", "--version=18446744073709551615", "-o", "out", "m"});
  CHECK(s.version == UINT64_MAX);
  CHECK(s.out_path == "out");
  CHECK(parse({"scan", "-", "x"}).paths == std::vector<std::string>{"-", "x"});
}

TEST_CASE("a usage error is one line naming the word, a hint and where the usage is, exit 2",
          "[cli][usage]") {
  struct Case {
    std::vector<std::string> args;
    std::string line;
  };
  const std::vector<Case> cases = {
      {{"scan", "--fail_on", "low", "x"},
       "modelgate: scan: unknown option '--fail_on' (did you mean --fail-on?); run 'modelgate scan "
       "--help' for usage\n"},
      {{"scna", "x"},
       "modelgate: unknown command 'scna' (did you mean scan?); run 'modelgate --help' for "
       "usage\n"},
      {{"scan", "--out", "r", "x"},
       "modelgate: scan: unknown option '--out' (did you mean --output?); run 'modelgate scan "
       "--help' for usage\n"},
      {{"inspect", "--pubkey", "k", "x"},
       "modelgate: inspect: unknown option '--pubkey' (--pubkey is an option of verify); run "
       "'modelgate inspect --help' for usage\n"},
      {{"scan", "-f", "xml", "x"},
       "modelgate: scan: --format: unknown format 'xml' (text, json, jsonl or sarif); run 'modelgate scan "
       "--help' for usage\n"},
      {{"inspect", "--format=sarif", "x"},
       "modelgate: inspect: --format: unknown format 'sarif' (text or json); run 'modelgate "
       "inspect --help' for usage\n"},
      {{"scan", "-o"},
       "modelgate: scan: option --output needs a value (FILE); run 'modelgate scan --help' for "
       "usage\n"},
      {{"scan", "--policy", "a.yaml", "--policy=b.yaml", "x"},
       "modelgate: scan: option --policy given more than once; run 'modelgate scan --help' for "
       "usage\n"},
      {{"scan", "--fail-on", "critical", "--fail-on", "info", "x"},
       "modelgate: scan: option --fail-on given more than once; run 'modelgate scan --help' for "
       "usage\n"},
      {{"policy", "lnit", "p.yaml"},
       "modelgate: policy: unknown command 'policy lnit' (did you mean lint?); run 'modelgate "
       "policy --help' for usage\n"},
      {{"keygen", "--out", "k", "extra"},
       "modelgate: keygen: unexpected operand 'extra'; run 'modelgate keygen --help' for usage\n"},
      {{"scan", "--no-yara=maybe", "x"},
       "modelgate: scan: option --no-yara does not take the value 'maybe'; run 'modelgate scan "
       "--help' for usage\n"},
      {{"scan", "--bogus\x1b[2J", "x"},
       "modelgate: scan: unknown option '--bogus\\x1b[2J'; run 'modelgate scan --help' for "
       "usage\n"},
      {{"scan", "x", "--version"},
       "modelgate: scan: unknown option '--version' (--version is an option of sign, convert or "
       "modelgate itself, before the command); run 'modelgate scan --help' for usage\n"},
      {{"help", "scan", "x"},
       "modelgate: help: unknown command 'scan x' (scan has no commands); run 'modelgate help "
       "--help' for usage\n"},
      {{}, "modelgate: no command given; run 'modelgate --help' for usage\n"},
      {{"policy"},
       "modelgate: policy: policy needs a command: lint; run 'modelgate policy --help' for "
       "usage\n"},
      {{"help", "frob"},
       "modelgate: help: unknown command 'frob' (scan, inspect, keygen, sign, convert, verify, "
       "check, serve, policy or help); run 'modelgate help --help' for usage\n"},
  };
  for (const auto& c : cases) {
    CAPTURE(c.args);
    const Run r = Cli(c.args);
    CHECK(r.code == 2);
    CHECK(r.out.empty());
    CHECK(r.err == c.line);
  }
}

TEST_CASE("'-' is standard input for scan and inspect only, once, and '--' ends the options",
          "[cli][usage][stdin]") {
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"verify", "--pubkey", "k.pub", "-"},
        {"check", "--policy", "p", "-"},
        {"sign", "--key", "k", "-"},
        {"policy", "lint", "-"}}) {
    CAPTURE(args);
    const Run r = Cli(args);
    CHECK(r.code == 2);
    CHECK(r.err.find("'-' (standard input) is not accepted by ") != std::string::npos);
  }
  for (const std::vector<std::string>& args : {std::vector<std::string>{"keygen", "--out", "-"},
                                               {"verify", "--pubkey", "-", "m"},
                                               {"check", "--policy", "-", "m"},
                                               {"scan", "-o", "-", "m"},
                                               {"sign", "--key=-", "m"}}) {
    CAPTURE(args);
    const Run r = Cli(args);
    CHECK(r.code == 2);
    CHECK(r.err.find(": '-' (standard input) is not accepted here; name a file;") !=
          std::string::npos);
  }
  CHECK(Cli({"scan", "-", "-"}).err ==
        "modelgate: scan: '-' (standard input) can be given only once; run 'modelgate scan --help' "
        "for usage\n");
  // After "--" even --help is an operand (here one keygen does not take).
  CHECK(
      Cli({"keygen", "--out", "k", "--", "--help"}).err ==
      "modelgate: keygen: unexpected operand '--help'; run 'modelgate keygen --help' for usage\n");
}

TEST_CASE("ClosestName suggests a near spelling or a completion, and nothing far", "[cli][usage]") {
  const std::vector<std::string> names = {"-f", "--format", "--fail-on",
                                          "-o", "--output", "--policy"};
  CHECK(mc::ClosestName("--fail_on", names) == "--fail-on");
  CHECK(mc::ClosestName("--fial-on", names) == "--fail-on");  // a transposition is one edit
  CHECK(mc::ClosestName("--formt", names) == "--format");
  CHECK(mc::ClosestName("--out", names) == "--output");
  CHECK(mc::ClosestName("--polcy", names) == "--policy");
  CHECK(mc::ClosestName("-x", names).empty());  // one letter off a one-letter name: a guess
  CHECK(mc::ClosestName("--bogus", names).empty());
  CHECK(mc::ClosestName("", names).empty());
}

TEST_CASE(
    "colour: --color always or never wins, auto needs a terminal, no -o, NO_COLOR unset or empty",
    "[cli][color]") {
  mc::CommonOptions o;
  CHECK(mc::UseColor(o, true, nullptr));
  CHECK(mc::UseColor(o, true, ""));  // set but empty: no-color.org says colour
  CHECK_FALSE(mc::UseColor(o, true, "1"));
  CHECK_FALSE(mc::UseColor(o, false, nullptr));
  o.out_path = "r.txt";
  CHECK_FALSE(mc::UseColor(o, true, nullptr));
  o.color = "always";
  CHECK(mc::UseColor(o, false, "1"));
  o.color = "never";
  o.out_path.clear();
  CHECK_FALSE(mc::UseColor(o, true, nullptr));
}

namespace {

// Spooled feeds `bytes` through a pipe into SpoolToTempFile.
core::Result<core::OpenedFile> Spooled(const std::string& bytes, uint64_t limit) {
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  std::thread writer([&] {
    size_t at = 0;
    while (at < bytes.size()) {
      const ssize_t n = ::write(fds[1], bytes.data() + at, bytes.size() - at);
      if (n <= 0) break;
      at += static_cast<size_t>(n);
    }
    ::close(fds[1]);
  });
  auto r = mc::SpoolToTempFile(fds[0], limit);
  writer.join();
  ::close(fds[0]);
  return r;
}

}  // namespace

TEST_CASE("standard input spools to a nameless file: limit N passes, N+1 is refused",
          "[cli][stdin][limits]") {
  const uint64_t limit = 100'000;  // past one 64 KiB read, so the check spans reads
  const std::string at(limit, 'a'), past(limit + 1, 'b');
  auto ok = Spooled(at, limit);
  REQUIRE(ok.ok());
  CHECK(ok.value().size == limit);
  struct stat st {};
  REQUIRE(::fstat(ok.value().fd, &st) == 0);
  CHECK(S_ISREG(st.st_mode));
  CHECK(st.st_nlink == 0);  // no name another process could open or swap
  std::string back(limit, '\0');
  REQUIRE(core::PreadExact(ok.value().fd, 0, {reinterpret_cast<uint8_t*>(back.data()), back.size()})
              .ok());
  CHECK(back == at);
  CHECK(core::CheckUnchanged(ok.value()).ok());
  auto refused = Spooled(past, limit);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.error().code == core::Code::kIoRead);
  CHECK(refused.error().message ==
        "standard input: more than 100000 bytes (kMaxStdinBytes); not judged");
  auto empty = Spooled("", limit);
  REQUIRE(empty.ok());
  CHECK(empty.value().size == 0);
  CHECK(mc::kMaxStdinBytes == 4ull << 30);
}

TEST_CASE("version: --version names the program and the OpenSSL, libsodium and YARA it runs on",
          "[cli][version]") {
  const Run r = Cli({"--version"});
  CHECK(r.code == 0);
  CHECK(r.out == "modelgate " + std::string(core::kVersion) + "\n  " +
                     modelgate::signer::OpensslVersion() + "\n  libsodium " +
                     modelgate::signer::SodiumVersion() + "\n  YARA " +
                     modelgate::scanner::YaraVersion() + "\n");
  CHECK(modelgate::signer::OpensslVersion().rfind("OpenSSL 3.", 0) == 0);
  CHECK(modelgate::scanner::YaraVersion().find('.') != std::string::npos);
}

TEST_CASE("the man page and both completions name every command and option of the definitions",
          "[cli][docgen]") {
  mc::CommonOptions opts;
  const mc::AppDefinition def = mc::BuildApp(&opts);
  const std::string man = mc::RenderManPage(def);
  const std::string bash = mc::RenderBashCompletion(def);
  const std::string zsh = mc::RenderZshCompletion(def);
  auto roff = [](std::string s) {
    std::string out;
    for (char c : s) out += c == '-' ? std::string("\\-") : std::string(1, c);
    return out;
  };
  // The bash script's words, split where a word of it can end.
  std::set<std::string> bash_words;
  {
    std::string w;
    for (char c : bash + " ") {
      if (c == ' ' || c == '"' || c == '|' || c == ')' || c == '\n' || c == '\'') {
        if (!w.empty()) bash_words.insert(w);
        w.clear();
      } else {
        w += c;
      }
    }
  }
  CHECK(man.find(".TH MODELGATE 1 ") != std::string::npos);
  CHECK(zsh.rfind("#compdef modelgate\n", 0) == 0);
  CHECK(bash.find("complete -o filenames -F _modelgate modelgate\n") != std::string::npos);
  std::vector<const CLI::App*> commands = mc::Commands(def);
  commands.insert(commands.begin(), def.app.get());
  for (const CLI::App* c : commands) {
    const std::string& path = def.Info(c).path;
    CAPTURE(path);
    if (!path.empty()) {
      CHECK(man.find(".SS \"" + roff(path) + "\"\n") != std::string::npos);
      CHECK(bash.find("'" + path + "')") != std::string::npos);
      CHECK(zsh.find(c->get_name() + ":") != std::string::npos);
    }
    for (const CLI::Option* opt : c->get_options()) {
      if (opt->get_positional()) continue;
      for (const auto& name : Spellings(*opt)) {
        CAPTURE(name);
        CHECK(man.find("\\fB" + roff(name) + "\\fR") != std::string::npos);
        CHECK(bash_words.count(name) == 1);
        CHECK(zsh.find(name + (!mc::TakesValue(*opt) ? "["
                               : name.size() == 2    ? "+["
                                                     : "=[")) != std::string::npos);
      }
      CHECK(man.find(roff(mc::OptionHelp(*opt))) != std::string::npos);
      if (def.choices.count(opt)) {
        std::string words;
        for (const auto& v : def.choices.at(opt)) words += (words.empty() ? "" : " ") + v;
        CHECK(bash.find("-W \"" + words + "\"") != std::string::npos);
        CHECK(zsh.find(":(" + words + ")'") != std::string::npos);
      }
    }
  }
}
