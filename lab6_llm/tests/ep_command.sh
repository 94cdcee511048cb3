#!/usr/bin/env bash
# mls-gpt train --ep: the MoE GPT with its experts sharded over simulated ranks (expert
# parallelism x data parallelism) prints its table, the single-rank run over the union batch with
# the same final loss and drops and parameters within float32 rounding, and the two ratio lines;
# every conflicting flag is a clear error.
# Usage: ep_command.sh <path to mls-gpt>
set -euo pipefail
gpt="$1"
moe="--config nano --moe-experts 4 --moe-top-k 2 --capacity-factor 1"
out=$("$gpt" --threads 1 train $moe --ep 2 --backend sim --steps 10 2>&1)
printf '%s\n' "$out" | grep -q "^expert parallelism: 2 ranks (sim), config nano: 4 experts (2 per rank), top-2" ||
  { echo "FAIL: no header"; printf '%s\n' "$out"; exit 1; }
line=$(printf '%s\n' "$out" | grep "^single rank over the union batch") || { echo "FAIL: no comparison"; printf '%s\n' "$out"; exit 1; }
ep_loss=$(printf '%s\n' "$line" | sed -E 's/.*final loss ([0-9.]+) \(EP ([0-9.]+)\).*/\1 \2/')
set -- $ep_loss
[ "$1" = "$2" ] || { echo "FAIL: final losses differ: $line"; exit 1; }
printf '%s\n' "$line" | grep -Eq "dropped ([0-9]+) \(EP \1\)" || { echo "FAIL: drops differ: $line"; exit 1; }
rel=$(printf '%s\n' "$line" | sed -E 's/.*relative ([0-9.e+-]+) .*/\1/')
awk -v r="$rel" 'BEGIN { exit !(r < 5e-5) }' || { echo "FAIL: parameters differ by $rel"; exit 1; }
printf '%s\n' "$out" | grep -Eq "^ratio ep_step_vs_single [0-9.]+$" || { echo "FAIL: no ratio ep_step_vs_single"; exit 1; }
printf '%s\n' "$out" | grep -Eq "^ratio ep_exchange_share [0-9.]+$" || { echo "FAIL: no ratio ep_exchange_share"; exit 1; }
expect_error() {  # expect_error <message part> <args...>
  local want="$1"
  shift
  if err=$("$gpt" "$@" 2>&1); then echo "FAIL: '$*' succeeded"; exit 1; fi
  printf '%s\n' "$err" | grep -qF -- "$want" || { echo "FAIL: '$*' said: $err (expected '$want')"; exit 1; }
}
expect_error "train --ep 3: --moe-experts 4 is not divisible by the expert-parallel group's 3 ranks" train $moe --ep 3 --steps 1
expect_error "train --ep 2: a dense model (--moe-experts 0)" train --config nano --ep 2 --steps 1
expect_error "train --ep 2 with --zero 1: expert parallelism runs with plain data parallelism" train $moe --ep 2 --zero 1 --steps 1
expect_error "train --ep 2 with --accum 2: expected 1" train $moe --ep 2 --batch 4 --accum 2 --steps 1
expect_error "train --ep 2 with --remat sqrt: expected none" train $moe --ep 2 --remat sqrt --steps 1
expect_error "train --ep 2 with --ranks 4: the expert-parallel group is every rank" train $moe --ep 2 --ranks 4 --steps 1
expect_error "train --ep 2 with --precision bf16: expected fp32" train $moe --ep 2 --precision bf16 --steps 1
expect_error "train --ep 2 --backend nccl: expected sim or mpi" train $moe --ep 2 --backend nccl --steps 1
expect_error "train --ep 2 with --data x.txt: expected the synthetic stream" train $moe --ep 2 --data x.txt --steps 1
expect_error "train --ep 0: expected 1..64 ranks" train $moe --ep 0 --steps 1
expect_error "train --ep 2 with --overlap: expected the blocking collectives" train $moe --ep 2 --overlap --steps 1
echo "OK: mls-gpt train --ep equals the single-rank run and prints its ratios; conflicting flags are clear errors"
