"""modelgate.numpy: safetensors.numpy's load_file, verified.

    arrays = modelgate.numpy.load_file("model.safetensors", keys=["release.pub"])

The arrays are read-only, zero-copy views of the verified memory (writable=True:
writable copy-on-write ones); each keeps the model mapped while it lives.
"""


def load_file(filename, *, keys=None, mode="eager", bundle=None, signature="any", writable=False,
              hash_threads=0, verification=None):
    """load_file is {name: numpy.ndarray} of every tensor of the model at
    `filename` (a file, a shard index or a directory), verified against
    `keys`; see modelgate.safe_open for the arguments. Raises
    VerificationError when the model is refused, UnsupportedDtypeError for a
    dtype numpy lacks (BF16, F8_*). verification= is another name for keys=."""
    from . import safe_open
    with safe_open(filename, framework="np", keys=keys, mode=mode, bundle=bundle,
                   signature=signature, writable=writable, hash_threads=hash_threads,
                   verification=verification) as f:
        return {name: f.get_tensor(name) for name in f.keys()}
