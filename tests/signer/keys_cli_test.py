#!/usr/bin/env python3
"""Signing keys through the CLI (issue 16 points 2 and 3): encrypted key
files (keygen --encrypt; the passphrase from --passphrase-file or
MODELGATE_KEY_PASSPHRASE, never argv) and keys on a PKCS#11 token
(SoftHSM2: each test makes its own token in its temp dir; keys generated on
the token by pkcs11-tool; the PIN from --pin-file or MODELGATE_PKCS11_PIN).
Every signature is checked with `modelgate verify` and the public key the
token or keygen exported.

    keys_cli_test.py MODELGATE
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from mgtest import eq, main, run_text, st_bytes, test, write  # noqa: E402

MG = os.path.abspath(sys.argv[1])
SOFTHSM = "/usr/lib/softhsm/libsofthsm2.so"  # Debian's softhsm2 (ci/install-deps.sh)
PIN = "123456"
MODEL = st_bytes({"w": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]}}, bytes(16))


def env(**extra):
    e = {k: v for k, v in os.environ.items()
         if k not in ("MODELGATE_KEY_PASSPHRASE", "MODELGATE_PKCS11_PIN")}
    e.update(extra)
    return e


def mg(*args, environ=None):
    return run_text([MG, *args], env=environ or env())


def contains(text, part, what):
    if part not in text:
        raise AssertionError(f"{what}: {part!r} not in {text!r}")


def secret(d, name, text, mode=0o600):
    path = write(d, name, text)
    os.chmod(path, mode)
    return path


def read(path):
    with open(path, "rb") as f:
        return f.read()


def verify(pub, *args):
    code, out, err = mg("verify", "--pubkey", pub, *args)
    eq(code, 0, "verify\n" + out + err)


# ---- encrypted key files -------------------------------------------------------


@test
def encrypted_keygen_then_sign_with_the_passphrase_file_or_variable(d):
    pw = secret(d, "pw", "a long passphrase\n")
    code, out, err = mg("keygen", "--encrypt", "--passphrase-file", pw, "--out", os.path.join(d, "k"))
    eq(code, 0, "keygen --encrypt\n" + err)
    contains(out, "encrypted private key", "keygen says so")
    eq(read(os.path.join(d, "k.key"))[:37], b"-----BEGIN ENCRYPTED PRIVATE KEY-----", "PKCS#8 encrypted")
    eq(os.stat(os.path.join(d, "k.key")).st_mode & 0o777, 0o600, "key mode")
    m = write(d, "m.safetensors", MODEL)
    code, out, err = mg("sign", "--quiet", "--key", os.path.join(d, "k.key"), "--passphrase-file", pw, m)
    eq(code, 0, "sign with --passphrase-file\n" + err)
    verify(os.path.join(d, "k.pub"), m)
    # The variable, without the final newline the file had (it is dropped).
    m2 = write(d, "m2.safetensors", MODEL)
    code, _, err = mg("sign", "--quiet", "--key", os.path.join(d, "k.key"), m2,
                      environ=env(MODELGATE_KEY_PASSPHRASE="a long passphrase"))
    eq(code, 0, "sign with MODELGATE_KEY_PASSPHRASE\n" + err)
    verify(os.path.join(d, "k.pub"), m2)


@test
def encrypted_ecdsa_key_signs_a_detached_bundle(d):
    code, _, err = mg("keygen", "--encrypt", "--alg", "ecdsa-p256", "--out", os.path.join(d, "k"),
                      environ=env(MODELGATE_KEY_PASSPHRASE="pw"))
    eq(code, 0, "keygen\n" + err)
    model = os.path.join(d, "model")
    write(model, "a.safetensors", MODEL)
    code, _, err = mg("sign", "--detached", "--quiet", "--key", os.path.join(d, "k.key"), model,
                      environ=env(MODELGATE_KEY_PASSPHRASE="pw"))
    eq(code, 0, "sign --detached\n" + err)
    verify(os.path.join(d, "k.pub"), "--sig", os.path.join(model, "model.sig"), model)


@test
def wrong_or_missing_passphrase_is_exit_2_with_its_own_id_and_nothing_written(d):
    code, _, err = mg("keygen", "--encrypt", "--out", os.path.join(d, "k"),
                      environ=env(MODELGATE_KEY_PASSPHRASE="right"))
    eq(code, 0, "keygen\n" + err)
    m = write(d, "m.safetensors", MODEL)
    code, _, err = mg("sign", "--key", os.path.join(d, "k.key"), m,
                      environ=env(MODELGATE_KEY_PASSPHRASE="wrong"))
    eq(code, 2, "wrong passphrase\n" + err)
    contains(err, "MG-SIG-KEY-PASSPHRASE", "wrong passphrase id")
    contains(err, "wrong passphrase", "says so")
    code, _, err = mg("sign", "--key", os.path.join(d, "k.key"), m)
    eq(code, 2, "no passphrase\n" + err)
    contains(err, "MG-SIG-KEY-ENCRYPTED", "missing passphrase id")
    contains(err, "MODELGATE_KEY_PASSPHRASE", "says where one comes from")
    eq(read(m), MODEL, "the model is untouched")
    eq(sorted(os.listdir(d)), ["k.key", "k.pub", "m.safetensors"], "no temp file")
    # The file wins over the variable.
    pw = secret(d, "pw", "right")
    code, _, err = mg("sign", "--quiet", "--key", os.path.join(d, "k.key"), "--passphrase-file", pw, m,
                      environ=env(MODELGATE_KEY_PASSPHRASE="wrong"))
    eq(code, 0, "--passphrase-file wins\n" + err)


@test
def passphrase_files_are_0600_regular_not_symlinks_and_bounded(d):
    code, _, err = mg("keygen", "--encrypt", "--out", os.path.join(d, "k"),
                      environ=env(MODELGATE_KEY_PASSPHRASE="right"))
    eq(code, 0, "keygen\n" + err)
    key = os.path.join(d, "k.key")
    m = write(d, "m.safetensors", MODEL)
    loose = secret(d, "loose", "right", 0o640)
    code, _, err = mg("sign", "--key", key, "--passphrase-file", loose, m)
    eq(code, 2, "group-readable passphrase file\n" + err)
    contains(err, "chmod 600", "says how to fix it")
    good = secret(d, "good", "right")
    link = os.path.join(d, "link")
    os.symlink(good, link)
    code, _, err = mg("sign", "--key", key, "--passphrase-file", link, m)
    eq(code, 2, "symlinked passphrase file\n" + err)
    contains(err, "symbolic link", "says why")
    os.mkfifo(os.path.join(d, "fifo"), 0o600)
    code, _, err = mg("sign", "--key", key, "--passphrase-file", os.path.join(d, "fifo"), m)
    eq(code, 2, "FIFO\n" + err)
    contains(err, "not a regular file", "says why")
    empty = secret(d, "empty", "\n")
    code, _, err = mg("sign", "--key", key, "--passphrase-file", empty, m)
    eq(code, 2, "empty passphrase file\n" + err)
    contains(err, "is empty", "says why")
    # kMaxSecretBytes = 4096: a 4096-byte passphrase works, 4097 bytes do not.
    at = secret(d, "at", "p" * 4096 + "\n")
    over = secret(d, "over", "p" * 4097)
    code, _, err = mg("keygen", "--encrypt", "--passphrase-file", at, "--out", os.path.join(d, "big"))
    eq(code, 0, "4096-byte passphrase\n" + err)
    code, _, err = mg("sign", "--quiet", "--key", os.path.join(d, "big.key"), "--passphrase-file", at, m)
    eq(code, 0, "sign with a 4096-byte passphrase\n" + err)
    code, _, err = mg("keygen", "--encrypt", "--passphrase-file", over, "--out", os.path.join(d, "bigger"))
    eq(code, 2, "4097-byte passphrase\n" + err)
    contains(err, "over the limit of 4096", "names the limit")
    code, _, err = mg("sign", "--key", key, m, environ=env(MODELGATE_KEY_PASSPHRASE="p" * 4097))
    eq(code, 2, "4097-byte variable\n" + err)
    contains(err, "over the limit of 4096", "names the limit")


@test
def no_option_takes_a_passphrase_or_pin_itself(d):
    m = write(d, "m.safetensors", MODEL)
    for argv in (["keygen", "--encrypt", "--passphrase", "x", "--out", os.path.join(d, "k")],
                 ["sign", "--key", "k.key", "--passphrase", "x", m],
                 ["sign", "--key", "pkcs11:token=t;object=o", "--pin", "1234", m]):
        code, _, err = mg(*argv)
        eq(code, 2, " ".join(argv) + "\n" + err)
        contains(err, "unknown option", "refused as an option")
    code, _, err = mg("keygen", "--encrypt", "--out", os.path.join(d, "k"))
    eq(code, 2, "--encrypt without a passphrase\n" + err)
    contains(err, "MODELGATE_KEY_PASSPHRASE", "says where one comes from")
    eq(os.path.exists(os.path.join(d, "k.key")), False, "no key written")


# ---- PKCS#11 (SoftHSM2) ----------------------------------------------------------


def token(d):
    """A fresh SoftHSM2 token "mg" in d with an ECDSA P-256 key "ec" and an
    Ed25519 key "ed"; returns (environment, pkcs11-tool argv prefix)."""
    os.makedirs(os.path.join(d, "tokens"))
    conf = write(d, "softhsm2.conf",
                 f"directories.tokendir = {d}/tokens\nobjectstore.backend = file\nlog.level = ERROR\n")
    e = env(SOFTHSM2_CONF=conf)
    code, _, err = run_text(["softhsm2-util", "--init-token", "--free", "--label", "mg",
                             "--so-pin", "12345678", "--pin", PIN], env=e)
    eq(code, 0, "softhsm2-util\n" + err)
    tool = ["pkcs11-tool", "--module", SOFTHSM, "--token-label", "mg"]
    for label, kid, kind in (("ec", "01", "EC:prime256v1"), ("ed", "02", "EC:edwards25519")):
        code, out, err = run_text(tool + ["--login", "--pin", PIN, "--keypairgen", "--key-type", kind,
                                          "--label", label, "--id", kid, "--usage-sign"], env=e)
        eq(code, 0, "pkcs11-tool --keypairgen\n" + out + err)
        contains(out, "never extractable", "generated non-extractable")
    return e, tool


def exported(d, e, tool, label):
    """The token's public key `label` as a PEM file (pkcs11-tool writes DER
    SPKI for EC keys and PEM for Ed25519)."""
    out = os.path.join(d, label + ".out")
    code, _, err = run_text(tool + ["--read-object", "--type", "pubkey", "--label", label, "-o", out], env=e)
    eq(code, 0, "export\n" + err)
    pem = os.path.join(d, label + ".pub")
    if read(out).startswith(b"-----BEGIN"):
        os.rename(out, pem)
    else:
        code, _, err = run_text(["openssl", "pkey", "-pubin", "-inform", "DER", "-in", out, "-out", pem])
        eq(code, 0, "openssl\n" + err)
    return pem


@test
def a_model_is_signed_with_keys_that_live_in_softhsm2(d):
    e, tool = token(d)
    pin = secret(d, "pin", PIN + "\n")
    ed_pub, ec_pub = exported(d, e, tool, "ed"), exported(d, e, tool, "ec")
    # That the private keys cannot be read out (CKA_VALUE is
    # CKR_ATTRIBUTE_SENSITIVE, CKA_EXTRACTABLE false) is pkcs11_test.cc's.
    # Embedded (STSIG, Ed25519), the PIN from a file, the module named.
    m = write(d, "m.safetensors", MODEL)
    code, out, err = run_text([MG, "sign", "--key", "pkcs11:token=mg;object=ed", "--pin-file", pin,
                               "--pkcs11-module", SOFTHSM, m], env=e)
    eq(code, 0, "embedded sign on the token\n" + err)
    contains(out, "signed", "says so")
    verify(ed_pub, m)
    # Detached (OMS bundle), ECDSA P-256 and Ed25519, the PIN from the
    # variable, the module from the URI.
    model = os.path.join(d, "model")
    write(model, "a.safetensors", MODEL)
    write(model, "config.json", "{}")
    for label, pub in (("ec", ec_pub), ("ed", ed_pub)):
        sig = os.path.join(d, label + ".sig")
        code, _, err = run_text([MG, "sign", "--detached", "--quiet", "-o", sig, "--key",
                                 f"pkcs11:token=mg;object={label}?module-path={SOFTHSM}", model],
                                env=dict(e, MODELGATE_PKCS11_PIN=PIN))
        eq(code, 0, f"detached sign with {label}\n" + err)
        verify(pub, "--sig", sig, model)
    # No module named: p11-kit's configured modules are searched (Debian's
    # softhsm2 package registers /usr/share/p11-kit/modules/softhsm2.module).
    sig = os.path.join(d, "p11kit.sig")
    code, _, err = run_text([MG, "sign", "--detached", "--quiet", "-o", sig, "--pin-file", pin,
                             "--key", "pkcs11:token=mg;object=ec", model], env=e)
    eq(code, 0, "detached sign through p11-kit's module list\n" + err)
    verify(ec_pub, "--sig", sig, model)
    # The bundle is ECDSA by the token's key: another key does not verify it.
    code, _, _ = mg("verify", "--pubkey", ed_pub, "--sig", os.path.join(d, "ec.sig"), model)
    eq(code, 1, "verify under another key")


@test
def convert_signs_its_output_with_a_token_key(d):
    # convert --key takes what sign takes: the Ed25519 key on the token.
    import torch  # Debian's python3-torch (ci/install-deps.sh)
    e, tool = token(d)
    pin = secret(d, "pin", PIN + "\n")
    ed_pub = exported(d, e, tool, "ed")
    ck = os.path.join(d, "m.pt")
    torch.save({"w": torch.arange(6, dtype=torch.float32).reshape(2, 3)}, ck)
    out = os.path.join(d, "m.safetensors")
    code, _, err = run_text([MG, "convert", "-q", "-o", out, "--key", "pkcs11:token=mg;object=ed",
                             "--pin-file", pin, "--pkcs11-module", SOFTHSM, ck], env=e)
    eq(code, 0, "convert signed on the token\n" + err)
    verify(ed_pub, out)
    # An ECDSA token key cannot sign STSIG v1: a usage error, nothing written.
    os.unlink(out)
    code, _, err = run_text([MG, "convert", "-q", "-o", out, "--key", "pkcs11:token=mg;object=ec",
                             "--pin-file", pin, "--pkcs11-module", SOFTHSM, ck], env=e)
    eq(code, 2, "ECDSA key for convert\n" + err)
    contains(err, "Ed25519", "says why")
    eq(os.path.exists(out), False, "nothing written")


@test
def token_errors_are_exit_2_with_their_ids(d):
    e, _ = token(d)
    m = write(d, "m.safetensors", MODEL)
    wrong = secret(d, "wrong", "654321")
    good = secret(d, "good", PIN)
    cases = [
        ("pkcs11:token=mg;object=ec", ["--pin-file", wrong], "MG-SIG-PKCS11-LOGIN", "refused the PIN"),
        ("pkcs11:token=mg;object=ec", [], "MG-SIG-PKCS11-LOGIN", "needs a PIN"),
        ("pkcs11:token=mg;object=missing", ["--pin-file", good], "MG-SIG-PKCS11-OBJECT", "no private key"),
        ("pkcs11:token=mg;objekt=ec", ["--pin-file", good], "MG-SIG-PKCS11-URI", "does not know"),
        ("pkcs11:token=mg;object=ec?pin-value=123456", [], "MG-SIG-PKCS11-URI", "never goes on the command line"),
        ("pkcs11:token=nope;object=ec", ["--pin-file", good], "MG-SIG-PKCS11-TOKEN", "no token matches"),
    ]
    for uri, extra, finding, says in cases:
        code, _, err = run_text([MG, "sign", "--key", uri, "--pkcs11-module", SOFTHSM, *extra, m], env=e)
        eq(code, 2, uri + "\n" + err)
        contains(err, finding, uri)
        contains(err, says, uri)
        if "pin-value" in uri:
            eq("123456" in err, False, "the PIN in a refused URI is not echoed")
    code, _, err = run_text([MG, "sign", "--key", "pkcs11:token=mg;object=ec", "--pin-file", good,
                             "--pkcs11-module", os.path.join(d, "missing.so"), m], env=e)
    eq(code, 2, "bad module\n" + err)
    contains(err, "MG-SIG-PKCS11", "bad module id")
    # Options that belong to the other kind of key.
    code, _, err = run_text([MG, "sign", "--key", "pkcs11:token=mg;object=ec", "--passphrase-file", good, m], env=e)
    eq(code, 2, "--passphrase-file with a token key\n" + err)
    code, _, err = run_text([MG, "sign", "--key", os.path.join(d, "k.key"), "--pin-file", good, m], env=e)
    eq(code, 2, "--pin-file with a key file\n" + err)
    eq(read(m), MODEL, "the model is untouched")


if __name__ == "__main__":
    sys.exit(main("mg-keys-cli-"))
