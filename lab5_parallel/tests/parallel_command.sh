#!/usr/bin/env bash
# mls-parallel as the handout runs it: --mode schedule draws both schedules (GPipe above 1F1B in
# one SVG, with each stage's peak of live micro-batches) and --schedule picks one; a mesh that
# does not fit the model is refused before any rank starts, naming the flag, its value and what
# fits (exit status 1, no stack trace); a flag of another mode is refused, not ignored.
# Usage: parallel_command.sh <path to mls-parallel>
set -euo pipefail
tool="$1"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

out=$("$tool" --mode schedule -p 4 -m 8 --svg "$tmp/both.svg")
echo "$out"
grep -q "^gpipe, p = 4, m = 8$" <<< "$out" || { echo "FAIL: no gpipe timeline"; exit 1; }
grep -q "^1f1b, p = 4, m = 8$" <<< "$out" || { echo "FAIL: no 1f1b timeline"; exit 1; }
grep -q "^peak live micro-batches per stage: 8 8 8 8$" <<< "$out" || { echo "FAIL: no gpipe peak"; exit 1; }
grep -q "^peak live micro-batches per stage: 4 3 2 1$" <<< "$out" || { echo "FAIL: no 1f1b peak"; exit 1; }
grep -q "gpipe: p = 4, m = 8, bubble 0.273" "$tmp/both.svg" || { echo "FAIL: the SVG has no gpipe panel"; exit 1; }
grep -q "1f1b: p = 4, m = 8, bubble 0.273" "$tmp/both.svg" || { echo "FAIL: the SVG has no 1f1b panel"; exit 1; }
boxes=$(grep -o 'rx="3"' "$tmp/both.svg" | wc -l)
[ "$boxes" -eq 128 ] || { echo "FAIL: $boxes step boxes in the SVG, expected 2 x 4 stages x 16 steps = 128"; exit 1; }

"$tool" --mode schedule -p 4 -m 8 --schedule 1f1b --svg "$tmp/one.svg" >/dev/null
grep -q "1f1b: p = 4" "$tmp/one.svg" || { echo "FAIL: --schedule 1f1b does not draw 1f1b"; exit 1; }
if grep -q "gpipe: p = 4" "$tmp/one.svg"; then echo "FAIL: --schedule 1f1b draws gpipe too"; exit 1; fi

# refused: exit 1, the message names what is wrong
refuse() {  # refuse "<expected text>" args...
  local want="$1"
  shift
  set +e
  err=$("$tool" "$@" 2>&1)
  rc=$?
  set -e
  echo "mls-parallel $*: $err"
  [ "$rc" -eq 1 ] || { echo "FAIL: mls-parallel $* exited $rc, expected 1"; exit 1; }
  grep -qF -- "$want" <<< "$err" || { echo "FAIL: the error does not say '$want'"; exit 1; }
  if grep -q "rank [0-9]* failed" <<< "$err"; then echo "FAIL: a rank started"; exit 1; fi
}
refuse "mls-parallel: --ranks 3 must divide --d-hidden 16" --mode tp --ranks 3
refuse "tensor-parallel sizes 1, 2, 4, 8 or 16 fit" --mode tp --ranks 3
refuse "--dims 1,3,1 (the default for --ranks 3): tp 3 must divide --d-hidden 16" --mode 3d --ranks 3
refuse "--batch 16 must split evenly over --ranks 3 data-parallel replicas" --mode dp --ranks 3
refuse "--micro 3 must divide the 16 rows of each data-parallel replica" --mode pp --ranks 4 --micro 3
refuse "--dims 1,3,1 makes 3 ranks, but there are 4" --mode 3d --ranks 4 --dims 1,3,1
refuse "--dims is for --mode 3d" --mode tp --ranks 2 --dims 1,2,1
refuse "-p is for --mode schedule" --mode pp -p 4
refuse "--mode schedule takes -p (stages) and -m (micro-batches), not --ranks" --mode schedule --ranks 4
refuse "--overlap is for --mode dp or 3d" --mode tp --ranks 2 --overlap

# --overlap: the same losses as the blocking run, buckets launched from inside backward
a=$("$tool" --mode dp --ranks 4 --micro 2 --bucket-bytes 64 --check --no-traffic --overlap)
echo "$a"
b=$("$tool" --mode dp --ranks 4 --micro 2 --bucket-bytes 64 --check --no-traffic)
grep -q "^mls-parallel: mode dp, .*, overlap$" <<< "$a" || { echo "FAIL: --overlap not in the header"; exit 1; }
grep -Eq "^overlap: [1-9][0-9]* gradient bucket" <<< "$a" || { echo "FAIL: no bucket launched inside backward"; exit 1; }
[ "$(grep '^step ' <<< "$a")" = "$(grep '^step ' <<< "$b")" ] || { echo "FAIL: --overlap changed the losses"; exit 1; }
grep -q "^check: .*(ok)$" <<< "$a" || { echo "FAIL: --overlap does not match the single-rank run"; exit 1; }
echo "OK: mls-parallel draws both schedules, names the flag of each refused mesh, and --overlap keeps the losses"
