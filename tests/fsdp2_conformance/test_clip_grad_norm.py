"""Behaviours of FSDP2's test_fully_shard_clip_grad_norm_.py (conformance.py runs each against
fully_shard and FullyShard). The 2D (tensor parallel) test is left out; FSDP2's Transformer is
replaced by a small MLP of blocks (fully_shard on each block, then the root, as there).

The reference is the unsharded model with DDP's averaged gradients, clipped by
torch.nn.utils.clip_grad_norm_. The optimizer is SGD (FSDP2's test uses Adam, whose update
hardly depends on the gradient's scale, so that a wrong clip would barely show in the
parameters); the clipped gradients are compared directly as well, as in FSDP2's test."""
import copy
import math
from conformance import agree, allreduce_grads, assert_close, batch, behaviour, nn, run, torch


MAX_NORM = 1.0
NORM_TYPES = (2.0, 1.0, math.inf)
STEPS = 4


class MLP(nn.Module):
    def __init__(self, dim=16, blocks=3):
        super().__init__()
        torch.manual_seed(42)
        self.blocks = nn.ModuleList(
            nn.Sequential(nn.Linear(dim, dim), nn.ReLU(), nn.Linear(dim, dim))
            for _ in range(blocks))
        self.head = nn.Linear(dim, 4)

    def forward(self, x):
        for b in self.blocks:
            x = x + b(x)
        return self.head(x)


def sgd(impl, model, handle):
    if impl.is_fsdp2:
        return torch.optim.SGD(model.parameters(), lr=1e-2)
    return impl.ctx.optimizer("sgd", handle.units, lr=1e-2)


def grads_against(impl, model, handle, ref, what):
    """Every gradient of the sharded model equals the reference's (FSDP2: the full tensor;
    FullyShard: this rank's part of the library's gradient shards). Local (FSDP2: collective)."""
    want = {n: p.grad for n, p in ref.named_parameters()}
    if impl.is_fsdp2:
        got = {n: p.grad.full_tensor() for n, p in model.named_parameters()}
        return lambda: [assert_close(got[n], want[n], f"{what}: {n}") for n in want]
    got = {}
    for state in handle.states:
        shard = state.unit.shard_grad()
        for i, (name, _) in enumerate(state.params):
            shard_off, param_off, length = state.unit.shard_range(i)
            got[name] = (torch.from_numpy(shard[shard_off:shard_off + length].copy()),
                         want[name].reshape(-1)[param_off:param_off + length])
    return lambda: [assert_close(g, w, f"{what}: {n}") for n, (g, w) in got.items()]


def clip_parity(impl, clip):
    """FSDP2's _test_clip_grad_norm: every step the total norm equals DDP's, the clip was not
    vacuous, and the clipped gradients and the parameters after the step equal DDP's.
    clip(impl, model, norm_type) clips the sharded model and returns the total norm."""
    for norm_type in NORM_TYPES:
        model = MLP()
        ref = copy.deepcopy(model)
        handle = impl.shard(model, list(model.blocks))
        opt = sgd(impl, model, handle)
        ref_opt = torch.optim.SGD(ref.parameters(), lr=1e-2)
        try:
            for step in range(STEPS):
                what = f"norm_type={norm_type}, step {step}"
                x = batch(step, 8, 16)
                ref_opt.zero_grad()
                ref(x).sum().backward()
                allreduce_grads(ref)
                opt.zero_grad()
                model(x).sum().backward()
                agree(grads_against(impl, model, handle, ref, f"{what}, gradient before clipping"))
                ref_total = torch.nn.utils.clip_grad_norm_(ref.parameters(), max_norm=MAX_NORM,
                                                           norm_type=norm_type)
                agree(lambda: assert_close(bool(ref_total > MAX_NORM), True,
                                    f"{what}: the reference's norm exceeds max_norm"))
                total = clip(impl, model, norm_type)
                agree(lambda: assert_close(torch.as_tensor(total, dtype=ref_total.dtype), ref_total,
                                    f"{what}: total norm"))
                agree(grads_against(impl, model, handle, ref, f"{what}, clipped gradient"))
                ref_opt.step()
                opt.step()
            got, want = impl.full_state_dict(model), ref.state_dict()
            agree(lambda: [assert_close(got[k], want[k], f"norm_type={norm_type}: {k}") for k in want])
        finally:
            if not impl.is_fsdp2:  # ctx.clip_grad_norm covers every unit of the context: one
                opt.destroy()      # model at a time
                for unit in handle.units:
                    unit.destroy()
                impl.handles.remove(handle)


def torch_clip(impl, model, norm_type):
    total = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=MAX_NORM,
                                           norm_type=norm_type, foreach=True)
    return total.full_tensor() if hasattr(total, "full_tensor") else total


def documented_clip(impl, model, norm_type):
    if impl.is_fsdp2:
        return torch_clip(impl, model, norm_type)
    return impl.ctx.clip_grad_norm(MAX_NORM, norm_type)


SOURCE = "test_fully_shard_clip_grad_norm_.py::TestClipGradNormWorldSize2::test_clip_grad_norm_1d"


@behaviour("torch.nn.utils.clip_grad_norm_(model.parameters()): DDP's total norm and clipped "
           "gradients (norm 2, 1, inf)", SOURCE)
def clip_torch(impl):
    clip_parity(impl, torch_clip)


@behaviour("ctx.clip_grad_norm (FullyShard's documented clip; FSDP2: clip_grad_norm_): DDP's "
           "total norm and clipped gradients (norm 2, 1, inf)", SOURCE)
def clip_documented(impl):
    clip_parity(impl, documented_clip)


if __name__ == "__main__":
    run()
