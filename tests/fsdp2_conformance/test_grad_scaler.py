"""Behaviours of FSDP2's test_fully_shard_grad_scaler.py (conformance.py runs each against
fully_shard and FullyShard). The 2D (tensor parallel) subtests are left out.

Each side uses its own loss scaler, as a user does: torch.amp.GradScaler over torch.optim.Adam
with fully_shard, libfsdp.GradScaler over the library's optimizer (AdamW, weight_decay=0, which
is Adam) with FullyShard. A last behaviour uses torch.amp.GradScaler with both."""
import contextlib
import copy

from conformance import (
    agree, allreduce_grads, assert_close, assert_equal, batch, behaviour, nn, rank, run, torch)
import libfsdp

INF_RANK = 1  # FSDP2's test writes inf into the gradient on the rank whose device index is 1


def linears():
    torch.manual_seed(0)
    return nn.Sequential(*[nn.Linear(4, 4, bias=False) for _ in range(2)])


@contextlib.contextmanager
def optimizer_and_scaler(impl, model, handle, torch_form=False):
    """(optimizer, scaler) of the side under test, init_scale=2.0 as in FSDP2's test; torch_form:
    FSDP2's own pair (torch.optim.Adam over model.parameters(), torch.amp.GradScaler) for
    FullyShard too."""
    if impl.is_fsdp2 or torch_form:
        yield (torch.optim.Adam(model.parameters(), lr=1e-2),
               torch.amp.GradScaler("cpu", init_scale=2.0, enabled=True))
        return
    opt = impl.ctx.optimizer("adamw", handle.units, lr=1e-2, weight_decay=0.0)
    scaler = libfsdp.GradScaler(impl.ctx, init_scale=2.0)
    try:
        yield opt, scaler
    finally:
        scaler.destroy()
        opt.destroy()


def first_grad_shard(impl, opt, handle):
    """This rank's part of the first parameter's gradient (what FSDP2's test reads and writes
    through opt.param_groups[0]["params"][0].grad._local_tensor; FullyShard's p.grad is that
    part)."""
    if impl.is_fsdp2:
        return opt.param_groups[0]["params"][0].grad._local_tensor
    if isinstance(opt, torch.optim.Optimizer):
        return opt.param_groups[0]["params"][0].grad.as_subclass(torch.Tensor)
    unit = handle.units[0]
    shard_off, _, length = unit.shard_range(0)
    return torch.from_numpy(unit.shard_grad()[shard_off:shard_off + length])


def scaler_step(has_inf, impl, param_dtype=None, torch_form=False):
    """FSDP2's test: one scaled backward, inf written into rank 1's part of the first gradient
    (has_inf), unscale_, step, update. param_dtype=float16: the same under a
    MixedPrecisionPolicy (the DDP reference computes in float32; FSDP2's float16 tolerances)."""
    model = linears()
    ref = copy.deepcopy(model)
    kw = {} if param_dtype is None else {"mp_policy": impl.policy(param_dtype=param_dtype)}
    tol = {} if param_dtype is None else {"rtol": 1e-3, "atol": 1e-4}
    handle = impl.shard(model, list(model), **kw)
    x = batch(0, 4, 4)
    with optimizer_and_scaler(impl, model, handle, torch_form) as (opt, scaler):
        loss = model(x).sum()
        scaler.scale(loss).backward()
        inv_scale = 1.0 / scaler.get_scale()
        grad = first_grad_shard(impl, opt, handle)
        if has_inf and rank == INF_RANK:
            grad.view(-1)[0] = float("inf")
        initial_grad = grad.clone()

        scaler.unscale_(opt)
        if impl.is_fsdp2 or torch_form:
            found = [bool(f.item()) for f in
                     scaler._per_optimizer_states[id(opt)]["found_inf_per_device"].values()]
            agree(lambda: assert_equal(found, [has_inf] * len(found), "found_inf after unscale_"))
        unscaled = first_grad_shard(impl, opt, handle).clone()
        agree(lambda: assert_close(unscaled, initial_grad * inv_scale, "gradient after unscale_"))
        initial_scale = scaler.get_scale()
        before = impl.full_state_dict(model)

        skipped = scaler.step(opt)
        after = impl.full_state_dict(model)
        if not (impl.is_fsdp2 or torch_form):
            agree(lambda: assert_equal(skipped, has_inf, "GradScaler.step skipped"))
        if has_inf:  # parameters the same before and after
            agree(lambda: [assert_close(after[k], before[k], f"{k} after a skipped step")
                           for k in before])
        else:  # the step DDP takes with the unscaled, averaged gradients
            ref_opt = torch.optim.Adam(ref.parameters(), lr=1e-2)
            ref(x).sum().backward()
            allreduce_grads(ref)
            ref_opt.step()
            want = ref.state_dict()
            agree(lambda: [assert_close(after[k], want[k], f"{k} after the step", **tol)
                           for k in want])

        scaler.update()
        updated = scaler.get_scale()
        backoff = 0.5  # GradScaler's default backoff_factor (both scalers)
        want_scale = initial_scale * backoff if has_inf else initial_scale
        agree(lambda: assert_close(updated, want_scale, "scale after update()"))


SOURCE = "test_fully_shard_grad_scaler.py::TestFullyShardGradientScaler::test_gradient_scaler"


@behaviour("inf on one rank: every rank skips the step, scale backs off (own GradScaler)",
           SOURCE + " (has_inf=True, test_2d=False)")
def scaler_inf(impl):
    scaler_step(True, impl)


@behaviour("no inf: unscale_ divides by the scale, step equals DDP's, scale kept "
           "(own GradScaler)", SOURCE + " (has_inf=False, test_2d=False)")
def scaler_no_inf(impl):
    scaler_step(False, impl)


@behaviour("float16 compute, inf on one rank: every rank skips the step, scale backs off",
           SOURCE + " (has_inf=True, with param_dtype=float16)")
def scaler_inf_fp16(impl):
    scaler_step(True, impl, torch.float16)


@behaviour("inf on one rank: every rank skips the step, scale backs off (torch.amp.GradScaler "
           "and torch.optim.Adam over model.parameters())", SOURCE + " (has_inf=True, test_2d=False)")
def torch_scaler_inf(impl):
    scaler_step(True, impl, torch_form=True)


@behaviour("no inf: unscale_ divides by the scale, step equals DDP's, scale kept "
           "(torch.amp.GradScaler and torch.optim.Adam over model.parameters())",
           SOURCE + " (has_inf=False, test_2d=False)")
def torch_scaler_no_inf(impl):
    scaler_step(False, impl, torch_form=True)


@behaviour("float16 compute, no inf: unscale_ divides by the scale, step equals DDP's, "
           "scale kept", SOURCE + " (has_inf=False, with param_dtype=float16)")
def scaler_no_inf_fp16(impl):
    scaler_step(False, impl, torch.float16)


@behaviour("torch.amp.GradScaler + torch.optim.Adam(model.parameters()) trains like DDP",
           "test_fully_shard_grad_scaler.py::TestFullyShardGradientScaler::test_gradient_scaler"
           " (has_inf=False, PyTorch's scaler on the sharded model)")
def torch_scaler(impl):
    model = linears()
    ref = copy.deepcopy(model)
    impl.shard(model, list(model))
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    ref_opt = torch.optim.Adam(ref.parameters(), lr=1e-2)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0)
    ref_scaler = torch.amp.GradScaler("cpu", init_scale=2.0)
    for step in range(3):
        x = batch(step, 4, 4)
        losses = []
        for m, o, s in ((ref, ref_opt, ref_scaler), (model, opt, scaler)):
            o.zero_grad()
            loss = m(x).sum()
            s.scale(loss).backward()
            if m is ref:
                allreduce_grads(ref)
            error = None
            try:
                s.step(o)
            except (AssertionError, RuntimeError) as e:
                error = e
            agree(lambda: assert_equal(repr(error), repr(None), f"GradScaler.step at step {step}"))
            s.update()
            losses.append(loss.detach())
        agree(lambda: assert_close(losses[1], losses[0], f"loss at step {step}"))


if __name__ == "__main__":
    run()
