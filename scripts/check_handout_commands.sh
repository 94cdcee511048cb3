#!/usr/bin/env bash
# Runs the commands a lab's handout gives, as written, in a freshly generated handout tree: the
# fenced block that follows the line "<!-- handout commands: checked -->" in handouts/labN/README.md.
# Each command must succeed, or fail only the way a starter tree fails: with the "not implemented"
# of a function the student has not written yet (the tests, the demo, the grader's score).
# A command that is not found, a target that does not exist, a path that is wrong: FAILED.
#
#   scripts/check_handout_commands.sh N [MLS-GRADER]      (default: build/release/bin/mls-grader)
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
lab="${1:?usage: check_handout_commands.sh N [mls-grader]}"
grader="$(realpath "${2:-$root/build/release/bin/mls-grader}")"
readme="$root/handouts/lab$lab/README.md"
[ -f "$readme" ] || { echo "FAILED: no $readme"; exit 1; }

commands="$(awk '/<!-- handout commands: checked -->/ {marked = 1; next}
                 marked && /^```/ { if (inside) exit; inside = 1; next }
                 inside { print }' "$readme")"
[ -n "$commands" ] || { echo "FAILED: $readme has no block after '<!-- handout commands: checked -->'"; exit 1; }

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
"$grader" handout --lab "$lab" --out "$tmp/tree" >"$tmp/handout.log" 2>&1 || {
  echo "FAILED: mls-grader handout --lab $lab"; cat "$tmp/handout.log"; exit 1; }
cd "$tmp/tree"
export MLS_JOBS="${MLS_JOBS:-2}" CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-2}"

failed=0
while IFS= read -r line; do
  cmd="$(printf '%s' "$line" | sed -E 's/[[:space:]]+#[[:space:]].*$//')"
  [ -n "${cmd// /}" ] || continue
  start=$SECONDS
  out="$(timeout 900 bash -c "$cmd" 2>&1)"
  rc=$?
  if [ $rc -eq 0 ]; then
    verdict="ok"
  elif grep -q "not implemented" <<<"$out"; then
    verdict="ok (fails as a starter tree does: not implemented)"
  else
    verdict="FAILED (exit $rc)"
    failed=1
  fi
  printf '%-4ss  %s\n      %s\n' "$((SECONDS - start))" "$cmd" "$verdict"
  if [ "${verdict:0:6}" = "FAILED" ]; then
    tail -n 25 <<<"$out" | sed 's/^/      | /'
  fi
done <<<"$commands"

if [ $failed -ne 0 ]; then
  echo "lab $lab: a command of the handout fails in its generated tree"
  exit 1
fi
echo "lab $lab: every command of the handout works in its generated tree"
