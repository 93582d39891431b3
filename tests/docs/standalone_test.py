#!/usr/bin/env python3
"""The repository's docs stand alone (issue 10, point 5).

usage: standalone_test.py PATH/TO/modelgate

- docs/stsig.md's worked example is recomputed from
  tests/signer/vectors/v1-basic.signed.safetensors by stsig_ref.py (Python's
  standard library, not modelgate): the decoded header, the key id, M field
  by field (also equal to vectors.json's message_hex), the content digest,
  the sizes quoted in the text; `openssl pkeyutl` verifies the signature over
  M and refuses it over M with one bit flipped; modelgate verify agrees.
- README.md links the policy, STSIG and report pages, and every relative
  link in README.md and docs/*.md names a file that exists.
- No file in the repository sends a reader to the design notes outside it
  (../shared, DESIGN.md).
"""
import base64
import json
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "integrations"))
from common import ROOT, eq, main, modelgate_from_argv, need_tool, run, test  # noqa: E402
import stsig_ref  # noqa: E402

MG = modelgate_from_argv()
OPENSSL = need_tool("openssl")
VECTORS = os.path.join(ROOT, "tests", "signer", "vectors")
SIGNED = os.path.join(VECTORS, "v1-basic.signed.safetensors")
PUB = os.path.join(VECTORS, "test-key.pub")


def read(rel):
    with open(os.path.join(ROOT, rel), encoding="utf-8") as f:
        return f.read()


STSIG_MD = read("docs/stsig.md")


def block(name):
    m = re.search(r"<!-- test: " + re.escape(name) + r" -->\n```\w*\n(.*?)\n```", STSIG_MD, re.S)
    if not m:
        raise AssertionError(f"docs/stsig.md has no block {name}")
    return m.group(1)


def signed_bytes():
    with open(SIGNED, "rb") as f:
        return f.read()


def decoded_header(data):
    header, _, _ = stsig_ref.read_header(data)
    meta = header["__metadata__"]
    for k in ("stsig.v1", "stsig.v1.sha256"):
        meta[k] = json.loads(meta[k])
    return header


@test
def stsig_header_block(d):
    data = signed_bytes()
    eq(json.loads(block("stsig-header")), decoded_header(data), "the decoded header")
    eq(list(json.loads(block("stsig-header"))), list(decoded_header(data)), "key order as in the file")
    eq(stsig_ref.tensor_sha256(data), decoded_header(data)["__metadata__"]["stsig.v1.sha256"],
       "the digest map holds the tensors' SHA-256")
    _, n, data_len = stsig_ref.read_header(data)
    text = data[8:8 + n]
    json_len = len(text.rstrip(b" "))
    for claim in (f"The file is {len(data)} bytes", f"the 8-byte length {n} (`{data[:8].hex()}`)",
                  f"a\n{n}-byte header ({json_len} bytes of JSON and {n - json_len} spaces",
                  f"then {data_len} bytes of data"):
        if claim not in STSIG_MD:
            raise AssertionError(f"docs/stsig.md does not say {claim!r}")
    eq((8 + n) % 8, 0, "padding")


@test
def stsig_kid_block(d):
    with open(PUB) as f:
        pem = f.read()
    lines = dict(l.rsplit(None, 1) for l in block("stsig-kid").splitlines())
    eq(lines["SubjectPublicKeyInfo DER"], stsig_ref.spki_der(pem).hex(), "SPKI DER")
    eq(lines["SHA-256 of it, 16 bytes"], stsig_ref.kid_of(pem), "kid")
    eq(stsig_ref.spki_der(pem)[:12].hex(), "302a300506032b6570032100", "the SPKI prefix in the text")
    if "`302a300506032b6570032100`" not in STSIG_MD:
        raise AssertionError("docs/stsig.md does not give the SPKI prefix")


@test
def stsig_message_block(d):
    data = signed_bytes()
    fields, record = stsig_ref.message_fields(data)
    doc = [tuple(l.rsplit(None, 1)) for l in block("stsig-message").splitlines()]
    got = [(re.sub(r"\s+", " ", label.strip()), b.hex()) for label, b in fields]
    eq([(re.sub(r"\s+", " ", a.strip()), b) for a, b in doc], got, "M field by field")
    m = b"".join(b for _, b in fields)
    with open(os.path.join(VECTORS, "vectors.json")) as f:
        vec = {v["name"]: v for v in json.load(f)["vectors"]}["v1-basic"]
    eq(m.hex(), vec["message_hex"], "M equals the known-answer vector")
    if f"M, field by field ({len(m)} bytes" not in STSIG_MD:
        raise AssertionError(f"docs/stsig.md does not give M's length {len(m)}")
    eq(block("stsig-content-digest").strip(), stsig_ref.content_digest(fields), "content digest D")
    # Ed25519 over M with openssl, as the page shows; a flipped bit is refused.
    mfile = os.path.join(d, "m.bin")
    sfile = os.path.join(d, "sig.bin")
    with open(sfile, "wb") as f:
        f.write(base64.b64decode(record["sig"]))
    for msg, want in ((m, 0), (m[:-1] + bytes([m[-1] ^ 1]), 1)):
        with open(mfile, "wb") as f:
            f.write(msg)
        p = subprocess.run([OPENSSL, "pkeyutl", "-verify", "-pubin", "-inkey", PUB, "-rawin",
                            "-in", mfile, "-sigfile", sfile], capture_output=True)
        eq(p.returncode, want, f"openssl pkeyutl -verify ({p.stdout + p.stderr})")
    code, out, err = run([MG, "verify", "--pubkey", PUB, "-f", "json", SIGNED])
    eq(code, 0, err)
    sig = json.loads(out)["files"][0]["signature"]
    eq((sig["status"], sig["key_id"]), ("valid", stsig_ref.kid_of(open(PUB).read())), "modelgate verify")


LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


@test
def readme_links_the_reference_pages(d):
    readme = read("README.md")
    for page in ("docs/policy.md", "docs/stsig.md", "docs/report.md"):
        if f"]({page})" not in readme:
            raise AssertionError(f"README.md does not link {page}")
    pages = ["README.md"] + ["docs/" + n for n in sorted(os.listdir(os.path.join(ROOT, "docs")))
                             if n.endswith(".md")]
    checked = 0
    for page in pages:
        base = os.path.dirname(os.path.join(ROOT, page))
        for target in LINK.findall(read(page)):
            if re.match(r"^[a-z]+:", target):
                continue  # https:, mailto:
            path = os.path.normpath(os.path.join(base, target))
            if not os.path.exists(path):
                raise AssertionError(f"{page} links {target}, which does not exist")
            if not path.startswith(ROOT + os.sep):
                raise AssertionError(f"{page} links {target}, outside the repository")
            checked += 1
    if checked < 10:
        raise AssertionError(f"only {checked} relative links found: is the pattern right?")


# Mentions of the design notes that live outside the repository.
OUTSIDE = re.compile(r"DESIGN\.md|\.\./shared\b|(?<![\w./-])shared/(?:DESIGN|vectors)")
# Files that may name ../shared and why: each says the copy in the repository
# is what is used (an optional comparison when the notes happen to be beside
# the checkout).
ALLOWED = {
    "tests/sarif/CMakeLists.txt": "compares schemas/ with ../shared/vectors/sarif only when present",
    "tests/sarif/schemas/README.txt": "says where the copies came from",
    "tests/docs/standalone_test.py": "this test",
    "tests/cli/journey_test.py": "checks that the docs do not say it",
}
def repository_files():
    p = subprocess.run(["git", "-C", ROOT, "ls-files", "-z", "--cached", "--others",
                        "--exclude-standard"], capture_output=True)
    if p.returncode == 0:
        return [n for n in p.stdout.decode("utf-8", "surrogateescape").split("\0") if n]
    # Not a git checkout (a source tarball): every file but build directories.
    out = []
    for dirpath, dirnames, filenames in os.walk(ROOT):
        dirnames[:] = [n for n in dirnames if n != ".git" and not n.startswith("build")]
        out += [os.path.relpath(os.path.join(dirpath, n), ROOT) for n in filenames]
    return out


@test
def nothing_points_outside_the_repository(d):
    files = repository_files()
    if len(files) < 100:
        raise AssertionError(f"only {len(files)} files found under {ROOT}")
    bad, matched = [], set()
    for rel in files:
        path = os.path.join(ROOT, rel)
        if not os.path.isfile(path) or os.path.islink(path):
            continue
        with open(path, "rb") as f:
            text = f.read().decode("utf-8", "replace")
        for i, line in enumerate(text.splitlines(), 1):
            if OUTSIDE.search(line):
                if rel in ALLOWED:
                    matched.add(rel)
                else:
                    bad.append(f"{rel}:{i}: {line.strip()}")
    if bad:
        raise AssertionError("files that send readers to notes outside the repository "
                             "(point them at docs/ instead):\n  " + "\n  ".join(bad))
    stale = sorted(set(ALLOWED) - matched)
    if stale:
        raise AssertionError("ALLOWED names files that no longer mention ../shared: " + ", ".join(stale))

if __name__ == "__main__":
    sys.exit(main())
