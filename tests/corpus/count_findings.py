#!/usr/bin/env python3
"""Count the findings `modelgate scan` makes over the whole test corpus.

    count_findings.py MODELGATE [--root DIR] [--out FILE]
                      [--expected FILE] [--check-english] [--dump FILE]

The corpus is every file of these sets, scanned with the default options
(`modelgate scan -f json`: the shipped YARA rules, scope header):
  repo:examples/models/...   the README demo models (committed)
  repo:fuzz/corpus/...       every fuzz seed, all targets (committed)
  repo:tests/...             every committed data file under tests/: all
                             files except sources and scripts (*.cc, *.h,
                             *.py, *.cmake, CMakeLists.txt) and tests/corpus/
                             itself (this script and its count files)
  gen:fixtures/...           tests/fixtures/make_fixtures.py OUTDIR
  gen:examples/...           tests/fixtures/make_fixtures.py --examples DIR
  gen:pickles/...            tests/scanner/make_pickles.py OUTDIR
The generated sets are written by this script into a temporary directory
with the same generators ctest runs (so it needs no earlier test to have
run); they need /usr/bin/python3 with numpy, as scanner_pickles_make does.
Not included: files the Python tests build on the fly inside their own
processes (tests/loaders/loader_models_test.py, tests/cli/cli_test.py).

Output: the number of files and verdicts; findings by severity; findings by
id (with severity); corroborations (a YARA rule folded into a built-in
finding, JSON `corroborated_by`); then one line per file: its verdict and
its ids with counts. Counts only ids, severities and verdicts, never
messages or offsets, so a reworded message changes nothing here.

--dump FILE writes every file's whole report object (offsets, messages and
all), keyed by label, as canonical JSON, for comparing two builds byte for
byte (ci/s390x.sh: the big-endian build against the x86-64 one).

--expected FILE compares the output with FILE and fails printing a unified
diff when they differ (ctest corpus_findings). To accept a change in
findings, regenerate the file and commit it with the change that caused it:
    python3 tests/corpus/count_findings.py build/cli/modelgate \\
        --out tests/corpus/findings-expected.txt

--check-english fails when a finding message has "a" before a vowel letter
("a unknown"), "an" before a consonant letter, or a word twice in a row
("the the"), and lists them.

Standard library only.
"""

import argparse
import collections
import difflib
import json
import os
import re
import subprocess
import sys
import tempfile

SEVERITIES = ["critical", "high", "medium", "low", "info"]
SOURCE_SUFFIXES = (".cc", ".h", ".py", ".cmake")
# Paths per modelgate run: well under ARG_MAX.
BATCH = 200


def repo_files(root):
    """Yields (label, path) for the committed sets, sorted."""
    out = []
    for top in ("examples/models", "fuzz/corpus", "tests"):
        base = os.path.join(root, top)
        for dirpath, dirnames, filenames in os.walk(base):
            # Python's byte-code caches, left by the test scripts' imports.
            dirnames[:] = sorted(x for x in dirnames if x != "__pycache__")
            rel_dir = os.path.relpath(dirpath, root)
            if rel_dir == "tests/corpus" or rel_dir.startswith("tests/corpus/"):
                dirnames[:] = []
                continue
            for name in sorted(filenames):
                if top == "tests" and (name.endswith(SOURCE_SUFFIXES) or name == "CMakeLists.txt"):
                    continue
                path = os.path.join(dirpath, name)
                if os.path.islink(path) or not os.path.isfile(path):
                    continue
                out.append(("repo:" + os.path.relpath(path, root), path))
    return sorted(out)


def generated_files(root, tmp):
    """Runs the fixture generators into `tmp`; yields (label, path), sorted."""
    py = sys.executable
    jobs = [
        ("fixtures", [py, os.path.join(root, "tests/fixtures/make_fixtures.py")]),
        ("examples", [py, os.path.join(root, "tests/fixtures/make_fixtures.py"), "--examples"]),
        ("pickles", [py, os.path.join(root, "tests/scanner/make_pickles.py")]),
    ]
    out = []
    for name, cmd in jobs:
        d = os.path.join(tmp, name)
        os.makedirs(d)
        r = subprocess.run(cmd + [d], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        if r.returncode != 0:
            sys.stderr.write(r.stderr.decode(errors="replace"))
            raise SystemExit("count_findings: generator failed: " + " ".join(cmd))
        for dirpath, dirnames, filenames in os.walk(d):
            dirnames.sort()
            for f in sorted(filenames):
                if f == "manifest.tsv":
                    continue
                path = os.path.join(dirpath, f)
                out.append(("gen:" + name + "/" + os.path.relpath(path, d), path))
    return sorted(out)


def scan(modelgate, files):
    """Runs `modelgate scan -f json` on every file; returns label -> file object."""
    by_path = {path: label for label, path in files}
    result = {}
    for i in range(0, len(files), BATCH):
        chunk = [path for _, path in files[i:i + BATCH]]
        r = subprocess.run([modelgate, "scan", "-f", "json", "--"] + chunk,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        if r.returncode not in (0, 1, 2):
            sys.stderr.write(r.stderr.decode(errors="replace"))
            raise SystemExit("count_findings: modelgate exited %d" % r.returncode)
        try:
            doc = json.loads(r.stdout)
        except ValueError:
            sys.stderr.write(r.stderr.decode(errors="replace"))
            raise SystemExit("count_findings: modelgate wrote no JSON report")
        for f in doc["files"]:
            label = by_path.get(f["path"])
            if label is None:
                raise SystemExit("count_findings: unexpected path in report: " + f["path"])
            result[label] = f
    missing = [label for label, _ in files if label not in result]
    if missing:
        raise SystemExit("count_findings: no report for " + ", ".join(missing))
    return result


def render(files, reports):
    verdicts = collections.Counter()
    by_sev = collections.Counter()
    by_id = collections.Counter()
    sev_of = {}
    corroborations = collections.Counter()
    lines = []
    for label, _ in files:
        f = reports[label]
        verdicts[f["verdict"]] += 1
        ids = collections.Counter()
        for x in f["findings"]:
            by_sev[x["severity"]] += 1
            by_id[x["id"]] += 1
            ids[x["id"]] += 1
            sev_of.setdefault(x["id"], set()).add(x["severity"])
            for rule in x.get("corroborated_by", []):
                corroborations[(x["id"], rule)] += 1
        cell = " ".join("%s*%d" % (k, v) if v > 1 else k for k, v in sorted(ids.items()))
        lines.append("%-7s %s  %s" % (f["verdict"], label, cell or "-"))
    out = []
    out.append("# modelgate scan -f json over the test corpus (tests/corpus/count_findings.py)")
    out.append("files %d: %s" % (len(files), ", ".join(
        "%s %d" % (v, verdicts[v]) for v in ("pass", "reject", "error"))))
    out.append("findings %d: %s" % (sum(by_sev.values()), ", ".join(
        "%s %d" % (s, by_sev[s]) for s in SEVERITIES)))
    out.append("")
    out.append("## findings by id")
    for k in sorted(by_id):
        out.append("%6d  %-32s %s" % (by_id[k], k, "/".join(
            s for s in SEVERITIES if s in sev_of[k])))
    out.append("")
    out.append("## corroborated_by (a YARA rule folded into a built-in finding)")
    for (fid, rule), n in sorted(corroborations.items()):
        out.append("%6d  %s <- %s" % (n, fid, rule))
    if not corroborations:
        out.append("     0")
    out.append("")
    out.append("## per file: verdict, path, ids")
    out.extend(lines)
    return "\n".join(out) + "\n"


# An article and the next word ("a"/"an" as a word of its own), the word
# possibly quoted ("an 'int'").
ARTICLE = re.compile(r"(?<![\w'.-])(a|an|A|An) ['\"(]?([A-Za-z0-9][\w-]*)")
TWICE = re.compile(r"\b([A-Za-z]+) \1\b", re.IGNORECASE)
# The same reading as scanner::WithArticle (scanner/src/detect.cc), written
# again here so that one cannot excuse the other.
A_PREFIXES = ("one", "once", "uni", "use", "usu", "usa", "ure", "uti", "utf", "ubi", "eu", "str")
AN_PREFIXES = ("hour", "honest", "heir", "lzma")
AN_LETTERS = "aefhilmnorsx"  # letters whose names start with a vowel sound


def article_error(article, word):
    """Says why `article word` is not English, or "" when it is."""
    w = re.match(r"[A-Za-z0-9]*", word).group(0)
    lw = w.lower()
    if not lw:
        return ""
    if lw[0].isdigit():
        want_an = lw[0] == "8" or (lw[:2] in ("11", "18") and (len(lw) == 2 or not lw[2].isdigit()))
    elif lw.startswith(A_PREFIXES):
        want_an = False
    elif lw.startswith(AN_PREFIXES):
        want_an = True
    elif (w.isupper() and len(w) > 1) or not re.search(r"[aeiouy]", lw):
        want_an = lw[0] in AN_LETTERS
    else:
        want_an = lw[0] in "aeiou"
    if (article.lower() == "an") == want_an:
        return ""
    return "'%s %s'" % (article, word)


def english_errors(reports):
    errors = []
    for label, f in sorted(reports.items()):
        for x in f["findings"]:
            msg = x["message"]
            for m in ARTICLE.finditer(msg):
                why = article_error(m.group(1), m.group(2))
                if why:
                    errors.append("%s: %s: %s in %r" % (label, x["id"], why, msg))
            for m in TWICE.finditer(msg):
                errors.append("%s: %s: '%s' twice in %r" % (label, x["id"], m.group(1), msg))
    return errors


def write_dump(path, reports, prefixes):
    """Writes every file's whole report object (findings with their offsets
    and messages), keyed by label, as canonical JSON: two builds that judge
    alike write the same bytes (ci/s390x.sh compares the s390x build's with
    the x86-64 one's). The temporary and source directories in paths and
    messages become <gen> and <root>, so two runs can be compared."""
    text = json.dumps(reports, sort_keys=True, indent=1, ensure_ascii=True)
    for prefix, name in prefixes:
        text = text.replace(json.dumps(prefix)[1:-1], name)
    with open(path, "w") as f:
        f.write(text + "\n")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("modelgate")
    p.add_argument("--root", default=os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__)))))
    p.add_argument("--out")
    p.add_argument("--expected")
    p.add_argument("--check-english", action="store_true")
    p.add_argument("--dump")
    a = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="mg-corpus-") as tmp:
        files = repo_files(a.root) + generated_files(a.root, tmp)
        reports = scan(a.modelgate, files)
        if a.dump:
            write_dump(a.dump, reports, [(tmp, "<gen>"), (a.root, "<root>")])
    text = render(files, reports)
    status = 0
    if a.out:
        with open(a.out, "w") as f:
            f.write(text)
    elif not a.expected and not a.check_english:
        sys.stdout.write(text)
    if a.expected:
        with open(a.expected) as f:
            want = f.read()
        if want != text:
            sys.stdout.writelines(difflib.unified_diff(
                want.splitlines(True), text.splitlines(True), a.expected, "this build"))
            print("count_findings: the findings over the corpus changed; if that is intended, "
                  "regenerate with --out %s and commit it" % a.expected)
            status = 1
    if a.check_english:
        errors = english_errors(reports)
        for e in errors:
            print(e)
        if errors:
            print("count_findings: %d message(s) do not read as English" % len(errors))
            status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
