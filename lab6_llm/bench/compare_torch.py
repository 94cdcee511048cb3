#!/usr/bin/python3
"""Times the same GPT training step (the `small` config: 4 layers, 4 heads, 128 dims, block 64,
batch 12, vocabulary 65; float32; AdamW lr 1e-4, betas (0.9, 0.95), no weight decay, no clipping)
in PyTorch and in lab 6's fused path (`mls-gpt bench`), with 1 and 2 threads, and prints

    ratio gpt_step_t1 <ours / torch>
    ratio gpt_step_t2 <ours / torch>

(lower is better; the goal is <= 0.8). Both sides start from the same weights and the same batch:
this script draws them, writes the weights as an llm.c model file and the batch as int32 tokens,
and `mls-gpt bench --init-from ... --tokens ...` reads them; the first step's losses must agree.

Thread counts are fair on both sides: Debian's torch runs its matmuls on OpenBLAS, whose own pool
ignores torch.set_num_threads, so every torch measurement runs in its own process with
OPENBLAS_NUM_THREADS and OMP_NUM_THREADS set before torch is imported (OPENBLAS_CORETYPE unset),
and for n threads torch's best setting of (intra-op threads, OpenBLAS threads) in {1, n}^2 counts.

    /usr/bin/python3 lab6_llm/bench/compare_torch.py --build build/release
"""
import argparse
import json
import math
import os
import re
import struct
import subprocess
import sys
import tempfile

os.environ.pop("OPENBLAS_CORETYPE", None)
os.environ.pop("OPENBLAS_L2_SIZE", None)

L, H, C, T, V, B = 4, 4, 128, 64, 65, 12
NAMES = ["wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb", "ln2w", "ln2b", "fcw", "fcb",
         "fcprojw", "fcprojb", "lnfw", "lnfb"]
SHAPES = [(V, C), (T, C), (L, C), (L, C), (L, 3 * C, C), (L, 3 * C), (L, C, C), (L, C), (L, C), (L, C),
          (L, 4 * C, C), (L, 4 * C), (L, C, 4 * C), (L, C), (C,), (C,)]


def make_inputs(folder):
    """GPT-2 init and a batch from torch's seeded generator; writes model.bin and tokens.bin."""
    import torch
    g = torch.Generator().manual_seed(0)
    params = []
    for name, shape in zip(NAMES, SHAPES):
        if name in ("ln1w", "ln2w", "lnfw"):
            t = torch.ones(shape)
        elif name.endswith("b"):
            t = torch.zeros(shape)
        else:
            std = 0.02 / math.sqrt(2 * L) if name in ("attprojw", "fcprojw") else 0.02
            t = torch.randn(shape, generator=g) * std
        params.append(t)
    tokens = torch.randint(0, V, (B, T + 1), generator=g, dtype=torch.int32)
    vp = (V + 127) // 128 * 128
    header = [20240326, 3, T, V, L, H, C, vp] + [0] * 248
    with open(os.path.join(folder, "model.bin"), "wb") as f:
        f.write(struct.pack("<256i", *header))
        for name, t in zip(NAMES, params):
            if name == "wte":
                t = torch.cat([t, torch.zeros(vp - V, C)])
            f.write(t.contiguous().numpy().astype("<f4").tobytes())
    with open(os.path.join(folder, "tokens.bin"), "wb") as f:
        f.write(tokens.numpy().astype("<i4").tobytes())


TORCH_CHILD = r'''
import json, math, os, struct, sys, time
import torch
import torch.nn.functional as F
folder, intra, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
torch.set_num_threads(intra)
L, H, C, T, V, B = %d, %d, %d, %d, %d, %d
shapes = %s
raw = open(os.path.join(folder, "model.bin"), "rb").read()
hdr = struct.unpack("<256i", raw[:1024])
vp = hdr[7]
off = 1024
params = []
for i, s in enumerate(shapes):
    s = tuple(s)
    rows = (vp, C) if i == 0 else s
    n = 1
    for d in rows: n *= d
    t = torch.frombuffer(bytearray(raw[off:off + 4 * n]), dtype=torch.float32).reshape(rows)
    off += 4 * n
    if i == 0: t = t[:V].clone()
    params.append(torch.nn.Parameter(t.clone()))
tok = torch.frombuffer(bytearray(open(os.path.join(folder, "tokens.bin"), "rb").read()), dtype=torch.int32).reshape(B, T + 1).long()
x_in, y = tok[:, :T], tok[:, 1:]
wte, wpe, ln1w, ln1b, qkvw, qkvb, apw, apb, ln2w, ln2b, fcw, fcb, fpw, fpb, lnfw, lnfb = params
mask = torch.triu(torch.ones(T, T, dtype=torch.bool), 1)
hs = C // H
def loss_fn():
    x = wte[x_in] + wpe[:T]
    for l in range(L):
        h = F.layer_norm(x, (C,), ln1w[l], ln1b[l], 1e-5)
        q, k, v = F.linear(h, qkvw[l], qkvb[l]).split(C, dim=2)
        q, k, v = [t.view(B, T, H, hs).transpose(1, 2) for t in (q, k, v)]
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
        att = att.masked_fill(mask, float("-inf")).softmax(-1)
        yy = (att @ v).transpose(1, 2).reshape(B, T, C)
        x = x + F.linear(yy, apw[l], apb[l])
        h = F.layer_norm(x, (C,), ln2w[l], ln2b[l], 1e-5)
        x = x + F.linear(F.gelu(F.linear(h, fcw[l], fcb[l]), approximate="tanh"), fpw[l], fpb[l])
    x = F.layer_norm(x, (C,), lnfw, lnfb, 1e-5)
    return F.cross_entropy((x @ wte.t()).view(-1, V), y.reshape(-1))
opt = torch.optim.AdamW(params, lr=1e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.0)
def step():
    opt.zero_grad(set_to_none=True)
    l = loss_fn()
    l.backward()
    opt.step()
    return l.item()
loss0 = step()
for _ in range(2): step()
best = float("inf")
for _ in range(steps):
    t0 = time.perf_counter(); step(); best = min(best, time.perf_counter() - t0)
print(json.dumps({"loss0": loss0, "best_ms": best * 1e3}))
''' % (L, H, C, T, V, B, json.dumps(SHAPES))


def torch_ms(folder, intra, blas, steps):
    env = dict(os.environ, OPENBLAS_NUM_THREADS=str(blas), OMP_NUM_THREADS=str(blas))
    out = subprocess.run([sys.executable, "-c", TORCH_CHILD, folder, str(intra), str(steps)], check=True,
                         capture_output=True, text=True, env=env).stdout
    return json.loads(out.strip().splitlines()[-1])


def ours_ms(binary, folder, threads, steps):
    env = dict(os.environ, MLS_NUM_THREADS=str(threads), OPENBLAS_NUM_THREADS=str(threads),
               OMP_NUM_THREADS=str(threads))
    p = subprocess.run([binary, "--threads", str(threads), "bench", "--batch", str(B), "--steps", str(steps),
                        "--init-from", os.path.join(folder, "model.bin"), "--tokens",
                        os.path.join(folder, "tokens.bin")], capture_output=True, text=True, env=env)
    if p.returncode != 0:
        sys.exit(f"compare_torch: {binary} bench failed (exit {p.returncode}): {p.stderr.strip()}")
    out = p.stdout
    get = lambda k: float(re.search(k + r" ([0-9.]+)", out).group(1))
    return {"loss0": get("loss0"), "best_ms": get("best_ms"), "tokens_per_s": get("tokens_per_s"),
            "mfu": get("mfu"), "text": out}


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.dirname(os.path.dirname(here))
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(root, "build", "release"), help="build folder (bin/mls-gpt)")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--threads", default="1,2")
    args = ap.parse_args()
    binary = os.path.join(args.build, "bin", "mls-gpt")
    if not os.path.exists(binary):
        sys.exit(f"compare_torch: {binary} not found; build the mls-gpt target or pass --build")
    try:
        import torch
    except ImportError:
        sys.exit("compare_torch: PyTorch not found (apt-get install python3-torch; run with /usr/bin/python3)")
    print(f"torch {torch.__version__}; GPT small: L={L} H={H} C={C} T={T} V={V}, batch {B}; best of {args.steps} steps")
    with tempfile.TemporaryDirectory() as folder:
        make_inputs(folder)
        ours_ms(binary, folder, 1, 1)  # our side runs at all (e.g. every function written) before torch is timed
        for n in [int(t) for t in args.threads.split(",")]:
            settings = sorted({(i, b) for i in (1, n) for b in (1, n)})
            runs = {s: torch_ms(folder, s[0], s[1], args.steps) for s in settings}
            best = min(runs, key=lambda s: runs[s]["best_ms"])
            t_torch = runs[best]["best_ms"]
            ours = ours_ms(binary, folder, n, args.steps)
            same = abs(ours["loss0"] - runs[best]["loss0"]) < 1e-4
            print(f"threads {n}: torch {t_torch:.3f} ms (intra-op {best[0]}, OpenBLAS {best[1]}; "
                  + ", ".join(f"{s}: {r['best_ms']:.2f}" for s, r in runs.items())
                  + f"), ours {ours['best_ms']:.3f} ms = {ours['tokens_per_s']:.0f} tokens/s, MFU {100 * ours['mfu']:.1f}%; "
                  f"first loss torch {runs[best]['loss0']:.6f} ours {ours['loss0']:.6f}" + ("" if same else "  MISMATCH"))
            print(f"ratio gpt_step_t{n} {ours['best_ms'] / t_torch:.3f}")


if __name__ == "__main__":
    main()
