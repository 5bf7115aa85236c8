#!/usr/bin/env bash
# tools/gpu_profile.sh: on the GPU machine (after tools/gpu_pack.sh, from the repository root), profiles one
# kernel of a flashtune experiment with Nsight Compute: the first launch whose name matches KERNEL_REGEX
# (the validation launch of the first config that compiles; give the experiment one config). Writes
# NAME.ncu.txt (speed of light, occupancy, launch statistics, warp states, instruction mix, scheduler) and
# NAME.sass.csv (per-instruction executed counts and stall samples, for the hot loop) under $OUT (or ./gpu-out); read
# them with `python -m flashtune.sass profile NAME.sass.csv [OTHER.sass.csv ...]`.
# With PEER (a `flashtune peers` name: fa4, sdpa_cudnn, ...), profiles that peer's kernel instead, in the Python child
# `flashtune peers EXPERIMENT --peers PEER` starts (ncu follows child processes): e.g. FlashAttention-4's backward
# with KERNEL_REGEX FlashAttentionBackwardSm90 (its wheels carried: source tools/fa4_unpack.sh first), beside
# flashtune's own kernel profiled from the same experiment (give it one problem: -c 1 takes the first launch).
# The kernel is built from the templates embedded in the packed binary (those of the tree tools/gpu_pack.sh built),
# or with FT_TEMPLATES=DIR from that folder (`flashtune run --templates DIR`), as an A/B's folders are.
# usage: [FT_TEMPLATES=DIR] bash tools/gpu_profile.sh EXPERIMENT.yaml KERNEL_REGEX NAME [PEER]
set -uo pipefail
cd "$(dirname "$0")/.."
[ $# -eq 3 ] || [ $# -eq 4 ] || { echo "usage: $0 EXPERIMENT.yaml KERNEL_REGEX NAME [PEER]" >&2; exit 2; }
exp=$1 regex=$2 name=$3 peer=${4:-}
out=${OUT:-gpu-out}
mkdir -p "$out"
ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | tail -1)
[ -x "$ncu" ] || { echo "gpu_profile: ncu (Nsight Compute) not found" >&2; exit 1; }
export LD_LIBRARY_PATH="$(pwd)/.gpu/bin/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
db=$(mktemp -d)/profile.sqlite
sections=(--section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats
          --section InstructionStats --section SchedulerStats --section MemoryWorkloadAnalysis --section SourceCounters)
if [ -n "$peer" ]; then cmd=(.gpu/bin/flashtune peers "$exp" --peers "$peer" --db "$db")
else cmd=(.gpu/bin/flashtune run "$exp" --db "$db" ${FT_TEMPLATES:+--templates "$FT_TEMPLATES"}); fi
"$ncu" "${sections[@]}" --target-processes all -k "regex:$regex" -c 1 --import-source no -o "$out/$name" -f \
  "${cmd[@]}" >"$out/$name.run.log" 2>&1 || { tail -20 "$out/$name.run.log"; exit 1; }
"$ncu" --import "$out/$name.ncu-rep" --page details >"$out/$name.ncu.txt"
"$ncu" --import "$out/$name.ncu-rep" --page source --print-source sass --csv >"$out/$name.sass.csv" 2>/dev/null || true
rm -f "$out/$name.ncu-rep"
grep -E "Duration|Registers Per|Achieved Occupancy|Theoretical Occupancy|Issue Slots Busy|No Eligible|Compute \(SM\) Throughput|Memory Throughput" "$out/$name.ncu.txt"
