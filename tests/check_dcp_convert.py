"""libfsdp.dcp against PyTorch FSDP2 itself (test_dcp_convert.sh drives it):

  fsdp2-save DIR REF            FSDP2 on 2 ranks (gloo) trains an MLP three AdamW steps with two
                                param groups (decay on weights; a different lr and no decay on
                                biases), dcp.save()s model + optimizer to DIR, and torch.save()s
                                the full state (get_state_dict, full_state_dict) to REF
  fsdp2-load DIR REF NPROC      FSDP2 on NPROC ranks, from a different initialization and
                                learning rate, dcp.load()s DIR and set_state_dict()s it: every
                                parameter, exp_avg, exp_avg_sq, step and hyperparameter equals
                                REF bit for bit
  fsdp2-continue DIR1 DIR2      one more FSDP2 step from each (2 ranks): the results are equal bit
                                for bit, so everything a step reads came through
  libfsdp-load H5 REF           (under mpiexec) libfsdp loads H5 into units grouped otherwise than
                                the converter did: shards, optimizer state and steps equal REF's
                                slices bit for bit, the file's hyperparameters equal REF's; a
                                model with one parameter reshaped is refused naming it
  bad-shape DIR                 writes a DCP directory whose exp_avg disagrees with its
                                parameter's shape
  model-only DIR                writes a DCP directory of a model alone (float32, float64 and
                                bfloat16 tensors, no optimizer)
  sgd DIR                       writes a DCP directory of a parameter with SGD's momentum_buffer
  same-model DIR1 DIR2          the tensors of two DCP directories are equal bit for bit
                                (bfloat16 compared as the float32 libfsdp keeps)
  queries                       what the library says of its optimizer kinds (state names, the
                                hyperparameters read, defaults) against torch.optim's own
Exit 77 (skipped) without PyTorch >= 2.6."""
import os
import socket
import sys

try:
    import torch
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    import torch.multiprocessing as mp
    from torch.distributed.checkpoint.state_dict import (StateDictOptions, get_state_dict,
                                                         set_state_dict)
except ImportError as e:
    print(f"skipped: no PyTorch with torch.distributed.checkpoint ({e})")
    sys.exit(77)
if tuple(int(x) for x in torch.__version__.split(".")[:2]) < (2, 6):
    print(f"skipped: PyTorch {torch.__version__} < 2.6")
    sys.exit(77)

import numpy as np  # noqa: E402


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Linear(6, 12)
        self.blocks = torch.nn.ModuleList(torch.nn.Linear(12, 12) for _ in range(2))
        self.head = torch.nn.Linear(12, 5)

    def forward(self, x):
        x = torch.tanh(self.embed(x))
        for b in self.blocks:
            x = torch.tanh(b(x))
        return self.head(x)


def optimizer(model, lr):
    decay = [p for n, p in model.named_parameters() if not n.endswith(".bias")]
    no_decay = [p for n, p in model.named_parameters() if n.endswith(".bias")]
    return torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                              {"params": no_decay, "weight_decay": 0.0, "lr": lr * 0.5}],
                             lr=lr, betas=(0.85, 0.99), eps=1e-7)


def sharded(seed, lr):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    torch.manual_seed(seed)
    model = Net()
    for m in [model.embed, *model.blocks, model.head]:
        fully_shard(m, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model, optimizer(model, lr)


def step(model, opt, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(8, 6, generator=g)
    y = torch.randn(8, 5, generator=g)
    loss = (model(x) - y).square().mean()
    loss.backward()
    opt.step()
    opt.zero_grad()


def full_state(model, opt):
    return get_state_dict(model, opt, options=StateDictOptions(full_state_dict=True,
                                                               cpu_offload=True))


def load(model, opt, directory):
    msd, osd = get_state_dict(model, opt)
    sd = {"model": msd, "optim": osd}
    dcp.load(sd, checkpoint_id=directory)
    set_state_dict(model, opt, model_state_dict=sd["model"], optim_state_dict=sd["optim"])


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spawn(fn, nproc, *args):
    port = free_port()
    mp.spawn(_worker, args=(nproc, port, fn, args), nprocs=nproc, join=True)


def _worker(rank, world, port, fn, args):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    fn(rank, *args)
    dist.barrier()  # every rank done before teardown (gloo aborts a rank torn down mid-exchange)
    dist.destroy_process_group()


def same(a, b):
    a, b = torch.as_tensor(a).detach(), torch.as_tensor(b).detach()
    return a.shape == b.shape and a.dtype == b.dtype and torch.equal(
        a.contiguous().view(-1).view(torch.uint8), b.contiguous().view(-1).view(torch.uint8))


def compare(got, ref, where):
    """Bitwise comparison of two (model, optim) full state dicts; returns the differences."""
    bad = []
    gm, go = got
    rm, ro = ref
    for name in sorted(set(gm) | set(rm)):
        if name not in gm or name not in rm or not same(gm[name], rm[name]):
            bad.append(f"{where}: model '{name}' differs")
    for fqn in sorted(set(go["state"]) | set(ro["state"])):
        gs, rs = go["state"].get(fqn, {}), ro["state"].get(fqn, {})
        for k in sorted(set(gs) | set(rs)):
            if k not in gs or k not in rs or not same(gs[k], rs[k]):
                bad.append(f"{where}: optim state '{fqn}.{k}' differs")
    if len(go["param_groups"]) != len(ro["param_groups"]):
        bad.append(f"{where}: {len(go['param_groups'])} param groups, reference "
                   f"{len(ro['param_groups'])}")
    for g, (a, b) in enumerate(zip(go["param_groups"], ro["param_groups"])):
        for k in ("lr", "betas", "eps", "weight_decay"):
            if a[k] != b[k]:
                bad.append(f"{where}: param_groups[{g}].{k} = {a[k]}, reference {b[k]}")
        if sorted(a["params"]) != sorted(b["params"]):
            bad.append(f"{where}: param_groups[{g}].params differ")
    return bad


def _save(rank, directory, ref):
    model, opt = sharded(0, 1e-2)
    for s in range(3):
        step(model, opt, 100 + s)
    msd, osd = get_state_dict(model, opt)
    dcp.save({"model": msd, "optim": osd}, checkpoint_id=directory)
    full = full_state(model, opt)
    if rank == 0:
        torch.save(full, ref)


def _load(rank, directory, ref, result):
    model, opt = sharded(1234, 3e-4)  # other values and lr: all must come from the checkpoint
    load(model, opt, directory)
    full = full_state(model, opt)
    if rank == 0:
        bad = compare(full, torch.load(ref, weights_only=False), directory)
        with open(result, "w") as f:
            f.write("\n".join(bad))


def _continue(rank, d1, d2, result):
    states = []
    for d in (d1, d2):
        model, opt = sharded(99, 3e-4)
        load(model, opt, d)
        step(model, opt, 7)
        states.append(full_state(model, opt))
    if rank == 0:
        with open(result, "w") as f:
            f.write("\n".join(compare(states[1], states[0], "after one more step")))


def spawned_check(fn, nproc, *args):
    result = f"{args[0]}.result-{os.getpid()}"
    spawn(fn, nproc, *args, result)
    with open(result) as f:
        bad = [line for line in f.read().splitlines() if line]
    os.remove(result)
    for line in bad[:20]:
        print("FAIL", line)
    return 1 if bad else 0


def libfsdp_load(path, ref):
    import libfsdp
    rm, ro = torch.load(ref, weights_only=False)
    ctx = libfsdp.init()
    rank = ctx.group()[0]
    names = sorted(rm)
    # Units as libfsdp.pytorch would make them (one per layer), not the converter's grouping.
    layers = sorted({n.rpartition(".")[0] for n in names})
    units = [ctx.unit([(n, tuple(rm[n].shape), np.float32) for n in names
                       if n.rpartition(".")[0] == layer], name=layer) for layer in layers]
    opt = ctx.optimizer("adamw", units, lr=1.0)
    opt.add_group("*.bias", lr=1.0)
    ctx.load(path, optimizers=[opt])
    bad = []
    for unit in units:
        shard = unit.shard()
        state = {k: opt.state(unit, k) for k in ("exp_avg", "exp_avg_sq")}
        for i, name in enumerate(unit.names):
            so, po, n = unit.shard_range(i)
            want = rm[name].reshape(-1)[po:po + n].numpy()
            if not np.array_equal(shard[so:so + n].view(np.uint32), want.view(np.uint32)):
                bad.append(f"rank {rank}: parameter '{name}' differs")
            for k, buf in state.items():
                want = ro["state"][name][k].reshape(-1)[po:po + n].numpy()
                if not np.array_equal(buf[so:so + n].view(np.uint32), want.view(np.uint32)):
                    bad.append(f"rank {rank}: {k} of '{name}' differs")
            if opt.steps(unit) != int(ro["state"][name]["step"]):
                bad.append(f"rank {rank}: step of '{name}' is {opt.steps(unit)}")
    info = libfsdp.describe_checkpoint(path)
    groups = info["optimizers"][0]["groups"]
    for g, (mine, theirs) in enumerate(zip(groups, ro["param_groups"])):
        for k, v in (("lr", theirs["lr"]), ("weight_decay", theirs["weight_decay"]),
                     ("beta1", theirs["betas"][0]), ("beta2", theirs["betas"][1]),
                     ("eps", theirs["eps"])):
            if mine[k] != v:
                bad.append(f"group {g}: {k} = {mine[k]} in the file, {v} in PyTorch")
    # A model whose parameter has another shape is refused, naming it.
    opt.destroy()
    for u in units:
        u.destroy()
    other = ctx.unit([(n, (int(np.prod(rm[n].shape)),) if n == "head.weight" else
                       tuple(rm[n].shape), np.float32) for n in names], name="reshaped")
    try:
        ctx.load(path)
        bad.append("a reshaped head.weight was loaded")
    except libfsdp.Error as e:
        if e.status_name != "FSDP_ERR_MISMATCH" or "head.weight" not in str(e):
            bad.append(f"reshaped model: {e.status_name}: {e}")
    other.destroy()
    ctx.finalize()
    for line in bad[:20]:
        print("FAIL", line)
    return 1 if bad else 0


def bad_shape(directory):
    sd = {"model": {"w": torch.zeros(3, 4)},
          "optim": {"state": {"w": {"exp_avg": torch.zeros(4, 3), "exp_avg_sq": torch.zeros(3, 4),
                                    "step": torch.tensor(1.0)}},
                    "param_groups": [{"lr": 0.1, "weight_decay": 0.0, "params": ["w"]}]}}
    dcp.save(sd, checkpoint_id=directory, no_dist=True)
    return 0


def model_only(directory):
    g = torch.Generator().manual_seed(5)
    sd = {"model": {"a.weight": torch.randn(5, 3, generator=g),
                    "a.bias": torch.randn(5, generator=g, dtype=torch.float64),
                    "b": torch.randn(7, generator=g).to(torch.bfloat16)}}
    dcp.save(sd, checkpoint_id=directory, no_dist=True)
    return 0


def sgd(directory):
    g = torch.Generator().manual_seed(6)
    sd = {"model": {"w": torch.randn(6, 5, generator=g)},
          "optim": {"state": {"w": {"momentum_buffer": torch.randn(6, 5, generator=g)}},
                    "param_groups": [{"lr": 0.1, "momentum": 0.9, "dampening": 0.0,
                                      "nesterov": False, "weight_decay": 0.0, "params": ["w"]}]}}
    dcp.save(sd, checkpoint_id=directory, no_dist=True)
    return 0


def read_model(directory):
    reader = dcp.FileSystemReader(directory)
    meta = reader.read_metadata().state_dict_metadata
    sd = {k: torch.empty(tuple(m.size), dtype=m.properties.dtype) for k, m in meta.items()
          if hasattr(m, "size")}
    dcp.load(sd, storage_reader=reader, no_dist=True)
    return sd


def same_model(d1, d2):
    a, b = read_model(d1), read_model(d2)
    bad = [k for k in sorted(set(a) | set(b)) if k not in a or k not in b or not same(
        a[k].to(torch.float32) if a[k].dtype == torch.bfloat16 else a[k], b[k])]
    for k in bad:
        print("FAIL tensor", k, "differs")
    return 1 if bad else 0


def queries():
    """fsdp_optimizer_kind_info / _state_name / _hyperparam_name / fsdp_optimizer_defaults
    against torch.optim's SGD and AdamW: the state one step leaves (libfsdp's names, PyTorch's
    where libfsdp.dcp renames them, and "step" where the kind reads its count), and the defaults
    of an optimizer built without arguments."""
    from libfsdp import dcp as converter
    from libfsdp.optimizer import defaults, kind_info
    bad = []
    for kind, cls, args in (("sgd", torch.optim.SGD, {"momentum": 0.9}),
                            ("adamw", torch.optim.AdamW, {}),
                            ("adamw", torch.optim.AdamW, {"amsgrad": True})):
        p = torch.nn.Parameter(torch.ones(3))
        p.grad = torch.ones(3)
        opt = cls([p], **args)
        opt.step()
        theirs = set(opt.state[p])
        info = kind_info(kind)
        mine = (set(converter._states(kind, [args]).values()) |
                ({"step"} if info.step_count else set()))
        if mine != theirs:
            bad.append(f"{kind}: the library's state {sorted(mine)}, torch.optim's "
                       f"{sorted(theirs)}")
        group = dict(cls([torch.nn.Parameter(torch.ones(1))]).param_groups[0])
        if "betas" in group:
            group["beta1"], group["beta2"] = group["betas"]
        hp = defaults(kind)
        for field in info.hyperparams:
            if field not in group or float(getattr(hp, field)) != float(group[field]):
                bad.append(f"{kind}: default {field} = {getattr(hp, field)}, torch.optim's "
                           f"{group.get(field, 'absent')}")
    for line in bad:
        print("FAIL", line)
    return 1 if bad else 0


def main():
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "fsdp2-save":
        spawn(_save, 2, *args)
        return 0
    if cmd == "fsdp2-load":
        return spawned_check(_load, int(args[2]), args[0], args[1])
    if cmd == "fsdp2-continue":
        return spawned_check(_continue, 2, args[0], args[1])
    if cmd == "libfsdp-load":
        return libfsdp_load(*args)
    if cmd == "bad-shape":
        return bad_shape(*args)
    if cmd == "model-only":
        return model_only(*args)
    if cmd == "sgd":
        return sgd(*args)
    if cmd == "same-model":
        return same_model(*args)
    if cmd == "queries":
        return queries()
    raise SystemExit(f"unknown command {cmd}")


if __name__ == "__main__":
    sys.exit(main())
