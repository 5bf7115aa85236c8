"""python/flashtune/_reference.py: flashtune's attention problem in Python, and its references on the GPU.

One place for what the harness defines (harness/kernels/problem_views.cpp, attention.cpp, attn_bwd_*.cpp,
reference/compare.hpp) and the Python side needs: the problem's dims and their defaults, the mask of DESIGN.md
"Attention conventions", the input fills, the per-dtype atol, the eager attention used as the float64 oracle and
as the naive same-precision result, and the pass rule. flashtune.peers and python/tests/test_torch_gpu.py use it.
Imports without torch: the torch-side functions import it when called.
"""
import math
from dataclasses import dataclass

DTYPES = ("f16", "bf16", "f32")               # the harness's dtype names (core::DType)
TORCH_DTYPES = {"f16": "float16", "bf16": "bfloat16", "f32": "float32"}  # torch.<name>
ULP_BITS = {"f16": 10, "bf16": 7, "f32": 23}  # explicit mantissa bits

# Dims of the attention families (harness/kernels/attention.cpp problem_dims / optional_problem_dims).
REQUIRED_DIMS = ("batch", "heads_q", "seq_q", "head_dim")
OPTIONAL_DIMS = {  # name -> default; -1: heads_kv = heads_q, seq_k = seq_q (attn::complete_problem)
    "heads_kv": -1, "seq_k": -1, "causal": 0, "window": 0, "sink_tokens": 0, "learned_sinks": 0, "tf32": 0,
    "qk_range": 1, "sink_bias": 0,
}
# The softmax scale is no problem dim: every flashtune kernel uses 1 / sqrt(head_dim) (attention.cpp fwd_params).


@dataclass(frozen=True)
class Shape:
    """One attention problem as attn::Shape reads it: sizes, mask, learned sinks, input ranges and dtype.
    Layout (batch, heads, seq, head_dim); query head h reads kv head h // group."""
    batch: int
    heads_q: int
    heads_kv: int
    seq_q: int
    seq_k: int
    head_dim: int
    dtype: str = "f32"          # f16 | bf16 | f32
    causal: bool = False        # key j visible only when j <= i + seq_k - seq_q (bottom-right aligned)
    window: int = 0             # [keys] W > 0: key j visible only when j > i + seq_k - seq_q - W; 0 = none
    sink_tokens: int = 0        # [keys] the first keys stay visible through the window (causal still holds)
    learned_sinks: bool = False  # one logit per query head in the softmax denominator (GPT-OSS)
    tf32: bool = False          # f32 only: TF32 tensor cores
    qk_range: int = 1           # Q and K uniform in [-qk_range, qk_range]
    sink_bias: int = 0          # learned sink logits uniform in [sink_bias - 1, sink_bias + 1]

    @classmethod
    def from_dims(cls, dims, dtype):
        """The Shape of a problem given as harness dims (a dict of ints) and a dtype name, optional dims at their
        defaults. Raises ValueError with attn::check_problem's reasons (head_dim is not restricted here)."""
        if dtype not in DTYPES:
            raise ValueError(f"unknown dtype '{dtype}' (known: {', '.join(DTYPES)})")
        known = set(REQUIRED_DIMS) | set(OPTIONAL_DIMS)
        for name, value in dims.items():
            if name not in known:
                raise ValueError(f"unknown dimension '{name}' (known: {', '.join(sorted(known))})")
            if isinstance(value, bool) or not isinstance(value, int):
                raise ValueError(f"dimension '{name}' must be an integer, got {value!r}")
        for name in REQUIRED_DIMS:
            if name not in dims:
                raise ValueError(f"missing dimension '{name}'")
        d = {n: dims.get(n, default) for n, default in OPTIONAL_DIMS.items()}
        d.update({n: dims[n] for n in REQUIRED_DIMS})
        if d["heads_kv"] < 0:
            d["heads_kv"] = d["heads_q"]
        if d["seq_k"] < 0:
            d["seq_k"] = d["seq_q"]
        for name in ("batch", "heads_q", "heads_kv", "seq_q", "seq_k", "head_dim"):
            if d[name] < 1:
                raise ValueError(f"{name} must be >= 1")
        if d["heads_q"] % d["heads_kv"] != 0:
            raise ValueError(f"heads_q ({d['heads_q']}) must be a multiple of heads_kv ({d['heads_kv']})")
        for name in ("causal", "learned_sinks", "tf32"):
            if d[name] not in (0, 1):
                raise ValueError(f"{name} must be 0 or 1")
        if d["window"] < 0:
            raise ValueError("window must be >= 0")
        if d["sink_tokens"] < 0:
            raise ValueError("sink_tokens must be >= 0")
        if d["qk_range"] < 1:
            raise ValueError("qk_range must be >= 1")
        if d["tf32"] and dtype != "f32":
            raise ValueError("tf32 applies to dtype f32 only")
        if d["sink_tokens"] > 0 and d["window"] == 0:
            raise ValueError("sink_tokens needs a window (without one every key is visible anyway)")
        if d["seq_q"] * d["head_dim"] >= 2**31 - 1 or d["seq_k"] * d["head_dim"] >= 2**31 - 1:
            raise ValueError("seq * head_dim must be < 2^31")
        for name in ("causal", "learned_sinks", "tf32"):
            d[name] = bool(d[name])
        return cls(dtype=dtype, **d)

    @property
    def group(self):
        """Query heads per kv head (GQA)."""
        return self.heads_q // self.heads_kv

    @property
    def scale(self):
        """S = scale * Q K^T."""
        return 1.0 / math.sqrt(self.head_dim)

    def visible(self, i, j):
        """Key j visible to query i (DESIGN.md): ((W == 0 or j > i + off - W) or j < sink_tokens) and
        (not causal or j <= i + off), off = seq_k - seq_q. No bounds check."""
        diag = i + self.seq_k - self.seq_q
        in_window = self.window == 0 or j > diag - self.window
        return (in_window or j < self.sink_tokens) and (not self.causal or j <= diag)

    def visible_pairs(self):
        """Visible (i, j) pairs, i < seq_q, j < seq_k, over all batches and query heads; O(seq_q).
        Forward FLOPs are 4 * head_dim * this, backward 2.5x (DESIGN.md)."""
        per_head = 0
        for i in range(self.seq_q):
            diag = i + self.seq_k - self.seq_q
            hi = min(self.seq_k, diag + 1) if self.causal else self.seq_k   # keys j < hi pass the causal test
            hi = max(hi, 0)
            lo = max(0, diag - self.window + 1) if self.window else 0     # keys j >= lo are in the window
            per_head += max(0, hi - lo) + max(0, min(self.sink_tokens, lo, hi))
        return per_head * self.batch * self.heads_q

    @property
    def grad_terms(self):
        """The most terms one gradient element sums: seq_k for dQ, seq_q x the GQA group for dK and dV."""
        return max(self.seq_k, self.seq_q * self.group)

    def fwd_flops(self):
        return 4.0 * self.head_dim * self.visible_pairs()


# ---------------------------------------------------------------------------------------------------------------
# Tolerances: the harness's atol beside twice the naive same-precision error (DESIGN.md pass rule)

def fwd_atol(dtype, tf32=False):
    """The forward's atol on O (harness/kernels/attention.cpp fwd_atol)."""
    return {"f16": 1e-3, "bf16": 8e-3}.get(dtype, 2e-3 if tf32 else 2e-5)


def bwd_atol(dtype, tf32=False, terms=0):
    """The backward's atol on dQ, dK, dV (harness/kernels/attn_bwd_stage.cpp GradStage::default_atol); `terms`
    (TF32 only): the most terms a gradient element sums, max(seq_k, seq_q * group) (Shape.grad_terms)."""
    if dtype == "f32":
        return 1e-3 * math.sqrt(max(1.0, terms / 16.0)) if tf32 else 2e-5
    return 5e-4 if dtype == "f16" else 4e-3


def dsink_atol(shape):
    """The learned sinks' gradient atol (attn_bwd_rows.cpp attn_bwd_dsink): fp32 sums of batch * seq_q terms."""
    return 1e-6 * math.sqrt(shape.batch * shape.seq_q)


def storage_atol(dtype, ref_absmax, atol):
    """reference/compare.hpp storage_atol: `atol` raised for a 16-bit output to one ulp of `dtype` at the largest
    finite |ref64| (`ref_absmax`); fp32 keeps `atol`."""
    if dtype == "f32" or not (ref_absmax > 0) or math.isinf(ref_absmax):
        return atol
    ilogb = math.frexp(ref_absmax)[1] - 1
    return max(atol, math.ldexp(1.0, ilogb - ULP_BITS[dtype]))


def dtype_key(torch_dtype):
    """The harness's name (f16, bf16, f32) of a torch dtype."""
    name = str(torch_dtype).replace("torch.", "")
    for key, tname in TORCH_DTYPES.items():
        if tname == name:
            return key
    raise ValueError(f"no flashtune dtype for {torch_dtype}")


# ---------------------------------------------------------------------------------------------------------------
# torch side (imported lazily)

def torch_dtype(dtype):
    import torch
    return getattr(torch, TORCH_DTYPES[dtype])


def visible(sq, sk, causal, window, sink_tokens, device, row0=0, rows=None):
    """Bool (rows, sk): key j visible to query i for i in [row0, row0 + rows) (rows None: sq - row0), under
    Shape.visible's rule. With sq == sk, causal, a window and sinks this is GStar's (sliding | sink) & causal."""
    import torch
    rows = sq - row0 if rows is None else rows
    i = torch.arange(row0, row0 + rows, device=device)[:, None]
    j = torch.arange(sk, device=device)[None, :]
    off = sk - sq
    m = torch.ones(rows, sk, dtype=torch.bool, device=device)
    if causal:
        m &= j <= i + off
    if window:
        band = j > i + off - window
        if sink_tokens:
            band |= j < sink_tokens
        m &= band
    return m


def expand_kv(x, groups):
    """(b, hkv, s, d) -> (b, hkv * groups, s, d): query head h reads kv head h // groups."""
    return x if groups == 1 else x.repeat_interleave(groups, dim=1)


def attention(q, k, v, *, causal=False, window=0, sink_tokens=0, sinks=None, scale=None, compute=None, row0=0,
              seq_q=None):
    """(o, lse) of attention by the definition, differentiable by autograd; q (b, hq, rows, d) holds query rows
    row0 .. row0 + rows of a problem with seq_q query rows (None: rows, row0 0), k and v (b, hkv, sk, d).
    compute=torch.float64: every step in float64 (the oracle ref64). compute=None: "naive same precision" like the
    GStar grader's naive attention: S and P V in the inputs' dtype, softmax and LSE in float32 (sink column
    included). A row with no visible key and no learned sink has O = 0 and LSE = -inf (reference/attention.hpp)."""
    import torch
    b, hq, rows, d = q.shape
    groups = hq // k.shape[1]
    sk = k.shape[2]
    sq = rows if seq_q is None else seq_q
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    if compute is not None:
        q, k, v = q.to(compute), k.to(compute), v.to(compute)
    kk, vv = expand_kv(k, groups), expand_kv(v, groups)
    s = (q @ kk.transpose(-1, -2)) * scale
    mask = visible(sq, sk, causal, window, sink_tokens, q.device, row0, rows)
    s = s.masked_fill(~mask, float("-inf"))
    soft = compute if compute is not None else torch.float32
    s = s.to(soft)
    if sinks is not None:
        col = sinks.to(soft)[None, :, None, None].expand(b, hq, rows, 1)
        s = torch.cat([s, col], dim=-1)
    lse = torch.logsumexp(s, dim=-1)
    p = torch.softmax(s, dim=-1)
    if sinks is not None:
        p = p[..., :sk]
    else:
        empty = ~mask.any(dim=-1)
        if bool(empty.any()):  # softmax over no key is NaN; the convention's O is 0
            p = p.masked_fill(empty[:, None], 0.0)
    o = p.to(vv.dtype) @ vv
    return o, lse


def round_tf32(x):
    """float32 tensor rounded to TF32 (10 explicit mantissa bits) as reference/dtype.cpp round_tf32 does (half of
    the dropped bits' unit added, then truncated); non-finite values kept."""
    import torch
    bits = x.float().contiguous().view(torch.int32)
    r = ((bits + 0x1000) & ~0x1FFF).view(torch.float32)
    return torch.where(torch.isfinite(x), r, x.float())


def make_inputs(shape, seed, device="cuda"):
    """Fresh inputs of `shape` drawn as the harness draws them (attention.cpp fwd_buffers, attn_bwd_stage.cpp):
    Q, K uniform in [-qk_range, qk_range], V and dO uniform in [-1, 1] (in fp32, then rounded to the dtype), learned
    sink logits (fp32, heads_q) uniform in [sink_bias - 1, sink_bias + 1]. One torch generator seeded with `seed`
    draws q, k, v, sinks, dout in that order, so a seed gives the same inputs to every peer.
    Returns {"q", "k", "v", "dout", "sinks"} ("sinks" None without learned sinks); layout (b, h, s, d)."""
    import torch
    g = torch.Generator(device=device)
    g.manual_seed(seed)
    dt = torch_dtype(shape.dtype)

    def uniform(size, lo, hi, dtype):
        x = torch.rand(size, generator=g, device=device, dtype=torch.float32)
        return (x * (hi - lo) + lo).to(dtype)

    r = float(shape.qk_range)
    qs = (shape.batch, shape.heads_q, shape.seq_q, shape.head_dim)
    ks = (shape.batch, shape.heads_kv, shape.seq_k, shape.head_dim)
    q = uniform(qs, -r, r, dt)
    k = uniform(ks, -r, r, dt)
    v = uniform(ks, -1.0, 1.0, dt)
    bias = float(shape.sink_bias)
    sinks = uniform((shape.heads_q,), bias - 1.0, bias + 1.0, torch.float32) if shape.learned_sinks else None
    dout = uniform(qs, -1.0, 1.0, dt)
    return {"q": q, "k": k, "v": v, "sinks": sinks, "dout": dout}


def sample_groups(shape):
    """The (batch, kv head) groups validation checks: the first and the last (one when they coincide)."""
    first, last = (0, 0), (shape.batch - 1, shape.heads_kv - 1)
    return [first] if first == last else [first, last]


def group_heads(shape, kvh):
    """The query heads that read kv head `kvh`, as a slice."""
    return slice(kvh * shape.group, (kvh + 1) * shape.group)


def _row_chunk(shape, budget=1 << 24):
    """Query rows per chunk so that one group's score tensor (group x rows x seq_k) holds <= `budget` elements."""
    return max(1, min(shape.seq_q, budget // max(1, shape.group * shape.seq_k)))


def group_reference(shape, inputs, b, kvh, compute, grads, dout=None):
    """Attention of one (batch b, kv head kvh) group: all its query heads and rows, in row chunks (memory bounded
    for 16k sequences). compute=torch.float64: the oracle; None: naive same precision (with tf32, Q, K, V and dO
    rounded to TF32 first, then exact fp32, as the harness's naive does).
    Returns {"o": (group, seq_q, d)} and, with `grads` (dout: the full (b, hq, sq, d) tensor), "dq" (group, sq, d),
    "dk", "dv" (seq_k, d) and, with learned sinks, "dsinks" (group,): this group's share of d s_h."""
    import torch
    heads = group_heads(shape, kvh)
    q = inputs["q"][b:b + 1, heads]
    k = inputs["k"][b:b + 1, kvh:kvh + 1]
    v = inputs["v"][b:b + 1, kvh:kvh + 1]
    sinks = inputs["sinks"][heads] if inputs["sinks"] is not None else None
    do = dout[b:b + 1, heads] if grads else None
    naive = compute is None
    if naive and shape.tf32:
        q, k, v = round_tf32(q), round_tf32(k), round_tf32(v)
        do = round_tf32(do) if grads else None
    if compute is not None:
        q, k, v = q.to(compute), k.to(compute), v.to(compute)
        sinks = sinks.to(compute) if sinks is not None else None
        do = do.to(compute) if grads else None
    acc = torch.float32 if naive else compute  # partial sums of dK, dV, dsinks over the chunks
    mask = dict(causal=shape.causal, window=shape.window, sink_tokens=shape.sink_tokens)
    chunk = _row_chunk(shape)
    out = {"o": torch.empty(shape.group, shape.seq_q, shape.head_dim, dtype=q.dtype, device=q.device)}
    if grads:
        out["dq"] = torch.empty_like(out["o"])
        out["dk"] = torch.zeros(shape.seq_k, shape.head_dim, dtype=acc, device=q.device)
        out["dv"] = torch.zeros_like(out["dk"])
        if sinks is not None:
            out["dsinks"] = torch.zeros(shape.group, dtype=acc, device=q.device)
    with _exact_fp32():
        for r0 in range(0, shape.seq_q, chunk):
            r1 = min(shape.seq_q, r0 + chunk)
            qc = q[:, :, r0:r1]
            if not grads:
                with torch.no_grad():
                    o, _ = attention(qc, k, v, sinks=sinks, scale=shape.scale, row0=r0, seq_q=shape.seq_q, **mask)
                out["o"][:, r0:r1] = o[0]
                continue
            leaves = [t.detach().clone().requires_grad_(True) for t in (qc, k, v)]
            sl = sinks.detach().clone().requires_grad_(True) if sinks is not None else None
            o, _ = attention(*leaves, sinks=sl, scale=shape.scale, row0=r0, seq_q=shape.seq_q, **mask)
            wrt = leaves + ([sl] if sl is not None else [])
            g = torch.autograd.grad(o, wrt, do[:, :, r0:r1].to(o.dtype))
            out["o"][:, r0:r1] = o.detach()[0]
            out["dq"][:, r0:r1] = g[0][0]
            out["dk"] += g[1][0, 0].to(acc)
            out["dv"] += g[2][0, 0].to(acc)
            if sl is not None:
                out["dsinks"] += g[3].to(acc)
    if grads and naive:  # stored in the input dtype, as the naive backward's outputs are
        out["dk"], out["dv"] = out["dk"].to(q.dtype), out["dv"].to(q.dtype)
        if "dsinks" in out:
            out["dsinks"] = out["dsinks"].to(inputs["sinks"].dtype)
    return out


class _exact_fp32:
    """Context: fp32 matmuls exact (no TF32) in cuBLAS and cuDNN, the previous settings restored on exit."""

    def __enter__(self):
        import torch
        self.saved = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False

    def __exit__(self, *exc):
        import torch
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = self.saved
        return False


def compare(out, ref64, naive, atol, dtype=None, nan_source=None):
    """reference/compare.hpp's pass rule on tensors of one shape:
      max_abs_err = max |out - ref64| over finite outputs (equal values, infinities included, differ by 0)
      max_rel_err = max |out - ref64| / max(|ref64|, 1e-6)
      naive_err   = max |naive - ref64|,  tolerance = 2 * naive_err + atol'
      nan_count   = NaN or Inf elements of `nan_source` (default `out`: pass the whole output when `out` is a sample)
      passed      = nan_count == 0, tolerance finite and max_abs_err <= tolerance
    atol' = storage_atol(dtype, max|ref64|, atol) with `dtype` the output's harness dtype name (None: out's)."""
    import torch
    dtype = dtype or dtype_key(out.dtype)
    o, r, n = out.double(), ref64.double(), naive.double()

    def err(a):
        e = (a - r).abs()
        e = torch.where(a == r, torch.zeros_like(e), e)
        return torch.nan_to_num(e, nan=math.inf)

    finite = torch.isfinite(o)
    e = torch.where(finite, err(o), torch.zeros_like(o))
    src = out if nan_source is None else nan_source
    nan_count = int((~torch.isfinite(src)).sum().item())
    max_abs = float(e.max().item()) if e.numel() else 0.0
    max_rel = float((e / r.abs().clamp_min(1e-6)).max().item()) if e.numel() else 0.0
    naive_err = float(err(n).max().item()) if n.numel() else 0.0
    ref_finite = r[torch.isfinite(r)]
    big = float(ref_finite.abs().max().item()) if ref_finite.numel() else 0.0
    tol = 2 * naive_err + storage_atol(dtype, big, atol)
    passed = nan_count == 0 and math.isfinite(tol) and max_abs <= tol
    return {"max_abs_err": max_abs, "max_rel_err": max_rel, "naive_err": naive_err, "tolerance": tol,
            "nan_count": nan_count, "passed": passed}
