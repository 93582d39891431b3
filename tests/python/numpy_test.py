"""modelgate.safe_open / modelgate.numpy.load_file (framework "np"): parity
with the reference reader for every dtype numpy has, zero-copy views kept
alive by their base, read-only memory, each mode's verdict on a tampered,
unsigned and untrusted file, key forms, slices, metadata and both host
byte orders.

    numpy_test.py MODELGATE   (env MODELGATE_LIBRARY, PYTHONPATH=bindings/python)
"""
import gc
import os
import pathlib
import sys
import weakref

import numpy as np

from binding_util import flip, keygen, mapping_of, owner_of, raises, sha256, sign
from mgtest import eq, main, test
import st_reference

import modelgate
import modelgate.numpy

MODES = ("eager", "lazy", "copy")


def every_dtype_tensors():
    """One tensor per numpy-mappable dtype, with each type's edge values,
    plus a 0-d, an empty and a 3-d tensor."""
    rng = np.random.default_rng(12)
    out = {
        "bool": np.array([True, False, True, True, False]),
        "u8": np.array([0, 1, 127, 128, 255], dtype=np.uint8),
        "i8": np.array([-128, -1, 0, 1, 127], dtype=np.int8),
        "u16": np.array([0, 1, 0x1234, 0xFFFF], dtype=np.uint16),
        "i16": np.array([-32768, -2, 0x1234, 32767], dtype=np.int16),
        "u32": np.array([0, 0xDEADBEEF, 0xFFFFFFFF], dtype=np.uint32),
        "i32": np.array([-(2 ** 31), -3, 0x12345678, 2 ** 31 - 1], dtype=np.int32),
        "u64": np.array([0, 0x0102030405060708, 2 ** 64 - 1], dtype=np.uint64),
        "i64": np.array([-(2 ** 63), -4, 0x0102030405060708, 2 ** 63 - 1], dtype=np.int64),
        "f16": np.array([0.0, -0.0, 1.5, -65504.0, np.inf, np.nan], dtype=np.float16),
        "f32": rng.standard_normal((3, 4)).astype(np.float32),
        "f64": np.array([np.pi, -np.e, 1e-308, np.inf, -np.inf, np.nan], dtype=np.float64),
        "c64": (rng.standard_normal(6) + 1j * rng.standard_normal(6)).astype(np.complex64),
        "scalar": np.array(3.25, dtype=np.float32),
        "empty": np.zeros((0, 3), dtype=np.int32),
        "cube": np.arange(2 * 3 * 4, dtype=np.int16).reshape(2, 3, 4),
    }
    return out


def signed_every_dtype(d, name="all.safetensors", metadata=None):
    key = keygen(d)
    path = st_reference.write(os.path.join(d, name), every_dtype_tensors(),
                              metadata if metadata is not None else {"format": "np", "who": "test"})
    sign(key, path)
    return key, path


def assert_same(got, want, name):
    eq(got.dtype, want.dtype, f"{name} dtype")
    eq(got.shape, want.shape, f"{name} shape")
    # Bit for bit: NaN and -0.0 included.
    eq(got.tobytes(), want.tobytes(), f"{name} bytes")


@test
def load_file_matches_the_reference_reader_for_every_dtype_in_each_mode(d):
    key, path = signed_every_dtype(d)
    want, _ = st_reference.read(path)
    eq(len(want), 16, "tensors written")
    for mode in MODES:
        got = modelgate.numpy.load_file(path, keys=[key + ".pub"], mode=mode)
        eq(sorted(got), sorted(want), f"{mode}: names")
        eq(list(got), sorted(want, key=lambda n: n.encode()), f"{mode}: bytewise name order")
        for name in want:
            assert_same(got[name], want[name], f"{mode} {name}")
            eq(got[name].dtype.byteorder in "<|=", True, f"{name}: little-endian dtype")


@test
def safe_open_keys_metadata_slices_and_verification(d):
    key, path = signed_every_dtype(d, metadata={"format": "np", "note": "caf\u00e9"})
    want, meta = st_reference.read(path)
    eq(any(k.startswith("stsig.") for k in meta), True, "the signer wrote stsig.* metadata")
    with modelgate.safe_open(path, framework="np", keys=[key + ".pub"]) as f:
        eq(f.keys(), sorted(want), "keys()")
        eq(f.metadata(), {"format": "np", "note": "caf\u00e9"}, "metadata() without stsig.*")
        eq(f.files(), [path], "files()")
        sl = f.get_slice("cube")
        eq(sl.get_shape(), [2, 3, 4], "get_shape")
        eq(sl.get_dtype(), "I16", "get_dtype")
        eq(len(sl), 2, "len(slice)")
        assert_same(sl[1, 0:3:2, 1:], want["cube"][1, 0:3:2, 1:], "slice")
        assert_same(sl[...], want["cube"], "slice [...]")
        v = f.verification()
        eq((v["kind"], v["mode"]), ("embedded", "eager"), "verification kind, mode")
        f.check_all()
        infos = {t.name: t for t in f.tensors()}
        eq((infos["c64"].dtype, infos["c64"].dtype_bits, infos["c64"].shape,
            infos["c64"].byte_length), ("C64", 64, (6,), 48), "TensorInfo")
    raises(modelgate.Error, f.keys, "keys() after close")
    none = raises(modelgate.Error, lambda: modelgate.safe_open(path, keys=[key + ".pub"])
                  .get_tensor("nope"), "missing tensor")
    eq((none.finding_id, none.status), ("MG-API-NO-TENSOR", modelgate.Status.ARGUMENT), "no tensor")


@test
def a_file_without_metadata_gives_none(d):
    key = keygen(d)
    path = st_reference.write(os.path.join(d, "m.safetensors"), {"x": np.arange(3, dtype="<f4")})
    sign(key, path)
    with modelgate.safe_open(path, keys=key + ".pub") as f:
        eq(f.metadata(), None, "metadata() like safetensors' when there is none")


@test
def arrays_are_zero_copy_views_of_the_mapped_file(d):
    key, path = signed_every_dtype(d)
    for mode in ("eager", "lazy"):
        with modelgate.safe_open(path, keys=[key + ".pub"], mode=mode) as f:
            a, b = f.get_tensor("f32"), f.get_tensor("f32")
            eq(mapping_of(a.ctypes.data), path, f"{mode}: the array's memory is a mapping of the file")
            eq(a.ctypes.data, b.ctypes.data, f"{mode}: two get_tensor share an address")
            eq(np.shares_memory(a, b), True, f"{mode}: np.shares_memory")
            eq(np.shares_memory(a, f.get_slice("f32")[1:]), True, f"{mode}: slices are views")
    with modelgate.safe_open(path, keys=[key + ".pub"], mode="copy") as f:
        a = f.get_tensor("f32")
        eq(mapping_of(a.ctypes.data) != path, True, "copy mode's memory is not the file's")
        eq(a.ctypes.data, f.get_tensor("f32").ctypes.data, "copy mode hands out one copy")


@test
def an_array_keeps_the_model_alive_after_its_handle_and_siblings_go(d):
    key, path = signed_every_dtype(d)
    want, _ = st_reference.read(path)
    for mode in MODES:
        tensors = modelgate.numpy.load_file(path, keys=[key + ".pub"], mode=mode)
        a = tensors.pop("f32")
        owner = owner_of(a)
        eq(isinstance(owner, modelgate._Model), True, f"{mode}: the .base chain holds the model")
        alive = weakref.ref(owner)
        del tensors, owner
        gc.collect()
        eq(alive() is not None, True, f"{mode}: the model lives while the array does")
        assert_same(a, want["f32"], f"{mode}: still readable and right")
        del a
        gc.collect()
        eq(alive(), None, f"{mode}: freed with the last array")

    with modelgate.safe_open(path, keys=[key + ".pub"], mode="lazy") as f:
        s = f.get_slice("cube")[1]
        c = f.get_tensor("c64")
        later = f.get_slice("f64")
    del f
    gc.collect()
    assert_same(s, want["cube"][1], "a slice outlives its safe_open")
    assert_same(c, want["c64"], "a tensor outlives its safe_open")
    assert_same(later[2:], want["f64"][2:], "get_slice indexed after close (hashed then)")


@test
def numpy_arrays_are_read_only_unless_writable_and_the_file_never_changes(d):
    key, path = signed_every_dtype(d)
    before = sha256(path)
    for mode in MODES:
        a = modelgate.numpy.load_file(path, keys=[key + ".pub"], mode=mode)["i32"]
        eq(a.flags.writeable, False, f"{mode}: read-only")

        def write():
            a[0] = 7
        raises(ValueError, write, f"{mode}: write to a read-only array")

        def unlock():
            a.flags.writeable = True
        raises(ValueError, unlock, f"{mode}: the read-only flag cannot be lifted")

        w = modelgate.numpy.load_file(path, keys=[key + ".pub"], mode=mode, writable=True)["i32"]
        w[0] = 7
        w += 1
        eq(int(w[0]), 8, f"{mode}: writable=True writes")
        eq(sha256(path), before, f"{mode}: the file is unchanged")
        again = modelgate.numpy.load_file(path, keys=[key + ".pub"], mode=mode)["i32"]
        eq(int(again[0]), -(2 ** 31), f"{mode}: a new open sees the file's value")


@test
def a_tampered_tensor_is_refused_in_each_mode(d):
    key, path = signed_every_dtype(d)
    begin, end = st_reference.data_range(path, "f64")
    flip(path, begin + 9)
    for mode in ("eager", "copy"):
        e = raises(modelgate.VerificationError,
                   lambda: modelgate.safe_open(path, keys=[key + ".pub"], mode=mode), mode)
        eq(e.finding_id, "MG-SIG-TENSOR-MISMATCH", f"{mode}: finding id")
        eq((e.status, e.file, e.offset), (modelgate.Status.VERIFY, path, begin),
           f"{mode}: status, file, offset of the tensor")
        eq("f64" in e.message, True, f"{mode}: message names the tensor: {e.message}")
        e = raises(modelgate.VerificationError,
                   lambda: modelgate.numpy.load_file(path, keys=[key + ".pub"], mode=mode),
                   f"{mode} load_file")
        eq(e.finding_id, "MG-SIG-TENSOR-MISMATCH", f"{mode} load_file: finding id")

    with modelgate.safe_open(path, keys=[key + ".pub"], mode="lazy") as f:
        good = f.get_tensor("f32")
        eq(good.shape, (3, 4), "lazy: an intact tensor loads")
        sl = f.get_slice("f64")
        eq(sl.get_shape(), [6], "lazy: the header is readable without hashing")
        for attempt in ("first", "second"):
            e = raises(modelgate.VerificationError, lambda: f.get_tensor("f64"),
                       f"lazy get_tensor, {attempt} time")
            eq((e.finding_id, e.offset), ("MG-SIG-TENSOR-MISMATCH", begin), f"lazy {attempt}")
        e = raises(modelgate.VerificationError, lambda: sl[0], "lazy slice")
        eq(e.finding_id, "MG-SIG-TENSOR-MISMATCH", "lazy slice id")
        e = raises(modelgate.VerificationError, f.check_all, "lazy check_all")
        eq(e.finding_id, "MG-SIG-TENSOR-MISMATCH", "check_all id")
    e = raises(modelgate.VerificationError,
               lambda: modelgate.numpy.load_file(path, keys=[key + ".pub"], mode="lazy"),
               "lazy load_file")
    eq(e.finding_id, "MG-SIG-TENSOR-MISMATCH", "lazy load_file id")


@test
def unsigned_and_untrusted_files_are_refused(d):
    key = keygen(d)
    other = keygen(d, "other")
    path = st_reference.write(os.path.join(d, "m.safetensors"), every_dtype_tensors())
    for mode in MODES:
        e = raises(modelgate.VerificationError,
                   lambda: modelgate.numpy.load_file(path, keys=[key + ".pub"], mode=mode),
                   f"unsigned {mode}")
        eq((e.finding_id, e.status), ("MG-SIG-MISSING", modelgate.Status.VERIFY), f"unsigned {mode}")
    sign(other, path)
    for mode in MODES:
        e = raises(modelgate.VerificationError,
                   lambda: modelgate.numpy.load_file(path, keys=[key + ".pub"], mode=mode),
                   f"untrusted {mode}")
        eq(e.finding_id, "MG-SIG-UNTRUSTED", f"untrusted {mode}")
        eq(isinstance(e, modelgate.Error), True, "VerificationError is an Error")
    eq(len(modelgate.numpy.load_file(path, keys=[key + ".pub", other + ".pub"])), 16,
       "the signer's key anywhere in the list is trusted")


@test
def keys_may_be_pem_text_bytes_or_paths(d):
    key, path = signed_every_dtype(d)
    pub = key + ".pub"
    with open(pub, "rb") as f:
        pem = f.read()
    forms = {"path str": [pub], "pathlib.Path": [pathlib.Path(pub)], "path bytes": [pub.encode()],
             "PEM str": [pem.decode()], "PEM bytes": [pem], "one key, no list": pathlib.Path(pub),
             "one PEM str, no list": pem.decode()}
    for what, keys in forms.items():
        eq(len(modelgate.numpy.load_file(path, keys=keys)), 16, what)
    for what, keys in {"no keys": [], "None": None}.items():
        e = raises(modelgate.Error, lambda: modelgate.numpy.load_file(path, keys=keys), what)
        eq(e.status, modelgate.Status.KEY, what)
    e = raises(modelgate.Error, lambda: modelgate.numpy.load_file(
        path, keys=["-----BEGIN PUBLIC KEY-----\nnot base64\n-----END PUBLIC KEY-----\n"]), "bad PEM")
    eq(e.status, modelgate.Status.KEY, "a PEM that does not parse")
    e = raises(modelgate.Error, lambda: modelgate.numpy.load_file(path, keys=[pub + "\0x"]), "NUL")
    eq(e.status, modelgate.Status.ARGUMENT, "a key path with a NUL byte")
    e = raises(modelgate.Error, lambda: modelgate.numpy.load_file(path + "\0.x", keys=[pub]), "NUL")
    eq(e.status, modelgate.Status.ARGUMENT, "a model path with a NUL byte")
    e = raises(modelgate.Error, lambda: modelgate.numpy.load_file(os.path.join(d, "nope"),
                                                                  keys=[pub]), "missing file")
    eq(e.status, modelgate.Status.IO, "a missing file")
    raises(TypeError, lambda: modelgate.numpy.load_file(path, keys=[42]), "a key of another type")
    raises(ValueError, lambda: modelgate.numpy.load_file(path, keys=[pub], mode="fast"), "mode")
    raises(ValueError, lambda: modelgate.numpy.load_file(path, keys=[pub], hash_threads=-1),
           "hash_threads -1 (ctypes would make it 2**32-1)")
    eq(len(modelgate.numpy.load_file(path, keys=[pub], hash_threads=1)), 16, "hash_threads=1")
    e = raises(modelgate.Error, lambda: modelgate.numpy.load_file(path, keys=[pub],
                                                                  hash_threads=100000), "100000")
    eq(e.status, modelgate.Status.ARGUMENT, "the library's limit on hash_threads")
    e = raises(modelgate.Error, lambda: modelgate.safe_open(path, framework="tf", keys=[pub]), "tf")
    eq(e.status, modelgate.Status.ARGUMENT, "an unknown framework")


@test
def the_spellings_articles_show_are_real_and_never_turn_verification_off(d):
    """load_file(path, verification=public_key) and safe_open(...,
    verify_checksums=True), which articles show for safetensors (where they do
    not exist), work here; verify_checksums=False is refused, not obeyed."""
    key, path = signed_every_dtype(d)
    pub = key + ".pub"
    want = modelgate.numpy.load_file(path, keys=[pub])
    got = modelgate.numpy.load_file(path, verification=pub)
    eq(sorted(got), sorted(want), "verification=: the same tensors")
    eq(len(modelgate.numpy.load_file(path, verification=[pub])), 16, "verification=[key]")
    with modelgate.safe_open(path, framework="np", verification=pub, verify_checksums=True) as f:
        eq(f.get_tensor("u8").tolist(), want["u8"].tolist(), "safe_open verify_checksums=True")
    for off in (False, None, 0):
        e = raises(modelgate.Error, lambda: modelgate.safe_open(
            path, framework="np", keys=[pub], verify_checksums=off), f"verify_checksums={off!r}")
        eq(e.status, modelgate.Status.ARGUMENT, f"verify_checksums={off!r}")
    e = raises(modelgate.Error, lambda: modelgate.numpy.load_file(path, keys=[pub],
                                                                  verification=pub), "both")
    eq(e.status, modelgate.Status.ARGUMENT, "keys= and verification= together")
    e = raises(modelgate.Error, lambda: modelgate.numpy.load_file(path), "neither")
    eq((e.status, e.finding_id), (modelgate.Status.KEY, "MG-API-NO-KEYS"), "no keys at all")
    flip(path, os.path.getsize(path) - 1)
    e = raises(modelgate.VerificationError,
               lambda: modelgate.numpy.load_file(path, verification=pub), "tampered")
    eq(e.finding_id, "MG-SIG-TENSOR-MISMATCH", "verification= verifies")


@test
def dtypes_numpy_lacks_raise_unsupported_dtype_error(d):
    key = keygen(d)
    path = st_reference.write(os.path.join(d, "m.safetensors"), {
        "bf16": ("BF16", [2], b"\x80\x3f\x00\x40"),
        "e4m3": ("F8_E4M3", [2], b"\x38\x40"),
        "e5m2": ("F8_E5M2", [2], b"\x3c\x40"),
        "ok": ("F32", [1], b"\x00\x00\x80\x3f"),
    })
    sign(key, path)
    with modelgate.safe_open(path, keys=[key + ".pub"]) as f:
        for name, dtype in (("bf16", "BF16"), ("e4m3", "F8_E4M3"), ("e5m2", "F8_E5M2")):
            e = raises(modelgate.UnsupportedDtypeError, lambda: f.get_tensor(name), name)
            eq(isinstance(e, TypeError), True, "UnsupportedDtypeError is a TypeError")
            eq(isinstance(e, modelgate.Error), True, "and a modelgate.Error")
            eq((e.dtype, e.tensor, e.status, e.file), (dtype, name, modelgate.Status.UNSUPPORTED,
                                                        path), name)
            eq(dtype in str(e) and "numpy" in str(e), True, f"names dtype and framework: {e}")
            raises(modelgate.UnsupportedDtypeError, lambda: f.get_slice(name)[0], name + " slice")
        eq(f.get_tensor("ok").tolist(), [1.0], "the file's other tensors load")
    raises(modelgate.UnsupportedDtypeError,
           lambda: modelgate.numpy.load_file(path, keys=[key + ".pub"]), "load_file")


@test
def non_ascii_names_round_trip_and_a_nul_is_never_cut_short(d):
    key = keygen(d)
    names = ["a", "ab", "caf\u00e9", "\U0001f600.weight"]
    path = st_reference.write(os.path.join(d, "m.safetensors"),
                              {n: np.array([i], dtype="<i4") for i, n in enumerate(names)})
    sign(key, path)
    with modelgate.safe_open(path, keys=[key + ".pub"]) as f:
        eq(f.keys(), sorted(names, key=lambda n: n.encode()), "keys(), bytewise")
        for i, n in enumerate(names):
            eq(f.get_tensor(n).tolist(), [i], f"get_tensor({n!r})")
        # The name goes over with its length: "a\0b" is not "a".
        e = raises(modelgate.Error, lambda: f.get_tensor("a\u0000b"), "a name with a NUL")
        eq(e.finding_id, "MG-API-NO-TENSOR", "no tensor a\\0b")


@test
def lazy_first_access_from_many_threads_hands_out_one_view(d):
    import threading
    key, path = signed_every_dtype(d)
    with modelgate.safe_open(path, keys=[key + ".pub"], mode="lazy") as f:
        got, errors = [], []

        def load():
            try:
                got.append(f.get_tensor("f64").ctypes.data)
            except Exception as e:  # collected: a thread's exception would be lost
                errors.append(e)
        threads = [threading.Thread(target=load) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        eq(errors, [], "no thread failed")
        eq(len(set(got)), 1, "every thread got the same memory")


@test
def loading_many_tensor_lengths_leaves_nothing_behind(d):
    # Nothing per tensor survives the arrays: a ctypes array type per
    # length (which ctypes caches forever) retained ~1 KiB for each.
    import tracemalloc
    key = keygen(d)
    count = 3000
    path = st_reference.write(os.path.join(d, "m.safetensors"),
                              {f"t{n:05d}": np.zeros(n, dtype="|u1") for n in range(1, count + 1)})
    sign(key, path)
    warm = st_reference.write(os.path.join(d, "warm.safetensors"), {"w": np.zeros(1, "|u1")})
    sign(key, warm)
    modelgate.numpy.load_file(warm, keys=[key + ".pub"])  # lazy imports, first-call caches
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    for _ in range(2):
        arrays = modelgate.numpy.load_file(path, keys=[key + ".pub"])
        eq(len(arrays), count, "tensors")
        del arrays
    gc.collect()
    kept = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    print(f"  {count} tensor lengths loaded twice: {kept} bytes kept")
    eq(kept < 64 * 1024, True, f"{count} lengths loaded twice kept {kept} bytes")


def swapped(raw, unit):
    return np.frombuffer(raw, dtype=np.uint8).reshape(-1, unit)[:, ::-1].tobytes()


@test
def a_big_endian_host_gets_byte_swapped_copies_with_the_same_values(d):
    key, path = signed_every_dtype(d)
    want, _ = st_reference.read(path)
    units = {"bool": 1, "u8": 1, "i8": 1, "u16": 2, "i16": 2, "f16": 2, "cube": 2, "u32": 4,
             "i32": 4, "f32": 4, "scalar": 4, "empty": 4, "u64": 8, "i64": 8, "f64": 8, "c64": 4}
    eq(sorted(units), sorted(want), "every tensor has its word size")
    with modelgate.safe_open(path, keys=[key + ".pub"]) as f:
        for name in sorted(want):
            info = f._model.find(name)
            little = f._get(info, "little")
            big = f._get(info, "big")
            ref = want[name]
            eq(little.tobytes(), ref.tobytes(), f"{name}: little-endian host, file bytes")
            eq(np.array_equal(big, ref, equal_nan=ref.dtype.kind in "fc"), True,
               f"{name}: big-endian host, same values")
            eq(big.shape, ref.shape, f"{name}: shape")
            eq(big.flags.writeable, False, f"{name}: read-only as the view is")
            if units[name] == 1 or ref.size == 0:
                continue
            eq(big.dtype.byteorder, ">", f"{name}: host order dtype")
            eq(big.tobytes(), swapped(ref.tobytes(), units[name]),
               f"{name}: each {units[name]}-byte word reversed")
            eq(np.shares_memory(big, little), False, f"{name}: a copy, not the mapping")
    eq(modelgate._HOST_ORDER, sys.byteorder, "the default is this host's order")


if __name__ == "__main__":
    sys.exit(main("mg-py-np-"))
