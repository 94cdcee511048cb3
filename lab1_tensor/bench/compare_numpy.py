#!/usr/bin/python3
"""Times lab 1 operations in NumPy and in mlsys-labs (mls-tensor-ops), one thread each, and
prints one line per operation:  ratio <op> <ours / numpy time>   (<= 1.0: we are as fast or faster).

Run with Debian's Python and NumPy (apt-get install python3-numpy):
    /usr/bin/python3 lab1_tensor/bench/compare_numpy.py [--build build/release] [--repeat 10]
Both sides are timed the same way: best of --repeat runs after one warm-up, same shapes, float32.
OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE are unset for both sides (some machines set them to work
around old OpenBLAS bugs; they slow a current build down) and both run single-threaded.
"""
import argparse
import os
import subprocess
import sys
import time

os.environ["OPENBLAS_NUM_THREADS"] = "1"
os.environ.pop("OPENBLAS_CORETYPE", None)
os.environ.pop("OPENBLAS_L2_SIZE", None)
import numpy as np  # noqa: E402  (after the environment is set)


def numpy_cases(rng):
    f32 = np.float32
    cases = {}

    def add():
        a, b = rng.random(16 << 20, dtype=f32), rng.random(16 << 20, dtype=f32)
        return lambda: np.add(a, b)
    cases["add"] = add

    def mul_scalar():
        a = rng.random(16 << 20, dtype=f32)
        return lambda: a * f32(1.5)
    cases["mul_scalar"] = mul_scalar

    def exp():
        a = rng.random(4 << 20, dtype=f32)
        return lambda: np.exp(a)
    cases["exp"] = exp

    def compact_permute():
        p = rng.random((64, 64, 64, 64), dtype=f32).transpose(0, 2, 3, 1)
        return lambda: np.ascontiguousarray(p)
    cases["compact_permute"] = compact_permute

    def sum_last():
        x = rng.random((4096, 4096), dtype=f32)
        return lambda: x.sum(axis=1)
    cases["sum_last"] = sum_last

    def sum_first():
        x = rng.random((4096, 4096), dtype=f32)
        return lambda: x.sum(axis=0)
    cases["sum_first"] = sum_first

    def max_last():
        x = rng.random((4096, 4096), dtype=f32)
        return lambda: x.max(axis=1)
    cases["max_last"] = max_last

    def softmax_last():
        x = rng.random((1024, 1024), dtype=f32)

        def run():
            e = np.exp(x - x.max(axis=-1, keepdims=True))
            return e / e.sum(axis=-1, keepdims=True)
        return run
    cases["softmax_last"] = softmax_last

    def matmul():
        a, b = rng.random((512, 512), dtype=f32), rng.random((512, 512), dtype=f32)
        return lambda: a @ b
    cases["matmul"] = matmul
    return cases


def best_time(fn, repeat):
    fn()  # warm up
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build/release", help="CMake build folder (default build/release)")
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("ops", nargs="*", help="operations (default: all)")
    args = ap.parse_args()

    tool = os.path.join(args.build, "bin", "mls-tensor-ops")
    if not os.access(tool, os.X_OK):
        sys.exit(f"compare_numpy: {tool} not found: build first (scripts/mls run, or cmake --build --preset release)")
    cases = numpy_cases(np.random.default_rng(0))
    ops = args.ops or list(cases)
    env = dict(os.environ, MLS_NUM_THREADS="1")
    out = subprocess.run([tool, "--repeat", str(args.repeat), *ops], env=env, check=True,
                         capture_output=True, text=True).stdout
    ours = {line.split()[0]: float(line.split()[1]) for line in out.splitlines() if line.strip()}

    print(f"# numpy {np.__version__}, 1 thread each, best of {args.repeat}")
    print(f"# {'op':<16} {'ours (ms)':>10} {'numpy (ms)':>11}")
    worst = 0.0
    for op in ops:
        t_np = best_time(cases[op](), args.repeat)
        print(f"# {op:<16} {ours[op] * 1e3:>10.3f} {t_np * 1e3:>11.3f}")
        ratio = ours[op] / t_np
        worst = max(worst, ratio)
        print(f"ratio {op} {ratio:.3f}")
    print(f"# worst ratio {worst:.3f} ({'all at least as fast as NumPy' if worst <= 1.0 else 'slower than NumPy somewhere'})")


if __name__ == "__main__":
    main()
