"""python/tests/test_torch_gpu.py: flashtune.attention on the GPU against PyTorch references, forward and backward.

The GStar autograder's checks (stages 1 and 3-9: its shapes, its naive attention and mask formulas, its 5e-2
allclose on O and L), re-expressed here, plus the project's pass rule (DESIGN.md): max |out - ref64| <=
2 * max |naive_same_precision - ref64| + atol (the harness's per-dtype atol, at least one ulp of a 16-bit output),
no NaN, for O, LSE and every gradient; learned sinks, GQA, seq_q != seq_k, fp32, non-contiguous inputs, scale, argument errors, torch.compile
(fullgraph) and a small GPT-OSS-like model trained with flashtune and with eager attention.
Skips without torch, without CUDA, or without $FLASHTUNE_CONFIGS (an export JSON with attn_fwd and backward
entries for f16, bf16 and f32; the nearest entry serves shapes never tuned).
"""
import math
import os
import unittest

try:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError:  # the whole file skips in setUpModule
    torch = None

import flashtune
from flashtune import _reference as ref


def setUpModule():
    if torch is None:
        raise unittest.SkipTest("torch is not installed")
    if not torch.cuda.is_available():
        raise unittest.SkipTest("no CUDA device (torch.cuda.is_available() is False)")
    if not os.environ.get("FLASHTUNE_CONFIGS"):
        raise unittest.SkipTest("FLASHTUNE_CONFIGS is not set: point it at a `flashtune export --format json` file")


DEV = "cuda"


# ---------------------------------------------------------------------------------------------------------------
# References: flashtune._reference (our own code of the GStar formulas and DESIGN.md's conventions, shared with
# flashtune.peers): reference(compute=torch.float64) is ref64, reference() the naive same precision.

reference = ref.attention


def dtype_name(dtype):
    return ref.dtype_key(dtype)


def leaves(*ts):
    return [t.detach().clone().requires_grad_(True) for t in ts]


class Case:
    """One attention problem with random inputs (GStar: randn), the flashtune result and both references."""

    def __init__(self, b, hq, hkv, sq, sk, d, dtype, *, causal=False, window=0, sink_tokens=0, learned=False,
                 sinks_dtype=None, scale=None, seed=42):
        torch.manual_seed(seed)
        self.dtype = dtype
        self.mask = dict(causal=causal, window=window, sink_tokens=sink_tokens)
        self.scale = scale
        self.q = torch.randn(b, hq, sq, d, device=DEV, dtype=dtype)
        self.k = torch.randn(b, hkv, sk, d, device=DEV, dtype=dtype)
        self.v = torch.randn(b, hkv, sk, d, device=DEV, dtype=dtype)
        self.sinks = torch.randn(hq, device=DEV, dtype=sinks_dtype or torch.float32) if learned else None
        self.dout = torch.randn(b, hq, sq, d, device=DEV, dtype=dtype)
        self.inputs = [self.q, self.k, self.v] + ([self.sinks] if learned else [])
        self.names = ["dq", "dk", "dv", "dsinks"][:len(self.inputs)]

    def run(self, fn, grads, cast=None):
        """(o, lse, grads or None) of fn on fresh leaves: the inputs themselves, or copies cast to `cast` (so a
        float64 reference's gradients stay float64 all the way to its leaves)."""
        xs = leaves(*(self.inputs if cast is None else [t.to(cast) for t in self.inputs]))
        sinks = xs[3] if self.sinks is not None else None
        o, lse = fn(xs[0], xs[1], xs[2], sinks=sinks)
        g = torch.autograd.grad(o, xs, self.dout.to(o.dtype)) if grads else None
        return o.detach(), lse.detach(), g

    def flashtune(self, grads):
        return self.run(lambda q, k, v, sinks: flashtune.attention(
            q, k, v, sinks=sinks, scale=self.scale, return_lse=True, window=self.mask["window"] or None,
            causal=self.mask["causal"], sink_tokens=self.mask["sink_tokens"]), grads)

    def ref64(self, grads):
        return self.run(lambda q, k, v, sinks: reference(q, k, v, sinks=sinks, scale=self.scale,
                                                         compute=torch.float64, **self.mask), grads, torch.float64)

    def naive(self, grads):
        return self.run(lambda q, k, v, sinks: reference(q, k, v, sinks=sinks, scale=self.scale, **self.mask),
                        grads)


class AttentionTestCase(unittest.TestCase):
    def assert_pass_rule(self, what, out, ref64, naive, family_atol):
        """DESIGN.md's pass rule: max|out - ref64| <= 2 max|naive - ref64| + atol, no NaN; atol the harness's
        family atol, at least one ulp of a 16-bit output at max|ref64| (reference/compare.hpp storage_atol)."""
        self.assertEqual(out.shape, ref64.shape, what)
        self.assertFalse(torch.isnan(out).any().item(), f"{what}: NaN in flashtune's output")
        err = (out.double() - ref64.double()).abs().max().item()
        nerr = (naive.double() - ref64.double()).abs().max().item()
        atol = ref.storage_atol(dtype_name(out.dtype), ref64.double().abs().max().item(), family_atol)
        self.assertLessEqual(err, 2 * nerr + atol,
                             f"{what}: max|flashtune - ref64| = {err:.3g} > 2 * {nerr:.3g} (naive "
                             f"{naive.dtype}) + {atol:.3g}")

    def check_case(self, c, grads, gstar_tol=5e-2):
        """Forward (O, LSE) and, with `grads`, every gradient of Case c against both references; the GStar
        grader's allclose(naive, ours, rtol=atol=5e-2) on O and L as well."""
        o, lse, g = c.flashtune(grads)
        o64, lse64, g64 = c.ref64(grads)
        on, lsen, gn = c.naive(grads)
        self.assertEqual(o.dtype, c.dtype)
        self.assertEqual(lse.dtype, torch.float32)
        self.assertTrue(torch.allclose(on, o, rtol=gstar_tol, atol=gstar_tol),
                        f"GStar O check: max diff {(on.float() - o.float()).abs().max().item():.3g}")
        self.assertTrue(torch.allclose(lsen, lse, rtol=gstar_tol, atol=gstar_tol),
                        f"GStar L check: max diff {(lsen - lse).abs().max().item():.3g}")
        dt = dtype_name(c.dtype)
        self.assert_pass_rule("O", o, o64, on, ref.fwd_atol(dt))
        self.assert_pass_rule("LSE", lse, lse64, lsen, ref.fwd_atol(dt))
        if grads:
            for name, a, r, n, x in zip(c.names, g, g64, gn, c.inputs):
                self.assertEqual(a.dtype, x.dtype, f"{name} dtype")
                self.assert_pass_rule(name, a, r, n, ref.bwd_atol(dt))


# ---------------------------------------------------------------------------------------------------------------
# The GStar stages (shapes of the grader and of experiments/attention/gstar_*.yaml; fp16, head_dim 16)

F16 = torch.float16 if torch is not None else None


class GStarStages(AttentionTestCase):
    def test_stage1_tiled_attention(self):
        for b, h, sq, sk, d, causal in ((1, 8, 512, 512, 16, False), (1, 8, 1024, 1024, 16, True),
                                        (1, 16, 2048, 2048, 16, True), (1, 16, 4096, 4096, 16, True)):
            with self.subTest(b=b, h=h, sq=sq, causal=causal):
                self.check_case(Case(b, h, h, sq, sk, d, F16, causal=causal), grads=False)

    def stage_3_4(self, causal):
        for b, h, n in ((1, 8, 512), (1, 8, 1024), (1, 16, 2048), (1, 16, 4096)):
            with self.subTest(b=b, h=h, n=n, causal=causal):
                self.check_case(Case(b, h, h, n, n, 16, F16, causal=causal), grads=False)

    def test_stage3_non_causal(self):
        self.stage_3_4(False)

    def test_stage4_causal(self):
        self.stage_3_4(True)

    def test_stage5_gqa(self):
        for hkv in (1, 2, 4):
            for n in (1024, 4096):
                with self.subTest(hkv=hkv, n=n):
                    self.check_case(Case(1, 16, hkv, n, n, 16, F16, causal=True), grads=False)

    def test_stage6_sliding_window(self):
        for hkv in (1, 16):
            for n in (1024, 4096):
                with self.subTest(hkv=hkv, n=n):
                    self.check_case(Case(1, 16, hkv, n, n, 16, F16, causal=True, window=256), grads=False)

    def test_stage7_window_and_sink_tokens(self):
        for hkv in (1, 16):
            for n in (1024, 4096):
                with self.subTest(hkv=hkv, n=n):
                    self.check_case(Case(1, 16, hkv, n, n, 16, F16, causal=True, window=256, sink_tokens=4),
                                    grads=False)

    def test_stage8_gqa_backward(self):
        for hkv in (1, 2, 4):
            for n in (1024, 4096):
                with self.subTest(hkv=hkv, n=n):
                    self.check_case(Case(1, 16, hkv, n, n, 16, F16, causal=True), grads=True)

    def test_stage9_gqa_window_sinks_backward(self):
        self.check_case(Case(1, 16, 1, 4096, 4096, 16, F16, causal=True, window=256, sink_tokens=4), grads=True)


# ---------------------------------------------------------------------------------------------------------------
# Features beyond GStar

class Features(AttentionTestCase):
    def test_learned_sinks_gpt_oss(self):
        # GPT-OSS: bf16, GQA 8/2, d64, causal window 128, one learned sink logit per query head (fp32).
        self.check_case(Case(2, 8, 2, 512, 512, 64, torch.bfloat16, causal=True, window=128, learned=True),
                        grads=True)

    def test_learned_sinks_in_bf16_get_a_bf16_gradient(self):
        c = Case(1, 4, 4, 256, 256, 64, torch.bfloat16, causal=True, learned=True, sinks_dtype=torch.bfloat16)
        self.check_case(c, grads=True)  # check_case asserts dsinks.dtype == sinks.dtype
        _, _, g = c.flashtune(True)
        self.assertEqual(g[3].dtype, torch.bfloat16)
        self.assertEqual(g[3].shape, (4,))

    def test_learned_sinks_without_mask(self):
        self.check_case(Case(1, 4, 2, 384, 384, 64, torch.float16, learned=True), grads=True)

    def test_gqa_bf16_d128(self):
        self.check_case(Case(2, 8, 2, 512, 512, 128, torch.bfloat16, causal=True), grads=True)

    def test_seq_q_shorter_than_seq_k_causal(self):
        # Bottom-right alignment: the last query sees every key (chunked prefill against a longer cache).
        self.check_case(Case(1, 4, 4, 256, 1024, 64, torch.float16, causal=True), grads=True)
        self.check_case(Case(1, 8, 2, 200, 700, 64, torch.bfloat16, causal=True, window=128, learned=True),
                        grads=True)

    def test_seq_q_differs_from_seq_k_non_causal(self):
        self.check_case(Case(2, 4, 2, 300, 777, 64, torch.bfloat16), grads=True)

    def test_fp32(self):
        self.check_case(Case(1, 4, 2, 512, 512, 64, torch.float32, causal=True), grads=True)

    def test_scale(self):
        c = Case(1, 4, 4, 256, 256, 64, torch.float16, causal=True, scale=0.3)
        self.check_case(c, grads=True)
        o_default, _, _ = Case(1, 4, 4, 256, 256, 64, torch.float16, causal=True).flashtune(False)
        o_scaled, _, _ = c.flashtune(False)
        self.assertGreater((o_default.float() - o_scaled.float()).abs().max().item(), 1e-2,
                           "scale=0.3 gave the same output as the default 1/sqrt(64)")

    def test_return_lse_is_detached(self):
        c = Case(1, 2, 2, 128, 128, 64, torch.float16)
        q, k, v = leaves(c.q, c.k, c.v)
        o, lse = flashtune.attention(q, k, v, return_lse=True)
        self.assertTrue(o.requires_grad)
        self.assertFalse(lse.requires_grad)
        self.assertEqual(lse.shape, (1, 2, 128))
        o_only = flashtune.attention(q, k, v)
        self.assertTrue(torch.equal(o_only, o))

    def test_non_contiguous_inputs(self):
        b, h, s, d = 2, 4, 256, 64
        torch.manual_seed(0)
        # (batch, seq, heads, head_dim) storage seen as (batch, heads, seq, head_dim): not contiguous.
        nc = [torch.randn(b, s, h, d, device=DEV, dtype=torch.bfloat16).transpose(1, 2) for _ in range(3)]
        nc_l = leaves(*nc)  # clone() keeps the transposed strides
        c_l = leaves(*(x.contiguous() for x in nc))
        self.assertFalse(nc_l[0].is_contiguous())
        self.assertTrue(c_l[0].is_contiguous())
        o_nc = flashtune.attention(*nc_l, causal=True)
        o_c = flashtune.attention(*c_l, causal=True)
        self.assertTrue(torch.equal(o_nc, o_c), "the same values in another layout gave another output")
        do = torch.randn_like(o_c)
        g_nc = torch.autograd.grad(o_nc, nc_l, do)
        g_c = torch.autograd.grad(o_c, c_l, do)
        for name, a, r in zip(("dq", "dk", "dv"), g_nc, g_c):
            self.assertEqual(a.shape, r.shape, name)
            torch.testing.assert_close(a, r, rtol=1e-2, atol=1e-2, msg=lambda m: f"{name}: {m}")

    def test_current_stream_is_used(self):
        # On a side stream: a ~50 ms spin, then new values copied into q, then attention. A launch on any other
        # stream (the legacy default one, say) would read q before the copy and give the old result.
        c = Case(1, 4, 4, 1024, 1024, 64, torch.float16, causal=True)
        q_new = torch.randn_like(c.q)
        expect = flashtune.attention(q_new, c.k, c.v, causal=True)
        old = flashtune.attention(c.q, c.k, c.v, causal=True)
        self.assertFalse(torch.equal(expect, old))
        buf = c.q.clone()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            torch.cuda._sleep(100_000_000)  # [cycles]
            buf.copy_(q_new)
            got = flashtune.attention(buf, c.k, c.v, causal=True)
        torch.cuda.current_stream().wait_stream(side)
        self.assertTrue(torch.equal(got, expect))

    def test_explain_names_the_chosen_configs(self):
        c = Case(1, 8, 2, 512, 512, 64, torch.bfloat16)
        fwd = flashtune.explain(c.q, c.k, c.v, causal=True, window=128, sinks=torch.zeros(8, device=DEV))
        self.assertEqual(fwd["pass"], "forward")
        self.assertTrue(fwd["stages"])
        self.assertTrue(all(st["compile"]["ok"] for st in fwd["stages"]), fwd)
        bwd = flashtune.explain(c.q, c.k, c.v, causal=True, backward=True)
        self.assertEqual(bwd["pass"], "backward")
        self.assertGreaterEqual(len(bwd["way"]), 1)

    def test_opcheck(self):
        # torch.library's own checks of the registrations: schema, fake tensors, autograd, AOT dispatch.
        c = Case(1, 4, 2, 128, 128, 64, torch.bfloat16, causal=True, window=32, learned=True)
        q, k, v, s = leaves(*c.inputs)
        torch.library.opcheck(torch.ops.flashtune.attn_fwd.default, (q, k, v, s, True, 32, 0))
        o, lse = torch.ops.flashtune.attn_fwd(q.detach(), k.detach(), v.detach(), s.detach(), True, 32, 0)
        torch.library.opcheck(torch.ops.flashtune.attn_bwd.default,
                              (c.dout, q.detach(), k.detach(), v.detach(), o, lse, s.detach(), True, 32, 0),
                              test_utils=("test_schema", "test_faketensor", "test_autograd_registration"))


class ArgumentErrors(unittest.TestCase):
    def setUp(self):
        self.q = torch.randn(1, 4, 64, 32, device=DEV, dtype=torch.float16)
        self.k = torch.randn(1, 2, 64, 32, device=DEV, dtype=torch.float16)
        self.v = torch.randn(1, 2, 64, 32, device=DEV, dtype=torch.float16)

    def expect(self, exc, pattern, **kw):
        args = dict(q=self.q, k=self.k, v=self.v)
        args.update({n: kw.pop(n) for n in ("q", "k", "v") if n in kw})
        with self.assertRaisesRegex(exc, pattern):
            flashtune.attention(args["q"], args["k"], args["v"], **kw)

    def test_messages_name_the_argument(self):
        self.expect(ValueError, r"^q: expected a CUDA tensor", q=self.q.cpu(), k=self.k.cpu(), v=self.v.cpu())
        self.expect(TypeError, r"^k: dtype torch.bfloat16 differs from q's", k=self.k.bfloat16())
        self.expect(TypeError, r"^q: dtype torch.float64 is not supported", q=self.q.double(), k=self.k.double(),
                    v=self.v.double())
        self.expect(ValueError, r"^q: expected a 4-D tensor", q=self.q[0])
        self.expect(ValueError, r"^k: batch 2 differs", k=self.k.expand(2, -1, -1, -1),
                    v=self.v.expand(2, -1, -1, -1), q=self.q)
        self.expect(ValueError, r"^k: head_dim 64 differs", k=torch.randn(1, 2, 64, 64, device=DEV,
                                                                           dtype=torch.float16))
        self.expect(ValueError, r"^v: shape .* differs from k's", v=self.v[:, :, :32])
        self.expect(ValueError, r"heads_q \(4, q.shape\[1\]\) must be a multiple of heads_kv \(3",
                    k=torch.randn(1, 3, 64, 32, device=DEV, dtype=torch.float16),
                    v=torch.randn(1, 3, 64, 32, device=DEV, dtype=torch.float16))
        self.expect(ValueError, r"^sink_tokens: 4 sink tokens need a window", sink_tokens=4)
        self.expect(ValueError, r"^window: expected None or an int", window=-1)
        self.expect(ValueError, r"^sinks: expected shape \(4,\)", sinks=torch.zeros(2, device=DEV))
        self.expect(TypeError, r"^sinks: expected a floating-point", sinks=torch.zeros(4, device=DEV,
                                                                                       dtype=torch.int32))
        self.expect(ValueError, r"^scale: expected a positive finite", scale=float("nan"))
        if torch.cuda.device_count() > 1:
            self.expect(ValueError, r"^k: on cuda:1, but q is on cuda:0", k=self.k.to("cuda:1"))


# ---------------------------------------------------------------------------------------------------------------
# The C++ eager path (flashtune._fastpath): the same launches as the Python path, so the same bits. The whole file
# runs with it on (when built) and again with FLASHTUNE_NO_FASTPATH=1 (tools/gpu_run.sh); these tests compare
# the two paths inside one process. FLASHTUNE_EXPECT_FASTPATH=1 makes a missing extension a failure, not a skip.

class FastPath(AttentionTestCase):
    def setUp(self):
        from flashtune import ops
        self.ops = ops
        state = flashtune.fast_path()
        if os.environ.get("FLASHTUNE_EXPECT_FASTPATH") == "1":
            self.assertTrue(state["enabled"], f"the C++ eager path is off: {state['why']}")
        elif not state["enabled"]:
            self.skipTest(f"the C++ eager path is off: {state['why']}")
        flashtune.default_runtime()

    def python_path(self, c, xs):
        """(o, lse, grads) of the ctypes path (_Attention) on leaves xs of Case c."""
        sinks = xs[3] if c.sinks is not None else None
        o, lse = self.ops._Attention.apply(xs[0], xs[1], xs[2], sinks, c.mask["causal"], c.mask["window"],
                                           c.mask["sink_tokens"])
        return o, lse, torch.autograd.grad(o, xs, c.dout)

    def test_fast_path_takes_the_common_call(self):
        c = Case(1, 4, 2, 128, 128, 64, torch.bfloat16, causal=True)
        self.assertIsNotNone(self.ops._fastpath.attention(c.q, c.k, c.v, None, True, None, 0))
        # what it leaves to the Python path: None, never an exception
        nc = c.q.transpose(2, 3)
        for args in ((nc, c.k, c.v, None, True, None, 0), (c.q, c.k, c.v, torch.zeros(4, device=DEV,
                     dtype=torch.bfloat16), True, None, 0), (c.q, c.k, c.v, None, True, -1, 0),
                     (c.q, c.k, c.v, None, True, True, 0), (c.q, c.k, c.v, None, True, None, 4),
                     (c.q.cpu(), c.k.cpu(), c.v.cpu(), None, True, None, 0), (c.q[0], c.k, c.v, None, True, None, 0),
                     (c.q, c.k.float(), c.v, None, True, None, 0), ("q", c.k, c.v, None, True, None, 0)):
            self.assertIsNone(self.ops._fastpath.attention(*args))

    def test_same_bits_as_the_python_path(self):
        for c in (Case(2, 8, 2, 384, 384, 64, torch.bfloat16, causal=True, window=128, learned=True),
                  Case(1, 4, 1, 200, 333, 16, torch.float16, causal=True),
                  Case(1, 4, 4, 256, 256, 64, torch.float16, window=64, sink_tokens=4),
                  Case(1, 2, 2, 128, 128, 128, torch.float32, learned=True)):
            with self.subTest(dtype=c.dtype, mask=c.mask, learned=c.sinks is not None):
                xs = leaves(*c.inputs)
                sinks = xs[3] if c.sinks is not None else None
                o, lse = flashtune.attention(xs[0], xs[1], xs[2], sinks=sinks, return_lse=True,
                                             window=c.mask["window"] or None, causal=c.mask["causal"],
                                             sink_tokens=c.mask["sink_tokens"])
                self.assertIsNotNone(o.grad_fn)
                self.assertNotIsInstance(o.grad_fn, torch.autograd.function.BackwardCFunction,
                                         "a Python autograd.Function node: the call took the Python path")
                g = torch.autograd.grad(o, xs, c.dout)
                po, plse, pg = self.python_path(c, leaves(*c.inputs))
                self.assertTrue(torch.equal(o, po), "o differs between the paths")
                self.assertTrue(torch.equal(lse, plse), "lse differs between the paths")
                for name, a, b in zip(c.names, g, pg):
                    self.assertTrue(torch.equal(a, b), f"{name} differs between the paths")
                self.assertFalse(lse.requires_grad)

    def test_no_grad_leaves_no_graph(self):
        c = Case(1, 4, 2, 128, 128, 64, torch.bfloat16)
        q, k, v = leaves(c.q, c.k, c.v)
        with torch.no_grad():
            o = flashtune.attention(q, k, v)
        self.assertIsNone(o.grad_fn)
        self.assertFalse(o.requires_grad)

    def test_runtime_errors_raise_flashtune_error(self):
        # head_dim 40: no kernel family takes it, tuned or built in
        q = torch.randn(1, 2, 64, 40, device=DEV, dtype=torch.float16)
        with self.assertRaises(flashtune.FlashtuneError) as cm:
            self.ops._fastpath.attention(q, q, q, None, False, None, 0)
        self.assertTrue(cm.exception.message, "the error carries the runtime's message")


# ---------------------------------------------------------------------------------------------------------------
# torch.compile

class Compile(AttentionTestCase):
    def test_compile_fullgraph_forward_and_backward(self):
        torch._dynamo.reset()

        def f(q, k, v, s):
            o = flashtune.attention(q, k, v, causal=True, window=64, sinks=s)
            return (o.float() * 2.0).sum(dim=-1)

        c = Case(2, 8, 2, 256, 256, 64, torch.bfloat16, causal=True, window=64, learned=True)
        compiled = torch.compile(f, fullgraph=True)
        xs_e, xs_c = leaves(*c.inputs), leaves(*c.inputs)
        y_e, y_c = f(*xs_e), compiled(*xs_c)
        torch.testing.assert_close(y_c, y_e, rtol=1e-4, atol=1e-3)
        dy = torch.randn_like(y_e)
        for name, a, r in zip(c.names, torch.autograd.grad(y_c, xs_c, dy), torch.autograd.grad(y_e, xs_e, dy)):
            torch.testing.assert_close(a, r, rtol=2e-2, atol=2e-2, msg=lambda m: f"{name}: {m}")


# ---------------------------------------------------------------------------------------------------------------
# A small GPT-OSS-like model trained with flashtune and with eager attention

VOCAB, DIM, HEADS, KV_HEADS, HEAD_DIM, WINDOW, LAYERS = 512, 512, 8, 2, 64, 128, 2


def eager_attention(q, k, v, *, causal, window, sinks, upcast=False):
    """Eager GPT-OSS attention: bf16 matmuls (or float32 with `upcast`), float32 softmax with the sink column."""
    if upcast:
        o, _ = reference(q.float(), k.float(), v.float(), causal=causal, window=window, sinks=sinks)
        return o.to(q.dtype)
    return reference(q, k, v, causal=causal, window=window, sinks=sinks)[0]


if torch is not None:  # nn.Module subclasses need torch at import
    class Block(nn.Module):
        def __init__(self, attn):
            super().__init__()
            self.attn = attn
            self.norm1, self.norm2 = nn.RMSNorm(DIM), nn.RMSNorm(DIM)
            self.wq = nn.Linear(DIM, HEADS * HEAD_DIM, bias=False)
            self.wkv = nn.Linear(DIM, 2 * KV_HEADS * HEAD_DIM, bias=False)
            self.wo = nn.Linear(HEADS * HEAD_DIM, DIM, bias=False)
            self.sinks = nn.Parameter(torch.zeros(HEADS))
            self.mlp = nn.Sequential(nn.Linear(DIM, 4 * DIM), nn.GELU(), nn.Linear(4 * DIM, DIM))

        def forward(self, x):
            b, t, _ = x.shape
            h = self.norm1(x)
            q = self.wq(h).view(b, t, HEADS, HEAD_DIM).transpose(1, 2)
            k, v = self.wkv(h).view(b, t, 2, KV_HEADS, HEAD_DIM).permute(2, 0, 3, 1, 4)
            a = self.attn(q, k, v, causal=True, window=WINDOW, sinks=self.sinks)
            x = x + self.wo(a.transpose(1, 2).reshape(b, t, HEADS * HEAD_DIM))
            return x + self.mlp(self.norm2(x))


    class TinyGptOss(nn.Module):
        def __init__(self, attn, seq):
            super().__init__()
            self.embed = nn.Embedding(VOCAB, DIM)
            self.pos = nn.Parameter(torch.randn(seq, DIM) * 0.02)
            self.blocks = nn.ModuleList(Block(attn) for _ in range(LAYERS))
            self.norm = nn.RMSNorm(DIM)
            self.head = nn.Linear(DIM, VOCAB, bias=False)

        def forward(self, tokens):
            x = self.embed(tokens) + self.pos[: tokens.shape[1]]
            for blk in self.blocks:
                x = blk(x)
            return self.head(self.norm(x))


def train(attn, tokens, steps, seed=1234):
    """Losses of `steps` AdamW steps on one fixed batch (next-token prediction), bf16 weights, same init per seed."""
    torch.manual_seed(seed)
    model = TinyGptOss(attn, tokens.shape[1] - 1).to(DEV, torch.bfloat16)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    losses = []
    for _ in range(steps):
        logits = model(tokens[:, :-1])
        loss = F.cross_entropy(logits.float().reshape(-1, VOCAB), tokens[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


class GptOssTraining(unittest.TestCase):
    def test_losses_match_eager(self):
        g = torch.Generator(device=DEV).manual_seed(7)
        tokens = torch.randint(0, VOCAB, (4, 257), device=DEV, generator=g)
        steps = 40
        ft = train(flashtune.attention, tokens, steps)
        eager = train(lambda *a, **kw: eager_attention(*a, **kw), tokens, steps)
        eager32 = train(lambda *a, **kw: eager_attention(*a, upcast=True, **kw), tokens, steps)
        # Tolerance: bf16 keeps 8 significant bits, so two correct attentions that round differently disagree by
        # about one bf16 ulp (2^-8 relative) per output, and the difference grows through 2 layers and 40 Adam
        # updates. The yardstick is the eager bf16 run's own distance from the same model with float32 attention:
        # flashtune may be at most 3x that far from eager bf16 at any step, or 1 % of the loss, whichever is larger.
        noise = max(abs(a - b) for a, b in zip(eager, eager32))
        for step, (a, b) in enumerate(zip(ft, eager)):
            tol = max(3 * noise, 0.01 * b)
            self.assertLessEqual(abs(a - b), tol, f"step {step}: flashtune loss {a:.4f}, eager {b:.4f} "
                                 f"(bf16 noise {noise:.4f}); losses ft {ft[:5]}..., eager {eager[:5]}...")
        # Training must actually happen (so agreement is not two constants agreeing).
        self.assertLess(ft[-1], 0.8 * ft[0], f"flashtune run did not learn: {ft[0]:.3f} -> {ft[-1]:.3f}")
        self.assertLess(eager[-1], 0.8 * eager[0])


if __name__ == "__main__":
    unittest.main()
