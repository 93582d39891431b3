"""modelgate.torch.load_file / safe_open(framework="pt"): the same tensors as
torch.load of the torch.save the file was made from, zero-copy over a
copy-on-write mapping (in-place ops work, the file never changes), tensors
that keep the model alive, dtypes torch has and lacks, a tampered file in
each mode, devices, slices and both host byte orders.

    torch_test.py MODELGATE   (env MODELGATE_LIBRARY, PYTHONPATH=bindings/python)
"""
import gc
import os
import sys
import warnings
import weakref

import numpy as np
import torch

from binding_util import flip, keygen, mapping_of, raises, sha256, sign
from mgtest import eq, main, test
import st_reference

import modelgate
import modelgate.torch

MODES = ("eager", "lazy", "copy")
ST_DTYPE = {torch.bool: "BOOL", torch.uint8: "U8", torch.int8: "I8", torch.int16: "I16",
            torch.int32: "I32", torch.int64: "I64", torch.float16: "F16",
            torch.bfloat16: "BF16", torch.float32: "F32", torch.float64: "F64",
            torch.complex64: "C64"}


def word_bytes(t):
    return 4 if t.dtype == torch.complex64 else t.element_size()


def swap_words(raw, unit):
    if unit == 1 or not raw:
        return raw
    return np.frombuffer(raw, dtype=np.uint8).reshape(-1, unit)[:, ::-1].tobytes()


def host_bytes(t):
    """host_bytes is t's memory as bytes, in this host's order."""
    t = t.detach().contiguous()
    if t.numel() == 0:
        return b""
    return t.reshape(-1).view(torch.uint8).numpy().tobytes()


def le_bytes(t):
    """le_bytes is t's elements little-endian, as the file holds them."""
    raw = host_bytes(t)
    return raw if sys.byteorder == "little" else swap_words(raw, word_bytes(t))


def write_state_dict(path, sd):
    st_reference.write(path, {k: (ST_DTYPE[v.dtype], list(v.shape), le_bytes(v))
                              for k, v in sd.items()}, {"format": "pt"})
    return path


def state_dict():
    torch.manual_seed(12)
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4),
                              torch.nn.ReLU())
    net.train()
    net(torch.randn(2, 3, 8, 8))  # running stats and num_batches_tracked move
    sd = {"net." + k: v.detach().clone() for k, v in net.state_dict().items()}
    sd["embed.weight"] = torch.nn.Embedding(10, 8).weight.detach().clone()
    sd["bf16"] = torch.randn(5, 3).to(torch.bfloat16)
    sd["fp16"] = torch.randn(4, 4).to(torch.float16)
    sd["int8"] = torch.tensor([-128, -1, 0, 1, 127], dtype=torch.int8)
    sd["mask"] = torch.tensor([[True, False], [False, True]])
    sd["u8"] = torch.tensor([0, 200, 255], dtype=torch.uint8)
    sd["i16"] = torch.tensor([-32768, 7, 32767], dtype=torch.int16)
    sd["i32"] = torch.tensor([-(2 ** 31), 2 ** 31 - 1], dtype=torch.int32)
    sd["f64"] = torch.tensor([float("inf"), -0.0, 1e-300], dtype=torch.float64)
    sd["c64"] = torch.randn(3, dtype=torch.complex64)
    sd["empty"] = torch.zeros(0, 4)
    return sd


def signed_state_dict(d):
    key = keygen(d)
    sd = state_dict()
    pt = os.path.join(d, "model.pt")
    torch.save(sd, pt)
    path = write_state_dict(os.path.join(d, "model.safetensors"), sd)
    sign(key, path)
    return key, pt, path


def assert_same(got, want, name):
    eq(got.dtype, want.dtype, f"{name} dtype")
    eq(tuple(got.shape), tuple(want.shape), f"{name} shape")
    eq(torch.equal(got, want), True, f"{name} values")
    eq(host_bytes(got), host_bytes(want), f"{name} bits")


@test
def load_file_gives_what_torch_load_gives_in_each_mode(d):
    key, pt, path = signed_state_dict(d)
    want = torch.load(pt)
    eq(want["net.1.num_batches_tracked"].dtype, torch.int64, "BatchNorm's 0-d int64 counter")
    for mode in MODES:
        got = modelgate.torch.load_file(path, keys=[key + ".pub"], mode=mode)
        eq(sorted(got), sorted(want), f"{mode}: names")
        for name in want:
            assert_same(got[name], want[name], f"{mode} {name}")
        # A module loads the verified state dict and computes what torch.load's gives.
        a = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4)).eval()
        b = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4)).eval()
        a.load_state_dict({k[4:]: v for k, v in got.items() if k.startswith("net.")})
        b.load_state_dict({k[4:]: v for k, v in want.items() if k.startswith("net.")})
        x = torch.randn(1, 3, 8, 8)
        eq(torch.equal(a(x), b(x)), True, f"{mode}: same outputs")
    # load_file(path, verification=public_key), as articles write it.
    got = modelgate.torch.load_file(path, verification=key + ".pub")
    for name in want:
        assert_same(got[name], want[name], f"verification= {name}")


@test
def tensors_are_zero_copy_and_torch_gets_writable_memory(d):
    key, _, path = signed_state_dict(d)
    for mode in ("eager", "lazy"):
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # torch warns on read-only memory
            with modelgate.safe_open(path, framework="pt", keys=[key + ".pub"], mode=mode) as f:
                a, b = f.get_tensor("embed.weight"), f.get_tensor("embed.weight")
                eq(mapping_of(a.data_ptr()), path, f"{mode}: memory is a mapping of the file")
                eq(a.data_ptr(), b.data_ptr(), f"{mode}: two get_tensor share memory")
                eq(f.get_slice("embed.weight")[2:].data_ptr(), a.data_ptr() + 2 * 8 * 4,
                   f"{mode}: a slice is a view")
    with modelgate.safe_open(path, framework="pt", keys=[key + ".pub"], mode="copy") as f:
        eq(mapping_of(f.get_tensor("bf16").data_ptr()) != path, True, "copy mode: not the file")


@test
def in_place_ops_never_fault_and_never_change_the_file(d):
    key, pt, path = signed_state_dict(d)
    want = torch.load(pt)
    before = sha256(path)
    for mode in MODES:
        got = modelgate.torch.load_file(path, keys=[key + ".pub"], mode=mode)
        w = got["net.0.weight"]
        w.add_(1).mul_(2)
        got["bf16"].zero_()
        got["mask"][0, 0] = False
        got["net.1.num_batches_tracked"] += 1
        eq(torch.equal(w, (want["net.0.weight"] + 1) * 2), True, f"{mode}: in-place result")
        eq(bool(got["bf16"].any()), False, f"{mode}: zeroed")
        eq(sha256(path), before, f"{mode}: the file is unchanged")
        again = modelgate.torch.load_file(path, keys=[key + ".pub"], mode=mode)
        for name in ("net.0.weight", "bf16", "mask", "net.1.num_batches_tracked"):
            assert_same(again[name], want[name], f"{mode}: reopened {name}")


@test
def a_tensor_keeps_the_model_alive(d):
    key, pt, path = signed_state_dict(d)
    want = torch.load(pt)
    for mode in MODES:
        f = modelgate.safe_open(path, framework="pt", keys=[key + ".pub"], mode=mode)
        alive = weakref.ref(f._model)
        t = f.get_tensor("bf16")
        rest = {k: f.get_tensor(k) for k in f.keys()}
        del f, rest
        gc.collect()
        eq(alive() is not None, True, f"{mode}: the model lives while a tensor does")
        assert_same(t, want["bf16"], f"{mode}: still readable")
        del t
        gc.collect()
        eq(alive(), None, f"{mode}: freed with the last tensor")


@test
def dtypes_map_where_torch_has_them_and_raise_where_it_does_not(d):
    key = keygen(d)
    tensors = {
        "bf16": ("BF16", [2], b"\x80\x3f\x00\x40"),          # 1.0, 2.0
        "e4m3": ("F8_E4M3", [2], b"\x38\x40"),               # 1.0, 2.0
        "e5m2": ("F8_E5M2", [2], b"\x3c\x40"),               # 1.0, 2.0
        "u16": ("U16", [2], b"\x01\x00\xff\xff"),
        "u32": ("U32", [1], b"\x01\x02\x03\x04"),
        "u64": ("U64", [1], b"\x01\x02\x03\x04\x05\x06\x07\x08"),
    }
    path = st_reference.write(os.path.join(d, "m.safetensors"), tensors)
    sign(key, path)
    torch_names = {"e4m3": "float8_e4m3fn", "e5m2": "float8_e5m2", "u16": "uint16",
                   "u32": "uint32", "u64": "uint64"}
    with modelgate.safe_open(path, framework="pt", keys=[key + ".pub"]) as f:
        bf = f.get_tensor("bf16")
        eq((bf.dtype, bf.tolist()), (torch.bfloat16, [1.0, 2.0]), "BF16 is torch.bfloat16")
        for name, attr in torch_names.items():
            dtype = getattr(torch, attr, None)
            if dtype is not None:
                t = f.get_tensor(name)
                eq(t.dtype, dtype, f"{name}: torch.{attr}")
                raw = tensors[name][2]
                eq(le_bytes(t), raw, f"{name}: the file's bytes")
                continue
            e = raises(modelgate.UnsupportedDtypeError, lambda: f.get_tensor(name), name)
            eq(isinstance(e, TypeError), True, "a TypeError too")
            eq(e.dtype in str(e) and "torch" in str(e) and attr in str(e), True,
               f"{name}: names the dtype, torch and what it lacks: {e}")
    # Debian 12's torch 1.13 has none of them: every one above took the error path.
    eq(torch.__version__.startswith("1.13") and
       any(hasattr(torch, a) for a in torch_names.values()), False, "torch 1.13 lacks them all")


@test
def a_tampered_tensor_is_refused_in_each_mode(d):
    key, _, path = signed_state_dict(d)
    begin, _ = st_reference.data_range(path, "bf16")
    flip(path, begin)
    for mode in ("eager", "copy"):
        e = raises(modelgate.VerificationError,
                   lambda: modelgate.torch.load_file(path, keys=[key + ".pub"], mode=mode), mode)
        eq((e.finding_id, e.offset), ("MG-SIG-TENSOR-MISMATCH", begin), mode)
    with modelgate.safe_open(path, framework="pt", keys=[key + ".pub"], mode="lazy") as f:
        eq(f.get_tensor("fp16").dtype, torch.float16, "lazy: an intact tensor loads")
        for attempt in ("first", "second"):
            e = raises(modelgate.VerificationError, lambda: f.get_tensor("bf16"), attempt)
            eq(e.finding_id, "MG-SIG-TENSOR-MISMATCH", f"lazy, {attempt} time")


@test
def device_and_slices(d):
    key, pt, path = signed_state_dict(d)
    want = torch.load(pt)
    meta = modelgate.torch.load_file(path, "meta", keys=[key + ".pub"])
    eq({t.device.type for t in meta.values()}, {"meta"}, "device='meta'")
    eq({k: (t.dtype, tuple(t.shape)) for k, t in meta.items()},
       {k: (t.dtype, tuple(t.shape)) for k, t in want.items()}, "dtypes and shapes on meta")
    with modelgate.safe_open(path, framework="pt", keys=[key + ".pub"]) as f:
        sl = f.get_slice("bf16")
        eq((sl.get_shape(), sl.get_dtype()), ([5, 3], "BF16"), "slice header")
        assert_same(sl[1:4, ::2], want["bf16"][1:4, ::2], "bf16 slice")
        assert_same(f.get_slice("net.1.num_batches_tracked")[()],
                    want["net.1.num_batches_tracked"], "0-d slice")
        eq(f.metadata(), {"format": "pt"}, "metadata")
    raises(modelgate.Error, lambda: modelgate.safe_open(path, framework="pt", keys=[key + ".pub"],
                                                        writable=False), "pt needs writable")


@test
def a_big_endian_host_gets_byte_swapped_copies(d):
    key, pt, path = signed_state_dict(d)
    want = torch.load(pt)
    with modelgate.safe_open(path, framework="pt", keys=[key + ".pub"]) as f:
        for name in sorted(want):
            info = f._model.find(name)
            little = f._get(info, "little")
            big = f._get(info, "big")
            ref = want[name]
            assert_same(little, ref, f"{name}: little-endian host")
            eq((big.dtype, tuple(big.shape)), (ref.dtype, tuple(ref.shape)), f"{name}: big")
            # What a big-endian torch reads as ref's values: each word reversed.
            eq(host_bytes(big), swap_words(le_bytes(ref), word_bytes(ref)),
               f"{name}: each {word_bytes(ref)}-byte word reversed")
            if word_bytes(ref) > 1 and ref.numel():
                eq(mapping_of(big.data_ptr()) != path, True, f"{name}: a copy")


if __name__ == "__main__":
    sys.exit(main("mg-py-pt-"))
