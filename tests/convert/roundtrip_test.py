"""Round trips of `modelgate convert` (issue 15) against Debian's torch.

Each checkpoint is made here, at test time, by torch.save (or, for the
hostile and edge cases, laid out as torch.save lays it out by Python's own
pickle and zipfile). For every one that converts, torch.load of the
original and the independent reader in tests/python/st_reference.py give
the same tensors: names (dotted, flattened), dtype, shape and every byte.
Every refusal leaves no output file and exits 1 with the finding named.

usage: roundtrip_test.py MODELGATE
"""
import collections
import hashlib
import io
import json
import os
import pickle
import shutil
import subprocess
import sys
import tempfile
import zipfile

import torch
import torch.nn as nn

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "python"))
import st_reference  # noqa: E402

MODELGATE = sys.argv[1]
FAILURES = []
SCRATCH = []  # removed at exit, whatever the outcome

ST_DTYPE = {
    torch.float32: "F32", torch.float64: "F64", torch.float16: "F16", torch.bfloat16: "BF16",
    torch.int64: "I64", torch.int32: "I32", torch.int16: "I16", torch.int8: "I8",
    torch.uint8: "U8", torch.bool: "BOOL", torch.complex64: "C64",
}


def check(cond, what):
    if not cond:
        FAILURES.append(what)
        print("FAIL:", what)


def run(*args):
    p = subprocess.run([MODELGATE, *args], capture_output=True, text=True)
    return p.returncode, p.stdout, p.stderr


def flatten(obj, prefix=""):
    """flatten is {dotted name: value} of nested dicts, as convert names them."""
    out = {}
    for k, v in obj.items():
        name = f"{prefix}.{k}" if prefix else k
        if isinstance(v, dict):
            out.update(flatten(v, name))
        elif isinstance(v, (list, tuple)) and any(isinstance(i, (torch.Tensor, dict, list, tuple)) for i in v):
            out.update(flatten(dict((str(i), x) for i, x in enumerate(v)), name))
        else:
            out[name] = v
    return out


def le_bytes(t):
    """le_bytes is a tensor's elements, row-major, little-endian."""
    t = t.detach().contiguous()
    if t.dtype == torch.bfloat16:
        t = t.view(torch.int16)
    a = t.numpy()
    return a.astype(a.dtype.newbyteorder("<"), copy=False).tobytes()


def read_header(path):
    with open(path, "rb") as f:
        data = f.read()
    header, _ = st_reference.read_header(data)
    return header


def converts(name, path, expect_shared=(), extra=(), expect_dropped=()):
    out = path + ".safetensors"
    code, so, se = run("convert", "-o", out, *extra, path)
    check(code == 0, f"{name}: exit {code}, stderr {se.strip()}")
    if code != 0:
        return None
    original = flatten(torch.load(path, map_location="cpu"))
    tensors, metadata = st_reference.read(out)
    header = read_header(out)
    want = {k: v for k, v in original.items() if isinstance(v, torch.Tensor)}
    check(sorted(tensors) == sorted(want), f"{name}: names {sorted(tensors)} != {sorted(want)}")
    for k, t in want.items():
        if k not in tensors:
            continue
        h = header[k]
        check(h["dtype"] == ST_DTYPE[t.dtype], f"{name}: {k} dtype {h['dtype']} for {t.dtype}")
        check(h["shape"] == list(t.shape), f"{name}: {k} shape {h['shape']} != {list(t.shape)}")
        check(tensors[k].tobytes() == le_bytes(t), f"{name}: {k} bytes differ")
    strings = {k: v for k, v in original.items() if isinstance(v, str)}
    for k, v in strings.items():
        check(metadata.get(k) == v, f"{name}: string leaf {k} not in __metadata__")
    with open(path, "rb") as f:
        import hashlib
        digest = hashlib.sha256(f.read()).hexdigest()
    check(metadata.get("modelgate.source.sha256") == digest, f"{name}: source sha256 missing or wrong")
    check(metadata.get("format") == "pt", f"{name}: format is not pt")
    for group in expect_shared:
        line = "shared storage (each written with its own bytes): " + " ".join(f'"{n}"' for n in group)
        check(line in so, f"{name}: shared {group} not reported in {so!r}")
    for d in expect_dropped:
        check(f'dropped "{d}"' in so, f"{name}: dropped {d} not listed in {so!r}")
    return out


def refused(name, path, finding, extra=(), exit_code=1):
    out = path + ".safetensors"
    code, _, se = run("convert", "-o", out, *extra, path)
    check(code == exit_code, f"{name}: exit {code} (want {exit_code}), stderr {se.strip()}")
    check(finding in se, f"{name}: {finding} not in stderr {se.strip()!r}")
    check("nothing was written" in se, f"{name}: no 'nothing was written' line")
    check(not os.path.exists(out), f"{name}: an output file was written")
    leftovers = [n for n in os.listdir(os.path.dirname(out)) if ".mg-tmp-" in n]
    check(not leftovers, f"{name}: temp files left: {leftovers}")


# ---- hand-laid checkpoints (torch.save's layout, any content) ---------------

class Storage:
    """A storage torch.save would name by persistent id."""
    def __init__(self, stype, key, numel):
        self.stype, self.key, self.numel = stype, key, numel


class Tensor:
    """Pickles as torch.save pickles a tensor: _rebuild_tensor_v2."""
    def __init__(self, storage, offset, size, stride):
        self.args = (storage, offset, tuple(size), tuple(stride), False, collections.OrderedDict())

    def __reduce__(self):
        return (torch._utils._rebuild_tensor_v2, self.args)


class Reduce:
    """Pickles as a call of `func` with `args` (nothing runs here)."""
    def __init__(self, func, args):
        self.func, self.args = func, args

    def __reduce__(self):
        return (self.func, self.args)


class Pickler(pickle.Pickler):
    def persistent_id(self, obj):
        if isinstance(obj, Storage):
            return ("storage", obj.stype, obj.key, "cpu", obj.numel)
        return None


def write_zip(path, obj, storages, torch2=False):
    """write_zip lays out archive/data.pkl and archive/data/<key> stored.
    torch2: the records torch >= 2.4's writer adds (.format_version,
    .storage_alignment, byteorder, .data/serialization_id), and each
    storage's bytes aligned to 64 with an "FB" padding extra field, as its
    PyTorchStreamWriter does; Debian's torch 1.13 cannot write these."""
    buf = io.BytesIO()
    Pickler(buf, protocol=2).dump(obj)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        z.writestr("archive/data.pkl", buf.getvalue())
        if torch2:
            z.writestr("archive/.format_version", "1")
            z.writestr("archive/.storage_alignment", "64")
            z.writestr("archive/byteorder", "little")
        for key, raw in storages.items():
            name = f"archive/data/{key}"
            info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
            if torch2:
                start = z.fp.tell() + 30 + len(name) + 4  # local header, name, extra id and size
                pad = -start % 64
                info.extra = b"FB" + pad.to_bytes(2, "little") + b"Z" * pad
            z.writestr(info, raw)
        z.writestr("archive/version", "3\n")
        if torch2:
            z.writestr("archive/.data/serialization_id", "1234567890123456789012345678901234567890")


def main():
    d = tempfile.mkdtemp(prefix="mg-convert-")
    SCRATCH.append(d)
    torch.manual_seed(0)

    # Layers a registry sees: conv, batch norm, embedding, LSTM, linear.
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
    p = os.path.join(d, "pytorch_model.bin")
    torch.save(net.state_dict(), p)
    converts("state dict", p)

    # Every dtype safetensors names; empty and 0-dim tensors.
    dt = {
        "f32": torch.randn(3, 4), "f64": torch.randn(2, 2, dtype=torch.float64),
        "f16": torch.randn(5).half(), "bf16": torch.randn(7).bfloat16(),
        "i64": torch.arange(-3, 3), "i32": torch.arange(6, dtype=torch.int32).reshape(2, 3),
        "i16": torch.tensor([-2, 7], dtype=torch.int16), "i8": torch.tensor([-128, 127], dtype=torch.int8),
        "u8": torch.tensor([0, 255], dtype=torch.uint8), "bool": torch.tensor([True, False, True]),
        "c64": torch.randn(3, dtype=torch.complex64), "empty": torch.zeros(0, 3),
        "scalar": torch.tensor(2.5), "nan": torch.tensor([float("nan"), float("inf"), -0.0]),
    }
    p = os.path.join(d, "dtypes.pt")
    torch.save(dt, p)
    converts("dtypes", p)

    # Views over shared storages: each written with its own bytes.
    base = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    views = {"base": base, "t": base.t(), "rows": base[1:3], "cols": base[:, ::2],
             "narrow": base.narrow(1, 2, 3), "elem": base[2, 5], "expand": base[0:1, 0:2].expand(3, 2)}
    p = os.path.join(d, "views.pt")
    torch.save(views, p)
    converts("views", p, expect_shared=[sorted(views)])

    # A view whose storage window (80 MiB) is over gather_window_bytes (64
    # MiB): read one contiguous run at a time, not gathered in memory.
    wide = torch.arange(6 * (1 << 22), dtype=torch.float32).reshape(6, 1 << 22)
    p = os.path.join(d, "wide.pt")
    torch.save({"cols": wide[:, 1000:2000], "strided": wide[::5, 7:9]}, p)
    converts("wide views read run by run", p, expect_shared=[["cols", "strided"]])
    os.remove(p)
    os.remove(p + ".safetensors")

    # Nested dicts flatten to dotted names; strings go to __metadata__.
    nested = {"model": {"encoder": {"w": torch.ones(2)}, "head.b": torch.zeros(1)},
              "config_name": "tiny"}
    p = os.path.join(d, "nested.pt")
    torch.save(nested, p)
    converts("nested", p)

    # Lists and tuples of tensors are named by index (name.0, name.1, ...);
    # a list of plain numbers stays one non-tensor leaf.
    p = os.path.join(d, "lists.pt")
    torch.save({"layers": [torch.ones(2), {"w": torch.zeros(3)}], "pair": (torch.arange(4), torch.eye(2)),
                "note": "x"}, p)
    converts("lists and tuples", p)
    p = os.path.join(d, "list-clash.pt")
    torch.save({"a": [torch.ones(1)], "a.0": torch.zeros(1)}, p)
    refused("list name clash", p, "MG-CONV-NAME")

    # Parameters (nn.Parameter pickles through _rebuild_parameter).
    p = os.path.join(d, "params.pt")
    torch.save({"w": nn.Parameter(torch.randn(3, 3)), "b": nn.Parameter(torch.zeros(3), requires_grad=False)}, p)
    converts("parameters", p)

    # Non-tensor leaves: refused unless dropped, then listed.
    p = os.path.join(d, "leaves.pt")
    torch.save({"w": torch.ones(2), "epoch": 3, "lr": 0.1, "steps": [1, 2]}, p)
    refused("non-tensor leaves", p, "MG-CONV-NOT-TENSOR")
    converts("non-tensor leaves dropped", p, extra=("--drop-non-tensors",),
             expect_dropped=["epoch", "lr", "steps"])

    # A signed output verifies with the key's public half.
    key = os.path.join(d, "k")
    code, _, se = run("keygen", "--out", key)
    check(code == 0, f"keygen: {se}")
    p = os.path.join(d, "signed.pt")
    torch.save({"w": torch.randn(4, 4), "v": torch.arange(3)}, p)
    out = converts("signed", p, extra=("--key", key + ".key", "--model", "org/tiny", "--version", "7"))
    if out:
        code, so, se = run("verify", "--pubkey", key + ".pub", "-f", "json", out)
        check(code == 0, f"signed: verify exit {code}: {so} {se}")
        if code == 0:
            sig = json.loads(so)["files"][0]["signature"]
            check(sig["status"] == "valid", f"signed: status {sig}")
    # An encrypted key: its passphrase from --passphrase-file (0600).
    ekey = os.path.join(d, "ekey")
    pw = os.path.join(d, "pw")
    with open(os.open(pw, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
        f.write("correct horse\n")
    code, _, se = run("keygen", "--encrypt", "--passphrase-file", pw, "--out", ekey)
    check(code == 0, f"keygen --encrypt: {se}")
    out = converts("signed, encrypted key", p, extra=("--key", ekey + ".key", "--passphrase-file", pw))
    if out:
        code, so, se = run("verify", "--pubkey", ekey + ".pub", out)
        check(code == 0, f"signed, encrypted key: verify exit {code}: {so} {se}")
    fresh = os.path.join(d, "never.safetensors")
    code, _, se = run("convert", "-o", fresh, "--key", ekey + ".key", p)
    check(code == 2 and "MG-SIG-KEY-ENCRYPTED" in se and not os.path.exists(fresh),
          f"encrypted key without passphrase: exit {code}, {se.strip()}")
    code, _, se = run("convert", "-o", fresh, "--passphrase-file", pw, p)
    check(code == 2 and "go with --key" in se and not os.path.exists(fresh),
          f"--passphrase-file without --key: exit {code}, {se.strip()}")

    # -f json: the report names every tensor written, and the refusal.
    code, so, se = run("convert", "-f", "json", "-o", fresh, "--drop-non-tensors", os.path.join(d, "leaves.pt"))
    check(code == 0, f"json: exit {code}: {se}")
    rep = json.loads(so) if code == 0 else {}
    check(rep.get("schema") == "modelgate.convert/v1" and rep.get("result") == "converted", f"json: {so[:300]}")
    check([t["name"] for t in rep.get("tensors", [])] == ["w"] and rep["tensors"][0]["dtype"] == "F32"
          and rep["tensors"][0]["shape"] == [2], f"json: tensors {rep.get('tensors')}")
    check(rep.get("output", {}).get("written") is True and rep["output"]["size"] == os.path.getsize(fresh),
          f"json: output {rep.get('output')}")
    check(len(rep.get("dropped", [])) == 3, f"json: dropped {rep.get('dropped')}")
    check(rep.get("input", {}).get("sha256") == hashlib.sha256(open(os.path.join(d, "leaves.pt"), "rb").read()).hexdigest(),
          "json: input sha256")
    os.unlink(fresh)
    code, so, se = run("convert", "-f", "json", "-o", fresh, os.path.join(d, "leaves.pt"))
    rep = json.loads(so) if so.strip() else {}
    check(code == 1 and rep.get("result") == "refused" and not rep["output"]["written"]
          and rep["blocking"][0]["id"] == "MG-CONV-NOT-TENSOR" and not os.path.exists(fresh),
          f"json refused: exit {code}: {so[:300]}")
    code, _, se = run("convert", "-o", fresh, "--version", "3", p)
    check(code == 2 and "need --key" in se and not os.path.exists(fresh),
          f"--version without --key: exit {code}, {se.strip()}")

    # Hand-laid edge cases that torch.load itself reads.
    fs = torch.FloatStorage
    raw = torch.arange(6, dtype=torch.float32).numpy().tobytes()
    p = os.path.join(d, "handmade.pt")
    s0 = Storage(fs, "0", 6)
    write_zip(p, collections.OrderedDict([("a", Tensor(s0, 1, (2, 2), (1, 2))), ("b", Tensor(s0, 0, (6,), (1,)))]),
              {"0": raw})
    converts("hand-laid strided", p, expect_shared=[["a", "b"]])

    # The layout torch >= 2.4 writes (extra records, 64-byte aligned
    # storages); torch 1.13 still loads it, and convert must give the same.
    p = os.path.join(d, "torch2-layout.pt")
    bf = torch.randn(3, 5).to(torch.bfloat16)
    write_zip(p, collections.OrderedDict([("w", Tensor(Storage(torch.BFloat16Storage, "0", 15), 0, (3, 5), (5, 1))),
                                          ("b", Tensor(Storage(torch.LongStorage, "1", 4), 1, (3,), (1,)))]),
              {"0": bf.view(torch.int16).numpy().tobytes(), "1": torch.arange(4).numpy().tobytes()}, torch2=True)
    with zipfile.ZipFile(p) as z:
        for i in z.infolist():
            if i.filename.startswith("archive/data/"):
                check((i.header_offset + 30 + len(i.filename) + len(i.extra)) % 64 == 0,
                      f"torch2 layout: {i.filename} data not 64-aligned")
    converts("torch >= 2.4 layout", p)

    # A byteorder record saying "big" (torch >= 2.1 on a big-endian host):
    # the output is little-endian all the same. torch 1.13 cannot read such
    # a file, so the expected values come from numpy.
    import numpy as np
    values = {"f": np.array([1.5, -2.25, 3e38], dtype=">f4"), "h": np.array([0.5, -1.0], dtype=">f2"),
              "q": np.array([1, -2, 2**40], dtype=">i8"), "c": np.array([1 + 2j, -3.5j], dtype=">c8"),
              "b": np.array([1, 0, 1], dtype="|b1")}
    stypes = {"f": fs, "h": torch.HalfStorage, "q": torch.LongStorage, "c": torch.ComplexFloatStorage,
              "b": torch.BoolStorage}
    p = os.path.join(d, "bigendian.pt")
    obj = {k: Tensor(Storage(stypes[k], k, len(v)), 0, (len(v),), (1,)) for k, v in values.items()}
    write_zip(p, obj, {k: v.tobytes() for k, v in values.items()})
    with zipfile.ZipFile(p, "a") as z:
        z.writestr("archive/byteorder", "big")
    out = p + ".safetensors"
    code, _, se = run("convert", "-o", out, p)
    check(code == 0, f"big-endian: exit {code}: {se}")
    if code == 0:
        got, _ = st_reference.read(out)
        for k, v in values.items():
            want = v.astype(v.dtype.newbyteorder("<")).tobytes()
            check(got[k].tobytes() == want, f"big-endian: {k} not little-endian in the output")

    # ---- refusals: nothing is written ---------------------------------------
    # A view past its storage (torch.load would read out of bounds or fail).
    p = os.path.join(d, "oob.pt")
    write_zip(p, {"a": Tensor(Storage(fs, "0", 6), 4, (2, 2), (2, 1))}, {"0": raw})
    refused("view past storage", p, "MG-CONV-STORAGE")
    # A storage record shorter than its numel says.
    p = os.path.join(d, "short.pt")
    write_zip(p, {"a": Tensor(Storage(fs, "0", 6), 0, (6,), (1,))}, {"0": raw[:20]})
    refused("short record", p, "MG-CONV-STORAGE")
    # One key named as two dtypes.
    p = os.path.join(d, "twotypes.pt")
    write_zip(p, {"a": Tensor(Storage(fs, "0", 6), 0, (6,), (1,)),
                  "b": Tensor(Storage(torch.IntStorage, "0", 6), 0, (6,), (1,))}, {"0": raw})
    refused("two dtypes", p, "MG-CONV-STORAGE")
    # A missing record.
    p = os.path.join(d, "missing.pt")
    write_zip(p, {"a": Tensor(Storage(fs, "1", 6), 0, (6,), (1,))}, {"0": raw})
    refused("missing record", p, "MG-CONV-STORAGE")
    # complex128 has no safetensors dtype.
    p = os.path.join(d, "c128.pt")
    torch.save({"c": torch.randn(2, dtype=torch.complex128)}, p)
    refused("complex128", p, "MG-CONV-UNSUPPORTED")
    # An allowlisted global called outside the rebuild path.
    p = os.path.join(d, "notallowed.pt")
    write_zip(p, {"a": Reduce(collections.OrderedDict, ([("x", 1)],))}, {})
    refused("OrderedDict with arguments", p, "MG-CONV-NOT-ALLOWED")
    # Code execution and unknown imports: the scan refuses first.
    p = os.path.join(d, "os_system.pt")
    write_zip(p, {"a": Reduce(os.system, ("true",))}, {})
    refused("os.system", p, "MG-PK-CRITICAL-IMPORT")
    p = os.path.join(d, "eval.pt")
    write_zip(p, {"a": Reduce(eval, ("1",))}, {})
    refused("builtins.eval", p, "MG-PK-CRITICAL-IMPORT")
    p = os.path.join(d, "counter.pt")
    write_zip(p, {"a": Reduce(collections.Counter, ())}, {})
    refused("an allowlisted global that rebuilds no tensor", p, "MG-CONV-NOT-ALLOWED")
    p = os.path.join(d, "unknown.pt")
    write_zip(p, {"a": Reduce(Storage, (1, 2, 3))}, {})
    refused("unknown import", p, "MG-PK-UNKNOWN-IMPORT")
    p = os.path.join(d, "evil.pkl")
    with open(p, "wb") as f:
        pickle.dump(Reduce(os.system, ("true",)), f, protocol=2)
    refused("raw pickle with os.system", p, "MG-PK-CRITICAL-IMPORT")
    # Legacy and tar checkpoints: legacy_roundtrip_test.py.
    # Every hostile pickle of the scanner's fixtures (tests/scanner/
    # make_pickles.py), as the data.pkl of a torch zip: the scan's own
    # finding refuses it and nothing is written. The hand-assembled torch
    # data.pkl among them converts.
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "scanner"))
    import make_pickles  # noqa: E402
    blocking = set(make_pickles.BLOCKING.split(","))
    hostile = 0
    for fname, data, must, _ in make_pickles.fixtures():
        p = os.path.join(d, "fixture_" + fname + ".pt")
        with zipfile.ZipFile(p, "w", zipfile.ZIP_STORED) as z:
            z.writestr("archive/data.pkl", data)
            z.writestr("archive/data/0", bytes(24))
            z.writestr("archive/version", "3\n")
        ids = [i for i in must.split(",") if i in blocking]
        if fname == "torch_data.pkl":
            out = p + ".safetensors"
            code, _, se = run("convert", "-o", out, p)
            check(code == 0, f"{fname}: exit {code}: {se}")
            if code == 0:
                h = read_header(out)
                check(h["fc.weight"]["shape"] == [2, 3], f"{fname}: shape {h['fc.weight']}")
        elif ids:
            hostile += 1
            out = p + ".safetensors"
            code, _, se = run("convert", "-o", out, p)
            check(code == 1 and any(i in se for i in ids) and not os.path.exists(out),
                  f"{fname}: exit {code}, want one of {ids}: {se.strip()}")
    check(hostile >= 25, f"only {hostile} hostile fixtures")

    # An existing output is left as it was on refusal.
    p = os.path.join(d, "oob.pt")
    with open(p + ".safetensors", "wb") as f:
        f.write(b"keep")
    code, _, _ = run("convert", "-o", p + ".safetensors", p)
    with open(p + ".safetensors", "rb") as f:
        check(code == 1 and f.read() == b"keep", "refusal replaced an existing output")

    if FAILURES:
        print(f"{len(FAILURES)} failure(s)")
        sys.exit(1)
    print("ok")


if __name__ == "__main__":
    try:
        main()
    finally:
        for leftover in SCRATCH:
            shutil.rmtree(leftover, ignore_errors=True)
