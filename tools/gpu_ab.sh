#!/usr/bin/env bash
# tools/gpu_ab.sh: on the GPU machine, from the repository root with .gpu/ (tools/gpu_pack.sh) present: an A/B of
# kernel template folders with the packed binary (`python -m flashtune.ab run`: interleaved rounds of one experiment
# in one call, round 1 validated, each later folder against the first). The table goes to stdout; the databases,
# logs, comparisons and the table (ab.txt) to ${OUT:-gpu-out}/ab, packed into $OUT/ab.tgz when $OUT is set (the
# device tool returns few files). Put a compile cache for every folder into .gpu/cache beforehand (flashtune run
# EXPERIMENT --compile-only --arch sm_90a --cache .gpu/cache --templates DIR, here) to save the device's time.
# usage: [ROUNDS=3] bash tools/gpu_ab.sh EXPERIMENT.yaml DIR_A DIR_B [DIR_C ...]   (DIR: a kernel_templates copy)
#        [ROUNDS=3] bash tools/gpu_ab.sh --vary NAME=V0,V1[,...] EXPERIMENT.yaml DIR   (one tunable's values, one folder)
set -uo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 3 ] || { echo "usage: [ROUNDS=3] $0 [--vary NAME=V0,V1] EXPERIMENT.yaml DIR_A [DIR_B ...]" >&2; exit 2; }
out=${FT_GPU_WORK:-/tmp/ft-gpu-ab}
mkdir -p "$out"
source tools/gpu_env.sh  # bin, LD_LIBRARY_PATH, FLASHTUNE_CACHE_DIR
ab=${OUT:-gpu-out}/ab
PYTHONPATH=python python3 -m flashtune.ab run --rounds "${ROUNDS:-3}" --flashtune "$bin/flashtune" --out "$ab" "$@"
rc=$?
if [ -n "${OUT:-}" ] && [ -d "$ab" ]; then tar czf "$OUT/ab.tgz" -C "$(dirname "$ab")" ab && rm -rf "$ab"; fi
exit $rc
