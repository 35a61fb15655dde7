"""Behaviours of FSDP2's test_fully_shard_shared_params.py (conformance.py runs each against
fully_shard and FullyShard): an encoder-decoder transformer whose output projection is tied to
its token embedding (common_fsdp's TransformerWithSharedParams, smaller, without its BatchNorm),
fully_shard on every encoder and decoder layer, then on the root, which holds the tied weight;
it trains like DDP.

The optimizer is Adam: torch.optim.Adam over model.parameters() with fully_shard, the library's
AdamW with weight_decay=0 (the same update) over the units with FullyShard, as a user of each
does (Adam over FullyShard's model.parameters() is item 4 of issue 32, test_training.py)."""
import copy

from conformance import agree, allreduce_grads, assert_close, behaviour, nn, rank, run, torch
from torch.distributed._composable import checkpoint

VOCAB, D_MODEL = 23, 16
STEPS = 6
SOURCE = "test_fully_shard_shared_params.py::TestFullyShardSharedParams::test_train_shared_params"


class TransformerWithSharedParams(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(42)
        self.embed_tokens = nn.Embedding(VOCAB, D_MODEL)
        self.transformer = nn.Transformer(d_model=D_MODEL, num_encoder_layers=2,
                                          num_decoder_layers=2, dim_feedforward=8, dropout=0.0,
                                          nhead=2)
        self.output_proj = nn.Linear(D_MODEL, VOCAB)
        self.output_proj.weight = self.embed_tokens.weight  # tied

    def forward(self, src_ids, tgt_ids):
        src = self.embed_tokens(src_ids)
        src = src + torch.ones_like(src)  # common_fsdp's model adds a BatchNorm here
        tgt = self.embed_tokens(tgt_ids)
        return self.output_proj(self.transformer(src, tgt))

    def get_input(self, generator):
        src = torch.randint(0, VOCAB, (5, 2), generator=generator)
        tgt = torch.randint(0, VOCAB, (4, 2), generator=generator)
        return src, tgt


def train_shared_params(impl, reshard_after_forward, use_activation_checkpointing):
    model = TransformerWithSharedParams()
    ref = copy.deepcopy(model)
    ref_opt = torch.optim.Adam(ref.parameters(), lr=1e-2)
    layers = list(model.transformer.encoder.layers) + list(model.transformer.decoder.layers)
    if use_activation_checkpointing:
        for layer in layers:
            checkpoint(layer)
    handle = impl.shard(model, layers, reshard_after_forward=reshard_after_forward)
    agree(lambda: assert_close(model.output_proj.weight is model.embed_tokens.weight, True,
                        "the weight is still tied after sharding"))
    if impl.is_fsdp2:
        opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    else:
        opt = impl.ctx.optimizer("adamw", handle.units, lr=1e-2, weight_decay=0.0)
    try:
        generator = torch.Generator().manual_seed(42 + rank + 1)
        for step in range(STEPS):
            inp = ref.get_input(generator)
            losses = []
            for m, o in ((ref, ref_opt), (model, opt)):
                if o is ref_opt:
                    o.zero_grad(set_to_none=(step % 2 == 0))
                else:
                    o.zero_grad()
                loss = m(*inp).sum()
                loss.backward()
                if m is ref:
                    allreduce_grads(ref)
                o.step()
                losses.append(loss.detach())
            agree(lambda: assert_close(losses[1], losses[0], f"loss at step {step}"))
        # Losses only, as FSDP2's test: the attention's key bias has a gradient that is zero
        # but for rounding (softmax ignores it), which Adam scales up to lr-sized steps, so the
        # parameters differ there whenever the reduction rounds differently from all-reduce.
    finally:
        if not impl.is_fsdp2:
            opt.destroy()


@behaviour("tied embedding/output weight trains like DDP (reshard_after_forward=True, False)",
           SOURCE + " (use_activation_checkpointing=False)")
def shared_params(impl):
    for reshard_after_forward in (True, False):
        train_shared_params(impl, reshard_after_forward, False)
        if not impl.is_fsdp2:  # one model per context at a time
            for unit in impl.handles[-1].units:
                unit.destroy()


@behaviour("tied embedding/output weight with activation checkpointing "
           "(torch.distributed._composable.checkpoint) trains like DDP "
           "(reshard_after_forward=True, False)",
           SOURCE + " (use_activation_checkpointing=True)")
def shared_params_checkpointed(impl):
    for reshard_after_forward in (True, False):
        train_shared_params(impl, reshard_after_forward, True)
        if not impl.is_fsdp2:
            for unit in impl.handles[-1].units:
                unit.destroy()


if __name__ == "__main__":
    run()
