#!/usr/bin/env python3
"""The pre-commit hooks (.pre-commit-hooks.yaml), run by pre-commit itself.

usage: precommit_test.py PATH/TO/modelgate

Offline: the hooks are `language: system`, and the hooks repository is a
local git repository holding this checkout's .pre-commit-hooks.yaml. The
built modelgate is first on PATH; HOME and PRE_COMMIT_HOME are temp
directories. Checks `pre-commit try-repo` on staged files, and the
configuration shown in docs/ci-policy-check.md (repo pointed at the local
repository) with its policy.
"""
import os
import re
import shutil
import sys

import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import (GOOD, HOSTILE, PICKLE_OS_SYSTEM, ROOT, doc_blocks, eq, keygen_and_sign,  # noqa: E402
                    main, modelgate_from_argv, need_tool, run, test, write)

MG = modelgate_from_argv()
PRE_COMMIT = need_tool("pre-commit")
GIT = need_tool("git")
HOOKS_FILE = os.path.join(ROOT, ".pre-commit-hooks.yaml")


def env_for(d):
    home = os.path.join(d, "home")
    os.makedirs(home, exist_ok=True)
    env = {"PATH": os.path.dirname(MG) + os.pathsep + os.environ.get("PATH", "/usr/bin:/bin"),
           "HOME": home, "PRE_COMMIT_HOME": os.path.join(d, "pre-commit-home"),
           "XDG_CACHE_HOME": os.path.join(d, "cache"), "GIT_CONFIG_NOSYSTEM": "1",
           "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.invalid",
           "PRE_COMMIT_COLOR": "never", "LANG": "C.UTF-8"}
    for k in ("ASAN_OPTIONS", "UBSAN_OPTIONS"):
        if k in os.environ:
            env[k] = os.environ[k]
    return env


def git(env, cwd, *args):
    code, out, err = run([GIT, *args], env=env, cwd=cwd)
    eq(code, 0, f"git {' '.join(args)}: {err}")
    return out.strip()


def hooks_repo(d, env):
    """A git repository holding this checkout's hooks file; returns (path, sha)."""
    repo = os.path.join(d, "hooks-repo")
    os.makedirs(repo)
    shutil.copy(HOOKS_FILE, repo)
    git(env, repo, "init", "-q")
    git(env, repo, "add", ".pre-commit-hooks.yaml")
    git(env, repo, "commit", "-q", "-m", "hooks")
    return repo, git(env, repo, "rev-parse", "HEAD")


def work_repo(d, env):
    repo = os.path.join(d, "work")
    os.makedirs(repo)
    git(env, repo, "init", "-q")
    return repo


def try_repo(env, repo, hooks, hook):
    return run([PRE_COMMIT, "try-repo", hooks, hook], env=env, cwd=repo, timeout=120)


@test
def hook_definitions(d):
    with open(HOOKS_FILE) as f:
        hooks = {h["id"]: h for h in yaml.safe_load(f)}
    eq(sorted(hooks), ["modelgate-check", "modelgate-scan"], "hook ids")
    eq(hooks["modelgate-scan"]["entry"], "modelgate scan", "scan entry")
    eq(hooks["modelgate-check"]["entry"], "modelgate check", "check entry")
    pattern = re.compile(hooks["modelgate-scan"]["files"])
    for name in ("m.safetensors", "a/b/pytorch_model.bin", "x.PT", "y.pkl", "w.npz", "q.gguf",
                 "m.onnx", "k.h5", "z.joblib", "c.ckpt", "d.tar.gz"):
        if not pattern.search(name):
            raise AssertionError(f"files pattern misses {name}")
    for name in ("README.md", "config.json", "train.py", "model.safetensors.md"):
        if pattern.search(name):
            raise AssertionError(f"files pattern takes {name}")
    eq(hooks["modelgate-check"]["files"], hooks["modelgate-scan"]["files"], "same file set")
    for h in hooks.values():
        eq(h["language"], "system", f"{h['id']} language (no downloads)")


@test
def try_repo_scan_passes_good_and_fails_hostile(d):
    env = env_for(d)
    hooks, _ = hooks_repo(d, env)
    repo = work_repo(d, env)
    write(repo, "models/good.safetensors", GOOD)
    write(repo, "README.md", "# not a model\n")
    git(env, repo, "add", "models/good.safetensors", "README.md")
    code, out, err = try_repo(env, repo, hooks, "modelgate-scan")
    eq(code, 0, f"good staged file\n{out}{err}")
    if not re.search(r"modelgate scan \(model files\)\.+Passed", out):
        raise AssertionError("hook did not run and pass: " + out)
    write(repo, "models/evil.safetensors", HOSTILE)
    git(env, repo, "add", "models/evil.safetensors")
    code, out, err = try_repo(env, repo, hooks, "modelgate-scan")
    eq(code, 1, f"hostile staged file\n{out}{err}")
    if not re.search(r"modelgate scan \(model files\)\.+Failed", out) or "evil.safetensors" not in out:
        raise AssertionError("hook did not fail on the hostile file: " + out)
    # A pickle hiding behind another extension is judged by content.
    git(env, repo, "rm", "-q", "--cached", "models/evil.safetensors")
    write(repo, "models/weights.h5", PICKLE_OS_SYSTEM)
    git(env, repo, "add", "models/weights.h5")
    code, out, err = try_repo(env, repo, hooks, "modelgate-scan")
    eq(code, 1, f"pickle named .h5\n{out}{err}")
    if "MG-PK-CRITICAL-IMPORT" not in out:
        raise AssertionError("the pickle was not analyzed: " + out)


@test
def leading_dash_file_name_fails_closed(d):
    env = env_for(d)
    hooks, _ = hooks_repo(d, env)
    repo = work_repo(d, env)
    write(repo, "-f.safetensors", GOOD)
    git(env, repo, "add", "--", "-f.safetensors")
    code, out, err = try_repo(env, repo, hooks, "modelgate-scan")
    if code == 0:
        raise AssertionError("a file named like an option passed unjudged: " + out)


@test
def documented_config_with_policy(d):
    env = env_for(d)
    hooks, sha = hooks_repo(d, env)
    repo = work_repo(d, env)
    blocks = doc_blocks("docs/ci-policy-check.md")
    config = yaml.safe_load(blocks["pre-commit-config"])
    eq(config["repos"][0]["hooks"][0]["id"], "modelgate-check", "documented hook")
    config["repos"][0]["repo"] = hooks
    config["repos"][0]["rev"] = sha
    write(repo, ".pre-commit-config.yaml", yaml.safe_dump(config))
    policy_rel = config["repos"][0]["hooks"][0]["args"][1]
    write(repo, policy_rel, blocks["policy"])
    pub, _ = keygen_and_sign(MG, d, out_dir=os.path.join(repo, "models"))
    shutil.copy(pub, os.path.join(repo, os.path.dirname(policy_rel), "release.pub"))
    git(env, repo, "add", ".")
    code, out, err = run([PRE_COMMIT, "run"], env=env, cwd=repo, timeout=120)
    eq(code, 0, f"signed model under the documented policy\n{out}{err}")
    if not re.search(r"modelgate check.*\.+Passed", out):
        raise AssertionError("hook did not run: " + out)
    write(repo, "models/unsigned.safetensors", GOOD)
    git(env, repo, "add", "models/unsigned.safetensors")
    code, out, err = run([PRE_COMMIT, "run"], env=env, cwd=repo, timeout=120)
    eq(code, 1, f"unsigned model\n{out}{err}")
    if "MG-POLICY-SIGNATURE" not in out:
        raise AssertionError("no signature finding: " + out)
    code, out, err = run([PRE_COMMIT, "run", "--all-files"], env=env, cwd=repo, timeout=120)
    eq(code, 1, f"--all-files\n{out}{err}")


if __name__ == "__main__":
    sys.exit(main())
