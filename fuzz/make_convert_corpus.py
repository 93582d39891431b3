"""Seeds for fuzz_convert: the data.pkl of real torch.save checkpoints
(Debian's python3-torch) and a few hand-made variants; a whole legacy file
(torch.save(..., _use_new_zipfile_serialization=False)) and a whole tar
checkpoint laid out as torch < 0.4 wrote it (torch.load reads it); whole
.npy, .npz and joblib files (Debian's python3-numpy and python3-joblib).

usage: /usr/bin/python3 fuzz/make_convert_corpus.py [OUT_DIR]
(default fuzz/corpus/fuzz_convert)
"""
import collections
import io
import os
import pickle
import struct
import sys
import tarfile
import zipfile

import joblib
import numpy as np
import torch
import torch.nn as nn


def data_pkl(obj):
    buf = io.BytesIO()
    torch.save(obj, buf)
    with zipfile.ZipFile(io.BytesIO(buf.getvalue())) as z:
        name = [n for n in z.namelist() if n.endswith("/data.pkl")][0]
        return z.read(name)


class TarTensor:
    def __init__(self, key):
        self.key = key


class TarPickler(pickle.Pickler):
    def persistent_id(self, obj):
        return str(obj.key) if isinstance(obj, TarTensor) else None


def torch_tar():
    """A tar checkpoint: one float storage of 6, two tensors over it."""
    raw = torch.arange(6, dtype=torch.float32).numpy().tobytes()
    s = (pickle.dumps(1, protocol=2) + pickle.dumps((1, "cpu", torch.FloatStorage), protocol=2) +
         struct.pack("<q", 6) + raw + pickle.dumps([], protocol=2))
    t = pickle.dumps(2, protocol=2)
    for key, sizes, strides, off in ((10, (2, 3), (3, 1), 0), (11, (2, 2), (1, 2), 1)):
        t += pickle.dumps((key, 1, torch.FloatTensor), protocol=2) + struct.pack("<i", 2) + bytes(4)
        t += struct.pack("<2q", *sizes) + struct.pack("<2q", *strides) + struct.pack("<q", off)
    p = io.BytesIO()
    TarPickler(p, protocol=2).dump({"a": TarTensor(10), "b": TarTensor(11)})
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, data in (("pickle", p.getvalue()), ("tensors", t), ("storages", s)):
            ti = tarfile.TarInfo(name)
            ti.size = len(data)
            tar.addfile(ti, io.BytesIO(data))
    return out.getvalue()


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "corpus", "fuzz_convert")
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(0)
    base = torch.arange(12.0).reshape(3, 4)
    seeds = {
        "linear_state_dict": nn.Linear(3, 2).state_dict(),
        "lstm_state_dict": nn.LSTM(2, 3).state_dict(),
        "views": {"base": base, "t": base.t(), "cols": base[:, ::2], "elem": base[1, 2]},
        "dtypes": {"h": torch.ones(2).half(), "b": torch.ones(2).bfloat16(), "q": torch.tensor([True]),
                   "c": torch.ones(1, dtype=torch.complex64), "i": torch.arange(3, dtype=torch.int8)},
        "nested": {"model": {"w": torch.ones(1)}, "name": "x", "epoch": 3},
        "parameter": {"p": nn.Parameter(torch.ones(2))},
        "ordered": collections.OrderedDict([("a", torch.zeros(0, 2)), ("b", torch.tensor(1.0))]),
    }
    for name, obj in seeds.items():
        with open(os.path.join(out, name), "wb") as f:
            f.write(data_pkl(obj))
    legacy = io.BytesIO()
    torch.save({"w": torch.arange(4.0).reshape(2, 2), "b": torch.ones(2, dtype=torch.int16)}, legacy,
               _use_new_zipfile_serialization=False)
    whole = {"legacy_file": legacy.getvalue(), "tar_checkpoint": torch_tar()}
    for name, data in whole.items():
        with open(os.path.join(out, name), "wb") as f:
            f.write(data)
    # Whole files for the numpy.load and joblib.load readings: a tiny .npy
    # (big-endian, Fortran order), .npz stored and deflated, joblib dumps
    # (uncompressed and zlib).
    a = np.asfortranarray(np.arange(6, dtype=">f4").reshape(2, 3))
    files = {
        "npy_fortran_be": lambda f: np.save(f, a),
        "npz_stored": lambda f: np.savez(f, w=a, b=np.array([True, False])),
        "npz_deflated": lambda f: np.savez_compressed(f, w=a, i=np.arange(3, dtype="<i8")),
        "joblib_dict": lambda f: joblib.dump({"w": a, "l": [np.zeros(2, np.uint8)], "s": "x"}, f),
        "joblib_zlib": lambda f: joblib.dump({"w": a}, f, compress=3),
    }
    for name, write in files.items():
        buf = io.BytesIO()
        write(buf)
        with open(os.path.join(out, name), "wb") as f:
            f.write(buf.getvalue())


if __name__ == "__main__":
    main()
