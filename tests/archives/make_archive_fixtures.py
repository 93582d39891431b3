#!/usr/bin/env python3
"""Writes tests/archives/data (python3 standard library; torch optional).

usage: make_archive_fixtures.py [DATA_DIR]   (default: data/ next to this script)

1. torch-legacy.tar: torch's legacy tar layout ("pickle", "tensors",
   "storages", in the order and format old torch.save wrote them), built
   with the standard library. If Debian's python3-torch is importable, the
   file is loaded back with torch.load (it is our own benign file) to prove
   the layout is what torch's legacy_load reads.
2. tarfile-cases/*.tar, hand-made edge cases, and tarfile-cases/manifest.tsv:
   what Python's tarfile lists for each (name, size, data offset per member,
   or "error:<exception>" when getmembers() raises), which archive_tests
   compares with ReadTar. The archives are read from a real file, as
   torch.load reads them: past 2^63 the seek raises ValueError, not
   ReadError, and torch.load then fails without its pickle fallback.
"""
import io
import os
import tempfile
import pickle
import struct
import sys
import tarfile

here = os.path.dirname(os.path.abspath(__file__))
out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "data")


def header(name=b"a", size=0, typeflag=b"0", linkname=b"", prefix=b"", size_field=None,
           magic=b"ustar\x0000", mtime_field=None, signed_checksum=False):
    b = bytearray(512)
    b[0:len(name)] = name
    b[100:108] = b"0000644\0"
    b[108:116] = b"0000000\0"
    b[116:124] = b"0000000\0"
    b[124:136] = size_field if size_field is not None else b"%011o\0" % size
    b[136:148] = mtime_field if mtime_field is not None else b"00000000000\0"
    b[156:157] = typeflag
    b[157:157 + len(linkname)] = linkname
    b[257:265] = magic
    b[345:345 + len(prefix)] = prefix
    b[148:156] = b" " * 8
    if signed_checksum:  # the signed-char sum tarfile also accepts, signed octal
        s = sum(x - 256 if x >= 128 else x for x in b)
        b[148:156] = (b"-%05o\0 " % -s) if s < 0 else (b"%06o\0 " % s)
    else:
        b[148:156] = b"%06o\0 " % sum(b)
    return bytes(b)


def data(d):
    return d + b"\0" * ((-len(d)) % 512)


def pax_raw(body, typeflag=b"x"):
    return header(b"././@PaxHeader", len(body), typeflag) + data(body)


def b256(width, value):
    return b"\x80" + value.to_bytes(width - 1, "big")


def pax(records, typeflag=b"x"):
    body = b""
    for k, v in records:
        rec = b" " + k + b"=" + v + b"\n"
        n = len(rec) + 1
        while len(str(n).encode()) + len(rec) != n:
            n += 1
        body += str(n).encode() + rec
    return header(b"././@PaxHeader", len(body), typeflag) + data(body)


END = b"\0" * 1024
PKL = b"\x80\x02X\x02\x00\x00\x00hiq\x00."

CASES = {
    "plain": header(b"a", 3) + data(b"abc") + header(b"dir/", 0, b"5") + END,
    "lax-size": header(b"a", size_field=b"+0o3 \0\0\0\0\0\0\0") + data(b"abc") + END,
    "underscore-size": header(b"a", size_field=b"0_3\0" + b"\0" * 8) + data(b"abc") + END,
    "base256-size": header(b"a", size_field=b"\x80" + b"\0" * 10 + b"\x03") + data(b"abc") + END,
    "longname-then-pax": header(b"././@LongLink", 6, b"L") + data(b"gnu-n\0")
        + pax([(b"path", b"pax-n")]) + header(b"short", 1) + data(b"x") + END,
    "pax-then-longname": pax([(b"path", b"pax-n")]) + header(b"././@LongLink", 6, b"L")
        + data(b"gnu-n\0") + header(b"short", 1) + data(b"x") + END,
    "pax-size": pax([(b"size", b"5")]) + header(b"a", 3) + data(b"abcde") + END,
    "global-size": pax([(b"size", b"2")], b"g") + header(b"a", 3) + data(b"abc")
        + header(b"b", 1) + data(b"z") + END,
    "global-path": pax([(b"path", b"same")], b"g") + header(b"a", 1) + data(b"1")
        + header(b"b", 1) + data(b"2") + END,
    "duplicate": header(b"pickle", len(PKL)) + data(PKL) + header(b"pickle", 1) + data(b".") + END,
    "bad-second-checksum": header(b"a", 1) + data(b"1")
        + bytes([0x41]) + header(b"b", 1)[1:] + data(b"2") + END,
    "zero-block-then-data": header(b"a", 1) + data(b"1") + b"\0" * 512 + header(b"b", 1)
        + data(b"2") + END,
    "dir-with-size": header(b"d", 512, b"5") + header(b"a", 1) + data(b"1") + END,
    "prefix": header(b"name", 1, prefix=b"some/dir") + data(b"1") + END,
    "v7-dir": header(b"olddir/", 0, b"\0", magic=b"\0" * 8) + END,
    "unknown-type": header(b"weird", 2, b"Z") + data(b"zz") + END,
    "links": header(b"pickle", len(PKL)) + data(PKL) + header(b"s", 0, b"2", b"pickle")
        + header(b"h", 0, b"1", b"pickle") + END,
    "past-eof": header(b"a", 4096) + data(b"short"),
    "bad-first-checksum": bytes([0x41]) + header(b"a", 1)[1:] + data(b"1") + END,
    "pax-bad-record": pax([(b"path", b"x")])[:512] + data(b"8 path=x\n") + header(b"a", 1)
        + data(b"1") + END,
    # Checked arithmetic: 2^64 + 31 wraps to this record's true length.
    "pax-length-20-digits": pax_raw(b"18446744073709551647 path=evil\n") + header(b"a", 1)
        + data(b"1") + END,
    "pax-length-20-zeros": pax_raw(b"00000000000000000031 path=evil\n") + header(b"a", 1)
        + data(b"1") + END,
    "pax-size-2-64-plus-1": pax([(b"size", b"18446744073709551617")]) + header(b"a", 1)
        + data(b"1") + END,
    "pax-size-2-63": header(b"z", 1) + data(b"1") + pax([(b"size", b"9223372036854775808")])
        + header(b"a", 1) + data(b"1") + END,
    "base256-size-2-64": header(b"z", 1) + data(b"1") + header(b"b", size_field=b256(12, 1 << 64))
        + data(b"1") + END,
    "base256-size-2-80": header(b"b", size_field=b256(12, (1 << 80) + 1)) + data(b"1") + END,
    "base256-size-2-40": header(b"b", size_field=b256(12, 1 << 40)) + data(b"1") + END,
    "base256-mtime-huge": header(b"a", 1, mtime_field=b256(12, (1 << 88) - 1)) + data(b"1") + END,
    "negative-checksum": header(b"\x80" * 100, 1, linkname=b"\x80" * 100, signed_checksum=True)
        + data(b"1") + END,
}


def listing(raw):
    with tempfile.TemporaryFile() as f:
        f.write(raw)
        f.seek(0)
        try:
            with tarfile.open(fileobj=f, mode="r:", format=tarfile.PAX_FORMAT) as t:
                return [(m.name, m.size, m.offset_data, m.type.decode("latin1") or "\\0")
                        for m in t.getmembers()]
        except (tarfile.TarError, ValueError, OSError) as e:
            return "error:" + type(e).__name__


def torch_legacy_tar():
    """The layout old torch.save wrote: tar members pickle, tensors, storages."""
    class Ref:
        def __init__(self, key):
            self.key = key

    class P(pickle.Pickler):
        def persistent_id(self, obj):
            return str(obj.key) if isinstance(obj, Ref) else None

    buf = io.BytesIO()
    P(buf, protocol=2).dump({"weight": Ref(1)})
    obj = buf.getvalue()
    tensors = pickle.dumps(1, protocol=2)
    tensors += pickle.dumps((1, 0, None), protocol=2)  # key, storage_id, tensor type (unused)
    tensors += struct.pack("<i", 2) + b"\0" * 4 + struct.pack("<2q", 2, 3) + struct.pack("<2q", 3, 1)
    tensors += struct.pack("<q", 0)
    # The storage type pickles as the torch class (GLOBAL torch FloatStorage).
    args = (b"\x80\x02K\x00X\x03\x00\x00\x00cpuq\x00ctorch\nFloatStorage\nq\x01\x87q\x02.")
    storages = pickle.dumps(1, protocol=2) + args + struct.pack("<q", 6)
    storages += struct.pack("<6f", 1, 2, 3, 4, 5, 6) + pickle.dumps([], protocol=2)
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as t:
        for name, body in (("pickle", obj), ("tensors", tensors), ("storages", storages)):
            info = tarfile.TarInfo(name)
            info.size, info.mtime, info.mode = len(body), 0, 0o600
            t.addfile(info, io.BytesIO(body))
    return raw.getvalue()


def main():
    os.makedirs(os.path.join(out, "tarfile-cases"), exist_ok=True)
    lines = []
    for name, raw in sorted(CASES.items()):
        with open(os.path.join(out, "tarfile-cases", name + ".tar"), "wb") as f:
            f.write(raw)
        got = listing(raw)
        if isinstance(got, str):
            lines.append(f"{name}\t{got}")
        else:
            cells = ["%s|%d|%d|%s" % m for m in got]
            lines.append("\t".join([name] + cells))
    # Names are the raw header bytes (tarfile decodes with surrogateescape).
    with open(os.path.join(out, "tarfile-cases", "manifest.tsv"), "w", encoding="utf-8",
              errors="surrogateescape") as f:
        f.write("\n".join(lines) + "\n")

    raw = torch_legacy_tar()
    path = os.path.join(out, "torch-legacy.tar")
    with open(path, "wb") as f:
        f.write(raw)
    try:
        import torch
    except ImportError:
        print("torch not importable; torch-legacy.tar written but not loaded back")
        return
    loaded = torch.load(path)  # our own benign file: proves the layout
    w = loaded["weight"]
    assert w.shape == (2, 3) and w.stride() == (3, 1), (w.shape, w.stride())
    assert w.flatten().tolist() == [1, 2, 3, 4, 5, 6], w
    print("torch", torch.__version__, "loaded torch-legacy.tar:", w.tolist())


main()
