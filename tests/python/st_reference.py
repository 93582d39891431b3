"""A reference reader and writer of safetensors, written from the format's
specification and independent of modelgate (struct, json, numpy only):

    8 bytes   N, the header length, an unsigned 64-bit little-endian integer
    N bytes   a UTF-8 JSON object: {"name": {"dtype": "F32", "shape": [2, 3],
              "data_offsets": [begin, end]}, ..., "__metadata__": {str: str}}
    rest      the data; offsets are relative to its start, little-endian
              elements, row-major.

The tests compare modelgate's arrays with what this reads.
"""
import json
import struct

import numpy as np

# The dtypes numpy has, each spelled with its byte order: the file is
# little-endian on every host.
NUMPY_DTYPES = {
    "BOOL": "|b1", "U8": "|u1", "I8": "|i1", "U16": "<u2", "I16": "<i2", "U32": "<u4",
    "I32": "<i4", "U64": "<u8", "I64": "<i8", "F16": "<f2", "F32": "<f4", "F64": "<f8",
    "C64": "<c8",
}
DTYPE_BYTES = {"BOOL": 1, "U8": 1, "I8": 1, "F8_E4M3": 1, "F8_E5M2": 1, "U16": 2, "I16": 2,
               "F16": 2, "BF16": 2, "U32": 4, "I32": 4, "F32": 4, "U64": 8, "I64": 8, "F64": 8,
               "C64": 8}


def read_header(data):
    """read_header is (header dict, start of the data) of the file bytes."""
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n].decode("utf-8"))
    return header, 8 + n


def read(path):
    """read is ({name: numpy array}, metadata) for the file at `path`; a
    dtype numpy lacks is returned as raw bytes (uint8)."""
    with open(path, "rb") as f:
        data = f.read()
    header, start = read_header(data)
    metadata = header.pop("__metadata__", None)
    out = {}
    for name, t in header.items():
        begin, end = t["data_offsets"]
        raw = data[start + begin:start + end]
        count = 1
        for d in t["shape"]:
            count *= d
        assert len(raw) == count * DTYPE_BYTES[t["dtype"]], name
        spec = NUMPY_DTYPES.get(t["dtype"])
        if spec is None:
            out[name] = np.frombuffer(raw, dtype="|u1").copy()
        else:
            out[name] = np.frombuffer(raw, dtype=spec).reshape(t["shape"]).copy()
    return out, metadata


def write(path, tensors, metadata=None):
    """write lays out `tensors` ({name: (dtype, shape, little-endian bytes)}
    or {name: numpy array}) as the reference writer does: sorted by name,
    packed, header space-padded to 8 bytes."""
    header = {}
    blobs = []
    offset = 0
    for name in sorted(tensors):
        t = tensors[name]
        if isinstance(t, np.ndarray):
            le = np.ascontiguousarray(t, dtype=t.dtype.newbyteorder("<"))
            t = (numpy_dtype_name(t.dtype), t.shape, le.tobytes())
        dtype, shape, raw = t
        header[name] = {"dtype": dtype, "shape": list(shape),
                        "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    if metadata is not None:
        header["__metadata__"] = metadata
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        for b in blobs:
            f.write(b)
    return path


def numpy_dtype_name(dtype):
    for name, spec in NUMPY_DTYPES.items():
        if np.dtype(spec).newbyteorder("=") == dtype.newbyteorder("="):
            return name
    raise TypeError(f"no safetensors dtype for {dtype}")


def data_range(path, name):
    """data_range is the absolute [begin, end) of tensor `name`'s bytes."""
    with open(path, "rb") as f:
        data = f.read(8)
        (n,) = struct.unpack("<Q", data)
        header = json.loads(f.read(n))
    begin, end = header[name]["data_offsets"]
    return 8 + n + begin, 8 + n + end
