#!/usr/bin/env bash
# docs/branches/h-50-calls.sh: session 50's device calls (issue 21). Prepared here:
# FT_PACK_TESTS="attn_bwd_gpu_test runtime_gpu_test" tools/gpu_pack.sh; .gpu/y/{d64r,d64ug,d64det}.yaml; .gpu/tB = kernel_templates
# with docs/branches/h-49-ranges128.patch applied; caches precompiled into .gpu/cache (`flashtune run Y
# --compile-only --arch sm_90a --cache .gpu/cache --templates DIR` for each yaml and folder run below).
#   callA  carry [".gpu", ".cache/fa4_1"]: what session 49 left unrun: PlantedMaskBugsAreCaught and TwoRunsAreBitwiseEqual (with the
#          128-row deterministic rerun); h-49-ranges128 A/B (d64 b2 h32 8k, block_m 128, 3 rounds); unit_group, tail
#          and dq_order at the 128-row d64 tile (2 rounds each); runtime_gpu_test (the sm_90a built-in fallbacks)
#   callB  carry [".cache/fa4_2"]: the torch tests over an empty export (the built-in fallbacks); the standings beside
#          cuDNN and FlashAttention-4; the GPT-OSS step
#   callC  carry [".gpu"]: the runtime's sm_90a built-in fallbacks against the mma.sync ones, end to end through torch
#   callD  carry [".gpu"]: after the windowed fallbacks: runtime_gpu_test, the torch tests (empty export), GPT-OSS pair
# Each call rewrites $OUT/callX.tgz after every step (the device tool returns ~8 files of a call).
set -uo pipefail
cd "$(dirname "$0")/../.."
ck() { tar czf "$OUT/.c.tgz" -C "$OUT" r && mv "$OUT/.c.tgz" "$OUT/$1.tgz"; }
out=/tmp/w; mkdir -p "$out" "$OUT/r"; r=$OUT/r
ab() {  # ab NAME TIMEOUT ROUNDS ARGS...: one gpu_ab.sh run into $r/NAME
  local n=$1 t=$2 k=$3; shift 3; mkdir -p "$r/$n"
  ROUNDS=$k FT_GPU_WORK=$out/$n OUT=$r/$n timeout "$t" bash tools/gpu_ab.sh "$@" > "$r/$n/table.txt" 2>&1
  echo "ab $n rc=$?" >> "$r/rc.txt"
}
case "${1:-}" in
  callA)
    nvidia-smi --query-gpu=name,uuid,power.limit,clocks.max.sm --format=csv > "$r/gpu.txt"
    (source tools/gpu_env.sh
     timeout 150 $bin/attn_bwd_gpu_test --gtest_filter='*PlantedMaskBugsAreCaught*:*TwoRuns*' > "$r/tests.log" 2>&1
     echo "bwd tests rc=$?" >> "$r/rc.txt"); ck callA
    ab ranges 170 3 .gpu/y/d64r.yaml kernel_templates .gpu/tB; ck callA
    ab ug 80 2 --vary unit_group=1,2,4 .gpu/y/d64ug.yaml kernel_templates; ck callA
    ab det 50 2 --vary dq_order=1,2 .gpu/y/d64det.yaml kernel_templates; ck callA
    (source tools/gpu_env.sh; timeout 90 $bin/runtime_gpu_test > "$r/runtime.log" 2>&1; echo "runtime rc=$?" >> "$r/rc.txt")
    ck callA; ab tail 50 2 --vary tail=1,2 .gpu/y/d64ug.yaml kernel_templates; ck callA; rm -rf "$r"
    ;;
  callB)
    # carry [".cache/fa4_2"] right after callA (carry [".gpu", ".cache/fa4_1"]) on the warm machine
    nvidia-smi --query-gpu=name,uuid,power.limit,clocks.max.sm --format=csv > "$r/gpu.txt"
    (source tools/gpu_env.sh
     # the torch tests over an empty export: every stage a built-in fallback (sm_90a: the TMA forward, fused backward)
     (cd python && FLASHTUNE_NO_FASTPATH=1 FLASHTUNE_LIBRARY="$OLDPWD/$bin/lib/libflashtune_runtime.so" \
       FLASHTUNE_CONFIGS="$OLDPWD/.gpu/y/empty.json" PYTHONPATH="$OLDPWD/python" \
       timeout 150 python3 -m unittest -v tests.test_torch_gpu) > "$r/torch_empty.log" 2>&1
     echo "torch empty rc=$?" >> "$r/rc.txt"; ck callB
     y=experiments/tests/attn_bwd_standings.yaml
     timeout 110 $bin/flashtune run $y --db "$out/st.sqlite" > "$r/standings.log" 2>&1; echo "standings rc=$?" >> "$r/rc.txt"
     timeout 70 $bin/flashtune peers $y --peers sdpa_cudnn --db "$out/st.sqlite" > "$r/peers.log" 2>&1
     echo "peers rc=$?" >> "$r/rc.txt"
     $bin/flashtune query peers --db "$out/st.sqlite" > "$r/query_peers.txt" 2>&1; cp "$out/st.sqlite" "$r/"; ck callB
     source tools/fa4_unpack.sh && {
       timeout 140 $bin/flashtune peers $y --peers fa4 --db "$out/st.sqlite" > "$r/peers_fa4.log" 2>&1
       echo "fa4 peers rc=$?" >> "$r/rc.txt"
       $bin/flashtune query peers --db "$out/st.sqlite" > "$r/query_peers.txt" 2>&1; cp "$out/st.sqlite" "$r/"; }
     ck callB
     timeout 90 $bin/flashtune run experiments/attention/gpt_oss_step.yaml --db "$out/go.sqlite" > "$r/gpt_oss.log" 2>&1
     echo "gpt_oss rc=$?" >> "$r/rc.txt"; $bin/flashtune query backward --db "$out/go.sqlite" > "$r/go_backward.txt" 2>&1
     ck callB); rm -rf "$r"
    ;;
  callC)
    # carry [".gpu"] (.gpu/y/old_fallbacks.json: the mma.sync fallbacks as file entries for these shapes): the
    # runtime's untuned path end to end through torch, the sm_90a fallbacks (empty export) against the old ones
    nvidia-smi --query-gpu=name,uuid,power.limit,clocks.max.sm --format=csv > "$r/gpu.txt"
    (source tools/gpu_env.sh
     export FLASHTUNE_LIBRARY="$PWD/$bin/lib/libflashtune_runtime.so" FLASHTUNE_NO_FASTPATH=1
     for shape in "gptoss" "d128nc --batch 2 --heads-q 16 --heads-kv 16 --seq-q 8192 --head-dim 128 --no-causal --window 0 --no-learned-sinks" \
                  "d64c --batch 2 --heads-q 32 --heads-kv 32 --seq-q 8192 --head-dim 64 --window 0 --no-learned-sinks"; do
       set -- $shape; n=$1; shift
       for c in empty old_fallbacks; do
         timeout 80 python3 python/bench/attention_e2e.py --configs .gpu/y/$c.json --samples 30 --warmup 5 --host-calls 50 \
           --no-first-launch --out "$r/e2e_${n}_$c.json" "$@" > "$r/e2e_${n}_$c.log" 2>&1; echo "e2e $n $c rc=$?" >> "$r/rc.txt"
         ck callC
       done
     done); rm -rf "$r"
    ;;
  callD)
    # carry [".gpu"] (repacked with runtime_gpu_test after the windowed fallbacks): callC's GPT-OSS pair again, the
    # runtime's GPU tests and the torch tests over the empty export
    nvidia-smi --query-gpu=name,uuid,power.limit,clocks.max.sm --format=csv > "$r/gpu.txt"
    (source tools/gpu_env.sh
     timeout 60 $bin/runtime_gpu_test > "$r/runtime.log" 2>&1; echo "runtime rc=$?" >> "$r/rc.txt"; ck callD
     (cd python && FLASHTUNE_NO_FASTPATH=1 FLASHTUNE_LIBRARY="$OLDPWD/$bin/lib/libflashtune_runtime.so" \
       FLASHTUNE_CONFIGS="$OLDPWD/.gpu/y/empty.json" PYTHONPATH="$OLDPWD/python" \
       timeout 90 python3 -m unittest -v tests.test_torch_gpu) > "$r/torch_empty.log" 2>&1
     echo "torch empty rc=$?" >> "$r/rc.txt"; ck callD
     export FLASHTUNE_LIBRARY="$PWD/$bin/lib/libflashtune_runtime.so" FLASHTUNE_NO_FASTPATH=1
     for c in empty old_fallbacks; do
       timeout 60 python3 python/bench/attention_e2e.py --configs .gpu/y/$c.json --samples 30 --warmup 5 --host-calls 50 \
         --no-first-launch --out "$r/e2e_gptoss_$c.json" > "$r/e2e_gptoss_$c.log" 2>&1; echo "e2e gptoss $c rc=$?" >> "$r/rc.txt"
       ck callD
     done); rm -rf "$r"
    ;;
  callE)
    # carry [".gpu"] (repacked at 03cf6b5, the way's score counting built-in stages): callD's tests alone
    nvidia-smi --query-gpu=name,uuid --format=csv > "$r/gpu.txt"
    (source tools/gpu_env.sh
     timeout 50 $bin/runtime_gpu_test > "$r/runtime.log" 2>&1; echo "runtime rc=$?" >> "$r/rc.txt"; ck callE
     (cd python && FLASHTUNE_NO_FASTPATH=1 FLASHTUNE_LIBRARY="$OLDPWD/$bin/lib/libflashtune_runtime.so" \
       FLASHTUNE_CONFIGS="$OLDPWD/.gpu/y/empty.json" PYTHONPATH="$OLDPWD/python" \
       timeout 60 python3 -m unittest -v tests.test_torch_gpu) > "$r/torch_empty.log" 2>&1
     echo "torch empty rc=$?" >> "$r/rc.txt"; ck callE); rm -rf "$r"
    ;;
  *) echo "usage: $0 callA | callB | callC | callD | callE" >&2; exit 2 ;;
esac
