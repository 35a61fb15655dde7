"""Behaviours of FSDP2's explicit prefetch tests (test_fully_shard_comm.py, TestFullyShardPrefetch:
test_set_modules_to_forward_prefetch, test_set_modules_to_backward_prefetch), run by conformance.py
against fully_shard and FullyShard.

FSDP2's tests record the order of each layer's unshard (an all-gather issued), reshard and
post_backward (the reduction) and compare it with the expected order. Here the same events are
recorded from either implementation: FSDP2's FSDPParamGroup.unshard (when it starts an
all-gather), .reshard (when it frees one) and .post_backward; FullyShard's Unit.unshard /
.unshard_async, .reshard and .reduce_grads_async. The root's events are left out (FullyShard keeps
the root unsharded from forward to backward, as FSDP2's root does with reshard_after_forward's
default for the root), and FullyShard runs with prefetch=False, so that the explicit lists are
the only prefetch and every all-gather is one of the recorded calls (the library's own prefetch
is checked in tests/test_prefetch.c). Training then matches the unsharded model."""
import contextlib
import copy

from conformance import (allreduce_grads, assert_close, behaviour, check_sharded_parity,
                         CheckpointedBlock, nn, rank, run, torch)

import libfsdp

SOURCE = "test_fully_shard_comm.py::TestFullyShardPrefetch::"
N_LAYERS = 4


class Transformer(nn.Module):
    def __init__(self, dim=16, vocab=32):
        super().__init__()
        torch.manual_seed(7)
        self.tok = nn.Embedding(vocab, dim)
        self.layers = nn.ModuleList(CheckpointedBlock(dim) for _ in range(N_LAYERS))
        self.out = nn.Linear(dim, vocab)

    def forward(self, ids):
        h = self.tok(ids)
        for layer in self.layers:
            h = layer(h)
        return self.out(h)


@contextlib.contextmanager
def recording(impl, sharded, events):
    """Appends ("unshard" | "reshard" | "post_backward", layer name) to `events` while inside."""
    if impl.is_fsdp2:
        from torch.distributed.fsdp._fully_shard._fsdp_param_group import FSDPParamGroup
        orig = {n: getattr(FSDPParamGroup, n) for n in ("unshard", "reshard", "post_backward")}

        def unshard(self, *args, **kwargs):
            before = self._all_gather_result is None and not self.is_unsharded
            out = orig["unshard"](self, *args, **kwargs)
            if before and (self._all_gather_result is not None or self.is_unsharded):
                events.append(("unshard", self._module_fqn))
            return out

        def reshard(self, *args, **kwargs):
            before = self.is_unsharded
            out = orig["reshard"](self, *args, **kwargs)
            if before and not self.is_unsharded:
                events.append(("reshard", self._module_fqn))
            return out

        def post_backward(self, *args, **kwargs):  # recorded after its reshard, as FSDP2's test
            out = orig["post_backward"](self, *args, **kwargs)
            events.append(("post_backward", self._module_fqn))
            return out
        patched = {"unshard": unshard, "reshard": reshard, "post_backward": post_backward}
        owner = FSDPParamGroup
    else:
        names = {id(s.unit): s.where for s in sharded.states}
        owner = libfsdp.Unit
        orig = {n: getattr(owner, n) for n in ("unshard", "unshard_async", "reshard",
                                               "reduce_grads_async")}

        def record(kind, name):
            def call(self, *args, **kwargs):
                events.append((kind, names.get(id(self), "?")))
                return orig[name](self, *args, **kwargs)
            return call
        patched = {"unshard": record("unshard", "unshard"),
                   "unshard_async": record("unshard", "unshard_async"),
                   "reshard": record("reshard", "reshard"),
                   "reduce_grads_async": record("post_backward", "reduce_grads_async")}
    for n, f in patched.items():
        setattr(owner, n, f)
    try:
        yield
    finally:
        for n, f in orig.items():
            setattr(owner, n, f)


def layers_only(events):
    return [e for e in events if e[1] not in ("", "<root>", None) and e[1].startswith("layers.")]


def build(impl):
    model = Transformer()
    ref = copy.deepcopy(model)
    kw = {} if impl.is_fsdp2 else {"prefetch": False}
    sharded = impl.shard(model, list(model.layers), reshard_after_forward=True, **kw)
    return model, ref, sharded


def train_and_compare(model, ref, events_step, steps=2):
    """Trains model and the unsharded reference with SGD on the same batches; losses and final
    parameters match."""
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    for step in range(steps):
        g = torch.Generator().manual_seed(10 * step + rank)
        ids = torch.randint(0, 32, (2, 6), generator=g)
        loss = events_step(model, ids)
        ref_loss = ref(ids).square().mean()
        ref_loss.backward()
        allreduce_grads(ref)
        assert_close(loss.detach(), ref_loss.detach(), f"loss at step {step}")
        opt.step()
        ref_opt.step()
        opt.zero_grad()
        ref_opt.zero_grad()


def L(i):
    return f"layers.{i}"


# ---- test_set_modules_to_forward_prefetch -------------------------------------------------------
def forward_prefetch(impl, num_to_prefetch):
    model, ref, sharded = build(impl)
    for i, layer in enumerate(model.layers):
        if i < N_LAYERS - num_to_prefetch:
            targets = [model.layers[i + j] for j in range(1, num_to_prefetch + 1)]
            layer.set_modules_to_forward_prefetch(targets)
    if num_to_prefetch == 1:  # layers.i prefetches layers.i+1
        want = [("unshard", L(0)), ("unshard", L(1)), ("reshard", L(0)), ("unshard", L(2)),
                ("reshard", L(1)), ("unshard", L(3)), ("reshard", L(2)), ("reshard", L(3))]
    else:  # layers.i prefetches layers.i+1 and layers.i+2
        want = [("unshard", L(0)), ("unshard", L(1)), ("unshard", L(2)), ("reshard", L(0)),
                ("unshard", L(3)), ("reshard", L(1)), ("reshard", L(2)), ("reshard", L(3))]

    def step(m, ids):
        events = []
        with recording(impl, sharded, events):
            loss = m(ids).square().mean()
        got = layers_only(events)
        if got != want:
            raise AssertionError(f"forward events {got}, expected {want}")
        loss.backward()
        return loss
    train_and_compare(model, ref, step)
    check_sharded_parity(impl, model, ref, "after training", grads=False)


for _n in (1, 2):
    behaviour(f"explicit forward prefetch of the next {_n} layer(s): all-gather order, then "
              "training parity", SOURCE + "test_set_modules_to_forward_prefetch"
              )(lambda impl, n=_n: forward_prefetch(impl, n))


# ---- test_set_modules_to_backward_prefetch ------------------------------------------------------
def backward_prefetch(impl, num_to_prefetch):
    model, ref, sharded = build(impl)
    for i, layer in enumerate(model.layers):
        if i >= num_to_prefetch:
            targets = [model.layers[i - j] for j in range(1, num_to_prefetch + 1)]
            layer.set_modules_to_backward_prefetch(targets)
    U, R, P = "unshard", "reshard", "post_backward"
    if num_to_prefetch == 1:  # layers.i prefetches layers.i-1
        want = [(U, L(3)), (U, L(2)), (R, L(3)), (P, L(3)), (U, L(1)), (R, L(2)), (P, L(2)),
                (U, L(0)), (R, L(1)), (P, L(1)), (R, L(0)), (P, L(0))]
    else:  # layers.i prefetches layers.i-1 and layers.i-2
        want = [(U, L(3)), (U, L(2)), (U, L(1)), (R, L(3)), (P, L(3)), (U, L(0)), (R, L(2)),
                (P, L(2)), (R, L(1)), (P, L(1)), (R, L(0)), (P, L(0))]

    def step(m, ids):
        loss = m(ids).square().mean()
        events = []
        with recording(impl, sharded, events):
            loss.backward()
        got = layers_only(events)
        if got != want:
            raise AssertionError(f"backward events {got}, expected {want}")
        return loss
    train_and_compare(model, ref, step)
    check_sharded_parity(impl, model, ref, "after training", grads=False)


for _n in (1, 2):
    behaviour(f"explicit backward prefetch of the previous {_n} layer(s): all-gather order, "
              "then training parity", SOURCE + "test_set_modules_to_backward_prefetch"
              )(lambda impl, n=_n: backward_prefetch(impl, n))


# ---- bad input ----------------------------------------------------------------------------------
def prefetch_bad_input(impl):
    """A module that is not an FSDP module is refused (FSDP2: ValueError/TypeError naming it;
    FullyShard: libfsdp.Error), and the lists stay as they were: training still matches."""
    model, ref, sharded = build(impl)
    layer = model.layers[0]
    for bad in ([nn.Linear(2, 2)], [model.layers[1].attention]):
        try:
            layer.set_modules_to_forward_prefetch(bad)
        except (ValueError, TypeError, AssertionError, libfsdp.Error):
            pass
        else:
            raise AssertionError("a module without its own FSDP unit was accepted as a "
                                 "prefetch target")

    def step(m, ids):
        loss = m(ids).square().mean()
        loss.backward()
        return loss
    train_and_compare(model, ref, step)


behaviour("prefetch lists refuse modules without an FSDP unit",
          SOURCE + "test_set_modules_to_forward_prefetch (invalid type, from the NPU port)"
          )(prefetch_bad_input)

if __name__ == "__main__":
    run()
