#!/usr/bin/python3
"""Times the same MLP training step (784-256-256-10, batch 128, float32, SGD) in PyTorch and in
lab 2's eager mode (the mls-mlp-step tool), with 1 and 2 threads, and prints

    ratio mlp_step_t1 <ours / torch>
    ratio mlp_step_t2 <ours / torch>

(lower is better; <= 1.0 means as fast as PyTorch). Run with Debian's python3-torch:
    /usr/bin/python3 lab2_autodiff/bench/compare_torch.py [--bin build/release/bin/mls-mlp-step]

Both sides on the same footing (as lab1_tensor/bench/compare_numpy.py):
  * for each thread count n, this process pins itself to the first n allowed CPUs and starts
    our tool from there (the pin is inherited); torch.set_num_threads(n), MLS_NUM_THREADS,
    OPENBLAS_NUM_THREADS and OMP_NUM_THREADS are all n, and OpenBLAS inside this process is
    told n too (openblas_set_num_threads through ctypes). Debian's torch does its GEMMs in the
    same OpenBLAS, whose own thread pool torch.set_num_threads does not reach: before this, a
    "1 thread" torch step ran its GEMMs on 2 OpenBLAS threads (on a quiet 2-core machine that
    made torch look 1.6x faster: the 1.42 ratio quoted for 1 thread);
  * our side's GEMMs: the tool's default sends the large ones to lab 4's packed kernel on 1
    thread where lab 4 is built (it beats OpenBLAS there; --matmul openblas keeps OpenBLAS
    everywhere, as torch; the tool says which on stderr);
  * OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE are unset for both sides (some machines set them to
    work around old OpenBLAS bugs; they pin OpenBLAS to older, slower kernels);
  * both warm up, then the steps are interleaved in groups (--group torch steps, then as many
    of ours, alternating which goes first); the ratio is the median over groups of
    median(ours) / median(torch), so that a load change on a shared machine hits both alike.
"""
import argparse
import os
import statistics
import subprocess
import sys
import time

os.environ.pop("OPENBLAS_CORETYPE", None)
os.environ.pop("OPENBLAS_L2_SIZE", None)
os.environ["OPENBLAS_NUM_THREADS"] = "1"  # torch's OpenBLAS starts with one thread; set per run below


def set_blas_threads(n):
    """Sets the thread count of the OpenBLAS this process loaded (torch's BLAS); returns a note."""
    import ctypes
    for name in ("libblas.so.3", "libopenblas.so.0", "libopenblasp-r0.3.21.so"):
        try:
            lib = ctypes.CDLL(name)
            lib.openblas_set_num_threads(ctypes.c_int(n))
            return f"{name}: openblas threads {lib.openblas_get_num_threads()}"
        except (OSError, AttributeError):
            continue
    return "no OpenBLAS found in this process (torch's BLAS threads not set)"


class TorchStep:
    def __init__(self, torch, batch):
        torch.manual_seed(0)
        self.net = torch.nn.Sequential(torch.nn.Linear(784, 256), torch.nn.ReLU(), torch.nn.Linear(256, 256),
                                       torch.nn.ReLU(), torch.nn.Linear(256, 10))
        self.opt = torch.optim.SGD(self.net.parameters(), lr=0.01)
        self.x = torch.randn(batch, 784)
        self.y = torch.randint(0, 10, (batch,))
        self.F = torch.nn.functional

    def step(self):
        self.opt.zero_grad()
        loss = self.F.cross_entropy(self.net(self.x), self.y)
        loss.backward()
        self.opt.step()
        return loss.item()

    def times(self, k):
        out = []
        for _ in range(k):
            t = time.perf_counter()
            self.step()
            out.append(time.perf_counter() - t)
        return out


class Ours:
    def __init__(self, binary, threads, batch, matmul=None):
        env = dict(os.environ, MLS_NUM_THREADS=str(threads), OPENBLAS_NUM_THREADS=str(threads),
                   OMP_NUM_THREADS=str(threads))
        cmd = [binary, "--serve", "--threads", str(threads), "--batch", str(batch)]
        if matmul:
            cmd += ["--matmul", matmul]
        self.p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)

    def times(self, k):
        self.p.stdin.write(f"step {k}\n")
        self.p.stdin.flush()
        line = self.p.stdout.readline()
        if not line:
            sys.exit("compare_torch: mls-mlp-step stopped")
        return [float(v) for v in line.split()]

    def close(self):
        self.p.stdin.close()
        self.p.wait()


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.dirname(os.path.dirname(here))
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default=os.path.join(root, "build", "release", "bin", "mls-mlp-step"))
    ap.add_argument("--groups", type=int, default=15, help="interleaved groups (default 15)")
    ap.add_argument("--group", type=int, default=10, help="steps per side per group (default 10)")
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--matmul", default=None,
                    help="SGEMM kernel of our side (passed to mls-mlp-step --matmul; default: the tool's auto "
                         "choice, lab 4's packed kernel for the large GEMMs on 1 thread where lab 4 is built)")
    args = ap.parse_args()
    if not os.path.exists(args.bin):
        sys.exit(f"compare_torch: {args.bin} not found; build the mls-mlp-step target or pass --bin")
    try:
        import torch
    except ImportError:
        sys.exit("compare_torch: PyTorch not found (apt-get install python3-torch; run with /usr/bin/python3)")
    cpus = sorted(os.sched_getaffinity(0))
    print(f"# torch {torch.__version__}, batch {args.batch}, {args.groups} interleaved groups of {args.group} steps")
    for n in [int(t) for t in args.threads.split(",")]:
        if n > len(cpus):
            print(f"# threads {n}: skipped, only {len(cpus)} CPUs allowed")
            continue
        os.sched_setaffinity(0, cpus[:n])
        torch.set_num_threads(n)
        blas_note = set_blas_threads(n)
        ts = TorchStep(torch, args.batch)
        ours = Ours(args.bin, n, args.batch, args.matmul)
        ts.times(20)  # warm-up (ours warms up before it serves)
        ours.times(20)
        ratios, t_t, t_o = [], [], []
        for g in range(args.groups):
            if g % 2 == 0:
                a = ts.times(args.group)
                b = ours.times(args.group)
            else:
                b = ours.times(args.group)
                a = ts.times(args.group)
            ma, mb = statistics.median(a), statistics.median(b)
            t_t.append(ma)
            t_o.append(mb)
            ratios.append(mb / ma)
        ours.close()
        print(f"# threads {n} (CPUs {cpus[:n]}; torch's {blas_note}): torch {statistics.median(t_t) * 1e3:.3f} ms, "
              f"ours {statistics.median(t_o) * 1e3:.3f} ms (medians)")
        print(f"ratio mlp_step_t{n} {statistics.median(ratios):.3f}", flush=True)
    os.sched_setaffinity(0, cpus)


if __name__ == "__main__":
    main()
