"""Issue 10's journey, replayed: a new user follows the README on a model
repository laid out like a Hugging Face one. Each test is one friction the
issue lists, checked through the real program (and the repository's own
files), so none can come back unnoticed.

usage: journey_test.py PATH/TO/modelgate SOURCE_DIR
Standard library only.
"""
import json
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from mgtest import eq, main, run_on_tty, run_text, st_bytes, test, write  # noqa: E402

MG = os.path.abspath(sys.argv[1])
SRC = os.path.abspath(sys.argv[2])

WEIGHTS = st_bytes({"__metadata__": {"format": "pt"},
                    "w": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]}}, bytes(16))
# Protocol 2: cos\nsystem\n ... REDUCE. One cause, which YARA also sees.
OS_SYSTEM = b"\x80\x02cos\nsystem\nq\x00X\x02\x00\x00\x00idq\x01\x85q\x02Rq\x03."


def run(*args, stdin=b"", env=None, cwd=None):
    return run_text([MG, *args], env=env, stdin=stdin, cwd=cwd, timeout=120)


def model_repo(d):
    """A clean repository: weights, configs, tokenizer, template, README."""
    repo = os.path.join(d, "tiny-model")
    write(repo, "model.safetensors", WEIGHTS)
    write(repo, "config.json", '{"architectures": ["Tiny"], "hidden_size": 2}\n')
    write(repo, "generation_config.json", '{"max_length": 8}\n')
    write(repo, "tokenizer.json", '{"version": "1.0", "model": {"type": "BPE"}}\n')
    write(repo, "tokenizer_config.json", '{"model_max_length": 8}\n')
    write(repo, "special_tokens_map.json", '{"eos_token": "</s>"}\n')
    write(repo, "chat_template.jinja", "{% for m in messages %}{{ m.content }}{% endfor %}\n")
    write(repo, "README.md", "# tiny\n")
    write(repo, ".gitattributes", "*.safetensors filter=lfs diff=lfs merge=lfs -text\n")
    return repo


def one_line(err, what):
    lines = [x for x in err.splitlines() if x]
    eq(len(lines), 1, f"{what}: one line on stderr, got {err!r}")
    return lines[0]


@test
def scan_help_is_help(d):
    code, out, err = run("scan", "--help")
    eq((code, err), (0, ""), "scan --help")
    if "--fail-on" not in out or "default" not in out:
        raise AssertionError("scan --help lists no options with defaults: " + out)
    code, out2, _ = run("help", "scan")
    eq((code, out2), (0, out), "help scan is scan --help")


@test
def policy_lint_help_opens_no_file(d):
    code, out, err = run("policy", "lint", "--help", cwd=d)
    eq((code, err), (0, ""), "policy lint --help")
    if "cannot open" in out + err or "lint" not in out:
        raise AssertionError("policy lint --help: " + out + err)


@test
def opt_equals_value_and_one_line_errors(d):
    repo = model_repo(d)
    code, out, err = run("scan", "--fail-on=critical", "--format=json", repo)
    eq(code, 0, "scan --fail-on=critical --format=json\n" + err)
    eq(json.loads(out)["summary"]["files"], 9, "files")
    code, out, err = run("scan", "--fail-onn=high", repo)
    eq((code, out), (2, ""), "misspelt option")
    line = one_line(err, "misspelt option")
    if "--fail-onn" not in line or "did you mean --fail-on" not in line:
        raise AssertionError("no hint naming the option: " + line)


@test
def help_on_stdout_errors_on_stderr(d):
    for args in (["--help"], ["help"], ["check", "--help"]):
        code, out, err = run(*args)
        eq((code, err), (0, ""), " ".join(args))
        if not out.strip():
            raise AssertionError(f"{args}: no help on stdout")


@test
def policy_lint_writes_only_to_stderr(d):
    good = write(d, "p.yaml", "apiVersion: modelgate/v1\nkind: Policy\nfailOn: high\n")
    bad = write(d, "q.yaml", "apiVersion: modelgate/v1\nkind: Policy\nfailOn: sometimes\n")
    code, out, err = run("policy", "lint", good)
    eq((code, out), (0, ""), "lint of a good policy: nothing on stdout")
    if "ok" not in err:
        raise AssertionError("no ok on stderr: " + err)
    code, out, err = run("policy", "lint", bad)
    eq((code, out), (2, ""), "lint of a bad policy: nothing on stdout")
    if "failOn" not in err:
        raise AssertionError("the error names no key: " + err)


def on_tty(args, env):
    return run_on_tty([MG, *args], env=env)[1]


@test
def empty_no_color_keeps_colour(d):
    evil = write(d, "evil.pkl", OS_SYSTEM)
    base = {k: v for k, v in os.environ.items() if k != "NO_COLOR"}
    eq(b"\x1b[" in on_tty(["scan", evil], {**base, "NO_COLOR": ""}), True, "NO_COLOR= (empty)")
    eq(b"\x1b[" in on_tty(["scan", evil], {**base, "NO_COLOR": "1"}), False, "NO_COLOR=1")


@test
def dash_is_standard_input(d):
    code, out, err = run("scan", "-f", "json", "-", stdin=OS_SYSTEM, cwd=d)
    eq(code, 1, "scan - of a pickle\n" + err)
    f = json.loads(out)["files"][0]
    eq(f["path"], "-", "path")
    if "MG-PK-CRITICAL-IMPORT" not in [x["id"] for x in f["findings"]]:
        raise AssertionError("stdin was not judged: " + out)
    eq(os.path.exists(os.path.join(d, "-")), False, "no file named '-' read or made")
    code, out, err = run("verify", "--pubkey", "k.pub", "-", cwd=d)
    eq(code, 2, "verify - is a usage error")
    one_line(err, "verify -")


@test
def invalid_row_names_no_signer(d):
    keys = os.path.join(d, "k")
    code, _, err = run("keygen", "--out", keys)
    eq(code, 0, "keygen\n" + err)
    src = write(d, "m.safetensors", WEIGHTS)
    signed = os.path.join(d, "signed.safetensors")
    code, _, err = run("sign", "--key", keys + ".key", "-o", signed, src)
    eq(code, 0, "sign\n" + err)
    code, out, _ = run("verify", "--pubkey", keys + ".pub", signed)
    eq(code, 0, "verify of the signed file\n" + out)
    data = bytearray(open(signed, "rb").read())
    data[-1] ^= 1
    open(signed, "wb").write(bytes(data))
    code, out, _ = run("verify", "--pubkey", keys + ".pub", signed)
    eq(code, 1, "verify of a tampered file\n" + out)
    if "invalid" not in out or "signed by" in out or "valid (key" in out:
        raise AssertionError("an invalid row claims a signer: " + out)


@test
def a_critical_import_is_counted_once(d):
    evil = write(d, "evil.pkl", OS_SYSTEM)
    code, out, _ = run("scan", "-f", "json", evil)
    eq(code, 1, "scan of a pickle calling os.system")
    findings = json.loads(out)["files"][0]["findings"]
    crit = [f for f in findings if f["severity"] == "critical"]
    eq([f["id"] for f in crit], ["MG-PK-CRITICAL-IMPORT"], "critical findings")
    if not any(x.startswith("MG-YARA-") for x in crit[0].get("corroborated_by", [])):
        raise AssertionError("the YARA rule is not kept as evidence: " + json.dumps(crit[0]))
    code, out, _ = run("scan", evil)
    if "1 critical" not in out or "2 critical" in out:
        raise AssertionError("text counts: " + out)


@test
def legacy_torch_save_has_no_trailing_data_finding(d):
    for name in ("torch-legacy.pt", "torch-legacy-module.pt"):
        path = os.path.join(SRC, "tests", "fixtures", "real", name)
        code, out, err = run("scan", "-f", "json", path)
        ids = [f["id"] for f in json.loads(out)["files"][0]["findings"]]
        if any("TRAILING" in i for i in ids):
            raise AssertionError(f"{name}: {ids}")


@test
def messages_read_as_english(d):
    repo = model_repo(d)
    write(repo, "blob.bin", bytes(range(256)) * 4)
    write(repo, "evil.pkl", OS_SYSTEM)
    code, out, err = run("scan", "--sarif-level=note", repo)
    text = out + err
    # Under a policy that requires signatures, every unsigned file says why.
    keys = os.path.join(d, "k")
    run("keygen", "--out", keys)
    policy = write(d, "policy.yaml", "apiVersion: modelgate/v1\nkind: Policy\nsignatures:\n"
                   "  required: true\n  keys:\n    - name: release\n      file: k.pub\n")
    code, out, err = run("check", "--policy", policy, repo)
    eq(code, 1, "unsigned repository under a signed-only policy\n" + out + err)
    if "carries no embedded signature" not in out:
        raise AssertionError("no missing-signature message: " + out)
    text += out + err
    bad = re.findall(r"\ba (?:[aeiou]\w*|'[aeiou]\w*')", text)
    eq(bad, [], "article before a vowel in\n" + text)


@test
def sign_config_json_says_not_safetensors(d):
    keys = os.path.join(d, "k")
    run("keygen", "--out", keys)
    cfg = write(d, "config.json", '{"architectures": ["Tiny"]}\n')
    code, out, err = run("sign", "--key", keys + ".key", cfg)
    eq(code, 2, "sign config.json\n" + err)
    line = one_line(err, "sign config.json")
    if "not a safetensors file" not in line or re.search(r"\d{10,}", line):
        raise AssertionError("sign config.json: " + line)
    eq(open(cfg).read(), '{"architectures": ["Tiny"]}\n', "config.json untouched")


@test
def clean_model_gives_no_sarif_alerts(d):
    repo = model_repo(d)
    code, out, err = run("scan", "-f", "sarif", repo)
    eq(code, 0, "clean repository\n" + err)
    eq(json.loads(out)["runs"][0]["results"], [], "results at the default level")


@test
def precommit_filter_takes_what_the_action_checks(d):
    with open(os.path.join(SRC, ".pre-commit-hooks.yaml")) as f:
        text = f.read()
    patterns = re.findall(r"^\s*files:\s*'([^']+)'", text, re.M)
    eq(len(patterns), 2, "two hooks with a files pattern")
    for p in patterns:
        for name in ("config.json", "model.safetensors.index.json", "tokenizer.json",
                     "chat_template.jinja", "tokenizer.model", "model.safetensors"):
            if not re.search(p, name):
                raise AssertionError(f"{name} escapes the hook filter {p}")


@test
def docs_pin_what_exists_and_cover_lfs_and_stand_alone(d):
    texts = {}
    for rel in ["README.md", "action.yml", ".pre-commit-hooks.yaml"] + [
            os.path.join("docs", n) for n in sorted(os.listdir(os.path.join(SRC, "docs")))
            if n.endswith(".md")]:
        with open(os.path.join(SRC, rel), encoding="utf-8") as f:
            texts[rel] = f.read()
    for rel, t in texts.items():
        for bad in ("@v0", "rev: v0.1.0", "../shared", "DESIGN.md"):
            if bad in t:
                raise AssertionError(f"{rel} still says {bad}")
    joined = "\n".join(texts.values())
    for needed in ("lfs: true", "git lfs pull", "docs/policy.md", "docs/stsig.md", "docs/report.md"):
        if needed not in joined:
            raise AssertionError(f"the docs never say {needed!r}")
    for rel in ("docs/policy.md", "docs/stsig.md", "docs/report.md",
                "docs/schemas/policy.schema.json", "docs/schemas/report-v1.schema.json"):
        if not os.path.isfile(os.path.join(SRC, rel)):
            raise AssertionError(f"{rel} is missing")


if __name__ == "__main__":
    sys.exit(main())
