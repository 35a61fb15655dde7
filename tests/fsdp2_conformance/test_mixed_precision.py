"""Behaviours of FSDP2's test_fully_shard_mixed_precision.py (conformance.py runs each against
fully_shard and FullyShard). The references follow FSDP2's test: a float32 copy for the optimizer
and a param_dtype copy for forward/backward, gradients reduced in reduce_dtype as FSDP2 does."""
import collections
import contextlib
import copy
import dataclasses
import inspect

from conformance import (
    assert_close, assert_equal, behaviour, dist, FsdpMLP, full_grads, mesh, nn, run,
    torch, world)
from torch.utils.checkpoint import checkpoint, set_checkpoint_early_stop

try:  # FSDP2's gathered parameters carry the gradient dtype (PyTorch 2.15; not 2.6)
    from torch.distributed.fsdp._fully_shard._fsdp_param import FSDPParam
    _GRAD_DTYPE = hasattr(FSDPParam, "unsharded_grad_dtype")
except ImportError:
    _GRAD_DTYPE = False
# FSDP2's test recomputes the whole forward: early_stop=False, an argument of newer PyTorch; 2.6
# has the context manager only (and hands unknown keywords to the function).
_EARLY_STOP_ARG = "early_stop" in inspect.signature(checkpoint).parameters


# ---- helpers of this file's own ----------------------------------------------------------------


def check_sharded_parity(impl, ref, model, what, **tol):
    """common_fsdp.check_sharded_parity: parameters and gradients equal the reference's."""
    got = impl.full_state_dict(model)
    for n, p in ref.named_parameters():
        assert_close(got[n], p.detach(), f"{what}: parameter {n}", **tol)
    grads = full_grads(impl, model)
    for n, p in ref.named_parameters():
        if p.grad is not None:
            assert_close(grads.get(n), p.grad, f"{what}: gradient of {n}", **tol)


def make_optim(impl, model, sharded, library, lr=1e-2):
    """FSDP2's torch.optim.Adam over model.parameters(); with library=True FullyShard gets its
    documented counterpart instead, the library's sharded AdamW (weight_decay=0: Adam)."""
    if library and not impl.is_fsdp2:
        opt = impl.ctx.optimizer("adamw", sharded.units, lr=lr, weight_decay=0.0)
        # destroyed before Impl.close() (see with_optimizers)
        impl.__dict__.setdefault("optimizers", []).append(opt)
        return opt
    return torch.optim.Adam(model.parameters(), lr=lr)


def with_optimizers(fn):
    """Destroys the library optimizers a behaviour made before conformance's Impl.close() (which
    knows of units only)."""
    def run_it(impl, *args, **kwargs):
        try:
            return fn(impl, *args, **kwargs)
        finally:
            for opt in impl.__dict__.pop("optimizers", []):
                opt.destroy()
    run_it.__name__ = fn.__name__
    return run_it


def zero_grad(opt, set_to_none):
    if isinstance(opt, torch.optim.Optimizer):
        opt.zero_grad(set_to_none=set_to_none)
    else:
        opt.zero_grad()


def shard_per_module(impl, model, policies, root_policy):
    """fully_shard(module, mp_policy=policy) for each (module, policy), then the root; FullyShard
    takes the same as a dict {module: policy}."""
    if impl.is_fsdp2:
        for m, p in policies:
            impl.fully_shard(m, mesh=mesh, mp_policy=p)
        impl.fully_shard(model, mesh=mesh, mp_policy=root_policy)
        return model
    return impl.shard(model, [m for m, _ in policies],
                      mp_policy={**dict(policies), model: root_policy})


# ---- parity in training ---------------------------------------------------------------------
@with_optimizers
def _parity(impl, param_dtype, reduce_dtype, library, steps=10):
    """TestFullyShardMixedPrecisionTraining._test_compute_dtype / _test_reduce_dtype_*: 3 MLPs,
    each and the root sharded, Adam, 10 steps on one input, loss and sharded parity each step."""
    torch.manual_seed(42)
    model = nn.Sequential(*[FsdpMLP(16) for _ in range(3)])
    ref = copy.deepcopy(model)
    ref_opt = torch.optim.Adam(ref.parameters(), lr=1e-2)
    sharded = impl.shard(model, list(model), mp_policy=impl.policy(param_dtype=param_dtype,
                                                                   reduce_dtype=reduce_dtype))
    opt = make_optim(impl, model, sharded, library)
    low = param_dtype != torch.float32
    compute = copy.deepcopy(ref).to(param_dtype) if low else ref
    # reduce_dtype=None: newer FSDP2 (FSDPParam.unsharded_grad_dtype: 2.15, not 2.6) reduces in the
    # gradients' accumulation dtype, the parameters' own float32; older FSDP2 in param_dtype.
    reduce = reduce_dtype or (torch.float32 if _GRAD_DTYPE else param_dtype)
    torch.manual_seed(42 + dist.get_rank() + 1)
    inp = torch.randn((4, 16), dtype=param_dtype)
    for it in range(steps):
        zero_grad(opt, it % 2 == 0)
        loss = model(inp).sum()
        loss.backward()
        opt.step()

        ref_opt.zero_grad(set_to_none=(it % 2 == 0))
        ref_loss = compute(inp.to(param_dtype)).sum()
        ref_loss.backward()
        for p32, pc in zip(ref.parameters(), compute.parameters()):
            grad = pc.grad.to(reduce)
            if reduce == torch.float32:
                dist.all_reduce(grad)
                grad.div_(world)
            else:  # FSDP2 divides before a low-precision sum (predivide factor 2 on 2 ranks)
                grad.div_(world)
                dist.all_reduce(grad)
            p32.grad = grad.to(torch.float32)
            if low:
                pc.grad = None
        ref_opt.step()
        if low:
            with torch.no_grad():
                for p32, pc in zip(ref.parameters(), compute.parameters()):
                    pc.copy_(p32)
        assert_close(loss, ref_loss, f"loss at step {it}")
        check_sharded_parity(impl, ref, model, f"step {it}")


for _library in (False, True):
    _opt = ("libfsdp's sharded AdamW for FullyShard" if _library
            else "torch.optim.Adam over model.parameters()")
    _src = "test_fully_shard_mixed_precision.py::TestFullyShardMixedPrecisionTraining::"
    behaviour(f"bf16 param_dtype, fp32 reduce_dtype: parity, {_opt}",
              _src + "test_reduce_dtype (fp32 reduce)",
              known=None)(
        lambda impl, lib=_library: _parity(impl, torch.bfloat16, torch.float32, lib))
    behaviour(f"fp32 param_dtype, bf16 reduce_dtype: parity, {_opt}",
              _src + "test_reduce_dtype (bf16 reduce)",
              known=None)(
        lambda impl, lib=_library: _parity(impl, torch.float32, torch.bfloat16, lib))
    behaviour(f"bf16 param_dtype, reduce_dtype=None: parity, {_opt}",
              _src + "test_compute_dtype",
              known=None)(
        lambda impl, lib=_library: _parity(impl, torch.bfloat16, None, lib))


@behaviour("gradient accumulation without reduction accumulates in fp32 (bf16 compute, fp32 "
           "reduce), libfsdp's AdamW for FullyShard",
           "test_fully_shard_mixed_precision.py::TestFullyShardMixedPrecisionTraining::"
           "test_grad_acc_with_reduce_dtype")
@with_optimizers
def grad_acc_with_reduce_dtype(impl):
    torch.manual_seed(42)
    param_dtype, reduce_dtype = torch.bfloat16, torch.float32
    model = nn.Sequential(*[FsdpMLP(16) for _ in range(3)])
    ref = copy.deepcopy(model)
    ref_compute = copy.deepcopy(ref).to(param_dtype)
    ref_opt = torch.optim.Adam(ref.parameters(), lr=1e-2)
    sharded = impl.shard(model, list(model), mp_policy=impl.policy(param_dtype=param_dtype,
                                                                   reduce_dtype=reduce_dtype))
    opt = make_optim(impl, model, sharded, library=True)
    torch.manual_seed(42 + dist.get_rank() + 1)
    micro = 4
    inp = torch.randn((2 * micro, 16), dtype=param_dtype)
    for it in range(5):
        for k, x in enumerate(torch.chunk(inp, micro)):
            last = k == micro - 1
            if impl.is_fsdp2:
                model.set_requires_gradient_sync(last)
                model.set_reshard_after_backward(True)
                sync = contextlib.nullcontext()
            else:
                sync = contextlib.nullcontext() if last else sharded.no_sync()
            ref_loss = ref_compute(x.detach()).sum()
            ref_loss.backward()
            with sync:
                loss = model(x.detach()).sum()
                loss.backward()
            assert_equal(loss.dtype, param_dtype, "loss dtype")
            assert_close(loss, ref_loss, f"loss at step {it}, micro-batch {k}")
            for p32, pc in zip(ref.parameters(), ref_compute.parameters()):
                if p32.grad is not None:
                    p32.grad += pc.grad
                else:
                    p32.grad = pc.grad.to(p32.dtype)
                pc.grad = None
            if last:
                for p32 in ref.parameters():
                    dist.all_reduce(p32.grad)
                    p32.grad /= world
        check_sharded_parity(impl, ref, model, f"step {it}")
        ref_opt.step()
        opt.step()
        ref_opt.zero_grad(set_to_none=(it % 2 == 0))
        zero_grad(opt, it % 2 == 0)
        with torch.no_grad():
            for p32, pc in zip(ref.parameters(), ref_compute.parameters()):
                pc.copy_(p32)


# ---- casts ----------------------------------------------------------------------------------
class SaveForwardInputsModule(nn.Module):
    """torch.testing._internal.common_distributed.SaveForwardInputsModule."""

    def __init__(self, forward_inputs, cast_forward_inputs):
        super().__init__()
        self.l = nn.Linear(100, 100)
        self.forward_inputs = forward_inputs
        self.cast_forward_inputs = cast_forward_inputs

    def forward(self, x):
        self.forward_inputs[self] = x
        return self.l(x.to(self.l.weight.dtype) if self.cast_forward_inputs else x)


class SaveForwardInputsModel(nn.Module):
    def __init__(self, forward_inputs, cast_forward_inputs):
        super().__init__()
        self.c1 = SaveForwardInputsModule(forward_inputs, cast_forward_inputs)
        self.c2 = SaveForwardInputsModule(forward_inputs, cast_forward_inputs)
        self.forward_inputs = forward_inputs

    def forward(self, x):
        self.forward_inputs[self] = x
        return self.c2(self.c1(x))


@behaviour("float16 on one submodule only (per-module policies)",
           "test_fully_shard_mixed_precision.py::TestFullyShardMixedPrecisionCasts::"
           "test_float16_on_one_submodule")
def float16_on_one_submodule(impl):
    x = torch.zeros(2, 100)
    inputs = {}
    model = SaveForwardInputsModel(inputs, cast_forward_inputs=False)
    shard_per_module(impl, model, [(model.c2, impl.policy(param_dtype=torch.float16))],
                     impl.policy())
    model(x).sum().backward()
    assert_equal([inputs[m].dtype for m in (model, model.c1, model.c2)],
          [torch.float32, torch.float32, torch.float16], "input dtypes of model, c1, c2")


@behaviour("output_dtype on a submodule: the next one needs no cast",
           "test_fully_shard_mixed_precision.py::TestFullyShardMixedPrecisionCasts::"
           "test_float16_on_one_submodule (subtest 3)")
def output_dtype_on_submodule(impl):
    x = torch.zeros(2, 100)
    inputs = {}
    model = SaveForwardInputsModel(inputs, cast_forward_inputs=False)
    shard_per_module(impl, model, [(model.c1, impl.policy(param_dtype=torch.float16,
                                                          output_dtype=torch.float32))],
                     impl.policy())
    model(x).sum().backward()
    assert_equal([inputs[m].dtype for m in (model, model.c1, model.c2)],
          [torch.float32, torch.float16, torch.float32], "input dtypes of model, c1, c2")


@behaviour("output_dtype on the root: outputs cast, gradients flow",
           "test_fully_shard_mixed_precision.py::TestFullyShardMixedPrecisionCasts::"
           "test_float16_on_one_submodule (subtest 3, one policy for every module)")
def output_dtype_on_root(impl):
    x = torch.zeros(2, 100)
    inputs = {}
    model = SaveForwardInputsModel(inputs, cast_forward_inputs=False)
    mp = impl.policy(param_dtype=torch.float16, output_dtype=torch.float32)
    impl.shard(model, [model.c2], mp_policy=mp)  # the root holds c1's parameters
    out = model(x)
    assert_equal(out.dtype, torch.float32, "output dtype")
    out.sum().backward()
    assert_equal([inputs[m].dtype for m in (model, model.c1, model.c2)],
          [torch.float16, torch.float16, torch.float16], "input dtypes of model, c1, c2")


class ToyModule(nn.Module):
    def __init__(self, forward_inputs):
        super().__init__()
        self.l = nn.Linear(100, 100)
        self.forward_inputs = forward_inputs

    def forward(self, x, y):
        self.forward_inputs["l2_input_x"] = x
        self.forward_inputs["l2_input_y"] = y
        return self.l(x)


class ToyModel(nn.Module):
    def __init__(self, forward_inputs):
        super().__init__()
        self.l1 = nn.Linear(100, 100)
        self.l2 = ToyModule(forward_inputs)
        self.forward_inputs = forward_inputs

    def forward(self, x):
        self.forward_inputs["model_input_x"] = x
        y = torch.ones(2, 100, dtype=torch.float32)  # external input
        return self.l2(self.l1(x), y)


def _external_inputs(impl, submodule_cast):
    inputs = {}
    model = ToyModel(inputs)
    shard_per_module(impl, model, [(model.l2, impl.policy(
        param_dtype=torch.float16, cast_forward_inputs=submodule_cast))],
        impl.policy(param_dtype=torch.float16))
    model(torch.zeros(2, 100)).sum().backward()
    assert_equal([inputs[k].dtype for k in ("model_input_x", "l2_input_x", "l2_input_y")],
          [torch.float16, torch.float16, torch.float16 if submodule_cast else torch.float32],
          "dtypes of model_input_x, l2_input_x, l2_input_y")


@behaviour("a submodule casts an external input (cast_forward_inputs=True)",
           "test_fully_shard_mixed_precision.py::TestFullyShardMixedPrecisionCasts::"
           "test_submodules_with_external_inputs (enable_submodule_cast=True)")
def external_inputs_cast(impl):
    _external_inputs(impl, True)


@behaviour("a submodule with cast_forward_inputs=False under a casting root",
           "test_fully_shard_mixed_precision.py::TestFullyShardMixedPrecisionCasts::"
           "test_submodules_with_external_inputs (enable_submodule_cast=False)")
def external_inputs_no_cast(impl):
    _external_inputs(impl, False)


class Paramless(nn.Module):
    """A root without parameters of its own: everything is in its two sharded children."""

    def __init__(self, forward_inputs):
        super().__init__()
        self.c1 = nn.Linear(16, 16)
        self.c2 = nn.Linear(16, 16)
        self.forward_inputs = forward_inputs

    def forward(self, x, y):
        self.forward_inputs["x"], self.forward_inputs["y"] = x, y
        return self.c2(self.c1(x) + y)


@behaviour("a root without parameters casts its floating inputs",
           "test_fully_shard_mixed_precision.py::TestFullyShardMixedPrecisionCasts::"
           "test_submodules_with_external_inputs (the root holding no parameters)")
def paramless_root_casts(impl):
    inputs = {}
    model = Paramless(inputs)
    mp = impl.policy(param_dtype=torch.bfloat16)
    impl.shard(model, [model.c1, model.c2], mp_policy=mp)
    out = model(torch.randn(2, 16), torch.randn(2, 16))
    out.sum().backward()
    assert_equal([inputs["x"].dtype, inputs["y"].dtype, out.dtype], [torch.bfloat16] * 3,
          "dtypes of the root's inputs x, y and of its output")


class RecordingLinear(nn.Linear):
    def __init__(self):
        super().__init__(1, 1)
        self.input_dtypes = []

    def forward(self, x):
        self.input_dtypes.append(x.dtype)
        return super().forward(x)


class CheckpointModel(nn.Module):
    def __init__(self, checkpoint_input_dtype):
        super().__init__()
        self.linear1 = RecordingLinear()
        self.checkpoint_input_dtype = checkpoint_input_dtype
        self.linear1_output_dtypes = []

    def checkpointed_linear1(self, x):
        x = self.linear1(x)
        self.linear1_output_dtypes.append(x.dtype)
        return x

    def forward(self, x):
        x = x.to(dtype=self.checkpoint_input_dtype)
        if _EARLY_STOP_ARG:
            x = checkpoint(self.checkpointed_linear1, x, use_reentrant=False, early_stop=False)
        else:
            with set_checkpoint_early_stop(False):
                x = checkpoint(self.checkpointed_linear1, x, use_reentrant=False)
        return x.float().sum()


def _checkpoint_casts(impl, recompute_cast):
    if recompute_cast == "input":
        dtype = torch.float32
        mp = impl.policy(param_dtype=torch.bfloat16, reduce_dtype=torch.bfloat16)
    else:
        dtype = torch.bfloat16
        mp = impl.policy(param_dtype=torch.bfloat16, reduce_dtype=torch.bfloat16,
                         output_dtype=torch.float32, cast_forward_inputs=False)
    torch.manual_seed(42)
    model = CheckpointModel(dtype)
    impl.shard(model, [model.linear1], mp_policy=mp)
    model(torch.randn(8, 1)).backward()
    if recompute_cast == "input":
        assert_equal(model.linear1.input_dtypes, [torch.bfloat16, torch.bfloat16],
              "linear1's input dtypes in forward and recomputation")
    else:
        assert_equal(model.linear1_output_dtypes, [torch.float32, torch.float32],
              "linear1's output dtypes in forward and recomputation")


@behaviour("activation checkpointing: recomputation casts forward inputs",
           "test_fully_shard_mixed_precision.py::TestFullyShardMixedPrecisionCasts::"
           "test_checkpoint_recompute_casts_forward_inputs")
def checkpoint_recompute_casts_inputs(impl):
    _checkpoint_casts(impl, "input")


@behaviour("activation checkpointing: recomputation casts outputs (output_dtype on a submodule)",
           "test_fully_shard_mixed_precision.py::TestFullyShardMixedPrecisionCasts::"
           "test_checkpoint_recompute_casts_outputs")
def checkpoint_recompute_casts_outputs(impl):
    _checkpoint_casts(impl, "output")


@behaviour("norm modules (LayerNorm, BatchNorm1d, BatchNorm2d) under bf16 param_dtype",
           "test_fully_shard_mixed_precision.py::TestFullyShardMixedPrecisionCasts::"
           "test_norm_modules_bf16 (subtests 1, 2 and 4; bf16 running stats, as the CPU "
           "needs)")
def norm_modules_bf16(impl):
    dtype = torch.bfloat16
    cases = [
        (lambda: nn.Sequential(nn.Linear(32, 32), nn.LayerNorm(32), nn.Linear(32, 32)),
         (4, 32)),
        (lambda: nn.Sequential(nn.Linear(32, 32), nn.BatchNorm1d(32), nn.Linear(32, 32)),
         (4, 32)),
        (lambda: nn.Sequential(nn.Conv2d(1, 5, 3), nn.BatchNorm2d(5), nn.Conv2d(5, 4, 3)),
         (3, 1, 9, 9)),
    ]
    for k, (build, shape) in enumerate(cases):
        torch.manual_seed(k)
        model = build()
        if k > 0:  # batch norm: buffers cast down to the lower precision (subtest 4); on the
            # CPU, batch_norm refuses float32 running stats with bf16 inputs in FSDP2 too
            model[1].running_mean = model[1].running_mean.to(dtype)
            model[1].running_var = model[1].running_var.to(dtype)
        impl.shard(model, [model[0], model[1], model[2]],
                   mp_policy=impl.policy(param_dtype=dtype))
        try:
            z = model(torch.randn(shape))
            assert_equal(z.dtype, dtype, f"output dtype of case {k}")
            z.sum().backward()
        except RuntimeError as e:
            raise RuntimeError(f"case {k} ({model[1].__class__.__name__}): {e}") from e


@dataclasses.dataclass
class DC:
    x: torch.Tensor
    y: torch.Tensor


@dataclasses.dataclass
class Inner:
    x: torch.Tensor
    y: torch.Tensor


@dataclasses.dataclass
class Outer:
    inner: Inner
    z: torch.Tensor


TensorPair = collections.namedtuple("TensorPair", "x y")


class ContainerModule(nn.Module):
    """Applies one Linear to each tensor of the container (FSDP2's test's module)."""

    def __init__(self, ctype, dim):
        super().__init__()
        self.ctype = ctype
        self._layer = nn.Linear(dim, dim)

    def forward(self, inp):
        if self.ctype == "dataclass":
            return DC(x=self._layer(inp.x), y=self._layer(inp.y))
        if self.ctype == "nested_dataclass":
            return Outer(inner=Inner(x=self._layer(inp.inner.x), y=self._layer(inp.inner.y)),
                         z=self._layer(inp.z))
        return TensorPair(x=self._layer(inp.x), y=self._layer(inp.y))


class ToContainer(nn.Module):
    def __init__(self, ctype):
        super().__init__()
        self.ctype = ctype

    def forward(self, x):
        if self.ctype == "dataclass":
            return DC(x=x, y=x.clone())
        if self.ctype == "nested_dataclass":
            return Outer(inner=Inner(x=x, y=x.clone()), z=x.clone())
        return TensorPair(x=x, y=x.clone())


class FromContainer(nn.Module):
    def __init__(self, ctype):
        super().__init__()
        self.ctype = ctype

    def forward(self, inp):
        if self.ctype == "nested_dataclass":
            return inp.inner.x + inp.inner.y + inp.z
        return inp.x + inp.y


def structured_input_output(impl, ctype, param_dtype, reduce_dtype, library):
    """FSDP2's _test_structured_input_output: structured activations between sharded modules,
    10 steps against a reference (a param_dtype compute copy whose gradients are reduced in
    reduce_dtype, as FSDP2's test simulates); losses agree, and in float32 the sharded
    parameters and gradients too."""
    torch.manual_seed(42)
    dim, local_bs = 16, 2
    model = nn.Sequential(ToContainer(ctype), ContainerModule(ctype, dim),
                          ContainerModule(ctype, dim), FromContainer(ctype))
    ref = copy.deepcopy(model)
    sharded = impl.shard(model, list(model),
                         mp_policy=impl.policy(param_dtype=param_dtype, reduce_dtype=reduce_dtype))
    ref_compute = copy.deepcopy(ref).to(param_dtype) if param_dtype is not None else None
    ref_opt = torch.optim.Adam(ref.parameters(), lr=1e-2)
    opt = make_optim(impl, model, sharded, library)
    torch.manual_seed(1)  # same on all ranks
    me = dist.get_rank()
    for it in range(10):
        global_inp = torch.rand((world * local_bs, dim))
        local_inp = global_inp[me * local_bs:(me + 1) * local_bs].detach()
        zero_grad(opt, it % 2 == 0)
        loss = model(local_inp).sum()
        loss.backward()
        opt.step()
        ref_opt.zero_grad(set_to_none=(it % 2 == 0))
        if param_dtype is None:
            ref_loss = ref(global_inp).sum()
            ref_loss.backward()
            for p in ref.parameters():
                p.grad.div_(world)
        else:
            ref_loss = ref_compute(global_inp.to(param_dtype)).sum()
            ref_loss.backward()
            for p32, pc in zip(ref.parameters(), ref_compute.parameters()):
                g = pc.grad.to(reduce_dtype) if reduce_dtype not in (None, param_dtype) \
                    else pc.grad
                p32.grad = (g / world).to(p32.dtype)
                pc.grad = None
        ref_opt.step()
        if param_dtype is not None:
            with torch.no_grad():
                for p32, pc in zip(ref.parameters(), ref_compute.parameters()):
                    pc.copy_(p32)
        loss = loss.detach().clone()
        dist.all_reduce(loss)
        assert_close(loss, ref_loss.detach(), f"loss at step {it}")
        if param_dtype is None:
            check_sharded_parity(impl, ref, model, f"step {it}")


_src = ("test_fully_shard_mixed_precision.py::TestFullyShardMixedPrecisionTraining::"
        "test_structured_input_output")
for _ctype in ("dataclass", "nested_dataclass", "namedtuple"):
    for _pd, _rd, _label in ((None, None, "fp32"), (torch.bfloat16, torch.bfloat16, "bf16/bf16"),
                             (torch.bfloat16, torch.float32, "bf16/fp32")):
        behaviour(f"{_ctype} activations between sharded modules ({_label}): parity, "
                  "torch.optim.Adam over model.parameters()", f"{_src} ({_ctype}, {_label})")(
            with_optimizers(lambda impl, c=_ctype, pd=_pd, rd=_rd:
                            structured_input_output(impl, c, pd, rd, library=False)))
behaviour("dataclass activations between sharded modules (fp32): parity, libfsdp's AdamW for "
          "FullyShard", f"{_src} (dataclass, fp32)")(
    with_optimizers(lambda impl: structured_input_output(impl, "dataclass", None, None,
                                                         library=True)))


if __name__ == "__main__":
    run()
