#!/usr/bin/env bash
# mls-gpt train --ep: the MoE GPT with its experts sharded over simulated ranks (expert
# parallelism x data parallelism) prints its table, the single-rank run over the union batch with
# the same final loss and drops and parameters within float32 rounding, and the two ratio lines;
# --accum, --remat and --data (generated text) the same, the gathered checkpoint resumed on one rank;
# every conflicting flag is a clear error.
# Usage: ep_command.sh <path to mls-gpt>
set -euo pipefail
gpt="$1"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
moe="--config nano --moe-experts 4 --moe-top-k 2 --capacity-factor 1"
out=$("$gpt" --threads 1 train $moe --ep 2 --backend sim --steps 10 --out "$tmp/run" 2>&1)
grep -q "^expert parallelism: 2 ranks (sim), config nano: 4 experts (2 per rank), top-2" <<< "$out" ||
  { echo "FAIL: no header"; printf '%s\n' "$out"; exit 1; }
line=$(grep "^single rank over the union batch" <<< "$out") || { echo "FAIL: no comparison"; printf '%s\n' "$out"; exit 1; }
ep_loss=$(printf '%s\n' "$line" | sed -E 's/.*final loss ([0-9.]+) \(EP ([0-9.]+)\).*/\1 \2/')
set -- $ep_loss
[ "$1" = "$2" ] || { echo "FAIL: final losses differ: $line"; exit 1; }
grep -Eq "dropped ([0-9]+) \(EP \1\)" <<< "$line" || { echo "FAIL: drops differ: $line"; exit 1; }
rel=$(printf '%s\n' "$line" | sed -E 's/.*relative ([0-9.e+-]+) .*/\1/')
awk -v r="$rel" 'BEGIN { exit !(r < 5e-5) }' || { echo "FAIL: parameters differ by $rel"; exit 1; }
grep -Eq "^ratio ep_step_vs_single [0-9.]+$" <<< "$out" || { echo "FAIL: no ratio ep_step_vs_single"; exit 1; }
grep -Eq "^ratio ep_exchange_share [0-9.]+$" <<< "$out" || { echo "FAIL: no ratio ep_exchange_share"; exit 1; }
grep -q "^parameters per rank: 146112 (experts 112032; one rank holds 258144, experts 224064" <<< "$out" ||
  { echo "FAIL: the experts are not sharded"; printf '%s\n' "$out"; exit 1; }
for f in ckpt.bin moe.csv moe.svg; do [ -s "$tmp/run/$f" ] || { echo "FAIL: no $f"; exit 1; }; done
[ "$(wc -l < "$tmp/run/moe.csv")" = 11 ] || { echo "FAIL: moe.csv has not 10 steps"; exit 1; }
same() {  # same <what> <args...>: the EP run equals the single-rank one (losses, drops, parameters)
  local what="$1"
  shift
  local o l
  o=$("$gpt" --threads 1 train $moe --ep 2 --backend sim --steps 6 --out "$tmp/x" "$@" 2>&1) || { echo "FAIL: $what: $o"; exit 1; }
  l=$(grep "^single rank over the union batch" <<< "$o") || { echo "FAIL: $what: $o"; exit 1; }
  set -- $(printf '%s\n' "$l" | sed -E 's/.*final loss ([0-9.]+) \(EP ([0-9.]+)\).*/\1 \2/')
  [ "$1" = "$2" ] || { echo "FAIL: $what: final losses differ: $l"; exit 1; }
  r=$(printf '%s\n' "$l" | sed -E 's/.*relative ([0-9.e+-]+) .*/\1/')
  awk -v r="$r" 'BEGIN { exit !(r < 5e-5) }' || { echo "FAIL: $what: parameters differ by $r"; exit 1; }
}
same "--accum 2" --batch 4 --accum 2
same "--remat sqrt" --remat sqrt
awk 'BEGIN { srand(3); for (i = 0; i < 3000; i++) printf "%s%s", substr("abcdefgh", int(rand() * 8) + 1, 1), (rand() < 0.2 ? " " : "") }' > "$tmp/text.txt"
same "--data" --data "$tmp/text.txt"
bf=$("$gpt" --threads 1 train $moe --ep 2 --steps 3 --precision bf16 --out "$tmp/bf" 2>&1) || { echo "FAIL: bf16: $bf"; exit 1; }
grep -q "bf16 (fp32 master)" <<< "$bf" && grep -q "(bf16 rounding)" <<< "$bf" ||
  { echo "FAIL: bf16 run: $bf"; exit 1; }
# The gathered checkpoint of EP 2 continues on one rank (--ep 1: the single-rank step) from step 5.
"$gpt" --threads 1 train $moe --ep 2 --steps 5 --out "$tmp/half" > /dev/null
res=$("$gpt" --threads 1 train $moe --ep 1 --batch 8 --steps 10 --resume "$tmp/half/ckpt.bin" --out "$tmp/res" 2>&1)
grep -Eq "^ +9 +[0-9.]+ " <<< "$res" || { echo "FAIL: no resumed steps 5..9: $res"; exit 1; }
grep -Eq "^ +0 +[0-9.]+ " <<< "$res" && { echo "FAIL: the resumed run restarted at step 0: $res"; exit 1; }
expect_error() {  # expect_error <message part> <args...>
  local want="$1"
  shift
  if err=$("$gpt" "$@" 2>&1); then echo "FAIL: '$*' succeeded"; exit 1; fi
  grep -qF -- "$want" <<< "$err" || { echo "FAIL: '$*' said: $err (expected '$want')"; exit 1; }
}
expect_error "train --ep 3: --moe-experts 4 is not divisible by the expert-parallel group's 3 ranks" train $moe --ep 3 --steps 1
expect_error "train --ep 2: a dense model (--moe-experts 0)" train --config nano --ep 2 --steps 1
expect_error "train --ep 2 with --zero 1: expert parallelism runs with plain data parallelism" train $moe --ep 2 --zero 1 --steps 1
expect_error "train --ep: accum = 3 with batch = 4, expected accum >= 1 dividing the rows per rank" train $moe --ep 2 --accum 3 --steps 1
expect_error "train --ep 2 with --autodiff: lab 2's tape runs every expert on one rank" train $moe --ep 2 --autodiff --steps 1
expect_error "train --ep 2 with --stop-after: not an option of expert-parallel runs" train $moe --ep 2 --stop-after 1 --steps 1
expect_error "the checkpoint is at step 5, expected fewer than --steps 5" train $moe --ep 2 --steps 5 --resume "$tmp/half/ckpt.bin" --out "$tmp/y"
expect_error "train --ep 2 with --ranks 4: the expert-parallel group is every rank" train $moe --ep 2 --ranks 4 --steps 1
expect_error "train --ep 2 --backend nccl: expected sim or mpi" train $moe --ep 2 --backend nccl --steps 1
expect_error "x.txt" train $moe --ep 2 --data x.txt --steps 1
expect_error "train --ep 0: expected 1..64 ranks" train $moe --ep 0 --steps 1
expect_error "train --ep 2 with --overlap: expected the blocking collectives" train $moe --ep 2 --overlap --steps 1
echo "OK: mls-gpt train --ep shards the experts, equals the single-rank run (also with --accum, --remat, --data), resumes on one rank and prints its ratios; conflicting flags are clear errors"
