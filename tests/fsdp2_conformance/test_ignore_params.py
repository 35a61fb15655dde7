"""Behaviours of FSDP2's test_fully_shard_ignore_params.py (conformance.py runs each against
fully_shard and FullyShard): fully_shard(..., ignored_params=...) leaves those parameters out of
sharding and out of gradient reduction; FSDP2's test reduces them itself (DDP there; here
allreduce_grads on exactly those parameters, which is what DDP does)."""
import copy

from conformance import (
    agree, allreduce_grads, assert_close, assert_equal, batch, behaviour, dist, nn, run, torch)
from torch.distributed.tensor import DTensor
from torch.distributed.tensor.experimental import implicit_replication

DIM = 8


class C(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.lin_c = nn.Linear(dim, dim)

    def forward(self, x):
        return self.lin_c(x)


class B(nn.Module):
    def __init__(self, dim, subtrahend):
        super().__init__()
        self.lin_b = nn.Linear(dim, dim)
        self.module_c = C(dim)
        self.subtrahend = nn.Parameter(subtrahend)

    def forward(self, x):
        return self.lin_b(self.module_c(x)) - self.subtrahend


class A(nn.Module):
    def __init__(self, dim, addend, subtrahend):
        super().__init__()
        self.module_b = B(dim, subtrahend)
        self.addend = nn.Parameter(addend)

    def forward(self, x):
        return (self.module_b(x) + self.addend).sum()


def make_model():
    """FSDP2's _generate_model_and_input (the input is this rank's, as DDP trains)."""
    torch.manual_seed(42)
    addend = torch.randn((DIM, DIM))
    torch.manual_seed(70)
    subtrahend = torch.randn((DIM, DIM))
    return A(DIM, addend, subtrahend)


def shard_b_ignoring_c(impl, model):
    """FSDP2's _post_order_wrap_fsdp(module_b, ignored_path="module_b.module_c"): fully_shard on
    lin_b, then on module_b, each with ignored_params = module_c's parameters; the root A is not
    sharded."""
    ignored = set(model.module_b.module_c.parameters())
    return impl.shard(model.module_b, [model.module_b.lin_b], ignored_params=ignored)


def local(p):
    return p.to_local() if isinstance(p, DTensor) else p


@behaviour("ignored params stay unsharded and their gradients are not reduced",
           "test_fully_shard_ignore_params.py::TestFullyShardIgnoreParams::"
           "test_ddp_A_fsdp_B_ddp_C (the ignored module_c)")
def ignored_unsharded_unreduced(impl):
    model = make_model()
    ref = copy.deepcopy(model)
    shard_b_ignoring_c(impl, model)
    lin_c = model.module_b.module_c.lin_c
    ref_c = ref.module_b.module_c.lin_c
    # Not sharded: plain full tensors, equal to the model's.
    agree(lambda: [(assert_equal(isinstance(p, DTensor), False, f"lin_c.{n} is a DTensor"),
                    assert_close(p.detach().clone(), getattr(ref_c, n).detach(), f"lin_c.{n}"))
                   for n, p in lin_c.named_parameters()])
    x = batch(0, DIM, DIM)
    model(x).backward()
    ref(x).backward()  # this rank's own gradients, not averaged
    agree(lambda: [assert_close(p.grad, getattr(ref_c, n).grad, f"lin_c.{n}.grad (local)")
                   for n, p in lin_c.named_parameters()])
    # while the sharded ones are averaged over the ranks (FSDP2: DTensor gradients)
    if not impl.is_fsdp2:
        return
    allreduce_grads(ref)
    got = {n: local(p.grad).detach().clone() for n, p in model.module_b.lin_b.named_parameters()}
    full = {n: p.grad.full_tensor() for n, p in model.module_b.lin_b.named_parameters()}
    agree(lambda: [(assert_equal(got[n].numel() < p.numel(), True, f"lin_b.{n}.grad is sharded"),
                    assert_close(full[n], p.grad, f"lin_b.{n}.grad (averaged)"))
                   for n, p in ref.module_b.lin_b.named_parameters()])


@behaviour("DDP on A (ignored module_c and addend), FSDP on module_b: trains like DDP",
           "test_fully_shard_ignore_params.py::TestFullyShardIgnoreParams::"
           "test_ddp_A_fsdp_B_ddp_C")
def ddp_a_fsdp_b_ddp_c(impl):
    model = make_model()
    ref = copy.deepcopy(model)
    handle = shard_b_ignoring_c(impl, model)
    if impl.is_fsdp2:
        sharded = {id(p) for m in (model.module_b.lin_b, model.module_b)
                   for p in m.parameters() if isinstance(p, DTensor)}
    else:  # FullyShard's sharded parameters are its units'
        sharded = {id(p) for state in handle.states for _, p in state.params}
    replicated = [p for p in model.parameters() if id(p) not in sharded]
    # What FSDP2's test makes DDP reduce: addend and module_c's parameters.
    names = {id(p): n for n, p in model.named_parameters()}
    left = sorted(names[id(p)] for p in replicated)
    agree(lambda: assert_equal(left, ["addend", "module_b.module_c.lin_c.bias",
                               "module_b.module_c.lin_c.weight"], "parameters left to DDP"))
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    ref_opt = torch.optim.Adam(ref.parameters(), lr=1e-2)
    for step in range(3):
        x = batch(step, DIM, DIM)
        ref_loss, loss = ref(x), model(x)
        agree(lambda: assert_close(loss.detach(), ref_loss.detach(), f"loss at step {step}"))
        ref_loss.backward()
        loss.backward()
        allreduce_grads(ref)
        for p in replicated:  # DDP's reduction of what FSDP does not reduce
            dist.all_reduce(p.grad)
            p.grad.div_(dist.get_world_size())
        with implicit_replication():
            ref_opt.step()
            ref_opt.zero_grad()
            opt.step()
            opt.zero_grad()
        if impl.is_fsdp2:
            got = {n: (p.full_tensor() if isinstance(p, DTensor) else p).detach().clone()
                   for n, p in model.named_parameters()}
        else:  # FullyShard: model.state_dict() gives full values, ignored ones as they are
            got = {n: v.detach().clone() for n, v in model.state_dict().items()}
        agree(lambda: [assert_close(got[n], p.detach(), f"{n} after step {step}")
                       for n, p in ref.named_parameters()])


if __name__ == "__main__":
    run()
