"""p.grad between steps is this rank's part of a gradient: a torch.Tensor subclass that runs
elementwise work as any tensor does, but refuses what would silently give this rank's answer
alone (a norm, torch.amp.GradScaler's inf check)."""
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


# Over one rank's part of a gradient, these give that rank's answer alone: a norm (clipping, LAMB's
# trust ratio) or torch.amp.GradScaler's inf check, after which ranks would step differently.
NORMS = _functions("norm", "Tensor.norm", "linalg.norm", "linalg.vector_norm",
                    "linalg.matrix_norm", "_foreach_norm", "frobenius_norm")
INF_CHECKS = _functions("_amp_foreach_non_finite_check_and_unscale_")


class GradShard(torch.Tensor):
    """p.grad between steps: this rank's part of the parameter's gradient (a view of the
    gradient shard). Elementwise work on it (torch.optim's optimizers, zero_grad) is that of a
    plain tensor; a norm or torch.amp.GradScaler's inf check over it raises libfsdp.Error
    instead of silently giving this rank's answer alone."""
    where = "a FullyShard parameter"

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if func in NORMS:
            _refuse("FullyShard", f"{getattr(func, '__name__', func)} over the gradient of "
                    f"{where_of(args)}: p.grad holds this rank's part of the gradient only, so "
                    "its norm would be this rank's alone; clip with ctx.clip_grad_norm(max_norm, "
                    "norm_type) (the global norm over every unit), not "
                    "torch.nn.utils.clip_grad_norm_; an optimizer that needs whole-parameter "
                    "norms (LAMB, LARS) cannot run over shard views")
        if func in INF_CHECKS:
            _refuse("FullyShard", f"torch.amp.GradScaler over the gradient of {where_of(args)}: "
                    "its inf check would see this rank's part of the gradients only, and ranks "
                    "would skip different steps; use libfsdp.GradScaler (every rank skips alike)")
        return super().__torch_function__(func, types, args, kwargs or {})


def where_of(args):
    """The parameter a GradShard among args (or in a list among them) belongs to."""
    for a in args:
        for t in (a if isinstance(a, (list, tuple)) else (a,)):
            if isinstance(t, GradShard) and "where" in t.__dict__:
                return t.where
    return GradShard.where
