"""Behaviours of FSDP2's test_fully_shard_frozen.py (conformance.py runs each against
fully_shard and FullyShard): parameters with requires_grad=False, frozen before or after
wrapping, within a group or across groups.

check_sharded_parity is FSDP2's helper of that name: full parameters against the reference's,
then this rank's gradient shard against the same slice of the reference's gradient (a parameter
the reference gives no gradient has none with FSDP2; FullyShard's shards are not checked there).
The reference is the unsharded model with its gradients averaged over the ranks (FSDP2's test
uses DDP, with find_unused_parameters where parameters are frozen after wrapping). Each behaviour
runs with torch.optim.Adam over model.parameters(), as FSDP2's test does, and again as "libfsdp
optimizer": there FullyShard gets what its user writes instead, ctx.optimizer("adamw",
handle.units, weight_decay=0) (Adam's update), while the control keeps torch.optim.Adam."""
import copy

from conformance import (
    allreduce_grads, assert_close, batch, behaviour, both_optimizers, check_sharded_parity,
    destroy, LIB_OPTIM, make_optim, nn, parity_step, run, torch, zero_grad)
from torch.distributed._composable import checkpoint  # after conformance: it skips without PyTorch

F = torch.nn.functional


class FsdpMLP(nn.Module):
    """torch.testing._internal.common_fsdp.MLP."""

    def __init__(self, dim, dim_multiplier=4):
        super().__init__()
        self.in_proj = nn.Linear(dim, dim_multiplier * dim)
        self.out_proj = nn.Linear(dim_multiplier * dim, dim)

    def forward(self, x):
        return F.relu(self.out_proj(F.relu(self.in_proj(x))))


def freeze_weights(*models):
    """BitFit: train the biases only."""
    for m in models:
        for name, p in m.named_parameters():
            if "bias" not in name:
                p.requires_grad_(False)


# ---- test_train_mixed_requires_grad_per_group -------------------------------------------------
def mixed_requires_grad_per_group(impl, lib, freeze_after_init):
    """Frozen weights and trainable biases in each group, each reshard_after_forward setting,
    without and with (composable) activation checkpointing."""
    for reshard_after_forward in (True, False):
        for use_ac in (False, True):
            torch.manual_seed(42)
            dim = 32
            model = nn.Sequential(*[FsdpMLP(dim) for _ in range(3)])
            if not freeze_after_init:
                freeze_weights(model)
            ref = copy.deepcopy(model)
            ref_opt = torch.optim.Adam(ref.parameters(), lr=1e-2)
            if use_ac:
                for mlp in model:
                    checkpoint(mlp)
            sharded = impl.shard(model, list(model), reshard_after_forward=reshard_after_forward)
            opt = make_optim(impl, model, sharded, lib)
            if freeze_after_init:
                freeze_weights(model, ref)
            try:
                for it in range(4):
                    x = batch(it, 8, dim)
                    losses = parity_step(ref, ref_opt, model, opt, lambda m: m(x).sum(),
                                         it % 2 == 0)
                    what = (f"reshard_after_forward={reshard_after_forward} "
                            f"checkpoint={use_ac} iteration {it}")
                    check_sharded_parity(impl, model, ref, what)  # stepped, gradients kept
                    assert_close(losses[1].detach(), losses[0].detach(), f"{what}: loss")
            finally:
                destroy(opt)


SOURCE_PER_GROUP = ("test_fully_shard_frozen.py::TestFullyShardFrozen::"
                    "test_train_mixed_requires_grad_per_group")


@behaviour("mixed requires_grad per group, frozen before wrapping, Adam over model.parameters()",
           SOURCE_PER_GROUP)
def per_group_torch(impl):
    mixed_requires_grad_per_group(impl, lib=False, freeze_after_init=False)


@behaviour(f"mixed requires_grad per group, frozen before wrapping, {LIB_OPTIM}",
           SOURCE_PER_GROUP)
def per_group_lib(impl):
    mixed_requires_grad_per_group(impl, lib=True, freeze_after_init=False)


@behaviour("mixed requires_grad per group, frozen after wrapping, Adam over model.parameters()",
           SOURCE_PER_GROUP)
def per_group_after_init_torch(impl):
    mixed_requires_grad_per_group(impl, lib=False, freeze_after_init=True)


@behaviour(f"mixed requires_grad per group, frozen after wrapping, {LIB_OPTIM}",
           SOURCE_PER_GROUP)
def per_group_after_init_lib(impl):
    mixed_requires_grad_per_group(impl, lib=True, freeze_after_init=True)


# ---- test_train_mixed_requires_grad_across_groups ---------------------------------------------
def mixed_requires_grad_across_groups(impl, lib, unfreeze, freeze_before_wrap=False,
                                      may_train=False):
    """Six Linear groups, every other one frozen (FSDP2's comment: "interleave frozen ->
    non-frozen"; its loop freezes seq[0] each time, the intent is ported); the middle iteration
    runs under torch.no_grad(); with unfreeze, the frozen ones train again on the last
    iteration (fine-tuning). FSDP2's test freezes after wrapping; freeze_before_wrap (not in
    FSDP2's test) freezes before, to see unfreezing on its own; may_train gives FullyShard
    frozen_may_train=True (FSDP2 needs no option)."""
    for reshard_after_forward in (True, False):
        torch.manual_seed(42)
        dim, n_linears = 32, 6
        modules = []
        for _ in range(n_linears):
            modules += [nn.Linear(dim, dim), nn.ReLU()]
        model = nn.Sequential(*modules)
        ref = copy.deepcopy(model)

        def set_requires_grad(seq, requires_grad):
            for i, lin in enumerate(m for m in seq if isinstance(m, nn.Linear)):
                if i % 2 == 0:
                    lin.requires_grad_(requires_grad)

        if freeze_before_wrap:
            set_requires_grad(model, False)
        linears = [m for m in model if isinstance(m, nn.Linear)]
        extra = {"frozen_may_train": True} if may_train and not impl.is_fsdp2 else {}
        sharded = impl.shard(model, linears, reshard_after_forward=reshard_after_forward, **extra)
        ref_opt = torch.optim.Adam(ref.parameters(), lr=1e-2)
        opt = make_optim(impl, model, sharded, lib)
        set_requires_grad(model, False)
        set_requires_grad(ref, False)
        n_iters, no_grad_iter = 3, 1
        x = batch(0, 8, dim)
        try:
            for it in range(n_iters):
                what = f"reshard_after_forward={reshard_after_forward} iteration {it}"
                losses = []
                for m, o in ((ref, ref_opt), (model, opt)):
                    if unfreeze and it == n_iters - 1:
                        set_requires_grad(m, True)
                    if it == no_grad_iter:
                        with torch.no_grad():
                            losses.append(m(x).sum())
                    else:
                        losses.append(m(x).sum())
                        losses[-1].backward()
                        if m is ref:
                            allreduce_grads(ref)
                        o.step()
                if it != no_grad_iter:
                    check_sharded_parity(impl, model, ref, what)  # stepped, gradients kept
                    for o in (opt, ref_opt):
                        zero_grad(o, it % 2 == 0)
                assert_close(losses[1].detach(), losses[0].detach(), f"{what}: loss")
            check_sharded_parity(impl, model, ref, f"reshard_after_forward={reshard_after_forward}"
                                 " after training", grads=False)
        finally:
            destroy(opt)


SOURCE_ACROSS = ("test_fully_shard_frozen.py::TestFullyShardFrozen::"
                 "test_train_mixed_requires_grad_across_groups")
@behaviour("mixed requires_grad across groups, no_grad iteration, Adam over model.parameters()",
           SOURCE_ACROSS)
def across_groups_torch(impl):
    mixed_requires_grad_across_groups(impl, lib=False, unfreeze=False)


@behaviour(f"mixed requires_grad across groups, no_grad iteration, {LIB_OPTIM}", SOURCE_ACROSS)
def across_groups_lib(impl):
    mixed_requires_grad_across_groups(impl, lib=True, unfreeze=False)


@behaviour("mixed requires_grad across groups, unfrozen on the last step, Adam over "
           "model.parameters()", SOURCE_ACROSS)
def across_groups_unfreeze_torch(impl):
    mixed_requires_grad_across_groups(impl, lib=False, unfreeze=True)


@behaviour(f"mixed requires_grad across groups, unfrozen on the last step, {LIB_OPTIM}",
           SOURCE_ACROSS)
def across_groups_unfreeze_lib(impl):
    mixed_requires_grad_across_groups(impl, lib=True, unfreeze=True)


@behaviour(f"mixed requires_grad across groups, frozen before wrapping, unfrozen on the last "
           f"step, {LIB_OPTIM}", SOURCE_ACROSS,
           known="deliberate by default: a parameter frozen at wrapping costs no gradient "
                 "memory or optimizer state, so requires_grad_(True) after FullyShard raises "
                 "libfsdp.Error naming the parameter and the option frozen_may_train=True "
                 "(next row); freezing after wrapping works")
def across_groups_before_wrap_unfreeze_lib(impl):
    mixed_requires_grad_across_groups(impl, lib=True, unfreeze=True, freeze_before_wrap=True)


for _lib in (False, True):
    behaviour("mixed requires_grad across groups, frozen before wrapping, unfrozen on the last "
              f"step (FullyShard: frozen_may_train=True), "
              f"{LIB_OPTIM if _lib else 'Adam over model.parameters()'}", SOURCE_ACROSS
              )(lambda impl, lib=_lib: mixed_requires_grad_across_groups(
                  impl, lib=lib, unfreeze=True, freeze_before_wrap=True, may_train=True))


# ---- test_multi_forward_mixed_requires_grad ---------------------------------------------------
class MultiForwardModule(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer_0 = nn.Linear(5, 5)
        self.layer_no_grad = nn.Linear(5, 5)
        self.layer_with_grad = nn.Linear(5, 5)
        self.layer_no_grad.requires_grad_(False)

    def forward(self, x):
        x = self.layer_0(x)
        for _ in range(3):
            x = self.layer_no_grad(F.relu(self.layer_with_grad(x)))
            # the same layer again, with gradient disabled
            with torch.no_grad():
                x += F.relu(self.layer_with_grad(x))
        return x


def multi_forward_mixed_requires_grad(impl, lib):
    """Trainable and frozen groups that run several times in one forward, some of them under
    torch.no_grad()."""
    for reshard_after_forward in (True, False):
        torch.manual_seed(42)
        model = MultiForwardModule()
        ref = copy.deepcopy(model)
        ref_opt = torch.optim.Adam(ref.parameters(), lr=1e-2)
        linears = [m for m in model.modules() if isinstance(m, nn.Linear)]
        sharded = impl.shard(model, linears, reshard_after_forward=reshard_after_forward)
        opt = make_optim(impl, model, sharded, lib)
        try:
            for it in range(5):
                x = batch(it, 8, 5)
                losses = parity_step(ref, ref_opt, model, opt, lambda m: m(x).sum(), it % 2 == 0)
                assert_close(losses[1].detach(), losses[0].detach(),
                             f"reshard_after_forward={reshard_after_forward} iteration {it}: loss")
            check_sharded_parity(impl, model, ref, f"reshard_after_forward={reshard_after_forward}"
                                 " after training", grads=False)
        finally:
            destroy(opt)


SOURCE_MULTI = ("test_fully_shard_frozen.py::TestFullyShardFrozen::"
                "test_multi_forward_mixed_requires_grad")


both_optimizers("multi-forward with frozen and trainable groups", SOURCE_MULTI)(
    multi_forward_mixed_requires_grad)


if __name__ == "__main__":
    run()
