"""Behaviours of FSDP2's test_fully_shard_state_dict.py (conformance.py runs each against
fully_shard and FullyShard). FSDP2's state dicts hold DTensors; both sides are compared here as
full tensors (conformance.Impl.full_state_dict), and full tensors are loaded (FSDP2: distributed
with each parameter's placements first)."""
import copy

from conformance import assert_close, assert_equal, behaviour, dist, FsdpMLP, mesh, nn, run, torch
from torch.distributed.tensor import DTensor, distribute_tensor



# ---- helpers of this file's own ----------------------------------------------------------------


def load_full(impl, model, full, strict=True):
    """Loads full tensors: FSDP2 distributes each with its parameter's placements (as the test's
    new_state_dict is built from the sharded one); FullyShard takes full tensors."""
    if impl.is_fsdp2:
        current = model.state_dict()
        sd = {k: (distribute_tensor(v, mesh, current[k].placements)
                  if isinstance(current[k], DTensor) else v) for k, v in full.items()}
        model.load_state_dict(sd, strict=strict)
    else:
        impl.handles[-1].load_state_dict(full, strict=strict)


def base_model(mlp_dim):
    torch.manual_seed(42)
    return nn.Sequential(FsdpMLP(mlp_dim), nn.Sequential(FsdpMLP(mlp_dim), nn.Linear(mlp_dim, mlp_dim)),
                         FsdpMLP(mlp_dim))


# ---- behaviours ---------------------------------------------------------------------------
@behaviour("state_dict(): the names and full values of the unsharded model, uneven sizes",
           "test_fully_shard_state_dict.py::TestFullyShardStateDictMultiProcess::"
           "test_dp_state_dict_save_load (keys; values as in test_2d_state_dict_correctness)")
def state_dict_values(impl):
    for mlp_dim in (2, 3, 5):
        model = base_model(mlp_dim)
        ref = copy.deepcopy(model)
        impl.shard(model, list(model))
        got, want = impl.full_state_dict(model), ref.state_dict()
        assert_equal(sorted(got), sorted(want), f"state_dict keys (mlp_dim={mlp_dim})")
        for k, v in want.items():
            assert_close(got[k], v, f"{k} (mlp_dim={mlp_dim})")


@behaviour("load_state_dict writes new values; an earlier state_dict is not changed by it",
           "test_fully_shard_state_dict.py::TestFullyShardStateDictMultiProcess::"
           "_test_state_dict_save_load (fill, state_dict, load filled copies)")
def state_dict_save_load(impl):
    for mlp_dim in (2, 3, 5):
        model = base_model(mlp_dim)
        impl.shard(model, list(model))
        names = [n for n, _ in base_model(mlp_dim).named_parameters()]
        # Fill every parameter with 1: in place in FSDP2 (the sharded parameters are DTensors);
        # FullyShard's parameters hold no values between uses, so through load_state_dict.
        if impl.is_fsdp2:
            with torch.no_grad():
                for p in model.parameters():
                    p.fill_(1)
        else:
            load_full(impl, model, {k: torch.ones_like(v)
                                    for k, v in impl.full_state_dict(model).items()})
        sd = impl.full_state_dict(model)
        assert_equal(sorted(sd), sorted(names), "state_dict keys")
        for k, v in sd.items():
            assert_close(v, torch.ones_like(v), f"{k} after the fill")
        new = {k: v.detach().clone().fill_(42) for k, v in sd.items()}
        for k, v in impl.full_state_dict(model).items():
            assert_close(v, torch.ones_like(v), f"{k} before load_state_dict")
        load_full(impl, model, new)
        for k, v in impl.full_state_dict(model).items():
            assert_close(v, torch.full_like(v, 42.0), f"{k} after load_state_dict")
        for k, v in sd.items():
            assert_close(v, torch.ones_like(v), f"{k} of the earlier state_dict")


@behaviour("reshard_after_forward=False: state_dict after a forward equals the one before",
           "test_fully_shard_state_dict.py::TestFullyShardStateDictMultiProcess::"
           "test_dp_state_dict_save_load (model2)")
def state_dict_after_forward(impl):
    mlp_dim = 4
    model = base_model(mlp_dim)
    impl.shard(model, list(model), reshard_after_forward=False)
    before = impl.full_state_dict(model)
    torch.manual_seed(7)
    model(torch.randn((2, mlp_dim)))  # parameters are not resharded after this forward
    after = impl.full_state_dict(model)
    assert_equal(sorted(after), sorted(before), "state_dict keys")
    for k, v in before.items():
        assert_close(after[k], v, k)


@behaviour("full state dict on rank 0 equals the reference, keys in the same order",
           "test_fully_shard_state_dict.py::TestFullyShardStateDictMultiThread::"
           "test_rank0_offload_full_state_dict")
def rank0_full_state_dict(impl):
    torch.manual_seed(42)
    ref = nn.Sequential(*[FsdpMLP(8) for _ in range(3)])
    for p in ref.parameters():
        dist.broadcast(p.detach(), src=0)
    model = copy.deepcopy(ref)
    impl.shard(model, list(model))
    full = impl.full_state_dict(model)
    if dist.get_rank() != 0:
        full = {}
    want = ref.state_dict()
    if dist.get_rank() == 0:
        assert_equal(len(full), len(want), "number of entries")
    else:
        assert_equal(0, 0, "number of entries")
    assert_equal(list(full) if dist.get_rank() == 0 else list(want), list(want), "keys in order")
    for k, v in want.items():
        got = full.get(k, v)
        assert_equal(got.device, torch.device("cpu"), f"{k} device")
        assert_close(got, v, k)


@behaviour("a state_dict taken before training follows the parameters (FSDP2: views of the "
           "shards), AdamW steps (libfsdp's AdamW for FullyShard)",
           "test_fully_shard_state_dict.py::TestFullyShardStateDictMultiProcess::"
           "test_cached_state_dict (mutate_after_state_dict=False)",
           known="deliberate: state_dict() returns full-shape copies (FSDP1's full state dict), "
                 "not DTensor views of the shards; take it again after training")
def cached_state_dict(impl):
    for mlp_dim in (2, 3, 5):
        torch.manual_seed(42)
        model = nn.Linear(mlp_dim, mlp_dim, bias=False)
        sharded = impl.shard(model, [], reshard_after_forward=True)
        if impl.is_fsdp2:
            opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
            sd = model.state_dict()
        else:
            opt = impl.ctx.optimizer("adamw", sharded.units, lr=1e-2)
            sd = sharded.state_dict()
        torch.manual_seed(42 + dist.get_rank())
        inp = torch.rand(mlp_dim, mlp_dim)
        for _ in range(5):
            opt.zero_grad()
            model(inp).sum().backward()
            opt.step()
        now = impl.full_state_dict(model)["weight"]
        cached = sd["weight"].full_tensor() if impl.is_fsdp2 else sd["weight"]
        assert_close(cached, now, f"the cached state_dict's weight after 5 steps (mlp_dim={mlp_dim})")


@behaviour("meta-device model loaded piece by piece (strict=False), then forward and a CPU "
           "state_dict with the loaded values",
           "test_fully_shard_state_dict.py::TestFullyShardStateDictMultiProcess::"
           "test_dp_state_dict_cpu_offload (cpu_state_dict=True, no offload policy)")
def meta_load_pieces(impl):
    mlp_dim = 4
    with torch.device("meta"):
        model = nn.Sequential(nn.Linear(mlp_dim, mlp_dim, bias=False),
                              nn.Linear(mlp_dim, mlp_dim, bias=False))
    g = torch.Generator().manual_seed(42)  # the same full values on every rank
    full = {n: torch.randn(p.shape, generator=g) for n, p in model.named_parameters()}
    impl.shard(model, list(model))
    for name, value in full.items():
        if impl.is_fsdp2:
            dtensor = dict(model.named_parameters())[name]
            piece = distribute_tensor(value, dtensor.device_mesh, dtensor.placements)
            model.load_state_dict({name: piece}, assign=True, strict=False)
        else:
            impl.handles[-1].load_state_dict({name: value}, strict=False)
    torch.manual_seed(1 + dist.get_rank())
    model(torch.rand((mlp_dim, mlp_dim))).sum()
    if impl.is_fsdp2:
        for name, t in model.state_dict().items():
            assert_equal(t.device.type, "cpu", f"{name} device")
    got = impl.full_state_dict(model)
    for name, value in full.items():
        assert_equal(got[name].device.type, "cpu", f"{name} device")
        assert_close(got[name], value, name)


if __name__ == "__main__":
    run()
