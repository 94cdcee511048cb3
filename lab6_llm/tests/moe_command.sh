#!/usr/bin/env bash
# mls-gpt with a mixture of experts: train writes the utilisation report (moe.csv, moe.svg; also under
# --remat and --autodiff), info
# prints active vs total parameters and FLOPs per token, sample runs through the MoE blocks with
# the KV cache (the same tokens as without it: capacity 2 * 2 * T / 4 = T drops nothing), and the
# bad flags and an MoE checkpoint loaded as a dense model are clear errors.
# Usage: moe_command.sh <path to mls-gpt>
set -euo pipefail
gpt="$1"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export XDG_CACHE_HOME="$tmp/cache"  # the peak cache of this run only
moe="--moe-experts 4 --moe-top-k 2 --moe-every 1 --capacity-factor 2"
out=$("$gpt" --threads 1 train --task sort --steps 4 $moe --out "$tmp/run" 2>/dev/null)
grep -Eq "^moe: last step tokens per expert \[[0-9]+ [0-9]+ [0-9]+ [0-9]+\], dropped" <<< "$out" ||
  { echo "FAIL: no utilisation line"; printf '%s\n' "$out"; exit 1; }
[ -s "$tmp/run/moe.svg" ] && [ -s "$tmp/run/moe.csv" ] || { echo "FAIL: moe.svg or moe.csv missing"; exit 1; }
[ "$(head -n 1 "$tmp/run/moe.csv")" = "step,dropped_fraction,balance_loss,tokens_e0,tokens_e1,tokens_e2,tokens_e3" ] ||
  { echo "FAIL: moe.csv header"; exit 1; }
[ "$(wc -l < "$tmp/run/moe.csv")" -eq 5 ] || { echo "FAIL: moe.csv rows"; exit 1; }
# Under --remat each block's forward records its routing (the same steps, bit for bit: the same
# report); under --autodiff the fused forward on the step's batch routes as the tape does.
"$gpt" --threads 1 train --task sort --steps 4 $moe --remat sqrt --out "$tmp/remat" > /dev/null 2>&1
cmp -s "$tmp/run/moe.csv" "$tmp/remat/moe.csv" || { echo "FAIL: --remat's moe.csv differs from the plain run's"; exit 1; }
"$gpt" --threads 1 train --task sort --steps 4 $moe --autodiff --out "$tmp/tape" > /dev/null 2>&1
[ -s "$tmp/tape/moe.svg" ] && [ "$(wc -l < "$tmp/tape/moe.csv")" -eq 5 ] || { echo "FAIL: --autodiff: no utilisation report"; exit 1; }
[ "$(sed -n 2p "$tmp/run/moe.csv")" = "$(sed -n 2p "$tmp/tape/moe.csv")" ] || { echo "FAIL: --autodiff's first step routes otherwise"; exit 1; }
info=$("$gpt" info --ckpt "$tmp/run/ckpt.bin")
grep -Eq "active parameters [0-9]+ of [0-9]+" <<< "$info" || { echo "FAIL: info: active parameters"; exit 1; }
grep -q "^moe FLOPs/token: forward" <<< "$info" || { echo "FAIL: info: FLOPs per token"; exit 1; }
cached=$("$gpt" sample --ckpt "$tmp/run/ckpt.bin" --prompt "315042=" -n 20 --greedy 2>/dev/null)
recomputed=$("$gpt" sample --ckpt "$tmp/run/ckpt.bin" --prompt "315042=" -n 20 --greedy --no-kv-cache 2>/dev/null)
[ "$cached" = "$recomputed" ] || { echo "FAIL: KV cache '$cached' vs recompute '$recomputed'"; exit 1; }
[ "${#cached}" -eq 27 ] || { echo "FAIL: ${#cached} characters, expected 27"; exit 1; }
expect_error() {  # expect_error <message part> <args...>
  local want="$1"
  shift
  if err=$("$gpt" "$@" 2>&1); then echo "FAIL: '$*' succeeded"; exit 1; fi
  grep -qF -- "$want" <<< "$err" || { echo "FAIL: '$*' said: $err (expected '$want')"; exit 1; }
}
expect_error "moe_top_k = 5, expected 1..moe_experts = 4" train --task sort --steps 1 --moe-experts 4 --moe-top-k 5 --out "$tmp/bad"
expect_error "capacity_factor = 0, expected a finite value > 0" train --task sort --steps 1 --moe-experts 4 --capacity-factor 0 --out "$tmp/bad"
expect_error "moe_every = 4, expected 1..n_layer = 3" train --task sort --steps 1 --moe-experts 4 --moe-every 4 --out "$tmp/bad"
expect_error "the run asks for a dense model (moe_experts = 0)" train --task sort --steps 1 --init-from "$tmp/run/ckpt.bin" --out "$tmp/bad"
expect_error "export llm.c: an MoE model (moe_experts = 4) has no llm.c layout" export --ckpt "$tmp/run/ckpt.bin" --format llmc --out "$tmp/m.bin"
echo "OK: mls-gpt trains, reports, describes and samples an MoE model; bad MoE flags are clear errors"
