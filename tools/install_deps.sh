#!/usr/bin/env bash
# tools/install_deps.sh: installs what flashtune needs to build on Debian 12 / Ubuntu 24.04 (idempotent:
# installs only missing packages). The CUDA toolkit (NVRTC, headers) is expected at /usr/local/cuda.
set -euo pipefail
pkgs=(g++ cmake ninja-build git libboost-program-options-dev libsqlite3-dev libeigen3-dev libyaml-cpp-dev
      nlohmann-json3-dev libgtest-dev libmuparser-dev
      openmpi-bin                             # mpirun, for the shard test
      gnuplot-nox chromium-headless-shell)    # report's plots; its test loads the page headless (a Debian
                                              # package; Ubuntu ships chromium only as a snap)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "installing: ${missing[*]}"
  sudo_cmd=""; [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
cuda_home=${CUDA_HOME:-/usr/local/cuda}
if [ ! -e "$cuda_home/include/nvrtc.h" ]; then
  echo "error: the CUDA toolkit (nvrtc.h) was not found under $cuda_home; install it or set CUDA_HOME" >&2
  exit 1
fi
