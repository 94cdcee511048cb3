#!/usr/bin/env bash
# Runs the commands a lab's handout gives, as written, in a freshly generated handout tree: every
# fenced block that follows a line "<!-- handout commands: checked -->", first in the tree's own
# README.md (the student README `mls-grader handout` writes: build, test, one test by name, the
# grader), then in its write-up handouts/labN/README.md (the same build and test lines, then its
# tools); a command already run is not run again. A line ending in '\' goes on on the next line.
# Each command must succeed, or fail only the way a starter tree fails: with the "not implemented"
# of a function the student has not written yet (the demo, a tool, the grader's score). A `ctest`
# command is held to more: every test it reports failed (or not run: a program the block did not
# build) must have failed with "not implemented".
# A command that fails naming a path under the --out folder of an earlier command that failed so
# (a training run's checkpoint) is accepted too: it needs what that command writes.
# A command that is not found, a target that does not exist, a path that is wrong: FAILED.
# Where ccache is installed the builds use it (CCACHE_BASEDIR: the tree, so the handouts of
# several labs share the objects of the code they have in common); MLS_HANDOUT_CCACHE=0 turns it off.
#
#   scripts/check_handout_commands.sh N [MLS-GRADER]      (default: build/release/bin/mls-grader)
#   scripts/check_handout_commands.sh --static N BUILD   (no handout build: every target the blocks
#       build exists in BUILD, every program they run is built there, every script they name exists,
#       every CTest label they select has tests; a few seconds, for every lab in CI)
set -uo pipefail

# The checked commands of a Markdown file, one per line (continuations joined, comments cut).
checked_commands() {
  awk '{ t = $0; gsub(/^[ \t]+|[ \t]+$/, "", t) }
       inside && t ~ /^```/ { inside = 0; next }
       inside { print; next }
       t == "<!-- handout commands: checked -->" { marked = 1; next }
       marked && t ~ /^```/ { marked = 0; inside = 1 }' "$1" |
    awk '{ if (sub(/\\$/, "")) { line = line $0; next } print line $0; line = "" }' |
    sed -E 's/[[:space:]]+#[[:space:]].*$//; s/[[:space:]]+$//' | grep -v '^[[:space:]]*$'
}

if [ "${1:-}" = "--static" ]; then
  lab="${2:?usage: check_handout_commands.sh --static N BUILD}"
  build="$(realpath "${3:?usage: check_handout_commands.sh --static N BUILD}")"
  root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
  readme="$root/handouts/lab$lab/README.md"
  commands="$(checked_commands "$readme")"
  [ -n "$commands" ] || { echo "FAILED: $readme has no block after '<!-- handout commands: checked -->'"; exit 1; }
  targets="$(ninja -C "$build" -t targets all 2>/dev/null | sed 's/:.*//')"
  failed=0
  say() { echo "FAILED: $1"; failed=1; }
  while IFS= read -r cmd; do
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
    # Arguments that name build outputs (a test program given to run_mpi.sh, a build folder) or
    # files of the repository (a text given to --data).
    for a in "${@:2}"; do
      case "$a" in
        build/release/*/*) [ -e "$build/${a#build/release/}" ] || say "lab $lab: '$a' is not made by the build" ;;
        lab[0-9]_*/*) [ -e "$root/$a" ] || say "lab $lab: '$a' is no file of the repository" ;;
      esac
    done
  done <<<"$commands"
  if [ $failed -eq 0 ]; then echo "lab $lab: every target, program and script the handout names exists"; fi
  exit $failed
fi
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
lab="${1:?usage: check_handout_commands.sh N [mls-grader]}"
grader="$(realpath "${2:-$root/build/release/bin/mls-grader}")"
[ -f "$root/handouts/lab$lab/README.md" ] || { echo "FAILED: no $root/handouts/lab$lab/README.md"; exit 1; }

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
"$grader" handout --lab "$lab" --out "$tmp/tree" >"$tmp/handout.log" 2>&1 || {
  echo "FAILED: mls-grader handout --lab $lab"; cat "$tmp/handout.log"; exit 1; }
cd "$tmp/tree"
commands="$( (checked_commands README.md; checked_commands "handouts/lab$lab/README.md") | awk '!seen[$0]++')"
[ -n "$commands" ] || { echo "FAILED: neither README.md nor handouts/lab$lab/README.md of the handout has a checked block"; exit 1; }
export MLS_JOBS="${MLS_JOBS:-2}" CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-2}"
if [ "${MLS_HANDOUT_CCACHE:-1}" != 0 ] && command -v ccache >/dev/null 2>&1; then
  export CMAKE_C_COMPILER_LAUNCHER=ccache CMAKE_CXX_COMPILER_LAUNCHER=ccache CCACHE_BASEDIR="$tmp/tree"
fi

# The tests a ctest run reports failed or not run whose output does not say "not implemented"
# (the presets print a failed test's output after its result line).
ctest_bad_failures() {
  awk 'function flush() { if (bad && !ok) print name; bad = 0 }
       /^ *[0-9]+\/[0-9]+ Test +#[0-9]+: / { flush(); name = $0
         if ($0 ~ /\*\*\*(Failed|Exception|Timeout)|Not Run/) { bad = 1; ok = 0 }; next }
       /^ *Start +[0-9]+: / || /^[0-9]+% tests passed/ { flush(); next }
       bad && /not implemented/ { ok = 1 }
       END { flush() }'
}

# CPU seconds (user + system) of every child process that has ended, for the timings printed
# (`times` in this shell, not in a subshell: a fork starts with no children's time).
cpu_seconds() {
  times >"$tmp/times"
  awk 'NR == 2 { n = 0; for (i = 1; i <= 2; ++i) { split($i, a, /[ms]/); n += a[1] * 60 + a[2] }; printf "%d", n }' "$tmp/times"
}

failed=0
starter_outs=()
total=$SECONDS
cpu_seconds >"$tmp/cpu"; read -r total_cpu <"$tmp/cpu"
while IFS= read -r cmd; do
  start=$SECONDS
  cpu_seconds >"$tmp/cpu"; read -r start_cpu <"$tmp/cpu"
  out="$(timeout 900 bash -c "$cmd" </dev/null 2>&1)"  # stdin: mpirun would read the commands
  rc=$?
  bad=""
  if [ "${cmd%% *}" = ctest ]; then bad="$(ctest_bad_failures <<<"$out")"; fi
  # A path this command names (and its error names) under the --out folder of an earlier command
  # that failed as a starter tree does (e.g. the checkpoint of a training run).
  needs=""
  for a in $cmd; do
    for o in "${starter_outs[@]}"; do
      case "$a" in "$o" | "$o"/*) grep -qF -- "$a" <<<"$out" && needs="$a" ;; esac
    done
  done
  if [ -n "$bad" ]; then
    verdict="FAILED (exit $rc): tests that failed otherwise than 'not implemented' (or were not built)"
    failed=1
  elif [ $rc -eq 0 ]; then
    verdict="ok"
  elif grep -q "not implemented" <<<"$out"; then
    verdict="ok (fails as a starter tree does: not implemented)"
    out_dir="$(sed -nE 's/.*--out[[:space:]]+([^[:space:]]+).*/\1/p' <<<"$cmd")"
    if [ -n "$out_dir" ]; then starter_outs+=("$out_dir"); fi
  elif [ -n "$needs" ]; then
    verdict="ok (needs $needs, which an earlier command writes once the lab is done)"
  else
    verdict="FAILED (exit $rc)"
    failed=1
  fi
  cpu_seconds >"$tmp/cpu"; read -r now_cpu <"$tmp/cpu"
  printf '%4ss %5ss cpu  %s\n             %s\n' "$((SECONDS - start))" "$((now_cpu - start_cpu))" "$cmd" "$verdict"
  if [ "${verdict:0:6}" = "FAILED" ]; then
    if [ -n "$bad" ]; then sed 's/^/             | /' <<<"$bad"; fi
    tail -n 25 <<<"$out" | sed 's/^/             | /'
  fi
done <<<"$commands"

if [ $failed -ne 0 ]; then
  echo "lab $lab: a command of the handout fails in its generated tree ($((SECONDS - total)) s, $((now_cpu - total_cpu)) s cpu)"
  exit 1
fi
echo "lab $lab: every command of the handout works in its generated tree ($((SECONDS - total)) s, $((now_cpu - total_cpu)) s cpu)"
