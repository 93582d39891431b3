"""Runs the steps of the composite GitHub Action (action.yml) as the runner
does: `bash --noprofile --norc -eo pipefail` on each `run:` script, with
GITHUB_OUTPUT / GITHUB_ACTION_PATH / RUNNER_TEMP / GITHUB_WORKSPACE set and
the `${{ }}` expressions of `env:` and `outputs:` evaluated. MODELGATE_BIN
in the job's environment makes the setup step use a built program instead of
building one. Used by action_test.py and docs_test.py.
"""
import os
import re
import subprocess

import yaml

from common import ROOT

with open(os.path.join(ROOT, "action.yml")) as f:
    ACTION = yaml.safe_load(f)

EXPR = re.compile(r"\$\{\{\s*(.*?)\s*\}\}")


def evaluate(text, ctx):
    """Evaluates the `${{ }}` expressions this action may use; any other
    expression fails the test, so action.yml cannot grow untested ones."""
    def one(m):
        e = m.group(1)
        parts = e.split(".")
        if len(parts) == 2 and parts[0] == "inputs":
            return ctx["inputs"][parts[1]]
        if e == "runner.temp":
            return ctx["runner_temp"]
        if e == "github.action_path":
            return ROOT
        if e in ("github.action_repository", "github.action_ref"):
            return ctx["github"].get(parts[1], "")
        if len(parts) == 4 and parts[0] == "steps" and parts[2] == "outputs":
            return ctx["steps"].get(parts[1], {}).get(parts[3], "")
        raise AssertionError(f"expression the test does not know: {e!r}")
    return EXPR.sub(one, str(text))


def parse_output_file(path):
    """GITHUB_OUTPUT: `name=value` lines and `name<<DELIM ... DELIM` blocks."""
    out = {}
    with open(path) as f:
        lines = f.read().split("\n")
    i = 0
    while i < len(lines):
        line = lines[i]
        if "<<" in line and ("=" not in line or line.index("<<") < line.index("=")):
            name, delim = line.split("<<", 1)
            j = lines.index(delim, i + 1)
            out[name] = "\n".join(lines[i + 1:j])
            i = j + 1
            continue
        if line:
            name, value = line.split("=", 1)
            out[name] = value
        i += 1
    return out


def run_action(mg, workspace, inputs=None, job_env=None, github=None):
    """Runs the action's steps in `workspace` with MODELGATE_BIN=mg. Returns
    (exit code, outputs, stdout+stderr)."""
    spec = ACTION["inputs"]
    given = dict(inputs or {})
    for k in given:
        if k not in spec:
            raise AssertionError(f"test passes unknown input {k!r}")
    ctx = {"inputs": {k: str(given.get(k, v.get("default", ""))) for k, v in spec.items()},
           "runner_temp": os.path.join(workspace, "..", "runner-temp"), "steps": {},
           "github": dict(github or {})}
    os.makedirs(ctx["runner_temp"], exist_ok=True)
    base = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": workspace, "CI": "true",
            "GITHUB_ACTIONS": "true", "GITHUB_ACTION_PATH": ROOT,
            "RUNNER_TEMP": ctx["runner_temp"], "GITHUB_WORKSPACE": workspace,
            "MODELGATE_BIN": mg}
    base.update(job_env or {})
    log = ""
    code = 0
    for n, step in enumerate(ACTION["runs"]["steps"]):
        out_file = os.path.join(ctx["runner_temp"], f"output-{n}")
        open(out_file, "w").close()
        env = dict(base, GITHUB_OUTPUT=out_file)
        for k, v in (step.get("env") or {}).items():
            env[k] = evaluate(v, ctx)
        script = os.path.join(ctx["runner_temp"], f"step-{n}.sh")
        with open(script, "w") as f:
            f.write(step["run"])
        p = subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", script],
                           cwd=workspace, env=env, capture_output=True, timeout=120,
                           stdin=subprocess.DEVNULL)
        log += p.stdout.decode("utf-8", "replace") + p.stderr.decode("utf-8", "replace")
        if "id" in step:
            ctx["steps"][step["id"]] = parse_output_file(out_file)
        if p.returncode != 0:  # the runner skips the rest of the steps
            code = p.returncode
            break
    outputs = {k: evaluate(v["value"], ctx) for k, v in ACTION["outputs"].items()}
    return code, outputs, log
