"""flashtune: flashtune's tuned Flash Attention kernels as a PyTorch op (issue 22).

`import flashtune` needs no torch: `Runtime`, `FlashtuneError` and the ctypes layer (`flashtune._runtime`) are
always there. `attention`, `explain`, `configure`, `default_runtime` and `fast_path` come from `flashtune.ops`,
imported on first use (it imports torch and registers the `flashtune::attn_fwd` / `flashtune::attn_bwd` custom ops).
"""
from ._runtime import (FT_BF16, FT_ERR_ARGUMENT, FT_ERR_BUFFER, FT_ERR_COMPILE, FT_ERR_CONFIGS, FT_ERR_CUDA,
                       FT_ERR_NO_CONFIG, FT_F16, FT_F32, FT_OK, FlashtuneError, LibraryNotFoundError, Runtime,
                       find_library, ft_attn_shape, ft_attn_tensors, make_shape)

__version__ = "0.1.0"

_LAZY = ("attention", "explain", "configure", "default_runtime", "fast_path")

__all__ = ["Runtime", "FlashtuneError", "LibraryNotFoundError", "find_library", "make_shape", "ft_attn_shape",
           "ft_attn_tensors", "FT_OK", "FT_ERR_ARGUMENT", "FT_ERR_NO_CONFIG", "FT_ERR_CONFIGS", "FT_ERR_COMPILE",
           "FT_ERR_CUDA", "FT_ERR_BUFFER", "FT_F32", "FT_F16", "FT_BF16", *_LAZY]


def __getattr__(name):
    # PEP 562: the torch-side names load flashtune.ops (and torch) only when first asked for.
    if name in _LAZY:
        from . import ops
        for n in _LAZY:  # bound here once: later lookups (and torch.compile's tracing) skip this function
            globals()[n] = getattr(ops, n)
        return globals()[name]
    raise AttributeError(f"module 'flashtune' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_LAZY))
