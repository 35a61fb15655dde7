"""The same GPT decoder, data, seed and AdamW trained with PyTorch FSDP2 (fully_shard, one unit per
embedding, block and head as in the libfsdp run, then the root) on a CPU device mesh over gloo:
the PyTorch sharded baseline of the end-to-end benchmark. Needs PyTorch >= 2.6.
    python3 train_gpt_fsdp2.py --nproc 2 --steps 200 --out 'fsdp2.{rank}.json'"""
import os
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import gpt_model


def train(rank, world, a, port):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    mesh = init_device_mesh("cpu", (world,))
    model = gpt_model.model(a)
    for unit in [model.embed, *model.blocks, model.head]:
        fully_shard(unit, mesh=mesh)
    fully_shard(model, mesh=mesh)
    gpt_model.train_torch(a, model, rank, world, "FSDP2", "PyTorch FSDP2 (gloo)")
    dist.destroy_process_group()


if __name__ == "__main__":
    nproc = 2
    if "--nproc" in sys.argv:  # ours, not the model's
        i = sys.argv.index("--nproc")
        nproc = int(sys.argv[i + 1])
        del sys.argv[i:i + 2]
    args = gpt_model.arguments()
    mp.spawn(train, args=(nproc, args, 29500 + os.getpid() % 1000), nprocs=nproc, join=True)
