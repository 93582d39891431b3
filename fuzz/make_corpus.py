#!/usr/bin/env python3
"""Writes the seed corpus for fuzz_safetensors and its libFuzzer dictionary.

Usage: python3 fuzz/make_corpus.py   (from anywhere; stdlib only)

Seeds are small (< 4 KiB): valid files laid out like the reference writer
(compact JSON, header space-padded so 8 + N is a multiple of 8) and one
hostile file per safetensors rule in README.md. File names say which:
`ok_*` must be accepted with default limits, `bad_*` must be rejected,
`ok_tight_*` are valid but break the fuzzer's tight limits. The corpus
directory is rewritten from scratch each run, so the output is deterministic.
"""

import json
import os
import shutil
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
CORPUS = os.path.join(HERE, "corpus", "fuzz_safetensors")
DICT = os.path.join(HERE, "fuzz_safetensors.dict")

DTYPE_BITS = {
    "BOOL": 8, "U8": 8, "I8": 8, "F8_E5M2": 8, "F8_E4M3": 8, "F8_E8M0": 8,
    "F8_E4M3FNUZ": 8, "F8_E5M2FNUZ": 8, "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6,
    "I16": 16, "U16": 16, "F16": 16, "BF16": 16, "I32": 32, "U32": 32,
    "F32": 32, "I64": 64, "U64": 64, "F64": 64, "C64": 64,
}


def pad_header(text):
    """Reference layout: header padded with spaces so 8 + N % 8 == 0."""
    raw = text.encode("utf-8") if isinstance(text, str) else text
    raw += b" " * ((8 - (8 + len(raw)) % 8) % 8)
    return raw


def frame(header, data=b"", pad=True, length=None):
    """8-byte LE length, header bytes, data bytes."""
    raw = header.encode("utf-8") if isinstance(header, str) else header
    if pad:
        raw = pad_header(raw)
    n = len(raw) if length is None else length
    return struct.pack("<Q", n) + raw + data


def nbytes(dtype, shape):
    n = 1
    for d in shape:
        n *= d
    return n * DTYPE_BITS[dtype] // 8


def model(tensors, metadata=None, order=None):
    """tensors: list of (name, dtype, shape). Offsets tile in list order.

    Returns (header_text, data)."""
    entries = []
    off = 0
    data = bytearray()
    for i, (name, dtype, shape) in enumerate(tensors):
        size = nbytes(dtype, shape)
        entries.append((name, {"dtype": dtype, "shape": shape, "data_offsets": [off, off + size]}))
        data += bytes((i * 37 + j) & 0xFF for j in range(size))
        off += size
    obj = {}
    if metadata is not None:
        obj["__metadata__"] = metadata
    for name, entry in (entries if order is None else [entries[i] for i in order]):
        obj[name] = entry
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False), bytes(data)


def seeds():
    out = {}

    def ok(name, tensors, metadata=None, **kw):
        header, data = model(tensors, metadata, **kw)
        out["ok_" + name] = frame(header, data)

    # --- valid -----------------------------------------------------------
    out["ok_empty_object"] = frame("{}")
    out["ok_empty_object_unpadded"] = frame("{}", pad=False)
    ok("metadata_only", [], {"format": "pt", "note": "no tensors"})
    ok("empty_metadata", [("a", "F32", [2])], {})
    ok("single_f32", [("weight", "F32", [2, 3])])
    ok("with_metadata", [("a.weight", "F16", [4, 4]), ("a.bias", "F16", [4])],
       {"format": "pt", "author": "modelgate"})
    ok("scalar", [("s", "F64", [])])
    ok("zero_size", [("z", "F32", [0]), ("w", "F32", [2]), ("y", "I8", [3, 0, 5])])
    ok("zero_size_at_end", [("w", "U8", [3]), ("z", "BF16", [0, 7])])
    ok("only_zero_size", [("a", "F32", [0]), ("b", "F32", [0, 0])])
    ok("all_dtypes", [("t_" + d.lower(), d, [2] if DTYPE_BITS[d] != 6 else [4])
                      for d in DTYPE_BITS])
    ok("f4", [("packed", "F4", [2, 3])])
    ok("f6_e2m3", [("p", "F6_E2M3", [4])])
    ok("f6_e3m2", [("p", "F6_E3M2", [2, 4])])
    ok("rank_8", [("r", "U8", [1, 1, 2, 1, 1, 1, 1, 3])])
    ok("unsorted_keys", [("a", "I32", [1]), ("b", "I32", [1]), ("c", "I32", [2])],
       order=[2, 0, 1])
    ok("unicode_names", [("ß.权重", "F32", [1]), ("emoji_😀", "U8", [2])],
       {"描述": "模型"})
    out["ok_escaped_name"] = frame(
        '{"a\\u002eb":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},'
        '"\\u005f_metadata__x":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}', b"\x01\x02")
    out["ok_escaped_metadata"] = frame(
        '{"\\u005f_metadata__":{"k":"v"},"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}', b"x")
    out["ok_trailing_whitespace"] = frame(
        '{"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}} \t\r\n  ', b"ab", pad=False)
    out["ok_inner_whitespace"] = frame(
        '{ "a" : { "dtype" : "U8" , "shape" : [ 2 ] , "data_offsets" : [ 0 , 2 ] } }', b"ab")
    out["ok_field_order"] = frame(
        '{"a":{"data_offsets":[0,4],"shape":[2],"dtype":"I16"}}', b"abcd")
    out["ok_metadata_last"] = frame(
        '{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"__metadata__":{"k":"v"}}', b"x")
    ok("stsig_like_metadata", [("w", "F32", [1])],
       {"stsig.v1": "[]", "format": "pt"})
    # Valid, but past the fuzzer's tight limits (4 tensors, rank 3, names 16).
    ok("tight_five_tensors", [("t%d" % i, "U8", [1]) for i in range(5)])
    ok("tight_rank_4", [("r", "U8", [1, 1, 1, 2])])
    ok("tight_long_name", [("a_name_of_twenty_b", "U8", [1])])

    # --- hostile: framing ------------------------------------------------
    out["bad_empty_file"] = b""
    out["bad_short_length"] = b"\x02\x00\x00\x00"
    out["bad_length_past_eof"] = frame("{}", length=64)
    out["bad_length_over_limit"] = struct.pack("<Q", 100_000_001) + b"{}      "
    out["bad_length_huge"] = struct.pack("<Q", 2**64 - 1) + b"{}      "
    out["bad_header_empty"] = frame(b"", pad=False)
    out["bad_header_utf8"] = frame(b'{"\xff":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}', b"x")
    out["bad_header_overlong_utf8"] = frame(b'{"\xc0\xaf":{"dtype":"U8","shape":[0],"data_offsets":[0,0]}}')
    out["bad_header_surrogate_utf8"] = frame(b'{"\xed\xa0\x80":{"dtype":"U8","shape":[0],"data_offsets":[0,0]}}')
    out["bad_header_bom"] = frame(b"\xef\xbb\xbf{}")
    out["bad_header_leading_space"] = frame(" {}")
    out["bad_header_array"] = frame("[]")
    out["bad_header_nul_padding"] = frame(b"{}\x00\x00\x00\x00\x00\x00", pad=False)
    out["bad_json_syntax"] = frame('{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}', b"x")
    out["bad_json_trailing_garbage"] = frame('{"a":{"dtype":"U8","shape":[0],"data_offsets":[0,0]}}x')
    out["bad_json_trailing_comma"] = frame('{"a":{"dtype":"U8","shape":[0],"data_offsets":[0,0]},}')
    out["bad_json_two_objects"] = frame("{}{}")
    out["bad_json_lone_surrogate"] = frame('{"\\ud800":{"dtype":"U8","shape":[0],"data_offsets":[0,0]}}')
    out["bad_json_depth"] = frame('{"__metadata__":' + "[" * 40 + "]" * 40 + "}")
    out["bad_json_depth_objects"] = frame('{"a":' + '{"b":' * 30 + "1" + "}" * 31)

    # --- hostile: keys and names ------------------------------------------
    out["bad_duplicate_tensor"] = frame(
        '{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},'
        '"a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}', b"xy")
    out["bad_duplicate_tensor_escaped"] = frame(
        '{"ab":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},'
        '"a\\u0062":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}', b"xy")
    out["bad_duplicate_entry_key"] = frame(
        '{"a":{"dtype":"U8","dtype":"I8","shape":[1],"data_offsets":[0,1]}}', b"x")
    out["bad_duplicate_metadata_key"] = frame(
        '{"__metadata__":{"k":"v","k":"w"},"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}', b"x")
    out["bad_duplicate_metadata_escaped"] = frame(
        '{"__metadata__":{"k":"v"},"\\u005f_metadata__":{"k":"w"}}')
    out["bad_empty_name"] = frame('{"":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}', b"x")
    out["bad_nul_in_name"] = frame('{"a\\u0000b":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}', b"x")
    out["bad_control_in_name"] = frame('{"a\\nb":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}', b"x")
    out["bad_raw_control_in_string"] = frame(b'{"a\x01b":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}', b"x")

    # --- hostile: metadata -------------------------------------------------
    out["bad_metadata_null"] = frame('{"__metadata__":null}')
    out["bad_metadata_array"] = frame('{"__metadata__":["a"]}')
    out["bad_metadata_value_number"] = frame('{"__metadata__":{"k":1}}')
    out["bad_metadata_value_null"] = frame('{"__metadata__":{"k":null}}')
    out["bad_metadata_nested"] = frame('{"__metadata__":{"k":{"x":"y"}}}')

    # --- hostile: entries ----------------------------------------------------
    t = '{"a":%s}'
    out["bad_entry_not_object"] = frame(t % '"U8"')
    out["bad_entry_null"] = frame(t % "null")
    out["bad_entry_unknown_field"] = frame(
        t % '{"dtype":"U8","shape":[1],"data_offsets":[0,1],"align":8}', b"x")
    out["bad_entry_missing_shape"] = frame(t % '{"dtype":"U8","data_offsets":[0,1]}', b"x")
    out["bad_entry_missing_offsets"] = frame(t % '{"dtype":"U8","shape":[1]}', b"x")
    out["bad_dtype_number"] = frame(t % '{"dtype":8,"shape":[1],"data_offsets":[0,1]}', b"x")
    out["bad_dtype_unknown"] = frame(t % '{"dtype":"C128","shape":[1],"data_offsets":[0,16]}', b"x" * 16)
    out["bad_dtype_lowercase"] = frame(t % '{"dtype":"f32","shape":[1],"data_offsets":[0,4]}', b"x" * 4)
    out["bad_shape_not_array"] = frame(t % '{"dtype":"U8","shape":1,"data_offsets":[0,1]}', b"x")
    out["bad_shape_negative"] = frame(t % '{"dtype":"U8","shape":[-1],"data_offsets":[0,1]}', b"x")
    out["bad_shape_float"] = frame(t % '{"dtype":"U8","shape":[1.0],"data_offsets":[0,1]}', b"x")
    out["bad_shape_exponent"] = frame(t % '{"dtype":"U8","shape":[1e0],"data_offsets":[0,1]}', b"x")
    out["bad_shape_string"] = frame(t % '{"dtype":"U8","shape":["1"],"data_offsets":[0,1]}', b"x")
    out["bad_shape_u64_overflow"] = frame(
        t % '{"dtype":"U8","shape":[18446744073709551616],"data_offsets":[0,1]}', b"x")
    out["bad_shape_product_overflow"] = frame(
        t % '{"dtype":"U8","shape":[4294967296,4294967296],"data_offsets":[0,0]}')
    out["bad_shape_bits_overflow"] = frame(
        t % '{"dtype":"F64","shape":[2305843009213693952],"data_offsets":[0,0]}')
    out["bad_rank_65"] = frame(t % ('{"dtype":"U8","shape":[%s],"data_offsets":[0,1]}'
                                    % ",".join(["1"] * 65)), b"x")
    out["bad_partial_byte_f4"] = frame(t % '{"dtype":"F4","shape":[3],"data_offsets":[0,1]}', b"x")
    out["bad_partial_byte_f6"] = frame(t % '{"dtype":"F6_E2M3","shape":[2],"data_offsets":[0,1]}', b"x")
    out["bad_offsets_one"] = frame(t % '{"dtype":"U8","shape":[1],"data_offsets":[0]}', b"x")
    out["bad_offsets_three"] = frame(t % '{"dtype":"U8","shape":[1],"data_offsets":[0,1,2]}', b"x")
    out["bad_offsets_negative"] = frame(t % '{"dtype":"U8","shape":[1],"data_offsets":[-1,0]}', b"x")
    out["bad_offsets_float"] = frame(t % '{"dtype":"U8","shape":[1],"data_offsets":[0,1.5]}', b"x")

    # --- hostile: data layout --------------------------------------------------
    out["bad_size_mismatch"] = frame(t % '{"dtype":"F32","shape":[2],"data_offsets":[0,4]}', b"x" * 4)
    out["bad_offsets_reversed"] = frame(t % '{"dtype":"U8","shape":[0],"data_offsets":[1,0]}', b"x")
    out["bad_gap_at_start"] = frame(t % '{"dtype":"U8","shape":[1],"data_offsets":[1,2]}', b"xy")
    out["bad_gap_between"] = frame(
        '{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},'
        '"b":{"dtype":"U8","shape":[1],"data_offsets":[2,3]}}', b"xyz")
    out["bad_overlap"] = frame(
        '{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},'
        '"b":{"dtype":"U8","shape":[2],"data_offsets":[2,4]}}', b"wxyz")
    out["bad_alias"] = frame(
        '{"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},'
        '"b":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}}', b"xy")
    out["bad_out_of_bounds"] = frame(t % '{"dtype":"U8","shape":[4],"data_offsets":[0,4]}', b"xy")
    out["bad_offset_u64_max"] = frame(
        t % '{"dtype":"U8","shape":[1],"data_offsets":[18446744073709551615,0]}', b"x")
    out["bad_trailing_bytes"] = frame(t % '{"dtype":"U8","shape":[1],"data_offsets":[0,1]}',
                                      b"x" + b"PK\x05\x06" + b"\x00" * 18)
    out["bad_trailing_bytes_no_tensors"] = frame("{}", b"\x80\x04K\x01.")
    out["ok_tight_six_metadata_entries"] = frame(
        '{"__metadata__":{%s}}' % ",".join('"k%d":"v"' % i for i in range(6)))
    return out


def dictionary():
    lines = []

    def esc(raw):
        s = ""
        for b in raw:
            c = chr(b)
            if c == "\\":
                s += "\\\\"
            elif c == '"':
                s += '\\"'
            elif 0x20 <= b < 0x7F:
                s += c
            else:
                s += "\\x%02X" % b
        return s

    def add(name, value):
        raw = value.encode("utf-8") if isinstance(value, str) else value
        lines.append('%s="%s"' % (name, esc(raw)))

    for i, tok in enumerate(["{", "}", "[", "]", ":", ",", '"', "{}", "[]", '""', "null", "true",
                             "false", "0", "1", "-1", "-0", "1.0", "1e3", "18446744073709551615",
                             "18446744073709551616", "4294967296", "9223372036854775808",
                             " ", "\t", "\n", "\r"]):
        add("json_%d" % i, tok)
    for i, key in enumerate(['"dtype"', '"shape"', '"data_offsets"', '"__metadata__"',
                             '"\\u005f_metadata__"', '"\\u005F\\u005Fmetadata\\u005f\\u005f"',
                             '"\\u0000"', '"\\u001f"', '"\\ud800"', '"\\udc00"',
                             '"\\ud83d\\ude00"', '"\\""', '"\\\\"', '"\\/"', '"\\b"', '"\\n"',
                             '"\\u0064type"', '"stsig.v1"', '"stsig.v1.sha256"', '"format"',
                             '"dtype":', '"shape":[', '"data_offsets":[', '"__metadata__":{',
                             '{"dtype":"U8","shape":[1],"data_offsets":[0,1]}']):
        add("key_%d" % i, key)
    for d in list(DTYPE_BITS) + ["C128", "f32", "F8_E4M3FN"]:
        add("dtype_%s" % d, '"%s"' % d)
    for i, raw in enumerate([b"\xef\xbb\xbf", b"\xc0\x80", b"\xed\xa0\x80", b"\xf4\x90\x80\x80",
                             b"\xc3", b"\xff"]):
        add("utf8_%d" % i, raw)
    for i, n in enumerate([0, 2, 8, 64, 4096, 100_000_000, 100_000_001, 2**63, 2**64 - 1]):
        add("len_%d" % i, struct.pack("<Q", n))
    names = [l.split("=", 1)[0] for l in lines]
    assert len(names) == len(set(names))
    return ("# libFuzzer dictionary for fuzz_safetensors (written by make_corpus.py):\n"
            "# JSON tokens, keys, dtypes, UTF-8 edge cases, 8-byte LE length fields.\n"
            + "\n".join(lines) + "\n")


def main():
    if os.path.isdir(CORPUS):
        shutil.rmtree(CORPUS)
    os.makedirs(CORPUS)
    for name, data in sorted(seeds().items()):
        assert len(data) < 4096, name
        with open(os.path.join(CORPUS, name + ".safetensors"), "wb") as f:
            f.write(data)
    with open(DICT, "w") as f:
        f.write(dictionary())
    print("wrote %d seeds to %s and %s" % (len(seeds()), CORPUS, DICT))


if __name__ == "__main__":
    main()
