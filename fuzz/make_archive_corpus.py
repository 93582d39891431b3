#!/usr/bin/env python3
"""Writes seed corpora for fuzz_tar and fuzz_decompress (python3 standard library).

usage: make_archive_corpus.py [FUZZ_DIR]   (default: the directory of this script)

fuzz_tar: tars in ustar, GNU and PAX formats (long names, long links, PAX
path/size records, a global header), links, devices, and the layout of
torch's legacy tar ("storages", "tensors", "pickle" with their pickles and
raw records), plus hostile variants. fuzz_decompress: gzip, zlib, bzip2, xz
and lzma-alone streams of a small pickle, concatenated and trailing-data
variants; zstd and lz4 frames made by the zstd, pzstd and lz4 programs
(Debian's zstd and lz4 packages, ci/install-deps.sh) with skippable,
concatenated, checksum and window variants; joblib < 0.10's ZF container
(write_zfile's layout) with a length mismatch. Trailing zero records are
trimmed to keep the seeds small.
"""
import bz2
import gzip
import io
import lzma
import os
import pickle
import struct
import subprocess
import sys
import tarfile
import zlib

root = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
PKL = b"\x80\x02}q\x00X\x01\x00\x00\x00aq\x01K\x01s."


def tar_bytes(members, fmt=tarfile.PAX_FORMAT, pax_headers=None):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=fmt, pax_headers=pax_headers or {}) as t:
        for m in members:
            name, data = m[0], m[1]
            info = tarfile.TarInfo(name)
            info.mtime = 0
            if len(m) > 2:
                info.type, info.linkname = m[2], m[3]
                t.addfile(info)
            else:
                info.size = len(data)
                t.addfile(info, io.BytesIO(data))
    raw = buf.getvalue().rstrip(b"\0")
    return raw + b"\0" * (1024 + (-len(raw)) % 512)


def torch_members():
    storages = pickle.dumps(1, protocol=2)
    args = b"\x80\x02X\x01\x00\x00\x000q\x00X\x03\x00\x00\x00cpuq\x01ctorch\nFloatStorage\nq\x02\x87q\x03."
    storages += args + struct.pack("<q", 2) + struct.pack("<2f", 1.0, 2.0)
    storages += pickle.dumps([], protocol=2)
    tensors = pickle.dumps(1, protocol=2)
    targs = b"\x80\x02X\x01\x00\x00\x001q\x00X\x01\x00\x00\x000q\x01ctorch\nFloatTensor\nq\x02\x87q\x03."
    tensors += targs + struct.pack("<i", 1) + b"\0" * 4 + struct.pack("<q", 2) + struct.pack("<q", 1) + struct.pack("<q", 0)
    obj = b"\x80\x02}q\x00X\x01\x00\x00\x00wq\x01X\x01\x00\x00\x001q\x02Qs."
    return [("pickle", obj), ("tensors", tensors), ("storages", storages)]


def tool(*argv, data):
    """What a compression program writes for `data` on stdin."""
    return subprocess.run(list(argv), input=data, stdout=subprocess.PIPE, check=True).stdout


def skippable(body, magic=0x184D2A50):
    return struct.pack("<II", magic, len(body)) + body


def zfile(data, declared=None):
    """joblib < 0.10's write_zfile (numpy_pickle_compat.py)."""
    length = "{:#x}".format(len(data) if declared is None else declared)
    return b"ZF" + length.ljust(19).encode() + zlib.compress(data, 1)


def write(sub, name, data):
    d = os.path.join(root, "corpus", sub)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def set_checksum(block):
    block = bytearray(block)
    block[148:156] = b" " * 8
    block[148:156] = b"%06o\0 " % sum(block)
    return bytes(block)


def main():
    t = torch_members()
    write("fuzz_tar", "torch-legacy.tar", tar_bytes(t))
    write("fuzz_tar", "ustar.tar", tar_bytes([("a.txt", b"hello"), ("d/b.bin", b"\1" * 600)], tarfile.USTAR_FORMAT))
    write("fuzz_tar", "gnu-longname.tar", tar_bytes([("n" * 150, b"x"), ("l", b"", tarfile.SYMTYPE, "t" * 120)], tarfile.GNU_FORMAT))
    write("fuzz_tar", "pax-long.tar", tar_bytes([("p" * 130, b"data")], tarfile.PAX_FORMAT))
    write("fuzz_tar", "pax-global.tar", tar_bytes([("a", b"1")], tarfile.PAX_FORMAT, {"comment": "x"}))
    write("fuzz_tar", "links.tar", tar_bytes([("pickle", PKL), ("s", b"", tarfile.SYMTYPE, "pickle"),
                                              ("h", b"", tarfile.LNKTYPE, "pickle"),
                                              ("dev", b"", tarfile.CHRTYPE, ""), ("dir", b"", tarfile.DIRTYPE, "")]))
    write("fuzz_tar", "duplicate.tar", tar_bytes([("pickle", PKL), ("pickle", b"cos\nsystem\n(S'id'\ntR.")]))
    write("fuzz_tar", "unsafe.tar", tar_bytes([("../evil", b"x"), ("/abs", b"y")], tarfile.USTAR_FORMAT))
    good = tar_bytes([("a", b"abc")], tarfile.USTAR_FORMAT)
    write("fuzz_tar", "hidden-after-end.tar", good + b"hidden payload")
    bad = bytearray(good)
    bad[0] ^= 1
    write("fuzz_tar", "bad-checksum.tar", bytes(bad))
    write("fuzz_tar", "truncated.tar", good[:600])
    # Number fields tarfile reads laxly: "+0o5" as the size.
    lax = bytearray(good[:512])
    lax[124:136] = b"+0o3".ljust(11, b" ") + b"\0"
    write("fuzz_tar", "lax-size.tar", set_checksum(lax) + good[512:])

    dec = "fuzz_decompress"
    data = PKL * 20
    write(dec, "gzip.gz", gzip.compress(data, mtime=0))
    write(dec, "gzip-multi.gz", gzip.compress(data, mtime=0) + gzip.compress(PKL, mtime=0))
    write(dec, "gzip-trailing.gz", gzip.compress(data, mtime=0) + b"\0\0junk")
    write(dec, "zlib.z", zlib.compress(data))
    write(dec, "bzip2.bz2", bz2.compress(data))
    write(dec, "bzip2-multi.bz2", bz2.compress(data) + bz2.compress(PKL))
    write(dec, "xz.xz", lzma.compress(data))
    write(dec, "xz-padded.xz", lzma.compress(data) + b"\0" * 4)
    write(dec, "lzma-alone.lzma", lzma.compress(data, format=lzma.FORMAT_ALONE))
    write(dec, "zeros-bomb.gz", gzip.compress(b"\0" * (1 << 20), mtime=0))
    write(dec, "truncated.xz", lzma.compress(data)[:-9])
    zst = tool("zstd", "-q", "-c", "--no-progress", data=data)
    write(dec, "zstd.zst", zst)
    write(dec, "zstd-multi.zst", zst + tool("zstd", "-q", "-c", data=PKL))
    write(dec, "zstd-skippable.zst", skippable(b"cos\nsystem\n", 0x184D2A5A) + zst)
    write(dec, "zstd-trailing.zst", zst + b"junk")
    write(dec, "zstd-window20.zst", tool("zstd", "-q", "-c", "--zstd=wlog=20", data=data))
    write(dec, "pzstd.zst", tool("pzstd", "-q", "-c", "-p", "1", data=data))
    bad = bytearray(zst)
    bad[-1] ^= 1  # content checksum
    write(dec, "zstd-bad-checksum.zst", bytes(bad))
    write(dec, "zeros-bomb.zst", tool("zstd", "-q", "-c", "-19", data=b"\0" * (1 << 22)))
    lz = tool("lz4", "-q", "-c", data=data)
    write(dec, "lz4.lz4", lz)
    write(dec, "lz4-block-checksum.lz4", tool("lz4", "-q", "-c", "-BX", "-B4", data=data))
    write(dec, "lz4-multi.lz4", lz + tool("lz4", "-q", "-c", data=PKL))
    write(dec, "lz4-skippable.lz4", lz + skippable(b"hidden"))
    write(dec, "lz4-content-size.lz4", tool("lz4", "-q", "-c", "--content-size", data=data))
    write(dec, "lz4-legacy.lz4", tool("lz4", "-q", "-c", "-l", data=data))
    write(dec, "joblib-zf.z", zfile(data))
    write(dec, "joblib-zf-mismatch.z", zfile(data, len(data) + 1))


main()
