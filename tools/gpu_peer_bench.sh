#!/usr/bin/env bash
# tools/gpu_peer_bench.sh: on the GPU machine, one call: flashtune's run of an experiment between two runs of the
# PyTorch SDPA peers (FlashAttention-2, cuDNN, efficient; ../shared/peers/peers.py, which does not travel: copy it
# to .gpu/peers/ before the call), so that every number compared comes from the same card in the same call.
#   here:         bash tools/gpu_pack.sh && mkdir -p .gpu/peers && cp ../shared/peers/peers.py .gpu/peers/
#   GPU machine:  bash tools/gpu_peer_bench.sh experiments/tests/attn_fwd_tma_bench.yaml [peer sections...]
# Default peer sections: llama sdpa_grid (d64 / d128 at seq 1k..16k, the Llama-like GQA shape). Trials land in
# $OUT/bench.sqlite; logs (GPU, clocks and power limit, the runs, both peer runs) in $OUT/logs.tgz.
set -uo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 1 ] || { echo "usage: tools/gpu_peer_bench.sh EXPERIMENT.yaml [peer sections...]" >&2; exit 2; }
experiment=$1; shift
sections=("$@"); [ ${#sections[@]} -gt 0 ] || sections=(llama sdpa_grid)
[ -f .gpu/peers/peers.py ] || { echo "gpu_peer_bench: .gpu/peers/peers.py missing (cp ../shared/peers/peers.py .gpu/peers/ before the call)" >&2; exit 2; }
out=${OUT:-gpu-out}; logs=$(mktemp -d)
export LD_LIBRARY_PATH="$(pwd)/.gpu/bin/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
export FLASHTUNE_CACHE_DIR=${FLASHTUNE_CACHE_DIR:-/tmp/ftcache}
mkdir -p "$out"
nvidia-smi --query-gpu=name,uuid,driver_version,clocks.max.sm,power.limit --format=csv | tee "$logs/gpu.txt"
python3 .gpu/peers/peers.py "${sections[@]}" > "$logs/peers_before.log" 2>&1
.gpu/bin/flashtune run "$experiment" --db "$out/bench.sqlite" > "$logs/run.txt" 2> "$logs/run.log"
echo "flashtune run rc=$?"
python3 .gpu/peers/peers.py "${sections[@]}" > "$logs/peers_after.log" 2>&1
.gpu/bin/flashtune query best --db "$out/bench.sqlite" | tee "$logs/best.txt"
grep -hE "^[a-z0-9_]+,[^ ]" "$logs/peers_before.log" "$logs/peers_after.log" | grep -v efficient
tar czf "$out/logs.tgz" -C "$logs" .
