#!/usr/bin/env python3
"""Write GGUF fixtures for the GGUF parser (scanner/src/gguf.h), field by field.

    make_gguf.py OUTDIR            fixtures + OUTDIR/manifest.tsv
    make_gguf.py --corpus OUTDIR   the same files as fuzz seeds (no manifest)

Written from the GGUF spec (ggml docs/gguf.md) and gguf-py's layout, not with
gguf-py (not packaged in Debian): header (magic, version, tensor and KV
counts), KVs (key, type, value), tensor infos (name, n_dims, dims, type,
offset), zero padding to general.alignment, then each tensor's bytes padded to
the alignment. v1 writes counts, lengths and dims as uint32; a big-endian
file writes every field big-endian after the "GGUF" magic.

manifest.tsv: file, "ok" (a value is returned) or "fail" (nullopt), and the
exact set of MG-GGUF-* ids the parser must report ("-" for none). Standard
library only.
"""
import os
import shutil
import struct
import sys

# gguf_type
U8, I8, U16, I16, U32, I32, F32V, BOOL, STRING, ARRAY, U64, I64, F64V = range(13)
SCALAR_FMT = {U8: "B", I8: "b", U16: "H", I16: "h", U32: "I", I32: "i", F32V: "f",
              BOOL: "B", U64: "Q", I64: "q", F64V: "d"}

# ggml_type: (id, block elements, block bytes), from gguf-py GGML_QUANT_SIZES.
QK_K = 256
T = {
    "F32": (0, 1, 4), "F16": (1, 1, 2), "Q4_0": (2, 32, 18), "Q8_0": (8, 32, 34),
    "Q4_K": (12, QK_K, 2 + 2 + QK_K // 2 + 12), "Q6_K": (14, QK_K, 2 + QK_K // 2 + QK_K // 4 + QK_K // 16),
    "BF16": (30, 1, 2), "MXFP4": (39, 32, 17), "IQ4_XS": (23, QK_K, 2 + 2 + QK_K // 2 + QK_K // 64),
}

CHAT_TEMPLATE = ("{% for message in messages %}<|{{ message['role'] }}|>\n"
                 "{{ message['content'] }}</s>\n{% endfor %}"
                 "{% if add_generation_prompt %}<|assistant|>\n{% endif %}")


def nbytes(type_name, dims):
    _, block, size = T[type_name]
    n = 1
    for d in dims:
        n *= d
    return n // block * size


class Tensor:
    def __init__(self, name, type_name, dims, offset=None, fill=0x11, raw_type=None, n_dims=None):
        self.name = name.encode() if isinstance(name, str) else name
        self.type_name = type_name
        self.type_id = raw_type if raw_type is not None else T[type_name][0]
        self.dims = dims
        self.n_dims = len(dims) if n_dims is None else n_dims
        self.offset = offset  # None: the next aligned offset
        self.fill = fill
        self.size = nbytes(type_name, dims) if raw_type is None else 0


class Gguf:
    """A GGUF file: append KVs and tensors, then build()."""

    def __init__(self, version=3, be=False, alignment=32):
        self.version, self.be, self.alignment = version, be, alignment
        self.kvs = []        # encoded KV bytes
        self.tensors = []
        self.tensor_count = None  # override of the header's count
        self.kv_count = None
        self.magic = b"GGUF"
        self.final_pad = True
        self.header_pad_byte = 0
        self.header_pad = True
        self.gap_pad_byte = 0
        self.tail = b""

    def p(self, fmt, *v):
        return struct.pack((">" if self.be else "<") + fmt, *v)

    def count(self, n):
        return self.p("I" if self.version == 1 else "Q", n)

    def s(self, b):
        b = b.encode() if isinstance(b, str) else b
        return self.count(len(b)) + b

    def value(self, t, v):
        if t == STRING:
            return self.s(v)
        if t == ARRAY:
            et, items = v
            out = self.p("I", et) + self.count(len(items))
            return out + b"".join(self.value(et, x) for x in items)
        return self.p(SCALAR_FMT[t], v)

    def kv(self, key, t, v):
        self.kvs.append(self.s(key) + self.p("I", t) + self.value(t, v))
        return self

    def raw_kv(self, b):
        self.kvs.append(b)
        return self

    def tensor(self, *a, **kw):
        self.tensors.append(Tensor(*a, **kw))
        return self

    def pad(self, n):
        return (-n) % self.alignment

    def build(self):
        # Offsets: each tensor at the next aligned offset unless given.
        pos = 0
        for t in self.tensors:
            if t.offset is None:
                t.offset = pos + self.pad(pos)
            pos = max(pos, t.offset + t.size)
        head = self.magic + self.p("I", self.version)
        head += self.count(len(self.tensors) if self.tensor_count is None else self.tensor_count)
        head += self.count(len(self.kvs) if self.kv_count is None else self.kv_count)
        head += b"".join(self.kvs)
        for t in self.tensors:
            head += self.s(t.name) + self.p("I", t.n_dims)
            head += b"".join(self.p("I" if self.version == 1 else "Q", d) for d in t.dims)
            head += self.p("I", t.type_id) + self.p("Q", t.offset)
        if self.header_pad:
            head += bytes([self.header_pad_byte]) * self.pad(len(head))
        data = bytearray()
        for t in sorted(self.tensors, key=lambda t: t.offset):
            if len(data) < t.offset:
                data += bytes([self.gap_pad_byte]) * (t.offset - len(data))
            end = t.offset + t.size
            if len(data) < end:
                data += bytes([t.fill]) * (end - len(data))
        if self.final_pad:
            data += bytes(self.pad(len(data)))
        return bytes(head) + bytes(data) + self.tail


def model(version=3, be=False, alignment=None):
    """A small llama-like model: typed metadata, a vocabulary, a chat template
    and tensors of several ggml types."""
    g = Gguf(version, be, 32 if alignment is None else alignment)
    g.kv("general.architecture", STRING, "llama")
    g.kv("general.name", STRING, "tiny-llama-héllo")
    if alignment is not None:
        g.kv("general.alignment", U32, alignment)
    g.kv("general.quantization_version", U32, 2)
    g.kv("llama.context_length", U64, 2048)
    g.kv("llama.rope.freq_base", F32V, 10000.0)
    g.kv("llama.attention.layer_norm_rms_epsilon", F64V, 1e-5)
    g.kv("llama.expert_used_count", I8, -1)
    g.kv("llama.use_parallel_residual", BOOL, 1)
    g.kv("tokenizer.ggml.model", STRING, "llama")
    g.kv("tokenizer.ggml.tokens", ARRAY, (STRING, ["<s>", "</s>", "héllo", "▁wörld"]))
    g.kv("tokenizer.ggml.scores", ARRAY, (F32V, [0.0, -1.0, -2.5, -3.0]))
    g.kv("tokenizer.ggml.token_type", ARRAY, (I32, [3, 3, 1, 1]))
    g.kv("tokenizer.chat_template", STRING, CHAT_TEMPLATE)
    g.tensor("token_embd.weight", "F32", [8, 4])
    g.tensor("blk.0.attn_q.weight", "Q4_0", [64, 2])
    g.tensor("blk.0.ffn_down.weight", "Q4_K", [256, 1])
    g.tensor("output_norm.weight", "F16", [8])
    g.tensor("output.weight", "Q8_0", [32, 3, 1, 2])
    return g


def fixtures():
    """(name, bytes, "ok"|"fail", ids)."""
    out = []

    def add(name, data, expect, ids="-"):
        out.append((name, data, expect, ids))

    for v in (1, 2, 3):
        add(f"benign-v{v}-le.gguf", model(v).build(), "ok")
    add("benign-v3-be.gguf", model(3, be=True).build(), "ok")
    add("benign-v2-be.gguf", model(2, be=True).build(), "ok")
    add("benign-align64.gguf", model(3, alignment=64).build(), "ok")
    g = model()
    g.final_pad = False
    add("benign-no-final-pad.gguf", g.build(), "ok")
    add("benign-no-tensors.gguf", Gguf().kv("general.architecture", STRING, "llama").build(), "ok")
    g = Gguf().kv("general.architecture", STRING, "llama")
    g.tensor("a", "BF16", [16]).tensor("b", "MXFP4", [64]).tensor("c", "IQ4_XS", [256]).tensor("d", "Q6_K", [256])
    add("benign-types.gguf", g.build(), "ok")
    add("benign-empty-array.gguf", Gguf().kv("x.empty", ARRAY, (STRING, [])).build(), "ok")

    # Framing.
    g = model()
    g.magic = b"GGUX"
    add("bad-magic.gguf", g.build(), "fail", "MG-GGUF-MAGIC")
    add("bad-version-4.gguf", model(4).build(), "fail", "MG-GGUF-VERSION")
    add("bad-version-0.gguf", b"GGUF" + bytes(28), "fail", "MG-GGUF-VERSION")
    full = model().build()
    add("bad-truncated-kv.gguf", full[:100], "fail", "MG-GGUF-TRUNCATED")
    g = model(1)
    g.raw_kv(g.s("x.long") + g.p("I", STRING) + g.p("I", 1 << 20))
    add("bad-truncated-v1-string.gguf", g.build(), "fail", "MG-GGUF-TRUNCATED")
    g = Gguf()
    g.tensor_count = 1 << 60
    add("bad-limit-tensors.gguf", g.build(), "fail", "MG-GGUF-LIMIT")
    g = Gguf()
    g.raw_kv(g.s("x.bad") + g.p("I", 13) + bytes(8))
    add("bad-value-type.gguf", g.build(), "fail", "MG-GGUF-VALUE-TYPE")
    g = Gguf()
    g.raw_kv(g.s("x.bad") + g.p("I", ARRAY) + g.p("I", 200) + g.count(1) + bytes(8))
    add("bad-array-elem-type.gguf", g.build(), "fail", "MG-GGUF-VALUE-TYPE")

    # Strings and keys.
    add("bad-utf8-value.gguf", model().kv("general.description", STRING, b"ok \xff\xfe").build(),
        "ok", "MG-GGUF-UTF8")
    add("bad-utf8-tensor-name.gguf", model().tensor(b"w\xc3(", "F32", [4]).build(), "ok", "MG-GGUF-UTF8")
    add("bad-key-empty.gguf", model().kv("", U32, 1).build(), "ok", "MG-GGUF-BAD-KEY")
    add("bad-key-non-ascii.gguf", model().kv("général.name", U32, 1).build(), "ok", "MG-GGUF-BAD-KEY")
    # strcmp finds this key as general.alignment in llama.cpp; gguf-py does not.
    add("bad-key-nul.gguf", model().kv(b"general.alignment\x00x", U32, 64).build(), "ok",
        "MG-GGUF-NUL-IN-NAME")
    add("bad-duplicate-key.gguf", model().kv("general.architecture", STRING, "gpt2").build(), "ok",
        "MG-GGUF-DUPLICATE-KEY")
    add("bad-duplicate-key-be.gguf", model(3, be=True).kv("general.name", STRING, "x").build(), "ok",
        "MG-GGUF-DUPLICATE-KEY")
    add("bad-duplicate-tensor.gguf", model().tensor("output_norm.weight", "F16", [8]).build(), "ok",
        "MG-GGUF-DUPLICATE-TENSOR")
    g = model().tensor(b"w\x00a", "F32", [4]).tensor(b"w\x00b", "F32", [4])
    add("bad-duplicate-tensor-nul.gguf", g.build(), "ok", "MG-GGUF-NUL-IN-NAME,MG-GGUF-DUPLICATE-TENSOR")
    add("bad-bool.gguf", model().kv("x.flag", BOOL, 2).build(), "ok", "MG-GGUF-BAD-BOOL")
    add("bad-bool-array.gguf", model().kv("x.flags", ARRAY, (BOOL, [0, 1, 7])).build(), "ok",
        "MG-GGUF-BAD-BOOL")
    add("bad-nested-array.gguf", model().kv("x.nested", ARRAY, (ARRAY, [(U8, [1, 2]), (STRING, ["a"])])).build(),
        "ok", "MG-GGUF-NESTED-ARRAY")

    # Alignment.
    add("bad-alignment-type.gguf", model().kv("general.alignment", U64, 32).build(), "fail",
        "MG-GGUF-ALIGNMENT")
    g = model()
    g.kv("general.alignment", U32, 48)
    add("bad-alignment-48.gguf", g.build(), "fail", "MG-GGUF-ALIGNMENT")
    add("bad-alignment-0.gguf", model().kv("general.alignment", U32, 0).build(), "fail", "MG-GGUF-ALIGNMENT")

    # Tensor infos.
    add("bad-dims-5.gguf", model().tensor("t", "F32", [1, 1, 1, 1, 1]).build(), "fail", "MG-GGUF-DIMS")
    add("bad-dims-0.gguf", model().tensor("t", "F32", []).build(), "ok", "MG-GGUF-DIMS")
    add("bad-dim-zero.gguf", model().tensor("t", "F32", [0, 4]).build(), "ok", "MG-GGUF-DIM-ZERO")
    g = model()
    g.tensors.append(Tensor("t", "F32", [1 << 32, 1 << 32], offset=0))
    g.tensors[-1].size = 0
    add("bad-shape-overflow.gguf", g.build(), "fail", "MG-GGUF-SHAPE-OVERFLOW")
    add("bad-tensor-type-4.gguf", model().tensor("t", "F32", [4], raw_type=4).build(), "fail",
        "MG-GGUF-TENSOR-TYPE")
    add("bad-tensor-type-40.gguf", model().tensor("t", "F32", [4], raw_type=40).build(), "fail",
        "MG-GGUF-TENSOR-TYPE")
    g = model()
    g.tensors.append(Tensor("t", "Q4_0", [31, 2]))
    g.tensors[-1].size = 36
    add("bad-block-size.gguf", g.build(), "fail", "MG-GGUF-BLOCK-SIZE")
    add("bad-name-too-long.gguf", model().tensor("n" * 64, "F32", [4]).build(), "ok", "MG-GGUF-NAME-TOO-LONG")
    add("ok-name-63.gguf", model().tensor("n" * 63, "F32", [4]).build(), "ok")

    # Layout.
    g = Gguf().tensor("a", "F32", [4], offset=0).tensor("b", "F32", [4], offset=16)
    add("bad-misaligned.gguf", g.build(), "ok", "MG-GGUF-MISALIGNED")
    g = model().tensor("far", "F32", [4], offset=1 << 20)
    g.final_pad = False
    data = g.build()
    add("bad-out-of-bounds.gguf", data[:len(data) - (1 << 20)], "fail", "MG-GGUF-OUT-OF-BOUNDS")
    add("bad-missing-bytes.gguf", full[:-40], "fail", "MG-GGUF-OUT-OF-BOUNDS")
    g = Gguf().tensor("a", "F32", [8], offset=0).tensor("b", "F32", [8], offset=0)
    add("bad-overlap.gguf", g.build(), "fail", "MG-GGUF-OVERLAP")
    g = Gguf().tensor("a", "F32", [16], offset=0).tensor("b", "F32", [4], offset=32)
    add("bad-overlap-inside.gguf", g.build(), "fail", "MG-GGUF-OVERLAP")
    g = Gguf().tensor("b", "F32", [8], offset=32).tensor("a", "F32", [8], offset=0)
    add("bad-tensor-order.gguf", g.build(), "ok", "MG-GGUF-TENSOR-ORDER")
    g = Gguf().tensor("a", "F32", [8], offset=0).tensor("b", "F32", [8], offset=96)
    add("bad-hidden-gap.gguf", g.build(), "ok", "MG-GGUF-HIDDEN-DATA")
    g = model()
    g.tail = b"PK\x03\x04 hidden zip"
    add("bad-hidden-trailing.gguf", g.build(), "ok", "MG-GGUF-HIDDEN-DATA")
    g = Gguf().kv("general.architecture", STRING, "llama")
    g.tail = bytes(32)
    add("bad-hidden-trailing-no-tensors.gguf", g.build(), "ok", "MG-GGUF-HIDDEN-DATA")
    g = model()
    g.header_pad_byte = 0x41
    add("bad-hidden-header-padding.gguf", g.build(), "ok", "MG-GGUF-HIDDEN-DATA")
    g = Gguf().tensor("a", "F32", [2], offset=0).tensor("b", "F32", [2], offset=32)
    g.gap_pad_byte = 0x42
    add("bad-hidden-tensor-padding.gguf", g.build(), "ok", "MG-GGUF-HIDDEN-DATA")
    g = Gguf().kv("general.architecture", STRING, "llam")  # the header ends unaligned
    g.header_pad = False
    add("bad-data-start-past-end.gguf", g.build(), "fail", "MG-GGUF-OUT-OF-BOUNDS")
    return out


def main(argv):
    corpus = len(argv) == 3 and argv[1] == "--corpus"
    if len(argv) != 2 and not corpus:
        sys.stderr.write(__doc__)
        return 2
    outdir = argv[-1]
    if corpus and os.path.isdir(outdir):
        shutil.rmtree(outdir)
    os.makedirs(outdir, exist_ok=True)
    lines = []
    for name, data, expect, ids in fixtures():
        with open(os.path.join(outdir, name), "wb") as f:
            f.write(data)
        lines.append(f"{name}\t{expect}\t{ids}\n")
    if not corpus:
        with open(os.path.join(outdir, "manifest.tsv"), "w", encoding="utf-8") as f:
            f.writelines(lines)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
