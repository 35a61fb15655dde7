"""Hugging Face transformers models through libfsdp.pytorch.FullyShard: a GPT-2 causal LM (its
lm_head tied to the token embedding) and a Llama one (untied), built from small configs, wrapped as
with FSDP2 (each decoder layer, then the root), trained on 2 ranks against one unsharded copy of
the same model trained on the global batch (what DDP computes); losses within 1e-5 relative at
every step. The checkpoint is then exported with `fsdp-ckpt export` and loaded by
`from_pretrained`: every tensor equals FullyShard.state_dict(), and the safetensors package reads
the file back.
    test_pytorch_hf.py --mpiexec mpiexec.mpich --tool build/src/fsdp-ckpt --workdir DIR
Exit 77 (skipped) without PyTorch or transformers."""
import argparse
import copy
import os
import subprocess
import sys

try:
    import torch
    import transformers
    import safetensors.torch
except ImportError as e:
    print(f"skipped: {e.name} is not installed for {sys.executable}")
    sys.exit(77)

STEPS, SEQ, BATCH = 6, 16, 2


def build(kind):
    torch.manual_seed(0)
    if kind == "gpt2":
        config = transformers.GPT2Config(vocab_size=96, n_positions=32, n_embd=32, n_layer=2,
                                         n_head=2, resid_pdrop=0.0, embd_pdrop=0.0,
                                         attn_pdrop=0.0, tie_word_embeddings=True)
    else:
        config = transformers.LlamaConfig(vocab_size=96, hidden_size=32, intermediate_size=64,
                                          num_hidden_layers=2, num_attention_heads=4,
                                          num_key_value_heads=2, max_position_embeddings=32,
                                          tie_word_embeddings=False)
    config._attn_implementation = "eager"
    model = transformers.AutoModelForCausalLM.from_config(config, attn_implementation="eager")
    layers = model.transformer.h if kind == "gpt2" else model.model.layers
    return config, model, layers


def batch(step, rank):
    g = torch.Generator().manual_seed(step * 101 + rank)
    return torch.randint(96, (BATCH, SEQ), generator=g)


def train(kind, workdir):
    import libfsdp
    from libfsdp.pytorch import FullyShard
    torch.set_num_threads(1)
    ctx = libfsdp.init()
    rank, world = ctx.group()
    config, model, layers = build(kind)
    reference = copy.deepcopy(model)
    sharded = FullyShard(ctx, model, layers)
    opt = ctx.optimizer("adamw", sharded.units, lr=1e-3, weight_decay=0.01)
    ref_opt = torch.optim.AdamW(reference.parameters(), lr=1e-3, weight_decay=0.01)
    worst = 0.0
    for step in range(STEPS):
        x = batch(step, rank)
        loss = model(input_ids=x, labels=x).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
        mine = None
        for r in range(world):
            xr = batch(step, r)
            ref_loss = reference(input_ids=xr, labels=xr).loss
            (ref_loss / world).backward()
            if r == rank:
                mine = ref_loss.item()
        ref_opt.step()
        ref_opt.zero_grad()
        worst = max(worst, abs(loss.item() - mine) / abs(mine))
    print(f"rank {rank}: {kind}: largest relative loss difference to the unsharded reference "
          f"{worst:.2e} over {STEPS} steps", flush=True)
    state = sharded.state_dict()
    ctx.save(os.path.join(workdir, f"{kind}.h5"))
    if rank == 0:
        out = os.path.join(workdir, kind)
        os.makedirs(out, exist_ok=True)
        config.save_pretrained(out)
        torch.save(state, os.path.join(workdir, f"{kind}.state.pt"))
    ctx.finalize()
    sys.exit(0 if worst <= 1e-5 else 1)


def check_export(kind, a):
    out = os.path.join(a.workdir, kind)
    st = os.path.join(out, "model.safetensors")
    subprocess.run([a.tool, "export", os.path.join(a.workdir, f"{kind}.h5"), "--to", st],
                   check=True)
    state = torch.load(os.path.join(a.workdir, f"{kind}.state.pt"))
    loaded = transformers.AutoModelForCausalLM.from_pretrained(out).state_dict()
    failures = []
    for name, value in loaded.items():
        if name not in state:
            failures.append(f"{name} not in FullyShard.state_dict()")
        elif not torch.equal(value, state[name]):
            failures.append(f"{name} differs")
    with safetensors.safe_open(st, framework="pt") as f:
        for name in f.keys():
            if not torch.equal(f.get_tensor(name), state[name]):
                failures.append(f"safetensors {name} differs")
    if kind == "gpt2":
        tied = loaded["lm_head.weight"].data_ptr() == loaded["transformer.wte.weight"].data_ptr()
        if not tied:
            failures.append("from_pretrained did not tie lm_head to the embedding")
    print(f"{kind}: from_pretrained loaded {len(loaded)} tensors: "
          f"{'OK' if not failures else failures}")
    return not failures


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--mpiexec", default="mpiexec.mpich")
    p.add_argument("--tool", default="fsdp-ckpt")
    p.add_argument("--workdir", default=".")
    p.add_argument("--train", choices=("gpt2", "llama"))
    a = p.parse_args()
    os.makedirs(a.workdir, exist_ok=True)
    if a.train:
        train(a.train, a.workdir)
    ok = True
    for kind in ("gpt2", "llama"):
        rc = subprocess.run([a.mpiexec, "-n", "2", sys.executable, os.path.abspath(__file__),
                             "--train", kind, "--workdir", a.workdir]).returncode
        ok = ok and rc == 0 and check_export(kind, a)
    print("OK" if ok else "FAILED")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
