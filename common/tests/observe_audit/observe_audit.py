#!/usr/bin/python3
"""The observation audit: every graded test case must record a strong observation.

Runs one lab's test program with MLS_OBSERVE_AUDIT=1 (the Catch main then prints
"[observe] <strong> strong, <weak> weak: <test name>" to stderr when each test case ends) and
fails, listing them, when a test case recorded no strong observation (a produced number, tensor
or string; a truth value alone is weak) and is not on the allow-list. An allow-listed test case
that does record a strong observation now is reported too, so the list does not go stale.

    observe_audit.py <test-program> <lab> <allow-list> [catch test spec...]

The allow-list holds one test case per line, "<lab> | <test name> | <reason>"; '#' starts a
comment line. Tests tagged [gpu] are left out by the caller's test spec (they skip without a GPU).
"""
import os
import re
import subprocess
import sys

LINE = re.compile(r"^\[observe\] (\d+) strong, (\d+) weak: (.*)$")


def read_allow_list(path, lab):
    allowed = {}
    with open(path, encoding="utf-8") as f:
        for n, raw in enumerate(f, 1):
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            parts = [p.strip() for p in line.split(" | ")]
            if len(parts) != 3 or not all(parts):
                sys.exit(f"{path}:{n}: expected '<lab> | <test name> | <reason>', got: {line}")
            if parts[0] == lab:
                allowed[parts[1]] = parts[2]
    return allowed


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    program, lab, allow_path, spec = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
    allowed = read_allow_list(allow_path, lab)
    env = dict(os.environ, MLS_OBSERVE_AUDIT="1")
    env.pop("MLS_GRADER_FD", None)
    run = subprocess.run([program, "--rng-seed", "1234", *spec], env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, errors="replace")
    counts = {}
    for line in run.stderr.splitlines():
        m = LINE.match(line)
        if m:
            strong, weak, name = int(m.group(1)), int(m.group(2)), m.group(3)
            s0, w0 = counts.get(name, (0, 0))
            counts[name] = (s0 + strong, w0 + weak)  # sections run a test case more than once
    if not counts:
        print(run.stdout[-4000:])
        print(run.stderr[-4000:])
        sys.exit(f"{lab}: {program} printed no '[observe]' lines (exit status {run.returncode})")
    weak = sorted(n for n, (s, _) in counts.items() if s == 0 and n not in allowed)
    stale = sorted(n for n in allowed if n in counts and counts[n][0] > 0)
    print(f"{lab}: {sum(1 for s, _ in counts.values() if s > 0)} of {len(counts)} test cases record a strong "
          f"observation; {sum(1 for n in allowed if n in counts)} allow-listed without one")
    if run.returncode != 0:
        print(f"note: {program} exited with status {run.returncode} (its failures are reported by the lab's own tests)")
    for n in weak:
        print(f"NO STRONG OBSERVATION: {n} ({counts[n][1]} weak)")
    for n in stale:
        print(f"ALLOW-LISTED BUT NOW STRONG (remove it from {os.path.basename(allow_path)}): {n}")
    if weak or stale:
        print("Record what the code under test produced next to the test's checks: "
              "mls::testing::observe(label, value, {rtol, atol}) with a label that names the function and the case, "
              "or MLS_OBSERVE(expression) (common/tests/include/mls/observe.hpp), "
              "or add the test to the allow-list with the reason it cannot have one.")
        sys.exit(1)


if __name__ == "__main__":
    main()
