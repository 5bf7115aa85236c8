"""python/tests/test_peers_gpu.py: flashtune.peers on the GPU: a small job through every peer, the result contract,
and planted wrong outputs caught as wrong_result. Skips without torch or a CUDA device.
Run from the repository root: PYTHONPATH=python python3 -m unittest -v python/tests/test_peers_gpu.py
"""
import json
import math
import os
import subprocess
import sys
import tempfile
import unittest

try:
    import torch
except ImportError:
    torch = None

from flashtune import peers

PYTHON_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MEASURE = {"mode": "cold", "warmup": 2, "min_samples": 10, "max_samples": 40, "noise_target": 0.02,
           "min_time_s": 0.001, "max_time_s": 0.5}


def problem(index, dtype, passes=("fwd", "bwd"), **dims):
    return {"index": index, "key": ",".join(f"{k}={v}" for k, v in sorted(dims.items())) + f",dtype={dtype}",
            "dims": dims, "dtype": dtype, "passes": list(passes)}


DENSE, GQA_WINDOW, LEARNED, FP32, SEQ_DIFF = 0, 1, 2, 3, 4
JOB = {
    "version": 1, "peers": [], "measure": MEASURE, "seed": 1234,
    "problems": [
        problem(DENSE, "bf16", batch=1, heads_q=4, seq_q=256, head_dim=64, causal=1),
        problem(GQA_WINDOW, "f16", batch=2, heads_q=8, heads_kv=2, seq_q=384, head_dim=64, causal=1, window=64,
                sink_tokens=4),
        problem(LEARNED, "bf16", batch=2, heads_q=8, heads_kv=2, seq_q=256, head_dim=64, causal=1, window=128,
                learned_sinks=1),
        problem(FP32, "f32", batch=1, heads_q=4, seq_q=256, head_dim=64),
        problem(SEQ_DIFF, "bf16", batch=1, heads_q=4, seq_q=128, seq_k=384, head_dim=64, causal=1),
    ],
}


def setUpModule():
    if torch is None:
        raise unittest.SkipTest("torch is not installed")
    if not torch.cuda.is_available():
        raise unittest.SkipTest("no CUDA device (torch.cuda.is_available() is False)")


class Job(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.TemporaryDirectory()
        cls.out = os.path.join(cls.dir.name, "result.json")
        cls.result = peers.run_job(peers.parse_job(JOB), cls.out)
        cls.by = {(r["index"], r["peer"], r["pass"]): r for r in cls.result["results"]}

    @classmethod
    def tearDownClass(cls):
        cls.dir.cleanup()

    def entry(self, index, peer, pass_name):
        return self.by[(index, peer, pass_name)]

    def test_every_combination_once_with_an_allowed_status(self):
        want = {(p["index"], peer, x) for p in JOB["problems"] for peer in peers.PEERS for x in p["passes"]}
        got = [(r["index"], r["peer"], r["pass"]) for r in self.result["results"]]
        self.assertEqual(len(got), len(set(got)))
        self.assertEqual(set(got), want)
        for r in self.result["results"]:
            with self.subTest(key=(r["index"], r["peer"], r["pass"])):
                self.assertIn(r["status"], peers.STATUSES)
                self.assertEqual(r["seed"], 1234)
                self.assertTrue(r["library"])
                if r["status"] != "ok":
                    self.assertTrue(r["reason"], "every status but ok says why")
                    self.assertNotIn("\n", r["reason"])

    def test_ok_results_passed_validation_and_have_timing(self):
        oks = [r for r in self.result["results"] if r["status"] == "ok"]
        self.assertTrue(oks)
        for r in oks:
            with self.subTest(key=(r["index"], r["peer"], r["pass"])):
                v, t = r["validation"], r["timing"]
                self.assertTrue(v["passed"])
                self.assertEqual(v["nan_count"], 0)
                self.assertLessEqual(v["max_abs_err"], v["tolerance"])
                self.assertGreater(v["tolerance"], 0)
                self.assertEqual(v["output"], "o" if r["pass"] == "fwd" else v["output"])
                self.assertIn(v["output"], ("o", "dq", "dk", "dv", "dsinks"))
                self.assertGreaterEqual(len(t["samples_ms"]), MEASURE["min_samples"])
                self.assertLessEqual(len(t["samples_ms"]), MEASURE["max_samples"])
                self.assertTrue(all(x > 0 for x in t["samples_ms"]))
                self.assertLessEqual(t["min_ms"], t["median_ms"])
                self.assertLessEqual(t["median_ms"], t["max_ms"])
                self.assertTrue(t["cold"])
                self.assertIsInstance(t["converged"], bool)
                self.assertIsInstance(r["device_bytes"], int)
                self.assertGreater(r["device_bytes"], 0)  # at least the output

    def test_no_wrong_results(self):
        wrong = [(r["index"], r["peer"], r["pass"], r["reason"]) for r in self.result["results"]
                 if r["status"] == "wrong_result"]
        self.assertEqual(wrong, [], "a peer failed validation (or the reference is wrong)")

    def test_unsupported_combinations_say_why(self):
        for peer in ("sdpa_flash", "sdpa_cudnn", "sdpa_efficient"):
            for x in ("fwd", "bwd"):
                r = self.entry(LEARNED, peer, x)
                self.assertEqual(r["status"], "unsupported")
                self.assertIn("learned sinks", r["reason"])
                self.assertIsNone(r["timing"])
        r = self.entry(GQA_WINDOW, "sdpa_flash", "fwd")
        self.assertEqual(r["status"], "unsupported")
        self.assertIn("attn_mask", r["reason"])
        fa4 = self.entry(FP32, "fa4", "fwd")
        self.assertEqual(fa4["status"], "unsupported")
        self.assertTrue("fp16 / bf16" in fa4["reason"] or "not importable" in fa4["reason"], fa4["reason"])
        r = self.entry(GQA_WINDOW, "fa4", "bwd")
        self.assertEqual(r["status"], "unsupported")

    def test_the_usual_peers_run(self):
        for index in (DENSE, GQA_WINDOW, LEARNED, FP32, SEQ_DIFF):
            for x in ("fwd", "bwd"):
                r = self.entry(index, "flex", x)
                self.assertEqual(r["status"], "ok", (index, x, r["reason"]))
        for x in ("fwd", "bwd"):
            r = self.entry(DENSE, "sdpa_flash", x)
            self.assertEqual(r["status"], "ok", r["reason"])
            r = self.entry(SEQ_DIFF, "sdpa_efficient", x)  # causal_lower_right through the efficient kernel
            self.assertEqual(r["status"], "ok", r["reason"])
        if self.result["libraries"]["flash_attn_4"] and torch.cuda.get_device_capability()[0] in (9, 10):
            for index in (DENSE, LEARNED, SEQ_DIFF):
                self.assertEqual(self.entry(index, "fa4", "bwd")["status"], "ok", index)

    def test_result_file_is_the_result(self):
        with open(self.out) as f:
            on_disk = json.load(f)
        self.assertEqual(on_disk["version"], 1)
        self.assertEqual(len(on_disk["results"]), len(self.result["results"]))
        self.assertEqual(on_disk["gpu"]["name"], torch.cuda.get_device_name())
        self.assertGreater(on_disk["gpu"]["l2_bytes"], 0)
        self.assertEqual(set(on_disk["libraries"]), {"torch", "cuda", "cudnn", "triton", "flash_attn_4"})
        self.assertEqual(on_disk["libraries"]["torch"], torch.__version__)


class PlantedBugs(unittest.TestCase):
    """A hook changes what validation sees: the engine must call it wrong_result and not time it."""

    def run_planted(self, index, hook):
        job = dict(JOB, peers=["flex"], problems=[p for p in JOB["problems"] if p["index"] == index])
        with tempfile.TemporaryDirectory() as d:
            result = peers.run_job(peers.parse_job(job), os.path.join(d, "r.json"), output_hook=hook)
        return {r["pass"]: r for r in result["results"]}

    def test_wrong_values_and_nan_are_caught(self):
        def hook(peer, pass_name, outputs):
            outputs = {n: t.clone() for n, t in outputs.items()}
            if pass_name == "fwd":
                outputs["o"][0, 0, 0, 0] += 0.25                 # inside the first sampled group
            else:
                outputs["dq"][0, 5, 3, 0] = float("nan")         # outside both sampled groups: NaN counts anyway
            return outputs

        r = self.run_planted(GQA_WINDOW, hook)
        self.assertEqual(r["fwd"]["status"], "wrong_result", r["fwd"])
        self.assertEqual(r["fwd"]["validation"]["output"], "o")
        self.assertGreater(r["fwd"]["validation"]["max_abs_err"], r["fwd"]["validation"]["tolerance"])
        self.assertIsNone(r["fwd"]["timing"])
        self.assertEqual(r["bwd"]["status"], "wrong_result", r["bwd"])
        self.assertEqual(r["bwd"]["validation"]["output"], "dq")
        self.assertEqual(r["bwd"]["validation"]["nan_count"], 1)

    def test_wrong_sink_gradient_is_caught(self):
        def hook(peer, pass_name, outputs):
            outputs = {n: t.clone() for n, t in outputs.items()}
            if pass_name == "bwd":
                outputs["dsinks"][0] += 1e-2 + 0.05 * outputs["dsinks"][0].abs()
            return outputs

        r = self.run_planted(LEARNED, hook)
        self.assertEqual(r["fwd"]["status"], "ok", r["fwd"]["reason"])
        self.assertEqual(r["bwd"]["status"], "wrong_result", r["bwd"])
        self.assertEqual(r["bwd"]["validation"]["output"], "dsinks")

    def test_small_errors_pass(self):
        def hook(peer, pass_name, outputs):  # a tenth of the tolerance's atol: still ok
            return {n: t + 1e-4 if n == "o" else t for n, t in outputs.items()}

        r = self.run_planted(DENSE, hook)
        self.assertEqual(r["fwd"]["status"], "ok", r["fwd"]["reason"])


def run_child(job, launcher):
    """(process, result JSON) of `python3 LAUNCHER --job J --out R` on `job` (launcher: ["-m", "flashtune.peers"] or
    ["-c", script])."""
    with tempfile.TemporaryDirectory() as d:
        jp, out = os.path.join(d, "job.json"), os.path.join(d, "out.json")
        with open(jp, "w") as f:
            json.dump(job, f)
        env = dict(os.environ, PYTHONPATH=PYTHON_DIR + os.pathsep + os.environ.get("PYTHONPATH", ""))
        p = subprocess.run([sys.executable, *launcher, "--job", jp, "--out", out], capture_output=True, text=True,
                           env=env, timeout=600)
        with open(out) as f:
            return p, json.load(f)


class CommandLine(unittest.TestCase):
    def test_cli_runs_a_job_and_exits_0(self):
        job = dict(JOB, peers=["sdpa_efficient", "fa4"], problems=[JOB["problems"][DENSE]])
        p, result = run_child(job, ["-m", "flashtune.peers"])
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(len(result["results"]), 4)
        self.assertEqual(sum("problem 0" in line for line in p.stderr.splitlines()), 4, p.stderr)
        for r in result["results"]:
            if r["status"] == "ok":
                self.assertTrue(math.isfinite(r["timing"]["median_ms"]))

    def test_a_sticky_cuda_error_ends_the_child_with_status_3(self):
        # sdpa_efficient's forward replaced by a device-side assert (a sticky error: every later CUDA call fails):
        # the measurement is recorded as an error naming it, in_flight is cleared, the child exits 3 with one line,
        # and the peer after it (flex) is left for the next process.
        script = (
            "import sys, torch\n"
            "from flashtune import peers\n"
            "def boom(self, q, k, v, sinks):\n"
            "    torch._assert_async(torch.zeros((), device=q.device, dtype=torch.bool))\n"
            "    return q\n"
            "peers.SdpaPeer.forward = boom\n"
            "sys.exit(peers.main(sys.argv[1:]))\n")
        job = dict(JOB, peers=["sdpa_efficient", "flex"], problems=[JOB["problems"][DENSE]])
        p, result = run_child(job, ["-c", script])
        self.assertEqual(p.returncode, 3, p.stderr)
        self.assertIn("left the CUDA context unusable", p.stderr.splitlines()[-1])
        self.assertIsNone(result["in_flight"])
        self.assertEqual([(r["peer"], r["pass"], r["status"]) for r in result["results"]],
                         [("sdpa_efficient", "fwd", "error")])
        self.assertIn("the CUDA context is unusable after it", result["results"][0]["reason"])


if __name__ == "__main__":
    unittest.main()
