"""The library's sharded SGD and AdamW against torch.optim itself (foreach=False, the single-tensor
path the library follows), maximize for both and AdamW's amsgrad included: parameters and every
state buffer after several steps, on each rank's shard.

torch.optim on the CPU is not the library's reference for bits: its vectorized lerp, addcmul and
addcdiv fuse multiply-adds where the CPU has them (AVX2), the library never does (memory/numeric.hpp;
tests/ref_optim.h and tests/internal/test_optimizer_kernels.cpp check the bits against PyTorch's
operation order without fusion). So values are compared to a few float32 rounding steps, which
still tells a wrong rule (a sign, the maximum, a state) apart by orders of magnitude, and the count
of bit-equal elements is printed. The state names are checked too: max_exp_avg_sq exists exactly
where torch's state has it.

Usage: mpiexec -n N python check_optim_torch.py   (exit 77: no torch)."""
import ctypes
import sys

try:
    import torch
except ImportError:
    print("skipped: no torch")
    sys.exit(77)
import numpy as np  # noqa: E402

import libfsdp  # noqa: E402
from libfsdp import _capi, _lib  # noqa: E402

SHAPES = {"a.weight": (9, 13), "a.bias": (9,), "b.weight": (301,)}
STEPS = 6
# Largest difference allowed, in units of float32's epsilon times the value's magnitude (at least
# 1): a few roundings that fused and unfused multiply-adds may round apart, compounded over STEPS.
TOLERANCE_EPS = 256

failures = 0


def check(ok, what):
    global failures
    if not ok:
        failures += 1
        print(f"FAIL rank {RANK}: {what}", flush=True)


def as_argument(hp):
    """A pointer to `hp` as the binding's prototypes declare the argument."""
    return ctypes.cast(ctypes.pointer(hp), ctypes.POINTER(_capi.Hyperparams))


def initial(name, seed):
    g = torch.Generator().manual_seed(seed + sum(map(ord, name)))
    return torch.randn(SHAPES[name], generator=g)


def gradient(name, step):
    """Multiples of 1/8 below 2^5, the same on every rank: the reduced mean is exact."""
    g = torch.Generator().manual_seed(1000 * step + sum(map(ord, name)))
    return torch.randint(-256, 256, SHAPES[name], generator=g).float() / 8


def run(ctx, kind, options, label):
    names = sorted(SHAPES)
    unit = ctx.unit([(n, SHAPES[n], np.float32) for n in names], name="m")
    ref = {n: torch.nn.Parameter(initial(n, 7)) for n in names}
    shard = unit.shard()
    for i, n in enumerate(names):
        so, po, length = unit.shard_range(i)
        shard[so:so + length] = ref[n].detach().reshape(-1)[po:po + length].numpy()
    if kind == "sgd":
        torch_opt = torch.optim.SGD(ref.values(), foreach=False, **options)
        fields = dict(options)
    else:
        betas = options.get("betas", (0.9, 0.999))
        torch_opt = torch.optim.AdamW(ref.values(), foreach=False, **options)
        fields = {k: v for k, v in options.items() if k != "betas"}
        fields["beta1"], fields["beta2"] = betas
    HP = _capi.Hyperparams
    hp = HP()
    # The library's defaults for the kind (create with NULL, read group 0) are torch's.
    code = _capi.OPTIMIZERS[kind]
    handle = ctypes.c_void_p()
    units = (ctypes.c_void_p * 1)(unit._handle)
    check(_lib.fsdp_optimizer_create(ctx._handle, code, None, 1, units, ctypes.byref(handle)) == 0,
          f"{label}: create with the defaults")
    hp.size = ctypes.sizeof(HP)
    check(_lib.fsdp_optimizer_get_hyperparams(handle, 0, as_argument(hp)) == 0,
          f"{label}: get_hyperparams")
    ours = {k: getattr(hp, k) for k in ("lr", "weight_decay", "maximize")}
    if kind == "sgd":
        ours.update(momentum=hp.momentum, dampening=hp.dampening, nesterov=hp.nesterov)
        defaults = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))]).defaults
    else:
        ours.update(betas=(hp.beta1, hp.beta2), eps=hp.eps, amsgrad=hp.amsgrad)
        defaults = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))]).defaults
    theirs = {k: defaults[k] for k in ours}
    check(ours == theirs, f"{label}: the library's defaults {ours} are torch's {theirs}")
    _lib.fsdp_optimizer_destroy(ctypes.byref(handle))
    for k, v in fields.items():
        setattr(hp, k, int(v) if isinstance(v, bool) else float(v))
    check(_lib.fsdp_optimizer_create(ctx._handle, code, as_argument(hp), 1, units,
                                     ctypes.byref(handle)) == 0, f"{label}: create")
    for step in range(1, STEPS + 1):
        unit.zero_grads()
        for i, n in enumerate(names):
            g = gradient(n, step)
            unit.write_grad(i, g.numpy())
            ref[n].grad = g.clone()
        unit.reduce_grads()
        check(_lib.fsdp_optimizer_step(handle) == 0, f"{label}: step {step}")
        torch_opt.step()

    worst_seen = [0.0]

    def compare(what, got, want):
        want = want.detach().reshape(-1).numpy()
        scale = np.maximum(np.abs(want), 1.0)
        diff = np.abs(got.astype(np.float64) - want) / scale
        worst = float(diff.max()) / np.finfo(np.float32).eps if diff.size else 0.0
        check(worst <= TOLERANCE_EPS, f"{label}: {what} differs from torch.optim by {worst:.1f} "
              f"eps (allowed {TOLERANCE_EPS})")
        worst_seen[0] = max(worst_seen[0], worst)
        return int((got.view(np.uint32) == want.view(np.uint32)).sum()), got.size

    # SGD without momentum: the library hands out a zeroed buffer on request, torch keeps none.
    library_names = {"sgd": ["momentum"] if options.get("momentum") else [],
                     "adamw": ["exp_avg", "exp_avg_sq", "max_exp_avg_sq"]}
    torch_names = {"momentum": "momentum_buffer"}
    same = total = 0
    shard = unit.shard()
    for i, n in enumerate(names):
        so, po, length = unit.shard_range(i)
        e, t = compare(f"{n}", shard[so:so + length], ref[n].reshape(-1)[po:po + length])
        same, total = same + e, total + t
    for state in library_names[kind]:
        key = torch_names.get(state, state)
        in_torch = all(key in torch_opt.state[ref[n]] for n in names)
        ptr, numel = ctypes.c_void_p(), ctypes.c_size_t()
        status = _lib.fsdp_optimizer_state(handle, unit._handle, state.encode(),
                                           ctypes.byref(ptr), ctypes.byref(numel))
        check((status == 0) == in_torch, f"{label}: the library keeps '{state}' "
              f"({status == 0}) exactly where torch's state has '{key}' ({in_torch})")
        if status != 0 or not in_torch:
            continue
        buf = np.ctypeslib.as_array((ctypes.c_float * numel.value).from_address(ptr.value))
        for i, n in enumerate(names):
            so, po, length = unit.shard_range(i)
            want = torch_opt.state[ref[n]][key].reshape(-1)[po:po + length]
            e, t = compare(f"{state} of {n}", buf[so:so + length], want)
            same, total = same + e, total + t
    print(f"rank {RANK} {label}: {same} of {total} values bit-equal to torch.optim, "
          f"the largest difference {worst_seen[0]:.1f} eps", flush=True)
    _lib.fsdp_optimizer_destroy(ctypes.byref(handle))
    unit.destroy()


ctx = libfsdp.init()
RANK = ctx.group()[0]
run(ctx, "sgd", {"lr": 0.1, "momentum": 0.9, "dampening": 0.1, "weight_decay": 0.01},
    "SGD momentum")
run(ctx, "sgd", {"lr": 0.1, "momentum": 0.9, "dampening": 0.1, "weight_decay": 0.01,
                 "maximize": True}, "SGD momentum maximize")
run(ctx, "sgd", {"lr": 0.1, "momentum": 0.8, "nesterov": True, "maximize": True},
    "SGD Nesterov maximize")
run(ctx, "sgd", {"lr": 0.1, "weight_decay": 0.01, "maximize": True}, "SGD maximize")
run(ctx, "adamw", {"lr": 0.01, "weight_decay": 0.1}, "AdamW")
run(ctx, "adamw", {"lr": 0.01, "weight_decay": 0.1, "maximize": True}, "AdamW maximize")
# beta2 = 0.9: exp_avg_sq falls fast where the gradient shrinks, so the maximum matters.
run(ctx, "adamw", {"lr": 0.01, "weight_decay": 0.1, "betas": (0.85, 0.9), "amsgrad": True},
    "AdamW amsgrad")
run(ctx, "adamw", {"lr": 0.01, "weight_decay": 0.1, "betas": (0.85, 0.9), "amsgrad": True,
                   "maximize": True}, "AdamW amsgrad maximize")
ctx.finalize()
if failures:
    sys.exit(1)
print(f"rank {RANK}: PASS: the library's optimizers agree with torch.optim")
