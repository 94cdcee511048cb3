#!/usr/bin/env bash
# `mls-gpt plan` prints the `mls-gpt train` command line of its plan: run that line as printed
# (2 steps) and check that mls-gpt parses it and runs the planned micro-batches, within the formula.
# Usage: plan_command.sh <path to mls-gpt>
set -euo pipefail
gpt="$1"
# mls-gpt train keeps the machine's FMA peak in $XDG_CACHE_HOME/mlsys-labs: this run's own folder
XDG_CACHE_HOME=$(mktemp -d)
export XDG_CACHE_HOME
trap 'rm -rf "$XDG_CACHE_HOME"' EXIT
plan=$("$gpt" plan --mem-budget 1MiB --ranks 2 --batch 8 --context 16)
echo "$plan"
line=$(printf '%s\n' "$plan" | sed -n 's/^  mls-gpt train /train /p')
[ -n "$line" ] || { echo "FAIL: no 'mls-gpt train' line in the plan"; exit 1; }
choice=$(printf '%s\n' "$plan" | sed -n 's/^choice: .*micro-batch \([0-9]*\) (\([0-9]*\) accumulation steps)$/\1 x accum \2/p')
[ -n "$choice" ] || { echo "FAIL: no choice line"; exit 1; }
# shellcheck disable=SC2086  # the printed line is split into its words, as a shell would
run=$("$gpt" $line --steps 2)
echo "$run"
grep -q "micro-batch $choice;" <<< "$run" || { echo "FAIL: the run is not micro-batch $choice"; exit 1; }
grep -q " yes " <<< "$run" || { echo "FAIL: no memory row matches the formula"; exit 1; }
if grep -q " NO " <<< "$run"; then echo "FAIL: a memory row does not match the formula"; exit 1; fi
echo "OK: the planned command runs micro-batch $choice"
