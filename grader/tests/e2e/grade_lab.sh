#!/bin/bash
# End-to-end differential grading of one lab (CTest `grader e2e: lab N`, labels grader and slow):
# a batch of two submissions, the reference solution's student files and an empty folder (the
# handout's MLS_TODO stubs), graded by `mls-grader grade --batch` with differential verdicts.
# The reference must score 100%; the stubs 0, except in groups the manifest marks `given` (code the
# handout gives complete; local_only groups are worth 0 points anyway).
# Usage: grade_lab.sh <mls-grader> <repo root> <lab number> [jobs] [isolation]
# isolation: "machine" (the default: the strongest level the machine permits) or "uid" (the level of
# a root without namespaces, e.g. a Docker container without CAP_SYS_ADMIN, forced with
# MLS_GRADER_ISOLATION=uid: no PID namespace, so each run of a test has another pid; it needs
# root, and prints SKIPPED otherwise). MLS_GRADER_ISOLATION set by the caller is kept.
set -euo pipefail
grader=$1 root=$2 lab=$3 jobs=${4:-2} level=${5:-machine}
case "$level" in
  machine) ;;
  uid)
    if [ "$(id -u)" -ne 0 ]; then
      echo "SKIPPED: the uid isolation level needs root (mls-grader drops each test to a reserved uid); run as root to check it"
      exit 0
    fi
    export MLS_GRADER_ISOLATION=uid ;;
  *) echo "grade_lab.sh: isolation must be 'machine' or 'uid', got '$level'" >&2; exit 2 ;;
esac
work=$(mktemp -d "${TMPDIR:-/tmp}/mls-grader-e2e-lab$lab.XXXXXX")
trap 'rm -rf "$work"' EXIT
manifest=$(ls "$root"/lab${lab}_*/lab.json)
mkdir -p "$work/batch/reference" "$work/batch/stubs"
python3 - "$manifest" "$root" "$work/batch/reference" <<'PY'
import json, os, shutil, sys
m = json.load(open(sys.argv[1]))
for rel in m["student_files"]:
    dst = os.path.join(sys.argv[3], rel)
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    shutil.copyfile(os.path.join(sys.argv[2], rel), dst)
PY
t0=$(date +%s)
"$grader" grade --root "$root" --lab "$lab" -j "$jobs" --batch "$work/batch" --csv "$work/scores.csv" \
  --results "$work/results" >"$work/out.txt" 2>"$work/err.txt" || rc=$?
# Exit 1: a test of some submission did not pass (the stubs' do); anything else is an error.
[ "${rc:-0}" -le 1 ] || { echo "FAIL: mls-grader exited ${rc}"; cat "$work/out.txt" "$work/err.txt"; exit 1; }
t1=$(date +%s)
cat "$work/scores.csv"
grep -q "preparing the reference of lab $lab" "$work/err.txt" || { echo "FAIL: not graded differentially"; cat "$work/err.txt"; exit 1; }
grep -m1 "isolation: " "$work/err.txt" | cut -c1-120
if [ "$level" = uid ] && ! grep -q "isolation: uid " "$work/err.txt"; then
  echo "FAIL: graded at another isolation level than uid"; grep -m1 "isolation: " "$work/err.txt"; exit 1
fi
grep "reference ready\|graded in" "$work/err.txt" || true
python3 - "$work" "$lab" "$manifest" <<'PY'
import csv, json, sys, os
work, lab, manifest = sys.argv[1], sys.argv[2], sys.argv[3]
given = {g["name"] for g in json.load(open(manifest))["groups"] if g.get("given")}
rows = {r["submission"]: r for r in csv.DictReader(open(os.path.join(work, "scores.csv")))}
bad = []
ref, stub = rows.get("reference"), rows.get("stubs")
if not ref or float(ref["score"]) != float(ref["max_score"]) or float(ref["max_score"]) <= 0:
    bad.append(f"reference: {ref and ref['score']} / {ref and ref['max_score']} (expected 100%)")
stub_given = 0.0
for name in ("reference", "stubs"):
    p = os.path.join(work, "results", name, "results.json")
    if not os.path.exists(p):
        bad.append(f"{name}: no results.json")
        continue
    for t in json.load(open(p)).get("tests", []):
        score, top, group = t.get("score", 0), t.get("max_score", 0), (t.get("tags") or ["?"])[0]
        if name == "reference" and score != top:
            bad.append(f"{name}: {t.get('name')}: {score}/{top}: {t.get('output', '')[:400]}")
        if name == "stubs" and score > 0:
            if group in given: stub_given += score  # code the handout gives complete
            else: bad.append(f"{name}: {t.get('name')}: {score}/{top} (a stub must score 0)")
if not stub or abs(float(stub["score"]) - stub_given) > 0.01:  # the CSV has 2 decimals
    bad.append(f"stubs: {stub and stub['score']} (expected {stub_given:g}: the given groups {sorted(given)} only)")
if bad:
    print("FAIL lab " + lab + ":\n  " + "\n  ".join(bad[:60]))
    sys.exit(1)
print(f"lab {lab}: reference {ref['score']}/{ref['max_score']}, stubs {stub['score']} (given groups: {stub_given:g}): graded differentially")
PY
echo "lab $lab e2e grading (isolation $level): $((t1 - t0)) s"
