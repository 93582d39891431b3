#!/usr/bin/env python3
"""Writes the seed corpus of fuzz_sevenzip: small 7z archives made by 7-Zip
itself (Debian's 7zip package, the 7zz program; ci/install-deps.sh) with
several codecs and filters, solid and not, an encrypted one, one with an
encrypted header, a small bomb, and truncated and corrupted copies; and
archives crafted byte by byte with correct CRCs whose headers declare what
sevenzip_header.h refuses before libarchive reads them (2^30 files or
folders, 10^8 packed streams or substreams, a 4 GiB dictionary, a 1 TiB
encoded header, a reversed bind pair),
beside a crafted one that reads.

usage: make_sevenzip_corpus.py [FUZZ_DIR]   (default: the directory of this script)
"""
import os
import subprocess
import sys
import tempfile
import zlib

root = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
out = os.path.join(root, "corpus", "fuzz_sevenzip")
os.makedirs(out, exist_ok=True)
PKL = b"\x80\x02}q\x00X\x01\x00\x00\x00aq\x01K\x01s."



def num(v):
    """7z's variable-length UINT64."""
    n = 0
    while n < 8 and v >= 1 << (7 * (n + 1)):
        n += 1
    if n == 8:
        return b"\xff" + v.to_bytes(8, "little")
    return bytes([((0xFF00 >> n) & 0xFF) | (v >> (8 * n))]) + (v & ((1 << (8 * n)) - 1)).to_bytes(n, "little")


def archive(packed, header):
    """A start header (with its CRC) for `packed` streams and a next header."""
    tail = (len(packed).to_bytes(8, "little") + len(header).to_bytes(8, "little")
            + zlib.crc32(header).to_bytes(4, "little"))
    return b"7z\xbc\xaf\x27\x1c\x00\x04" + zlib.crc32(tail).to_bytes(4, "little") + tail + packed + header


def names(*ns):
    return b"\x00" + b"".join(n.encode("utf-16-le") + b"\x00\x00" for n in ns)


def copy_archive(files, coder=b"\x01\x00", folder=None):
    """One folder per file; `coder` replaces each folder's coder record,
    `folder` the whole folder record (its unpack sizes then repeat)."""
    packed = b"".join(data for _, data in files)
    h = b"\x01\x04\x06" + num(0) + num(len(files)) + b"\x09"
    h += b"".join(num(len(data)) for _, data in files)
    h += b"\x00\x07\x0b" + num(len(files)) + b"\x00"
    h += b"".join(folder if folder else num(1) + coder for _ in files)
    h += b"\x0c" + b"".join(num(len(data)) * (2 if folder else 1) for _, data in files)
    h += b"\x0a\x01" + b"".join(zlib.crc32(data).to_bytes(4, "little") for _, data in files)
    h += b"\x00\x08\x00\x00\x05" + num(len(files))
    n = names(*(name for name, _ in files))
    h += b"\x11" + num(len(n)) + n + b"\x00\x00"
    return archive(packed, h)


def crafted():
    data = PKL * 3
    encoded = (b"\x17\x06" + num(0) + num(1) + b"\x09" + num(16) + b"\x00\x07\x0b" + num(1)
               + b"\x00" + num(1) + b"\x21\x21\x01\x10\x0c" + num(1 << 40) + b"\x00\x00")
    return {
        "crafted-copy.7z": copy_archive([("a.pkl", data), ("b.json", b'{"a": 1}')]),
        "claims-2p30-files.7z": archive(b"", b"\x01\x05" + num(1 << 30) + b"\x00\x00"),
        "claims-2p30-folders.7z": archive(
            b"", b"\x01\x04\x07\x0b" + num(1 << 30) + b"\x00\x01\x01\x00\x0c\x00\x00\x00"),
        "claims-4gib-lzma2-dictionary.7z": copy_archive([("a.pkl", data)], coder=b"\x21\x21\x01\x28"),
        "claims-4gib-lzma-dictionary.7z": copy_archive(
            [("a.pkl", data)], coder=b"\x23\x03\x01\x01\x05\x5d\xff\xff\xff\xff"),
        "claims-1tib-encoded-header.7z": archive(bytes(16), encoded),
        # 10^8 (libarchive's cap) packed streams and substreams: it callocs
        # 1.6 GB and 1.3 GB for them before reading one.
        "claims-1e8-pack-streams.7z": archive(
            b"", b"\x01\x04\x06" + num(0) + num(10**8) + b"\x09\x00\x00"),
        "claims-1e8-substreams.7z": archive(
            data, b"\x01\x04\x06" + num(0) + num(1) + b"\x09" + num(len(data))
            + b"\x00\x07\x0b\x01\x00\x01\x01\x00\x0c" + num(len(data))
            + b"\x00\x08\x0d" + num(10**8) + b"\x09\x00\x00"),
        # Copy and BCJ with BCJ's output bound to Copy's input.
        "reversed-bind-pair.7z": copy_archive(
            [("a.pkl", data)], folder=b"\x02\x01\x00\x04\x03\x03\x01\x03\x00\x01"),
    }


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
    for i in range(30):
        with open(os.path.join(d, "m", "w%02d.pkl" % i), "wb") as f:
            f.write(PKL * (i + 1))
    # Enough names that 7zz compresses the header (a kEncodedHeader).
    seeds["encoded-header.7z"] = seven("encoded.7z", "-m0=LZMA2", inputs=("m",))
    base = seeds["lzma2.7z"]
    seeds["truncated.7z"] = base[: len(base) // 2]
    flipped = bytearray(base)
    flipped[len(base) // 3] ^= 0x20
    seeds["flipped.7z"] = bytes(flipped)
    seeds.update(crafted())
    for name, data in seeds.items():
        with open(os.path.join(out, name), "wb") as f:
            f.write(data)
print(out, len(seeds), "seeds")
