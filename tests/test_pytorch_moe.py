"""A mixture of experts through libfsdp.pytorch.fully_shard with used_by="any_ranks" on each expert,
against the same model in one process on the whole global batch.

The model: an input projection (its own unit), a gate and an output head (the root's unit), both
collective; four experts, each fully_shard(expert, used_by="any_ranks"). Top-1 routing comes with
the data (a fixed route per token, as a router's decision taken upstream), the expert's output
scaled by the gate's probability for it, so the gate trains too. Each step's global batch of 12
tokens is split into equal slices over the ranks; routing leaves experts unused on some ranks in
every step, one expert unused by every rank in two of the steps (its gradient None everywhere,
so torch.optim skips it, as in the reference), and at 3 and 4 ranks one rank that runs no expert
at all (a router z-loss gives the gate a gradient there too, see loss_of). No
find_unused_parameters: every rank runs its own experts only.

Checked in float64 (the shards keep the parameters' dtype) to 1e-12: every gradient (or its
absence) after every backward, the gradient norm torch.nn.utils.clip_grad_norm_ clips by from
step 2 on, and the parameters after five SGD steps with momentum; that backward ends with the
library's update phase open (the step boundary its last library call: the library's optimizer,
of lr 0, steps without FSDP_ERR_STEP_BOUNDARY); that a rank unshards exactly the experts its
tokens go to (the forward's and the backward's gather, nothing else); after an optimizer step,
rank 0 alone running the experts while the other ranks are in a collective, and rank 0 alone
running the whole model under torch.no_grad() (its collective units gathered by every rank first,
FSDP2's FSDPModule.unshard()) while the others do not, both against the reference; then every
rank trains on. Bad input: an unknown used_by, refused naming it. Beside the model, the older
FullyShard API's gradient norms in a context with such a unit (fullyshard_norms).

Each rank's loss is its slice's summed squared error divided by its slice's size: FSDP2 (and
libfsdp) divide the sum of the ranks' gradients by the ranks' count, which makes the mean over
the global batch the reference takes.
Exit 77 (skipped) without PyTorch >= 2.6. Run: mpiexec -n N python test_pytorch_moe.py"""
import copy
import os

from pychecks import check, check_close, fail, failure_count, require_torch

torch = require_torch((2, 6))
import numpy as np  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn as nn  # noqa: E402

import libfsdp  # noqa: E402
from libfsdp.pytorch import FullyShard, fully_shard, units  # noqa: E402

torch.set_num_threads(1)
torch.set_default_dtype(torch.float64)
D, H, E, O, TOKENS, STEPS = 6, 8, 4, 5, 12, 5
TOL = {"rtol": 1e-12, "atol": 1e-12}


class Expert(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(H, 2 * H)
        self.fc2 = nn.Linear(2 * H, H)

    def forward(self, x):
        return self.fc2(torch.tanh(self.fc1(x)))


class MoE(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(D, H)
        self.gate = nn.Linear(H, E)
        self.experts = nn.ModuleList(Expert() for _ in range(E))
        self.head = nn.Linear(H, O)

    def forward(self, x, route):
        """(outputs, each token's router z-loss); route[i]: the expert of token i, or -1
        (dropped: no expert)."""
        h = torch.tanh(self.proj(x))
        logits = self.gate(h)
        probs = torch.softmax(logits, dim=-1)
        mixed = torch.zeros_like(h)
        for e in sorted(set(route.tolist()) - {-1}):
            idx = (route == e).nonzero().squeeze(1)
            y = self.experts[e](h[idx]) * probs[idx, e:e + 1]
            mixed = mixed.index_add(0, idx, y)
        return self.head(h + mixed), torch.logsumexp(logits, dim=-1).square()


def batch(step):
    """The global batch of a step: inputs, targets and each token's expert. Tokens come in
    groups of three sharing an expert; steps 1 and 3 drop group 3 (expert 0, then expert 2, goes
    unused on every rank) and step 2 drops tokens 8 to 11 (at 3 and 4 ranks the last rank runs
    no expert)."""
    g = torch.Generator().manual_seed(1000 + step)
    x = torch.randn(TOKENS, D, generator=g)
    t = torch.randn(TOKENS, O, generator=g)
    route = torch.tensor([(i // 3 + step) % E for i in range(TOKENS)])
    if step in (1, 3):
        route[9:] = -1
    if step == 2:
        route[8:] = -1
    return x, t, route


def local(tensors, rank, world):
    n = TOKENS // world
    return [v[rank * n:(rank + 1) * n] for v in tensors]


def loss_of(model, x, t, route):
    """The squared error and ST-MoE's router z-loss, summed over the tokens, per token. The
    z-loss gives the gate a gradient on every rank, also one that drops all its tokens: a
    parameter of a unit every rank uses that gets no gradient on some ranks only would delay that
    unit's reduction there alone, out of the other ranks' order."""
    out, z = model(x, route)
    return ((out - t).square().sum() + 0.01 * z.sum()) / x.shape[0]


class Unshards:
    """Which units this rank unshards (Unit.unshard / unshard_async), by unit object."""

    def __init__(self):
        self.seen = []
        for name in ("unshard", "unshard_async"):
            inner = getattr(libfsdp.Unit, name)

            def wrapped(unit, inner=inner):
                self.seen.append(unit)
                return inner(unit)
            setattr(libfsdp.Unit, name, wrapped)

    def take(self):
        seen, self.seen = self.seen, []
        return seen


def refused(fn, *names):
    try:
        fn()
    except libfsdp.Error as e:
        for n in names:
            if n not in str(e):
                fail(f"the error does not name {n!r}: {e}")
        return
    fail(f"accepted; expected libfsdp.Error naming {names}")


def alone(fn):
    """fn() on one rank while the others wait elsewhere: a failure is counted, not raised."""
    try:
        fn()
    except AssertionError as e:
        check(False, str(e))


def compare_grads(model, ref, what):
    for (n, p), q in zip(model.named_parameters(), ref.parameters()):
        if (p.grad is None) != (q.grad is None):
            fail(f"{what}: {n} has a gradient: {p.grad is not None}, reference "
                 f"{q.grad is not None}")
        if q.grad is not None:
            check_close(p.grad.full_tensor(), q.grad, f"{what}: gradient of {n}", **TOL)


def compare_params(model, ref, what):
    for (n, p), q in zip(model.named_parameters(), ref.parameters()):
        check_close(p.full_tensor(), q, f"{what}: {n}", **TOL)


def train_step(model, ref, opt, ref_opt, step, rank, world, unshards, expert_units, lr0):
    x, t, route = batch(step)
    lx, lt, lroute = local((x, t, route), rank, world)
    loss_of(model, lx, lt, lroute).backward()
    loss_of(ref, x, t, route).backward()
    mine = {int(e) for e in lroute.tolist()} - {-1}
    got = [u for u in unshards.take() if any(u is v for v in expert_units)]
    want = sorted(mine)
    have = sorted(expert_units.index(u) for u in got)
    # Its forward's gather and its backward's, each once (a check of this rank's alone: counted,
    # not raised, so that the other ranks are not left in a collective).
    check(have == sorted(want * 2),
          f"step {step}: rank {rank} unshards experts {have}; its tokens go to {want}")
    compare_grads(model, ref, f"step {step}")
    if step >= 2:  # clipped from step 2 on (torch's clip_grad_norm_ over the DTensor gradients)
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
        ref_norm = torch.nn.utils.clip_grad_norm_(ref.parameters(), 0.5)
        norm = norm.full_tensor() if hasattr(norm, "full_tensor") else norm
        check_close(norm, ref_norm, f"step {step}: the gradient norm", **TOL)
        if not ref_norm > 0.5:
            fail(f"step {step}: the norm {float(ref_norm)} is not clipped; lower max_norm")
    # Backward ended with the update phase open, as torch's step needs it (the other ranks read
    # the shards it writes only once it is over): the library's optimizer refuses a step outside
    # it (FSDP_ERR_STEP_BOUNDARY). An SGD of lr 0 leaves every shard as it is.
    lr0.step()
    opt.step()
    ref_opt.step()
    opt.zero_grad()
    ref_opt.zero_grad()


def main(rank, world):
    unshards = Unshards()
    refused(lambda: fully_shard(nn.Linear(2, 2), used_by="some_ranks"), "used_by", "some_ranks")
    torch.manual_seed(0)
    ref = MoE()
    model = copy.deepcopy(ref)
    for expert in model.experts:
        fully_shard(expert, used_by="any_ranks")
    fully_shard(model.proj)
    fully_shard(model)
    us = units(model)  # the adopted ones in module order (the projection, the experts), the root
    expert_units = [u for u in us if u.used_by == "any_ranks"]
    assert len(expert_units) == E and len(us) == E + 2, [u.used_by for u in us]
    ctx = us[0].context
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    lr0 = ctx.optimizer("sgd", us, lr=0.0)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.05, momentum=0.9)
    for step in range(STEPS - 1):
        train_step(model, ref, opt, ref_opt, step, rank, world, unshards, expert_units, lr0)
    compare_params(model, ref, f"after {STEPS - 1} steps")

    # Right after the optimizer step: rank 0 alone runs each expert, reading the others' updated
    # shards once they have ended their update phase, which they do by going on to a collective;
    # rank 0 joins it afterwards.
    probe = torch.randn(3, H, generator=torch.Generator().manual_seed(7))
    if rank == 0:
        with torch.no_grad():
            for e in range(E):
                alone(lambda: check_close(model.experts[e](probe), ref.experts[e](probe),
                                          f"expert {e} run by rank 0 alone", **TOL))
    ctx.allreduce(np.zeros(1))
    # The whole model on rank 0 alone: the collective units are gathered by every rank first
    # (FSDPModule.unshard: the root's unit and the projection's), the experts read one-sidedly.
    model.unshard()
    model.proj.unshard()
    x, _, route = batch(9)
    if rank == 0:
        with torch.no_grad():
            alone(lambda: check_close(model(x, route), ref(x, route),
                                      "the model run by rank 0 alone", **TOL))
    model.reshard()
    model.proj.reshard()
    unshards.take()

    # Every rank trains on.
    train_step(model, ref, opt, ref_opt, STEPS - 1, rank, world, unshards, expert_units,
               lr0)
    compare_params(model, ref, f"after {STEPS} steps")
    fullyshard_norms()


def fullyshard_norms():
    """libfsdp.pytorch.FullyShard's p.grad are its own tensors over the gradient shards, whose
    norms (torch.nn.utils.clip_grad_norm_) are summed over the ranks with ctx.allreduce, which
    ends the update phase of a context that has units used by any subset of ranks: the front
    opens it again (a boundary that reduces nothing), so that the step that follows is inside
    one. The library's optimizer over such a unit checks it (lr 0: nothing changes)."""
    ctx = libfsdp.init()
    try:
        torch.manual_seed(3)
        net = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 2))
        sharded = FullyShard(ctx, net, [net[0]])
        extra = ctx.unit([("x", np.zeros(8))], used_by="any_ranks")
        lr0 = ctx.optimizer("sgd", sharded.units + [extra], lr=0.0)
        for _ in range(2):
            net(torch.randn(3, 4)).square().sum().backward()
            torch.nn.utils.clip_grad_norm_(net.parameters(), 0.1)
            lr0.step()
        lr0.destroy()
    finally:
        ctx.finalize()


if __name__ == "__main__":
    from libfsdp.pytorch import _mesh
    _mesh.ensure_process_group("test")
    rank, world = dist.get_rank(), dist.get_world_size()
    if TOKENS % world:
        fail(f"{world} ranks: the global batch of {TOKENS} tokens does not split evenly")
    error = None
    try:
        main(rank, world)
    except Exception as e:  # noqa: BLE001 -- every rank learns every failure
        import traceback
        traceback.print_exc()
        error = e
    flag = torch.tensor([0 if error is None and failure_count() == 0 else 1])
    dist.all_reduce(flag)
    failed = int(flag.item())
    if rank == 0:
        print(f"PASS: a mixture of experts on {world} rank(s), experts used by any subset of ranks"
              if not failed else f"FAIL: {failed} rank(s) failed", flush=True)
    dist.barrier()
    dist.destroy_process_group()
    # MPI goes with the context still alive, as under a framework that never finalizes it: where
    # shard groups span nodes (FSDP_RANKS_PER_NODE) the context's progress thread stops at
    # MPI_Finalize instead of calling into a finalized MPI.
    libfsdp.finalize_mpi()
    os._exit(1 if failed else 0)
