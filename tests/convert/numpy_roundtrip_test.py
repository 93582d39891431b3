"""Round trips of `modelgate convert` for .npy, .npz and joblib files (issue 15).

Every file is made here, at test time, by Debian's numpy (np.save, np.savez,
np.savez_compressed) and joblib (joblib.dump), or, for the hostile cases,
by editing what they wrote. For every one that converts, np.load /
joblib.load of the original and the independent reader in
tests/python/st_reference.py give the same arrays: names, dtype, shape and
every byte, little-endian. Every refusal exits 1 with the finding named and
leaves no output file and no temp file.

usage: numpy_roundtrip_test.py MODELGATE
"""
import hashlib
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import zipfile
import zlib

import joblib
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "python"))
import st_reference  # noqa: E402

MODELGATE = sys.argv[1]
FAILURES = []

ST_DTYPE = {
    "b1": "BOOL", "u1": "U8", "i1": "I8", "i2": "I16", "u2": "U16", "i4": "I32", "u4": "U32",
    "i8": "I64", "u8": "U64", "f2": "F16", "f4": "F32", "f8": "F64", "c8": "C64",
}


def check(cond, what):
    if not cond:
        FAILURES.append(what)
        print("FAIL:", what)


def run(*args):
    p = subprocess.run([MODELGATE, *args], capture_output=True, text=True)
    return p.returncode, p.stdout, p.stderr


def flatten(obj, prefix=""):
    """flatten names nested dicts and lists as convert does (dotted; list items by index)."""
    out = {}
    if isinstance(obj, dict):
        items = obj.items()
    else:
        items = ((str(i), v) for i, v in enumerate(obj))
    for k, v in items:
        name = f"{prefix}.{k}" if prefix else k
        if isinstance(v, dict) or (isinstance(v, (list, tuple)) and any(
                isinstance(i, (np.ndarray, dict, list, tuple)) for i in v)):
            out.update(flatten(v, name))
        else:
            out[name] = v
    return out


def le_bytes(a):
    """le_bytes is an array's elements, row-major, little-endian."""
    a = np.ascontiguousarray(a)
    return a.astype(a.dtype.newbyteorder("<"), copy=False).tobytes()


def compare(name, out, want, path):
    tensors, metadata = st_reference.read(out)
    with open(out, "rb") as f:
        header, _ = st_reference.read_header(f.read())
    check(sorted(tensors) == sorted(want), f"{name}: names {sorted(tensors)} != {sorted(want)}")
    for k, a in want.items():
        if k not in tensors:
            continue
        h = header[k]
        check(h["dtype"] == ST_DTYPE[a.dtype.str[1:]], f"{name}: {k} dtype {h['dtype']} for {a.dtype.str}")
        check(h["shape"] == list(a.shape), f"{name}: {k} shape {h['shape']} != {list(a.shape)}")
        got = tensors[k].tobytes()
        check(got == le_bytes(a), f"{name}: {k} bytes differ")
    with open(path, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    check(metadata.get("modelgate.source.sha256") == digest, f"{name}: source sha256 missing or wrong")
    check(metadata.get("format") == "np", f"{name}: format is not np")


def converts(name, path, load, extra=(), expect_dropped=()):
    out = path + ".safetensors"
    code, so, se = run("convert", "-o", out, *extra, path)
    check(code == 0, f"{name}: exit {code}, stderr {se.strip()}")
    if code != 0:
        return None
    want = {k: v for k, v in flatten(load(path)).items() if isinstance(v, np.ndarray)}
    compare(name, out, want, path)
    for d in expect_dropped:
        check(f'dropped "{d}"' in so, f"{name}: dropped {d} not listed in {so!r}")
    return out


def refused(name, path, finding, extra=()):
    out = path + ".safetensors"
    code, _, se = run("convert", "-o", out, *extra, path)
    check(code == 1, f"{name}: exit {code} (want 1), stderr {se.strip()}")
    check(finding in se, f"{name}: {finding} not in stderr {se.strip()!r}")
    check("nothing was written" in se, f"{name}: no 'nothing was written' line")
    check(not os.path.exists(out), f"{name}: an output file was written")
    leftovers = [n for n in os.listdir(os.path.dirname(out)) if ".mg-tmp-" in n]
    check(not leftovers, f"{name}: temp files left: {leftovers}")


def npz_load(path):
    with np.load(path) as z:
        return {k: z[k] for k in z.files}


def every_dtype():
    rng = np.random.default_rng(0)
    return {
        "b1": np.array([True, False, True]), "u1": np.array([0, 255], np.uint8),
        "i1": np.array([-128, 127], np.int8), "i2": np.array([-2, 7], "<i2"),
        "u2": np.array([65535, 1], "<u2"), "i4": np.arange(6, dtype="<i4").reshape(2, 3),
        "u4": np.array([4294967295], "<u4"), "i8": np.arange(-3, 3, dtype="<i8"),
        "u8": np.array([2**64 - 1], "<u8"), "f2": rng.standard_normal(5).astype("<f2"),
        "f4": rng.standard_normal((3, 4)).astype("<f4"), "f8": rng.standard_normal((2, 2)),
        "c8": (rng.standard_normal(3) + 1j * rng.standard_normal(3)).astype("<c8"),
        "nan": np.array([np.nan, np.inf, -0.0], "<f4"),
    }


def main():
    d = tempfile.mkdtemp(prefix="mg-convert-np-")
    try:
        cases(d)
    finally:
        shutil.rmtree(d)
    if FAILURES:
        print(f"{len(FAILURES)} failure(s)")
        sys.exit(1)
    print("ok")


def cases(d):
    P = lambda n: os.path.join(d, n)  # noqa: E731
    arrays = every_dtype()

    # .npy: every mapped dtype, both byte orders, C and Fortran order.
    for k, a in arrays.items():
        for order in "<>":
            b = a.astype(a.dtype.newbyteorder(order)) if a.dtype.itemsize > 1 else a
            for fortran in (False, True):
                p = P(f"{k}{'be' if order == '>' else 'le'}{'F' if fortran else 'C'}.npy")
                np.save(p, np.asfortranarray(b) if fortran else b)
                out = converts(f".npy {b.dtype.str} fortran={fortran}", p, lambda q: {"arr_0": np.load(q)})
    # 0-d, empty, rank-3 Fortran, a transposed view saved as it is.
    specials = {
        "scalar": np.array(2.5, "<f4"), "empty": np.zeros((0, 3), "<f8"), "empty_f": np.zeros((3, 0), order="F"),
        "cube_f": np.asfortranarray(np.arange(60, dtype=">i4").reshape(3, 4, 5)),
        "transposed": np.arange(12, dtype="<i2").reshape(3, 4).T,
    }
    for k, a in specials.items():
        p = P(f"{k}.npy")
        np.save(p, a)
        converts(f".npy {k}", p, lambda q: {"arr_0": np.load(q)})
    # x.npy and np.savez(f, x) convert alike: one tensor "arr_0".
    x = np.arange(7, dtype="<i8")
    np.save(P("x.npy"), x)
    np.savez(P("x.npz"), x)
    a1 = converts("x.npy", P("x.npy"), lambda q: {"arr_0": np.load(q)})
    a2 = converts("savez(x)", P("x.npz"), npz_load)
    if a1 and a2:
        check(st_reference.read(a1)[0].keys() == st_reference.read(a2)[0].keys(), "x.npy and savez(x) differ")

    # .npz: stored and deflated, every dtype, Fortran order, big-endian.
    mixed = dict(arrays)
    mixed.update({"be": arrays["f4"].astype(">f4"), "fort": np.asfortranarray(arrays["i4"]),
                  "fort_be": np.asfortranarray(arrays["f8"].astype(">f8")), **specials,
                  "dir/name": np.ones(2, np.uint8)})
    np.savez(P("stored.npz"), **mixed)
    converts("np.savez", P("stored.npz"), npz_load)
    np.savez_compressed(P("deflated.npz"), **mixed)
    converts("np.savez_compressed", P("deflated.npz"), npz_load)
    big = np.random.default_rng(1).standard_normal((700, 1000)).astype("<f4")  # several inflate chunks
    np.savez_compressed(P("big.npz"), big=big, bigf=np.asfortranarray(big[:300]))
    converts("np.savez_compressed, 2.8 MB", P("big.npz"), npz_load)

    # A deflated Fortran array is gathered in memory: within
    # gather_window_bytes only (the CLI's default 64 MiB; a 0-byte window
    # is not settable from the CLI, so the limit itself is a Catch2 test).

    # Signed in the same pass (STSIG v1): verify accepts the output.
    code, _, se = run("keygen", "--out", P("release"))
    check(code == 0, f"keygen: exit {code} {se}")
    out = converts("np.savez_compressed, signed", P("deflated.npz"), npz_load, extra=("--key", P("release.key")))
    if out:
        code, so, se = run("verify", "--pubkey", P("release.pub"), out)
        check(code == 0, f"signed npz conversion: verify exit {code} {so} {se}")

    # A member that is not .npy: listed, refused, dropped on request.
    with zipfile.ZipFile(P("other.npz"), "w") as z:
        z.writestr("w.npy", open(P("x.npy"), "rb").read())
        z.writestr("notes.txt", b"hello")
    refused("npz member that is not .npy", P("other.npz"), "MG-CONV-NOT-TENSOR")
    converts("npz member dropped", P("other.npz"), lambda q: {"w": np.load(q)["w"]},
             extra=("--drop-non-tensors",), expect_dropped=("notes.txt",))

    # Two members under one key ("a" and "a.npy").
    with zipfile.ZipFile(P("dup.npz"), "w") as z:
        z.writestr("a.npy", open(P("x.npy"), "rb").read())
        z.writestr("a", open(P("x.npy"), "rb").read())
    refused("npz duplicate key", P("dup.npz"), "MG-CONV-NAME")

    # joblib.dump: a dict of arrays with nested dicts and lists, every
    # dtype, big-endian and Fortran arrays; a list root; one bare array.
    jd = {"layer": dict(arrays), "be": arrays["f8"].astype(">f8"), "fort": np.asfortranarray(arrays["i4"]),
          "fort_be": np.asfortranarray(np.arange(24, dtype=">f4").reshape(2, 3, 4)), "blocks": [
              np.zeros(3, np.uint8), {"w": np.eye(3, dtype="<f4")}], **specials}
    joblib.dump(jd, P("model.joblib"))
    converts("joblib.dump dict", P("model.joblib"), joblib.load)
    joblib.dump([np.arange(3.0), np.ones((2, 2), np.int16)], P("list.joblib"))
    converts("joblib.dump list", P("list.joblib"), joblib.load)
    joblib.dump(np.arange(10, dtype="<u2"), P("bare.joblib"))
    converts("joblib.dump array", P("bare.joblib"), lambda q: {"arr_0": joblib.load(q)})
    joblib.dump({"w": np.ones(2), "name": "model-a"}, P("strings.joblib"))
    out = converts("joblib string leaf", P("strings.joblib"), joblib.load)
    if out:
        check(st_reference.read(out)[1].get("name") == "model-a", "joblib string leaf not in __metadata__")
    joblib.dump({"w": np.ones(2), "lr": 0.1}, P("scalar.joblib"))
    refused("joblib non-tensor leaf", P("scalar.joblib"), "MG-CONV-NOT-TENSOR")
    converts("joblib non-tensor dropped", P("scalar.joblib"), lambda q: {"w": joblib.load(q)["w"]},
             extra=("--drop-non-tensors",), expect_dropped=("lr",))

    # A np.memmap is dumped with subclass numpy.memmap, an import the scan
    # holds critical (numpy.memmap opens files): refused before conversion.
    mm = np.memmap(P("mm.bin"), dtype="<i4", mode="w+", shape=(2, 3))
    mm[:] = np.arange(6).reshape(2, 3)
    mm.flush()
    joblib.dump({"mm": mm}, P("memmap.joblib"))
    del mm
    refused("joblib.dump of a np.memmap", P("memmap.joblib"), "MG-PK-CRITICAL-IMPORT")
    # Bytes after the pickle's STOP: joblib.load ignores them; not converted.
    with open(P("model.joblib"), "rb") as f:
        raw = f.read()
    with open(P("trailing.joblib"), "wb") as f:
        f.write(raw + b"\0" * 16)
    refused("joblib with bytes after STOP", P("trailing.joblib"), "MG-CONV-UNSUPPORTED")

    # Compressed joblib files: the decoded stream is read as joblib reads it.
    for codec in ("zlib", "gzip", "bz2", "xz", "lzma", "lz4"):  # lz4: python3-lz4
        p = P(f"c_{codec}.joblib")
        joblib.dump(jd, p, compress=(codec, 3))
        converts(f"joblib.dump compress={codec}", p, joblib.load)
    joblib.dump({"w": np.ones(2)}, P("z.joblib"), compress=3)
    converts("joblib.dump compress=3", P("z.joblib"), joblib.load)
    with open(P("c_zlib.joblib"), "rb") as f:
        raw = f.read()
    with open(P("c_cut.joblib"), "wb") as f:
        f.write(raw[:len(raw) // 2])
    refused("compressed joblib cut in half", P("c_cut.joblib"), "MG-ARCHIVE-MALFORMED")
    refused("compressed joblib cut in half, --fail-on critical", P("c_cut.joblib"), "MG-CONV-UNSUPPORTED",
            extra=("--fail-on", "critical"))
    joblib.dump({"w": np.ones(2), "o": np.array([1, "a"], dtype=object)}, P("c_object.joblib"), compress=3)
    refused("compressed joblib with an object array", P("c_object.joblib"), "MG-CONV-UNSUPPORTED")

    # ---- hostile and unsupported ------------------------------------------
    # Object arrays: a pickle body (numpy's own globals only: the scan passes it).
    np.save(P("object.npy"), np.array([1, "a"], dtype=object), allow_pickle=True)
    refused("object .npy", P("object.npy"), "MG-CONV-UNSUPPORTED")
    np.savez(P("object.npz"), o=np.array([1, "a"], dtype=object), w=np.ones(2))
    refused("object npz member", P("object.npz"), "MG-CONV-UNSUPPORTED")
    joblib.dump({"o": np.array([1, "a"], dtype=object)}, P("object.joblib"))
    refused("object joblib array", P("object.joblib"), "MG-CONV-UNSUPPORTED")
    # Dtypes without a safetensors name.
    for descr in ("<c16", "<U3", "<M8[ns]", "|V4", "|S2"):
        a = np.zeros(2, dtype=descr)
        p = P(f"dtype_{descr.strip('<|[]')}.npy")
        np.save(p, a)
        refused(f".npy {descr}", p, "MG-CONV-UNSUPPORTED")
    np.save(P("structured.npy"), np.zeros(2, dtype=[("a", "<f4"), ("b", "<i4")]))
    refused(".npy structured", P("structured.npy"), "MG-CONV-UNSUPPORTED")
    joblib.dump({"c": np.zeros(2, "<c16")}, P("c16.joblib"))
    refused("joblib complex128", P("c16.joblib"), "MG-CONV-UNSUPPORTED")

    # An object array whose pickle runs os.system.
    class Evil:
        def __reduce__(self):
            return (os.system, ("true",))
    np.save(P("evil.npy"), np.array([Evil()], dtype=object), allow_pickle=True)
    refused("object .npy with os.system", P("evil.npy"), "MG-PK-CRITICAL-IMPORT")
    joblib.dump({"w": np.ones(2), "x": Evil()}, P("evil.joblib"))
    refused("joblib with os.system", P("evil.joblib"), "MG-PK-CRITICAL-IMPORT")
    joblib.dump({"w": np.ones(2), "x": Evil()}, P("evil_z.joblib"), compress=3)
    refused("compressed joblib with os.system", P("evil_z.joblib"), "MG-PK-CRITICAL-IMPORT")

    # .npy body shorter or longer than its header says.
    raw = open(P("x.npy"), "rb").read()
    open(P("short.npy"), "wb").write(raw[:-3])
    refused(".npy truncated body", P("short.npy"), "MG-NPY-TRUNCATED")
    open(P("long.npy"), "wb").write(raw + b"\0" * 8)
    refused(".npy trailing bytes", P("long.npy"), "MG-NPY-TRAILING-DATA")

    # npz members that lie about their CRC-32 or their size: the scan
    # rejects what it sees (deflated members are inflated whole by the
    # scan); with --fail-on critical the scan's high findings pass and the
    # converter's own checks refuse (stored members' CRC-32 is checked by
    # the converter only).
    np.savez_compressed(P("xc.npz"), x)
    for src, tag in ((P("x.npz"), "stored"), (P("xc.npz"), "deflated")):
        data = bytearray(open(src, "rb").read())
        info = zipfile.ZipFile(src).infolist()[0]
        cd = data.rfind(b"PK\x01\x02")
        bad_crc = bytearray(data)
        struct.pack_into("<I", bad_crc, info.header_offset + 14, info.CRC ^ 1)
        struct.pack_into("<I", bad_crc, cd + 16, info.CRC ^ 1)
        open(P(f"crc_{tag}.npz"), "wb").write(bad_crc)
        refused(f"npz {tag} member with a wrong CRC-32", P(f"crc_{tag}.npz"),
                "MG-CONV-STORAGE" if tag == "stored" else "MG-ZIP-BAD-CRC")
        refused(f"npz {tag} member with a wrong CRC-32, --fail-on critical", P(f"crc_{tag}.npz"),
                "MG-CONV-STORAGE", extra=("--fail-on", "critical"))
    data = bytearray(open(P("xc.npz"), "rb").read())
    info = zipfile.ZipFile(P("xc.npz")).infolist()[0]
    cd = data.rfind(b"PK\x01\x02")
    for delta in (8, -8):
        bad_size = bytearray(data)
        struct.pack_into("<I", bad_size, info.header_offset + 22, info.file_size + delta)
        struct.pack_into("<I", bad_size, cd + 24, info.file_size + delta)
        p = P(f"size{delta}.npz")
        open(p, "wb").write(bad_size)
        refused(f"npz deflated member that declares {delta:+} bytes", p, "MG-ZIP-FIELD-MISMATCH")
        refused(f"npz deflated member that declares {delta:+} bytes, --fail-on critical", p, "MG-CONV-STORAGE",
                extra=("--fail-on", "critical"))


if __name__ == "__main__":
    main()
