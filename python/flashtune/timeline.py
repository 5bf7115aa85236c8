"""flashtune.timeline: where the blocks of the backward pass spend their time, from attn_bwd_fused mma 91's `timeline: 2`
records (attn_bwd_gpu_test's TimelineRecordsEveryBlocksPhasesInOrder writes them as CSV under FT_TIMELINE_OUT; the
slots are FtBwdTimeline's, kernel_templates/attn_params.cuh).

    python -m flashtune.timeline summary timeline_0.csv [timeline_1.csv ...]

A record's stamps are SM cycles (clock64, one counter per SM) but for gt_entry / gt_stored (globaltimer, ns). Per
block with at least two items, in cycles:
  kv       entry -> kv: the consumers wait for K and V (and the block's start before it)
  first    kv -> first: the first item, the pipeline's ramp included
  steady   (first -> last) / (items - 1): an item once the pipeline runs
  epilogue last -> stored: dK, dV scaled and stored
  writer   stored -> writer where later: the dQ writer's last adds completing
  lead     last1 -> last (warpgroup 0 behind warpgroup 1)
  gap      per SM, one block's end (the later of stored and writer) to the next block's entry on that SM
  fixed    (end - entry) - items x steady + gap: what a block costs beyond its items (F of docs/NOTES.md session 42)
Cycles become microseconds at the SM clock the records give (cycles over globaltimer nanoseconds, entry -> stored,
median over the blocks). The last line: the fixed costs' share of the SMs' busy time and gaps.
"""
from __future__ import annotations

import argparse
import csv
import statistics
import sys

FIELDS = ["block", "sm", "items", "gt_entry", "entry", "kv", "first", "last", "stored", "writer", "last1", "gt_stored"]


class TimelineError(Exception):
    """A records file this tool cannot read (its message names the file and the problem)."""


def read(path: str) -> tuple[str, list[dict[str, int]]]:
    """The file's first comment line (the config and problem) and its records as ints, in file order."""
    title, rows = "", []
    try:
        with open(path, newline="") as f:
            lines = f.read().splitlines()
    except OSError as e:
        raise TimelineError(f"{path}: {e.strerror}") from None
    body = []
    for line in lines:
        if line.startswith("#"):
            title = title or line[1:].strip()
        elif line.strip():
            body.append(line)
    reader = csv.DictReader(body)
    if reader.fieldnames != FIELDS:
        raise TimelineError(f"{path}: the header is not {','.join(FIELDS)}")
    for n, rec in enumerate(reader, start=2):
        try:
            rows.append({k: int(v) for k, v in rec.items()})
        except (TypeError, ValueError):
            raise TimelineError(f"{path}: record line {n} is not {len(FIELDS)} integers") from None
    if not rows:
        raise TimelineError(f"{path}: no records")
    return title, rows


def phases(rows: list[dict[str, int]]) -> dict[str, list[float]]:
    """Each phase's per-block values in cycles (blocks with at least two items; gap and fixed where a block follows)."""
    out: dict[str, list[float]] = {k: [] for k in ("kv", "first", "steady", "epilogue", "writer", "lead", "gap", "fixed", "span")}
    by_sm: dict[int, list[dict[str, int]]] = {}
    for r in rows:
        by_sm.setdefault(r["sm"], []).append(r)
    for blocks in by_sm.values():
        blocks.sort(key=lambda r: r["entry"])
        for i, r in enumerate(blocks):
            end = max(r["stored"], r["writer"])
            gap = blocks[i + 1]["entry"] - end if i + 1 < len(blocks) else None
            if gap is not None:
                out["gap"].append(gap)
            if r["items"] < 2:
                continue
            steady = (r["last"] - r["first"]) / (r["items"] - 1)
            out["kv"].append(r["kv"] - r["entry"])
            out["first"].append(r["first"] - r["kv"])
            out["steady"].append(steady)
            out["epilogue"].append(r["stored"] - r["last"])
            out["writer"].append(max(0, r["writer"] - r["stored"]))
            if r["last1"]:
                out["lead"].append(r["last"] - r["last1"])
            out["span"].append(end - r["entry"] + (gap or 0))
            out["fixed"].append(end - r["entry"] - r["items"] * steady + (gap or 0))
    return out


def mhz(rows: list[dict[str, int]]) -> float | None:
    """The SM clock [MHz]: cycles over globaltimer nanoseconds from entry to stored, median over the blocks."""
    rates = [(r["stored"] - r["entry"]) / (r["gt_stored"] - r["gt_entry"]) * 1e3
             for r in rows if r["items"] > 0 and r["gt_stored"] > r["gt_entry"] and r["stored"] > r["entry"]]
    return statistics.median(rates) if rates else None


def summary(path: str) -> str:
    title, rows = read(path)
    p = phases(rows)
    clock = mhz(rows)
    sms = len({r["sm"] for r in rows})
    lines = [f"{path}: {title}" if title else path,
             f"{len(rows)} blocks on {sms} SMs ({len(rows) / sms:.1f} a SM), SM clock "
             + (f"{clock:.0f} MHz" if clock else "unknown (no globaltimer span)")]
    names = {"kv": "K / V wait (entry -> kv)", "first": "first item (kv -> first)", "steady": "steady item",
             "epilogue": "epilogue (last -> stored)", "writer": "dQ writer after stored", "lead": "warpgroup 0 behind 1",
             "gap": "gap to the SM's next block", "fixed": "fixed cost F a block"}
    lines.append(f"{'phase':30} {'median [cyc]':>12} {'mean [cyc]':>11} {'median [us]':>11} {'blocks':>7}")
    for key, label in names.items():
        v = p[key]
        if not v:
            lines.append(f"{label:30} {'-':>12} {'-':>11} {'-':>11} {0:7d}")
            continue
        med = statistics.median(v)
        us = f"{med / clock:.3f}" if clock else "-"
        lines.append(f"{label:30} {med:12.0f} {statistics.fmean(v):11.0f} {us:>11} {len(v):7d}")
    if p["span"]:
        lines.append(f"fixed costs: {100 * sum(p['fixed']) / sum(p['span']):.1f} % of the blocks' time and gaps")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m flashtune.timeline", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("summary", help="each file's phases per block (medians, means) and the fixed costs' share")
    s.add_argument("files", nargs="+")
    args = ap.parse_args(argv)
    try:
        print("\n\n".join(summary(f) for f in args.files))
    except TimelineError as e:
        print(f"flashtune.timeline: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
