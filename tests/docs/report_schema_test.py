#!/usr/bin/env python3
"""docs/schemas/report-v1.schema.json against real reports.

usage: report_schema_test.py PATH/TO/modelgate

Every `-f json` document modelgate writes here — scan, verify and check over
clean, rejected, unreadable, archive, non-UTF-8, Hugging Face cache and signed
fixtures, the --json-output file written beside SARIF, and a scan of the
repository's own tests/ and examples/ — must validate against the schema,
with summary counts that add up. Then: every field the schema names is
produced by at least one of those reports (so the schema describes the
program, not a wish); the schema refuses unknown fields at each level (additionalProperties: false
is deliberate); and the example in docs/report.md validates.
"""
import json
import os
import re
import sys
import tarfile
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integrations"))
from common import (GOOD, HOSTILE, PICKLE_OS_SYSTEM, ROOT, eq, keygen_and_sign, main,  # noqa: E402
                    modelgate_from_argv, run, st_bytes, test, write)

MG = modelgate_from_argv()
try:
    import jsonschema
except ImportError as e:
    print(f"FAIL python3-jsonschema is not importable by {sys.executable} ({e}): "
          "run `bash ci/install-deps.sh`")
    sys.exit(1)

with open(os.path.join(ROOT, "docs", "schemas", "report-v1.schema.json"), encoding="utf-8") as f:
    SCHEMA = json.load(f)
jsonschema.Draft7Validator.check_schema(SCHEMA)
VALIDATOR = jsonschema.Draft7Validator(SCHEMA)

SEEN = set()


def validate(doc, what, record=True):
    errs = sorted(VALIDATOR.iter_errors(doc), key=lambda e: list(e.absolute_path))
    if errs:
        raise AssertionError(f"{what}: " + "; ".join(
            f"/{'/'.join(map(str, e.absolute_path))}: {e.message[:300]}" for e in errs[:5]))
    files = doc["files"]
    s = doc["summary"]
    eq(s["files"], len(files), f"{what}: summary.files")
    for k, v in (("passed", "pass"), ("rejected", "reject"), ("errors", "error")):
        eq(s[k], sum(f["verdict"] == v for f in files), f"{what}: summary.{k}")
    for f in files:
        if not record:
            break
        SEEN.update("file." + k for k in f)
        SEEN.update("signature." + k for k in f["signature"])
        SEEN.update("view." + k for v in f.get("views", []) for k in v)
        SEEN.update("finding." + k for x in f["findings"] for k in x)
        sig = f["signature"]
        if "key_id" in sig:
            eq(sig["key_id"], sig["key_ids"][0], f"{what}: key_id is key_ids[0]")
            eq(len(sig["key_names"]), len(sig["key_ids"]), f"{what}: one name per key id")
    return doc


def report(args, want_code, what):
    code, out, err = run([MG, *args])
    eq(code, want_code, f"{what}: exit code ({err.strip()})")
    try:
        doc = json.loads(out)
    except ValueError as e:
        raise AssertionError(f"{what}: stdout is not JSON ({e}): {out[:300]}") from None
    return validate(doc, what)


def one(doc):
    eq(len(doc["files"]), 1, "one file")
    return doc["files"][0]


def ids(f):
    return [x["id"] for x in f["findings"]]


@test
def scan_clean_rejected_error(d):
    good = write(d, "good.safetensors", GOOD)
    f = one(report(["scan", "-f", "json", good], 0, "clean"))
    eq((f["verdict"], f["format"], f["tensors"], f["signature"]), ("pass", "safetensors", 2,
                                                                  {"status": "not-checked"}), "clean")
    eq({"loader": "safetensors", "format": "safetensors"} in f["views"], True, "safetensors view")
    evil = write(d, "evil.safetensors", HOSTILE)
    f = one(report(["scan", "-f", "json", evil], 1, "rejected"))
    eq(f["verdict"], "reject", "rejected")
    trailing = [x for x in f["findings"] if x["id"] == "MG-ST-TRAILING-BYTES"]
    eq(trailing[0]["offset"], len(GOOD), "offset of the trailing bytes")
    doc = report(["scan", "-f", "json", good, os.path.join(d, "missing.safetensors")], 2, "error")
    eq([x["verdict"] for x in doc["files"]], ["pass", "error"], "error verdict")
    eq(ids(doc["files"][1]), ["MG-IO-OPEN"], "unreadable path")


@test
def archive_members_and_pickles(d):
    z = os.path.join(d, "model.zip")
    with zipfile.ZipFile(z, "w") as zf:
        zf.writestr("archive/data.pkl", PICKLE_OS_SYSTEM)
    f = one(report(["scan", "-f", "json", z], 1, "zip member"))
    crit = [x for x in f["findings"] if x["id"] == "MG-PK-CRITICAL-IMPORT"]
    eq(bool(crit), True, "critical import found")
    eq((crit[0]["member"], crit[0]["opcode"], crit[0]["global"]),
       ("archive/data.pkl", "STACK_GLOBAL", "posix.system"), "member, opcode, global")
    eq("member_offset" in crit[0] and "offset" in crit[0], True, "both offsets")
    # One finding per cause: the YARA rule that saw the same import is listed
    # on the import finding, not reported again.
    eq(crit[0].get("corroborated_by"), ["MG-YARA-PICKLE-CODE-EXECUTION-GLOBAL"], "corroborated_by")
    eq("MG-YARA-PICKLE-CODE-EXECUTION-GLOBAL" in ids(f), False, "the YARA finding is folded")
    # A member name that is not UTF-8: member (escaped) and member_bytes (exact).
    t = os.path.join(d, "weights.tar")
    with tarfile.open(t, "w", format=tarfile.GNU_FORMAT, encoding="utf-8",
                      errors="surrogateescape") as tf:
        info = tarfile.TarInfo("w\udcff.pkl")
        info.size = len(PICKLE_OS_SYSTEM)
        import io
        tf.addfile(info, io.BytesIO(PICKLE_OS_SYSTEM))
    f = one(report(["scan", "-f", "json", t], 1, "tar member with a non-UTF-8 name"))
    mb = {x.get("member_bytes") for x in f["findings"]} - {None}
    eq(mb, {"77ff2e706b6c"}, "member_bytes")


@test
def names_that_are_not_utf8_and_hf_cache_targets(d):
    raw = os.path.join(d.encode(), b"bad\xffname.safetensors")
    with open(raw, "wb") as fh:
        fh.write(GOOD)
    f = one(report(["scan", "-f", "json", os.path.join(d, "bad\udcffname.safetensors")], 0, "non-UTF-8 path"))
    eq(f["path_bytes"].endswith(b"bad\xffname.safetensors".hex()), True, "path_bytes")
    repo = os.path.join(d, "hub", "models--acme--tiny")
    write(repo, "blobs/0123abcd", GOOD)
    os.makedirs(os.path.join(repo, "snapshots", "rev1"))
    os.symlink("../../blobs/0123abcd", os.path.join(repo, "snapshots", "rev1", "model.safetensors"))
    doc = report(["scan", "-f", "json", os.path.join(repo, "snapshots")], 0, "HF cache")
    f = one(doc)
    eq(f["path"].endswith("snapshots/rev1/model.safetensors"), True, "reported under the link")
    eq(os.path.realpath(f["target"]), os.path.join(repo, "blobs", "0123abcd"), "target is the blob")
    # A blob name that is not UTF-8: target (escaped) and target_bytes (exact).
    bad = os.path.join(d.encode(), b"hub2", b"models--acme--odd")
    os.makedirs(os.path.join(bad, b"blobs"))
    os.makedirs(os.path.join(bad, b"snapshots", b"rev1"))
    with open(os.path.join(bad, b"blobs", b"ab\xffcd"), "wb") as fh:
        fh.write(GOOD)
    os.symlink(b"../../blobs/ab\xffcd", os.path.join(bad, b"snapshots", b"rev1", b"model.safetensors"))
    f = one(report(["scan", "-f", "json", os.path.join(d, "hub2", "models--acme--odd", "snapshots")], 0, "HF cache, odd blob name"))
    eq(f["target_bytes"].endswith(b"blobs/ab\xffcd".hex()), True, "target_bytes")


@test
def verify_reports(d):
    pub, signed = keygen_and_sign(MG, d)
    f = one(report(["verify", "--pubkey", pub, "-f", "json", signed], 0, "verify valid"))
    eq(f["signature"]["status"], "valid", "valid")
    eq(len(f["signature"]["key_id"]), 32, "key id")
    unsigned = write(d, "unsigned.safetensors", GOOD)
    f = one(report(["verify", "--pubkey", pub, "-f", "json", unsigned], 1, "verify missing"))
    eq(f["signature"], {"status": "missing", "kind": "embedded"}, "missing (verify checks embedded)")
    with open(signed, "rb") as fh:
        data = bytearray(fh.read())
    data[-1] ^= 1
    tampered = write(d, "tampered.safetensors", bytes(data))
    f = one(report(["verify", "--pubkey", pub, "-f", "json", tampered], 1, "verify invalid"))
    eq((f["signature"]["status"], ids(f)), ("invalid", ["MG-SIG-TENSOR-MISMATCH"]), "invalid")
    code, _, err = run([MG, "keygen", "--out", os.path.join(d, "other")])
    eq(code, 0, err)
    f = one(report(["verify", "--pubkey", os.path.join(d, "other.pub"), "-f", "json", signed], 1,
                   "verify untrusted"))
    eq(f["signature"]["status"], "untrusted", "untrusted")
    pk = write(d, "model.pkl", PICKLE_OS_SYSTEM)
    f = one(report(["verify", "--pubkey", pub, "-f", "json", pk], 1, "verify a pickle"))
    eq((f["format"], f["signature"]["status"]), ("pickle", "missing"), "not safetensors")


@test
def check_reports(d):
    pub, signed = keygen_and_sign(MG, d, out_dir=os.path.join(d, "models"))
    write(d, "models/unsigned.safetensors", GOOD)
    write(d, "models/config.json", '{"architectures": ["Tiny"]}\n')
    write(d, "models/lfs.safetensors",
          "version https://git-lfs.github.com/spec/v1\n"
          "oid sha256:4d7a214614ab2935c943f9e0ff69d22eadbb8f32b1258daaa5e2ca24d17e2393\nsize 12345\n")
    policy = write(d, "policy.yaml",
                   "apiVersion: modelgate/v1\nkind: Policy\nformats: {allow: [safetensors]}\n"
                   f"signatures:\n  required: true\n  keys:\n    - {{name: release, file: {pub}}}\n")
    doc = report(["check", "--policy", policy, "-f", "json", os.path.join(d, "models")], 1, "check")
    by = {os.path.basename(f["path"]): f for f in doc["files"]}
    eq(by["model.safetensors"]["verdict"], "pass", "signed passes")
    eq(by["model.safetensors"]["signature"]["key_names"], ["release"], "the policy's key name")
    eq("MG-POLICY-SIGNATURE" in ids(by["unsigned.safetensors"]), True, "unsigned rejected")
    eq("MG-POLICY-FORMAT" in ids(by["config.json"]), True, "config is not safetensors")
    ptr = [x for x in by["lfs.safetensors"]["findings"] if x["id"] == "MG-FMT-LFS-POINTER"]
    eq(len(ptr), 1, "LFS pointer")
    eq((ptr[0]["offset"], ptr[0]["line"], ptr[0]["column"]), (0, 1, 1), "a text file's position")
    # A waiver: the trailing-bytes finding of one exact file becomes info.
    import hashlib
    evil = write(d, "evil/evil.safetensors", HOSTILE)
    waiver = write(d, "waiver.yaml",
                   "apiVersion: modelgate/v1\nkind: Policy\nexceptions:\n"
                   f"  - {{id: MG-ST-TRAILING-BYTES, sha256: \"{hashlib.sha256(HOSTILE).hexdigest()}\","
                   " reason: test, expires: 2999-12-31}\n")
    doc = report(["check", "--policy", waiver, "-f", "json", evil], 1, "waiver")
    f = one(doc)
    waived = [x for x in f["findings"] if x["id"] == "MG-ST-TRAILING-BYTES"]
    eq((waived[0]["severity"], waived[0]["message"].startswith("waived until 2999-12-31")),
       ("info", True), "waived finding")
    # Shown as waived, with what waived it and what it was.
    eq(waived[0]["waived"], {"reason": "test", "expires": "2999-12-31", "severity": "critical"},
       "waived object")
    eq(all("waived" not in x for x in f["findings"] if x["id"] != "MG-ST-TRAILING-BYTES"), True,
       "only the waived finding says so")
    # What a registry records: the file's SHA-256 and the policy's.
    eq(f["sha256"], hashlib.sha256(HOSTILE).hexdigest(), "file sha256")
    with open(waiver, "rb") as fh:
        eq(doc["policy"], {"path": waiver, "sha256": hashlib.sha256(fh.read()).hexdigest()},
           "policy path and sha256")


@test
def detached_bundle_reports(d):
    """A directory signed once with a detached bundle (--model, --version):
    each file's signature says detached, the model, the version and its state
    against the bundle; the policy's model/minVersion decide."""
    import hashlib
    code, _, err = run([MG, "keygen", "--alg", "ecdsa-p256", "--out", os.path.join(d, "rel")])
    eq(code, 0, err)
    model = os.path.join(d, "tiny")
    write(d, "tiny/config.json", '{"architectures": ["Tiny"]}\n')
    write(d, "tiny/model.safetensors", GOOD)
    code, _, err = run([MG, "sign", "--detached", "--key", os.path.join(d, "rel.key"),
                        "--model", "acme/tiny", "--version", "3", model])
    eq(code, 0, f"sign --detached: {err}")

    def policy(extra):
        return write(d, "p.yaml", "apiVersion: modelgate/v1\nkind: Policy\nsignatures:\n"
                     f"  required: true\n{extra}  keys:\n    - {{name: rel, file: {d}/rel.pub}}\n")
    doc = report(["check", "--policy", policy("  accept: [detached]\n  model: acme/tiny\n"
                                              "  minVersion: 3\n"), "-f", "json", model], 0,
                 "check a detached-signed directory")
    by = {os.path.basename(f["path"]): f for f in doc["files"]}
    for name in ("config.json", "model.safetensors"):
        sig = by[name]["signature"]
        eq((sig["status"], sig["kind"], sig["model"], sig["version"], sig["detached_state"],
            sig["key_names"]), ("valid", "detached", "acme/tiny", 3, "signed", ["rel"]), name)
    eq(by["model.safetensors"]["sha256"], hashlib.sha256(GOOD).hexdigest(), "sha256 per file")
    eq(by["model.sig"]["signature"].get("detached_state"), "ignored", "the bundle itself")
    # Rollback: minVersion above the signed version rejects every signed file.
    doc = report(["check", "--policy", policy("  model: acme/tiny\n  minVersion: 4\n"), "-f",
                  "json", model], 1, "minVersion 4")
    by = {os.path.basename(f["path"]): f for f in doc["files"]}
    eq(by["config.json"]["verdict"], "reject", "rollback rejected")
    eq(by["config.json"]["signature"]["status"], "untrusted", "the policy's reading")
    eq("model" in by["config.json"]["signature"], False, "no model when nothing satisfied")


@test
def json_output_beside_sarif(d):
    good = write(d, "good.safetensors", GOOD)
    out = os.path.join(d, "report.json")
    code, _, err = run([MG, "scan", "-f", "sarif", "--json-output", out, good])
    eq(code, 0, err)
    with open(out) as fh:
        one(validate(json.load(fh), "--json-output"))


@test
def repository_corpus(d):
    doc = report(["scan", "-f", "json", "-q", os.path.join(ROOT, "tests"),
                  os.path.join(ROOT, "examples")], 1, "scan tests/ examples/")
    formats = {f["format"] for f in doc["files"]}
    for want in ("safetensors", "pickle", "pytorch-zip", "numpy", "tar", "unknown"):
        eq(want in formats, True, f"the corpus has a {want} file")


@test
def schema_is_closed_where_the_report_is_fixed(d):
    good = write(d, "good.safetensors", GOOD)
    evil = write(d, "evil.safetensors", HOSTILE)
    code, out, _ = run([MG, "scan", "-f", "json", good, evil])
    base = json.loads(out)
    VALIDATOR.validate(base)

    def mutated(fn):
        doc = json.loads(out)
        fn(doc)
        return VALIDATOR.is_valid(doc)
    eq(mutated(lambda doc: doc.update(extra=1)), False, "unknown top-level field")
    eq(mutated(lambda doc: doc["tool"].update(build="x")), False, "unknown tool field")
    eq(mutated(lambda doc: doc["summary"].update(skipped=0)), False, "unknown summary field")
    eq(mutated(lambda doc: doc["files"][0].update(sha256="00")), False, "unknown file field")
    eq(mutated(lambda doc: doc["files"][1]["findings"][0].update(rule="x")), False, "unknown finding field")
    eq(mutated(lambda doc: doc["files"][0]["signature"].update(kid="x")), False, "unknown signature field")
    eq(mutated(lambda doc: doc["files"][0]["views"][0].update(offset=0)), False, "unknown view field")
    eq(mutated(lambda doc: doc["files"][0].update(verdict="warn")), False, "unknown verdict")
    eq(mutated(lambda doc: doc["files"][0].update(format="pytorch")), False, "unknown format")
    eq(mutated(lambda doc: doc["files"][0].pop("views")), False, "views is always written")
    eq(mutated(lambda doc: doc.update(schema="modelgate.report/v2")), False, "another schema")
    eq(mutated(lambda doc: doc["files"][0]["signature"].update(status="valid")), False,
       "valid without key ids")
    eq(mutated(lambda doc: doc["files"][1]["findings"][0].update(corroborated_by=["MG-YARA-X-Y"], line=3, column=1)),
       True, "the optional finding fields")
    eq(mutated(lambda doc: doc["files"][1]["findings"][0].update(column=1)), False, "column without line")
    eq(mutated(lambda doc: doc["files"][1]["findings"][0].update(line=1)), False, "line without column")
    eq(mutated(lambda doc: doc.update(policy={"path": "p.yaml", "sha256": "0" * 64})), True, "policy")
    eq(mutated(lambda doc: doc.update(policy={"path": "p.yaml"})), False, "policy without sha256")
    eq(mutated(lambda doc: doc.update(policy={"path": "p", "sha256": "0" * 64, "x": 1})), False,
       "unknown policy field")
    eq(mutated(lambda doc: doc["files"][0].update(sha256="A" * 64)), False, "sha256 is lowercase hex")
    eq(mutated(lambda doc: doc["files"][0].update(sha256="a" * 64)), True, "file sha256")
    waived = {"reason": "r", "expires": "2027-01-31", "severity": "high"}
    eq(mutated(lambda doc: doc["files"][1]["findings"][0].update(waived=waived)), True, "waived")
    eq(mutated(lambda doc: doc["files"][1]["findings"][0].update(waived={**waived, "by": "x"})),
       False, "unknown waived field")
    eq(mutated(lambda doc: doc["files"][1]["findings"][0].update(waived={"reason": "r"})), False,
       "waived without expires")
    eq(mutated(lambda doc: doc["files"][0]["signature"].update(kind="sigstore")), False,
       "unknown signature kind")
    eq(mutated(lambda doc: doc["files"][0]["signature"].update(version=0)), False,
       "version 0 is none, not written")
    eq(mutated(lambda doc: doc["files"][0]["signature"].update(detached_state="moved")), False,
       "unknown detached state")


@test
def documented_example_validates(d):
    with open(os.path.join(ROOT, "docs", "report.md"), encoding="utf-8") as fh:
        text = fh.read()
    blocks = re.findall(r"<!-- test: (report-example(?:-[a-z]+)?) -->\n```json\n(.*?)\n```", text, re.S)
    eq([name for name, _ in blocks], ["report-example", "report-example-check"],
       "docs/report.md's tested examples")
    for name, block in blocks:
        validate(json.loads(block), f"docs/report.md {name}", record=False)


@test
def every_schema_field_is_produced(d):
    # Runs last: SEEN holds the fields of every real report above.
    want = set()
    defs = SCHEMA["definitions"]
    for name in ("file", "finding", "view", "signature"):
        want.update(f"{name}.{k}" for k in defs[name]["properties"])
    missing = sorted(want - SEEN)
    if missing:
        raise AssertionError(f"schema fields no report above produced: {missing}")


if __name__ == "__main__":
    sys.exit(main())
