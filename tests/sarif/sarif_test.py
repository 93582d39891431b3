#!/usr/bin/python3
"""SARIF 2.1.0 output of `modelgate scan -f sarif` (issue 5, point 3).

usage: sarif_test.py MODELGATE FINDINGS_DOCS DOCS_BASE_URI SCHEMA_DIR SOURCE_DIR
                     [SHARED_SCHEMA_DIR]

Builds files (valid and hostile safetensors, pickles, a torch-style zip with a
hostile member, files in a subdirectory, absolute paths inside and outside
the working directory, hostile names), runs the real program, validates every
SARIF document against both schemas in SCHEMA_DIR (Draft 4, Debian's
python3-jsonschema) and checks what GitHub code scanning relies on: one rule
per ruleId with help text and security-severity, a level per result, a
relative URI (or file:// outside the working directory), a location on every
result, one result per finding at or above --sarif-level (default warning),
unchanged exit codes. Every rule's helpUri is DOCS_BASE_URI + a page that
exists in SOURCE_DIR/docs/findings; a region only on findings the JSON report
places (text-like files), equal to its line and column.

The finding table comes from FINDINGS_DOCS --list (core/tools/findings_docs.cc
over modelgate/findings.def): every MG- id the sources emit must be in it and
every id in it must be emitted (one table, not three).

Nothing is skipped: a missing schema, jsonschema module or program fails.
SHARED_SCHEMA_DIR, when given and present, must hold the same schema bytes
as SCHEMA_DIR (the copies must not drift). Prints "N passed, M failed".
"""
import json
import os
import re
import struct
import subprocess
import sys
import tempfile
import urllib.parse
import zipfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from mgtest import SARIF_SCHEMAS, eq, main, sarif_validators, st_bytes, test, validate_sarif  # noqa: E402

SEVERITY_SCORE = {"critical": "9.5", "high": "8.0", "medium": "5.5", "low": "2.0"}
LEVEL = {"critical": "error", "high": "error", "medium": "warning", "low": "note", "info": "note"}
RANK = {"critical": 0, "high": 1, "medium": 2, "low": 3, "info": 4}


def die(msg):
    print(f"FATAL: {msg}")
    print("0 passed, 1 failed")
    sys.exit(1)


if len(sys.argv) not in (6, 7):
    die(__doc__)
MG = os.path.abspath(sys.argv[1])
FINDINGS_DOCS = os.path.abspath(sys.argv[2])
DOCS_BASE_URI = sys.argv[3]
SCHEMA_DIR = sys.argv[4]
SOURCE_DIR = sys.argv[5]
SHARED_DIR = sys.argv[6] if len(sys.argv) == 7 else ""
DOCS_DIR = os.path.join(SOURCE_DIR, "docs", "findings")

for prog in (MG, FINDINGS_DOCS):
    if not os.access(prog, os.X_OK):
        die(f"program {prog} is missing or not executable")
VALIDATORS = sarif_validators(SCHEMA_DIR)


def load_table():
    """id -> {severity ('-' when it varies), kind, code, enumerator}."""
    p = subprocess.run([FINDINGS_DOCS, "--list"], capture_output=True, text=True, timeout=60)
    if p.returncode != 0:
        die(f"{FINDINGS_DOCS} --list: {p.stderr}")
    rows = {}
    for line in p.stdout.splitlines():
        id_, sev, kind, code, enum = line.split("\t")
        rows[id_] = {"severity": sev, "kind": kind, "code": code, "enum": enum}
    if len(rows) < 100:
        die(f"finding table has {len(rows)} rows")
    return rows


TABLE = load_table()
FAMILIES = [i for i, r in TABLE.items() if r["kind"] == "family"]
LEVEL_RANK = {"error": 0, "warning": 1, "note": 2}


def page_for(rule_id):
    """The docs/findings page a rule must link to."""
    if rule_id in TABLE and TABLE[rule_id]["kind"] != "family":
        return rule_id + ".md"
    for prefix in FAMILIES:
        if rule_id.startswith(prefix):
            return prefix.rstrip("-") + ".md"
    raise AssertionError(f"{rule_id} is in no table row")

GOOD = st_bytes({"__metadata__": {"format": "pt"},
                 "w": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]}}, bytes(16))
TRAILING = st_bytes({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}, bytes(8),
                    trailing=b"\x80\x02cposix\nsystem\n.")
# pickle protocol 4: os.system("id") — imported and called.
_EVIL_BODY = b"\x8c\x02os\x8c\x06system\x93\x8c\x02id\x85R."
EVIL_PICKLE = b"\x80\x04\x95" + struct.pack("<Q", len(_EVIL_BODY)) + _EVIL_BODY
# Only an allowlisted global: the medium "pickle format" finding, passes by default.
BENIGN_PICKLE = b"\x80\x02ccollections\nOrderedDict\nq\x00)Rq\x01."


def torch_zip(pickle_bytes):
    import io
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as z:
        z.writestr("archive/data.pkl", pickle_bytes)
        z.writestr("archive/version", b"3\n")
    return buf.getvalue()


def write(d, name, data):
    path = os.path.join(d, name) if isinstance(name, str) else os.path.join(os.fsencode(d), name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)
    return path


def run(cwd, *args):
    p = subprocess.run([MG, *args], capture_output=True, timeout=60, cwd=cwd)
    return p.returncode, p.stdout, p.stderr.decode("utf-8", "replace")


def check(cond, what):
    if not cond:
        raise AssertionError(what)


def walk(node, path="$"):
    """Yields (json path, key, value) for every object member."""
    if isinstance(node, dict):
        for k, v in node.items():
            yield path, k, v
            yield from walk(v, f"{path}.{k}")
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from walk(v, f"{path}[{i}]")


def validate(doc):
    validate_sarif(doc, VALIDATORS)


def uri_path(uri, cwd):
    """The file-system path a result's URI names, resolved like a consumer would."""
    if uri.startswith("file://"):
        return urllib.parse.unquote_to_bytes(uri[len("file://"):])
    return os.path.join(os.fsencode(cwd), urllib.parse.unquote_to_bytes(uri))


URI_CHARS = re.compile(r"^[A-Za-z0-9\-._~/%]+$")


def severity(fd):
    """A finding's severity in SARIF: a waived one's before the waiver (its
    result is suppressed, not downgraded)."""
    return fd["waived"]["severity"] if "waived" in fd else fd["severity"]


def check_sarif(doc, cwd, json_report, expect_success, level="warning"):
    """Everything GitHub code scanning relies on; returns the results."""
    validate(doc)
    eq(doc["version"], "2.1.0", "version")
    eq(len(doc["runs"]), 1, "runs")
    run_ = doc["runs"][0]
    driver = run_["tool"]["driver"]
    eq(driver["name"], "modelgate", "driver name")
    eq(driver["version"], json_report["tool"]["version"], "driver version")
    for p, k, _ in walk(doc):
        check(k != "region" or p.endswith(".physicalLocation"), f"region at {p}")
    eq(run_["columnKind"], "utf16CodeUnits", "columnKind")
    inv = run_["invocations"]
    eq(len(inv), 1, "invocations")
    eq(inv[0]["executionSuccessful"], expect_success, "executionSuccessful")
    srcroot = run_["originalUriBaseIds"]["%SRCROOT%"]["uri"]
    eq(urllib.parse.unquote_to_bytes(srcroot[len("file://"):]),
       os.fsencode(os.path.realpath(cwd)) + b"/", "%SRCROOT%")

    findings = [(f, fd) for f in json_report["files"] for fd in f["findings"]
                if LEVEL_RANK[LEVEL[severity(fd)]] <= LEVEL_RANK[level]]
    results = run_["results"]
    eq(len(results), len(findings), f"results count = findings at or above {level}")

    rules = driver["rules"]
    ids = [r["id"] for r in rules]
    eq(len(ids), len(set(ids)), "one rule per id")
    eq(set(ids), {r["ruleId"] for r in results}, "rules are exactly the ids that appear")
    worst = {}
    for r in results:
        s = r["properties"]["severity"]
        if r["ruleId"] not in worst or RANK[s] < RANK[worst[r["ruleId"]]]:
            worst[r["ruleId"]] = s
    for i, rule in enumerate(rules):
        check(rule["shortDescription"]["text"].strip(), f"rule {rule['id']} shortDescription")
        check(len(rule["help"]["text"].strip()) > 20, f"rule {rule['id']} help.text")
        s = worst[rule["id"]]
        props = rule["properties"]
        if s in SEVERITY_SCORE:
            eq(props.get("security-severity"), SEVERITY_SCORE[s], f"rule {rule['id']} security-severity")
            check("security" in props.get("tags", []), f"rule {rule['id']} tags")
        else:
            check("security-severity" not in props, f"info rule {rule['id']} has no score")
        eq(rule["defaultConfiguration"]["level"], LEVEL[s], f"rule {rule['id']} level")
        uri = rule["helpUri"]
        parsed = urllib.parse.urlparse(uri)
        check(parsed.scheme in ("https", "http", "file") and (parsed.netloc or parsed.scheme == "file"),
              f"rule {rule['id']} helpUri {uri!r} is absolute")
        page = page_for(rule["id"])
        eq(uri, DOCS_BASE_URI + page, f"rule {rule['id']} helpUri")
        check(os.path.isfile(os.path.join(DOCS_DIR, page)), f"docs/findings/{page} exists")
        check(uri in rule["help"]["text"], f"rule {rule['id']} help names its page")

    for r, (f, fd) in zip(results, findings):
        eq(r["ruleId"], fd["id"], "result order follows the findings")
        eq(rules[r["ruleIndex"]]["id"], r["ruleId"], "ruleIndex")
        sev = severity(fd)
        eq(r["properties"]["severity"], sev, "severity")
        fixed = TABLE.get(r["ruleId"], {}).get("severity", "-")
        check(fixed in ("-", sev), f"{r['ruleId']} is {sev}, the table says {fixed}")
        eq(r["level"], LEVEL[sev], f"level of {sev}")
        eq(r["properties"].get("security-severity"), SEVERITY_SCORE.get(sev),
           "result security-severity")
        # A waived finding is a suppressed result (the policy's exception),
        # never an open alert; every other result has no suppressions.
        if "waived" in fd:
            eq(r.get("suppressions"), [{"kind": "external", "justification": fd["waived"]["reason"]}],
               "a waived finding is suppressed")
            eq(r["properties"].get("waived"), fd["waived"], "properties.waived")
        else:
            eq("suppressions" in r, False, f"{fd['id']} is not suppressed")
        check(fd["message"] in r["message"]["text"], "message text carries the finding's message")
        for key in ("offset", "member", "member_bytes", "member_offset", "corroborated_by"):
            eq(r["properties"].get(key), fd.get(key), f"properties.{key}")
        locs = r.get("locations", [])
        check(len(locs) >= 1, "every result has a location (GitHub rejects one without)")
        region = locs[0]["physicalLocation"].get("region")
        if "line" in fd:
            eq(region, {"startLine": fd["line"], "startColumn": fd["column"]}, "region = line/column")
        else:
            eq(region, None, f"no region for {fd['id']} in a {f['format']} file")
        art = locs[0]["physicalLocation"]["artifactLocation"]
        uri = art["uri"]
        check(URI_CHARS.match(uri[len("file://"):] if uri.startswith("file://") else uri),
              f"URI {uri!r} is percent-encoded")
        if uri.startswith("file://"):
            check("uriBaseId" not in art, "absolute URI has no base id")
        else:
            eq(art.get("uriBaseId"), "%SRCROOT%", "relative URI base")
            check(not uri.startswith("/") and ".." not in uri.split("/") and ":" not in uri,
                  f"URI {uri!r} is a plain relative path")
        # A path that is not UTF-8 is escaped in the JSON report, its bytes
        # in path_bytes; the URI percent-encodes those bytes.
        raw = bytes.fromhex(f["path_bytes"]) if "path_bytes" in f else f["path"].encode()
        want = os.path.normpath(os.path.join(os.fsencode(cwd), raw))
        got = os.path.normpath(uri_path(uri, cwd))
        eq(got, want, f"URI {uri!r} names {f['path']!r}")
        check(r["partialFingerprints"]["modelgateFinding/v1"], "fingerprint")
        eq(run_["artifacts"][art["index"]]["location"]["uri"], uri, "artifact index names the file")
    fps = [r["partialFingerprints"]["modelgateFinding/v1"] for r in results]
    eq(len(fps), len(set(fps)), "fingerprints are distinct")
    # One artifact per file judged (per distinct URI), with what the JSON
    # report says of it: size, SHA-256 when hashed, verdict, signature.
    arts = run_["artifacts"]
    eq(len({a["location"]["uri"] for a in arts}), len(arts), "artifacts are unique")

    def file_key(f):
        raw = bytes.fromhex(f["path_bytes"]) if "path_bytes" in f else f["path"].encode()
        return os.path.normpath(os.path.join(os.fsencode(cwd), raw))
    first = {}
    for f in json_report["files"]:
        first.setdefault(file_key(f), f)
    eq(len(arts), len(first), "one artifact per file")
    for a in arts:
        f = first.get(os.path.normpath(uri_path(a["location"]["uri"], cwd)))
        check(f is not None, f"artifact {a['location']['uri']!r} is a file of the report")
        eq(a["length"], f["size"], "artifact length")
        eq(a.get("hashes"), {"sha-256": f["sha256"]} if "sha256" in f else None, "artifact hashes")
        eq(a["properties"]["verdict"], f["verdict"], "artifact verdict")
        eq(a["properties"]["signature"]["status"], f["signature"]["status"], "artifact signature")
        for key in ("kind", "key_ids", "model", "version"):
            eq(a["properties"]["signature"].get(key), f["signature"].get(key), f"signature.{key}")
    if "policy" in json_report:
        eq(run_["properties"]["policy"], json_report["policy"], "the run's policy")
    else:
        eq("policy" in run_["properties"], False, "no policy, no policy property")
    return results


def scan_both(cwd, *args, fmt_args=("-f", "sarif")):
    """Runs the same scan as JSON and as SARIF; exit codes must agree."""
    jcode, jout, _ = run(cwd, "scan", "-f", "json", *args)
    scode, sout, err = run(cwd, "scan", *fmt_args, *args)
    eq(scode, jcode, "SARIF and JSON exit codes")
    return scode, json.loads(sout), json.loads(jout), err


@test
def passing_files_give_no_results(d):
    write(d, "good.safetensors", GOOD)
    write(d, "models/sub/dir/good2.safetensors", GOOD)
    code, doc, rep, _ = scan_both(d, "good.safetensors", "models")
    eq(code, 0, "exit")
    eq(rep["summary"]["files"], 2, "files scanned")
    results = check_sarif(doc, d, rep, True)
    eq(results, [], "results")
    eq(doc["runs"][0]["tool"]["driver"]["rules"], [], "rules")


@test
def hostile_safetensors(d):
    write(d, "good.safetensors", GOOD)
    write(d, "evil.safetensors", TRAILING)
    code, doc, rep, _ = scan_both(d, "good.safetensors", "evil.safetensors")
    eq(code, 1, "exit")
    results = check_sarif(doc, d, rep, True)
    ids = [r["ruleId"] for r in results]
    check("MG-ST-TRAILING-BYTES" in ids, f"trailing bytes reported: {ids}")
    r = results[ids.index("MG-ST-TRAILING-BYTES")]
    eq(r["level"], "error", "critical level")
    eq(r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"], "evil.safetensors", "uri")
    check(isinstance(r["properties"]["offset"], int), "offset in properties")
    check(f"byte {r['properties']['offset']}" in r["message"]["text"], "offset in message")


@test
def pickle_with_os_system(d):
    write(d, "weights.bin", EVIL_PICKLE)
    code, doc, rep, _ = scan_both(d, "weights.bin")
    eq(code, 1, "exit")
    results = check_sarif(doc, d, rep, True)
    crit = [r for r in results if r["ruleId"] == "MG-PK-CRITICAL-IMPORT"]
    check(crit, f"critical import reported: {[r['ruleId'] for r in results]}")
    check("os.system" in crit[0]["message"]["text"] or "posix.system" in crit[0]["message"]["text"],
          "message names the import")
    # The shipped YARA rule that sees the same import is evidence on the
    # built-in finding, not a second alert.
    check(crit[0]["properties"].get("corroborated_by"),
          f"YARA corroboration listed: {crit[0]['properties']}")
    check(not any(r["ruleId"].startswith("MG-YARA-PICKLE-CODE") for r in results),
          "no second result for the same import")
    rule = [x for x in doc["runs"][0]["tool"]["driver"]["rules"] if x["id"] == "MG-PK-CRITICAL-IMPORT"][0]
    eq(rule["properties"]["security-severity"], "9.5", "critical score")


@test
def medium_and_info_levels(d):
    write(d, "plain.pkl", BENIGN_PICKLE)
    write(d, "notes.txt", b"just some text, not a model\n")
    code, doc, rep, _ = scan_both(d, "plain.pkl", "notes.txt",
                                  fmt_args=("-f", "sarif", "--sarif-level", "note"))
    eq(code, 0, "exit (medium and info pass by default)")
    results = check_sarif(doc, d, rep, True, level="note")
    levels = {r["ruleId"]: r["level"] for r in results}
    eq(levels.get("MG-PK-PICKLE-FORMAT"), "warning", "medium -> warning")
    eq(levels.get("MG-FMT-UNKNOWN"), "note", "info -> note")
    rules = {r["id"]: r for r in doc["runs"][0]["tool"]["driver"]["rules"]}
    eq(rules["MG-PK-PICKLE-FORMAT"]["properties"]["security-severity"], "5.5", "medium score")
    # The default level leaves the info finding out, rule and all.
    code, doc, rep, _ = scan_both(d, "plain.pkl", "notes.txt")
    results = check_sarif(doc, d, rep, True)
    eq([r["ruleId"] for r in results], ["MG-PK-PICKLE-FORMAT"], "default level: warning and up")
    eq([r["id"] for r in doc["runs"][0]["tool"]["driver"]["rules"]], ["MG-PK-PICKLE-FORMAT"],
       "rules of the results only")
    # error: the medium finding goes too; the run and its summary stay.
    code, doc, rep, _ = scan_both(d, "plain.pkl", "notes.txt",
                                  fmt_args=("-f", "sarif", "--sarif-level", "error"))
    eq(check_sarif(doc, d, rep, True, level="error"), [], "error level")
    eq(doc["runs"][0]["properties"]["summary"]["files"], 2, "summary counts every file")


@test
def clean_model_repository_gives_no_results(d):
    """A Hugging Face-style repository with nothing wrong: no alerts by default.

    Its vocab, README and .gitattributes files are MG-FMT-UNKNOWN (info),
    which `--sarif-level note` still reports (one per unrecognized file); its
    JSON configs are read as strict JSON (format json) and have nothing to
    report."""
    write(d, "repo/model.safetensors", GOOD)
    write(d, "repo/config.json", b'{\n  "architectures": ["BertModel"],\n  "model_type": "bert"\n}\n')
    write(d, "repo/tokenizer.json", b'{"version": "1.0", "model": {"type": "WordPiece"}}\n')
    write(d, "repo/tokenizer_config.json", b'{"do_lower_case": true}\n')
    write(d, "repo/special_tokens_map.json", b'{"pad_token": "[PAD]"}\n')
    write(d, "repo/generation_config.json", b'{"max_length": 20}\n')
    write(d, "repo/vocab.txt", b"[PAD]\nhello\n")
    write(d, "repo/README.md", b"---\nlicense: apache-2.0\n---\n# tiny\n")
    write(d, "repo/.gitattributes", b"*.safetensors filter=lfs diff=lfs merge=lfs -text\n")
    code, doc, rep, _ = scan_both(d, "repo")
    eq(code, 0, "exit")
    eq(rep["summary"]["files"], 9, "files")
    eq(check_sarif(doc, d, rep, True), [], "results at the default level")
    eq(doc["runs"][0]["tool"]["driver"]["rules"], [], "rules at the default level")
    code, doc, rep, _ = scan_both(d, "repo", fmt_args=("-f", "sarif", "--sarif-level", "note"))
    results = check_sarif(doc, d, rep, True, level="note")
    eq(len(results), 3, "note level: one MG-FMT-UNKNOWN per unrecognized file")
    eq(sorted(os.path.basename(r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"])
              for r in results), [".gitattributes", "README.md", "vocab.txt"], "which files")
    eq({r["ruleId"] for r in results}, {"MG-FMT-UNKNOWN"}, "only informational ids")


@test
def sarif_level_is_checked(d):
    write(d, "good.safetensors", GOOD)
    for bad in ("info", "NOTE", ""):
        code, out, err = run(d, "scan", "-f", "sarif", "--sarif-level", bad, "good.safetensors")
        eq(code, 2, f"--sarif-level {bad!r} is a usage error")
        eq(out, b"", "no report on a usage error")


@test
def low_severity_and_fail_on(d):
    # A safetensors file named .npy: the extension lies, but the content
    # cannot carry code (low).
    write(d, "weights.npy", GOOD)
    code, doc, rep, _ = scan_both(d, "weights.npy", fmt_args=("-f", "sarif", "--sarif-level", "note"))
    results = check_sarif(doc, d, rep, True, level="note")
    sev = {r["ruleId"]: r["properties"]["severity"] for r in results}
    check(sev.get("MG-FMT-EXTENSION-MISMATCH") == "low", f"low finding: {sev}")
    eq(code, 0, "exit")
    rules = {r["id"]: r for r in doc["runs"][0]["tool"]["driver"]["rules"]}
    eq(rules["MG-FMT-EXTENSION-MISMATCH"]["properties"]["security-severity"], "2.0", "low score")
    eq(results[0]["level"], "note", "low -> note")
    code, doc, rep, _ = scan_both(d, "--fail-on", "low", "weights.npy")
    eq(code, 1, "--fail-on low rejects")
    # A rejecting low finding is still a note: the level, not the verdict,
    # decides what is a result.
    eq(check_sarif(doc, d, rep, True), [], "default level leaves the low finding out")


@test
def zip_member_finding(d):
    write(d, "model.pt", torch_zip(EVIL_PICKLE))
    code, doc, rep, _ = scan_both(d, "model.pt")
    eq(code, 1, "exit")
    results = check_sarif(doc, d, rep, True)
    members = [r for r in results if r["properties"].get("member")]
    check(members, f"a member finding: {[r['properties'] for r in results]}")
    m = [r for r in members if r["ruleId"] == "MG-PK-CRITICAL-IMPORT"]
    check(m, "critical import inside the member")
    check("archive/data.pkl" in m[0]["properties"]["member"], "member name")
    check('"archive/data.pkl"' in m[0]["message"]["text"], "member named in the message")
    eq(m[0]["locations"][0]["physicalLocation"]["artifactLocation"]["uri"], "model.pt",
       "location is the archive file")


@test
def paths_subdir_absolute_outside(d):
    outside = tempfile.mkdtemp(prefix="mg-sarif-out-")
    try:
        write(d, "a/b/evil.safetensors", TRAILING)
        inside_abs = write(d, "abs.safetensors", TRAILING)
        out_abs = write(outside, "far away.safetensors", TRAILING)
        write(d, "c:colon #hash?q.pkl", EVIL_PICKLE)
        write(d, b"bad\xffname.pkl", EVIL_PICKLE)
        code, doc, rep, _ = scan_both(
            d, "a", "./a/b/../b/evil.safetensors", inside_abs, out_abs,
            "c:colon #hash?q.pkl", os.fsdecode(b"bad\xffname.pkl"))
        eq(code, 1, "exit")
        results = check_sarif(doc, d, rep, True)
        uris = [r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] for r in results]
        check("a/b/evil.safetensors" in uris, f"walked subdirectory file relative: {uris}")
        check("abs.safetensors" in uris, f"absolute path inside cwd made relative: {uris}")
        far = "file://" + urllib.parse.quote(os.path.join(outside, "far away.safetensors"))
        check(far in uris, f"outside cwd -> file:// URI {far}: {uris}")
        check("c%3Acolon%20%23hash%3Fq.pkl" in uris, f"hostile name encoded: {uris}")
        check("bad%FFname.pkl" in uris, f"invalid UTF-8 name encoded: {uris}")
    finally:
        subprocess.run(["rm", "-rf", outside], check=False)


@test
def relative_path_outside_cwd(d):
    sub = os.path.join(d, "work")
    os.makedirs(sub)
    write(d, "up.safetensors", TRAILING)
    code, doc, rep, _ = scan_both(sub, "../up.safetensors")
    eq(code, 1, "exit")
    results = check_sarif(doc, sub, rep, True)
    uri = results[0]["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]
    eq(uri, "file://" + urllib.parse.quote(os.path.join(d, "up.safetensors")), "../ path -> file://")


@test
def error_verdict_exit_2(d):
    write(d, "evil.safetensors", TRAILING)
    os.symlink(os.path.join(d, "nowhere"), os.path.join(d, "dangling.safetensors"))
    code, doc, rep, _ = scan_both(d, "evil.safetensors", "dangling.safetensors")
    eq(code, 2, "exit (2 wins over 1)")
    eq(rep["summary"]["errors"], 1, "one error")
    check_sarif(doc, d, rep, False)
    notes = doc["runs"][0]["invocations"][0].get("toolExecutionNotifications", [])
    check(notes and notes[0]["level"] == "error", "a notification for the file that was not judged")


@test
def output_file(d):
    write(d, "evil.safetensors", TRAILING)
    write(d, "weights.bin", EVIL_PICKLE)
    code, out, _ = run(d, "scan", "-f", "sarif", "-o", "report.sarif", "evil.safetensors", "weights.bin")
    eq(code, 1, "exit with -o")
    eq(out, b"", "stdout empty with -o")
    with open(os.path.join(d, "report.sarif"), "rb") as f:
        written = f.read()
    _, stdout_doc, _ = run(d, "scan", "--format", "sarif", "evil.safetensors", "weights.bin")
    eq(written, stdout_doc, "-o writes what stdout shows")
    _, jout, _ = run(d, "scan", "-f", "json", "evil.safetensors", "weights.bin")
    check_sarif(json.loads(written), d, json.loads(jout), True)


@test
def verify_sarif(d):
    write(d, "good.safetensors", GOOD)
    code, _, err = run(d, "keygen", "--out", "k")
    eq(code, 0, f"keygen: {err}")
    code, sout, _ = run(d, "verify", "--pubkey", "k.pub", "-f", "sarif", "good.safetensors")
    jcode, jout, _ = run(d, "verify", "--pubkey", "k.pub", "-f", "json", "good.safetensors")
    eq(code, jcode, "verify exit codes agree")
    eq(code, 1, "unsigned file rejected")
    results = check_sarif(json.loads(sout), d, json.loads(jout), True)
    check(any(r["ruleId"].startswith("MG-SIG-") for r in results), "signature finding")


@test
def waived_findings_are_suppressed(d):
    """A policy exception for one exact file: its finding is a suppressed
    result at the level it had (SARIF suppressions, kind external, the
    reason as justification), the same finding in another file an open
    alert; the run names the policy and its SHA-256, each artifact its file's."""
    import hashlib
    write(d, "evil.safetensors", TRAILING)
    write(d, "other.safetensors", TRAILING + b"\0")
    write(d, "policy.yaml", b"apiVersion: modelgate/v1\nkind: Policy\nexceptions:\n"
          + f"  - {{id: MG-ST-TRAILING-BYTES, sha256: \"{hashlib.sha256(TRAILING).hexdigest()}\", "
          "reason: \"vendor padding, reviewed\", expires: 2999-12-31}\n".encode())
    args = ("check", "--policy", "policy.yaml", "evil.safetensors", "other.safetensors")
    _, jout, _ = run(d, *args[:3], "-f", "json", *args[3:])
    code, sout, err = run(d, *args[:3], "-f", "sarif", *args[3:])
    eq(code, 1, f"other.safetensors is still rejected ({err})")
    rep_, doc = json.loads(jout), json.loads(sout)
    results = check_sarif(doc, d, rep_, True)
    trailing = [r for r in results if r["ruleId"] == "MG-ST-TRAILING-BYTES"]
    eq(len(trailing), 2, "both files' findings are results")
    by_uri = {r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]: r for r in trailing}
    waived, open_ = by_uri["evil.safetensors"], by_uri["other.safetensors"]
    eq(waived["suppressions"], [{"kind": "external", "justification": "vendor padding, reviewed"}],
       "suppressed by the exception")
    eq(waived["level"], open_["level"], "at the level it had")
    eq("suppressions" in open_, False, "the other file's finding is open")
    eq(waived["partialFingerprints"] != open_["partialFingerprints"], True, "two alerts")
    # The schemas do check suppressions: a kind SARIF does not define fails.
    waived["suppressions"][0]["kind"] = "waiver"
    for name, v in VALIDATORS:
        check(not v.is_valid(doc), f"{name} rejects suppression kind 'waiver'")
    waived["suppressions"][0]["kind"] = "external"
    with open(os.path.join(d, "policy.yaml"), "rb") as fh:
        eq(doc["runs"][0]["properties"]["policy"],
           {"path": "policy.yaml", "sha256": hashlib.sha256(fh.read()).hexdigest()}, "policy")
    arts = {a["location"]["uri"]: a for a in doc["runs"][0]["artifacts"]}
    eq(arts["evil.safetensors"]["hashes"], {"sha-256": hashlib.sha256(TRAILING).hexdigest()},
       "the file's SHA-256")
    # Without a policy (scan): no policy property, artifacts without hashes.
    code, doc, rep_, _ = scan_both(d, "evil.safetensors")
    check_sarif(doc, d, rep_, True)
    eq("policy" in doc["runs"][0]["properties"], False, "scan has no policy")


@test
def usage_errors_unchanged(d):
    code, out, err = run(d, "scan", "-f", "xml", "x")
    eq(code, 2, "unknown format")
    check("sarif" in err, "usage names sarif")
    code, _, _ = run(d, "scan", "-f", "sarif")
    eq(code, 2, "no PATH")


@test
def untrusted_text_escaped(d):
    # A member name with invalid UTF-8 and a quote: valid JSON out, U+FFFD in.
    import io
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        info = zipfile.ZipInfo("archive/data.pkl")
        z.writestr(info, EVIL_PICKLE)
    raw = bytearray(buf.getvalue())
    for i in range(len(raw) - 3):  # rename in both headers, same length
        if raw[i:i + 4] == b"data":
            raw[i:i + 4] = b'd"\xff\x01'
    write(d, "odd.pt", bytes(raw))
    code, doc, rep, _ = scan_both(d, "odd.pt")
    check(code in (1, 2), f"exit {code}")
    check_sarif(doc, d, rep, code != 2)


@test
def non_utf8_paths_and_members_stay_apart(d):
    # Two paths differing only in an invalid byte, each a torch zip whose
    # member name holds invalid bytes too: distinct URIs (percent-encoded
    # bytes), member escaped with its bytes beside it, still schema-valid.
    import io
    for b in (b"\xff", b"\xfe"):
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w") as z:
            z.writestr(zipfile.ZipInfo("archive/data.pkl"), EVIL_PICKLE)
        raw = buf.getvalue().replace(b"archive/data.pkl", b"archive/" + b + b"\x9bta.pkl")
        write(d, b"m" + b + b".pt", raw)
    code, doc, rep, _ = scan_both(d, "m\udcff.pt".encode("utf-8", "surrogateescape"),
                                  "m\udcfe.pt".encode("utf-8", "surrogateescape"))
    eq(code, 1, "exit")
    results = check_sarif(doc, d, rep, True)
    uris = {r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] for r in results}
    eq(uris, {"m%FF.pt", "m%FE.pt"}, "one URI per file, raw bytes percent-encoded")
    members = {(r["properties"]["member"], r["properties"].get("member_bytes"))
               for r in results if "member" in r["properties"]}
    want = set()
    for b in (b"\xff", b"\xfe"):
        name = b"archive/" + b + b"\x9bta.pkl"
        want.add((name.decode("utf-8", "backslashreplace"), name.hex()))
    eq(members, want, "members escaped, bytes in member_bytes")
    eq(sorted(f["path"] for f in rep["files"]), ["m\\xfe.pt", "m\\xff.pt"], "JSON paths")


LFS_POINTER = (b"version https://git-lfs.github.com/spec/v1\n"
               b"oid sha256:4d7a214614ab2935c943f9e0ff69d22eadbb8f32b1258daaa5e2ca24d17e2393\n"
               b"size 12345\n")
MARKER_RULE = b"""rule text_marker
{
    meta:
        severity = "high"
        description = "test marker"
    strings:
        $a = "MARKER-XYZ"
    condition:
        $a
}
"""


@test
def region_on_text_findings(d):
    """Findings in text-like files carry a region; binary files' do not."""
    write(d, "model.safetensors", LFS_POINTER)
    write(d, "rules/marker.yar", MARKER_RULE)
    # Line 3; before the marker: 2 spaces, a quote, h, e-acute (1 UTF-16
    # unit, 2 bytes), U+1F600 (2 units, 4 bytes), then 14 ASCII characters:
    # column 22 (the byte column would be 26, the code-point column 21).
    config = ('{\n  "model_type": "bert",\n  "h\u00e9\U0001F600": "x", "n": "MARKER-XYZ"\n}\n').encode()
    write(d, "config.json", config)
    write(d, "crlf.json", b'{\r\n"a": 1,\r\n\r\n"b": "MARKER-XYZ"}\r\n')
    # The same marker in a binary file (a safetensors header's metadata).
    marked = st_bytes({"__metadata__": {"note": "MARKER-XYZ"},
                       "w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}, bytes(4))
    write(d, "marked.safetensors", marked)
    code, doc, rep, _ = scan_both(d, "--yara-rules", "rules", "--yara-scope", "all",
                                  "model.safetensors", "config.json",
                                  "crlf.json", "marked.safetensors")
    eq(code, 1, "exit")
    results = check_sarif(doc, d, rep, True)
    by = {}
    for r in results:
        loc = r["locations"][0]["physicalLocation"]
        by[(loc["artifactLocation"]["uri"], r["ruleId"])] = loc.get("region")
    eq(by.get(("model.safetensors", "MG-FMT-LFS-POINTER")), {"startLine": 1, "startColumn": 1},
       "git-lfs pointer: line 1, column 1")
    line3 = '  "h\u00e9\U0001F600": "x", "n": "'
    col = len(line3.encode("utf-16-le")) // 2 + 1
    eq(col, 22, "expected column in UTF-16 code units")
    eq(by.get(("config.json", "MG-YARA-TEXT-MARKER")), {"startLine": 3, "startColumn": col},
       "config: line 3, UTF-16 column")
    eq(by.get(("crlf.json", "MG-YARA-TEXT-MARKER")), {"startLine": 4, "startColumn": 7},
       "CRLF lines")
    check(("marked.safetensors", "MG-YARA-TEXT-MARKER") in by, f"marker in the binary file: {by}")
    eq(by[("marked.safetensors", "MG-YARA-TEXT-MARKER")], None, "binary file: no region")
    # The JSON report carries the same line/column.
    placed = {(f["path"], fd["id"]): (fd.get("line"), fd.get("column"))
              for f in rep["files"] for fd in f["findings"]}
    eq(placed[("config.json", "MG-YARA-TEXT-MARKER")], (3, col), "JSON line/column")
    eq(placed[("marked.safetensors", "MG-YARA-TEXT-MARKER")], (None, None), "JSON: none for binary")
    # A region is what both schemas validate (check_sarif validated the
    # document); errata01 refuses one without a start line.
    loc = {"physicalLocation": {"artifactLocation": {"uri": "a"}, "region": {"startColumn": 3}}}
    doc2 = {"version": "2.1.0", "runs": [{"tool": {"driver": {"name": "x"}},
            "results": [{"message": {"text": "m"}, "locations": [loc]}]}]}
    errata = dict(VALIDATORS)["sarif-schema-2.1.0-errata01.json"]
    check(not errata.is_valid(doc2), "errata01 rejects a region with only a column")


def emitted_ids():
    """Every MG- id string in the sources (not the table), with a file."""
    found = {}
    for mod in ("core", "scanner", "signer", "convert", "policy", "cli", "api"):
        for root, _, files in os.walk(os.path.join(SOURCE_DIR, mod)):
            for n in files:
                if not n.endswith((".cc", ".h")) or n == "findings_docs.cc":
                    continue
                p = os.path.join(root, n)
                with open(p, encoding="utf-8", errors="replace") as f:
                    for m in re.findall(r'"(MG-[A-Z0-9]+-[A-Z0-9-]*[A-Z0-9])"', f.read()):
                        found.setdefault(m, os.path.relpath(p, SOURCE_DIR))
    return found


def code_uses():
    """Every core::Code enumerator the sources name outside the table's readers."""
    used = set()
    for mod in ("core", "scanner", "signer", "convert", "policy", "cli"):
        for root, _, files in os.walk(os.path.join(SOURCE_DIR, mod)):
            for n in files:
                if not n.endswith((".cc", ".h")) or n in ("codes.cc", "core.h", "findings_docs.cc"):
                    continue
                with open(os.path.join(root, n), encoding="utf-8", errors="replace") as f:
                    used.update(re.findall(r"Code::(k[A-Za-z0-9]+)", f.read()))
    return used


@test
def one_table_of_ids(d):
    """Every id the sources emit is in the table; the table has no id nothing emits."""
    found = emitted_ids()
    check(len(found) > 50, f"ids found in the sources: {len(found)}")
    missing = sorted(f"{i} ({found[i]})" for i in found
                     if i not in TABLE and not any(i.startswith(p) for p in FAMILIES))
    eq(missing, [], "emitted ids missing from findings.def")
    # No id string is spelled in the SARIF writer or the core's table code:
    # they read findings.def.
    for rel in ("cli/report_sarif.cc", "core/src/codes.cc"):
        with open(os.path.join(SOURCE_DIR, rel), encoding="utf-8") as f:
            eq(re.findall(r'"MG-[A-Z0-9-]+"', f.read()), [], f"{rel} spells no id")
    used = code_uses()
    unused = []
    for id_, row in TABLE.items():
        if row["kind"] == "core":
            if row["enum"] not in used:
                unused.append(f"{id_} (core::Code::{row['enum']} is never reported)")
        elif row["kind"] == "fixed" and id_ not in found:
            unused.append(f"{id_} (no source emits it)")
    eq(unused, [], "table rows nothing emits")
    # Where a source names an id and its severity together, the severity is
    # the table's (ids whose severity varies by case are "-" there).
    sites, wrong = 0, []
    for mod in ("scanner", "signer", "policy", "cli"):
        for root, _, files in os.walk(os.path.join(SOURCE_DIR, mod)):
            for n in files:
                if not n.endswith((".cc", ".h")):
                    continue
                with open(os.path.join(root, n), encoding="utf-8", errors="replace") as f:
                    text = f.read()
                for m in re.finditer(r'"(MG-[A-Z0-9]+-[A-Z0-9-]*[A-Z0-9])"\s*,\s*(?:core::)?Severity::k(\w+)',
                                     text):
                    sites += 1
                    want = TABLE.get(m.group(1), {}).get("severity", "-")
                    if want not in ("-", m.group(2).lower()):
                        wrong.append(f"{m.group(1)} is {m.group(2)} in {n}, {want} in the table")
    check(sites > 50, f"id-and-severity sites found: {sites}")
    eq(wrong, [], "severities that disagree with the table")


@test
def docs_pages_for_every_row(d):
    """docs/findings holds a page per table row and an index linking them all."""
    with open(os.path.join(DOCS_DIR, "README.md"), encoding="utf-8") as f:
        index = f.read()
    for id_, row in TABLE.items():
        page = page_for(id_) if row["kind"] != "family" else id_.rstrip("-") + ".md"
        with open(os.path.join(DOCS_DIR, page), encoding="utf-8") as f:
            text = f.read()
        check(text.startswith("# " + (id_ + "&lt;RULE&gt;" if row["kind"] == "family" else id_) + ": "),
              f"{page} is titled with its id")
        if row["severity"] != "-":
            check(f"| Severity | {row['severity']} |" in text, f"{page} states severity {row['severity']}")
        if row["kind"] == "core":
            check(f"= {row['code']} |" in text, f"{page} states core code {row['code']}")
        check(f"]({page})" in index, f"index links {page}")


@test
def validators_are_not_vacuous(d):
    """Both schemas reject a wrong version, and errata01 an empty region."""
    loc = {"physicalLocation": {"artifactLocation": {"uri": "a.bin"}, "region": {}}}
    bad_region = {"version": "2.1.0", "runs": [{"tool": {"driver": {"name": "x"}},
                  "results": [{"message": {"text": "m"}, "locations": [loc]}]}]}
    bad_version = {"version": "2.0.0", "runs": []}
    for name, v in VALIDATORS:
        check(not v.is_valid(bad_version), f"{name} rejects version 2.0.0")
    errata = dict(VALIDATORS)["sarif-schema-2.1.0-errata01.json"]
    check(not errata.is_valid(bad_region), "errata01 rejects a region without a start")


@test
def schema_copies_match_shared(d):
    if not SHARED_DIR:
        return
    if not os.path.isdir(SHARED_DIR):
        print(f"  note: {SHARED_DIR} not present; validated against the copies only")
        return
    for name in SARIF_SCHEMAS:
        with open(os.path.join(SCHEMA_DIR, name), "rb") as a, \
                open(os.path.join(SHARED_DIR, name), "rb") as b:
            eq(a.read() == b.read(), True, f"{name} matches {SHARED_DIR}")


if __name__ == "__main__":
    sys.exit(main(prefix="mg-sarif-"))
