#!/usr/bin/env bash
# Installs the Debian 12 packages mlsys-labs needs, skipping what is already there.
#   scripts/setup.sh            build + test dependencies
#   scripts/setup.sh --bench    also the peers of the Python comparison scripts (NumPy, PyTorch) and
#                               Chromium (the leaderboard page rendered headless)
#   scripts/setup.sh --fuzz     also clang's libFuzzer runtime
set -euo pipefail

# iproute2: `ip netns`, with which lab5_parallel/tests/multihost.sh emulates two hosts (label multihost).
# libcpp-httplib-dev, python3-requests, curl: lab 6's `mls-gpt serve` and its test with real clients
# (without cpp-httplib mls-gpt is built without the serve command; CMake says so).
# ccache: mls-grader's trusted reference builds (and so the handout checks and the end-to-end
# grading tests) reuse each other's objects through it; a student's build never uses it.
pkgs=(build-essential cmake ninja-build pkg-config git python3 python3-numpy
      libopenblas-dev catch2 libbenchmark-dev libcli11-dev nlohmann-json3-dev
      graphviz libopenmpi-dev openmpi-bin ccache iproute2 libcpp-httplib-dev python3-requests curl)
for arg in "$@"; do
  case "$arg" in
    --bench) pkgs+=(python3-torch chromium) ;;   # chromium: scripts/check_leaderboard.sh renders the page
    --fuzz) pkgs+=(clang libclang-rt-14-dev) ;;
    *) echo "setup.sh: unknown option '$arg' (expected --bench or --fuzz)" >&2; exit 2 ;;
  esac
done

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all packages present"
  exit 0
fi

sudo=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "setup: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
  sudo="sudo"
fi
echo "setup: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
