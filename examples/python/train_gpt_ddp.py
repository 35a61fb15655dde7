"""The same GPT decoder, data, seed and AdamW trained with PyTorch DistributedDataParallel over
gloo on CPU (bf16/fp16: torch.autocast, with a GradScaler for fp16), or with --no-comm as one
independent replica per process (no communication at all: the compute-only ceiling).
    python3 train_gpt_ddp.py --nproc 2 --steps 200 --out 'ddp.{rank}.json'"""
import os
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import gpt_model


def train(rank, world, a, port, no_comm):
    torch.set_num_threads(1)
    model = gpt_model.model(a)
    if not no_comm:
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        dist.init_process_group("gloo", rank=rank, world_size=world)
        model = torch.nn.parallel.DistributedDataParallel(model)
    scaler = torch.amp.GradScaler("cpu") if a.precision == "fp16" else None
    tag, name = ("local", "no communication") if no_comm else ("DDP", "DDP (gloo)")
    gpt_model.train_torch(a, model, rank, world, tag, name, autocast=a.precision != "fp32",
                          scaler=scaler)
    if not no_comm:
        dist.destroy_process_group()


if __name__ == "__main__":
    nproc, no_comm = 2, "--no-comm" in sys.argv
    if no_comm:
        sys.argv.remove("--no-comm")
    if "--nproc" in sys.argv:  # ours, not the model's
        i = sys.argv.index("--nproc")
        nproc = int(sys.argv[i + 1])
        del sys.argv[i:i + 2]
    args = gpt_model.arguments()
    mp.spawn(train, args=(nproc, args, 29500 + os.getpid() % 1000, no_comm), nprocs=nproc,
             join=True)
