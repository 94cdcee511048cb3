#!/usr/bin/python3
"""Differential test of lab 1 (mls::Tensor) against NumPy.

A seeded generator writes random programs over the tensor API (views of views, negative strides,
broadcasting, every dtype, in-place writes through aliases, 0-d and empty tensors). Each program
runs twice: in C++ by `mls-tensor-oracle` (which writes every register as .npy plus metadata) and
here in NumPy. The two must agree on which ops fail, and for every register on the dtype, shape,
values, and, for views, strides, offset and which registers share storage. The lab's documented
deliberate differences from NumPy (dtype lattice, refusals) live in differences.json, which this
script reads: a NumPy result is first brought to the dtype the lab documents, and an op the lab
refuses is expected to throw.

Tolerances come from the dtype and the work behind a value: each program also runs in a float64
"shadow" (float32 promoted to float64), and a float32 result may differ from NumPy by a few times
NumPy's own distance from the shadow plus eps x (reduction sizes along its chain) x scale, eps that
of the least precise float dtype along the chain (a float64 result of a float32 step carries its rounding).

A failing program is shrunk (ops removed, shapes reduced, values simplified) while it still fails,
and printed as a minimal reproduction.

  tensor_oracle.py --driver build/dev/bin/mls-tensor-oracle [--seed S] [--count N] [--keep DIR]
Exit status: 0 when every program agrees, 1 otherwise. Prints "SKIPPED: ..." without NumPy.
"""
import json
import math
import os
import random
import subprocess
import sys
import time

try:
    import numpy as np
except ImportError as e:  # pragma: no cover
    print(f"SKIPPED: NumPy is not available ({e}); install it with scripts/setup.sh")
    sys.exit(0)

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import oracle_common  # noqa: E402
from oracle_common import factor  # noqa: E402
TABLE = json.load(open(os.path.join(HERE, "differences.json")))
ORDER = TABLE["dtype_order"]
PROMO = {(c["a"], c["b"]): c["ours"] for c in TABLE["promotion"]["cases"]}
PROMO.update({(c["b"], c["a"]): c["ours"] for c in TABLE["promotion"]["cases"]})
INT_TO_FLOAT = set(TABLE["integer_to_float"]["ops"])
REFUSALS = {r["key"] for r in TABLE["refusals"]}
DTYPES = ["bool", "int32", "int64", "float32", "float64"]
FLOATS = ("float32", "float64")
UNARY = ["neg", "abs", "exp", "log", "sqrt", "rsqrt", "sin", "cos", "tanh", "sigmoid", "relu", "gelu"]
BINARY = ["add", "sub", "mul", "div", "pow", "maximum", "minimum", "eq", "ne", "lt", "le", "gt", "ge"]
COMPARE = {"eq", "ne", "lt", "le", "gt", "ge"}
# A comparison of floats whose operands are within this relative distance (of max(1, |x|, |y|))
# is a near-tie: its result depends on rounding (see NumpyRun.binary).
NEAR_TIE = {"float32": 1e-4, "float64": 1e-10}


class Refused(Exception):
    """The lab refuses this op by a rule of differences.json (it must throw mls::Error)."""


class Undefined(Exception):
    """The result is not specified (differences.json 'other'): neither side is compared."""


# ---- the lab's dtype rules, read from the table -------------------------------------------------
def lattice(a, b):
    """Dtype two tensors compute in: NumPy's result type, overridden by the table."""
    if (a, b) in PROMO:
        return PROMO[(a, b)]
    later = a if ORDER.index(a) >= ORDER.index(b) else b
    natural = np.result_type(np.dtype(a), np.dtype(b)).name
    assert natural == later, f"differences.json misses a promotion case {a} x {b}: NumPy {natural}"
    return later


def float_of(t):
    return t if t in FLOATS else "float32"  # integer_to_float rule


def scalar_dtype(t, s):
    """python_scalar rule: the dtype a Python scalar takes next to a tensor of dtype t."""
    if t in FLOATS:
        return t
    if not math.isfinite(s) or s != math.floor(s):
        return "float32"
    if t == "bool":
        t = "int64"
    if t == "int32" and -2**31 <= s <= 2**31 - 1:
        return t
    if -2**63 <= s < 2**63:
        return "int64"
    return "float64"


# ---- NumPy side -----------------------------------------------------------------------------------
def root(a):
    while isinstance(a.base, np.ndarray):
        a = a.base
    return a


def addr(a):
    return a.__array_interface__["data"][0]


def writable(v):
    """A writable view of v's elements (NumPy marks broadcast and diagonal views read-only)."""
    if v.flags.writeable:
        return v
    if v.size == 0:
        return v.copy()  # no elements to share (sharing is not compared for empty registers)
    r = root(v)
    return np.ndarray(v.shape, v.dtype, buffer=r, offset=addr(v) - addr(r), strides=v.strides)


def c_order(a):
    """a itself when C-contiguous, else a row-major copy (np.ascontiguousarray makes 0-d 1-d)."""
    return a if a.flags.c_contiguous else a.copy(order="C")


def fresh(values, dtype, shape):
    return np.array(values, dtype=np.float64).reshape(shape).astype(dtype)


def norm_axis(d, n):
    if not -n <= d < n:
        raise IndexError(f"axis {d} out of range for {n} dims")
    return d + n if d < 0 else d


class NumpyRun:
    """Runs a program in NumPy with the lab's rules. shadow=True computes float32 in float64."""

    def __init__(self, shadow=False):
        self.shadow = shadow
        self.reg = {}
        self.undefined = set()  # registers whose values are not specified (float->int of NaN...)

    def ct(self, t):  # compute dtype in this run
        return "float64" if self.shadow and t == "float32" else t

    def cast(self, a, t):
        t = self.ct(t)
        if a.dtype.name == t:
            return a
        if np.dtype(t).kind in "iu" and a.dtype.kind == "f":
            lim = np.iinfo(t)
            with np.errstate(invalid="ignore"):
                bad = ~np.isfinite(a) | (a <= lim.min - 1.0) | (a >= lim.max + 1.0)
            if bad.any():
                self.flag_undefined = True  # differences.json float_to_int_nonfinite
        with np.errstate(all="ignore"):
            return a.astype(t)

    def run(self, ops):
        errors = []
        for op in ops:
            try:
                touched = self.step(op)
                errors.append(None)
                if touched is not None:  # in place: every register viewing that storage changed
                    pass
            except Refused as e:
                errors.append(f"refused: {e}")
            except Undefined as e:
                errors.append(None)
                self.mark_undefined(op, str(e))
            except (ValueError, IndexError, TypeError, AttributeError, KeyError, np.AxisError, ZeroDivisionError) as e:
                errors.append(f"numpy: {type(e).__name__}: {e}")
        return errors

    def mark_undefined(self, op, why):
        if op["op"] in ("copy_", "fill_", "ibinary", "iscalar"):
            r = root(self.reg[op["in"][0]])
            for k, v in self.reg.items():
                if root(v) is r:
                    self.undefined.add(k)
        elif "out" in op:
            self.undefined.add(op["out"])

    def step(self, op):
        name = op["op"]
        ins = [self.reg[i] for i in op.get("in", [])]
        self.flag_undefined = any(i in self.undefined for i in op.get("in", []))
        out = self.compute(name, op, ins)
        if isinstance(out, np.generic):
            out = np.array(out)  # NumPy gives scalars for 0-d results: the lab gives 0-d tensors
        if out is not None:
            in_roots = [root(y) for y in ins]
            if not any(root(out) is r for r in in_roots):
                out = c_order(out)  # differences.json result_layout: new results are row-major
            self.reg[op["out"]] = out
        if self.flag_undefined:
            self.mark_undefined(op, "")
        return None

    def compute(self, name, op, x):
        with np.errstate(all="ignore"):
            return self._compute(name, op, x)

    def _compute(self, name, op, x):
        a = x[0] if x else None
        if name == "tensor":
            return fresh(op["values"], self.ct(op["dtype"]), op["shape"])
        if name == "permute":
            if sorted(norm_axis(d, a.ndim) for d in op["dims"]) != list(range(a.ndim)):
                raise ValueError("not a permutation")
            return np.transpose(a, [norm_axis(d, a.ndim) for d in op["dims"]])
        if name == "transpose":
            if a.ndim < 1:
                raise ValueError("0-d")
            return np.swapaxes(a, norm_axis(op["dim0"], a.ndim), norm_axis(op["dim1"], a.ndim))
        if name == "slice":
            if op["step"] < 1:
                raise ValueError("step")
            d = norm_axis(op["dim"], a.ndim)
            return a[(slice(None),) * d + (slice(op["start"], op["stop"], op["step"]),)]
        if name == "select":
            d = norm_axis(op["dim"], a.ndim)
            n = a.shape[d]
            i = op["index"]
            if not -n <= i < n:
                raise IndexError("index")
            return a[(slice(None),) * d + (i, Ellipsis)]  # Ellipsis: a 0-d view, not a scalar copy
        if name == "expand":
            shape = list(op["shape"])
            if len(shape) < a.ndim:
                raise ValueError("fewer dims")
            lead = len(shape) - a.ndim
            for i, s in enumerate(shape):
                if s == -1:
                    if i < lead:
                        raise ValueError("-1 for a new dim")
                    shape[i] = a.shape[i - lead]
            for i in range(a.ndim):
                if a.shape[i] != 1 and a.shape[i] != shape[lead + i]:
                    raise ValueError("cannot expand")
            return writable(np.broadcast_to(a, shape))
        if name == "squeeze":
            if "dim" in op:
                d = norm_axis(op["dim"], a.ndim)
                if a.shape[d] != 1:
                    raise ValueError("not 1")
                return np.squeeze(a, d)
            return np.squeeze(a)
        if name == "unsqueeze":
            d = op["dim"]
            if not -a.ndim - 1 <= d <= a.ndim:
                raise IndexError("dim")
            return np.expand_dims(a, d + a.ndim + 1 if d < 0 else d)
        if name == "flatten":
            if a.ndim == 0:
                return a.reshape(1)
            s, e = norm_axis(op["start"], a.ndim), norm_axis(op["end"], a.ndim)
            if s > e:
                raise ValueError("start > end")
            return a.reshape(a.shape[:s] + (int(np.prod(a.shape[s:e + 1])),) + a.shape[e + 1:])
        if name == "view":
            v = a.view()
            v.shape = tuple(op["shape"])
            return v
        if name == "reshape":
            return a.reshape(tuple(op["shape"]))
        if name == "diagonal":
            d1, d2 = norm_axis(op["dim1"], a.ndim), norm_axis(op["dim2"], a.ndim)
            if a.ndim < 2 or d1 == d2:
                raise ValueError("diagonal")
            return writable(np.diagonal(a, op["k"], d1, d2))
        if name == "flip":
            return np.flip(a, norm_axis(op["dim"], a.ndim))
        if name in ("chunk", "split"):
            ax = norm_axis(op["axis"], a.ndim)
            n = a.shape[ax]
            if name == "chunk":
                if op["chunks"] < 1:
                    raise ValueError("chunks")
                size = max(1, -(-n // op["chunks"]))
            else:
                size = op["size"]
                if size < 1:
                    raise ValueError("size")
            pieces = max(1, -(-n // size))
            k = op["index"]
            if not 0 <= k < pieces:
                raise IndexError("piece")
            return a[(slice(None),) * ax + (slice(k * size, min(n, (k + 1) * size)),)]
        if name == "compact":
            return c_order(a)
        if name == "clone":
            return a.copy()
        if name == "to":
            return self.cast(a, op["dtype"]) if a.dtype.name != self.ct(op["dtype"]) else a
        if name == "copy_":
            src = np.broadcast_to(x[1], a.shape)
            a[...] = self.cast(np.array(src), a.dtype.name)
            return None
        if name == "fill_":
            a[...] = self.cast(np.array(op["value"]), a.dtype.name)
            return None
        if name == "unary":
            return self.unary(op["fn"], a)
        if name == "binary":
            return self.binary(op["fn"], a, x[1])
        if name == "binary_scalar":
            s = op["scalar"]
            st = scalar_dtype(self.orig(a), s)
            return self.binary(op["fn"], a, np.array(s).astype(self.ct(st)), scalar=True)
        if name == "rdiv_scalar":
            t = float_of(self.orig(a))
            return self.binary("div", np.array(op["scalar"]).astype(self.ct(t)), a)
        if name == "where":
            if x[0].dtype.name != "bool":
                raise ValueError("condition not bool")
            t = lattice(self.orig(x[1]), self.orig(x[2]))
            return np.where(x[0], self.cast(x[1], t), self.cast(x[2], t))
        if name == "ibinary":
            return self.inplace(op["fn"], a, x[1])
        if name == "iscalar":
            s = op["scalar"]
            t = self.orig(a)
            if t == "bool":
                raise Refused("bool_inplace")
            if scalar_dtype(t, s) != t and t not in FLOATS:
                raise Refused("scalar_inplace_widen")
            return self.inplace(op["fn"], a, np.array(s).astype(a.dtype))
        if name == "reduce":
            return self.reduce(op, a)
        if name in ("argmax", "argmin"):
            ax = norm_axis(op["axis"], a.ndim)
            if a.shape[ax] == 0:
                raise ValueError("empty")
            f = np.argmax if name == "argmax" else np.argmin
            return f(a, axis=ax, keepdims=op["keepdim"]).astype(np.int64)
        if name in ("softmax", "log_softmax", "logsumexp"):
            if self.orig(a) not in FLOATS:
                raise Refused("softmax_int")
            ax = norm_axis(op["axis"], a.ndim)
            b = a
            m = np.max(b, axis=ax, keepdims=True) if b.shape[ax] > 0 else np.zeros_like(np.sum(b, axis=ax, keepdims=True))
            ms = np.where(np.isinf(m), 0, m)
            lse = np.log(np.sum(np.exp(b - ms), axis=ax, keepdims=True)) + ms
            if name == "softmax":
                e = np.exp(b - m)
                r = e / np.sum(e, axis=ax, keepdims=True)
            elif name == "log_softmax":
                r = b - lse
            else:
                r = lse if op["keepdim"] else np.squeeze(lse, ax)
            return r.astype(a.dtype)
        if name == "matmul":
            if a.ndim == 0 or x[1].ndim == 0:
                raise ValueError("0-d matmul")
            t = lattice(self.orig(a), self.orig(x[1]))
            if t == "bool":
                raise Refused("bool_matmul")
            return np.matmul(self.cast(a, t), self.cast(x[1], t))
        if name in ("concat", "stack"):
            t = self.orig(x[0])
            for y in x[1:]:
                t = lattice(t, self.orig(y))
            ys = [self.cast(y, t) for y in x]
            if name == "concat":
                if x[0].ndim == 0:
                    raise ValueError("0-d concat")
                return np.concatenate(ys, axis=norm_axis(op["axis"], x[0].ndim))
            return np.stack(ys, axis=norm_axis(op["axis"], x[0].ndim + 1))
        raise KeyError(name)

    # The run's arrays carry float64 for float32 in the shadow: remember the lab dtype.
    def orig(self, a):
        return self.dtype_of.get(id(a), a.dtype.name) if hasattr(self, "dtype_of") else a.dtype.name

    def unary(self, fn, a):
        t = self.orig(a)
        if t == "bool":
            raise Refused("bool_unary")
        if fn in INT_TO_FLOAT:
            a = self.cast(a, float_of(t))
        if fn == "neg":
            return -a
        if fn == "abs":
            return np.abs(a)
        if fn == "relu":
            return np.where(a > 0, a, np.zeros((), a.dtype))
        f = {"exp": np.exp, "log": np.log, "sqrt": np.sqrt, "sin": np.sin, "cos": np.cos, "tanh": np.tanh}
        if fn in f:
            return f[fn](a)
        if fn == "rsqrt":
            return (1 / np.sqrt(a)).astype(a.dtype)
        if fn == "sigmoid":
            return (1 / (1 + np.exp(-a))).astype(a.dtype)
        if fn == "gelu":
            # the tanh form 0.5 x (1 + tanh u) computed as x / (1 + exp(-2u)), as the lab does:
            # the same function without the cancellation in 1 + tanh u for x << 0 (at x = -8 it
            # gives -3.1e-21, where 1 + tanh u rounds to 0 and a comparison with 0 would flip)
            k = np.sqrt(2 / np.pi)
            return (a / (1 + np.exp(-2 * k * (a + 0.044715 * a ** 3)))).astype(a.dtype)
        raise KeyError(fn)

    def binary(self, fn, a, b, scalar=False):
        ta, tb = self.orig(a), self.orig(b)
        t = lattice(ta, tb)
        if fn not in COMPARE:
            if t == "bool":
                raise Refused("bool_arithmetic")
            if fn == "div":
                t = float_of(t)
        np.broadcast_shapes(a.shape, b.shape)
        x, y = self.cast(a, t), self.cast(b, t)
        if fn in COMPARE:
            if t in FLOATS:
                # Operands equal to within rounding (exp(log(1.25)) vs 1.25, e^-4 e^4 vs 1): the two
                # libraries' last bits decide the result, so it is not specified (nor anything
                # computed from it). The values themselves are still checked, with tolerance.
                with np.errstate(all="ignore"):
                    near = np.abs(x - y) <= NEAR_TIE[t] * np.maximum(1.0, np.maximum(np.abs(x), np.abs(y)))
                if np.any(near):
                    self.flag_undefined = True
            return {"eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal, "gt": np.greater,
                    "ge": np.greater_equal}[fn](x, y)
        if fn == "pow" and t not in FLOATS:
            yy = np.broadcast_to(y, np.broadcast_shapes(x.shape, y.shape))
            xx = np.broadcast_to(x, yy.shape)
            pos = xx ** np.maximum(yy, 0)  # int_pow_negative: 0, or +-1 for bases +-1
            neg = np.where(xx == 1, 1, np.where(xx == -1, np.where(yy % 2 == 1, -1, 1), 0)).astype(xx.dtype)
            return np.where(yy < 0, neg, pos).astype(xx.dtype)
        f = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.true_divide, "pow": np.power,
             "maximum": np.maximum, "minimum": np.minimum}[fn]
        r = f(x, y)
        return np.asarray(r).astype(x.dtype)

    def inplace(self, fn, a, b):
        ta, tb = self.orig(a), self.orig(b)
        t = lattice(ta, tb)
        if t == "bool":
            raise ValueError("bool arithmetic")  # the out-of-place rule, same message on both sides
        if ta == "bool":
            raise Refused("bool_inplace")
        if fn == "div":
            t = float_of(t)
        if t in FLOATS and ta not in FLOATS:
            raise TypeError("same_kind: float result into an integer tensor")
        if np.broadcast_shapes(a.shape, b.shape) != a.shape:
            raise ValueError("result does not fit")
        if a.size and any(s == 0 and n > 1 for s, n in zip(a.strides, a.shape)):
            raise ValueError("overlapping destination")
        r = self.binary(fn, a, b)  # computed in full first: NumPy's buffering of overlap
        a[...] = self.cast(np.broadcast_to(r, a.shape), ta)
        return None

    def reduce(self, op, a):
        fn = op["fn"]
        t = self.orig(a)
        axes = op["axes"]
        if a.ndim == 0 and not axes:
            ax = None
        else:
            ax = tuple(norm_axis(d, a.ndim) for d in axes) if axes else tuple(range(a.ndim))
            if len(set(ax)) != len(ax):
                raise ValueError("duplicate axis")
        n = int(np.prod([a.shape[d] for d in ax])) if ax else 1
        kd = op["keepdim"]
        if fn in ("sum", "prod"):
            if t not in FLOATS:
                a = self.cast(a, "int64")
            f = np.sum if fn == "sum" else np.prod
            r = f(a, axis=ax, keepdims=kd)
            return np.asarray(r).astype(a.dtype)
        if fn in ("max", "min"):
            if n == 0:
                raise ValueError("empty max")
            f = np.max if fn == "max" else np.min
            return np.asarray(f(a, axis=ax, keepdims=kd))
        # mean and var of integers or bools: computed in float64, rounded once to float32
        # (differences.json integer_to_float)
        res_t = self.ct(float_of(t))
        x = self.cast(a, float_of(t)) if t in FLOATS else a.astype(np.float64)
        if fn == "mean":
            if n == 0:
                raise Refused("empty_mean")
            return np.asarray(np.sum(x, axis=ax, keepdims=kd) / x.dtype.type(n)).astype(res_t)
        if fn == "var":
            c = op["correction"]
            if c < 0:
                raise ValueError("correction")
            if n - c <= 0:
                raise Refused("empty_mean")
            m = np.sum(x, axis=ax, keepdims=True) / x.dtype.type(n)
            d = x - m
            return np.asarray(np.sum(d * d, axis=ax, keepdims=kd) / x.dtype.type(n - c)).astype(res_t)
        raise KeyError(fn)


class TrackedRun(NumpyRun):
    """A NumpyRun that remembers each array's lab dtype (the shadow stores float32 as float64)."""

    def __init__(self, shadow=False):
        super().__init__(shadow)
        self.dtype_of = {}
        self.keep = []  # keep arrays alive so that id() stays unique

    def _compute(self, name, op, x):
        r = super()._compute(name, op, x)
        if r is not None:
            self.dtype_of[id(r)] = self.lab_dtype(name, op, x, r)
            self.keep.append(r)
        return r

    def lab_dtype(self, name, op, x, r):
        if not self.shadow:
            return r.dtype.name
        if name == "tensor":
            return op["dtype"]
        if name == "to":
            return op["dtype"]
        # float64 in the shadow is float32 in the lab when every float input was float32.
        if r.dtype.name == "float64":
            ins = [self.orig(y) for y in x]
            if "float64" in ins:
                return "float64"
            if name == "binary_scalar" and ins and ins[0] in FLOATS:
                return ins[0]
            return "float32"
        return r.dtype.name


# ---- generator ----------------------------------------------------------------------------------
class Gen:
    def __init__(self, rng):
        self.rng = rng
        self.ops = []
        self.meta = {}  # register -> (shape, dtype, writable)
        self.root = {}  # register -> the register that owns its storage (views inherit it)
        self.n = 0

    VIEWS = {"permute", "transpose", "slice", "select", "expand", "squeeze", "unsqueeze", "flatten", "view",
             "reshape", "diagonal", "flip", "chunk", "split", "compact", "to"}

    def new(self, op, shape, dtype, writable=True):
        op["out"] = self.n
        self.ops.append(op)
        self.meta[self.n] = (tuple(shape), dtype, writable)
        # the register whose storage this one (probably) views: in-place ops aim at aliases
        self.root[self.n] = self.root[op["in"][0]] if op["op"] in self.VIEWS else self.n
        self.n += 1
        return self.n - 1

    def values(self, count, dtype):
        r = self.rng
        if dtype == "bool":
            return [float(r.random() < 0.5) for _ in range(count)]
        if dtype in ("int32", "int64"):
            return [float(r.randint(-4, 4)) for _ in range(count)]
        out = []
        for _ in range(count):
            u = r.random()
            if u < 0.03:
                out.append(r.choice([math.inf, -math.inf]))
            elif u < 0.04:
                out.append(math.nan)
            else:
                out.append(r.randint(-8, 8) / 4)
        return out

    def shape(self, max_nd=4):
        r = self.rng
        nd = r.choice([0, 1, 1, 2, 2, 2, 3, 3, 4][: 6 + max_nd - 1])
        return [r.choice([0, 1, 1, 2, 2, 3, 3, 4, 5]) if r.random() < 0.08 else r.choice([1, 2, 2, 3, 3, 4, 5])
                for _ in range(nd)]

    def tensor(self, shape=None, dtype=None):
        shape = self.shape() if shape is None else shape
        dtype = dtype or self.rng.choice(DTYPES + ["float32", "float64", "int32"])
        return self.new({"op": "tensor", "values": self.values(int(np.prod(shape)) if shape else 1, dtype),
                         "shape": shape, "dtype": dtype}, shape, dtype)

    def pick(self, pred=lambda m: True):
        ks = [k for k, m in self.meta.items() if pred(m)]
        return self.rng.choice(ks) if ks else None

    def axis(self, nd):
        if nd == 0:
            return 0
        d = self.rng.randrange(nd)
        return d - nd if self.rng.random() < 0.3 else d

    def step(self):
        r = self.rng
        k = self.pick()
        shape, dtype, wr = self.meta[k]
        nd = len(shape)
        kind = r.choices(["view", "copy", "unary", "binary", "scalar", "inplace", "reduce", "other", "tensor"],
                         [30, 6, 8, 12, 6, 14, 12, 6, 6])[0]
        if kind == "tensor":
            # often a shape that broadcasts against an existing register
            if r.random() < 0.6 and nd:
                s = [d if r.random() < 0.6 else 1 for d in shape][r.randrange(nd + 1):]
                return self.tensor(s)
            return self.tensor()
        if kind == "view":
            v = r.choice(["permute", "transpose", "slice", "select", "expand", "squeeze", "unsqueeze", "flatten",
                          "view", "reshape", "diagonal", "flip", "chunk", "split"])
            if v == "permute" and nd:
                dims = list(range(nd))
                r.shuffle(dims)
                s = [shape[d] for d in dims]
                return self.new({"op": v, "in": [k], "dims": dims}, s, dtype, wr)
            if v == "transpose" and nd >= 2:
                a, b = self.axis(nd), self.axis(nd)
                s = list(shape)
                s[a], s[b] = s[b], s[a]
                return self.new({"op": v, "in": [k], "dim0": a, "dim1": b}, s, dtype, wr)
            if v == "slice" and nd:
                d = self.axis(nd)
                n = shape[d]
                start, stop = r.randint(-n - 1, n + 1), r.randint(-n - 1, n + 1)
                step = r.choice([1, 1, 2, 3])
                s = list(shape)
                s[d] = len(range(*slice(start, stop, step).indices(n)))
                return self.new({"op": v, "in": [k], "dim": d, "start": start, "stop": stop, "step": step}, s, dtype, wr)
            if v == "select" and nd and shape[self.axis(nd)] > 0:
                d = self.axis(nd)
                if shape[d] == 0:
                    return None
                i = r.randrange(-shape[d], shape[d])
                return self.new({"op": v, "in": [k], "dim": d, "index": i}, shape[:d] + shape[d + 1:] if d >= 0 else
                                list(shape[:nd + d]) + list(shape[nd + d + 1:]), dtype, wr)
            if v == "expand":
                lead = [r.choice([1, 2, 3]) for _ in range(r.choice([0, 0, 1]))]
                s = lead + [r.choice([2, 3]) if d == 1 and r.random() < 0.5 else (-1 if r.random() < 0.3 else d)
                            for d in shape]
                real = lead + [shape[i] if s[len(lead) + i] == -1 else s[len(lead) + i] for i in range(nd)]
                return self.new({"op": v, "in": [k], "shape": s}, real, dtype, False)
            if v == "squeeze":
                if r.random() < 0.5 and nd:
                    d = self.axis(nd)
                    return self.new({"op": v, "in": [k], "dim": d}, [x for i, x in enumerate(shape) if i != d % nd],
                                    dtype, wr)
                return self.new({"op": v, "in": [k]}, [x for x in shape if x != 1], dtype, wr)
            if v == "unsqueeze":
                d = r.randint(-nd - 1, nd)
                dd = d + nd + 1 if d < 0 else d
                return self.new({"op": v, "in": [k], "dim": d}, list(shape[:dd]) + [1] + list(shape[dd:]), dtype, wr)
            if v == "flatten":
                if nd == 0:
                    return self.new({"op": v, "in": [k], "start": 0, "end": -1}, [1], dtype, wr)
                a, b = sorted([r.randrange(nd), r.randrange(nd)])
                return self.new({"op": v, "in": [k], "start": a, "end": b},
                                list(shape[:a]) + [int(np.prod(shape[a:b + 1]))] + list(shape[b + 1:]), dtype, wr)
            if v in ("view", "reshape"):
                n = int(np.prod(shape)) if nd else 1
                s = factor(n, r)
                real = list(s)
                if s and r.random() < 0.3 and n > 0:
                    s[r.randrange(len(s))] = -1
                return self.new({"op": v, "in": [k], "shape": s}, real, dtype, wr)
            if v == "diagonal" and nd >= 2:
                d1, d2 = r.sample(range(nd), 2)
                kk = r.randint(-2, 2)
                n1, n2 = shape[d1], shape[d2]
                ln = max(0, min(n1, n2 - kk)) if kk >= 0 else max(0, min(n1 + kk, n2))
                s = [x for i, x in enumerate(shape) if i not in (d1, d2)] + [ln]
                return self.new({"op": v, "in": [k], "k": kk, "dim1": d1, "dim2": d2}, s, dtype, wr)
            if v == "flip" and nd:
                return self.new({"op": v, "in": [k], "dim": self.axis(nd)}, shape, dtype, wr)
            if v in ("chunk", "split") and nd:
                ax = self.axis(nd)
                n = shape[ax]
                if n == 0:
                    return None
                if v == "chunk":
                    c = r.randint(1, 4)
                    size = -(-n // c)
                    op = {"op": v, "in": [k], "chunks": c, "axis": ax}
                else:
                    size = r.randint(1, 3)
                    op = {"op": v, "in": [k], "size": size, "axis": ax}
                pieces = -(-n // size)
                i = r.randrange(pieces)
                op["index"] = i
                s = list(shape)
                s[ax] = min(n, (i + 1) * size) - i * size
                return self.new(op, s, dtype, wr)
            return None
        if kind == "copy":
            c = r.choice(["compact", "clone", "to", "to", "copy_", "fill_"])
            if c in ("compact", "clone"):
                return self.new({"op": c, "in": [k]}, shape, dtype, wr if c == "compact" else True)
            if c == "to":
                t = r.choice(DTYPES)
                return self.new({"op": "to", "in": [k], "dtype": t}, shape, t, True)
            if not wr:
                return None
            if c == "fill_":
                self.ops.append({"op": "fill_", "in": [k], "value": r.choice([0, 1, -2, 0.5, 2.25])})
                return None
            src = self.pick(lambda m: len(m[0]) <= nd)
            self.ops.append({"op": "copy_", "in": [k, src]})
            return None
        if kind == "unary":
            fn = r.choice(UNARY)
            t = dtype if fn in ("neg", "abs", "relu") else float_of(dtype)
            return self.new({"op": "unary", "in": [k], "fn": fn}, shape, t)
        if kind in ("binary", "inplace"):
            other = self.pick(lambda m: broadcastable(m[0], shape)) if r.random() < 0.9 else self.pick()
            if kind == "inplace" and r.random() < 0.5:  # an operand viewing the destination's storage
                alias = [j for j, m in self.meta.items() if self.root[j] == self.root[k] and broadcastable(m[0], shape)]
                other = r.choice(alias) if alias else other
                if nd and r.random() < 0.3:  # a leading slice broadcast back over the destination
                    d = r.randrange(nd)
                    sl = list(shape)
                    sl[d] = min(1, shape[d])
                    other = self.new({"op": "slice", "in": [k], "dim": d, "start": 0, "stop": 1, "step": 1}, sl,
                                     dtype, wr)
            fn = r.choice(BINARY if kind == "binary" else ["add", "sub", "mul", "div", "add", "mul"])
            if kind == "inplace":
                if not wr:
                    return None
                self.ops.append({"op": "ibinary", "in": [k, other], "fn": fn})
                return None
            oshape, odt, _ = self.meta[other]
            try:
                s = list(np.broadcast_shapes(tuple(shape), tuple(oshape)))
            except ValueError:
                s = shape
            t = "bool" if fn in COMPARE else lattice(dtype, odt)
            if fn == "div":
                t = float_of(t)
            return self.new({"op": "binary", "in": [k, other], "fn": fn}, s, t)
        if kind == "scalar":
            s = r.choice([0, 1, 2, -3, 0.5, -1.25, 3.0, 2**33, math.inf])
            if r.random() < 0.25 and wr:
                self.ops.append({"op": "iscalar", "in": [k], "fn": r.choice(["add", "sub", "mul", "div"]),
                                 "scalar": s if s not in (2**33, math.inf) else 2})
                return None
            if r.random() < 0.15:
                return self.new({"op": "rdiv_scalar", "in": [k], "scalar": s}, shape, float_of(dtype))
            fn = r.choice(BINARY)
            st = scalar_dtype(dtype, s)
            t = "bool" if fn in COMPARE else lattice(dtype, st)
            if fn == "div":
                t = float_of(t)
            return self.new({"op": "binary_scalar", "in": [k], "fn": fn, "scalar": s}, shape, t)
        if kind == "reduce":
            fn = r.choice(["sum", "mean", "prod", "max", "min", "var", "argmax", "argmin", "softmax", "log_softmax",
                           "logsumexp"])
            if fn in ("argmax", "argmin", "softmax", "log_softmax", "logsumexp"):
                ax = self.axis(nd)
                kd = r.random() < 0.5
                op = {"op": fn, "in": [k], "axis": ax, "keepdim": kd}
                if fn in ("softmax", "log_softmax"):
                    del op["keepdim"]
                    return self.new(op, shape, float_of(dtype))
                s = [x for i, x in enumerate(shape) if i != ax % max(nd, 1)] if not kd else \
                    [1 if i == ax % max(nd, 1) else x for i, x in enumerate(shape)]
                return self.new(op, s if nd else [], "int64" if fn.startswith("arg") else float_of(dtype))
            axes = [d for d in range(nd) if r.random() < 0.5]
            axes = [d - nd if r.random() < 0.3 else d for d in axes]
            kd = r.random() < 0.4
            red = set(d % nd for d in axes) if axes else set(range(nd))
            s = [1 if i in red else x for i, x in enumerate(shape)] if kd else [x for i, x in enumerate(shape) if i not in red]
            t = {"sum": "int64", "prod": "int64"}.get(fn, dtype) if dtype not in FLOATS else dtype
            if fn in ("mean", "var"):
                t = float_of(dtype)
            op = {"op": "reduce", "in": [k], "fn": fn, "axes": axes, "keepdim": kd}
            if fn == "var":
                op["correction"] = r.choice([0, 1])
            return self.new(op, s, t)
        if kind == "other":
            o = r.choice(["matmul", "concat", "stack", "where"])
            if o == "matmul":
                if nd == 0:
                    return None
                kdim = shape[-1]
                b = self.tensor([kdim, r.randint(1, 4)] if r.random() < 0.7 else [kdim],
                                r.choice(["float32", "float64", "int32", "int64"]))
                bshape = self.meta[b][0]
                t = lattice(dtype, self.meta[b][1])
                s = list(shape[:-1]) + list(bshape[1:])
                return self.new({"op": "matmul", "in": [k, b]}, s, t)
            if o in ("concat", "stack"):
                others = [x for x, m in self.meta.items() if m[0] == shape]
                ins = [k] + [r.choice(others) for _ in range(r.randint(0, 2))]
                ax = self.axis(nd + (o == "stack"))
                if o == "stack":
                    s = list(shape)
                    s.insert(ax % (nd + 1), len(ins))
                else:
                    if nd == 0:
                        return None
                    s = list(shape)
                    s[ax % nd] *= len(ins)
                t = dtype
                for x in ins[1:]:
                    t = lattice(t, self.meta[x][1])
                return self.new({"op": o, "in": ins, "axis": ax}, s, t)
            c = self.pick(lambda m: m[1] == "bool" and broadcastable(m[0], shape))
            if c is None:
                return None
            b = self.pick(lambda m: broadcastable(m[0], shape))
            return self.new({"op": "where", "in": [c, k, b]}, list(np.broadcast_shapes(self.meta[c][0], shape,
                                                                                      self.meta[b][0])),
                            lattice(dtype, self.meta[b][1]))
        return None


def broadcastable(a, b):
    try:
        np.broadcast_shapes(tuple(a), tuple(b))
        return True
    except ValueError:
        return False


def generate(seed, n_ops):
    r = random.Random(seed)
    g = Gen(r)
    for _ in range(r.randint(1, 3)):
        g.tensor()
    while len(g.ops) < n_ops:
        try:
            g.step()
        except (ValueError, ZeroDivisionError, IndexError):
            pass
    return g.ops


# ---- comparison ---------------------------------------------------------------------------------
EPS = {"float32": np.finfo(np.float32).eps, "float64": np.finfo(np.float64).eps}


def work(ops):
    """Per register: the accumulated reduction size along its chain (the tolerance's 'n')."""
    w = {}
    last_write = {}
    for op in ops:
        ins = op.get("in", [])
        base = max([w.get(i, 0) for i in ins] + [0])
        cost = 4
        if op["op"] in ("reduce", "softmax", "log_softmax", "logsumexp", "matmul"):
            cost += 64  # the reduction sizes are small (<= 5^4): a fixed bound keeps it simple
        if "out" in op:
            w[op["out"]] = base + cost
        else:
            for i in ins[:1]:
                last_write[i] = base + cost
    for k in list(w):
        w[k] = max(w[k], max(last_write.values(), default=0))
    return w


def chain_eps(ops, lab_dtype):
    """Per register: the largest eps of a float dtype along its chain (a float64 result computed
    from a float32 step carries that step's float32 rounding). lab_dtype(k): register k's lab dtype."""
    e = {}
    for op in ops:
        ins = op.get("in", [])
        base = max([e.get(i, 0.0) for i in ins] + [0.0])
        target = op["out"] if "out" in op else (ins[0] if ins else None)
        if target is None:
            continue
        own = EPS.get(lab_dtype(target), 0.0)
        e[target] = max(base, own, e.get(target, 0.0) if "out" not in op else 0.0)
    return e


def finite_json(x):
    """JSON has no inf/nan: they travel as the strings "inf", "-inf", "nan"."""
    if isinstance(x, float) and not math.isfinite(x):
        return "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")
    if isinstance(x, list):
        return [finite_json(y) for y in x]
    if isinstance(x, dict):
        return {k: finite_json(v) for k, v in x.items()}
    return x


def run_driver(driver, ops, tmp):
    prog = os.path.join(tmp, "program.json")
    with open(prog, "w") as f:
        json.dump({"ops": finite_json(ops)}, f)
    for name in os.listdir(tmp):
        if name.endswith(".npy"):
            os.remove(os.path.join(tmp, name))
    p = subprocess.run([driver, prog, tmp], capture_output=True, text=True, timeout=60)
    if p.returncode != 0:
        return None, f"driver failed (rc {p.returncode}): {p.stderr.strip()}"
    meta = json.load(open(os.path.join(tmp, "meta.json")))
    regs = {int(k): (v, np.load(os.path.join(tmp, f"r{k}.npy"))) for k, v in meta["registers"].items()}
    return (meta["errors"], regs), None


def compare(driver, ops, tmp):
    """Returns a list of mismatch strings (empty when the program agrees)."""
    res, err = run_driver(driver, ops, tmp)
    if err:
        return [err]
    our_errors, ours = res
    npr, shadow = TrackedRun(False), TrackedRun(True)
    np_errors = npr.run(ops)
    shadow.run(ops)
    out = []
    for i, (a, b) in enumerate(zip(our_errors, np_errors)):
        if (a is None) != (b is None):
            out.append(f"op {i} ({ops[i]['op']}): ours {'ok' if a is None else 'throws: ' + a}, "
                       f"NumPy {'ok' if b is None else b}")
    if out:
        return out
    w = work(ops)
    ce = chain_eps(ops, lambda k: npr.reg[k].dtype.name if k in npr.reg else "")
    roots = {}
    for k, arr in npr.reg.items():
        roots[k] = root(arr)
    for k, (m, val) in ours.items():
        if k not in npr.reg:
            out.append(f"r{k}: defined by ours only")
            continue
        ref = npr.reg[k]
        if m["dtype"] != ref.dtype.name:
            out.append(f"r{k}: dtype {m['dtype']}, NumPy (lab rules) {ref.dtype.name}")
            continue
        if tuple(m["shape"]) != ref.shape:
            out.append(f"r{k}: shape {m['shape']}, NumPy {list(ref.shape)}")
            continue
        if k not in npr.undefined:
            bad = value_mismatch(val, ref, shadow.reg.get(k), w.get(k, 4), m["dtype"], ce.get(k, 0.0))
            if bad:
                out.append(f"r{k}: values differ: {bad}")
    # views: storage sharing, strides and offset
    keys = [k for k in ours if k in npr.reg]
    for i, k in enumerate(keys):
        for j in keys[i + 1:]:
            s_ours = ours[k][0]["storage"] == ours[j][0]["storage"]
            s_np = roots[k] is roots[j]
            if s_ours != s_np and npr.reg[k].size and npr.reg[j].size:
                out.append(f"r{k}, r{j}: {'share' if s_ours else 'do not share'} storage in ours, "
                           f"{'share' if s_np else 'do not share'} in NumPy")
    for k in keys:
        m, ref = ours[k][0], npr.reg[k]
        if ref.size == 0 or roots[k] is ref:
            continue  # a new array: NumPy's layout follows its inputs (differences.json result_layout)
        item = ref.itemsize
        for d, (n, s_ours, s_np) in enumerate(zip(ref.shape, m["strides"], ref.strides)):
            if n > 1 and s_ours * item != s_np:
                out.append(f"r{k}: strides {m['strides']} (elements), NumPy {[s // item for s in ref.strides]}")
                break
        base = [x for x in keys if roots[x] is roots[k] and ours[x][0]["storage"] == m["storage"]]
        off_np = (addr(ref) - addr(roots[k])) // item
        root_off = [ours[x][0]["offset"] - (addr(npr.reg[x]) - addr(roots[k])) // item for x in base
                    if npr.reg[x].size]
        if root_off and len(set(root_off)) > 1:
            out.append(f"r{k}: offset {m['offset']}, NumPy {off_np} (relative to the shared storage)")
    return out


def value_mismatch(val, ref, sh, work_n, dtype, eps_chain=0.0):
    if val.shape != ref.shape:
        return f"shape {val.shape} vs {ref.shape}"
    if dtype not in FLOATS:
        if not np.array_equal(val, ref):
            idx = np.argwhere(val != ref)[0]
            return f"at {list(idx)}: {val[tuple(idx)]} vs NumPy {ref[tuple(idx)]}"
        return None
    a, b = val.astype(np.float64), ref.astype(np.float64)
    s = sh.astype(np.float64) if sh is not None and sh.shape == ref.shape else b
    nan_a, nan_b = np.isnan(a), np.isnan(b)
    fin = np.isfinite(a) & np.isfinite(b)
    with np.errstate(invalid="ignore"):
        scale = max(1.0, float(np.max(np.abs(np.where(np.isfinite(s), s, 0)), initial=0.0)))
        # NumPy's own distance from the float64 shadow, over the whole register, is the rounding
        # noise of the float32 steps behind it; eps(dtype) x work x scale covers the rest.
        noise = float(np.max(np.abs(np.where(np.isfinite(s) & np.isfinite(b), b - s, 0)), initial=0.0))
        tol = 8 * noise + max(EPS[dtype], eps_chain) * work_n * scale
        # NumPy itself far from the shadow (ill-conditioned: cancellation, division by a rounded 0):
        # the element's value is not meaningful at this precision.
        noisy = ~np.isfinite(s) & np.isfinite(b) | np.isfinite(s) & ~np.isfinite(b) | \
            (np.abs(b - s) > 1e-3 * np.maximum(1.0, np.abs(s)))
        bad = (nan_a != nan_b) | (~fin & ~nan_a & ~nan_b & (a != b)) | (fin & (np.abs(a - b) > tol))
    bad &= ~noisy
    if bad.any():
        idx = tuple(np.argwhere(bad)[0])
        return f"at {list(idx)}: {a[idx]!r} vs NumPy {b[idx]!r} (tol {float(np.broadcast_to(tol, a.shape)[idx]):.3g})"
    return None


# ---- shrinking ----------------------------------------------------------------------------------
def drop(ops, i):
    """ops without op i and without every later op that reads a register it defined."""
    gone = set()
    out = []
    for j, op in enumerate(ops):
        if j == i or any(x in gone for x in op.get("in", [])):
            if "out" in op:
                gone.add(op["out"])
            continue
        out.append(op)
    return out


def kinds(msgs):
    """What failed (an op's error, values, dtype, shape, storage, strides, offset): a shrink step
    must keep one of them, so that shrinking does not wander off to another difference."""
    out = set()
    for m in msgs:
        if m.startswith("op "):
            out.add(m.split(":", 1)[1].split(",")[0].strip()[:12])  # "ours ok" / "ours throws"
        else:
            out.add(m.split(": ", 1)[1].split(" ")[0] if ": " in m else m)
    return out


def shrink(driver, ops, tmp, budget_s=60):
    t0 = time.time()
    want = kinds(compare(driver, ops, tmp))
    fails = lambda p: bool(kinds(compare(driver, p, tmp)) & want)
    changed = True
    while changed and time.time() - t0 < budget_s:
        changed = False
        for i in range(len(ops) - 1, -1, -1):
            if i >= len(ops):
                continue
            cand = drop(ops, i)
            if len(cand) < len(ops) and fails(cand):
                ops, changed = cand, True
        for i, op in enumerate(ops):  # simpler values, then smaller tensors
            if op["op"] != "tensor":
                continue
            for simp in (lambda v: [float(int(x)) if math.isfinite(x) else x for x in v],
                         lambda v: [1.0 if math.isfinite(x) else x for x in v]):
                new = dict(op, values=simp(op["values"]))
                if new != op and fails(ops[:i] + [new] + ops[i + 1:]):
                    ops = ops[:i] + [new] + ops[i + 1:]
                    op = new
                    changed = True
            for d, n in enumerate(op["shape"]):
                for m in sorted({1, n - 1}):
                    if 0 < m < n:
                        shape = list(op["shape"])
                        shape[d] = m
                        vals = np.array(op["values"]).reshape(op["shape"])
                        vals = vals[(slice(None),) * d + (slice(0, m),)]
                        new = dict(op, shape=shape, values=vals.ravel().tolist())
                        if fails(ops[:i] + [new] + ops[i + 1:]):
                            ops = ops[:i] + [new] + ops[i + 1:]
                            op = new
                            changed = True
                            break
    return ops


def as_code(ops):
    lines = []
    for op in ops:
        args = {k: v for k, v in op.items() if k not in ("op", "out", "in")}
        ins = ", ".join(f"r{i}" for i in op.get("in", []))
        lhs = f"r{op['out']} = " if "out" in op else ""
        extra = ", ".join(f"{k}={v!r}" for k, v in args.items())
        lines.append(f"  {lhs}{op['op']}({ins}{', ' if ins and extra else ''}{extra})")
    return "\n".join(lines)


def main():
    args = oracle_common.arguments(__doc__, "mls-tensor-oracle", "programs", 200, 12)
    return oracle_common.campaign(args, "lab 1", "programs", generate, compare, shrink, as_code, finite_json, len)


if __name__ == "__main__":
    sys.exit(main())
