"""The same GPT decoder, data, seed and AdamW trained with PyTorch FSDP2 (fully_shard on each
block, then on the root, as the libfsdp run; MixedPrecisionPolicy for bf16/fp16, with a GradScaler
for fp16) on a CPU device mesh over gloo: the PyTorch sharded baseline. Needs PyTorch >= 2.6.
    python3 train_gpt_fsdp2.py --nproc 2 --steps 200 --out 'fsdp2.{rank}.json'"""
import os
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import gpt_model


def train(rank, world, a, port):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    mesh = init_device_mesh("cpu", (world,))
    model = gpt_model.model(a)
    policy = MixedPrecisionPolicy()
    if a.precision != "fp32":
        policy = MixedPrecisionPolicy(param_dtype=gpt_model.DTYPES[a.precision],
                                      reduce_dtype=torch.float32)
    for block in model.blocks:
        fully_shard(block, mesh=mesh, mp_policy=policy)
    fully_shard(model, mesh=mesh, mp_policy=policy)
    scaler = torch.amp.GradScaler("cpu") if a.precision == "fp16" else None
    gpt_model.train_torch(a, model, rank, world, "FSDP2", "PyTorch FSDP2 (gloo)", scaler=scaler)
    dist.destroy_process_group()


if __name__ == "__main__":
    nproc = 2
    if "--nproc" in sys.argv:  # ours, not the model's
        i = sys.argv.index("--nproc")
        nproc = int(sys.argv[i + 1])
        del sys.argv[i:i + 2]
    args = gpt_model.arguments()
    mp.spawn(train, args=(nproc, args, 29500 + os.getpid() % 1000), nprocs=nproc, join=True)
