#!/usr/bin/env python3
"""set_digest_ref INDEX.json: prints the STSIG set digest (docs/stsig.md
"Shard sets") of the shards an index lists, computed from the files' bytes
with Python's standard library only: an independent reading of the spec for
sign_set_test.cc, not a verifier (no strictness checks).

D_i = SHA-256(u64(data_len) || u64(n_meta) || (B(key) || B(value))* ||
              u64(n_tensor) || (B(name) || B(dtype) || u64(rank) || u64(dim)* ||
              u64(begin) || u64(end) || sha256)*)
set = SHA-256("STSIG-SET/1\\n" || u64(n) || D_1..D_n || B(weight_map canonical))
"""
import hashlib
import json
import os
import struct
import sys


def u64(v):
    return struct.pack(">Q", v)


def B(x):
    if isinstance(x, str):
        x = x.encode("utf-8")
    return u64(len(x)) + x


def content_digest(data):
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n].decode("utf-8"))
    base = 8 + n
    meta = header.pop("__metadata__", {})
    out = [u64(len(data) - base)]
    kept = sorted((k.encode(), v.encode()) for k, v in meta.items() if not k.startswith("stsig."))
    out.append(u64(len(kept)))
    for k, v in kept:
        out += [B(k), B(v)]
    tensors = sorted((name.encode(), t) for name, t in header.items())
    out.append(u64(len(tensors)))
    for name, t in tensors:
        begin, end = t["data_offsets"]
        out += [B(name), B(t["dtype"]), u64(len(t["shape"]))] + [u64(d) for d in t["shape"]]
        out += [u64(begin), u64(end), hashlib.sha256(data[base + begin:base + end]).digest()]
    return hashlib.sha256(b"".join(out)).digest()


def main():
    index_path = sys.argv[1]
    with open(index_path, encoding="utf-8") as f:
        weight_map = json.load(f)["weight_map"]
    shards = sorted(set(weight_map.values()), key=lambda s: s.encode())
    root = os.path.dirname(index_path)
    digests = []
    for s in shards:
        with open(os.path.join(root, s), "rb") as f:
            digests.append(content_digest(f.read()))
    entries = sorted(((k.encode(), v.encode()) for k, v in weight_map.items()))
    canonical = u64(len(entries)) + b"".join(B(k) + B(v) for k, v in entries)
    h = hashlib.sha256(b"STSIG-SET/1\n" + u64(len(digests)) + b"".join(digests) + B(canonical))
    print(h.hexdigest())


if __name__ == "__main__":
    main()
