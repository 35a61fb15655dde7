"""The planner's activation estimate (libfsdp.plan, doc/planning-model.md) against what PyTorch
keeps for backward, measured: the bytes of every tensor autograd saves in a forward of
transformers' GPT-2 (eager attention, dropout on, exact GELU, bfloat16; the parameters left
out), per layer as the difference between 4 and 2 layers (which cancels the embeddings). The
estimate is Korthikanti et al.'s list of a Megatron layer's tensors; transformers' layer keeps a
few more (the causal mask's selection of the scores, the scaled scores), about 11% at this shape,
so the test asks for agreement within 15%, and for the estimate not to exceed the measurement.
Argument: tests/data/plan/gpt2.json (the 12-layer shape the estimate is asked for). Exit 77
(skipped) without PyTorch or transformers."""
import sys

try:
    import torch
    from transformers import GPT2Config, GPT2Model
except ImportError as e:
    print(f"skipped: {e}")
    sys.exit(77)

import libfsdp

S, B = 256, 2


def saved_bytes(layers):
    cfg = GPT2Config(n_layer=layers, activation_function="gelu")
    cfg._attn_implementation = "eager"
    torch.manual_seed(0)
    model = GPT2Model(cfg).to(torch.bfloat16).train()
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    storages = {}

    def pack(t):
        s = t.untyped_storage()
        if s.data_ptr() not in params:
            storages[s.data_ptr()] = s.nbytes()
        return t
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(torch.randint(0, cfg.vocab_size, (B, S)))
    return sum(storages.values())


measured = (saved_bytes(4) - saved_bytes(2)) / 2
plan = libfsdp.plan(sys.argv[1], "hf", 1, param_dtype="bfloat16", batch_size=B,
                    sequence_length=S, transport="mpi")
estimate = plan["memory"]["activation_bytes"] / 12
ratio = measured / estimate
print(f"per layer: planned {estimate:.0f} bytes, PyTorch saves {measured:.0f} ({ratio:.3f}x)")
ok = 1.0 <= ratio <= 1.15
print("PASS: activations against PyTorch" if ok else "FAIL: the estimate is off")
sys.exit(0 if ok else 1)
