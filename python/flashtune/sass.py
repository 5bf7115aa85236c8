"""flashtune.sass: what ptxas made of flashtune's kernels, from the cubin cache, and two builds side by side.

A kernel variant is costed before it is timed (docs/NOTES.md sessions 33-35): registers, spilled bytes, ptxas's
wgmma serialization warnings (C7510-C7520), and in the SASS (nvdisasm of the cached CUBIN) the instruction count of
the whole kernel and of its hot loop -- the innermost loop (a backward branch) with the most tensor-core instructions --
with the local-memory (spill) instructions inside it. `compare` compiles experiment YAMLs with two flashtune
binaries (`flashtune run Y --compile-only`) into caches of their own and lists, per kernel, what changed.

    python -m flashtune.sass stats CACHE_DIR
    python -m flashtune.sass compare --base OLD_FLASHTUNE --new NEW_FLASHTUNE [--arch sm_90a] YAML...
    python -m flashtune.sass compare --base FT --new FT --base-templates DIR_A --new-templates DIR_B YAML...
    python -m flashtune.sass profile NAME.sass.csv [OTHER.sass.csv ...] [--top N]

`profile` reads what tools/gpu_profile.sh brought back from Nsight Compute (`ncu --page source --print-source sass
--csv`: per SASS instruction, executed count and warp-stall samples by reason) and prints, per kernel, where its
warps waited: the stall reasons' shares of all samples, the opcodes by executed count and by samples, and the N
instructions with the most samples (offset as nvdisasm prints it, count, top reasons); with several files, the opcode
counts side by side (a kernel beside a variant or a peer's, e.g. FlashAttention-4's backward; docs/NOTES.md session 40).

nvdisasm: --nvdisasm, $FLASHTUNE_NVDISASM, PATH, $CUDA_HOME/bin, /usr/local/cuda/bin, or NVIDIA's PyPI wheel
(`pip install nvidia-cuda-nvdisasm`: site-packages/nvidia/cu*/bin/nvdisasm). The stats need no GPU.
"""
from __future__ import annotations

import argparse
import collections
import csv
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from typing import NamedTuple

_INSTR = re.compile(r"\s*/\*([0-9a-f]+)\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)")
_LABEL = re.compile(r"\s*(\.L_x_\d+):")
_BRANCH = re.compile(r"\bBRA\s+(?:!?U?P\w+\s*,\s*)?`\((\.L_x_\d+)\)")
_MMA = ("HGMMA", "HMMA", "IMMA", "QGMMA")


@dataclass
class Loop:
    """The hot loop: instructions from its head label to its backward branch, of which tensor-core ones and LDL/STL."""
    instructions: int = 0
    mma: int = 0
    spill_instructions: int = 0


@dataclass
class KernelStats:
    name: str  # the template instance (name_expression)
    registers: int
    spill_load_bytes: int
    warnings: str  # ptxas's C75xx codes, space-separated
    sass: int  # instructions in the kernel
    loop: Loop


def opcodes(sass_text: str) -> list:
    """The listing as (label or None, opcode or None, line) per line that is an instruction or a label."""
    out = []
    for line in sass_text.splitlines():
        m = _LABEL.match(line)
        if m:
            out.append((m.group(1), None, line))
            continue
        m = _INSTR.match(line)
        if m:
            out.append((None, m.group(2).split(".")[0], line))
    return out


def hot_loop(sass_text: str) -> Loop:
    """The loop with the most tensor-core instructions (ties: the shorter, i.e. the innermost; a longer span with the
    same count is an out-of-line retry block branching back into it); Loop() when no loop holds one."""
    rows = opcodes(sass_text)
    labels = {lab: i for i, (lab, _, _) in enumerate(rows) if lab}
    best = None
    for i, (_, op, line) in enumerate(rows):
        m = _BRANCH.search(line) if op == "BRA" else None
        if not m or m.group(1) not in labels or labels[m.group(1)] > i:
            continue
        body = [o for _, o, _ in rows[labels[m.group(1)]:i + 1] if o]
        loop = Loop(len(body), sum(o in _MMA for o in body), sum(o in ("LDL", "STL") for o in body))
        if loop.mma and (best is None or (loop.mma, -loop.instructions) > (best.mma, -best.instructions)):
            best = loop
    return best or Loop()


def find_nvdisasm(explicit: str | None = None) -> str:
    """The nvdisasm to use; raises FileNotFoundError naming where it looked."""
    candidates = [explicit, os.environ.get("FLASHTUNE_NVDISASM"), shutil.which("nvdisasm")]
    for home in (os.environ.get("CUDA_HOME"), "/usr/local/cuda"):
        if home:
            candidates.append(os.path.join(home, "bin", "nvdisasm"))
    for site in sys.path:
        candidates += sorted(glob.glob(os.path.join(site, "nvidia", "cu*", "bin", "nvdisasm")), reverse=True)
    for c in candidates:
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    raise FileNotFoundError("nvdisasm not found (--nvdisasm, FLASHTUNE_NVDISASM, PATH, CUDA_HOME/bin, "
                            "/usr/local/cuda/bin, or `pip install nvidia-cuda-nvdisasm`)")


def entry_stats(meta_path: str, nvdisasm: str) -> KernelStats | None:
    """One cache entry (<key>.json beside <key>.cubin); None for a failed compile (no CUBIN)."""
    with open(meta_path) as f:
        meta = json.load(f)
    cubin = meta_path[:-len(".json")] + ".cubin"
    if not meta.get("ok") or not os.path.isfile(cubin):
        return None
    res = meta.get("resources", {})
    log = meta.get("log", "")
    sass = subprocess.run([nvdisasm, "-c", cubin], capture_output=True, text=True, check=True).stdout
    return KernelStats(name=meta.get("name_expression") or meta.get("lowered_name", "?"),
                       registers=int(res.get("registers", -1)), spill_load_bytes=int(res.get("spill_load_bytes", -1)),
                       warnings=" ".join(sorted(set(re.findall(r"C75\d\d", log)))),
                       sass=sum(1 for _, o, _ in opcodes(sass) if o), loop=hot_loop(sass))


def cache_stats(cache_dir: str, nvdisasm: str, jobs: int = 4) -> dict:
    """KernelStats of every successful entry of a cubin cache folder, by template instance."""
    metas = sorted(glob.glob(os.path.join(cache_dir, "*.json")))
    with ThreadPoolExecutor(max(1, jobs)) as ex:
        return {s.name: s for s in ex.map(lambda m: entry_stats(m, nvdisasm), metas) if s}


def compile_into(flashtune: str, yamls: list, cache_dir: str, arch: str, templates: str = None) -> None:
    """`flashtune run Y --compile-only` for each YAML into cache_dir (its database thrown away); templates: a
    kernel_templates folder to compile instead of the binary's embedded one (`--templates`)."""
    if templates is not None and not os.path.isdir(templates):
        raise FileNotFoundError(f"no such templates folder: {templates}")
    with tempfile.TemporaryDirectory() as tmp:
        for y in yamls:
            r = subprocess.run([flashtune, "run", y, "--compile-only", "--arch", arch, "--db", os.path.join(tmp, "c.sqlite"),
                                "--cache", cache_dir] + (["--templates", templates] if templates else []),
                               capture_output=True, text=True)
            if r.returncode != 0:
                tail = (r.stderr or r.stdout).strip().splitlines()[-1:] or [""]
                raise RuntimeError(f"{flashtune} run {y} --compile-only failed: {tail[0]}")


def worse(a: KernelStats, b: KernelStats) -> list:
    """What got worse from a to b: spill instructions in the hot loop, spilled bytes, new C75xx codes."""
    out = []
    if b.loop.spill_instructions > a.loop.spill_instructions:
        out.append(f"loop spill instructions {a.loop.spill_instructions} -> {b.loop.spill_instructions}")
    if b.spill_load_bytes > a.spill_load_bytes:
        out.append(f"spill loads {a.spill_load_bytes} -> {b.spill_load_bytes} B")
    new_codes = set(b.warnings.split()) - set(a.warnings.split())
    if new_codes:
        out.append("new " + " ".join(sorted(new_codes)))
    return out


def compare_report(base: dict, new: dict) -> tuple:
    """(lines of text, number of kernels that got worse): per kernel family the summed SASS, hot-loop instructions,
    loop spill instructions and spilled bytes of both builds, then each kernel that got worse."""
    fams, regressions, lines = {}, [], []
    only = sorted(set(base) ^ set(new))
    for name in sorted(set(base) & set(new)):
        a, b = base[name], new[name]
        f = fams.setdefault(name.split("<")[0], [0] * 9)
        for i, v in enumerate((1, a.sass, b.sass, a.loop.instructions, b.loop.instructions, a.loop.spill_instructions,
                               b.loop.spill_instructions, a.spill_load_bytes, b.spill_load_bytes)):
            f[i] += v
        w = worse(a, b)
        if w:
            regressions.append(f"  {name}: " + "; ".join(w))
    lines.append(f"{'kernel family':34s} {'n':>4s} {'SASS base -> new':>22s} {'loop base -> new':>22s} "
                 f"{'loop LDL/STL':>14s} {'spill B':>14s}")
    for fam, f in sorted(fams.items()):
        lines.append(f"{fam:34s} {f[0]:4d} {f[1]:10d} -> {f[2]:8d} {f[3]:10d} -> {f[4]:8d} {f[5]:6d} -> {f[6]:5d} "
                     f"{f[7]:6d} -> {f[8]:5d}")
    lines.append(f"{len(regressions)} kernels worse" + (":" if regressions else ""))
    lines += regressions
    if only:
        lines.append(f"{len(only)} kernels in one build only (different template instances)")
    return lines, len(regressions)


class ProfileRow(NamedTuple):
    """One SASS instruction of an ncu source page."""
    offset: int  # bytes from the kernel's first instruction, as nvdisasm prints it
    text: str
    executed: float  # warp-level executions
    samples: float  # warp-stall samples, all reasons
    stalls: dict  # reason (ncu's stall_* column without the prefix) -> samples, the non-zero ones


@dataclass
class Profile:
    """One kernel's ncu source page (SASS)."""
    kernel: str
    rows: list  # ProfileRow

    @property
    def executed(self) -> float:
        return sum(r.executed for r in self.rows)

    @property
    def samples(self) -> float:
        return sum(r.samples for r in self.rows)

    def reasons(self) -> collections.Counter:
        c = collections.Counter()
        for r in self.rows:
            c.update(r.stalls)
        return c

    def by_opcode(self, field: str) -> collections.Counter:
        """A row field ("executed" or "samples") summed by opcode (the mnemonic before its first dot)."""
        c = collections.Counter()
        for r in self.rows:
            c[opcode_of(r.text)] += getattr(r, field)
        return c


def opcode_of(text: str) -> str:
    words = text.split()
    if words and words[0].startswith("@"):
        words = words[1:]
    return words[0].split(".")[0] if words else ""


def _number(x: str) -> float:
    x = (x or "").replace(",", "").strip()
    try:
        return float(x)
    except ValueError:
        return 0.0


def read_profile(path: str) -> Profile:
    """Parses NAME.sass.csv: a "Kernel Name" line, then the header and one line per instruction."""
    with open(path, newline="") as f:
        lines = list(csv.reader(f))
    if len(lines) < 2 or not lines[0] or lines[0][0] != "Kernel Name":
        raise RuntimeError(f"{path}: not an ncu SASS source page (expected a 'Kernel Name' line first)")
    head = lines[1]
    need = ("Address", "Source", "Instructions Executed", "Warp Stall Sampling (All Samples)")
    missing = [c for c in need if c not in head]
    if missing:
        raise RuntimeError(f"{path}: the ncu CSV lacks the column(s) {', '.join(missing)}")
    at = {c: head.index(c) for c in need}
    reasons = [(i, c[len("stall_"):]) for i, c in enumerate(head) if c.startswith("stall_") and "Not Issued" not in c]
    rows = []
    for line in lines[2:]:
        if len(line) != len(head):
            continue
        try:
            address = int(line[at["Address"]], 16)
        except ValueError:
            continue
        stalls = {name: _number(line[i]) for i, name in reasons}
        rows.append(ProfileRow(address, line[at["Source"]].strip(), _number(line[at["Instructions Executed"]]),
                               _number(line[at["Warp Stall Sampling (All Samples)"]]),
                               {name: v for name, v in stalls.items() if v}))
    if not rows:
        raise RuntimeError(f"{path}: no instruction lines")
    first = min(r.offset for r in rows)
    kernel = lines[0][1] if len(lines[0]) > 1 else "?"
    return Profile(kernel, [r._replace(offset=r.offset - first) for r in rows])


def profile_report(profiles: list, names: list, top: int) -> list:
    """The lines `profile` prints (see the module's help)."""
    out = []
    pct = lambda part, whole: 100.0 * part / whole if whole else 0.0
    for name, p in zip(names, profiles):
        total = p.samples
        out.append(f"== {name}: {p.kernel[:150]}")
        out.append(f"   {p.executed / 1e6:.1f} M instructions executed (warp level), {total:.0f} stall samples")
        reasons = p.reasons()
        attributed = sum(reasons.values())  # the shares are of the samples attributed to a reason
        out.append("   stall reasons: " + ", ".join(f"{k} {pct(v, attributed):.1f} %" for k, v in reasons.most_common(10)))
        out.append("   executed [M]: " + ", ".join(f"{k} {v / 1e6:.1f}" for k, v in p.by_opcode("executed").most_common(16)))
        out.append("   samples by opcode: " + ", ".join(f"{k} {pct(v, total):.1f} %"
                                                       for k, v in p.by_opcode("samples").most_common(12)))
        out.append(f"   top {top} instructions by samples (offset, % of samples, executed, instruction, reasons %):")
        for r in sorted(p.rows, key=lambda r: -r.samples)[:top]:
            why = " ".join(f"{k} {pct(v, r.samples):.0f}" for k, v in collections.Counter(r.stalls).most_common(3))
            out.append(f"   {r.offset:6x} {pct(r.samples, total):5.2f} {r.executed / 1e3:8.0f}k  {r.text[:64]:64s} {why}")
    if len(profiles) > 1:
        counts = [p.by_opcode("executed") for p in profiles]
        ops = sorted(set().union(*counts), key=lambda k: -max(c[k] for c in counts))[:20]
        out.append("== executed by opcode [M]: " + " | ".join(names))
        for k in ops:
            out.append(f"   {k:12s} " + " ".join(f"{c[k] / 1e6:8.1f}" for c in counts))
        out.append(f"   {'all':12s} " + " ".join(f"{p.executed / 1e6:8.1f}" for p in profiles))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m flashtune.sass", description=__doc__.split("\n\n")[0])
    ap.add_argument("--nvdisasm", help="the nvdisasm binary (default: searched, see the module's help)")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    sub = ap.add_subparsers(dest="cmd", required=True)
    st = sub.add_parser("stats", help="one line per kernel of a cubin cache folder")
    st.add_argument("cache_dir")
    st.add_argument("--json", action="store_true", help="JSON instead of the table")
    cp = sub.add_parser("compare", help="compile YAMLs with two flashtune binaries and compare their kernels")
    cp.add_argument("--base", required=True, help="the reference flashtune binary")
    cp.add_argument("--new", required=True, help="the changed flashtune binary (may be --base's, with template folders)")
    cp.add_argument("--base-templates", help="kernel_templates folder the base build compiles (its --templates)")
    cp.add_argument("--new-templates", help="kernel_templates folder the new build compiles (e.g. a branch's, "
                                            "`git archive BRANCH kernel_templates | tar -x -C DIR`)")
    cp.add_argument("--arch", default="sm_90a")
    cp.add_argument("--keep", help="folder for the two caches, its base/ and new/ emptied first (default: a temporary one)")
    cp.add_argument("yamls", nargs="+")
    pp = sub.add_parser("profile", help="where a kernel's warps waited, from tools/gpu_profile.sh's NAME.sass.csv")
    pp.add_argument("csvs", nargs="+", metavar="NAME.sass.csv")
    pp.add_argument("--top", type=int, default=25, help="instructions listed per kernel (default 25)")
    args = ap.parse_args(argv)
    try:
        if args.cmd == "profile":
            profiles = [read_profile(path) for path in args.csvs]
            names = [os.path.basename(path)[: -len(".sass.csv")] if path.endswith(".sass.csv") else path
                     for path in args.csvs]
            print("\n".join(profile_report(profiles, names, args.top)))
            return 0
        nvdisasm = find_nvdisasm(args.nvdisasm)
        if args.cmd == "stats":
            if not os.path.isdir(args.cache_dir):
                raise FileNotFoundError(f"no such cache folder: {args.cache_dir}")
            stats = cache_stats(args.cache_dir, nvdisasm, args.jobs)
            if args.json:
                print(json.dumps({k: asdict(v) for k, v in sorted(stats.items())}, indent=1))
            else:
                print(f"{'registers':>9s} {'spill B':>7s} {'SASS':>6s} {'loop':>5s} {'mma':>4s} {'LDL/STL':>7s}  kernel  warnings")
                for k, s in sorted(stats.items()):
                    print(f"{s.registers:9d} {s.spill_load_bytes:7d} {s.sass:6d} {s.loop.instructions:5d} {s.loop.mma:4d} "
                          f"{s.loop.spill_instructions:7d}  {k}  {s.warnings}")
            return 0
        with tempfile.TemporaryDirectory() as tmp:
            root = args.keep or tmp
            caches = {}
            for tag, binary, templates in (("base", args.base, args.base_templates),
                                           ("new", args.new, args.new_templates)):
                caches[tag] = os.path.join(root, tag)
                # Emptied first: stats read every entry of a cache, so a kept folder's entries from an earlier
                # compare (another template folder) would be counted as this build's.
                shutil.rmtree(caches[tag], ignore_errors=True)
                os.makedirs(caches[tag])
                compile_into(binary, args.yamls, caches[tag], args.arch, templates)
            lines, n_worse = compare_report(cache_stats(caches["base"], nvdisasm, args.jobs),
                                            cache_stats(caches["new"], nvdisasm, args.jobs))
        print("\n".join(lines))
        return 1 if n_worse else 0
    except (FileNotFoundError, RuntimeError, subprocess.CalledProcessError, json.JSONDecodeError) as e:
        print(f"flashtune.sass: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
