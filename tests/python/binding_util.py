"""What the Python binding's tests share: the modelgate program (argv[1]),
keys, signing, tampering, and where a pointer is mapped.

The package is imported from the source tree (PYTHONPATH=bindings/python,
set by tests/python/CMakeLists.txt) and loads $MODELGATE_LIBRARY.
"""
import hashlib
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "support"))
from mgtest import eq, run_text  # noqa: E402

MG = os.path.abspath(sys.argv[1]) if len(sys.argv) > 1 else None


def keygen(d, name="k", alg=None):
    """keygen makes d/keys/NAME.key and .pub; returns the prefix."""
    prefix = os.path.join(d, "keys", name)
    os.makedirs(os.path.dirname(prefix), exist_ok=True)
    argv = [MG, "keygen", "--out", prefix] + (["--alg", alg] if alg else [])
    code, _, err = run_text(argv)
    eq(code, 0, "keygen\n" + err)
    return prefix


def sign(key, path, *extra):
    """sign signs `path` (a file, an index or a directory) in place."""
    code, out, err = run_text([MG, "sign", "--quiet", "--key", key + ".key", *extra, path],
                              timeout=300)
    eq(code, 0, f"sign {path}\n{out}{err}")


def flip(path, offset):
    """flip inverts the byte at `offset` of `path` in place."""
    with open(path, "r+b") as f:
        f.seek(offset)
        b = f.read(1)
        f.seek(offset)
        f.write(bytes([b[0] ^ 0xFF]))


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def mapping_of(address):
    """mapping_of is the pathname of the mapping of this process that holds
    `address` ("" for an anonymous one), or None when none does."""
    with open("/proc/self/maps") as f:
        for line in f:
            parts = line.split(maxsplit=5)
            lo, hi = (int(x, 16) for x in parts[0].split("-"))
            if lo <= address < hi:
                return parts[5].strip() if len(parts) > 5 else ""
    return None


def status_kib(field):
    """status_kib is /proc/self/status's `field` (e.g. "RssAnon") in KiB."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise AssertionError(f"no {field} in /proc/self/status")


def raises(cls, fn, what):
    """raises runs fn and returns the exception of class `cls` it raised."""
    try:
        fn()
    except cls as e:
        return e
    except Exception as e:  # a wrong class fails with its own traceback
        raise AssertionError(f"{what}: raised {type(e).__name__}: {e}, want {cls.__name__}") from e
    raise AssertionError(f"{what}: nothing raised, want {cls.__name__}")


def owner_of(obj):
    """owner_of follows an array's .base / memoryview .obj / buffer
    ._mg_model chain to the modelgate model that keeps its memory, or None."""
    import modelgate
    seen = 0
    while obj is not None and seen < 16:
        if isinstance(obj, modelgate._Model):
            return obj
        nxt = getattr(obj, "_mg_model", None)
        if nxt is None:
            nxt = obj.obj if isinstance(obj, memoryview) else getattr(obj, "base", None)
        obj = nxt
        seen += 1
    return None
