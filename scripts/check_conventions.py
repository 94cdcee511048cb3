#!/usr/bin/env python3
"""Checks the one naming scheme and layout every lab follows (README, "Layout"):

  folder labN_<word>  ->  headers include/mls/<word>/  ->  namespace mls::<word>  ->  library mls_<word>

plus: every student file (lab.json "student_files") opens with the student-file line, every lab
folder has a README.md, and every handout has a "Your tasks" table. Prints each violation with
its file and line; exit status 1 if there is any. Usage: scripts/check_conventions.py [ROOT]
"""
import json
import os
import re
import sys

root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), ".."))
problems = []


def problem(path, line, text):
    problems.append(f"{os.path.relpath(path, root)}:{line}: {text}")


def student_line(n):
    return f"// Student file of lab {n}: write the bodies between the SOLUTION markers (mls-grader grades this file)."


NAMESPACE = re.compile(r"^\s*namespace\s+([A-Za-z_][\w:]*(?:::inline\s+\w+)?(?:::\w+)*)\s*(?:\{|=)")

labs = sorted(d for d in os.listdir(root) if re.fullmatch(r"lab\d_\w+", d) and os.path.isdir(os.path.join(root, d)))
for lab in labs:
    n, word = int(lab[3]), lab[5:]
    base = os.path.join(root, lab)
    # headers: include/mls/<word>/ and nothing else
    inc = os.path.join(base, "include", "mls")
    if os.path.isdir(inc):
        for d in sorted(os.listdir(inc)):
            if d != word:
                problem(os.path.join(inc, d), 0, f"headers of {lab} belong in include/mls/{word}/, not include/mls/{d}/")
    else:
        problem(base, 0, f"no include/mls/{word}/ folder")
    # library target and its alias
    cm = os.path.join(base, "CMakeLists.txt")
    if os.path.exists(cm):
        text = open(cm, encoding="utf-8").read()
        if not re.search(rf"add_library\(mls_{word}\b", text):
            problem(cm, 0, f"the library of {lab} is the target mls_{word}")
        if not re.search(rf"add_library\(mls::{word} ALIAS mls_{word}\)", text):
            problem(cm, 0, f"the library of {lab} has the alias mls::{word}")
    # namespaces of the library code (include/, src/, tools/, bench/): mls::<word>[::...]
    for sub in ("include", "src", "tools", "bench"):
        for dirpath, _, files in os.walk(os.path.join(base, sub)):
            for f in files:
                if not f.endswith((".hpp", ".cpp", ".cu", ".cuh", ".h")):
                    continue
                path = os.path.join(dirpath, f)
                for i, line in enumerate(open(path, encoding="utf-8", errors="replace"), 1):
                    m = NAMESPACE.match(line)
                    if not m:
                        continue
                    name = re.sub(r"\s+", " ", m.group(1))
                    if not name.startswith("mls"):
                        continue  # a local alias or a helper namespace inside a file
                    ok = re.fullmatch(rf"mls::(inline )?{word}(::\w+)*", name)
                    if not ok:
                        problem(path, i, f"namespace {name}: code of {lab} lives in mls::{word}")
    # tests: a named test namespace is <word>_test
    for dirpath, _, files in os.walk(os.path.join(base, "tests")):
        for f in files:
            if not f.endswith((".hpp", ".cpp")):
                continue
            path = os.path.join(dirpath, f)
            for i, line in enumerate(open(path, encoding="utf-8", errors="replace"), 1):
                m = re.match(r"^namespace\s+(\w+)_tests?\s*\{", line) or re.match(r"^namespace\s+(lab\d\w*)\s*\{", line)
                if m and line.split()[1] != f"{word}_test":
                    problem(path, i, f"test namespace {line.split()[1]}: the tests of {lab} use {word}_test")
    # README of the folder, manifest's student files
    if not os.path.exists(os.path.join(base, "README.md")):
        problem(base, 0, "no README.md")
    manifest = os.path.join(base, "lab.json")
    if os.path.exists(manifest):
        m = json.load(open(manifest, encoding="utf-8"))
        for rel in m.get("student_files", []):
            path = os.path.join(root, rel)
            if not os.path.exists(path):
                problem(manifest, 0, f"student file {rel} does not exist")
                continue
            first = open(path, encoding="utf-8").readline().rstrip("\n")
            if first != student_line(n):
                problem(path, 1, f"a student file opens with the line: {student_line(n)}")
    handout = os.path.join(root, "handouts", f"lab{n}", "README.md")
    if not os.path.exists(handout):
        problem(handout, 0, "no handout")
    elif not re.search(r"^#+ Your tasks", open(handout, encoding="utf-8").read(), re.M):
        problem(handout, 0, 'the handout has no "Your tasks" table')

for p in problems:
    print(p)
print(f"check_conventions: {len(labs)} labs, {len(problems)} problem(s)")
sys.exit(1 if problems else 0)
