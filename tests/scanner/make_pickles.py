#!/usr/bin/env python3
"""Write pickle fixtures for the pickle machine, opcode by opcode.

    make_pickles.py OUTDIR            fixtures + OUTDIR/manifest.tsv
    make_pickles.py --corpus OUTDIR   the same files as fuzz seeds (no manifest)

Malicious streams are assembled from raw opcode bytes; benign ones come from
pickle.dumps on plain data and np.save. Nothing here ever loads a pickle.
Standard library and numpy (python3-numpy, installed by ci/install-deps.sh:
without it this script fails, so the numpy cases are never silently dropped).
"""
import os
import pickle
import struct
import sys

# Severity bar for files that must pass: none of these may appear.
BLOCKING = ("MG-PK-CRITICAL-IMPORT,MG-PK-UNKNOWN-IMPORT,MG-PK-CALL-NOT-ALLOWED,"
            "MG-PK-EXT-CODE,MG-PK-MALFORMED,MG-PK-DISAGREEMENT,MG-PK-LIMIT")


def u8(v):
    return struct.pack("<B", v)


def u32(v):
    return struct.pack("<I", v)


def u64(v):
    return struct.pack("<Q", v)


def glob(module, name):
    return b"c" + module.encode() + b"\n" + name.encode() + b"\n"


def sbu(s):  # SHORT_BINUNICODE
    b = s.encode()
    return b"\x8c" + u8(len(b)) + b


def binunicode(s):
    b = s.encode()
    return b"X" + u32(len(b)) + b


def call0(module, name, arg=b"S'id'\n"):
    """module.name(arg) in protocol 0: GLOBAL, MARK, arg, TUPLE, REDUCE."""
    return glob(module, name) + b"(" + arg + b"tR"


def fixtures():
    """(name, bytes, must-have ids, must-not-have ids)."""
    out = []

    def add(name, data, must, must_not="-"):
        out.append((name, data, must, must_not))

    # Benign: real CPython output for plain data, every protocol.
    plain = {"weights": [1.5, -2.0, 3.25], "name": "layer", "shape": (2, 3),
             "raw": b"\x00\x01\x02", "ids": {1, 2, 3}, "flags": frozenset({4}),
             "buf": bytearray(b"ab"), "big": 2 ** 80, "c": complex(1, 2), "none": None}
    for proto in range(0, 6):
        add("plain_p%d.pkl" % proto, pickle.dumps(plain, protocol=proto),
            "MG-PK-PICKLE-FORMAT", BLOCKING)

    # Standard-library value types built from literals, as CPython writes
    # them (REDUCE of the type; protocol < 3 bytes through _codecs.encode).
    import collections
    import datetime
    import decimal
    import fractions
    values = {
        "datetime": [datetime.datetime(2024, 1, 2, 3, 4, 5, 6), datetime.date(2024, 1, 2),
                     datetime.time(1, 2, 3), datetime.timedelta(1, 2, 3),
                     datetime.datetime(2024, 1, 2, tzinfo=datetime.timezone.utc),
                     datetime.datetime(2024, 1, 2, tzinfo=datetime.timezone(
                         datetime.timedelta(hours=2), "X"))],
        "numbers": [decimal.Decimal("1.5"), fractions.Fraction(1, 3), complex(1, 2),
                    range(1, 10, 2), slice(1, 2, None)],
        "collections": [collections.defaultdict(list, a=[1]), collections.defaultdict(None),
                        collections.Counter("aab"), collections.deque([1, 2], maxlen=5),
                        collections.OrderedDict(a=1)],
        "builtins": [{1, 2}, frozenset({1}), bytearray(b"ab"), b"ab", b""],
    }
    for group, vals in values.items():
        for proto in range(0, 6):
            add("stdlib_%s_p%d.pkl" % (group, proto), pickle.dumps(vals, protocol=proto),
                "MG-PK-PICKLE-FORMAT", BLOCKING)

    # Hand-written small pickles, one per protocol.
    add("hand_p0.pkl", b"(lp0\nI1\naI2\naS'x'\np1\nag1\na.", "MG-PK-PICKLE-FORMAT", BLOCKING)
    add("hand_p1.pkl", b"]q\x00(K\x01K\x02U\x01aq\x01h\x01e.", "MG-PK-PICKLE-FORMAT", BLOCKING)
    add("hand_p2.pkl", b"\x80\x02}q\x00X\x01\x00\x00\x00aq\x01\x88\x89\x86s\x8a\x02\xff\x7f0.",
        "MG-PK-PICKLE-FORMAT", BLOCKING)
    add("hand_p3.pkl", b"\x80\x03C\x03abcq\x00B\x01\x00\x00\x00d\x86.", "MG-PK-PICKLE-FORMAT", BLOCKING)
    add("hand_p4.pkl", b"\x80\x04\x95" + u64(12) + b"\x8f\x94(K\x01K\x02\x90\x8c\x01a\x94\x86.",
        "MG-PK-PICKLE-FORMAT", BLOCKING)
    add("hand_p5.pkl", b"\x80\x05\x96" + u64(2) + b"ab\x98(K\x01\x91\x86.", "MG-PK-PICKLE-FORMAT", BLOCKING)

    # A torch.save data.pkl, hand-assembled (protocol 2, persistent storages).
    torch = (b"\x80\x02" + glob("collections", "OrderedDict") + b"q\x00)Rq\x01("
             + binunicode("fc.weight") + b"q\x02" + glob("torch._utils", "_rebuild_tensor_v2")
             + b"q\x03((" + binunicode("storage") + b"q\x04" + glob("torch", "FloatStorage")
             + b"q\x05" + binunicode("0") + b"q\x06" + binunicode("cpu") + b"q\x07K\x06tq\x08Q"
             + b"K\x00K\x02K\x03\x86q\tK\x03K\x01\x86q\n\x89h\x00)Rq\x0btq\x0cRq\ru.")
    add("torch_data.pkl", torch, "MG-PK-PICKLE-FORMAT", BLOCKING)

    # numpy array reconstruction (protocol 2 writes bytes via _codecs.encode).
    arr = (b"\x80\x02" + glob("numpy.core.multiarray", "_reconstruct") + glob("numpy", "ndarray")
           + b"K\x00\x85" + glob("_codecs", "encode") + binunicode("b") + binunicode("latin1")
           + b"\x86R\x87R(K\x01K\x03\x85" + glob("numpy", "dtype") + binunicode("f8")
           + b"\x89\x88\x87R(K\x03" + binunicode("<") + b"NNNJ\xff\xff\xff\xffJ\xff\xff\xff\xffK\x00tb"
           + b"\x89" + glob("_codecs", "encode") + binunicode("\x00" * 24) + binunicode("latin1")
           + b"\x86Rtb.")
    add("numpy_reconstruct.pkl", arr, "MG-PK-PICKLE-FORMAT", BLOCKING)

    # Malicious, one technique each.
    add("p0_os_system.pkl", call0("os", "system") + b".", "MG-PK-CRITICAL-IMPORT")
    add("p0_posix_system.pkl", call0("posix", "system") + b".", "MG-PK-CRITICAL-IMPORT")
    add("py2_builtin_eval.pkl", call0("__builtin__", "eval", b"S'1+1'\n") + b".",
        "MG-PK-CRITICAL-IMPORT,MG-PK-PY2-MAPPING")
    add("py2_commands.pkl", b"\x80\x02" + call0("commands", "getoutput") + b".",
        "MG-PK-CRITICAL-IMPORT,MG-PK-PY2-MAPPING")
    add("stack_global_memo.pkl",
        b"\x80\x04" + sbu("os") + b"\x94" + sbu("system") + b"q\x05" + b"00"
        + b"h\x00h\x05\x93" + sbu("id") + b"\x85R.", "MG-PK-CRITICAL-IMPORT")
    add("stack_global_escapes.pkl",
        b"\x80\x04S'o\\x73'\nVsys\\u0074em\n\x93" + sbu("id") + b"\x85R.",
        "MG-PK-CRITICAL-IMPORT")
    add("inst.pkl", b"(S'id'\nios\nsystem\n.", "MG-PK-CRITICAL-IMPORT")
    add("obj.pkl", b"(" + glob("subprocess", "check_output") + b"(S'id'\nlo.",
        "MG-PK-CRITICAL-IMPORT")
    add("newobj_unknown.pkl", b"\x80\x02" + glob("evil_pkg.payload", "Thing") + b")\x81.",
        "MG-PK-UNKNOWN-IMPORT", "MG-PK-CRITICAL-IMPORT")
    add("newobj_ex.pkl", b"\x80\x04" + sbu("evil_pkg") + sbu("Thing") + b"\x93)}\x92.",
        "MG-PK-UNKNOWN-IMPORT")
    add("build_on_global.pkl", b"\x80\x02" + glob("collections", "OrderedDict") + b"}b.",
        "MG-PK-CALL-NOT-ALLOWED")
    add("call_result.pkl", b"\x80\x02" + glob("builtins", "str") + b")R)R.",
        "MG-PK-CALL-NOT-ALLOWED")
    add("ext1.pkl", b"\x80\x02\x82\x01)R.", "MG-PK-EXT-CODE")
    add("truncated_after_call.pkl", call0("os", "system"),
        "MG-PK-CRITICAL-IMPORT,MG-PK-MALFORMED")
    add("second_pickle.pkl", b"\x80\x02K\x01." + call0("os", "system") + b".",
        "MG-PK-CRITICAL-IMPORT", "MG-PK-MALFORMED")
    add("walk_pathlib_os.pkl", b"\x80\x04" + sbu("pathlib") + sbu("os.system") + b"\x93.",
        "MG-PK-CRITICAL-IMPORT")
    add("walk_torch_utils_os.pkl", b"\x80\x04" + sbu("torch._utils") + sbu("os.system") + b"\x93.",
        "MG-PK-CRITICAL-IMPORT")
    add("getattr.pkl", b"\x80\x02" + glob("builtins", "getattr") + b".", "MG-PK-CRITICAL-IMPORT")
    add("unknown_module.pkl", b"\x80\x02" + glob("some_module", "Klass") + b".",
        "MG-PK-UNKNOWN-IMPORT", "MG-PK-CRITICAL-IMPORT")
    add("int_0x0.pkl", b"I0x0\n0" + call0("os", "system") + b".",
        "MG-PK-DISAGREEMENT,MG-PK-CRITICAL-IMPORT")
    add("frame_straddle.pkl", b"\x80\x04\x95" + u64(1) + b"K\x01.", "MG-PK-DISAGREEMENT")
    add("proto_twice.pkl", b"\x80\x02\x80\x03N.", "MG-PK-DISAGREEMENT")
    add("proto_6.pkl", b"\x80\x06N.", "MG-PK-MALFORMED")
    add("memo_undefined.pkl", b"\x80\x02h\x07.", "MG-PK-MALFORMED")
    add("underflow.pkl", b"\x80\x02R.", "MG-PK-MALFORMED")
    add("bad_opcode.pkl", b"\x80\x02\xff.", "MG-PK-MALFORMED")
    add("binbytes8_huge.pkl", b"\x80\x04\x8e" + u64(1 << 63) + b"abc", "MG-PK-MALFORMED")
    inner = call0("os", "system") + b"."
    add("nested_load_from_bytes.pkl",
        b"\x80\x03" + glob("torch.storage", "_load_from_bytes") + b"B" + u32(len(inner)) + inner
        + b"\x85R.", "MG-PK-CRITICAL-IMPORT,MG-PK-NESTED-PICKLE")

    # A real np.save object array: the pickle after the .npy header.
    try:
        import io
        import numpy as np
        buf = io.BytesIO()
        np.save(buf, np.array([{"a": 1}, "x"], dtype=object), allow_pickle=True)
        data = buf.getvalue()
        major = data[6]
        hlen = struct.unpack("<H", data[8:10])[0] if major == 1 else struct.unpack("<I", data[8:12])[0]
        start = (10 if major == 1 else 12) + hlen
        add("numpy_object_array.pkl", data[start:], "MG-PK-PICKLE-FORMAT", BLOCKING)
        arr_pkl = pickle.dumps(np.arange(6, dtype=np.float32).reshape(2, 3), protocol=2)
        add("numpy_array_p2.pkl", arr_pkl, "MG-PK-PICKLE-FORMAT", BLOCKING)
    except ImportError as e:
        sys.exit(f"FAIL numpy is not importable by {sys.executable} ({e}): "
                 "run `bash ci/install-deps.sh` (python3-numpy)")
    return out


def main():
    args = sys.argv[1:]
    corpus = False
    if args and args[0] == "--corpus":
        corpus = True
        args = args[1:]
    if len(args) != 1:
        sys.exit(__doc__)
    outdir = args[0]
    os.makedirs(outdir, exist_ok=True)
    rows = []
    for name, data, must, must_not in fixtures():
        with open(os.path.join(outdir, name), "wb") as f:
            f.write(data)
        rows.append("%s\t%s\t%s\n" % (name, must, must_not))
    if not corpus:
        with open(os.path.join(outdir, "manifest.tsv"), "w") as f:
            f.write("# file\tmust carry\tmust not carry\n")
            f.writelines(rows)


if __name__ == "__main__":
    main()
