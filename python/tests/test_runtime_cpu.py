"""python/tests/test_runtime_cpu.py: the ctypes layer against libflashtune_runtime.so, with no GPU and no torch.

Writes a small export JSON (the schema of `flashtune export --format json`, harness/cli/export.cpp) and checks
explain() for arch sm_90a (exact and nearest entry, compile ok, disk cache), every error path's status code and
message, the Python retry on FT_ERR_BUFFER, the struct layout and that `import flashtune` does not import torch.
Skipped as a whole only when the library file does not exist. Run: PYTHONPATH=python
FLASHTUNE_LIBRARY=build/runtime/libflashtune_runtime.so python3 -m unittest discover -s python/tests -v
"""
import ctypes
import json
import os
import subprocess
import sys
import tempfile
import unittest

import flashtune
from flashtune import _runtime as rt

try:
    LIBRARY = rt.find_library()
except rt.LibraryNotFoundError as e:
    LIBRARY = None
    NOT_FOUND = str(e)

GPU = "NVIDIA H100 80GB HBM3"
ARCH = "sm_90a"

# Problem dims of an attn_fwd problem as the harness names them (every one, so an entry matches exactly).
DIMS = ("batch", "causal", "head_dim", "heads_kv", "heads_q", "learned_sinks", "qk_range", "seq_k", "seq_q",
        "sink_bias", "sink_tokens", "tf32", "window")


def problem(**kw):
    d = {n: 0 for n in DIMS}
    d["qk_range"] = 1  # the harness default (Q, K drawn from [-1, 1]); the runtime asks with it
    d.update(kw)
    return d


def key(d):
    """A canonical "a=1,b=2" key of a dict or of a key string (sorted names), to compare across both forms."""
    if isinstance(d, dict):
        items = d.items()
    else:
        items = (p.split("=", 1) for p in str(d).split(",") if p)
    return ",".join(f"{k}={v}" for k, v in sorted((str(k), str(v)) for k, v in items) if k != "dtype")


def entry(prob, config, median_ms):
    return {
        "family": "attn_fwd", "stage": "forward", "gpu": GPU, "dtype": "bf16", "problem": prob,
        "problem_key": key(prob) + ",dtype=bf16", "config": config, "config_key": key(config),
        "evidence": {"median_ms": median_ms, "rel_noise": 0.01, "tflops": None, "gbps": None, "max_abs_err": None,
                     "tolerance": None, "copy_ratio": None, "device_bytes": 0, "run_id": 1, "trial_id": 1,
                     "source_hash": "test"},
    }


# Every attn_fwd tunable at its default value except the tiles; mma 80 = mma.sync (runs on sm_80 and sm_90a).
CFG_A = {"block_m": 64, "block_n": 64, "num_warps": 4, "num_stages": 2, "mma": 80, "mma_pipe": 1, "min_blocks": 1,
         "epilogue": 1, "pack_heads": 1, "mma_sched": 1, "exp_poly": 1, "rescale": 1, "persistent": 1}
CFG_B = dict(CFG_A, block_m=128)
PROB_A = problem(batch=2, heads_q=8, heads_kv=2, seq_q=1024, seq_k=1024, head_dim=64, causal=1)
PROB_B = problem(batch=1, heads_q=16, heads_kv=16, seq_q=4096, seq_k=4096, head_dim=64, causal=1)
SHAPE_A = dict(batch=2, heads_q=8, heads_kv=2, seq_q=1024, seq_k=1024, head_dim=64, causal=True, dtype="bf16")
SHAPE_NEAR_A = dict(SHAPE_A, seq_q=1000, seq_k=1000)
SHAPE_B = dict(batch=1, heads_q=16, heads_kv=16, seq_q=4096, seq_k=4096, head_dim=64, causal=True, dtype="bf16")


@unittest.skipIf(LIBRARY is None, "libflashtune_runtime.so not built: " + ("" if LIBRARY else NOT_FOUND))
class RuntimeCpuTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="flashtune_py_")
        cls.dir = cls.tmp.name
        cls.configs = os.path.join(cls.dir, "best.json")
        doc = {"generator": "flashtune", "schema": 2, "lookup_rule": "test", "entries": [
            entry(PROB_A, CFG_A, 0.10), entry(PROB_B, CFG_B, 0.50)]}
        with open(cls.configs, "w") as f:
            json.dump(doc, f, indent=2)
        cls.cache = os.path.join(cls.dir, "cache")
        cls.rt = flashtune.Runtime(cls.configs, cls.cache)

    @classmethod
    def tearDownClass(cls):
        cls.rt.close()
        cls.tmp.cleanup()

    def write(self, name, text):
        path = os.path.join(self.dir, name)
        with open(path, "w") as f:
            f.write(text)
        return path

    def assert_error(self, code, fn, *words):
        """fn() raises FlashtuneError with `code`, its message non-empty and naming each of `words`."""
        with self.assertRaises(flashtune.FlashtuneError) as cm:
            fn()
        e = cm.exception
        self.assertEqual(e.code, code, f"{e.status}: {e.message}")
        self.assertTrue(e.message, "ft_last_error() gave no message")
        for w in words:
            self.assertIn(w.lower(), e.message.lower(), f"message does not name {w!r}: {e.message}")
        return e

    # --- the library and the mirrored structs

    def test_abi_version(self):
        lib = rt.load_library()
        self.assertEqual(lib.ft_runtime_abi_version(), rt.FT_RUNTIME_ABI_VERSION)
        self.assertEqual(os.path.realpath(self.rt.library_path), os.path.realpath(LIBRARY))

    def test_struct_layout_matches_the_header(self):
        # C layout of the header's structs on x86-64 / aarch64: six int64, five int32 (68 bytes, padded to 72);
        # eleven uint64.
        S, T = rt.ft_attn_shape, rt.ft_attn_tensors
        self.assertEqual([f for f, _ in S._fields_], ["batch", "heads_q", "heads_kv", "seq_q", "seq_k", "head_dim",
                                                       "causal", "window", "sink_tokens", "learned_sinks", "dtype"])
        self.assertEqual([S.head_dim.offset, S.causal.offset, S.learned_sinks.offset, S.dtype.offset], [40, 48, 60, 64])
        self.assertEqual(ctypes.sizeof(S), 72)
        self.assertEqual([f for f, _ in T._fields_], ["q", "k", "v", "o", "lse", "dout", "dq", "dk", "dv", "sinks",
                                                       "dsinks"])
        self.assertEqual(ctypes.sizeof(T), 88)
        self.assertEqual(T.dsinks.offset, 80)

    def test_import_does_not_import_torch(self):
        code = "import sys, flashtune; flashtune.Runtime; flashtune.FlashtuneError; print('torch' in sys.modules)"
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=os.environ.copy())
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertEqual(out.stdout.strip(), "False")

    def test_library_lookup_names_every_path_tried(self):
        missing = os.path.join(self.dir, "no_such_dir", rt.LIBRARY_NAME)
        old = os.environ.get("FLASHTUNE_LIBRARY")
        os.environ["FLASHTUNE_LIBRARY"] = missing
        try:
            with self.assertRaises(rt.LibraryNotFoundError) as cm:
                rt.find_library()
            self.assertIn(missing, str(cm.exception))
            self.assertIn("$FLASHTUNE_LIBRARY", str(cm.exception))
        finally:
            if old is None:
                del os.environ["FLASHTUNE_LIBRARY"]
            else:
                os.environ["FLASHTUNE_LIBRARY"] = old

    # --- explain: the lookup rule and the compile

    def test_explain_exact_entry(self):
        e = self.rt.explain(SHAPE_A, arch=ARCH)
        self.assertEqual(e["pass"], "forward")
        self.assertEqual(e["arch"], ARCH)
        self.assertEqual(e["way"], ["attn_fwd"])
        self.assertEqual(len(e["stages"]), 1)
        st = e["stages"][0]
        self.assertEqual(st["family"], "attn_fwd")
        self.assertEqual(key(st["config"]), key(CFG_A))
        self.assertIs(st["exact"], True)
        self.assertEqual(st["distance"], 0)
        self.assertEqual(key(st["tuned_problem"]), key(PROB_A))
        self.assertEqual(st["tuned_gpu"], GPU)
        self.assertAlmostEqual(st["median_ms"], 0.10)
        self.assertIs(st["compile"]["ok"], True, st["compile"])
        self.assertGreater(st["compile"]["registers"], 0)

    def test_explain_other_exact_entry(self):
        st = self.rt.explain(SHAPE_B, arch=ARCH)["stages"][0]
        self.assertEqual(key(st["config"]), key(CFG_B))
        self.assertIs(st["exact"], True)
        self.assertIs(st["compile"]["ok"], True, st["compile"])

    def test_explain_nearest_entry(self):
        st = self.rt.explain(SHAPE_NEAR_A, arch=ARCH)["stages"][0]
        self.assertEqual(key(st["config"]), key(CFG_A))  # seq 1000 is nearest to entry A's 1024
        self.assertIs(st["exact"], False)
        self.assertGreater(st["distance"], 0)
        self.assertEqual(key(st["tuned_problem"]), key(PROB_A))
        self.assertIs(st["compile"]["ok"], True, st["compile"])

    def test_explain_accepts_a_struct(self):
        by_dict = self.rt.explain(SHAPE_A, arch=ARCH)
        by_struct = self.rt.explain(rt.make_shape(2, 8, 2, 1024, 1024, 64, causal=True, dtype=rt.FT_BF16), arch=ARCH)
        self.assertEqual(key(by_struct["stages"][0]["config"]), key(by_dict["stages"][0]["config"]))

    def test_second_runtime_hits_the_disk_cache(self):
        self.rt.explain(SHAPE_A, arch=ARCH)  # compiled into cls.cache at the latest here
        with flashtune.Runtime(self.configs, self.cache) as again:
            st = again.explain(SHAPE_A, arch=ARCH)["stages"][0]
        self.assertIs(st["compile"]["ok"], True)
        self.assertIs(st["compile"]["cache_hit"], True, st["compile"])

    def test_explain_buffer_too_small_is_retried(self):
        full = self.rt.explain_text(SHAPE_A, arch=ARCH)
        retried = self.rt.explain_text(SHAPE_A, arch=ARCH, buffer_bytes=16)
        self.assertEqual(json.loads(retried), json.loads(full))
        # The C contract the retry relies on: FT_ERR_BUFFER with *needed = length + 1, then a fit.
        lib = rt.load_library()
        shape = rt.make_shape(**SHAPE_A)
        buf = ctypes.create_string_buffer(16)
        needed = ctypes.c_size_t(0)
        status = lib.ft_attention_explain(self.rt.handle, ctypes.byref(shape), 0, ARCH.encode(), buf, 16,
                                          ctypes.byref(needed))
        self.assertEqual(status, rt.FT_ERR_BUFFER)
        self.assertGreater(needed.value, 16)
        buf = ctypes.create_string_buffer(needed.value)
        status = lib.ft_attention_explain(self.rt.handle, ctypes.byref(shape), 0, ARCH.encode(), buf, needed.value,
                                          None)
        self.assertEqual(status, rt.FT_OK, rt._last_error(lib))
        self.assertEqual(len(buf.value) + 1, needed.value)

    # --- errors: status codes and messages

    def test_missing_config_file(self):
        path = os.path.join(self.dir, "does_not_exist.json")
        self.assert_error(rt.FT_ERR_CONFIGS, lambda: flashtune.Runtime(path, ""), path)

    def test_malformed_json(self):
        path = self.write("malformed.json", '{"generator": "flashtune", "schema": 2, "entries": [ {"family": ')
        self.assert_error(rt.FT_ERR_CONFIGS, lambda: flashtune.Runtime(path, ""), path)

    def test_family_with_no_entry(self):
        # The file holds bf16 attn_fwd entries only: an fp16 forward and the backward take the runtime's built-in
        # untuned fallbacks, and say so; a shape no fallback runs (fp32 head_dim 256 backward) has no config.
        f16 = self.rt.explain(dict(SHAPE_A, dtype="f16"), arch=ARCH)
        self.assertEqual([st["untuned"] for st in f16["stages"]], [True])
        bwd = self.rt.explain(SHAPE_A, backward=True, arch=ARCH)
        self.assertTrue(bwd["stages"] and all(st["untuned"] for st in bwd["stages"]), bwd)
        self.assertFalse(self.rt.explain(SHAPE_A, arch=ARCH)["stages"][0]["untuned"])  # the file's own entry
        self.assert_error(rt.FT_ERR_NO_CONFIG, lambda: self.rt.explain(dict(SHAPE_A, head_dim=256, dtype="f32"),
                                                                       backward=True, arch=ARCH), "no complete way")

    def test_heads_not_a_multiple(self):
        shape = dict(SHAPE_A, heads_q=6, heads_kv=4)
        self.assert_error(rt.FT_ERR_ARGUMENT, lambda: self.rt.explain(shape, arch=ARCH), "heads")

    def test_closed_runtime_raises(self):
        r = flashtune.Runtime(self.configs, "")
        r.close()
        r.close()  # idempotent
        with self.assertRaises(flashtune.FlashtuneError):
            r.explain(SHAPE_A, arch=ARCH)

    def test_error_is_picklable_and_readable(self):
        e = flashtune.FlashtuneError(rt.FT_ERR_NO_CONFIG, "no entry")
        self.assertEqual(e.status, "FT_ERR_NO_CONFIG")
        self.assertEqual(str(e), "FT_ERR_NO_CONFIG: no entry")
        import pickle
        back = pickle.loads(pickle.dumps(e))
        self.assertEqual((back.code, back.message), (e.code, e.message))


if __name__ == "__main__":
    unittest.main()
