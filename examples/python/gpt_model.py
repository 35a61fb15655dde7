"""The GPT-style decoder and the synthetic task of ../shared/reference/manual-fsdp-reimplementation
.txt, shared by the libfsdp and the DDP runs so that both train the same model on the same data:
next-token prediction on a repeating period-5 pattern with 5% noise, vocabulary 16,384, AdamW at
lr 2e-4. Sizes are scaled down to train in minutes on 2 CPU cores."""
import argparse
import json
import resource

import torch
import torch.nn as nn
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
    p.add_argument("--out", help="JSON output per rank; {rank} is replaced by the rank")
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

    def forward(self, idx):
        x = self.embed(idx)
        for block in self.blocks:
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


def peak_rss_mib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def train_torch(a, model, rank, world, tag, name):
    """The PyTorch-side loop of the baselines (DDP, FSDP2): AdamW, a.steps steps, step 0 untimed;
    writes the report."""
    import time
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, weight_decay=0.0)
    losses, start = [], None
    for step in range(a.steps):
        if step == 1:
            start = time.perf_counter()
        x, y = batch(a, step, rank)
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
        if rank == 0 and (step % 20 == 0 or step == a.steps - 1):
            print(f"{tag:7s} step {step:4d}  loss {losses[-1]:.4f}", flush=True)
    seconds = time.perf_counter() - start if start else 1.0
    report(a, name, rank, world, losses, seconds, a.steps - 1)


def report(a, name, rank, world, losses, seconds, timed_steps, extra=None):
    """Writes this rank's loss curve, throughput and peak RSS to a.out ({rank} replaced)."""
    result = {"name": name, "rank": rank, "world": world, "steps": a.steps, "losses": losses,
              "tokens_per_s": timed_steps * a.batch * a.seq * world / seconds,
              "peak_rss_mib": peak_rss_mib()}
    result.update(extra or {})
    if a.out:
        with open(a.out.replace("{rank}", str(rank)), "w") as f:
            json.dump(result, f)
    return result
