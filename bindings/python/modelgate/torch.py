"""modelgate.torch: safetensors.torch's load_file, verified.

    state_dict = modelgate.torch.load_file("model.safetensors", keys=["release.pub"])
    model.load_state_dict(state_dict)

On the CPU the tensors are zero-copy views of the verified memory, mapped
copy-on-write: in-place operations work and never change the file.
"""


def load_file(filename, device="cpu", *, keys=None, mode="eager", bundle=None, signature="any",
              hash_threads=0, verification=None):
    """load_file is {name: torch.Tensor} of every tensor of the model at
    `filename` (a file, a shard index or a directory), verified against
    `keys`, on `device`; see modelgate.safe_open for the arguments. Raises
    VerificationError when the model is refused, UnsupportedDtypeError for a
    dtype this torch lacks (float8 and uint16/32/64 before torch 2.1/2.3).
    verification= is another name for keys= (load_file(path, verification=key))."""
    from . import safe_open
    with safe_open(filename, framework="pt", device=device, keys=keys, mode=mode, bundle=bundle,
                   signature=signature, hash_threads=hash_threads,
                   verification=verification) as f:
        return {name: f.get_tensor(name) for name in f.keys()}
