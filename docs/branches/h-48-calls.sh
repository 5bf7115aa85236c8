#!/usr/bin/env bash
# docs/branches/h-48-calls.sh: session 48's device calls, on the working tree with h-47-kvprefetch.patch and the
# dq_zero 2 change (the pass zeroes dQ's accumulator) applied and packed (FT_PACK_TESTS=attn_bwd_gpu_test
# tools/gpu_pack.sh; caches precompiled into .gpu/cache; ../shared/peers/fa4_peer.py in .gpu/peers; FA4 by
# tools/fa4_pack.sh). Back to back on one warm machine:
# (.gpu and one FA4 part exceed a call's 64 MiB: the parts travel with callB and callC; the machine keeps them.)
#   callA  carry [".gpu"]: attn_bwd_gpu_test's Wgmma matrix (now with the dq_zero 2 study; every trial
#          checks its second launch), planted bugs, bitwise reruns; memcheck of attn_bwd_tma_memcheck.yaml (kv_prefetch
#          and dq_zero studies); the timeline with kv_prefetch 1 / 2; `--vary dq_zero=1,2` and `--vary kv_prefetch=1,2`
#          over attn_bwd_ab.yaml, 2 rounds each
#   callB  carry [".cache/fa4_1"]: the standings (STANDINGS_YAML, default attn_bwd_standings.yaml) beside cuDNN
#   callC  carry [".cache/fa4_2"]: FlashAttention-4 beside them (`flashtune peers` into callB's database, and
#          fa4_peer.py's do_bench timing)
# Each call rewrites $OUT/callX.tgz after every step (the device tool returns ~8 files of a call).
set -uo pipefail
cd "$(dirname "$0")/../.."
ck() { tar czf "$OUT/.c.tgz" -C "$OUT" r && mv "$OUT/.c.tgz" "$OUT/$1.tgz"; }
case "${1:-}" in
  callA)
    out=/tmp/w; mkdir -p "$out" "$OUT/r/tl1" "$OUT/r/tl2"; r=$OUT/r
    nvidia-smi --query-gpu=name,uuid,power.limit,clocks.max.sm --format=csv > "$r/gpu.txt"
    (source tools/gpu_env.sh
     timeout 200 $bin/attn_bwd_gpu_test --gtest_filter='*Wgmma*:*Planted*:*TwoRuns*' > "$r/tests.log" 2>&1
     echo "tests rc=$?" >> "$r/rc.txt"; ck callA
     timeout 100 compute-sanitizer --tool memcheck $bin/flashtune run experiments/tests/attn_bwd_tma_memcheck.yaml \
       --db "$out/mc.sqlite" > "$r/memcheck.log" 2>&1; echo "memcheck rc=$?" >> "$r/rc.txt"; ck callA
     for k in 1 2; do
       FT_TIMELINE_EPILOGUE=2 FT_TIMELINE_KV_PREFETCH=$k FT_TIMELINE_OUT=$r/tl$k FT_TIMELINE_SHAPE=2,16,8192 timeout 30 \
         $bin/attn_bwd_gpu_test --gtest_filter='*Timeline*' > "$r/tl$k.log" 2>&1
       echo "timeline kv_prefetch $k rc=$?" >> "$r/rc.txt"
     done; ck callA)
    ROUNDS=2 FT_GPU_WORK=$out FT_GPU_CACHE=$out/cache OUT=$r timeout 130 bash tools/gpu_ab.sh --vary dq_zero=1,2 \
      experiments/tests/attn_bwd_ab.yaml kernel_templates > "$r/ab_dqzero.txt" 2>&1
    echo "ab dq_zero rc=$?" >> "$r/rc.txt"; ck callA
    ROUNDS=2 FT_GPU_WORK=$out FT_GPU_CACHE=$out/cache OUT=$r timeout 130 bash tools/gpu_ab.sh --vary kv_prefetch=1,2 \
      experiments/tests/attn_bwd_ab.yaml kernel_templates > "$r/ab_kvprefetch.txt" 2>&1
    echo "ab kv_prefetch rc=$?" >> "$r/rc.txt"; ck callA; rm -rf "$r"
    ;;
  callB)
    out=/tmp/w; mkdir -p "$out" "$OUT/r"; r=$OUT/r; y=${STANDINGS_YAML:-experiments/tests/attn_bwd_standings.yaml}
    nvidia-smi --query-gpu=name,uuid,power.limit,clocks.max.sm --format=csv > "$r/gpu.txt"
    (source tools/gpu_env.sh
     timeout 150 $bin/flashtune run "$y" --db "$out/st.sqlite" > "$r/standings.log" 2>&1
     echo "standings rc=$?" >> "$r/rc.txt"
     timeout 90 $bin/flashtune peers "$y" --peers sdpa_cudnn --db "$out/st.sqlite" > "$r/peers.log" 2>&1
     echo "peers rc=$?" >> "$r/rc.txt"
     $bin/flashtune query peers --db "$out/st.sqlite" > "$r/query_peers.txt" 2>&1
     cp "$out/st.sqlite" "$r/"; ck callB); rm -rf "$r"
    ;;
  callC)
    out=/tmp/w; mkdir -p "$out" "$OUT/r"; r=$OUT/r; y=${STANDINGS_YAML:-experiments/tests/attn_bwd_standings.yaml}
    (source tools/gpu_env.sh
     source tools/fa4_unpack.sh && {
       timeout 150 $bin/flashtune peers "$y" --peers fa4 --db "$out/st.sqlite" > "$r/peers_fa4.log" 2>&1
       echo "fa4 peers rc=$?" >> "$r/rc.txt"
       $bin/flashtune query peers --db "$out/st.sqlite" > "$r/query_peers.txt" 2>&1
       cp "$out/st.sqlite" "$r/"; ck callC
       OUT=$r timeout 200 python3 .gpu/peers/fa4_peer.py > "$r/fa4_peer.log" 2>&1; echo "fa4_peer rc=$?" >> "$r/rc.txt"; }
     ck callC); rm -rf "$r"
    ;;
  final)
    # main's kernels (the patches not kept) with the trial's second-launch check and the matrix's fixed constraints:
    # carry [".gpu"] (attn_bwd_gpu_test and attn_fwd_gpu_test packed)
    out=/tmp/w; mkdir -p "$out" "$OUT/r"; r=$OUT/r
    nvidia-smi --query-gpu=name,uuid,power.limit,clocks.max.sm --format=csv > "$r/gpu.txt"
    (source tools/gpu_env.sh
     timeout 190 $bin/attn_bwd_gpu_test --gtest_filter='*Wgmma*:*Planted*:*TwoRuns*' > "$r/tests.log" 2>&1
     echo "bwd tests rc=$?" >> "$r/rc.txt"; ck final
     timeout 100 $bin/flashtune run experiments/tests/attn_bwd_standings.yaml --db "$out/st.sqlite" > "$r/standings.log" 2>&1
     echo "standings rc=$?" >> "$r/rc.txt"
     timeout 70 $bin/flashtune peers experiments/tests/attn_bwd_standings.yaml --peers sdpa_cudnn --db "$out/st.sqlite" \
       > "$r/peers.log" 2>&1; echo "peers rc=$?" >> "$r/rc.txt"
     $bin/flashtune query peers --db "$out/st.sqlite" > "$r/query_peers.txt" 2>&1; cp "$out/st.sqlite" "$r/"; ck final
     timeout 100 $bin/attn_fwd_gpu_test > "$r/fwd_tests.log" 2>&1; echo "fwd tests rc=$?" >> "$r/rc.txt"; ck final)
    rm -rf "$r"
    ;;
  *) echo "usage: $0 callA | callB | callC | final" >&2; exit 2 ;;
esac
