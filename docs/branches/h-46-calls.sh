#!/usr/bin/env bash
# docs/branches/h-46-calls.sh: NOTES session 46's plan for validating and measuring h-46-epilogue.patch (attn_bwd_fused
# mma 91 `epilogue: 2`: dK, dV staged in the K / V tiles and written by TMA stores; the forward's epilogue-2 staging
# through the same library function), as commands. Ran in session 47 (call1, then call23 for calls 2 and 3), after
# which the patch landed on main: `prepare` applies only on 415dc5b, the tree it was measured on.
#   bash docs/branches/h-46-calls.sh prepare   # here (no GPU): apply, build, pack, template folders M and E, yamls, caches
#   then one device call per stage, each `bash docs/branches/h-46-calls.sh callN` with carry [".gpu"], back to back
#   (a warm machine goes back after 30 s idle):
#   call1  correctness (~7 min): the epilogue-2 matrix validated (272 trials), memcheck, racecheck, the timeline at
#          2,16,8192 with epilogue 1 and 2
#   call2  (~9 min) the Wgmma matrix, planted bugs, bitwise reruns (the embedded templates: E); speed: --vary
#          epilogue=1,2 over attn_bwd_ab.yaml (folder E, 3 rounds); the dense forward M / E (3 rounds)
#   call3  the standings with epilogue [1, 2] beside cuDNN (folder E), then --vary unit_group=2,4 on the causal shapes
# Folder M (main's templates) serves the forward A/B only: the patched host lays FtAttnBwdTmaParams out with 7 maps,
# which main's backward kernels do not read (their unit_group and tail fields would be off).
# Each call leaves one archive, $OUT/callN.tgz (session 46: the device tool returned 8 files of a call and dropped the
# rest by count), its databases and caches under /tmp/w on the machine.
set -uo pipefail
cd "$(dirname "$0")/../.."
p=docs/branches
pack() { tar czf "$OUT/$1.tgz" -C "$OUT" r && rm -rf "$OUT/r"; }
case "${1:-}" in
  prepare)
    set -e
    git apply $p/h-46-epilogue.patch
    cmake --build build -j "$(nproc)" --target flashtune flashtune_runtime attn_bwd_gpu_test >/dev/null
    FT_PACK_TESTS="attn_bwd_gpu_test" bash tools/gpu_pack.sh
    rm -rf .gpu/t && mkdir -p .gpu/t/M .gpu/t/E
    git archive HEAD kernel_templates | tar -x -C .gpu/t/M
    cp -r kernel_templates .gpu/t/E/
    python3 - <<'PY'
import yaml
v = yaml.safe_load(open("experiments/tests/attn_bwd_sm90_variants.yaml"))
epi = [s for s in v["studies"] if s.get("space", {}).get("epilogue") == 2]
assert len(epi) == 1, "the variants yaml's epilogue-2 study"
head = {k: v[k] for k in v if k != "studies"}
yaml.safe_dump({**head, "name": "attn_bwd_epilogue2_matrix", "studies": epi}, open(".gpu/epi_matrix.yaml", "w"), sort_keys=False)
d = yaml.safe_load(open("experiments/attention/dense_step.yaml"))
fwd = [s for s in d["studies"] if s["family"] == "attn_fwd"]
for s in fwd:
    s["space"]["persistent"] = [2, 3]  # the tuned forward's grids (NOTES session 30-31)
head = {k: d[k] for k in d if k != "studies"}
yaml.safe_dump({**head, "name": "attn_fwd_dense_ab", "studies": fwd}, open(".gpu/fwd_dense.yaml", "w"), sort_keys=False)
s = yaml.safe_load(open("experiments/tests/attn_bwd_standings.yaml"))
for st in s["studies"]:
    if st["family"] == "attn_bwd_fused":
        st["space"]["epilogue"] = [1, 2]
s["validate"] = {"enabled": False}  # call 1 validates these kernels
yaml.safe_dump(s, open(".gpu/standings_e.yaml", "w"), sort_keys=False)
g = {k: s[k] for k in s if k != "studies"}
g["name"] = "attn_bwd_ug"
g["studies"] = [{"family": "attn_bwd_fused",
                 "problems": [{"batch": 2, "heads_q": 16, "seq_q": 8192, "head_dim": 128, "dtype": "bf16", "causal": 1},
                              {"batch": 2, "heads_q": 32, "seq_q": 8192, "head_dim": 64, "dtype": "bf16", "causal": 1}],
                 "space": {"mma": 91, "block_m": 64, "block_n": 128, "num_warps": 8, "num_stages": 2, "dq_order": 1,
                           "unit_group": 2, "tail": 2}}]
yaml.safe_dump(g, open(".gpu/ug.yaml", "w"), sort_keys=False)
PY
    for y in .gpu/epi_matrix.yaml experiments/tests/attn_bwd_tma_memcheck.yaml experiments/tests/attn_bwd_tma_racecheck.yaml \
             experiments/tests/attn_bwd_ab.yaml .gpu/standings_e.yaml .gpu/ug.yaml; do
      build/harness/cli/flashtune run "$y" --compile-only --arch sm_90a --db /tmp/h46_precompile.sqlite \
        --cache .gpu/cache --templates .gpu/t/E/kernel_templates >/dev/null
    done
    for v in M E; do
      build/harness/cli/flashtune run .gpu/fwd_dense.yaml --compile-only --arch sm_90a --db /tmp/h46_precompile.sqlite \
        --cache .gpu/cache --templates .gpu/t/$v/kernel_templates >/dev/null
    done
    du -sh .gpu
    ;;
  call1)
    out=/tmp/w; mkdir -p "$out" "$OUT/r/tl1" "$OUT/r/tl2"; source tools/gpu_env.sh
    nvidia-smi --query-gpu=name,uuid,power.limit,clocks.max.sm --format=csv > "$OUT/r/gpu.txt"
    r=$OUT/r
    timeout 200 $bin/flashtune run .gpu/epi_matrix.yaml --db "$out/m.sqlite" > "$r/matrix.log" 2>&1; echo "matrix rc=$?" >> "$r/rc.txt"
    $bin/flashtune query sql "SELECT status, count(*) FROM trials GROUP BY status" --db "$out/m.sqlite" > "$r/matrix_status.txt" 2>&1
    timeout 120 compute-sanitizer --tool memcheck $bin/flashtune run experiments/tests/attn_bwd_tma_memcheck.yaml \
      --db "$out/mc.sqlite" > "$r/memcheck.log" 2>&1; echo "memcheck rc=$?" >> "$r/rc.txt"
    timeout 90 compute-sanitizer --tool racecheck $bin/flashtune run experiments/tests/attn_bwd_tma_racecheck.yaml \
      --db "$out/rc.sqlite" > "$r/racecheck.log" 2>&1; echo "racecheck rc=$?" >> "$r/rc.txt"
    FT_TIMELINE_OUT=$r/tl1 FT_TIMELINE_SHAPE=2,16,8192 timeout 40 $bin/attn_bwd_gpu_test --gtest_filter='*Timeline*' \
      > "$r/tl1.log" 2>&1; echo "timeline1 rc=$?" >> "$r/rc.txt"
    FT_TIMELINE_EPILOGUE=2 FT_TIMELINE_OUT=$r/tl2 FT_TIMELINE_SHAPE=2,16,8192 timeout 40 $bin/attn_bwd_gpu_test \
      --gtest_filter='*Timeline*' > "$r/tl2.log" 2>&1; echo "timeline2 rc=$?" >> "$r/rc.txt"
    pack call1
    ;;
  call2)
    out=/tmp/w; mkdir -p "$out" "$OUT/r"; r=$OUT/r
    (source tools/gpu_env.sh; timeout 160 $bin/attn_bwd_gpu_test --gtest_filter='*Wgmma*:*Planted*:*TwoRuns*' \
      > "$r/tests.log" 2>&1; echo "tests rc=$?" >> "$r/rc.txt")
    ROUNDS=3 FT_GPU_WORK=$out FT_GPU_CACHE=$out/cache OUT=$r timeout 200 bash tools/gpu_ab.sh --vary epilogue=1,2 \
      experiments/tests/attn_bwd_ab.yaml .gpu/t/E/kernel_templates > "$r/ab_epilogue.txt" 2>&1
    mv "$r/ab.tgz" "$r/ab_epilogue.tgz" 2>/dev/null
    ROUNDS=3 FT_GPU_WORK=$out FT_GPU_CACHE=$out/cache OUT=$r timeout 200 bash tools/gpu_ab.sh .gpu/fwd_dense.yaml \
      .gpu/t/M/kernel_templates .gpu/t/E/kernel_templates > "$r/ab_fwd.txt" 2>&1
    mv "$r/ab.tgz" "$r/ab_fwd.tgz" 2>/dev/null
    pack call2
    ;;
  call3)
    out=/tmp/w; mkdir -p "$out" "$OUT/r"; r=$OUT/r; source tools/gpu_env.sh
    timeout 200 $bin/flashtune run .gpu/standings_e.yaml --db "$out/st.sqlite" --templates .gpu/t/E/kernel_templates \
      > "$r/standings.log" 2>&1
    timeout 120 $bin/flashtune peers .gpu/standings_e.yaml --peers sdpa_cudnn --db "$out/st.sqlite" > "$r/peers.log" 2>&1
    $bin/flashtune query peers --db "$out/st.sqlite" > "$r/query_peers.txt" 2>&1
    cp "$out/st.sqlite" "$r/"
    ROUNDS=3 FT_GPU_WORK=$out FT_GPU_CACHE=$out/cache OUT=$r timeout 150 bash tools/gpu_ab.sh --vary unit_group=2,4 \
      .gpu/ug.yaml .gpu/t/E/kernel_templates > "$r/ab_ug.txt" 2>&1
    pack call3
    ;;
  call23)
    # calls 2 and 3 in one (session 47: machines came rarely): the bars first, each step capped, ~500 s in all; the
    # archive is rewritten after every step so that a call cut short still returns what it measured
    out=/tmp/w; mkdir -p "$out" "$OUT/r"; r=$OUT/r
    ck() { tar czf "$OUT/.c.tgz" -C "$OUT" r && mv "$OUT/.c.tgz" "$OUT/call23.tgz"; }
    nvidia-smi --query-gpu=name,uuid,power.limit,clocks.max.sm --format=csv > "$r/gpu.txt"
    (source tools/gpu_env.sh
     timeout 150 $bin/flashtune run .gpu/standings_e.yaml --db "$out/st.sqlite" --templates .gpu/t/E/kernel_templates \
       > "$r/standings.log" 2>&1; echo "standings rc=$?" >> "$r/rc.txt"
     timeout 90 $bin/flashtune peers .gpu/standings_e.yaml --peers sdpa_cudnn --db "$out/st.sqlite" > "$r/peers.log" 2>&1
     echo "peers rc=$?" >> "$r/rc.txt"
     $bin/flashtune query peers --db "$out/st.sqlite" > "$r/query_peers.txt" 2>&1
     cp "$out/st.sqlite" "$r/"; ck
     timeout 100 $bin/attn_bwd_gpu_test --gtest_filter='*Wgmma*:*Planted*:*TwoRuns*' > "$r/tests.log" 2>&1
     echo "tests rc=$?" >> "$r/rc.txt"; ck
     timeout 60 $bin/flashtune run .gpu/fwd_dense.yaml --db "$out/fwd.sqlite" --templates .gpu/t/E/kernel_templates \
       > "$r/fwd_e.log" 2>&1; echo "fwd_e rc=$?" >> "$r/rc.txt"; ck)
    ROUNDS=2 FT_GPU_WORK=$out FT_GPU_CACHE=$out/cache OUT=$r timeout 100 bash tools/gpu_ab.sh --vary epilogue=1,2 \
      experiments/tests/attn_bwd_ab.yaml .gpu/t/E/kernel_templates > "$r/ab_epilogue.txt" 2>&1
    mv "$r/ab.tgz" "$r/ab_epilogue.tgz" 2>/dev/null; ck
    ;;
  *) echo "usage: $0 prepare | call1 | call2 | call3 | call23" >&2; exit 2 ;;
esac
