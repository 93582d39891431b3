"""kill -9 during `modelgate sign` (issue 11 point 8): runs on a ~160 MB
file, each killed with SIGKILL after a random delay spread over a whole
signing run, until 20 kills have hit a running sign; after every kill the directory holds no temporary file, the
input is byte-identical, and the output is either absent or a complete file
that verifies. Before AtomicOutput, 9 of 20 such kills left 0.1-1 GB
`.mg-tmp-*` files behind.

    kill_sign_test.py MODELGATE
"""
import hashlib
import os
import random
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from mgtest import eq, main, run_text, st_bytes, test  # noqa: E402

MG = os.path.abspath(sys.argv[1])
KILLS = 20
TENSORS = 8
TENSOR_BYTES = 20 << 20  # 8 x 20 MiB = 160 MiB


def model(d):
    header, data, at = {}, bytearray(), 0
    block = os.urandom(1 << 20)
    for i in range(TENSORS):
        header[f"layer{i}.weight"] = {"dtype": "U8", "shape": [TENSOR_BYTES], "data_offsets": [at, at + TENSOR_BYTES]}
        at += TENSOR_BYTES
        data += bytes([i]) + block[1:] + block * (TENSOR_BYTES // len(block) - 1)
    path = os.path.join(d, "m.safetensors")
    with open(path, "wb") as f:
        f.write(st_bytes(header, bytes(data)))
    return path


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def temps(d):
    return sorted(n for n in os.listdir(d) if ".mg-tmp" in n)


class KillClock:
    """Picks kill moments inside a signing run. The window is the shortest
    run seen so far: the first, timed run is often slower than later ones
    (cold page cache, a sanitizer build, a busy CI neighbour), and a window
    sized on it sends kills at processes that have already finished. Runs
    that finish before their kill are timed exactly and shrink the window."""

    def __init__(self, first_run, rng):
        self.shortest = first_run
        self.rng = rng

    def run(self, argv):
        """Starts argv, SIGKILLs it at a random moment in the window;
        returns (killed while running, exit code, delay)."""
        delay = self.rng.uniform(0.0, self.shortest)
        start = time.monotonic()
        p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            p.wait(timeout=delay)
            self.shortest = min(self.shortest, time.monotonic() - start)
            return False, p.returncode, delay
        except subprocess.TimeoutExpired:
            p.send_signal(signal.SIGKILL)
            p.wait()
            return True, p.returncode, delay


def verifies(path, pub):
    code, out, err = run_text([MG, "verify", "--pubkey", pub, path], timeout=300)
    return code == 0


@test
def kill_9_at_random_moments_leaves_no_temp_file(d):
    keys = os.path.join(d, "keys", "k")
    os.makedirs(os.path.dirname(keys))
    code, _, err = run_text([MG, "keygen", "--out", keys])
    eq(code, 0, "keygen\n" + err)
    work = os.path.join(d, "work")
    os.makedirs(work)
    src = model(work)
    want = sha256(src)
    out = os.path.join(work, "signed.safetensors")

    # One whole run: how long signing takes here, so the kills spread over it.
    start = time.monotonic()
    code, _, err = run_text([MG, "sign", "--quiet", "--key", keys + ".key", "-o", out, src], timeout=600)
    full = time.monotonic() - start
    eq(code, 0, "sign\n" + err)
    eq(verifies(out, keys + ".pub"), True, "the complete run's output verifies")
    os.unlink(out)
    print(f"one signing run: {full:.2f} s", flush=True)

    clock = KillClock(full, random.Random(int.from_bytes(os.urandom(8), "little")))
    killed_running = 0
    run = -1
    # Until KILLS kills have hit a running sign; a run that finished first
    # still has its directory checked, and the attempts are bounded.
    while killed_running < KILLS and run < 3 * KILLS:
        run += 1
        if killed_running == KILLS // 2 and not os.path.exists(out):
            # The second half replaces an existing output (AtomicOutput's
            # link-to-temp-then-rename path).
            code, _, err = run_text([MG, "sign", "--quiet", "--key", keys + ".key", "-o", out, src], timeout=600)
            eq(code, 0, err)
        had_output = os.path.exists(out)
        killed, rc, delay = clock.run([MG, "sign", "--quiet", "--key", keys + ".key", "-o", out, src])
        killed_running += killed
        left = temps(work)
        present = sorted(os.listdir(work))
        what = "killed" if killed else "finished before"
        print(f"run {run:2d}: {what} kill at {delay:.3f} s, exit {rc}, files {present}", flush=True)
        # The one documented window (AtomicOutput: between linking the
        # complete file under a temp name and renaming it over an existing
        # output) leaves a complete, signed temp; anything else is a bug.
        for name in left:
            if not (had_output and verifies(os.path.join(work, name), keys + ".pub")):
                raise AssertionError(f"run {run}: kill left temporary file {name} "
                                     f"({os.path.getsize(os.path.join(work, name))} bytes)")
        eq(sha256(src), want, f"run {run}: input unchanged")
        if os.path.exists(out):
            eq(verifies(out, keys + ".pub"), True, f"run {run}: the output in place is complete")
        elif had_output:
            raise AssertionError(f"run {run}: the existing output vanished")
        if left:
            # The next run's AtomicOutput removes it (its writer is dead).
            code, _, err = run_text([MG, "sign", "--quiet", "--key", keys + ".key", "-o", out, src], timeout=600)
            eq(code, 0, err)
            eq(temps(work), [], f"run {run}: the next run swept {left}")
    # The kills must really have hit running processes, not only finished ones.
    if killed_running < KILLS:
        raise AssertionError(f"only {killed_running} of {run + 1} kills hit a running sign")
    print(f"{killed_running} of {run + 1} kills hit a running sign", flush=True)


@test
def kill_9_in_place_keeps_old_or_new_file(d):
    keys = os.path.join(d, "k")
    code, _, err = run_text([MG, "keygen", "--out", keys])
    eq(code, 0, "keygen\n" + err)
    work = os.path.join(d, "work")
    os.makedirs(work)
    src = model(work)
    original = sha256(src)
    start = time.monotonic()
    probe = os.path.join(d, "probe.safetensors")
    code, _, err = run_text([MG, "sign", "--quiet", "--key", keys + ".key", "-o", probe, src], timeout=600)
    full = time.monotonic() - start
    eq(code, 0, err)
    os.unlink(probe)
    clock = KillClock(full, random.Random(int.from_bytes(os.urandom(8), "little")))
    for run in range(KILLS // 4):
        before = sha256(src)
        clock.run([MG, "sign", "--quiet", "--key", keys + ".key", src])
        eq(temps(work), [], f"in place run {run}: temp files")
        now = sha256(src)
        if now != before:
            eq(verifies(src, keys + ".pub"), True, f"in place run {run}: a replaced file is the complete signed one")
        elif before == original:
            eq(verifies(src, keys + ".pub"), False, f"in place run {run}: the original is unsigned")


sys.exit(main(prefix="mg-kill-sign-"))
