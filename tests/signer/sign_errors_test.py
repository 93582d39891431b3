"""`modelgate sign` refuses what verify would reject and names the output
on a write error (issue 11 point 8): exit 2, nothing written, the input
intact, no temporary file left.

    sign_errors_test.py MODELGATE
"""
import os
import resource
import signal
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from mgtest import eq, main, run_text, st_bytes, test, write  # noqa: E402

MG = os.path.abspath(sys.argv[1])


def keygen(d):
    keys = os.path.join(d, "keys", "k")
    os.makedirs(os.path.dirname(keys))
    code, _, err = run_text([MG, "keygen", "--out", keys])
    eq(code, 0, "keygen\n" + err)
    return keys


def read(path):
    with open(path, "rb") as f:
        return f.read()


def contains(text, part, what):
    if part not in text:
        raise AssertionError(f"{what}: {part!r} not in {text!r}")


@test
def a_million_tensors_are_refused_before_a_header_verify_rejects(d):
    # The case: signing adds a 64-hex digest per tensor, so a header
    # of ~70 MB (under verify's 100 MB max_header_bytes) would become ~150 MB.
    keys = keygen(d)
    work = os.path.join(d, "work")
    n = 1_000_000
    header = {f"t{i:07d}": {"dtype": "U8", "shape": [1], "data_offsets": [i, i + 1]} for i in range(n)}
    src = write(work, "many.safetensors", st_bytes(header, bytes(n)))
    before = read(src)
    code, out, err = run_text([MG, "verify", "--pubkey", keys + ".pub", src], timeout=300)
    contains(err + out, "MG-SIG-MISSING", "the unsigned input parses under the default limits")
    for argv in (["-o", os.path.join(work, "signed.safetensors")], []):
        code, _, err = run_text([MG, "sign", "--quiet", "--key", keys + ".key"] + argv + [src], timeout=300)
        eq(code, 2, "sign exit code\n" + err)
        contains(err, "max_header_bytes", "names the limit")
        contains(err, "over the limit", "says by how much")
        contains(err, "1000000 tensors", "says why")
        eq(sorted(os.listdir(work)), ["many.safetensors"], "nothing written")
        eq(read(src), before, "input intact")


def limited(max_bytes):
    def preexec():
        # What `ulimit -f` does; SIGXFSZ ignored (as a shell with `trap ''
        # XFSZ` would) so write() fails with EFBIG instead of the kernel
        # killing the process: the error path ENOSPC also takes.
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (max_bytes, max_bytes))
    return preexec


@test
def a_write_error_names_the_output_and_exits_2(d):
    keys = keygen(d)
    work = os.path.join(d, "work")
    size = 4 << 20
    src = write(work, "m.safetensors",
                st_bytes({"w": {"dtype": "U8", "shape": [size], "data_offsets": [0, size]}}, os.urandom(size)))
    before = read(src)
    for target in (os.path.join(work, "signed.safetensors"), None):
        argv = [MG, "sign", "--quiet", "--key", keys + ".key"] + (["-o", target] if target else []) + [src]
        p = subprocess.run(argv, capture_output=True, timeout=120, preexec_fn=limited(1 << 20))
        err = p.stderr.decode("utf-8", "replace")
        eq(p.returncode, 2, f"sign under RLIMIT_FSIZE\n{err}")
        contains(err, f"cannot write {target or src}: File too large", "names the output and the errno")
        eq(sorted(os.listdir(work)), ["m.safetensors"], "no temp file, no output")
        eq(read(src), before, "input intact")


sys.exit(main(prefix="mg-sign-errors-"))
