"""Units used by any subset of ranks through the Python binding (Context.unit(used_by=...),
Context.step_boundary) against numpy references computed here: two such units whose values tell
them apart, each rank unsharding a different one alone; two SGD steps in which each rank writes a
gradient for one of them only (at 1 rank one unit goes unused in each step), reduced at the
boundary as the mean over every rank, the other ranks adding zeros, and a unit nobody used left
as it was; then rank 0 alone reads both after the update while the other ranks go on to a
collective. Bad input: an unknown used_by, and a step after a call that ended the update phase
(FSDP_ERR_STEP_BOUNDARY naming the call, nothing updated, then a boundary opens a new phase).
Run under mpiexec with 1 to 4 ranks."""
import numpy as np

import libfsdp
from pychecks import check, expect_error, failure_count, finish, set_rank

ctx = libfsdp.init()
rank, world = ctx.group()
set_rank(rank)
LR = 0.1
shape = (6, 4)
init = {"a": np.arange(24, dtype=np.float64).reshape(shape),
        "b": 1000.0 + np.arange(24, dtype=np.float64).reshape(shape)}
c0 = np.linspace(-1.0, 1.0, 5)


def grad_of(step, r, name):
    """Rank r's gradient in a step (the same on every rank that computes it)."""
    seed = 1000 * step + 10 * r + (0 if name == "a" else 1 if name == "b" else 2)
    size = 5 if name == "c" else 24
    g = np.random.default_rng(seed).standard_normal(size)
    return g if name == "c" else g.reshape(shape)


def used(step, r):
    """The any-rank unit rank r uses in a step."""
    return "ab"[(r + step) % 2]


units = {k: ctx.unit([(f"{k}.w", v.copy())], name=k, used_by="any_ranks") for k, v in
         init.items()}
shared = ctx.unit([("c.w", c0.copy())], name="c")  # every rank uses it: collective
check(units["a"].used_by == "any_ranks" and shared.used_by == "all_ranks", "used_by kept")
expect_error("FSDP_ERR_INVALID_ARGUMENT", "used_by", ctx.unit, [("x", np.zeros(3))],
             used_by="some_ranks")

# Each rank unshards a different unit alone and reads its own values.
mine = units["ab"[rank % 2]]
mine.unshard()
check(np.array_equal(mine.param(0), init["ab"[rank % 2]]),
      f"rank {rank} reading unit {mine.names[0]} alone")
mine.reshard()

# Two steps of the library's SGD; the reference: the mean over every rank of the gradients
# written (zeros where a rank wrote none), a unit with no gradient anywhere not stepped.
opt = ctx.optimizer("sgd", [units["a"], units["b"], shared], lr=LR)
ref = {k: v.copy() for k, v in init.items()}
ref_c = c0.copy()
for step in range(2):
    u = units[used(step, rank)]
    u.unshard()
    u.write_grad(0, grad_of(step, rank, used(step, rank)))
    u.reduce_grads()  # local: kept for the boundary
    u.reshard()
    shared.unshard()
    shared.write_grad(0, grad_of(step, rank, "c"))
    shared.reduce_grads()
    shared.reshard()
    ctx.step_boundary()
    if step == 1:
        # A collective after the boundary ends the update phase: the step is refused naming it,
        # nothing changes, and a new boundary opens a phase again.
        before = [x.shard().copy() for x in (units["a"], units["b"], shared)]
        ctx.allreduce(np.zeros(1))
        expect_error("FSDP_ERR_STEP_BOUNDARY", "fsdp_allreduce", opt.step)
        check(all(np.array_equal(x.shard(), b) for x, b in
                  zip((units["a"], units["b"], shared), before)), "a refused step changed shards")
        ctx.step_boundary()
    opt.step()
    opt.zero_grad()
    for k in "ab":
        users = [r for r in range(world) if used(step, r) == k]
        if users:
            ref[k] -= LR * sum(grad_of(step, r, k) for r in users) / world
    ref_c -= LR * sum(grad_of(step, r, "c") for r in range(world)) / world

# Rank 0 alone reads both units after the update, while the others are in a collective (which
# ends their update phase, so rank 0 reads the updated shards); then rank 0 joins it.
if rank == 0:
    for k in "ab":
        units[k].unshard()
        check(np.allclose(units[k].param(0), ref[k], rtol=0, atol=1e-12),
              f"unit {k} read by rank 0 alone after training: "
              f"{np.abs(units[k].param(0) - ref[k]).max()}")
        units[k].reshard()
ctx.allreduce(np.zeros(1))
check(np.allclose(shared.gather()[0], ref_c, rtol=0, atol=1e-12), "the collective unit")

all_failures = ctx.allreduce(np.array([float(failure_count())]))[0]
ctx.finalize()
finish("units used by any subset of ranks", failed=all_failures, show=rank == 0)
