#!/usr/bin/python3
"""Writes the seed corpus of fuzz_onnx: the ONNX files of the scanner tests
(tests/scanner/make_onnx_keras.py: python3-onnx's writer, a benign and a
hostile model per rule) plus crafted wire-format edge cases.

Usage: /usr/bin/python3 fuzz/make_onnx_corpus.py   (Debian's python3-onnx)
The corpus directory is rewritten from scratch, so the output is deterministic.
"""

import importlib.util
import os
import shutil
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
CORPUS = os.path.join(HERE, "corpus", "fuzz_onnx")
MAKER = os.path.join(HERE, "..", "tests", "scanner", "make_onnx_keras.py")


def main():
    spec = importlib.util.spec_from_file_location("make_onnx_keras", MAKER)
    mk = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mk)
    shutil.rmtree(CORPUS, ignore_errors=True)
    os.makedirs(CORPUS)
    with tempfile.TemporaryDirectory() as tmp:
        mk.write_onnx(tmp)
        for root, _, files in os.walk(tmp):
            for name in sorted(files):
                if not name.endswith(".onnx"):
                    continue
                rel = os.path.relpath(os.path.join(root, name), tmp).replace(os.sep, "_")
                shutil.copyfile(os.path.join(root, name), os.path.join(CORPUS, rel))
    crafted = {
        "overlong_varint.onnx": bytes([0x08] + [0xff] * 10 + [0x01]),
        "huge_length.onnx": bytes([0x08, 0x08, 0x3a]) + bytes([0xff] * 9 + [0x01]),
        "group.onnx": bytes([0x08, 0x08, 0x1b, 0x1c]),
        "empty_graph.onnx": bytes([0x08, 0x08, 0x3a, 0x00]),
    }
    for name, data in crafted.items():
        with open(os.path.join(CORPUS, name), "wb") as f:
            f.write(data)


if __name__ == "__main__":
    main()
