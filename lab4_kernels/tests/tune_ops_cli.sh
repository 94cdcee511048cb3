#!/usr/bin/env bash
# mls-tune's operator subcommands end to end, as the handout runs them but tiny: a tuned
# E = D + (A + B) * C and a layernorm backward print their best knobs, loop nest and both ratio
# lines and record their trials by op name; bad shapes are refused by name.
# Usage: tune_ops_cli.sh <path to mls-tune>
set -euo pipefail
tune="$1"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export MLS_JIT_CACHE="$tmp/jit"  # this run's compiled kernels only
out=$("$tune" fused --n 5003 --trials 2 --db "$tmp/db.jsonl")  # its errors and progress on stderr
echo "$out"
for want in "best: block=" "loop nest of the best:" "ratio tuned_add_mul_add_vs_copy_5003_t1 " \
            "ratio tuned_add_mul_add_vs_fused_5003_t1 "; do
  grep -qF -- "$want" <<<"$out" || { echo "FAIL: mls-tune fused does not print '$want'"; exit 1; }
done
out=$("$tune" layernorm --rows 9 --cols 37 --backward --threads 2 --trials 2 --db "$tmp/db.jsonl")
echo "$out"
grep -qF "ratio tuned_layernorm_bwd_vs_fused_9x37_t2 " <<<"$out" || { echo "FAIL: no layernorm_bwd ratio"; exit 1; }
grep -q '"op":"add_mul_add"' "$tmp/db.jsonl" || { echo "FAIL: no add_mul_add record"; exit 1; }
grep -q '"op":"layernorm_bwd"' "$tmp/db.jsonl" || { echo "FAIL: no layernorm_bwd record"; exit 1; }
# --knobs measures one schedule (the others the default), --cpp prints its C++: the fused backward's
# two row sums in one loop, dweight's partial updated in dinp's loop.
out=$("$tune" layernorm --rows 8 --cols 40 --backward --threads 2 --knobs "blocks=2 onepass=1 colfuse=1" --cpp \
      --db "$tmp/db.jsonl")
for want in "blocks=2 colfuse=1" "error vs the hand-written kernel" "the C++ (te::generate_cpp)" \
            "ratio tuned_layernorm_bwd_vs_copy_8x40_t2 " "dweight_part[io][j] += "; do
  grep -qF -- "$want" <<<"$out" || { echo "FAIL: mls-tune layernorm --backward --knobs does not print '$want'"; echo "$out"; exit 1; }
done
if out=$("$tune" softmax --rows 4 --cols 8 --knobs "acc=3" --db "$tmp/db.jsonl" 2>&1); then
  echo "FAIL: acc=3 was measured"; exit 1
fi
grep -qF "softmax knobs: acc 3 is not one of 0, 1, 2, 4" <<<"$out" || { echo "FAIL: $out"; exit 1; }
if out=$("$tune" softmax --rows 4 --cols 8 --knobs "tile" --db "$tmp/db.jsonl" 2>&1); then
  echo "FAIL: --knobs tile was measured"; exit 1
fi
grep -qF "mls-tune softmax: --knobs field 'tile' is not name=value" <<<"$out" || { echo "FAIL: $out"; exit 1; }
if out=$("$tune" conv2d --h 3 --w 3 --kh 9 --pad 1 --trials 1 --db "$tmp/db.jsonl" 2>&1); then
  echo "FAIL: a 9x9 kernel on a 5x5 padded image was tuned"; exit 1
fi
grep -qF "tune conv2d: kernel 9x9 is larger than the padded image 5x5" <<<"$out" || { echo "FAIL: $out"; exit 1; }
echo "OK: mls-tune fused and layernorm --backward tune, print both ratio lines and record by op name; --knobs, --cpp"
