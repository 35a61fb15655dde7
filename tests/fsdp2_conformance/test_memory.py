"""Behaviours of FSDP2's test_fully_shard_memory.py (conformance.py runs each against fully_shard
and FullyShard): the memory bounds of test_fully_shard_training_memory, in bytes, for a model of
3 blocks and a root-only head, fully_shard on each block, then the root (no CPU offload, which
FullyShard has not; FSDP2's Transformer replaced by an MLP whose blocks are the largest units, as
there).

FSDP2's test reads CUDA's allocator (active bytes, current and peak) around each phase. On the CPU
there is no such counter, so each side is measured where its parameter memory lives:
- fully_shard: the storage behind the parameters, gradients and optimizer state (local tensors
  of the DTensors), after each phase: current memory only;
- FullyShard: fsdp_memory_stats (ctx.memory_stats()), current after each phase as above, and the
  library's peaks (peak_bytes, and peak_init_bytes during construction) against the same bounds.
Activations are in neither, so FSDP2's allowance for them (buffer_mb) shrinks to SLACK."""
import math

from conformance import agree, batch, behaviour, nn, run, torch, world
from torch.distributed.tensor import DTensor

DIM, BLOCKS = 128, 3
SLACK = 4096  # bytes: FSDP2's buffer_mb ("other") less the activations neither side counts here
SOURCE = "test_fully_shard_memory.py::TestFullyShardMemory::test_fully_shard_training_memory"


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(42)
        self.blocks = nn.ModuleList(
            nn.Sequential(nn.Linear(DIM, DIM), nn.ReLU(), nn.Linear(DIM, DIM))
            for _ in range(BLOCKS))
        self.head = nn.Linear(DIM, DIM)

    def forward(self, x):
        for b in self.blocks:
            x = x + b(x)
        return self.head(x)


class Sizes:
    """FSDP2's test's quantities, in bytes (float32)."""

    def __init__(self, model):
        numel = sum(p.numel() for p in model.parameters())
        self.unsharded = 4 * numel
        # FSDP2's padded shards: each parameter's dim 0 split in `world` equal parts
        self.sharded = 4 * sum(math.ceil(p.shape[0] / world) * (p.numel() // p.shape[0])
                               for p in model.parameters())
        self.max_block = 4 * sum(p.numel() for p in model.blocks[0].parameters())
        self.non_block = 4 * sum(p.numel() for p in model.head.parameters())


def _storage_bytes(tensors):
    seen = {}
    for t in tensors:
        if t is None:
            continue
        t = (t.to_local() if isinstance(t, DTensor) else t).detach()
        if t.numel():
            seen[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
    return sum(seen.values())


def current(impl, model, opt):
    """Bytes held now by parameters, gradients and optimizer state (this rank)."""
    if impl.is_fsdp2:
        params = list(model.parameters())
        state = [v for s in opt.state.values() for k, v in s.items() if k != "step"]
        return _storage_bytes(params) + _storage_bytes(p.grad for p in params) + \
            _storage_bytes(state)
    s = impl.ctx.memory_stats()
    return (s["shard_bytes"] + s["unsharded_bytes"] + s["grad_shard_bytes"]
            + s["full_grad_bytes"] + s["optimizer_state_bytes"])


def within(impl, model, opt, bound, phase, peak=None):
    """The phase's current bytes (both sides) and FullyShard's peak (`peak(stats)`) are within
    `bound` + SLACK."""
    now = current(impl, model, opt)
    high = None if impl.is_fsdp2 or peak is None else peak(impl.ctx.memory_stats())

    def check():
        assert now <= bound + SLACK, f"{phase}: {now} bytes held, bound {bound} + {SLACK}"
        if high is not None:
            assert high <= bound + SLACK, f"{phase}: peak {high} bytes, bound {bound} + {SLACK}"
    agree(check)


def build(impl, reshard_after_forward):
    model = MLP()
    sizes = Sizes(model)
    handle = impl.shard(model, list(model.blocks), reshard_after_forward=reshard_after_forward)
    if impl.is_fsdp2:
        # "Do not use foreach since intermediates increase peak memory"
        opt = torch.optim.Adam(model.parameters(), lr=1e-2, foreach=False)
    else:
        opt = impl.ctx.optimizer("adamw", handle.units, lr=1e-2, weight_decay=0.0)
        impl.handles.insert(0, _Closer(opt))  # destroyed before the units (Impl.close)
    return model, sizes, opt


class _Closer:
    """Lets Impl.close() destroy an optimizer before the context is finalized."""

    def __init__(self, opt):
        self.units = [self]
        self._opt = opt

    def destroy(self):
        self._opt.destroy()


def peak_total(s):
    return s["peak_bytes"]


def training(impl, reshard_after_forward, through_zero_grad=False):
    """FSDP2's _test_fully_shard_training_memory(reshard_after_forward, use_cpu_offload=False)."""
    model, sizes, opt = build(impl, reshard_after_forward)
    sh, un, blk, nb = sizes.sharded, sizes.unsharded, sizes.max_block, sizes.non_block
    # Init: each rank holds its shards, at most one block unsharded while it is sharded
    within(impl, model, opt, sh + blk, "construction",
           lambda s: s["peak_bytes"] + s["peak_init_bytes"])
    loss = model(batch(0, 1, DIM))
    if reshard_after_forward:
        # 3x max unsharded block (current all-gather + copy-out, next all-gather), non-block
        # parameters, sharded parameters
        forward = 3 * blk + nb + sh
    else:
        # sharded, unsharded, 1x max unsharded block (copy-out)
        forward = sh + un + blk
    within(impl, model, opt, forward, "forward", peak_total)
    loss.sum().backward()
    if reshard_after_forward:
        # 1x max unsharded block parameters, 2x its gradients, non-block parameters, 2x sharded
        # parameters/gradients
        backward = 3 * blk + nb + 2 * sh
    else:
        # sharded, unsharded, 1.5x max unsharded block (reduce-scatter input/output)
        backward = sh + un + int(1.5 * blk)
    within(impl, model, opt, backward, "backward", peak_total)
    del loss
    if not impl.is_fsdp2:
        impl.ctx.reset_peak_memory()
    cached = 0 if impl.is_fsdp2 else impl.ctx.memory_stats()["pool_cached_bytes"]
    opt.step()
    # 1x sharded parameters, 1x sharded gradients, 2x sharded optimizer states (FullyShard's
    # pool keeps the full-gradient buffers cached for the next backward: not active memory,
    # as CUDA's active bytes leave out its caching allocator's cache)
    within(impl, model, opt, 4 * sh, "optimizer step", lambda s: s["peak_bytes"] - cached)
    if through_zero_grad:
        opt.zero_grad()
        # sharded gradients freed: 1x sharded parameters, 2x sharded optimizer states
        within(impl, model, opt, 3 * sh, "zero_grad")


@behaviour("memory within FSDP2's bounds at construction, forward, backward and step "
           "(reshard_after_forward=True)", SOURCE + " (reshard_after_forward=True)")
def memory_reshard(impl):
    training(impl, True)


@behaviour("memory within FSDP2's bounds at construction, forward, backward and step "
           "(reshard_after_forward=False)", SOURCE + " (reshard_after_forward=False)")
def memory_no_reshard(impl):
    training(impl, False)


@behaviour("zero_grad() frees the sharded gradients",
           SOURCE + " (\"Zero grad: sharded gradients freed\")",
           known="deliberate: the library's opt.zero_grad() marks the gradient shards zero "
                 "(every gradient None, as set_to_none) but keeps their memory, so that steady-"
                 "state steps allocate nothing and p.grad views keep their address; a unit's "
                 "gradient shard is freed with the unit")
def memory_zero_grad(impl):
    training(impl, True, through_zero_grad=True)


if __name__ == "__main__":
    run()
