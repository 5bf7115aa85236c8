"""python/bench/attention_e2e.py: flashtune.attention timed end to end through PyTorch, as a model would call it.

Measures on one GPU, in one process:
  1. forward, and forward + backward through autograd (torch.autograd.grad over q, k, v, sinks: the real chain of
     custom op, autograd node, contiguity and sink casts), CUDA events around each sample, a 256 MiB buffer
     written before each sample (cold L2), warm-up first, median / p10 / p90 over --samples samples;
  2. host overhead per call [us]: a tiny problem called N times after warm-up, CPU time per call, for
     flashtune.attention through each eager path (the C++ extension when built, and Python + ctypes), without and
     with requires_grad, the bare custom op, the bare ctypes Runtime.forward and SDPA (for orientation);
     the GPU time per call beside it says whether the GPU, not the host, bounded that loop;
  3. a fresh process's time from its start to its first launch done (subprocess), with an empty CUBIN cache
     (cold: pick + NVRTC compile) and again with the cache it left (warm);
  4. with --peers PATH (../shared/peers/peers.py or a file like it): that file imported at run time, its sections
     (--peer-sections) run in this process after flashtune, their emitted rows shown beside ours; flashtune is
     also timed with the peers' own `bench` function when the file has one, so both sides share a timer.
Prints a table; writes everything as JSON to --out. Default shape: GPT-OSS (batch 4, 64 / 8 heads, head_dim 64,
seq 4096, causal, window 128, learned sinks, bf16). Needs FLASHTUNE_CONFIGS (or --configs) and the library.
"""
import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # python/, so the bench runs from a checkout without installing
import flashtune  # noqa: E402
from flashtune import _runtime  # noqa: E402

DTYPES = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}
L2_FLUSH_BYTES = 256 << 20  # [bytes] written before each sample: larger than any current GPU's L2


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--heads-q", type=int, default=64)
    p.add_argument("--heads-kv", type=int, default=8)
    p.add_argument("--seq-q", type=int, default=4096)
    p.add_argument("--seq-k", type=int, default=None, help="default: seq-q")
    p.add_argument("--head-dim", type=int, default=64)
    p.add_argument("--causal", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--window", type=int, default=128, help="0: none")
    p.add_argument("--sink-tokens", type=int, default=0)
    p.add_argument("--learned-sinks", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--dtype", choices=sorted(DTYPES), default="bf16")
    p.add_argument("--samples", type=int, default=100, help="timed samples per measurement")
    p.add_argument("--warmup", type=int, default=10, help="untimed calls before the samples")
    p.add_argument("--host-calls", type=int, default=2000, help="calls per host-overhead measurement")
    p.add_argument("--no-first-launch", action="store_true", help="skip the fresh-process measurements")
    p.add_argument("--configs", help="export JSON (default: $FLASHTUNE_CONFIGS)")
    p.add_argument("--peers", help="path of a peers file (../shared/peers/peers.py) to import and run beside")
    p.add_argument("--peer-sections", default="flex_cases",
                   help="comma-separated functions of the peers file to run (default: flex_cases)")
    p.add_argument("--out", default="attention_e2e.json", help="JSON results")
    return p.parse_args(argv)


# ---------------------------------------------------------------------------------------------------------------
# Shapes and FLOPs

def visible_pairs(sq, sk, causal, window, sink_tokens):
    """(i, j) pairs visible under the mask of DESIGN.md (per batch and query head)."""
    off, total = sk - sq, 0
    for i in range(sq):
        hi = min(sk - 1, i + off) if causal else sk - 1
        lo = max(0, i + off - window + 1) if window else 0
        if hi < lo:
            band = 0
        else:
            band = hi - lo + 1
        sinks = min(sink_tokens, lo, hi + 1) if window and sink_tokens else 0  # sink keys before the band
        total += band + max(0, sinks)
    return total


def make_inputs(a, requires_grad=True, seed=0):
    torch.manual_seed(seed)
    dt, sk = DTYPES[a.dtype], a.seq_k or a.seq_q
    q = torch.randn(a.batch, a.heads_q, a.seq_q, a.head_dim, device="cuda", dtype=dt, requires_grad=requires_grad)
    k = torch.randn(a.batch, a.heads_kv, sk, a.head_dim, device="cuda", dtype=dt, requires_grad=requires_grad)
    v = torch.randn(a.batch, a.heads_kv, sk, a.head_dim, device="cuda", dtype=dt, requires_grad=requires_grad)
    s = torch.randn(a.heads_q, device="cuda", dtype=torch.float32, requires_grad=requires_grad) \
        if a.learned_sinks else None
    return q, k, v, s


def call_kwargs(a):
    return dict(causal=a.causal, window=a.window or None, sink_tokens=a.sink_tokens)


# ---------------------------------------------------------------------------------------------------------------
# Timing

def summary(ms):
    ms = sorted(ms)
    q = lambda f: ms[min(len(ms) - 1, int(f * len(ms)))]
    return {"median_ms": statistics.median(ms), "p10_ms": q(0.1), "p90_ms": q(0.9), "min_ms": ms[0],
            "max_ms": ms[-1], "samples": len(ms)}


def time_cold(fn, samples, warmup, flush):
    """Per-sample [ms] of fn() between CUDA events on the current stream, `flush` written before each sample."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    events = []
    for _ in range(samples):
        flush.zero_()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        events.append((start, end))
    torch.cuda.synchronize()
    return summary([s.elapsed_time(e) for s, e in events])


def time_host(fn, calls, warmup=100):
    """[us] of CPU time per fn() call over `calls` calls (launches stay asynchronous), and the GPU's time per call
    over the same loop (events around it; close to the host number means the GPU bounded the loop)."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    t1 = time.perf_counter()
    end.record()
    torch.cuda.synchronize()
    return {"host_us_per_call": (t1 - t0) / calls * 1e6, "gpu_us_per_call": start.elapsed_time(end) / calls * 1e3,
            "calls": calls}


# ---------------------------------------------------------------------------------------------------------------
# The measurements

def measure_main(a, flush):
    q, k, v, s = make_inputs(a)
    kw = call_kwargs(a)
    inputs = [t for t in (q, k, v, s) if t is not None]
    do = torch.randn_like(q)

    def fwd():
        with torch.no_grad():
            return flashtune.attention(q, k, v, sinks=s, **kw)

    def fwd_bwd():
        o = flashtune.attention(q, k, v, sinks=s, **kw)
        return torch.autograd.grad(o, inputs, do)

    sk = a.seq_k or a.seq_q
    pairs = visible_pairs(a.seq_q, sk, a.causal, a.window, a.sink_tokens)
    flops_fwd = 4 * a.head_dim * pairs * a.batch * a.heads_q
    rows = []
    for name, fn, flops in (("flashtune forward", fwd, flops_fwd),
                            ("flashtune forward + backward (autograd)", fwd_bwd, 3.5 * flops_fwd)):
        r = time_cold(fn, a.samples, a.warmup, flush)
        r.update(name=name, tflops=flops / (r["median_ms"] * 1e-3) / 1e12)
        rows.append(r)
    return rows, (fwd, fwd_bwd, flops_fwd)


def probed(fastpath, measure):
    """measure() with the C++ path's host-time probe on (when `fastpath` is the extension): its result gains
    "phases_us", [us] per call of each phase inside the extension (csrc/fastpath.cpp Phase)."""
    if fastpath is None:
        return measure()
    fastpath.probe(True)
    try:
        r = measure()
    finally:
        d = fastpath.probe(False)
    calls = max(d.pop("calls"), 1)
    r["phases_us"] = {k: round(v / calls / 1e3, 3) for k, v in d.items()}
    return r


def measure_host(a):
    """Host overhead on a tiny problem of the same dtype, heads and mask kind (batch 1, seq 128): the heads are kept
    so that configs tuned for the main shape (a GQA head packing) run it."""
    dt = DTYPES[a.dtype]
    q = torch.randn(1, a.heads_q, 128, a.head_dim, device="cuda", dtype=dt)
    k = torch.randn(1, a.heads_kv, 128, a.head_dim, device="cuda", dtype=dt)
    v = torch.randn_like(k)
    s = torch.zeros(a.heads_q, device="cuda") if a.learned_sinks else None
    kw = call_kwargs(a)
    win = a.window or 0
    out = {}
    qg, kg, vg = (x.clone().requires_grad_(True) for x in (q, k, v))
    from flashtune import ops
    built = ops._fastpath
    for label, path in ((("C++ path", built),) if built is not None else ()) + (("ctypes path", None),):
        ops._fastpath = path  # the eager path attention() takes: the C++ extension, or Python + ctypes
        try:
            with torch.no_grad():
                out[f"flashtune.attention ({label})"] = probed(path, lambda: time_host(
                    lambda: flashtune.attention(q, k, v, sinks=s, **kw), a.host_calls))
            out[f"flashtune.attention, requires_grad ({label})"] = probed(path, lambda: time_host(
                lambda: flashtune.attention(qg, kg, vg, sinks=s, **kw), a.host_calls))
        finally:
            ops._fastpath = built
    if built is not None:  # the extension's entry without attention()'s Python frame
        with torch.no_grad():
            out["flashtune._fastpath.attention (C++ entry)"] = time_host(
                lambda: built.attention(q, k, v, s, a.causal, a.window or None, a.sink_tokens), a.host_calls)
    with torch.no_grad():
        op = torch.ops.flashtune.attn_fwd
        out["torch.ops.flashtune.attn_fwd"] = time_host(lambda: op(q, k, v, s, a.causal, win, a.sink_tokens),
                                                        a.host_calls)
        # The bare binding: prebuilt structs and outputs, one ctypes call into the library per launch.
        rt = flashtune.default_runtime()
        o, lse = torch.empty_like(q), torch.empty(1, a.heads_q, 128, device="cuda", dtype=torch.float32)
        shape = _runtime.make_shape(1, a.heads_q, a.heads_kv, 128, 128, a.head_dim, causal=a.causal, window=win,
                                    sink_tokens=a.sink_tokens, learned_sinks=s is not None, dtype=a.dtype)
        t = _runtime.ft_attn_tensors(q=q.data_ptr(), k=k.data_ptr(), v=v.data_ptr(), o=o.data_ptr(),
                                     lse=lse.data_ptr(), sinks=0 if s is None else s.data_ptr())
        stream = torch.cuda.current_stream().cuda_stream
        out["Runtime.forward (ctypes only)"] = time_host(lambda: rt.forward(shape, t, stream), a.host_calls)
        out["F.scaled_dot_product_attention (orientation)"] = time_host(
            lambda: F.scaled_dot_product_attention(q, k, v, is_causal=a.causal, enable_gqa=a.heads_q != a.heads_kv),
            a.host_calls)
    return out


FIRST_LAUNCH_CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
import torch
t_torch = time.perf_counter()
import flashtune
t_ft = time.perf_counter()
a = json.loads(sys.argv[1])
dt = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}[a["dtype"]]
q = torch.randn(a["batch"], a["heads_q"], a["seq_q"], a["head_dim"], device="cuda", dtype=dt, requires_grad=True)
k = torch.randn(a["batch"], a["heads_kv"], a["seq_k"], a["head_dim"], device="cuda", dtype=dt, requires_grad=True)
v = torch.randn_like(k, requires_grad=True)
s = torch.zeros(a["heads_q"], device="cuda", requires_grad=True) if a["learned_sinks"] else None
torch.cuda.synchronize()
t_inputs = time.perf_counter()
w = torch.ones(8, device="cuda", requires_grad=True)  # torch's own first backward (its engine's device thread)
(w * 2).sum().backward()
torch.cuda.synchronize()
t_torch_bwd = time.perf_counter()
class _Twice(torch.autograd.Function):  # torch's first backward through any custom autograd.Function
    @staticmethod
    def forward(ctx, x):
        return x * 2
    @staticmethod
    def backward(ctx, g):
        return g * 2
_Twice.apply(w).sum().backward()
torch.cuda.synchronize()
t_function_bwd = time.perf_counter()
import flashtune.ops  # the custom ops' registration
t_ops = time.perf_counter()
flashtune.default_runtime()  # the config file read, the templates indexed
t_rt = time.perf_counter()
o = flashtune.attention(q, k, v, sinks=s, causal=a["causal"], window=a["window"] or None,
                        sink_tokens=a["sink_tokens"])
torch.cuda.synchronize()
t_fwd = time.perf_counter()
wall_first_launch = time.time()
flashtune.explain(q, k, v, sinks=s, causal=a["causal"], window=a["window"] or None, sink_tokens=a["sink_tokens"],
                  backward=True)  # the backward's plan: configs chosen, CUBINs compiled or read, modules loaded
t_plan = time.perf_counter()
from flashtune import ops as _ops  # the backward's launches called directly on this thread, twice, before autograd's
_o, _lse = _ops._fwd_impl(q.detach(), k.detach(), v.detach(), None if s is None else s.detach(), bool(a["causal"]),
                          a["window"] or 0, a["sink_tokens"])
direct = []
for _ in range(2):
    torch.cuda.synchronize()
    t_d = time.perf_counter()
    _ops._bwd_impl(torch.ones_like(_o), q.detach(), k.detach(), v.detach(), _o, _lse, None if s is None else s.detach(),
                   bool(a["causal"]), a["window"] or 0, a["sink_tokens"])
    torch.cuda.synchronize()
    direct.append(time.perf_counter() - t_d)
t_plan = time.perf_counter()
mods_before = set(sys.modules)
o.backward(torch.ones_like(o))
torch.cuda.synchronize()
t_bwd = time.perf_counter()
print(json.dumps({"import_torch_s": t_torch - t0, "import_flashtune_s": t_ft - t_torch,
                  "inputs_and_cuda_init_s": t_inputs - t_ft, "torch_first_backward_s": t_torch_bwd - t_inputs,
                  "torch_first_function_backward_s": t_function_bwd - t_torch_bwd,
                  "import_ops_s": t_ops - t_function_bwd, "backward_plan_s": t_plan - t_fwd,
                  "runtime_s": t_rt - t_ops, "first_forward_s": t_fwd - t_rt,
                  "direct_backward_s": direct, "first_backward_s": t_bwd - t_plan,
                  "imported_by_first_backward": sorted(set(sys.modules) - mods_before)[:12] + [len(set(sys.modules) - mods_before)], "wall_first_forward_done": wall_first_launch}))
"""


def measure_first_launch(a):
    """A fresh interpreter's first forward (and backward): cold with an empty CUBIN cache, then warm from it."""
    shape = dict(batch=a.batch, heads_q=a.heads_q, heads_kv=a.heads_kv, seq_q=a.seq_q, seq_k=a.seq_k or a.seq_q,
                 head_dim=a.head_dim, causal=a.causal, window=a.window, sink_tokens=a.sink_tokens,
                 learned_sinks=a.learned_sinks, dtype=a.dtype)
    out = {}
    with tempfile.TemporaryDirectory(prefix="flashtune_cubins_") as cache:
        env = dict(os.environ, FLASHTUNE_CACHE_DIR=cache, PYTHONPATH=os.pathsep.join(
            [os.path.dirname(HERE)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
        if a.configs:
            env["FLASHTUNE_CONFIGS"] = os.path.abspath(a.configs)
        for label in ("cold_cubin_cache", "warm_cubin_cache"):
            start = time.time()
            p = subprocess.run([sys.executable, "-c", FIRST_LAUNCH_CHILD, json.dumps(shape)], env=env,
                               capture_output=True, text=True)
            total = time.time() - start
            if p.returncode != 0:
                out[label] = {"error": p.stderr.strip().splitlines()[-1:] or ["exit %d" % p.returncode]}
                continue
            r = json.loads(p.stdout.strip().splitlines()[-1])
            r["process_start_to_first_forward_done_s"] = r.pop("wall_first_forward_done") - start
            r["process_total_s"] = total
            out[label] = r
    return out


def load_peers(path):
    """The peers file as a module (imported from its path at run time; never copied into this project)."""
    spec = importlib.util.spec_from_file_location("flashtune_bench_peers", os.path.abspath(path))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def measure_peers(a, fwd_bwd, flops_fwd):
    mod = load_peers(a.peers)
    captured = []
    if hasattr(mod, "emit"):
        original = mod.emit

        def emit(*fields):  # the file's functions look `emit` up in its globals: every row comes through here
            captured.append([str(f) for f in fields])
            return original(*fields)
        mod.emit = emit
    out = {"file": os.path.abspath(a.peers), "sections": {}, "rows": captured}
    if hasattr(mod, "bench"):
        ms = mod.bench(fwd_bwd)
        out["flashtune_with_peers_bench"] = {"name": "flashtune forward + backward (peers' bench)",
                                             "median_ms": ms, "tflops": 3.5 * flops_fwd / (ms * 1e-3) / 1e12}
    for sec in [s for s in a.peer_sections.split(",") if s]:
        fn = getattr(mod, sec, None)
        if not callable(fn):
            out["sections"][sec] = f"not a function of {a.peers}"
            continue
        t0 = time.time()
        try:
            fn()
            out["sections"][sec] = f"ok in {time.time() - t0:.1f} s"
        except Exception as e:  # a peer's failure is a row of the report, not the end of the benchmark
            out["sections"][sec] = f"{type(e).__name__}: {e}"
    return out


# ---------------------------------------------------------------------------------------------------------------

def print_table(res):
    print(f"\n{res['device']}  torch {res['torch']}  shape {res['shape']}")
    print(f"{'measurement':<48} {'median ms':>10} {'p10 ms':>9} {'p90 ms':>9} {'TFLOP/s':>8}")
    for r in res["timings"]:
        print(f"{r['name']:<48} {r['median_ms']:>10.4f} {r['p10_ms']:>9.4f} {r['p90_ms']:>9.4f} {r['tflops']:>8.1f}")
    peers = res.get("peers") or {}
    if "flashtune_with_peers_bench" in peers:
        r = peers["flashtune_with_peers_bench"]
        print(f"{r['name']:<48} {r['median_ms']:>10.4f} {'':>9} {'':>9} {r['tflops']:>8.1f}")
    print(f"\n{'host overhead (tiny problem)':<48} {'host us/call':>12} {'gpu us/call':>12}  C++ phases [us/call]")
    for name, r in res["host_overhead"].items():
        phases = "  " + ", ".join(f"{k} {v}" for k, v in r["phases_us"].items()) if "phases_us" in r else ""
        print(f"{name:<48} {r['host_us_per_call']:>12.2f} {r['gpu_us_per_call']:>12.2f}{phases}")
    for label, r in (res.get("first_launch") or {}).items():
        if "error" in r:
            print(f"\nfirst launch, {label}: ERROR {r['error']}")
            continue
        print(f"\nfirst launch, {label}: process start -> first forward done {r['process_start_to_first_forward_done_s']:.2f} s "
              f"(import torch {r['import_torch_s']:.2f}, import flashtune {r['import_flashtune_s']:.3f}, inputs + CUDA "
              f"init {r['inputs_and_cuda_init_s']:.2f}, import flashtune.ops {r['import_ops_s']:.2f}, runtime "
              f"{r['runtime_s']:.3f}, first forward {r['first_forward_s']:.3f}, torch's first backward "
              f"{r['torch_first_backward_s']:.2f}, torch's first autograd.Function backward "
              f"{r['torch_first_function_backward_s']:.2f}, backward plan {r['backward_plan_s']:.3f}, first backward "
              f"{r['first_backward_s']:.2f}; direct backward launches before it {r['direct_backward_s']}; modules the "
              f"first backward imported {r['imported_by_first_backward']})")
    if peers:
        print(f"\npeers from {peers['file']}: " + "; ".join(f"{k}: {v}" for k, v in peers["sections"].items()))
        for row in peers["rows"]:
            print("  " + ",".join(row))


def main(argv=None):
    a = parse_args(argv)
    if a.configs:
        flashtune.configure(a.configs)
    res = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "shape": {
        "batch": a.batch, "heads_q": a.heads_q, "heads_kv": a.heads_kv, "seq_q": a.seq_q, "seq_k": a.seq_k or a.seq_q,
        "head_dim": a.head_dim, "causal": a.causal, "window": a.window, "sink_tokens": a.sink_tokens,
        "learned_sinks": a.learned_sinks, "dtype": a.dtype},
        "method": f"CUDA events, {a.warmup} warm-up calls, {a.samples} samples, {L2_FLUSH_BYTES >> 20} MiB written "
                  "before each sample (cold L2), median"}
    q, k, v, s = make_inputs(a, requires_grad=False)
    kw = call_kwargs(a)
    res["explain"] = {"forward": flashtune.explain(q, k, v, sinks=s, **kw),
                      "backward": flashtune.explain(q, k, v, sinks=s, backward=True, **kw)}
    del q, k, v, s
    flush = torch.empty(L2_FLUSH_BYTES, dtype=torch.uint8, device="cuda")
    res["timings"], (fwd, fwd_bwd, flops_fwd) = measure_main(a, flush)
    res["host_overhead"] = measure_host(a)
    if not a.no_first_launch:
        res["first_launch"] = measure_first_launch(a)
    if a.peers:
        res["peers"] = measure_peers(a, fwd_bwd, flops_fwd)
    print_table(res)
    with open(a.out, "w") as f:
        json.dump(res, f, indent=2)
    print(f"\nwrote {a.out}")


if __name__ == "__main__":
    main()
