#!/usr/bin/env python3
"""Writes the seed corpus of fuzz_upload (python3 standard library): model
directory tars as `tar -C DIR .` and tarfile write them (ustar, GNU, PAX),
and the hostile members UnpackUpload refuses (links, devices, '..', absolute
and duplicate names, a file that is also a directory).

usage: make_upload_corpus.py [FUZZ_DIR]   (default: the directory of this script)
"""
import io
import os
import sys
import tarfile

root = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
out = os.path.join(root, "corpus", "fuzz_upload")
os.makedirs(out, exist_ok=True)


def member(name, data=b"", kind=tarfile.REGTYPE, link=""):
    info = tarfile.TarInfo(name)
    info.type = kind
    info.size = len(data) if kind == tarfile.REGTYPE else 0
    info.linkname = link
    return info, (data if kind == tarfile.REGTYPE else None)


def write(name, members, fmt=tarfile.PAX_FORMAT):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=fmt) as t:
        for info, data in members:
            t.addfile(info, io.BytesIO(data) if data is not None else None)
    data = buf.getvalue().rstrip(b"\0")
    data += b"\0" * ((-len(data)) % 512) + b"\0" * 1024
    with open(os.path.join(out, name), "wb") as f:
        f.write(data)


ST = b"\x10\x00\x00\x00\x00\x00\x00\x00" + b'{"__metadata__":{}}'[:16]
write("model-dir.tar", [member("./", kind=tarfile.DIRTYPE), member("./config.json", b"{}"),
                        member("./shards/", kind=tarfile.DIRTYPE), member("./shards/a.safetensors", ST)])
write("gnu-longname.tar", [member("d" * 150 + "/f.bin", b"x")], fmt=tarfile.GNU_FORMAT)
write("ustar.tar", [member("a/b/c.json", b"{}")], fmt=tarfile.USTAR_FORMAT)
write("symlink.tar", [member("link", kind=tarfile.SYMTYPE, link="/etc/passwd")])
write("hardlink.tar", [member("a", b"1"), member("b", kind=tarfile.LNKTYPE, link="a")])
write("device.tar", [member("dev", kind=tarfile.CHRTYPE)])
write("dotdot.tar", [member("../up", b"x")])
write("absolute.tar", [member("/abs", b"x")])
write("duplicate.tar", [member("m", b"1"), member("./m", b"2")])
write("file-then-dir.tar", [member("m", b"1"), member("m/x", b"2")])
