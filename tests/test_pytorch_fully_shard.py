"""libfsdp.pytorch.fully_shard (FSDP2's drop-in) against an unsharded reference and against
PyTorch's own tooling: full-shape DTensor parameters, FSDPModule's methods, a list of modules as
one unit, per-module mixed precision, gradient division, no step for a parameter without a
gradient, the root's resharding, torch.distributed.checkpoint (get_state_dict / set_state_dict)
saved on one rank count and loaded on another, and bad input refused by name, changing nothing.

Usage (mpiexec -n N python test_pytorch_fully_shard.py MODE [DIR]):
  main            every check above but the checkpoint's (2 ranks)
  hpz             reshard_after_forward=2 against True and FSDP2's, 4 ranks as 2 nodes of 2
                  (FSDP_RANKS_PER_NODE=2); refused on one node (without it)
  save DIR        trains 3 steps, saves model and optimizer with DCP into DIR, then trains 2 more
                  and writes the reference losses of those 2 steps to DIR/losses.pt
  load DIR        a fresh model and optimizer (any rank count), DCP load from DIR, the same 2
                  steps: losses equal DIR/losses.pt
Exit 77 (skipped) without PyTorch >= 2.6."""
import copy
import os
import sys

from pychecks import check_close, fail, require_torch

torch = require_torch((2, 6))
import torch.distributed as dist  # noqa: E402
import torch.nn as nn  # noqa: E402
from torch.distributed.tensor import DTensor, Shard  # noqa: E402

import libfsdp  # noqa: E402
from libfsdp.pytorch import FSDPModule, fully_shard, units  # noqa: E402

torch.set_num_threads(1)
DIM, VOCAB, BATCH, SEQ = 8, 13, 4, 5


class Block(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, 3 * d)
        self.fc2 = nn.Linear(3 * d, d)

    def forward(self, x):
        return x + self.fc2(torch.relu(self.fc1(self.norm(x))))


class Net(nn.Module):
    """A transformer's shape: embedding, blocks, a final norm and an output head (torchtitan's
    grouping puts norm and head in one unit); `extra` is a module used only when asked (a
    parameter without gradient on the other steps)."""

    def __init__(self, d=DIM, vocab=VOCAB, n=3):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.blocks = nn.ModuleList(Block(d) for _ in range(n))
        self.norm = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab)
        self.extra = nn.Linear(d, d)

    def forward(self, ids, use_extra=False):
        h = self.tok(ids)
        for b in self.blocks:
            h = b(h)
        if use_extra:
            h = self.extra(h)
        return self.head(self.norm(h))


def shard(model, **kw):
    """fully_shard as FSDP2 code applies it: each block, [norm, head] together, then the root."""
    for b in model.blocks:
        fully_shard(b, **kw)
    fully_shard([model.norm, model.head], reshard_after_forward=False, **kw)
    fully_shard(model, **kw)
    return model


def ids_of(step, r):
    return torch.randint(0, VOCAB, (BATCH, SEQ), generator=torch.Generator().manual_seed(100 * step + r))


def loss_of(model, ids, use_extra=False):
    return model(ids, use_extra).float().square().mean()


def reference_step(ref, step, world, use_extra=False, divide=True):
    """The unsharded model's gradient: every rank's batch, summed, divided by the ranks' count
    (FSDP2's default) or not (divide False)."""
    for r in range(world):
        loss = loss_of(ref, ids_of(step, r), use_extra)
        (loss / world if divide else loss).backward()


def agree_all(flag):
    t = torch.tensor([1 if flag else 0])
    dist.all_reduce(t, op=dist.ReduceOp.MIN)
    return bool(t.item())


def refused(fn, *names):
    """fn() raises libfsdp.Error whose message names each of `names`."""
    try:
        fn()
    except libfsdp.Error as e:
        for n in names:
            if n not in str(e):
                fail(f"the error does not name {n!r}: {e}")
        return
    fail(f"accepted; expected libfsdp.Error naming {names}")


# ---- main --------------------------------------------------------------------------------------
def check_parameters_and_training(rank, world):
    torch.manual_seed(0)
    ref = Net()
    model = shard(copy.deepcopy(ref))
    from torch.distributed.fsdp import FSDPModule as TorchFSDPModule
    for m in [model, model.blocks[0], model.norm, model.head]:
        assert isinstance(m, FSDPModule) and isinstance(m, TorchFSDPModule), type(m)
    assert type(model).__name__ == "FSDPNet", type(model).__name__
    names = [n for n, _ in ref.named_parameters()]
    assert [n for n, _ in model.named_parameters()] == names
    assert sum(p.numel() for p in model.parameters()) == sum(p.numel() for p in ref.parameters())
    for (n, p), q in zip(model.named_parameters(), ref.parameters()):
        assert isinstance(p, DTensor) and isinstance(p, nn.Parameter), (n, type(p))
        assert p.shape == q.shape and p.placements == (Shard(0),), (n, p.shape, p.placements)
        rows = -(-q.shape[0] // world)
        lo, hi = min(rank * rows, q.shape[0]), min((rank + 1) * rows, q.shape[0])
        assert p.to_local().shape[0] == hi - lo, (n, p.to_local().shape)
        assert torch.equal(p.to_local(), q[lo:hi]), n
        assert torch.equal(p.full_tensor(), q), n
    # The local tensor is the library's shard memory (a view, not a copy).
    unit = units(model)[0]
    memory = torch.from_numpy(unit.shard())
    w = model.blocks[0].norm.weight.to_local()
    assert w.untyped_storage().data_ptr() == memory.untyped_storage().data_ptr(), \
        "the local tensor views the library's shard"
    # state_dict: DTensors of the full shape; a module's own hook sees the full shape.
    seen = {}

    def hook(module, sd, prefix, meta):  # as torchtitan's fused-QKV hook reads shape[1]
        seen["shape"] = (sd[prefix + "weight"].shape[0], sd[prefix + "weight"].shape[1])
    model.blocks[1].fc1.register_state_dict_post_hook(hook)
    sd = model.state_dict()
    assert isinstance(sd["blocks.0.fc1.weight"], DTensor)
    assert seen["shape"] == (3 * DIM, DIM), seen
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1)
    ref_opt = torch.optim.AdamW(ref.parameters(), lr=1e-2, weight_decay=0.1)
    for step in range(4):
        use_extra = step == 1  # extra gets a gradient at step 1 only
        loss = loss_of(model, ids_of(step, rank), use_extra)
        loss.backward()
        reference_step(ref, step, world, use_extra)
        for (n, p), q in zip(model.named_parameters(), ref.parameters()):
            if (p.grad is None) != (q.grad is None):
                fail(f"step {step}: {n} has a gradient: {p.grad is not None}, reference "
                     f"{q.grad is not None}")
            if q.grad is not None:
                check_close(p.grad.full_tensor(), q.grad, f"step {step}: gradient of {n}")
        opt.step()
        ref_opt.step()
        # set_to_none=False: a None gradient stays None (torch.optim's rule), so AdamW's weight
        # decay does not move `extra` on the steps it is unused.
        opt.zero_grad(set_to_none=step % 2 == 0)
        ref_opt.zero_grad(set_to_none=step % 2 == 0)
    for (n, p), q in zip(model.named_parameters(), ref.parameters()):
        check_close(p.full_tensor(), q, f"after training: {n}", rtol=0, atol=0)
    return model, ref


def check_library_optimizer(rank, world):
    """The library's AdamW over units(model) (weight decay, a module unused on some steps,
    zero_grad alternating set_to_none): against torch.optim.AdamW on the unsharded model; the
    unused module is not stepped when its gradient is None, as torch.optim leaves it."""
    torch.manual_seed(5)
    ref = Net()
    model = copy.deepcopy(ref)
    fully_shard(model.extra)  # a unit of its own, which no backward reaches on most steps
    shard(model)
    us = units(model)
    opt = us[0].context.optimizer("adamw", us, lr=1e-2, weight_decay=0.1)
    ref_opt = torch.optim.AdamW(ref.parameters(), lr=1e-2, weight_decay=0.1)
    for step in range(5):
        use_extra = step == 2
        loss_of(model, ids_of(step, rank), use_extra).backward()
        reference_step(ref, step, world, use_extra)
        opt.step()
        ref_opt.step()
        opt.zero_grad(set_to_none=step % 2 == 1)
        ref_opt.zero_grad(set_to_none=step % 2 == 1)
        for (n, p), q in zip(model.named_parameters(), ref.parameters()):
            check_close(p.full_tensor(), q, f"step {step}: {n}")
    opt.destroy()
    for u in us:
        u.destroy()


def check_resharding(rank, world):
    torch.manual_seed(1)
    # FSDP2's default: the root stays gathered after forward (its registered parameters are
    # plain tensors until backward); reshard_after_forward=True on the root reshards it.
    for explicit in (None, True):
        model = Net()
        for b in model.blocks:
            fully_shard(b)
        fully_shard(model, reshard_after_forward=explicit)
        loss = loss_of(model, ids_of(0, rank))
        root_sharded = isinstance(model.tok.weight, DTensor)
        block_sharded = isinstance(model.blocks[0].fc1.weight, DTensor)
        assert block_sharded, "a block is resharded after its forward"
        assert root_sharded == (explicit is True), (explicit, root_sharded)
        loss.backward()
        assert isinstance(model.tok.weight, DTensor), "resharded after backward"
        for u in units(model):
            u.destroy()
    # set_reshard_after_forward(False) on a block keeps it gathered after forward.
    model = Net()
    for b in model.blocks:
        fully_shard(b)
    fully_shard(model)
    model.blocks[1].set_reshard_after_forward(False, recurse=False)
    loss = loss_of(model, ids_of(0, rank))
    assert isinstance(model.blocks[0].fc1.weight, DTensor)
    assert not isinstance(model.blocks[1].fc1.weight, DTensor), "kept gathered"
    loss.backward()
    # unshard() / reshard() by hand.
    model.blocks[2].unshard()
    assert not isinstance(model.blocks[2].fc1.weight, DTensor)
    model.blocks[2].reshard()
    assert isinstance(model.blocks[2].fc1.weight, DTensor)
    for u in units(model):
        u.destroy()


def check_gradient_division(rank, world):
    """set_gradient_divide_factor(1.0) (torchtitan's disable_fsdp_gradient_division): sums."""
    torch.manual_seed(2)
    ref = Net()
    model = shard(copy.deepcopy(ref))
    for m in model.modules():
        if isinstance(m, FSDPModule):
            m.set_gradient_divide_factor(1.0)
    loss_of(model, ids_of(0, rank)).backward()
    reference_step(ref, 0, world, divide=False)
    for (n, p), q in zip(model.named_parameters(), ref.parameters()):
        if q.grad is not None:
            check_close(p.grad.full_tensor(), q.grad, f"summed gradient of {n}")
    for u in units(model):
        u.destroy()


def check_meshes(rank, world):
    """A 1-D mesh over every rank (full sharding) and 2-D (replicate, shard) meshes (hybrid
    sharding), also named and given as torch 2.15's dp_mesh_dims: gradients and parameters after
    two AdamW steps equal the unsharded model's."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate
    try:  # torch 2.15's dp_mesh_dims naming the dimensions of the same meshes
        from torch.distributed.fsdp import DataParallelMeshDims
    except ImportError:
        DataParallelMeshDims = None
    shapes = [(world,), (world, 1)] + ([(world // 2, 2)] if world % 2 == 0 else [])
    if DataParallelMeshDims is not None:
        shapes += [("named",) + shape for shape in shapes]
    for shape in shapes:
        torch.manual_seed(4)
        ref = Net()
        kw = {}
        if shape[0] == "named":
            shape = shape[1:]
            names = ("dp_shard",) if len(shape) == 1 else ("dp_replicate", "dp_shard")
            kw["dp_mesh_dims"] = DataParallelMeshDims(
                shard="dp_shard", replicate=None if len(shape) == 1 else "dp_replicate")
            mesh = init_device_mesh("cpu", shape, mesh_dim_names=names)
        else:
            mesh = init_device_mesh("cpu", shape)
        model = shard(copy.deepcopy(ref), mesh=mesh, **kw)
        want = (Shard(0),) if len(shape) == 1 else (Replicate(), Shard(0))
        assert model.tok.weight.placements == want, (shape, model.tok.weight.placements)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
        ref_opt = torch.optim.AdamW(ref.parameters(), lr=1e-2)
        for step in range(2):
            loss_of(model, ids_of(step, rank)).backward()
            reference_step(ref, step, world)
            for (n, p), q in zip(model.named_parameters(), ref.parameters()):
                if q.grad is not None:
                    check_close(p.grad.full_tensor(), q.grad, f"mesh {shape}: gradient of {n}")
            opt.step()
            ref_opt.step()
            opt.zero_grad()
            ref_opt.zero_grad()
        for (n, p), q in zip(model.named_parameters(), ref.parameters()):
            check_close(p.full_tensor(), q, f"mesh {shape}: {n}")
        for u in units(model):
            u.destroy()


def check_mixed_precision(rank, world):
    """bf16 blocks, a float32 [norm, head] unit among them, output_dtype and
    cast_forward_inputs per module: against the same policy applied by PyTorch's fully_shard."""
    from torch.distributed.fsdp import MixedPrecisionPolicy
    from torch.distributed.fsdp import fully_shard as torch_fully_shard
    torch.manual_seed(3)
    base = Net()
    losses = {}
    for name, fs in (("torch", torch_fully_shard), ("libfsdp", fully_shard)):
        model = copy.deepcopy(base)
        bf16 = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32,
                                    output_dtype=torch.float32)
        for b in model.blocks:
            fs(b, mp_policy=bf16)
        fs([model.norm, model.head], mp_policy=MixedPrecisionPolicy())
        fs(model, mp_policy=MixedPrecisionPolicy(param_dtype=torch.bfloat16,
                                                 cast_forward_inputs=True))
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
        out = []
        for step in range(3):
            loss = loss_of(model, ids_of(step, rank))
            loss.backward()
            opt.step()
            opt.zero_grad()
            out.append(loss.detach())
        losses[name] = torch.stack(out)
        if name == "libfsdp":
            for u in units(model):
                u.destroy()
    check_close(losses["libfsdp"], losses["torch"], "bf16 losses against FSDP2's")


def check_bad_input(rank, world):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard as S
    model = Net()
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    refused(lambda: fully_shard("block"), "module", "str")
    refused(lambda: fully_shard([model.blocks[0], 3]), "module[1]", "int")
    refused(lambda: fully_shard([model.blocks[0], model.blocks[0]]), "listed twice")
    refused(lambda: fully_shard(model.blocks[0], mesh="world"), "mesh", "DeviceMesh")
    if world > 1:  # a mesh over some of the ranks
        sub = dist.new_group([0])
        from torch.distributed.device_mesh import DeviceMesh
        if rank == 0:
            refused(lambda: fully_shard(model.blocks[0], mesh=DeviceMesh("cpu", [0], _init_backend=False)),
                    "mesh", "every rank")
        del sub
    refused(lambda: fully_shard(model.blocks[0], reshard_after_forward=world + 5),
            "reshard_after_forward", str(world + 5))
    refused(lambda: fully_shard(model.blocks[0], reshard_after_forward="yes"),
            "reshard_after_forward")
    refused(lambda: fully_shard(model.blocks[0], shard_placement_fn=lambda p: S(1)),
            "shard_placement_fn", "dimension 0")
    refused(lambda: fully_shard(model.blocks[0], mp_policy="bf16"), "mp_policy")
    if world % 2 == 0 and world > 2:
        mesh3 = init_device_mesh("cpu", (1, 2, world // 2))
        refused(lambda: fully_shard(model.blocks[0], mesh=mesh3), "mesh", "dimensions")
    for n, p in model.named_parameters():
        assert not isinstance(p, DTensor) and torch.equal(p, before[n]), f"{n} changed"
    assert not isinstance(model.blocks[0], FSDPModule), "the class is unchanged"
    fully_shard(model.blocks[0])
    refused(lambda: fully_shard(model.blocks[0]), "already applied")
    refused(lambda: copy.deepcopy(model.blocks[0]), "deepcopy", "cannot be copied")
    refused(lambda: model.blocks[0].set_gradient_divide_factor(-1.0), "factor")
    refused(lambda: model.blocks[0].set_reshard_after_backward("no"), "reshard_after_backward")
    refused(lambda: fully_shard(model.blocks[1], dp_mesh_dims=("dp",)), "dp_mesh_dims")
    try:  # torch 2.15's full SPMD mesh: a model-parallel dimension beside the data-parallel one
        from torch.distributed.fsdp import DataParallelMeshDims
    except ImportError:
        DataParallelMeshDims = None
    if DataParallelMeshDims is not None:
        tp = init_device_mesh("cpu", (world, 1), mesh_dim_names=("dp", "tp"))
        refused(lambda: fully_shard(model.blocks[1], mesh=tp,
                                    dp_mesh_dims=DataParallelMeshDims(shard="dp")),
                "dp_mesh_dims", "('dp', 'tp')")
    refused(lambda: model.blocks[0].set_unshard_in_backward(False), "unshard_in_backward")
    refused(lambda: model.blocks[0].set_custom_all_gather(None), "set_custom_all_gather")
    refused(lambda: model.blocks[0].set_requires_gradient_sync("no"), "requires_gradient_sync")
    # A forward with parameters still on the meta device is refused naming one.
    with torch.device("meta"):
        meta = Net()
    shard(meta)
    refused(lambda: meta(ids_of(0, rank)), "is on the meta device")
    meta.to_empty(device="cpu")
    for m in meta.modules():
        if hasattr(m, "reset_parameters"):
            m.reset_parameters()
    loss_of(meta, ids_of(0, rank)).backward()  # now it runs
    for u in units(model.blocks[0]) + units(meta):
        u.destroy()


def main(rank, world, checks=None):
    checks = checks or [check_parameters_and_training, check_library_optimizer, check_resharding,
                        check_gradient_division, check_meshes, check_mixed_precision,
                        check_bad_input]
    failed = 0
    for check in checks:
        error = None
        try:
            check(rank, world)
        except Exception as e:  # noqa: BLE001 -- every rank learns every failure
            import traceback
            traceback.print_exc()
            error = e
        ok = agree_all(error is None)
        failed += not ok
        if rank == 0:
            print(f"[{' ok ' if ok else 'FAIL'}] {check.__name__}"
                  + (f": {error}" if error is not None else ""), flush=True)
    return failed


# ---- reshard_after_forward as an int (hpZ) ------------------------------------------------------
def hpz(rank, world):
    """4 ranks. With FSDP_RANKS_PER_NODE=2 (two emulated nodes): reshard_after_forward=2 on the
    blocks trains bit for bit like reshard_after_forward=True and within FSDP2's tolerance of
    PyTorch's fully_shard with the same int (4 ranks sum in another order), and between forward
    and backward the blocks' units hold their node-local secondary partition (hpZ). On one node
    (no FSDP_RANKS_PER_NODE) the int is refused, naming the module, changing nothing."""
    from torch.distributed.fsdp import fully_shard as torch_fully_shard
    torch.manual_seed(0)
    ref = Net()
    if not os.environ.get("FSDP_RANKS_PER_NODE"):
        model = copy.deepcopy(ref)
        refused(lambda: fully_shard(model.blocks[0], reshard_after_forward=2),
                "module 'Block'", "reshard_after_forward=2", "inside one node")
        assert not isinstance(model.blocks[0], FSDPModule), "the class is unchanged"
        assert all(not isinstance(p, DTensor) for p in model.parameters()), "parameters unchanged"
        return

    def sharded(fs, ranks):
        model = copy.deepcopy(ref)
        for b in model.blocks:
            fs(b, reshard_after_forward=ranks)
        fs([model.norm, model.head], reshard_after_forward=False)
        fs(model)
        return model
    # FSDP2 with the same int; libfsdp with it, and with True (hpZ must not change a bit).
    models = [sharded(torch_fully_shard, 2), sharded(fully_shard, 2), sharded(fully_shard, True)]
    ctx = units(models[1].blocks[0])[0].context
    assert ctx.group("node") == (ctx.group("shard")[0] % 2, 2), ctx.group("node")
    assert units(models[2].blocks[0])[0].context.group("node")[1] == 1, "True: no node group"
    opts = [torch.optim.AdamW(m.parameters(), lr=1e-2) for m in models]
    losses, held = [[], [], []], []
    for step in range(3):
        ids = ids_of(step, rank)
        for k, (m, opt) in enumerate(zip(models, opts)):
            loss = loss_of(m, ids)
            if k == 1:
                held.append(ctx.memory_stats()["secondary_bytes"])
            loss.backward()
            opt.step()
            opt.zero_grad()
            losses[k].append(loss.detach())
    # Checked once every rank is done (a rank failing alone would leave the others in a step).
    assert all(h > 0 for h in held), f"secondary partition bytes after forward: {held}"
    for step in range(3):
        assert torch.equal(losses[1][step], losses[2][step]), \
            f"step {step}: hpZ changed the loss: {losses[1][step]} != {losses[2][step]}"
        check_close(losses[1][step], losses[0][step], f"step {step}: the loss against FSDP2's")
    for (n, p), (_, q), (_, t) in zip(*(m.named_parameters() for m in models)):
        assert torch.equal(q.full_tensor(), t.full_tensor()), f"{n}: hpZ changed the parameter"
        check_close(q.full_tensor(), p.full_tensor(), f"{n} against FSDP2's")
    held = held[0]
    refused(lambda: fully_shard(Net().blocks[0], reshard_after_forward=3),
            "reshard_after_forward=3", "factor")
    if rank == 0:
        print(f"reshard_after_forward=2: {held} secondary bytes held after forward on "
              f"{world} ranks", flush=True)


# ---- checkpoints through torch.distributed.checkpoint ------------------------------------------
def dcp_model():
    torch.manual_seed(7)
    model = Net()
    return shard(model)


def dcp_train(model, opt, steps, rank):
    losses = []
    for step in steps:
        # The same global batch whatever the rank count: every rank takes the mean of all
        # batches' losses with its share of the rows.
        loss = loss_of(model, ids_of(step, 0), use_extra=True)
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.detach().clone())
    return torch.stack(losses)


def dcp(mode, path, rank, world):
    import torch.distributed.checkpoint as dcp_api
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
    model = dcp_model()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1)
    if mode == "save":
        dcp_train(model, opt, range(3), rank)
        msd, osd = get_state_dict(model, opt)
        dcp_api.save({"model": msd, "optim": osd}, checkpoint_id=path)
        losses = dcp_train(model, opt, range(3, 5), rank)
        if rank == 0:
            torch.save(losses, os.path.join(path, "losses.pt"))
        # Every rank's optimizer state is in the checkpoint: the full exp_avg read back.
        full = {k: v.full_tensor() for k, v in
                get_state_dict(model, opt)[1]["state"]["blocks.0.fc1.weight"].items()
                if isinstance(v, DTensor)}
        assert full["exp_avg"].shape == (3 * DIM, DIM), full["exp_avg"].shape
        return 0
    # load: any rank count
    msd, osd = get_state_dict(model, opt)
    state = {"model": msd, "optim": osd}
    dcp_api.load(state, checkpoint_id=path)
    set_state_dict(model, opt, model_state_dict=state["model"], optim_state_dict=state["optim"])
    got = dcp_train(model, opt, range(3, 5), rank)
    want = torch.load(os.path.join(path, "losses.pt"))
    check_close(got, want, f"losses after a DCP load on {world} rank(s)", rtol=1e-6, atol=1e-7)
    if rank == 0:
        print(f"PASS: DCP load on {world} rank(s): losses {got.tolist()}", flush=True)
    return 0


if __name__ == "__main__":
    mode = sys.argv[1] if len(sys.argv) > 1 else "main"
    from libfsdp.pytorch import _mesh
    _mesh.ensure_process_group("test")  # the group fully_shard makes: used by the checks too
    rank, world = dist.get_rank(), dist.get_world_size()
    if mode in ("main", "hpz"):
        status = main(rank, world, [hpz] if mode == "hpz" else None)
        if rank == 0:
            print("PASS: fully_shard drop-in" if status == 0 else f"{status} checks failed",
                  flush=True)
    else:
        status = dcp(mode, sys.argv[2], rank, world)
    sys.stdout.flush()
    dist.barrier()
    dist.destroy_process_group()
    libfsdp.finalize_mpi()
    os._exit(1 if status else 0)
