"""No copy is made: loading and reading every page of a 64 MiB signed model
in eager mode grows this process's anonymous memory by far less than the
file (the pages it reads are the file's, mapped: RssFile grows instead),
for numpy and for torch; copy mode, which does copy, grows by the file.

    rss_test.py MODELGATE   (env MODELGATE_LIBRARY, PYTHONPATH=bindings/python)
"""
import gc
import os
import sys

import numpy as np
import torch

from binding_util import keygen, sign, status_kib
from mgtest import eq, main, test
import st_reference

import modelgate
import modelgate.numpy
import modelgate.torch

MIB = 1 << 20
TENSORS = 4
TENSOR_BYTES = 16 * MIB  # 64 MiB in all: the CI's ceiling for a file written in ctest
PAGE = os.sysconf("SC_PAGE_SIZE")


def big_model(d):
    key = keygen(d)
    n = TENSOR_BYTES // 4
    path = st_reference.write(os.path.join(d, "big.safetensors"),
                              {f"t{i}": np.arange(i * n, (i + 1) * n, dtype="<f4")
                               for i in range(TENSORS)})
    sign(key, path)
    return key, path


def memory():
    gc.collect()
    return {f: status_kib(f) * 1024 for f in ("RssAnon", "RssFile", "RssShmem")}


def grew(before, after, field):
    return after[field] - before[field]


def touch_numpy(arrays):
    # One byte of every page, so every page of the data is faulted in.
    return sum(int(a.view(np.uint8)[::PAGE].sum()) for a in arrays.values())


def touch_torch(tensors):
    return sum(int(t.view(torch.uint8)[::PAGE].sum()) for t in tensors.values())


def check_flat(before, after, what):
    anon = grew(before, after, "RssAnon")
    mapped = grew(before, after, "RssFile")
    print(f"  {what}: RssAnon +{anon / MIB:.1f} MiB, RssFile +{mapped / MIB:.1f} MiB "
          f"for a {TENSORS * TENSOR_BYTES // MIB} MiB file")
    eq(anon < 8 * MIB, True, f"{what}: anonymous memory grew {anon} bytes")
    eq(mapped >= TENSORS * TENSOR_BYTES - MIB, True, f"{what}: the file's pages are mapped ({mapped})")


@test
def numpy_eager_load_reads_the_mapping_not_a_copy(d):
    key, path = big_model(d)
    before = memory()
    arrays = modelgate.numpy.load_file(path, keys=[key + ".pub"], mode="eager")
    touch_numpy(arrays)
    after = memory()
    eq(float(arrays["t3"][-1]), float(4 * (TENSOR_BYTES // 4) - 1), "last value")
    check_flat(before, after, "numpy eager")


@test
def torch_eager_load_reads_the_mapping_not_a_copy(d):
    key, path = big_model(d)
    before = memory()
    tensors = modelgate.torch.load_file(path, keys=[key + ".pub"], mode="eager")
    touch_torch(tensors)
    after = memory()
    eq(float(tensors["t1"][0]), float(TENSOR_BYTES // 4), "first value of t1")
    check_flat(before, after, "torch eager (copy-on-write mapping, read)")
    # Writing one element copies its page, not the 16 MiB tensor.
    tensors["t0"][0] += 1
    written = memory()
    eq(float(tensors["t0"][0]), 1.0, "written")
    anon = grew(after, written, "RssAnon")
    print(f"  one write: RssAnon +{anon / 1024:.0f} KiB")
    eq(anon < MIB, True, f"one write, one page: RssAnon grew {anon} bytes")


@test
def copy_mode_does_copy_which_the_measure_sees(d):
    key, path = big_model(d)
    before = memory()
    arrays = modelgate.numpy.load_file(path, keys=[key + ".pub"], mode="copy")
    touch_numpy(arrays)
    after = memory()
    private = grew(before, after, "RssAnon") + grew(before, after, "RssShmem")
    eq(private >= TENSORS * TENSOR_BYTES - MIB, True, f"copy mode's private memory: {private}")


if __name__ == "__main__":
    sys.exit(main("mg-py-rss-"))
