"""modelgate: verified loading of safetensors models (numpy, torch).

The safetensors API, with trusted keys: a model's bytes are handed out only
after they matched a signature by one of `keys`, and they are read through
one file descriptor, so the bytes verified are the bytes mapped.

    import modelgate
    with modelgate.safe_open("model.safetensors", framework="pt",
                             keys=["release.pub"]) as f:
        for name in f.keys():
            t = f.get_tensor(name)

    tensors = modelgate.torch.load_file("model.safetensors", keys=["release.pub"])
    arrays = modelgate.numpy.load_file("models/llama/", keys=[pem_text])
    report = modelgate.scan("download/")   # dict; report.verdict 0 pass, 1 reject

Tensors are zero-copy views of the verified memory (numpy's array
interface, torch.from_numpy) and keep the model open while they live. numpy
arrays are read-only unless writable=True; torch tensors are writable, over
a copy-on-write mapping: writing to one never changes the file.

Built on the C API (libmodelgate.so.0) with ctypes: the package is pure
Python, needs no compiler, and goes through the same ABI as C and Java.
"""
import ctypes
import json
import os
import sys
import weakref

from . import _capi
from ._capi import Mode, SignatureKind, Status

__all__ = ["safe_open", "scan", "ScanReport", "Error", "VerificationError", "ScanError",
           "UnsupportedDtypeError", "Status", "Mode", "SignatureKind", "library_version"]

__version__ = "0.1.0"

_lib = _capi.lib
# _HOST_ORDER is the byte order of this interpreter's host; the files are
# little-endian whatever the host (tests force the other order).
_HOST_ORDER = sys.byteorder


class Error(Exception):
    """Error is what every modelgate failure raises (or a subclass of it).

    .status       Status (the C API's mg_status)
    .finding_id   stable id such as "MG-SIG-TENSOR-MISMATCH", or None
    .offset       byte offset in .file the error is about, or None
    .file         the file the error is about, or None
    .message      one line naming the rule broken
    """

    def __init__(self, message, status=Status.INTERNAL, finding_id=None, offset=None, file=None):
        super().__init__(message)
        self.message = message
        self.status = status
        self.finding_id = finding_id
        self.offset = offset
        self.file = file

    def __str__(self):
        return f"{self.finding_id}: {self.message}" if self.finding_id else self.message


class VerificationError(Error):
    """VerificationError: the model was refused (unsigned, untrusted, bytes
    that differ from what was signed, a file the strict parser rejects)."""


class ScanError(Error):
    """ScanError: scan() could not judge the path (no report was made)."""


class UnsupportedDtypeError(Error, TypeError):
    """UnsupportedDtypeError: a tensor's dtype has no equivalent in the
    framework asked for (.dtype, .framework, .tensor say which)."""

    def __init__(self, dtype, framework, tensor, why):
        super().__init__(f"tensor {tensor!r} has dtype {dtype}, which {framework} cannot "
                         f"represent ({why})", Status.UNSUPPORTED)
        self.dtype = dtype
        self.framework = framework
        self.tensor = tensor


# The statuses that mean the model itself was refused.
_STATUS_CLASS = {Status.VERIFY: VerificationError, Status.FORMAT: VerificationError}


def _error(status, err, cls=None):
    """_error makes the exception for a failed call from its mg_error."""
    try:
        status = Status(status)
    except ValueError:
        pass
    cls = cls or _STATUS_CLASS.get(status, Error)
    message = err.message.decode("utf-8", "replace") or f"{_status_name(status)} error"
    return cls(message, status,
               err.id.decode("utf-8", "replace") or None,
               None if err.offset == _capi.MG_NO_OFFSET else err.offset,
               os.fsdecode(err.file) or None)


def _status_name(status):
    return _lib.mg_status_name(int(status)).decode()


def _check(status, err, cls=None):
    if status != Status.OK:
        raise _error(status, err, cls)


def _path_bytes(path, what):
    """_path_bytes encodes a path for the C API; a NUL byte would silently
    cut it short there, so it is refused here."""
    b = os.fsencode(os.fspath(path))
    if b"\0" in b:
        raise Error(f"{what} {path!r} contains a NUL byte", Status.ARGUMENT)
    return b


def library_version():
    """library_version is libmodelgate's version string ("0.1.0")."""
    return _lib.mg_version().decode()


# ---- keys ---------------------------------------------------------------------


def _is_pem(data):
    return data.lstrip().startswith(b"-----BEGIN")


class _Keyring:
    """_Keyring owns an mg_keyring filled from `keys`: PEM text (str or
    bytes) or paths of PEM files (str, bytes, os.PathLike). One key alone
    (not in a list) is accepted too."""

    def __init__(self, keys):
        if keys is None:
            keys = []
        elif isinstance(keys, (str, bytes, os.PathLike)):
            keys = [keys]
        handle = _capi.mg_keyring_p()
        err = _capi.mg_error()
        _check(_lib.mg_keyring_new(ctypes.byref(handle), ctypes.byref(err)), err)
        self.handle = handle
        self._finalizer = weakref.finalize(self, _lib.mg_keyring_free, handle)
        for i, key in enumerate(keys):
            if isinstance(key, str) and _is_pem(key.encode("utf-8", "surrogateescape")):
                self._add_pem(key.encode("utf-8"), f"keys[{i}]")
            elif isinstance(key, bytes) and _is_pem(key):
                self._add_pem(key, f"keys[{i}]")
            elif isinstance(key, (str, bytes, os.PathLike)):
                path = _path_bytes(key, "key file")
                _check(_lib.mg_keyring_add_file(handle, path, None, ctypes.byref(err)), err)
            else:
                raise TypeError(f"keys[{i}]: a PEM str/bytes or a path, not {type(key).__name__}")

    def _add_pem(self, pem, name):
        err = _capi.mg_error()
        _check(_lib.mg_keyring_add_pem(self.handle, pem, len(pem), name.encode(),
                                       ctypes.byref(err)), err)

    def __len__(self):
        return _lib.mg_keyring_count(self.handle)


# ---- the model -------------------------------------------------------------------


class TensorInfo:
    """TensorInfo: what the verified header says of one tensor."""
    __slots__ = ("index", "name", "dtype", "dtype_bits", "shape", "byte_length", "file_index")

    def __init__(self, index, c):
        self.index = index
        self.name = ctypes.string_at(c.name, c.name_len).decode("utf-8", "surrogateescape")
        self.dtype = c.dtype.decode()
        self.dtype_bits = c.dtype_bits
        self.shape = tuple(c.shape[i] for i in range(c.rank))
        self.byte_length = c.byte_length
        self.file_index = c.file_index

    def __repr__(self):
        return f"TensorInfo({self.name!r}, {self.dtype}, {list(self.shape)})"


_MODES = {"eager": Mode.EAGER, "lazy": Mode.LAZY, "copy": Mode.COPY}
_SIGNATURES = {"any": SignatureKind.ANY, "embedded": SignatureKind.EMBEDDED,
               "detached": SignatureKind.DETACHED}


class _View:
    """_View is `length` bytes at `address` of a model's memory, as numpy's
    array interface (so numpy.asarray makes a uint8 array over them without a
    copy, whose .base is this view) holding the _Model, so the memory stays
    mapped while any array made from it lives. (A ctypes array would do too,
    but ctypes keeps every array type it makes: one per tensor length.)"""
    __slots__ = ("__array_interface__", "_mg_model")

    def __init__(self, model, address, length):
        self._mg_model = model
        self.__array_interface__ = {"data": (address, not model.writable), "shape": (length,),
                                    "typestr": "|u1", "version": 3}


class _Model:
    """_Model owns one mg_model. Every buffer handed out holds a reference
    to it (buffer._mg_model), so the mapping lives as long as any array or
    tensor made from it; mg_model_free runs when the last one goes."""

    def __init__(self, path, keys, mode, signature, bundle, writable, hash_threads):
        if mode not in _MODES:
            raise ValueError(f"mode must be one of {sorted(_MODES)}, not {mode!r}")
        if signature not in _SIGNATURES:
            raise ValueError(f"signature must be one of {sorted(_SIGNATURES)}, not {signature!r}")
        # ctypes would wrap -1 to 2**32-1 silently.
        if not isinstance(hash_threads, int) or not 0 <= hash_threads < 2 ** 32:
            raise ValueError(f"hash_threads must be an int >= 0 (0: one per core), not "
                             f"{hash_threads!r}")
        self.keyring = keys if isinstance(keys, _Keyring) else _Keyring(keys)
        opts = _capi.mg_open_options()
        _lib.mg_open_options_init(ctypes.byref(opts))
        opts.mode = _MODES[mode]
        opts.signature = _SIGNATURES[signature]
        bundle_bytes = None if bundle is None else _path_bytes(bundle, "bundle")
        opts.bundle_path = bundle_bytes
        opts.flags = _capi.MG_OPEN_WRITABLE if writable else 0
        opts.hash_threads = hash_threads
        handle = _capi.mg_model_p()
        err = _capi.mg_error()
        _check(_lib.mg_open(_path_bytes(path, "model path"), self.keyring.handle,
                            ctypes.byref(opts), ctypes.byref(handle), ctypes.byref(err)), err)
        self.handle = handle
        finalizer = weakref.finalize(self, _lib.mg_model_free, handle)
        # At interpreter exit arrays may still be reachable from other
        # finalizers: leave the mapping to the OS rather than free it under them.
        finalizer.atexit = False
        self.mode = mode
        self.writable = bool(writable)
        self.files = [os.fsdecode(_lib.mg_model_file_path(handle, i))
                      for i in range(_lib.mg_model_file_count(handle))]
        self.tensors = []
        info = _capi.mg_tensor_info()
        for i in range(_lib.mg_model_tensor_count(handle)):
            _check(_lib.mg_model_tensor_info(handle, i, ctypes.byref(info), ctypes.byref(err)), err)
            self.tensors.append(TensorInfo(i, info))

    def find(self, name):
        if not isinstance(name, str):
            raise TypeError(f"tensor name must be str, not {type(name).__name__}")
        b = name.encode("utf-8", "surrogateescape")
        index = ctypes.c_size_t()
        err = _capi.mg_error()
        _check(_lib.mg_model_find(self.handle, b, len(b), ctypes.byref(index), ctypes.byref(err)),
               err)
        return self.tensors[index.value]

    def buffer(self, info):
        """buffer is the tensor's verified bytes as a _View of the model's
        memory (no copy), or None when it has none. Lazy mode hashes the
        tensor here and raises VerificationError on a mismatch."""
        data = ctypes.c_void_p()
        length = ctypes.c_uint64()
        err = _capi.mg_error()
        _check(_lib.mg_model_tensor_data(self.handle, info.index, ctypes.byref(data),
                                         ctypes.byref(length), ctypes.byref(err)), err)
        if length.value != info.byte_length:
            raise Error(f"tensor {info.name!r}: the library gave {length.value} bytes, its "
                        f"header says {info.byte_length}", Status.INTERNAL)
        if length.value == 0:
            return None
        return _View(self, data.value, length.value)

    def check_all(self):
        err = _capi.mg_error()
        _check(_lib.mg_model_check_all(self.handle, ctypes.byref(err)), err)

    def metadata(self, file_index):
        out = {}
        key, value = ctypes.c_void_p(), ctypes.c_void_p()
        key_len, value_len = ctypes.c_size_t(), ctypes.c_size_t()
        err = _capi.mg_error()
        for i in range(_lib.mg_model_metadata_count(self.handle, file_index)):
            _check(_lib.mg_model_metadata_entry(self.handle, file_index, i, ctypes.byref(key),
                                                ctypes.byref(key_len), ctypes.byref(value),
                                                ctypes.byref(value_len), ctypes.byref(err)), err)
            k = ctypes.string_at(key.value, key_len.value) if key_len.value else b""
            v = ctypes.string_at(value.value, value_len.value) if value_len.value else b""
            out[k.decode("utf-8", "surrogateescape")] = v.decode("utf-8", "surrogateescape")
        return out

    def verification(self):
        return json.loads(_lib.mg_model_verification_json(self.handle))


# ---- dtypes ----------------------------------------------------------------------

# numpy dtypes, spelled little-endian: the file's order on every host.
_NUMPY_DTYPES = {
    "BOOL": "|b1", "U8": "|u1", "I8": "|i1", "U16": "<u2", "I16": "<i2", "U32": "<u4",
    "I32": "<i4", "U64": "<u8", "I64": "<i8", "F16": "<f2", "F32": "<f4", "F64": "<f8",
    "C64": "<c8",
}
# torch attribute names; getattr decides, since older torch lacks some
# (1.13: no uint16/32/64, no float8_*).
_TORCH_DTYPES = {
    "BOOL": "bool", "U8": "uint8", "I8": "int8", "U16": "uint16", "I16": "int16",
    "U32": "uint32", "I32": "int32", "U64": "uint64", "I64": "int64", "F16": "float16",
    "BF16": "bfloat16", "F32": "float32", "F64": "float64", "C64": "complex64",
    "F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2",
}
# _SWAP_BYTES: the width of the little-endian words a dtype is made of
# (complex64 is two float32s); what a big-endian host reverses.
_SWAP_BYTES = {"C64": 4}


def _swap_unit(info):
    return _SWAP_BYTES.get(info.dtype, max(info.dtype_bits // 8, 1))


def _swapped_bytes(view, unit):
    """_swapped_bytes is a copy of `view`'s bytes with every `unit`-byte word reversed."""
    import numpy as np
    words = np.asarray(view).reshape(-1, unit)
    return bytearray(words[:, ::-1].tobytes())


def _numpy_dtype(info):
    """_numpy_dtype is the tensor's numpy dtype, little-endian; raises
    UnsupportedDtypeError when numpy has none."""
    import numpy as np
    spec = _NUMPY_DTYPES.get(info.dtype)
    if spec is None:
        raise UnsupportedDtypeError(info.dtype, f"numpy {np.__version__}", info.name,
                                    "numpy has no such dtype; open with framework='pt'"
                                    if info.dtype in _TORCH_DTYPES else "no such dtype")
    return np.dtype(spec)


def _to_numpy(info, view, host_order):
    """_to_numpy is the tensor as a numpy array over `view` (no copy), in the
    file's little-endian dtype; on a big-endian host (host_order "big") a
    copy in the host's order, so arithmetic runs at native speed. The array
    is read-only unless the model was opened writable."""
    import numpy as np
    dtype = _numpy_dtype(info)
    if view is None:
        array = np.frombuffer(b"", dtype=dtype)
    else:
        array = np.asarray(view).view(dtype)
    # byteorder is "|" for one-byte types; "=" for "<" ones on a little-endian host.
    if host_order != "little" and dtype.byteorder != "|":
        # newbyteorder(">") is native order on the big-endian host this
        # path is for ('=' would be little-endian where it is tested).
        writeable = array.flags.writeable
        array = array.astype(dtype.newbyteorder(">"))
        array.flags.writeable = writeable
    return array.reshape(info.shape)


def _torch_dtype(info):
    """_torch_dtype is the tensor's torch dtype; raises UnsupportedDtypeError
    when this torch has none."""
    import torch
    attr = _TORCH_DTYPES.get(info.dtype)
    dtype = getattr(torch, attr, None) if attr else None
    if not isinstance(dtype, torch.dtype):
        raise UnsupportedDtypeError(info.dtype, f"torch {torch.__version__}", info.name,
                                    f"torch has no torch.{attr}" if attr else "no such dtype")
    return dtype


def _to_torch(info, view, host_order):
    """_to_torch is the tensor as a torch tensor over `view` (no copy: torch
    tensors are writable, so the model's memory must be, which its
    copy-on-write mapping is); on a big-endian host a byte-swapped copy."""
    import numpy as np
    import torch
    dtype = _torch_dtype(info)
    if view is None:
        return torch.empty(info.shape, dtype=dtype)
    unit = _swap_unit(info)
    if host_order != "little" and unit > 1:
        raw = torch.frombuffer(_swapped_bytes(view, unit), dtype=torch.uint8)
    else:
        # from_numpy keeps the array, and through it the view and the model.
        raw = torch.from_numpy(np.asarray(view))
    return raw.view(dtype).view(info.shape)


_FRAMEWORKS = {"np": "np", "numpy": "np", "pt": "pt", "torch": "pt", "pytorch": "pt"}


class _Slice:
    """_Slice is get_slice's answer, as safetensors' PySafeSlice:
    get_shape(), get_dtype() and numpy-style indexing of the verified view."""

    def __init__(self, handle, model, info):
        self._handle = handle
        self._model = model  # a slice, as a tensor, outlives its handle's close()
        self._info = info

    def get_shape(self):
        return list(self._info.shape)

    def get_dtype(self):
        return self._info.dtype

    def __len__(self):
        if not self._info.shape:
            raise TypeError("len() of a 0-d tensor")
        return self._info.shape[0]

    def __getitem__(self, index):
        return self._handle._get(self._info, _HOST_ORDER, self._model)[index]


def _trusted(keys, verification):
    """_trusted is the keys named by keys= or by verification= (the spelling
    articles on safetensors give `load_file(path, verification=public_key)`,
    which the real library lacks): one of the two, never both."""
    if keys is not None and verification is not None:
        raise Error("give the trusted keys as keys= or as verification=, not both",
                    Status.ARGUMENT)
    return keys if keys is not None else verification


def _always_verified(verify_checksums):
    """_always_verified refuses verify_checksums other than True: articles on
    safetensors show safe_open(..., verify_checksums=True); here every byte
    handed out is always checked, and there is no switch to turn that off."""
    if verify_checksums is not True:
        raise Error(f"verify_checksums={verify_checksums!r}: modelgate always verifies what it "
                    "hands out; there is no unverified mode", Status.ARGUMENT)


class safe_open:
    """safe_open(path, framework="np", device="cpu", *, keys, mode="eager",
    bundle=None, signature="any", writable=None, hash_threads=0,
    verification=None, verify_checksums=True)

    Opens `path` verified against `keys` (PEM str/bytes or key file paths;
    at least one): a .safetensors file, a *.safetensors.index.json with its
    shards, or a directory of a sharded model. mode: "eager" (every byte
    hashed before anything is handed out), "lazy" (each tensor hashed on
    first get_tensor, which raises VerificationError on a mismatch, and
    again on every later try) or "copy" (hashed into private memory: later
    writes to the file change nothing handed out). signature: "any"
    (a detached bundle when there is one, else embedded), "embedded",
    "detached"; bundle: the bundle's path (default DIR/model.sig, FILE.sig).
    framework "np" gives read-only numpy arrays (writable=True: writable
    copy-on-write ones), "pt" torch tensors (always writable, copy-on-write;
    moved to `device` unless "cpu"). Raises VerificationError when the model
    is refused, Error for anything else. Use it as a context manager;
    tensors stay valid after it closes. verification= is another name for
    keys= (give one); verify_checksums must be True (it always is).
    """

    def __init__(self, filename, framework="np", device="cpu", *, keys=None, mode="eager",
                 bundle=None, signature="any", writable=None, hash_threads=0,
                 verification=None, verify_checksums=True):
        keys = _trusted(keys, verification)
        _always_verified(verify_checksums)
        if framework not in _FRAMEWORKS:
            raise Error(f"framework {framework!r} is not supported (np, pt)", Status.ARGUMENT)
        self._framework = _FRAMEWORKS[framework]
        if self._framework == "pt":
            import torch  # fail before opening, not at the first tensor
            self._device = torch.device(device)
            if writable is False:
                raise Error("framework 'pt' needs writable=True or None: torch tensors are "
                            "always writable", Status.ARGUMENT)
            writable = True
        else:
            if device != "cpu":
                raise Error(f"framework 'np' has no device {device!r}", Status.ARGUMENT)
            self._device = None
            writable = bool(writable)
        self._model = _Model(filename, keys, mode, signature, bundle, writable, hash_threads)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        """close drops this handle's hold on the model; tensors already handed
        out keep it mapped until they go."""
        self._model = None

    def _open_model(self):
        if self._model is None:
            raise Error("safe_open handle is closed", Status.ARGUMENT)
        return self._model

    def keys(self):
        """keys lists the tensor names, sorted bytewise (UTF-8)."""
        return [t.name for t in self._open_model().tensors]

    def tensors(self):
        """tensors lists TensorInfo (name, dtype, shape, byte_length, file)."""
        return list(self._open_model().tensors)

    def files(self):
        """files lists the model's safetensors files."""
        return list(self._open_model().files)

    def get_tensor(self, name):
        """get_tensor is the verified tensor `name` (zero-copy)."""
        return self._get(self._open_model().find(name), _HOST_ORDER)

    def _get(self, info, host_order, model=None):
        model = model or self._open_model()
        # The dtype is judged first: a tensor that cannot be represented is
        # refused without hashing it.
        try:
            if self._framework == "pt":
                _torch_dtype(info)
            else:
                _numpy_dtype(info)
        except UnsupportedDtypeError as e:
            e.file = model.files[info.file_index]
            raise
        if self._framework == "pt":
            t = _to_torch(info, model.buffer(info), host_order)
            return t if self._device.type == "cpu" else t.to(self._device)
        return _to_numpy(info, model.buffer(info), host_order)

    def get_slice(self, name):
        """get_slice(name)[...] indexes the verified tensor numpy-style;
        get_shape() and get_dtype() read only the header."""
        model = self._open_model()
        return _Slice(self, model, model.find(name))

    def metadata(self, file=None):
        """metadata is the signed __metadata__ (without the signature's own
        stsig.* keys), None when there is none. For a model of several files
        `file` (an index into files()) picks one; None merges them, and a key
        the files give different values is an Error."""
        model = self._open_model()
        if file is not None:
            merged = model.metadata(file)
        else:
            merged = {}
            for i, path in enumerate(model.files):
                for k, v in model.metadata(i).items():
                    if merged.setdefault(k, v) != v:
                        raise Error(f"metadata {k!r} differs between the model's files "
                                    f"({path}); pass file=INDEX", Status.ARGUMENT)
        return merged or None

    def verification(self):
        """verification says how the model was verified (kind, mode, keys,
        files with their SHA-256 where hashed whole)."""
        return self._open_model().verification()

    def check_all(self):
        """check_all hashes what lazy mode has not yet hashed; raises
        VerificationError on the first mismatch."""
        self._open_model().check_all()


# ---- scanning ----------------------------------------------------------------------


class ScanReport(dict):
    """ScanReport is the modelgate.report/v1 document as a dict; .verdict is
    the program's exit code (0 every file passed, 1 a file was rejected)."""
    verdict = None

    @property
    def passed(self):
        return self.verdict == 0


def scan(path, policy=None):
    """scan judges the file or directory at `path` as `modelgate scan -f
    json` does (or `modelgate check --policy POLICY -f json`) and returns
    the report. A rejected file is a report with verdict 1, not an error;
    ScanError means no report was made (unreadable path, bad policy)."""
    report = ctypes.c_void_p()
    verdict = ctypes.c_int()
    err = _capi.mg_error()
    policy_bytes = None if policy is None else _path_bytes(policy, "policy")
    _check(_lib.mg_scan(_path_bytes(path, "scan path"), policy_bytes, ctypes.byref(report),
                        ctypes.byref(verdict), ctypes.byref(err)), err, ScanError)
    try:
        text = ctypes.string_at(report.value)
    finally:
        _lib.mg_string_free(report)
    out = ScanReport(json.loads(text))
    out.verdict = verdict.value
    return out


from . import numpy, torch  # noqa: E402,F401  (modelgate.numpy.load_file, modelgate.torch.load_file)
