#!/usr/bin/env python3
"""Issue 10, points 1 and 2: the command line's manners, driven through the
real program, and the man page and completions the build generated.

usage: conventions_test.py PATH/TO/modelgate BUILD_DIR

BUILD_DIR/cli holds what modelgate-docgen wrote from the definitions:
cli-definitions.json (the definitions themselves), modelgate.1,
modelgate.bash and _modelgate. Every check of --help, the man page and the
completions iterates over cli-definitions.json, never over pasted text.
Standard library only; bash, zsh and groff are required (ci/install-deps.sh
installs them).
"""
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from mgtest import eq, main, run_text, st_bytes, test, write  # noqa: E402
from mgtest import run_on_tty as mgtest_run_on_tty  # noqa: E402

MG = os.path.abspath(sys.argv[1])
BUILD = os.path.abspath(sys.argv[2])
GEN = os.path.join(BUILD, "cli")
with open(os.path.join(GEN, "cli-definitions.json"), encoding="utf-8") as f:
    DEFS = json.load(f)
COMMANDS = DEFS["commands"]

GOOD = st_bytes({"w": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]}}, bytes(16))
OVERLAP = st_bytes(
    {"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
     "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}},
    bytes(12))
OS_SYSTEM = b"\x80\x02cos\nsystem\nq\x00X\x02\x00\x00\x00idq\x01\x85q\x02Rq\x03."
POLICY = b"apiVersion: modelgate/v1\nkind: Policy\nfailOn: high\n"


def run(*args, env=None, stdin=b"", cwd=None):
    return run_text([MG, *args], env=env, stdin=stdin, cwd=cwd)


def squeezed(text):
    return " ".join(text.split())


def must(cond, what):
    if not cond:
        raise AssertionError(what)


# ---- help ------------------------------------------------------------------


@test
def every_command_answers_help_on_stdout_with_exit_0(d):
    for c in COMMANDS:
        words = c["path"].split()
        outs = []
        for args in (words + ["--help"], words + ["-h"], ["help"] + words):
            code, out, err = run(*args)
            eq((code, err), (0, ""), f"{args}")
            outs.append(out)
        eq(outs[1:], [outs[0], outs[0]], f"{c['path']}: --help, -h and help agree")
        text = squeezed(outs[0])
        must(text.startswith("usage: " + c["synopsis"]), f"{c['path']} usage line: {text[:80]}")
        for o in c["options"]:
            names = ", ".join(o["names"]) + (" " + o["type"] if o["type"] else "")
            must(f"{names} {squeezed(o['help'])}" in text,
                 f"{c['path']}: {names} with its help and default not in --help:\n{outs[0]}")
            if not o["is_help"]:
                must(o["default"] != "", f"{c['path']} {names}: no default")
    for args in (["--help"], ["help"], ["-h"]):
        code, out, err = run(*args)
        eq((code, err), (0, ""), f"{args}")
        for c in COMMANDS:
            if " " not in c["path"]:
                must(f"  {c['path']} " in out, f"{args} lists {c['path']}")
    # Before issue 10: `policy lint --help` opened a file named --help.
    code, out, err = run("policy", "lint", "--help")
    eq((code, err), (0, ""), "policy lint --help")


# ---- parsing -----------------------------------------------------------------


@test
def opt_equals_value_and_double_dash(d):
    p = write(d, "m.safetensors", GOOD)
    for args in (["--format=json", "--fail-on=low"], ["--format", "json", "--fail-on", "low"],
                 ["-fjson", "--fail-on", "low"]):
        code, out, _ = run("scan", *args, p)
        eq(code, 0, f"{args}")
        eq(json.loads(out)["files"][0]["path"], p, f"{args} report")
    # "--" ends the options: a file named like an option is an operand.
    write(d, "--help", GOOD)
    write(d, "-q", OVERLAP)
    code, out, err = run("scan", "-f", "json", "m.safetensors", "--", "--help", "-q", cwd=d)
    eq(code, 1, "the overlap in -q is rejected: " + err)
    eq([(f["path"], f["verdict"]) for f in json.loads(out)["files"]],
       [("m.safetensors", "pass"), ("--help", "pass"), ("-q", "reject")], "operands after --")


@test
def usage_error_is_one_line_with_a_hint(d):
    code, out, err = run("scan", "--fail_on", "low", d)
    eq((code, out), (2, ""), "exit")
    eq(err, "modelgate: scan: unknown option '--fail_on' (did you mean --fail-on?); "
            "run 'modelgate scan --help' for usage\n", "one line")
    code, out, err = run("verify", "--pubkeys", "k.pub", d)
    eq(err, "modelgate: verify: unknown option '--pubkeys' (did you mean --pubkey?); "
            "run 'modelgate verify --help' for usage\n", "verify")
    code, out, err = run("chekc", "--policy", "p.yaml", d)
    eq(err, "modelgate: unknown command 'chekc' (did you mean check?); "
            "run 'modelgate --help' for usage\n", "command")
    code, out, err = run("scan", "--color", "sometimes", d)
    eq(err, "modelgate: scan: --color: unknown colour mode 'sometimes' (auto, always or never); "
            "run 'modelgate scan --help' for usage\n", "value")


# ---- streams -----------------------------------------------------------------


@test
def policy_lint_writes_only_to_stderr(d):
    good = write(d, "p.yaml", POLICY)
    code, out, err = run("policy", "lint", good)
    eq((code, out, err), (0, "", f"{good}: ok\n"), "ok on stderr")
    bad = write(d, "bad.yaml", POLICY + b"failOn: low\n")
    code, out, err = run("policy", "lint", bad)
    eq((code, out), (2, ""), "errors: exit 2, nothing on stdout")
    must(err.startswith("error: ") and "bad.yaml:4" in err, "the error on stderr: " + err)


@test
def dash_reads_standard_input_for_scan_and_inspect(d):
    tmp = os.path.join(d, "tmp")
    os.mkdir(tmp)
    env = dict(os.environ, TMPDIR=tmp)
    code, out, err = run("scan", "-f", "json", "-", stdin=GOOD, env=env)
    eq(code, 0, "scan - " + err)
    f = json.loads(out)["files"][0]
    eq((f["path"], f["format"], f["size"], f["verdict"]), ("-", "safetensors", len(GOOD), "pass"),
       "stdin report")
    other = write(d, "o.safetensors", OVERLAP)
    code, out, _ = run("scan", "-f", "json", other, "-", stdin=OS_SYSTEM, env=env)
    eq(code, 1, "a pickle on stdin is rejected")
    files = json.loads(out)["files"]
    eq([x["path"] for x in files], [other, "-"], "order of operands kept")
    eq("MG-PK-CRITICAL-IMPORT" in [x["id"] for x in files[1]["findings"]], True, "judged by content")
    code, out, _ = run("scan", "-", stdin=OS_SYSTEM, env=env)
    must(re.search(r"^REJECT +pickle .* -$", out, re.M), "text row under -:\n" + out)
    code, out, _ = run("scan", "--policy", write(d, "p.yaml", POLICY), "-f", "json", "-",
                       stdin=GOOD, env=env)
    eq((code, json.loads(out)["files"][0]["path"]), (0, "-"), "scan --policy -")
    code, out, _ = run("inspect", "-f", "json", "-", stdin=GOOD, env=env)
    doc = json.loads(out)
    eq((code, doc["path"], doc["tensor_count"]), (0, "-", 1), "inspect -")
    code, out, _ = run("inspect", "-", stdin=b"", env=env)
    eq((code, out.splitlines()[0]), (0, "file:        -"), "empty stdin is an empty file")
    eq(os.listdir(tmp), [], "the spool leaves nothing in TMPDIR")
    for args in (["verify", "--pubkey", "k.pub", "-"], ["check", "--policy", "p.yaml", "-"],
                 ["sign", "--key", "k.key", "-"], ["keygen", "--out", "-"], ["policy", "lint", "-"]):
        code, out, err = run(*args, stdin=GOOD)
        eq((code, out, len(err.splitlines())), (2, "", 1), f"{args}: {err}")
        must("'-' (standard input) is not accepted" in err, f"{args}: {err}")


def run_on_tty(*args, env=None):
    """Runs modelgate with stdout on a pseudo-terminal."""
    code, out = mgtest_run_on_tty([MG, *args], env=env)
    return code, out.decode("utf-8", "replace")


@test
def no_color_counts_only_when_non_empty_and_color_option_wins(d):
    p = write(d, "o.safetensors", OVERLAP)
    base = {k: v for k, v in os.environ.items() if k != "NO_COLOR"}
    cases = [({}, [], True), ({"NO_COLOR": ""}, [], True), ({"NO_COLOR": "1"}, [], False),
             ({}, ["--color", "never"], False), ({"NO_COLOR": "1"}, ["--color=always"], True),
             ({}, ["--color", "auto"], True)]
    for extra_env, args, want in cases:
        code, out = run_on_tty("scan", *args, p, env=dict(base, **extra_env))
        eq(code, 1, f"{extra_env} {args}")
        eq("\033[" in out, want, f"colour on a terminal with {extra_env} {args}: {out!r}")
    code, out, _ = run("scan", p, env=base)
    eq("\033[" in out, False, "piped: no colour")
    code, out, _ = run("scan", "--color", "always", p, env=base)
    eq("\033[1;31mREJECT\033[0m" in out, True, "--color always when piped")
    o = os.path.join(d, "r.txt")
    run_on_tty("scan", "-o", o, p, env=base)
    with open(o) as f:
        eq("\033[" in f.read(), False, "-o: no colour in the file")
    code, out = run_on_tty("inspect", p, env=base)
    eq("\033[1;31mMG-ST-OVERLAP" in out, True, "inspect colours its findings too")


@test
def sarif_level_reaches_the_sarif_reports(d):
    # one medium finding (a plain pickle: MG-PK-PICKLE-FORMAT): a SARIF warning
    g = write(d, "x.pkl", b"\x80\x02}q\x00X\x01\x00\x00\x00aq\x01K\x01s.")
    levels = {}
    for args in ([], ["--sarif-level", "warning"], ["--sarif-level=error"], ["--sarif-level", "note"]):
        code, out, err = run("scan", "-f", "sarif", *args, g)
        eq(code, 0, f"{args}: {err}")
        levels[" ".join(args)] = [r["level"] for r in json.loads(out)["runs"][0]["results"]]
    eq(levels[""], ["warning"], "default: warning and above")
    eq(levels["--sarif-level warning"], ["warning"], "warning")
    eq(levels["--sarif-level=error"], [], "error: the medium finding is no result")
    sf = os.path.join(d, "r.sarif")
    code, _, _ = run("verify", "--pubkey", "nope.pub", "--sarif-level", "error", "--sarif-output", sf, g)
    eq(code, 2, "a missing key cannot be read")
    code, _, _ = run("scan", "--sarif-level", "error", "--sarif-output", sf, g)
    with open(sf) as f:
        eq(json.load(f)["runs"][0]["results"], [], "--sarif-output at the same level")


# ---- version ---------------------------------------------------------------------


def tool_output(*cmd):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    if p.returncode != 0:
        raise AssertionError(f"{cmd}: {p.stderr} (ci/install-deps.sh installs it)")
    return p.stdout.strip()


@test
def version_names_the_linked_libraries(d):
    code, out, err = run("--version")
    eq((code, err), (0, ""), "exit")
    lines = out.splitlines()
    eq(lines[0], "modelgate 0.1.0", "first line")
    # The same libraries the system reports: the openssl program runs the
    # libcrypto the gate links; pkg-config names the libsodium and YARA
    # it was built against.
    openssl = tool_output("openssl", "version")  # "... (Library: ...)" when they differ
    library = re.search(r"\(Library: (.*)\)$", openssl)
    eq(lines[1], "  " + (library.group(1) if library else openssl), "OpenSSL")
    eq(lines[2], "  libsodium " + tool_output("pkg-config", "--modversion", "libsodium"), "libsodium")
    eq(lines[3], "  YARA " + tool_output("pkg-config", "--modversion", "yara"), "YARA")
    eq(len(lines), 4, "nothing else")


# ---- sign and verify on a file that is not safetensors ------------------------------


@test
def sign_and_verify_say_not_safetensors_in_words(d):
    eq(run("keygen", "--out", os.path.join(d, "k"))[0], 0, "keygen")
    cfg = write(d, "config.json", b'{\n  "architectures": ["BertModel"],\n  "hidden_size": 768\n}\n')
    before = hashlib.sha256(open(cfg, "rb").read()).hexdigest()
    code, out, err = run("sign", "--key", os.path.join(d, "k.key"), cfg)
    eq((code, out), (2, ""), "sign config.json: wrong input, exit 2")
    eq(err, f"modelgate: {cfg}: not a safetensors file (detected: json); "
            "sign embeds signatures in safetensors only\n", "message")
    eq(hashlib.sha256(open(cfg, "rb").read()).hexdigest(), before, "file untouched")
    txt = write(d, "README.md", b"# a model\n")
    code, _, err = run("sign", "--key", os.path.join(d, "k.key"), txt)
    eq(code, 2, "text")
    must("(detected: text)" in err, err)
    pk = write(d, "w.bin", OS_SYSTEM)
    code, _, err = run("sign", "--key", os.path.join(d, "k.key"), pk)
    must(code == 2 and "(detected: pickle)" in err, err)
    code, out, _ = run("verify", "--pubkey", os.path.join(d, "k.pub"), "-f", "json", cfg)
    eq(code, 1, "verify rejects it")
    fd = json.loads(out)["files"][0]["findings"]
    eq([x["id"] for x in fd], ["MG-SIG-MISSING"], "the finding id is kept")
    must(fd[0]["message"].startswith("not a safetensors file (detected: json); "), fd[0]["message"])


# ---- the signature column -----------------------------------------------------------


def keygen(d, name):
    code, out, err = run("keygen", "--out", os.path.join(d, name))
    eq(code, 0, "keygen " + err)
    return re.search(r"key id ([0-9a-f]+)", out).group(1)


def row(out, path):
    for line in out.splitlines():
        if line.endswith("  " + path):
            return line
    raise AssertionError(f"no row for {path}:\n{out}")


@test
def signature_column_says_what_was_established(d):
    kid = keygen(d, "k1")
    keygen(d, "k2")
    unsigned = write(d, "u.safetensors", GOOD)
    signed = os.path.join(d, "s.safetensors")
    eq(run("sign", "--key", os.path.join(d, "k1.key"), "-o", signed, unsigned)[0], 0, "sign")
    k1, k2 = os.path.join(d, "k1.pub"), os.path.join(d, "k2.pub")
    code, out, _ = run("verify", "--pubkey", k1, signed)
    eq(code, 0, "valid")
    must(f"  valid (key {k1})  " in row(out, signed), out)
    must(f"  signed by key {kid} (\"{k1}\")" in out, out)
    code, out, _ = run("verify", "--pubkey", k2, signed)
    eq(code, 1, "untrusted")
    must(f"  untrusted (key id {kid} not trusted)  " in row(out, signed), out)
    must("signed by key" not in out, out)
    # A tensor changed after signing: the record still verifies, the file not.
    data = bytearray(open(signed, "rb").read())
    data[-1] ^= 1
    tampered = write(d, "t.safetensors", bytes(data))
    code, out, _ = run("verify", "--pubkey", k1, tampered)
    eq(code, 1, "invalid")
    must("  invalid  " in row(out, tampered), out)
    must("signed by key" not in out and "k1.pub" not in row(out, tampered), out)
    code, out, _ = run("verify", "--pubkey", k1, unsigned)
    must("  missing  " in row(out, unsigned), out)
    # check under a policy reads the same way.
    pol = write(d, "p.yaml", POLICY + b"signatures:\n  required: true\n  keys:\n"
                b"    - name: release\n      file: k1.pub\n")
    code, out, _ = run("check", "--policy", pol, signed, tampered, unsigned)
    eq(code, 1, "check")
    must("  valid (key release)  " in row(out, signed), out)
    must("  invalid  " in row(out, tampered) and "  missing  " in row(out, unsigned), out)
    eq(out.count("signed by key"), 1, "only the valid row names its signer")


# ---- generated man page and completions ----------------------------------------------


def every_option():
    for c in [{"path": "", "options": DEFS["options"]}] + COMMANDS:
        for o in c["options"]:
            yield c, o


@test
def man_page_lists_every_command_and_option(d):
    with open(os.path.join(GEN, "modelgate.1"), encoding="utf-8") as f:
        man = f.read()
    roff = lambda s: s.replace("\\", "\\e").replace("-", "\\-")  # noqa: E731
    must(man.startswith('.\\" Generated') and "\n.TH MODELGATE 1 " in man, "man header")
    for c in COMMANDS:
        must(f'.SS "{roff(c["path"])}"\n' in man, "section for " + c["path"])
        must(roff(c["synopsis"]) in man, "synopsis of " + c["path"])
    for c, o in every_option():
        for n in o["names"]:
            must(f"\\fB{roff(n)}\\fR" in man, f"{c['path']} {n} in the man page")
        must(roff(o["help"]) in man, f"{c['path']} {o['names']} help")
    groff = shutil.which("groff")
    must(groff is not None, "groff is installed (ci/install-deps.sh installs groff-base)")
    p = subprocess.run([groff, "-man", "-Tutf8", "-ww", "-z", os.path.join(GEN, "modelgate.1")],
                       capture_output=True, text=True)
    eq((p.returncode, p.stderr), (0, ""), "groff renders it without a warning")


def complete(line):
    """What the generated bash completion offers for `line` (cursor at its end)."""
    script = os.path.join(GEN, "modelgate.bash")
    prog = (f'source "{script}"\n'
            'read -r -a COMP_WORDS <<< "$LINE"\n'
            '[[ $LINE == *" " ]] && COMP_WORDS+=("")\n'
            'COMP_CWORD=$(( ${#COMP_WORDS[@]} - 1 ))\n'
            '_modelgate\n'
            'printf "%s\\n" "${COMPREPLY[@]}"\n')
    p = subprocess.run(["bash", "-c", prog], capture_output=True, text=True,
                       env=dict(os.environ, LINE=line), timeout=30)
    eq(p.stderr, "", "bash completion stderr for " + line)
    return [w for w in p.stdout.splitlines() if w]


@test
def bash_completion_parses_and_completes_from_the_definitions(d):
    script = os.path.join(GEN, "modelgate.bash")
    p = subprocess.run(["bash", "-n", script], capture_output=True, text=True)
    eq((p.returncode, p.stderr), (0, ""), "bash -n")
    with open(script, encoding="utf-8") as f:
        words = set(re.split(r"[\s\"|)']+", f.read()))
    for c, o in every_option():
        for n in o["names"]:
            must(n in words, f"{c['path']} {n} in the bash completion")
    eq(complete("modelgate sc"), ["scan"], "a command")
    eq(complete("modelgate scan --fail-"), ["--fail-on"], "an option")
    eq(complete("modelgate scan -f "), ["text", "json", "jsonl", "sarif"], "choices")
    eq(complete("modelgate inspect --format "), ["text", "json"], "inspect's choices")
    eq(complete("modelgate check --policy p.yaml --sarif-l"), ["--sarif-level"], "after a value")
    eq(complete("modelgate policy "), ["-h", "--help", "lint"], "policy's commands")
    eq(complete("modelgate policy lint --"), ["--help"], "lint's options")
    eq(complete("modelgate help p"), ["policy"], "help's operand")
    for c in COMMANDS:
        if c["group"] or c["path"] == "help":
            continue
        got = set(complete(f"modelgate {c['path']} -"))
        want = {n for o in c["options"] for n in o["names"]}
        eq(got, want, f"every option of {c['path']}")


@test
def zsh_completion_names_every_option(d):
    with open(os.path.join(GEN, "_modelgate"), encoding="utf-8") as f:
        zsh = f.read()
    must(zsh.startswith("#compdef modelgate\n"), "compdef line")
    for c in COMMANDS:
        must(f"'{c['path'].split()[-1]}:" in zsh, c["path"] + " described")
    for c, o in every_option():
        for n in o["names"]:
            spelled = n if not o["type"] else n + ("+" if len(n) == 2 else "=")
            must(spelled + "[" in zsh, f"{c['path']} {spelled} in the zsh completion")
        if "choices" in o:
            must(":(" + " ".join(o["choices"]) + ")'" in zsh, f"{o['names']} choices")
    zsh_bin = shutil.which("zsh")
    must(zsh_bin is not None, "zsh is installed (ci/install-deps.sh installs it)")
    p = subprocess.run([zsh_bin, "-n", os.path.join(GEN, "_modelgate")], capture_output=True, text=True)
    eq((p.returncode, p.stderr), (0, ""), "zsh -n")


@test
def cmake_install_places_man_page_and_completions(d):
    p = subprocess.run(["cmake", "--install", BUILD, "--prefix", d], capture_output=True, text=True,
                       timeout=120)
    eq(p.returncode, 0, "cmake --install: " + p.stderr)
    for built, installed in (("modelgate.1", "share/man/man1/modelgate.1"),
                             ("modelgate.bash", "share/bash-completion/completions/modelgate"),
                             ("_modelgate", "share/zsh/vendor-completions/_modelgate")):
        with open(os.path.join(GEN, built), "rb") as a, open(os.path.join(d, installed), "rb") as b:
            eq(a.read() == b.read(), True, installed)
    eq(os.access(os.path.join(d, "bin", "modelgate"), os.X_OK), True, "the program")


if __name__ == "__main__":
    sys.exit(main())
