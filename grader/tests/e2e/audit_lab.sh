#!/bin/bash
# The reference of lab N observes the same in every run at the `uid` isolation level (CTest
# `grader:audit: lab N ...`, labels grader, slow and labN; issue 27). At that level (root without
# namespaces: a Docker container without CAP_SYS_ADMIN) a test has no PID namespace, so each run has
# another pid, besides its own TMPDIR and addresses: an observation that carries a pid, a temporary
# path, an address, a time or a thread order differs between two runs of the reference, and the
# test is UNUSABLE (a label differs: it scores NO_RESULT for everyone) or compared loosely (a value
# differs). `mls-grader audit --no-predictable --fail-on nondeterministic` runs each of the
# reference's tests twice with one salt and exits 1 on either, naming what differed.
# Needs root (the uid level drops each test to a reserved uid): prints SKIPPED otherwise.
# Usage: audit_lab.sh <mls-grader> <repo root> <lab number> [jobs [more audit arguments...]]
# (CTest passes `--in-tree --build-dir <its build folder>`: the tests already built there, no
# second build of the reference.)
set -euo pipefail
grader=$1 root=$2 lab=$3 jobs=${4:-2}
shift $(( $# < 4 ? $# : 4 ))
if [ "$(id -u)" -ne 0 ]; then
  echo "SKIPPED: the uid isolation level needs root (mls-grader drops each test to a reserved uid); run as root to check it"
  exit 0
fi
work=$(mktemp -d "${TMPDIR:-/tmp}/mls-grader-audit-lab$lab.XXXXXX")
trap 'rm -rf "$work"' EXIT
t0=$(date +%s)
MLS_GRADER_ISOLATION=uid "$grader" audit --root "$root" --lab "$lab" -j "$jobs" --no-predictable \
  --fail-on nondeterministic "$@" >"$work/out.txt" 2>"$work/err.txt" || rc=$?
t1=$(date +%s)
head -n1 "$work/out.txt" | cut -c1-120
grep -q "^isolation: uid " "$work/out.txt" || { echo "FAIL: audited at another isolation level than uid"; cat "$work/out.txt" "$work/err.txt"; exit 1; }
grep "^lab $lab: \|^audit: " "$work/out.txt" || true
if [ "${rc:-0}" -ne 0 ]; then
  echo "FAIL: mls-grader audit exited ${rc} (1: unusable, weak or nondeterministic tests, below)"
  grep -E -A1 "^  (UNUSABLE|WEAK) " "$work/out.txt" | head -40 || true
  grep -E "^  .*[0-9] nondeterministic|^      nondeterministic: " "$work/out.txt" | head -60 || true
  tail -n 20 "$work/err.txt"
  exit 1
fi
echo "lab $lab audit at the uid level: $((t1 - t0)) s"
