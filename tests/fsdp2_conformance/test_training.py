"""Behaviours of FSDP2's test_fully_shard_training.py (conformance.py runs each against
fully_shard and FullyShard)."""
import copy

from conformance import allreduce_grads, assert_close, batch, behaviour, nn, run, torch


class MLP(nn.Module):
    def __init__(self, dim=16, blocks=3):
        super().__init__()
        torch.manual_seed(0)
        self.blocks = nn.ModuleList(
            nn.Sequential(nn.Linear(dim, dim), nn.ReLU(), nn.Linear(dim, dim))
            for _ in range(blocks))
        self.head = nn.Linear(dim, 1)

    def forward(self, x):
        for b in self.blocks:
            x = x + b(x)
        return self.head(x)


@behaviour("train parity with DDP, Adam over model.parameters()",
           "test_fully_shard_training.py::TestFullyShard1DTrainingCore::test_train_parity_single_group",
           known="model.parameters() are empty views between uses (item 4 of issue 32)")
def train_parity(impl):
    model = MLP()
    ref = copy.deepcopy(model)
    impl.shard(model, list(model.blocks))
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    ref_opt = torch.optim.Adam(ref.parameters(), lr=1e-2)
    for step in range(5):
        x = batch(step, 8, 16)
        losses = []
        for m, o in ((ref, ref_opt), (model, opt)):
            o.zero_grad()
            loss = m(x).square().mean()
            loss.backward()
            if m is ref:
                allreduce_grads(ref)
            o.step()
            losses.append(loss.detach())
        assert_close(losses[1], losses[0], f"loss at step {step}")


if __name__ == "__main__":
    run()
