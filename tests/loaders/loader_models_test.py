"""Regression tests for the loader models (issue 9): every file below was
passed (exit 0) or misjudged before the scanner asked every loader what it
would read. Each builds a hostile or benign file the way an attacker or a
user would, then checks modelgate's verdict and finding ids.

    loader_models_test.py MODELGATE
"""
import json
import os
import struct
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "support"))
from mgtest import test, eq, main, st_bytes  # noqa: E402

MG = sys.argv[1]

# A protocol-0 pickle that calls os.system: what torch.load, pickle.load and
# numpy.load(allow_pickle=True) would run.
EVIL = b"cos\nsystem\n(S'echo pwned'\ntR."


def scan(path, *args):
    r = subprocess.run([MG, "scan", "-f", "json", *args, path], capture_output=True)
    doc = json.loads(r.stdout) if r.stdout else None
    return r.returncode, doc


def ids(doc):
    return sorted({f["id"] for f in doc["files"][0]["findings"]})


def write(d, name, data):
    p = os.path.join(d, name)
    with open(p, "wb") as f:
        f.write(data)
    return p


def tar_checksum(block):
    b = bytearray(block)
    b[148:156] = b" " * 8
    return sum(b)


def st_tar_polyglot(member_data):
    """A strictly valid safetensors file whose first 512 bytes are also a
    tar header that Python's tarfile accepts (no ustar magic needed): the
    header JSON carries the tar fields inside a metadata string, and the
    member's data is the tensor data."""
    n = 504  # data starts at 512, right after the tar header block
    size_field = b"%011o " % len(member_data)
    tensor = member_data + b"\0" * ((512 - len(member_data) % 512) % 512)
    if True:
        pre = b'{"__metadata__":{"a":"'
        body = bytearray(b" " * (512 - 8 - len(pre)))
        # absolute offsets 124..135 size, 148..155 checksum, 156 typeflag
        def put(off, val):
            body[off - 8 - len(pre):off - 8 - len(pre) + len(val)] = val
        put(100, b"0000644 ")
        put(124, size_field)
        put(156, b"0")
        tail = ('"},"t":{"dtype":"U8","shape":[%d],"data_offsets":[0,%d]}}' %
                (len(tensor), len(tensor))).encode()
        js = pre + bytes(body[:380]) + tail  # fields up to devminor (345) are spaces
        js += b" " * (n - len(js))
        block = bytearray(struct.pack("<Q", n) + js)
        chk = tar_checksum(block)
        block[148:156] = b"%07o " % chk
        return bytes(block) + tensor


@test
def safetensors_tar_polyglot_is_rejected(d):
    data = st_tar_polyglot(EVIL)
    import tarfile
    with tarfile.open(write(d, "probe.tar", data)) as t:  # CPython lists it
        eq(len(t.getmembers()), 1, "tarfile members")
    p = write(d, "model.safetensors", data)
    rc, doc = scan(p)
    eq(rc, 1, "exit")
    got = ids(doc)
    assert "MG-POLY-LOADERS" in got, got
    assert "MG-PK-CRITICAL-IMPORT" in got, got
    eq(doc["files"][0]["views"], [{"loader": "safetensors", "format": "safetensors"},
                                  {"loader": "torch.load", "format": "tar"}], "views")
    # and not only under the default bar
    rc, _ = scan(p, "--fail-on", "critical")
    eq(rc, 1, "exit with --fail-on critical")


def pickle_tar_polyglot(member_pickle):
    """A pickle at offset 0 that is also a tar header: the name field holds
    the opcodes (pickle.load stops at STOP), the member holds another
    pickle."""
    block = bytearray(512)
    block[0:len(EVIL)] = EVIL
    block[100:108] = b"0000644\0"
    block[108:116] = b"0000000\0"
    block[116:124] = b"0000000\0"
    block[124:136] = b"%011o\0" % len(member_pickle)
    block[136:148] = b"00000000000\0"
    block[156:157] = b"0"
    block[148:156] = b"%06o\0 " % tar_checksum(block)
    data = member_pickle + b"\0" * ((512 - len(member_pickle) % 512) % 512)
    return bytes(block) + data + b"\0" * 1024


@test
def pickle_tar_polyglot_is_rejected(d):
    benign = b"\x80\x02K\x01."  # the member: pickle of the int 1
    data = pickle_tar_polyglot(benign)
    import pickle
    import tarfile
    p = write(d, "weights.pt", data)
    with tarfile.open(p) as t:
        eq(len(t.getmembers()), 1, "tarfile members")
    import pickletools
    ops = [op.name for op, _, _ in pickletools.genops(data)]
    eq(ops[-1], "STOP", "pickle.load reads a whole stream")
    rc, doc = scan(p)
    eq(rc, 1, "exit")
    got = ids(doc)
    assert "MG-POLY-LOADERS" in got, got
    assert "MG-PK-CRITICAL-IMPORT" in got, got


@test
def four_byte_safetensors_is_truncated(d):
    for content in (b"", b"GGUF", b"\x80\x02K.", b"1234567"):
        p = write(d, "model.safetensors", content)
        rc, doc = scan(p)
        eq(rc, 1, f"exit for {content!r}")
        eq(ids(doc), ["MG-ST-TRUNCATED"], f"ids for {content!r}")


@test
def gguf_named_safetensors_is_rejected(d):
    p = write(d, "model.safetensors", b"GGUF" + struct.pack("<IQQ", 3, 0, 0) + b"\0" * 64)
    rc, doc = scan(p)
    eq(rc, 1, "exit")
    eq(doc["files"][0]["format"], "safetensors", "format")


@test
def leading_whitespace_header_is_safetensors_under_any_name(d):
    # The reference skips JSON whitespace before '{': every safetensors
    # loader reads this file, so every safetensors rule applies.
    h = b' {"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},' \
        b'"a":{"dtype":"I32","shape":[1],"data_offsets":[0,4]}}'
    h += b" " * ((8 - len(h) % 8) % 8)
    data = struct.pack("<Q", len(h)) + h + b"\0\0\x80\x3f"
    for name in ("weights.bin", "noext", "model.safetensors"):
        rc, doc = scan(write(d, name, data))
        eq(rc, 1, f"exit for {name}")
        eq(doc["files"][0]["format"], "safetensors", f"format for {name}")
        assert "MG-ST-HEADER-START" in ids(doc), ids(doc)


@test
def escaped_reserved_key_is_rejected(d):
    h = {"\\u005f_metadata__": {"format": "pt"}}
    raw = b'{"\\u005f_metadata__":{"format":"pt"}}'
    raw += b" " * ((8 - len(raw) % 8) % 8)
    rc, doc = scan(write(d, "m.safetensors", struct.pack("<Q", len(raw)) + raw))
    eq(rc, 1, "exit")
    eq(ids(doc), ["MG-ST-RESERVED-ESCAPED"], "ids")


LFS = (b"version https://git-lfs.github.com/spec/v1\n"
       b"oid sha256:4d7a214614ab2935c943f9e0ff69d22eadbb8f32b1258daaa5e2ca24d17e2393\n"
       b"size 12345\n")


@test
def lfs_pointers_are_named_as_such(d):
    for name in ("pytorch_model.bin", "model-00001-of-00002.safetensors", "x.gguf", "w"):
        rc, doc = scan(write(d, name, LFS))
        eq(rc, 1, f"exit for {name}")
        eq(ids(doc), ["MG-FMT-LFS-POINTER"], f"ids for {name}")
        eq(doc["files"][0]["format"], "lfs-pointer", "format")


@test
def plain_text_is_not_a_pickle(d):
    texts = {
        "requirements.txt": b"certifi==2023.7.22\ncharset-normalizer==3.2.0\nidna==3.4\n",
        "NOTICE": b"copyright 2024 The Authors\nAll rights reserved.\n",
        "notes": b"cfoo\nbar\nbaz\n",
    }
    for name, body in texts.items():
        rc, doc = scan(write(d, name, body))
        eq(rc, 0, f"exit for {name}")
        eq(doc["files"][0]["format"], "unknown", f"format for {name}")


@test
def text_that_runs_code_is_still_a_pickle(d):
    # No STOP: pickle.load raises, but only after os.system has run.
    rc, doc = scan(write(d, "notes.txt", EVIL[:-1]))
    eq(rc, 1, "exit")
    assert "MG-PK-CRITICAL-IMPORT" in ids(doc), ids(doc)


@test
def torch_names_claim_the_torch_loader(d):
    # Not a zip, not a tar: torch.load unpickles it, and it breaks at once.
    rc, doc = scan(write(d, "model.pt", b"\xff\xfe garbage"))
    eq(rc, 1, "exit")
    assert "MG-PK-MALFORMED" in ids(doc), ids(doc)
    # A valid safetensors file named .bin is still judged as safetensors.
    good = st_bytes({"a": {"dtype": "U8", "shape": [2], "data_offsets": [0, 2]}}, b"\1\2")
    rc, doc = scan(write(d, "model.bin", good))
    eq(rc, 0, "exit for safetensors named .bin")
    eq(doc["files"][0]["format"], "safetensors", "format")


@test
def good_files_still_pass(d):
    good = st_bytes({"a": {"dtype": "U8", "shape": [2], "data_offsets": [0, 2]}}, b"\1\2")
    rc, doc = scan(write(d, "model.safetensors", good))
    eq(rc, 0, "exit")
    eq(ids(doc), [], "ids")
    rc, doc = scan(write(d, "state.pkl", b"\x80\x02}q\x00."))
    eq(rc, 0, "exit for a dict pickle")


REAL = os.path.join(os.path.dirname(__file__), "..", "fixtures", "real")


def sev(doc):
    return sorted({f["severity"] for f in doc["files"][0]["findings"]})


@test
def torchscript_helpers_are_data_only_inside_torchscript(d):
    # torch.jit.save output: the debug_pkl records use torch.jit._pickle
    # helpers, which torch.jit.load's unpickler treats as constructors.
    rc, doc = scan(os.path.join(REAL, "torchscript-linear.pt"))
    eq(rc, 1, "exit (code/ still needs review)")
    assert "critical" not in sev(doc), doc["files"][0]["findings"]
    assert "MG-ZIP-TORCHSCRIPT" in ids(doc), ids(doc)
    # The same helper in a plain pickle is a call chosen by the stream.
    p = write(d, "x.pkl", b"\x80\x02ctorch.jit._pickle\nbuild_intlist\n]\x85R.")
    rc, doc = scan(p, "--fail-on", "critical")
    eq(rc, 1, "exit outside TorchScript")
    assert "MG-PK-CRITICAL-IMPORT" in ids(doc), ids(doc)


@test
def padding_cannot_pass_fail_on_critical(d):
    # 150,000 harmless imports (then POP), then os.system: past every
    # record cap, the call must still be found, and the file rejected.
    pad = b"ccollections\nOrderedDict\n0" * 150_000
    p = write(d, "padded.pkl", b"\x80\x02" + pad + b"cos\nsystem\n(X\x02\x00\x00\x00idtR.")
    rc, doc = scan(p, "--fail-on", "critical")
    eq(rc, 1, "exit")
    assert "MG-PK-CRITICAL-IMPORT" in ids(doc), ids(doc)


sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench"))
import hostile_archives  # noqa: E402  (the bench's generator: zeros deflated in blocks)


@test
def one_budget_bounds_hostile_zips(d):
    # (Time and memory are measured in bench/hostile_archives.sh, not here.)
    # 16 central records over one 32 MiB stream: judged once, not 16 times.
    p = os.path.join(d, "overlap.zip")
    hostile_archives.zero_zip(p, [b"m%02d.pkl" % i for i in range(16)], 32 << 20, shared=True)
    rc, doc = scan(p)
    eq(rc, 1, "overlap exit")
    assert "MG-ZIP-OVERLAP" in ids(doc), ids(doc)
    # A member declared past max_member_bytes (1 GiB) is the budget's
    # finding and fails closed, whatever its first bytes say.
    p = os.path.join(d, "bomb.zip")
    hostile_archives.zero_zip(p, [b"data.pkl"], (1 << 30) + (16 << 20), zip64=True)
    rc, doc = scan(p, "--fail-on", "critical")
    eq(rc, 1, "bomb exit")
    assert "MG-ARCHIVE-LIMIT" in ids(doc), ids(doc)


@test
def real_joblib_lzma_passes(d):
    # joblib.dump(..., compress='lzma') from Debian's python3-joblib 1.2.0
    # (tests/archives/data/make_joblib_lzma.py): arrays only.
    rc, doc = scan(os.path.join(os.path.dirname(__file__), "..", "archives", "data",
                                "joblib-lzma.joblib"))
    eq(rc, 0, "exit")
    eq(ids(doc), ["MG-PK-PICKLE-FORMAT"], "ids")


sys.exit(main("mg-loaders-"))
