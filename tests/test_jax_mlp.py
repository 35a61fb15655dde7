"""JAX embedding libfsdp (examples/python/jax_mlp.py) against a single-process JAX run: the MLP
trained on 2 ranks, each its own half of every global batch, parameters into JAX through DLPack,
gradients from jax.vjp written back, the library's SGD (momentum, weight decay) and AdamW, gives
at every step the loss, and at the end the parameters, of plain JAX on the whole global batch
with an optimizer written here in jax.numpy (PyTorch's update rules, which the library's are),
within float32 rounding. Also what jnp.from_dlpack does with a view of the library's memory:
alias or copy, and on JAX 0.10.2 (bench/setup-python.sh's) alias exactly at 64-byte alignment;
and np.asarray of a JAX array (the gradients handed back) is JAX's buffer, read-only.
Exits 77 (skipped) where JAX is not installed. Run under mpiexec with 1, 2 or 4 ranks."""
import os
import sys

import numpy as np

from pychecks import check, finish, set_rank, skip

try:
    import jax
    import jax.numpy as jnp
except ImportError:
    skip("jax is not installed (bench/setup-python.sh installs it)")

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples",
                                "python"))
import jax_mlp  # noqa: E402  the example under test

import libfsdp  # noqa: E402

STEPS = 12
# float32 rounding: the ranks' gradients are sums in another order than the one batch's (the
# differences seen are of 1e-7 in the losses, 1e-7 absolute in the parameters).
LOSS_RTOL, PARAM_RTOL, PARAM_ATOL = 2e-6, 1e-5, 1e-6

# ---- the reference: one process, the whole batch, the optimizers in jax.numpy ------------------
def forward(params, x):
    for k, (w, b) in enumerate(params):
        x = x @ w + b
        if k < len(params) - 1:
            x = jnp.tanh(x)
    return x


def batch_loss(params, x, y):
    return jnp.mean((forward(params, x) - y) ** 2)


def sgd(p, g, buf, t, lr, momentum, weight_decay):
    """torch.optim.SGD (dampening 0, no nesterov): d = g + wd p; buf = d at the first step, else
    momentum buf + d; p - lr buf."""
    d = g + weight_decay * p
    buf = d if t == 1 else momentum * buf + d
    return p - lr * buf, buf


def adamw(p, g, state, t, lr, betas, eps, weight_decay):
    """torch.optim.AdamW: decoupled decay, then the bias-corrected Adam step."""
    m, v = state
    b1, b2 = betas
    p = p * (1 - lr * weight_decay)
    m = b1 * m + (1 - b1) * g
    v = b2 * v + (1 - b2) * g * g
    denom = jnp.sqrt(v) / np.sqrt(1 - b2 ** t) + eps
    return p - (lr / (1 - b1 ** t)) * m / denom, (m, v)


def reference(kind, steps, seed=0):
    params = [(jnp.asarray(w), jnp.asarray(b)) for w, b in jax_mlp.initial_params(seed)]
    flat = [p for pair in params for p in pair]
    state = [None if kind == "sgd" else (jnp.zeros_like(p), jnp.zeros_like(p)) for p in flat]
    hyper = jax_mlp.HYPER[kind]
    losses = []
    for step in range(steps):
        x, y = jax_mlp.global_batch(step, seed)
        loss, grads = jax.value_and_grad(batch_loss)(params, jnp.asarray(x), jnp.asarray(y))
        losses.append(float(loss))
        gflat = [g for pair in grads for g in pair]
        out = [(sgd if kind == "sgd" else adamw)(p, g, s, step + 1, **hyper)
               for p, g, s in zip(flat, gflat, state)]
        flat, state = [o[0] for o in out], [o[1] for o in out]
        params = [(flat[i], flat[i + 1]) for i in range(0, len(flat), 2)]
    return losses, [(np.asarray(w), np.asarray(b)) for w, b in params]


ctx = libfsdp.init()
rank, world = ctx.group()
set_rank(rank)

# ---- training through libfsdp against the reference --------------------------------------------
for kind in ("sgd", "adamw"):
    losses, final = jax_mlp.train(ctx, kind, STEPS)
    ref_losses, ref_final = reference(kind, STEPS)
    worst = max(abs(a - b) / abs(b) for a, b in zip(losses, ref_losses))
    check(worst <= LOSS_RTOL, f"{kind}: losses {[f'{x:.7g}' for x in losses]} against "
          f"{[f'{x:.7g}' for x in ref_losses]} (worst relative difference {worst:.2e})")
    late = np.mean(ref_losses[-4:])  # each step is a new batch: the losses are noisy
    check(late < 0.75 * ref_losses[0], f"{kind}: the reference learns ({ref_losses[0]} -> the "
          f"last 4 steps' mean {late})")
    for k, (got, want) in enumerate(zip(final, ref_final)):
        for name, a, b in zip("wb", got, want):
            check(a.shape == b.shape and np.allclose(a, b, rtol=PARAM_RTOL, atol=PARAM_ATOL),
                  f"{kind}: layer {k} {name} differs by up to {np.max(np.abs(a - b)):.2e}")
    if rank == 0:
        print(f"{kind}: {world} ranks, loss {losses[0]:.5f} -> {losses[-1]:.5f}, worst relative "
              f"loss difference {worst:.1e}", flush=True)

# ---- what jnp.from_dlpack makes of a view of the library's memory ------------------------------
# Parameters of 8 float32 (32 bytes, the library's alignment) start alternately on and off a
# 64-byte boundary.
values = [np.full(8, float(i), np.float32) for i in range(4)]
unit = ctx.unit([(f"p{i}", v) for i, v in enumerate(values)], param_dtype="float32")
unit.unshard()
seen = set()
for i, v in enumerate(values):
    address = np.from_dlpack(unit.param(i)).ctypes.data
    array = jax_mlp.jax_param(unit, f"p{i}")
    check(np.array_equal(np.asarray(array), v), f"p{i} through DLPack: {np.asarray(array)}")
    aliased = array.unsafe_buffer_pointer() == address
    seen.add(aliased)
    if jax.__version__ == "0.10.2":
        check(aliased == (address % 64 == 0), f"p{i} at {address:#x}: aliased {aliased}")
    if rank == 0:
        print(f"p{i} at {address:#x} (mod 64: {address % 64}): "
              f"{'aliased' if aliased else 'copied'}", flush=True)
    del array
if jax.__version__ == "0.10.2":
    check(seen == {True, False}, f"both an alias and a copy among the views (saw {seen})")
    # The other way, as the example hands gradients over: numpy reads JAX's own buffer, read-only
    # (Unit.write_grad copies it into the library's).
    grad = jnp.arange(8, dtype=jnp.float32) * 2
    seen_by_numpy = np.asarray(grad)
    check(seen_by_numpy.ctypes.data == grad.unsafe_buffer_pointer()
          and not seen_by_numpy.flags.writeable, "np.asarray of a JAX array: its buffer, read-only")
unit.reshard()
unit.destroy()

ctx.finalize()
finish(f"JAX MLP on {world} ranks equals single-process JAX (jax {jax.__version__})",
       show=rank == 0)
