#!/usr/bin/env bash
# docs/branches/h-45-calls.sh: NOTES session 45's plan for measuring its three patches, as commands. Not run yet.
#   bash docs/branches/h-45-calls.sh prepare   # here (no GPU): apply, build, pack, template folders A B C, caches
#   then one device call per stage, each `bash docs/branches/h-45-calls.sh callN` with carry [".gpu"]:
#   call1  correctness: the new GPU tests (timeline CSV at 2,16,8192), memcheck, racecheck, the Wgmma matrix (~8 min)
#   call2  speed: A/B of A (dqzero) / B (+ maskskip) / C (+ cols2), then --vary dq_zero=1,2 on A (~9 min)
#   call3  the standings with dq_zero [1, 2] beside cuDNN, then --vary unit_group=2,4 on d128 / d64 causal (~8 min)
# Folders: A = main + h-45-dqzero (its template part only changes the convert launch), B = A + h-45-maskskip,
# C = A + h-45-cols2; the binaries are built with all three (their embedded templates: the GPU tests, memcheck and
# racecheck run those), and the working tree ends with all three applied.
set -uo pipefail
cd "$(dirname "$0")/../.."
p=docs/branches
case "${1:-}" in
  prepare)
    set -e
    # The binaries embed the templates they are built with (the GPU tests and the sanitizer runs use those): all three.
    git apply $p/h-45-dqzero.patch $p/h-45-maskskip.patch $p/h-45-cols2.patch
    cmake --build build -j "$(nproc)" --target flashtune flashtune_runtime attn_bwd_gpu_test >/dev/null
    FT_PACK_TESTS="attn_bwd_gpu_test" bash tools/gpu_pack.sh
    mkdir -p .gpu/t/A .gpu/t/B .gpu/t/C
    git apply -R $p/h-45-cols2.patch $p/h-45-maskskip.patch && cp -r kernel_templates .gpu/t/A/
    git apply $p/h-45-maskskip.patch && cp -r kernel_templates .gpu/t/B/
    git apply -R $p/h-45-maskskip.patch && git apply $p/h-45-cols2.patch && cp -r kernel_templates .gpu/t/C/
    git apply $p/h-45-maskskip.patch  # all three again, as built
    sed 's/tail: 2}/tail: 2, dq_zero: [1, 2]}/' experiments/tests/attn_bwd_standings.yaml > .gpu/standings_z.yaml
    # unit_group 2 / 4 on the causal shapes whose pairs are one head (NOTES session 45's block-order simulation)
    sed -n '/^name:/,/^studies:/p' experiments/tests/attn_bwd_standings.yaml | sed 's/^name: .*/name: attn_bwd_ug/' > .gpu/ug.yaml
    cat >> .gpu/ug.yaml <<'YAML'
  - family: attn_bwd_fused
    problems:
      - {batch: 2, heads_q: 16, seq_q: 8192, head_dim: 128, dtype: bf16, causal: 1}
      - {batch: 2, heads_q: 32, seq_q: 8192, head_dim: 64, dtype: bf16, causal: 1}
    space: {mma: 91, block_m: 64, block_n: 128, num_warps: 8, num_stages: 2, dq_order: 1, unit_group: 2, tail: 2}
YAML
    for v in A B C; do
      for y in experiments/tests/attn_bwd_ab.yaml experiments/tests/attn_bwd_tma_memcheck.yaml \
               experiments/tests/attn_bwd_tma_racecheck.yaml .gpu/standings_z.yaml .gpu/ug.yaml; do
        build/harness/cli/flashtune run "$y" --compile-only --arch sm_90a --db /tmp/h45_precompile.sqlite \
          --cache .gpu/cache --templates .gpu/t/$v/kernel_templates >/dev/null
      done
    done
    du -sh .gpu
    ;;
  call1)
    out=$OUT/w; mkdir -p "$out" "$OUT/tl"; source tools/gpu_env.sh
    nvidia-smi --query-gpu=name,uuid,power.limit,clocks.max.sm --format=csv > "$OUT/gpu.txt"
    FT_TIMELINE_OUT=$OUT/tl FT_TIMELINE_SHAPE=2,16,8192 timeout 240 $bin/attn_bwd_gpu_test \
      --gtest_filter='*DqZero2*:*Timeline*:*TwoRuns*:*Planted*' > "$OUT/tests.log" 2>&1; echo "tests rc=$?" >> "$OUT/rc.txt"
    timeout 150 compute-sanitizer --tool memcheck $bin/flashtune run experiments/tests/attn_bwd_tma_memcheck.yaml \
      --db "$out/mc.sqlite" > "$OUT/memcheck.log" 2>&1; echo "memcheck rc=$?" >> "$OUT/rc.txt"
    timeout 120 compute-sanitizer --tool racecheck $bin/flashtune run experiments/tests/attn_bwd_tma_racecheck.yaml \
      --db "$out/rc.sqlite" > "$OUT/racecheck.log" 2>&1; echo "racecheck rc=$?" >> "$OUT/rc.txt"
    timeout 200 $bin/attn_bwd_gpu_test --gtest_filter='*Wgmma*' > "$OUT/wgmma.log" 2>&1; echo "wgmma rc=$?" >> "$OUT/rc.txt"
    ;;
  call2)
    out=$OUT/w; mkdir -p "$out"
    ROUNDS=3 FT_GPU_WORK=$out FT_GPU_CACHE=$out/cache timeout 300 bash tools/gpu_ab.sh experiments/tests/attn_bwd_ab.yaml \
      .gpu/t/A/kernel_templates .gpu/t/B/kernel_templates .gpu/t/C/kernel_templates > "$OUT/ab_folders.txt" 2>&1
    mv "$OUT/ab.tgz" "$OUT/ab_folders.tgz" 2>/dev/null
    ROUNDS=3 FT_GPU_WORK=$out FT_GPU_CACHE=$out/cache timeout 240 bash tools/gpu_ab.sh --vary dq_zero=1,2 \
      experiments/tests/attn_bwd_ab.yaml .gpu/t/A/kernel_templates > "$OUT/ab_dqzero.txt" 2>&1
    ;;
  call3)
    out=$OUT/w; mkdir -p "$out"; source tools/gpu_env.sh
    T=${FT_H45_TEMPLATES:-.gpu/t/A/kernel_templates}  # the winning folder
    timeout 300 $bin/flashtune run .gpu/standings_z.yaml --db "$out/st.sqlite" --templates "$T" > "$OUT/standings.log" 2>&1
    timeout 200 $bin/flashtune peers .gpu/standings_z.yaml --peers sdpa_cudnn --db "$out/st.sqlite" > "$OUT/peers.log" 2>&1
    $bin/flashtune query peers --db "$out/st.sqlite" > "$OUT/query_peers.txt" 2>&1
    cp "$out/st.sqlite" "$OUT/"
    ROUNDS=3 FT_GPU_WORK=$out FT_GPU_CACHE=$out/cache timeout 200 bash tools/gpu_ab.sh --vary unit_group=2,4 .gpu/ug.yaml \
      "$T" > "$OUT/ab_ug.txt" 2>&1
    ;;
  callx)  # session 46, one call if only one comes: the dq_zero tests, the standings (folder A, dq_zero 1 / 2) beside cuDNN, memcheck
    out=$OUT/w; mkdir -p "$out" "$OUT/tl"; source tools/gpu_env.sh
    nvidia-smi --query-gpu=name,uuid,power.limit,clocks.max.sm --format=csv > "$OUT/gpu.txt"
    FT_TIMELINE_OUT=$OUT/tl FT_TIMELINE_SHAPE=2,16,8192 timeout 150 $bin/attn_bwd_gpu_test \
      --gtest_filter='*DqZero2*:*Timeline*:*TwoRuns*:*Planted*' > "$OUT/tests.log" 2>&1; echo "tests rc=$?" >> "$OUT/rc.txt"
    timeout 200 $bin/flashtune run .gpu/standings_z.yaml --db "$out/st.sqlite" --templates .gpu/t/A/kernel_templates \
      > "$OUT/standings.log" 2>&1; echo "standings rc=$?" >> "$OUT/rc.txt"
    timeout 100 $bin/flashtune peers .gpu/standings_z.yaml --peers sdpa_cudnn --db "$out/st.sqlite" > "$OUT/peers.log" 2>&1
    echo "peers rc=$?" >> "$OUT/rc.txt"
    $bin/flashtune query peers --db "$out/st.sqlite" > "$OUT/query_peers.txt" 2>&1; cp "$out/st.sqlite" "$OUT/"
    timeout 110 compute-sanitizer --tool memcheck $bin/flashtune run experiments/tests/attn_bwd_tma_memcheck.yaml \
      --db "$out/mc.sqlite" > "$OUT/memcheck.log" 2>&1; echo "memcheck rc=$?" >> "$OUT/rc.txt"
    ;;
  call23)  # session 46, short of device time: call 2's folder A/B (2 rounds) and call 3's standings (folder C) in one call
    out=$OUT/w; mkdir -p "$out"
    ROUNDS=${ROUNDS:-2} FT_GPU_WORK=$out FT_GPU_CACHE=$out/cache timeout 270 bash tools/gpu_ab.sh experiments/tests/attn_bwd_ab.yaml \
      .gpu/t/A/kernel_templates .gpu/t/B/kernel_templates .gpu/t/C/kernel_templates > "$OUT/ab_folders.txt" 2>&1
    mv "$OUT/ab.tgz" "$OUT/ab_folders.tgz" 2>/dev/null
    source tools/gpu_env.sh
    T=${FT_H45_TEMPLATES:-.gpu/t/C/kernel_templates}
    timeout 200 $bin/flashtune run .gpu/standings_z.yaml --db "$out/st.sqlite" --templates "$T" > "$OUT/standings.log" 2>&1
    timeout 120 $bin/flashtune peers .gpu/standings_z.yaml --peers sdpa_cudnn --db "$out/st.sqlite" > "$OUT/peers.log" 2>&1
    $bin/flashtune query peers --db "$out/st.sqlite" > "$OUT/query_peers.txt" 2>&1
    cp "$out/st.sqlite" "$OUT/"
    ;;
  *) echo "usage: $0 prepare | call1 | call2 | call3 | call23" >&2; exit 2 ;;
esac
