#!/usr/bin/env bash
# tools/gpu_run.sh: on the GPU machine, from the repository root with .gpu/ (tools/gpu_pack.sh) present:
# lists the GPU, runs every test binary but those in FT_GPU_SKIP_TESTS (default: the CPU-only
# experiments_compile_test, which CI runs; FT_GPU_TESTS="a_test b_test" runs only those), then each experiment given (default: the
# quick-start) into a fresh database, and prints the best configs. Logs are written to a work folder
# and packed into $OUT/gpu-logs.tgz (with gpu.sqlite beside it) when $OUT is set (the device tool).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${FT_GPU_WORK:-gpu-out}
rm -rf "$out" && mkdir -p "$out"
source tools/gpu_env.sh  # bin, LD_LIBRARY_PATH, FLASHTUNE_CACHE_DIR, the source path link
"$bin/flashtune" devices 2>&1 | tee "$out/devices.txt"
fails=0
for t in "$bin"/*_test; do
  name=$(basename "$t")
  case " ${FT_GPU_SKIP_TESTS:-experiments_compile_test} " in *" $name "*) echo "SKIP $name (in FT_GPU_SKIP_TESTS)"; continue ;; esac
  if [ -n "${FT_GPU_TESTS:-}" ]; then  # only these test binaries (names separated by spaces)
    case " $FT_GPU_TESTS " in *" $name "*) ;; *) continue ;; esac
  fi
  # Line-buffered, so that a call cut off mid-test still leaves the log of what ran; each binary under a
  # time limit (FT_GPU_TEST_TIMEOUT seconds, default 400) so that one hang does not eat the call.
  if timeout "${FT_GPU_TEST_TIMEOUT:-400}" stdbuf -oL -eL "$t" ${FT_GPU_GTEST_ARGS:-} >"$out/$name.log" 2>&1; then
    echo "PASS $name: $(grep -E '^\[  PASSED  \]' "$out/$name.log" | head -1) $(grep -E 'SKIPPED' "$out/$name.log" | head -1)"
  else
    fails=$((fails + 1)); echo "FAIL $name"; tail -40 "$out/$name.log"
  fi
done | tee "$out/tests.txt"
# The Python package's torch tests (python/tests/test_torch_gpu.py) over the packed runtime library and the test
# export; named python_torch_gpu in FT_GPU_TESTS / FT_GPU_SKIP_TESTS like a binary. They run twice: with the C++
# eager path (flashtune._fastpath, built here in place against this machine's torch; FLASHTUNE_EXPECT_FASTPATH=1
# makes a failed build a failed test) and with the ctypes path alone (FLASHTUNE_NO_FASTPATH=1).
py=python_torch_gpu
wanted=1
case " ${FT_GPU_SKIP_TESTS:-} " in *" $py "*) wanted=0 ;; esac
if [ -n "${FT_GPU_TESTS:-}" ]; then case " $FT_GPU_TESTS " in *" $py "*) ;; *) wanted=0 ;; esac; fi
if [ "$wanted" = 1 ]; then
  (cd python && MAX_JOBS=8 python3 setup.py build_ext --inplace) >"$out/fastpath_build.log" 2>&1 ||
    { echo "fastpath build failed:"; tail -30 "$out/fastpath_build.log"; }
  for mode in fastpath ctypes; do
    if [ "$mode" = fastpath ]; then env_mode="FLASHTUNE_EXPECT_FASTPATH=1"; else env_mode="FLASHTUNE_NO_FASTPATH=1"; fi
    if (cd python && env "$env_mode" FLASHTUNE_LIBRARY="$OLDPWD/$bin/lib/libflashtune_runtime.so" \
        FLASHTUNE_CONFIGS="$OLDPWD/tests/data/runtime_configs.json" PYTHONPATH="$OLDPWD/python" \
        timeout "${FT_GPU_TEST_TIMEOUT:-400}" python3 -m unittest -v tests.test_torch_gpu) >"$out/${py}_$mode.log" 2>&1; then
      echo "PASS ${py} ($mode): $(tail -1 "$out/${py}_$mode.log")"
    else
      echo "FAIL ${py} ($mode)"; tail -60 "$out/${py}_$mode.log"
    fi | tee -a "$out/tests.txt"
  done
fi
fails=$(grep -c '^FAIL' "$out/tests.txt" || true)
db="$out/gpu.sqlite"
[ -z "${OUT:-}" ] || db="$OUT/gpu.sqlite"  # trials land in $OUT as they are committed, even if the call is cut off
experiments=("$@")
[ ${#experiments[@]} -gt 0 ] || experiments=(experiments/quickstart.yaml)
for e in "${experiments[@]}"; do
  "$bin/flashtune" run "$e" --db "$db" 2>"$out/$(basename "$e" .yaml).trials.log" | tee -a "$out/runs.txt"
done
"$bin/flashtune" query best --db "$db" | tee "$out/best.txt"
echo "test binaries failed: $fails"
if [ -n "${OUT:-}" ]; then
  tar czf "$OUT/gpu-logs.tgz" --exclude=cache --exclude='gpu.sqlite*' -C "$out" .
fi
exit $((fails > 0))
