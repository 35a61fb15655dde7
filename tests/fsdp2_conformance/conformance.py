"""The FSDP2 conformance harness: behaviours that PyTorch's own FSDP2 tests assert
(test/distributed/_composable/fsdp/test_fully_shard_*.py in the PyTorch repository), ported to the
CPU, each run three times under mpiexec -n 2: against PyTorch's fully_shard on gloo (the control,
which must pass, or the port is wrong), against libfsdp.pytorch.fully_shard (the drop-in: the same
calls as the control, FSDP2's code path of every behaviour) and against libfsdp.pytorch.FullyShard.

A behaviour is a function of an Impl, registered with @behaviour(name, source, known=reason,
dropin_known=reason): `known` marks a difference FullyShard has, `dropin_known` one the drop-in
has, with its reason; such a behaviour must still fail there (strict: one that starts passing
fails the run until its mark is removed), and the control must pass. Every rank agrees on each outcome (gloo all-reduce), so a
failure on one rank is a failure everywhere. Exit 77 (skipped) without PyTorch >= 2.6.

Usage: mpiexec -n 2 python test_<file>.py   (each test file imports this module, registers its
behaviours and calls run())."""
import contextlib
import inspect
import json
import os
import sys
import tempfile
import traceback

import numpy as np

# tests/ (pychecks) beside this folder: each test file runs as `python <this folder>/test_*.py`.
sys.path.insert(1, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from pychecks import require_torch  # noqa: E402

torch = require_torch((2, 6))
import torch.distributed as dist  # noqa: E402
import torch.nn as nn  # noqa: E402
from torch.distributed.device_mesh import init_device_mesh  # noqa: E402
from torch.distributed.fsdp import MixedPrecisionPolicy as TorchPolicy  # noqa: E402
from torch.distributed.fsdp import fully_shard  # noqa: E402

import libfsdp  # noqa: E402
from libfsdp.pytorch import FullyShard  # noqa: E402
from libfsdp.pytorch import fully_shard as lib_fully_shard  # noqa: E402
from libfsdp.pytorch import units as lib_units  # noqa: E402
from libfsdp.pytorch import MixedPrecisionPolicy as LibPolicy  # noqa: E402

torch.set_num_threads(1)
_first = libfsdp.init()
rank, world = _first.group()
# gloo beside MPI, meeting through a file (a free TCP port found first could be taken by a test
# running beside this one before gloo binds it): rank 0 draws its name and broadcasts it through
# the library.
_token = _first.broadcast(np.array([int.from_bytes(os.urandom(7), "little") if rank == 0 else 0],
                                   np.int64))[0]
_store = os.path.join(tempfile.gettempdir(), f"libfsdp-conformance-{int(_token):x}")
dist.init_process_group("gloo", init_method=f"file://{_store}", rank=rank, world_size=world)
mesh = init_device_mesh("cpu", (world,))

_behaviours = []


def behaviour(name, source, known=None, dropin_known=None):
    """Registers fn(impl) as a behaviour: `source` names the FSDP2 test it comes from; `known`
    (a reason) marks a difference FullyShard has today, `dropin_known` one the drop-in has."""
    def register(fn):
        _behaviours.append((name, source, {"libfsdp": known, "fully_shard": dropin_known}, fn))
        return fn
    return register


class Impl:
    """What a behaviour may ask of the implementation under test."""

    def __init__(self, name):
        self.name = name
        self.ctx = None
        self.handles = []
        self.models = []  # the drop-in's sharded models (their units are destroyed at close)

    @property
    def is_fsdp2(self):
        """FSDP2's API: PyTorch's fully_shard or libfsdp's drop-in."""
        return self.name in ("fsdp2", "fully_shard")

    @property
    def fully_shard(self):
        """PyTorch's fully_shard (the control) or libfsdp's; records the drop-in's models."""
        if self.name == "fsdp2":
            return fully_shard

        def shard(module, **kw):
            out = lib_fully_shard(module, **kw)
            self.models.append(out)
            return out
        return shard

    def policy(self, param_dtype=None, reduce_dtype=None, output_dtype=None,
               cast_forward_inputs=True):
        cls = TorchPolicy if self.is_fsdp2 else LibPolicy
        return cls(param_dtype=param_dtype, reduce_dtype=reduce_dtype, output_dtype=output_dtype,
                   cast_forward_inputs=cast_forward_inputs)

    def shard(self, model, modules=(), **kw):
        """fully_shard on each module, then on the root (FSDP2's wrapping), or FullyShard over the
        same modules. Keyword arguments are fully_shard's (mp_policy, reshard_after_forward...)."""
        if self.is_fsdp2:
            for m in modules:
                self.fully_shard(m, mesh=mesh, **kw)
            self.fully_shard(model, mesh=mesh, **kw)
            return model
        if self.ctx is None:
            self.ctx = libfsdp.init(timeout_s=120.0)
        handle = FullyShard(self.ctx, model, list(modules), **kw)
        self.handles.append(handle)
        return handle

    def full_state_dict(self, model):
        """Every parameter and buffer at full size, on every rank."""
        if self.is_fsdp2:
            return {k: (v.full_tensor() if hasattr(v, "full_tensor") else v).detach().clone()
                    for k, v in model.state_dict().items()}
        return {k: v.detach().clone() for k, v in self.handles[-1].state_dict().items()}

    def close(self):
        destroyed = set()
        for m in self.models:
            with contextlib.suppress(Exception):
                for unit in lib_units(m):
                    if id(unit) not in destroyed:
                        destroyed.add(id(unit))
                        unit.destroy()
        for h in self.handles:
            for unit in h.units:
                with contextlib.suppress(Exception):
                    unit.destroy()
        if self.ctx is not None:
            with contextlib.suppress(Exception):
                self.ctx.finalize()


# ---- References, computed without sharding --------------------------------------------------
def allreduce_grads(model):
    """DDP's gradient: each rank's local gradient averaged over the ranks (gloo)."""
    for p in model.parameters():
        if p.grad is not None:
            dist.all_reduce(p.grad)
            p.grad.div_(world)


def batch(seed, *shape, dtype=torch.float32):
    """This rank's input for step `seed`: different on every rank, the same on every run."""
    g = torch.Generator().manual_seed(1000 * seed + rank)
    return torch.randn(*shape, generator=g, dtype=dtype)


def agree(check, what="a check"):
    """Runs check() on every rank and raises on every rank if it failed on any: a value that
    differs on one rank only (a local loss, this rank's gradient shard) must not leave the other
    rank waiting in a collective (a hang)."""
    error = None
    try:
        check()
    except Exception as e:  # noqa: BLE001 -- whatever failed, every rank learns it
        error = e
    flag = torch.tensor([0 if error is None else 1])
    dist.all_reduce(flag)
    if error is not None:
        raise error
    if flag.item():
        raise AssertionError(f"{what}: failed on another rank")


def assert_close(got, want, what, **tol):
    """FSDP2's assertEqual: torch.testing's tolerances for the dtype (rtol 1.3e-6, atol 1e-5 for
    float32) unless given, dtypes alike; agreed over the ranks."""
    agree(lambda: torch.testing.assert_close(got, want, msg=lambda m: f"{what}: {m}", **tol), what)


def assert_equal(got, want, what):
    """got == want (any values), agreed over the ranks."""
    def check():
        assert got == want, f"{what}: {got!r}, expected {want!r}"
    agree(check, what)


class FsdpMLP(nn.Module):
    """torch.testing._internal.common_fsdp.MLP, the model of many FSDP2 tests."""

    def __init__(self, dim, dim_multiplier=4, with_buffer=False, bias=True):
        super().__init__()
        self.in_proj = nn.Linear(dim, dim_multiplier * dim, bias=bias)
        self.out_proj = nn.Linear(dim_multiplier * dim, dim, bias=bias)
        if with_buffer:
            self.register_buffer("buffer", torch.randn((dim,)))
        else:
            self.buffer = None

    def forward(self, x):
        z = torch.nn.functional.relu(self.in_proj(x))
        z = torch.nn.functional.relu(self.out_proj(z))
        if self.buffer is not None:
            z = z + self.buffer
        return z

    def reset_parameters(self):
        if self.buffer is not None:
            torch.nn.init.normal_(self.buffer)


class CheckpointedBlock(nn.Module):
    """A transformer block's shape: norm, an attention stand-in and a feed-forward, residual,
    under torch.utils.checkpoint (FSDP2's checkpoint_impl "utils")."""

    def __init__(self, dim):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.attention = nn.Linear(dim, dim)
        self.feed_forward = FsdpMLP(dim, dim_multiplier=2)

    def forward(self, x):
        from torch.utils.checkpoint import checkpoint
        return checkpoint(self._forward, x, use_reentrant=False)

    def _forward(self, x):
        h = x + self.attention(self.norm(x))
        return h + self.feed_forward(h)


class CheckpointedStack(nn.Module):
    """An embedding, n_layers CheckpointedBlocks and an output Linear: a transformer's shape."""

    def __init__(self, dim, vocab, n_layers=3):
        super().__init__()
        self.tok = nn.Embedding(vocab, dim)
        self.layers = nn.ModuleList(CheckpointedBlock(dim) for _ in range(n_layers))
        self.out = nn.Linear(dim, vocab)

    def forward(self, ids):
        h = self.tok(ids)
        for layer in self.layers:
            h = layer(h)
        return self.out(h)


def full_grads(impl, model):
    """{name: full float32 gradient} of every trainable parameter (FSDP2: the DTensor gradient's
    full tensor; FullyShard: each rank's part of the gradient shard, summed over ranks)."""
    if impl.is_fsdp2:
        return {n: p.grad.full_tensor() for n, p in model.named_parameters()
                if p.grad is not None}
    names = {id(p): n for n, p in model.named_parameters()}
    out = {}

    def local_parts():  # every rank's part first, then the sums (all ranks in the same order)
        for state in impl.handles[-1].states:
            grad = state.unit.shard_grad()
            for i, (_, p) in enumerate(state.params):
                if not p.requires_grad:
                    continue
                shape = tuple(state.unit.shapes[i])
                shard_off, param_off, length = state.unit.shard_range(i)
                full = torch.zeros(shape, dtype=torch.float32).reshape(-1)
                full[param_off:param_off + length] = torch.from_numpy(
                    grad[shard_off:shard_off + length].copy()).float()
                out[names[id(p)]] = full.view(shape)
    agree(local_parts, "reading the gradient shards")
    for v in out.values():
        dist.all_reduce(v)
    return out


# ---- Optimizers: torch.optim over model.parameters(), as FSDP2's tests, or libfsdp's ----------
LIB_OPTIM = "libfsdp optimizer: ctx.optimizer over handle.units for FullyShard"


def make_optim(impl, model, sharded, lib=False, lr=1e-2):
    """FSDP2's torch.optim.Adam over model.parameters(); with lib, FullyShard gets what its user
    writes instead: the library's AdamW without weight decay (Adam's update) over its units."""
    if lib and not impl.is_fsdp2:
        return impl.ctx.optimizer("adamw", sharded.units, lr=lr, weight_decay=0.0)
    return torch.optim.Adam(model.parameters(), lr=lr)


def both_optimizers(name, source, lib_known=None):
    """Registers fn(impl, lib) twice: with torch.optim.Adam over model.parameters(), as FSDP2's test
    does (between uses FullyShard's parameters are their parts of the shards, and p.grad the
    matching parts of the gradient shards), and with what a FullyShard user
    writes instead (LIB_OPTIM; `lib_known`: its own known difference, if any)."""
    def register(fn):
        behaviour(f"{name}, Adam over model.parameters()", source,
                  )(lambda impl: fn(impl, lib=False))
        behaviour(f"{name}, {LIB_OPTIM}", source, known=lib_known)(lambda impl: fn(impl, lib=True))
        return fn
    return register


def zero_grad(opt, set_to_none=True):
    opt.zero_grad(set_to_none=set_to_none)  # torch.optim's and libfsdp's take the same argument


def parity_step(ref, ref_opt, model, opt, loss, set_to_none=True):
    """One step of the reference (gradients averaged over ranks, as DDP) and of the model under
    test: zero_grad, loss(module).backward(), step. Returns [reference loss, tested loss]."""
    losses = []
    for m, o in ((ref, ref_opt), (model, opt)):
        zero_grad(o, set_to_none)
        losses.append(loss(m))
        losses[-1].backward()
        if m is ref:
            allreduce_grads(ref)
        o.step()
    return losses


def destroy(opt):
    """Frees a libfsdp optimizer (before its units go); nothing for a torch.optim one."""
    if opt is not None and not isinstance(opt, torch.optim.Optimizer):
        opt.destroy()


def check_sharded_parity(impl, model, ref, what, grads=True):
    """FSDP2's helper of that name: full parameters equal the reference's; with grads, this rank's
    gradient shard equals the same slice of the reference's (averaged) gradient, and a parameter
    the reference gives no gradient has none."""
    got = impl.full_state_dict(model)
    for name, want in ref.state_dict().items():
        assert_close(got[name], want, f"{what}: parameter {name}")
    if not grads:
        return
    ref_params = dict(ref.named_parameters())
    if impl.is_fsdp2:
        for name, p in model.named_parameters():
            want = ref_params[name].grad
            assert_equal(p.grad is None, want is None, f"{what}: {name} has a gradient")
            if want is not None:
                assert_close(p.grad.full_tensor(), want, f"{what}: gradient of {name}")
        return
    checked = 0
    for unit in impl.handles[-1].units:
        if not any(unit.requires_grad):  # a frozen unit has no gradient shard
            continue
        shard = torch.from_numpy(unit.shard_grad().copy())
        for i, name in enumerate(unit.names):
            want = ref_params[name].grad
            if want is None or not unit.requires_grad[i]:
                continue
            so, po, n = unit.shard_range(i)
            assert_close(shard[so:so + n], want.reshape(-1)[po:po + n],
                         f"{what}: gradient shard of {name}")
            checked += n
    assert_equal(bool(checked) or all(p.grad is None for p in ref.parameters()), True,
                 f"{what}: a gradient shard to compare")


def _agree(ok):
    flag = torch.tensor([1 if ok else 0])
    dist.all_reduce(flag, op=dist.ReduceOp.MIN)
    return bool(flag.item())


def _control_probe():
    """Why PyTorch's own fully_shard cannot run here (on the CPU, in this release), or None.
    FSDP2 of torch 2.6 records events on CPU streams that have none, so every control fails
    there: the behaviours are then checked against their references (DDP, an unsharded model)
    for libfsdp alone, and the control column reads "unavailable"."""
    model = nn.Linear(4, 4)
    try:
        fully_shard(model, mesh=mesh)
        model(torch.ones(2, 4)).sum().backward()
        error = None
    except Exception as e:  # noqa: BLE001 -- the reason is reported
        error = f"{type(e).__name__}: {e}".splitlines()[0][:200]
    return None if _agree(error is None) else (error or "fails on another rank")


_FULLY_SHARD_ARGS = set(inspect.signature(fully_shard).parameters)


def _control_unavailable(error, probe):
    """The reason the control's failure comes from this PyTorch rather than the port: FSDP2
    does not run on its CPU (probe), or lacks an argument newer releases have."""
    if probe:
        return f"PyTorch {torch.__version__}'s fully_shard does not run on the CPU: {probe}"
    marker = "fully_shard() got an unexpected keyword argument '"
    if marker in error:
        arg = error.split(marker)[1].split("'")[0]
        if arg not in _FULLY_SHARD_ARGS:
            return f"PyTorch {torch.__version__}'s fully_shard has no {arg}"
    return None


def run():
    failures = 0
    probe = _control_probe()
    for name, source, known, fn in _behaviours:
        outcome = {}
        for impl_name in ("fsdp2", "fully_shard", "libfsdp"):
            impl, error = Impl(impl_name), ""
            try:
                fn(impl)
            except Exception as e:  # noqa: BLE001 -- every failure is an outcome
                error = f"{type(e).__name__}: {e}".splitlines()[0][:300]
                if os.environ.get("FSDP_CONFORMANCE_TRACE"):
                    traceback.print_exc()
            finally:
                impl.close()
            outcome[impl_name] = (_agree(not error), error)
        control_ok, control_error = outcome["fsdp2"]
        unavailable = None if control_ok else _control_unavailable(control_error, probe)
        verdicts, bad = [], not control_ok and not unavailable
        if unavailable:
            verdicts.append(f"control unavailable ({unavailable})")
        elif not control_ok:
            verdicts.append(f"PORT WRONG: the control fails: {control_error}")
        for impl_name in ("fully_shard", "libfsdp"):
            ok, error = outcome[impl_name]
            mark = known[impl_name]
            if mark and ok:
                verdicts.append(f"{impl_name}: UNEXPECTED PASS; remove the known mark")
            elif mark:
                verdicts.append(f"{impl_name}: known difference ({mark}): {error}")
            elif not ok:
                verdicts.append(f"{impl_name}: FAIL: {error}")
            else:
                verdicts.append(f"{impl_name}: pass")
            bad = bad or (bool(mark) == ok)
        failures += bool(bad)
        if rank == 0:
            print(f"[{'FAIL' if bad else ' ok '}] {name} ({source}): {'; '.join(verdicts)}",
                  flush=True)
            if os.environ.get("FSDP_CONFORMANCE_TABLE"):  # rows for table.py (doc/pytorch.md)
                with open(os.environ["FSDP_CONFORMANCE_TABLE"], "a") as f:
                    f.write(json.dumps({"name": name, "source": source,
                                        "known": known["libfsdp"],
                                        "dropin_known": known["fully_shard"],
                                        "control": bool(control_ok),
                                        "control_unavailable": unavailable,
                                        "lib": bool(outcome["libfsdp"][0]),
                                        "dropin": bool(outcome["fully_shard"][0])}) + "\n")
    dist.barrier()
    dist.destroy_process_group()
    if rank == 0 and os.path.exists(_store):
        os.remove(_store)
    _first.finalize()
    if rank == 0:
        print(f"{len(_behaviours)} behaviours, {failures} failing", flush=True)
    sys.stdout.flush()
    sys.stderr.flush()
    libfsdp.finalize_mpi()
    # Not the interpreter's shutdown: after several fully_shard and FullyShard trainings in one
    # process, a libtorch thread-local destructor can crash there (SIGSEGV in __call_tls_dtors,
    # PyThreadState_New after finalization), which would turn a result into a crash.
    os._exit(1 if failures else 0)


__all__ = ["behaviour", "run", "rank", "world", "mesh", "allreduce_grads", "batch", "agree",
           "assert_close", "assert_equal", "make_optim", "both_optimizers", "zero_grad",
           "parity_step", "destroy", "check_sharded_parity", "full_grads", "FsdpMLP",
           "CheckpointedBlock", "CheckpointedStack", "LIB_OPTIM",
           "nn", "torch", "dist"]
