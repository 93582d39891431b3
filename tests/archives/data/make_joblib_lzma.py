#!/usr/bin/env python3
"""Writes joblib-lzma.joblib next to this script: a real joblib.dump(...,
compress='lzma') of a small model-like dict (two float arrays, an int array,
a string), made with Debian 12's python3-joblib (1.2.0) and numpy. joblib's
'lzma' compressor is lzma.LZMAFile(format=lzma.FORMAT_ALONE, preset=3): a
.lzma header (properties 0x5D, an 8 MiB dictionary, unknown size) and an
end marker. Committed so the tests need neither joblib nor numpy.

usage: /usr/bin/python3 make_joblib_lzma.py
"""
import os

import joblib
import numpy as np

here = os.path.dirname(os.path.abspath(__file__))
rng = np.random.default_rng(9)
model = {
    "coef": rng.standard_normal((8, 4)).astype(np.float32),
    "intercept": np.zeros(4, dtype=np.float64),
    "classes": np.arange(4, dtype=np.int64),
    "name": "tiny-linear",
}
path = os.path.join(here, "joblib-lzma.joblib")
joblib.dump(model, path, compress="lzma")
loaded = joblib.load(path)  # our own file: proves it is what joblib reads
assert loaded["name"] == model["name"] and (loaded["coef"] == model["coef"]).all()
print(path, os.path.getsize(path), "bytes, joblib", joblib.__version__)
