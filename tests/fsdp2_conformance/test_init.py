"""Behaviours of FSDP2's test_fully_shard_init.py (conformance.py runs each against fully_shard and
FullyShard). Where FSDP2 inspects its DTensor parameters, the port compares full tensors
(conformance.Impl.full_state_dict) with the unsharded model's."""
import copy
import itertools

from conformance import (
    agree, allreduce_grads, assert_close, assert_equal, behaviour, dist, FsdpMLP,
    full_grads, mesh, nn, run, torch)
from torch.distributed.fsdp import fully_shard  # FSDP2's internals: fully_shard.state
from torch.distributed.tensor import distribute_tensor




def shard_meta(impl, model, modules, **kw):
    """FSDP2: fully_shard under the meta device, to_empty, then reset_parameters() of every
    module (the test's _test_to_empty_and_reset_parameters). FullyShard: materializes each unit
    itself at construction, through reset_parameters() (its param_init_fn default)."""
    if impl.is_fsdp2:
        impl.shard(model, modules, **kw)
        model.to_empty(device="cpu")
        for t in itertools.chain(model.parameters(), model.buffers()):
            t.detach().fill_(1337)
        for m in model.modules():
            if hasattr(m, "reset_parameters"):
                m.reset_parameters()
        return model
    return impl.shard(model, modules, **kw)


# ---- behaviours ---------------------------------------------------------------------------
@behaviour("meta-device init: to_empty + reset_parameters give values (parameters and buffers), "
           "then one step (torch.optim.Adam)",
           "test_fully_shard_init.py::TestFullyShardMetaDeviceInit::test_meta_device_1d_init")
def meta_device_1d_init(impl):
    for mlp_dim in (8, 3, 1):
        for mp in (impl.policy(), impl.policy(param_dtype=torch.bfloat16,
                                              reduce_dtype=torch.float32)):
            with torch.device("meta"):
                model = nn.Sequential(FsdpMLP(mlp_dim, dim_multiplier=1, with_buffer=True, bias=False),
                                      FsdpMLP(mlp_dim, dim_multiplier=1, bias=False))
            assert_equal({p.device.type for p in model.parameters()}, {"meta"}, "devices before")
            shard_meta(impl, model, [model[0], model[1]], mp_policy=mp)
            sd = impl.full_state_dict(model)
            for name, t in sd.items():
                assert_equal(t.device.type, "cpu", f"{name} device (mlp_dim={mlp_dim})")
                agree(lambda t=t, name=name: torch.testing.assert_close(
                    (t == 1337).all(), torch.tensor(False),
                    msg=lambda m: f"{name} still holds the fill value"), name)
            opt = torch.optim.Adam(model.parameters(), lr=1e-2)
            torch.manual_seed(dist.get_rank())
            model(torch.randn((4, mlp_dim))).sum().backward()
            opt.step()


def _meta_parity(impl, with_buffer, library):
    with torch.device("meta"):
        model = nn.Sequential(FsdpMLP(8, with_buffer=with_buffer), FsdpMLP(8))
    sharded = shard_meta(impl, model, [model[0], model[1]])
    ref = nn.Sequential(FsdpMLP(8, with_buffer=with_buffer), FsdpMLP(8))
    ref.load_state_dict(impl.full_state_dict(model))  # the sharded model's initial values
    ref_opt = torch.optim.Adam(ref.parameters(), lr=1e-2)
    if library and not impl.is_fsdp2:
        opt = impl.ctx.optimizer("adamw", sharded.units, lr=1e-2, weight_decay=0.0)
    else:
        opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    for step in range(5):
        torch.manual_seed(100 * step + dist.get_rank())
        x = torch.randn((4, 8))
        opt.zero_grad()
        ref_opt.zero_grad()
        loss = model(x).sum()
        loss.backward()
        opt.step()
        ref_loss = ref(x).sum()
        ref_loss.backward()
        allreduce_grads(ref)
        ref_opt.step()
        assert_close(loss, ref_loss, f"loss at step {step}")
        got = impl.full_state_dict(model)
        for name, v in ref.state_dict().items():
            assert_close(got[name], v, f"{name} after step {step}")


@behaviour("meta-device init, then training parity with DDP (libfsdp's AdamW for FullyShard)",
           "test_fully_shard_init.py::TestFullyShardMetaDeviceInit::test_meta_device_1d_init "
           "(training continued against a reference)")
def meta_parity(impl):
    _meta_parity(impl, with_buffer=False, library=True)


@behaviour("meta-device init with a buffer, then training parity with DDP (libfsdp's AdamW for "
           "FullyShard)",
           "test_fully_shard_init.py::TestFullyShardMetaDeviceInit::test_meta_device_1d_init "
           "(with_buffer=True, training continued against a reference)")
def meta_parity_buffer(impl):
    _meta_parity(impl, with_buffer=True, library=True)


@behaviour("meta-device init, then training parity with DDP (torch.optim.Adam)",
           "test_fully_shard_init.py::TestFullyShardMetaDeviceInit::test_meta_device_1d_init "
           "(training continued against a reference, Adam over model.parameters())")
def meta_parity_torch_optim(impl):
    _meta_parity(impl, with_buffer=False, library=False)


@behaviour("a meta-device model never materialized is refused",
           "test_fully_shard_init.py::TestFullyShardMetaDeviceInit::test_invalid_meta_device_init",
           known="deliberate: FullyShard materializes meta parameters and buffers itself at "
                 "construction (reset_parameters, or param_init_fn), one unit at a time, so "
                 "nothing is left on the meta device to refuse")
def invalid_meta_device_init(impl):
    with torch.device("meta"):
        model = nn.Sequential(FsdpMLP(8, with_buffer=True), FsdpMLP(8))
    raised = None
    try:
        impl.shard(model, [model[0], model[1]])  # no to_empty, no reset_parameters
        model(torch.randn((4, 8)))
    except Exception as e:  # noqa: BLE001
        raised = e
    assert_equal(raised is not None, True, "an error for parameters left on the meta device")
    assert_equal("0.in_proj.weight" in str(raised), True,
          f"the error names a parameter left on the meta device: {raised}")


@behaviour("list(model.parameters()) keeps its count, full sizes and numel sum after sharding "
           "(uneven sizes)",
           "test_fully_shard_init.py::TestFullyShardShardedParameterTensor::"
           "test_shard_tensor_parameters (sizes)",
           known="deliberate (no torch.distributed needed): between uses a parameter is this rank's "
                 "flat part of its shard (FSDP1's "
                 "use_orig_params), not a DTensor of the full shape: numel() counts this rank's "
                 "elements (FullyShard.numel() gives the full count)")
def sharded_parameter_sizes(impl):
    model = nn.Sequential(*[FsdpMLP(3, dim_multiplier=3) for _ in range(3)])
    orig = [p.detach().clone() for p in model.parameters()]
    impl.shard(model)
    params = list(model.parameters())
    assert_equal(len(params), len(orig), "number of parameters")
    assert_equal(sum(p.numel() for p in params), sum(p.numel() for p in orig), "sum of numel")
    assert_equal([tuple(p.size()) for p in params], [tuple(p.size()) for p in orig], "sizes")


@behaviour("sharding keeps the values: full state dict equals the original, shared in_proj too",
           "test_fully_shard_init.py::TestFullyShardShardedParameterTensor::"
           "test_shard_tensor_parameters (values, as full tensors)")
def sharded_parameter_values(impl):
    for shared in (False, True):
        torch.manual_seed(0)
        model = nn.Sequential(*[FsdpMLP(3, dim_multiplier=3) for _ in range(3)])
        if shared:
            model[0].in_proj = model[1].in_proj
        want = {k: v.clone() for k, v in model.state_dict().items()}
        impl.shard(model)
        got = impl.full_state_dict(model)
        assert_equal(sorted(got), sorted(want), f"state_dict keys (shared={shared})")
        for k, v in want.items():
            assert_close(got[k], v, f"{k} (shared={shared})")


@behaviour("module and parameter names unchanged; each unit holds the parameters FSDP2's group "
           "does",
           "test_fully_shard_init.py::TestFullyShardLazyInit::"
           "test_fully_shard_module_and_param_fqns")
def module_and_param_fqns(impl):
    model = nn.Sequential(FsdpMLP(8), FsdpMLP(8))
    modules = [n for n, _ in model.named_modules()]
    params = [n for n, _ in model.named_parameters()]
    fqn = {id(p): n for n, p in model.named_parameters()}
    where = {id(m): n for n, m in model.named_modules()}
    if impl.name == "fully_shard":  # the drop-in: its units' sharded parameters
        impl.fully_shard(model[0].in_proj, mesh=mesh)
        impl.fully_shard(model[0].out_proj, mesh=mesh)
        impl.fully_shard(model, mesh=mesh)
        fqn = {id(p): n for n, p in model.named_parameters()}
        groups = {where[id(s.module)]: sorted(fqn[id(p)] for p in s.sharded_params())
                  for s in model._libfsdp_group.states}
    elif impl.is_fsdp2:
        impl.fully_shard(model[0].in_proj, mesh=mesh)
        impl.fully_shard(model[0].out_proj, mesh=mesh)
        impl.fully_shard(model, mesh=mesh)  # the root gets model[1]
        state = fully_shard.state(model)
        state._lazy_init()
        groups = {}
        for m in (model, model[0].in_proj, model[0].out_proj):
            group = fully_shard.state(m)._fsdp_param_group
            groups[group._module_fqn] = sorted(p._param_fqn for p in group.fsdp_params)
    else:
        handle = impl.shard(model, [model[0].in_proj, model[0].out_proj])
        groups = {where[id(s.module)]: sorted(fqn[id(p)] for _, p in s.params)
                  for s in handle.states}
    assert_equal([n for n, _ in model.named_modules()], modules, "module names")
    assert_equal([n for n, _ in model.named_parameters()], params, "parameter names")
    assert_equal(groups, {"": ["1.in_proj.bias", "1.in_proj.weight", "1.out_proj.bias",
                        "1.out_proj.weight"],
                   "0.in_proj": ["0.in_proj.bias", "0.in_proj.weight"],
                   "0.out_proj": ["0.out_proj.bias", "0.out_proj.weight"]},
          "parameters of each unit")


@behaviour("shared parameters and buffers across modules: counted once, forward/backward "
           "parity with DDP",
           "test_fully_shard_init.py::TestFullyShardManagedModulesAndStates::"
           "test_managed_states_shared_params_and_buffers (then one forward/backward)")
def shared_params_and_buffers(impl):
    torch.manual_seed(0)
    model = nn.Sequential(*[FsdpMLP(8, with_buffer=True) for _ in range(3)])
    model[0].in_proj.weight = model[1].in_proj.weight
    model[2].in_proj.weight = model[1].in_proj.weight
    model[1].buffer = model[2].buffer
    ref = copy.deepcopy(model)
    impl.shard(model)
    assert_equal(len(list(model.parameters())), len(list(ref.parameters())),
          "parameters counted once")
    assert_equal(len(list(model.buffers())), len(list(ref.buffers())), "buffers counted once")
    torch.manual_seed(1 + dist.get_rank())
    x = torch.randn((4, 8))
    loss = model(x).sum()
    loss.backward()
    ref_loss = ref(x).sum()
    ref_loss.backward()
    allreduce_grads(ref)
    assert_close(loss, ref_loss, "loss")
    grads = full_grads(impl, model)
    for n, p in ref.named_parameters():
        assert_close(grads.get(n), p.grad, f"gradient of {n}")


@behaviour("meta-device model loaded from rank 0's full state dict: forward/backward parity",
           "test_fully_shard_init.py::TestFullyShardMetaDeviceInit::"
           "test_rank0_broadcast_meta_device_init")
def rank0_broadcast_meta_init(impl):
    if dist.get_rank() == 0:
        torch.manual_seed(42)
        full_sd = nn.Sequential(FsdpMLP(8), FsdpMLP(8)).state_dict()
    with torch.device("meta"):
        model = nn.Sequential(FsdpMLP(8), FsdpMLP(8))
    if impl.is_fsdp2:
        impl.shard(model, list(model))
        sharded_sd = {}
        for name, meta in model.state_dict().items():
            full = (full_sd[name].detach().clone() if dist.get_rank() == 0
                    else torch.empty(meta.size(), dtype=meta.dtype))
            dist.broadcast(full, src=0)
            sharded_sd[name] = nn.Parameter(distribute_tensor(full, meta.device_mesh,
                                                              meta.placements))
        model.load_state_dict(sharded_sd, assign=True)
    else:
        handle = impl.shard(model, list(model))
        handle.load_state_dict(full_sd if dist.get_rank() == 0 else {}, from_rank0=True)
    ref = nn.Sequential(FsdpMLP(8), FsdpMLP(8))
    for p in ref.parameters():
        dist.broadcast(p.detach(), src=0)
    if dist.get_rank() == 0:
        ref.load_state_dict(full_sd)
    for p in ref.parameters():
        dist.broadcast(p.detach(), src=0)
    got = impl.full_state_dict(model)
    for n, v in ref.state_dict().items():
        assert_close(got[n], v, n)
    torch.manual_seed(1 + dist.get_rank())
    x = torch.randn((2, 8))
    loss = model(x).sum()
    loss.backward()
    ref_loss = ref(x).sum()
    ref_loss.backward()
    allreduce_grads(ref)
    assert_close(loss, ref_loss, "loss")
    grads = full_grads(impl, model)
    for n, p in ref.named_parameters():
        assert_close(grads.get(n), p.grad, f"gradient of {n}")


if __name__ == "__main__":
    run()
