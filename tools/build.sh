#!/usr/bin/env bash
# tools/build.sh: configures and builds flashtune into build/ (Ninja, RelWithDebInfo) after installing deps.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install_deps.sh
cuda_home=${CUDA_HOME:-/usr/local/cuda}
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCUDAToolkit_ROOT="$cuda_home" >/dev/null
cmake --build build -j "$(nproc)"
