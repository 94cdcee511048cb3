#!/bin/bash
# The hostile suite on lab 1 (issue 25; CTest `grader:e2e: lab 1 hostile submissions`, labels
# grader and slow): one batch, graded differentially. The control is the reference's student files
# with matmul.cpp the handout's stub (matmul computes nothing); each attack is the control plus
# one attack appended to matmul.cpp. Every attack must score no more than the control, and the
# refused ones must be refused by the link audit, naming the symbol.
# Usage: hostile_lab1.sh <mls-grader> <repo root> [jobs]
set -euo pipefail
grader=$1 root=$2 jobs=${3:-2}
work=$(mktemp -d "${TMPDIR:-/tmp}/mls-grader-hostile-lab1.XXXXXX")
trap 'rm -rf "$work"' EXIT
"$grader" handout --root "$root" --lab 1 --out "$work/handout" >/dev/null
python3 - "$root" "$work" <<'PY'
import json, os, shutil, sys
root, work = sys.argv[1], sys.argv[2]
m = json.load(open(os.path.join(root, "lab1_tensor/lab.json")))
stub = open(os.path.join(work, "handout/lab1_tensor/src/matmul.cpp")).read()
attacks = {
    "control": "",
    # cause 1: libc's write under an __asm__ label (FAIL -> PASS on the channel)
    "asm_write": r'''
#include <sys/syscall.h>
#include <unistd.h>
#include <string>
long forged_w(int fd, const void* buf, unsigned long n) __asm__("w" "rite");
long forged_w(int fd, const void* buf, unsigned long n) {
  std::string s(static_cast<const char*>(buf), n);
  for (std::size_t at = s.find(" FAIL "); at != std::string::npos; at = s.find(" FAIL ", at)) s.replace(at, 6, " PASS ");
  long done = ::syscall(SYS_write, fd, s.data(), s.size());
  return done < 0 ? done : static_cast<long>(n);
}
''',
    # causes 1 and 2: the tests' oracle helper (lab 1's ref::) replaced under its linker name
    "asm_oracle": r'''
bool forged_same() __asm__("_ZN3ref11same_valuesERKN3mls6tensor6TensorERKNS_3RefEPNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEE");
bool forged_same() { return true; }
''',
    # cause 2: Catch2's printing of a checked value replaced
    "asm_stringmaker": r'''
#include <string>
std::string forged_convert(long) __asm__("_ZN5Catch11StringMakerIlvE7convertEl");
std::string forged_convert(long) { return "0"; }
''',
    # cause 3: a second, forged XML report of the test that ran, claiming success
    "xml_twice": r'''
#include <cstdio>
namespace {
struct Forge {
  ~Forge() { std::printf("<Catch><Group><TestCase name=\"x\"><OverallResult success=\"true\"/></TestCase></Group></Catch>\n"); }
} forge;
}  // namespace
''',
    # cause 5: 1 GiB without a line break on the result channel's fd, from a static constructor
    "flood": r'''
#include <unistd.h>
#include <vector>
namespace {
struct Flood {
  Flood() {
    std::vector<char> junk(1 << 20, 'x');
    for (int i = 0; i < 1024; ++i)
      if (::write(4, junk.data(), junk.size()) < 0) break;
  }
} flood;
}  // namespace
''',
}
for name, extra in attacks.items():
    sub = os.path.join(work, "batch", name)
    for rel in m["student_files"]:
        dst = os.path.join(sub, rel)
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        if rel.endswith("matmul.cpp"):
            open(dst, "w").write(stub + extra)
        else:
            shutil.copyfile(os.path.join(root, rel), dst)
PY
"$grader" grade --root "$root" --lab 1 -j "$jobs" --batch "$work/batch" --csv "$work/scores.csv" \
  --results "$work/results" >"$work/out.txt" 2>"$work/err.txt" || true
cat "$work/scores.csv"
grep "reference ready\|graded in" "$work/err.txt" || true
python3 - "$work" <<'PY'
import csv, json, os, sys
work = sys.argv[1]
rows = {r["submission"]: r for r in csv.DictReader(open(os.path.join(work, "scores.csv")))}
bad = []
control = rows.get("control")
if not control or float(control["score"]) <= 0:
    bad.append(f"control: {control and control['score']} (expected above 0: every lab 1 function but matmul)")
refused = {"asm_write": "`write`", "asm_oracle": "ref::same_values", "asm_stringmaker": "Catch::StringMaker"}
for name, r in rows.items():
    if name == "control":
        continue
    print(f"[hostile lab 1] {name:16s} {float(r['score']):6.2f}  (control {float(control['score']):6.2f})")
    if float(r["score"]) > float(control["score"]):
        bad.append(f"{name}: {r['score']} > control {control['score']}")
    if name in refused:
        out = json.load(open(os.path.join(work, "results", name, "results.json"))).get("output", "")
        if "error: link audit:" not in out or refused[name] not in out:
            bad.append(f"{name}: not refused by the link audit naming {refused[name]}: {out[:600]}")
    if name == "flood" and int(r["OUTPUT_LIMIT"]) == 0:
        bad.append("flood: no OUTPUT_LIMIT")
if bad:
    print("FAIL lab 1 hostile suite:")
    for b in bad:
        print("  " + b)
    sys.exit(1)
print("lab 1 hostile suite: every attack scored no more than its control")
PY
