"""p.grad between steps is this rank's part of a gradient: a torch.Tensor subclass that runs
elementwise work as any tensor does and makes what needs the whole gradient global. A norm over
parts (torch.nn.utils.clip_grad_norm_, Tensor.norm, torch.linalg.vector_norm, torch._foreach_norm)
sums the parts' powers over the shard group (fsdp_allreduce), so every rank gets the norm of the
whole gradient, as FSDP2's DTensors give it; torch.amp.GradScaler's inf check is agreed over every
rank, so every rank skips the same steps. Both are collective: every rank makes the same calls, as
clip_grad_norm_ and GradScaler.unscale_ do. What cannot be made global (a norm along a dim or of a
tensor computed from a part, a sum or max over a part) raises libfsdp.Error instead of giving this
rank's answer alone."""
import math

import numpy as np
import torch

from .. import _refuse


def _functions(*names):
    """The torch functions of these dotted names that this PyTorch has."""
    out = set()
    for name in names:
        obj = torch
        for part in name.split("."):
            obj = getattr(obj, part, None)
        if obj is not None:
            out.add(obj)
    return out


# Norms of one tensor: (function, position of the order argument, its keyword, its default).
VECTOR_NORMS = {f: spec for names, spec in (
    (("linalg.vector_norm",), (1, "ord", 2)),
    (("norm", "Tensor.norm"), (1, "p", "fro")),
    (("linalg.norm",), (1, "ord", None))) for f in _functions(*names)}
FOREACH_NORMS = _functions("_foreach_norm")
# Norms that have no meaning over flat parts.
OTHER_NORMS = _functions("linalg.matrix_norm", "frobenius_norm", "nuclear_norm")
INF_CHECKS = _functions("_amp_foreach_non_finite_check_and_unscale_")
# Reductions over a part (no second tensor: torch.max(a, b) is elementwise) give this rank's
# answer alone (PyTorch 1.13's clip_grad_norm_ takes an inf norm as g.abs().max()).
REDUCTIONS = _functions(*[f"{where}{name}" for where in ("", "Tensor.")
                          for name in ("sum", "mean", "max", "min", "amax", "amin", "prod")])
# Elementwise in-place methods (what torch.optim runs on p.grad): the tensor they return is the
# GradShard they were called on, so nothing needs converting (a fast path past Tensor's own).
IN_PLACE = _functions(*[f"Tensor.{name}_" for name in (
    "add", "sub", "mul", "div", "addcmul", "addcdiv", "lerp", "copy", "zero", "fill", "neg",
    "sqrt", "clamp", "sign", "abs", "pow")])
# What Tensor.__torch_function__ itself disables (named so since PyTorch 2.0).
_NO_SUBCLASS_DISPATCH = getattr(torch._C, "DisableTorchFunctionSubclass",
                                getattr(torch._C, "DisableTorchFunction", None))
# What keeps a part a part (1.13's clip_grad_norm_ takes the norm of g.detach()).
KEEPS_PART = _functions("Tensor.detach")
if hasattr(torch.Tensor, "data"):
    KEEPS_PART.add(torch.Tensor.data.__get__)


class GradShard(torch.Tensor):
    """p.grad between steps: this rank's part of the parameter's gradient (a view of the
    gradient shard), with `ctx` (its context) and `where` (its parameter, for messages)."""
    where = "a FullyShard parameter"

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in IN_PLACE:  # an optimizer's update: returns its GradShard as it is, unwrapped
            with _NO_SUBCLASS_DISPATCH():
                return func(*args, **kwargs)
        if func in VECTOR_NORMS:
            return _vector_norm(func, args, kwargs)
        if func in FOREACH_NORMS:
            return _foreach_norm(args, kwargs)
        if func in OTHER_NORMS:
            _refuse("FullyShard", f"{getattr(func, '__name__', func)} over the gradient of "
                    f"{where_of(args)}: p.grad is this rank's flat part of the gradient; only "
                    "vector norms of whole parts can be made global")
        if func in INF_CHECKS:
            return _unscale(args, kwargs)
        if func in REDUCTIONS and not (len(args) > 1 and isinstance(args[1], torch.Tensor)):
            _refuse("FullyShard", f"{getattr(func, '__name__', func)} over the gradient of "
                    f"{where_of(args)}: p.grad is this rank's part of the gradient, so the "
                    "result would be this rank's alone; norms over p.grad are global "
                    "(torch.nn.utils.clip_grad_norm_, Tensor.norm), or use ctx.clip_grad_norm")
        out = super().__torch_function__(func, types, args, kwargs)
        if func in KEEPS_PART and isinstance(out, GradShard) and isinstance(args[0], GradShard):
            out.__dict__.update(args[0].__dict__)
        return out


def where_of(args):
    """The parameter a GradShard among args (or in a list among them) belongs to."""
    for a in args:
        for t in (a if isinstance(a, (list, tuple)) else (a,)):
            if isinstance(t, GradShard) and "where" in t.__dict__:
                return t.where
    return GradShard.where


def _plain(t):
    return t.as_subclass(torch.Tensor) if isinstance(t, GradShard) else t


def _order(value, call):
    if value in (None, "fro"):
        return 2.0
    if isinstance(value, (int, float)) and not isinstance(value, bool) and (
            value == math.inf or value >= 1):
        return float(value)
    _refuse("FullyShard", f"{call}: order {value!r} over a FullyShard gradient part; the parts "
            "of a gradient combine into its norm for orders >= 1 and inf")


def _global_norms(tensors, p, dtype, call):
    """Each tensor's norm of order p: a GradShard's over the whole gradient (its parts' powers
    summed, or their largest taken, over the shard group: one fsdp_allreduce for all of them),
    any other tensor's as torch computes it."""
    parts = [t for t in tensors if isinstance(t, GradShard)]
    ctxs = {id(t.__dict__.get("ctx")) for t in parts}
    if any("ctx" not in t.__dict__ for t in parts) or len(ctxs) > 1:
        _refuse("FullyShard", f"{call} over a tensor computed from a FullyShard gradient part "
                f"(from {where_of([parts])}): only p.grad itself combines over the ranks")
    local = np.zeros(2 * len(parts))
    for k, t in enumerate(parts):
        v = _plain(t).detach().double().abs()
        if v.numel():
            local[k] = float(v.max() if p == math.inf else v.pow(p).sum())
            local[len(parts) + k] = float(torch.isnan(v).any())
    if parts:
        if p == math.inf:  # MPI_MAX need not propagate NaN: counted apart
            _agree(parts[0].ctx, (local[:len(parts)], "max", "shard"),
                   (local[len(parts):], "sum", "shard"))
        else:
            _agree(parts[0].ctx, (local, "sum", "shard"))
    out, k = [], 0
    for t in tensors:
        want = dtype or t.dtype
        if isinstance(t, GradShard):
            n = math.nan if local[len(parts) + k] else (
                local[k] if p == math.inf else local[k] ** (1.0 / p))
            out.append(torch.tensor(n, dtype=want, device=t.device))
            k += 1
        else:
            out.append(torch.linalg.vector_norm(t, p, dtype=dtype))
    return out


def _agree(ctx, *reductions):
    """Context.allreduce(values, op, group) for each (values, op, group), in order: collective.
    Where the context has units used by any subset of ranks, the all-reduce ended this rank's
    update phase, which the step boundary at the end of backward opened for the optimizer step
    that follows (clip_grad_norm_ and GradScaler come between the two): that step's writes would
    race with the other ranks' one-sided reads of the shards. A step boundary again, which every
    rank reaches as it reaches the all-reduce, reduces nothing (backward's boundary reduced the
    gradients) and opens a new phase."""
    for values, op, group in reductions:
        ctx.allreduce(values, op=op, group=group)
    if any(u.used_by == "any_ranks" for u in ctx.units):
        ctx.step_boundary()


def _vector_norm(func, args, kwargs):
    """torch.linalg.vector_norm / torch.norm / Tensor.norm / torch.linalg.norm of one part: the
    norm of the whole gradient on every rank (collective)."""
    name = getattr(func, "__name__", "norm")
    at, key, default = VECTOR_NORMS[func]
    order = args[at] if len(args) > at else kwargs.get(key, default)
    dim = args[at + 1] if len(args) > at + 1 else kwargs.get("dim")
    if dim is not None:
        _refuse("FullyShard", f"{name} along dim {dim} over the gradient of {where_of(args)}: "
                "p.grad is this rank's flat part of the gradient; only its whole norm combines")
    return _global_norms([args[0]], _order(order, name), kwargs.get("dtype"), name)[0]


def _foreach_norm(args, kwargs):
    """torch._foreach_norm (clip_grad_norm_'s): every part's whole-gradient norm (collective)."""
    tensors = list(args[0])
    order = args[1] if len(args) > 1 else kwargs.get("ord", 2)
    return _global_norms(tensors, _order(order, "_foreach_norm"), kwargs.get("dtype"),
                         "_foreach_norm")


def _unscale(args, kwargs):
    """torch.amp.GradScaler's unscale and inf check over this rank's parts, then the found-inf
    flag agreed over every rank (the largest), so every rank skips the same steps."""
    grads, found_inf, inv_scale = (list(args) + [None, None, None])[:3]
    found_inf = kwargs.get("found_inf", found_inf)
    inv_scale = kwargs.get("inv_scale", inv_scale)
    parts = [g for g in grads if isinstance(g, GradShard) and "ctx" in g.__dict__]
    torch._amp_foreach_non_finite_check_and_unscale_([_plain(g) for g in grads], found_inf,
                                                     inv_scale)
    if parts:
        flag = np.array([float(found_inf.item())])
        _agree(parts[0].ctx, (flag, "max", "world"))
        found_inf.fill_(flag[0])
