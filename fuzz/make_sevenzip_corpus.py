#!/usr/bin/env python3
"""Writes the seed corpus of fuzz_sevenzip: small 7z archives made by 7-Zip
itself (Debian's 7zip package, the 7zz program; ci/install-deps.sh) with
several codecs and filters, solid and not, an encrypted one, one with an
encrypted header, a small bomb, and truncated and corrupted copies.

usage: make_sevenzip_corpus.py [FUZZ_DIR]   (default: the directory of this script)
"""
import os
import subprocess
import sys
import tempfile

root = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
out = os.path.join(root, "corpus", "fuzz_sevenzip")
os.makedirs(out, exist_ok=True)
PKL = b"\x80\x02}q\x00X\x01\x00\x00\x00aq\x01K\x01s."

with tempfile.TemporaryDirectory() as d:
    os.makedirs(os.path.join(d, "m"))
    files = {"m/data.pkl": PKL * 30, "m/config.json": b'{"a": 1}', "empty": b""}
    for name, data in files.items():
        with open(os.path.join(d, name), "wb") as f:
            f.write(data)
    with open(os.path.join(d, "zeros"), "wb") as f:
        f.write(b"\0" * (1 << 21))

    def seven(name, *opts, inputs=("m", "empty")):
        path = os.path.join(d, name)
        subprocess.run(["7zz", "a", "-bso0", "-bsp0", "-mtm=off", "-mtc=off", "-mta=off", *opts,
                        path, *inputs], cwd=d, check=True)
        with open(path, "rb") as f:
            return f.read()

    seeds = {
        "lzma2.7z": seven("lzma2.7z", "-m0=LZMA2"),
        "lzma-nonsolid.7z": seven("lzma.7z", "-m0=LZMA", "-ms=off"),
        "ppmd.7z": seven("ppmd.7z", "-m0=PPMd"),
        "bzip2.7z": seven("bzip2.7z", "-m0=BZip2"),
        "deflate.7z": seven("deflate.7z", "-m0=Deflate"),
        "copy.7z": seven("copy.7z", "-m0=Copy"),
        "bcj2.7z": seven("bcj2.7z", "-mf=BCJ2", "-m0=LZMA2"),
        "delta.7z": seven("delta.7z", "-m0=Delta:4", "-m1=LZMA2"),
        "encrypted.7z": seven("enc.7z", "-psecret"),
        "encrypted-header.7z": seven("ench.7z", "-psecret", "-mhe=on"),
        "zeros-bomb.7z": seven("bomb.7z", "-m0=LZMA2", inputs=("zeros",)),
    }
    base = seeds["lzma2.7z"]
    seeds["truncated.7z"] = base[: len(base) // 2]
    flipped = bytearray(base)
    flipped[len(base) // 3] ^= 0x20
    seeds["flipped.7z"] = bytes(flipped)
    for name, data in seeds.items():
        with open(os.path.join(out, name), "wb") as f:
            f.write(data)
print(out, len(seeds), "seeds")
