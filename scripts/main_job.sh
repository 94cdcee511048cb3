#!/usr/bin/env bash
# The toolkit's main job, run by `scripts/mls run` after the build: a tour of every lab built.
set -euo pipefail
build="${1:?usage: main_job.sh BUILD_DIR}"
out="${MLS_OUT:-$build/out}"
mkdir -p "$out"
echo "== lab 1: strided tensors =="
"$build/bin/mls-tensor-demo" --out "$out"
