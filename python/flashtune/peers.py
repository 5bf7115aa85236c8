"""python/flashtune/peers.py: `python -m flashtune.peers --job JOB.json --out RESULT.json`, the peer measurement engine.

Measures other attention libraries (PyTorch SDPA's flash, cuDNN and efficient backends, FlexAttention,
FlashAttention-4) on flashtune's attention problems the way flashtune measures its own kernels: the harness's
inputs, validation against a float64 reference by the pass rule of DESIGN.md, then cold-L2 CUDA-event timing with
noise-based stopping (flashtune._timing). `flashtune peers` (C++) writes the job, runs this, and records RESULT.json
as baselines. The job parsing imports no torch (tested on the CPU); everything else imports it when run.
Exit status: 0 when the job ran (whatever the peers did), 2 for a bad job file or no torch / no CUDA device.
"""
import argparse
import gc
import json
import math
import os
import random
import sys
import time
import warnings
from dataclasses import dataclass, field

from . import _reference as ref
from ._timing import ClockProbe, L2Flusher, MeasureSettings, measure

VERSION = 1                   # of the job and result JSON
PEERS = ("sdpa_flash", "sdpa_cudnn", "sdpa_efficient", "flex", "fa4")
PASSES = ("fwd", "bwd")
STATUSES = ("ok", "unsupported", "wrong_result", "error")
PROG = "flashtune.peers"


# ---------------------------------------------------------------------------------------------------------------
# The job (JSON contract: python/README.md "python -m flashtune.peers")

class JobError(ValueError):
    """A bad job file: the message is one line naming the key."""


@dataclass
class Problem:
    index: int                # the caller's problem index, echoed in each result
    key: str                  # the caller's problem key (informational)
    shape: ref.Shape
    passes: list              # "fwd" and / or "bwd", in the job's order


@dataclass
class Job:
    peers: list               # peer names in PEERS order of the job ([] in the file = all)
    measure: MeasureSettings
    seed: int                 # 0: a fresh seed per problem
    problems: list = field(default_factory=list)
    skip: set = field(default_factory=set)  # (index, peer, pass) not to run: done or lost in an earlier child


def _keys(obj, where, required, optional):
    if not isinstance(obj, dict):
        raise JobError(f"{where}: expected an object")
    for k in required:
        if k not in obj:
            raise JobError(f"{where}: missing key '{k}'")
    for k in obj:
        if k not in required and k not in optional:
            raise JobError(f"{where}: unknown key '{k}' (known: {', '.join(list(required) + list(optional))})")


def _int(value, where):
    if isinstance(value, bool) or not isinstance(value, int):
        raise JobError(f"{where}: expected an integer, got {value!r}")
    return value


def parse_job(obj):
    """The Job of a parsed job JSON object; raises JobError (one line) on any mistake."""
    _keys(obj, "job", ("version", "problems"), ("peers", "measure", "seed", "skip"))
    if obj["version"] != VERSION:
        raise JobError(f"version: expected {VERSION}, got {obj['version']!r}")
    peers = obj.get("peers", [])
    if not isinstance(peers, list):
        raise JobError("peers: expected a list of names")
    for p in peers:
        if p not in PEERS:
            raise JobError(f"peers: unknown peer {p!r} (known: {', '.join(PEERS)})")
    if len(set(peers)) != len(peers):
        raise JobError("peers: a peer is named twice")
    try:
        settings = MeasureSettings.from_json(obj.get("measure"))
    except ValueError as e:
        raise JobError(str(e)) from None
    seed = _int(obj.get("seed", 0), "seed")
    if seed < 0 or seed >= 2**63:
        raise JobError("seed: expected 0 (fresh) or a positive integer < 2^63")
    if not isinstance(obj["problems"], list):
        raise JobError("problems: expected a list")
    problems, seen = [], set()
    for n, p in enumerate(obj["problems"]):
        where = f"problems[{n}]"
        _keys(p, where, ("index", "dims", "dtype", "passes"), ("key",))
        index = _int(p["index"], f"{where}.index")
        if index in seen:
            raise JobError(f"{where}.index: {index} appears twice")
        seen.add(index)
        key = p.get("key", "")
        if not isinstance(key, str):
            raise JobError(f"{where}.key: expected a string")
        if not isinstance(p["dims"], dict):
            raise JobError(f"{where}.dims: expected an object")
        if p["dtype"] not in ref.DTYPES:
            raise JobError(f"{where}.dtype: unknown dtype {p['dtype']!r} (known: {', '.join(ref.DTYPES)})")
        try:
            shape = ref.Shape.from_dims(p["dims"], p["dtype"])
        except ValueError as e:
            raise JobError(f"{where}.dims: {e}") from None
        passes = p["passes"]
        if not isinstance(passes, list) or not passes:
            raise JobError(f"{where}.passes: expected a non-empty list of {', '.join(PASSES)}")
        for x in passes:
            if x not in PASSES:
                raise JobError(f"{where}.passes: unknown pass {x!r} (known: {', '.join(PASSES)})")
        if len(set(passes)) != len(passes):
            raise JobError(f"{where}.passes: a pass is named twice")
        problems.append(Problem(index, key, shape, list(passes)))
    skip = obj.get("skip", [])
    if not isinstance(skip, list):
        raise JobError("skip: expected a list of {index, peer, pass}")
    skipped = set()
    for n, x in enumerate(skip):
        where = f"skip[{n}]"
        _keys(x, where, ("index", "peer", "pass"), ())
        if x["peer"] not in PEERS or x["pass"] not in PASSES:
            raise JobError(f"{where}: unknown peer {x['peer']!r} or pass {x['pass']!r}")
        skipped.add((_int(x["index"], f"{where}.index"), x["peer"], x["pass"]))
    return Job([p for p in PEERS if p in peers] if peers else list(PEERS), settings, seed, problems, skipped)


def load_job(path):
    """parse_job() of the file at `path`; JobError names the file."""
    try:
        with open(path, encoding="utf-8") as f:
            obj = json.load(f)
    except OSError as e:
        raise JobError(f"{path}: cannot read: {e.strerror or e}") from None
    except json.JSONDecodeError as e:
        raise JobError(f"{path}: not valid JSON: {e.msg} (line {e.lineno}, column {e.colno})") from None
    try:
        return parse_job(obj)
    except JobError as e:
        raise JobError(f"{path}: {e}") from None


# ---------------------------------------------------------------------------------------------------------------
# Peers: one adapter per library. check() says before any work why a problem cannot run (None: try it);
# forward() is the call timed as "fwd" and differentiated as "bwd"; tensors in the peer's own layout.

class Unsupported(Exception):
    """Raised by an adapter when the library turns a problem down at call time."""


class ContextLost(RuntimeError):
    """The CUDA context is unusable after a measurement (a sticky error): nothing more can run in this process.
    main() exits with status 3; the caller starts a new process for the rest (the job's `skip`)."""


def first_line(text, limit=300):
    line = str(text).strip().splitlines()[0] if str(text).strip() else ""
    return line[:limit]


class Peer:
    name = ""

    def library(self):
        """What runs: library name and version."""
        raise NotImplementedError

    def check(self, shape):
        return None

    def prepare(self, shape, device):
        """Per-problem setup outside the timing (masks); state kept until release()."""

    def release(self):
        pass

    def to_native(self, t):
        """A (b, h, s, d) tensor in the peer's layout (a copy where it differs)."""
        return t

    def from_native(self, t):
        """The inverse of to_native(), as a view."""
        return t

    def forward(self, q, k, v, sinks):
        raise NotImplementedError


class SdpaPeer(Peer):
    """torch.nn.functional.scaled_dot_product_attention under sdpa_kernel(one backend). GQA via enable_gqa;
    causal via is_causal (seq_q == seq_k) or causal_lower_right (bottom-right aligned); a window and sink tokens
    as a materialized boolean attn_mask (seq_q x seq_k). No learned sinks."""
    BACKENDS = {"sdpa_flash": "FLASH_ATTENTION", "sdpa_cudnn": "CUDNN_ATTENTION",
                "sdpa_efficient": "EFFICIENT_ATTENTION"}

    def __init__(self, name):
        self.name = name
        self.kw = {}

    def library(self):
        import torch
        what = {"sdpa_flash": "flash (FlashAttention-2)", "sdpa_efficient": "efficient (memory-efficient)",
                "sdpa_cudnn": f"cuDNN {torch.backends.cudnn.version()}"}[self.name]
        return f"torch {torch.__version__} SDPA {what}"

    def check(self, shape):
        if shape.learned_sinks:
            return "learned sinks: SDPA has no per-head sink logit in its softmax denominator"
        if self.name == "sdpa_flash" and shape.window:
            return "a window / sink tokens need a materialized attn_mask, which the flash backend does not take"
        return None

    def prepare(self, shape, device):
        self.kw = {"enable_gqa": shape.heads_q != shape.heads_kv}
        if shape.window:
            self.kw["attn_mask"] = ref.visible(shape.seq_q, shape.seq_k, shape.causal, shape.window,
                                               shape.sink_tokens, device)
        elif shape.causal and shape.seq_q == shape.seq_k:
            self.kw["is_causal"] = True
        elif shape.causal:
            from torch.nn.attention.bias import causal_lower_right
            self.kw["attn_mask"] = causal_lower_right(shape.seq_q, shape.seq_k)

    def release(self):
        self.kw = {}

    def forward(self, q, k, v, sinks):
        import torch.nn.functional as F
        from torch.nn.attention import SDPBackend, sdpa_kernel
        with sdpa_kernel(getattr(SDPBackend, self.BACKENDS[self.name])):
            return F.scaled_dot_product_attention(q, k, v, **self.kw)


class FlexPeer(Peer):
    """torch.nn.attention.flex_attention, compiled once per process (dynamic=False), a block mask from the
    conventions' mask_mod, GQA via enable_gqa. Learned sinks by the LSE correction: O' = O * sigmoid(lse - s_h)
    (natural-log LSE: O' = O * e^lse / (e^lse + e^s_h)), computed in fp32 and rounded once to the dtype; its
    backward is autograd through that expression and flex's own backward."""
    name = "flex"
    _compiled = None

    def __init__(self):
        self.block_mask = None
        self.gqa = False

    def library(self):
        import torch
        try:
            import triton
            tv = f" (Triton {triton.__version__})"
        except Exception:
            tv = ""
        return f"torch {torch.__version__} FlexAttention{tv}"

    @classmethod
    def flex(cls):
        if cls._compiled is None:
            import torch
            from torch.nn.attention.flex_attention import flex_attention
            # One compiled function serves every problem: each shape is a recompile, and past dynamo's default
            # limit (8) it would fall back to eager flex (materialized scores) without failing.
            for knob in ("cache_size_limit", "recompile_limit", "accumulated_cache_size_limit",
                         "accumulated_recompile_limit"):
                if hasattr(torch._dynamo.config, knob):
                    setattr(torch._dynamo.config, knob, max(getattr(torch._dynamo.config, knob), 4096))
            cls._compiled = torch.compile(flex_attention, dynamic=False)
        return cls._compiled

    def prepare(self, shape, device):
        from torch.nn.attention.flex_attention import create_block_mask
        self.gqa = shape.heads_q != shape.heads_kv
        self.block_mask = None
        if not (shape.causal or shape.window):
            return
        off, causal, window, sink = shape.seq_k - shape.seq_q, shape.causal, shape.window, shape.sink_tokens

        def mask_mod(b, h, qi, kj):  # Shape.visible()
            diag = qi + off
            keep = kj <= diag if causal else kj >= 0
            if window:
                band = kj > diag - window
                if sink:
                    band = band | (kj < sink)
                keep = keep & band
            return keep

        self.block_mask = create_block_mask(mask_mod, None, None, shape.seq_q, shape.seq_k, device=device)

    def release(self):
        self.block_mask = None

    def forward(self, q, k, v, sinks):
        import torch
        flex = self.flex()
        kw = {"block_mask": self.block_mask, "enable_gqa": self.gqa}
        if sinks is None:
            return flex(q, k, v, **kw)
        try:
            from torch.nn.attention.flex_attention import AuxRequest
        except ImportError:
            o, lse = flex(q, k, v, return_lse=True, **kw)
        else:
            o, aux = flex(q, k, v, return_aux=AuxRequest(lse=True), **kw)
            lse = aux.lse
        corr = torch.sigmoid(lse.float() - sinks.float()[None, :, None])
        return (o.float() * corr.unsqueeze(-1)).to(o.dtype)


def fa4_version():
    """flash-attn-4's version when `import flash_attn.cute` works, else None."""
    try:
        import flash_attn.cute  # noqa: F401
    except Exception:
        return None
    from importlib import metadata
    for dist in ("flash-attn-4", "flash_attn_4", "flash-attn"):
        try:
            return metadata.version(dist)
        except Exception:
            pass
    import flash_attn
    return getattr(flash_attn, "__version__", "unknown")


class Fa4Peer(Peer):
    """FlashAttention-4 (flash_attn.cute.interface.flash_attn_func; CuTe DSL, sm90 / sm100 kernels), layout
    (b, s, h, d). GQA native; causal; window W as window_size = (W - 1, 0) with causal, (W - 1, seq_k) without
    (FA's local mask is bottom-right aligned: key j visible to query i when i + seq_k - seq_q - left <= j <=
    i + seq_k - seq_q + right, so left = W - 1 is our j > i + off - W); learned sinks as learnable_sink (fp32,
    heads_q). No sink tokens (its window has no sink band), fp16 / bf16 only."""
    name = "fa4"

    def __init__(self):
        self.kw = {}
        self.import_error = None
        self.func = None
        try:
            from flash_attn.cute.interface import flash_attn_func
            self.func = flash_attn_func
        except Exception as e:
            self.import_error = f"{type(e).__name__}: {first_line(e, 120)}"

    def library(self):
        return f"flash-attn-4 {fa4_version()}" if self.func else "flash-attn-4 (not importable)"

    def check(self, shape):
        if self.func is None:
            return f"flash_attn.cute not importable ({self.import_error})"
        if shape.dtype == "f32":
            return "FlashAttention-4 takes fp16 / bf16 only"
        if shape.sink_tokens:
            return "sink tokens: FlashAttention-4's window has no sink-token band"
        return None

    def prepare(self, shape, device):
        self.kw = {"causal": shape.causal}
        if shape.window:
            self.kw["window_size"] = (shape.window - 1, 0 if shape.causal else shape.seq_k)

    def release(self):
        self.kw = {}

    def to_native(self, t):
        return t.transpose(1, 2).contiguous()

    def from_native(self, t):
        return t.transpose(1, 2)

    def forward(self, q, k, v, sinks):
        r = self.func(q, k, v, learnable_sink=sinks, **self.kw)
        return r[0] if isinstance(r, tuple) else r


def make_peer(name):
    if name.startswith("sdpa_"):
        return SdpaPeer(name)
    return FlexPeer() if name == "flex" else Fa4Peer()


# ---------------------------------------------------------------------------------------------------------------
# One (problem, peer, pass): validate on a sample against the float64 reference, then time

class WrongResult(Exception):
    def __init__(self, validation):
        super().__init__("wrong result")
        self.validation = validation


def _sample(t, shape, groups, kv):
    """The sampled groups of a (b, h, s, d) tensor (kv: h counts kv heads), flattened and joined."""
    import torch
    parts = [t[b, kvh] if kv else t[b, ref.group_heads(shape, kvh)] for b, kvh in groups]
    return torch.cat([p.reshape(-1) for p in parts])


def _pick_worst(checks):
    """The validation to report among {output: compare()}: a failing one first, then the largest err / tolerance."""
    def ratio(v):
        if v["nan_count"] or not math.isfinite(v["tolerance"]):
            return math.inf
        return v["max_abs_err"] / v["tolerance"] if v["tolerance"] > 0 else (math.inf if v["max_abs_err"] else 0)
    name = max(checks, key=lambda n: (not checks[n]["passed"], ratio(checks[n])))
    v = dict(checks[name])
    v["output"] = name
    v["passed"] = all(c["passed"] for c in checks.values())
    return v


def validate_fwd(shape, inputs, o):
    """O (b, hq, sq, d) of a peer against the reference on the sampled groups; NaN counted over all of O."""
    import torch
    groups = ref.sample_groups(shape)
    r64 = [ref.group_reference(shape, inputs, b, kvh, torch.float64, False)["o"] for b, kvh in groups]
    nv = [ref.group_reference(shape, inputs, b, kvh, None, False)["o"] for b, kvh in groups]
    out = _sample(o, shape, groups, kv=False)
    v = ref.compare(out, torch.cat([x.reshape(-1) for x in r64]), torch.cat([x.reshape(-1) for x in nv]),
                    ref.fwd_atol(shape.dtype, shape.tf32), shape.dtype, nan_source=o)
    return _pick_worst({"o": v})


def validation_dout(shape, dout):
    """dO zero outside the sampled groups: the peer's dQ, dK, dV there are unchanged, and its d sinks is then the
    sampled rows' share, which the sample reference computes (d s_h sums over every batch)."""
    d = dout.new_zeros(dout.shape)
    for b, kvh in ref.sample_groups(shape):
        heads = ref.group_heads(shape, kvh)
        d[b, heads] = dout[b, heads]
    return d


def validate_bwd(shape, inputs, grads):
    """dq, dk, dv (b, h, s, d) and dsinks (hq,) of a peer's backward with validation_dout() against the reference
    on the sampled groups; NaN counted over each whole gradient."""
    import torch
    groups = ref.sample_groups(shape)
    r64 = [ref.group_reference(shape, inputs, b, kvh, torch.float64, True, inputs["dout"]) for b, kvh in groups]
    nv = [ref.group_reference(shape, inputs, b, kvh, None, True, inputs["dout"]) for b, kvh in groups]
    checks = {}
    atol = ref.bwd_atol(shape.dtype, shape.tf32, shape.grad_terms)
    for name, kv in (("dq", False), ("dk", True), ("dv", True)):
        joined = [torch.cat([x[name].reshape(-1) for x in part]) for part in (r64, nv)]
        checks[name] = ref.compare(_sample(grads[name], shape, groups, kv), joined[0], joined[1], atol,
                                   shape.dtype, nan_source=grads[name])
    if shape.learned_sinks:
        heads = sorted({h for _, kvh in groups for h in range(shape.heads_q)[ref.group_heads(shape, kvh)]})
        per_head = []
        for part, dt in ((r64, torch.float64), (nv, torch.float32)):
            acc = torch.zeros(shape.heads_q, dtype=dt, device=grads["dsinks"].device)
            for (b, kvh), x in zip(groups, part):
                acc[ref.group_heads(shape, kvh)] += x["dsinks"].to(dt)
            per_head.append(acc[heads])
        checks["dsinks"] = ref.compare(grads["dsinks"][heads], per_head[0], per_head[1], ref.dsink_atol(shape),
                                       "f32", nan_source=grads["dsinks"])
    return _pick_worst(checks)


def device_bytes_of(call):
    """[bytes] device memory one call allocates at its peak (torch's caching allocator; results included)."""
    import torch
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    r = call()
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - base
    del r
    return int(peak)


class _tf32_mode:
    """Context: TF32 matmuls in cuBLAS and cuDNN on or off as the problem's tf32 says (restored on exit)."""

    def __init__(self, on):
        self.on = bool(on)

    def __enter__(self):
        import torch
        self.saved = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
        torch.backends.cuda.matmul.allow_tf32 = self.on
        torch.backends.cudnn.allow_tf32 = self.on

    def __exit__(self, *exc):
        import torch
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = self.saved
        return False


def run_pass(peer, shape, inputs, pass_name, settings, flusher, output_hook=None, clocks=None):
    """(timing, validation, device_bytes) of one pass, or raises WrongResult / the peer's exception.
    fwd: peer.forward() on inputs that require grad (the training forward, which keeps what the backward needs,
    as flashtune's forward writes O and LSE). bwd: torch.autograd.grad(O, inputs, dO, retain_graph=True) from one
    saved forward (inputs q, k, v and the sinks with learned sinks): the backward alone. `output_hook(peer, pass,
    outputs)` (tests) may replace the outputs that validation sees: {"o"} or {"dq", "dk", "dv"[, "dsinks"]}."""
    import torch
    q, k, v = (peer.to_native(inputs[n]).detach().requires_grad_(True) for n in ("q", "k", "v"))
    sinks = inputs["sinks"].detach().clone().requires_grad_(True) if inputs["sinks"] is not None else None
    with _tf32_mode(shape.tf32):
        o = peer.forward(q, k, v, sinks)
    if pass_name == "fwd":
        outputs = {"o": peer.from_native(o.detach())}
        del o
        if output_hook:
            outputs = output_hook(peer.name, pass_name, outputs)
        validation = validate_fwd(shape, inputs, outputs["o"])
        del outputs

        def call():
            return peer.forward(q, k, v, sinks)
    else:
        wrt = [q, k, v] + ([sinks] if sinks is not None else [])
        with _tf32_mode(shape.tf32):
            g = torch.autograd.grad(o, wrt, peer.to_native(validation_dout(shape, inputs["dout"])),
                                    retain_graph=True)
        outputs = {n: peer.from_native(x) for n, x in zip(("dq", "dk", "dv"), g)}
        if sinks is not None:
            outputs["dsinks"] = g[3]
        del g
        if output_hook:
            outputs = output_hook(peer.name, pass_name, outputs)
        validation = validate_bwd(shape, inputs, outputs)
        del outputs
        dout = peer.to_native(inputs["dout"])

        def call():
            return torch.autograd.grad(o, wrt, dout, retain_graph=True)
    if not validation["passed"]:
        raise WrongResult(validation)
    with _tf32_mode(shape.tf32):
        nbytes = device_bytes_of(call)
        timing = measure(call, settings, flusher, clocks)
    return timing, validation, nbytes


# ---------------------------------------------------------------------------------------------------------------
# The job loop and the result file

def _json_safe(x):
    """Non-finite floats as null (JSON has no NaN / Infinity)."""
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {k: _json_safe(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_json_safe(v) for v in x]
    return x


def write_result(path, result):
    """Writes `result` to `path` atomically (a temporary file beside it, then os.replace)."""
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(_json_safe(result), f, indent=1, allow_nan=False)
        f.write("\n")
    os.replace(tmp, path)


def environment():
    """The result's "gpu" and "libraries" objects."""
    import torch
    props = torch.cuda.get_device_properties(0)
    try:
        import triton
        triton_version = triton.__version__
    except Exception:
        triton_version = None
    cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    return ({"name": torch.cuda.get_device_name(0), "uuid": str(getattr(props, "uuid", "") or ""),
             "l2_bytes": int(getattr(props, "L2_cache_size", 0) or 0)},
            {"torch": torch.__version__, "cuda": torch.version.cuda, "cudnn": str(cudnn) if cudnn else None,
             "triton": triton_version, "flash_attn_4": fa4_version()})


def _is_oom(exc):
    import torch
    return isinstance(exc, torch.cuda.OutOfMemoryError) or "out of memory" in str(exc).lower()


def _classify(exc, caught):
    """(status, reason) of an exception a peer raised; `caught`: warnings recorded meanwhile (SDPA says why a
    backend declined in warnings before "No available kernel")."""
    if isinstance(exc, Unsupported):
        return "unsupported", first_line(exc)
    if _is_oom(exc):
        return "error", f"out of memory: {first_line(exc)}"
    if "No available kernel" in str(exc):
        why = [first_line(w.message) for w in caught
               if not str(w.message).rstrip().endswith(":") and "not used because" not in str(w.message)]
        return "unsupported", first_line(exc) + (f" ({why[0]})" if why else "")
    return "error", f"{type(exc).__name__}: {first_line(exc)}"


def _context_error():
    """None while the CUDA context works; else the sticky error's first line (torch.cuda.synchronize raises it)."""
    import torch
    try:
        torch.cuda.synchronize()
        return None
    except Exception as e:  # an illegal address, a launch failure...: every later CUDA call fails the same way
        return first_line(e)


def _free():
    import torch
    gc.collect()
    torch.cuda.empty_cache()


def _progress(n, total, problem, peer, pass_name, entry, flops):
    msg = f"{PROG}: [{n}/{total}] problem {problem.index} {peer} {pass_name}: {entry['status']}"
    t, v = entry["timing"], entry["validation"]
    if t:
        scale = 2.5 if pass_name == "bwd" else 1.0
        msg += f" {t['median_ms']:.4f} ms ({scale * flops / t['median_ms'] / 1e9:.1f} TFLOP/s)"
    if v:
        msg += f", {v['output']} err {v['max_abs_err']:.3g} <= {v['tolerance']:.3g}" if v["passed"] else \
            f", {v['output']} err {v['max_abs_err']:.3g} > {v['tolerance']:.3g} (NaN/Inf {v['nan_count']})"
    if entry["reason"]:
        msg += f": {entry['reason']}"
    print(msg, file=sys.stderr, flush=True)


def _set_in_flight(result, out_path, index, peer, pass_name):
    """Names (index, peer, pass) as the measurement under way in the result file, rewritten when that changes."""
    now = {"index": index, "peer": peer, "pass": pass_name}
    if result.get("in_flight") != now:
        result["in_flight"] = now
        write_result(out_path, result)


def run_job(job, out_path, output_hook=None):
    """Runs every (problem, peer, pass) of `job` on CUDA device 0, rewriting `out_path` after each result.
    One peer's failure never stops the others. Returns the result object (python/README.md)."""
    import torch
    gpu, libraries = environment()
    result = {"version": VERSION, "gpu": gpu, "libraries": libraries, "results": [], "in_flight": None}
    write_result(out_path, result)
    device = "cuda"
    flusher = L2Flusher(gpu["l2_bytes"], device) if job.measure.mode == "cold" else None
    clocks = ClockProbe.open(gpu["uuid"]) if gpu["uuid"] else None  # None without NVML: no clock recorded
    peers = [make_peer(name) for name in job.peers]
    total = sum(1 for p in job.problems for peer in peers for s in p.passes if (p.index, peer.name, s) not in job.skip)
    done = 0
    for problem in job.problems:
        shape = problem.shape
        seed = job.seed or random.SystemRandom().randrange(1, 2**31)
        flops = shape.fwd_flops()
        for peer in peers:
            passes = [s for s in problem.passes if (problem.index, peer.name, s) not in job.skip]
            if not passes:  # measured (or lost) by an earlier process: not even prepared again
                continue
            try:
                library = peer.library()
            except Exception as e:
                library = f"{peer.name} ({type(e).__name__})"
            why = peer.check(shape)
            prepared = None
            # Each measurement is named before it runs (the first one before the peer's setup too): if the process
            # dies during it, the caller knows which measurement did it.
            _set_in_flight(result, out_path, problem.index, peer.name, passes[0])
            if why is None:
                try:
                    peer.prepare(shape, device)
                    prepared = True
                except Exception as e:  # the peer's setup failed: every pass says so
                    prepared = _classify(e, [])
            for pass_name in passes:
                _set_in_flight(result, out_path, problem.index, peer.name, pass_name)
                entry = {"index": problem.index, "peer": peer.name, "pass": pass_name, "library": library,
                         "status": "ok", "reason": "", "seed": seed, "timing": None, "validation": None,
                         "device_bytes": None}
                if why is not None:
                    entry.update(status="unsupported", reason=why)
                elif prepared is not True:
                    entry.update(status=prepared[0], reason=prepared[1])
                else:
                    inputs = None
                    with warnings.catch_warnings(record=True) as caught:
                        warnings.simplefilter("always")
                        try:
                            inputs = ref.make_inputs(shape, seed, device)
                            timing, validation, nbytes = run_pass(peer, shape, inputs, pass_name, job.measure,
                                                                  flusher, output_hook, clocks)
                            entry.update(timing=timing, validation=validation, device_bytes=nbytes)
                        except WrongResult as w:
                            entry.update(status="wrong_result", validation=w.validation,
                                         reason=f"{w.validation['output']}: max|err| {w.validation['max_abs_err']:.3g}"
                                                f" > tolerance {w.validation['tolerance']:.3g}"
                                                f" or {w.validation['nan_count']} NaN/Inf")
                        except Exception as e:
                            status, reason = _classify(e, caught)
                            entry.update(status=status, reason=reason)
                    del inputs
                    try:
                        _free()
                    except Exception:
                        pass
                lost = _context_error()
                if lost:
                    entry.update(status="error", reason=(entry["reason"] + "; " if entry["reason"] else "") +
                                 f"the CUDA context is unusable after it ({lost})")
                result["results"].append(entry)
                result["in_flight"] = None
                write_result(out_path, result)
                done += 1
                _progress(done, total, problem, peer.name, pass_name, entry, flops)
                if lost:
                    raise ContextLost(f"{peer.name} {pass_name} on problem {problem.index} left the CUDA context "
                                      f"unusable ({lost})")
            peer.release()
            _free()
    return result


# ---------------------------------------------------------------------------------------------------------------

def _die(msg):
    print(f"{PROG}: {msg}", file=sys.stderr)
    return 2


class _ArgumentParser(argparse.ArgumentParser):
    def error(self, message):  # one line and status 2, as every other mistake
        sys.exit(_die(message))


def main(argv=None):
    ap = _ArgumentParser(prog=f"python -m {PROG}",
                                 description="Measure peer attention libraries on flashtune's problems.")
    ap.add_argument("--job", required=True, help="job JSON (python/README.md)")
    ap.add_argument("--out", required=True, help="result JSON, rewritten after every result")
    args = ap.parse_args(argv)
    try:
        job = load_job(args.job)
    except JobError as e:
        return _die(str(e))
    try:
        import torch
    except Exception:
        return _die("torch is not importable")
    if not torch.cuda.is_available():
        return _die("no CUDA device")
    try:
        write_result(args.out, {"version": VERSION, "results": []})
    except OSError as e:
        return _die(f"{args.out}: cannot write: {e.strerror or e}")
    t0 = time.time()
    try:
        result = run_job(job, args.out)
    except ContextLost as e:
        print(f"{PROG}: {e}; what was measured is in {args.out}", file=sys.stderr)
        return 3
    counts = {}
    for r in result["results"]:
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    summary = ", ".join(f"{counts[s]} {s}" for s in STATUSES if s in counts) or "nothing to run"
    print(f"{PROG}: {len(result['results'])} results in {time.time() - t0:.1f} s ({summary}) -> {args.out}",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
