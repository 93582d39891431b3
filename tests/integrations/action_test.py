#!/usr/bin/env python3
"""The composite GitHub Action (action.yml), run as the runner runs it.

usage: action_test.py PATH/TO/modelgate

Parses action.yml, checks that no `run:` script interpolates an expression
(inputs reach the scripts through `env:` only), then executes the steps in
order with `bash --noprofile --norc -eo pipefail` (the runner's `shell: bash`),
GITHUB_OUTPUT / GITHUB_ACTION_PATH / RUNNER_TEMP / GITHUB_WORKSPACE set and
the `${{ }}` expressions of `env:` and `outputs:` evaluated. MODELGATE_BIN in
the job's environment makes the setup step use the built program instead of
building one. Checks exit codes, outputs and the SARIF file.
"""
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
SHELLCHECK = need_tool("shellcheck")


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
    eq(sorted(ACTION["inputs"]), ["fail-on", "path", "policy", "sarif-file"], "inputs")
    eq(ACTION["inputs"]["path"]["default"], ".", "path default")
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
    code, _, log = action_runner.run_action(MG, ws, {"path": "models"}, env, github)
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
