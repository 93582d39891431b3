#!/usr/bin/python3
"""Writes the ONNX and Keras fixtures of onnx_keras_test into OUT_DIR.

ONNX files come from Debian's python3-onnx (onnx.helper, onnx.save with
external data); .h5 models from python3-h5py (a root "model_config"
attribute holding a Keras config, as Keras 2 / tf.keras save_model writes
it); .keras files are zips written with zipfile as the Keras 3 saving
format lays them out (config.json, metadata.json, model.weights.h5). One
benign file and at least one hostile file per rule. Run with Debian's
/usr/bin/python3.

usage: make_onnx_keras.py OUT_DIR
"""

import base64
import json
import marshal
import os
import sys
import zipfile

import h5py
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def save(model, path):
    onnx.save(model, path)


def model_of(graph, opsets=(("", 17),), functions=()):
    m = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid(d, v) for d, v in opsets],
        functions=list(functions),
        producer_name="make_onnx_keras",
    )
    return m


def add_graph(name="g", nodes=None, initializers=None):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 2])
    w = numpy_helper.from_array(np.arange(4, dtype=np.float32).reshape(2, 2), "w")
    return helper.make_graph(
        nodes if nodes is not None else [helper.make_node("Add", ["x", "w"], ["y"])],
        name,
        [x],
        [y],
        initializer=initializers if initializers is not None else [w],
    )


def external_tensor(name, location, extra=()):
    t = TensorProto()
    t.name = name
    t.data_type = TensorProto.FLOAT
    t.dims.extend([2, 2])
    t.data_location = TensorProto.EXTERNAL
    for k, v in (("location", location), ("offset", "0"), ("length", "16")) + tuple(extra):
        e = t.external_data.add()
        e.key = k
        e.value = v
    return t


def write_onnx(out):
    save(model_of(add_graph()), os.path.join(out, "benign.onnx"))

    # onnx.save's own external data writer: a relative file beside the model.
    ext_dir = os.path.join(out, "external")
    os.makedirs(ext_dir, exist_ok=True)
    m = model_of(add_graph())
    onnx.save(m, os.path.join(ext_dir, "model.onnx"), save_as_external_data=True,
              all_tensors_to_one_file=True, location="weights.bin", size_threshold=0)

    for fname, loc in (("external_absolute.onnx", "/etc/passwd"),
                       ("external_dotdot.onnx", "../../secret.bin"),
                       ("external_backslash.onnx", "..\\secret.bin"),
                       ("external_drive.onnx", "C:/secret.bin")):
        save(model_of(add_graph(initializers=[external_tensor("w", loc)])),
             os.path.join(out, fname))
    save(model_of(add_graph(initializers=[external_tensor("w", "w.bin", (("evil", "1"),))])),
         os.path.join(out, "external_unknown_key.onnx"))

    # Custom operator domains: a node, and an opset_import alone.
    custom = helper.make_node("Evil", ["x", "w"], ["y"], domain="com.evil")
    save(model_of(add_graph(nodes=[custom]), opsets=(("", 17), ("com.evil", 1))),
         os.path.join(out, "custom_op.onnx"))
    save(model_of(add_graph(), opsets=(("", 17), ("com.evil", 1))),
         os.path.join(out, "custom_opset.onnx"))
    ml = helper.make_node("Add", ["x", "w"], ["y"])
    save(model_of(add_graph(nodes=[ml]), opsets=(("", 17), ("ai.onnx.ml", 3))),
         os.path.join(out, "standard_domains.onnx"))

    # A model-local function: its domain is not a custom operator.
    fn = helper.make_function("local.fn", "MyAdd", ["a", "b"], ["c"],
                              [helper.make_node("Add", ["a", "b"], ["c"])],
                              [helper.make_opsetid("", 17)])
    call = helper.make_node("MyAdd", ["x", "w"], ["y"], domain="local.fn")
    save(model_of(add_graph(nodes=[call]), opsets=(("", 17), ("local.fn", 1)), functions=[fn]),
         os.path.join(out, "local_function.onnx"))

    # Subgraphs (If branches): a custom op and a traversing Constant inside.
    def if_model(branch_nodes, fname):
        out_v = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 2])
        then_g = helper.make_graph(branch_nodes, "then", [], [out_v])
        else_g = helper.make_graph([helper.make_node("Identity", ["w"], ["y"])], "else", [], [out_v])
        cond = helper.make_tensor_value_info("c", TensorProto.BOOL, [])
        node = helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g)
        w = numpy_helper.from_array(np.zeros((2, 2), dtype=np.float32), "w")
        g = helper.make_graph([node], "main", [cond], [out_v], initializer=[w])
        save(model_of(g, opsets=(("", 17), ("com.evil", 1)) if "custom" in fname else (("", 17),)),
             os.path.join(out, fname))

    if_model([helper.make_node("Evil", ["w"], ["y"], domain="com.evil")], "subgraph_custom.onnx")
    const = helper.make_node("Constant", [], ["y"], value=external_tensor("k", "../../../etc/shadow"))
    if_model([const], "subgraph_external.onnx")

    # raw_data shorter than dims x dtype: 12 bytes for 2x2 float.
    bad = TensorProto()
    bad.name = "w"
    bad.data_type = TensorProto.FLOAT
    bad.dims.extend([2, 2])
    bad.raw_data = b"\0" * 12
    save(model_of(add_graph(initializers=[bad])), os.path.join(out, "size_mismatch.onnx"))

    w1 = numpy_helper.from_array(np.zeros((2, 2), dtype=np.float32), "w")
    w2 = numpy_helper.from_array(np.ones((2, 2), dtype=np.float32), "w")
    save(model_of(add_graph(initializers=[w1, w2])), os.path.join(out, "duplicate_initializer.onnx"))

    data = open(os.path.join(out, "benign.onnx"), "rb").read()
    with open(os.path.join(out, "truncated.onnx"), "wb") as f:
        f.write(data[: len(data) // 2])


# ---- Keras ----

def keras3_layer(module, class_name, config, registered_name=None):
    return {"module": module, "class_name": class_name, "config": config,
            "registered_name": registered_name}


def keras3_model(layers):
    return {"module": "keras", "class_name": "Sequential",
            "config": {"name": "sequential", "trainable": True,
                       "dtype": {"module": "keras", "class_name": "DTypePolicy",
                                 "config": {"name": "float32"}, "registered_name": None},
                       "layers": layers},
            "registered_name": None, "build_config": {"input_shape": [None, 4]},
            "compile_config": None}


DENSE = keras3_layer("keras.layers", "Dense", {
    "name": "dense", "trainable": True, "units": 2, "activation": "relu",
    "kernel_initializer": {"module": "keras.initializers", "class_name": "GlorotUniform",
                           "config": {"seed": None}, "registered_name": None},
})
INPUT = keras3_layer("keras.layers", "InputLayer", {"batch_shape": [None, 4], "name": "input"})


def lambda_code():
    # Bytecode of a harmless lambda, as keras.src.utils.python_utils.func_dump
    # writes it (base64 of marshal.dumps(code)).
    return base64.b64encode(marshal.dumps((lambda x: x * 2).__code__)).decode("ascii")


def write_weights_h5(path):
    with h5py.File(path, "w") as f:
        f.create_group("layers").create_group("dense").create_group("vars").create_dataset(
            "0", data=np.zeros((4, 2), dtype=np.float32))


def write_keras_zip(path, config_text, out):
    weights = os.path.join(out, "_weights.h5")
    write_weights_h5(weights)
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("metadata.json", json.dumps({"keras_version": "3.3.3",
                                                "date_saved": "2024-05-01@00:00:00"}))
        z.writestr("config.json", config_text)
        z.write(weights, "model.weights.h5")
    os.remove(weights)


def write_keras(out):
    write_keras_zip(os.path.join(out, "benign.keras"), json.dumps(keras3_model([INPUT, DENSE])), out)
    lam = keras3_layer("keras.layers", "Lambda", {
        "name": "lambda", "trainable": True,
        "function": {"class_name": "__lambda__",
                     "config": {"code": lambda_code(), "defaults": None, "closure": None}},
        "output_shape": None, "arguments": {}})
    write_keras_zip(os.path.join(out, "lambda.keras"), json.dumps(keras3_model([INPUT, lam])), out)
    custom = keras3_layer("evil_pkg.layers", "MyLayer", {"name": "my"}, "evil_pkg>MyLayer")
    write_keras_zip(os.path.join(out, "custom.keras"), json.dumps(keras3_model([INPUT, custom])), out)
    # An arbitrary module named for a plain function (the CVE-2025-1550 shape).
    fn = keras3_layer("keras.layers", "Dense", dict(DENSE["config"], activation={
        "module": "builtins", "class_name": "function", "config": "exec",
        "registered_name": "function"}))
    write_keras_zip(os.path.join(out, "module_builtins.keras"),
                    json.dumps(keras3_model([INPUT, fn])), out)
    text = json.dumps(keras3_model([INPUT, DENSE]))
    dup = text.replace('"name": "sequential"', '"name": "sequential", "name": "other"', 1)
    assert dup != text
    write_keras_zip(os.path.join(out, "duplicate_key.keras"), dup, out)


def keras2_model(layers):
    return {"class_name": "Sequential",
            "config": {"name": "sequential", "layers": layers}}


K2_DENSE = {"class_name": "Dense", "config": {"name": "dense", "trainable": True, "units": 2,
                                               "activation": "relu"}}


def write_h5(path, config, as_bytes=True, userblock=0, extra=None):
    kw = {"userblock_size": userblock} if userblock else {}
    with h5py.File(path, "w", **kw) as f:
        if config is not None:
            text = json.dumps(config)
            # Keras 2 wrote bytes (a fixed-length string); later tf.keras a str
            # (variable length, UTF-8).
            f.attrs["model_config"] = text.encode("utf-8") if as_bytes else text
        f.attrs["keras_version"] = "2.13.1"
        f.attrs["backend"] = "tensorflow"
        if extra:
            extra(f)
        f.create_group("model_weights").create_dataset("kernel", data=np.zeros((4, 2), np.float32))


def write_h5_files(out):
    write_h5(os.path.join(out, "benign.h5"), keras2_model([K2_DENSE]))
    write_h5(os.path.join(out, "benign_vlen.h5"), keras2_model([K2_DENSE]), as_bytes=False)
    write_h5(os.path.join(out, "userblock.h5"), keras2_model([K2_DENSE]), userblock=512)
    lam = {"class_name": "Lambda", "config": {
        "name": "lambda", "trainable": True, "function": [lambda_code(), None, None],
        "function_type": "lambda", "module": "__main__", "output_shape": None,
        "output_shape_type": "raw", "output_shape_module": None, "arguments": {}}}
    write_h5(os.path.join(out, "lambda.h5"), keras2_model([K2_DENSE, lam]), as_bytes=False)
    tfop = {"class_name": "TFOpLambda", "config": {"name": "tf.io.write_file",
                                                   "function": "io.write_file"}}
    write_h5(os.path.join(out, "tfop_io.h5"), keras2_model([K2_DENSE, tfop]))
    tfop_ok = {"class_name": "TFOpLambda", "config": {"name": "tf.math.add",
                                                      "function": "math.add"}}
    write_h5(os.path.join(out, "tfop_math.h5"), keras2_model([K2_DENSE, tfop_ok]))
    reg = {"class_name": "Custom>MyLayer", "config": {"name": "my"}}
    write_h5(os.path.join(out, "custom_registered.h5"), keras2_model([K2_DENSE, reg]))
    write_h5(os.path.join(out, "weights_only.h5"), None)

    def int_config(f):
        f.attrs["model_config"] = np.arange(3)
    write_h5(os.path.join(out, "config_not_string.h5"), None, extra=int_config)

    data = open(os.path.join(out, "benign.h5"), "rb").read()
    with open(os.path.join(out, "truncated.h5"), "wb") as f:
        f.write(data[: len(data) // 2])


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    write_onnx(out)
    write_keras(out)
    write_h5_files(out)


if __name__ == "__main__":
    main()
