#!/usr/bin/env bash
# The text the repository ships (lab6_llm/data/tinyshakespeare_64k.txt) is what the write-up's text
# examples train on: mls-gpt trains on it (a few steps of `nano`), evaluates and samples from the
# checkpoint; a text file that does not exist is refused naming the shipped excerpt and where the
# whole tiny-shakespeare is.
# Usage: data_example.sh <path to mls-gpt> <repository root>
set -euo pipefail
gpt="$1"
data="$2/lab6_llm/data/tinyshakespeare_64k.txt"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
"$gpt" --threads 1 train --data "$data" --config nano --steps 10 --out "$tmp/run"
"$gpt" --threads 1 eval --ckpt "$tmp/run/ckpt.bin" --data "$data"
"$gpt" --threads 1 sample --ckpt "$tmp/run/ckpt.bin" --prompt "ROMEO:" -n 20 --seed 1
set +e
err=$("$gpt" --threads 1 train --data "$tmp/tinyshakespeare.txt" --config nano --steps 1 --out "$tmp/none" 2>&1)
rc=$?
set -e
echo "$err"
[ "$rc" -ne 0 ] || { echo "FAIL: a missing --data file was accepted"; exit 1; }
for s in "$tmp/tinyshakespeare.txt" "lab6_llm/data/tinyshakespeare_64k.txt" \
         "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt"; do
  grep -qF -- "$s" <<< "$err" || { echo "FAIL: the error for a missing --data file does not name $s"; exit 1; }
done
echo "OK: mls-gpt trains, evaluates and samples on the shipped text; a missing text names its source"
