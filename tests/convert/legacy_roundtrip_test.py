"""Round trips of `modelgate convert` for torch's legacy checkpoints.

Legacy files (a file of pickles then raw storages) are made here by
torch.save(..., _use_new_zipfile_serialization=False); tar checkpoints
(torch < 0.4 wrote them; torch 1.13's torch.load still reads them) are laid
out by hand with tarfile and pickle as that torch wrote them, and torch.load
reads each one first, so the expected tensors are torch's. For every file
that converts, torch.load of the original and the independent reader in
tests/python/st_reference.py give the same tensors (names, dtype, shape,
bytes). Every refusal leaves no output file and no temp file.

usage: legacy_roundtrip_test.py MODELGATE
"""
import collections
import io
import os
import pickle
import shutil
import struct
import sys
import tarfile
import tempfile

import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "scanner"))
import make_pickles  # noqa: E402
import roundtrip_test as rt  # noqa: E402  (check, converts, refused, FAILURES)
from roundtrip_test import check, converts, refused  # noqa: E402

SYS_INFO = {"protocol_version": 1001, "little_endian": True,
            "type_sizes": {"short": 2, "int": 4, "long": 4}}


# ---- hand-laid legacy files: _legacy_save's layout, any content -------------

class Storage:
    """A storage as _legacy_save names it: ('storage', type, key, location, numel, view)."""
    def __init__(self, stype, key, numel, view=None):
        self.stype, self.key, self.numel, self.view = stype, key, numel, view


class Tensor:
    """Pickles as torch.save pickles a tensor: _rebuild_tensor_v2."""
    def __init__(self, storage, offset, size, stride):
        self.args = (storage, offset, tuple(size), tuple(stride), False, collections.OrderedDict())

    def __reduce__(self):
        return (torch._utils._rebuild_tensor_v2, self.args)


class Reduce:
    def __init__(self, func, args):
        self.func, self.args = func, args

    def __reduce__(self):
        return (self.func, self.args)


class LegacyPickler(pickle.Pickler):
    def persistent_id(self, obj):
        if isinstance(obj, Storage):
            return ("storage", obj.stype, obj.key, "cpu", obj.numel, obj.view)
        return None


def legacy_bytes(obj_pickle, keys, storages, sys_info=SYS_INFO):
    """The five pickles, then each storage as (count, raw bytes)."""
    buf = io.BytesIO()
    for x in (torch.serialization.MAGIC_NUMBER, 1001, sys_info):
        pickle.dump(x, buf, protocol=2)
    buf.write(obj_pickle)
    keys_pickler = pickle.Pickler(buf, protocol=2)
    keys_pickler.fast = True  # no memo: a key listed twice is written twice
    keys_pickler.dump(list(keys))
    for count, raw in storages:
        buf.write(struct.pack("<q", count) + raw)
    return buf.getvalue()


def write_legacy(path, obj, keys, storages, sys_info=SYS_INFO):
    b = io.BytesIO()
    LegacyPickler(b, protocol=2).dump(obj)
    with open(path, "wb") as f:
        f.write(legacy_bytes(b.getvalue(), keys, storages, sys_info))


# ---- hand-laid tar checkpoints: torch < 0.4's _save -------------------------

class TarTensor:
    """A tensor the "pickle" member names by persistent id str(key)."""
    def __init__(self, key):
        self.key = key


class TarPickler(pickle.Pickler):
    def persistent_id(self, obj):
        return str(obj.key) if isinstance(obj, TarTensor) else None


def tar_member(tar, name, data):
    ti = tarfile.TarInfo(name)
    ti.size = len(data)
    tar.addfile(ti, io.BytesIO(data))


def write_tar(path, obj, storages, tensors, views=(), pickle_bytes=None, storages_bytes=None):
    """storages: (key, type, count, raw); tensors: (key, storage key, sizes, strides, offset)."""
    s = pickle.dumps(len(storages), protocol=2)
    for key, stype, count, raw in storages:
        s += pickle.dumps((key, "cpu", stype), protocol=2) + struct.pack("<q", count) + raw
    s += pickle.dumps(list(views), protocol=2)
    t = pickle.dumps(len(tensors), protocol=2)
    for key, sid, sizes, strides, off in tensors:
        t += pickle.dumps((key, sid, torch.FloatTensor), protocol=2)
        t += struct.pack("<i", len(sizes)) + b"\0" * 4
        t += struct.pack(f"<{len(sizes)}q", *sizes) + struct.pack(f"<{len(strides)}q", *strides)
        t += struct.pack("<q", off)
    if pickle_bytes is None:
        buf = io.BytesIO()
        TarPickler(buf, protocol=2).dump(obj)
        pickle_bytes = buf.getvalue()
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as tar:
        tar_member(tar, "pickle", pickle_bytes)
        tar_member(tar, "tensors", t)
        tar_member(tar, "storages", s if storages_bytes is None else storages_bytes)


def raw_of(t):
    return t.contiguous().view(torch.uint8).numpy().tobytes() if t.numel() else b""


def main():
    d = tempfile.mkdtemp(prefix="mg-convert-legacy-")
    rt.SCRATCH.append(d)
    torch.manual_seed(0)

    def legacy_save(obj, name):
        p = os.path.join(d, name)
        torch.save(obj, p, _use_new_zipfile_serialization=False)
        with open(p, "rb") as f:  # the legacy layout, not a zip
            check(f.read(2) != b"PK", f"{name}: torch.save wrote a zip")
        return p

    # ---- legacy files made by torch.save --------------------------------------
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 4, 3)
            self.bn = nn.BatchNorm2d(4)
            self.emb = nn.Embedding(10, 5)
            self.lstm = nn.LSTM(5, 6, num_layers=2)
            self.fc = nn.Linear(6, 2)
    net = Net()
    net.bn.running_mean.uniform_()
    converts("legacy state dict", legacy_save(net.state_dict(), "pytorch_model.bin"))
    # Every pickle protocol torch.save can write this layout with (0 cannot
    # hold its tuple persistent ids); protocol 1 writes bools as I00/I01.
    for proto in (1, 3, 4, 5):
        p = os.path.join(d, f"lstm-p{proto}.pt")
        torch.save(nn.LSTM(3, 4).state_dict(), p, _use_new_zipfile_serialization=False, pickle_protocol=proto)
        converts(f"legacy pickle protocol {proto}", p)

    dt = {
        "f32": torch.randn(3, 4), "f64": torch.randn(2, 2, dtype=torch.float64),
        "f16": torch.randn(5).half(), "bf16": torch.randn(7).bfloat16(),
        "i64": torch.arange(-3, 3), "i32": torch.arange(6, dtype=torch.int32).reshape(2, 3),
        "i16": torch.tensor([-2, 7], dtype=torch.int16), "i8": torch.tensor([-128, 127], dtype=torch.int8),
        "u8": torch.tensor([0, 255], dtype=torch.uint8), "bool": torch.tensor([True, False, True]),
        "c64": torch.randn(3, dtype=torch.complex64), "empty": torch.zeros(0, 3),
        "scalar": torch.tensor(2.5), "nan": torch.tensor([float("nan"), float("inf"), -0.0]),
    }
    converts("legacy dtypes", legacy_save(dt, "dtypes.pt"))

    base = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    views = {"base": base, "t": base.t(), "rows": base[1:3], "cols": base[:, ::2],
             "narrow": base.narrow(1, 2, 3), "elem": base[2, 5], "expand": base[0:1, 0:2].expand(3, 2)}
    converts("legacy views", legacy_save(views, "views.pt"), expect_shared=[sorted(views)])

    converts("legacy parameters",
             legacy_save({"w": nn.Parameter(torch.randn(3, 3)),
                          "b": nn.Parameter(torch.zeros(3), requires_grad=False)}, "params.pt"))
    converts("legacy nested", legacy_save(
        {"model": {"encoder": {"w": torch.ones(2)}, "head.b": torch.zeros(1)},
         "layers": [torch.ones(2), {"w": torch.zeros(3)}], "config_name": "tiny"}, "nested.pt"))
    p = legacy_save({"w": torch.ones(2), "epoch": 3}, "leaves.pt")
    refused("legacy non-tensor leaves", p, "MG-CONV-NOT-TENSOR")
    converts("legacy non-tensor leaves dropped", p, extra=("--drop-non-tensors",), expect_dropped=["epoch"])
    refused("legacy complex128", legacy_save({"c": torch.randn(2, dtype=torch.complex128)}, "c128.pt"),
            "MG-CONV-UNSUPPORTED")

    # ---- legacy files laid out by hand --------------------------------------
    fs = torch.FloatStorage
    raw = torch.arange(6, dtype=torch.float32).numpy().tobytes()
    s0 = Storage(fs, "0", 6)
    p = os.path.join(d, "handmade.pt")
    write_legacy(p, {"a": Tensor(s0, 1, (2, 2), (1, 2)), "b": Tensor(s0, 0, (6,), (1,))}, ["0"], [(6, raw)])
    converts("legacy hand-laid strided", p, expect_shared=[["a", "b"]])
    # sys_info says big-endian: torch 1.13 ignores sys_info and reads the
    # storages little-endian (what _legacy_save writes on any host); so does
    # convert, and both agree.
    p = os.path.join(d, "sysinfo-big.pt")
    write_legacy(p, {"a": Tensor(s0, 0, (6,), (1,))}, ["0"], [(6, raw)],
                 sys_info=dict(SYS_INFO, little_endian=False))
    converts("legacy sys_info big-endian (ignored, as torch does)", p)

    # Refusals (torch.load itself fails or reads other bytes on each).
    p = os.path.join(d, "truncated.pt")
    with open(os.path.join(d, "dtypes.pt"), "rb") as f:
        whole = f.read()
    with open(p, "wb") as f:
        f.write(whole[:-3])
    refused("legacy truncated storage", p, "MG-CONV-STORAGE")
    p = os.path.join(d, "wrong-numel.pt")  # torch: "storage has wrong byte size"
    write_legacy(p, {"a": Tensor(s0, 0, (5,), (1,))}, ["0"], [(5, raw[:20])])
    refused("legacy wrong numel", p, "MG-CONV-STORAGE")
    p = os.path.join(d, "listed-twice.pt")
    write_legacy(p, {"a": Tensor(s0, 0, (6,), (1,))}, ["0", "0"], [(6, raw), (6, raw)])
    refused("legacy key listed twice", p, "MG-CONV-STORAGE")
    p = os.path.join(d, "listed-unnamed.pt")  # torch: assert key in deserialized_objects
    write_legacy(p, {"a": Tensor(s0, 0, (6,), (1,))}, ["0", "9"], [(6, raw), (6, raw)])
    refused("legacy key listed but never named", p, "MG-CONV-STORAGE")
    p = os.path.join(d, "unlisted.pt")  # torch: an uninitialized storage
    write_legacy(p, {"a": Tensor(s0, 0, (6,), (1,)), "b": Tensor(Storage(fs, "1", 6), 0, (6,), (1,))},
                 ["0"], [(6, raw)])
    refused("legacy storage not listed", p, "MG-CONV-STORAGE")
    p = os.path.join(d, "two-dtypes.pt")
    write_legacy(p, {"a": Tensor(s0, 0, (6,), (1,)), "b": Tensor(Storage(torch.IntStorage, "0", 6), 0, (6,), (1,))},
                 ["0"], [(6, raw)])
    refused("legacy key with two dtypes", p, "MG-CONV-STORAGE")
    p = os.path.join(d, "view.pt")
    write_legacy(p, {"a": Tensor(Storage(fs, "0", 6, ("7", 2, 3)), 0, (3,), (1,))}, ["0"], [(6, raw)])
    refused("legacy storage view", p, "MG-CONV-UNSUPPORTED")
    p = os.path.join(d, "oob.pt")
    write_legacy(p, {"a": Tensor(s0, 4, (2, 2), (2, 1))}, ["0"], [(6, raw)])
    refused("legacy view past its storage", p, "MG-CONV-STORAGE")
    p = os.path.join(d, "os_system.pt")
    write_legacy(p, {"a": Reduce(os.system, ("true",))}, [], [])
    refused("legacy os.system", p, "MG-PK-CRITICAL-IMPORT")
    # Every hostile fixture of the scanner's (make_pickles.py) as the
    # object pickle of a legacy file, and as the "pickle" member of a tar.
    blocking = set(make_pickles.BLOCKING.split(","))
    # Where torch.load itself stops before the hostile part, the scan may
    # pass the file and the reader refuses it (MG-CONV-UNSUPPORTED): a
    # tar's "pickle" member is read up to its first STOP only, and no
    # Python unpickles protocol 6.
    reader_refuses = {("tar", "second_pickle.pkl"), ("legacy", "proto_6.pkl"), ("tar", "proto_6.pkl")}
    hostile = 0
    for fname, data, must, _ in make_pickles.fixtures():
        ids = [i for i in must.split(",") if i in blocking]
        if not ids or fname == "torch_data.pkl":
            continue
        hostile += 1
        for kind in ("legacy", "tar"):
            p = os.path.join(d, f"fixture_{kind}_{fname}.pt")
            if kind == "legacy":
                with open(p, "wb") as f:
                    f.write(legacy_bytes(data, [], []))
            else:
                write_tar(p, None, [], [], pickle_bytes=data)
            out = p + ".safetensors"
            code, _, se = rt.run("convert", "-o", out, p)
            leftovers = [n for n in os.listdir(d) if ".mg-tmp-" in n]
            want = ids + (["MG-CONV-UNSUPPORTED"] if (kind, fname) in reader_refuses else [])
            check(code == 1 and any(i in se for i in want) and not os.path.exists(out) and not leftovers,
                  f"{kind} {fname}: exit {code}, want one of {want}: {se.strip()}")
    check(hostile >= 25, f"only {hostile} hostile fixtures")

    # ---- tar checkpoints ------------------------------------------------------
    types = [(torch.FloatStorage, torch.float32), (torch.DoubleStorage, torch.float64),
             (torch.HalfStorage, torch.float16), (torch.BFloat16Storage, torch.bfloat16),
             (torch.LongStorage, torch.int64), (torch.IntStorage, torch.int32),
             (torch.ShortStorage, torch.int16), (torch.CharStorage, torch.int8),
             (torch.ByteStorage, torch.uint8), (torch.BoolStorage, torch.bool),
             (torch.ComplexFloatStorage, torch.complex64)]
    storages, tensors, obj = [], [], {}
    for i, (stype, dtype) in enumerate(types):
        v = (torch.arange(12) % 2 == 0) if dtype == torch.bool else torch.arange(12).to(dtype)
        storages.append((100 + i, stype, 12, raw_of(v)))
        tensors.append((200 + i, 100 + i, (3, 4), (4, 1), 0))  # whole
        tensors.append((300 + i, 100 + i, (2, 3), (1, 4), 1))  # a transposed window
        obj[str(dtype).replace("torch.", "")] = TarTensor(200 + i)
        obj[str(dtype).replace("torch.", "") + "_view"] = TarTensor(300 + i)
    obj["nested"] = {"w": TarTensor(200), "empty": TarTensor(400)}
    tensors.append((400, 100, (0, 3), (3, 1), 0))
    p = os.path.join(d, "old.pt")
    write_tar(p, obj, storages, tensors)
    loaded = torch.load(p)  # the tar layout is what torch reads
    check(loaded["float32_view"].tolist() == [[1, 5, 9], [2, 6, 10]], f"tar: torch.load {loaded['float32_view']}")
    check(loaded["int64"].tolist() == torch.arange(12).reshape(3, 4).tolist(), "tar: torch.load values")
    converts("tar every dtype, views", p,
             expect_shared=[["float32", "float32_view", "nested.empty", "nested.w"], ["int8", "int8_view"]])
    # The "pickle" member in every protocol torch's pickler could use; in
    # protocol 0 a persistent id is a PERSID line, in 1+ a BINPERSID str.
    for proto in (0, 1, 2, 4):
        buf = io.BytesIO()
        TarPickler(buf, protocol=proto).dump(collections.OrderedDict([("a", TarTensor(1)), ("b", [TarTensor(2)])]))
        p = os.path.join(d, f"old-p{proto}.pt")
        write_tar(p, None, [(5, torch.FloatStorage, 6, raw)], [(1, 5, (6,), (1,), 0), (2, 5, (3,), (2,), 0)],
                  pickle_bytes=buf.getvalue())
        check(torch.load(p)["b"][0].tolist() == [0, 2, 4], f"tar protocol {proto}: torch.load")
        converts(f"tar pickle protocol {proto}", p, expect_shared=[["a", "b.0"]])
    # A parameter over a tar tensor (torch's _rebuild_parameter).
    p = os.path.join(d, "old-param.pt")
    write_tar(p, {"p": Reduce(torch._utils._rebuild_parameter, (TarTensor(1), True, collections.OrderedDict()))},
              [(5, torch.FloatStorage, 6, raw)], [(1, 5, (6,), (1,), 0)])
    converts("tar parameter", p)

    # Tar refusals.
    fs_rec = [(5, torch.FloatStorage, 6, raw)]
    p = os.path.join(d, "tar-os.pt")
    write_tar(p, {"a": Reduce(os.system, ("true",))}, fs_rec, [])
    refused("tar os.system", p, "MG-PK-CRITICAL-IMPORT")
    p = os.path.join(d, "tar-oob.pt")
    write_tar(p, {"a": TarTensor(1)}, fs_rec, [(1, 5, (2, 2), (2, 1), 4)])
    refused("tar view past its storage", p, "MG-CONV-STORAGE")
    p = os.path.join(d, "tar-nostorage.pt")
    write_tar(p, {"a": TarTensor(1)}, fs_rec, [(1, 6, (6,), (1,), 0)])
    refused("tar tensor naming no storage", p, "MG-CONV-STORAGE")
    p = os.path.join(d, "tar-dupkey.pt")
    write_tar(p, {"a": TarTensor(5)}, fs_rec, [(5, 5, (6,), (1,), 0)])
    refused("tar key used by a storage and a tensor", p, "MG-CONV-STORAGE")
    p = os.path.join(d, "tar-views.pt")
    write_tar(p, {"a": TarTensor(1)}, fs_rec, [(1, 5, (6,), (1,), 0)], views=[(7, 5, 1, 2)])
    refused("tar storage views", p, "MG-CONV-UNSUPPORTED")
    p = os.path.join(d, "tar-unknown-id.pt")
    write_tar(p, {"a": TarTensor(9)}, fs_rec, [(1, 5, (6,), (1,), 0)])
    refused("tar id naming no tensor", p, "MG-CONV-NOT-ALLOWED")
    p = os.path.join(d, "tar-storage-leaf.pt")
    write_tar(p, {"a": TarTensor(5)}, fs_rec, [])
    refused("tar id naming a storage", p, "MG-CONV-NOT-ALLOWED")
    # A storage whose count runs past its member (truncated), and one whose
    # count is not its type's: the scan or the reader refuses, never both
    # pass.
    good = pickle.dumps(1, protocol=2) + pickle.dumps((5, "cpu", torch.FloatStorage), protocol=2)
    p = os.path.join(d, "tar-truncated.pt")
    write_tar(p, {"a": TarTensor(1)}, [], [(1, 5, (6,), (1,), 0)],
              storages_bytes=good + struct.pack("<q", 6) + raw[:20])
    code, _, se = rt.run("convert", "-o", p + ".safetensors", p)
    check(code == 1 and ("MG-CONV-STORAGE" in se or "MG-TAR-TORCH-LAYOUT" in se) and
          not os.path.exists(p + ".safetensors"), f"tar truncated storage: exit {code}: {se.strip()}")
    # Members whose data overlap: a global PAX "size" stretches each over
    # the next (torch.load still reads it). The scan refuses it; below its
    # bar (--fail-on critical) the reader does.
    p = os.path.join(d, "tar-overlap.pt")
    with tarfile.open(p, "w", format=tarfile.PAX_FORMAT, pax_headers={"size": "2000"}) as tar:
        for name, data in (("pickle", pickle.dumps({"a": 1})), ("tensors", pickle.dumps(0)),
                           ("storages", pickle.dumps(0) + pickle.dumps([]))):
            tar_member(tar, name, data)
    refused("tar members that overlap", p, "MG-TAR-PAX-MISMATCH")
    refused("tar members that overlap, below the scan's bar", p, "MG-CONV-STORAGE", extra=("--fail-on", "critical"))
    p = os.path.join(d, "tar-symlink.pt")
    write_tar(p, {"a": TarTensor(1)}, fs_rec, [(1, 5, (6,), (1,), 0)])
    with tarfile.open(p, "a", format=tarfile.PAX_FORMAT) as tar:
        ti = tarfile.TarInfo("pickle")
        ti.type = tarfile.SYMTYPE
        ti.linkname = "tensors"
        tar.addfile(ti)
    code, _, se = rt.run("convert", "-o", p + ".safetensors", p)
    check(code == 1 and not os.path.exists(p + ".safetensors"), f"tar symlink member: exit {code}: {se.strip()}")

    if rt.FAILURES:
        print(f"{len(rt.FAILURES)} failure(s)")
        sys.exit(1)
    print("ok")


if __name__ == "__main__":
    try:
        main()
    finally:
        for leftover in rt.SCRATCH:
            shutil.rmtree(leftover, ignore_errors=True)
