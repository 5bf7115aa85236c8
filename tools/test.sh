#!/usr/bin/env bash
# tools/test.sh: installs, builds and runs the whole test suite (cpu, slow; gpu tests skip without a GPU).
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/build.sh
ctest --test-dir build --output-on-failure -j "$(nproc)" "$@"
