"""python/tests/test_peers_cpu.py: flashtune.peers without a GPU or torch: the job file's contract (every bad job is
one line on stderr and exit status 2, run as `python3 -m flashtune.peers`), the problem dims and their defaults, the
visible-pair count against a brute-force loop, and the timing statistics and stopping rule on synthetic samples.
"""
import copy
import json
import math
import os
import subprocess
import sys
import tempfile
import types
import unittest

from flashtune import _reference as ref
from flashtune import _timing as timing
from flashtune import peers

PYTHON_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

GOOD = {
    "version": 1,
    "peers": ["sdpa_cudnn", "flex"],
    "measure": {"mode": "cold", "warmup": 3, "warmup_s": 0.0, "min_samples": 10, "max_samples": 500,
                "noise_target": 0.01, "min_time_s": 0.02, "max_time_s": 1.0},
    "seed": 1234,
    "problems": [
        {"index": 0, "key": "batch=4,causal=1,dtype=bf16",
         "dims": {"batch": 4, "heads_q": 64, "heads_kv": 8, "seq_q": 4096, "seq_k": 4096, "head_dim": 64,
                  "causal": 1, "window": 128, "sink_tokens": 0, "learned_sinks": 1},
         "dtype": "bf16", "passes": ["fwd", "bwd"]},
        {"index": 7, "dims": {"batch": 1, "heads_q": 2, "seq_q": 100, "head_dim": 32}, "dtype": "f32",
         "passes": ["bwd"]},
    ],
}


def run_cli(job_obj=None, raw=None, args=None):
    """(returncode, stderr) of `python3 -m flashtune.peers` on a job written to a temporary file."""
    with tempfile.TemporaryDirectory() as d:
        job = os.path.join(d, "job.json")
        with open(job, "w") as f:
            f.write(raw if raw is not None else json.dumps(job_obj))
        argv = args if args is not None else ["--job", job, "--out", os.path.join(d, "result.json")]
        env = dict(os.environ, PYTHONPATH=PYTHON_DIR + os.pathsep + os.environ.get("PYTHONPATH", ""))
        p = subprocess.run([sys.executable, "-m", "flashtune.peers", *argv], capture_output=True, text=True,
                           env=env, timeout=120)
        return p.returncode, p.stderr


def mutated(fn):
    job = copy.deepcopy(GOOD)
    fn(job)
    return job


class JobParsing(unittest.TestCase):
    def test_good_job(self):
        job = peers.parse_job(GOOD)
        self.assertEqual(job.peers, ["sdpa_cudnn", "flex"])
        self.assertEqual(job.seed, 1234)
        self.assertEqual(job.measure.min_samples, 10)
        self.assertEqual([p.index for p in job.problems], [0, 7])
        self.assertEqual(job.problems[0].passes, ["fwd", "bwd"])
        s = job.problems[0].shape
        self.assertEqual((s.heads_q, s.heads_kv, s.group, s.window, s.learned_sinks, s.dtype),
                         (64, 8, 8, 128, True, "bf16"))
        self.assertEqual(job.problems[1].key, "")

    def test_empty_peer_list_means_all_and_defaults(self):
        job = peers.parse_job({"version": 1, "peers": [], "problems": []})
        self.assertEqual(job.peers, list(peers.PEERS))
        self.assertEqual(job.seed, 0)
        self.assertEqual(job.measure, timing.MeasureSettings())
        self.assertEqual(peers.parse_job({"version": 1, "problems": []}).peers, list(peers.PEERS))

    def test_skip_names_measurements_not_to_run(self):
        job = peers.parse_job(mutated(lambda j: j.update(skip=[{"index": 7, "peer": "flex", "pass": "bwd"}])))
        self.assertEqual(job.skip, {(7, "flex", "bwd")})
        self.assertEqual(peers.parse_job(GOOD).skip, set())

    def test_peers_run_in_the_engines_order(self):
        job = peers.parse_job(mutated(lambda j: j.update(peers=["fa4", "sdpa_flash"])))
        self.assertEqual(job.peers, ["sdpa_flash", "fa4"])

    BAD = [  # (what, mutation, expected words in the message)
        ("no version", lambda j: j.pop("version"), "missing key 'version'"),
        ("wrong version", lambda j: j.update(version=2), "version: expected 1, got 2"),
        ("no problems", lambda j: j.pop("problems"), "missing key 'problems'"),
        ("unknown top key", lambda j: j.update(extra=1), "unknown key 'extra'"),
        ("unknown peer", lambda j: j.update(peers=["sdpa_math"]), "unknown peer 'sdpa_math'"),
        ("peer twice", lambda j: j.update(peers=["flex", "flex"]), "named twice"),
        ("peers not a list", lambda j: j.update(peers="flex"), "peers: expected a list"),
        ("unknown dtype", lambda j: j["problems"][0].update(dtype="fp8"), "unknown dtype 'fp8'"),
        ("missing dims", lambda j: j["problems"][0].pop("dims"), "problems[0]: missing key 'dims'"),
        ("missing dtype", lambda j: j["problems"][1].pop("dtype"), "problems[1]: missing key 'dtype'"),
        ("missing passes", lambda j: j["problems"][0].pop("passes"), "missing key 'passes'"),
        ("missing index", lambda j: j["problems"][0].pop("index"), "missing key 'index'"),
        ("duplicate index", lambda j: j["problems"][1].update(index=0), "0 appears twice"),
        ("unknown pass", lambda j: j["problems"][0].update(passes=["fwd", "bwd_dq"]), "unknown pass 'bwd_dq'"),
        ("empty passes", lambda j: j["problems"][0].update(passes=[]), "non-empty list"),
        ("missing dim", lambda j: j["problems"][0]["dims"].pop("head_dim"), "missing dimension 'head_dim'"),
        ("unknown dim", lambda j: j["problems"][0]["dims"].update(scale_milli=0), "unknown dimension 'scale_milli'"),
        ("gqa", lambda j: j["problems"][0]["dims"].update(heads_kv=5), "must be a multiple of heads_kv"),
        ("switch", lambda j: j["problems"][0]["dims"].update(causal=2), "causal must be 0 or 1"),
        ("sinks without window", lambda j: j["problems"][0]["dims"].update(window=0, sink_tokens=4),
         "sink_tokens needs a window"),
        ("tf32 on bf16", lambda j: j["problems"][0]["dims"].update(tf32=1), "tf32 applies to dtype f32 only"),
        ("zero size", lambda j: j["problems"][1]["dims"].update(seq_q=0), "seq_q must be >= 1"),
        ("float dim", lambda j: j["problems"][1]["dims"].update(batch=1.5), "must be an integer"),
        ("measure key", lambda j: j["measure"].update(repeats=3), "measure: unknown key 'repeats'"),
        ("measure mode", lambda j: j["measure"].update(mode="warm"), "measure.mode must be 'cold' or 'hot'"),
        ("measure type", lambda j: j["measure"].update(min_samples="10"), "measure.min_samples: expected an integer"),
        ("negative seed", lambda j: j.update(seed=-1), "seed"),
        ("skip not a list", lambda j: j.update(skip={"index": 0}), "skip: expected a list"),
        ("skip entry key", lambda j: j.update(skip=[{"index": 0, "peer": "flex"}]), "skip[0]: missing key 'pass'"),
        ("skip unknown peer", lambda j: j.update(skip=[{"index": 0, "peer": "x", "pass": "fwd"}]), "unknown peer 'x'"),
    ]

    def test_every_bad_job_names_its_key(self):
        for what, fn, words in self.BAD:
            with self.subTest(what=what):
                with self.assertRaises(peers.JobError) as cm:
                    peers.parse_job(mutated(fn))
                self.assertIn(words, str(cm.exception))
                self.assertNotIn("\n", str(cm.exception))


class CommandLine(unittest.TestCase):
    def assert_one_line_exit_2(self, rc, err, words):
        self.assertEqual(rc, 2, err)
        lines = err.strip().splitlines()
        self.assertEqual(len(lines), 1, err)
        self.assertTrue(lines[0].startswith("flashtune.peers: "), err)
        self.assertIn(words, lines[0])

    def test_bad_jobs_exit_2_with_one_line(self):
        for what, fn, words in JobParsing.BAD[::3] + JobParsing.BAD[1::9]:
            with self.subTest(what=what):
                rc, err = run_cli(mutated(fn))
                self.assert_one_line_exit_2(rc, err, words)

    def test_not_json(self):
        rc, err = run_cli(raw='{"version": 1,')
        self.assert_one_line_exit_2(rc, err, "not valid JSON")

    def test_missing_file_and_arguments(self):
        rc, err = run_cli(args=["--job", "/nonexistent/job.json", "--out", "/tmp/r.json"])
        self.assert_one_line_exit_2(rc, err, "/nonexistent/job.json: cannot read")
        rc, err = run_cli(args=["--job", "x.json"])
        self.assert_one_line_exit_2(rc, err, "--out")

    def test_good_job_without_torch_or_gpu(self):
        try:
            import torch
            has_gpu = torch.cuda.is_available()
        except ImportError:
            torch, has_gpu = None, False
        if has_gpu:
            self.skipTest("a CUDA device is here: test_peers_gpu.py runs jobs")
        rc, err = run_cli(GOOD)
        self.assert_one_line_exit_2(rc, err, "torch is not importable" if torch is None else "no CUDA device")


class Dims(unittest.TestCase):
    def test_defaults_follow_the_harness(self):
        s = ref.Shape.from_dims({"batch": 2, "heads_q": 8, "seq_q": 300, "head_dim": 64}, "f16")
        self.assertEqual((s.heads_kv, s.seq_k), (8, 300))  # default heads_q, seq_q
        self.assertEqual((s.causal, s.window, s.sink_tokens, s.learned_sinks, s.tf32), (False, 0, 0, False, False))
        self.assertEqual((s.qk_range, s.sink_bias), (1, 0))
        self.assertAlmostEqual(s.scale, 1 / 8)
        t = ref.Shape.from_dims({"batch": 1, "heads_q": 8, "heads_kv": -1, "seq_q": 10, "seq_k": -1, "head_dim": 16},
                                "f32")
        self.assertEqual((t.heads_kv, t.seq_k), (8, 10))  # -1 as complete_problem reads it
        u = ref.Shape.from_dims({"batch": 1, "heads_q": 8, "heads_kv": 2, "seq_q": 10, "seq_k": 30, "head_dim": 16,
                                 "qk_range": 3, "sink_bias": -2, "tf32": 1}, "f32")
        self.assertEqual((u.group, u.seq_k, u.qk_range, u.sink_bias, u.tf32), (4, 30, 3, -2, True))
        self.assertEqual(set(ref.OPTIONAL_DIMS), {"heads_kv", "seq_k", "causal", "window", "sink_tokens",
                                                  "learned_sinks", "tf32", "qk_range", "sink_bias"})

    def test_visible_pairs_match_brute_force(self):
        cases = [dict(seq_q=sq, seq_k=sk, causal=c, window=w, sink_tokens=st)
                 for sq, sk in ((1, 1), (7, 7), (16, 40), (40, 16), (33, 33), (5, 64))
                 for c in (0, 1) for w in (0, 1, 3, 8, 100) for st in ((0, 2, 5) if w else (0,))]
        for c in cases:
            s = ref.Shape.from_dims(dict(batch=2, heads_q=3, head_dim=16, **c), "bf16")
            brute = sum(s.visible(i, j) for i in range(s.seq_q) for j in range(s.seq_k)) * 2 * 3
            with self.subTest(**c):
                self.assertEqual(s.visible_pairs(), brute)
        dense = ref.Shape.from_dims(dict(batch=1, heads_q=1, head_dim=16, seq_q=64, causal=1), "f16")
        self.assertEqual(dense.visible_pairs(), 64 * 65 // 2)

    def test_visible_is_the_conventions_mask(self):
        s = ref.Shape.from_dims(dict(batch=1, heads_q=1, head_dim=16, seq_q=4, seq_k=8, causal=1, window=2,
                                     sink_tokens=1), "f16")
        # offset 4: query 0 sees keys 3, 4 (window) and 0 (sink); not 5 (causal).
        self.assertEqual([j for j in range(8) if s.visible(0, j)], [0, 3, 4])
        self.assertEqual([j for j in range(8) if s.visible(3, j)], [0, 6, 7])

    def test_atol_tables(self):
        bf = ref.Shape.from_dims(dict(batch=2, heads_q=4, head_dim=64, seq_q=128), "bf16")
        self.assertEqual((ref.fwd_atol("f16"), ref.fwd_atol("bf16"), ref.fwd_atol("f32"), ref.fwd_atol("f32", True)),
                         (1e-3, 8e-3, 2e-5, 2e-3))
        self.assertEqual((ref.bwd_atol("bf16"), ref.bwd_atol("f16"), ref.bwd_atol("f32")), (4e-3, 5e-4, 2e-5))
        tf = ref.Shape.from_dims(dict(batch=1, heads_q=4, heads_kv=1, head_dim=64, seq_q=400, tf32=1), "f32")
        self.assertEqual(tf.grad_terms, 1600)
        self.assertAlmostEqual(ref.bwd_atol("f32", True, tf.grad_terms), 1e-3 * math.sqrt(1600 / 16))
        self.assertAlmostEqual(ref.dsink_atol(bf), 1e-6 * math.sqrt(256))
        # one ulp at max|ref|: bf16 at 3.0 is 2^(1 - 7), fp16 2^(1 - 10); below atol the atol stays; fp32 keeps it.
        self.assertEqual(ref.storage_atol("bf16", 3.0, 1e-3), 2.0 ** -6)
        self.assertEqual(ref.storage_atol("f16", 0.5, 1e-3), 1e-3)
        self.assertEqual(ref.storage_atol("f16", 3.0, 1e-4), 2.0 ** -9)
        self.assertEqual(ref.storage_atol("f32", 1e6, 2e-5), 2e-5)
        self.assertEqual(ref.storage_atol("bf16", 0.0, 8e-3), 8e-3)


class Stats(unittest.TestCase):
    def test_summary_of_known_samples(self):
        t = timing.summarize([4.0, 1.0, 3.0, 2.0])
        self.assertEqual(t["samples_ms"], [4.0, 1.0, 3.0, 2.0])  # kept in order
        self.assertEqual((t["median_ms"], t["min_ms"], t["max_ms"], t["mean_ms"]), (2.5, 1.0, 4.0, 2.5))
        self.assertAlmostEqual(t["iqr_ms"], 3.25 - 1.75)  # type 7 quantiles
        self.assertAlmostEqual(t["rel_stdev"], math.sqrt(5 / 3) / 2.5)  # n - 1
        self.assertEqual(timing.summarize([2.0])["rel_stdev"], 0.0)
        self.assertEqual(timing.summarize([])["median_ms"], 0.0)
        self.assertEqual(timing.quantile_sorted([1.0, 2.0, 3.0], 0.5), 2.0)

    def test_stopping_rule(self):
        s = timing.MeasureSettings(min_samples=10, max_samples=50, noise_target=0.01, min_time_s=0.02, max_time_s=1.0)
        steady = [3.0] * 9
        self.assertIsNone(timing.stop_reason(steady, 0.1, s))              # below min_samples
        self.assertEqual(timing.stop_reason(steady + [3.0], 0.1, s), "converged")
        short = [0.001] * 10                                                 # 10 us of kernel time < min_time_s
        self.assertIsNone(timing.stop_reason(short, 0.1, s))
        self.assertEqual(timing.stop_reason([0.001] * 20000, 0.1, timing.MeasureSettings(max_samples=100000)),
                         "converged")                                        # 20 ms reached
        noisy = [3.0, 6.0] * 5
        self.assertIsNone(timing.stop_reason(noisy, 0.1, s))
        self.assertEqual(timing.stop_reason(noisy * 5, 0.1, s), "max_samples")
        self.assertEqual(timing.stop_reason(noisy, 1.5, s), "max_time")
        self.assertEqual(timing.stop_reason([1.0], 0.0, timing.MeasureSettings(min_samples=0, max_samples=0)),
                         "max_samples")                                      # max_samples 0 is one sample
        self.assertEqual(timing.next_batch([0.01]), timing.MAX_BATCH)
        self.assertEqual(timing.next_batch([5.0]), 1)
        self.assertEqual(timing.next_batch([0.5]), 4)

    def test_measure_enqueues_the_next_batch_before_waiting(self):
        # measure() with a stand-in torch: every event records the order of what was enqueued; a batch's last stop
        # event is waited for only after the next batch is in (back-to-back samples, docs/NOTES.md session 38).
        log = []

        class Event:
            def __init__(self, enable_timing=False):
                self.at = None

            def record(self):
                log.append(("record", self))

            def synchronize(self):
                log.append(("wait", self))

            def elapsed_time(self, other):
                return 3.0  # [ms]

        cuda = types.SimpleNamespace(Event=Event, synchronize=lambda: log.append(("sync", None)))
        fake = types.SimpleNamespace(cuda=cuda)
        launches = []

        def measure(s):  # timing.measure with the stand-in as torch, launches logged
            saved = sys.modules.get("torch")
            sys.modules["torch"] = fake
            try:
                return timing.measure(lambda: (launches.append(len(log)), log.append(("launch", None))), s)
            finally:
                if saved is None:
                    del sys.modules["torch"]
                else:
                    sys.modules["torch"] = saved

        t = measure(timing.MeasureSettings(warmup=2, min_samples=5, max_samples=7, noise_target=0.0, max_time_s=60.0))
        self.assertEqual(len(t["samples_ms"]), 7)  # max_samples (noise target 0 never met)
        self.assertEqual(len(launches), 2 + 7)     # the warm-up, then the samples; no batch left over at max_samples
        waits = [i for i, (what, _) in enumerate(log) if what == "wait"]
        launch_at = [i for i, (what, _) in enumerate(log) if what == "launch"]
        # Batches of one here (3 ms samples): when the host waits for sample j, sample j + 1 is already queued (but
        # for the last), so the GPU is never left without work while the host waits.
        for j, w in enumerate(waits):
            queued = sum(1 for l in launch_at if l < w) - 2  # past the warm-up
            self.assertEqual(queued, min(j + 2, 7))
        first_wait = waits[0]
        self.assertEqual(sum(1 for l in launch_at if l < first_wait), 2 + 2)  # warm-up, sample 1 and sample 2 queued

        # Stopped by convergence: the batch in flight is waited for and dropped.
        log.clear(), launches.clear()
        t = measure(timing.MeasureSettings(warmup=0, min_samples=3, max_samples=50, noise_target=0.5, min_time_s=0.0))
        self.assertEqual(len(t["samples_ms"]), 3)
        self.assertGreater(len(launches), 3)          # a batch beyond the stop was in flight
        self.assertEqual(log[-1][0], "wait")          # and was waited for before measure() returned

    def test_clock_polls_summary(self):
        self.assertEqual(timing.summarize_polls([]), {})
        # 0x4 SW power cap, 0x80 HW power brake: capped; 0x1 idle, 0x20 SW thermal: not the power cap.
        c = timing.summarize_polls([(1980, 0x1), (1650, 0x4), (1700, 0x24), (1690, 0x80), (1800, 0x20)])
        self.assertAlmostEqual(c["sm_clock_mhz"], (1980 + 1650 + 1700 + 1690 + 1800) / 5)
        self.assertAlmostEqual(c["power_capped"], 3 / 5)

    def test_clock_probe_of_an_unknown_gpu_is_none(self):
        self.assertIsNone(timing.ClockProbe.open("GPU-00000000-0000-0000-0000-000000000000"))

    def test_settings_from_json(self):
        s = timing.MeasureSettings.from_json({"mode": "hot", "warmup_s": 1, "max_samples": 20})
        self.assertEqual((s.mode, s.warmup_s, s.max_samples, s.min_samples), ("hot", 1.0, 20, 10))
        self.assertIsInstance(s.warmup_s, float)
        with self.assertRaises(ValueError):
            timing.MeasureSettings.from_json({"min_time_s": -1})


class ResultFile(unittest.TestCase):
    def test_written_atomically_without_nan(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "r.json")
            peers.write_result(path, {"version": 1, "results": [{"validation": {"max_abs_err": math.inf,
                                                                                "naive_err": math.nan}}]})
            with open(path) as f:
                obj = json.load(f)
            self.assertIsNone(obj["results"][0]["validation"]["max_abs_err"])
            self.assertIsNone(obj["results"][0]["validation"]["naive_err"])
            self.assertEqual(os.listdir(d), ["r.json"])  # no temporary file left

    def test_pick_worst_reports_the_failing_output(self):
        ok = dict(max_abs_err=1e-3, max_rel_err=0, naive_err=1e-3, tolerance=3e-3, nan_count=0, passed=True)
        close = dict(ok, max_abs_err=2.9e-3)
        bad = dict(ok, max_abs_err=1e-4, nan_count=3, passed=False)
        v = peers._pick_worst({"dq": ok, "dk": close, "dv": bad})
        self.assertEqual((v["output"], v["passed"]), ("dv", False))
        v = peers._pick_worst({"dq": ok, "dk": close})
        self.assertEqual((v["output"], v["passed"]), ("dk", True))


if __name__ == "__main__":
    unittest.main()
