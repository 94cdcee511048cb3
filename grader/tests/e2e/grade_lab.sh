#!/bin/bash
# End-to-end differential grading of one lab (CTest `grader e2e: lab N`, labels grader and slow):
# a batch of three submissions, the reference solution's student files, an empty folder (the
# handout's MLS_TODO stubs) and the reference with one planted wrong value (planted.json), graded
# by `mls-grader grade --batch` with differential verdicts.
# The reference must score 100%; the stubs 0, except in groups the manifest marks `given` (code the
# handout gives complete; local_only groups are worth 0 points anyway); the planted bug must fail a
# test of its function's group whose feedback names the function and shows what it got and what
# was wanted within its first 5 lines (issue 27: feedback a student can act on).
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
planted_json=$(dirname "$0")/planted.json
mkdir -p "$work/batch/reference" "$work/batch/stubs" "$work/batch/planted"
python3 - "$manifest" "$root" "$work/batch" "$planted_json" "$lab" <<'PY'
import json, os, shutil, sys
m = json.load(open(sys.argv[1]))
root, batch, lab = sys.argv[2], sys.argv[3], sys.argv[5]
for rel in m["student_files"]:
    for sub in ("reference", "planted"):
        dst = os.path.join(batch, sub, rel)
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        shutil.copyfile(os.path.join(root, rel), dst)
plant = json.load(open(sys.argv[4]))[lab]
path = os.path.join(batch, "planted", plant["file"])
text = open(path).read()
at = text.find(plant["function"] + "(")
at = text.find(plant["find"], at) if at >= 0 else -1
if at < 0:
    sys.exit(f"planted.json: lab {lab}: '{plant['find']}' not found in {plant['function']} of {plant['file']}")
open(path, "w").write(text[:at] + plant["replace"] + text[at + len(plant["find"]):])
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
PLANTED_JSON=$planted_json python3 - "$work" "$lab" "$manifest" <<'PY'
import csv, json, sys, os, re
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
# The planted bug: some failed test of its function's group has feedback that names the function and
# shows the two values (got / want, or the submission's / the reference's) in its first 5 lines.
plant = json.load(open(os.environ["PLANTED_JSON"]))[lab]
groups = [g["name"] for g in json.load(open(manifest))["groups"] if plant["function"] in g.get("functions", [])]
p = os.path.join(work, "results", "planted", "results.json")
failed = []
if os.path.exists(p):
    failed = [t for t in json.load(open(p)).get("tests", [])
              if (t.get("tags") or ["?"])[0] in groups and t.get("score", 0) < t.get("max_score", 0)]
def says_it(t):
    head = "\n".join(t.get("output", "").splitlines()[:5])
    two_values = re.search(r"got .*\bwant\b|want .*\bgot\b|expected .*\bgot\b|submission.*reference", head, re.S)
    return head if plant["names"] in head and two_values else None
if not groups:
    bad.append(f"planted: {plant['function']} is in no group's functions")
elif not failed:
    bad.append(f"planted: no test of {groups} failed with the planted bug in {plant['function']}")
else:
    named = [(t, says_it(t)) for t in failed if says_it(t)]
    if not named:
        head = "\n".join(failed[0].get("output", "").splitlines()[:5])
        bad.append(f"planted: none of the {len(failed)} failed test(s) of {groups} names '{plant['names']}' and shows "
                   f"got/want within 5 lines; the first says:\n" + head)
    else:
        t, head = named[0]
        print(f"planted bug in {plant['function']}: {len(failed)} test(s) of {groups} failed, {len(named)} naming it; "
              f"'{t.get('name')}' says:\n  " + head.replace("\n", "\n  "))
if bad:
    print("FAIL lab " + lab + ":\n  " + "\n  ".join(bad[:60]))
    sys.exit(1)
print(f"lab {lab}: reference {ref['score']}/{ref['max_score']}, stubs {stub['score']} (given groups: {stub_given:g}): graded differentially")
PY
echo "lab $lab e2e grading (isolation $level): $((t1 - t0)) s"
