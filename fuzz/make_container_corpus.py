#!/usr/bin/env python3
"""Writes seed corpora for fuzz_zip and fuzz_npy (python3 standard library).

usage: make_container_corpus.py [FUZZ_DIR]   (default: the directory of this script)

Seeds are small: zips in the layout torch.save writes (archive/data.pkl,
archive/data/0, archive/version, archive/byteorder), npz-style zips, deflated
members, zip64 records, and hostile variants (prepended bytes, mismatched
local names, duplicates, truncations); .npy headers of versions 1-3, object
and structured dtypes, and malformed headers. Real torch.save / np.save
outputs are added by tests/scanner fixtures where those packages exist.
"""
import io
import os
import struct
import sys
import zipfile

root = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
PKL = b"\x80\x02}q\x00X\x01\x00\x00\x00aq\x01K\x01s."


def zip_bytes(members, compression=zipfile.ZIP_STORED, force_zip64=False):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression) as z:
        for name, data in members:
            info = zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0))
            info.compress_type = compression
            with z.open(info, "w", force_zip64=force_zip64) as f:
                f.write(data)
    return buf.getvalue()


def npy(dict_text, major=1, body=b""):
    head = dict_text.encode("latin1")
    prefix = 10 if major == 1 else 12
    pad = (64 - (prefix + len(head) + 1) % 64) % 64
    head += b" " * pad + b"\n"
    out = b"\x93NUMPY" + bytes([major, 0])
    out += struct.pack("<H", len(head)) if major == 1 else struct.pack("<I", len(head))
    return out + head + body


def write(sub, name, data):
    d = os.path.join(root, "corpus", sub)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


torch_like = [("archive/data.pkl", PKL), ("archive/byteorder", b"little"),
              ("archive/data/0", bytes(range(16))), ("archive/version", b"3\n")]
good = zip_bytes(torch_like)
write("fuzz_zip", "ok_torch_layout.zip", good)
write("fuzz_zip", "ok_deflated.zip", zip_bytes(torch_like, zipfile.ZIP_DEFLATED))
write("fuzz_zip", "ok_zip64.zip", zip_bytes(torch_like[:2], force_zip64=True))
write("fuzz_zip", "ok_npz.zip", zip_bytes([("a.npy", npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", body=bytes(8)))]))
write("fuzz_zip", "ok_empty.zip", zip_bytes([]))
write("fuzz_zip", "bad_prepended_pickle.zip", PKL + good)
write("fuzz_zip", "bad_trailing.zip", good + b"\x80\x02K\x01.")
write("fuzz_zip", "bad_local_name.zip", good.replace(b"archive/data.pkl", b"archive/evil.pkl", 1))
write("fuzz_zip", "bad_duplicate.zip", zip_bytes([("a.pkl", PKL), ("a.pkl", b"\x80\x02K\x02.")]))
write("fuzz_zip", "bad_traversal.zip", zip_bytes([("../../evil.pkl", PKL)]))
write("fuzz_zip", "bad_truncated.zip", good[: len(good) // 2])
write("fuzz_zip", "bad_cd_only.zip", good[good.rfind(b"PK\x01\x02"):])
bad_crc = bytearray(good)
bad_crc[good.find(b"archive/data.pkl") + 16] ^= 0xFF  # first byte of data.pkl's data
write("fuzz_zip", "bad_crc.zip", bytes(bad_crc))

write("fuzz_npy", "ok_v1_f4.npy", npy("{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }", 1, bytes(48)))
write("fuzz_npy", "ok_v2.npy", npy("{'descr': '<i8', 'fortran_order': True, 'shape': (2,), }", 2, bytes(16)))
write("fuzz_npy", "ok_v3_unicode.npy", npy("{'descr': '<U2', 'fortran_order': False, 'shape': (), }", 3, bytes(8)))
write("fuzz_npy", "ok_structured.npy", npy("{'descr': [('a', '<f4'), ('b', [('c', '|i1')], (2,))], 'fortran_order': False, 'shape': (1,), }"))
write("fuzz_npy", "obj_array.npy", npy("{'descr': '|O', 'fortran_order': False, 'shape': (1,), }", 1, PKL))
write("fuzz_npy", "bad_keys.npy", npy("{'descr': '<f4', 'shape': (1,), 'evil': 1}"))
write("fuzz_npy", "bad_code.npy", npy("__import__('os').system('id')"))
write("fuzz_npy", "bad_version.npy", b"\x93NUMPY\x09\x00\x10\x00" + b"{}" + b" " * 14)
write("fuzz_npy", "bad_long_py2.npy", npy("{'descr': '<f4', 'fortran_order': False, 'shape': (3L, 4L), }"))
print("wrote container seeds under", os.path.join(root, "corpus"))
