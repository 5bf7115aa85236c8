"""flashtune._runtime: ctypes binding of libflashtune_runtime.so (runtime/flashtune_runtime.h, ABI version 1).

Mirrors the header's structs, status codes and every function, and wraps them in `Runtime`, which raises
`FlashtuneError(code, message)` with ft_last_error()'s text on any failed call. Imports without torch: the
runtime takes plain device pointers (ints) and a CUstream handle, so CuPy, JAX or raw CUDA users can call it.

Library lookup order (first that exists wins; `find_library()` says which):
  1. $FLASHTUNE_LIBRARY (when set, it is the only candidate: a wrong path is an error, not a fallback);
  2. flashtune/lib/libflashtune_runtime.so inside this package (copied there before `pip install`);
  3. walking up from this file: <dir>/build/runtime/libflashtune_runtime.so of the first ancestor that has it
     (the repository's own CMake build, for `pip install -e python/` or PYTHONPATH=python).
"""
import ctypes
import json
import os
import threading

__all__ = [
    "FT_RUNTIME_ABI_VERSION", "FT_OK", "FT_ERR_ARGUMENT", "FT_ERR_NO_CONFIG", "FT_ERR_CONFIGS", "FT_ERR_COMPILE",
    "FT_ERR_CUDA", "FT_ERR_BUFFER", "FT_F32", "FT_F16", "FT_BF16", "STATUS_NAMES", "ft_attn_shape",
    "ft_attn_tensors", "FlashtuneError", "LibraryNotFoundError", "find_library", "load_library", "make_shape",
    "Runtime",
]

LIBRARY_NAME = "libflashtune_runtime.so"
FT_RUNTIME_ABI_VERSION = 1

# enum ft_status
FT_OK = 0
FT_ERR_ARGUMENT = 1   # a NULL or malformed argument, an impossible shape
FT_ERR_NO_CONFIG = 2  # neither the config file nor the built-in fallbacks have a config that runs this shape
FT_ERR_CONFIGS = 3    # the config file could not be read or parsed
FT_ERR_COMPILE = 4    # NVRTC failed on a chosen config
FT_ERR_CUDA = 5       # no driver / GPU, or a driver call failed (launch, allocation)
FT_ERR_BUFFER = 6     # the caller's buffer (workspace, text) is too small
STATUS_NAMES = {
    FT_OK: "FT_OK", FT_ERR_ARGUMENT: "FT_ERR_ARGUMENT", FT_ERR_NO_CONFIG: "FT_ERR_NO_CONFIG",
    FT_ERR_CONFIGS: "FT_ERR_CONFIGS", FT_ERR_COMPILE: "FT_ERR_COMPILE", FT_ERR_CUDA: "FT_ERR_CUDA",
    FT_ERR_BUFFER: "FT_ERR_BUFFER",
}

# enum ft_dtype, and the names accepted for it
FT_F32 = 0
FT_F16 = 1
FT_BF16 = 2
_DTYPE_NAMES = {"f32": FT_F32, "fp32": FT_F32, "float32": FT_F32, "f16": FT_F16, "fp16": FT_F16,
                "float16": FT_F16, "bf16": FT_BF16, "bfloat16": FT_BF16}


class ft_attn_shape(ctypes.Structure):
    """struct ft_attn_shape: an attention problem (masks as DESIGN.md "Attention conventions")."""
    _fields_ = [
        ("batch", ctypes.c_int64), ("heads_q", ctypes.c_int64), ("heads_kv", ctypes.c_int64),
        ("seq_q", ctypes.c_int64), ("seq_k", ctypes.c_int64), ("head_dim", ctypes.c_int64),
        ("causal", ctypes.c_int32), ("window", ctypes.c_int32), ("sink_tokens", ctypes.c_int32),
        ("learned_sinks", ctypes.c_int32),
        ("dtype", ctypes.c_int32),  # enum ft_dtype
    ]

    def __repr__(self):
        return "ft_attn_shape(" + ", ".join(f"{n}={getattr(self, n)}" for n, _ in self._fields_) + ")"


class ft_attn_tensors(ctypes.Structure):
    """struct ft_attn_tensors: device pointers (CUdeviceptr), 0 where a call does not use one."""
    _fields_ = [(n, ctypes.c_uint64) for n in ("q", "k", "v", "o", "lse", "dout", "dq", "dk", "dv", "sinks", "dsinks")]


class FlashtuneError(RuntimeError):
    """A failed runtime call: `code` is the ft_status value, `status` its name, `message` ft_last_error()'s text."""

    def __init__(self, code, message):
        self.code = int(code)
        self.status = STATUS_NAMES.get(self.code, f"status {self.code}")
        self.message = message
        super().__init__(f"{self.status}: {message}")

    def __reduce__(self):
        return (type(self), (self.code, self.message))


class LibraryNotFoundError(OSError):
    """No libflashtune_runtime.so at any place looked at; the message names every path tried."""


def _candidates():
    """The paths find_library() looks at, in order: [(path, why)]."""
    env = os.environ.get("FLASHTUNE_LIBRARY")
    if env:
        return [(env, "$FLASHTUNE_LIBRARY")]
    here = os.path.dirname(os.path.abspath(__file__))
    out = [(os.path.join(here, "lib", LIBRARY_NAME), "inside the package")]
    d = here
    while True:
        out.append((os.path.join(d, "build", "runtime", LIBRARY_NAME), "a build tree above the package"))
        parent = os.path.dirname(d)
        if parent == d:
            return out
        d = parent


def find_library():
    """The path of libflashtune_runtime.so by the lookup order above; LibraryNotFoundError naming every path tried."""
    tried = _candidates()
    for path, _ in tried:
        if os.path.isfile(path):
            return path
    lines = "\n".join(f"  {p}  ({why})" for p, why in tried)
    raise LibraryNotFoundError(
        f"{LIBRARY_NAME} not found; tried:\n{lines}\n"
        "Build it (cmake --build build --target flashtune_runtime), set FLASHTUNE_LIBRARY to its path, or copy it "
        "to flashtune/lib/ before installing the package.")


_lib = None
_lib_lock = threading.Lock()


def _declare(lib):
    """Sets argtypes / restype of every function of the header, so ctypes converts and checks arguments."""
    P = ctypes.POINTER
    c_int, c_char_p, c_void_p, c_size_t = ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p, ctypes.c_size_t
    lib.ft_runtime_abi_version.argtypes = []
    lib.ft_runtime_abi_version.restype = c_int
    lib.ft_last_error.argtypes = []
    lib.ft_last_error.restype = c_char_p
    lib.ft_runtime_create.argtypes = [c_char_p, c_char_p, P(c_void_p)]
    lib.ft_runtime_create.restype = c_int
    lib.ft_runtime_destroy.argtypes = [c_void_p]
    lib.ft_runtime_destroy.restype = None
    for name in ("ft_attention_forward", "ft_attention_backward"):
        f = getattr(lib, name)
        f.argtypes = [c_void_p, P(ft_attn_shape), P(ft_attn_tensors), c_void_p, c_void_p, c_size_t]
        f.restype = c_int
    lib.ft_attention_workspace_bytes.argtypes = [c_void_p, P(ft_attn_shape), c_int, P(c_size_t)]
    lib.ft_attention_workspace_bytes.restype = c_int
    lib.ft_attention_explain.argtypes = [c_void_p, P(ft_attn_shape), c_int, c_char_p, c_char_p, c_size_t,
                                         P(c_size_t)]
    lib.ft_attention_explain.restype = c_int


def load_library(path=None):
    """The loaded library (once per process; `path` overrides the lookup on the first call). Checks the ABI version."""
    global _lib
    with _lib_lock:
        if _lib is None:
            path = path or find_library()
            lib = ctypes.CDLL(path)
            _declare(lib)
            abi = lib.ft_runtime_abi_version()
            if abi != FT_RUNTIME_ABI_VERSION:
                raise OSError(f"{path}: ABI version {abi}, this binding speaks {FT_RUNTIME_ABI_VERSION}; "
                              "rebuild the library or reinstall the package from the same commit")
            lib._flashtune_path = path
            _lib = lib
        return _lib


def _last_error(lib):
    msg = lib.ft_last_error()
    return msg.decode("utf-8", "replace") if msg else ""


def _check(lib, status):
    if status != FT_OK:
        raise FlashtuneError(status, _last_error(lib))


def dtype_code(dtype):
    """enum ft_dtype from an int code or a name ("bf16", "float16", ...)."""
    if isinstance(dtype, int):
        if dtype not in (FT_F32, FT_F16, FT_BF16):
            raise ValueError(f"dtype: {dtype} is not an ft_dtype (0 f32, 1 f16, 2 bf16)")
        return dtype
    code = _DTYPE_NAMES.get(str(dtype).lower())
    if code is None:
        raise ValueError(f"dtype: {dtype!r} is not one of {sorted(_DTYPE_NAMES)}")
    return code


def make_shape(batch, heads_q, heads_kv, seq_q, seq_k, head_dim, *, causal=False, window=0, sink_tokens=0,
               learned_sinks=False, dtype="bf16"):
    """An ft_attn_shape from Python values (window 0: none; dtype a name or enum ft_dtype)."""
    return ft_attn_shape(int(batch), int(heads_q), int(heads_kv), int(seq_q), int(seq_k), int(head_dim),
                         int(bool(causal)), int(window), int(sink_tokens), int(bool(learned_sinks)), dtype_code(dtype))


def _as_shape(shape):
    if isinstance(shape, ft_attn_shape):
        return shape
    if isinstance(shape, dict):
        return make_shape(**shape)
    raise TypeError(f"shape: expected an ft_attn_shape or a dict of make_shape's arguments, got {type(shape).__name__}")


class Runtime:
    """One ft_runtime: the configs of an export JSON, the chosen configs and their loaded kernels.

    `configs_path` None: $FLASHTUNE_CONFIGS. `cache_dir` None: $FLASHTUNE_CACHE_DIR, else
    $XDG_CACHE_HOME/flashtune, else ~/.cache/flashtune; "": no CUBIN cache on disk. Needs no GPU to create or
    explain. Thread safe (the C runtime is); close() (or the end of a `with` block) frees it.
    """

    EXPLAIN_BUFFER_BYTES = 8192  # first try of explain(); retried once with the size the library asks for

    def __init__(self, configs_path=None, cache_dir=None, library=None):
        lib = load_library(library)
        self._lib = lib
        self._handle = None
        self.configs_path = configs_path if configs_path is not None else os.environ.get("FLASHTUNE_CONFIGS")
        handle = ctypes.c_void_p()
        enc = lambda s: None if s is None else os.fsencode(s)
        _check(lib, lib.ft_runtime_create(enc(configs_path), enc(cache_dir), ctypes.byref(handle)))
        self._handle = handle.value
        # Bound per-call entry points (no attribute lookups on the library per call).
        self._fwd = lib.ft_attention_forward
        self._bwd = lib.ft_attention_backward

    @property
    def library_path(self):
        return self._lib._flashtune_path

    @property
    def handle(self):
        """The ft_runtime* as an int; FlashtuneError after close()."""
        if self._handle is None:
            raise FlashtuneError(FT_ERR_ARGUMENT, "this Runtime was closed")
        return self._handle

    def close(self):
        """Destroys the runtime (idempotent). Kernels it launched must be done or enqueued on their streams."""
        h, self._handle = self._handle, None
        if h is not None:
            self._lib.ft_runtime_destroy(h)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:  # interpreter shutdown: the library may be gone; never raise from a finalizer
            pass

    def forward(self, shape, tensors, stream=0, workspace=0, workspace_bytes=0):
        """Launches the tuned forward on `stream` (a CUstream as int; 0 the legacy default stream).

        `tensors`: an ft_attn_tensors with q, k, v (+ sinks) set and o, lse to write. `workspace` 0: the runtime's
        own. The first call of a shape picks, compiles and loads; later calls only launch.
        """
        status = self._fwd(self.handle, ctypes.byref(shape), ctypes.byref(tensors), stream, workspace,
                           workspace_bytes)
        if status:
            raise FlashtuneError(status, _last_error(self._lib))

    def backward(self, shape, tensors, stream=0, workspace=0, workspace_bytes=0):
        """Launches the tuned backward: reads q, k, v, o, lse, dout (+ sinks), writes dq, dk, dv (+ dsinks)."""
        status = self._bwd(self.handle, ctypes.byref(shape), ctypes.byref(tensors), stream, workspace,
                           workspace_bytes)
        if status:
            raise FlashtuneError(status, _last_error(self._lib))

    def workspace_bytes(self, shape, backward=False):
        """[bytes] of workspace a forward or backward of `shape` needs on the current device."""
        n = ctypes.c_size_t(0)
        _check(self._lib, self._lib.ft_attention_workspace_bytes(self.handle, ctypes.byref(_as_shape(shape)),
                                                                   int(bool(backward)), ctypes.byref(n)))
        return n.value

    def explain_text(self, shape, backward=False, arch=None, buffer_bytes=None):
        """The runtime's explain JSON as text. Starts with `buffer_bytes` (default EXPLAIN_BUFFER_BYTES) and, on
        FT_ERR_BUFFER, retries once with the size the library said it needs."""
        shape = _as_shape(shape)
        arch_b = None if arch is None else arch.encode()
        size = int(buffer_bytes or self.EXPLAIN_BUFFER_BYTES)
        for _ in range(2):
            buf = ctypes.create_string_buffer(size)
            needed = ctypes.c_size_t(0)
            status = self._lib.ft_attention_explain(self.handle, ctypes.byref(shape), int(bool(backward)), arch_b,
                                                    buf, size, ctypes.byref(needed))
            if status == FT_ERR_BUFFER and needed.value > size:
                size = needed.value
                continue
            _check(self._lib, status)
            return buf.value.decode("utf-8")
        raise FlashtuneError(FT_ERR_BUFFER, f"explain still did not fit in {size} bytes, the size the library asked for")

    def explain(self, shape, backward=False, arch=None, buffer_bytes=None):
        """What the runtime chose for `shape` as a dict: {"gpu", "arch", "pass", "way", "stages": [...]}.
        `arch` None: the current device; "sm_90a" etc. without a GPU (chosen and compiled, never launched)."""
        return json.loads(self.explain_text(shape, backward, arch, buffer_bytes))

    def __repr__(self):
        state = "closed" if self._handle is None else f"0x{self._handle:x}"
        return f"Runtime(configs={self.configs_path!r}, {state})"
