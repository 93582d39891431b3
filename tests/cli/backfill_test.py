"""docs/registry-backfill.md: the Kubernetes Indexed Job manifest
(docs/k8s/backfill-job.yaml) is checked, then the Job is simulated locally:
N runs of the manifest's own command (--files-from, --shard I/N, -f jsonl,
-o) over a generated store; their union is the whole list with no file
twice, the merged summary is one unsharded run's, a rerun gives the same
shard, and a failed shard (exit 2) is one the manifest's shell fails. Also:
-f jsonl to standard output writes each file's line as it finishes.

    backfill_test.py MODELGATE SOURCE_DIR
"""
import json
import os
import re
import subprocess
import sys

import yaml

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from mgtest import eq, main, st_bytes, test, write  # noqa: E402

MG = os.path.abspath(sys.argv[1])
SRC = os.path.abspath(sys.argv[2])
MANIFEST = os.path.join(SRC, "docs", "k8s", "backfill-job.yaml")
POLICY = "apiVersion: modelgate/v1\nkind: Policy\nfailOn: high\n"


def load():
    with open(MANIFEST, encoding="utf-8") as f:
        return yaml.safe_load(f)


def scan_container(job):
    containers = job["spec"]["template"]["spec"]["containers"]
    eq([c["name"] for c in containers], ["scan"], "containers")
    return containers[0]


@test
def the_manifest_is_an_indexed_job_whose_shards_match_completions(d):
    job = load()
    eq(job["apiVersion"], "batch/v1", "apiVersion")
    eq(job["kind"], "Job", "kind")
    spec = job["spec"]
    eq(spec["completionMode"], "Indexed", "completionMode")
    n = spec["completions"]
    assert isinstance(n, int) and 1 <= n <= 65536, n
    assert 1 <= spec["parallelism"] <= n, spec["parallelism"]
    assert spec["backoffLimit"] >= n, "retries for every index"
    pod = spec["template"]["spec"]
    eq(pod["restartPolicy"], "Never", "restartPolicy")
    sc = pod["securityContext"]
    eq(sc["runAsNonRoot"], True, "runAsNonRoot")
    eq(sc["runAsUser"], 10001, "the image's uid")
    c = scan_container(job)
    env = {e["name"]: e["value"] for e in c["env"]}
    eq(env["MG_SHARDS"], str(n), "MG_SHARDS == completions")
    assert c["image"].startswith("ghcr.io/") and ":" in c["image"], c["image"]
    script = c["args"][0]
    for want in ('--shard "${JOB_COMPLETION_INDEX}/${MG_SHARDS}"', "--files-from", "-f jsonl",
                 "--policy /etc/modelgate/policy.yaml", '-o "/results/shard-${JOB_COMPLETION_INDEX}.jsonl"'):
        assert want in script, f"{want!r} not in {script!r}"
    eq(c["securityContext"]["readOnlyRootFilesystem"], True, "read-only root")
    eq(c["securityContext"]["allowPrivilegeEscalation"], False, "no privilege escalation")
    assert c["resources"]["limits"]["memory"] and c["resources"]["requests"]["cpu"], c["resources"]
    mounts = {m["name"]: m for m in c["volumeMounts"]}
    eq(mounts["store"].get("readOnly"), True, "store read-only")
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert "configMap" in volumes["policy"], "the policy comes from a ConfigMap, not the store"
    init = pod["initContainers"][0]
    assert "/work/files.jsonl" in " ".join(init["command"]), init["command"]
    # The doc quotes the same command.
    with open(os.path.join(SRC, "docs", "registry-backfill.md"), encoding="utf-8") as f:
        doc = f.read()
    assert '--shard "${JOB_COMPLETION_INDEX}/${MG_SHARDS}"' in doc


def store(d):
    """A store with clean and hostile files, a directory holding a FIFO; the list
    mixes plain and JSON lines."""
    root = os.path.join(d, "store")
    good = st_bytes({"w": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]}}, b"abcd")
    bad = good + b"trailing"
    listed = []
    for i in range(40):
        name = f"models/m{i:02d}.safetensors"
        write(root, name, bad if i % 5 == 0 else good)
        listed.append(name if i % 2 else json.dumps({"path": name, "size": 1}))
    write(root, "pickles/evil.pkl", b"\x80\x02cos\nsystem\nq\x00X\x02\x00\x00\x00idq\x01\x85q\x02Rq\x03.")
    listed.append("pickles/evil.pkl")
    for k in range(3):
        write(root, f"repo/sub/f{k}.safetensors", good)
    listed.append("repo")
    # Found by the walk, a FIFO is a rejected entry (MG-FS-SPECIAL-FILE); a
    # FIFO named as an operand could not be judged (exit 2).
    os.mkfifo(os.path.join(root, "repo", "sub", "pipe.safetensors"))
    lst = write(d, "work/files.jsonl", "\n".join(listed) + "\n")
    return root, lst


def run_index(d, root, lst, index, shards, results):
    """The manifest's own shell command, with its paths mapped to d."""
    script = scan_container(load())["args"][0]
    script = (script.replace("/store", root).replace("/work/files.jsonl", lst)
              .replace("/etc/modelgate/policy.yaml", os.path.join(d, "policy.yaml"))
              .replace("/results", results))
    env = dict(os.environ, JOB_COMPLETION_INDEX=str(index), MG_SHARDS=str(shards),
               PATH=os.path.dirname(MG) + os.pathsep + os.environ["PATH"])
    p = subprocess.run(["/bin/sh", "-c", script], env=env, capture_output=True, timeout=120)
    return p.returncode, p.stderr.decode()


def read_jsonl(path):
    with open(path, encoding="utf-8") as f:
        lines = [json.loads(x) for x in f.read().splitlines()]
    assert lines and "summary" in lines[-1], f"{path}: last line is the summary"
    assert all("summary" not in x for x in lines[:-1]), path
    return lines[:-1], lines[-1]


@test
def n_shards_cover_the_list_once_and_merge_to_one_run(d):
    write(d, "policy.yaml", POLICY)
    root, lst = store(d)
    results = os.path.join(d, "results")
    os.makedirs(results)
    n = 4
    for i in range(n):
        rc, err = run_index(d, root, lst, i, n, results)
        eq(rc, 0, f"index {i} (exit 1 of modelgate is a finished shard)\n{err}")
    files, total = [], {"files": 0, "passed": 0, "rejected": 0, "errors": 0}
    for i in range(n):
        got, summary = read_jsonl(os.path.join(results, f"shard-{i}.jsonl"))
        eq(summary["summary"]["files"], len(got), f"shard {i} summary counts its lines")
        files += got
        for k in total:
            total[k] += summary["summary"][k]
    paths = [f["path"] for f in files]
    eq(len(paths), len(set(paths)), "no file twice")
    one = subprocess.run([MG, "check", "--policy", os.path.join(d, "policy.yaml"), "--files-from", lst,
                          "-f", "jsonl", "-q"], cwd=root, capture_output=True, timeout=120)
    eq(one.returncode, 1, "the unsharded run rejects")
    lines = [json.loads(x) for x in one.stdout.decode().splitlines()]
    whole = {f["path"]: f["verdict"] for f in lines[:-1]}
    eq(sorted(paths), sorted(whole), "union of the shards == the whole list")
    eq({f["path"]: f["verdict"] for f in files}, whole, "verdicts")
    eq(total, lines[-1]["summary"], "merged summary")
    eq(len(whole), 40 + 1 + 3 + 1, "every listed file, the directory walked (its FIFO too)")
    assert all(n_ > 0 for n_ in [total["passed"], total["rejected"]]), total
    # A rerun of an index gives the same shard.
    with open(os.path.join(results, "shard-2.jsonl"), "rb") as f:
        before = f.read()
    eq(run_index(d, root, lst, 2, n, results)[0], 0, "rerun")
    with open(os.path.join(results, "shard-2.jsonl"), "rb") as f:
        eq(f.read(), before, "rerun output")


@test
def a_shard_that_cannot_judge_fails_its_pod(d):
    write(d, "policy.yaml", POLICY)
    root, lst = store(d)
    with open(lst, "a", encoding="utf-8") as f:
        f.write("models/missing.safetensors\n")
    results = os.path.join(d, "results")
    os.makedirs(results)
    codes = [run_index(d, root, lst, i, 2, results)[0] for i in range(2)]
    eq(sorted(codes), [0, 2], "the index holding the missing file exits 2, the other 0")


@test
def jsonl_to_stdout_streams_each_file_as_it_finishes(d):
    good = write(d, "a.safetensors",
                 st_bytes({"w": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]}}, b"abcd"))
    # The second operand is standard input: the first file's line must come
    # out before anything is written there.
    p = subprocess.Popen([MG, "scan", "-f", "jsonl", "-q", good, "-"], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE)
    first = json.loads(p.stdout.readline())
    eq(first["path"], good, "first line before stdin was written")
    p.stdin.write(b"\x80\x02K\x01.")
    p.stdin.close()
    rest = [json.loads(x) for x in p.stdout.read().splitlines()]
    eq(p.wait(timeout=60), 0, "exit")
    eq([r.get("path") for r in rest[:-1]], ["-"], "then standard input")
    eq(rest[-1]["summary"]["files"], 2, "summary")
    eq(rest[-1]["schema"], "modelgate.report/v1", "the last line has the report's head")


@test
def list_errors_are_usage_errors_naming_the_line(d):
    lst = write(d, "l", "a\n\nb\n")
    p = subprocess.run([MG, "scan", "--files-from", lst], capture_output=True, timeout=60)
    eq(p.returncode, 2, "exit")
    assert re.search(rb"line 2 is empty", p.stderr), p.stderr
    p = subprocess.run([MG, "scan", "--shard", "4/4", "x"], capture_output=True, timeout=60)
    eq(p.returncode, 2, "shard out of range")


sys.exit(main(prefix="mg-backfill-"))
