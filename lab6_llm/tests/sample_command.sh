#!/usr/bin/env bash
# mls-gpt sample past the model's context length: every requested token comes, the same with and
# without the KV cache, and the first line (stderr, before any text) says how many the cache
# serves and how many slide the window.
# Usage: sample_command.sh <path to mls-gpt>
set -euo pipefail
gpt="$1"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export XDG_CACHE_HOME="$tmp/cache"  # the peak cache of this run only
"$gpt" --threads 1 train --task sort --steps 2 --out "$tmp/run" >/dev/null
# block size 32, prompt 7 tokens: 25 from the cache, 15 past it
both=$("$gpt" sample --ckpt "$tmp/run/ckpt.bin" --prompt "315042=" -n 40 --seed 3 2>&1)
echo "$both"
first=$(printf '%s\n' "$both" | head -n 1)
[ "$first" = "sample: the model's context length (block size) is 32 tokens and the prompt has 7: the KV cache serves the first 25 of the 40 new tokens; the other 15 slide the context over the last 32 tokens, recomputing it for each (slower: as without the cache, the same tokens)" ] ||
  { echo "FAIL: the first line is not the note on the context length: $first"; exit 1; }
grep -Eq "^40 tokens, [0-9]+ tok/s \(KV cache\)$" <<< "$both" || { echo "FAIL: not 40 tokens"; exit 1; }
cached=$("$gpt" sample --ckpt "$tmp/run/ckpt.bin" --prompt "315042=" -n 40 --seed 3 2>/dev/null)
recomputed=$("$gpt" sample --ckpt "$tmp/run/ckpt.bin" --prompt "315042=" -n 40 --seed 3 --no-kv-cache 2>/dev/null)
[ "$cached" = "$recomputed" ] || { echo "FAIL: KV cache '$cached' vs recompute '$recomputed'"; exit 1; }
[ "${#cached}" -eq 47 ] || { echo "FAIL: ${#cached} characters, expected the prompt's 7 + 40"; exit 1; }
# Within the block nothing is said.
short=$("$gpt" sample --ckpt "$tmp/run/ckpt.bin" --prompt "315042=" -n 5 2>&1 >/dev/null)
if grep -q "context length" <<< "$short"; then echo "FAIL: a note within the block"; exit 1; fi
echo "OK: mls-gpt sample gives all 40 tokens past the block of 32, says so first, the same with and without the cache"
