#!/usr/bin/python3
"""Batched greedy decoding with a KV cache: PyTorch 1.13 against lab 6's engine (`mls-serving-bench`,
continuous batching), the same model shape, batch and lengths, and prints

    ratio decode_vs_torch_t<n> <our time / torch's time>

(lower is better; the issue's goal is <= 0.5). Shape: `small` (4 layers, 4 heads, 128 dims,
context 64, vocabulary 65) or --n-layer/--n-embd; --batch sequences with prompts of --prompt
tokens each generate --new tokens greedily. Throughput does not depend on the weights (greedy
without an end token always makes --new tokens), so each side draws its own random model.

Torch side: a prefill of the prompts (B, P) with causal attention, keys and values kept in a
preallocated (L, B, H, T, hs) cache, then one (B, 1) step per new token attending to the cache;
run in its own process with OPENBLAS_NUM_THREADS and OMP_NUM_THREADS set before torch is
imported (Debian's torch runs its matmuls on OpenBLAS), the best of (intra-op, OpenBLAS) threads
in {1, n}^2. Our side: the engine with max_running = batch (one batched matmul per layer per step).
Each side runs --reps times and the best counts. --clock cpu times each side with its process's
CPU time instead of the wall clock (for a busy machine; one thread).

    /usr/bin/python3 lab6_llm/bench/compare_torch_decode.py --build build/release
"""
import argparse
import json
import os
import re
import subprocess
import sys

os.environ.pop("OPENBLAS_CORETYPE", None)


def torch_side(L, H, C, T, V, B, P, N, reps, cpu_clock=False):
    import time

    import torch
    torch.manual_seed(0)
    hs = C // H
    p = {
        "wte": torch.randn(V, C) * 0.02, "wpe": torch.randn(T, C) * 0.02,
        "ln1w": torch.ones(L, C), "ln1b": torch.zeros(L, C), "qkvw": torch.randn(L, 3 * C, C) * 0.02,
        "qkvb": torch.zeros(L, 3 * C), "attprojw": torch.randn(L, C, C) * 0.02, "attprojb": torch.zeros(L, C),
        "ln2w": torch.ones(L, C), "ln2b": torch.zeros(L, C), "fcw": torch.randn(L, 4 * C, C) * 0.02,
        "fcb": torch.zeros(L, 4 * C), "fcprojw": torch.randn(L, C, 4 * C) * 0.02, "fcprojb": torch.zeros(L, C),
        "lnfw": torch.ones(C), "lnfb": torch.zeros(C),
    }
    F = torch.nn.functional

    def forward(idx, pos0, kc, vc):
        # idx (B, n) at positions pos0 .. pos0 + n - 1; kc, vc (L, B, H, T, hs)
        b, n = idx.shape
        x = p["wte"][idx] + p["wpe"][pos0:pos0 + n]
        for l in range(L):
            h = F.layer_norm(x, (C,), p["ln1w"][l], p["ln1b"][l])
            qkv = F.linear(h, p["qkvw"][l], p["qkvb"][l])
            q, k, v = qkv.split(C, dim=2)
            q = q.view(b, n, H, hs).transpose(1, 2)
            kc[l, :, :, pos0:pos0 + n] = k.view(b, n, H, hs).transpose(1, 2)
            vc[l, :, :, pos0:pos0 + n] = v.view(b, n, H, hs).transpose(1, 2)
            kk, vv = kc[l, :, :, :pos0 + n], vc[l, :, :, :pos0 + n]
            att = (q @ kk.transpose(-2, -1)) / hs ** 0.5
            if n > 1:
                mask = torch.ones(n, pos0 + n, dtype=torch.bool).tril(diagonal=pos0)
                att = att.masked_fill(~mask, float("-inf"))
            y = (att.softmax(-1) @ vv).transpose(1, 2).reshape(b, n, C)
            x = x + F.linear(y, p["attprojw"][l], p["attprojb"][l])
            h = F.layer_norm(x, (C,), p["ln2w"][l], p["ln2b"][l])
            x = x + F.linear(F.gelu(F.linear(h, p["fcw"][l], p["fcb"][l]), approximate="tanh"),
                             p["fcprojw"][l], p["fcprojb"][l])
        x = F.layer_norm(x[:, -1], (C,), p["lnfw"], p["lnfb"])
        return x @ p["wte"].t()

    clock = time.process_time if cpu_clock else time.perf_counter
    best = float("inf")
    g = torch.Generator().manual_seed(1)
    prompts = torch.randint(0, V, (B, P), generator=g)
    with torch.no_grad():
        for _ in range(reps):
            t0 = clock()
            kc = torch.zeros(L, B, H, T, hs)
            vc = torch.zeros(L, B, H, T, hs)
            logits = forward(prompts, 0, kc, vc)
            for i in range(N - 1):
                tok = logits.argmax(-1, keepdim=True)
                logits = forward(tok, P + i, kc, vc)
            logits.argmax(-1)
            best = min(best, clock() - t0)
    return B * N / best  # tokens/s


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build/release")
    ap.add_argument("--threads", default="1,2", help="thread counts, comma-separated")
    ap.add_argument("--n-layer", type=int, default=4)
    ap.add_argument("--n-embd", type=int, default=128)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--prompt", type=int, default=16)
    ap.add_argument("--new", type=int, default=32)
    ap.add_argument("--reps", type=int, default=3, help="runs of each side; the best counts")
    ap.add_argument("--clock", choices=["wall", "cpu"], default="wall",
                    help="cpu: each side's process CPU time (a busy machine; needs --threads 1)")
    ap.add_argument("--torch-child", help=argparse.SUPPRESS)
    a = ap.parse_args()
    L, H, C, T, V = a.n_layer, 4, a.n_embd, 64, 65
    if a.prompt + a.new > T or a.prompt < 1 or a.new < 1 or a.batch < 1:
        sys.exit("compare_torch_decode: need 1 <= --prompt, 1 <= --new, --prompt + --new <= 64, --batch >= 1")
    if a.torch_child:
        intra = int(a.torch_child)
        import torch
        torch.set_num_threads(intra)
        print(json.dumps(torch_side(L, H, C, T, V, a.batch, a.prompt, a.new, a.reps, a.clock == "cpu")))
        return
    if a.clock == "cpu" and a.threads != "1":
        sys.exit("compare_torch_decode: --clock cpu needs --threads 1 (CPU time adds up every thread's)")
    bench = os.path.join(a.build, "bin", "mls-serving-bench")
    if not os.path.exists(bench):
        sys.exit("compare_torch_decode: %s not found (build the target mls-serving-bench)" % bench)
    for n in [int(x) for x in a.threads.split(",")]:
        torch_tps = 0.0
        for intra in sorted({1, n}):
            for blas in sorted({1, n}):
                env = dict(os.environ, OPENBLAS_NUM_THREADS=str(blas), OMP_NUM_THREADS=str(intra))
                out = subprocess.run([sys.executable, __file__, "--torch-child", str(intra), "--n-layer", str(L),
                                      "--n-embd", str(C), "--batch", str(a.batch), "--prompt", str(a.prompt),
                                      "--new", str(a.new), "--reps", str(a.reps), "--clock", a.clock],
                                     env=env, capture_output=True, text=True, check=True)
                torch_tps = max(torch_tps, json.loads(out.stdout.strip().splitlines()[-1]))
        ours_tps = 0.0
        for _ in range(a.reps):
            ours = subprocess.run([bench, "--threads", str(n), "--clock", a.clock, "--config", "small", "--n-layer", str(L),
                                   "--n-embd", str(C), "--requests", str(a.batch), "--batch", str(a.batch),
                                   "--prompt-min", str(a.prompt), "--prompt-max", str(a.prompt), "--out-min", str(a.new),
                                   "--out-max", str(a.new)], capture_output=True, text=True, check=True).stdout
            m = re.search(r"^continuous\s+([0-9.]+) tok/s", ours, re.M)
            if not m:
                sys.exit("compare_torch_decode: no 'continuous ... tok/s' line in:\n" + ours)
            ours_tps = max(ours_tps, float(m.group(1)))
        print("%d thread(s): batch %d, prompt %d, %d new tokens, %d layers x %d: torch %.0f tok/s, ours %.0f tok/s"
              % (n, a.batch, a.prompt, a.new, L, C, torch_tps, ours_tps))
        print("ratio decode_vs_torch_t%d %.3f" % (n, torch_tps / ours_tps))


if __name__ == "__main__":
    main()
