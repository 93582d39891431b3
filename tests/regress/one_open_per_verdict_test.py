#!/usr/bin/env python3
"""Issue 9 point 4, "one open per verdict": each model path is opened exactly
once per run of scan, check (a policy with exceptions and required
signatures), scan --policy and verify, so the scan, the signature and the
file SHA-256 that exceptions are pinned to all read one descriptor. Before
the fix, check opened a signed file three times.

usage: one_open_per_verdict_test.py PATH/TO/modelgate

Runs the program under `strace -f -e trace=open,openat,openat2,creat` and
counts the calls that name each model path. strace comes from
ci/install-deps.sh; without it the test fails (never skips).
"""
import hashlib
import os
import re
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from mgtest import eq, main, run_text, st_bytes, test, write  # noqa: E402

MG = os.path.abspath(sys.argv[1])
STRACE = shutil.which("strace")
if STRACE is None:
    print("FAIL strace is not installed: run `bash ci/install-deps.sh`")
    sys.exit(1)

GOOD = st_bytes(
    {"__metadata__": {"format": "pt"},
     "w": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]}},
    bytes(16))
# A pickle importing a module nobody allowlisted: a high finding that an
# exception pinned to the file's SHA-256 can waive.
UNKNOWN_IMPORT = b"\x80\x02cmylib.layers\nDense\nq\x00."
OPEN_CALL = re.compile(r'^(?:\d+ +)?(open|openat|openat2|creat)\((?:[A-Z_]+|\d+), "([^"]*)", ([^,)]*)')


def run(*args):
    return run_text([MG, *args])


def traced(d, *args):
    """(exit code, stdout, [(syscall, path, flags)]) of one traced run."""
    log = os.path.join(d, "strace.log")
    # LeakSanitizer cannot run under ptrace and fails the exit code of a
    # sanitized build; leaks are checked by the untraced tests.
    asan = os.environ.get("ASAN_OPTIONS", "")
    env = dict(os.environ, ASAN_OPTIONS=(asan + ":" if asan else "") + "detect_leaks=0")
    p = subprocess.run([STRACE, "-f", "-qq", "-s", "65535", "-o", log,
                        "-e", "trace=open,openat,openat2,creat", MG, *args],
                       capture_output=True, timeout=120, env=env)
    calls = []
    with open(log, encoding="utf-8", errors="replace") as f:
        for line in f:
            m = OPEN_CALL.match(line)
            if m:
                calls.append((m.group(1), m.group(2), m.group(3)))
    os.unlink(log)
    if not calls:
        raise AssertionError("strace saw no open at all (is ptrace allowed?): " + p.stderr.decode())
    return p.returncode, p.stdout.decode("utf-8", "replace"), calls


def opens_of(calls, path):
    return [c for c in calls if c[1] == path]


def signed_setup(d):
    """A signed safetensors file, its key, and a policy requiring a signature
    by that key with an exception pinned to the file's SHA-256."""
    eq(run("keygen", "--out", os.path.join(d, "k"))[0], 0, "keygen")
    unsigned = write(d, "u.safetensors", GOOD)
    signed = os.path.join(d, "m", "signed.safetensors")
    os.makedirs(os.path.dirname(signed))
    code, _, err = run("sign", "--key", os.path.join(d, "k.key"), "-o", signed, unsigned)
    eq(code, 0, "sign: " + err)
    with open(signed, "rb") as f:
        sha = hashlib.sha256(f.read()).hexdigest()
    pol = write(d, "policy.yaml", (
        "apiVersion: modelgate/v1\nkind: Policy\nfailOn: high\n"
        "signatures:\n  required: true\n  keys:\n    - name: k\n      file: k.pub\n"
        "exceptions:\n  - {id: MG-ST-GAP, sha256: \"" + sha + "\", reason: pinned, "
        "expires: 2099-01-31}\n").encode())
    return signed, pol


@test
def scan_opens_a_named_file_once(d):
    p = write(d, "a.safetensors", GOOD)
    code, _, calls = traced(d, "scan", p)
    eq(code, 0, "exit")
    eq(len(opens_of(calls, p)), 1, "opens of " + p)


@test
def scan_of_a_tree_opens_each_file_once_without_following(d):
    a = write(d, "m/a.safetensors", GOOD)
    b = write(d, "m/sub/b.pkl", UNKNOWN_IMPORT)
    code, _, calls = traced(d, "scan", os.path.join(d, "m"))
    eq(code, 1, "exit (b.pkl has an unknown import)")
    for p in (a, b):
        got = opens_of(calls, p)
        eq(len(got), 1, "opens of " + p)
        if "O_NOFOLLOW" not in got[0][2]:
            raise AssertionError("a walked file is opened without O_NOFOLLOW: " + repr(got))


@test
def check_with_exceptions_and_required_signatures_opens_once(d):
    signed, pol = signed_setup(d)
    code, out, calls = traced(d, "check", "--policy", pol, "-f", "json", signed)
    eq(code, 0, "signed file passes: " + out)
    eq(len(opens_of(calls, signed)), 1, "opens of " + signed + " under check")
    code, out, calls = traced(d, "scan", "--policy", pol, signed)
    eq(code, 0, "scan --policy: " + out)
    eq(len(opens_of(calls, signed)), 1, "opens under scan --policy")
    code, out, calls = traced(d, "check", "--policy", pol, os.path.dirname(signed))
    eq(code, 0, "check of the directory: " + out)
    eq(len(opens_of(calls, signed)), 1, "opens under check of a tree")


@test
def verify_opens_once(d):
    signed, _ = signed_setup(d)
    code, out, calls = traced(d, "verify", "--pubkey", os.path.join(d, "k.pub"), signed)
    eq(code, 0, "verify: " + out)
    eq(len(opens_of(calls, signed)), 1, "opens under verify")


@test
def exception_pinned_to_the_sha256_of_the_one_descriptor(d):
    pk = write(d, "m/w.pkl", UNKNOWN_IMPORT)
    sha = hashlib.sha256(UNKNOWN_IMPORT).hexdigest()

    def policy(digest):
        return write(d, "p-" + digest[:8] + ".yaml", (
            "apiVersion: modelgate/v1\nkind: Policy\nfailOn: high\n"
            "exceptions:\n  - {id: MG-PK-UNKNOWN-IMPORT, sha256: \"" + digest + "\", "
            "reason: reviewed, expires: 2099-01-31}\n").encode())
    code, out, calls = traced(d, "check", "--policy", policy(sha), pk)
    eq(code, 0, "the exception for this file's digest waives its finding: " + out)
    eq(len(opens_of(calls, pk)), 1, "opens of the pickle under check")
    # The same policy pinned to another digest waives nothing: the digest
    # that decided was this file's.
    code, out, _ = traced(d, "check", "--policy", policy("0" * 64), pk)
    eq(code, 1, "an exception for another digest: " + out)


@test
def hugging_face_snapshot_link_opens_its_blob_once(d):
    repo = os.path.join(d, "hub", "models--org--m")
    blob = write(d, "hub/models--org--m/blobs/" + hashlib.sha256(GOOD).hexdigest(), GOOD)
    snap = os.path.join(repo, "snapshots", "0123abcd")
    os.makedirs(snap)
    link = os.path.join(snap, "model.safetensors")
    os.symlink("../../blobs/" + os.path.basename(blob), link)
    code, out, calls = traced(d, "scan", "-f", "json", snap)
    eq(code, 0, "snapshot judged as its blob: " + out)
    got = opens_of(calls, blob)
    eq(len(got), 1, "opens of the blob")
    if "O_NOFOLLOW" not in got[0][2]:
        raise AssertionError("the blob is opened without O_NOFOLLOW: " + repr(got))
    eq(opens_of(calls, link), [], "the link itself is never opened")


if __name__ == "__main__":
    sys.exit(main("mg-one-open-"))
