#!/usr/bin/env bash
# tools/fa4_pack.sh: packs FlashAttention-4 (flash-attn-4 and its CuTe DSL wheels) for a GPU machine that has no
# network, so that `flashtune peers --peers fa4` can measure it there. Here (network, no GPU):
#   bash tools/fa4_pack.sh            -> .cache/fa4_1/ and .cache/fa4_2/ (ignored paths), each under 40 MB
# The wheels unpack to ~300 MB (~77 MB as tar.xz): more than one call's 64 MiB carry, so it travels in two calls
# on one warm machine (the device keeps ignored paths between calls while it stays warm, ~30 s idle):
#   call 1: carry [".cache/fa4_1"], command `true`
#   call 2: carry [".cache/fa4_2", ".gpu", ...], command `source tools/fa4_unpack.sh && ...flashtune peers ... fa4`
# tools/fa4_unpack.sh joins the parts into /tmp/fa4 and sets PYTHONPATH (it says which part is missing if the
# machine was not warm). Versions: FA4_VERSION (default 4.0.0b36) and the CuTe DSL 4.8.0 set it was measured with
# (docs/NOTES.md session 37); the pack is reused while .cache/fa4_1/VERSION matches.
set -euo pipefail
cd "$(dirname "$0")/.."
version=${FA4_VERSION:-4.0.0b36}
dsl=${FA4_DSL_VERSION:-4.8.0}
if [ -f .cache/fa4_1/VERSION ] && [ "$(cat .cache/fa4_1/VERSION)" = "$version $dsl" ] && [ -n "$(ls .cache/fa4_2/fa4.part.* 2>/dev/null)" ]; then
  echo "fa4_pack: .cache/fa4_1, .cache/fa4_2 already hold flash-attn-4 $version (CuTe DSL $dsl)"; exit 0
fi
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
# Python 3.12 wheels for the GPU machine's manylinux_2_28 x86_64 (its PyTorch 2.11 / CUDA 13).
python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 \
  --platform manylinux_2_28_x86_64 --dest "$work/wheels" \
  "flash-attn-4==$version" "nvidia-cutlass-dsl==$dsl" "nvidia-cutlass-dsl-libs-base==$dsl" \
  "nvidia-cutlass-dsl-libs-core==$dsl" "nvidia-cutlass-dsl-libs-cu13==$dsl" \
  cuda-bindings cuda-pathfinder apache-tvm-ffi torch-c-dlpack-ext quack-kernels einops \
  || { echo "fa4_pack: pip download failed (network, or a version that is not on PyPI)" >&2; exit 1; }
# Every wheel into one folder by zipfile (pip --target would let the libs wheels overwrite each other's shared
# nvidia_cutlass_dsl/ folder).
python3 - "$work/wheels" "$work/site" <<'PY'
import glob, sys, zipfile
for w in sorted(glob.glob(sys.argv[1] + "/*.whl")):
    zipfile.ZipFile(w).extractall(sys.argv[2])
PY
tar cJf "$work/fa4.tar.xz" -C "$work/site" .
rm -rf .cache/fa4_1 .cache/fa4_2 && mkdir -p .cache/fa4_1 .cache/fa4_2
size=$(stat -c %s "$work/fa4.tar.xz")
split -b $(( (size + 1) / 2 + 1 )) -d "$work/fa4.tar.xz" "$work/fa4.part."
mv "$work/fa4.part.00" .cache/fa4_1/ && mv "$work/fa4.part.01" .cache/fa4_2/
sha256sum "$work/fa4.tar.xz" | awk '{print $1}' > .cache/fa4_2/SHA256
echo "$version $dsl" > .cache/fa4_1/VERSION
du -sh .cache/fa4_1 .cache/fa4_2
