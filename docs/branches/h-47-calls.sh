#!/usr/bin/env bash
# docs/branches/h-47-calls.sh: the next device session's calls (written in session 47, not run yet): what session 47
# left unmeasured on main (epilogue 2 landed), and docs/branches/h-47-kvprefetch.patch (kv_prefetch 2: the producer
# prefetches into L2 the K / V tiles of the block a wave later in launch order; a runtime hint, the same kernel as
# kv_prefetch 1, so `--vary kv_prefetch=1,2` compares one kernel with itself).
#   bash docs/branches/h-47-calls.sh prepare   # here (network, no GPU): apply the patch, build, pack, FA4's two parts,
#                                              # caches (the binaries are the patched ones: their default kernels are
#                                              # main's plus the prefetch branch, not taken at kv_prefetch 1)
#   then, back to back on one warm machine (it goes back after 30 s idle):
#   callA  carry [".gpu", ".cache/fa4_1"]: attn_bwd_gpu_test's Wgmma matrix, planted bugs, bitwise reruns (session
#          47's 100 s cap cut them); memcheck of attn_bwd_tma_memcheck.yaml (its kv_prefetch study); the timeline at
#          2,16,8192 with epilogue 2 and kv_prefetch 1 / 2 (predicted: the K / V wait 3.8 k -> 1.5-2 k cycles);
#          `--vary kv_prefetch=1,2` over attn_bwd_ab.yaml, 3 rounds (predicted: d128 non-causal -0.3 to -0.6 %,
#          causal -0.5 to -0.9 %)
#   callB  carry [".gpu", ".cache/fa4_2"]: the standings (epilogue 2) beside cuDNN and FlashAttention-4 (`flashtune
#          peers`, and fa4_peer.py's do_bench timing: session 40 found `peers` counts FA4's host enqueue), then
#          `--vary unit_group=2,4` on the causal shapes
# Each call rewrites one archive, $OUT/callX.tgz, after every step (the device tool returns ~8 files of a call).
# Without the patch (e.g. it no longer applies): drop the `git apply`, the memcheck / timeline kv_prefetch steps and
# the kv_prefetch A/B.
set -uo pipefail
cd "$(dirname "$0")/../.."
ck() { tar czf "$OUT/.c.tgz" -C "$OUT" r && mv "$OUT/.c.tgz" "$OUT/$1.tgz"; }
case "${1:-}" in
  prepare)
    set -e
    git apply docs/branches/h-47-kvprefetch.patch
    cmake --build build -j "$(nproc)" --target flashtune flashtune_runtime attn_bwd_gpu_test >/dev/null
    FT_PACK_TESTS="attn_bwd_gpu_test" bash tools/gpu_pack.sh
    bash tools/fa4_pack.sh
    mkdir -p .gpu/peers && cp ../shared/peers/fa4_peer.py .gpu/peers/
    # the causal shapes at the standings' config, for `--vary unit_group=2,4` (the standings' measure block)
    { sed -n '/^name:/,/^studies:/p' experiments/tests/attn_bwd_standings.yaml | sed 's/^name: .*/name: attn_bwd_ug/'
      cat <<'YAML'
  - family: attn_bwd_fused
    problems:
      - {batch: 2, heads_q: 16, seq_q: 8192, head_dim: 128, dtype: bf16, causal: 1}
      - {batch: 2, heads_q: 32, seq_q: 8192, head_dim: 64, dtype: bf16, causal: 1}
    space: {mma: 91, block_m: 64, block_n: 128, num_warps: 8, num_stages: 2, dq_order: 1, unit_group: 2, tail: 2, epilogue: 2}
YAML
    } > .gpu/ug.yaml
    for y in experiments/tests/attn_bwd_ab.yaml experiments/tests/attn_bwd_standings.yaml .gpu/ug.yaml; do
      build/harness/cli/flashtune run "$y" --compile-only --arch sm_90a --db /tmp/h47_precompile.sqlite \
        --cache .gpu/cache >/dev/null
    done
    du -sh .gpu .cache/fa4_1 .cache/fa4_2
    ;;
  callA)
    out=/tmp/w; mkdir -p "$out" "$OUT/r/tl1" "$OUT/r/tl2"; r=$OUT/r
    nvidia-smi --query-gpu=name,uuid,power.limit,clocks.max.sm --format=csv > "$r/gpu.txt"
    (source tools/gpu_env.sh
     timeout 240 $bin/attn_bwd_gpu_test --gtest_filter='*Wgmma*:*Planted*:*TwoRuns*' > "$r/tests.log" 2>&1
     echo "tests rc=$?" >> "$r/rc.txt"; ck callA
     timeout 120 compute-sanitizer --tool memcheck $bin/flashtune run experiments/tests/attn_bwd_tma_memcheck.yaml \
       --db "$out/mc.sqlite" > "$r/memcheck.log" 2>&1; echo "memcheck rc=$?" >> "$r/rc.txt"
     for k in 1 2; do
       FT_TIMELINE_EPILOGUE=2 FT_TIMELINE_KV_PREFETCH=$k FT_TIMELINE_OUT=$r/tl$k FT_TIMELINE_SHAPE=2,16,8192 timeout 40 \
         $bin/attn_bwd_gpu_test --gtest_filter='*Timeline*' > "$r/tl$k.log" 2>&1
       echo "timeline kv_prefetch $k rc=$?" >> "$r/rc.txt"
     done; ck callA)
    ROUNDS=3 FT_GPU_WORK=$out FT_GPU_CACHE=$out/cache OUT=$r timeout 200 bash tools/gpu_ab.sh --vary kv_prefetch=1,2 \
      experiments/tests/attn_bwd_ab.yaml kernel_templates > "$r/ab_kvprefetch.txt" 2>&1
    echo "ab rc=$?" >> "$r/rc.txt"; ck callA; rm -rf "$r"
    ;;
  callB)
    out=/tmp/w; mkdir -p "$out" "$OUT/r"; r=$OUT/r
    nvidia-smi --query-gpu=name,uuid,power.limit,clocks.max.sm --format=csv > "$r/gpu.txt"
    (source tools/gpu_env.sh
     timeout 150 $bin/flashtune run experiments/tests/attn_bwd_standings.yaml --db "$out/st.sqlite" > "$r/standings.log" 2>&1
     echo "standings rc=$?" >> "$r/rc.txt"
     timeout 90 $bin/flashtune peers experiments/tests/attn_bwd_standings.yaml --peers sdpa_cudnn --db "$out/st.sqlite" \
       > "$r/peers.log" 2>&1; echo "peers rc=$?" >> "$r/rc.txt"
     cp "$out/st.sqlite" "$r/"; ck callB
     source tools/fa4_unpack.sh && {
       timeout 150 $bin/flashtune peers experiments/tests/attn_bwd_standings.yaml --peers fa4 --db "$out/st.sqlite" \
         > "$r/peers_fa4.log" 2>&1; echo "fa4 peers rc=$?" >> "$r/rc.txt"
       OUT=$r timeout 150 python3 .gpu/peers/fa4_peer.py > "$r/fa4_peer.log" 2>&1; echo "fa4_peer rc=$?" >> "$r/rc.txt"; }
     $bin/flashtune query peers --db "$out/st.sqlite" > "$r/query_peers.txt" 2>&1
     cp "$out/st.sqlite" "$r/"; ck callB)
    ROUNDS=3 FT_GPU_WORK=$out FT_GPU_CACHE=$out/cache OUT=$r timeout 120 bash tools/gpu_ab.sh --vary unit_group=2,4 \
      .gpu/ug.yaml kernel_templates > "$r/ab_ug.txt" 2>&1
    ck callB; rm -rf "$r"
    ;;
  *) echo "usage: $0 prepare | callA | callB" >&2; exit 2 ;;
esac
