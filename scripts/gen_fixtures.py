#!/usr/bin/python3
"""Writes the PyTorch reference fixtures that test/parity checks tprpc against.

Run with Debian's PyTorch (python3-torch, CPU):

    /usr/bin/python3 scripts/gen_fixtures.py        # or: npm run fixtures
    /usr/bin/python3 scripts/gen_fixtures.py --check  # also re-reads ops.json and recomputes it

It writes test/fixtures/{ops,modules,losses,optim,gpt_block}.json. Every case
seeds torch from a hash of its own name, so adding a case never changes the
others. Inputs are float32 values; the recorded outputs and gradients are
PyTorch's, computed on those same values in float64 and rounded to the case's
dtype (see "reference precision" below), so the files are byte-identical on
re-runs, whatever BLAS library torch finds. The float32 run must agree with
that reference within the harness's tolerance, or the generator stops.

File format (all files): {"format": 1, "torch": version, "cases": [case, ...]}.

A tensor is encoded as
    {"shape": [...], "dtype": "float32"|"float64"|"int64"|"bool",
     "data": [row-major values],            # floats: float32 values written in
                                            #   their shortest round-trip form;
                                            #   "inf", "-inf", "nan" as strings
     "view": [{"op": ..., "args": [...]}],  # optional: build contiguous from data,
                                            #   then apply these views in order:
                                            #   transpose(d0, d1), permute(dims),
                                            #   expand(shape), narrow(dim, start, len)
     "requiresGrad": true}                  # optional: the contiguous base is a leaf
A non-finite number argument is {"float": "inf" | "-inf" | "nan"}.
Gradients ("grads") are taken with respect to that contiguous base, so a
view input also checks the view's backward. A tensor list is a JSON list of
tensors; any other JSON value is a plain argument (number, list of dims, null).

ops.json case: {"name", "op", "args", "kwargs", "out", "gradOut", "grads"}
  - op: the tprpc (camelCase) op name; args/kwargs are named as tprpc's
    parameters (dim, keepdim, min, max, approximate, ignoreIndex, ...).
  - out: a tensor, or a list of tensors for ops returning several
    (max/min over a dim -> [values, indices]; split, chunk).
  - gradOut: the upstream gradient(s) fed to backward (same nesting as out,
    null for outputs that carry no gradient), or null when nothing is
    differentiable. backward computes d/dx sum_i (out_i * gradOut_i).sum().
  - grads: one entry per tensor argument in order (depth first through lists):
    its gradient, or null when it does not require grad.
modules.json / gpt_block.json case: {"name", "module", "ctor" | "config",
  "stateDict", "args", "out", "gradOut", "grads", "paramGrads"}
losses.json case: {"name", "loss", "ctor", "args": [input, target], "out",
  "gradOut", "grads"}
optim.json: optimizer cases {"name", "optimizer", "hparams" (torch names),
  "params", "steps": [{"grads", "params" (after the step)}]} and clip cases
  {"name", "clip": "clipGradNorm", "maxNorm", "normType" (2 | "inf"),
  "grads", "totalNorm", "gradsAfter"}.
"""

import json
import math
import os
import sys
import zlib

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT_DIR = os.path.join(ROOT, "test", "fixtures")
FORMAT = 1

torch.set_num_threads(1)  # NB: reductions are summed in one fixed order on every run.


# ---- encoding ----------------------------------------------------------------------------

DTYPE_NAMES = {
    torch.float32: "float32",
    torch.float64: "float64",
    torch.int64: "int64",
    torch.int32: "int32",
    torch.bool: "bool",
}


def enc_float(v, f32):
    if math.isnan(v):
        return "nan"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    # NB: str(np.float32) is the shortest decimal that reads back as the same float32.
    return float(str(np.float32(v))) if f32 else float(v)


def enc(t, view=None, requires_grad=False):
    t = t.detach().contiguous()
    dtype = DTYPE_NAMES[t.dtype]
    flat = t.reshape(-1).tolist()
    if t.dtype.is_floating_point:
        data = [enc_float(v, t.dtype == torch.float32) for v in flat]
    else:
        data = flat
    out = {"shape": list(t.shape), "dtype": dtype, "data": data}
    if view:
        out["view"] = [{"op": op, "args": list(args)} for op, *args in view]
    if requires_grad:
        out["requiresGrad"] = True
    return out


def enc_opt(t):
    return None if t is None else enc(t)


# ---- input specs -------------------------------------------------------------------------


class T:
    """A tensor argument: how to fill its contiguous base, and views to apply."""

    def __init__(self, shape, kind="randn", dtype=torch.float32, grad=None, view=None, scale=1.0, hi=5, values=None):
        dtype = torch.bool if kind == "bool" else dtype
        self.shape, self.kind, self.dtype, self.view = list(shape), kind, dtype, view or []
        self.scale, self.hi, self.values = scale, hi, values
        self.grad = dtype.is_floating_point if grad is None else grad

    def base(self, upcast=False):
        t = self._fill()
        return t.double() if upcast and t.dtype == torch.float32 else t

    def _fill(self):
        s, dt = self.shape, self.dtype
        if self.values is not None:
            return torch.tensor(self.values, dtype=dt).reshape(s)
        if self.kind == "randn":
            return (torch.randn(s, dtype=torch.float64) * self.scale).to(dt)
        if self.kind == "pos":  # in [0.5, 2): safe for log, sqrt, div, pow
            return (torch.rand(s, dtype=torch.float64) * 1.5 + 0.5).to(dt)
        if self.kind == "ties":  # small integers as floats: comparisons see equal values
            return torch.randint(-2, 3, s).to(dt)
        if self.kind == "int":
            return torch.randint(0, self.hi, s, dtype=torch.int64).to(dt)
        if self.kind == "bool":
            return torch.rand(s) > 0.5
        raise ValueError(self.kind)


def apply_view(t, view):
    for op, *args in view:
        if op == "transpose":
            t = t.transpose(*args)
        elif op == "permute":
            t = t.permute(*args)
        elif op == "expand":
            t = t.expand(*args)
        elif op == "narrow":
            t = t.narrow(*args)
        else:
            raise ValueError(op)
    return t


def materialize(spec, leaves, upcast=False):
    """Turns specs into torch values; appends (base, spec) for every tensor in order."""
    if isinstance(spec, T):
        base = spec.base(upcast)
        if spec.grad:
            base.requires_grad_(True)
        leaves.append((base, spec))
        return apply_view(base, spec.view)
    if isinstance(spec, (list, tuple)) and any(isinstance(s, (T, list)) for s in spec):
        return [materialize(s, leaves, upcast) for s in spec]
    return spec


def encode_args(spec, leaves, pos):
    if isinstance(spec, T):
        base, _ = leaves[pos[0]]
        pos[0] += 1
        return enc(base, spec.view, spec.grad)
    if isinstance(spec, (list, tuple)) and any(isinstance(s, (T, list)) for s in spec):
        return [encode_args(s, leaves, pos) for s in spec]
    if isinstance(spec, float) and not math.isfinite(spec):
        return {"float": enc_float(spec, False)}
    return list(spec) if isinstance(spec, tuple) else spec


def seed_for(name):
    torch.manual_seed(zlib.crc32(name.encode()) & 0x7FFFFFFF)


def as_outputs(out):
    if isinstance(out, torch.Tensor):
        return [out], False
    return list(out), True


def run_backward(outs, given=None):
    """Random upstream gradients (or the `given` ones) for the differentiable outputs, then backward."""
    gouts, diff = [], []
    for i, o in enumerate(outs):
        if o.requires_grad:
            g = torch.randn(o.shape, dtype=torch.float64).to(o.dtype) if given is None else given[i].to(o.dtype)
            gouts.append(g)
            diff.append((o, g))
        else:
            gouts.append(None)
    if diff:
        torch.autograd.backward([o for o, _ in diff], [g for _, g in diff])
    return gouts, bool(diff)


def leaf_grad(base, spec, dtype):
    if not spec.grad:
        return None
    return enc(ref(base.grad if base.grad is not None else torch.zeros_like(base), dtype))


# ---- reference precision -----------------------------------------------------------------
#
# Every case runs twice from the same seed: once as written (float32), once with
# its float32 tensors (inputs, weights, upstream gradients: the same float32
# values) widened to float64. The fixture records the float64 results rounded to
# the float32 run's dtypes: a reference that does not hang on the BLAS library's
# summation order, so regenerating gives the same bytes on any machine.
# NB: the float32 run must agree with it to the harness's tolerance, or the
# generator stops: the tolerance has to be one that float32 arithmetic can meet.

FLOAT32_TOL = (1e-4, 1e-5)  # rtol, atol: the harness's default (test/parity/fixtures.ts)
LOOSE_TOL = (1e-3, 1e-4)  # cases whose names contain "big"


def tol_for(name):
    return LOOSE_TOL if "big" in name else FLOAT32_TOL


def ref(t64, dtype):
    """The float64 reference as recorded: float64 noise flushed to 0, then in `dtype`.

    NB: results that are exactly 0 in real arithmetic (a key bias's gradient in
    attention) come out of float64 as ~1e-17 whose bits hang on the BLAS; values
    below 1e-12 of the tensor's largest are such noise, far under any float32
    tolerance. Float64-dtype results keep 12 significant digits for the same reason.
    """
    t = t64.detach()
    if not t.dtype.is_floating_point or t.numel() == 0:
        return t.to(dtype)
    finite = t[torch.isfinite(t)]
    scale = finite.abs().max().item() if finite.numel() else 0.0
    t = torch.where(t.abs() <= 1e-12 * scale, torch.zeros_like(t), t)
    if dtype == torch.float64:
        t = torch.tensor([float(f"{v:.12g}") for v in t.reshape(-1).tolist()], dtype=torch.float64).reshape(t.shape)
    return t.to(dtype)


def agree(name, what, a32, a64):
    if a32 is None and a64 is None:
        return
    a32, a64 = a32.detach(), a64.detach()
    if not a32.dtype.is_floating_point:
        ok = torch.equal(a32, a64)
    else:
        rtol, atol = tol_for(name)
        ok = torch.allclose(a32.double(), a64.double(), rtol=rtol, atol=atol, equal_nan=True)
    if not ok:
        diff = (a32.double() - a64.double()).abs().max().item()
        raise AssertionError(f"{name}: {what}: float32 torch differs from the float64 reference by {diff}")


def agree_grads(name, leaves32, leaves64):
    for i, ((b32, s), (b64, _)) in enumerate(zip(leaves32, leaves64)):
        if s.grad:
            agree(name, f"grads[{i}]", b32.grad, b64.grad)


# ---- ops ---------------------------------------------------------------------------------

def _dims(dim):
    return tuple(dim) if isinstance(dim, list) else dim


def _reduce(fn):
    def run(x, dim=None, keepdim=False):
        return fn(x) if dim is None else fn(x, _dims(dim), keepdim=keepdim)
    return run


def _maxmin(fn):
    def run(x, dim=None, keepdim=False):
        if dim is None:
            return fn(x)
        r = fn(x, dim, keepdim=keepdim)
        return (r.values, r.indices)
    return run


# The torch meaning of every op name used in ops.json (kwargs as tprpc names them).
OPS = {
    "add": lambda a, b: torch.add(a, b),
    "sub": lambda a, b: torch.sub(a, b),
    "mul": lambda a, b: torch.mul(a, b),
    "div": lambda a, b: torch.div(a, b),
    "pow": lambda a, b: torch.pow(a, b),
    "neg": torch.neg,
    "exp": torch.exp,
    "log": torch.log,
    "sqrt": torch.sqrt,
    "abs": torch.abs,
    "tanh": torch.tanh,
    "sigmoid": torch.sigmoid,
    "relu": torch.relu,
    "gelu": lambda x, approximate="none": F.gelu(x, approximate=approximate),
    "clamp": lambda x, min=None, max=None: torch.clamp(x, min=min, max=max),
    "where": lambda c, a, b: torch.where(c, a, b),
    "eq": torch.eq,
    "ne": torch.ne,
    "lt": torch.lt,
    "le": torch.le,
    "gt": torch.gt,
    "ge": torch.ge,
    "maximum": torch.maximum,
    "minimum": torch.minimum,
    "sum": _reduce(torch.sum),
    "mean": _reduce(torch.mean),
    "max": _maxmin(torch.max),
    "min": _maxmin(torch.min),
    "argmax": lambda x, dim=None, keepdim=False: torch.argmax(x, dim=dim, keepdim=keepdim),
    "logsumexp": lambda x, dim, keepdim=False: torch.logsumexp(x, _dims(dim), keepdim=keepdim),
    "prod": lambda x, dim=None, keepdim=False: torch.prod(x) if dim is None else torch.prod(x, dim, keepdim=keepdim),
    "matmul": torch.matmul,
    "bmm": torch.bmm,
    "softmax": lambda x, dim: torch.softmax(x, dim),
    "logSoftmax": lambda x, dim: torch.log_softmax(x, dim),
    "indexSelect": lambda x, dim, idx: torch.index_select(x, dim, idx),
    "gather": lambda x, dim, idx: torch.gather(x, dim, idx),
    "scatterAdd": lambda x, dim, idx, src: torch.scatter_add(x, dim, idx, src),
    "embedding": lambda idx, w: F.embedding(idx, w),
    "maskedFill": lambda x, mask, value: x.masked_fill(mask, value),
    "cat": lambda ts, dim=0: torch.cat(ts, dim),
    "stack": lambda ts, dim=0: torch.stack(ts, dim),
    "split": lambda x, size, dim=0: torch.split(x, size, dim),
    "chunk": lambda x, chunks, dim=0: torch.chunk(x, chunks, dim),
    "narrow": lambda x, dim, start, length: x.narrow(dim, start, length),
    "transpose": lambda x, d0, d1: x.transpose(d0, d1),
    "permute": lambda x, dims: x.permute(*dims),
    "reshape": lambda x, shape: x.reshape(*shape),
    "view": lambda x, shape: x.view(*shape),
    "expand": lambda x, shape: x.expand(*shape),
    "squeeze": lambda x, dim=None: x.squeeze() if dim is None else x.squeeze(dim),
    "unsqueeze": lambda x, dim: x.unsqueeze(dim),
    "contiguous": lambda x: x.contiguous(),
    "layerNorm": lambda x, w, b, normalizedShape, eps=1e-5: F.layer_norm(x, normalizedShape, w, b, eps),
    "linear": lambda x, w, b=None: F.linear(x, w, b),
    "dropout": lambda x, p, training: F.dropout(x, p, training),
    "crossEntropy": lambda x, t, ignoreIndex=-100, reduction="mean", labelSmoothing=0.0: F.cross_entropy(
        x, t, ignore_index=ignoreIndex, reduction=reduction, label_smoothing=labelSmoothing
    ),
    "mseLoss": lambda a, b, reduction="mean": F.mse_loss(a, b, reduction=reduction),
}


def op_case(name, op, args, kwargs=None):
    kwargs = kwargs or {}

    def run(upcast, given=None):
        seed_for(name)
        leaves = []
        vals = materialize(list(args), leaves, upcast)
        out, multi = as_outputs(OPS[op](*vals, **kwargs))
        gouts, any_diff = run_backward(out, given)
        return leaves, out, multi, gouts, any_diff

    leaves, out32, multi, gouts, any_diff = run(False)
    leaves64, out64, _, _, _ = run(True, gouts)
    for i, (a, b) in enumerate(zip(out32, out64)):
        agree(name, f"out[{i}]", a, b)
    agree_grads(name, leaves, leaves64)
    out = [ref(b, a.dtype) for a, b in zip(out32, out64)]
    return {
        "name": name,
        "op": op,
        "args": encode_args(list(args), leaves, [0]),
        "kwargs": kwargs,
        "out": [enc(o) for o in out] if multi else enc(out[0]),
        "gradOut": ([enc_opt(g) for g in gouts] if multi else enc_opt(gouts[0])) if any_diff else None,
        "grads": [leaf_grad(b64, s, b32.dtype) for (b32, s), (b64, _) in zip(leaves, leaves64)],
    }


TR = [("transpose", 0, 1)]


def op_cases():
    cs = []
    add = lambda name, op, args, kwargs=None: cs.append(op_case(name, op, args, kwargs))  # noqa: E731

    # -- elementwise binary: same shape, broadcasting, views, scalars, 0-d, dtypes
    for op in ["add", "sub", "mul", "div"]:
        rhs = "pos" if op == "div" else "randn"
        add(f"{op}_same_3x4", op, [T([3, 4]), T([3, 4], rhs)])
        add(f"{op}_bcast_2x3x4_4", op, [T([2, 3, 4]), T([4], rhs)])
        add(f"{op}_bcast_3x1_1x4", op, [T([3, 1]), T([1, 4], rhs)])
        add(f"{op}_bcast_2x1x4_3x1", op, [T([2, 1, 4]), T([3, 1], rhs)])
        add(f"{op}_transposed_lhs", op, [T([4, 3], view=TR), T([3, 4], rhs)])
        add(f"{op}_expanded_rhs", op, [T([3, 4]), T([1, 4], rhs, view=[("expand", 3, 4)])])
        add(f"{op}_narrowed", op, [T([3, 6], view=[("narrow", 1, 1, 4)]), T([3, 4], rhs)])
        add(f"{op}_scalar", op, [T([3, 4]), 2.5])
        add(f"{op}_0d_rhs", op, [T([3, 4]), T([], rhs)])
        add(f"{op}_float64", op, [T([3, 4], dtype=torch.float64), T([3, 4], rhs, dtype=torch.float64)])
    add("add_int64_promotes", "add", [T([3, 4]), T([3, 4], "int", dtype=torch.int64)])
    add("mul_int_scalar", "mul", [T([2, 3]), 3])
    add("div_int64_tensors", "div", [T([3, 4], "int", dtype=torch.int64), T([4], values=[1, 2, 3, 4], dtype=torch.int64)])

    add("pow_tensor_tensor", "pow", [T([3, 4], "pos"), T([3, 4])])
    add("pow_tensor_tensor_bcast", "pow", [T([2, 3, 4], "pos"), T([4])])
    for e in [2, 3, 0.5, -1.5]:
        add(f"pow_scalar_{e}".replace(".", "p").replace("-", "m"), "pow", [T([3, 4], "pos"), e])
    add("pow_scalar_2_negative_base", "pow", [T([3, 4]), 2])
    add("pow_transposed", "pow", [T([4, 3], "pos", view=TR), 2.5])

    # -- elementwise unary
    unary = {"neg": "randn", "exp": "randn", "log": "pos", "sqrt": "pos", "abs": "randn",
             "tanh": "randn", "sigmoid": "randn", "relu": "randn"}
    for op, kind in unary.items():
        add(f"{op}_3x4", op, [T([3, 4], kind)])
        add(f"{op}_transposed", op, [T([4, 3], kind, view=TR)])
        add(f"{op}_permuted_2x3x4", op, [T([2, 3, 4], kind, view=[("permute", 2, 0, 1)])])
        add(f"{op}_0d", op, [T([], kind)])
    for approx in ["none", "tanh"]:
        add(f"gelu_{approx}_3x4", "gelu", [T([3, 4], scale=2.0)], {"approximate": approx})
        add(f"gelu_{approx}_permuted", "gelu", [T([2, 3, 4], scale=2.0, view=[("permute", 1, 2, 0)])],
            {"approximate": approx})

    add("clamp_min_max", "clamp", [T([3, 4])], {"min": -0.5, "max": 0.5})
    add("clamp_min_only", "clamp", [T([3, 4])], {"min": -0.2, "max": None})
    add("clamp_max_only", "clamp", [T([3, 4])], {"min": None, "max": 0.3})
    add("clamp_transposed", "clamp", [T([4, 3], view=TR)], {"min": -0.5, "max": 0.5})

    add("where_same", "where", [T([3, 4], "bool"), T([3, 4]), T([3, 4])])
    add("where_bcast", "where", [T([3, 1], "bool"), T([1, 4]), T([3, 4])])
    add("where_bcast_3d", "where", [T([4], "bool"), T([2, 3, 4]), T([3, 1])])
    add("where_transposed", "where", [T([3, 4], "bool"), T([4, 3], view=TR), T([3, 4])])

    for op in ["eq", "ne", "lt", "le", "gt", "ge"]:
        add(f"{op}_same", op, [T([3, 4], "ties", grad=False), T([3, 4], "ties", grad=False)])
        add(f"{op}_bcast", op, [T([2, 3, 4], "ties", grad=False), T([4], "ties", grad=False)])
        add(f"{op}_scalar", op, [T([3, 4], "ties", grad=False), 0.0])
        add(f"{op}_transposed", op, [T([4, 3], "ties", grad=False, view=TR), T([3, 4], "ties", grad=False)])

    for op in ["maximum", "minimum"]:
        add(f"{op}_same", op, [T([3, 4]), T([3, 4])])
        add(f"{op}_bcast", op, [T([2, 3, 4]), T([3, 1])])
        add(f"{op}_transposed", op, [T([4, 3], view=TR), T([3, 4])])

    # -- reductions
    for op in ["sum", "mean"]:
        add(f"{op}_all", op, [T([3, 4])])
        add(f"{op}_dim0", op, [T([3, 4])], {"dim": 0})
        add(f"{op}_dim1_keepdim", op, [T([3, 4])], {"dim": 1, "keepdim": True})
        add(f"{op}_dims_0_2", op, [T([2, 3, 4])], {"dim": [0, 2]})
        add(f"{op}_dims_0_2_keepdim", op, [T([2, 3, 4])], {"dim": [0, 2], "keepdim": True})
        add(f"{op}_dim_neg1", op, [T([2, 3, 4])], {"dim": -1})
        add(f"{op}_transposed_dim1", op, [T([4, 3], view=TR)], {"dim": 1})
        add(f"{op}_expanded_all", op, [T([1, 4], view=[("expand", 3, 4)])])
        add(f"{op}_big_all", op, [T([64, 64])])
    for op in ["max", "min"]:
        add(f"{op}_all", op, [T([3, 4])])
        add(f"{op}_dim1", op, [T([3, 4])], {"dim": 1})
        add(f"{op}_dim1_keepdim", op, [T([3, 4])], {"dim": 1, "keepdim": True})
        add(f"{op}_dim0_3d", op, [T([2, 3, 4])], {"dim": 0})
        add(f"{op}_dim_neg1_transposed", op, [T([4, 3], view=TR)], {"dim": -1})
    add("argmax_all", "argmax", [T([3, 4], grad=False)])
    add("argmax_dim1", "argmax", [T([3, 4], grad=False)], {"dim": 1})
    add("argmax_dim0_keepdim", "argmax", [T([3, 4], grad=False)], {"dim": 0, "keepdim": True})
    add("argmax_3d_dim2", "argmax", [T([2, 3, 4], grad=False)], {"dim": 2})
    add("logsumexp_dim1", "logsumexp", [T([3, 4])], {"dim": 1})
    add("logsumexp_dim0_keepdim", "logsumexp", [T([3, 4])], {"dim": 0, "keepdim": True})
    add("logsumexp_dims_0_1", "logsumexp", [T([2, 3, 4])], {"dim": [0, 1]})
    add("logsumexp_large_values", "logsumexp", [T([3, 4], scale=50.0)], {"dim": -1})
    add("logsumexp_transposed", "logsumexp", [T([4, 3], view=TR)], {"dim": 1})
    add("prod_all", "prod", [T([3, 4], "pos")])
    add("prod_dim1", "prod", [T([3, 4], "pos")], {"dim": 1})
    add("prod_dim0_keepdim", "prod", [T([3, 4])], {"dim": 0, "keepdim": True})
    add("prod_3d_dim2", "prod", [T([2, 3, 4])], {"dim": 2})

    # -- matmul, bmm
    add("matmul_1d_1d", "matmul", [T([4]), T([4])])
    add("matmul_2d_1d", "matmul", [T([3, 4]), T([4])])
    add("matmul_1d_2d", "matmul", [T([4]), T([4, 5])])
    add("matmul_2d_2d", "matmul", [T([3, 4]), T([4, 5])])
    add("matmul_3d_2d", "matmul", [T([2, 3, 4]), T([4, 5])])
    add("matmul_3d_1d", "matmul", [T([2, 3, 4]), T([4])])
    add("matmul_1d_3d", "matmul", [T([4]), T([2, 4, 5])])
    add("matmul_batch_bcast", "matmul", [T([2, 1, 3, 4]), T([5, 4, 2])])
    add("matmul_transposed_rhs", "matmul", [T([3, 4]), T([5, 4], view=TR)])
    add("matmul_transposed_both", "matmul", [T([4, 3], view=TR), T([5, 4], view=TR)])
    add("matmul_expanded_batch", "matmul", [T([1, 3, 4], view=[("expand", 2, 3, 4)]), T([2, 4, 2])])
    add("matmul_float64", "matmul", [T([3, 4], dtype=torch.float64), T([4, 2], dtype=torch.float64)])
    add("matmul_big", "matmul", [T([16, 32]), T([32, 8])])
    add("bmm_basic", "bmm", [T([2, 3, 4]), T([2, 4, 5])])
    add("bmm_permuted", "bmm", [T([3, 2, 4], view=[("permute", 1, 0, 2)]), T([2, 5, 4], view=[("transpose", 1, 2)])])

    # -- softmax, logSoftmax
    for op in ["softmax", "logSoftmax"]:
        add(f"{op}_last", op, [T([3, 4])], {"dim": -1})
        add(f"{op}_dim0", op, [T([3, 4])], {"dim": 0})
        add(f"{op}_3d_dim1", op, [T([2, 3, 4])], {"dim": 1})
        add(f"{op}_large_values", op, [T([3, 4], scale=30.0)], {"dim": 1})
        add(f"{op}_transposed", op, [T([4, 3], view=TR)], {"dim": 1})
        add(f"{op}_with_neg_inf", op, [T([2, 4], values=[0.5, float("-inf"), 1.0, -2.0, float("-inf"), 0.0, 3.0, 1.0])],
            {"dim": 1})

    # -- indexing and shape ops
    idx = lambda shape, hi, **kw: T(shape, "int", dtype=torch.int64, hi=hi, **kw)  # noqa: E731
    add("indexSelect_dim0", "indexSelect", [T([5, 4]), 0, T([4], dtype=torch.int64, values=[3, 0, 3, 1])])
    add("indexSelect_dim1", "indexSelect", [T([3, 5]), 1, T([3], dtype=torch.int64, values=[4, 4, 2])])
    add("indexSelect_transposed", "indexSelect", [T([4, 3], view=TR), 1, T([2], dtype=torch.int64, values=[2, 0])])
    add("gather_dim1", "gather", [T([3, 4]), 1, idx([3, 2], 4)])
    add("gather_dim0", "gather", [T([3, 4]), 0, idx([2, 4], 3)])
    add("gather_3d_dim2", "gather", [T([2, 3, 5]), 2, idx([2, 3, 3], 5)])
    add("scatterAdd_dim1", "scatterAdd", [T([3, 5]), 1, idx([3, 4], 5), T([3, 4])])
    add("scatterAdd_dim0", "scatterAdd", [T([3, 4]), 0, idx([5, 4], 3), T([5, 4])])
    add("embedding_2d_idx", "embedding", [T([2, 3], dtype=torch.int64, values=[1, 4, 1, 9, 0, 4]), T([10, 4])])
    add("embedding_1d_idx", "embedding", [idx([5], 6), T([6, 3])])
    add("maskedFill_same", "maskedFill", [T([3, 4]), T([3, 4], "bool"), -1e9])
    add("maskedFill_bcast_mask", "maskedFill", [T([2, 3, 4]), T([1, 4], "bool"), 0.5])
    add("maskedFill_neg_inf", "maskedFill", [T([3, 4]), T([3, 4], "bool"), float("-inf")])
    add("maskedFill_transposed", "maskedFill", [T([4, 3], view=TR), T([3, 4], "bool"), 0.0])
    add("cat_dim0", "cat", [[T([2, 3]), T([4, 3])]], {"dim": 0})
    add("cat_dim1", "cat", [[T([2, 3]), T([2, 5])]], {"dim": 1})
    add("cat_three_neg1", "cat", [[T([2, 3, 1]), T([2, 3, 2]), T([2, 3, 3])]], {"dim": -1})
    add("cat_transposed", "cat", [[T([4, 3], view=TR), T([3, 2])]], {"dim": 1})
    add("stack_dim0", "stack", [[T([3, 4]), T([3, 4])]], {"dim": 0})
    add("stack_dim1", "stack", [[T([3, 4]), T([3, 4]), T([3, 4])]], {"dim": 1})
    add("stack_dim_neg1", "stack", [[T([3, 4]), T([4, 3], view=TR)]], {"dim": -1})
    add("split_size2_dim0", "split", [T([5, 4]), 2], {"dim": 0})
    add("split_sizes_dim1", "split", [T([3, 4]), [1, 3]], {"dim": 1})
    add("split_transposed", "split", [T([4, 3], view=TR), 2], {"dim": 1})
    add("chunk_3_dim0", "chunk", [T([6, 4]), 3], {"dim": 0})
    add("chunk_uneven", "chunk", [T([5, 4]), 2], {"dim": 0})
    add("chunk_dim_neg1", "chunk", [T([2, 3, 6]), 3], {"dim": -1})
    add("narrow_dim1", "narrow", [T([4, 5]), 1, 1, 3])
    add("narrow_dim0", "narrow", [T([4, 5]), 0, 2, 2])
    add("narrow_transposed", "narrow", [T([5, 4], view=TR), 1, 0, 2])
    add("transpose_0_2", "transpose", [T([2, 3, 4]), 0, 2])
    add("transpose_1_2", "transpose", [T([2, 3, 4]), 1, 2])
    add("transpose_neg", "transpose", [T([2, 3, 4]), -1, -2])
    add("permute_201", "permute", [T([2, 3, 4]), [2, 0, 1]])
    add("permute_transposed", "permute", [T([4, 3], view=TR), [1, 0]])
    add("reshape_2x3x4_6x4", "reshape", [T([2, 3, 4]), [6, 4]])
    add("reshape_flatten", "reshape", [T([2, 3, 4]), [-1]])
    add("reshape_transposed", "reshape", [T([4, 3], view=TR), [12]])
    add("reshape_permuted_3d", "reshape", [T([2, 3, 4], view=[("permute", 2, 0, 1)]), [4, -1]])
    add("view_4x6", "view", [T([2, 3, 4]), [4, 6]])
    add("view_neg1", "view", [T([2, 3, 4]), [3, -1]])
    add("view_split_dim", "view", [T([6, 4]), [2, 3, 2, 2]])
    add("expand_3x1", "expand", [T([3, 1]), [3, 4]])
    add("expand_new_dims", "expand", [T([4]), [2, 3, 4]])
    add("expand_neg1", "expand", [T([1, 4]), [2, 3, -1]])
    add("squeeze_all", "squeeze", [T([3, 1, 4, 1])])
    add("squeeze_dim1", "squeeze", [T([3, 1, 4])], {"dim": 1})
    add("squeeze_noop_dim0", "squeeze", [T([3, 1, 4])], {"dim": 0})
    add("unsqueeze_0", "unsqueeze", [T([3, 4]), 0])
    add("unsqueeze_neg1", "unsqueeze", [T([3, 4]), -1])
    add("unsqueeze_1_transposed", "unsqueeze", [T([4, 3], view=TR), 1])
    add("contiguous_transposed", "contiguous", [T([4, 3], view=TR)])
    add("contiguous_permuted", "contiguous", [T([2, 3, 4], view=[("permute", 2, 0, 1)])])
    add("contiguous_expanded", "contiguous", [T([3, 1], view=[("expand", 3, 4)])])

    # -- nn.functional
    add("layerNorm_last", "layerNorm", [T([2, 3, 4]), T([4], scale=0.5), T([4])], {"normalizedShape": [4]})
    add("layerNorm_last2", "layerNorm", [T([2, 3, 4]), T([3, 4]), T([3, 4])], {"normalizedShape": [3, 4]})
    add("layerNorm_no_affine", "layerNorm", [T([3, 5]), None, None], {"normalizedShape": [5]})
    add("layerNorm_eps", "layerNorm", [T([3, 4], scale=0.01), T([4]), T([4])], {"normalizedShape": [4], "eps": 1e-3})
    add("layerNorm_transposed", "layerNorm", [T([4, 3], view=TR), T([4]), T([4])], {"normalizedShape": [4]})
    add("linear_bias", "linear", [T([3, 4]), T([5, 4]), T([5])])
    add("linear_no_bias", "linear", [T([3, 4]), T([5, 4])])
    add("linear_3d", "linear", [T([2, 3, 4]), T([5, 4]), T([5])])
    add("linear_1d", "linear", [T([4]), T([5, 4]), T([5])])
    add("dropout_eval", "dropout", [T([3, 4]), 0.5, False])
    add("dropout_p0_train", "dropout", [T([3, 4]), 0.0, True])
    tgt = lambda values: T([len(values)], dtype=torch.int64, values=values)  # noqa: E731
    for red in ["mean", "sum", "none"]:
        add(f"crossEntropy_{red}", "crossEntropy", [T([4, 5]), tgt([1, 0, 4, 1])], {"reduction": red})
        add(f"crossEntropy_ignore_default_{red}", "crossEntropy", [T([4, 5]), tgt([1, -100, 4, 2])],
            {"reduction": red})
        add(f"crossEntropy_ignore_2_{red}", "crossEntropy", [T([5, 5]), tgt([2, 0, 2, 3, 1])],
            {"ignoreIndex": 2, "reduction": red})
        add(f"crossEntropy_smoothing_{red}", "crossEntropy", [T([4, 5]), tgt([1, 0, 4, 1])],
            {"labelSmoothing": 0.1, "reduction": red})
    add("crossEntropy_smoothing_ignore", "crossEntropy", [T([4, 5]), tgt([1, 3, 4, 3])],
        {"ignoreIndex": 3, "labelSmoothing": 0.2})
    add("crossEntropy_large_logits", "crossEntropy", [T([3, 6], scale=40.0), tgt([5, 0, 2])])
    add("crossEntropy_kdim", "crossEntropy", [T([2, 5, 3]), T([2, 3], "int", dtype=torch.int64)])
    for red in ["mean", "sum", "none"]:
        add(f"mseLoss_{red}", "mseLoss", [T([3, 4]), T([3, 4])], {"reduction": red})
    add("mseLoss_transposed", "mseLoss", [T([4, 3], view=TR), T([3, 4])])
    return cs


# ---- modules and losses ------------------------------------------------------------------

def perturb_(module):
    """Moves LayerNorm's ones/zeros away from the identity so the checks see them."""
    with torch.no_grad():
        for m in module.modules():
            if isinstance(m, nn.LayerNorm) and m.elementwise_affine:
                m.weight.add_(torch.randn_like(m.weight) * 0.2)
                m.bias.add_(torch.randn_like(m.bias) * 0.2)


def module_record(name, kind, meta, make, arg_specs):
    """Runs the module `make()` builds on fresh inputs; meta is {"ctor": ...} or {"config": ...}."""

    def run(upcast, given=None):
        seed_for(name)
        module = make()
        perturb_(module)
        state = {k: enc(v) for k, v in module.state_dict().items()}
        if upcast:
            module.double()
        leaves = []
        vals = materialize(list(arg_specs), leaves, upcast)
        out = module(*vals)
        gouts, _ = run_backward([out], given)
        return module, state, leaves, out, gouts

    m32, state, leaves, out32, gouts = run(False)
    m64, _, leaves64, out64, _ = run(True, gouts)
    agree(name, "out", out32, out64)
    agree_grads(name, leaves, leaves64)
    p32 = dict(m32.named_parameters())
    for k, p in m64.named_parameters():
        agree(name, f"paramGrads[{k}]", p32[k].grad, p.grad)
    return {
        "name": name,
        "module": kind,
        **meta,
        "stateDict": state,
        "args": encode_args(list(arg_specs), leaves, [0]),
        "out": enc(ref(out64, out32.dtype)),
        "gradOut": enc_opt(gouts[0]),
        "grads": [leaf_grad(b64, s, b32.dtype) for (b32, s), (b64, _) in zip(leaves, leaves64)],
        "paramGrads": {k: enc(ref(p.grad, p32[k].dtype)) for k, p in m64.named_parameters()},
    }


MODULES = {
    "Linear": lambda c: nn.Linear(c["inFeatures"], c["outFeatures"], bias=c.get("bias", True)),
    "Embedding": lambda c: nn.Embedding(c["numEmbeddings"], c["embeddingDim"]),
    "LayerNorm": lambda c: nn.LayerNorm(c["normalizedShape"], eps=c.get("eps", 1e-5),
                                        elementwise_affine=c.get("elementwiseAffine", True)),
    "ReLU": lambda c: nn.ReLU(),
    "GELU": lambda c: nn.GELU(approximate=c.get("approximate", "none")),
    "Tanh": lambda c: nn.Tanh(),
    "Sequential": lambda c: nn.Sequential(*[MODULES[l["module"]](l["ctor"]) for l in c["layers"]]),
}


def module_cases():
    cs = []

    def add(name, kind, ctor, args):
        cs.append(module_record(name, kind, {"ctor": ctor}, lambda: MODULES[kind](ctor), args))

    add("Linear_2d", "Linear", {"inFeatures": 4, "outFeatures": 3}, [T([2, 4])])
    add("Linear_3d", "Linear", {"inFeatures": 4, "outFeatures": 3}, [T([2, 5, 4])])
    add("Linear_no_bias", "Linear", {"inFeatures": 4, "outFeatures": 3, "bias": False}, [T([3, 4])])
    add("Linear_transposed_input", "Linear", {"inFeatures": 4, "outFeatures": 2}, [T([4, 3], view=TR)])
    add("Embedding_2d", "Embedding", {"numEmbeddings": 10, "embeddingDim": 4},
        [T([2, 3], dtype=torch.int64, values=[1, 4, 1, 9, 0, 4])])
    add("Embedding_1d", "Embedding", {"numEmbeddings": 6, "embeddingDim": 3}, [T([5], "int", dtype=torch.int64, hi=6)])
    add("LayerNorm_last", "LayerNorm", {"normalizedShape": [4]}, [T([2, 3, 4])])
    add("LayerNorm_last2", "LayerNorm", {"normalizedShape": [3, 4]}, [T([2, 3, 4])])
    add("LayerNorm_no_affine", "LayerNorm", {"normalizedShape": [5], "elementwiseAffine": False}, [T([3, 5])])
    add("Sequential_mlp", "Sequential", {"layers": [
        {"module": "Linear", "ctor": {"inFeatures": 4, "outFeatures": 8}},
        {"module": "ReLU", "ctor": {}},
        {"module": "Linear", "ctor": {"inFeatures": 8, "outFeatures": 3}},
    ]}, [T([5, 4])])
    add("Sequential_ln_gelu", "Sequential", {"layers": [
        {"module": "LayerNorm", "ctor": {"normalizedShape": [4]}},
        {"module": "Linear", "ctor": {"inFeatures": 4, "outFeatures": 6}},
        {"module": "GELU", "ctor": {}},
        {"module": "Linear", "ctor": {"inFeatures": 6, "outFeatures": 2}},
        {"module": "Tanh", "ctor": {}},
    ]}, [T([2, 3, 4])])
    add("ReLU_3x4", "ReLU", {}, [T([3, 4])])
    add("GELU_3x4", "GELU", {}, [T([3, 4], scale=2.0)])
    add("GELU_tanh_3x4", "GELU", {"approximate": "tanh"}, [T([3, 4], scale=2.0)])
    add("Tanh_3x4", "Tanh", {}, [T([3, 4])])
    return cs


LOSSES = {
    "MSELoss": lambda c: nn.MSELoss(reduction=c.get("reduction", "mean")),
    "CrossEntropyLoss": lambda c: nn.CrossEntropyLoss(ignore_index=c.get("ignoreIndex", -100),
                                                      reduction=c.get("reduction", "mean"),
                                                      label_smoothing=c.get("labelSmoothing", 0.0)),
}


def loss_cases():
    cs = []

    def add(name, kind, ctor, args):
        def run(upcast, given=None):
            seed_for(name)
            leaves = []
            vals = materialize(list(args), leaves, upcast)
            out = LOSSES[kind](ctor)(*vals)
            gouts, _ = run_backward([out], given)
            return leaves, out, gouts

        leaves, out32, gouts = run(False)
        leaves64, out64, _ = run(True, gouts)
        agree(name, "out", out32, out64)
        agree_grads(name, leaves, leaves64)
        cs.append({"name": name, "loss": kind, "ctor": ctor, "args": encode_args(list(args), leaves, [0]),
                   "out": enc(ref(out64, out32.dtype)), "gradOut": enc_opt(gouts[0]),
                   "grads": [leaf_grad(b64, s, b32.dtype) for (b32, s), (b64, _) in zip(leaves, leaves64)]})

    tgt = lambda values: T([len(values)], dtype=torch.int64, values=values)  # noqa: E731
    add("MSELoss_default", "MSELoss", {}, [T([3, 4]), T([3, 4])])
    add("MSELoss_sum", "MSELoss", {"reduction": "sum"}, [T([2, 3, 4]), T([2, 3, 4])])
    add("MSELoss_none", "MSELoss", {"reduction": "none"}, [T([3, 4]), T([3, 4])])
    add("MSELoss_target_no_grad", "MSELoss", {}, [T([3, 4]), T([3, 4], grad=False)])
    add("CrossEntropyLoss_default", "CrossEntropyLoss", {}, [T([4, 5]), tgt([1, 0, 4, 1])])
    add("CrossEntropyLoss_default_ignore", "CrossEntropyLoss", {}, [T([4, 5]), tgt([1, -100, 4, -100])])
    add("CrossEntropyLoss_ignore_1", "CrossEntropyLoss", {"ignoreIndex": 1}, [T([5, 5]), tgt([1, 0, 4, 1, 2])])
    add("CrossEntropyLoss_sum", "CrossEntropyLoss", {"reduction": "sum"}, [T([4, 5]), tgt([1, 0, 4, 1])])
    add("CrossEntropyLoss_none", "CrossEntropyLoss", {"reduction": "none"}, [T([4, 5]), tgt([1, 0, 4, 1])])
    add("CrossEntropyLoss_smoothing", "CrossEntropyLoss", {"labelSmoothing": 0.1}, [T([4, 5]), tgt([1, 0, 4, 1])])
    return cs


# ---- optimizers --------------------------------------------------------------------------

OPTIMIZERS = {
    "SGD": torch.optim.SGD,
    "Adam": torch.optim.Adam,
    "AdamW": torch.optim.AdamW,
    "Adagrad": torch.optim.Adagrad,
    "RMSprop": torch.optim.RMSprop,
    "Adadelta": torch.optim.Adadelta,
    "Adamax": torch.optim.Adamax,
    "Rprop": torch.optim.Rprop,
}


def optim_cases():
    cs = []

    def add(name, kind, hparams, shapes=((3, 4), (4,)), steps=3):
        kw = dict(hparams)
        for pair in ("betas", "etas", "step_sizes"):
            if pair in kw:
                kw[pair] = tuple(kw[pair])

        def run(upcast):
            seed_for(name)
            wide = (lambda t: t.double()) if upcast else (lambda t: t)  # noqa: E731
            params = [wide(torch.randn(s)).requires_grad_(True) for s in shapes]
            start = [p.detach().clone() for p in params]
            opt = OPTIMIZERS[kind](params, **kw)
            history = []
            for _ in range(steps):
                grads = [torch.randn(p.shape) for p in params]
                for p, g in zip(params, grads):
                    p.grad = wide(g.clone())
                opt.step()
                history.append((grads, [p.detach().clone() for p in params]))
            return start, history

        start, h32 = run(False)
        _, h64 = run(True)
        rec = {"name": name, "optimizer": kind, "hparams": hparams, "params": [enc(p) for p in start], "steps": []}
        for k, ((grads, p32), (_, p64)) in enumerate(zip(h32, h64)):
            for i, (a, b) in enumerate(zip(p32, p64)):
                agree(name, f"step {k + 1}: params[{i}]", a, b)
            rec["steps"].append({"grads": [enc(g) for g in grads], "params": [enc(ref(p, torch.float32)) for p in p64]})
        cs.append(rec)

    add("SGD_plain", "SGD", {"lr": 0.1})
    add("SGD_momentum", "SGD", {"lr": 0.1, "momentum": 0.9})
    add("SGD_nesterov", "SGD", {"lr": 0.1, "momentum": 0.9, "nesterov": True})
    add("SGD_momentum_weight_decay", "SGD", {"lr": 0.1, "momentum": 0.9, "weight_decay": 0.01})
    add("SGD_dampening", "SGD", {"lr": 0.1, "momentum": 0.9, "dampening": 0.5})
    add("Adam_default", "Adam", {"lr": 0.001})
    add("Adam_lr", "Adam", {"lr": 0.05, "betas": [0.8, 0.99], "eps": 1e-6})
    add("Adam_weight_decay", "Adam", {"lr": 0.05, "weight_decay": 0.1})
    add("Adam_amsgrad", "Adam", {"lr": 0.05, "amsgrad": True})
    add("AdamW_default", "AdamW", {"lr": 0.001})
    add("AdamW_weight_decay", "AdamW", {"lr": 0.05, "weight_decay": 0.1})
    add("Adagrad_default", "Adagrad", {"lr": 0.1})
    add("Adagrad_options", "Adagrad", {"lr": 0.1, "lr_decay": 0.01, "weight_decay": 0.01,
                                       "initial_accumulator_value": 0.1, "eps": 1e-8})
    add("RMSprop_plain", "RMSprop", {"lr": 0.01})
    add("RMSprop_momentum", "RMSprop", {"lr": 0.01, "momentum": 0.9})
    add("RMSprop_centered", "RMSprop", {"lr": 0.01, "centered": True})
    add("RMSprop_all", "RMSprop", {"lr": 0.01, "alpha": 0.9, "momentum": 0.5, "centered": True, "weight_decay": 0.01})
    add("Adadelta_default", "Adadelta", {}, steps=4)
    add("Adadelta_options", "Adadelta", {"lr": 0.5, "rho": 0.8, "eps": 1e-4, "weight_decay": 0.1}, steps=4)
    add("Adadelta_maximize", "Adadelta", {"lr": 1.0, "weight_decay": 0.05, "maximize": True}, steps=4)
    add("Adamax_default", "Adamax", {}, steps=4)
    add("Adamax_options", "Adamax", {"lr": 0.05, "betas": [0.8, 0.99], "eps": 1e-3, "weight_decay": 0.1}, steps=4)
    add("Adamax_maximize", "Adamax", {"lr": 0.05, "weight_decay": 0.05, "maximize": True}, steps=4)
    # Rprop: 6 steps, so that sign flips (after a flip, a skipped step) and kept signs both occur several times.
    add("Rprop_default", "Rprop", {}, steps=6)
    add("Rprop_options", "Rprop", {"lr": 0.05, "etas": [0.3, 1.5], "step_sizes": [0.01, 0.08]}, steps=6)
    add("Rprop_maximize", "Rprop", {"lr": 0.02, "maximize": True}, steps=6)

    def clip(name, max_norm, norm_type):
        def run(upcast):
            seed_for(name)
            params = [torch.randn(s).requires_grad_(True) for s in ((3, 4), (5,))]
            grads = [torch.randn(p.shape) for p in params]
            if upcast:
                params = [p.detach().double().requires_grad_(True) for p in params]
            for p, g in zip(params, grads):
                p.grad = g.clone().to(p.dtype)
            total = torch.nn.utils.clip_grad_norm_(params, max_norm, norm_type)
            return grads, total, [p.grad for p in params]

        grads, t32, after32 = run(False)
        _, t64, after64 = run(True)
        agree(name, "totalNorm", t32, t64)
        for i, (a, b) in enumerate(zip(after32, after64)):
            agree(name, f"gradsAfter[{i}]", a, b)
        cs.append({"name": name, "clip": "clipGradNorm", "maxNorm": max_norm,
                   "normType": "inf" if math.isinf(norm_type) else norm_type,
                   "grads": [enc(g) for g in grads], "totalNorm": enc(ref(t64, torch.float32)),
                   "gradsAfter": [enc(ref(g, torch.float32)) for g in after64]})

    clip("clipGradNorm_l2", 1.0, 2.0)
    clip("clipGradNorm_inf", 0.5, float("inf"))
    clip("clipGradNorm_no_clip", 100.0, 2.0)
    return cs


# ---- GPT block ---------------------------------------------------------------------------

class CausalSelfAttention(nn.Module):
    """nanoGPT-style causal multi-head self-attention (our own code, dropout 0)."""

    def __init__(self, n_embd, n_head, block_size):
        super().__init__()
        self.n_head = n_head
        self.cAttn = nn.Linear(n_embd, 3 * n_embd)
        self.cProj = nn.Linear(n_embd, n_embd)
        self.register_buffer("mask", torch.tril(torch.ones(block_size, block_size)), persistent=False)

    def forward(self, x):
        B, T_, C = x.shape
        hd = C // self.n_head
        q, k, v = self.cAttn(x).split(C, dim=2)
        q = q.view(B, T_, self.n_head, hd).transpose(1, 2)
        k = k.view(B, T_, self.n_head, hd).transpose(1, 2)
        v = v.view(B, T_, self.n_head, hd).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(hd)
        att = att.masked_fill(self.mask[:T_, :T_] == 0, float("-inf"))
        att = torch.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T_, C)
        return self.cProj(y)


class MLP(nn.Module):
    def __init__(self, n_embd):
        super().__init__()
        self.fc = nn.Linear(n_embd, 4 * n_embd)
        self.gelu = nn.GELU()
        self.proj = nn.Linear(4 * n_embd, n_embd)

    def forward(self, x):
        return self.proj(self.gelu(self.fc(x)))


class Block(nn.Module):
    """Pre-LN transformer block: x + attn(ln1(x)), then x + mlp(ln2(x))."""

    def __init__(self, n_embd, n_head, block_size):
        super().__init__()
        self.ln1 = nn.LayerNorm(n_embd)
        self.attn = CausalSelfAttention(n_embd, n_head, block_size)
        self.ln2 = nn.LayerNorm(n_embd)
        self.mlp = MLP(n_embd)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


def gpt_cases():
    cs = []
    config = {"nEmbd": 16, "nHead": 2, "blockSize": 8, "dropout": 0.0}

    def add(name, kind, make, shape):
        cs.append(module_record(name, kind, {"config": config}, make, [T(shape)]))

    mk_block = lambda: Block(config["nEmbd"], config["nHead"], config["blockSize"])  # noqa: E731
    mk_attn = lambda: CausalSelfAttention(config["nEmbd"], config["nHead"], config["blockSize"])  # noqa: E731
    add("TransformerBlock_full", "TransformerBlock", mk_block, [2, 8, 16])
    add("TransformerBlock_short_seq", "TransformerBlock", mk_block, [2, 5, 16])
    add("CausalSelfAttention_full", "CausalSelfAttention", mk_attn, [2, 8, 16])
    return cs


# ---- self-check: rebuild ops.json inputs from the JSON alone and recompute ---------------

def dec(e, upcast=False):
    dt = {v: k for k, v in DTYPE_NAMES.items()}[e["dtype"]]
    data = [float(v) if isinstance(v, str) else v for v in e["data"]]
    base = torch.tensor(data, dtype=dt).reshape(e["shape"])
    if upcast and dt == torch.float32:
        base = base.double()
    if e.get("requiresGrad"):
        base.requires_grad_(True)
    t = base
    for v in e.get("view", []):
        t = apply_view(t, [(v["op"], *v["args"])])
    return base, t


def dec_args(a, bases):
    if isinstance(a, dict) and "shape" in a:
        b, t = dec(a, upcast=True)
        bases.append(b)
        return t
    if isinstance(a, dict) and "float" in a:
        return float(a["float"])
    if isinstance(a, list) and any(isinstance(x, (dict, list)) for x in a):
        return [dec_args(x, bases) for x in a]
    return a


def check():
    """Recomputes every ops.json case (in float64, as written) from its encoded inputs: checks the encoding."""
    with open(os.path.join(OUT_DIR, "ops.json")) as f:
        cases = json.load(f)["cases"]
    for c in cases:
        bases = []
        outs, multi = as_outputs(OPS[c["op"]](*dec_args(c["args"], bases), **c["kwargs"]))
        want = c["out"] if multi else [c["out"]]
        for o, w in zip(outs, want):
            assert torch.equal(ref(o, dec(w)[1].dtype), dec(w)[1]), c["name"]
        if c["gradOut"] is not None:
            gs = c["gradOut"] if multi else [c["gradOut"]]
            pairs = [(o, dec(g, upcast=True)[1]) for o, g in zip(outs, gs) if g is not None]
            torch.autograd.backward([o for o, _ in pairs], [g for _, g in pairs])
        for b, g in zip(bases, c["grads"]):
            if g is not None:
                got = b.grad if b.grad is not None else torch.zeros_like(b)
                assert torch.equal(ref(got, dec(g)[1].dtype), dec(g)[1]), c["name"]
    print(f"check: {len(cases)} ops.json cases rebuild and match")


# ---- main --------------------------------------------------------------------------------

def write(name, cases):
    names = [c["name"] for c in cases]
    assert len(names) == len(set(names)), f"duplicate case names in {name}"
    path = os.path.join(OUT_DIR, name)
    head = json.dumps({"format": FORMAT, "torch": torch.__version__.split("+")[0]})[:-1]
    body = ",\n".join(json.dumps(c, separators=(",", ":"), allow_nan=False) for c in cases)
    with open(path, "w") as f:
        f.write(head + ', "cases": [\n' + body + "\n]}\n")
    print(f"{os.path.relpath(path, ROOT)}: {len(cases)} cases, {os.path.getsize(path)} bytes")


def main():
    os.makedirs(OUT_DIR, exist_ok=True)
    write("ops.json", op_cases())
    write("modules.json", module_cases())
    write("losses.json", loss_cases())
    write("optim.json", optim_cases())
    write("gpt_block.json", gpt_cases())
    if "--check" in sys.argv:
        check()


if __name__ == "__main__":
    main()
