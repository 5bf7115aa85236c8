#!/usr/bin/env bash
# tools/quickstart.sh: installs, builds and runs the quick-start experiment into db/flashtune.sqlite.
# Without a GPU the run is compile-only (every config is compiled for sm_90a and recorded).
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/build.sh
./build/harness/cli/flashtune run experiments/quickstart.yaml "$@"
./build/harness/cli/flashtune query runs
./build/harness/cli/flashtune query best   # empty after a compile-only run: nothing was timed
