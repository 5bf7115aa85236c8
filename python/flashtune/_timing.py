"""python/flashtune/_timing.py: timing of one CUDA call the way harness/measure does it, for the peers.

Warm-up, an optional L2 flush before each sample (cold), CUDA events around each sample, samples enqueued in
small batches back-to-back (the next batch in before the host waits for this one), and noise-based stopping within
a budget (harness/measure/measure.cpp); the statistics of harness/measure/stats.cpp. The settings and statistics are pure Python (tested on the CPU); measure() imports
torch when called.
"""
import math
import threading
import time
from dataclasses import dataclass, fields

MAX_BATCH = 16               # samples enqueued between two host synchronizations (measure.cpp kMaxBatch)
BATCH_TARGET_MS = 2.0        # [ms] of kernel time per batch once the call's time is known
MAX_WARMUP_LAUNCHES = 100000  # warmup_s's launches past the first timed one
DEFAULT_L2_BYTES = 64 << 20  # [bytes] when the device does not say


@dataclass
class MeasureSettings:
    """core::MeasureSettings without the watchdog (a peer is a library call, not a kernel of ours)."""
    mode: str = "cold"          # cold: flush L2 before each sample; hot: do not
    warmup: int = 3             # launches before the first sample
    warmup_s: float = 0.0       # [s] of kernel time the warm-up lasts at least
    min_samples: int = 10
    max_samples: int = 500
    noise_target: float = 0.01  # stop once stdev/mean < this (after min_samples and min_time_s)
    min_time_s: float = 0.02    # [s] of kernel time before the noise test applies
    max_time_s: float = 1.0     # [s] of wall time per measurement

    @classmethod
    def from_json(cls, obj):
        """Settings from the job's "measure" object: absent keys take the defaults above. Raises ValueError on an
        unknown key, a wrong type or a value out of range."""
        if obj is None:
            return cls()
        if not isinstance(obj, dict):
            raise ValueError("'measure' must be an object")
        names = {f.name: f.type for f in fields(cls)}
        kw = {}
        for key, value in obj.items():
            if key not in names:
                raise ValueError(f"measure: unknown key '{key}' (known: {', '.join(names)})")
            want = names[key]
            if want is str:
                ok = isinstance(value, str)
            elif want is int:
                ok = isinstance(value, int) and not isinstance(value, bool)
            else:
                ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
            if not ok:
                raise ValueError(f"measure.{key}: expected {'a string' if want is str else 'an integer' if want is int else 'a number'}, "
                                 f"got {value!r}")
            kw[key] = float(value) if want is float else value
        s = cls(**kw)
        if s.mode not in ("cold", "hot"):
            raise ValueError(f"measure.mode must be 'cold' or 'hot', got '{s.mode}'")
        for key in ("warmup", "warmup_s", "min_samples", "max_samples", "noise_target", "min_time_s", "max_time_s"):
            if getattr(s, key) < 0:
                raise ValueError(f"measure.{key} must be >= 0")
        return s


def quantile_sorted(xs, q):
    """Quantile q in [0, 1] of ascending `xs` with linear interpolation (type 7; stats.cpp quantile_sorted)."""
    if not xs:
        return 0.0
    q = min(max(q, 0.0), 1.0)
    pos = q * (len(xs) - 1)
    lo = int(math.floor(pos))
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (pos - lo) * (xs[hi] - xs[lo])


def summarize(samples_ms):
    """stats.cpp summarize(): {"samples_ms" (in order), "median_ms", "iqr_ms" (q75 - q25), "min_ms", "max_ms",
    "mean_ms", "rel_stdev" (sample stdev, n - 1, over the mean; 0 below 2 samples or for a zero mean)} [ms]."""
    xs = sorted(samples_ms)
    t = {"samples_ms": list(samples_ms), "median_ms": 0.0, "iqr_ms": 0.0, "min_ms": 0.0, "max_ms": 0.0,
         "mean_ms": 0.0, "rel_stdev": 0.0}
    if not xs:
        return t
    n = len(xs)
    mean = sum(xs) / n
    t.update(median_ms=quantile_sorted(xs, 0.5), iqr_ms=quantile_sorted(xs, 0.75) - quantile_sorted(xs, 0.25),
             min_ms=xs[0], max_ms=xs[-1], mean_ms=mean)
    if n >= 2 and mean != 0:
        t["rel_stdev"] = math.sqrt(sum((x - mean) ** 2 for x in xs) / (n - 1)) / abs(mean)
    return t


def stop_reason(samples_ms, elapsed_s, s):
    """Why sampling stops after `samples_ms` taken in `elapsed_s` [s] of wall time, or None to go on:
    "converged" (n >= min_samples, kernel time >= min_time_s and rel_stdev < noise_target), "max_samples", or
    "max_time" (wall time > max_time_s). The order of measure.cpp's tests."""
    n = len(samples_ms)
    max_samples = max(1, s.max_samples)
    min_samples = min(max(s.min_samples, 1), max_samples)
    if n >= min_samples and sum(samples_ms) * 1e-3 >= s.min_time_s and \
            summarize(samples_ms)["rel_stdev"] < s.noise_target:
        return "converged"
    if n >= max_samples:
        return "max_samples"
    if elapsed_s > s.max_time_s:
        return "max_time"
    return None


def next_batch(samples_ms):
    """Samples to enqueue next: about BATCH_TARGET_MS of kernel time, 1 .. MAX_BATCH."""
    mean = sum(samples_ms) / len(samples_ms)
    return min(max(int(BATCH_TARGET_MS / max(mean, 1e-3)), 1), MAX_BATCH)


POWER_CAP_REASONS = 0x4 | 0x80  # NVML clock-event reasons: SW power cap, HW power brake (harness/cuda/clocks.hpp)


def summarize_polls(polls):
    """harness/cuda/clocks.cpp summarize_polls(): of (sm_mhz, reasons) polls, {"sm_clock_mhz": the mean SM clock
    [MHz], "power_capped": the share [0, 1] of polls with a power-cap reason}; {} without polls."""
    if not polls:
        return {}
    n = len(polls)
    return {"sm_clock_mhz": sum(m for m, _ in polls) / n,
            "power_capped": sum(1 for _, r in polls if r & POWER_CAP_REASONS) / n}


class ClockProbe:
    """The SM clock and clock-event reasons of one GPU through NVML (libnvidia-ml.so.1 by ctypes), as the harness's
    ClockProbe. open() returns None where NVML is missing or does not know the GPU."""

    @classmethod
    def open(cls, uuid):
        import ctypes
        try:
            lib = ctypes.CDLL("libnvidia-ml.so.1")
            reasons = getattr(lib, "nvmlDeviceGetCurrentClocksEventReasons", None) or \
                lib.nvmlDeviceGetCurrentClocksThrottleReasons
            if lib.nvmlInit_v2() != 0:
                return None
            device = ctypes.c_void_p()
            name = uuid if uuid.startswith("GPU-") else "GPU-" + uuid
            if lib.nvmlDeviceGetHandleByUUID(name.encode(), ctypes.byref(device)) != 0:
                lib.nvmlShutdown()
                return None
        except (OSError, AttributeError):
            return None
        probe = cls()
        probe._ctypes, probe._lib, probe._device, probe._reasons = ctypes, lib, device, reasons
        return probe

    def poll(self):
        """(sm_mhz, reasons), or None when NVML does not answer."""
        mhz, reasons = self._ctypes.c_uint(), self._ctypes.c_ulonglong()
        if self._lib.nvmlDeviceGetClockInfo(self._device, 1, self._ctypes.byref(mhz)) != 0:  # 1: NVML_CLOCK_SM
            return None
        if self._reasons(self._device, self._ctypes.byref(reasons)) != 0:
            return None
        return mhz.value, reasons.value


class ClockSampler:
    """Polls a ClockProbe every `period_s` on a thread of its own until stop(), which summarizes the polls."""

    def __init__(self, probe, period_s=0.002):
        self._probe, self._period, self._polls = probe, period_s, []
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self):
        while not self._done.is_set():
            p = self._probe.poll()
            if p is not None:
                self._polls.append(p)
            self._done.wait(self._period)

    def stop(self):
        self._done.set()
        self._thread.join()
        return summarize_polls(self._polls)


class L2Flusher:
    """Evicts the L2 cache by writing a buffer of twice its size (a new value each time) on the current stream."""

    def __init__(self, l2_bytes, device="cuda"):
        import torch
        n = 2 * (l2_bytes if l2_bytes > 0 else DEFAULT_L2_BYTES)
        self.buffer = torch.empty(n // 4, dtype=torch.int32, device=device)
        self.value = 0

    def flush(self):
        self.value = (self.value + 1) % (1 << 30)
        self.buffer.fill_(self.value)


def measure(launch, s, flusher=None, clocks=None):
    """Times `launch()` (it must enqueue exactly the work to time on the current stream) as measure.cpp does:
    s.warmup untimed launches (each after a flush when cold), more for s.warmup_s of kernel time, then samples,
    each between its own pair of CUDA events, a flush before each start event with `flusher` (cold); stops on
    stop_reason(). Returns summarize()'s dict plus "converged" and "cold", and with `clocks` (a ClockProbe) the
    SM clock polled while the samples ran ("sm_clock_mhz", "power_capped": summarize_polls())."""
    import torch
    wall0 = time.perf_counter()
    max_samples = max(1, s.max_samples)

    def untimed():
        if flusher:
            flusher.flush()
        launch()

    for _ in range(s.warmup):
        untimed()
    torch.cuda.synchronize()
    if s.warmup_s > 0:
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        if flusher:
            flusher.flush()
        start.record()
        launch()
        stop.record()
        stop.synchronize()
        ms = max(start.elapsed_time(stop), 1e-3)
        more = int(min(MAX_WARMUP_LAUNCHES, math.ceil(s.warmup_s * 1e3 / ms) - 1))
        for _ in range(more):
            untimed()
        torch.cuda.synchronize()

    # Samples back-to-back (measure.cpp): batch j + 1 is enqueued before the host waits for batch j, so a peer's host
    # time to enqueue its call (FlashAttention-4's backward: 0.64-0.90 ms, docs/NOTES.md session 38) hides behind
    # the sample before it when it is shorter than the call's kernels. The batch in flight at the stop is dropped.
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(2 * MAX_BATCH)]
    stops = [torch.cuda.Event(enable_timing=True) for _ in range(2 * MAX_BATCH)]
    samples = []
    batch = 1  # the first sample alone tells how long the call takes
    sampler = ClockSampler(clocks) if clocks is not None else None

    def enqueue(slot, k):
        for i in range(k):
            if flusher:
                flusher.flush()
            starts[slot * MAX_BATCH + i].record()
            launch()
            stops[slot * MAX_BATCH + i].record()

    slot, k = 0, min(batch, max_samples)
    enqueue(slot, k)
    while True:
        next_k = min(batch, max_samples - len(samples) - k)
        if next_k > 0:
            enqueue(1 - slot, next_k)
        stops[slot * MAX_BATCH + k - 1].synchronize()
        samples.extend(starts[slot * MAX_BATCH + i].elapsed_time(stops[slot * MAX_BATCH + i]) for i in range(k))
        reason = stop_reason(samples, time.perf_counter() - wall0, s)
        if reason:
            if next_k > 0:
                stops[(1 - slot) * MAX_BATCH + next_k - 1].synchronize()
            break
        batch = next_batch(samples)
        slot, k = 1 - slot, next_k
    t = summarize(samples)
    if sampler is not None:
        t.update(sampler.stop())
    t["converged"] = reason == "converged"
    t["cold"] = flusher is not None
    return t
