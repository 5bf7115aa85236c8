# python/setup.py: the optional C++ part of the `flashtune` package (pyproject.toml has the metadata).
# When torch (with CUDA) is importable at build time, it builds flashtune._fastpath from flashtune/csrc/fastpath.cpp:
# flashtune.attention's eager path in C++ (a few us per call instead of tens through Python and ctypes). Without
# torch, or with FLASHTUNE_NO_FASTPATH=1, the package installs pure Python and attention() uses the ctypes path.
# torch is only visible to the build without build isolation:
#   pip install --no-build-isolation ./python             (or: cd python && python setup.py build_ext --inplace)
# The extension is tied to the torch it was built against; under another torch it fails to import and
# flashtune.fast_path() says why (attention() then takes the ctypes path).
import os
import sys

from setuptools import setup

HERE = os.path.dirname(os.path.abspath(__file__))
RUNTIME_HEADERS = os.path.join(HERE, os.pardir, "runtime")  # flashtune_runtime.h, the C ABI the extension calls


def fastpath():
    """(ext_modules, cmdclass) of the C++ extension, or ([], {}) with the reason printed."""
    if os.environ.get("FLASHTUNE_NO_FASTPATH"):
        print("flashtune: FLASHTUNE_NO_FASTPATH is set: not building the C++ eager path", file=sys.stderr)
        return [], {}
    try:
        import torch
        from torch.utils.cpp_extension import CUDA_HOME, BuildExtension, CUDAExtension
    except ImportError as e:
        print(f"flashtune: torch not importable at build time ({e}): pure-Python install, ctypes path only "
              "(use pip install --no-build-isolation to build the C++ eager path)", file=sys.stderr)
        return [], {}
    if not torch.version.cuda or CUDA_HOME is None:
        print("flashtune: torch without CUDA or no CUDA toolkit found: pure-Python install", file=sys.stderr)
        return [], {}
    if not os.path.isfile(os.path.join(RUNTIME_HEADERS, "flashtune_runtime.h")):
        print(f"flashtune: {RUNTIME_HEADERS}/flashtune_runtime.h not found (build from the repository's python/): "
              "pure-Python install", file=sys.stderr)
        return [], {}
    ext = CUDAExtension("flashtune._fastpath", ["flashtune/csrc/fastpath.cpp"], include_dirs=[RUNTIME_HEADERS],
                        extra_compile_args={"cxx": ["-O2"]})
    return [ext], {"build_ext": BuildExtension}


ext_modules, cmdclass = fastpath()
setup(ext_modules=ext_modules, cmdclass=cmdclass)
