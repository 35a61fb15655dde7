"""The GPT decoder trained with PyTorch doing forward and backward on CPU and libfsdp doing all
sharding, communication, the AdamW step and a checkpoint. Run under MPI:
    mpiexec -n 2 python3 train_gpt_libfsdp.py --steps 200 --out 'libfsdp.{rank}.json'"""
import time

import torch

import gpt_model
import libfsdp
import libfsdp.pytorch

a = gpt_model.arguments()
torch.set_num_threads(1)
ctx = libfsdp.init()  # full sharding over MPI_COMM_WORLD
rank, world = ctx.group()
model = gpt_model.model(a)
sharded = libfsdp.pytorch.FullyShard(ctx, model, [model.embed, *model.blocks, model.head])
opt = ctx.optimizer("adamw", sharded.units, lr=a.lr, weight_decay=0.0)

losses, start = [], None
for step in range(a.steps):
    if step == 1:
        start = time.perf_counter()  # step 0 is the warm-up
    x, y = gpt_model.batch(a, step, rank)
    loss = gpt_model.loss_fn(sharded(x), y)
    sharded.backward(loss)
    opt.step()
    opt.zero_grad()
    losses.append(loss.item())  # this rank's batch; the DDP run reports the same
    if rank == 0 and (step % 20 == 0 or step == a.steps - 1):
        print(f"libfsdp step {step:4d}  loss {losses[-1]:.4f}", flush=True)
seconds = time.perf_counter() - start if start else 1.0
stats = ctx.memory_stats()
if a.out:  # the checkpoint any rank count can resume: model and AdamW state
    ctx.save(a.out.replace("{rank}", "model") + ".h5", [opt], {"step": str(a.steps)})
gpt_model.report(a, "libfsdp", rank, world, losses, seconds, a.steps - 1,
                 {"library_peak_bytes": stats["peak_bytes"],
                  "unsharded_model_bytes": stats["unsharded_model_bytes"]})
ctx.finalize()
