#!/usr/bin/env python3
"""Writes the seed corpus of fuzz_oms_bundle: the OMS vectors
(tests/fixtures/oms, made with model_signing 1.1.1 and by hand) and edited
copies reaching each strictness rule of ParseBundle (their signatures no
longer verify; the parse rules come first). Usage: make_oms_corpus.py
[FUZZ_DIR] (default: this directory)."""
import base64
import hashlib
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
OMS = os.path.join(HERE, "..", "tests", "fixtures", "oms")
VECTORS = [
    "model_signing_1.1.1/files-p256.sig",
    "model_signing_1.1.1/files-p384.sig",
    "model_signing_1.1.1/files-p521.sig",
    "model_signing_1.1.1/single-file-p256.sig",
    "model_signing_1.1.1/shards40-p256.sig",
    "handbuilt/files-p256-compact.sig",
    "handbuilt/files-ed25519.sig",
]


def read(rel):
    with open(os.path.join(OMS, rel), "rb") as f:
        return f.read()


def bundle_with(statement, base):
    """`base` (a bundle dict) carrying `statement` (a dict), rerooted."""
    h = hashlib.sha256()
    for r in statement["predicate"]["resources"]:
        h.update(bytes.fromhex(r["digest"]))
    statement["subject"][0]["digest"]["sha256"] = h.hexdigest()
    b = json.loads(json.dumps(base))
    payload = json.dumps(statement, separators=(",", ":"), sort_keys=True).encode()
    b["dsseEnvelope"]["payload"] = base64.b64encode(payload).decode()
    return json.dumps(b).encode()


def main():
    out = os.path.join(sys.argv[1] if len(sys.argv) > 1 else HERE, "corpus", "fuzz_oms_bundle")
    os.makedirs(out, exist_ok=True)
    seeds = {}
    for rel in VECTORS:
        seeds[os.path.basename(rel)[: -len(".sig")]] = read(rel)
    base = json.loads(read("handbuilt/files-p256-compact.sig"))
    st = json.loads(base64.b64decode(base["dsseEnvelope"]["payload"]))
    shards = json.loads(read("model_signing_1.1.1/shards40-p256.sig"))
    sst = json.loads(base64.b64decode(shards["dsseEnvelope"]["payload"]))

    def edited(f, statement=st, b=base):
        s = json.loads(json.dumps(statement))
        f(s)
        return bundle_with(s, b)

    seeds["dup-bundle-key"] = read("handbuilt/files-p256-compact.sig").replace(
        b'{"mediaType"', b'{"mediaType": "x", "mediaType"', 1)
    seeds["dot-slash-path"] = edited(lambda s: s["predicate"]["resources"][0].update(name="./a-b"))
    seeds["dotdot-path"] = edited(lambda s: s["predicate"]["resources"][0].update(name="sub/../a-b"))
    seeds["dup-resource"] = edited(lambda s: s["predicate"]["resources"].append(s["predicate"]["resources"][0]))
    seeds["versioned"] = edited(lambda s: s["subject"][0].update(annotations={"modelgate.version": "3"}))
    seeds["shard-gap"] = edited(lambda s: s["predicate"]["resources"].pop(4), sst, shards)
    seeds["two-signatures"] = json.dumps(
        dict(base, dsseEnvelope=dict(base["dsseEnvelope"], signatures=base["dsseEnvelope"]["signatures"] * 2))
    ).encode()
    for name, data in sorted(seeds.items()):
        with open(os.path.join(out, name), "wb") as f:
            f.write(data)


if __name__ == "__main__":
    main()
