#!/usr/bin/env python3
"""Verify an OMS bundle the way `model_signing verify key` (1.1.1) does.

    check_bundle.py --bundle SIG --pubkey PEM --model PATH [--shard-size N]
                    [--expect-error TEXT]
    check_bundle.py --vectors DIR     (every bundle of tests/fixtures/oms)

model_signing is not installable here (no PyPI), so this re-implements its
verification steps, in its order, with Debian's python3-cryptography
(sigstore/model-transparency src/model_signing: _signing/sign_sigstore_pb.py
Signature.read and Verifier, _signing/sign_ec_key.py Verifier._verify_bundle,
_signing/signing.py Verifier.verify and dsse_payload_to_manifest,
verifying.py Config.verify, hashing.py Config.hash, _serialization/file.py
and file_shard.py):
  1. read the JSON; a missing verificationMaterial.tlogEntries is [], a
     missing publicKey.hint None (rawBytes/keyDetails dropped);
  2. mediaType must be application/vnd.dev.sigstore.bundle.v0.3+json;
  3. the public key must be EC on P-256/P-384/P-521 ("Only elliptic curve
     keys are supported" otherwise: it refuses Ed25519);
  4. a hint, when present, must equal sha256(public key PEM).hex();
  5. signatures[0] (only the first!) must verify with ECDSA over
     PAE(payload), SHA-256/384/512 by curve;
  6. payloadType application/vnd.in-toto+json; payload JSON; _type
     https://in-toto.io/Statement/v1; predicateType
     https://model_signing/signature/v1.0; exactly one subject; the subject
     digest equals SHA-256 over the resources' digests in the listed order;
  7. the model is hashed with the serialization the bundle records (files:
     hash_type, allow_symlinks, ignore_paths; shards: the shard size, which
     model_signing's CLI cannot take from the bundle -- it is a float there --
     so --shard-size gives it, as its API's explicit hashing config does),
     always ignoring .git, .gitattributes, .github, .gitignore, plus the
     recorded ignore_paths;
  8. the manifests (resource key -> (algorithm, digest)) must be equal.
Prints "OK" and exits 0 when the bundle verifies; otherwise prints the
error and exits 1 (0 when --expect-error TEXT is given and the error
contains TEXT). Standard library + cryptography only.
"""

import argparse
import base64
import hashlib
import json
import os
import pathlib
import sys

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

MEDIA_TYPE = "application/vnd.dev.sigstore.bundle.v0.3+json"
PAYLOAD_TYPE = "application/vnd.in-toto+json"
STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "https://model_signing/signature/v1.0"
GIT_PATHS = [".git", ".gitattributes", ".github", ".gitignore"]
CURVE_HASH = {"secp256r1": hashes.SHA256, "secp384r1": hashes.SHA384, "secp521r1": hashes.SHA512}


class VerifyError(Exception):
    pass


def pae(raw_payload):
    head = f"DSSEv1 {len(PAYLOAD_TYPE)} {PAYLOAD_TYPE} {len(raw_payload)}"
    return b" ".join([head.encode("utf-8"), raw_payload])


def load_public_key(pem_bytes):
    key = serialization.load_pem_public_key(pem_bytes)
    if not isinstance(key, ec.EllipticCurvePublicKey):
        raise VerifyError("Only elliptic curve public keys are supported")
    if key.curve.name not in CURVE_HASH:
        raise VerifyError(f"Unsupported key for curve '{key.curve.name}'")
    return key


def verify_signed_content(bundle, key):
    """Steps 1-5: the payload type and payload bytes."""
    if bundle.get("mediaType") != MEDIA_TYPE:
        raise VerifyError(f"Invalid sigstore bundle, got media type {bundle.get('mediaType')}")
    vm = bundle["verificationMaterial"]
    vm.setdefault("tlogEntries", [])
    hint = vm.get("publicKey", {}).get("hint")
    pem = key.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    if hint and hint != hashlib.sha256(pem).hexdigest():
        raise VerifyError("Key mismatch: the key hint does not match the provided public key")
    env = bundle["dsseEnvelope"]
    payload = base64.b64decode(env["payload"])
    sig = base64.b64decode(env["signatures"][0]["sig"])
    try:
        key.verify(sig, pae(payload), ec.ECDSA(CURVE_HASH[key.curve.name]()))
    except InvalidSignature:
        raise VerifyError("signature 0 does not verify") from None
    return env["payloadType"], payload


def expected_manifest(payload_type, payload):
    """Step 6: {key: (algorithm, digest hex)}, the serialization args."""
    if payload_type != PAYLOAD_TYPE:
        raise VerifyError(f"Expected DSSE payload {PAYLOAD_TYPE}, but got {payload_type}")
    st = json.loads(payload)
    if st["_type"] != STATEMENT_TYPE:
        raise VerifyError(f"Expected in-toto {STATEMENT_TYPE} payload")
    if st["predicateType"] != PREDICATE_TYPE:
        raise VerifyError("Predicate type mismatch")
    if len(st["subject"]) != 1:
        raise VerifyError("Expected only one subject")
    want_root = st["subject"][0]["digest"]["sha256"]
    ser = st["predicate"]["serialization"]
    h = hashlib.sha256()
    items = {}
    for r in st["predicate"]["resources"]:
        h.update(bytes.fromhex(r["digest"]))
        name = r["name"]
        if ser["method"] == "shards":
            parts = name.split(":")
            if len(parts) != 3:
                raise VerifyError(f"Invalid resource name {name}")
            key = (str(pathlib.PurePosixPath(parts[0])), int(parts[1]), int(parts[2]))
        else:
            key = (str(pathlib.PurePosixPath(name)),)
        items[key] = (r["algorithm"], r["digest"])
    if h.hexdigest() != want_root:
        raise VerifyError("Manifest is inconsistent. Root digest mismatch")
    return items, ser


def check_file_or_directory(path, allow_symlinks):
    if not allow_symlinks and path.is_symlink():
        raise VerifyError(f"Cannot use '{path}' because it is a symlink.")
    if not (path.is_file() or path.is_dir()):
        raise VerifyError(f"Cannot use '{path}' as file or directory.")


def should_ignore(path, ignore_paths):
    return any(path.is_relative_to(p) for p in ignore_paths)


def sha256_range(path, start, end):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        f.seek(start)
        h.update(f.read(end - start))
    return h.hexdigest()


def actual_manifest(model, ser, shard_size):
    """Steps 7: the local model's manifest under the recorded serialization."""
    model = pathlib.Path(model)
    ignore = [pathlib.Path(os.path.join(model, p)) for p in GIT_PATHS]
    ignore += [pathlib.Path(os.path.join(model, p)) for p in ser.get("ignore_paths", [])]
    allow = bool(ser["allow_symlinks"])
    paths = [model] + sorted(model.glob("**/*")) if model.is_dir() else [model]
    items = {}
    if ser["method"] == "files":
        files = []
        for p in paths:
            if should_ignore(p, ignore):
                continue
            check_file_or_directory(p, allow)
            if p.is_file():
                files.append(p)
        if not files:
            raise VerifyError("Model contains no regular files after applying exclusions")
        for p in files:
            rel = str(pathlib.PurePosixPath(p.relative_to(model)))
            items[(rel,)] = (ser["hash_type"], sha256_range(p, 0, p.stat().st_size))
        return items
    if shard_size is None:
        raise VerifyError("shard mode needs --shard-size (model_signing's guessed config cannot use the float)")
    alg = f"{ser['hash_type']}-sharded-{shard_size}"
    for p in paths:
        check_file_or_directory(p, allow)
        if p.is_file() and not should_ignore(p, ignore):
            size = p.stat().st_size
            rel = str(pathlib.PurePosixPath(p.relative_to(model)))
            start = 0
            while start < size:
                end = min(start + shard_size, size)
                items[(rel, start, end)] = (alg, sha256_range(p, start, end))
                start = end
    return items


def verify(bundle_path, pubkey_path, model, shard_size=None):
    bundle = json.loads(pathlib.Path(bundle_path).read_text(encoding="utf-8"))
    key = load_public_key(pathlib.Path(pubkey_path).read_bytes())
    payload_type, payload = verify_signed_content(bundle, key)
    want, ser = expected_manifest(payload_type, payload)
    got = actual_manifest(model, ser, shard_size)
    if got != want:
        extra = sorted(set(got) - set(want))
        missing = sorted(set(want) - set(got))
        changed = sorted(k for k in set(got) & set(want) if got[k] != want[k])
        raise VerifyError(f"Signature mismatch: added {extra} missing {missing} changed {changed}")


def run_one(args):
    try:
        verify(args.bundle, args.pubkey, args.model, args.shard_size)
    except (VerifyError, ValueError, KeyError, TypeError) as e:
        msg = f"{type(e).__name__}: {e}"
        if args.expect_error is not None and args.expect_error in msg:
            print(f"rejected as expected: {msg}")
            return 0
        print(msg)
        return 1
    if args.expect_error is not None:
        print(f"verified, but expected an error containing {args.expect_error!r}")
        return 1
    print("OK")
    return 0


def run_vectors(d):
    """Every bundle of tests/fixtures/oms: verified, or rejected as model_signing does."""
    d = pathlib.Path(d)
    model = d / "model"
    ms = d / "model_signing_1.1.1"
    keys = d / "keys"
    cases = [
        (ms / "files-p256.sig", keys / "p256.pub.pem", model, None, None),
        (ms / "files-p384.sig", keys / "p384.pub.pem", model, None, None),
        (ms / "files-p521.sig", keys / "p521.pub.pem", model, None, None),
        (ms / "single-file-p256.sig", keys / "p256.pub.pem", model / "model-00001-of-00002.safetensors", None, None),
        (ms / "shards40-p256.sig", keys / "p256.pub.pem", model, 40, None),
        (d / "handbuilt" / "files-p256-compact.sig", keys / "p256.pub.pem", model, None, None),
        (d / "handbuilt" / "files-ed25519.sig", keys / "ed25519.pub.pem", model, None, "Only elliptic curve"),
        # A key other than the signer's: the hint check refuses it.
        (ms / "files-p256.sig", keys / "p384.pub.pem", model, None, "Key mismatch"),
        # The model in place of one file: the manifests differ.
        (ms / "single-file-p256.sig", keys / "p256.pub.pem", model, None, "Signature mismatch"),
    ]
    failures = 0
    for bundle, key, m, shard, expect in cases:
        try:
            verify(bundle, key, m, shard)
            outcome = None
        except VerifyError as e:
            outcome = str(e)
        ok = outcome is None if expect is None else (outcome is not None and expect in outcome)
        print(f"{'ok  ' if ok else 'FAIL'} {bundle.name} with {key.name} on {m.name}: {outcome or 'verified'}")
        failures += 0 if ok else 1
    return 1 if failures else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bundle")
    ap.add_argument("--pubkey")
    ap.add_argument("--model")
    ap.add_argument("--shard-size", type=int)
    ap.add_argument("--expect-error")
    ap.add_argument("--vectors")
    args = ap.parse_args()
    if args.vectors:
        return run_vectors(args.vectors)
    if not (args.bundle and args.pubkey and args.model):
        ap.error("--bundle, --pubkey and --model are required (or --vectors)")
    return run_one(args)


if __name__ == "__main__":
    sys.exit(main())
