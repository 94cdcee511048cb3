#!/usr/bin/env bash
# mls-tune's worked examples as the handout runs them: `nests` prints the slide's three loop nests,
# `steps` the SGEMM template built up in six steps (with --run: compiled, each equal to step 1),
# and a bad size is refused by name.
# Usage: tune_cli.sh <path to mls-tune>
set -euo pipefail
tune="$1"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export MLS_JIT_CACHE="$tmp/jit"  # this run's compiled kernels only
nests=$("$tune" nests --n 16)
echo "$nests"
for want in "for y in range(16):" "C[yo*8 + yi][xo*8 + xi] += A[ko*8 + ki][yo*8 + yi] * B[ko*8 + ki][xo*8 + xi]" \
            "fused_gemm8x8_add(CL[0:8][0:8], AL[0:8][0:8], BL[0:8][0:8])" "dma_copy2d(C[yo*8:yo*8 + 8][xo*8:xo*8 + 8], CL[0:8][0:8])"; do
  grep -qF -- "$want" <<<"$nests" || { echo "FAIL: mls-tune nests does not print '$want'"; exit 1; }
done
steps=$("$tune" steps --m 24 --n 40 --k 19 --run --cpp 3)
echo "$steps"
[ "$(grep -c '^==== [1-6]\. ' <<<"$steps")" -eq 6 ] || { echo "FAIL: not six steps"; exit 1; }
grep -q "_regblock(" <<<"$steps" || { echo "FAIL: step 6 calls no micro-kernel"; exit 1; }
grep -q "mls_load<mls_f32x" <<<"$steps" || { echo "FAIL: step 3's C++ has no vector load"; exit 1; }
# Every compiled step equals step 1 within rounding (19 terms: a few float32 ulps of values <= 19).
bad=$(awk '/^step [1-6]: / { n++; err = $NF; if (err + 0 > 1e-4) print }' <<<"$steps")
[ -z "$bad" ] || { echo "FAIL: a step differs from step 1: $bad"; exit 1; }
[ "$(grep -c '^step [1-6]: ' <<<"$steps")" -eq 6 ] || { echo "FAIL: not six timed steps"; exit 1; }
if out=$("$tune" nests --n 12 2>&1); then echo "FAIL: nests --n 12 succeeded"; exit 1; fi
grep -qF "slide_steps: n 12 must be a positive multiple of 8" <<<"$out" || { echo "FAIL: $out"; exit 1; }
echo "OK: mls-tune nests and steps print the worked schedules, every compiled step equals step 1"
