#!/usr/bin/env python3
"""Write the legacy (non-zip, non-tar) torch.save files the loader tests read.

    make_torch_legacy.py OUTDIR

torch-legacy-dtypes.pt: torch.save(..., _use_new_zipfile_serialization=False)
of tensors of five dtypes (element sizes 1, 2, 4 and 8 bytes), one of them a
slice sharing another's storage: five pickles, then each storage's int64
element count and bytes, in the order of the storage keys pickle. The file
is loaded back with torch.load to check it is what torch reads.

Needs Debian's python3-torch (1.13); CI has no torch, so the output is
committed in tests/loaders/data/ and this script is not run by ctest.
"""
import os
import sys

import torch


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    base = torch.arange(6, dtype=torch.float64).reshape(2, 3)
    obj = {
        "f64": base,
        "f64_row": base[1],  # a view: no storage of its own
        "i64": torch.tensor([1, -2, 3], dtype=torch.int64),
        "f16": torch.tensor([0.5, 1.5], dtype=torch.float16),
        "i32": torch.tensor([7], dtype=torch.int32),
        "bool": torch.tensor([True, False, True], dtype=torch.bool),
    }
    path = os.path.join(out, "torch-legacy-dtypes.pt")
    torch.save(obj, path, _use_new_zipfile_serialization=False)
    back = torch.load(path)
    assert back.keys() == obj.keys()
    for k in obj:
        assert torch.equal(back[k], obj[k]), k


if __name__ == "__main__":
    main()
