#!/usr/bin/env bash
# docs/branches/h-49-calls.sh: session 49's device calls (issue 21): mma 91 with 128-row items at head_dim 64 (the
# working tree's kernels), the bars re-measured, the GPU tests outside attn_bwd / attn_fwd with the second launch.
# Prepared here: FT_PACK_TESTS="attn_bwd_gpu_test cli_gpu_test cublas_gpu_test cuda_gpu_test tma_gpu_test
# attn_fwd_f32_gpu_test runtime_gpu_test tuner_gpu_test" tools/gpu_pack.sh; .gpu/y/{d64ab,standings,gstar}.yaml;
# ../shared/peers/fa4_peer.py in .gpu/peers; caches precompiled into .gpu/cache (`flashtune run Y --compile-only
# --arch sm_90a --cache .gpu/cache` for each yaml run below). Back to back on one warm machine:
#   call0  carry [".cache/gc1"]: nothing run; it brings the variants matrix's cubin cache (54 MB; .gpu is 39 MB)
#   callA  carry [".gpu"]: attn_bwd_gpu_test's Wgmma matrix (with the 128-row d64 study), planted bugs, bitwise
#          reruns; memcheck of attn_bwd_tma_memcheck.yaml; `--vary block_m=64,128` over .gpu/y/d64ab.yaml, 2 rounds
#   callB  carry [".cache/fa4_1"]: the standings (d64 at block_m 64 and 128, causal and not) beside cuDNN; the GPT-OSS
#          step beside FlexAttention; GStar stages 8 / 9; the other GPU test binaries
#   callC  carry [".cache/fa4_2"]: FlashAttention-4 into callB's database, fa4_peer.py's own timing
#   callD  carry [".gpu"]: the GPT-OSS step, TwoRunsAreBitwiseEqual and attn_fwd_f32_gpu_test again, with longer caps
#   callE  carry [".gpu"] (repacked, see callE): unit_group, tail and dq_order at the 128-row d64 tile (not run: no machine)
#   callF  carry [".gpu"]: callE cut to the device time left (the planted-bug test, dq_order 1 against 2)
# Each call rewrites $OUT/callX.tgz after every step (the device tool returns ~8 files of a call).
set -uo pipefail
cd "$(dirname "$0")/../.."
ck() { tar czf "$OUT/.c.tgz" -C "$OUT" r && mv "$OUT/.c.tgz" "$OUT/$1.tgz"; }
out=/tmp/w; mkdir -p "$out" "$OUT/r"; r=$OUT/r
# The GPT-OSS step (its run capped at $1 seconds) beside FlexAttention into $out/go.sqlite (a rerun skips what is recorded).
gpt_oss() {
  timeout "$1" $bin/flashtune run experiments/attention/gpt_oss_step.yaml --db "$out/go.sqlite" > "$r/gpt_oss.log" 2>&1
  echo "gpt_oss rc=$?" >> "$r/rc.txt"
  timeout 60 $bin/flashtune peers experiments/attention/gpt_oss_step.yaml --peers flex --db "$out/go.sqlite" \
    > "$r/gpt_oss_peers.log" 2>&1; echo "gpt_oss peers rc=$?" >> "$r/rc.txt"
  $bin/flashtune query backward --db "$out/go.sqlite" > "$r/go_backward.txt" 2>&1
  $bin/flashtune query peers --db "$out/go.sqlite" > "$r/go_peers.txt" 2>&1; cp "$out/go.sqlite" "$r/"
}
case "${1:-}" in
  call0) ls .cache/gc1 | wc -l; rm -rf "$r" ;;
  callA)
    mkdir -p "$out/cache" && cp -r .cache/gc1/. "$out/cache"/  # with FT_GPU_CACHE below and gpu_env.sh's default
    nvidia-smi --query-gpu=name,uuid,power.limit,clocks.max.sm --format=csv > "$r/gpu.txt"
    (source tools/gpu_env.sh
     timeout 250 $bin/attn_bwd_gpu_test --gtest_filter='*Wgmma*:*Planted*:*TwoRuns*' > "$r/tests.log" 2>&1
     echo "bwd tests rc=$?" >> "$r/rc.txt"; ck callA
     timeout 130 compute-sanitizer --tool memcheck $bin/flashtune run experiments/tests/attn_bwd_tma_memcheck.yaml \
       --db "$out/mc.sqlite" > "$r/memcheck.log" 2>&1; echo "memcheck rc=$?" >> "$r/rc.txt"; ck callA)
    ROUNDS=2 FT_GPU_WORK=$out/ab FT_GPU_CACHE=$out/cache OUT=$r timeout 150 bash tools/gpu_ab.sh --vary block_m=64,128 \
      .gpu/y/d64ab.yaml kernel_templates > "$r/ab_bm.txt" 2>&1
    echo "ab block_m rc=$?" >> "$r/rc.txt"; ck callA; rm -rf "$r"
    ;;
  callB)
    nvidia-smi --query-gpu=name,uuid,power.limit,clocks.max.sm --format=csv > "$r/gpu.txt"
    (source tools/gpu_env.sh
     timeout 120 $bin/flashtune run .gpu/y/standings.yaml --db "$out/st.sqlite" > "$r/standings.log" 2>&1
     echo "standings rc=$?" >> "$r/rc.txt"
     timeout 80 $bin/flashtune peers .gpu/y/standings.yaml --peers sdpa_cudnn --db "$out/st.sqlite" > "$r/peers.log" 2>&1
     echo "peers rc=$?" >> "$r/rc.txt"
     $bin/flashtune query peers --db "$out/st.sqlite" > "$r/query_peers.txt" 2>&1; cp "$out/st.sqlite" "$r/"; ck callB
     gpt_oss 90; ck callB
     timeout 70 $bin/flashtune run .gpu/y/gstar.yaml --db "$out/gs.sqlite" > "$r/gstar.log" 2>&1
     echo "gstar rc=$?" >> "$r/rc.txt"
     $bin/flashtune query backward --db "$out/gs.sqlite" > "$r/gs_backward.txt" 2>&1; cp "$out/gs.sqlite" "$r/"; ck callB
     for t in cli_gpu_test runtime_gpu_test tuner_gpu_test cublas_gpu_test cuda_gpu_test tma_gpu_test attn_fwd_f32_gpu_test; do
       timeout 60 $bin/$t > "$r/$t.log" 2>&1; echo "$t rc=$?" >> "$r/rc.txt"; tail -3 "$r/$t.log" >> "$r/tests_tail.txt"
     done; ck callB); rm -rf "$r"
    ;;
  callC)
    (source tools/gpu_env.sh
     source tools/fa4_unpack.sh && {
       timeout 150 $bin/flashtune peers .gpu/y/standings.yaml --peers fa4 --db "$out/st.sqlite" > "$r/peers_fa4.log" 2>&1
       echo "fa4 peers rc=$?" >> "$r/rc.txt"
       $bin/flashtune query peers --db "$out/st.sqlite" > "$r/query_peers.txt" 2>&1
       cp "$out/st.sqlite" "$r/"; ck callC
       OUT=$r timeout 200 python3 .gpu/peers/fa4_peer.py > "$r/fa4_peer.log" 2>&1; echo "fa4_peer rc=$?" >> "$r/rc.txt"; }
     ck callC); rm -rf "$r"
    ;;
  callD)
    # carry [".gpu"] (the machine was given back): what callA / callB cut at their caps
    nvidia-smi --query-gpu=name,uuid,power.limit,clocks.max.sm --format=csv > "$r/gpu.txt"
    (source tools/gpu_env.sh
     gpt_oss 240; ck callD
     timeout 90 $bin/attn_bwd_gpu_test --gtest_filter='*TwoRuns*' > "$r/tworuns.log" 2>&1
     echo "tworuns rc=$?" >> "$r/rc.txt"; ck callD
     timeout 150 $bin/attn_fwd_f32_gpu_test > "$r/fwd_f32.log" 2>&1; echo "attn_fwd_f32_gpu_test rc=$?" >> "$r/rc.txt"
     ck callD); rm -rf "$r"
    ;;
  callE)
    # carry [".gpu"] (repacked: attn_bwd_gpu_test, .gpu/y/d64ug.yaml and d64det.yaml, their caches): at block_m 128,
    # d64 non-causal and causal, the block order's sections, the split tail, and deterministic dQ's cost (tail 1)
    nvidia-smi --query-gpu=name,uuid,power.limit,clocks.max.sm --format=csv > "$r/gpu.txt"
    (source tools/gpu_env.sh; timeout 60 $bin/attn_bwd_gpu_test --gtest_filter='*PlantedMaskBugsAreCaught*' > "$r/planted.log" 2>&1
     echo "planted rc=$?" >> "$r/rc.txt")
    for ab in "ug unit_group=1,2,4 d64ug" "tail tail=1,2 d64ug" "det dq_order=1,2 d64det"; do
      set -- $ab; mkdir -p "$r/$1"
      ROUNDS=2 FT_GPU_WORK=$out/$1 FT_GPU_CACHE=$out/cache OUT=$r/$1 timeout 150 bash tools/gpu_ab.sh --vary "$2" \
        .gpu/y/$3.yaml kernel_templates > "$r/$1/table.txt" 2>&1
      echo "ab $2 rc=$?" >> "$r/rc.txt"; ck callE
    done; rm -rf "$r"
    ;;
  callF)
    # callE cut down to the device time left (carry [".gpu"] as for callE): the planted-bug test and deterministic dQ's cost
    (source tools/gpu_env.sh; timeout 40 $bin/attn_bwd_gpu_test --gtest_filter='*PlantedMaskBugsAreCaught*' > "$r/planted.log" 2>&1
     echo "planted rc=$?" >> "$r/rc.txt"; ck callF)
    mkdir -p "$r/det"
    ROUNDS=2 FT_GPU_WORK=$out/det FT_GPU_CACHE=$out/cache OUT=$r/det timeout 100 bash tools/gpu_ab.sh --vary dq_order=1,2 \
      .gpu/y/d64det.yaml kernel_templates > "$r/det/table.txt" 2>&1
    echo "ab dq_order rc=$?" >> "$r/rc.txt"; ck callF; rm -rf "$r"
    ;;
  *) echo "usage: $0 call0 | callA | callB | callC | callD | callE | callF" >&2; exit 2 ;;
esac
