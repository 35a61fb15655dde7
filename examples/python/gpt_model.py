"""The GPT-style decoder and the synthetic task of ../shared/reference/manual-fsdp-reimplementation
.txt, shared by the libfsdp and the DDP runs so that both train the same model on the same data:
next-token prediction on a repeating period-5 pattern with 5% noise, vocabulary 16,384, AdamW at
lr 2e-4. Sizes are scaled down to train in minutes on 2 CPU cores."""
import argparse
import json
import resource

import torch
import torch.nn as nn
import torch.utils.checkpoint
import torch.nn.functional as F

VOCAB, PERIOD, NOISE = 16384, 5, 0.05


def arguments():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--dim", type=int, default=64)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--seq", type=int, default=32)
    p.add_argument("--batch", type=int, default=8, help="sequences per rank and step")
    p.add_argument("--lr", type=float, default=2e-4)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--tied", action="store_true",
                   help="the output head reuses the token embedding (as the seed's GPT)")
    p.add_argument("--ckpt", action="store_true",
                   help="activation checkpointing around each block (non-reentrant)")
    p.add_argument("--precision", choices=("fp32", "bf16", "fp16"), default="fp32",
                   help="compute dtype: bf16/fp16 with float32 master weights")
    p.add_argument("--out", help="JSON output per rank; {rank} is replaced by the rank")
    p.add_argument("--no-save", action="store_true", help="libfsdp: no checkpoint at the end")
    p.add_argument("--torch-optim", action="store_true",
                   help="libfsdp: torch.optim.AdamW over model.parameters() (the shard views) and "
                   "torch.amp.GradScaler, instead of the library's AdamW and GradScaler")
    return p.parse_args()


class Block(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.fc1, self.fc2 = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / (d // self.heads) ** 0.5
        causal = torch.ones(t, t, dtype=torch.bool).tril()
        att = att.masked_fill(~causal, float("-inf")).softmax(dim=-1)
        x = x + self.proj((att @ v).transpose(1, 2).reshape(b, t, d))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class Embedding(nn.Module):
    def __init__(self, dim, seq):
        super().__init__()
        self.tok, self.pos = nn.Embedding(VOCAB, dim), nn.Embedding(seq, dim)

    def forward(self, idx):
        return self.tok(idx) + self.pos(torch.arange(idx.shape[1]))


class Head(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.ln, self.out = nn.LayerNorm(dim), nn.Linear(dim, VOCAB, bias=False)

    def forward(self, x):
        return self.out(self.ln(x))


class GPT(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.embed = Embedding(a.dim, a.seq)
        self.blocks = nn.ModuleList(Block(a.dim, a.heads) for _ in range(a.layers))
        self.head = Head(a.dim)
        if getattr(a, "tied", False):  # GPT-2's init for a weight that also makes the logits
            nn.init.normal_(self.embed.tok.weight, std=0.02)
            self.head.out.weight = self.embed.tok.weight
        self.ckpt = getattr(a, "ckpt", False)

    def forward(self, idx):
        x = self.embed(idx)
        for block in self.blocks:
            if self.ckpt and torch.is_grad_enabled():
                x = torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False)
            else:
                x = block(x)
        return self.head(x)


def model(a):
    torch.manual_seed(a.seed)  # the same initial model on every rank and in both runs
    return GPT(a)


def batch(a, step, rank):
    """This rank's sequences at `step`: the global batch is the same whatever trains on it."""
    g = torch.Generator().manual_seed(a.seed * 1_000_003 + step * 1009 + rank)
    pattern = torch.randint(VOCAB, (PERIOD,), generator=torch.Generator().manual_seed(a.seed))
    start = torch.randint(PERIOD, (a.batch, 1), generator=g)
    seq = pattern[(start + torch.arange(a.seq + 1)) % PERIOD]
    noisy = torch.rand(seq.shape, generator=g) < NOISE
    seq = torch.where(noisy, torch.randint(VOCAB, seq.shape, generator=g), seq)
    return seq[:, :-1], seq[:, 1:]


def loss_fn(logits, targets):
    return F.cross_entropy(logits.reshape(-1, VOCAB), targets.reshape(-1))


DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def reset_peak_rss():
    """Starts the peak-RSS measure here (Linux: VmHWM reset through /proc/self/clear_refs), so
    that the peak is the training loop's, not the construction's."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass


def peak_rss_mib():
    try:
        for line in open("/proc/self/status"):
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def run_steps(a, model, opt, rank, tag, autocast=False, scaler=None):
    """a.steps training steps of `model` on this rank's batches with `opt` (torch's or libfsdp's;
    `scaler`: torch's or libfsdp's GradScaler for float16; `autocast`: forward under
    torch.autocast("cpu", a.precision's dtype)). Returns the losses and each step's seconds; the
    peak RSS is measured from here on."""
    import contextlib
    import time
    losses, times = [], []
    reset_peak_rss()
    for step in range(a.steps):
        start = time.perf_counter()
        x, y = batch(a, step, rank)
        with (torch.autocast("cpu", dtype=DTYPES[a.precision]) if autocast
              else contextlib.nullcontext()):
            loss = loss_fn(model(x), y)
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        else:
            loss.backward()
            opt.step()
        opt.zero_grad()
        losses.append(loss.item())  # this rank's batch
        times.append(time.perf_counter() - start)
        if rank == 0 and (step % 20 == 0 or step == a.steps - 1):
            print(f"{tag:7s} step {step:4d}  loss {losses[-1]:.4f}", flush=True)
    return losses, times


def train_torch(a, model, rank, world, tag, name, autocast=False, scaler=None):
    """The PyTorch-side run of the baselines (DDP, FSDP2, no communication): torch's AdamW, step 0
    untimed; writes the report."""
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, weight_decay=0.0)
    losses, times = run_steps(a, model, opt, rank, tag, autocast, scaler)
    report(a, name, rank, world, losses, times)


def report(a, name, rank, world, losses, times, extra=None):
    """Writes this rank's loss curve, throughput (tokens of every rank per second, from the median
    step time after the first step) and peak RSS to a.out ({rank} replaced)."""
    import statistics
    timed = times[1:] or times
    result = {"name": name, "rank": rank, "world": world, "steps": a.steps, "losses": losses,
              "step_seconds": times,
              "tokens_per_s": a.batch * a.seq * world / statistics.median(timed),
              "peak_rss_mib": peak_rss_mib()}
    result.update(extra or {})
    if a.out:
        with open(a.out.replace("{rank}", str(rank)), "w") as f:
            json.dump(result, f)
    return result
