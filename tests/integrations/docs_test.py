#!/usr/bin/env python3
"""The examples in docs/registry-gate.md, docs/ci-policy-check.md and
docs/deployment-admission.md, so the docs cannot rot.

usage: docs_test.py PATH/TO/modelgate

Blocks marked `<!-- test: NAME -->` are extracted. Policies are linted (with
generated keys in place of the placeholders) and used; the registry gate
script runs on uploads; the workflow's inputs run through the Action's steps;
the Kubernetes and KServe manifests are checked for the shape the entrypoint
needs (volumes, mounts, security contexts, the image's uid) and then the
entrypoint runs with their arguments and environment, every mount path mapped
into a temp directory. Assertions are on exit codes and JSON, never on the
text report.
"""
import glob
import itertools
import json
import os
import re
import shutil
import sys

import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import (GOOD, HOSTILE, PICKLE_OS_SYSTEM, ROOT, doc_blocks, eq,  # noqa: E402
                    hf_model, main, modelgate_from_argv, need_tool, run, test, write)
from action_runner import run_action  # noqa: E402

MG = modelgate_from_argv()
need_tool("bash")
ENTRYPOINT = os.path.join(ROOT, "docker", "entrypoint.sh")
REGISTRY = doc_blocks("docs/registry-gate.md")
CI = doc_blocks("docs/ci-policy-check.md")
DEPLOY = doc_blocks("docs/deployment-admission.md")


def env_with_mg(**extra):
    env = {"PATH": os.path.dirname(MG) + os.pathsep + os.environ.get("PATH", "/usr/bin:/bin"),
           "HOME": "/nonexistent", "TMPDIR": "/nonexistent/tmp"}
    for k in ("ASAN_OPTIONS", "UBSAN_OPTIONS"):
        if k in os.environ:
            env[k] = os.environ[k]
    env.update(extra)
    return env


def lint(path):
    code, out, err = run([MG, "policy", "lint", path])
    eq(code, 0, f"policy lint {path}: {out}{err}")


def dockerfile_uid():
    with open(os.path.join(ROOT, "Dockerfile")) as f:
        m = re.findall(r"^USER (\d+):(\d+)$", f.read(), re.M)
    eq(len(m), 1, "one numeric USER in the Dockerfile")
    return int(m[0][0]), int(m[0][1])


def keypair(d, name, alg="ed25519"):
    prefix = os.path.join(d, "keys", name)
    os.makedirs(os.path.dirname(prefix), exist_ok=True)
    code, _, err = run([MG, "keygen", "--alg", alg, "--out", prefix])
    eq(code, 0, "keygen " + err)
    return prefix + ".key", prefix + ".pub"


def sign_detached(key, model_dir, *extra):
    code, _, err = run([MG, "sign", "--detached", "--key", key, *extra, model_dir])
    eq(code, 0, "sign --detached " + err)
    eq(os.path.isfile(os.path.join(model_dir, "model.sig")), True, "DIR/model.sig written")


def sign(key, src_bytes, out):
    tmp = out + ".unsigned"
    write(os.path.dirname(out), os.path.basename(tmp), src_bytes)
    code, _, err = run([MG, "sign", "--key", key, "-o", out, tmp])
    eq(code, 0, "sign " + err)
    os.unlink(tmp)


# ---- registry-gate.md ------------------------------------------------------------

def registry_setup(d, policy_text=None):
    """The page's policy under d/etc, a key pair for each key it names, of
    the kind its comment says (`# modelgate keygen --alg ALG`), and the
    script. Returns (policy path, {name: (private key, alg)}, script)."""
    etc = os.path.join(d, "etc")
    text = policy_text or REGISTRY["registry-policy"]
    policy = write(etc, "registry-policy.yaml", text)
    keys = {}
    for ref, alg in re.findall(r"file: (\S+)\s+# modelgate keygen --alg (\S+)", text):
        name = os.path.basename(ref)[:-len(".pub")]
        key, pub = keypair(d, name, alg)
        os.makedirs(os.path.dirname(os.path.join(etc, ref)), exist_ok=True)
        shutil.copy(pub, os.path.join(etc, ref))
        keys[name] = (key, alg)
    eq(len(keys), len(re.findall(r"file: ", text)), "every key says which --alg made it")
    script = write(d, "registry-gate.sh", REGISTRY["registry-gate.sh"], mode=0o755)
    return policy, keys, script


RUNS = itertools.count()


def gate(d, script, policy, upload):
    audit = os.path.join(d, "audit", str(next(RUNS)))
    os.makedirs(audit)
    code, out, err = run([script, upload], env=env_with_mg(MODELGATE_POLICY=policy,
                                                           MODELGATE_AUDIT_DIR=audit))
    reports = glob.glob(os.path.join(audit, "*.json"))
    doc = None
    if reports:
        eq(len(reports), 1, "one report per run")
        with open(reports[0]) as f:
            doc = json.load(f)
    return code, doc, out + err


def ids(doc):
    return sorted({f["id"] for file in doc["files"] for f in file["findings"]})


def refused(d, script, policy, upload, want, what):
    """The gate refuses `upload` (exit 1), the kept report holds finding `want`."""
    code, doc, log = gate(d, script, policy, upload)
    eq(code, 1, f"{what}\n{log}")
    if doc is None or want not in ids(doc):
        raise AssertionError(f"{what}: findings {doc and ids(doc)}, want {want}\n{log}")
    if "refused: a file was rejected" not in log:
        raise AssertionError("script message: " + log)
    return doc


def admitted(d, script, policy, upload, files, what):
    code, doc, log = gate(d, script, policy, upload)
    eq(code, 0, f"{what}\n{log}")
    eq(doc["summary"], {"files": files, "passed": files, "rejected": 0, "errors": 0}, what)
    if "accepted:" not in log:
        raise AssertionError("script message: " + log)
    return doc


@test
def registry_policy_lints_and_gates(d):
    policy, keys, script = registry_setup(d)
    lint(policy)
    eq(sorted(keys), ["release-2026", "research-2026"], "keys named in the policy")
    eq(sorted(alg for _, alg in keys.values()), ["ecdsa-p256", "ed25519"], "one key of each kind")
    # A whole Hugging Face-style directory signed once with a detached bundle,
    # by either key: every file passes (11 files, model.sig and
    # .gitattributes ignored by the bundle but still scanned).
    for name, (key, alg) in keys.items():
        up = hf_model(os.path.join(d, "up-" + name))
        sign_detached(key, up)
        doc = admitted(d, script, policy, up, 12, f"{name} ({alg}) detached")
        states = {os.path.basename(f["path"]): f["signature"].get("detached_state") for f in doc["files"]}
        eq(states.pop("model.sig"), "ignored", "the bundle is not signed by itself")
        eq(states.pop(".gitattributes"), "ignored", ".gitattributes")
        eq(set(states.values()), {"signed"}, f"every other file signed: {states}")
        eq({f["format"] for f in doc["files"]}, {"safetensors", "unknown", "json", "jinja"},
           "configs are json, the template jinja, the rest unknown (which admits both)")
    # The single-file case: a safetensors file with an embedded signature.
    up = os.path.join(d, "up-embedded")
    sign(keys["research-2026"][0], GOOD, os.path.join(up, "model.safetensors"))
    admitted(d, script, policy, up, 1, "embedded")
    # Tampered directories: each refused with the finding the report keeps.
    key = keys["release-2026"][0]
    base = hf_model(os.path.join(d, "base"))
    sign_detached(key, base)
    tampers = {
        "changed": (lambda m: write(m, "tokenizer_config.json", '{"chat_template": "{{ evil }}"}\n'),
                    "MG-POLICY-SIGNATURE"),
        "added": (lambda m: write(m, "extra/modeling_llm.py", "import os\n"), "MG-POLICY-SIGNATURE"),
        "removed": (lambda m: os.unlink(os.path.join(m, "model-00002-of-00002.safetensors")),
                    "MG-OMS-FILE-MISSING"),
        "bundle-by-another-key": (lambda m: sign_detached(keypair(m + ".k", "other", "ecdsa-p256")[0], m),
                                  "MG-OMS-UNTRUSTED"),
    }
    for name, (tamper, want) in tampers.items():
        up = os.path.join(d, "up-" + name)
        shutil.copytree(base, up)
        tamper(up)
        refused(d, script, policy, up, want, name)
    empty = os.path.join(d, "up-empty")
    os.makedirs(empty)
    refused(d, script, policy, empty, "MG-POLICY-EMPTY-MODEL", "empty upload")
    cases = {"unsigned": ({"model.safetensors": GOOD}, "MG-POLICY-SIGNATURE"),
             "pickle": ({"pytorch_model.bin": PICKLE_OS_SYSTEM}, "MG-POLICY-FORMAT"),
             "pickle-named-config": ({"config.json": PICKLE_OS_SYSTEM}, "MG-POLICY-FORMAT"),
             "hostile": ({"model.safetensors": HOSTILE}, "MG-ST-TRAILING-BYTES")}
    for name, (files, want) in cases.items():
        up = os.path.join(d, "up-" + name)
        for f, data in files.items():
            write(up, f, data)
        doc = refused(d, script, policy, up, want, name)
        eq(doc["summary"]["rejected"], 1, f"{name} summary")
    # A signed pickle is still a pickle: signatures do not waive the scan.
    up = hf_model(os.path.join(d, "up-signed-pickle"))
    write(up, "pytorch_model.bin", PICKLE_OS_SYSTEM)
    sign_detached(key, up)
    refused(d, script, policy, up, "MG-POLICY-PICKLE", "signed pickle")
    # An ignored path needs no signature but is still scanned.
    up = hf_model(os.path.join(d, "up-ignored-pickle"))
    write(up, ".github/weights.bin", PICKLE_OS_SYSTEM)
    sign_detached(key, up)
    doc = refused(d, script, policy, up, "MG-POLICY-PICKLE", "pickle under .github/")
    eq([f["signature"].get("detached_state") for f in doc["files"] if f["verdict"] == "reject"],
       ["ignored"], "only the ignored pickle is rejected")
    broken = write(d, "etc/broken.yaml", REGISTRY["registry-policy"].replace("failOn: high", "failOn: on"))
    code, doc, log = gate(d, script, broken, os.path.join(d, "up-unsigned"))
    eq(code, 2, "broken policy\n" + log)


@test
def registry_old_policy_rejects_most_of_a_directory(d):
    """What the page says of a safetensors-only, embedded-only policy: 9 of
    the 11 files of the directory are rejected though the shards are signed."""
    text = REGISTRY["registry-policy"].replace("[safetensors, unknown]", "[safetensors]")
    text = text.replace("accept: [detached, embedded]", "accept: [embedded]")
    policy, keys, script = registry_setup(d, text)
    up = hf_model(os.path.join(d, "up"))
    for n in ("model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"):
        with open(os.path.join(up, n), "rb") as f:
            sign(keys["research-2026"][0], f.read(), os.path.join(up, n))
    code, doc, log = gate(d, script, policy, up)
    eq(code, 1, log)
    eq((doc["summary"]["files"], doc["summary"]["rejected"]), (11, 9), "rejected of the directory")
    if "9 of the 11 files" not in open(os.path.join(ROOT, "docs", "registry-gate.md")).read():
        raise AssertionError("docs/registry-gate.md does not say 9 of the 11 files")


@test
def registry_policy_binds_model_and_version(d):
    lines = REGISTRY["registry-policy-model"]
    text = REGISTRY["registry-policy"].replace("  accept: [detached, embedded]\n",
                                               "  accept: [detached, embedded]\n" + lines, 1)
    eq(lines in text, True, "the two lines go under signatures:")
    policy, keys, script = registry_setup(d, text)
    lint(policy)
    model = re.search(r"model: (\S+)", lines).group(1)
    version = int(re.search(r"minVersion: (\d+)", lines).group(1))
    key = keys["release-2026"][0]
    up = hf_model(os.path.join(d, "up-ok"))
    sign_detached(key, up, "--model", model, "--version", str(version))
    admitted(d, script, policy, up, 12, "the named model at minVersion")
    for name, extra in {"rollback": ["--model", model, "--version", str(version - 1)],
                        "another-model": ["--model", "acme/other", "--version", str(version)],
                        "no-version": ["--model", model],
                        "no-model": []}.items():
        up = hf_model(os.path.join(d, "up-" + name))
        sign_detached(key, up, *extra)
        refused(d, script, policy, up, "MG-POLICY-SIGNATURE", name)


# ---- ci-policy-check.md -----------------------------------------------------------

def action_inputs():
    with open(os.path.join(ROOT, "action.yml")) as f:
        return yaml.safe_load(f)["inputs"]


@test
def three_lines_of_yaml(d):
    block = CI["three-lines"]
    eq(len([l for l in block.splitlines() if l.strip()]), 5, "five lines")
    steps = yaml.safe_load(block)
    eq(len(steps), 1, "one step")
    # The program is pinned too: a package and its digest (no default exists).
    eq({"modelgate-deb", "modelgate-deb-sha256"} <= set(steps[0]["with"]), True, "pinned .deb")
    check_pin(steps[0]["uses"].split("@", 1)[1], "three lines: uses")
    eq(set(steps[0]["with"]) <= set(action_inputs()), True, "inputs exist")
    ws = os.path.join(d, "ws")
    write(ws, "models/good.safetensors", GOOD)
    code, outputs, log = run_action(MG, ws, steps[0]["with"])
    eq(code, 0, "three lines, clean models/\n" + log)
    write(ws, "models/evil.safetensors", HOSTILE)
    code, outputs, log = run_action(MG, ws, steps[0]["with"])
    eq(code, 1, "three lines, hostile file\n" + log)
    eq(os.path.isfile(os.path.join(ws, outputs["sarif-file"])), True, "SARIF written")


@test
def workflow_and_policy(d):
    wf = yaml.safe_load(CI["workflow"])
    eq(wf["permissions"].get("security-events"), "write", "permissions for upload-sarif")
    steps = wf["jobs"]["models"]["steps"]
    gate_steps = [s for s in steps if "/modelgate@" in s.get("uses", "")]
    eq(len(gate_steps), 1, "one modelgate step")
    gate_step = gate_steps[0]
    check_pin(gate_step["uses"].split("@", 1)[1], "workflow: uses")
    checkouts = [s for s in steps if s.get("uses", "").startswith("actions/checkout@")]
    eq(len(checkouts), 1, "one checkout step")
    eq(steps.index(checkouts[0]) < steps.index(gate_step), True, "checkout before the gate")
    # git-LFS: without lfs: true the job judges pointer files, not weights.
    eq(checkouts[0].get("with", {}).get("lfs"), True, "actions/checkout with lfs: true")
    if "container" in wf["jobs"]["models"]:
        # actions/checkout needs git and git-lfs on PATH for lfs: true (it fails
        # without them): a container job installs both before it.
        before = " ".join(s.get("run", "") for s in steps[:steps.index(checkouts[0])])
        for pkg in ("git", "git-lfs"):
            if not re.search(r"apt-get install[^\n]*\s" + re.escape(pkg) + r"(\s|$)", before):
                raise AssertionError(f"container job: no step installs {pkg} before checkout")
    eq(set(gate_step["with"]) <= set(action_inputs()), True, "inputs exist")
    upload = [s for s in steps if s.get("uses", "").startswith("github/codeql-action/upload-sarif@")]
    eq(len(upload), 1, "upload-sarif step")
    eq(steps.index(upload[0]) > steps.index(gate_step), True, "upload after the gate")
    eq(upload[0]["if"], "always()", "upload even when the gate fails")
    sarif = gate_step["with"].get("sarif-file", action_inputs()["sarif-file"]["default"])
    eq(upload[0]["with"]["sarif_file"], sarif, "uploads the file the Action writes")
    # The policy block is the file the workflow names; run the workflow's inputs.
    ws = os.path.join(d, "ws")
    policy_rel = gate_step["with"]["policy"]
    policy = write(ws, policy_rel, CI["policy"])
    key, pub = keypair(d, "release")
    shutil.copy(pub, os.path.join(os.path.dirname(policy), "release.pub"))
    lint(policy)
    sign(key, GOOD, os.path.join(ws, gate_step["with"]["path"], "model.safetensors"))
    code, outputs, log = run_action(MG, ws, gate_step["with"])
    eq(code, 0, "signed model under the documented policy\n" + log)
    write(ws, os.path.join(gate_step["with"]["path"], "unsigned.safetensors"), GOOD)
    code, outputs, log = run_action(MG, ws, gate_step["with"])
    eq(code, 1, "unsigned model\n" + log)
    with open(os.path.join(ws, sarif)) as f:
        results = json.load(f)["runs"][0]["results"]
    eq(sorted({r["ruleId"] for r in results}), ["MG-POLICY-SIGNATURE"], "SARIF rules")


# ---- version pins and git-LFS (README.md and docs/) ---------------------------------

def repo_tags():
    """Tags of this repository (none in a checkout without git metadata)."""
    code, out, _ = run(["git", "-C", ROOT, "tag", "--list"])
    return set(out.split()) if code == 0 else set()


TAGS = repo_tags()


def check_pin(ref, what):
    """A modelgate version in an example is a commit SHA (or the
    `<commit-sha>` placeholder the text explains), or a tag that exists."""
    if ref == "<commit-sha>" or re.fullmatch(r"[0-9a-f]{40}", ref) or ref in TAGS:
        return
    raise AssertionError(f"{what}: pins {ref!r}, which is neither a commit SHA nor an existing "
                         f"tag (tags: {sorted(TAGS) or 'none'})")


def pages():
    out = {"README.md": None}
    for n in sorted(os.listdir(os.path.join(ROOT, "docs"))):
        if n.endswith(".md"):
            out["docs/" + n] = None
    for rel in out:
        with open(os.path.join(ROOT, rel), encoding="utf-8") as f:
            out[rel] = f.read()
    return out


@test
def examples_pin_versions_that_exist(d):
    found = 0
    for rel, text in pages().items():
        for m in re.finditer(r"uses: [\w.-]+/modelgate@([^\s`'\"]+)", text):
            check_pin(m.group(1), f"{rel}: {m.group(0)}")
            found += 1
        for block in re.findall(r"```yaml\n(.*?)\n```", text, re.S):
            if "repos:" not in block or "modelgate" not in block:
                continue
            for repo in yaml.safe_load(block)["repos"]:
                if "modelgate" in repo["repo"]:
                    check_pin(str(repo["rev"]), f"{rel}: pre-commit rev")
                    found += 1
        for stale in ("@v0", "rev: v0.1.0"):
            tag = stale.split("@")[-1].split(": ")[-1]
            if tag not in TAGS and re.search(re.escape(stale) + r"(?![\w.])", text):
                raise AssertionError(f"{rel} pins {stale!r}, a tag that does not exist")
    if found < 4:
        raise AssertionError(f"only {found} modelgate pins found in the docs")
    ci = pages()["docs/ci-policy-check.md"]
    for words in ("No release of modelgate has been tagged yet", "git ls-remote"):
        if words not in ci:
            raise AssertionError(f"docs/ci-policy-check.md does not say how to pin ({words!r})")


@test
def docs_cover_git_lfs(d):
    p = pages()
    need = {
        "docs/ci-policy-check.md": ["lfs: true", "git lfs pull", "MG-FMT-LFS-POINTER",
                                    "git-LFS and pre-commit", "GIT_LFS_SKIP_SMUDGE"],
        "README.md": ["lfs: true", "git lfs", "MG-FMT-LFS-POINTER"],
        "docs/deployment-admission.md": ["git lfs pull", "MG-FMT-LFS-POINTER"],
        "docs/registry-gate.md": ["git lfs pull", "MG-FMT-LFS-POINTER"],
    }
    for rel, words in need.items():
        for w in words:
            if w not in p[rel]:
                raise AssertionError(f"{rel} does not mention {w!r}")
    # What the docs promise: a checkout without LFS objects fails the step
    # with MG-FMT-LFS-POINTER, not a pass.
    ws = os.path.join(d, "ws")
    write(ws, "models/model.safetensors",
          "version https://git-lfs.github.com/spec/v1\n"
          "oid sha256:4d7a214614ab2935c943f9e0ff69d22eadbb8f32b1258daaa5e2ca24d17e2393\n"
          "size 123456789\n")
    code, outputs, log = run_action(MG, ws, yaml.safe_load(CI["three-lines"])[0]["with"])
    eq(code, 1, "a pointer file fails the step\n" + log)
    with open(os.path.join(ws, outputs["sarif-file"])) as f:
        rules = {r["ruleId"] for r in json.load(f)["runs"][0]["results"]}
    eq("MG-FMT-LFS-POINTER" in rules, True, f"SARIF rules {sorted(rules)}")


# ---- deployment-admission.md --------------------------------------------------------

def by_kind(block):
    out = {}
    for doc in yaml.safe_load_all(block):
        out.setdefault(doc["kind"], []).append(doc)
    return out


POLICY_CM = by_kind(DEPLOY["k8s-pod"])["ConfigMap"][0]


def check_security(sc, pod_sc, what):
    uid, gid = dockerfile_uid()
    if not (sc.get("runAsNonRoot") or (pod_sc or {}).get("runAsNonRoot")):
        raise AssertionError(f"{what}: runAsNonRoot not set")
    eq(sc.get("runAsUser", uid), uid, f"{what}: runAsUser is the image's uid")
    eq(sc.get("runAsGroup", gid), gid, f"{what}: runAsGroup")
    eq(sc.get("readOnlyRootFilesystem"), True, f"{what}: readOnlyRootFilesystem")
    eq(sc.get("allowPrivilegeEscalation"), False, f"{what}: allowPrivilegeEscalation")
    eq(sc.get("capabilities", {}).get("drop"), ["ALL"], f"{what}: capabilities")


def mount_for(container, path):
    """The volume mount of `container` that holds absolute `path`."""
    best = None
    for m in container.get("volumeMounts", []):
        mp = m["mountPath"].rstrip("/")
        if path == mp or path.startswith(mp + "/"):
            if best is None or len(mp) > len(best["mountPath"]):
                best = m
    if best is None:
        raise AssertionError(f"{container['name']}: nothing mounted at {path}")
    return best


def local(uri):
    for scheme in ("modelgate://", "file://"):
        if uri.startswith(scheme):
            return uri[len(scheme):]
    return uri


def check_volumes(containers, volumes):
    names = {v["name"] for v in volumes}
    used = set()
    for c in containers:
        for m in c.get("volumeMounts", []):
            if m["name"] not in names:
                raise AssertionError(f"{c['name']} mounts undefined volume {m['name']}")
            used.add(m["name"])
    eq(used, names, "every volume is mounted")


def check_gate_container(c, volumes, server, src_arg, dest_arg):
    """The modelgate container reads SRC read-only, writes DEST (an emptyDir the
    server mounts read-only at the same path) and reads its policy from the
    ConfigMap."""
    vols = {v["name"]: v for v in volumes}
    eq(mount_for(c, local(src_arg)).get("readOnly"), True, "source mounted read-only")
    dm = mount_for(c, dest_arg)
    eq(dm["mountPath"], dest_arg, "DEST is the mount point")
    eq(dm.get("readOnly", False), False, "DEST writable for the gate")
    eq("emptyDir" in vols[dm["name"]], True, "DEST is an emptyDir")
    sm = mount_for(server, dest_arg)
    eq((sm["name"], sm["mountPath"], sm.get("readOnly")), (dm["name"], dest_arg, True),
       "the server reads the same volume, read-only")
    env = {e["name"]: e["value"] for e in c.get("env", [])}
    policy = env.get("MODELGATE_POLICY", "/etc/modelgate/policy.yaml")
    pm = mount_for(c, policy)
    eq(pm.get("readOnly"), True, "policy mounted read-only")
    cm = vols[pm["name"]].get("configMap", {}).get("name")
    eq(cm, POLICY_CM["metadata"]["name"], "policy volume is the documented ConfigMap")
    eq(os.path.relpath(policy, pm["mountPath"]) in POLICY_CM["data"], True, "policy key in the ConfigMap")
    return env


def simulate(d, container, args, volumes, model_files, extra_mounts=()):
    """Runs the entrypoint as the container would: every mount path becomes a
    directory under d/root; ConfigMaps are written out (with a generated
    key for release.pub); `model_files` land at the source path."""
    root = os.path.join(d, "root")
    vols = {v["name"]: v for v in volumes}
    key, pub = keypair(d, "release")
    with open(pub) as f:
        pub_pem = f.read()
    for m in list(container.get("volumeMounts", [])) + list(extra_mounts):
        target = root + m["mountPath"]
        os.makedirs(target, exist_ok=True)
        cm = vols.get(m["name"], {}).get("configMap")
        if cm:
            eq(cm["name"], POLICY_CM["metadata"]["name"], "ConfigMap name")
            for k, v in POLICY_CM["data"].items():
                write(target, k, pub_pem if k.endswith(".pub") else v)
    src = root + local(args[0])
    for name, data in model_files.items():
        if data is None:
            sign(key, GOOD, os.path.join(src, name))
        else:
            write(src, name, data)
    mapped = [a.replace("://", "://" + root, 1) if "://" in a else root + a for a in args]
    env = {e["name"]: root + e["value"] for e in container.get("env", [])}
    code, out, err = run([ENTRYPOINT, *mapped], env=env_with_mg(**env))
    return code, root + args[1], out + err


@test
def configmap_policy_lints(d):
    for k, v in POLICY_CM["data"].items():
        write(d, k, v)
    key, pub = keypair(d, "release")
    shutil.copy(pub, os.path.join(d, "release.pub"))
    lint(os.path.join(d, "policy.yaml"))


@test
def pod_with_pvc_source(d):
    pod = by_kind(DEPLOY["k8s-pod"])["Pod"][0]
    spec = pod["spec"]
    eq(len(spec["initContainers"]), 1, "one init container")
    gatec = spec["initContainers"][0]
    if "modelgate" not in gatec["image"]:
        raise AssertionError("image: " + gatec["image"])
    server = spec["containers"][0]
    check_volumes(spec["initContainers"] + spec["containers"], spec["volumes"])
    check_security(gatec["securityContext"], spec.get("securityContext"), "modelgate init container")
    eq(server["securityContext"].get("readOnlyRootFilesystem"), True, "server readOnlyRootFilesystem")
    eq(len(gatec["args"]), 2, "SRC DEST")
    check_gate_container(gatec, spec["volumes"], server, *gatec["args"])
    code, dest, log = simulate(d, gatec, gatec["args"], spec["volumes"],
                               {"model-00001-of-00002.safetensors": None,
                                "model-00002-of-00002.safetensors": None})
    eq(code, 0, "signed shards\n" + log)
    eq(sorted(os.listdir(dest)), ["model-00001-of-00002.safetensors",
                                  "model-00002-of-00002.safetensors"], "published")
    d2 = os.path.join(d, "unsigned")
    os.makedirs(d2)
    code, dest, log = simulate(d2, gatec, gatec["args"], spec["volumes"],
                               {"model.safetensors": None, "extra.safetensors": GOOD})
    eq(code, 1, "an unsigned shard\n" + log)
    eq(os.listdir(dest), [], "nothing published")


@test
def pod_chained_after_download(d):
    spec = by_kind(DEPLOY["k8s-chained"])["Pod"][0]["spec"]
    names = [c["name"] for c in spec["initContainers"]]
    eq(names, ["download", "modelgate"], "download first, then the gate")
    dl, gatec = spec["initContainers"]
    server = spec["containers"][0]
    check_volumes(spec["initContainers"] + spec["containers"], spec["volumes"])
    check_security(gatec["securityContext"], spec.get("securityContext"), "modelgate init container")
    if not re.match(r"^[a-z0-9]+://", dl["args"][0]):
        raise AssertionError("the downloader gets the remote URI")
    dm = mount_for(dl, dl["args"][1])
    eq(mount_for(gatec, gatec["args"][0])["name"], dm["name"], "the gate reads what was downloaded")
    check_gate_container(gatec, spec["volumes"], server, *gatec["args"])
    code, dest, log = simulate(d, gatec, gatec["args"], spec["volumes"], {"model.safetensors": None})
    eq(code, 0, "downloaded, signed\n" + log)
    eq(os.listdir(dest), ["model.safetensors"], "published")
    # Given the remote URI itself, the entrypoint refuses to download.
    code, out, err = run([ENTRYPOINT, dl["args"][0], "/nonexistent/models"],
                         env=env_with_mg(MODELGATE_POLICY="/nonexistent/policy.yaml"))
    eq(code, 2, "remote URI")


@test
def kserve_storage_container(d):
    kinds = by_kind(DEPLOY["kserve"])
    csc = kinds["ClusterStorageContainer"][0]
    isvc = kinds["InferenceService"][0]
    eq(csc["apiVersion"], "serving.kserve.io/v1alpha1", "CSC apiVersion")
    eq(isvc["apiVersion"], "serving.kserve.io/v1beta1", "ISVC apiVersion")
    c = csc["spec"]["container"]
    eq(c["name"], "storage-initializer", "KServe's container name")
    check_security(c["securityContext"], None, "storage-initializer")
    prefixes = [f["prefix"] for f in csc["spec"]["supportedUriFormats"]]
    uri = isvc["spec"]["predictor"]["model"]["storageUri"]
    eq(any(uri.startswith(p) for p in prefixes), True, "the storageUri selects this container")
    volumes = isvc["spec"]["predictor"]["volumes"]
    eq({m["name"] for m in c["volumeMounts"]}, {v["name"] for v in volumes},
       "the InferenceService declares the volumes the container mounts")
    # KServe adds the /mnt/models emptyDir to the init container and the server
    # (read-only) and calls it with `<storageUri> /mnt/models`.
    kserve_mount = {"name": "kserve-provision-location", "mountPath": "/mnt/models"}
    server = {"name": "kserve-container", "volumeMounts": [dict(kserve_mount, readOnly=True)]}
    all_vols = volumes + [{"name": "kserve-provision-location", "emptyDir": {}}]
    args = [uri, "/mnt/models"]
    check_gate_container(dict(c, volumeMounts=c["volumeMounts"] + [kserve_mount]), all_vols, server, *args)
    code, dest, log = simulate(d, c, args, all_vols, {"model.safetensors": None},
                               extra_mounts=[kserve_mount])
    eq(code, 0, "KServe call\n" + log)
    eq(os.listdir(dest), ["model.safetensors"], "published")


@test
def readme_links_the_integrations(d):
    with open(os.path.join(ROOT, "README.md")) as f:
        readme = f.read()
    if "## Integrations" not in readme:
        raise AssertionError("README has no Integrations section")
    section = readme[readme.index("## Integrations"):]
    for path in ("docs/registry-gate.md", "docs/ci-policy-check.md", "docs/deployment-admission.md",
                 "action.yml", ".pre-commit-hooks.yaml", "Dockerfile"):
        if path not in section:
            raise AssertionError(f"README's Integrations section does not mention {path}")
        eq(os.path.exists(os.path.join(ROOT, path)), True, path)


if __name__ == "__main__":
    sys.exit(main())
