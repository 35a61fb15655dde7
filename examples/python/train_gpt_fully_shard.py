"""The GPT decoder trained as train_gpt_fsdp2.py trains it (fully_shard on each block, then on the
root; MixedPrecisionPolicy for bf16/fp16 with a GradScaler for fp16; torch.optim.AdamW over
model.parameters()), with one change: fully_shard is libfsdp's (`from libfsdp.pytorch import
fully_shard`), which shards, gathers and reduces through the library. Run under MPI:
    mpiexec -n 2 python3 train_gpt_fully_shard.py --steps 200 --out 'fully_shard.{rank}.json'"""
import torch
import torch.distributed as dist
from torch.distributed.fsdp import MixedPrecisionPolicy

import gpt_model
from libfsdp.pytorch import fully_shard  # the one line that differs from FSDP2's program

a = gpt_model.arguments()
torch.set_num_threads(1)
model = gpt_model.model(a)
policy = MixedPrecisionPolicy()
if a.precision != "fp32":
    policy = MixedPrecisionPolicy(param_dtype=gpt_model.DTYPES[a.precision],
                                  reduce_dtype=torch.float32)
for block in model.blocks:
    fully_shard(block, mp_policy=policy)
fully_shard(model, mp_policy=policy)  # torch.distributed's group: made by the first call
rank, world = dist.get_rank(), dist.get_world_size()
scaler = torch.amp.GradScaler("cpu") if a.precision == "fp16" else None
gpt_model.train_torch(a, model, rank, world, "fully_shard", "libfsdp fully_shard (drop-in)",
                      scaler=scaler)
dist.destroy_process_group()
