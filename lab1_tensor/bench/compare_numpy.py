#!/usr/bin/python3
"""Times lab 1 operations in NumPy and in mlsys-labs (mls-tensor-ops --serve) and prints one line
per operation:  ratio <op> <ours / numpy time>   (< 1.0: we are faster).

Run with Debian's Python and NumPy (apt-get install python3-numpy):
    /usr/bin/python3 lab1_tensor/bench/compare_numpy.py [--build build/release] [--threads 1] [--repeat 15]

How both sides are kept on the same footing (each of these once made the ratio move 2-5x between
two machines of the same kind):
  * Same cores, same thread count: this process pins itself to the first --threads allowed CPUs
    before NumPy is imported and starts our tool from there (the pin is inherited);
    OPENBLAS_NUM_THREADS, OMP_NUM_THREADS and MLS_NUM_THREADS are all set to --threads.
    OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE are unset for both sides (some machines set them to work
    around old OpenBLAS bugs; they slow a current build down).
  * No first-touch page faults on either side: NumPy writes into preallocated outputs (out=),
    our tool's allocator hands back the block it mapped on the previous run. Timing a fresh
    64 MiB result would time the kernel's page-fault path (and whether it found huge pages)
    instead of the operation.
  * No power-of-two strides in the permuted copy: [64]^4 permuted makes the copy walk 64 rows
    16 KiB apart, which fall into the same cache sets whenever the pages are physically
    contiguous; NumPy's time then varies 3-4x with the physical layout (0.12-0.93 ratios were
    quoted for the same code). [64, 62, 64, 66] has the same size without the aliasing.
  * Interleaved, warmed up, medians: after two warm-up runs each, every repetition runs NumPy
    once and ours once (alternating which goes first); the ratio is the median of the per-
    repetition ratios, so a load change on a shared machine hits both sides of a pair alike.
"""
import argparse
import os
import statistics
import subprocess
import sys
import time


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build/release", help="CMake build folder (default build/release)")
    ap.add_argument("--threads", type=int, default=1, help="threads for both sides (default 1)")
    ap.add_argument("--repeat", type=int, default=15, help="interleaved repetitions per op (default 15)")
    ap.add_argument("ops", nargs="*", help="operations (default: all)")
    return ap.parse_args()


args = parse_args()
_cpus = sorted(os.sched_getaffinity(0))
if args.threads < 1 or args.threads > len(_cpus):
    sys.exit(f"compare_numpy: --threads {args.threads}: this process may use {len(_cpus)} CPUs")
os.sched_setaffinity(0, _cpus[: args.threads])
for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "MLS_NUM_THREADS"):
    os.environ[var] = str(args.threads)
os.environ.pop("OPENBLAS_CORETYPE", None)
os.environ.pop("OPENBLAS_L2_SIZE", None)
import numpy as np  # noqa: E402  (after the environment and the pin are set)


def numpy_cases(rng):
    """Each case builds its inputs and preallocated outputs, and returns the timed call."""
    f32 = np.float32
    cases = {}

    def add():
        a, b = rng.random(16 << 20, dtype=f32), rng.random(16 << 20, dtype=f32)
        c = np.empty_like(a)
        return lambda: np.add(a, b, out=c)
    cases["add"] = add

    def mul_scalar():
        a = rng.random(16 << 20, dtype=f32)
        c = np.empty_like(a)
        return lambda: np.multiply(a, f32(1.5), out=c)
    cases["mul_scalar"] = mul_scalar

    def exp():
        a = rng.random(4 << 20, dtype=f32)
        c = np.empty_like(a)
        return lambda: np.exp(a, out=c)
    cases["exp"] = exp

    def compact_permute():
        p = rng.random((64, 62, 64, 66), dtype=f32).transpose(0, 2, 3, 1)
        c = np.empty(p.shape, dtype=f32)
        return lambda: np.copyto(c, p)
    cases["compact_permute"] = compact_permute

    def sum_last():
        x = rng.random((4096, 4096), dtype=f32)
        c = np.empty(4096, dtype=f32)
        return lambda: np.add.reduce(x, axis=1, out=c)
    cases["sum_last"] = sum_last

    def sum_first():
        x = rng.random((4096, 4096), dtype=f32)
        c = np.empty(4096, dtype=f32)
        return lambda: np.add.reduce(x, axis=0, out=c)
    cases["sum_first"] = sum_first

    def max_last():
        x = rng.random((4096, 4096), dtype=f32)
        c = np.empty(4096, dtype=f32)
        return lambda: np.maximum.reduce(x, axis=1, out=c)
    cases["max_last"] = max_last

    def softmax_last():
        x = rng.random((1024, 1024), dtype=f32)
        e = np.empty_like(x)
        m = np.empty((1024, 1), dtype=f32)
        s = np.empty((1024, 1), dtype=f32)

        def run():
            np.maximum.reduce(x, axis=-1, keepdims=True, out=m)
            np.subtract(x, m, out=e)
            np.exp(e, out=e)
            np.add.reduce(e, axis=-1, keepdims=True, out=s)
            return np.divide(e, s, out=e)
        return run
    cases["softmax_last"] = softmax_last

    def matmul():
        a, b = rng.random((512, 512), dtype=f32), rng.random((512, 512), dtype=f32)
        c = np.empty((512, 512), dtype=f32)
        return lambda: np.matmul(a, b, out=c)
    cases["matmul"] = matmul
    return cases


class Ours:
    """mls-tensor-ops --serve: one setup per op, then one timed run per request."""

    def __init__(self, tool):
        self.p = subprocess.Popen([tool, "--serve"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def ask(self, line):
        self.p.stdin.write(line + "\n")
        self.p.stdin.flush()
        reply = self.p.stdout.readline()
        if not reply:
            sys.exit(f"compare_numpy: mls-tensor-ops stopped after '{line}'")
        return reply.split()

    def setup(self, op):
        self.ask(f"setup {op}")

    def run(self, op):
        return float(self.ask(f"run {op} 1")[0])

    def close(self):
        self.p.stdin.close()
        self.p.wait()


def time_numpy(fn):
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def main():
    tool = os.path.join(args.build, "bin", "mls-tensor-ops")
    if not os.access(tool, os.X_OK):
        sys.exit(f"compare_numpy: {tool} not found: build first (scripts/mls run, or cmake --build --preset release)")
    cases = numpy_cases(np.random.default_rng(0))
    ops = args.ops or list(cases)
    unknown = [op for op in ops if op not in cases]
    if unknown:
        sys.exit(f"compare_numpy: unknown op(s) {unknown}; known: {list(cases)}")
    ours = Ours(tool)
    print(f"# numpy {np.__version__}, {args.threads} thread(s) each on CPUs {_cpus[: args.threads]}, "
          f"median of {args.repeat} interleaved repetitions after 2 warm-ups")
    print(f"# {'op':<16} {'ours (ms)':>10} {'numpy (ms)':>11}")
    worst = 0.0
    for op in ops:
        fn = cases[op]()
        ours.setup(op)
        for _ in range(2):  # warm-up: caches, the allocator's blocks, the pages of every output
            fn()
            ours.run(op)
        t_ours, t_np, ratios = [], [], []
        for r in range(args.repeat):
            if r % 2 == 0:
                a = time_numpy(fn)
                b = ours.run(op)
            else:
                b = ours.run(op)
                a = time_numpy(fn)
            t_np.append(a)
            t_ours.append(b)
            ratios.append(b / a)
        del fn
        ratio = statistics.median(ratios)
        print(f"# {op:<16} {statistics.median(t_ours) * 1e3:>10.3f} {statistics.median(t_np) * 1e3:>11.3f}")
        worst = max(worst, ratio)
        print(f"ratio {op} {ratio:.3f}", flush=True)
    ours.close()
    print(f"# worst ratio {worst:.3f} ({'all at least as fast as NumPy' if worst <= 1.0 else 'slower than NumPy somewhere'})")


if __name__ == "__main__":
    main()
