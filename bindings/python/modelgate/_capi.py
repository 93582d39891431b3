"""_capi: ctypes declarations of libmodelgate's C API (api/include/modelgate.h).

Every type and prototype here mirrors the header exactly; the layouts of
mg_error, mg_open_options and mg_tensor_info are checked against a C
compiler's offsetof by tests/python/package_test.py. Nothing here
interprets results: the rest of the package does.

The library is found, in order, at $MODELGATE_LIBRARY (a full path), at the
path the CMake install recorded (modelgate/_libpath.py), then by
ctypes.util.find_library("modelgate"), then as "libmodelgate.so.0".
"""
import ctypes
import ctypes.util
import enum
import os

# MG_API_VERSION: the ABI this module was written against.
MG_API_VERSION = 1
MG_NO_OFFSET = (1 << 64) - 1
MG_OPEN_WRITABLE = 0x1


class Status(enum.IntEnum):
    """Status is mg_status."""
    OK = 0
    ARGUMENT = 1
    IO = 2
    FORMAT = 3
    VERIFY = 4
    KEY = 5
    UNSUPPORTED = 6
    INTERNAL = 7


class Mode(enum.IntEnum):
    """Mode is mg_mode."""
    EAGER = 0
    LAZY = 1
    COPY = 2


class SignatureKind(enum.IntEnum):
    """SignatureKind is mg_signature_kind."""
    ANY = 0
    EMBEDDED = 1
    DETACHED = 2


# C enums are int-sized on every ABI this library is built for (gcc, clang).
c_enum = ctypes.c_int


class mg_error(ctypes.Structure):
    _fields_ = [
        ("status", c_enum),
        ("id", ctypes.c_char * 64),
        ("offset", ctypes.c_uint64),
        ("file", ctypes.c_char * 1024),
        ("message", ctypes.c_char * 2048),
    ]


class mg_open_options(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("mode", c_enum),
        ("signature", c_enum),
        ("bundle_path", ctypes.c_char_p),
        ("flags", ctypes.c_uint32),
        ("hash_threads", ctypes.c_uint32),
    ]


class mg_tensor_info(ctypes.Structure):
    _fields_ = [
        # void*, not c_char_p: a name may hold NUL bytes (name_len says how many).
        ("name", ctypes.c_void_p),
        ("name_len", ctypes.c_size_t),
        ("dtype", ctypes.c_char_p),
        ("dtype_bits", ctypes.c_uint32),
        ("rank", ctypes.c_uint32),
        ("shape", ctypes.POINTER(ctypes.c_uint64)),
        ("byte_length", ctypes.c_uint64),
        ("file_index", ctypes.c_size_t),
    ]


# Opaque handles: only ever passed back to the library.
mg_keyring_p = ctypes.c_void_p
mg_model_p = ctypes.c_void_p
_err_p = ctypes.POINTER(mg_error)
_size_p = ctypes.POINTER(ctypes.c_size_t)
_voidpp = ctypes.POINTER(ctypes.c_void_p)

# name: (restype, argtypes), in the header's order.
_PROTOTYPES = {
    "mg_version": (ctypes.c_char_p, []),
    "mg_api_version": (ctypes.c_uint32, []),
    "mg_status_name": (ctypes.c_char_p, [c_enum]),
    "mg_keyring_new": (c_enum, [ctypes.POINTER(mg_keyring_p), _err_p]),
    "mg_keyring_free": (None, [mg_keyring_p]),
    "mg_keyring_add_pem": (c_enum, [mg_keyring_p, ctypes.c_char_p, ctypes.c_size_t,
                                    ctypes.c_char_p, _err_p]),
    "mg_keyring_add_file": (c_enum, [mg_keyring_p, ctypes.c_char_p, ctypes.c_char_p, _err_p]),
    "mg_keyring_count": (ctypes.c_size_t, [mg_keyring_p]),
    "mg_open_options_init": (None, [ctypes.POINTER(mg_open_options)]),
    "mg_open": (c_enum, [ctypes.c_char_p, mg_keyring_p, ctypes.POINTER(mg_open_options),
                         ctypes.POINTER(mg_model_p), _err_p]),
    "mg_model_free": (None, [mg_model_p]),
    "mg_model_file_count": (ctypes.c_size_t, [mg_model_p]),
    "mg_model_file_path": (ctypes.c_char_p, [mg_model_p, ctypes.c_size_t]),
    "mg_model_tensor_count": (ctypes.c_size_t, [mg_model_p]),
    "mg_model_tensor_info": (c_enum, [mg_model_p, ctypes.c_size_t,
                                      ctypes.POINTER(mg_tensor_info), _err_p]),
    "mg_model_find": (c_enum, [mg_model_p, ctypes.c_char_p, ctypes.c_size_t, _size_p, _err_p]),
    "mg_model_tensor_data": (c_enum, [mg_model_p, ctypes.c_size_t, _voidpp,
                                      ctypes.POINTER(ctypes.c_uint64), _err_p]),
    "mg_model_check_all": (c_enum, [mg_model_p, _err_p]),
    "mg_model_metadata_count": (ctypes.c_size_t, [mg_model_p, ctypes.c_size_t]),
    "mg_model_metadata_entry": (c_enum, [mg_model_p, ctypes.c_size_t, ctypes.c_size_t,
                                         _voidpp, _size_p, _voidpp, _size_p, _err_p]),
    "mg_model_verification_json": (ctypes.c_char_p, [mg_model_p]),
    # report_json is void**: the pointer must go back to mg_string_free.
    "mg_scan": (c_enum, [ctypes.c_char_p, ctypes.c_char_p, _voidpp,
                         ctypes.POINTER(ctypes.c_int), _err_p]),
    "mg_string_free": (None, [ctypes.c_void_p]),
}


def _candidates():
    env = os.environ.get("MODELGATE_LIBRARY")
    if env:
        # An explicit choice is the only one tried: a wrong path fails loudly
        # rather than quietly loading another build.
        return [env]
    out = []
    try:
        from . import _libpath  # written by the CMake install
        out.append(_libpath.LIBRARY)
    except ImportError:
        pass
    found = ctypes.util.find_library("modelgate")
    if found:
        out.append(found)
    out.append("libmodelgate.so.0")
    return out


def _load():
    errors = []
    for path in _candidates():
        try:
            lib = ctypes.CDLL(path)
            break
        except OSError as e:
            errors.append(f"{path}: {e}")
    else:
        raise ImportError("modelgate: cannot load libmodelgate (set MODELGATE_LIBRARY to its "
                          "full path): " + "; ".join(errors))
    for name, (restype, argtypes) in _PROTOTYPES.items():
        fn = getattr(lib, name)
        fn.restype = restype
        fn.argtypes = argtypes
    version = lib.mg_api_version()
    if version != MG_API_VERSION:
        raise ImportError(f"modelgate: {lib._name} has C API version {version}, "
                          f"this package needs {MG_API_VERSION}")
    return lib


lib = _load()
