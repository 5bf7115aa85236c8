"""flashtune.ab: an A/B of kernel template folders, measured as interleaved rounds of one experiment in one call on
one GPU (docs/NOTES.md sessions 38-41), and its table.

A kernel variant is a copy of kernel_templates/ (e.g. a branch's: `git archive BRANCH kernel_templates | tar -x -C
DIR`); one flashtune binary runs the experiment over each folder (`--templates`). Round r runs every folder once, in
the given order for odd r and reversed for even r (so no folder always runs first), into its own database
ab_rR.sqlite (a trial is keyed by its kernel source too, so the folders of a round do not collide, and no round
reuses another's trials). Round 1 runs the experiment as it is (validated against the reference, if it validates);
later rounds run a copy with `validate: {enabled: false}`. Then each folder after the first is compared with the
first, round by round (`flashtune query compare A B --format csv`), and the table lists per config the ratio
variant / first of every round and their geometric mean (< 1: the variant is faster).

    python -m flashtune.ab run [--rounds N] [--flashtune BIN] [--out DIR] EXPERIMENT.yaml DIR_A DIR_B [DIR_C ...]
    python -m flashtune.ab table OUT_DIR

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


def run(experiment: str, folders: list, rounds: int, binary: str, out: str, log=sys.stderr) -> None:
    """Runs the rounds into out/ (ab_rR.sqlite, logs, ab_runs.csv: round, folder, run id) and the comparisons
    (cmp_rR_K.csv: folder K against folder 0 in round R)."""
    for d in folders:
        if not os.path.isdir(d):
            raise FileNotFoundError(f"no such templates folder: {d}")
    with open(experiment) as f:
        text = f.read()
    os.makedirs(out, exist_ok=True)
    quiet = os.path.join(out, "no_validation.yaml")
    with open(quiet, "w") as f:
        f.write(without_validation(text))
    ids = []
    for r in range(1, rounds + 1):
        db = os.path.join(out, f"ab_r{r}.sqlite")
        for k in round_order(list(range(len(folders))), r):
            d = folders[k]
            with open(os.path.join(out, f"r{r}_f{k}.log"), "w") as logf:
                res = subprocess.run([binary, "run", experiment if r == 1 else quiet, "--templates", d, "--db", db],
                                     stdout=logf, stderr=subprocess.STDOUT)
            if res.returncode != 0:
                raise RuntimeError(f"round {r}, folder {d}: flashtune run failed (rc {res.returncode}, "
                                   f"log {logf.name})")
            ids.append((r, k, last_run_id(binary, db)))
            print(f"round {r}: folder {k} ({d}) run {ids[-1][2]}", file=log)
    with open(os.path.join(out, "ab_runs.csv"), "w") as f:
        f.write("round,folder,run\n" + "".join(f"{r},{k},{i}\n" for r, k, i in ids))
    runs = {(r, k): i for r, k, i in ids}
    for r in range(1, rounds + 1):
        for k in range(1, len(folders)):
            try:
                cmp = _flashtune(binary, ["query", "compare", str(runs[(r, 0)]), str(runs[(r, k)]), "--db",
                                          os.path.join(out, f"ab_r{r}.sqlite"), "--format", "csv"])
            except RuntimeError as e:
                if "has no trials" in str(e):  # a run whose every trial was already in the round's database
                    raise RuntimeError(f"{e} (folders 0 and {k} compile the same kernels? a round's database runs "
                                       "a kernel source once: compare folders that differ)") from None
                raise
            with open(os.path.join(out, f"cmp_r{r}_{k}.csv"), "w") as f:
                f.write(cmp)


def table(out: str) -> list:
    """The lines of the table for a run's folder: per variant folder and config, the ratio of every round and the
    geometric mean, with the first folder's median time of round 1."""
    with open(os.path.join(out, "ab_runs.csv")) as f:
        ids = [(int(r["round"]), int(r["folder"])) for r in csv.DictReader(f)]
    if not ids:
        raise RuntimeError(f"{out}/ab_runs.csv: no runs")
    rounds = max(r for r, _ in ids)
    variants = sorted({k for _, k in ids if k > 0})
    lines = []
    for k in variants:
        rows = {}  # (family, problem, config) -> [ratio per round], first folder's ms of round 1
        for r in range(1, rounds + 1):
            path = os.path.join(out, f"cmp_r{r}_{k}.csv")
            with open(path) as f:
                for row in csv.DictReader(f):
                    key = (row["family"], row["problem"], row["config"])
                    try:  # a config without a time on one side (failed, or only in one run) is "-" that round
                        a, b = float(row["a_median_ms"]), float(row["b_median_ms"])
                    except ValueError:
                        a = b = float("nan")
                    entry = rows.setdefault(key, [[None] * rounds, a])
                    entry[0][r - 1] = b / a if a > 0 and b > 0 else None
        lines.append(f"== folder {k} / folder 0, {rounds} rounds (< 1: folder {k} faster)")
        for (family, problem, config), (ratios, ms) in rows.items():
            got = [x for x in ratios if x is not None]
            mean = math.exp(sum(math.log(x) for x in got) / len(got)) if got else float("nan")
            cells = " / ".join("-" if x is None else f"{x:.3f}" for x in ratios)
            lines.append(f"{mean:.4f}  {cells}  {ms:9.4f} ms  {family}  {problem}  {config}")
    return lines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m flashtune.ab", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    rp = sub.add_parser("run", help="the rounds, the comparisons and the table")
    rp.add_argument("--rounds", type=int, default=3)
    rp.add_argument("--flashtune", default="build/harness/cli/flashtune", help="the flashtune binary")
    rp.add_argument("--out", default="ab-out", help="folder for the databases, logs and comparisons")
    rp.add_argument("experiment")
    rp.add_argument("folders", nargs="+", metavar="DIR")
    tp = sub.add_parser("table", help="the table of a finished run's folder")
    tp.add_argument("out")
    args = ap.parse_args(argv)
    try:
        if args.cmd == "run":
            if len(args.folders) < 2:
                raise ValueError("an A/B needs two template folders or more")
            if args.rounds < 1:
                raise ValueError("--rounds must be 1 or more")
            run(args.experiment, args.folders, args.rounds, args.flashtune, args.out)
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
