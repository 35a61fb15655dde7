"""The GPT decoder trained with PyTorch doing forward and backward on CPU and libfsdp doing all
sharding, communication, the AdamW step and a checkpoint, wrapped as with FSDP2 (each block, then
the root). With --torch-optim, torch.optim.AdamW over model.parameters() (each this rank's part of its shard)
steps instead of the library's AdamW. Run under MPI:
    mpiexec -n 2 python3 train_gpt_libfsdp.py --steps 200 --tied --ckpt --precision bf16 \
        --out 'libfsdp.{rank}.json'"""
import torch

import gpt_model
import libfsdp
from libfsdp.pytorch import FullyShard, MixedPrecisionPolicy

a = gpt_model.arguments()
torch.set_num_threads(1)
ctx = libfsdp.init()  # full sharding over MPI_COMM_WORLD
rank, world = ctx.group()
model = gpt_model.model(a)
policy = None
if a.precision != "fp32":  # float32 masters and optimizer state, compute in bf16/fp16
    policy = MixedPrecisionPolicy(param_dtype=gpt_model.DTYPES[a.precision],
                                  reduce_dtype=torch.float32)
sharded = FullyShard(ctx, model, model.blocks, mp_policy=policy)
if a.torch_optim:  # PyTorch's own over the parameters, which are this rank's parts of the shards
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, weight_decay=0.0)
    scaler = torch.amp.GradScaler("cpu") if a.precision == "fp16" else None
else:
    opt = ctx.optimizer("adamw", sharded.units, lr=a.lr, weight_decay=0.0)
    scaler = libfsdp.GradScaler(ctx) if a.precision == "fp16" else None

ctx.reset_peak_memory()
losses, times = gpt_model.run_steps(a, model, opt, rank, "libfsdp", scaler=scaler)
stats = ctx.memory_stats()
if a.out and not a.no_save and not a.torch_optim:  # any rank count resumes it: model and AdamW
    ctx.save(a.out.replace("{rank}", "model") + ".h5", [opt], {"step": str(a.steps)})
gpt_model.report(a, "libfsdp", rank, world, losses, times,
                 {"library_peak_bytes": stats["peak_bytes"],
                  "library_peak_parameter_bytes": stats["peak_parameter_bytes"],
                  "unsharded_model_bytes": stats["unsharded_model_bytes"]})
ctx.finalize()
