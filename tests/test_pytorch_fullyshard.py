"""libfsdp.pytorch.FullyShard against a non-sharded reference computed in the same process, step
by step (run under mpiexec with 2 ranks). The reference trains one unsharded copy of the model on
the global batch (the mean of every rank's loss, which is what DDP computes) with torch.optim.AdamW:
- the seed's GPT with tied embeddings and activation checkpointing, FSDP2-style wrapping (each
  block, then the root): float32 losses within 1e-5 relative over 20 steps and final parameters
  alike; bfloat16 compute (float32 masters) within 2% of a bfloat16 reference at every step;
- float16 compute with libfsdp.GradScaler (where this PyTorch multiplies float16 on the CPU);
- parameters without gradient: a branch no rank takes is left alone, ranks taking different
  branches with find_unused_parameters=True match the reference; no_sync() accumulation; a
  frozen parameter left as it was;
- prefetch as a hint: a chunked loss, a state_dict() between backward and step, an evaluation pass
  before each step, each matching the reference with nothing left unsharded;
- a bfloat16 model: float32 masters equal to its values, compute in bfloat16;
- a meta-device model materialized one unit at a time, with the peak memory of construction;
- state_dict()/load_state_dict() through plain nn.Modules, full and per rank, from rank 0;
- the nn.Module's own contract: torch.optim (AdamW, SGD with momentum) over model.parameters()
  against the reference, p.grad None where the reference has none, model.state_dict() and
  load_state_dict() with full tensors, clip_grad_norm_ over the parts giving the global norm;
- loops real programs run: two backward passes where the second skips a unit, a backward that
  raises then training on, backward(create_graph=True), a part replaced between steps in a
  prefetched unit, a module called twice under bfloat16 compute;
- register_fsdp_forward_method (forward_features alone, against the reference), unshard() and
  reshard();
- reset_parameters() after to_empty() (FSDP2's meta flow after wrapping), parameters replaced
  through p.data taken into the shard or refused;
- requires_grad changed after wrapping: a unit frozen trains like the reference, a parameter
  frozen at wrapping and unfrozen is refused by name;
- bad input: a clear libfsdp.Error and nothing created or changed.
Exit 77 (skipped) without PyTorch."""
import copy
import os
import sys
import zlib

from pychecks import check, finish, require_torch, set_rank

torch = require_torch()
import torch.nn as nn  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "examples", "python"))
import gpt_model  # noqa: E402
import libfsdp  # noqa: E402
from libfsdp.pytorch import FullyShard, MixedPrecisionPolicy  # noqa: E402

torch.set_num_threads(1)
ctx = libfsdp.init()
rank, world = ctx.group()
set_rank(rank)
def gpt_args(**kw):
    a = dict(dim=32, layers=2, heads=2, seq=16, batch=4, lr=2e-3, seed=0, tied=True, ckpt=True,
             precision="fp32")
    a.update(kw)
    return type("Args", (), a)


def reference_losses(a, steps, compute_dtype=None, scale=None):
    """Every rank's loss per step of one unsharded model on the global batch (float32 masters;
    with compute_dtype, forward and backward on a copy cast to it)."""
    model = gpt_model.model(a)
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, weight_decay=0.01)
    losses = []
    for step in range(steps):
        run = model if compute_dtype is None else copy.deepcopy(model).to(compute_dtype)
        per_rank = []
        for r in range(world):
            x, y = gpt_model.batch(a, step, r)
            loss = gpt_model.loss_fn(run(x), y)
            ((loss * (scale or 1.0)) / world).backward()
            per_rank.append(loss.item())
        if compute_dtype is not None:
            for p, q in zip(model.parameters(), run.parameters()):
                p.grad = q.grad.float() / (scale or 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(per_rank)
    return losses, model


def train(a, steps, policy=None, scaler=False):
    model = gpt_model.model(a)
    sharded = FullyShard(ctx, model, model.blocks, mp_policy=policy)
    opt = ctx.optimizer("adamw", sharded.units, lr=a.lr, weight_decay=0.01)
    grad_scaler = libfsdp.GradScaler(ctx, init_scale=1024.0) if scaler else None
    losses = []
    for step in range(steps):
        x, y = gpt_model.batch(a, step, rank)
        loss = gpt_model.loss_fn(model(x), y)  # the model itself: FullyShard works through hooks
        (grad_scaler.scale(loss) if scaler else loss).backward()
        if scaler:
            grad_scaler.step(opt)
            grad_scaler.update()
        else:
            opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    return losses, sharded, opt


def drop(sharded, opt=None):
    """Frees what a check created (the context outlives every check)."""
    if opt is not None:
        opt.destroy()
    for unit in sharded.units:
        unit.destroy()


def check_gpt_fp32():
    a = gpt_args()
    ref, ref_model = reference_losses(a, 20)
    losses, sharded, opt = train(a, 20)
    worst = max(abs(x - r[rank]) / abs(r[rank]) for x, r in zip(losses, ref))
    print(f"rank {rank}: fp32 tied + activation checkpointing: largest relative loss difference "
          f"{worst:.2e} over 20 steps ({ref[0][rank]:.4f} -> {ref[-1][rank]:.4f})", flush=True)
    check(worst <= 1e-5, f"fp32 losses within 1e-5 of the reference (got {worst:.2e})")
    check(ref[-1][rank] < ref[0][rank] - 0.5, "the reference learns")
    state = sharded.state_dict()
    expected = ref_model.state_dict()
    check(set(state) == set(expected), f"state_dict keys {sorted(set(state) ^ set(expected))}")
    check("head.out.weight" in state and state["head.out.weight"] is state["embed.tok.weight"],
          "the tied weight is listed under both names, once")
    d = a.dim

    def trusted(k, t):  # the key part of qkv.bias has a zero gradient in exact arithmetic
        return torch.cat([t[:d], t[2 * d:]]) if k.endswith("qkv.bias") else t
    diffs = {k: float(((trusted(k, state[k]) - trusted(k, expected[k])).abs() /
                       (trusted(k, expected[k]).abs() + 1e-3)).max()) for k in expected}
    diff = max(diffs.values())
    if diff > 1e-4:
        print(f"rank {rank}: parameter differences {diffs}")
    check(diff <= 1e-4, f"final parameters match the reference (largest rel. diff {diff:.2e}; "
          "the key bias is left out: its gradient is zero up to rounding, which AdamW scales up)")
    # The state dict loads into a plain module that computes what the sharded one computes.
    plain = gpt_model.model(a)
    plain.load_state_dict(state)
    x, _ = gpt_model.batch(a, 99, rank)
    with torch.no_grad():
        check(torch.equal(plain(x), sharded(x)), "an nn.Module loaded from state_dict() computes "
              "bitwise what the sharded model computes")
    # Back in: perturbed values, every rank's own dict, then rank 0's only.
    changed = {k: v + 1.0 for k, v in state.items()}
    sharded.load_state_dict(changed)
    again = sharded.state_dict()
    check(all(torch.equal(again[k], changed[k]) for k in changed), "load_state_dict (each rank)")
    sharded.load_state_dict(state if rank == 0 else {}, from_rank0=True)
    again = sharded.state_dict()
    check(all(torch.equal(again[k], state[k]) for k in state), "load_state_dict(from_rank0)")
    own = sharded.state_dict(full=False)
    for k, (values, offset) in own.items():
        full = state[k].reshape(-1)[offset:offset + values.numel()]
        check(torch.equal(values, full), f"state_dict(full=False)[{k}] is this rank's part")
    # A refused dict changes nothing, on every rank.
    bad = dict(state)
    bad["blocks.0.fc1.weight"] = torch.zeros(3, 3)
    for kwargs in ({}, {"from_rank0": True}):
        try:
            sharded.load_state_dict(bad, **kwargs)
            check(False, f"a wrong shape is refused {kwargs}")
        except libfsdp.Error as e:
            check("blocks.0.fc1.weight" in str(e) or "rank 0" in str(e), f"message: {e}")
    check(all(torch.equal(v, sharded.state_dict()[k]) for k, v in state.items()),
          "nothing changed after a refused load")
    drop(sharded, opt)


def check_gpt_bf16():
    a = gpt_args()
    ref, _ = reference_losses(a, 20, torch.bfloat16)
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    losses, sharded, opt = train(a, 20, policy)
    worst = max(abs(x - r[rank]) / abs(r[rank]) for x, r in zip(losses, ref))
    print(f"rank {rank}: bf16 tied + activation checkpointing: largest relative loss difference "
          f"{worst:.2e}", flush=True)
    check(worst <= 0.02, f"bf16 losses within 2% of the bf16 reference (got {worst:.2e})")
    # Between uses each parameter is this rank's part of the float32 master shard (as FSDP2's
    # sharded parameters keep their float32 dtype); bfloat16 only while its unit is unsharded.
    check(all(p.dtype == torch.float32 for p in sharded.root.parameters()),
          "parameters between uses are float32 master views")
    for state in sharded.states:
        shard = state.unit.shard()
        for i, (_, p) in enumerate(state.params):
            so, _, n = state.unit.shard_range(i)
            check(p.numel() == n and (n == 0 or p.data_ptr() == shard[so:].ctypes.data),
                  f"{state.params[i][0]} views its part of the shard")
    check(all(u.dtype.itemsize == 4 for u in sharded.units), "float32 shards")
    drop(sharded, opt)


def check_gpt_fp16():
    try:
        torch.ones(2, 2, dtype=torch.float16) @ torch.ones(2, 2, dtype=torch.float16)
    except RuntimeError:
        print(f"rank {rank}: fp16 part skipped: PyTorch {torch.__version__} cannot multiply "
              "float16 on the CPU", flush=True)
        return
    a = gpt_args(ckpt=False)
    ref, _ = reference_losses(a, 10, torch.float16, scale=1024.0)
    policy = MixedPrecisionPolicy(param_dtype=torch.float16, reduce_dtype=torch.float32)
    losses, sharded, opt = train(a, 10, policy, scaler=True)
    worst = max(abs(x - r[rank]) / abs(r[rank]) for x, r in zip(losses, ref))
    print(f"rank {rank}: fp16 + GradScaler: largest relative loss difference {worst:.2e}",
          flush=True)
    check(worst <= 0.02, f"fp16 losses within 2% of the fp16 reference (got {worst:.2e})")
    drop(sharded, opt)


class Branchy(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(1)
        self.a, self.b, self.never = nn.Linear(8, 8), nn.Linear(8, 8), nn.Linear(8, 8)
        self.out = nn.Linear(8, 1)

    def forward(self, x, branch):
        # Every rank runs both branches (an unshard is collective: FSDP needs every rank to run
        # the same units), and the loss takes one: the other's parameters get no gradient.
        ya, yb = self.a(x), self.b(x)
        return self.out(ya if branch == 0 else yb).square().mean()


def largest_diff(sharded, ref):
    """The largest absolute difference between the sharded model's state and the reference's."""
    got, want = sharded.state_dict(), ref.state_dict()
    return max(float((got[k] - want[k]).abs().max()) for k in want)


def check_user_contract():
    """FSDP2's contract for the nn.Module the user holds: between uses each parameter is this
    rank's part of its shard and p.grad the matching part of the gradient shard, so torch.optim
    over model.parameters() trains like the unsharded model (gradients accumulate over two
    backward passes, as in p.grad); a parameter without a gradient keeps p.grad None and is left
    alone (AdamW's decay would move it); model.state_dict() / load_state_dict() give and take full
    tensors; torch.nn.utils.clip_grad_norm_ over the parts raises instead of a local norm."""
    optimizers = {"AdamW": lambda ps: torch.optim.AdamW(ps, lr=0.05, weight_decay=0.1),
                  "SGD with momentum": lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9)}
    for label, make in optimizers.items():
        model, ref = Branchy(), Branchy()
        sharded = FullyShard(ctx, model, [model.a, model.b, model.never])
        opt, ref_opt = make(model.parameters()), make(ref.parameters())
        unused = {k: v for k, v in sharded.state_dict().items()
                  if k.startswith(("b.", "never."))}
        parts = {id(p): (state.unit, i) for state in sharded.states
                 for i, (_, p) in enumerate(state.params)}
        worst = 0.0
        for step in range(3):
            xs = [torch.randn(4, 8, generator=torch.Generator().manual_seed(300 + 10 * step + r))
                  for r in range(world)]
            for micro in range(2):
                model(xs[rank] + micro, 0).backward()
                sum(ref(xs[r] + micro, 0) for r in range(world)).div(world).backward()
            for (name, p), q in zip(model.named_parameters(), ref.parameters()):
                check((p.grad is None) == (q.grad is None),
                      f"{label}: {name}.grad is None exactly where the reference's is")
                if p.grad is not None and q.grad is not None:
                    unit, i = parts[id(p)]
                    _, po, n = unit.shard_range(i)
                    part = p.grad.as_subclass(torch.Tensor)  # this rank's part, explicitly
                    worst = max(worst, float((part - q.grad.reshape(-1)[po:po + n]).abs()
                                             .max()) if n else 0.0)
            opt.step()
            opt.zero_grad()
            ref_opt.step()
            ref_opt.zero_grad()
        check(worst <= 1e-6, f"{label}: p.grad is this rank's part of the reference's gradient "
              f"(largest diff {worst:.2e})")
        diff = largest_diff(sharded, ref)
        print(f"rank {rank}: {label} over model.parameters(): largest parameter difference "
              f"{diff:.2e}, gradient {worst:.2e}", flush=True)
        check(diff <= 1e-5, f"{label} over model.parameters() matches the reference ({diff:.2e})")
        after = sharded.state_dict()
        check(all(torch.equal(after[k], v) for k, v in unused.items()),
              f"{label}: parameters without a gradient are not stepped")
        full = model.state_dict()
        check(list(full) == list(ref.state_dict()) and
              all(torch.equal(full[k], after[k]) for k in after),
              "model.state_dict(): every parameter's full values, in nn.Module's order")
        other = Branchy()
        with torch.no_grad():
            for q in other.parameters():
                q.mul_(-2.0)
        model.load_state_dict(other.state_dict())
        loaded = sharded.state_dict()
        check(all(torch.equal(loaded[k], v) for k, v in other.state_dict().items()),
              "model.load_state_dict(): full tensors reach the shards")
        bad = dict(other.state_dict())
        bad["b.weight"] = torch.zeros(3, 3)
        expect_error("model.load_state_dict() with a wrong shape",
                     lambda: model.load_state_dict(bad), "b.weight", "(3, 3)", "(8, 8)")
        check(all(torch.equal(sharded.state_dict()[k], v) for k, v in loaded.items()),
              "a refused model.load_state_dict() changes nothing")
        check_clip(model, ref, other, xs, parts, label)
        opt.zero_grad()
        drop(sharded)


def check_clip(model, ref, values, xs, parts, label):
    """torch.nn.utils.clip_grad_norm_ over model.parameters(): the global norm and the clipped
    gradients of the unsharded reference (norms 2 and 1, and inf where this PyTorch takes it as a
    norm: 1.13 takes g.abs().max(), a reduction over the part that is refused)."""
    ref.load_state_dict(values.state_dict())
    for norm_type in (2.0, 1.0, float("inf")):
        model.zero_grad()
        ref.zero_grad()
        model(xs[rank], 0).backward()
        sum(ref(xs[r], 0) for r in range(world)).div(world).backward()
        clip = lambda m: torch.nn.utils.clip_grad_norm_(m.parameters(), 1e-3, norm_type)
        if norm_type == float("inf") and not torch.__version__ >= "2":
            expect_error("1.13's inf clip (a max over the part)", lambda: clip(model),
                         "max over the gradient")
            continue
        got, want = float(clip(model)), float(clip(ref))
        check(abs(got - want) <= 1e-6 * want, f"{label}: clip_grad_norm_ (norm {norm_type}) "
              f"gives the global norm ({got} vs the reference's {want})")
        worst = 0.0
        for p, q in zip(model.parameters(), ref.parameters()):
            if p.grad is not None:
                unit, i = parts[id(p)]
                _, po, n = unit.shard_range(i)
                diff = (p.grad - q.grad.reshape(-1)[po:po + n]).abs()
                worst = max(worst, float(diff.as_subclass(torch.Tensor).max()) if n else 0.0)
        check(worst <= 1e-9, f"{label}: clipped gradients (norm {norm_type}) are the reference's "
              f"({worst:.2e})")


def check_requires_grad_after_wrap():
    """Freezing a unit after wrapping (FSDP2's test_train_mixed_requires_grad_across_groups): it
    is neither reduced nor stepped, p.grad stays None, the rest trains like the reference; a
    parameter frozen at wrapping and unfrozen afterwards is refused by name, changing nothing."""
    model, ref = Branchy(), Branchy()
    sharded = FullyShard(ctx, model, [model.a, model.b, model.never])
    for m in (model, ref):
        m.a.requires_grad_(False)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9)
    for step in range(3):
        xs = [torch.randn(4, 8, generator=torch.Generator().manual_seed(500 + 10 * step + r))
              for r in range(world)]
        model(xs[rank], 0).backward()
        check(model.a.weight.grad is None and model.out.weight.grad is not None,
              "frozen after wrapping: no p.grad for the frozen unit, one for the others")
        opt.step()
        opt.zero_grad()
        sum(ref(xs[r], 0) for r in range(world)).div(world).backward()
        ref_opt.step()
        ref_opt.zero_grad()
    diff = largest_diff(sharded, ref)
    check(diff <= 1e-6, f"frozen after wrapping: the model matches the reference ({diff:.2e})")
    drop(sharded)
    model = Branchy()
    model.a.weight.requires_grad_(False)
    sharded = FullyShard(ctx, model, [model.a, model.b, model.never])
    before = sharded.state_dict()
    model.a.weight.requires_grad_(True)
    expect_error("unfreezing a parameter frozen at wrapping",
                 lambda: model(torch.randn(4, 8), 0), "a.weight", "frozen")
    model.a.weight.requires_grad_(False)
    model(torch.randn(4, 8), 0).backward()  # the model still works
    after = sharded.state_dict()
    check(torch.equal(after["a.weight"], before["a.weight"]),
          "a refused unfreeze changes nothing")
    drop(sharded)
    # frozen_may_train=True: the frozen parameter has gradient memory; while frozen, the
    # library's AdamW (weight decay 0.1) leaves it alone; unfrozen, it trains like the reference.
    model, ref = Branchy(), Branchy()
    for m in (model, ref):
        m.a.weight.requires_grad_(False)
    sharded = FullyShard(ctx, model, [model.a, model.b, model.never], frozen_may_train=True)
    opt = ctx.optimizer("adamw", sharded.units, lr=0.05, weight_decay=0.1)
    ref_opt = torch.optim.AdamW(ref.parameters(), lr=0.05, weight_decay=0.1)
    frozen = sharded.state_dict()["a.weight"]
    for step in range(4):
        if step == 2:
            for m in (model, ref):
                m.a.weight.requires_grad_(True)
        xs = [torch.randn(4, 8, generator=torch.Generator().manual_seed(900 + 10 * step + r))
              for r in range(world)]
        model(xs[rank], 0).backward()
        sum(ref(xs[r], 0) for r in range(world)).div(world).backward()
        check((model.a.weight.grad is None) == (step < 2),
              f"frozen_may_train: a.weight.grad is None exactly while frozen (step {step})")
        opt.step()
        opt.zero_grad()
        ref_opt.step()
        ref_opt.zero_grad()
        if step == 1:
            check(torch.equal(sharded.state_dict()["a.weight"], frozen),
                  "frozen_may_train: a frozen parameter is not stepped (no weight decay)")
    diff = largest_diff(sharded, ref)
    check(diff <= 1e-5, f"frozen_may_train: unfrozen after wrapping, the model trains like the "
          f"reference (largest diff {diff:.2e})")
    drop(sharded, opt)


def check_reinitialize():
    """FSDP2's to_empty() + reset_parameters() after wrapping, as FullyShard.reset_parameters():
    the values an unsharded model gets from the same seed; a parameter whose storage the user
    replaced between uses (to_empty, p.data = ...) is taken into the shard, one of the wrong
    shape refused by name."""
    model = Branchy()
    sharded = FullyShard(ctx, model, [model.a, model.b, model.never])
    model.to_empty(device="cpu")  # each part replaced by an uninitialized tensor of its shape
    torch.manual_seed(5)
    sharded.reset_parameters()
    ref = Branchy()
    torch.manual_seed(5)
    for m in (ref.a, ref.b, ref.never, ref.out):  # the units' order
        m.reset_parameters()
    got = sharded.state_dict()
    check(all(torch.equal(got[k], v) for k, v in ref.state_dict().items()),
          "reset_parameters() after to_empty(): the unsharded model's values from the seed")
    with torch.no_grad():
        model.a.weight.data = torch.full_like(model.a.weight, 3.0)
    model(torch.randn(4, 8), 0).backward()
    check(bool((sharded.state_dict()["a.weight"] == 3.0).all()),
          "a part replaced through p.data reaches the shard")
    before = sharded.state_dict()
    model.a.bias.data = torch.zeros(3, 3)  # no part is 2-D: refused on every rank alike
    expect_error("a part replaced by a tensor of another shape",
                 lambda: model(torch.randn(4, 8), 0), "a.bias", "(3, 3)")
    check(all(torch.equal(sharded.state_dict()[k], v) for k, v in before.items()),
          "a refused replacement changes nothing")
    drop(sharded)


class BufferHolder(nn.Module):
    """FSDP2's test MLP with a buffer: the parameters are its children's, the buffer its own."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.register_buffer("buffer", torch.zeros(4))

    def forward(self, x):
        return self.lin(x) + self.buffer

    def reset_parameters(self):
        torch.nn.init.normal_(self.buffer)


def check_root_resharding():
    """reshard_after_forward: None (the default) keeps the root's unit gathered after forward,
    True given explicitly reshards it too (FSDP2's rule); the gradients are the same."""
    grads = {}
    for value in (None, True):
        model = nn.Sequential(nn.Linear(4, 6), nn.Linear(6, 4))
        torch.manual_seed(11)
        for m in model:
            m.reset_parameters()
        model.add_module("head", nn.Linear(4, 2))  # the root's own parameters
        torch.manual_seed(12)
        model.head.reset_parameters()
        sharded = FullyShard(ctx, model, [model[0], model[1]], reshard_after_forward=value)
        out = model(torch.ones(3, 4))
        check(sharded.root_state.gathered == (value is None),
              f"reshard_after_forward={value}: the root gathered after forward: "
              f"{sharded.root_state.gathered}")
        out.square().sum().backward()
        grads[value] = {k: v.clone() for k, v in sharded.state_dict().items()}
        drop(sharded)
    check(all(torch.equal(grads[None][k], grads[True][k]) for k in grads[None]),
          "the same values either way")


def check_reset_buffers():
    """FullyShard.reset_parameters() resets the buffers of a module that holds no parameter of
    its own (its reset_parameters()), as FSDP2's to_empty() + reset_parameters() do."""
    model = nn.Sequential(BufferHolder(), BufferHolder())
    sharded = FullyShard(ctx, model, list(model))
    torch.manual_seed(9)
    sharded.reset_parameters()
    ref = nn.Sequential(BufferHolder(), BufferHolder())
    torch.manual_seed(9)
    for m in (ref[0].lin, ref[1].lin):  # the units' order, then the buffer holders
        m.reset_parameters()
    for m in ref:
        m.reset_parameters()
    got = sharded.state_dict()
    check(all(torch.equal(got[k], v) for k, v in ref.state_dict().items()),
          "reset_parameters(): parameters and the buffer-only modules' buffers as FSDP2's")
    drop(sharded)


class Features(nn.Module):
    """A model whose features are also asked for on their own (vit.forward_features)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(3)
        self.embed, self.block, self.head = nn.Linear(8, 8), nn.Linear(8, 8), nn.Linear(8, 1)

    def forward_features(self, x):
        return self.block(torch.relu(self.embed(x)))

    def forward(self, x):
        return self.head(self.forward_features(x))


def check_forward_method():
    """register_fsdp_forward_method: the root's forward_features called alone gathers the root's
    unit, keeps saved parameters for backward and reshards, matching the unsharded model's
    gradients; unshard()/reshard() gather and release explicitly; bad input refused."""
    from libfsdp.pytorch import register_fsdp_forward_method
    model, ref = Features(), Features()
    sharded = FullyShard(ctx, model, [model.block])
    register_fsdp_forward_method(model, "forward_features")
    parts = {id(p): (state.unit, i) for state in sharded.states
             for i, (_, p) in enumerate(state.params)}
    xs = [torch.randn(4, 8, generator=torch.Generator().manual_seed(700 + r))
          for r in range(world)]
    model.forward_features(xs[rank]).square().mean().backward()
    sum(ref.forward_features(x).square().mean() for x in xs).div(world).backward()
    worst = 0.0
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        if name.startswith("head"):
            check(p.grad is None, "forward_features alone: the head gets no gradient")
            continue
        unit, i = parts[id(p)]
        _, po, n = unit.shard_range(i)
        if n:
            worst = max(worst, float((p.grad.as_subclass(torch.Tensor)
                                      - q.grad.reshape(-1)[po:po + n]).abs().max()))
    check(worst <= 1e-6, f"forward_features alone: gradients match the reference ({worst:.2e})")
    check(not any(s.gathered for s in sharded.states), "forward_features alone: every unit resharded after backward")
    sharded.unshard()
    check(all(tuple(p.shape) == tuple(q.shape) for p, q in zip(model.parameters(),
                                                                  ref.parameters())),
          "unshard(): full parameters")
    model.block.reshard()
    check(model.block.weight.dim() == 1 and model.embed.weight.dim() == 2,
          "module.reshard(): that unit's parameters are parts again, the others still full")
    sharded.reshard()
    check(not any(s.gathered for s in sharded.states), "reshard(): every unit released")
    expect_error("a method of a module FullyShard did not wrap",
                 lambda: register_fsdp_forward_method(nn.Linear(2, 2), "forward"),
                 "not a module FullyShard wrapped")
    expect_error("a method that does not exist",
                 lambda: register_fsdp_forward_method(model, "nope"), "'nope'")
    drop(sharded)


class Twice(nn.Module):
    """A listed module called twice in one forward."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(4)
        self.lin, self.out = nn.Linear(8, 8), nn.Linear(8, 1)

    def forward(self, x):
        return self.out(torch.tanh(self.lin(torch.tanh(self.lin(x))))).square().mean()


def grads_against(model, ref, parts, what, tol):
    """Every p.grad (this rank's part) against the reference's gradient, None where it is."""
    worst = 0.0
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        check((p.grad is None) == (q.grad is None), f"{what}: {name}.grad None as the reference's")
        if p.grad is None or q.grad is None:
            continue
        unit, i = parts[id(p)]
        _, po, n = unit.shard_range(i)
        if n:
            want = q.grad.reshape(-1)[po:po + n].float()
            worst = max(worst, float((p.grad.as_subclass(torch.Tensor) - want).abs().max()))
    check(worst <= tol, f"{what}: gradients match the reference ({worst:.2e})")


def check_loops_users_run():
    """Loops real programs run: two backward passes before a step where the second skips a unit
    (the first's gradients stay, as in p.grad); a backward that raises, then training on; a
    listed module called twice under bfloat16 compute; backward(create_graph=True); a part
    replaced between steps in a unit prefetch gathers early."""
    model, ref = Branchy(), Branchy()
    sharded = FullyShard(ctx, model, [model.a, model.b, model.never])
    parts = {id(p): (state.unit, i) for state in sharded.states
             for i, (_, p) in enumerate(state.params)}
    xs = [torch.randn(4, 8, generator=torch.Generator().manual_seed(900 + r))
          for r in range(world)]
    model(xs[rank], 0).backward()
    model(xs[rank], 1).backward()
    for branch in (0, 1):
        sum(ref(x, branch) for x in xs).div(world).backward()
    grads_against(model, ref, parts, "two backward passes, the second skipping unit a", 1e-6)
    model.zero_grad()
    ref.zero_grad()
    out = model(xs[rank], 0)
    out.register_hook(lambda g: (_ for _ in ()).throw(RuntimeError("a failing loss hook")))
    try:
        out.backward()
        check(False, "the failing hook raised")
    except RuntimeError:
        pass
    model.zero_grad()
    model(xs[rank], 0).backward()  # the next iteration trains as if the failed one never ran
    sum(ref(x, 0) for x in xs).div(world).backward()
    grads_against(model, ref, parts, "after a backward that raised", 1e-6)
    model.zero_grad()
    ref.zero_grad()
    model(xs[rank], 0).backward(create_graph=True)
    sum(ref(x, 0) for x in xs).div(world).backward()
    grads_against(model, ref, parts, "backward(create_graph=True)", 1e-6)
    with torch.no_grad():  # every rank replaces its part: b.weight is 3.0 in full
        model.b.weight.data = torch.full_like(model.b.weight, 3.0)
        ref.b.weight.fill_(3.0)
    got, want = model(xs[rank], 1), ref(xs[rank], 1)
    check(abs(float(got) - float(want)) <= 1e-6 * abs(float(want)),
          f"a part replaced between steps is what the next forward computes with "
          f"({float(got)} vs {float(want)})")
    drop(sharded)
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    model, ref = Twice(), Twice()
    sharded = FullyShard(ctx, model, [model.lin], mp_policy=policy)
    parts = {id(p): (state.unit, i) for state in sharded.states
             for i, (_, p) in enumerate(state.params)}
    ref_bf16 = copy.deepcopy(ref).to(torch.bfloat16)
    model(xs[rank]).backward()
    sum(ref_bf16(x.to(torch.bfloat16)) for x in xs).div(world).backward()
    grads_against(model, ref_bf16, parts, "a module called twice under bfloat16 compute", 2e-2)
    drop(sharded)


def check_unused(find_unused):
    """Rank r's loss takes branch r % 2 (find_unused) or every rank's branch 0; `never` is never
    used."""
    model, ref = Branchy(), Branchy()
    sharded = FullyShard(ctx, model, [model.a, model.b, model.never],
                         find_unused_parameters=find_unused)
    opt = ctx.optimizer("sgd", sharded.units, lr=0.1)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    branch = (lambda r: r % 2) if find_unused else (lambda r: 0)
    for step in range(3):
        xs = [torch.randn(4, 8, generator=torch.Generator().manual_seed(step * 10 + r))
              for r in range(world)]
        model(xs[rank], branch(rank)).backward()
        opt.step()
        opt.zero_grad()
        sum(ref(xs[r], branch(r)) for r in range(world)).div(world).backward()
        ref_opt.step()
        ref_opt.zero_grad()
    diff = largest_diff(sharded, ref)
    check(diff <= 1e-6, f"unused parameters (find_unused_parameters={find_unused}): parameters "
          f"match the reference (largest diff {diff:.2e})")
    drop(sharded, opt)


def check_grad_presence_agreed():
    """Whether a parameter has a gradient is agreed over the ranks: `a` and `b` share the root's
    unit and rank r's loss takes branch r % 2, so each gets a gradient on some ranks only; both
    still get p.grad on every rank and are stepped as the reference's averaged gradient says,
    while `never` (its own unit, never used) keeps p.grad None and is left alone by AdamW's decay,
    with torch.optim over model.parameters() and with the library's AdamW (which skips it through
    fsdp_grad_set_none, its update count staying 0)."""
    for lib in (False, True):
        model, ref = Branchy(), Branchy()
        sharded = FullyShard(ctx, model, [model.never])
        if lib:
            opt = ctx.optimizer("adamw", sharded.units, lr=0.05, weight_decay=0.1)
        else:
            opt = torch.optim.AdamW(model.parameters(), lr=0.05, weight_decay=0.1)
        ref_opt = torch.optim.AdamW(ref.parameters(), lr=0.05, weight_decay=0.1)
        never = {k: v for k, v in sharded.state_dict().items() if k.startswith("never.")}
        label = "libfsdp AdamW" if lib else "torch.optim.AdamW"
        for step in range(3):
            xs = [torch.randn(4, 8, generator=torch.Generator().manual_seed(500 + 10 * step + r))
                  for r in range(world)]
            model(xs[rank], rank % 2).backward()
            sum(ref(xs[r], r % 2) for r in range(world)).div(world).backward()
            for (name, p), q in zip(model.named_parameters(), ref.parameters()):
                check((p.grad is None) == (q.grad is None),
                      f"{label}: {name}.grad is None exactly where the reference's is, on every "
                      f"rank (got {p.grad is None}, reference {q.grad is None})")
            opt.step()
            opt.zero_grad()
            ref_opt.step()
            ref_opt.zero_grad()
        diff = largest_diff(sharded, ref)
        check(diff <= 1e-5, f"{label}: gradients present on some ranks only: parameters match "
              f"the reference (largest diff {diff:.2e})")
        after = sharded.state_dict()
        check(all(torch.equal(after[k], v) for k, v in never.items()),
              f"{label}: a parameter without a gradient on any rank is not stepped")
        if lib:
            unit = next(s.unit for s in sharded.states if s.module is model.never)
            check(all(opt.param_steps(unit, i) == 0 for i in range(len(unit.names))),
                  "libfsdp AdamW: a parameter never given a gradient has update count 0")
            root = next(s.unit for s in sharded.states if s.module is model)
            check(all(opt.param_steps(root, i) == 3 for i in range(len(root.names))),
                  "libfsdp AdamW: parameters given a gradient on any rank were stepped 3 times")
        drop(sharded, opt if lib else None)


def check_explicit_prefetch_released():
    """Explicit prefetch lists whose targets never run: `a`'s forward prefetches `never` (never
    called) and the root's backward prefetches it too; the all-gathers are released at the end of
    forward and of backward, so between steps nothing is unsharded beyond the root (which stays
    gathered only from forward to backward), and training matches the reference. A list naming a
    module without a unit is refused and changes nothing."""
    model, ref = Branchy(), Branchy()
    sharded = FullyShard(ctx, model, [model.a, model.b, model.never], prefetch=False)
    model.a.set_modules_to_forward_prefetch([model.never, model.b])
    sharded.set_modules_to_backward_prefetch([model.never])
    expect_error("a prefetch list naming a module without a unit",
                 lambda: model.a.set_modules_to_forward_prefetch([model.out]), "out",
                 "set_modules_to_forward_prefetch")
    expect_error("a prefetch list that is not a list",
                 lambda: sharded.set_modules_to_backward_prefetch(model.a), "modules")
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    for step in range(2):
        xs = [torch.randn(4, 8, generator=torch.Generator().manual_seed(700 + 10 * step + r))
              for r in range(world)]
        model(xs[rank], 0).backward()
        sum(ref(xs[r], 0) for r in range(world)).div(world).backward()
        opt.step()
        ref_opt.step()
        opt.zero_grad()
        ref_opt.zero_grad()
        held = ctx.memory_stats()["unsharded_bytes"]
        check(held == 0, f"explicit prefetches never used are released by the end of the step "
              f"({held} unsharded bytes held)")
    diff = largest_diff(sharded, ref)
    check(diff <= 1e-6, f"explicit prefetch lists: training matches the reference ({diff:.2e})")
    drop(sharded)


def check_frozen():
    """A frozen parameter (requires_grad=False) stays as it was; the others match the reference."""
    model, ref = Branchy(), Branchy()
    for m in (model, ref):
        m.a.weight.requires_grad_(False)
    before = model.a.weight.detach().clone()
    sharded = FullyShard(ctx, model, [model.a, model.b, model.never])
    opt = ctx.optimizer("sgd", sharded.units, lr=0.1)
    ref_opt = torch.optim.SGD([p for p in ref.parameters() if p.requires_grad], lr=0.1)
    for step in range(2):
        xs = [torch.randn(4, 8, generator=torch.Generator().manual_seed(200 + 10 * step + r))
              for r in range(world)]
        model(xs[rank], 0).backward()
        opt.step()
        opt.zero_grad()
        sum(ref(xs[r], 0) for r in range(world)).div(world).backward()
        ref_opt.step()
        ref_opt.zero_grad()
    check(torch.equal(sharded.state_dict()["a.weight"], before), "a frozen parameter is not updated")
    diff = largest_diff(sharded, ref)
    check(diff <= 1e-6, f"with a frozen parameter, the rest matches the reference ({diff:.2e})")
    drop(sharded, opt)


def check_no_sync():
    """Two micro-batches, the first under no_sync(): the step equals the reference's on the sum."""
    model, ref = Branchy(), Branchy()
    sharded = FullyShard(ctx, model, [model.a, model.b, model.never])
    opt = ctx.optimizer("sgd", sharded.units, lr=0.1)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    xs = [[torch.randn(4, 8, generator=torch.Generator().manual_seed(100 + 10 * m + r))
           for r in range(world)] for m in range(2)]
    with sharded.no_sync():
        model(xs[0][rank], 0).backward()
    model(xs[1][rank], 0).backward()
    opt.step()
    for m in range(2):
        sum(ref(xs[m][r], 0) for r in range(world)).div(world).backward()
    ref_opt.step()
    diff = largest_diff(sharded, ref)
    check(diff <= 1e-6, f"no_sync accumulation matches the reference (largest diff {diff:.2e})")
    drop(sharded, opt)


class Chunked(nn.Module):
    """Three blocks and a norm, each its own unit; the loss applies the norm to chunks of the
    output after the root's forward (a chunked loss), so the norm's unit runs again on its own."""
    def __init__(self):
        super().__init__()
        torch.manual_seed(3)
        self.blocks = nn.ModuleList(nn.Linear(8, 8) for _ in range(3))
        self.norm = nn.LayerNorm(8)

    def forward(self, x):
        for b in self.blocks:
            x = torch.tanh(b(x))
        return x

    def loss(self, x):
        h = self(x)
        return sum(self.norm(c).square().mean() for c in h.chunk(2))


def check_prefetch_hint(pattern):
    """Prefetch is a hint (issue 31): with prefetch on, a chunked loss (a unit's module called on
    its own after the full forward), a state_dict() taken between backward and the step, and an
    evaluation pass (forward under no_grad, no backward) before each step train like the
    reference, and nothing stays unsharded after the step."""
    model, ref = Chunked(), Chunked()
    sharded = FullyShard(ctx, model, list(model.blocks) + [model.norm], prefetch=True)
    opt = ctx.optimizer("sgd", sharded.units, lr=0.1)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    started = ctx.memory_stats()["prefetches_started"]
    for step in range(4):
        xs = [torch.randn(4, 8, generator=torch.Generator().manual_seed(300 + 10 * step + r))
              for r in range(world)]
        if pattern == "evaluation pass":
            with torch.no_grad():
                model.loss(xs[rank])
        model.loss(xs[rank]).backward()
        if pattern == "state dict between backward and step":
            state = sharded.state_dict()
            check(all(v.numel() > 0 for v in state.values()), f"{pattern}: a full state dict")
        opt.step()
        opt.zero_grad()
        check(ctx.memory_stats()["unsharded_bytes"] == 0,
              f"{pattern}: nothing unsharded after step {step}")
        sum(ref.loss(xs[r]) for r in range(world)).div(world).backward()
        ref_opt.step()
        ref_opt.zero_grad()
    stats = ctx.memory_stats()
    check(stats["prefetches_started"] > started and
          stats["prefetches_started"] == stats["prefetches_used"] + stats["prefetches_unused"],
          f"{pattern}: prefetch ran, and each prefetch was used or released ({stats})")
    diff = largest_diff(sharded, ref)
    check(diff <= 1e-6, f"prefetch on, {pattern}: parameters match the reference "
          f"(largest diff {diff:.2e})")
    drop(sharded, opt)


def check_low_precision_model():
    """A model whose parameters are bfloat16: float32 masters holding its values exactly, compute
    in bfloat16."""
    a = gpt_args(ckpt=False)
    model = gpt_model.model(a).to(torch.bfloat16)
    values = {k: v.float() for k, v in model.state_dict().items()}
    sharded = FullyShard(ctx, model, model.blocks)
    x, y = gpt_model.batch(a, 0, rank)
    logits = model(x)
    check(logits.dtype == torch.bfloat16, f"a bfloat16 model computes in bfloat16 "
          f"({logits.dtype})")
    gpt_model.loss_fn(logits, y).backward()
    state = sharded.state_dict()
    check(all(torch.equal(state[k], values[k]) for k in values) and
          all(v.dtype == torch.float32 for v in state.values()),
          "a bfloat16 model's masters are float32 and equal its values")
    drop(sharded)


def rss_hwm_kib():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return 0


def fix_malloc_thresholds():
    """glibc raises its mmap threshold each time a large block is freed, after which freed tensors
    stay in the heap and RSS depends on the order of allocations: fixed thresholds return every
    freed block of 128 KiB or more to the system, so the peak RSS measures what is held."""
    try:
        import ctypes
        libc = ctypes.CDLL(None)
        M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
        libc.mallopt(M_MMAP_THRESHOLD, 128 << 10)
        libc.mallopt(M_TRIM_THRESHOLD, 128 << 10)
    except (OSError, AttributeError):
        pass


def check_meta():
    layers, d = 64, 512
    names = {}

    def init(module):  # order-independent: each module from its own name
        g = torch.Generator().manual_seed(zlib.crc32(names[id(module)].encode()))
        module.weight.normal_(0.0, 0.02, generator=g)
        module.bias.uniform_(-0.1, 0.1, generator=g)

    def build(device):
        m = nn.Sequential(*[nn.Linear(d, d, device=device) for _ in range(layers)])
        names.update({id(x): n for n, x in m.named_modules()})
        return m
    fix_malloc_thresholds()
    meta = build("meta")
    unit_bytes = (d * d + d) * 4
    model_bytes = layers * unit_bytes
    # AddressSanitizer (make sanitize) keeps freed memory in quarantine: RSS then says nothing.
    sanitized = "asan" in os.environ.get("LD_PRELOAD", "")
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # resets VmHWM to the current RSS
        base = rss_hwm_kib()
        reset = not sanitized
    except OSError:
        reset = False
    if not reset:
        print(f"rank {rank}: meta build: peak RSS not checked (no VmHWM reset, or a sanitizer's "
              "allocator)", flush=True)
    sharded = FullyShard(ctx, meta, list(meta), param_init_fn=init)
    grown = (rss_hwm_kib() - base) * 1024 if reset else None
    shards = ctx.memory_stats()["shard_bytes"]
    ref = build("cpu")
    with torch.no_grad():
        for m in ref:
            init(m)
    got, want = sharded.state_dict(), ref.state_dict()
    check(all(torch.equal(got[k], want[k]) for k in want), "meta model materialized per unit "
          "equals the model initialized whole")
    if grown is not None:
        # The shards, a unit being filled and the one before it, and the allocator's and
        # PyTorch's own growth: well below the whole model, which no rank may hold.
        budget = shards + 2 * unit_bytes + (16 << 20)
        check(budget < model_bytes, "the test's budget is below the model's size")
        print(f"rank {rank}: meta build: peak RSS grew {grown / 2**20:.1f} MiB (model "
              f"{model_bytes / 2**20:.1f} MiB, this rank's shards {shards / 2**20:.1f} "
              f"MiB, one unit {unit_bytes / 2**20:.1f} MiB)", flush=True)
        check(grown <= budget, f"meta build holds no more than a unit beyond the shards "
              f"({grown} > {budget} bytes)")
    drop(sharded)


def expect_error(what, fn, *words):
    before = len(ctx.units)
    try:
        fn()
        check(False, f"{what}: refused")
    except libfsdp.Error as e:
        msg = str(e)
        check(all(w in msg for w in words), f"{what}: message {msg!r} names {words}")
    check(len(ctx.units) == before, f"{what}: no unit created")


def check_bad_input():
    a = gpt_args()
    m = gpt_model.model(a)
    before = {k: v.clone() for k, v in m.state_dict().items()}
    expect_error("siblings sharing a parameter",
                 lambda: FullyShard(ctx, m, [m.embed, *m.blocks, m.head]),
                 "embed.tok.weight", "'embed'", "'head'")
    expect_error("float64 compute over float32 parameters",
                 lambda: FullyShard(ctx, m, m.blocks,
                                    mp_policy=MixedPrecisionPolicy(param_dtype=torch.float64)),
                 "param_dtype", "float64")
    expect_error("an int8 compute dtype",
                 lambda: FullyShard(ctx, m, m.blocks,
                                    mp_policy=MixedPrecisionPolicy(param_dtype=torch.int8)),
                 "param_dtype")
    expect_error("a module listed twice", lambda: FullyShard(ctx, m, [m.blocks[0], m.blocks[0]]),
                 "submodules[1]", "listed twice")
    expect_error("a module of another model", lambda: FullyShard(ctx, m, [nn.Linear(2, 2)]),
                 "submodules[0]", "not a submodule")
    ints = nn.Linear(2, 2)
    ints.steps = nn.Parameter(torch.zeros(3, dtype=torch.int64), requires_grad=False)
    expect_error("an integer parameter", lambda: FullyShard(ctx, ints), "steps", "int64")
    meta = nn.Module()
    meta.w = nn.Parameter(torch.empty(4, device="meta"))
    expect_error("a meta parameter nothing can initialize", lambda: FullyShard(ctx, meta),
                 "\"w\"", "param_init_fn")
    expect_error("a per-module policy for a module not listed",
                 lambda: FullyShard(ctx, m, m.blocks,
                                    mp_policy={m.head: MixedPrecisionPolicy()}),
                 "mp_policy['head']", "listed submodule or the root")
    # A CUDA context (marked so on a host one where there is no GPU): refused before wrapping.
    ctx._on_device, on_device = True, ctx._on_device
    try:
        expect_error("a CUDA context", lambda: FullyShard(ctx, m, m.blocks), "FullyShard",
                     "CUDA context")
    finally:
        ctx._on_device = on_device
    expect_error("a per-module policy that is not a policy",
                 lambda: FullyShard(ctx, m, m.blocks, mp_policy={m.blocks[0]: torch.bfloat16}),
                 "mp_policy['blocks.0']", "MixedPrecisionPolicy")
    expect_error("reshard_after_forward as FSDP2's int",
                 lambda: FullyShard(ctx, m, m.blocks, reshard_after_forward=2),
                 "reshard_after_forward = 2")
    expect_error("an ignored parameter of another model",
                 lambda: FullyShard(ctx, m, m.blocks, ignored_params=[nn.Parameter(torch.ones(2))]),
                 "ignored_params[0]", "not a parameter of root")
    after = m.state_dict()
    check(all(torch.equal(before[k], after[k]) for k in before), "the model is unchanged")
    twice = Branchy()
    sharded = FullyShard(ctx, twice, [twice.a])
    expect_error("FullyShard applied twice", lambda: FullyShard(ctx, twice, [twice.b]),
                 "already applied")
    drop(sharded)


check_gpt_fp32()
check_gpt_bf16()
check_gpt_fp16()
check_unused(False)
check_unused(True)
check_grad_presence_agreed()
check_explicit_prefetch_released()
check_frozen()
check_no_sync()
check_user_contract()
check_requires_grad_after_wrap()
check_reinitialize()
check_reset_buffers()
check_root_resharding()
check_forward_method()
check_loops_users_run()
for pattern in ("chunked loss", "state dict between backward and step", "evaluation pass"):
    check_prefetch_hint(pattern)
check_low_precision_model()
check_meta()
check_bad_input()
ctx.finalize()
finish("FullyShard")
