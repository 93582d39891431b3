#!/usr/bin/env python3
"""The pre-commit hooks (.pre-commit-hooks.yaml), run by pre-commit itself.

usage: precommit_test.py PATH/TO/modelgate

Offline: the hooks are `language: system`, and the hooks repository is a
local git repository holding this checkout's .pre-commit-hooks.yaml. The
built modelgate is first on PATH; HOME and PRE_COMMIT_HOME are temp
directories. Checks `pre-commit try-repo` on staged files, and the
configuration shown in docs/ci-policy-check.md (repo pointed at the local
repository) with its policy; that configuration, index and tokenizer files
reach the hooks as they reach the Action; and that a git-lfs pointer fails.
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


# Non-weight files of a model directory (what `huggingface-cli download`
# fetches for a transformers model beside the weights).
MODEL_DIR_FILES = ("config.json", "models/llm/generation_config.json", "model.safetensors.index.json",
                   "pytorch_model.bin.index.json", "tokenizer.json", "tokenizer_config.json",
                   "special_tokens_map.json", "added_tokens.json", "preprocessor_config.json",
                   "adapter_config.json", "vocab.json", "tokenizer.model", "spiece.model",
                   "vocab.txt", "m/merges.txt", "chat_template.jinja", "cl100k_base.tiktoken",
                   "CONFIG.JSON")


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
    eq(hooks["modelgate-scan"].get("args"), ["--"], "scan args end options")
    pattern = re.compile(hooks["modelgate-scan"]["files"])
    for name in ("m.safetensors", "a/b/pytorch_model.bin", "x.PT", "y.pkl", "w.npz", "q.gguf",
                 "m.onnx", "k.h5", "z.joblib", "c.ckpt", "d.tar.gz", "flax_model.msgpack"):
        if not pattern.search(name):
            raise AssertionError(f"files pattern misses {name}")
    # The rest of a Hugging Face model directory, which the Action (path: DIR)
    # judges too: configuration, shard index and tokenizer files.
    for name in MODEL_DIR_FILES:
        if not pattern.search(name):
            raise AssertionError(f"files pattern misses {name}, which the Action checks")
    for name in ("README.md", "train.py", "model.safetensors.md", "requirements.txt", "notes.txt",
                 ".pre-commit-config.yaml", ".github/modelgate-policy.yaml", "release.pub",
                 "LICENSE", ".gitattributes", "myvocab.txt"):
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
def config_and_index_files_reach_the_hook(d):
    env = env_for(d)
    hooks, _ = hooks_repo(d, env)
    repo = work_repo(d, env)
    write(repo, "models/model.safetensors", GOOD)
    write(repo, "models/config.json", '{"architectures": ["Tiny"], "hidden_size": 4}\n')
    write(repo, "models/model.safetensors.index.json",
          '{"metadata": {"total_size": 20}, '
          '"weight_map": {"w": "model.safetensors", "b": "model.safetensors"}}\n')
    git(env, repo, "add", "models")
    code, out, err = try_repo(env, repo, hooks, "modelgate-scan")
    eq(code, 0, f"clean model directory\n{out}{err}")
    # A pickle named config.json: the hook is given the file and judges its
    # content (exit 1 names it), as the Action does.
    write(repo, "models/config.json", PICKLE_OS_SYSTEM)
    git(env, repo, "add", "models/config.json")
    code, out, err = try_repo(env, repo, hooks, "modelgate-scan")
    eq(code, 1, f"pickle named config.json\n{out}{err}")
    if "config.json" not in out or "MG-PK-CRITICAL-IMPORT" not in out:
        raise AssertionError("config.json was not judged: " + out)
    if "model.safetensors.index.json" not in out:
        raise AssertionError("the index file was not passed to the hook: " + out)


@test
def lfs_pointer_without_lfs_fails(d):
    # A clone without git-lfs (docs/ci-policy-check.md, "git-LFS and
    # pre-commit"): the working tree holds the pointer, and the hook says so.
    env = env_for(d)
    hooks, _ = hooks_repo(d, env)
    repo = work_repo(d, env)
    write(repo, "models/model.safetensors",
          "version https://git-lfs.github.com/spec/v1\n"
          "oid sha256:4d7a214614ab2935c943f9e0ff69d22eadbb8f32b1258daaa5e2ca24d17e2393\n"
          "size 123456789\n")
    git(env, repo, "add", "models")
    code, out, err = try_repo(env, repo, hooks, "modelgate-scan")
    eq(code, 1, f"LFS pointer\n{out}{err}")
    if "MG-FMT-LFS-POINTER" not in out:
        raise AssertionError("no MG-FMT-LFS-POINTER: " + out)


@test
def file_named_like_an_option_is_judged_as_a_file(d):
    # The hooks' args end with `--`: a committed `--output=victim.json` is a
    # path, not an option that would send the report over victim.json.
    env = env_for(d)
    hooks, _ = hooks_repo(d, env)
    repo = work_repo(d, env)
    write(repo, "victim.json", '{"keep": true}\n')
    write(repo, "--output=victim.json", HOSTILE)
    write(repo, "-q.safetensors", HOSTILE)
    git(env, repo, "add", "--", "victim.json", "--output=victim.json", "-q.safetensors")
    code, out, err = try_repo(env, repo, hooks, "modelgate-scan")
    eq(code, 1, f"hostile files named like options\n{out}{err}")
    for name in ("--output=victim.json", "-q.safetensors"):
        if not re.search(re.escape(name) + r":\d+: MG-", out):
            raise AssertionError(f"{name} was not judged as a file: {out}")
    with open(os.path.join(repo, "victim.json")) as f:
        eq(f.read(), '{"keep": true}\n', "victim.json untouched")


@test
def documented_config_with_policy(d):
    env = env_for(d)
    hooks, sha = hooks_repo(d, env)
    repo = work_repo(d, env)
    blocks = doc_blocks("docs/ci-policy-check.md")
    config = yaml.safe_load(blocks["pre-commit-config"])
    by_id = {h["id"]: h for h in config["repos"][0]["hooks"]}
    eq(sorted(by_id), ["modelgate-check", "modelgate-scan"], "documented hooks")
    config["repos"][0]["repo"] = hooks
    config["repos"][0]["rev"] = sha
    write(repo, ".pre-commit-config.yaml", yaml.safe_dump(config))
    policy_rel = by_id["modelgate-check"]["args"][1]
    write(repo, policy_rel, blocks["policy"])
    pub, _ = keygen_and_sign(MG, d, out_dir=os.path.join(repo, "models"))
    shutil.copy(pub, os.path.join(repo, os.path.dirname(policy_rel), "release.pub"))
    git(env, repo, "add", ".")
    code, out, err = run([PRE_COMMIT, "run"], env=env, cwd=repo, timeout=120)
    eq(code, 0, f"signed model under the documented policy\n{out}{err}")
    if not re.search(r"modelgate check.*\.+Passed", out):
        raise AssertionError("hook did not run: " + out)
    # A config beside the weights: scanned by modelgate-scan, kept from the
    # signed-only policy by the documented `files:` of modelgate-check.
    write(repo, "models/config.json", '{"architectures": ["Tiny"]}\n')
    git(env, repo, "add", "models/config.json")
    code, out, err = run([PRE_COMMIT, "run"], env=env, cwd=repo, timeout=120)
    eq(code, 0, f"config.json beside the signed model\n{out}{err}")
    if not re.search(r"modelgate scan.*\.+Passed", out):
        raise AssertionError("modelgate-scan did not run on the config: " + out)
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
