"""The FSDP2 conformance harness: behaviours that PyTorch's own FSDP2 tests assert
(test/distributed/_composable/fsdp/test_fully_shard_*.py in the PyTorch repository), ported to the
CPU, each run twice under mpiexec -n 2: against PyTorch's fully_shard on gloo (the control, which
must pass, or the port is wrong) and against libfsdp.pytorch.FullyShard.

A behaviour is a function of an Impl, registered with @behaviour(name, source, known=reason):
`known` marks a difference FullyShard has today (issue 32), with its reason; such a behaviour must
still fail with FullyShard (strict: one that starts passing fails the run until its mark is
removed), and the control must pass. Every rank agrees on each outcome (gloo all-reduce), so a
failure on one rank is a failure everywhere. Exit 77 (skipped) without PyTorch >= 2.6.

Usage: mpiexec -n 2 python test_<file>.py   (each test file imports this module, registers its
behaviours and calls run())."""
import contextlib
import os
import sys
import traceback

try:
    import torch
except ImportError:
    print("skipped: PyTorch is not installed for", sys.executable)
    sys.exit(77)
if tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2]) < (2, 6):
    print(f"skipped: PyTorch {torch.__version__} has no fully_shard (>= 2.6 needed)")
    sys.exit(77)
import torch.distributed as dist  # noqa: E402
import torch.nn as nn  # noqa: E402
from torch.distributed.device_mesh import init_device_mesh  # noqa: E402
from torch.distributed.fsdp import MixedPrecisionPolicy as TorchPolicy  # noqa: E402
from torch.distributed.fsdp import fully_shard  # noqa: E402

import libfsdp  # noqa: E402
from libfsdp.pytorch import FullyShard  # noqa: E402
from libfsdp.pytorch import MixedPrecisionPolicy as LibPolicy  # noqa: E402

torch.set_num_threads(1)
_first = libfsdp.init()
rank, world = _first.group()
# gloo beside MPI: the ranks of one mpiexec share their launcher (the same parent process), which
# gives them the same port without a message.
os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
os.environ.setdefault("MASTER_PORT", str(20000 + os.getppid() % 30000))
dist.init_process_group("gloo", rank=rank, world_size=world)
mesh = init_device_mesh("cpu", (world,))

_behaviours = []


def behaviour(name, source, known=None):
    """Registers fn(impl) as a behaviour: `source` names the FSDP2 test it comes from; `known`
    (a reason) marks a difference FullyShard has today."""
    def register(fn):
        _behaviours.append((name, source, known, fn))
        return fn
    return register


class Impl:
    """What a behaviour may ask of the implementation under test."""

    def __init__(self, name):
        self.name = name
        self.ctx = None
        self.handles = []

    @property
    def is_fsdp2(self):
        return self.name == "fsdp2"

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
                fully_shard(m, mesh=mesh, **kw)
            fully_shard(model, mesh=mesh, **kw)
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


def assert_close(got, want, what, rtol=1.3e-6, atol=1e-5):
    """torch.testing's default float32 tolerances (FSDP2's tests use them through assertEqual)."""
    torch.testing.assert_close(got, want, rtol=rtol, atol=atol, msg=lambda m: f"{what}: {m}")


def _agree(ok):
    flag = torch.tensor([1 if ok else 0])
    dist.all_reduce(flag, op=dist.ReduceOp.MIN)
    return bool(flag.item())


def run():
    failures = 0
    for name, source, known, fn in _behaviours:
        outcome = {}
        for impl_name in ("fsdp2", "libfsdp"):
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
        lib_ok, lib_error = outcome["libfsdp"]
        if not control_ok:
            verdict = f"PORT WRONG: the control fails: {control_error}"
        elif known and lib_ok:
            verdict = "UNEXPECTED PASS: FullyShard now passes; remove the known mark"
        elif known:
            verdict = f"known difference ({known}): {lib_error}"
        elif not lib_ok:
            verdict = f"FAIL: {lib_error}"
        else:
            verdict = "pass"
        bad = not control_ok or (known and lib_ok) or (not known and not lib_ok)
        failures += bool(bad)
        if rank == 0:
            print(f"[{'FAIL' if bad else ' ok '}] {name} ({source}): {verdict}", flush=True)
    dist.barrier()
    dist.destroy_process_group()
    _first.finalize()
    if rank == 0:
        print(f"{len(_behaviours)} behaviours, {failures} failing", flush=True)
    sys.exit(1 if failures else 0)


__all__ = ["behaviour", "run", "rank", "world", "mesh", "allreduce_grads", "batch",
           "assert_close", "nn", "torch", "dist"]
