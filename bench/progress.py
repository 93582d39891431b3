#!/usr/bin/env python3
"""What the progress line costs: `modelgate verify` of one signed file with
stderr on a pseudo-terminal (the line is drawn) against stderr piped (it is
not), same binary, same file, alternating runs, best of N.

usage: bench/progress.py BUILD_DIR [SIZE_MIB] [RUNS]
  cmake --build build-bench --target modelgate -j2 && bench/progress.py build-bench
The model is one tensor of SIZE_MIB (default 1024) zero bytes, sparse, in a
temp dir (the signed copy is written in full).
"""
import json
import os
import pty
import struct
import subprocess
import sys
import tempfile
import time

mg = os.path.join(sys.argv[1], "cli", "modelgate")
size = (int(sys.argv[2]) if len(sys.argv) > 2 else 1024) << 20
runs = int(sys.argv[3]) if len(sys.argv) > 3 else 7


def on_terminal(args):
    master, slave = pty.openpty()
    t = time.perf_counter()
    p = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=slave)
    os.close(slave)
    frames = 0
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:
            break
        if not chunk:
            break
        frames += chunk.count(b"\r")
    p.wait()
    os.close(master)
    return time.perf_counter() - t, frames


def piped(args):
    t = time.perf_counter()
    subprocess.run(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=False)
    return time.perf_counter() - t


with tempfile.TemporaryDirectory() as d:
    raw = os.path.join(d, "raw.safetensors")
    h = json.dumps({"w": {"dtype": "U8", "shape": [size], "data_offsets": [0, size]}}).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(raw, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        f.truncate(8 + len(h) + size)
    key, signed = os.path.join(d, "k"), os.path.join(d, "signed.safetensors")
    subprocess.run([mg, "keygen", "--out", key], check=True, stdout=subprocess.DEVNULL)
    subprocess.run([mg, "sign", "-q", "--key", key + ".key", "-o", signed, raw], check=True)
    args = [mg, "verify", "--pubkey", key + ".pub", signed]
    piped(args)  # page cache
    tty, pipe = [], []
    for _ in range(runs):
        pipe.append(piped(args))
        tty.append(on_terminal(args))
    best_tty = min(t for t, _ in tty)
    print(f"verify {size >> 20} MiB, best of {runs}: stderr piped {min(pipe):.3f} s, "
          f"on a terminal {best_tty:.3f} s ({tty[0][1]} frames), ratio {best_tty / min(pipe):.3f}")
