"""Behaviours of FSDP2's test_fully_shard_autograd.py (conformance.py runs each against
fully_shard and FullyShard).

FSDP2's tests feed the reference the global batch and all-reduce the sharded model's loss; here
the reference takes each rank's local batch and averages its gradients over the ranks
(allreduce_grads, DDP's gradient), which is the same gradient, and the losses compare per rank.
check_sharded_parity is FSDP2's helper of that name: full parameters against the reference's,
then this rank's gradient shard against the same slice of the reference's gradient.

Each behaviour runs with torch.optim.Adam over model.parameters(), as FSDP2's test does, and
again as "libfsdp optimizer": there FullyShard gets what its user writes instead,
ctx.optimizer("adamw", handle.units, weight_decay=0) (Adam's update), while the control keeps
torch.optim.Adam."""
import collections
import copy
from conformance import (
    allreduce_grads, assert_close, batch, behaviour, both_optimizers, check_sharded_parity,
    destroy, LIB_OPTIM, make_optim, nn, run, torch, zero_grad)


def train_with_parity(impl, model, ref, sharded, lib, dim, iterations, label):
    """FSDP2's loop of these tests: each iteration both models' losses and the sharded parity are
    checked after backward (gradients included), then each steps and zeroes (alternating
    set_to_none)."""
    ref_opt = torch.optim.Adam(ref.parameters(), lr=1e-2)
    opt = make_optim(impl, model, sharded, lib)
    try:
        for it in range(iterations):
            x = batch(it, 2, dim)
            losses = []
            for m in (ref, model):
                losses.append(m(x).sum())
                losses[-1].backward()
            allreduce_grads(ref)
            what = f"{label} iteration {it}"
            assert_close(losses[1].detach(), losses[0].detach(), f"{what}: loss")
            check_sharded_parity(impl, model, ref, what)
            for o in (opt, ref_opt):
                o.step()
                zero_grad(o, bool(it % 2))
    finally:
        destroy(opt)


class DoubleLinear(nn.Module):
    """torch.testing._internal.common_fsdp.DoubleLinear."""

    def __init__(self, dim, use_second_linear=True):
        super().__init__()
        self.lin1 = nn.Linear(dim, dim)
        self.lin2 = nn.Linear(dim, dim)
        self.relu = nn.ReLU()
        self.use_second_linear = use_second_linear

    def forward(self, x):
        if self.use_second_linear:
            return self.relu(self.lin1(x)), self.relu(self.lin2(x))
        return self.relu(self.lin1(x))


# ---- test_unused_forward_output ---------------------------------------------------------------
def unused_forward_output(impl, lib):
    """Two outputs; the loss uses both for 3 iterations, then only the first: lin2 (the root's)
    gets no gradient and must still reduce (as zero) and step."""
    for reshard_after_forward in (True, False):
        torch.manual_seed(42)
        dim = 24
        model = DoubleLinear(dim, use_second_linear=True)
        ref = copy.deepcopy(model)
        sharded = impl.shard(model, [model.lin1], reshard_after_forward=reshard_after_forward)
        ref_opt = torch.optim.Adam(ref.parameters(), lr=1e-2)
        opt = make_optim(impl, model, sharded, lib)
        try:
            for it in range(10):
                x = batch(it, 2, dim)
                out1, out2 = model(x)
                loss = (out1 * out2).sum() if it < 3 else out1.sum()
                loss.backward()
                ref_out1, ref_out2 = ref(x)
                ref_loss = (ref_out1 * ref_out2).sum() if it < 3 else ref_out1.sum()
                ref_loss.backward()
                allreduce_grads(ref)
                what = f"reshard_after_forward={reshard_after_forward} iteration {it}"
                assert_close(loss.detach(), ref_loss.detach(), f"{what}: loss")
                check_sharded_parity(impl, model, ref, what)
                opt.step()
                ref_opt.step()
                zero_grad(opt, bool(it % 2))
                ref_opt.zero_grad(set_to_none=bool(it % 2))
            check_sharded_parity(impl, model, ref, f"reshard_after_forward="
                                 f"{reshard_after_forward} after training", grads=False)
        finally:
            destroy(opt)


both_optimizers(
    "unused forward output",
    "test_fully_shard_autograd.py::"
    "TestFullyShardAutograd::test_unused_forward_output")(unused_forward_output)


# ---- test_unused_forward_module ---------------------------------------------------------------
def unused_forward_module(impl, lib):
    """lin2 is its own group but never runs forward: no all-gather, no gradient, and training
    of the rest matches."""
    for reshard_after_forward in (True, False):
        torch.manual_seed(42)
        dim = 24
        model = DoubleLinear(dim, use_second_linear=False)
        ref = copy.deepcopy(model)
        sharded = impl.shard(model, [model.lin1, model.lin2],
                             reshard_after_forward=reshard_after_forward)
        train_with_parity(impl, model, ref, sharded, lib, dim, 10,
                          f"reshard_after_forward={reshard_after_forward}")


both_optimizers(
    "unused forward module",
    "test_fully_shard_autograd.py::"
    "TestFullyShardAutograd::test_unused_forward_module")(unused_forward_module)


# ---- test_nontensor_activations ---------------------------------------------------------------
NT = collections.namedtuple("NT", "x y")


def _is_namedtuple(v):
    return isinstance(v, tuple) and hasattr(v, "_fields")


class Block(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.lin1 = nn.Linear(dim, dim)
        self.lin2 = nn.Linear(dim, dim)
        self.relu = nn.ReLU()

    def forward(self, inp):
        if isinstance(inp, list):
            return [self._forward(inp[0])]
        if _is_namedtuple(inp):
            return type(inp)(*([self._forward(inp[0])] + list(inp[1:])))
        if isinstance(inp, tuple):
            return (self._forward(inp[0]),)
        if isinstance(inp, dict):
            return {"x": self._forward(inp["x"])}
        raise NotImplementedError(f"Unsupported input type {type(inp)}")

    def _forward(self, x):
        return self.relu(self.lin2(self.relu(self.lin1(x))))


class ToContainer(nn.Module):
    def __init__(self, kind):
        super().__init__()
        self.kind = kind

    def forward(self, x):
        if self.kind == "list":
            return [x]
        if self.kind == "namedtuple":
            return NT(x, torch.ones_like(x))
        if self.kind == "tuple":
            return (x,)
        return {"x": x}


class FromContainer(nn.Module):
    def __init__(self, kind):
        super().__init__()
        self.kind = kind

    def forward(self, x):
        return x["x"] if self.kind == "dict" else x[0]


def nontensor_activations(impl, lib, kind):
    """Activations wrapped in a list, namedtuple, tuple or dict between groups: the hooks find
    the tensors inside and gradients propagate."""
    torch.manual_seed(42)
    dim = 24
    model = nn.Sequential(ToContainer(kind), Block(dim), Block(dim), Block(dim),
                          FromContainer(kind))
    ref = copy.deepcopy(model)
    sharded = impl.shard(model, list(model))
    train_with_parity(impl, model, ref, sharded, lib, dim, 6, kind)


def _register_nontensor(kind):
    source = "test_fully_shard_autograd.py::TestFullyShardAutograd::test_nontensor_activations"

    @behaviour(f"nontensor activations ({kind}), Adam over model.parameters()", source)
    def torch_variant(impl):
        nontensor_activations(impl, False, kind)

    @behaviour(f"nontensor activations ({kind}), {LIB_OPTIM}", source)
    def lib_variant(impl):
        nontensor_activations(impl, True, kind)


for _kind in ("list", "namedtuple", "tuple", "dict"):
    _register_nontensor(_kind)


if __name__ == "__main__":
    run()
