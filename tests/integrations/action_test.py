#!/usr/bin/env python3
"""The composite GitHub Action (action.yml), run as the runner runs it.

usage: action_test.py PATH/TO/modelgate

Parses action.yml, checks that no `run:` script interpolates an expression
(inputs reach the scripts through `env:` only), then executes the steps in
order with `bash --noprofile --norc -eo pipefail` (the runner's `shell: bash`),
GITHUB_OUTPUT / GITHUB_ACTION_PATH / RUNNER_TEMP / GITHUB_WORKSPACE set and
the `${{ }}` expressions of `env:` and `outputs:` evaluated. MODELGATE_BIN in
the job's environment makes the setup step use the built program instead of
installing one. Checks exit codes, outputs and the SARIF file, and the setup
step's package path: a .deb (made here with dpkg-deb around the built
program) from the workspace or from an https URL (a curl on PATH that
records its arguments), pinned by SHA-256, its Depends met or installed (an
apt-get on PATH that records its arguments: nothing is installed here), and
that nothing pinned and no build-from-source is an error.
"""
import hashlib
import json
import os
import re
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import (GOOD, HOSTILE, PICKLE_MEDIUM, PICKLE_OS_SYSTEM, ROOT, eq, hf_model,  # noqa: E402
                    keygen_and_sign, main, modelgate_from_argv, need_tool, run, signed_policy, test,
                    validate_sarif, write)
import action_runner  # noqa: E402
from action_runner import ACTION, EXPR  # noqa: E402

MG = modelgate_from_argv()
need_tool("bash")
need_tool("dpkg-deb")
SHELLCHECK = need_tool("shellcheck")
ARCH = run(["dpkg", "--print-architecture"])[1].strip()


def run_action(workspace, inputs=None, job_env=None):
    return action_runner.run_action(MG, workspace, inputs, job_env)


def load_sarif(workspace, name="modelgate.sarif"):
    with open(os.path.join(workspace, name)) as f:
        doc = json.load(f)
    validate_sarif(doc)
    return doc


def rule_ids(doc):
    return sorted({r["ruleId"] for r in doc["runs"][0]["results"]})


@test
def metadata_and_no_expressions_in_run_scripts(d):
    eq(ACTION["runs"]["using"], "composite", "runs.using")
    eq(sorted(ACTION["inputs"]), ["build-from-source", "fail-on", "modelgate-deb",
                                  "modelgate-deb-sha256", "path", "policy", "sarif-file"], "inputs")
    eq(ACTION["inputs"]["path"]["default"], ".", "path default")
    eq(ACTION["inputs"]["build-from-source"]["default"], "false", "build-from-source default")
    eq(ACTION["inputs"]["modelgate-deb"]["default"], "", "no package by default (none is published)")
    eq(ACTION["inputs"]["sarif-file"]["default"], "modelgate.sarif", "sarif-file default")
    eq(sorted(ACTION["outputs"]), ["exit-code", "sarif-file"], "outputs")
    for step in ACTION["runs"]["steps"]:
        eq(step.get("shell"), "bash", f"shell of step {step.get('id')}")
        if "${{" in step["run"]:
            raise AssertionError(f"step {step.get('id')} interpolates an expression into run: "
                                 + step["run"])
        for k, v in (step.get("env") or {}).items():
            for e in EXPR.findall(str(v)):
                if e.startswith("inputs.") and EXPR.fullmatch(str(v).strip()) is None:
                    raise AssertionError(f"env {k} mixes an input into other text: {v!r}")
        for word in re.findall(r'"\$GITHUB_ACTION_PATH/([^"]+)"', step["run"]):
            if not os.path.isfile(os.path.join(ROOT, word)):
                raise AssertionError(f"step {step.get('id')} runs a missing script {word}")


@test
def scripts_pass_shellcheck(d):
    scripts = [os.path.join(ROOT, "integrations", "github", n) for n in ("setup.sh", "run.sh", "annotate.sh")]
    code, out, err = run([SHELLCHECK, "--shell=bash", "-x", *scripts], cwd=ROOT)
    eq(code, 0, "shellcheck\n" + out + err)


@test
def clean_directory_passes(d):
    ws = os.path.join(d, "ws")
    write(ws, "models/good.safetensors", GOOD)
    write(ws, "README.md", "not a model\n")
    code, outputs, log = run_action(ws, {"path": "models/"})
    eq(code, 0, "exit\n" + log)
    eq(outputs, {"sarif-file": "modelgate.sarif", "exit-code": "0"}, "outputs")
    doc = load_sarif(ws)
    eq([r for r in doc["runs"][0]["results"] if r.get("level") == "error"], [], "no errors")
    eq(doc["runs"][0]["invocations"][0]["executionSuccessful"], True, "invocation")
    if "prebuilt" not in log:
        raise AssertionError("setup did not use MODELGATE_BIN: " + log)


@test
def hostile_file_fails_the_job_but_sarif_is_written(d):
    ws = os.path.join(d, "ws")
    write(ws, "models/good.safetensors", GOOD)
    write(ws, "models/evil.safetensors", HOSTILE)
    code, outputs, log = run_action(ws, {"path": "models", "sarif-file": "out/mg.sarif"})
    eq(code, 1, "exit\n" + log)
    eq(outputs, {"sarif-file": "out/mg.sarif", "exit-code": "1"}, "outputs")
    doc = load_sarif(ws, "out/mg.sarif")
    eq(rule_ids(doc), ["MG-ST-TRAILING-BYTES"], "rules")
    res = doc["runs"][0]["results"][0]
    eq(res["level"], "error", "level")
    eq(res["locations"][0]["physicalLocation"]["artifactLocation"]["uri"],
       "models/evil.safetensors", "location relative to the workspace (code scanning)")
    if "::error title=modelgate::" not in log:
        raise AssertionError("no error annotation: " + log)


@test
def default_path_skips_the_checkouts_git_directory(d):
    """`path: .` in a checkout: .git holds every committed blob (here a pickle
    that was deleted again); the tree is judged, not its history."""
    ws = os.path.join(d, "ws")
    write(ws, "models/good.safetensors", GOOD)
    write(ws, "old.pkl", PICKLE_OS_SYSTEM)
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": d, "GIT_CONFIG_NOSYSTEM": "1",
           "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.invalid"}
    for args in (["init", "-q"], ["add", "."], ["commit", "-q", "-m", "a"], ["rm", "-q", "old.pkl"],
                 ["commit", "-q", "-m", "b"]):
        code, out, err = run(["git", *args], env=env, cwd=ws)
        eq(code, 0, f"git {args}: {err}")
    code, outputs, log = run_action(ws)
    eq(code, 0, "default path in a checkout\n" + log)
    if ".git" in log:
        raise AssertionError(".git was scanned: " + log)
    write(ws, "sub/evil.safetensors", HOSTILE)
    code, outputs, log = run_action(ws)
    eq(code, 1, "a hostile file in the tree\n" + log)
    eq([r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]
        for r in load_sarif(ws)["runs"][0]["results"]], ["sub/evil.safetensors"], "SARIF location")


@test
def report_lines_cannot_issue_workflow_commands(d):
    ws = os.path.join(d, "ws")
    write(ws, "m/::add-mask::x.safetensors", HOSTILE)
    code, _, log = run_action(ws, {"path": "m"})
    eq(code, 1, "exit\n" + log)
    m = re.search(r"^::stop-commands::([0-9a-f]{32})$", log, re.M)
    if m is None:
        raise AssertionError("report not wrapped in stop-commands: " + log)
    start, end = m.end(), log.index(f"::{m.group(1)}::")
    if "add-mask" not in log[start:end]:
        raise AssertionError("the file name is reported inside the stopped region: " + log)


@test
def fail_on_moves_the_bar(d):
    ws = os.path.join(d, "ws")
    write(ws, "m/state.pkl", PICKLE_MEDIUM)
    code, outputs, log = run_action(ws, {"path": "m"})
    eq(code, 0, "a medium finding passes at the default bar\n" + log)
    code, outputs, log = run_action(ws, {"path": "m", "fail-on": "medium"})
    eq(code, 1, "fail-on medium rejects it\n" + log)
    eq(rule_ids(load_sarif(ws)), ["MG-PK-PICKLE-FORMAT"], "rules")
    code, outputs, log = run_action(ws, {"path": "m", "fail-on": "severe"})
    eq(code, 2, "unknown severity\n" + log)
    eq(outputs["exit-code"], "2", "exit-code output")


FAKE_CMAKE = """#!/bin/bash
# Records each call; `--build` makes DIR/cli/modelgate the real program.
printf '%s\\n' "$@" >>"$FAKE_CMAKE_LOG"
printf -- '--\\n' >>"$FAKE_CMAKE_LOG"
if [ "$1" = --build ]; then mkdir -p "$2/cli" && ln -sf "$REAL_MG" "$2/cli/modelgate"; fi
"""


def build_branch_cmake_args(d, github):
    """Runs the action with no MODELGATE_BIN, so setup builds, with a cmake
    on PATH that records its arguments; returns (exit code, arguments, log)."""
    ws = os.path.join(d, "ws")
    write(ws, "models/good.safetensors", GOOD)
    fake = os.path.join(d, "fakebin")
    write(fake, "cmake", FAKE_CMAKE)
    os.chmod(os.path.join(fake, "cmake"), 0o755)
    log_file = os.path.join(d, "cmake.log")
    env = {"PATH": fake + ":" + os.environ.get("PATH", "/usr/bin:/bin"), "MODELGATE_BIN": "",
           "FAKE_CMAKE_LOG": log_file, "REAL_MG": os.path.abspath(MG)}
    code, _, log = action_runner.run_action(MG, ws, {"path": "models", "build-from-source": "true"},
                                            env, github)
    with open(log_file) as f:
        return code, f.read().split("\n"), log


@test
def built_program_links_help_to_the_actions_own_repository(d):
    code, args, log = build_branch_cmake_args(
        d, {"action_repository": "acme/model-gate", "action_ref": "0123456789abcdef"})
    eq(code, 0, "exit\n" + log)
    want = "-DMG_DOCS_BASE_URI=https://github.com/acme/model-gate/blob/0123456789abcdef/docs/findings/"
    if want not in args:
        raise AssertionError(f"cmake not given {want}: {args}")


@test
def odd_repository_or_ref_keeps_the_default_help_links(d):
    for n, github in enumerate(({"action_repository": "acme/x;touch /tmp/p", "action_ref": "v1"},
                                {"action_repository": "acme/x", "action_ref": "../../evil"},
                                {"action_repository": "acme/x", "action_ref": "v1\n-DX=1"},
                                {})):
        sub = os.path.join(d, str(n))
        os.makedirs(sub)
        code, args, log = build_branch_cmake_args(sub, github)
        eq(code, 0, f"exit with {github}\n{log}")
        bad = [a for a in args if a.startswith("-DMG_DOCS_BASE_URI") or a.startswith("-DX")]
        eq(bad, [], f"cmake arguments with {github}")


FAKE_TOOL = """#!/bin/bash
# Records each call in $FAKE_LOG; see the test for what each tool does.
printf '%s %s\\n' "$(basename "$0")" "$*" >>"$FAKE_LOG"
case "$(basename "$0")" in
  curl)
    while [ $# -gt 0 ]; do [ "$1" = -o ] && out="$2"; shift; done
    cp "$FAKE_CURL_FILE" "$out" ;;
  apt-get) [ "$1" != -s ] || exec /usr/bin/apt-get "$@" ;;  # a simulation changes nothing
  sudo) exec "$@" ;;
esac
exit 0
"""


def make_deb(d, name="modelgate", depends="libc6"):
    """A .deb holding the built program as usr/bin/modelgate; returns
    (path, SHA-256)."""
    root = os.path.join(d, "debroot")
    write(root, "DEBIAN/control",
          f"Package: {name}\nVersion: 0.1.0\nArchitecture: {ARCH}\n"
          f"Maintainer: t <t@example.invalid>\nDepends: {depends}\nDescription: test\n")
    os.makedirs(os.path.join(root, "usr", "bin"))
    shutil.copy(MG, os.path.join(root, "usr", "bin", "modelgate"))
    deb = os.path.join(d, f"{name}_0.1.0_{ARCH}.deb")
    code, out, err = run(["dpkg-deb", "--root-owner-group", "-Znone", "--build", root, deb])
    eq(code, 0, "dpkg-deb --build " + err)
    shutil.rmtree(root)
    with open(deb, "rb") as f:
        return deb, hashlib.sha256(f.read()).hexdigest()


def fake_tools(d):
    """A PATH whose curl, apt-get and sudo record their calls (FAKE_LOG):
    curl copies FAKE_CURL_FILE to its -o, apt-get -s is the real simulation
    and any other apt-get call does nothing, sudo runs its command."""
    fake = os.path.join(d, "fakebin")
    for tool in ("curl", "apt-get", "sudo"):
        write(fake, tool, FAKE_TOOL)
        os.chmod(os.path.join(fake, tool), 0o755)
    log = os.path.join(d, "fake.log")
    open(log, "w").close()
    return {"PATH": fake + ":" + os.environ.get("PATH", "/usr/bin:/bin"), "FAKE_LOG": log}


def fake_calls(env):
    with open(env["FAKE_LOG"]) as f:
        return f.read().splitlines()


def deb_workspace(d, **deb_args):
    ws = os.path.join(d, "ws")
    write(ws, "models/good.safetensors", GOOD)
    deb, sha = make_deb(os.path.join(ws, "dist"), **deb_args)
    return ws, os.path.relpath(deb, ws), sha


@test
def pinned_deb_from_the_workspace_is_unpacked_and_run(d):
    ws, deb, sha = deb_workspace(d)
    env = dict(fake_tools(d), MODELGATE_BIN="")
    inputs = {"path": "models", "modelgate-deb": deb, "modelgate-deb-sha256": sha}
    code, outputs, log = run_action(ws, inputs, env)
    eq(code, 0, "exit\n" + log)
    if f"using modelgate 0.1.0 from {deb} (SHA-256 {sha})" not in log:
        raise AssertionError("setup did not use the package: " + log)
    unpacked = os.path.join(ws, "..", "runner-temp", "modelgate-deb", "root", "usr", "bin", "modelgate")
    eq(os.path.isfile(unpacked), True, "unpacked under RUNNER_TEMP")
    # libc6 is installed here: apt-get only simulates, nothing is installed.
    eq([c.split()[:2] for c in fake_calls(env)], [["apt-get", "-s"]], "apt-get calls")
    write(ws, "models/evil.safetensors", HOSTILE)
    code, outputs, log = run_action(ws, inputs, env)
    eq(code, 1, "the package's program rejects a hostile file\n" + log)
    eq(rule_ids(load_sarif(ws)), ["MG-ST-TRAILING-BYTES"], "rules")


@test
def missing_dependencies_are_installed_with_apt(d):
    ws, deb, sha = deb_workspace(d, depends="libc6 (>= 2.0), libmodelgate-test-absent9 (>= 1)")
    env = dict(fake_tools(d), MODELGATE_BIN="")
    code, _, log = run_action(ws, {"path": "models", "modelgate-deb": deb,
                                   "modelgate-deb-sha256": sha}, env)
    eq(code, 0, "exit\n" + log)
    calls = [c for c in fake_calls(env) if c.startswith("apt-get")]
    eq(calls, ["apt-get -s satisfy libc6 (>= 2.0), libmodelgate-test-absent9 (>= 1)",
               "apt-get update -qq",
               "apt-get satisfy -y -qq --no-install-recommends "
               "libc6 (>= 2.0), libmodelgate-test-absent9 (>= 1)"], "apt-get calls")


@test
def deb_from_an_https_url_is_pinned(d):
    ws, deb, sha = deb_workspace(d)
    env = dict(fake_tools(d), MODELGATE_BIN="", FAKE_CURL_FILE=os.path.join(ws, deb))
    url = "https://example.invalid/releases/modelgate_0.1.0.deb"
    inputs = {"path": "models", "modelgate-deb": url, "modelgate-deb-sha256": sha}
    code, _, log = run_action(ws, inputs, env)
    eq(code, 0, "exit\n" + log)
    curl = [c for c in fake_calls(env) if c.startswith("curl ")]
    eq(len(curl), 1, "one download")
    if "--proto =https --proto-redir =https" not in curl[0] or not curl[0].endswith(" " + url):
        raise AssertionError("curl must be limited to https: " + curl[0])
    # The server sends another file: the pin stops it.
    other = write(d, "other.deb", b"!<arch>\nnot the package")
    env["FAKE_CURL_FILE"] = other
    code, _, log = run_action(ws, inputs, env)
    eq(code, 2, "a download that is not the pinned file\n" + log)
    if "not the pinned " + sha not in log:
        raise AssertionError("message: " + log)


@test
def deb_needs_a_pin_and_the_right_package(d):
    ws, deb, sha = deb_workspace(d)
    env = dict(fake_tools(d), MODELGATE_BIN="")
    other_ws, other_deb, other_sha = deb_workspace(os.path.join(d, "o"), name="notmodelgate")
    shutil.copy(os.path.join(other_ws, other_deb), os.path.join(ws, "dist"))
    cases = [
        ({"modelgate-deb": deb}, "modelgate-deb-sha256 must be"),
        ({"modelgate-deb": deb, "modelgate-deb-sha256": sha.upper()}, "modelgate-deb-sha256 must be"),
        ({"modelgate-deb": deb, "modelgate-deb-sha256": "0" * 64}, "not the pinned"),
        ({"modelgate-deb": "dist/absent.deb", "modelgate-deb-sha256": sha}, "is not a file"),
        ({"modelgate-deb": "http://example.invalid/m.deb", "modelgate-deb-sha256": sha},
         "must be an https:// URL or a path"),
        ({"modelgate-deb": "file:///etc/passwd", "modelgate-deb-sha256": sha},
         "must be an https:// URL or a path"),
        ({"modelgate-deb": os.path.join("dist", os.path.basename(other_deb)),
          "modelgate-deb-sha256": other_sha}, "holds package 'notmodelgate', not modelgate"),
        ({"modelgate-deb": deb, "modelgate-deb-sha256": sha, "build-from-source": "true"},
         "both 'modelgate-deb' and 'build-from-source: true'"),
        ({"build-from-source": "yes"}, "build-from-source must be true or false"),
        ({}, "no modelgate to run: pin a package"),
    ]
    for given, message in cases:
        code, outputs, log = run_action(ws, dict(given, path="models"), env)
        eq(code, 2, f"{given}\n{log}")
        if message not in log or "::error title=modelgate setup::" not in log:
            raise AssertionError(f"{given}: no error annotation with {message!r}: {log}")
        eq(outputs["exit-code"], "", f"{given}: the run step did not run")
    eq([c for c in fake_calls(env) if not c.startswith("apt-get -s")], [], "nothing downloaded or installed")


@test
def policy_gates_signatures(d):
    ws = os.path.join(d, "ws")
    pub, _ = keygen_and_sign(MG, d, out_dir=os.path.join(ws, "models"))
    write(ws, ".github/modelgate-policy.yaml", signed_policy(pub))
    code, outputs, log = run_action(ws, {"path": "models", "policy": ".github/modelgate-policy.yaml"})
    eq(code, 0, "signed model passes\n" + log)
    eq(outputs["exit-code"], "0", "exit-code")
    write(ws, "models/unsigned.safetensors", GOOD)
    code, outputs, log = run_action(ws, {"path": "models", "policy": ".github/modelgate-policy.yaml"})
    eq(code, 1, "unsigned model rejected\n" + log)
    eq(rule_ids(load_sarif(ws)), ["MG-POLICY-SIGNATURE"], "rules")


@test
def detached_signed_directory_passes(d):
    """A model directory signed once (`sign --detached`, model.sig at its
    top) passes `check` through the Action, config and tokenizer included;
    a file changed after signing fails it."""
    ws = os.path.join(d, "ws")
    model = hf_model(os.path.join(ws, "models"), "llm-7b")
    prefix = os.path.join(d, "release")
    code, _, err = run([MG, "keygen", "--alg", "ecdsa-p256", "--out", prefix])
    eq(code, 0, "keygen " + err)
    code, _, err = run([MG, "sign", "--detached", "--key", prefix + ".key", model])
    eq(code, 0, "sign --detached " + err)
    policy = signed_policy(prefix + ".pub").replace("formats: {allow: [safetensors]}",
                                                     "formats: {allow: [safetensors, unknown]}")
    write(ws, ".github/modelgate-policy.yaml", policy)
    inputs = {"path": "models/llm-7b", "policy": ".github/modelgate-policy.yaml"}
    code, outputs, log = run_action(ws, inputs)
    eq(code, 0, "detached-signed directory passes\n" + log)
    eq(rule_ids(load_sarif(ws)), [], "no alerts")
    # The bundle covers the directory it sits in: naming a parent or the
    # files one by one leaves every file unsigned.
    code, outputs, log = run_action(ws, {"path": "models", "policy": inputs["policy"]})
    eq(code, 1, "path above the signed directory\n" + log)
    write(ws, "models/llm-7b/tokenizer_config.json", '{"chat_template": "{{ evil }}"}\n')
    code, outputs, log = run_action(ws, inputs)
    eq(code, 1, "a file changed after signing\n" + log)
    eq(rule_ids(load_sarif(ws)), ["MG-POLICY-SIGNATURE"], "rules")
    # A checkout whose root is the signed model: `path: .` passes the
    # directory whole (it holds model.sig), and check leaves out the .git the
    # bundle ignores -- here holding a pickle that would fail formats.allow.
    root = os.path.join(d, "hfclone")
    shutil.copytree(os.path.join(ws, "models", "llm-7b"), root)
    code, _, err = run([MG, "sign", "--detached", "--key", prefix + ".key", root])
    eq(code, 0, "sign --detached " + err)
    write(root, ".git/HEAD", "ref: refs/heads/main\n")
    write(root, ".git/objects/evil.pkl", b"\x80\x02cos\nsystem\n.")
    write(root, ".github/modelgate-policy.yaml", policy)
    code, outputs, log = run_action(root, {"path": ".", "policy": ".github/modelgate-policy.yaml"})
    eq(code, 0, "path: . in a clone of the signed model\n" + log)
    # Unsigned, the same clone's .git is judged like everything else.
    os.remove(os.path.join(root, "model.sig"))
    code, outputs, log = run_action(root, {"path": ".", "policy": ".github/modelgate-policy.yaml"})
    eq(code, 1, "path: . in an unsigned clone\n" + log)


@test
def policy_and_fail_on_together_is_an_error(d):
    ws = os.path.join(d, "ws")
    write(ws, "models/good.safetensors", GOOD)
    write(ws, "p.yaml", "apiVersion: modelgate/v1\nkind: Policy\nfailOn: high\n")
    code, outputs, log = run_action(ws, {"path": "models", "policy": "p.yaml", "fail-on": "low"})
    eq(code, 2, "exit\n" + log)
    if "both 'policy' and 'fail-on'" not in log:
        raise AssertionError("message: " + log)
    doc = load_sarif(ws)
    eq(doc["runs"][0]["invocations"][0]["executionSuccessful"], False, "placeholder SARIF")
    eq(doc["runs"][0]["results"], [], "no results")


@test
def broken_policy_still_writes_sarif(d):
    ws = os.path.join(d, "ws")
    write(ws, "models/good.safetensors", GOOD)
    write(ws, "p.yaml", "apiVersion: modelgate/v1\nkind: Policy\nfailOn: yes\n")
    write(ws, "modelgate.sarif", "stale results from an earlier step")
    code, outputs, log = run_action(ws, {"path": "models", "policy": "p.yaml"})
    eq(code, 2, "exit\n" + log)
    eq(outputs, {"sarif-file": "modelgate.sarif", "exit-code": "2"}, "outputs")
    doc = load_sarif(ws)  # the stale file was replaced
    eq(doc["runs"][0]["invocations"][0]["exitCode"], 2, "exit code in SARIF")
    code, outputs, log = run_action(ws, {"path": "models", "policy": "missing.yaml"})
    eq(code, 2, "missing policy\n" + log)
    load_sarif(ws)


@test
def inputs_are_data_not_code(d):
    ws = os.path.join(d, "ws")
    write(ws, "a dir/good.safetensors", GOOD)
    write(ws, "-dash/good.safetensors", GOOD)
    hostile_inputs = ['a dir\n-dash\n  \n$(touch pwned1)', "a dir'; touch pwned2; '"]
    code, outputs, log = run_action(ws, {"path": hostile_inputs[0]})
    eq(code, 2, "a path that does not exist cannot be judged\n" + log)
    code, outputs, log = run_action(ws, {"path": "a dir\n-dash\n"})
    eq(code, 0, "paths one per line, with spaces and a leading dash\n" + log)
    code, outputs, log = run_action(ws, {"path": hostile_inputs[1],
                                         "sarif-file": "$(touch pwned3).sarif"})
    eq(code, 2, "exit\n" + log)
    if not os.path.exists(os.path.join(ws, "$(touch pwned3).sarif")):
        raise AssertionError("the sarif-file name was not taken literally")
    for n in (1, 2, 3):
        if os.path.exists(os.path.join(ws, f"pwned{n}")):
            raise AssertionError(f"input {n} was executed")


if __name__ == "__main__":
    sys.exit(main())
