#!/usr/bin/env bash
# mls-gpt serve with real HTTP clients (Python requests and curl): trains a small char model on the
# shipped text, then serve_client.py starts the server on a free loopback port and checks
# streaming and non-streaming completions (greedy = mls-gpt sample --greedy), the error cases,
# cancellation, 1000 requests from 32 concurrent clients with random disconnects (the pool back to
# full, no request lost or answered twice) and the drain on SIGTERM (exit 0).
# Usage: serve_command.sh <path to mls-gpt> <path to serve_client.py>
set -euo pipefail
gpt="$1"
client="$2"
data="$(dirname "$client")/../data/tinyshakespeare_64k.txt"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export XDG_CACHE_HOME="$tmp/cache"
"$gpt" --threads 1 train --data "$data" --config nano --block-size 64 --steps 60 --out "$tmp/run" >/dev/null
command -v curl >/dev/null || { echo "FAIL: curl not found (scripts/setup.sh installs it)"; exit 1; }
/usr/bin/python3 -c "import requests" || { echo "FAIL: python3-requests not found (scripts/setup.sh installs it)"; exit 1; }
/usr/bin/python3 "$client" "$gpt" "$tmp/run/ckpt.bin" "$tmp"
