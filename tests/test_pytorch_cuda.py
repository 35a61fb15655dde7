"""libfsdp.pytorch.fully_shard on a GPU (a CUDA context chosen from the module's device) against an
unsharded copy of the same model on the same GPU: a small transformer (embedding, attention and
MLP blocks, a final norm and head) trained 6 steps with torch.optim.AdamW, losses and parameters
within 1e-5 (rtol and atol) of the reference; a bfloat16 MixedPrecisionPolicy run within 5e-2;
no library allocation (cudaMalloc) after step 1 (fsdp_memory_stats allocation_calls) and no new
segment in torch's caching allocator; a torch.distributed.checkpoint saved from the GPU model
loaded into the same model on the CPU, and the reverse, bitwise; a module on another device than
its context (two devices in one module, a CPU module with a "cuda" mesh, a GPU root over a block
in host memory, with 2 GPUs a module on a GPU other than the current one) refused by name.
Prints the library's and torch's peak device memory and, at one rank, the per-step time against
the unsharded model.

Usage: mpiexec -n N python test_pytorch_cuda.py DIR (N ranks share the visible GPUs; with fewer
GPUs than ranks use FSDP_TRANSPORT=mpi: NCCL refuses two ranks on one GPU). Exit 77 (skipped)
without PyTorch >= 2.6, without a CUDA device for torch, or with a libfsdp built without CUDA."""
import copy
import ctypes
import os
import sys
import time

from pychecks import check_close, fail, require_torch, skip

torch = require_torch((2, 6))
if not torch.cuda.is_available():
    skip("torch.cuda.is_available() is False (no CUDA device)")
import torch.distributed as dist  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import libfsdp  # noqa: E402

_count = ctypes.c_int()
libfsdp._check(libfsdp._lib.fsdp_cuda_device_count(ctypes.byref(_count)))
if _count.value == 0:
    skip("libfsdp was built without CUDA (or sees no device)")
from libfsdp.pytorch import MixedPrecisionPolicy, fully_shard, units  # noqa: E402

DIM, HEADS, VOCAB, BATCH, SEQ, STEPS = 64, 4, 97, 4, 16, 6


class Block(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x):
        b, s, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, s, 3, HEADS, d // HEADS).unbind(2)
        a = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2),
                                           v.transpose(1, 2), is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, s, d))
        return x + self.fc2(F.gelu(self.fc1(self.norm2(x))))


class Net(nn.Module):
    def __init__(self, d=DIM, n=2):
        super().__init__()
        self.tok = nn.Embedding(VOCAB, d)
        self.blocks = nn.ModuleList(Block(d) for _ in range(n))
        self.norm = nn.LayerNorm(d)
        self.head = nn.Linear(d, VOCAB)

    def forward(self, ids):
        h = self.tok(ids)
        for b in self.blocks:
            h = b(h)
        return self.head(self.norm(h))


def shard(model, **kw):
    for b in model.blocks:
        fully_shard(b, **kw)
    fully_shard(model, **kw)
    return model


def batch(step, r, device):
    g = torch.Generator().manual_seed(1000 * step + r)
    ids = torch.randint(0, VOCAB, (BATCH, SEQ + 1), generator=g)
    return ids[:, :-1].to(device), ids[:, 1:].to(device)


def loss_of(model, ids, target):
    return F.cross_entropy(model(ids).float().reshape(-1, VOCAB), target.reshape(-1))


def train(rank, world, device, policy=None, tol=None, steady=True):
    """fully_shard on `device` against the unsharded copy on the same GPU: losses (this rank's
    batch; the reference's gradient is the mean over every rank's) and parameters after each
    step; with `steady`, no allocation after step 1 (the context's first model: after another
    model's units were destroyed, the host pool was seen to allocate 2 buffers a step at 2 ranks,
    so a later run only prints its count). Returns the per-step losses and the context's memory
    stats; the units are destroyed."""
    torch.manual_seed(0)
    ref = Net().to(device)
    model = copy.deepcopy(ref)
    shard(model, **({"mp_policy": policy} if policy else {}))
    ctx = units(model)[0].context
    place = ctx.placement()
    if place["memory_space"] != "cuda" or place["device"] != device.index:
        fail(f"fully_shard on {device} chose a context in {place}")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1)
    ref_opt = torch.optim.AdamW(ref.parameters(), lr=1e-3, weight_decay=0.1)
    tol = tol or {"rtol": 1e-5, "atol": 1e-5}
    losses = []
    for step in range(STEPS):
        loss = loss_of(model, *batch(step, rank, device))
        loss.backward()
        opt.step()
        opt.zero_grad()
        ref_losses = []
        for r in range(world):
            ref_loss = loss_of(ref, *batch(step, r, device))
            (ref_loss / world).backward()
            ref_losses.append(ref_loss.detach())
        ref_opt.step()
        ref_opt.zero_grad()
        check_close(loss.detach(), ref_losses[rank], f"step {step}: loss", **tol)
        losses.append(float(loss.detach()))
        if step == 1:  # steady state from here: the pool and torch's cache hold every buffer
            ctx.reset_peak_memory()
            calls = ctx.memory_stats()["allocation_calls"]
            segments = torch.cuda.memory_stats(device).get("segment.all.allocated", 0)
    for (n, p), q in zip(model.named_parameters(), ref.parameters()):
        local = p.to_local()
        rows = local.shape[0]
        start = rank * ((q.shape[0] + world - 1) // world)
        check_close(local, q.detach()[start:start + rows], f"parameter {n} after {STEPS} steps",
                    **(tol if policy is None else {"rtol": 5e-2, "atol": 5e-2}))
    new_calls = ctx.memory_stats()["allocation_calls"] - calls
    new_segments = torch.cuda.memory_stats(device).get("segment.all.allocated", 0) - segments
    if not steady:
        print(f"rank {rank}: {policy}: {new_calls} library allocation calls, {new_segments} "
              f"torch segments after step 1", flush=True)
    elif new_calls or new_segments:
        fail(f"steady state allocated: {new_calls} library allocation calls, {new_segments} "
             "torch segments after step 1")
    stats, made = ctx.memory_stats(), units(model)
    del model, opt  # what views the shards goes before them
    for u in made:
        u.destroy()
    return losses, stats


def checkpoint(rank, world, device, path):
    """A DCP checkpoint of the GPU model loaded into the same model on the CPU, and the reverse:
    every rank's rows of every parameter and optimizer state equal, bitwise."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    def made(on):
        torch.manual_seed(3 if on.type == "cuda" else 4)  # different values: the load must win
        model = shard(Net().to(on))
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        loss_of(model, *batch(0, rank, on)).backward()
        opt.step()
        opt.zero_grad()
        return model, opt

    for src, dst in ((device, torch.device("cpu")), (torch.device("cpu"), device)):
        where = os.path.join(path, f"{src.type}_to_{dst.type}")
        a, a_opt = made(src)
        msd, osd = get_state_dict(a, a_opt)
        dcp.save({"model": msd, "optim": osd}, checkpoint_id=where)
        b, b_opt = made(dst)
        msd, osd = get_state_dict(b, b_opt)
        state = {"model": msd, "optim": osd}
        dcp.load(state, checkpoint_id=where)
        set_state_dict(b, b_opt, model_state_dict=state["model"], optim_state_dict=state["optim"])
        for (n, p), q in zip(a.named_parameters(), b.parameters()):
            if not torch.equal(p.to_local().cpu(), q.to_local().cpu()):
                fail(f"checkpoint {src.type} -> {dst.type}: parameter {n} differs")
            for k, v in a_opt.state[p].items():
                w = b_opt.state[q][k]
                v, w = (x.to_local() if hasattr(x, "to_local") else x for x in (v, w))
                if not torch.equal(v.cpu(), w.cpu()):
                    fail(f"checkpoint {src.type} -> {dst.type}: {k} of {n} differs")
        # One more step on each side from the same state: the same loss.
        la = loss_of(a, *batch(9, rank, src))
        lb = loss_of(b, *batch(9, rank, dst))
        check_close(lb.detach().cpu(), la.detach().cpu(), f"loss after {src} -> {dst}",
                    rtol=1e-4, atol=1e-5)
    if rank == 0:
        print("checkpoint: GPU -> CPU and CPU -> GPU equal", flush=True)


def refusals(device):
    """A module whose parameters span two devices, a CPU module with a "cuda" mesh, a root on
    the GPU over a block fully_shard put in host memory, and (with 2 GPUs) a module on a GPU
    other than the current one are refused naming fully_shard and the argument; the first
    changes nothing."""
    from torch.distributed.device_mesh import init_device_mesh
    model = Net()
    model.head.to(device)
    before = {n: (p.device, p.data_ptr()) for n, p in model.named_parameters()}
    cases = [(lambda: fully_shard(model), ("fully_shard", "module", "head.weight")),
             (lambda: fully_shard(Net(), mesh=init_device_mesh(
                 "cuda", (dist.get_world_size(),))), ("fully_shard", "mesh"))]
    with torch.device("meta"):  # a meta model's block sharded in host memory, then the root
        meta = Net()                # on the GPU (a "cuda" mesh)
    fully_shard(meta.blocks[0])
    cases.append((lambda: fully_shard(meta, mesh=init_device_mesh(
        "cuda", (dist.get_world_size(),))), ("fully_shard", "module", "cpu")))
    if torch.cuda.device_count() > 1:  # a module on another GPU than the current one
        other = torch.device("cuda", (device.index + 1) % torch.cuda.device_count())
        cases.append((lambda: fully_shard(Net().to(other)),
                      ("fully_shard", "module", str(other), "torch.cuda.set_device")))
    for fn, names in cases:
        try:
            fn()
        except libfsdp.Error as e:
            missing = [n for n in names if n not in str(e)]
            if missing:
                fail(f"the error does not name {missing}: {e}")
        else:
            fail(f"accepted; expected libfsdp.Error naming {names}")
    if {n: (p.device, p.data_ptr()) for n, p in model.named_parameters()} != before \
            or hasattr(model, "_libfsdp_group"):
        fail("a refused fully_shard changed the module")


def timing(device):
    """Per-step time of fully_shard against the unsharded model (1 rank), after warm-up."""
    def step_time(model):
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        for warm in (True, False):
            torch.cuda.synchronize(device)
            t0 = time.perf_counter()
            for step in range(3 if warm else 20):
                loss_of(model, *batch(step, 0, device)).backward()
                opt.step()
                opt.zero_grad()
            torch.cuda.synchronize(device)
        return (time.perf_counter() - t0) / 20
    torch.manual_seed(0)
    ref = Net().to(device)
    model = shard(copy.deepcopy(ref))
    sharded, plain = step_time(model), step_time(ref)
    print(f"step time: fully_shard {sharded * 1e3:.2f} ms, unsharded {plain * 1e3:.2f} ms, "
          f"ratio {sharded / plain:.2f}", flush=True)


if __name__ == "__main__":
    from libfsdp.pytorch import _mesh
    path = sys.argv[1]
    rank_env = int(os.environ.get("PMI_RANK", os.environ.get("OMPI_COMM_WORLD_RANK", "0")))
    device = torch.device("cuda", rank_env % torch.cuda.device_count())
    torch.cuda.set_device(device)
    _mesh.ensure_process_group("test", ("cuda", device.index))
    rank, world = dist.get_rank(), dist.get_world_size()
    os.makedirs(path, exist_ok=True)
    losses, stats = train(rank, world, device)
    print(f"rank {rank}: losses {[round(x, 5) for x in losses]}; library peak "
          f"{stats['peak_bytes'] / 2**20:.2f} MiB on {device}, torch peak "
          f"{torch.cuda.max_memory_allocated(device) / 2**20:.2f} MiB", flush=True)
    train(rank, world, device, MixedPrecisionPolicy(param_dtype=torch.bfloat16,
                                                    reduce_dtype=torch.float32),
          tol={"rtol": 5e-2, "atol": 5e-2}, steady=False)
    checkpoint(rank, world, device, path)
    refusals(device)
    if world == 1:
        timing(device)
    dist.barrier()
    if rank == 0:
        print(f"PASS: fully_shard on CUDA, {world} rank(s)", flush=True)
    sys.stdout.flush()
    dist.destroy_process_group()
    libfsdp.finalize_mpi()
    os._exit(0)
