#!/usr/bin/python3
"""Times the same MLP training step (784-256-256-10, batch 128, float32, SGD) in PyTorch and in
lab 2's eager mode (the mls-mlp-step tool), with 1 and 2 threads, and prints

    ratio mlp_step_t1 <ours / torch>
    ratio mlp_step_t2 <ours / torch>

(lower is better; <= 1.0 means as fast as PyTorch). Run with Debian's python3-torch:
    /usr/bin/python3 lab2_autodiff/bench/compare_torch.py [--bin build/release/bin/mls-mlp-step]

OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE are unset for both sides (some machines set them to work
around old OpenBLAS bugs; they pin OpenBLAS to older, slower kernels), as in
lab1_tensor/bench/compare_numpy.py.
"""
import argparse
import os
import re
import subprocess
import sys
import time

os.environ.pop("OPENBLAS_CORETYPE", None)
os.environ.pop("OPENBLAS_L2_SIZE", None)


def torch_step_ms(threads, steps, batch):
    import torch
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(784, 256), torch.nn.ReLU(), torch.nn.Linear(256, 256),
                              torch.nn.ReLU(), torch.nn.Linear(256, 10))
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    x = torch.randn(batch, 784)
    y = torch.randint(0, 10, (batch,))

    def step():
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(net(x), y)
        loss.backward()
        opt.step()
        return loss.item()

    for _ in range(5):
        step()
    best = float("inf")
    for _ in range(steps):
        t = time.perf_counter()
        step()
        best = min(best, time.perf_counter() - t)
    return best * 1e3


def ours_step_ms(binary, threads, steps, batch):
    # OpenBLAS (lab 1's SGEMM when built with it) keeps its own pool: give it the same thread count.
    env = dict(os.environ, MLS_NUM_THREADS=str(threads), OPENBLAS_NUM_THREADS=str(threads), OMP_NUM_THREADS=str(threads))
    out = subprocess.run([binary, "--threads", str(threads), "--steps", str(steps), "--batch", str(batch)],
                         check=True, capture_output=True, text=True, env=env).stdout
    m = re.search(r"best_ms ([0-9.]+)", out)
    if not m:
        sys.exit(f"compare_torch: unexpected output from {binary}: {out!r}")
    return float(m.group(1))


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.dirname(os.path.dirname(here))
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default=os.path.join(root, "build", "release", "bin", "mls-mlp-step"))
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--threads", default="1,2")
    args = ap.parse_args()
    if not os.path.exists(args.bin):
        sys.exit(f"compare_torch: {args.bin} not found; build the mls-mlp-step target or pass --bin")
    try:
        import torch
    except ImportError:
        sys.exit("compare_torch: PyTorch not found (apt-get install python3-torch; run with /usr/bin/python3)")
    print(f"torch {torch.__version__}, {args.steps} steps, batch {args.batch}, best step time")
    for n in [int(t) for t in args.threads.split(",")]:
        t_torch = torch_step_ms(n, args.steps, args.batch)
        t_ours = ours_step_ms(args.bin, n, args.steps, args.batch)
        print(f"threads {n}: torch {t_torch:.3f} ms, ours {t_ours:.3f} ms")
        print(f"ratio mlp_step_t{n} {t_ours / t_torch:.3f}")


if __name__ == "__main__":
    main()
