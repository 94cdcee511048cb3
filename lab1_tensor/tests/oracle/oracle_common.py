"""What the two differential tests share (lab 1 vs NumPy, lab 2 vs PyTorch): the command line,
the campaign loop with shrinking and reporting, and a random factorisation of a size."""
import argparse
import json
import os
import tempfile
import time


def factor(n, r):
    """A random shape with n elements (a few dims, sometimes a 1 inserted)."""
    if n == 0:
        return r.choice([[0], [0, 2], [2, 0, 1]])
    dims, m = [], n
    for p in (2, 3, 5, 7):
        while m % p == 0:
            dims.append(p)
            m //= p
    if m > 1:
        dims.append(m)
    r.shuffle(dims)
    out = []
    for d in dims:
        if out and r.random() < 0.5:
            out[-1] *= d
        else:
            out.append(d)
    if r.random() < 0.3:
        out.insert(r.randint(0, len(out)), 1)
    return out


def arguments(doc, tool, unit, count, ops):
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--driver", required=True, help=f"path of {tool}")
    ap.add_argument("--seed", type=int, default=1, help="campaign seed (case i uses seed*1000003 + i)")
    ap.add_argument("--count", type=int, default=count, help=f"number of {unit}")
    ap.add_argument("--ops", type=int, default=ops, help="ops per case")
    ap.add_argument("--keep", help="write each failing (shrunk) case here as JSON")
    ap.add_argument("--no-shrink", action="store_true")
    return ap.parse_args()


# In a starter tree every case stops at a function not written yet: after this many cases, and
# none that got further, the campaign stops (it can say nothing more until those are written).
STARTER_CASES = 20


def campaign(args, label, unit, generate, compare, shrink, describe, to_json, size):
    """Runs args.count cases; prints each mismatch shrunk, then one summary line. Returns the
    exit status (0: every case agrees). generate(seed, ops) returns a case or None (invalid).
    A case that stops at a function not implemented yet (MLS_TODO) is counted, not shrunk; the
    first such message is printed once, and a campaign whose first STARTER_CASES cases all stop
    so ends there."""
    if not os.path.exists(args.driver):
        print(f"SKIPPED: driver {args.driver} is not built")
        return 0
    failures, n_ops, t0 = 0, 0, time.time()
    not_implemented, cases = 0, 0
    with tempfile.TemporaryDirectory(prefix="mls-oracle-") as tmp:
        for i in range(args.count):
            seed = args.seed * 1_000_003 + i
            case = generate(seed, args.ops)
            if case is None:
                continue
            n_ops += size(case)
            cases += 1
            bad = compare(args.driver, case, tmp)
            if not bad:
                continue
            failures += 1
            todo = next((str(w) for w in bad if "not implemented" in str(w)), None)
            if todo is not None:
                not_implemented += 1
                if not_implemented == 1:
                    print(f"{unit[:-1]} {i} (seed {seed}) stops at a function not implemented yet: {todo[:300]}")
                if not_implemented == cases == STARTER_CASES:
                    print(f"the first {cases} {unit} all stop at functions not implemented yet: stopping here")
                    break
                continue
            small = case if args.no_shrink else shrink(args.driver, case, tmp)
            why = compare(args.driver, small, tmp) or bad
            print(f"MISMATCH {unit[:-1]} {i} (seed {seed}), {size(case)} ops shrunk to {size(small)}:")
            print(describe(small))
            for w in why[:6]:
                print(f"  -> {w}")
            if args.keep:
                os.makedirs(args.keep, exist_ok=True)
                with open(os.path.join(args.keep, f"{label.replace(' ', '')}_seed{seed}.json"), "w") as f:
                    json.dump({"case": to_json(small), "mismatch": why}, f, indent=1)
    todo = f", {not_implemented} of them at a function not implemented yet" if not_implemented else ""
    print(f"{label} oracle: {cases} of {args.count} {unit}, {n_ops} ops, seed {args.seed}: {failures} mismatching"
          f"{todo} ({time.time() - t0:.1f} s)")
    return 1 if failures else 0
