# tools/gpu_env.sh: sourced on the GPU machine from the repository root, after tools/gpu_pack.sh's .gpu/ arrived:
# the environment the packed binaries run in. Needs `out` (a work folder) set; sets `bin` (.gpu/bin),
# LD_LIBRARY_PATH (CUDA's, then the packed libraries), FLASHTUNE_CACHE_DIR (${FT_GPU_CACHE:-$out/cache}, filled from
# .gpu/cache when the pack has one) and FLASHTUNE_LIBRARY (the packed runtime library, for python/flashtune), links
# the source tree's absolute path to this checkout (the test binaries were built with it) and puts the CLI at the
# build tree's path (the CLI tests start it there). Used by gpu_run.sh and gpu_ab.sh.
export LD_LIBRARY_PATH="/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
export FLASHTUNE_CACHE_DIR="${FT_GPU_CACHE:-$out/cache}"  # FT_GPU_WORK=$OUT/w FT_GPU_CACHE=/tmp/c: logs survive a cut-off call
# A compile cache filled here beforehand (FLASHTUNE_CACHE_DIR=.gpu/cache flashtune run --compile-only
# --arch sm_90a ...; keys include the NVRTC version) saves the device's time.
if [ -d .gpu/cache ]; then mkdir -p "$FLASHTUNE_CACHE_DIR" && cp -r .gpu/cache/. "$FLASHTUNE_CACHE_DIR"/; fi
src=$(cat .gpu/source_dir.txt)
if [ "$src" != "$(pwd)" ] && [ ! -e "$src" ]; then mkdir -p "$(dirname "$src")" && ln -s "$(pwd)" "$src"; fi
bin=.gpu/bin
export LD_LIBRARY_PATH="$(pwd)/$bin/lib:$LD_LIBRARY_PATH"
export FLASHTUNE_LIBRARY="$(pwd)/$bin/lib/libflashtune_runtime.so"
if [ ! -x build/harness/cli/flashtune ]; then mkdir -p build/harness/cli && cp "$bin/flashtune" build/harness/cli/; fi
