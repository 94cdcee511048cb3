#!/usr/bin/env bash
# Runs the commands a lab's handout gives, as written, in a freshly generated handout tree: the
# fenced block that follows the line "<!-- handout commands: checked -->" in handouts/labN/README.md.
# Each command must succeed, or fail only the way a starter tree fails: with the "not implemented"
# of a function the student has not written yet (the tests, the demo, the grader's score).
# A command that is not found, a target that does not exist, a path that is wrong: FAILED.
#
#   scripts/check_handout_commands.sh N [MLS-GRADER]      (default: build/release/bin/mls-grader)
#   scripts/check_handout_commands.sh --static N BUILD   (no handout build: every target the block
#       builds exists in BUILD, every program it runs is built there, every script it names exists,
#       every CTest label it selects has tests; a few seconds, for every lab in CI)
set -uo pipefail
if [ "${1:-}" = "--static" ]; then
  lab="${2:?usage: check_handout_commands.sh --static N BUILD}"
  build="$(realpath "${3:?usage: check_handout_commands.sh --static N BUILD}")"
  root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
  readme="$root/handouts/lab$lab/README.md"
  commands="$(awk '/<!-- handout commands: checked -->/ {marked = 1; next}
                   marked && /^```/ { if (inside) exit; inside = 1; next }
                   inside { print }' "$readme")"
  [ -n "$commands" ] || { echo "FAILED: $readme has no block after '<!-- handout commands: checked -->'"; exit 1; }
  targets="$(ninja -C "$build" -t targets all 2>/dev/null | sed 's/:.*//')"
  failed=0
  say() { echo "FAILED: $1"; failed=1; }
  while IFS= read -r line; do
    cmd="$(printf '%s' "$line" | sed -E 's/[[:space:]]+#[[:space:]].*$//')"
    set -- $cmd
    [ $# -gt 0 ] || continue
    first="${1#./}"
    shift
    set -- "$first" "$@"
    case "$1" in
      cmake)
        if [ "${2:-}" = "--build" ]; then
          shift
          while [ $# -gt 0 ] && [ "$1" != "--target" ]; do shift; done
          [ $# -gt 0 ] && shift
          for t in "$@"; do
            grep -qx -- "$t" <<<"$targets" || say "lab $lab: the handout builds '$t', which is no target of this project"
          done
        fi ;;
      ctest)
        label="$(sed -nE 's/.*-L[[:space:]]+([^[:space:]]+).*/\1/p' <<<"$cmd")"
        if [ -n "$label" ] && [ "$(ctest --test-dir "$build" -N -L "$label" | grep -c 'Test *#')" -eq 0 ]; then
          say "lab $lab: 'ctest -L $label' selects no test"
        fi ;;
      build/release/*)
        prog="$(basename "$1")"
        if ! grep -qx -- "$prog" <<<"$targets"; then
          echo "note: lab $lab: $prog is an optional part not configured here (e.g. CUDA): not checked"
        elif [ ! -x "$build/${1#build/release/}" ]; then
          say "lab $lab: the handout runs $1, which the build does not make (${build}/${1#build/release/})"
        fi ;;
      /usr/bin/python3)
        [ -f "$root/$2" ] || say "lab $lab: the handout runs $2, which does not exist" ;;
      *)
        [ -e "$root/$1" ] || say "lab $lab: the handout runs $1, which does not exist" ;;
    esac
    # Arguments that name build outputs (a test program given to run_mpi.sh, a build folder).
    for a in "${@:2}"; do
      case "$a" in
        build/release/*/*) [ -e "$build/${a#build/release/}" ] || say "lab $lab: '$a' is not made by the build" ;;
      esac
    done
  done <<<"$commands"
  if [ $failed -eq 0 ]; then echo "lab $lab: every target, program and script the handout names exists"; fi
  exit $failed
fi
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
