"""flashtune.ab: an A/B of kernel template folders (or of one tunable's values), measured as interleaved rounds of one
experiment in one call on one GPU (docs/NOTES.md sessions 38-42), and its table.

A kernel variant is a copy of kernel_templates/ (e.g. a branch's: `git archive BRANCH kernel_templates | tar -x -C
DIR`); one flashtune binary runs the experiment over each folder (`--templates`). Round r runs every folder once, in
the given order for odd r and reversed for even r (so no folder always runs first), into its own database
ab_rR.sqlite (a trial is keyed by its kernel source too, so the folders of a round do not collide, and no round
reuses another's trials). Round 1 runs the experiment as it is (validated against the reference, if it validates);
later rounds run a copy with `validate: {enabled: false}`. Then each folder after the first is compared with the
first, round by round: the two runs' trials (`flashtune query trials RUN --format csv`) matched by family, problem
and config, with their SM clocks. The table lists per config the time ratio variant / first of every round and
their geometric mean (< 1: the variant is faster), then the geometric means of the clock ratio and of the cycle
ratio (time x clock): under the 700 W cap a variant can run the same cycles at a higher clock, i.e. save energy, or
save cycles and lose clock (docs/NOTES.md sessions 34 and 43).

    python -m flashtune.ab run [--rounds N] [--flashtune BIN] [--out DIR] EXPERIMENT.yaml DIR_A DIR_B [DIR_C ...]
    python -m flashtune.ab run --vary NAME=V0,V1[,...] [...] EXPERIMENT.yaml DIR
    python -m flashtune.ab table OUT_DIR

With --vary the variants are the values of one tunable over one templates folder: variant k runs a copy of the
experiment with `NAME: Vk` in every study's space (a one-line `space: {...}` mapping; replaced or added), and its
trials are matched to variant 0's by family, problem and config without NAME. Session 42 compared persistent 1 / 2
and dq_zero 1 / 2 so by hand.

On the GPU machine, tools/gpu_ab.sh wraps `run` (the packed binary and its environment). `table` reprints the table
of a finished run's folder (its ab_runs.csv and compare CSVs), e.g. on this machine after the files came back.
"""
from __future__ import annotations

import argparse
import csv
import io
import math
import os
import re
import subprocess
import sys

_VALIDATE = re.compile(r"^validate\s*:.*$", re.M)
_SPACE = re.compile(r"^(\s*space\s*:\s*)\{(.*)\}([ \t]*(?:#.*)?)$", re.M)
_BLOCK_SPACE = re.compile(r"^\s*space\s*:\s*(?:#.*)?$", re.M)


def _split_top(text: str) -> list:
    """text split at the commas outside brackets (a flow mapping's entries; values may be lists)."""
    parts, depth, cur = [], 0, ""
    for ch in text:
        depth += ch in "[{"
        depth -= ch in "]}"
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    parts.append(cur)
    return [p.strip() for p in parts if p.strip()]


def with_tunable(text: str, name: str, value: str) -> str:
    """The experiment YAML with `name: value` in every study's one-line `space: {...}` mapping (replacing the
    space's own `name` entry, or added at its end)."""
    if _BLOCK_SPACE.search(text):
        raise ValueError("the experiment has a block-style 'space:' mapping; --vary edits one-line 'space: {...}' only")

    def one(m):
        keep = [p for p in _split_top(m.group(2)) if p.split(":", 1)[0].strip() != name]
        return f"{m.group(1)}{{{', '.join(keep + [f'{name}: {value}'])}}}{m.group(3)}"

    new, n = _SPACE.subn(one, text)
    if n == 0:
        raise ValueError("the experiment has no 'space: {...}' mapping to set " + name + " in")
    return new


def parse_vary(spec: str) -> tuple:
    """NAME=V0,V1[,...] -> (NAME, [V0, V1, ...]); two values or more, no repeats."""
    name, sep, values = spec.partition("=")
    vals = [v.strip() for v in values.split(",") if v.strip()]
    if not sep or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name.strip()) or len(vals) < 2 or len(set(vals)) < len(vals):
        raise ValueError(f"--vary {spec!r}: expected NAME=V0,V1[,...] (a tunable and two different values or more)")
    return name.strip(), vals


def without_validation(text: str) -> str:
    """The experiment YAML with validation off: its `validate:` line replaced, or one added after `name:`."""
    if _VALIDATE.search(text):
        return _VALIDATE.sub("validate: {enabled: false}", text, count=1)
    out, done = [], False
    for line in text.splitlines(keepends=True):
        out.append(line)
        if not done and line.startswith("name:"):
            out.append("validate: {enabled: false}\n")
            done = True
    if not done:
        raise ValueError("the experiment has no top-level 'name:' line")
    return "".join(out)


def round_order(items: list, r: int) -> list:
    """The order of the folders (or their indices) in round r (1-based): as given for odd r, reversed for even r."""
    return list(items) if r % 2 else list(reversed(items))


def _flashtune(binary: str, args: list) -> str:
    res = subprocess.run([binary] + args, capture_output=True, text=True)
    if res.returncode != 0:
        tail = (res.stderr or res.stdout).strip().splitlines()[-1:] or [""]
        raise RuntimeError(f"flashtune {' '.join(args[:2])} failed: {tail[0]}")
    return res.stdout


def last_run_id(binary: str, db: str) -> int:
    rows = list(csv.DictReader(io.StringIO(_flashtune(binary, ["query", "runs", "--db", db, "--format", "csv"]))))
    if not rows:
        raise RuntimeError(f"{db}: no run recorded")
    return max(int(r["id"]) for r in rows)


def _trial_rows(binary: str, db: str, run_id: int, name) -> dict:
    """A run's trials by (family, stage, problem, config without tunable `name`; whole with None): (median ms or "",
    SM clock or "")."""
    rows = csv.DictReader(io.StringIO(_flashtune(binary, ["query", "trials", str(run_id), "--db", db, "--format", "csv"])))
    got = {}
    for row in rows:
        config = ",".join(kv for kv in row["config"].split(",") if kv.split("=", 1)[0] != name)
        ok = row.get("status") == "ok"
        got[(row["family"], row.get("stage", ""), row["problem"], config)] = (
            row["median_ms"] if ok else "", row.get("sm_mhz", "") if ok else "")
    return got


def compare_runs(binary: str, db: str, run_a: int, run_b: int, name=None) -> str:
    """Two runs' trials side by side as CSV (family, stage, problem, config, a_median_ms, a_sm_mhz, b_median_ms,
    b_sm_mhz), matched by config, or by config without tunable `name` (--vary: the runs differ in it only)."""
    a, b = _trial_rows(binary, db, run_a, name), _trial_rows(binary, db, run_b, name)
    if not b:  # every trial of run b was already in the round's database (a kernel source runs once per database)
        raise RuntimeError(f"{db}: run {run_b} has no trials (it compiled the same kernels as run {run_a}? compare "
                           "folders that differ)")
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["family", "stage", "problem", "config", "a_median_ms", "a_sm_mhz", "b_median_ms", "b_sm_mhz"])
    for key in list(a) + [k for k in b if k not in a]:
        (am, ac), (bm, bc) = a.get(key, ("", "")), b.get(key, ("", ""))
        w.writerow(list(key) + [am, ac, bm, bc])
    return buf.getvalue()


def run(experiment: str, folders: list, rounds: int, binary: str, out: str, log=sys.stderr, vary=None) -> None:
    """Runs the rounds into out/ (ab_rR.sqlite, logs, ab_runs.csv: round, variant, run id) and the comparisons
    (cmp_rR_K.csv: variant K against variant 0 in round R). The variants are the folders, or with vary = (NAME,
    [V0, V1, ...]) the values of tunable NAME over the one folder (their experiment copies in out/, their labels in
    variants.txt)."""
    for d in folders:
        if not os.path.isdir(d):
            raise FileNotFoundError(f"no such templates folder: {d}")
    with open(experiment) as f:
        text = f.read()
    os.makedirs(out, exist_ok=True)

    def write(path: str, t: str) -> str:
        with open(path, "w") as f:
            f.write(t)
        return path

    # Per variant: its templates folder, its label, the experiment of round 1 and the validation-off copy of later ones.
    if vary:
        name, values = vary
        variants = []
        for k, v in enumerate(values):
            t = with_tunable(text, name, v)
            variants.append((folders[0], f"{name}={v}", write(os.path.join(out, f"variant{k}.yaml"), t),
                             write(os.path.join(out, f"no_validation{k}.yaml"), without_validation(t))))
        write(os.path.join(out, "variants.txt"), "".join(label + "\n" for _, label, _, _ in variants))
    else:
        quiet = write(os.path.join(out, "no_validation.yaml"), without_validation(text))
        variants = [(d, f"folder {k}", experiment, quiet) for k, d in enumerate(folders)]
    ids = []
    for r in range(1, rounds + 1):
        db = os.path.join(out, f"ab_r{r}.sqlite")
        for k in round_order(list(range(len(variants))), r):
            d, label, loud, quiet = variants[k]
            with open(os.path.join(out, f"r{r}_f{k}.log"), "w") as logf:
                res = subprocess.run([binary, "run", loud if r == 1 else quiet, "--templates", d, "--db", db],
                                     stdout=logf, stderr=subprocess.STDOUT)
            if res.returncode != 0:
                raise RuntimeError(f"round {r}, {label if vary else 'folder ' + d}: flashtune run failed "
                                   f"(rc {res.returncode}, log {logf.name})")
            ids.append((r, k, last_run_id(binary, db)))
            print(f"round {r}: {label} ({d}) run {ids[-1][2]}", file=log)
    with open(os.path.join(out, "ab_runs.csv"), "w") as f:
        f.write("round,folder,run\n" + "".join(f"{r},{k},{i}\n" for r, k, i in ids))
    runs = {(r, k): i for r, k, i in ids}
    for r in range(1, rounds + 1):
        db = os.path.join(out, f"ab_r{r}.sqlite")
        for k in range(1, len(variants)):
            cmp = compare_runs(binary, db, runs[(r, 0)], runs[(r, k)], vary[0] if vary else None)
            write(os.path.join(out, f"cmp_r{r}_{k}.csv"), cmp)


def _geomean(xs: list) -> float:
    got = [x for x in xs if x is not None]
    return math.exp(sum(math.log(x) for x in got) / len(got)) if got else float("nan")


def _ratio(a: str, b: str):
    try:
        a, b = float(a), float(b)
    except (TypeError, ValueError):  # no time (a failed trial, or only in one run), or an older CSV without clocks
        return None
    return b / a if a > 0 and b > 0 else None


def table(out: str) -> list:
    """The lines of the table for a run's folder: per variant folder and config, the time ratio of every round and
    the geometric mean, the first folder's median time of round 1, and the geometric means of the clock and cycle
    ratios (where the comparisons carry clocks: runs before session 43 compared by `query compare` do not)."""
    with open(os.path.join(out, "ab_runs.csv")) as f:
        ids = [(int(r["round"]), int(r["folder"])) for r in csv.DictReader(f)]
    if not ids:
        raise RuntimeError(f"{out}/ab_runs.csv: no runs")
    rounds = max(r for r, _ in ids)
    variants = sorted({k for _, k in ids if k > 0})
    labels = {k: f"folder {k}" for k in [0] + variants}
    if os.path.exists(os.path.join(out, "variants.txt")):  # --vary: NAME=value per variant
        with open(os.path.join(out, "variants.txt")) as f:
            labels.update(enumerate(line.strip() for line in f))
    lines = []
    for k in variants:
        # (family, problem, config) -> [time ratio per round], [clock ratio per round], first folder's ms of round 1
        rows = {}
        for r in range(1, rounds + 1):
            path = os.path.join(out, f"cmp_r{r}_{k}.csv")
            with open(path) as f:
                for row in csv.DictReader(f):
                    key = (row["family"], row["problem"], row["config"])
                    try:
                        a = float(row["a_median_ms"])
                    except ValueError:
                        a = float("nan")
                    entry = rows.setdefault(key, [[None] * rounds, [None] * rounds, a])
                    # a config without a time on one side (failed, or only in one run) is "-" that round
                    entry[0][r - 1] = _ratio(row["a_median_ms"], row["b_median_ms"])
                    entry[1][r - 1] = _ratio(row.get("a_sm_mhz"), row.get("b_sm_mhz")) if entry[0][r - 1] else None
        lines.append(f"== {labels[k]} / {labels[0]}, {rounds} rounds (< 1: {labels[k]} faster)")
        for (family, problem, config), (ratios, clocks, ms) in rows.items():
            cells = " / ".join("-" if x is None else f"{x:.3f}" for x in ratios)
            cycles = [t * c if t and c else None for t, c in zip(ratios, clocks)]
            clock = (f"  clock {_geomean(clocks):.3f}  cycles {_geomean(cycles):.3f}"
                     if any(c is not None for c in clocks) else "")
            lines.append(f"{_geomean(ratios):.4f}  {cells}  {ms:9.4f} ms{clock}  {family}  {problem}  {config}")
    return lines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m flashtune.ab", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    rp = sub.add_parser("run", help="the rounds, the comparisons and the table")
    rp.add_argument("--rounds", type=int, default=3)
    rp.add_argument("--flashtune", default="build/harness/cli/flashtune", help="the flashtune binary")
    rp.add_argument("--out", default="ab-out", help="folder for the databases, logs and comparisons")
    rp.add_argument("--vary", metavar="NAME=V0,V1", help="variants = these values of tunable NAME over one folder")
    rp.add_argument("experiment")
    rp.add_argument("folders", nargs="+", metavar="DIR")
    tp = sub.add_parser("table", help="the table of a finished run's folder")
    tp.add_argument("out")
    args = ap.parse_args(argv)
    try:
        if args.cmd == "run":
            vary = parse_vary(args.vary) if args.vary else None
            if vary and len(args.folders) != 1:
                raise ValueError("--vary takes one template folder (its variants are the tunable's values)")
            if not vary and len(args.folders) < 2:
                raise ValueError("an A/B needs two template folders or more (or --vary NAME=V0,V1 and one)")
            if args.rounds < 1:
                raise ValueError("--rounds must be 1 or more")
            run(args.experiment, args.folders, args.rounds, args.flashtune, args.out, vary=vary)
        out = args.out
        lines = table(out)
        if args.cmd == "run":
            with open(os.path.join(out, "ab.txt"), "w") as f:
                f.write("\n".join(lines) + "\n")
        print("\n".join(lines))
        return 0
    except (OSError, RuntimeError, ValueError, KeyError) as e:
        print(f"flashtune.ab: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
