#!/usr/bin/python3
"""Differential test of lab 2 (mls::autodiff) against PyTorch.

A seeded generator writes random expression DAGs in float64 over every differentiable op
(elementwise, broadcasting binaries, where, reductions, shape ops, matmul, the softmax family, the
fused losses, the norms, embedding, conv2d, and the workload tour: max/avg pooling, conv_transpose2d,
LSTM and GRU cells against PyTorch's own, CSR spmm, dropout with the same Philox mask). `mls-autodiff-oracle` runs each DAG eagerly and as a
graph and writes: every node's value, dL/dleaf (eager and graph) for L = sum(last * weights), the
Hessian-vector product H·v (eager create_graph and graph gradients-of-gradients), and the forward-
mode tangent J·v of the last node. PyTorch computes the same with torch.autograd. Tolerances come
from the dtype (float64 eps) times the work behind a value (ops and reduction sizes along the
DAG) times its scale, never per case. The deliberate differences from PyTorch are listed in
differences.json and read here. A failing DAG is shrunk (ops dropped, then leaves made smaller)
and printed as a minimal reproduction.

  autodiff_oracle.py --driver build/dev/bin/mls-autodiff-oracle [--seed S] [--count N]
Exit status: 0 when every DAG agrees, 1 otherwise. Prints "SKIPPED: ..." without PyTorch.
"""
import json
import os
import random
import subprocess
import sys
import time

try:
    import numpy as np
    import torch
    import torch.nn.functional as F
except ImportError as e:  # pragma: no cover
    print(f"SKIPPED: PyTorch or NumPy is not available ({e}); install them with scripts/setup.sh --bench")
    sys.exit(0)

HERE = os.path.dirname(os.path.abspath(__file__))
# The campaign loop and helpers are lab 1's (lab 2 builds on lab 1).
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "lab1_tensor", "tests", "oracle"))
import oracle_common  # noqa: E402
from oracle_common import factor  # noqa: E402
TABLE = json.load(open(os.path.join(HERE, "differences.json")))
EPS = float(np.finfo(np.float64).eps)
UNARY = ["neg", "abs", "exp", "log", "sqrt", "rsqrt", "sin", "cos", "tanh", "sigmoid", "relu", "gelu"]
POSITIVE_IN = {"log", "sqrt", "rsqrt"}


# ---- PyTorch side -------------------------------------------------------------------------------
def torch_build(prog, leaves):
    n = list(leaves)
    for op in prog["ops"]:
        x = [n[i] for i in op["in"]]
        name = op["op"]
        ax = lambda: (op["axes"] or list(range(x[0].dim())))
        if name in UNARY:
            f = {"neg": torch.neg, "abs": torch.abs, "exp": torch.exp, "log": torch.log, "sqrt": torch.sqrt,
                 "rsqrt": torch.rsqrt, "sin": torch.sin, "cos": torch.cos, "tanh": torch.tanh,
                 "sigmoid": torch.sigmoid, "relu": torch.relu,
                 "gelu": lambda t: F.gelu(t, approximate="tanh")}[name]
            r = f(x[0])
        elif name in ("add", "sub", "mul", "div", "pow", "maximum", "minimum"):
            r = getattr(torch, name)(x[0], x[1])
        elif name == "pow_scalar":
            r = torch.pow(x[0], op["exponent"])
        elif name == "where":
            c = getattr(torch, op["cmp"])(x[0].detach(), x[1].detach())
            r = torch.where(c, x[2], x[3])
        elif name in ("sum", "mean"):
            r = getattr(torch, name)(x[0], dim=ax(), keepdim=op["keepdim"]) if x[0].dim() else x[0] * 1
        elif name in ("max", "min"):  # the gradient is split among ties, as amax/amin do
            f = torch.amax if name == "max" else torch.amin
            r = f(x[0], dim=ax(), keepdim=op["keepdim"]) if x[0].dim() else x[0] * 1
        elif name == "reshape":
            r = x[0].reshape(op["shape"])
        elif name == "permute":
            r = x[0].permute(op["dims"])
        elif name == "slice":
            d = op["dim"] % x[0].dim()
            r = x[0][(slice(None),) * d + (slice(op["start"], op["stop"], op["step"]),)]
        elif name == "expand":
            r = x[0].expand(op["shape"])
        elif name == "unsqueeze":
            r = x[0]
            for a in sorted(op["axes"]):
                r = r.unsqueeze(a)
        elif name == "squeeze":
            r = x[0]
            for a in sorted(op["axes"], reverse=True):
                r = r.squeeze(a)
        elif name == "concat":
            r = torch.cat(x, op["axis"])
        elif name == "stack":
            r = torch.stack(x, op["axis"])
        elif name == "matmul":
            r = torch.matmul(x[0], x[1])
        elif name == "softmax":
            r = torch.softmax(x[0], op["axis"])
        elif name == "log_softmax":
            r = torch.log_softmax(x[0], op["axis"])
        elif name == "logsumexp":
            r = torch.logsumexp(x[0], op["axis"], keepdim=op["keepdim"])
        elif name == "sce_probs":
            r = -(x[1] * torch.log_softmax(x[0], 1)).sum(1).mean()
        elif name == "sce_index":
            r = F.cross_entropy(x[0], torch.tensor(op["targets"], dtype=torch.int64))
        elif name == "mse":
            r = F.mse_loss(x[0], x[1])
        elif name == "layer_norm":
            r = F.layer_norm(x[0], (x[0].shape[-1],), x[1], x[2], op["eps"])
        elif name == "batch_norm":
            r = F.batch_norm(x[0], None, None, x[1], x[2], training=True, eps=op["eps"])
        elif name == "embedding":
            idx = torch.tensor(op["indices"], dtype=torch.int64).reshape(op["ishape"])
            r = F.embedding(idx, x[0])
        elif name == "conv2d":
            r = F.conv2d(x[0], x[1], stride=op["stride"], padding=op["pad"])
        elif name == "max_pool2d":
            r = F.max_pool2d(x[0], op["k"], op["stride"], op["pad"])
        elif name == "avg_pool2d":
            r = F.avg_pool2d(x[0], op["k"], op["stride"], op["pad"], count_include_pad=op["include_pad"])
        elif name == "conv_transpose2d":
            r = F.conv_transpose2d(x[0], x[1], stride=op["stride"], padding=op["pad"], output_padding=op["opad"])
        elif name == "lstm_cell":  # PyTorch's own cell (gate order i, f, g, o); h' and c' side by side
            h, c = torch._VF.lstm_cell(x[0], (x[1], x[2]), x[3], x[4], x[5], x[6])
            r = torch.cat([h, c], 1)
        elif name == "gru_cell":
            r = torch._VF.gru_cell(x[0], x[1], x[2], x[3], x[4], x[5])
        elif name == "spmm":  # the CSR matrix made dense by index_put (differentiable in the values)
            rows = [i for i in range(op["rows"]) for _ in range(op["row_ptr"][i + 1] - op["row_ptr"][i])]
            a = torch.zeros(op["rows"], op["cols"], dtype=torch.float64).index_put(
                (torch.tensor(rows, dtype=torch.int64), torch.tensor(op["col_idx"], dtype=torch.int64)), x[0],
                accumulate=True)
            r = a @ x[1]
        elif name == "dropout":  # the same counter-based mask, recomputed here from (seed, offset, index)
            m = torch.tensor(dropout_mask(op["seed"], op["offset"], x[0].numel(), op["p"]), dtype=torch.float64)
            r = x[0] * m.reshape(x[0].shape) * (1.0 / (1.0 - op["p"]))
        else:
            raise KeyError(name)
        n.append(r)
    return n


def philox4x32(c, k):
    """One Philox-4x32-10 block, as common's mls::philox4x32."""
    m = 0xFFFFFFFF
    c, k = list(c), list(k)
    for _ in range(10):
        p0, p1 = 0xD2511F53 * c[0], 0xCD9E8D57 * c[2]
        c = [((p1 >> 32) ^ c[1] ^ k[0]) & m, p1 & m, ((p0 >> 32) ^ c[3] ^ k[1]) & m, p0 & m]
        k = [(k[0] + 0x9E3779B9) & m, (k[1] + 0xBB67AE85) & m]
    return c


def dropout_mask(seed, offset, n, p):
    """Keep element i when word i % 4 of the block (i / 4, offset) under key seed, over 2^32, is >= p."""
    out = []
    for b in range((n + 3) // 4):
        w = philox4x32([b & 0xFFFFFFFF, b >> 32, offset & 0xFFFFFFFF, offset >> 32], [seed & 0xFFFFFFFF, seed >> 32])
        out += [1.0 if w[j] * 2.0 ** -32 >= p else 0.0 for j in range(4)]
    return out[:n]


def torch_run(prog):
    leaves = [torch.tensor(l["values"], dtype=torch.float64).reshape(l["shape"]).requires_grad_(True)
              for l in prog["leaves"]]
    nodes = torch_build(prog, leaves)
    last = nodes[-1]
    w = torch.tensor(prog["weights"], dtype=torch.float64).reshape(last.shape)
    loss = (last * w).sum()
    grads = torch.autograd.grad(loss, leaves, create_graph=True, allow_unused=True)
    grads = [g if g is not None else torch.zeros_like(l) for g, l in zip(grads, leaves)]
    dirs = [torch.tensor(d, dtype=torch.float64).reshape(l.shape) for d, l in zip(prog["direction"], leaves)]
    s = sum((g * d).sum() for g, d in zip(grads, dirs))
    if s.requires_grad:
        hv = torch.autograd.grad(s, leaves, allow_unused=True, retain_graph=True)
        hv = [h if h is not None else torch.zeros_like(l) for h, l in zip(hv, leaves)]
    else:
        hv = [torch.zeros_like(l) for l in leaves]
    # J·v of the last node: the double-backward trick (the VJP of the VJP is linear in u).
    u = torch.zeros_like(last, requires_grad=True)
    vjp = torch.autograd.grad(last, leaves, u, create_graph=True, allow_unused=True)
    terms = [(g * d).sum() for g, d in zip(vjp, dirs) if g is not None]
    if terms and sum(terms).requires_grad:
        jv = torch.autograd.grad(sum(terms), u, allow_unused=True)[0]
        jv = torch.zeros_like(last) if jv is None else jv
    else:
        jv = torch.zeros_like(last)
    # PyTorch 1.13 returns "efficient zero tensors" from some double-backward rules (abs, sgn):
    # their .numpy() reads uninitialised memory, so they are materialised first.
    dense = lambda t: torch.zeros(t.shape, dtype=t.dtype) if getattr(t, "_is_zerotensor", lambda: False)() else t
    det = lambda ts: [dense(t).detach().clone().numpy() for t in ts]
    return {"value": det(nodes), "grad": det(grads), "hvp": det(hv), "jvp": det([jv])[0]}


# ---- generator ----------------------------------------------------------------------------------
class Gen:
    def __init__(self, rng):
        self.r = rng
        self.leaves = []
        self.ops = []
        self.shape = []  # per node
        self.pos = []    # per node: values known to be > 0.1

    def leaf(self, shape, positive=False):
        r = self.r
        n = int(np.prod(shape)) if shape else 1
        vals = [r.uniform(0.5, 2.0) if positive else r.gauss(0, 1) for _ in range(n)]
        self.leaves.append({"shape": list(shape), "values": vals})
        self.shape.insert(len(self.leaves) - 1, tuple(shape))
        self.pos.insert(len(self.leaves) - 1, positive)
        # leaves come first: shift the ids of ops already written
        for op in self.ops:
            op["in"] = [i + 1 if i >= len(self.leaves) - 1 else i for i in op["in"]]
        return len(self.leaves) - 1

    def add(self, op, shape, positive=False):
        self.ops.append(op)
        self.shape.append(tuple(shape))
        self.pos.append(positive)
        return len(self.shape) - 1

    def rand_shape(self):
        r = self.r
        return [r.randint(1, 4) for _ in range(r.choice([0, 1, 2, 2, 2, 3]))]

    def pick(self, pred=lambda s, p: True):
        ks = [k for k in range(len(self.shape)) if pred(self.shape[k], self.pos[k])]
        return self.r.choice(ks) if ks else None

    def step(self):
        r = self.r
        k = self.pick()
        s = self.shape[k]
        nd = len(s)
        kind = r.choices(["unary", "binary", "reduce", "shape", "linalg", "nn", "leaf", "tour"],
                         [20, 22, 12, 16, 8, 10, 6, 8])[0]
        if kind == "tour":
            return self.tour(k)
        if kind == "leaf":
            sub = [d if r.random() < 0.6 else 1 for d in s][r.randrange(nd + 1):] if nd else []
            return self.leaf(sub if r.random() < 0.7 else self.rand_shape(), positive=r.random() < 0.3)
        if kind == "unary":
            fn = r.choice(UNARY)
            if fn in POSITIVE_IN:
                k = self.pick(lambda s, p: p)
                if k is None:
                    return None
                s = self.shape[k]
            return self.add({"op": fn, "in": [k]}, s, fn in ("exp", "sqrt", "rsqrt", "sigmoid"))
        if kind == "binary":
            fn = r.choice(["add", "sub", "mul", "div", "pow", "pow_scalar", "maximum", "minimum", "where"])
            other = self.pick(lambda t, p: bshape(t, s) is not None)
            out = bshape(self.shape[other], s)
            if fn == "div":
                other = self.pick(lambda t, p: p and bshape(t, s) is not None)
                if other is None:
                    return None
                return self.add({"op": "div", "in": [k, other]}, bshape(self.shape[other], s), self.pos[k])
            if fn == "pow":
                base = self.pick(lambda t, p: p)
                if base is None:
                    return None
                o = self.pick(lambda t, p: bshape(t, self.shape[base]) is not None)
                return self.add({"op": "pow", "in": [base, o]}, bshape(self.shape[base], self.shape[o]), True)
            if fn == "pow_scalar":
                e = r.choice([2.0, 3.0, 0.5, -1.0])
                if e in (0.5, -1.0) and not self.pos[k]:
                    return None
                return self.add({"op": "pow_scalar", "in": [k], "exponent": e}, s, self.pos[k] and e != 3.0)
            if fn == "where":
                c1 = self.pick(lambda t, p: bshape(t, out) is not None)
                shp = bshape(bshape(self.shape[c1], out), s)
                return self.add({"op": "where", "in": [c1, k, k, other], "cmp": r.choice(["gt", "lt"])},
                                bshape(self.shape[other], shp), False) if shp else None
            return self.add({"op": fn, "in": [k, other]}, out, fn in ("add", "mul", "maximum", "minimum")
                            and self.pos[k] and self.pos[other])
        if kind == "reduce":
            fn = r.choice(["sum", "mean", "max", "min", "softmax", "log_softmax", "logsumexp"])
            if fn in ("softmax", "log_softmax", "logsumexp"):
                if nd == 0:
                    return None
                a = r.randrange(-nd, nd)
                if fn == "logsumexp":
                    kd = r.random() < 0.5
                    return self.add({"op": fn, "in": [k], "axis": a, "keepdim": kd}, red(s, [a % nd], kd))
                return self.add({"op": fn, "in": [k], "axis": a}, s, fn == "softmax")
            axes = [d for d in range(nd) if r.random() < 0.5]
            kd = r.random() < 0.4
            return self.add({"op": fn, "in": [k], "axes": axes, "keepdim": kd}, red(s, axes or list(range(nd)), kd),
                            self.pos[k] and fn != "sum" or self.pos[k] and fn == "sum")
        if kind == "shape":
            fn = r.choice(["reshape", "permute", "slice", "expand", "unsqueeze", "squeeze", "concat", "stack"])
            if fn == "reshape":
                n = int(np.prod(s)) if s else 1
                shp = factor(n, r)
                return self.add({"op": fn, "in": [k], "shape": shp}, shp, self.pos[k])
            if fn == "permute" and nd:
                dims = list(range(nd))
                r.shuffle(dims)
                return self.add({"op": fn, "in": [k], "dims": dims}, [s[d] for d in dims], self.pos[k])
            if fn == "slice" and nd:
                d = r.randrange(nd)
                start = r.randrange(s[d])
                stop = r.randint(start + 1, s[d])
                step = r.choice([1, 1, 2])
                t = list(s)
                t[d] = len(range(start, stop, step))
                return self.add({"op": fn, "in": [k], "dim": d, "start": start, "stop": stop, "step": step}, t,
                                self.pos[k])
            if fn == "expand":
                t = [r.randint(2, 3) if d == 1 else d for d in s]
                lead = [r.randint(1, 3)] if r.random() < 0.3 else []
                return self.add({"op": fn, "in": [k], "shape": lead + t}, lead + t, self.pos[k])
            if fn == "unsqueeze":
                a = r.randint(0, nd)
                return self.add({"op": fn, "in": [k], "axes": [a]}, list(s[:a]) + [1] + list(s[a:]), self.pos[k])
            if fn == "squeeze":
                ones = [d for d in range(nd) if s[d] == 1]
                if not ones:
                    return None
                return self.add({"op": fn, "in": [k], "axes": ones}, [x for x in s if x != 1], self.pos[k])
            if fn in ("concat", "stack"):
                same = [j for j in range(len(self.shape)) if self.shape[j] == s]
                ins = [k] + [r.choice(same) for _ in range(r.randint(1, 2))]
                if fn == "concat":
                    if nd == 0:
                        return None
                    a = r.randrange(nd)
                    t = list(s)
                    t[a] *= len(ins)
                else:
                    a = r.randint(0, nd)
                    t = list(s[:a]) + [len(ins)] + list(s[a:])
                return self.add({"op": fn, "in": ins, "axis": a}, t, all(self.pos[j] for j in ins))
            return None
        if kind == "linalg":
            if nd == 0:
                return None
            kk = s[-1]
            b = self.leaf([kk, r.randint(1, 3)] if r.random() < 0.7 else [kk])
            bs = self.shape[b]
            k = k + 1 if k >= b else k  # the new leaf shifted the op ids
            t = list(s[:-1]) + list(bs[1:]) if len(bs) == 2 else list(s[:-1])
            return self.add({"op": "matmul", "in": [k, b]}, t)
        fn = r.choice(["sce_probs", "sce_index", "mse", "layer_norm", "batch_norm", "embedding", "conv2d"])
        if fn in ("sce_probs", "sce_index", "batch_norm") and nd != 2:
            if nd == 0 or fn == "batch_norm" and nd != 4:
                return None
            if fn != "batch_norm":
                return None
        if fn == "sce_probs":
            t = self.pick(lambda t, p: t == s and p)
            if t is None:
                t = self.leaf(list(s), positive=True)
                k = k + 1 if k >= t else k
            return self.add({"op": fn, "in": [k, t]}, [])
        if fn == "sce_index":
            return self.add({"op": fn, "in": [k], "targets": [r.randrange(s[1]) for _ in range(s[0])]}, [])
        if fn == "mse":
            o = self.pick(lambda t, p: t == s)
            return self.add({"op": fn, "in": [k, o]}, [])
        if fn in ("layer_norm", "batch_norm"):
            if nd == 0:
                return None
            c = s[-1] if fn == "layer_norm" else s[1]
            if fn == "batch_norm" and (int(np.prod(s)) // c) < 2:
                return None
            if fn == "layer_norm" and c < 2:
                return None
            g = self.leaf([c], positive=True)
            b = self.leaf([c])
            k = k + 2 if k >= g else k
            return self.add({"op": fn, "in": [k, g, b], "eps": 1e-5}, s)
        if fn == "embedding":
            w = self.leaf([r.randint(2, 5), r.randint(1, 3)])
            ishape = [r.randint(1, 3) for _ in range(r.randint(1, 2))]
            idx = [r.randrange(self.shape[w][0]) for _ in range(int(np.prod(ishape)))]
            return self.add({"op": fn, "in": [w], "indices": idx, "ishape": ishape}, ishape + [self.shape[w][1]])
        if fn == "conv2d":
            n, c, h, wd = r.randint(1, 2), r.randint(1, 2), r.randint(3, 5), r.randint(3, 5)
            x = self.leaf([n, c, h, wd])
            o, kh, kw = r.randint(1, 2), r.randint(1, 3), r.randint(1, 3)
            w = self.leaf([o, c, kh, kw])
            x = x if x < w else x  # leaves are appended in order
            stride, pad = r.choice([1, 1, 2]), r.choice([0, 1])
            oh, ow = (h + 2 * pad - kh) // stride + 1, (wd + 2 * pad - kw) // stride + 1
            return self.add({"op": fn, "in": [x, w], "stride": stride, "pad": pad}, [n, o, oh, ow])
        return None


    def node_of(self, k, shape):
        """Node k (sometimes) when it has `shape`'s rank and sizes (None: any), else a new leaf of that
        rank (sizes 1..4 where None)."""
        s = self.shape[k]
        if len(s) == len(shape) and all(w is None or a == w for a, w in zip(s, shape)) and self.r.random() < 0.6:
            return k, s
        leaf = self.leaf([w if w is not None else self.r.randint(1, 4) for w in shape])
        return leaf, self.shape[leaf]

    def tour(self, k):
        """The workload tour's ops: pooling, conv_transpose2d, LSTM/GRU cells, spmm, dropout."""
        r = self.r
        fn = r.choice(["max_pool2d", "avg_pool2d", "conv_transpose2d", "lstm_cell", "gru_cell", "spmm", "dropout"])
        if fn in ("max_pool2d", "avg_pool2d"):
            x, s = self.node_of(k, [None, None, None, None])
            kk = r.randint(1, 3)
            pad = r.randint(0, kk // 2)
            stride = r.randint(1, 2)
            if min(s[2], s[3]) + 2 * pad < kk:
                return None
            oh, ow = (s[2] + 2 * pad - kk) // stride + 1, (s[3] + 2 * pad - kk) // stride + 1
            op = {"op": fn, "in": [x], "k": kk, "stride": stride, "pad": pad}
            if fn == "avg_pool2d":
                op["include_pad"] = r.random() < 0.5
            return self.add(op, [s[0], s[1], oh, ow], self.pos[x] and fn == "avg_pool2d")
        if fn == "conv_transpose2d":
            x, s = self.node_of(k, [None, None, None, None])
            co, kh = r.randint(1, 2), r.randint(1, 3)
            w = self.leaf([s[1], co, kh, kh])
            x = x + 1 if x >= w else x  # the new leaf shifted the op ids
            stride = r.randint(1, 2)
            pad, opad = r.randint(0, 1), r.randint(0, stride - 1)
            oh, ow = (s[2] - 1) * stride - 2 * pad + kh + opad, (s[3] - 1) * stride - 2 * pad + kh + opad
            if min(oh, ow) < 1:
                return None
            return self.add({"op": fn, "in": [x, w], "stride": stride, "pad": pad, "opad": opad}, [s[0], co, oh, ow])
        if fn in ("lstm_cell", "gru_cell"):
            x, s = self.node_of(k, [None, None])
            b, hs, g = s[0], r.randint(1, 3), 4 if fn == "lstm_cell" else 3
            ids = [x]
            state = [[b, hs], [b, hs]] if fn == "lstm_cell" else [[b, hs]]  # a GRU has no cell state
            for shape in state + [[g * hs, s[1]], [g * hs, hs], [g * hs], [g * hs]]:
                leaf = self.leaf(shape)
                ids = [i + 1 if i >= leaf else i for i in ids] + [leaf]
            return self.add({"op": fn, "in": ids}, [b, 2 * hs if fn == "lstm_cell" else hs])
        if fn == "spmm":
            x, s = self.node_of(k, [None, None])
            rows = r.randint(1, 4)
            ptr, cols = [0], []
            for _ in range(rows):
                cols += [r.randrange(s[0]) for _ in range(r.randint(0, 3))]  # unsorted, repeats allowed
                ptr.append(len(cols))
            if not cols:
                return None
            v = self.leaf([len(cols)])
            x = x + 1 if x >= v else x
            return self.add({"op": fn, "in": [v, x], "rows": rows, "cols": s[0], "row_ptr": ptr, "col_idx": cols},
                            [rows, s[1]])
        p = r.choice([0.0, 0.2, 0.5])
        return self.add({"op": "dropout", "in": [k], "p": p, "seed": r.randrange(1 << 40), "offset": r.randrange(1 << 20)},
                        self.shape[k])


def bshape(a, b):
    try:
        return list(np.broadcast_shapes(tuple(a), tuple(b)))
    except ValueError:
        return None


def red(s, axes, kd):
    return [1 if i in axes else d for i, d in enumerate(s)] if kd else [d for i, d in enumerate(s) if i not in axes]


def generate(seed, n_ops):
    r = random.Random(seed)
    g = Gen(r)
    g.leaf(g.rand_shape(), positive=r.random() < 0.3)
    while len(g.ops) < n_ops:
        g.step()
    return finish(g, r)


def finish(g, r):
    last = tuple(g.shape[-1]) if g.ops else tuple(g.leaves[-1]["shape"])
    n = int(np.prod(last)) if last else 1
    return {"leaves": g.leaves, "ops": g.ops, "weights": [r.gauss(0, 1) for _ in range(n)],
            "direction": [[r.gauss(0, 1) for _ in l["values"]] for l in g.leaves]}


# ---- comparison ---------------------------------------------------------------------------------
def run_driver(driver, prog, tmp):
    for name in os.listdir(tmp):
        os.remove(os.path.join(tmp, name))
    path = os.path.join(tmp, "program.json")
    with open(path, "w") as f:
        json.dump(prog, f)
    p = subprocess.run([driver, path, tmp], capture_output=True, text=True, timeout=120)
    if p.returncode != 0:
        return None, f"driver failed (rc {p.returncode}): {p.stderr.strip()}"
    meta = json.load(open(os.path.join(tmp, "meta.json")))
    load = lambda name: np.load(os.path.join(tmp, name)) if os.path.exists(os.path.join(tmp, name)) else None
    return (meta["errors"], load), None


def work(prog):
    """Ops plus reduction sizes behind the result (the tolerance's n)."""
    n = 0
    for l in prog["leaves"]:
        n += len(l["values"])
    return 16 * (len(prog["ops"]) + 1) + n


def close(a, b, n):
    if a is None:
        return "missing"
    if a.shape != b.shape:
        return f"shape {list(a.shape)} vs PyTorch {list(b.shape)}"
    scale = max(1.0, float(np.max(np.abs(b), initial=0.0)))
    tol = 64 * EPS * n * scale
    with np.errstate(invalid="ignore", over="ignore"):  # inf - inf: NaN, then judged by a == b
        bad = ~((np.abs(a - b) <= tol) | (np.isnan(a) & np.isnan(b)) | (a == b))
    if bad.any():
        i = tuple(np.argwhere(bad)[0])
        return f"at {list(i)}: {a[i]!r} vs PyTorch {b[i]!r} (max diff {float(np.nanmax(np.abs(a - b))):.3g}, tol {tol:.3g})"
    return None


def compare(driver, prog, tmp, only=None):
    res, err = run_driver(driver, prog, tmp)
    if err:
        return [err]
    errors, load = res
    try:
        ref = torch_run(prog)
    except RuntimeError as e:
        return [f"PyTorch failed ({e}); the generator wrote an invalid DAG"]
    out = []
    for phase, e in errors.items():
        if e is not None and phase not in TABLE["unsupported_phases"].get("skip", []):
            out.append(f"{phase}: ours throws: {e}")
    n = work(prog)
    L = len(prog["leaves"])
    checks = [(f"value_{k}", ref["value"][k]) for k in range(len(ref["value"]))]
    for i in range(L):
        checks += [(f"grad_eager_{i}", ref["grad"][i]), (f"grad_graph_{i}", ref["grad"][i]),
                   (f"hvp_eager_{i}", ref["hvp"][i]), (f"hvp_graph_{i}", ref["hvp"][i])]
    checks.append(("jvp", ref["jvp"]))
    for name, want in checks:
        if only and not name.startswith(only):
            continue
        phase = {"value": "eager", "grad": None, "hvp": None, "jvp": "jvp"}[name.split("_")[0]]
        got = load(name + ".npy")
        if got is None and any(errors.get(p) for p in errors):
            continue  # reported as a phase error
        bad = close(got, np.asarray(want, dtype=np.float64), n)
        if bad:
            out.append(f"{name}: {bad}")
        del phase
    return out


def drop(prog, j):
    """The DAG without op j (its uses re-pointed at its first input when the shapes agree)."""
    L = len(prog["leaves"])
    ops = prog["ops"]
    node = L + j
    repl = ops[j]["in"][0]
    new_ops = []
    for i, op in enumerate(ops):
        if i == j:
            continue
        o = dict(op, **{"in": [x if x < node else (repl if x == node else x - 1) for x in op["in"]]})
        new_ops.append(o)
    return dict(prog, ops=new_ops)


def valid(prog):
    try:
        torch_run(prog)
        return True
    except (RuntimeError, IndexError, ValueError):
        return False


def kinds(msgs):
    """What failed (value/grad/hvp/jvp, or a phase that threw): a shrink step must keep one."""
    return {m.split(":")[0].rstrip("_0123456789") + (" throws" if "throws" in m else "") for m in msgs}


def shrink(driver, prog, tmp, budget_s=60):
    t0 = time.time()
    want = kinds(compare(driver, prog, tmp))
    fails = lambda p: valid(p) and bool(kinds(compare(driver, p, tmp)) & want)
    changed = True
    while changed and time.time() - t0 < budget_s:
        changed = False
        for j in range(len(prog["ops"]) - 1, -1, -1):
            if j >= len(prog["ops"]) or len(prog["ops"]) <= 1:
                continue
            cand = drop(prog, j)
            last = torch_build_shape(cand)
            if last is None:
                continue
            cand = dict(cand, weights=prog["weights"][:int(np.prod(last))] if last else prog["weights"][:1])
            if int(np.prod(last)) != len(cand["weights"]):
                continue
            if fails(cand):
                prog, changed = cand, True
    return prog


def torch_build_shape(prog):
    try:
        leaves = [torch.tensor(l["values"], dtype=torch.float64).reshape(l["shape"]) for l in prog["leaves"]]
        return list(torch_build(prog, leaves)[-1].shape)
    except (RuntimeError, IndexError, ValueError):
        return None


def describe(prog):
    L = len(prog["leaves"])
    lines = [f"  x{i}: leaf {l['shape']}" for i, l in enumerate(prog["leaves"])]
    for j, op in enumerate(prog["ops"]):
        args = ", ".join(f"{k}={v}" for k, v in op.items() if k not in ("op", "in"))
        ins = ", ".join(f"x{i}" for i in op["in"])
        lines.append(f"  x{L + j} = {op['op']}({ins}{', ' if args else ''}{args})")
    return "\n".join(lines)


def main():
    args = oracle_common.arguments(__doc__, "mls-autodiff-oracle", "DAGs", 150, 6)
    torch.set_num_threads(1)
    gen = lambda seed, ops: (lambda p: p if valid(p) else None)(generate(seed, ops))
    return oracle_common.campaign(args, "lab 2", "DAGs", gen, compare, shrink, describe, lambda p: p,
                                  lambda p: len(p["ops"]))


if __name__ == "__main__":
    sys.exit(main())
