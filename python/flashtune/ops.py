"""flashtune.ops: `flashtune.attention` on torch tensors, backed by the tuned kernels of libflashtune_runtime.so.

Two custom ops, registered with torch.library so autograd and torch.compile see them as single nodes:
  flashtune::attn_fwd(q, k, v, sinks?, causal, window, sink_tokens) -> (o, lse)
  flashtune::attn_bwd(dout, q, k, v, o, lse, sinks?, causal, window, sink_tokens) -> (dq, dk, dv, dsinks)
Each has a fake (meta) implementation for tracing; register_autograd wires attn_bwd as attn_fwd's gradient, for
q, k, v and the learned sinks. Kernels run on torch's current stream of the tensors' device, reading and writing
torch-allocated memory through data_ptr(). The runtime is the module's default one (configure(), else
$FLASHTUNE_CONFIGS on first use).

Three paths into the same launches: torch.compile traces the custom ops; eager calls take flashtune._fastpath (C++,
csrc/fastpath.cpp, built by setup.py against the installed torch) when it is importable and the call is its common
case; every other eager call (and every call without the extension) goes through Python and ctypes below
(_Attention, _fwd_impl, _bwd_impl), which also validates and raises the argument errors. fast_path() says which.
"""
import ctypes
import math
import os
import threading
from typing import Optional, Tuple

import torch

from ._runtime import (FT_BF16, FT_ERR_CONFIGS, FT_F16, FT_F32, FT_RUNTIME_ABI_VERSION, FlashtuneError, Runtime,
                       ft_attn_shape, ft_attn_tensors)

__all__ = ["attention", "explain", "configure", "default_runtime", "fast_path"]

_FT_DTYPE = {torch.float32: FT_F32, torch.float16: FT_F16, torch.bfloat16: FT_BF16}
_is_compiling = torch.compiler.is_compiling  # bound once: attention()'s C++ path spends ~1 us of Python in all

# ---------------------------------------------------------------------------------------------------------------
# The C++ eager path (optional)

_fastpath = None
_fastpath_why = None
if os.environ.get("FLASHTUNE_NO_FASTPATH"):
    _fastpath_why = "FLASHTUNE_NO_FASTPATH is set"
else:
    try:
        from . import _fastpath
    except ImportError as e:  # not built (no torch at install), or built against another torch
        _fastpath_why = f"flashtune._fastpath does not import: {e}"
    else:
        if _fastpath.abi_version() != FT_RUNTIME_ABI_VERSION:
            _fastpath_why = (f"flashtune._fastpath was built for runtime ABI {_fastpath.abi_version()}, this package "
                             f"speaks {FT_RUNTIME_ABI_VERSION}: rebuild it")
            _fastpath = None


def fast_path():
    """Which eager path flashtune.attention takes: {"enabled": bool, "why": None or the reason it is off}. With
    the C++ path on, calls it does not cover (non-contiguous inputs, a scale, non-fp32 sinks, tensor subclasses,
    argument errors) still take the Python path."""
    return {"enabled": _fastpath is not None, "why": _fastpath_why}


def _bind_fastpath(rt):
    """Makes `rt` the runtime of the C++ path's next calls (the extension keeps it alive)."""
    if _fastpath is not None:
        lib = rt._lib
        _fastpath.bind([ctypes.cast(getattr(lib, n), ctypes.c_void_p).value
                        for n in ("ft_attention_forward", "ft_attention_backward", "ft_last_error")], rt, FlashtuneError)

# ---------------------------------------------------------------------------------------------------------------
# The default runtime

_default = None
_default_lock = threading.Lock()


def configure(configs_path, cache_dir=None):
    """Makes a Runtime of `configs_path` (a `flashtune export --format json` file) the one attention() uses, and
    returns it. `cache_dir`: where compiled CUBINs are kept between processes (None: $FLASHTUNE_CACHE_DIR, else
    $XDG_CACHE_HOME/flashtune, else ~/.cache/flashtune; "": none). The previous runtime is closed once no
    reference to it is left (kernels already enqueued are not affected)."""
    global _default
    rt = Runtime(os.fspath(configs_path), None if cache_dir is None else os.fspath(cache_dir))
    with _default_lock:
        _default = rt
        _bind_fastpath(rt)
    return rt


def default_runtime():
    """The Runtime attention() uses: configure()'s, else one made on first use from $FLASHTUNE_CONFIGS."""
    global _default
    rt = _default
    if rt is not None:
        return rt
    with _default_lock:
        if _default is None:
            path = os.environ.get("FLASHTUNE_CONFIGS")
            if not path:
                raise FlashtuneError(FT_ERR_CONFIGS, "no tuned configs: set $FLASHTUNE_CONFIGS to a file of "
                                     "`flashtune export --format json`, or call flashtune.configure(path)")
            _default = Runtime(path, None)
            _bind_fastpath(_default)
        return _default


# ---------------------------------------------------------------------------------------------------------------
# Shapes: one ft_attn_shape per distinct problem, built once (the struct is read-only to the library).

_shapes = {}


def _shape(b, hq, hkv, sq, sk, d, causal, window, sink_tokens, learned, dtype):
    key = (b, hq, hkv, sq, sk, d, causal, window, sink_tokens, learned, dtype)
    s = _shapes.get(key)
    if s is None:
        s = ft_attn_shape(b, hq, hkv, sq, sk, d, int(causal), window, sink_tokens, int(learned), _FT_DTYPE[dtype])
        _shapes[key] = s
    return s


try:  # the raw CUstream of a device's current stream without building a torch.cuda.Stream (what inductor calls)
    _raw_stream = torch._C._cuda_getCurrentRawStream
except AttributeError:  # pragma: no cover - older or newer torch without it
    def _raw_stream(index):
        return torch.cuda.current_stream(index).cuda_stream


def _launch(backward, device, shape, tensors):
    """Runs the runtime's forward / backward on torch's current stream of `device`, with `device` current."""
    rt = default_runtime()
    call = rt.backward if backward else rt.forward
    current = torch.cuda.current_device()
    index = current if device.index is None else device.index
    if index == current:
        call(shape, tensors, _raw_stream(index))
    else:
        with torch.cuda.device(index):
            call(shape, tensors, _raw_stream(index))


def _require_contiguous(**tensors):
    """The ops' own cheap checks, for callers of torch.ops.flashtune.* who bypass attention()'s."""
    for name, t in tensors.items():
        if t is not None and not t.is_contiguous():
            raise ValueError(f"{name}: the flashtune ops take contiguous tensors (flashtune.attention makes them so)")
    sinks = tensors.get("sinks")
    if sinks is not None and sinks.dtype != torch.float32:
        raise TypeError(f"sinks: the flashtune ops take float32 sinks, got {sinks.dtype} (flashtune.attention casts)")


# ---------------------------------------------------------------------------------------------------------------
# The custom ops

def _fwd_impl(q, k, v, sinks, causal, window, sink_tokens):
    """The forward launch behind both paths (the custom op, and eager autograd.Function): o and lse."""
    b, hq, sq, d = q.shape
    hkv, sk = k.shape[1], k.shape[2]
    o = torch.empty((b, hq, sq, d), dtype=q.dtype, device=q.device)
    lse = torch.empty((b, hq, sq), dtype=torch.float32, device=q.device)
    if o.numel() == 0:
        return o, lse
    shape = _shape(b, hq, hkv, sq, sk, d, causal, window, sink_tokens, sinks is not None, q.dtype)
    t = ft_attn_tensors(q=q.data_ptr(), k=k.data_ptr(), v=v.data_ptr(), o=o.data_ptr(), lse=lse.data_ptr(),
                        sinks=0 if sinks is None else sinks.data_ptr())
    _launch(False, q.device, shape, t)
    return o, lse


def _bwd_impl(dout, q, k, v, o, lse, sinks, causal, window, sink_tokens):
    """The backward launch behind both paths: dq, dk, dv and dsinks ((0,) without sinks)."""
    b, hq, sq, d = q.shape
    hkv, sk = k.shape[1], k.shape[2]
    dq = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    dk = torch.empty(k.shape, dtype=k.dtype, device=k.device)
    dv = torch.empty(v.shape, dtype=v.dtype, device=v.device)
    dsinks = torch.empty((hq if sinks is not None else 0,), dtype=torch.float32, device=q.device)
    if q.numel() == 0 or k.numel() == 0:
        return dq.zero_(), dk.zero_(), dv.zero_(), dsinks.zero_()
    shape = _shape(b, hq, hkv, sq, sk, d, causal, window, sink_tokens, sinks is not None, q.dtype)
    t = ft_attn_tensors(q=q.data_ptr(), k=k.data_ptr(), v=v.data_ptr(), o=o.data_ptr(), lse=lse.data_ptr(),
                        dout=dout.data_ptr(), dq=dq.data_ptr(), dk=dk.data_ptr(), dv=dv.data_ptr(),
                        sinks=0 if sinks is None else sinks.data_ptr(),
                        dsinks=0 if sinks is None else dsinks.data_ptr())
    _launch(True, q.device, shape, t)
    return dq, dk, dv, dsinks


@torch.library.custom_op("flashtune::attn_fwd", mutates_args=(), device_types="cuda")
def attn_fwd(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, sinks: Optional[torch.Tensor], causal: bool,
             window: int, sink_tokens: int) -> Tuple[torch.Tensor, torch.Tensor]:
    """o (like q) and lse (fp32 (batch, heads_q, seq_q), natural log) of softmax(q k^T / sqrt(head_dim)) v.
    Contiguous (batch, heads, seq, head_dim) inputs; sinks None or fp32 (heads_q,). lse is not differentiable:
    its incoming gradient is ignored (flashtune.attention returns it detached)."""
    _require_contiguous(q=q, k=k, v=v, sinks=sinks)
    return _fwd_impl(q, k, v, sinks, causal, window, sink_tokens)


@attn_fwd.register_fake
def _attn_fwd_fake(q, k, v, sinks, causal, window, sink_tokens):
    b, hq, sq, d = q.shape
    return q.new_empty((b, hq, sq, d)), q.new_empty((b, hq, sq), dtype=torch.float32)


@torch.library.custom_op("flashtune::attn_bwd", mutates_args=(), device_types="cuda")
def attn_bwd(dout: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor,
             lse: torch.Tensor, sinks: Optional[torch.Tensor], causal: bool, window: int,
             sink_tokens: int) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """dq, dk, dv (like q, k, v) and dsinks (fp32 (heads_q,); an empty (0,) tensor without sinks) of attn_fwd,
    from its saved o and lse and the output gradient dout. All inputs contiguous."""
    _require_contiguous(dout=dout, q=q, k=k, v=v, o=o, lse=lse, sinks=sinks)
    return _bwd_impl(dout, q, k, v, o, lse, sinks, causal, window, sink_tokens)


@attn_bwd.register_fake
def _attn_bwd_fake(dout, q, k, v, o, lse, sinks, causal, window, sink_tokens):
    hq = q.shape[1]
    return (q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape),
            q.new_empty((hq if sinks is not None else 0,), dtype=torch.float32))


def _setup_context(ctx, inputs, output):
    q, k, v, sinks, causal, window, sink_tokens = inputs
    o, lse = output
    ctx.save_for_backward(q, k, v, o, lse, sinks)
    ctx.mask = (causal, window, sink_tokens)


def _backward(ctx, grad_o, grad_lse):
    # grad_lse is ignored: lse is an output for inspection, not a differentiable one (attention() detaches it).
    q, k, v, o, lse, sinks = ctx.saved_tensors
    causal, window, sink_tokens = ctx.mask
    dq, dk, dv, dsinks = torch.ops.flashtune.attn_bwd(grad_o.contiguous(), q, k, v, o, lse, sinks, causal, window,
                                                      sink_tokens)
    return dq, dk, dv, (dsinks if sinks is not None else None), None, None, None


attn_fwd.register_autograd(_backward, setup_context=_setup_context)


class _Attention(torch.autograd.Function):
    """The eager path: the same launches as the custom ops without torch.library's dispatch (tens of us per call,
    and an import of torch._dynamo on the first), which attention() takes unless torch.compile is tracing."""

    @staticmethod
    def forward(ctx, q, k, v, sinks, causal, window, sink_tokens):
        o, lse = _fwd_impl(q, k, v, sinks, causal, window, sink_tokens)
        ctx.save_for_backward(q, k, v, o, lse, sinks)
        ctx.mask = (causal, window, sink_tokens)
        ctx.mark_non_differentiable(lse)
        return o, lse

    @staticmethod
    def backward(ctx, grad_o, grad_lse):
        q, k, v, o, lse, sinks = ctx.saved_tensors
        dq, dk, dv, dsinks = _bwd_impl(grad_o.contiguous(), q, k, v, o, lse, sinks, *ctx.mask)
        return dq, dk, dv, (dsinks if sinks is not None else None), None, None, None


# ---------------------------------------------------------------------------------------------------------------
# Argument checks (ValueError / TypeError naming the argument)

def _check(q, k, v, window, sink_tokens, sinks, need_cuda):
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
        if t.dim() != 4:
            raise ValueError(f"{name}: expected a 4-D tensor (batch, heads, seq, head_dim), got shape "
                             f"{tuple(t.shape)}")
    if q.dtype not in _FT_DTYPE:
        raise TypeError(f"q: dtype {q.dtype} is not supported; use torch.float16, torch.bfloat16 or torch.float32")
    for name, t in (("k", k), ("v", v)):
        if t.dtype != q.dtype:
            raise TypeError(f"{name}: dtype {t.dtype} differs from q's {q.dtype}; q, k and v take one dtype")
    if need_cuda:
        if q.device.type != "cuda":
            raise ValueError(f"q: expected a CUDA tensor, got one on {q.device}")
        for name, t in (("k", k), ("v", v)):
            if t.device != q.device:
                raise ValueError(f"{name}: on {t.device}, but q is on {q.device}; all tensors must be on one device")
    b, hq, sq, d = q.shape
    if k.shape[0] != b:
        raise ValueError(f"k: batch {k.shape[0]} differs from q's {b}")
    if k.shape[3] != d:
        raise ValueError(f"k: head_dim {k.shape[3]} differs from q's {d}")
    if v.shape != k.shape:
        raise ValueError(f"v: shape {tuple(v.shape)} differs from k's {tuple(k.shape)}; k and v take one shape")
    hkv = k.shape[1]
    if hkv == 0 or hq % hkv != 0:
        raise ValueError(f"q / k: heads_q ({hq}, q.shape[1]) must be a multiple of heads_kv ({hkv}, k.shape[1]) "
                         "for grouped-query attention")
    if window is None:
        window = 0
    if isinstance(window, bool) or not isinstance(window, int) or window < 0:
        raise ValueError(f"window: expected None or an int >= 1 (keys per query, itself included), got {window!r}")
    if isinstance(sink_tokens, bool) or not isinstance(sink_tokens, int) or sink_tokens < 0:
        raise ValueError(f"sink_tokens: expected an int >= 0, got {sink_tokens!r}")
    if sink_tokens > 0 and window == 0:
        raise ValueError(f"sink_tokens: {sink_tokens} sink tokens need a window (they stay visible through it); "
                         "pass window=W")
    if sinks is not None:
        if not isinstance(sinks, torch.Tensor):
            raise TypeError(f"sinks: expected a torch.Tensor of shape ({hq},) or None, got {type(sinks).__name__}")
        if tuple(sinks.shape) != (hq,):
            raise ValueError(f"sinks: expected shape ({hq},) (one logit per query head), got {tuple(sinks.shape)}")
        if not sinks.is_floating_point():
            raise TypeError(f"sinks: expected a floating-point tensor, got {sinks.dtype}")
        if need_cuda and sinks.device != q.device:
            raise ValueError(f"sinks: on {sinks.device}, but q is on {q.device}; all tensors must be on one device")
    return window


# ---------------------------------------------------------------------------------------------------------------
# Public API

def attention(q, k, v, *, causal=False, window=None, sink_tokens=0, sinks=None, scale=None, return_lse=False):
    """Attention with flashtune's tuned kernels: softmax(scale * q k^T + mask) v, differentiable in q, k, v, sinks.

    q: (batch, heads_q, seq_q, head_dim); k, v: (batch, heads_kv, seq_k, head_dim), heads_q a multiple of heads_kv
    (GQA: query head h reads kv head h // (heads_q // heads_kv)). One dtype for all three: float16, bfloat16 or
    float32; CUDA tensors on one device. Non-contiguous inputs are copied to contiguous ones first (a copy per
    call: pass contiguous tensors on a hot path).
    causal: key j visible to query i only when j <= i + seq_k - seq_q (aligned bottom-right).
    window: None (no window) or W >= 1: key j visible only when j > i + seq_k - seq_q - W.
    sink_tokens: the first keys stay visible through the window (needs a window; causal still applies).
    sinks: None or a (heads_q,) tensor of learned sink logits (GPT-OSS): one logit per query head joins the softmax
        denominator and carries no value. The kernels take it as float32 (cast here); its gradient comes back in
        sinks' own dtype.
    scale: None for 1 / sqrt(head_dim), the kernels' own scale. Another scale is applied by multiplying q by
        scale * sqrt(head_dim) before the kernel (in q's dtype: one extra rounding of q), autograd carrying it
        into dq.
    return_lse: also return lse, float32 (batch, heads_q, seq_q), the natural-log sum of exp over each row's
        scores (sink logit included). It is returned detached: no gradient flows through it.
    Runs on torch.cuda.current_stream() of the tensors' device. Returns o (like q), or (o, lse).
    """
    if _fastpath is not None and scale is None and not _is_compiling():
        if _default is None:
            default_runtime()  # binds the C++ path's runtime (or raises the missing-configs error)
        r = _fastpath.attention(q, k, v, sinks, causal, window, sink_tokens)
        if r is not None:
            return r if return_lse else r[0]
    window = _check(q, k, v, window, sink_tokens, sinks, True)
    if scale is not None:
        factor = float(scale) * math.sqrt(q.shape[-1])
        if not math.isfinite(factor) or factor <= 0:
            raise ValueError(f"scale: expected a positive finite number, got {scale!r}")
        if factor != 1.0:
            q = q * factor
    if not q.is_contiguous():
        q = q.contiguous()
    if not k.is_contiguous():
        k = k.contiguous()
    if not v.is_contiguous():
        v = v.contiguous()
    if sinks is not None and (sinks.dtype != torch.float32 or not sinks.is_contiguous()):
        sinks = sinks.to(torch.float32).contiguous()
    causal = bool(causal)
    if torch.compiler.is_compiling():  # traced: the custom op, one node with its fake and autograd
        o, lse = attn_fwd(q, k, v, sinks, causal, window, sink_tokens)
    elif torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad or
                                      (sinks is not None and sinks.requires_grad)):
        o, lse = _Attention.apply(q, k, v, sinks, causal, window, sink_tokens)
    else:
        o, lse = _fwd_impl(q, k, v, sinks, causal, window, sink_tokens)
    return (o, lse.detach()) if return_lse else o


def explain(q, k, v, *, causal=False, window=None, sink_tokens=0, sinks=None, backward=False, arch=None):
    """The default runtime's choice for this call's problem, as a dict ({"gpu", "arch", "pass", "way", "stages":
    [{"family", "config", "tuned_problem", "exact", "distance", "median_ms", "compile": {...}}]}). Takes the same
    arguments as attention() (only shapes and dtypes matter: meta or CPU tensors work with `arch`, e.g.
    "sm_90a", which chooses and compiles without a GPU). backward: the backward pass's stages."""
    window = _check(q, k, v, window, sink_tokens, sinks, False)
    b, hq, sq, d = q.shape
    shape = _shape(b, hq, k.shape[1], sq, k.shape[2], d, bool(causal), window, sink_tokens, sinks is not None,
                   q.dtype)
    rt = default_runtime()
    if arch is None and q.device.type == "cuda":
        with torch.cuda.device(q.device):
            return rt.explain(shape, backward=backward)
    return rt.explain(shape, backward=backward, arch=arch)
