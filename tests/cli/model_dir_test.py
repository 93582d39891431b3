"""Issue 11: a whole model directory signed once (detached bundle) and gated
by `check` under a policy that requires signatures; the tamper matrix.

Usage: model_dir_test.py MODELGATE

Each case starts from a fresh signed copy of a Hugging Face-style directory
(config, tokenizer, chat template, two shards and their index, README,
.gitattributes), breaks one thing, and asserts that `verify --sig` and
`check` both reject it (exit 1) and say why: the file named, the reason in
the finding. The opposite cases pass (exit 0).
"""
import json
import os
import shutil
import struct
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "support"))
from mgtest import eq, main, run_text, st_bytes, test, write  # noqa: E402

MG = sys.argv[1]
SCHEMA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "docs", "schemas",
                      "report-v1.schema.json")
try:
    import jsonschema
except ImportError as e:  # never skipped: ci/install-deps.sh installs it
    print(f"FAIL python3-jsonschema is not importable by {sys.executable} ({e})")
    sys.exit(1)
VALIDATOR = jsonschema.Draft7Validator(json.load(open(SCHEMA)))


def valid_report(out):
    """The JSON report, checked against docs/schemas/report-v1.schema.json."""
    doc = json.loads(out)
    errors = list(VALIDATOR.iter_errors(doc))
    assert not errors, f"report breaks the schema: {errors[0].message} at {list(errors[0].path)}"
    return doc


def shard(tensors):
    """A safetensors shard: tensors = [(name, n_f32_values, fill byte)]."""
    header, data = {}, b""
    for name, n, fill in tensors:
        header[name] = {"dtype": "F32", "shape": [n],
                        "data_offsets": [len(data), len(data) + 4 * n]}
        data += bytes([fill]) * (4 * n)
    return st_bytes(header, data)


def make_model(d, release=1):
    """A model directory; `release` changes every tensor's bytes (another
    signed release of the same model)."""
    write(d, "config.json", json.dumps({"model_type": "toy", "hidden_size": 4}))
    write(d, "generation_config.json", json.dumps({"max_length": 8}))
    write(d, "tokenizer.json", json.dumps({"version": "1.0", "model": {"type": "BPE"}}))
    write(d, "tokenizer_config.json", json.dumps({"model_max_length": 8}))
    write(d, "chat_template.jinja", "{% for m in messages %}{{ m.content }}{% endfor %}\n")
    write(d, "model-00001-of-00002.safetensors",
          shard([("embed.weight", 8, release), ("layer.0.weight", 4, release + 1)]))
    write(d, "model-00002-of-00002.safetensors",
          shard([("layer.1.weight", 4, release + 2), ("lm_head.weight", 8, release + 3)]))
    index = {"metadata": {"total_size": 4 * (8 + 4 + 4 + 8)},
             "weight_map": {"embed.weight": "model-00001-of-00002.safetensors",
                            "layer.0.weight": "model-00001-of-00002.safetensors",
                            "layer.1.weight": "model-00002-of-00002.safetensors",
                            "lm_head.weight": "model-00002-of-00002.safetensors"}}
    write(d, "model.safetensors.index.json", json.dumps(index, indent=2))
    write(d, "README.md", "# toy\n")
    write(d, ".gitattributes", "*.safetensors filter=lfs\n")
    return d


def keygen(d, name="k", alg="ecdsa-p256"):
    prefix = os.path.join(d, name)
    rc, out, err = run_text([MG, "keygen", "--alg", alg, "--out", prefix])
    eq(rc, 0, f"keygen: {err}")
    return prefix + ".key", prefix + ".pub"


def policy(d, pub, extra=""):
    text = ("apiVersion: modelgate/v1\nkind: Policy\nsignatures:\n  required: true\n"
            "  accept: [detached]\n" + extra +
            f"  keys:\n    - name: release\n      file: {pub}\n")
    return write(d, "policy.yaml", text)


def sign(model, key, *extra):
    rc, out, err = run_text([MG, "sign", "--detached", "--key", key, *extra, model])
    eq(rc, 0, f"sign --detached: {err}")
    return os.path.join(model, "model.sig")


def check(model, pol, *extra):
    rc, out, err = run_text([MG, "check", "-q", "-f", "json", "--policy", pol, *extra, model])
    assert rc in (0, 1, 2), err
    doc = valid_report(out) if out.strip() else None
    return rc, doc, err


def verify(model, sig, pub, *extra):
    rc, out, err = run_text([MG, "verify", "-q", "-f", "json", "--sig", sig, "--pubkey", pub,
                             *extra, model])
    doc = valid_report(out) if out.strip() else None
    return rc, doc, err


def rejected(doc):
    """{path relative to the model: [finding ids and messages]} of rejected files."""
    out = {}
    for f in doc["files"]:
        if f["verdict"] != "pass":
            out[f["path"]] = " | ".join(x["id"] + ": " + x["message"] for x in f["findings"])
    return out


class Setup:
    def __init__(self, d):
        self.keys = os.path.join(d, "keys")
        os.makedirs(self.keys)
        self.key, self.pub = keygen(self.keys)
        self.pol = policy(self.keys, self.pub)
        self.model = make_model(os.path.join(d, "model"))
        self.sig = sign(self.model, self.key)


def expect_reject(s, rel, words, *, check_too=True):
    """verify --sig and check both exit 1; the file `rel` (relative to the
    model) is rejected with every word of `words` in its findings."""
    for name, (rc, doc, err) in (("verify", verify(s.model, s.sig, s.pub)),
                                 ("check", check(s.model, s.pol))):
        if name == "check" and not check_too:
            continue
        eq(rc, 1, f"{name} exit ({err})")
        bad = rejected(doc)
        hits = [p for p in bad if os.path.relpath(p, s.model) == rel]
        assert hits, f"{name}: {rel!r} is not among the rejected files: {bad}"
        text = bad[hits[0]].lower()
        for w in words:
            assert w.lower() in text, f"{name}: {w!r} not in findings of {hits[0]}: {text}"


@test
def signed_directory_passes_verify_and_check(d):
    s = Setup(d)
    rc, doc, err = verify(s.model, s.sig, s.pub)
    eq(rc, 0, f"verify ({err})")
    rc, doc, err = check(s.model, s.pol)
    eq(rc, 0, f"check ({err}) {doc and rejected(doc)}")
    paths = sorted(os.path.relpath(f["path"], s.model) for f in doc["files"])
    assert "config.json" in paths and "tokenizer.json" in paths, paths
    for f in doc["files"]:
        if f["path"].endswith(".safetensors"):
            eq(f["signature"]["kind"], "detached", f["path"])
            eq(len(f["sha256"]), 64, "sha256 reported")
    eq(len(doc["policy"]["sha256"]), 64, "policy sha256")


@test
def copied_elsewhere_still_verifies(d):
    s = Setup(d)
    moved = os.path.join(d, "elsewhere", "copy")
    shutil.copytree(s.model, moved)
    rc, doc, err = verify(moved, os.path.join(moved, "model.sig"), s.pub)
    eq(rc, 0, f"verify of the copy ({err})")
    rc, doc, err = check(moved, s.pol)
    eq(rc, 0, f"check of the copy ({err})")


@test
def byte_flipped_in_any_file(d):
    s = Setup(d)
    base = os.path.join(d, "pristine")
    shutil.copytree(s.model, base)
    for rel in ("config.json", "tokenizer.json", "chat_template.jinja", "README.md",
                "model-00002-of-00002.safetensors", "model.safetensors.index.json"):
        shutil.rmtree(s.model)
        shutil.copytree(base, s.model)
        path = os.path.join(s.model, rel)
        data = bytearray(open(path, "rb").read())
        data[-2] ^= 0x01
        open(path, "wb").write(bytes(data))
        expect_reject(s, rel, ["changed"])


@test
def file_added(d):
    s = Setup(d)
    write(s.model, "extra.bin", b"\x00" * 16)
    expect_reject(s, "extra.bin", ["not"])
    rc, doc, err = verify(s.model, s.sig, s.pub, "--allow-unsigned-files")
    eq(rc, 0, f"--allow-unsigned-files lets an extra file pass ({err})")


@test
def file_removed(d):
    s = Setup(d)
    os.remove(os.path.join(s.model, "tokenizer.json"))
    expect_reject(s, "tokenizer.json", ["missing"])
    rc, doc, err = verify(s.model, s.sig, s.pub, "--allow-unsigned-files")
    eq(rc, 1, "a missing file fails even with --allow-unsigned-files")


@test
def file_renamed_and_moved_into_subdirectory(d):
    s = Setup(d)
    os.rename(os.path.join(s.model, "config.json"), os.path.join(s.model, "config2.json"))
    expect_reject(s, "config.json", ["missing"])
    s2 = Setup(os.path.join(d, "b"))
    os.makedirs(os.path.join(s2.model, "sub"))
    os.rename(os.path.join(s2.model, "README.md"), os.path.join(s2.model, "sub", "README.md"))
    expect_reject(s2, "README.md", ["missing"])


@test
def two_shards_swapped(d):
    s = Setup(d)
    a = os.path.join(s.model, "model-00001-of-00002.safetensors")
    b = os.path.join(s.model, "model-00002-of-00002.safetensors")
    tmp = a + ".tmp"
    os.rename(a, tmp)
    os.rename(b, a)
    os.rename(tmp, b)
    expect_reject(s, "model-00001-of-00002.safetensors", ["changed"])


@test
def shard_from_another_signed_release(d):
    s = Setup(d)
    other = make_model(os.path.join(d, "release2"), release=9)
    sign(other, s.key)
    shutil.copy(os.path.join(other, "model-00002-of-00002.safetensors"),
                os.path.join(s.model, "model-00002-of-00002.safetensors"))
    expect_reject(s, "model-00002-of-00002.safetensors", ["changed"])


@test
def edited_index_and_config(d):
    s = Setup(d)
    path = os.path.join(s.model, "model.safetensors.index.json")
    index = json.load(open(path))
    index["weight_map"]["lm_head.weight"] = "model-00001-of-00002.safetensors"
    open(path, "w").write(json.dumps(index, indent=2))
    expect_reject(s, "model.safetensors.index.json", ["changed"])


@test
def bundle_from_another_model(d):
    s = Setup(d)
    other = make_model(os.path.join(d, "other"), release=5)
    other_sig = sign(other, s.key)
    shutil.copy(other_sig, s.sig)
    expect_reject(s, "model-00001-of-00002.safetensors", ["changed"])


@test
def untrusted_key(d):
    s = Setup(d)
    key2, pub2 = keygen(s.keys, "intruder")
    sign(s.model, key2)  # re-signed by a key the policy does not list
    rc, doc, err = verify(s.model, s.sig, s.pub)
    eq(rc, 1, f"verify with the real key ({err})")
    rc, doc, err = check(s.model, s.pol)
    eq(rc, 1, f"check ({err})")
    assert "untrusted" in json.dumps(doc).lower(), rejected(doc)


@test
def truncated_or_duplicate_key_bundle(d):
    s = Setup(d)
    text = open(s.sig, "rb").read()
    open(s.sig, "wb").write(text[: len(text) // 2])
    rc, doc, err = verify(s.model, s.sig, s.pub)
    eq(rc, 1, f"truncated bundle ({err})")
    rc, doc, err = check(s.model, s.pol)
    eq(rc, 1, f"check, truncated bundle ({err})")
    doc = json.loads(text)
    dup = text.decode().replace('"mediaType"', '"mediaType":"x","mediaType"', 1)
    open(s.sig, "w").write(dup)
    rc, doc, err = verify(s.model, s.sig, s.pub)
    eq(rc, 1, f"duplicate-key bundle ({err})")
    assert "duplicate" in (json.dumps(doc) + err).lower()


@test
def second_garbage_dsse_signature(d):
    s = Setup(d)
    b = json.load(open(s.sig))
    b["dsseEnvelope"]["signatures"].append({"sig": "MEUCIQ" + "A" * 90})
    open(s.sig, "w").write(json.dumps(b))
    rc, doc, err = verify(s.model, s.sig, s.pub)
    eq(rc, 1, f"verify ({err})")
    rc, doc, err = check(s.model, s.pol)
    eq(rc, 1, f"check ({err})")


@test
def empty_directory_rejected_when_signatures_required(d):
    s = Setup(d)
    empty = os.path.join(d, "empty")
    os.makedirs(empty)
    rc, doc, err = check(empty, s.pol)
    eq(rc, 1, f"empty dir under signatures.required ({err})")
    only_ignored = os.path.join(d, "gitonly")
    write(only_ignored, ".gitattributes", "x\n")
    rc, doc, err = check(only_ignored, s.pol)
    eq(rc, 1, f"only ignored files ({err})")


@test
def each_unsigned_file_is_named(d):
    s = Setup(d)
    os.remove(s.sig)
    rc, doc, err = check(s.model, s.pol)
    eq(rc, 1, "nothing signed")
    bad = rejected(doc)
    for rel in ("config.json", "tokenizer.json", "model-00001-of-00002.safetensors"):
        assert any(p.endswith(rel) for p in bad), (rel, bad)


@test
def bundle_is_judged_as_a_bundle_not_as_a_model_file(d):
    """The bundle is the signature: formats.allow does not apply to it, and
    a bundle by a key the policy does not list blocks only when signatures
    are required; a malformed one always blocks."""
    s = Setup(d)
    strict = write(s.keys, "strict.yaml", open(s.pol).read().replace(
        "kind: Policy\n", "kind: Policy\nformats: {allow: [safetensors, unknown]}\n"))
    rc, doc, err = check(s.model, strict)
    eq(rc, 0, f"formats.allow without a format for the bundle ({err}) {doc and rejected(doc)}")
    # Named by --sig through another spelling of the same directory, the
    # bundle is still known as the bundle (resolved, not compared as text).
    rc, doc, err = check(s.model, s.pol, "--sig",
                         os.path.join(s.model, "..", os.path.basename(s.model), "model.sig"))
    eq(rc, 0, f"--sig spelled through .. ({err}) {doc and rejected(doc)}")
    entry = [f for f in doc["files"] if f["path"].endswith("model.sig")]
    eq([f["signature"].get("kind") for f in entry], ["detached"], "the bundle's own entry")
    loose = write(s.keys, "loose.yaml", "apiVersion: modelgate/v1\nkind: Policy\n")
    key2, pub2 = keygen(s.keys, "other")
    sign(s.model, key2)
    rc, doc, err = check(s.model, loose)
    eq(rc, 0, f"an untrusted bundle under a policy that requires nothing ({err})")
    open(s.sig, "w").write("{}")
    rc, doc, err = check(s.model, loose)
    eq(rc, 1, "a malformed bundle always blocks")
    assert any(p.endswith("model.sig") for p in rejected(doc)), rejected(doc)


@test
def one_file_signed_detached_and_a_linked_bundle(d):
    s = Setup(d)
    one = os.path.join(s.model, "model-00001-of-00002.safetensors")
    rc, out, err = run_text([MG, "sign", "--detached", "--key", s.key, one])
    eq(rc, 0, f"sign one file ({err})")
    assert os.path.isfile(one + ".sig")
    rc, doc, err = check(one, s.pol)  # finds FILE.sig beside it
    eq(rc, 0, f"check one file ({err}) {doc and rejected(doc)}")
    os.remove(s.sig)
    os.symlink(one + ".sig", s.sig)  # a link where the bundle belongs
    rc, doc, err = check(s.model, s.pol)
    eq(rc, 1, f"a symlinked model.sig ({err})")
    assert "MG-OMS-BUNDLE" in rejected(doc).get(s.sig, ""), rejected(doc)


@test
def git_directory_left_out_only_when_the_valid_bundle_ignores_it(d):
    s = Setup(d)
    evil = write(s.model, ".git/objects/evil.pkl", b"\x80\x02cos\nsystem\n.")
    rc, doc, err = check(s.model, s.pol)
    eq(rc, 0, f"a signed clone's .git is not walked ({err}) {doc and rejected(doc)}")
    assert not any("/.git/" in f["path"] for f in doc["files"]), "no .git entries"
    os.remove(s.sig)
    rc, doc, err = check(s.model, s.pol)
    eq(rc, 1, "unsigned: .git is judged like anything else")
    assert evil in rejected(doc), rejected(doc)


OMS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures", "oms")


@test
def model_signing_bundles_gate_the_vector_model(d):
    """Bundles `model_signing` 1.1.1 made (files mode, three curves; shard
    mode) verify and pass check over a copy of the model they signed."""
    model = os.path.join(d, "model")
    shutil.copytree(os.path.join(OMS, "model"), model)
    for curve in ("p256", "p384", "p521"):
        sig = os.path.join(OMS, "model_signing_1.1.1", f"files-{curve}.sig")
        pub = os.path.join(OMS, "keys", f"{curve}.pub.pem")
        rc, doc, err = verify(model, sig, pub)
        eq(rc, 0, f"verify {curve} ({err})")
        keydir = os.path.join(d, curve)
        os.makedirs(keydir)
        pol = policy(keydir, pub)
        rc, doc, err = check(model, pol, "--sig", sig)
        eq(rc, 0, f"check {curve} ({err}) {doc and rejected(doc)}")
    sig = os.path.join(OMS, "model_signing_1.1.1", "shards40-p256.sig")
    rc, doc, err = verify(model, sig, os.path.join(OMS, "keys", "p256.pub.pem"))
    eq(rc, 0, f"verify shard mode ({err})")
    # A listed file grown to a sparse 1 GiB under the 40-byte shard size:
    # changed, judged from its size (the bundle bounds what is hashed; 27
    # million ranges would be asked for otherwise).
    big = os.path.join(d, "big")
    shutil.copytree(model, big)
    with open(os.path.join(big, "a.txt"), "r+b") as f:
        f.truncate(1 << 30)
    for name, (rc, doc, err) in (
            ("verify", verify(big, sig, os.path.join(OMS, "keys", "p256.pub.pem"))),
            ("check", check(big, policy(os.path.join(d, "p256"), os.path.join(OMS, "keys", "p256.pub.pem")),
                            "--sig", sig))):
        eq(rc, 1, f"{name}: a sparse 1 GiB file in shard mode ({err})")
        assert any(p.endswith("/a.txt") for p in rejected(doc)), (name, rejected(doc))
    # The same bundle over a model with one byte changed fails, naming it.
    path = os.path.join(model, "sub", "notes.txt")
    data = bytearray(open(path, "rb").read())
    data[0] ^= 1
    open(path, "wb").write(bytes(data))
    rc, doc, err = verify(model, sig, os.path.join(OMS, "keys", "p256.pub.pem"))
    eq(rc, 1, "shard mode, a byte changed")
    assert any(p.endswith("sub/notes.txt") for p in rejected(doc)), rejected(doc)


sys.exit(main("mg-model-dir-"))
