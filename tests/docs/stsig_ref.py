"""stsig_ref is an independent reading of STSIG v1 (docs/stsig.md) from the
bytes of a signed safetensors file, in Python's standard library: the
signed message M field by field, the key id from a PEM public key, and the
content digest D. docs/stsig.md's worked example is checked against it
(standalone_test.py); it is not a verifier (no strictness checks) and the
Ed25519 check itself is left to `openssl pkeyutl`.
"""
import base64
import hashlib
import json
import struct


def u64(v):
    return struct.pack(">Q", v)


def B(x):
    if isinstance(x, str):
        x = x.encode("utf-8")
    return u64(len(x)) + x


def read_header(data):
    """(header dict, header length N, data section length) of a safetensors file."""
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n].decode("utf-8"))
    return header, n, len(data) - 8 - n


def spki_der(pem_text):
    body = "".join(l for l in pem_text.strip().splitlines() if not l.startswith("-----"))
    return base64.b64decode(body)


def kid_of(pem_text):
    """First 16 bytes of SHA-256 over the DER SubjectPublicKeyInfo, hex."""
    return hashlib.sha256(spki_der(pem_text)).digest()[:16].hex()


def message_fields(data, record_index=0):
    """[(label, bytes)] whose concatenation is M for record `record_index`
    of the signed file `data`, and the record."""
    header, _, data_len = read_header(data)
    meta = header.get("__metadata__", {})
    record = json.loads(meta["stsig.v1"])[record_index]
    digests = json.loads(meta["stsig.v1.sha256"])
    fields = [("magic", b"STSIG/1\n"),
              ("B(alg)", B(record["alg"])),
              ("B(kid)", B(bytes.fromhex(record["kid"]))),
              ("u64(created)", u64(record["created"])),
              ("B(model)", B(record["model"])),
              ("u64(version)", u64(record["version"]))]
    s = record["set"]
    fields.append(("u64(set_present)", u64(0 if s is None else 1)))
    if s is not None:
        fields += [("u64(set.index)", u64(s["index"])), ("u64(set.count)", u64(s["count"])),
                   ("B(set.digest)", B(bytes.fromhex(s["digest"])))]
    fields.append(("u64(data_len)", u64(data_len)))
    kept = sorted((k.encode(), v.encode()) for k, v in meta.items() if not k.startswith("stsig."))
    fields.append(("u64(n_meta)", u64(len(kept))))
    for k, v in kept:
        fields.append((f"B(key {k.decode()!r})", B(k)))
        fields.append((f"B(value {v.decode()!r})", B(v)))
    tensors = sorted((name.encode(), t) for name, t in header.items() if name != "__metadata__")
    fields.append(("u64(n_tensor)", u64(len(tensors))))
    for name, t in tensors:
        n = name.decode()
        fields.append((f"B(name {n!r})", B(name)))
        fields.append((f"B(dtype {t['dtype']})", B(t["dtype"])))
        fields.append((f"u64(rank) {len(t['shape'])}", u64(len(t["shape"]))))
        for dim in t["shape"]:
            fields.append((f"u64(dim) {dim}", u64(dim)))
        begin, end = t["data_offsets"]
        fields.append((f"u64(begin) {begin}", u64(begin)))
        fields.append((f"u64(end) {end}", u64(end)))
        fields.append((f"sha256 of {n!r}", bytes.fromhex(digests[n])))
    return fields, record


def tensor_sha256(data):
    """{name: hex SHA-256 of the tensor's bytes} computed from the data section."""
    header, n, _ = read_header(data)
    base = 8 + n
    return {name: hashlib.sha256(data[base + t["data_offsets"][0]:base + t["data_offsets"][1]]).hexdigest()
            for name, t in header.items() if name != "__metadata__"}


def content_digest(fields):
    """D = SHA-256 of M from u64(data_len) on."""
    labels = [l for l, _ in fields]
    start = labels.index("u64(data_len)")
    return hashlib.sha256(b"".join(b for _, b in fields[start:])).hexdigest()
