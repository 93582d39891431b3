"""The test runner shared by the Python test scripts (cli_test.py,
sarif_test.py, tests/integrations/*): standard library only.

    from runner import test, eq, main
    @test
    def something(d): ...          # d: a fresh temp directory (realpath)
    sys.exit(main())

main() runs every registered test in order, prints "ok NAME" / "FAIL NAME"
with the traceback, then "N passed, M failed", and returns non-zero when a
test failed or none ran. Nothing is ever skipped.
"""
import os
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
