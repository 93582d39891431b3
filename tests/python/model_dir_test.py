"""The directory forms of a model (an embedded-signed shard set with its
index; a detached ECDSA P-256 bundle over a directory) and modelgate.scan.

    model_dir_test.py MODELGATE   (env MODELGATE_LIBRARY, PYTHONPATH=bindings/python)
"""
import json
import os
import shutil
import sys

import numpy as np

from binding_util import flip, keygen, raises, sign
from mgtest import eq, main, run_text, test, write
import st_reference

import modelgate
import modelgate.numpy
import modelgate.torch

SHARDS = {
    "model-00001-of-00002.safetensors": {
        "a.weight": np.arange(12, dtype="<f4").reshape(3, 4),
        "a.bias": np.array([1, -2, 3], dtype="<i8"),
    },
    "model-00002-of-00002.safetensors": {
        "b.weight": np.linspace(-1, 1, 10, dtype="<f8"),
        "b.mask": np.array([True, False]),
    },
}


def shard_dir(d):
    """shard_dir writes a two-shard model with its index under d/model."""
    model = os.path.join(d, "model")
    os.makedirs(model)
    weight_map = {}
    total = 0
    for name, tensors in SHARDS.items():
        st_reference.write(os.path.join(model, name), tensors, {"format": "pt"})
        weight_map.update({t: name for t in tensors})
        total += sum(a.nbytes for a in tensors.values())
    write(model, "model.safetensors.index.json",
          json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}))
    write(model, "config.json", "{}")
    return model


def all_tensors():
    return {k: v for tensors in SHARDS.values() for k, v in tensors.items()}


def assert_arrays(got, what):
    want = all_tensors()
    eq(sorted(got), sorted(want), f"{what}: names")
    for name, a in want.items():
        eq((got[name].dtype, got[name].shape, got[name].tobytes()), (a.dtype, a.shape, a.tobytes()),
           f"{what}: {name}")


@test
def an_embedded_signed_shard_set_loads_by_directory_and_by_index(d):
    key = keygen(d)
    model = shard_dir(d)
    sign(key, model)
    index = os.path.join(model, "model.safetensors.index.json")
    for what in (model, index):
        for mode in ("eager", "lazy", "copy"):
            assert_arrays(modelgate.numpy.load_file(what, keys=[key + ".pub"], mode=mode),
                          f"{os.path.basename(what)} {mode}")
    with modelgate.safe_open(model, framework="pt", keys=[key + ".pub"]) as f:
        eq([os.path.basename(p) for p in f.files()], sorted(SHARDS), "files()")
        eq(f.metadata(), {"format": "pt"}, "metadata merged over the shards")
        eq(f.metadata(1), {"format": "pt"}, "metadata of one shard")
        eq(f.verification()["kind"], "embedded", "kind")
        eq(f.get_tensor("b.weight").tolist(), SHARDS["model-00002-of-00002.safetensors"]
           ["b.weight"].tolist(), "torch from the second shard")


@test
def a_tampered_or_missing_shard_refuses_the_set(d):
    key = keygen(d)
    model = shard_dir(d)
    sign(key, model)
    second = os.path.join(model, "model-00002-of-00002.safetensors")
    saved = os.path.join(d, "saved.safetensors")
    shutil.copyfile(second, saved)
    begin, _ = st_reference.data_range(second, "b.weight")
    flip(second, begin + 3)
    e = raises(modelgate.VerificationError,
               lambda: modelgate.numpy.load_file(model, keys=[key + ".pub"]), "tampered shard")
    eq((e.finding_id, e.file, e.offset), ("MG-SIG-TENSOR-MISMATCH", second, begin), "tampered")
    with modelgate.safe_open(model, keys=[key + ".pub"], mode="lazy") as f:
        eq(f.get_tensor("a.bias").tolist(), [1, -2, 3], "lazy: the intact shard's tensor")
        for attempt in ("first", "second"):
            e = raises(modelgate.VerificationError, lambda: f.get_tensor("b.weight"), attempt)
            eq(e.finding_id, "MG-SIG-TENSOR-MISMATCH", f"lazy {attempt}")
    os.remove(second)
    e = raises(modelgate.VerificationError,
               lambda: modelgate.numpy.load_file(model, keys=[key + ".pub"]), "missing shard")
    eq(e.finding_id, "MG-SET-SHARD-MISSING", f"missing shard: {e}")
    # A first shard from another set (the same names, other values) beside
    # this set's second: each is signed, but not together.
    other = shard_dir(os.path.join(d, "other"))
    first = "model-00001-of-00002.safetensors"
    st_reference.write(os.path.join(other, first),
                       {k: v + 1 for k, v in SHARDS[first].items()}, {"format": "pt"})
    sign(key, other)
    shutil.copyfile(os.path.join(other, first), os.path.join(model, first))
    shutil.copyfile(saved, second)
    e = raises(modelgate.VerificationError,
               lambda: modelgate.numpy.load_file(model, keys=[key + ".pub"]), "mixed sets")
    eq(e.finding_id.startswith("MG-SET-"), True, f"mixed sets: {e}")


def detached_dir(d):
    key = keygen(d, "p256", alg="ecdsa-p256")
    model = os.path.join(d, "model")
    os.makedirs(model)
    st_reference.write(os.path.join(model, "model.safetensors"), all_tensors(), {"format": "pt"})
    write(model, "config.json", '{"model_type": "test"}')
    code, out, err = run_text([os.path.abspath(sys.argv[1]), "sign", "--detached", "--key",
                               key + ".key", model])
    eq(code, 0, "sign --detached\n" + out + err)
    eq(os.path.isfile(os.path.join(model, "model.sig")), True, "DIR/model.sig written")
    return key, model


@test
def a_detached_ecdsa_bundle_over_a_directory(d):
    key, model = detached_dir(d)
    for mode in ("eager", "lazy", "copy"):
        assert_arrays(modelgate.numpy.load_file(model, keys=[key + ".pub"], mode=mode),
                      f"detached {mode}")
        got = modelgate.torch.load_file(model, keys=[key + ".pub"], mode=mode)
        eq(got["a.weight"].tolist(), all_tensors()["a.weight"].tolist(), f"torch {mode}")
    with modelgate.safe_open(model, keys=[key + ".pub"], signature="detached") as f:
        v = f.verification()
        eq((v["kind"], os.path.basename(v["bundle"]["path"])), ("detached", "model.sig"), "how")
    # signature="embedded" ignores the bundle: the file carries no STSIG.
    e = raises(modelgate.VerificationError, lambda: modelgate.numpy.load_file(
        model, keys=[key + ".pub"], signature="embedded"), "embedded only")
    eq(e.finding_id, "MG-SIG-MISSING", "embedded only")
    # A bundle by an untrusted key never falls back to anything.
    other = keygen(d, "other", alg="ecdsa-p256")
    e = raises(modelgate.VerificationError,
               lambda: modelgate.numpy.load_file(model, keys=[other + ".pub"]), "untrusted bundle")
    eq(e.finding_id, "MG-OMS-UNTRUSTED", "untrusted bundle")
    # bundle=: a bundle kept outside the directory.
    outside = os.path.join(d, "elsewhere.sig")
    shutil.move(os.path.join(model, "model.sig"), outside)
    raises(modelgate.VerificationError, lambda: modelgate.numpy.load_file(
        model, keys=[key + ".pub"], signature="detached"), "no bundle where it is looked for")
    assert_arrays(modelgate.numpy.load_file(model, keys=[key + ".pub"], bundle=outside),
                  "bundle=")


@test
def a_tampered_file_under_a_detached_bundle_in_each_mode(d):
    key, model = detached_dir(d)
    path = os.path.join(model, "model.safetensors")
    begin, _ = st_reference.data_range(path, "b.weight")
    flip(path, begin)
    for mode in ("eager", "copy"):
        e = raises(modelgate.VerificationError,
                   lambda: modelgate.numpy.load_file(model, keys=[key + ".pub"], mode=mode), mode)
        eq((e.status, e.file), (modelgate.Status.VERIFY, path), f"{mode}: {e}")
        eq(e.finding_id, "MG-OMS-FILE-CHANGED", f"{mode}: {e}")
    with modelgate.safe_open(model, keys=[key + ".pub"], mode="lazy") as f:
        eq(f.keys(), sorted(all_tensors()), "lazy: the header is there before hashing")
        for attempt in ("first", "second"):
            e = raises(modelgate.VerificationError, lambda: f.get_tensor("a.bias"), attempt)
            eq(e.finding_id, "MG-OMS-FILE-CHANGED", f"lazy {attempt} (the file is hashed whole)")


POLICY = """apiVersion: modelgate/v1
kind: Policy
signatures:
  required: true
  keys:
    - name: test
      file: {pub}
"""


@test
def scan_returns_the_report_as_a_dict(d):
    key = keygen(d)
    good = st_reference.write(os.path.join(d, "good.safetensors"), {"x": np.ones(2, "<f4")})
    evil = write(d, "evil.pkl", b"cos\nsystem\n(S'echo owned'\ntR.")
    r = modelgate.scan(good)
    eq((r["schema"], r.verdict, r.passed), ("modelgate.report/v1", 0, True), "a clean file")
    eq([(f["path"], f["verdict"]) for f in r["files"]], [(good, "pass")], "files")
    eq(isinstance(r, dict), True, "a dict")
    r = modelgate.scan(evil)
    eq((r.verdict, r["files"][0]["verdict"]), (1, "reject"), "os.system in a pickle")
    eq(any(f["id"].startswith("MG-PK-") for f in r["files"][0]["findings"]), True,
       f"a pickle finding: {r['files'][0]['findings']}")
    r = modelgate.scan(d)
    eq(r.verdict, 1, "a directory with one bad file")
    e = raises(modelgate.ScanError, lambda: modelgate.scan(os.path.join(d, "nope")), "missing")
    eq(isinstance(e, modelgate.Error), True, "ScanError is an Error")
    policy = write(d, "policy.yaml", POLICY.format(pub=key + ".pub"))
    eq(modelgate.scan(good, policy=policy).verdict, 1, "unsigned under signatures.required")
    sign(key, good)
    eq(modelgate.scan(good, policy=policy).verdict, 0, "signed by the policy's key")
    broken = write(d, "broken.yaml", "apiVersion: modelgate/v1\nkind: Nope\n")
    raises(modelgate.ScanError, lambda: modelgate.scan(good, policy=broken), "a broken policy")


if __name__ == "__main__":
    sys.exit(main("mg-py-dir-"))
