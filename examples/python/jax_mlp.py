"""A small MLP trained with JAX doing forward and backward on the CPU and libfsdp doing the rest:
the sharding, the unshard (all-gather) of each layer, the mean reduction of the gradients and the
optimizer step (the library's AdamW or SGD on its shards). Each rank takes its own micro-batch of
one global batch, as data-parallel training does; one unit per layer. Run under MPI:
    mpiexec -n 2 python3 jax_mlp.py [--optimizer adamw|sgd] [--steps 20]
Exits 77 (skipped) where JAX is not installed. tests/test_jax_mlp.py checks the losses and the
final parameters against a single-process JAX run of the same global batch.

The contract between libfsdp and a framework that is not PyTorch (here JAX; doc/python.md):
- The library owns every buffer: the master shard, the unsharded parameters, the full gradients.
  The framework never frees or keeps them; it owns only what it computes.
- Parameters: after unit.unshard(), unit.param(name) is the unsharded parameter, a view of the
  library's buffer that exports DLPack (__dlpack__, __dlpack_device__; today a numpy array). It is
  valid until unit.reshard(): there the buffer is released to the library's pool, and the next
  unshard of any unit may overwrite it.
- jnp.from_dlpack(view) may alias that buffer or copy it. JAX 0.10.2 on the CPU aliases it when
  its address is 64-byte aligned and copies it otherwise (the library aligns a parameter to 8
  elements, 32 bytes in float32, so both happen; tests/test_jax_mlp.py sees both). So, for every
  JAX array made from a view, whether or not it aliases:
    * use it only between unshard and reshard: every computation that reads it must have
      finished before reshard (JAX dispatches asynchronously: block_until_ready, or np.asarray of
      a result, waits), and nothing that may hold it survives reshard: not the array, not a
      jax.vjp closure (its residuals keep the parameters). The backward below unshards the layer
      again and recomputes its forward (jax.vjp) rather than keeping the forward's closure.
    * never write into it, nor into the view while it lives: JAX arrays are immutable and JAX
      assumes they do not change under it.
- Gradients: jax.grad / jax.vjp give JAX-owned arrays. unit.write_grad(name, g) copies one into
  the library's full gradient buffer (it reads a CPU JAX array through DLPack, np.from_dlpack,
  which waits for JAX's computation; no copy before its own), while the unit is unsharded and
  before reduce_grads. reduce_grads leaves in this rank's gradient shard the mean over the
  ranks; optimizer.step() updates the master shards in place, which the next unshard gathers.
"""
import argparse
import sys

import numpy as np

try:
    import jax
    import jax.numpy as jnp
except ImportError:
    print("SKIP: jax is not installed (bench/setup-python.sh installs it)", flush=True)
    sys.exit(77)

import libfsdp

SIZES = (8, 32, 32, 4)  # in, hidden, hidden, out: one unit (W, b) per layer
GLOBAL_BATCH = 16
HYPER = {"adamw": {"lr": 1e-2, "betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 1e-2},
         "sgd": {"lr": 5e-2, "momentum": 0.9, "weight_decay": 1e-3}}


def initial_params(seed=0, sizes=SIZES):
    """[(W, b)] per layer, float32 numpy, the same on every rank (the same seed)."""
    rng = np.random.default_rng(seed)
    return [((rng.standard_normal((n_in, n_out)) / np.sqrt(n_in)).astype(np.float32),
             (0.1 * rng.standard_normal(n_out)).astype(np.float32))
            for n_in, n_out in zip(sizes[:-1], sizes[1:])]


def global_batch(step, seed=0, sizes=SIZES, batch=GLOBAL_BATCH):
    """(x, y) of step `step`: a regression target, a fixed smooth function of x."""
    rng = np.random.default_rng([seed, step])
    x = rng.standard_normal((batch, sizes[0])).astype(np.float32)
    mix = np.random.default_rng(seed + 1).standard_normal((sizes[0], sizes[-1]))
    return x, np.sin(x @ mix).astype(np.float32)


def layer(w, b, x, last):
    y = x @ w + b
    return y if last else jnp.tanh(y)


def loss_fn(pred, y):
    return jnp.mean((pred - y) ** 2)


def jax_param(unit, name):
    """The unsharded parameter as a JAX array through DLPack (an alias or a copy: see above);
    valid until unit.reshard()."""
    return jnp.from_dlpack(unit.param(name))


def train_step(ctx, units, opt, x, y):
    """One step on this rank's micro-batch (x, y); returns the global batch's loss (the mean over
    the ranks of their micro-batches' losses, equal sizes)."""
    n = len(units)
    ctx.begin_forward()
    inputs = []  # each layer's input activation: JAX-owned, computed, so it survives reshard
    h = jnp.asarray(x)
    for k, unit in enumerate(units):
        unit.unshard()
        inputs.append(h)
        h = layer(jax_param(unit, "w"), jax_param(unit, "b"), h, k == n - 1)
        h.block_until_ready()  # the last read of the parameters' buffer before reshard
        unit.reshard()
    loss, dloss = jax.value_and_grad(loss_fn)(h, jnp.asarray(y))
    ctx.begin_backward()
    cotangent = dloss
    for k in reversed(range(n)):
        unit = units[k]
        unit.unshard()
        # The layer's forward again, with parameters valid now (the forward's were resharded).
        _, vjp = jax.vjp(lambda w, b, xin: layer(w, b, xin, k == n - 1),
                         jax_param(unit, "w"), jax_param(unit, "b"), inputs[k])
        gw, gb, cotangent = vjp(cotangent)
        unit.write_grad("w", gw)  # read through DLPack (which waits for JAX), copied in
        unit.write_grad("b", gb)
        cotangent.block_until_ready()
        del vjp  # holds the parameters: not kept past reshard
        unit.reshard()
        unit.reduce_grads()  # this rank's gradient shard: the mean over the ranks
    opt.step()
    opt.zero_grad()
    total = ctx.allreduce(np.array([float(loss)]))[0]
    return total / ctx.group()[1]


def train(ctx, kind="adamw", steps=20, seed=0):
    """Trains from initial_params(seed) on global_batch(0..steps-1); returns (the global losses,
    the final parameters [(W, b)] gathered from the master shards)."""
    rank, world = ctx.group()
    if GLOBAL_BATCH % world:
        raise SystemExit(f"the global batch {GLOBAL_BATCH} must split evenly over {world} ranks")
    micro = GLOBAL_BATCH // world
    units = [ctx.unit([("w", w), ("b", b)], name=f"layer{k}", param_dtype="float32")
             for k, (w, b) in enumerate(initial_params(seed))]
    opt = ctx.optimizer(kind, units, **HYPER[kind])
    losses = []
    for step in range(steps):
        x, y = global_batch(step, seed)
        mine = slice(rank * micro, (rank + 1) * micro)
        losses.append(train_step(ctx, units, opt, x[mine], y[mine]))
    final = [tuple(unit.gather()) for unit in units]
    opt.destroy()
    for unit in units:
        unit.destroy()
    return losses, final


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--optimizer", choices=sorted(HYPER), default="adamw")
    p.add_argument("--steps", type=int, default=20)
    a = p.parse_args()
    ctx = libfsdp.init()
    rank, world = ctx.group()
    losses, _ = train(ctx, a.optimizer, a.steps)
    if rank == 0:
        for step, loss in enumerate(losses):
            print(f"step {step:3d}  loss {loss:.6f}")
        print(f"jax {jax.__version__}, {world} ranks, {a.optimizer}: loss {losses[0]:.4f} -> "
              f"{losses[-1]:.4f}")
    ctx.finalize()
    if losses[-1] >= losses[0]:
        print("FAIL: the loss did not go down", flush=True)
        sys.exit(1)


if __name__ == "__main__":
    main()
