#!/usr/bin/env python3
"""Writes joblib-lz4.joblib and pickle-zstandard.zst next to this script.

joblib-lz4.joblib: a real joblib.dump(..., compress='lz4') of a small
model-like dict, made with Debian 12's python3-joblib (1.2.0), python3-lz4
(4.0.2) and numpy: joblib's 'lz4' compressor is lz4.frame.LZ4FrameFile with
its defaults (one frame, 64 KiB blocks, linked, no checksums).
pickle-zstandard.zst: the same dict pickled through python3-zstandard's
(0.20.0) ZstdCompressor().stream_writer, what a compressor registered with
joblib.register_compressor('zstd', ...) over python-zstandard writes (joblib
itself has no zstd compressor). Both are loaded back here (our own files).
Committed so the tests need none of these packages.

usage: /usr/bin/python3 make_joblib_lz4_zstd.py
"""
import io
import os
import pickle

import joblib
import lz4
import numpy as np
import zstandard

here = os.path.dirname(os.path.abspath(__file__))
rng = np.random.default_rng(11)
model = {
    "coef": rng.standard_normal((8, 4)).astype(np.float32),
    "intercept": np.zeros(4, dtype=np.float64),
    "classes": np.arange(4, dtype=np.int64),
    "name": "tiny-linear",
}
path = os.path.join(here, "joblib-lz4.joblib")
joblib.dump(model, path, compress="lz4")
loaded = joblib.load(path)
assert loaded["name"] == model["name"] and (loaded["coef"] == model["coef"]).all()
print(path, os.path.getsize(path), "bytes, joblib", joblib.__version__, "lz4", lz4.__version__)

zpath = os.path.join(here, "pickle-zstandard.zst")
buf = io.BytesIO()
with zstandard.ZstdCompressor().stream_writer(buf, closefd=False) as w:
    pickle.dump(model, w, protocol=4)
with open(zpath, "wb") as f:
    f.write(buf.getvalue())
with open(zpath, "rb") as f:
    again = pickle.load(zstandard.ZstdDecompressor().stream_reader(f))
assert again["name"] == model["name"]
print(zpath, os.path.getsize(zpath), "bytes, zstandard", zstandard.__version__)
