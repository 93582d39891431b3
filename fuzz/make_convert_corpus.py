"""Seeds for fuzz_convert: the data.pkl of real torch.save checkpoints
(Debian's python3-torch) and a few hand-made variants.

usage: /usr/bin/python3 fuzz/make_convert_corpus.py [OUT_DIR]
(default fuzz/corpus/fuzz_convert)
"""
import collections
import io
import os
import sys
import zipfile

import torch
import torch.nn as nn


def data_pkl(obj):
    buf = io.BytesIO()
    torch.save(obj, buf)
    with zipfile.ZipFile(io.BytesIO(buf.getvalue())) as z:
        name = [n for n in z.namelist() if n.endswith("/data.pkl")][0]
        return z.read(name)


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


if __name__ == "__main__":
    main()
