"""The same GPT decoder, data, seed and AdamW trained with PyTorch DistributedDataParallel over
gloo on CPU: the reference the libfsdp run is compared with.
    python3 train_gpt_ddp.py --nproc 2 --steps 200 --out 'ddp.{rank}.json'"""
import os
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import gpt_model


def train(rank, world, a, port):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    model = torch.nn.parallel.DistributedDataParallel(gpt_model.model(a))
    gpt_model.train_torch(a, model, rank, world, "DDP", "DDP (gloo)")
    dist.destroy_process_group()


if __name__ == "__main__":
    nproc = 2
    if "--nproc" in sys.argv:  # ours, not the model's
        i = sys.argv.index("--nproc")
        nproc = int(sys.argv[i + 1])
        del sys.argv[i:i + 2]
    args = gpt_model.arguments()
    mp.spawn(train, args=(nproc, args, 29500 + os.getpid() % 1000), nprocs=nproc, join=True)
