#!/usr/bin/env python3
"""docs/schemas/policy.schema.json against the parser it documents.

usage: policy_schema_test.py PATH/TO/modelgate

For every policy in the repository (the fuzz corpus, read as fuzz_policy
reads it; the policies shown in README.md and docs/) and for a table of valid
and invalid policies (most from tests/policy/parse_test.cc), the exit status
of `modelgate policy lint` must agree with schema validity (policy_yaml.py
reading the YAML as modelgate does). The only disagreements allowed are the
checks a schema cannot make (SEMANTIC below, listed in docs/policy.md
"What the schema cannot check"): for those lint must fail while the schema
accepts, so the list cannot hide a real difference.
"""
import itertools
import json
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "support"))
from mgtest import eq, main, test  # noqa: E402
from policy_yaml import Ambiguous, PolicyYamlError, load_policy_yaml  # noqa: E402

import subprocess  # noqa: E402

ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
SCHEMA_PATH = os.path.join(ROOT, "docs", "schemas", "policy.schema.json")

if len(sys.argv) < 2 or not os.access(sys.argv[1], os.X_OK):
    print(f"FAIL usage: {sys.argv[0]} PATH/TO/modelgate")
    sys.exit(1)
MG = os.path.abspath(sys.argv[1])

try:
    import jsonschema
except ImportError as e:
    print(f"FAIL python3-jsonschema is not importable by {sys.executable} ({e}): "
          "run `bash ci/install-deps.sh`")
    sys.exit(1)

with open(SCHEMA_PATH, encoding="utf-8") as f:
    SCHEMA = json.load(f)
jsonschema.Draft7Validator.check_schema(SCHEMA)
VALIDATOR = jsonschema.Draft7Validator(SCHEMA, format_checker=jsonschema.draft7_format_checker)


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, timeout=60, stdin=subprocess.DEVNULL)
    return p.returncode, (p.stdout + p.stderr).decode("utf-8", "replace")


def write(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode("utf-8"))
    return path


def lint(path):
    """(ok, output): ok is True for exit 0, False for exit 2; anything else fails."""
    code, out = run([MG, "policy", "lint", path])
    if code not in (0, 2):
        raise AssertionError(f"policy lint {path} exited {code}: {out}")
    return code == 0, out


def schema_errors(raw):
    """[] when the schema (with modelgate's YAML reading) accepts `raw`."""
    try:
        data = load_policy_yaml(raw)
    except PolicyYamlError as e:
        return [f"YAML: {e}"]
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}"
            for e in VALIDATOR.iter_errors(data)]


def agree(path, raw, semantic=False, want_ok=None):
    ok, out = lint(path)
    errs = schema_errors(raw)
    where = f"{os.path.relpath(path, ROOT) if path.startswith(ROOT) else path}"
    if want_ok is not None and ok != want_ok:
        raise AssertionError(f"{where}: lint {'passed' if ok else 'failed'} ({out.strip()}), "
                             f"the table says it should {'pass' if want_ok else 'fail'}")
    if semantic:
        if ok or errs:
            raise AssertionError(f"{where}: listed as a semantic difference (lint fails, schema "
                                 f"accepts) but lint ok={ok}, schema errors={errs}: {out.strip()}")
        return
    if ok != (not errs):
        raise AssertionError(f"{where}: lint {'passed' if ok else 'failed: ' + out.strip()}, "
                             f"schema {'accepts' if not errs else 'rejects: ' + '; '.join(errs)}")


PEMS = {}


def pem(d, name="good"):
    """A fresh Ed25519 public key PEM (modelgate keygen) at d/NAME.pub."""
    pub = os.path.join(d, name + ".pub")
    if not os.path.exists(pub):
        code, out = run([MG, "keygen", "--out", os.path.join(d, name)])
        eq(code, 0, "keygen " + out)
    with open(pub) as f:
        return f.read()


def indent(text, n):
    return "".join(" " * n + line + "\n" for line in text.splitlines())


H = "apiVersion: modelgate/v1\nkind: Policy\n"
SHA = "a" * 64


def ex(id_="MG-ST-GAP", sha=SHA, reason="ok", expires="2027-01-31"):
    return H + f"exceptions:\n  - id: {id_}\n    sha256: {sha}\n    reason: {reason}\n    expires: {expires}\n"


def sig(extra):
    """signatures required, one key, `extra` lines inside the mapping."""
    return H + "signatures:\n  required: true\n" + extra + "  keys:\n    - {name: k, file: good.pub}\n"


def keys(entries, required=None, threshold=None):
    s = H + "signatures:\n"
    if required is not None:
        s += f"  required: {required}\n"
    if threshold is not None:
        s += f"  threshold: {threshold}\n"
    return s + "  keys:\n" + entries


# (name, policy text or bytes, lint should pass). {PEM} is an inline key block.
VALID = [
    ("minimal", H),
    ("json", '{"apiVersion": "modelgate/v1", "kind": "Policy", "failOn": "critical"}'),
    ("full", H + "failOn: medium\nformats: {allow: [safetensors, gguf, lfs-pointer]}\n"
     "pickle: {mode: reject, extraAllowedGlobals: [mylib.models.Net, \"collections:OrderedDict\"]}\n"
     "signatures:\n  required: true\n  threshold: 2\n  keys:\n"
     "    - name: release-2026\n      publicKey: |\n{PEM8}"
     "    - {name: backup, file: k2.pub}\n"
     "limits: {maxHeaderBytes: 16777216, maxRank: 8, maxMemberBytes: 1024, maxPickleOpcodes: 5}\n"
     "yara: {rules: [rules/], scope: all}\n"
     "exceptions:\n  - id: MG-PK-UNKNOWN-IMPORT\n    sha256: \"" + SHA + "\"\n"
     "    reason: reviewed by security\n    expires: 2027-01-31\n"),
    ("limits-at-default", H + "limits: {maxRank: 64, maxHeaderBytes: 100000000, maxNestingDepth: 0,"
     " maxTotalDecompressedBytes: 4294967296, maxPickleStringBytes: 67108864}\n"),
    ("required-false", H + "signatures: {required: false}\n"),
    ("keys-not-required", keys("    - {name: k, file: good.pub}\n")),
    ("formats-empty", H + "formats: {allow: []}\n"),
    ("exception-quoted", ex(sha='"' + SHA + '"', reason='"ok"', expires='"2024-02-29"')),
    ("exception-plain", ex()),
    ("exception-two-ids", H + "exceptions:\n"
     f"  - {{id: MG-ST-GAP, sha256: {SHA}, reason: a, expires: 2027-01-31}}\n"
     f"  - {{id: MG-ST-OVERLAP, sha256: {SHA}, reason: b, expires: 2027-01-31}}\n"),
    ("yara-rules", H + "yara: {rules: [rules], scope: header}\n"),
    ("key-name-quoted-number", keys("    - {name: \"2026\", file: good.pub}\n")),
    ("key-name-200-bytes", keys("    - {name: " + "é" * 100 + ", file: good.pub}\n")),
    ("threshold-equals-keys", keys("    - {name: a, file: good.pub}\n    - {name: b, file: k2.pub}\n",
                                   "true", 2)),
    ("accept-detached", sig("  accept: [detached]\n")),
    ("accept-both-block", sig("  accept:\n    - embedded\n    - detached\n")),
    ("model-and-minVersion", sig("  model: acme/llm\n  minVersion: 3\n")),
    ("model-quoted-number", sig("  model: \"2026\"\n")),
    ("model-1024-bytes", sig("  model: " + "m" * 1024 + "\n")),
    ("minVersion-max", sig("  model: m\n  minVersion: 18446744073709551615\n")),
    ("accept-not-required", H + "signatures: {accept: [embedded], model: m, minVersion: 1}\n"),
]
INVALID = [
    ("no-apiVersion", "kind: Policy\n"),
    ("no-kind", "apiVersion: modelgate/v1\n"),
    ("apiVersion-v2", "apiVersion: modelgate/v2\nkind: Policy\n"),
    ("kind-lowercase", "apiVersion: modelgate/v1\nkind: policy\n"),
    ("a-list", "- apiVersion\n"),
    ("empty", ""),
    ("comment-only", "# only a comment\n"),
    ("empty-document", "---\n"),
    ("two-documents", H + "---\n" + H),
    ("syntax", H + "formats: {allow: [safetensors}\n"),
    ("illegal-map-value", H + "failOn: high\n  x: y\n"),
    ("unknown-top", H + "failon: high\n"),
    ("unknown-formats", H + "formats: {allow: [], deny: []}\n"),
    ("unknown-pickle", H + "pickle: {modes: reject}\n"),
    ("unknown-signatures", H + "signatures:\n  require: true\n"),
    ("unknown-key-field", keys("    - name: a\n      pem: x\n")),
    ("unknown-limit", H + "limits: {maxRanks: 3}\n"),
    ("unknown-yara", H + "yara: {rule: []}\n"),
    ("unknown-exception-field", H + "exceptions:\n  - {id: MG-A-B, note: x}\n"),
    ("merge-key", H + "<<: {failOn: high}\n"),
    ("dup-top", H + "kind: Policy\n"),
    ("dup-flow", H + "formats: {allow: [safetensors], allow: []}\n"),
    ("dup-quoted", H + "pickle:\n  mode: report\n  \"mode\": reject\n"),
    ("dup-key-entry", keys("    - name: a\n      name: b\n")),
    ("anchor", H + "failOn: &sev high\n"),
    ("alias", H + "failOn: *sev\n"),
    ("anchor-alias", H + "failOn: &s high\nx: *s\n"),
    ("tag-str", H + "failOn: !!str high\n"),
    ("tag-python", H + "exceptions:\n  - !!python/object:os.system {}\n"),
    ("tag-custom", H + "failOn: !custom high\n"),
    ("tag-nonspecific", H + "failOn: ! high\n"),
    ("formats-list", H + "formats: [safetensors]\n"),
    ("allow-scalar", H + "formats: {allow: safetensors}\n"),
    ("allow-unknown-format", H + "formats: {allow: [pytorch]}\n"),
    ("allow-twice", H + "formats: {allow: [gguf, gguf]}\n"),
    ("failOn-list", H + "failOn: [high]\n"),
    ("failOn-severe", H + "failOn: severe\n"),
    ("failOn-null", H + "failOn:\n"),
    ("pickle-mode-off", H + "pickle: {mode: off}\n"),
    ("pickle-mode-block", H + "pickle: {mode: block}\n"),
    ("scope-everything", H + "yara: {scope: everything}\n"),
    ("yara-rules-empty-entry", H + "yara: {rules: [\"\"]}\n"),
    ("key-mapping-key", H + "? [a]\n: b\n"),
    ("threshold-string", H + "signatures: {threshold: \"2\"}\n"),
    ("threshold-float", H + "signatures: {threshold: 1.5}\n"),
    ("threshold-zero", H + "signatures: {threshold: 0}\n"),
    ("threshold-1001", H + "signatures: {threshold: 1001}\n"),
    ("key-name-number", keys("    - name: 2026\n      file: good.pub\n")),
    ("key-name-yes", keys("    - name: yes\n      file: good.pub\n")),
    ("key-name-empty", keys("    - {name: \"\", file: good.pub}\n")),
    ("key-name-201", keys("    - {name: " + "k" * 201 + ", file: good.pub}\n")),
    ("key-no-name", keys("    - {file: good.pub}\n")),
    ("key-neither", keys("    - {name: k}\n")),
    ("key-both", keys("    - name: k\n      file: good.pub\n      publicKey: |\n{PEM8}")),
    ("key-file-empty", keys("    - {name: k, file: \"\"}\n")),
    ("publicKey-not-pem", keys("    - name: k\n      publicKey: not a pem\n")),
    ("key-name-twice-same-entry", keys("    - {name: a, file: good.pub}\n    - {name: a, file: good.pub}\n")),
    ("required-no-keys", H + "signatures:\n  required: true\n  keys: []\n"),
    ("required-keys-absent", H + "signatures:\n  required: true\n"),
    ("accept-empty", sig("  accept: []\n")),
    ("accept-twice", sig("  accept: [detached, detached]\n")),
    ("accept-unknown", sig("  accept: [sigstore]\n")),
    ("accept-capital", sig("  accept: [Embedded]\n")),
    ("accept-scalar", sig("  accept: detached\n")),
    ("model-empty", sig("  model: \"\"\n")),
    ("model-null", sig("  model:\n")),
    ("model-number", sig("  model: 3\n")),
    ("model-yes", sig("  model: yes\n")),
    ("model-list", sig("  model: [a]\n")),
    ("model-1025", sig("  model: " + "m" * 1025 + "\n")),
    ("minVersion-zero", sig("  minVersion: 0\n")),
    ("minVersion-string", sig("  minVersion: \"3\"\n")),
    ("minVersion-negative", sig("  minVersion: -1\n")),
    ("minVersion-float", sig("  minVersion: 3.0\n")),
    ("minVersion-2^64", sig("  minVersion: 18446744073709551616\n")),
    ("minVersion-unknown-spelling", sig("  minversion: 3\n")),
]
for word in ("yes", "no", "on", "off", "y", "n", "True", "FALSE", "\"true\"", "1", ""):
    INVALID.append((f"required-{word.strip(chr(34)) or 'null'}{'-quoted' if word.startswith(chr(34)) else ''}",
                    H + f"signatures:\n  required: {word}\n"))
for value in ("65", "08", "1_0", "-1", "+1", "0x10", "99999999999999999999999", "\"8\"", "8.0"):
    INVALID.append((f"maxRank-{value}", H + f"limits: {{maxRank: {value}}}\n"))
INVALID += [
    ("maxHeaderBytes-above", H + "limits:\n  maxHeaderBytes: 100000001\n"),
    ("maxNestingDepth-above", H + "limits: {maxNestingDepth: 5}\n"),
    ("global-nodot", H + "pickle: {extraAllowedGlobals: [nodot]}\n"),
    ("global-space", H + "pickle: {extraAllowedGlobals: [\"a b.c\"]}\n"),
    ("global-twice", H + "pickle: {extraAllowedGlobals: [a.B, a.B]}\n"),
    ("global-two-colons", H + "pickle: {extraAllowedGlobals: [\"a:b:c\"]}\n"),
    ("exception-id-lower", ex(id_="mg-st-gap")),
    ("exception-id-short", ex(id_="MG-")),
    ("exception-id-two-parts", ex(id_="MG-ST")),
    ("exception-sha-upper", ex(sha="A" * 64)),
    ("exception-sha-63", ex(sha="a" * 63)),
    ("exception-sha-digits-plain", ex(sha="1" * 64)),
    ("exception-reason-blank", ex(reason="\"  \"")),
    ("exception-reason-null", ex(reason="")),
    ("exception-feb-29-2027", ex(expires="2027-02-29")),
    ("exception-short-month", ex(expires="2027-1-31")),
    ("exception-1969", ex(expires="1969-12-31")),
    ("exception-no-expires", H + f"exceptions:\n  - {{id: MG-ST-GAP, sha256: {SHA}, reason: ok}}\n"),
    ("exceptions-mapping", H + "exceptions: {id: MG-ST-GAP}\n"),
    ("exceptions-same", H + "exceptions:\n" +
     2 * f"  - {{id: MG-ST-GAP, sha256: {SHA}, reason: ok, expires: 2027-01-31}}\n"),
    ("text-nul", (H + "failOn: hi\0gh\n").encode()),
    ("text-invalid-utf8", (H + "failOn: ").encode() + b"\xff\n"),
    ("text-bom", b"\xef\xbb\xbf" + H.encode()),
    ("text-deep", H + "exceptions: " + "[" * 40 + "]" * 40 + "\n"),
]
# What lint refuses and no JSON Schema can see (docs/policy.md, "What the
# schema cannot check"): key material, files on disk, the scanner's
# code-execution list, values compared with each other or after
# normalization, and byte lengths.
SEMANTIC = [
    ("pem-not-a-key", keys("    - name: k\n      publicKey: |\n        -----BEGIN PUBLIC KEY-----\n"
                           "        Zm9v\n        -----END PUBLIC KEY-----\n")),
    ("key-file-missing", keys("    - {name: k, file: missing.pub}\n")),
    ("key-file-not-a-key", keys("    - {name: k, file: bad.pub}\n")),
    ("same-key-two-names", keys("    - {name: a, file: good.pub}\n    - {name: b, file: good.pub}\n")),
    ("threshold-above-keys", keys("    - {name: a, file: good.pub}\n", "true", 2)),
    ("global-os-system", H + "pickle: {extraAllowedGlobals: [os.system]}\n"),
    ("global-builtins-eval", H + "pickle: {extraAllowedGlobals: [\"builtins:eval\"]}\n"),
    ("global-two-spellings", H + "pickle: {extraAllowedGlobals: [a.B, \"a:B\"]}\n"),
    ("yara-dir-missing", H + "yara: {rules: [nope]}\n"),
    ("yara-dir-two-spellings", H + "yara: {rules: [rules, ./rules]}\n"),
    ("exceptions-same-pin", H + "exceptions:\n"
     f"  - {{id: MG-ST-GAP, sha256: {SHA}, reason: a, expires: 2027-01-31}}\n"
     f"  - {{id: MG-ST-GAP, sha256: {SHA}, reason: b, expires: 2028-01-31}}\n"),
    ("key-name-twice", keys("    - {name: a, file: good.pub}\n    - {name: a, file: k2.pub}\n")),
    ("key-name-201-bytes", keys("    - {name: " + "é" * 100 + "k, file: good.pub}\n")),
    ("model-1025-bytes", sig("  model: " + "é" * 512 + "m\n")),
]


def case_dir(d, name):
    """d/NAME with good.pub, k2.pub, bad.pub and rules/ beside the policy."""
    cd = os.path.join(d, name)
    os.makedirs(os.path.join(cd, "rules"), exist_ok=True)
    keydir = os.path.join(d, "keys")
    os.makedirs(keydir, exist_ok=True)
    for k in ("good", "k2"):
        write(os.path.join(cd, k + ".pub"), pem(keydir, k))
    write(os.path.join(cd, "bad.pub"), "-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n")
    return cd


def run_table(d, table, **kw):
    seen = set()
    for name, text in table:
        if name in seen:
            raise AssertionError(f"two cases named {name}")
        seen.add(name)
        cd = case_dir(d, name)
        if isinstance(text, str):
            text = text.replace("{PEM8}", indent(pem(os.path.join(d, "keys")), 8))
        path = write(os.path.join(cd, "p.yaml"), text)
        agree(path, text if isinstance(text, bytes) else text.encode(), **kw)


@test
def valid_policies_lint_and_validate(d):
    run_table(d, VALID, want_ok=True)


@test
def invalid_policies_fail_both(d):
    run_table(d, INVALID, want_ok=False)


@test
def semantic_checks_are_lint_only(d):
    run_table(d, SEMANTIC, semantic=True, want_ok=False)


@test
def ambiguous_scalars_match_no_type(d):
    # The reading policy_yaml gives the scalars YAML 1.1 and 1.2 disagree on.
    data = load_policy_yaml(H + "a: yes\nb: 010\nc: 2027-01-31\nd: 5\ne: true\nf: ~\ng: '010'\n")
    eq([data[k] for k in "abcdefg"], [Ambiguous("yes"), Ambiguous("010"), "2027-01-31", 5, True,
                                      None, "010"], "scalar reading")
    for t in ("string", "integer", "boolean", "number", "null", "object", "array"):
        eq(jsonschema.Draft7Validator({"type": t}).is_valid(Ambiguous("yes")), False, t)


# ---- the schema's copies of the parser's lists ---------------------------------------------------

def lint_error(d, text):
    path = write(os.path.join(d, "p.yaml"), H + text)
    ok, out = lint(path)
    eq(ok, False, f"lint should fail: {text}")
    return out


def listed(out, word):
    """The names in the "(WORD: a, b, c)" part of a lint error."""
    m = re.search(r"\(" + word + r": ([^)]*)\)", out)
    if not m:
        raise AssertionError(f"no ({word}: ...) list in {out!r}")
    return [s.strip() for s in m.group(1).split(",")]


@test
def limits_are_the_parsers(d):
    props = SCHEMA["properties"]["limits"]["properties"]
    eq(sorted(listed(lint_error(d, "limits: {nope: 1}\n"), "allowed")), sorted(props),
       "limit names (parser vs schema)")
    for key, spec in props.items():
        eq(spec["maximum"], spec["default"], f"{key}: the maximum is the default")
        at = write(os.path.join(d, key, "at.yaml"), H + f"limits: {{{key}: {spec['maximum']}}}\n")
        eq(lint(at)[0], True, f"{key} at its default")
        above = H + f"limits: {{{key}: {spec['maximum'] + 1}}}\n"
        out = lint_error(d, above[len(H):])
        if f"above the default {spec['maximum']}" not in out:
            raise AssertionError(f"{key}: parser default differs from the schema's: {out}")
        eq(schema_errors(above.encode()) != [], True, f"{key}: schema refuses default + 1")
    # docs/policy.md's table says the same.
    with open(os.path.join(ROOT, "docs", "policy.md"), encoding="utf-8") as f:
        rows = dict(re.findall(r"^\| `(max\w+)` \| (\d+) \|", f.read(), re.M))
    eq({k: int(v) for k, v in rows.items()}, {k: s["default"] for k, s in props.items()},
       "docs/policy.md limits table")


@test
def enums_are_the_parsers(d):
    formats = listed(lint_error(d, "formats: {allow: [nope]}\n"), "known")
    eq(SCHEMA["properties"]["formats"]["properties"]["allow"]["items"]["enum"], formats,
       "formats.allow names")
    with open(os.path.join(ROOT, "docs", "schemas", "report-v1.schema.json")) as f:
        eq(json.load(f)["definitions"]["format"]["enum"], formats, "report format names")
    for key, path, word in (("failOn", ["failOn"], "one of"),
                            ("pickle: {mode: nope}", ["pickle", "mode"], "one of"),
                            ("yara: {scope: nope}", ["yara", "scope"], "must be")):
        text = (key + ": nope\n") if ":" not in key else key + "\n"
        out = lint_error(d, text)
        node = SCHEMA["properties"][path[0]]
        if len(path) > 1:
            node = node["properties"][path[1]]
        for name in node["enum"]:
            if not re.search(r"\b" + re.escape(name) + r"\b", out):
                raise AssertionError(f"{'.'.join(path)}: the parser does not name {name!r}: {out}")


# ---- every policy in the repository ------------------------------------------------------------

CORPUS = os.path.join(ROOT, "fuzz", "corpus", "fuzz_policy")
# Corpus entries whose only problem is one of the SEMANTIC classes above.
CORPUS_SEMANTIC = {"bad_pem.yaml": "PEM is not a key", "key_file_missing.yaml": "key file missing",
                   "key_file_two_blocks.yaml": "key file holds two PEM blocks"}


@test
def fuzz_corpus_policies(d):
    names = sorted(n for n in os.listdir(CORPUS) if n.endswith(".yaml"))
    if len(names) < 10:
        raise AssertionError(f"only {len(names)} policies in {CORPUS}")
    eq(set(CORPUS_SEMANTIC) <= set(names), True, "the semantic corpus entries exist")
    for n in names:
        with open(os.path.join(CORPUS, n), "rb") as f:
            parts = f.read().split(b"\0", 2)
        cd = os.path.join(d, n[:-5])
        os.makedirs(os.path.join(cd, "rules"))
        # fuzz/fuzz_policy.cc: policy NUL key.pem NUL rules/fuzz.yar
        if len(parts) > 1:
            write(os.path.join(cd, "key.pem"), parts[1])
        if len(parts) > 2:
            write(os.path.join(cd, "rules", "fuzz.yar"), parts[2])
        path = write(os.path.join(cd, "policy.yaml"), parts[0])
        agree(path, parts[0], semantic=n in CORPUS_SEMANTIC)


def yaml_blocks(relpath):
    with open(os.path.join(ROOT, relpath), encoding="utf-8") as f:
        text = f.read()
    return [m.group(1) + "\n" for m in re.finditer(r"```yaml\n(.*?)\n```", text, re.S)]


def documented_policies():
    """(where, text) for each policy shown as a ```yaml block in README.md or
    docs/*.md (a block with apiVersion: modelgate/v1 and kind: Policy), and
    the policy of the deployment ConfigMap."""
    import yaml
    out = []
    pages = ["README.md"] + sorted("docs/" + n for n in os.listdir(os.path.join(ROOT, "docs"))
                                   if n.endswith(".md"))
    for page in pages:
        for i, block in enumerate(yaml_blocks(page)):
            if re.search(r"^apiVersion: modelgate/v1$", block, re.M) and re.search(r"^kind: Policy$", block, re.M):
                out.append((f"{page} block {i}", block))
            elif "kind: ConfigMap" in block:
                for doc in yaml.safe_load_all(block):
                    if doc and doc.get("kind") == "ConfigMap":
                        for k, v in doc.get("data", {}).items():
                            if k.endswith(".yaml") and "kind: Policy" in v:
                                out.append((f"{page} ConfigMap {k}", v))
    return out


@test
def documented_policies_lint_and_validate(d):
    found = documented_policies()
    pages = {w.split(" ")[0] for w, _ in found}
    for page in ("README.md", "docs/policy.md", "docs/ci-policy-check.md", "docs/registry-gate.md",
                 "docs/deployment-admission.md"):
        if page not in pages:
            raise AssertionError(f"no policy found in {page} (found: {sorted(pages)})")
    keydir = os.path.join(d, "keys")
    os.makedirs(keydir)
    for i, (where, text) in enumerate(found):
        cd = os.path.join(d, str(i))
        os.makedirs(cd)
        # Key files and rule directories the example names, made up here.
        fresh = (f"k{i}-{n}" for n in itertools.count())  # a distinct key for each one named
        for ref in re.findall(r"file: ([^\s#}]+)", text):
            write(os.path.join(cd, ref), pem(keydir, next(fresh)))
        for m in re.finditer(r"rules: \[([^\]]*)\]", text):
            for ref in m.group(1).split(","):
                os.makedirs(os.path.join(cd, ref.strip().strip("\"'")), exist_ok=True)
        if "publicKey:" in text:
            text = re.sub(r"( *)-----BEGIN PUBLIC KEY-----\n.*?-----END PUBLIC KEY-----\n",
                          lambda m: indent(pem(keydir, next(fresh)), len(m.group(1))), text, flags=re.S)
        path = write(os.path.join(cd, "policy.yaml"), text)
        ok, out = lint(path)
        if not ok:
            raise AssertionError(f"{where}: policy lint fails: {out}")
        errs = schema_errors(text.encode())
        if errs:
            raise AssertionError(f"{where}: the schema rejects it: {errs}")


if __name__ == "__main__":
    sys.exit(main())
