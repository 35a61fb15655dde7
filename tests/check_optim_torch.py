"""The library's sharded SGD and AdamW against torch.optim itself (foreach=False, the single-tensor
path torch.optim takes on the CPU by default), maximize for both and AdamW's amsgrad included:
parameters and every state buffer after several steps, on each rank's shard.

AdamW is held to torch.optim's bits. The library computes each operation as torch's vectorized
CPU kernels do (AVX2, AVX-512: lerp_ and addcmul_ fused, addcdiv_ not; memory/numeric.hpp), with
the scalars from the same double arithmetic, so exp_avg, exp_avg_sq and max_exp_avg_sq are
bit-equal, and so is every parameter but where torch's own sqrt was not correctly rounded: on a
CPU with AVX-512, torch.sqrt goes through MKL's vsSqrt, which rounds about 0.7% of float32
values one ulp away from the correctly rounded root (the library's, as IEEE's sqrt and CUDA's).
Those elements are found by taking torch.sqrt of torch's second moment after each step; they are
held to TAINTED_EPS. Where torch's kernels do not fuse (a CPU without FMA, or
ATEN_CPU_CAPABILITY=default) nothing is bitwise and everything is held to TOLERANCE_EPS.

SGD is compared to TOLERANCE_EPS: torch fuses add(alpha=) where the library's SGD does not (its
bits are PyTorch's operation order without fusion, tests/ref_optim.h and test_optimizers). The
count of bit-equal elements is printed. The state names are checked too: max_exp_avg_sq exists
exactly where torch's state has it.

Usage: mpiexec -n N python check_optim_torch.py   (exit 77: no torch)."""
import ctypes

from pychecks import check, finish, require_torch, set_rank

torch = require_torch()
import numpy as np  # noqa: E402

import libfsdp  # noqa: E402
from libfsdp import _capi, _lib  # noqa: E402

SHAPES = {"a.weight": (9, 13), "a.bias": (9,), "b.weight": (301,)}
STEPS = 6
# Largest difference allowed, in units of float32's epsilon times the value's magnitude (at least
# 1): a few roundings that fused and unfused multiply-adds may round apart, compounded over STEPS.
TOLERANCE_EPS = 256
# The same for an AdamW parameter whose denominator torch's sqrt rounded otherwise at some step:
# one ulp of the denominator moves the update (at most about lr = 0.01 here) by about one ulp of
# the update, which can tip the parameter's rounding by one ulp (at most 1 eps in this measure) a
# step. Measured: most such parameters still bit-equal, the largest difference 0.5 eps (6 steps).
TAINTED_EPS = 4

EPS = np.finfo(np.float32).eps

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


def torch_fuses():
    """Whether torch's CPU lerp_ fuses its multiply-add (vectorized with FMA): unfused, it equals
    a + w * (b - a) rounded twice, in every element."""
    g = torch.Generator().manual_seed(3)
    a, b = torch.randn(4096, generator=g), torch.randn(4096, generator=g)
    unfused = a.numpy() + np.float32(0.1) * (b.numpy() - a.numpy())
    return not np.array_equal(a.clone().lerp_(b, 0.1).numpy(), unfused)


def sqrt_rounded_apart(x):
    """Where torch.sqrt(x) is not the correctly rounded float32 root (the float64 root of a
    float32, rounded to float32, is)."""
    x = x.detach()
    exact = np.sqrt(x.numpy().astype(np.float64)).astype(np.float32)
    return x.sqrt().numpy().view(np.uint32) != exact.view(np.uint32)


FUSED = torch_fuses()


def run(ctx, kind, options, label, reference=None):
    """The library's `kind` against torch.optim's (or `reference`, a torch.optim class taking
    the same options) on the same values."""
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
        torch_opt = (reference or torch.optim.AdamW)(ref.values(), foreach=False, **options)
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
    tainted = {n: np.zeros(int(np.prod(SHAPES[n])), bool) for n in names}
    for step in range(1, STEPS + 1):
        unit.zero_grads()
        for i, n in enumerate(names):
            g = gradient(n, step)
            unit.write_grad(i, g.numpy())
            ref[n].grad = g.clone()
        unit.reduce_grads()
        check(_lib.fsdp_optimizer_step(handle) == 0, f"{label}: step {step}")
        torch_opt.step()
        if kind == "adamw":  # the second moment torch's step took the root of
            second = "max_exp_avg_sq" if options.get("amsgrad") else "exp_avg_sq"
            for n in names:
                tainted[n] |= sqrt_rounded_apart(torch_opt.state[ref[n]][second].reshape(-1))

    worst_seen = [0.0]
    bitwise = kind == "adamw" and FUSED

    def compare(what, got, want, tainted=None):
        """Bit-equal where `bitwise` (but in `tainted`, held to TAINTED_EPS), else within
        TOLERANCE_EPS."""
        want = want.detach().reshape(-1).numpy()
        scale = np.maximum(np.abs(want), 1.0)
        diff = np.abs(got.astype(np.float64) - want) / scale / EPS
        equal = got.view(np.uint32) == want.view(np.uint32)
        if bitwise:
            free = np.ones(got.size, bool) if tainted is None else ~tainted
            apart = int((~equal & free).sum())
            largest = float(diff[free].max()) if free.any() else 0.0
            check(apart == 0, f"{label}: {what}: {apart} of {int(free.sum())} elements not "
                  f"bit-equal to torch.optim (the largest difference {largest:.3g} eps)")
            worst = float(diff[~free].max()) if (~free).any() else 0.0
            check(worst <= TAINTED_EPS, f"{label}: {what} differs from torch.optim by {worst:.3g} "
                  f"eps where torch's sqrt rounded otherwise (allowed {TAINTED_EPS})")
        else:
            worst = float(diff.max()) if diff.size else 0.0
            check(worst <= TOLERANCE_EPS, f"{label}: {what} differs from torch.optim by "
                  f"{worst:.1f} eps (allowed {TOLERANCE_EPS})")
        worst_seen[0] = max(worst_seen[0], worst)
        return int(equal.sum()), got.size

    # SGD without momentum: the library hands out a zeroed buffer on request, torch keeps none.
    library_names = {"sgd": ["momentum"] if options.get("momentum") else [],
                     "adamw": ["exp_avg", "exp_avg_sq", "max_exp_avg_sq"]}
    torch_names = {"momentum": "momentum_buffer"}
    same = total = rounded_apart = 0
    shard = unit.shard()
    for i, n in enumerate(names):
        so, po, length = unit.shard_range(i)
        e, t = compare(f"{n}", shard[so:so + length], ref[n].reshape(-1)[po:po + length],
                       tainted[n][po:po + length])
        same, total = same + e, total + t
        rounded_apart += int(tainted[n][po:po + length].sum())
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
    held = ("bitwise" + (f" ({rounded_apart} parameters where torch's sqrt rounded otherwise: "
                         f"{TAINTED_EPS} eps)" if rounded_apart else "")) if bitwise else \
        f"to {TOLERANCE_EPS} eps"
    print(f"rank {RANK} {label}: {same} of {total} values bit-equal to torch.optim, "
          f"the largest difference {worst_seen[0]:.3g} eps; held {held}", flush=True)
    _lib.fsdp_optimizer_destroy(ctypes.byref(handle))
    unit.destroy()


ctx = libfsdp.init()
RANK = ctx.group()[0]
set_rank(RANK)
if not FUSED:
    print(f"rank {RANK}: torch's CPU kernels do not fuse multiply-adds here "
          f"({torch.backends.cpu.get_cpu_capability()}): AdamW held to {TOLERANCE_EPS} eps, "
          "not to its bits", flush=True)
run(ctx, "sgd", {"lr": 0.1, "momentum": 0.9, "dampening": 0.1, "weight_decay": 0.01},
    "SGD momentum")
run(ctx, "sgd", {"lr": 0.1, "momentum": 0.9, "dampening": 0.1, "weight_decay": 0.01,
                 "maximize": True}, "SGD momentum maximize")
run(ctx, "sgd", {"lr": 0.1, "momentum": 0.8, "nesterov": True, "maximize": True},
    "SGD Nesterov maximize")
run(ctx, "sgd", {"lr": 0.1, "weight_decay": 0.01, "maximize": True}, "SGD maximize")
run(ctx, "adamw", {"lr": 0.01, "weight_decay": 0.1}, "AdamW")
run(ctx, "adamw", {"lr": 0.01, "weight_decay": 0.0}, "AdamW without weight decay")
run(ctx, "adamw", {"lr": 0.01, "weight_decay": 0.0}, "Adam", reference=torch.optim.Adam)
run(ctx, "adamw", {"lr": 0.01, "weight_decay": 0.1, "maximize": True}, "AdamW maximize")
# beta1 = 0.3: 1 - beta1 >= 0.5, the other branch of torch's lerp.
run(ctx, "adamw", {"lr": 0.01, "weight_decay": 0.01, "betas": (0.3, 0.99)}, "AdamW beta1 0.3")
# beta2 = 0.9: exp_avg_sq falls fast where the gradient shrinks, so the maximum matters.
run(ctx, "adamw", {"lr": 0.01, "weight_decay": 0.1, "betas": (0.85, 0.9), "amsgrad": True},
    "AdamW amsgrad")
run(ctx, "adamw", {"lr": 0.01, "weight_decay": 0.1, "betas": (0.85, 0.9), "amsgrad": True,
                   "maximize": True}, "AdamW amsgrad maximize")
ctx.finalize()
finish("the library's optimizers agree with torch.optim")
