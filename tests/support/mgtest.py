"""What the Python test scripts share (cli_test.py, sarif_test.py,
tests/integrations/*): the runner, eq, and the safetensors builder.
Standard library only.

    from mgtest import test, eq, main, st_bytes
    @test
    def something(d): ...          # d: a fresh temp directory (realpath)
    sys.exit(main())

main() runs every registered test in order, prints "ok NAME" / "FAIL NAME"
with the traceback, then "N passed, M failed", and returns non-zero when a
test failed or none ran. Nothing is ever skipped.
"""
import json
import os
import struct
import sys
import tempfile
import traceback

TESTS = []


def test(fn):
    TESTS.append(fn)
    return fn


def eq(got, want, what=""):
    if got != want:
        raise AssertionError(f"{what}: got {got!r}, want {want!r}")


def main(prefix="mg-test-"):
    passed = failed = 0
    for fn in TESTS:
        with tempfile.TemporaryDirectory(prefix=prefix) as d:
            try:
                fn(os.path.realpath(d))
                passed += 1
                print(f"ok   {fn.__name__}", flush=True)
            except Exception:
                failed += 1
                print(f"FAIL {fn.__name__}", flush=True)
                traceback.print_exc(file=sys.stdout)
    print(f"{passed} passed, {failed} failed")
    return 1 if failed or not passed else 0


def write(d, name, data):
    """Writes data (bytes, or str as UTF-8) to d/name, making directories;
    returns the path."""
    path = os.path.join(d, name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())
    return path


def run_text(argv, env=None, stdin=None, cwd=None, timeout=60):
    """Runs argv, capturing both streams; returns (exit code, stdout, stderr)
    decoded as UTF-8 with replacement. stdin None inherits the caller's."""
    import subprocess
    p = subprocess.run(argv, capture_output=True, input=stdin, timeout=timeout, env=env, cwd=cwd)
    return p.returncode, p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")


def run_on_tty(argv, env=None, timeout=60):
    """Runs argv with stdout on a pseudo-terminal (stderr discarded);
    returns (exit code, stdout bytes)."""
    import pty
    import subprocess
    master, slave = pty.openpty()
    p = subprocess.Popen(argv, stdout=slave, stderr=subprocess.DEVNULL, env=env)
    os.close(slave)
    out = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO once the program has exited and closed its end
            break
        if not chunk:
            break
        out += chunk
    p.wait(timeout=timeout)
    os.close(master)
    return p.returncode, out


def st_bytes(header, data=b"", trailing=b""):
    """A safetensors file laid out like the reference writer (space padded)."""
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    return struct.pack("<Q", len(h)) + h + data + trailing


SARIF_SCHEMAS = ("sarif-schema-2.1.0-errata01.json", "sarif-2.1.0-rtm.5.json")


def sarif_validators(schema_dir):
    """[(name, Draft-4 validator)] for both SARIF 2.1.0 schemas kept in
    schema_dir (tests/sarif/schemas: what GitHub's upload-sarif checks).
    Never skips: a missing python3-jsonschema or schema fails the run."""
    try:
        import jsonschema
    except ImportError as e:
        print(f"FAIL python3-jsonschema is not importable by {sys.executable} ({e}): "
              "run `bash ci/install-deps.sh`")
        sys.exit(1)
    validators = []
    for name in SARIF_SCHEMAS:
        path = os.path.join(schema_dir, name)
        if not os.path.isfile(path):
            print(f"FAIL schema {path} is missing")
            sys.exit(1)
        with open(path, encoding="utf-8") as f:
            schema = json.load(f)
        jsonschema.Draft4Validator.check_schema(schema)
        validators.append((name, jsonschema.Draft4Validator(schema)))
    return validators


def validate_sarif(doc, validators):
    """Raises AssertionError naming the schema and the first error's path."""
    for name, v in validators:
        errors = sorted(v.iter_errors(doc), key=lambda e: list(e.absolute_path))
        if errors:
            e = errors[0]
            raise AssertionError(f"{name}: {len(errors)} error(s); first at "
                                 f"{'/'.join(map(str, e.absolute_path))}: {e.message}")
