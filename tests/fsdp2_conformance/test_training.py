"""Behaviours of FSDP2's test_fully_shard_training.py (conformance.py runs each against
fully_shard and FullyShard).

check_sharded_parity is FSDP2's helper of that name: full parameters against the reference's,
then this rank's gradient shard against the same slice of the reference's gradient. Behaviours
named "libfsdp optimizer" give FullyShard what its user writes instead of torch.optim.Adam over
model.parameters(): ctx.optimizer("adamw", handle.units, weight_decay=0) (Adam's update); the
control keeps torch.optim.Adam."""
import copy

from conformance import (
    allreduce_grads, assert_close, batch, behaviour, both_optimizers, check_sharded_parity,
    CheckpointedStack,
    destroy, FsdpMLP, LIB_OPTIM, make_optim, nn, parity_step, rank,
    run, torch, zero_grad)

F = torch.nn.functional


class MLP(nn.Module):
    def __init__(self, dim=16, blocks=3):
        super().__init__()
        torch.manual_seed(0)
        self.blocks = nn.ModuleList(
            nn.Sequential(nn.Linear(dim, dim), nn.ReLU(), nn.Linear(dim, dim))
            for _ in range(blocks))
        self.head = nn.Linear(dim, 1)

    def forward(self, x):
        for b in self.blocks:
            x = x + b(x)
        return self.head(x)


# ---- test_train_parity_single_group ---------------------------------------------------------
def train_parity(impl, lib):
    model = MLP()
    ref = copy.deepcopy(model)
    sharded = impl.shard(model, list(model.blocks))
    opt = make_optim(impl, model, sharded, lib)
    ref_opt = torch.optim.Adam(ref.parameters(), lr=1e-2)
    try:
        for step in range(5):
            x = batch(step, 8, 16)
            losses = parity_step(ref, ref_opt, model, opt, lambda m: m(x).square().mean(),
                                 step % 2 == 0)
            assert_close(losses[1].detach(), losses[0].detach(), f"loss at step {step}")
        check_sharded_parity(impl, model, ref, "after training", grads=False)
    finally:
        destroy(opt)


both_optimizers("train parity with DDP",
                "test_fully_shard_training.py::TestFullyShard1DTrainingCore::"
                "test_train_parity_single_group")(train_parity)


# ---- test_train_parity_multi_group (reshard_after_forward True / False) -----------------------
def train_parity_multi_group(impl, lib):
    """Several groups (one per MLP, the root takes the input Linear), each reshard_after_forward
    setting, parity with DDP over 5 steps (FSDP2's Transformer replaced by an MLP stack)."""
    for reshard_after_forward in (True, False):
        torch.manual_seed(42)
        dim = 16
        model = nn.Sequential(nn.Linear(dim, dim), *[FsdpMLP(dim) for _ in range(3)])
        ref = copy.deepcopy(model)
        sharded = impl.shard(model, list(model[1:]), reshard_after_forward=reshard_after_forward)
        opt = make_optim(impl, model, sharded, lib)
        ref_opt = torch.optim.Adam(ref.parameters(), lr=1e-2)
        try:
            for it in range(5):
                x = batch(it, 3, dim)
                losses = parity_step(ref, ref_opt, model, opt, lambda m: m(x).sum(), it % 2 == 0)
                assert_close(losses[1].detach(), losses[0].detach(),
                             f"reshard_after_forward={reshard_after_forward} iteration {it}: loss")
            check_sharded_parity(impl, model, ref, f"reshard_after_forward={reshard_after_forward}",
                                 grads=False)
        finally:
            destroy(opt)


@behaviour("train parity multi group, reshard_after_forward True/False, Adam over "
           "model.parameters()",
           "test_fully_shard_training.py::TestFullyShard1DTrainingCore::test_train_parity_multi_group")
def train_parity_multi_group_torch(impl):
    train_parity_multi_group(impl, lib=False)


@behaviour(f"train parity multi group, reshard_after_forward True/False, {LIB_OPTIM}",
           "test_fully_shard_training.py::TestFullyShard1DTrainingCore::test_train_parity_multi_group")
def train_parity_multi_group_lib(impl):
    train_parity_multi_group(impl, lib=True)


# ---- test_non_root_forward_backward -----------------------------------------------------------
def non_root_forward_backward(impl, lib):
    """A forward/backward through the root, a step, then one through a non-root group alone
    (model[0]), a step: losses and the final output match DDP."""
    torch.manual_seed(42)
    dim = 32
    model = nn.Sequential(*[FsdpMLP(dim) for _ in range(3)])
    ref = copy.deepcopy(model)
    sharded = impl.shard(model, list(model))
    opt = make_optim(impl, model, sharded, lib)
    ref_opt = torch.optim.Adam(ref.parameters(), lr=1e-2)
    try:
        x = batch(0, 8, dim)
        ref_root_loss = ref(x).sum()
        ref_root_loss.backward()
        allreduce_grads(ref)
        ref_opt.step()
        ref_opt.zero_grad()
        ref_nonroot_loss = ref[0](x).sum()
        ref_nonroot_loss.backward()
        allreduce_grads(ref)
        ref_opt.step()

        root_loss = model(x).sum()
        root_loss.backward()
        opt.step()
        zero_grad(opt)
        nonroot_loss = model[0](x).sum()
        nonroot_loss.backward()
        opt.step()

        assert_close(root_loss.detach(), ref_root_loss.detach(), "root loss")
        assert_close(nonroot_loss.detach(), ref_nonroot_loss.detach(), "non-root loss")
        check_sharded_parity(impl, model, ref, "after both steps", grads=False)
        with torch.no_grad():
            assert_close(model(x).sum(), ref(x).sum(), "loss after both steps")
    finally:
        destroy(opt)


both_optimizers(
    "non-root forward-backward",
    "test_fully_shard_training.py::"
    "TestFullyShard1DTrainingCore::test_non_root_forward_backward",
    )(non_root_forward_backward)


# ---- test_multi_forward_module ----------------------------------------------------------------
class MultiForwardModule(nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = nn.Linear(4, 4)
        self.outer = nn.Linear(4, 5)

    def forward(self, x):
        i = self.inner(x)
        j = self.inner(x)
        return self.outer(i + j)


def multi_forward_module(impl, lib):
    """A group whose module runs twice in one forward (each reshard_after_forward setting)."""
    for reshard_after_forward in (True, False):
        torch.manual_seed(42)
        model = MultiForwardModule()
        ref = copy.deepcopy(model)
        sharded = impl.shard(model, [model.inner], reshard_after_forward=reshard_after_forward)
        opt = make_optim(impl, model, sharded, lib)
        ref_opt = torch.optim.Adam(ref.parameters(), lr=1e-2)
        try:
            x = batch(0, 32, 4)
            for it in range(10):
                losses = parity_step(ref, ref_opt, model, opt, lambda m: m(x).sum(), it % 2 == 0)
                assert_close(losses[1].detach(), losses[0].detach(),
                             f"reshard_after_forward={reshard_after_forward} iteration {it}: loss")
        finally:
            destroy(opt)


both_optimizers(
    "multi-forward module",
    "test_fully_shard_training.py::"
    "TestFullyShard1DTrainingCore::test_multi_forward_module")(multi_forward_module)


# ---- test_gradient_accumulation ---------------------------------------------------------------
def gradient_accumulation(impl, lib, mode):
    """3 micro-batches per step; gradient sync off for all but the last. mode "all": the whole
    model (FSDP2: model.set_requires_gradient_sync(is_last); FullyShard: `with sharded.no_sync()`
    around the others); "some_mlps": only the first two MLPs (FSDP2:
    mlp.set_requires_gradient_sync per module). Gradients, then parameters, match DDP's."""
    for reshard_after_forward in (True, False):
        torch.manual_seed(42)
        dim, n_mlps, n_micro = 32, 3, 3
        model = nn.Sequential(nn.Linear(dim, dim), *[FsdpMLP(dim) for _ in range(n_mlps)])
        ref = copy.deepcopy(model)
        sharded = impl.shard(model, list(model[1:]), reshard_after_forward=reshard_after_forward)
        opt = make_optim(impl, model, sharded, lib)
        ref_opt = torch.optim.Adam(ref.parameters(), lr=1e-2)
        try:
            for it in range(3):
                for micro in range(n_micro):
                    is_last = micro == n_micro - 1
                    x = batch(10 * it + micro, 2, dim)
                    sync = None
                    if mode == "all":
                        if impl.is_fsdp2:
                            model.set_requires_gradient_sync(is_last)
                        elif not is_last:
                            sync = sharded.no_sync()
                    else:
                        for mlp in model[1:3]:
                            mlp.set_requires_gradient_sync(is_last)
                    losses = [ref(x).sum()]
                    losses[0].backward()
                    if sync is not None:
                        with sync:
                            losses.append(model(x).sum())
                            losses[1].backward()
                    else:
                        losses.append(model(x).sum())
                        losses[1].backward()
                    what = f"reshard_after_forward={reshard_after_forward} step {it} " \
                           f"micro-batch {micro}"
                    assert_close(losses[1].detach(), losses[0].detach(), f"{what}: loss")
                allreduce_grads(ref)
                check_sharded_parity(impl, model, ref, f"reshard_after_forward="
                                     f"{reshard_after_forward} step {it}")
                for o in (opt, ref_opt):
                    o.step()
                    zero_grad(o, it % 2 == 1)
        finally:
            destroy(opt)


@behaviour("gradient accumulation without sync (all modules), Adam over model.parameters()",
           "test_fully_shard_training.py::TestFullyShardGradientAccumulation::test_gradient_accumulation")
def gradient_accumulation_torch(impl):
    gradient_accumulation(impl, lib=False, mode="all")


@behaviour(f"gradient accumulation without sync (all modules, FullyShard: no_sync()), {LIB_OPTIM}",
           "test_fully_shard_training.py::TestFullyShardGradientAccumulation::test_gradient_accumulation")
def gradient_accumulation_lib(impl):
    gradient_accumulation(impl, lib=True, mode="all")


@behaviour("gradient accumulation without sync on some modules only, Adam over "
           "model.parameters()",
           "test_fully_shard_training.py::TestFullyShardGradientAccumulation::test_gradient_accumulation")
def gradient_accumulation_some_modules_torch(impl):
    gradient_accumulation(impl, lib=False, mode="some_mlps")


@behaviour(f"gradient accumulation without sync on some modules only, {LIB_OPTIM}",
           "test_fully_shard_training.py::TestFullyShardGradientAccumulation::test_gradient_accumulation")
def gradient_accumulation_some_modules(impl):
    gradient_accumulation(impl, lib=True, mode="some_mlps")


# ---- test_double_forward_with_nested_fsdp_and_checkpoint --------------------------------------
def double_forward(impl, reshard_after_forward):
    """Two forwards, then one backward of a loss over both (DPO), with nested groups
    (attention, feed_forward, then the layer) and activation checkpointing."""
    torch.manual_seed(42)
    dim, vocab = 16, 64
    model = CheckpointedStack(dim, vocab)
    ref = copy.deepcopy(model)
    modules = []
    for layer in model.layers:
        modules += [layer.attention, layer.feed_forward, layer]
    sharded = impl.shard(model, modules, reshard_after_forward=reshard_after_forward)
    g = torch.Generator().manual_seed(42 + rank)
    inp1 = torch.randint(0, vocab, (2, 8), generator=g)
    inp2 = torch.randint(0, vocab, (2, 8), generator=g)
    return model, ref, sharded, inp1, inp2


def double_forward_grads(impl):
    for reshard_after_forward in (True, False):
        model, _, _, inp1, inp2 = double_forward(impl, reshard_after_forward)
        out1 = model(inp1)
        out2 = model(inp2)
        loss = (out1.sum() - out2.sum()).pow(2)
        loss.backward()
        for name, p in model.named_parameters():
            if p.requires_grad:
                assert p.grad is not None, \
                    f"reshard_after_forward={reshard_after_forward}: {name}.grad is None"


@behaviour("two forwards before backward, nested groups + checkpointing: every p.grad set",
           "test_fully_shard_training.py::TestFullyShard1DTrainingCompose::"
           "test_double_forward_with_nested_fsdp_and_checkpoint")
def double_forward_grads_behaviour(impl):
    double_forward_grads(impl)


@behaviour(f"two forwards before backward, nested groups + checkpointing: parity, {LIB_OPTIM}",
           "test_fully_shard_training.py::TestFullyShard1DTrainingCompose::"
           "test_double_forward_with_nested_fsdp_and_checkpoint")
def double_forward_parity(impl):
    for reshard_after_forward in (True, False):
        model, ref, sharded, inp1, inp2 = double_forward(impl, reshard_after_forward)
        opt = make_optim(impl, model, sharded, lib=True)
        ref_opt = torch.optim.Adam(ref.parameters(), lr=1e-2)
        try:
            for it in range(2):
                losses = []
                for m in (ref, model):
                    out1 = m(inp1)
                    out2 = m(inp2)
                    losses.append((out1.sum() - out2.sum()).pow(2) / 1e4)
                    losses[-1].backward()
                allreduce_grads(ref)
                what = f"reshard_after_forward={reshard_after_forward} iteration {it}"
                assert_close(losses[1].detach(), losses[0].detach(), f"{what}: loss")
                check_sharded_parity(impl, model, ref, what)
                for o in (opt, ref_opt):
                    o.step()
                    zero_grad(o)
        finally:
            destroy(opt)


# ---- test_param_registration_after_forward (explicit reshard) ---------------------------------
def assert_same_params(model, ref, what):
    """FSDP2's _assert_same_params: every model.parameters() entry (its full_tensor() where it is
    a DTensor shard) equals the reference's."""
    for (name, p), r in zip(model.named_parameters(), ref.parameters()):
        full = p.full_tensor() if hasattr(p, "full_tensor") else p
        assert full.shape == r.shape, f"{what}: {name} has shape {tuple(full.shape)}"
        assert_close(full.detach(), r.detach(), f"{what}: {name}")


@behaviour("parameters after forward equal the model's, then an explicit reshard()",
           "test_fully_shard_training.py::TestFullyShardRegisteredParams::"
           "test_param_registration_after_forward",
           known="deliberate (no torch.distributed needed): a resharded unit's parameters are this "
                 "rank's flat parts of the shards (FSDP2: "
                 "DTensor shards of the full shape whose full_tensor() is the value)")
def param_registration_after_forward(impl):
    for reshard_after_forward in (True, False):
        torch.manual_seed(42)
        model = nn.Sequential(FsdpMLP(3), FsdpMLP(3))
        ref = copy.deepcopy(model)
        sharded = impl.shard(model, [model[0].in_proj, model[0].out_proj],
                             reshard_after_forward=reshard_after_forward)
        what = f"reshard_after_forward={reshard_after_forward}"
        assert_same_params(model, ref, f"{what} after fully_shard")
        model(batch(0, 2, 3))
        assert_same_params(model, ref, f"{what} after forward")
        for m in (model[0].in_proj, model[0].out_proj):
            if impl.is_fsdp2:
                m.reshard()  # however, we can manually reshard
        sharded.reshard()
        assert_same_params(model, ref, f"{what} after reshard()")


if __name__ == "__main__":
    run()
