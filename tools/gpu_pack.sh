#!/usr/bin/env bash
# tools/gpu_pack.sh: packs what a bare GPU machine needs to run flashtune and its tests into .gpu/
# (stripped binaries + the non-system shared libraries they load; CUDA's own libraries are taken from the
# GPU machine's /usr/local/cuda/lib64). Built here on Debian 12, it runs on newer glibc (Ubuntu 24.04).
# Then, on the GPU machine, from the repository root: bash tools/gpu_run.sh [EXPERIMENT.yaml ...]
set -euo pipefail
cd "$(dirname "$0")/.."
[ -f build/build.ninja ] || bash tools/build.sh
# FT_PACK_TESTS given: only what is packed is built (the CLI, the runtime library and those tests; on a 2-core
# machine a whole build takes ~40 minutes), else every target.
if [ -n "${FT_PACK_TESTS:-}" ] && [ -z "${FT_PACK_ALL_TESTS:-}" ]; then
  # shellcheck disable=SC2086
  cmake --build build -j "$(nproc)" --target flashtune flashtune_runtime $FT_PACK_TESTS >/tmp/gpu_pack_build.log 2>&1 || {
    echo "gpu_pack: building flashtune, flashtune_runtime and FT_PACK_TESTS ($FT_PACK_TESTS) failed: $(grep -m1 -iE \
      'error|unknown target' /tmp/gpu_pack_build.log) (log: /tmp/gpu_pack_build.log)" >&2
    exit 2
  }
else
  cmake --build build -j "$(nproc)" >/dev/null
fi
rm -rf .gpu && mkdir -p .gpu/bin/lib
cp build/harness/cli/flashtune .gpu/bin/
# The GPU test binaries (CI runs the CPU ones); FT_PACK_ALL_TESTS=1 packs every test binary (past 64 MiB);
# FT_PACK_TESTS="attn_bwd_gpu_test cli_gpu_test ..." only those (a call's carry holds 64 MiB in all).
if [ -n "${FT_PACK_ALL_TESTS:-}" ]; then
  find build/tests -type f -name '*_test' -perm -u+x -exec cp {} .gpu/bin/ \;
elif [ -n "${FT_PACK_TESTS:-}" ]; then
  for t in $FT_PACK_TESTS; do
    f=$(find build/tests -type f -name "$t" -perm -u+x | head -1)
    [ -n "$f" ] || { echo "gpu_pack: FT_PACK_TESTS names $t, which build/tests does not have" >&2; exit 2; }
    cp "$f" .gpu/bin/
  done
else
  find build/tests -type f \( -name '*gpu*_test' -o -name 'gpu_*_test' \) -perm -u+x -exec cp {} .gpu/bin/ \;
fi
strip --strip-debug .gpu/bin/* 2>/dev/null || true
# Shared libraries that are neither the C/C++ runtime nor CUDA's: copy them beside the binaries.
for b in .gpu/bin/*; do if [ -f "$b" ]; then ldd "$b"; fi; done | awk '/=> \//{print $1" "$3}' | sort -u |
  while read -r name path; do
    case "$name" in
      libc.so*|libm.so*|libstdc++*|libgcc_s*|ld-linux*|libpthread*|libdl.so*|librt.so*|libcuda.so*|libnvrtc*|libcublas*|libcudart*) ;;
      *) cp -L "$path" .gpu/bin/lib/ ;;
    esac
  done
# The runtime library (python/flashtune loads it; FLASHTUNE_LIBRARY=.gpu/bin/lib/libflashtune_runtime.so).
cp build/runtime/libflashtune_runtime.so .gpu/bin/lib/ && strip --strip-debug .gpu/bin/lib/libflashtune_runtime.so
pwd > .gpu/source_dir.txt  # tests find experiments/ through this absolute path (FT_SOURCE_DIR)
du -sh .gpu | awk '{print "packed .gpu/: " $1}'
mib=$(( $(du -sb .gpu | awk '{print $1}') / 1048576 ))
if [ "$mib" -ge 60 ]; then
  echo "gpu_pack: .gpu/ holds $mib MiB, near or past a call's 64 MiB carry (with the cubin cache and anything else" \
       "carried): FT_PACK_TESTS=\"attn_bwd_gpu_test ...\" packs only the test binaries the call runs" >&2
fi
ls .gpu/bin/lib
