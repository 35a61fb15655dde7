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
                         CheckpointedStack, nn, rank, run, torch)

import libfsdp

SOURCE = "test_fully_shard_comm.py::TestFullyShardPrefetch::"
N_LAYERS = 4


@contextlib.contextmanager
def recording(impl, sharded, events):
    """Appends ("unshard" | "reshard" | "post_backward", layer name) to `events` while inside."""
    if impl.name == "fsdp2":
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
        states = sharded.states if impl.name == "libfsdp" else sharded._libfsdp_group.states
        names = {id(s.unit): s.where for s in states}
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
    torch.manual_seed(7)
    model = CheckpointedStack(16, 32, N_LAYERS)
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


# ---- test_set_modules_to_forward_prefetch, test_set_modules_to_backward_prefetch ------------------
U, R, P = "unshard", "reshard", "post_backward"
# (backward, modules prefetched) -> FSDP2's expected layer events of that pass.
EXPECTED = {
    # forward: layers.i prefetches layers.i+1 (and layers.i+2)
    (False, 1): [(U, L(0)), (U, L(1)), (R, L(0)), (U, L(2)), (R, L(1)), (U, L(3)), (R, L(2)),
                 (R, L(3))],
    (False, 2): [(U, L(0)), (U, L(1)), (U, L(2)), (R, L(0)), (U, L(3)), (R, L(1)), (R, L(2)),
                 (R, L(3))],
    # backward: layers.i prefetches layers.i-1 (and layers.i-2)
    (True, 1): [(U, L(3)), (U, L(2)), (R, L(3)), (P, L(3)), (U, L(1)), (R, L(2)), (P, L(2)),
                (U, L(0)), (R, L(1)), (P, L(1)), (R, L(0)), (P, L(0))],
    (True, 2): [(U, L(3)), (U, L(2)), (U, L(1)), (R, L(3)), (P, L(3)), (U, L(0)), (R, L(2)),
                (P, L(2)), (R, L(1)), (P, L(1)), (R, L(0)), (P, L(0))],
}


def prefetch_order(impl, num_to_prefetch, backward):
    """Each layer prefetches the next (forward) or previous (backward) num_to_prefetch layers
    where they exist; that pass's events are FSDP2's expected ones, and training matches."""
    model, ref, sharded = build(impl)
    for i, layer in enumerate(model.layers):
        ahead = [i - j if backward else i + j for j in range(1, num_to_prefetch + 1)]
        if all(0 <= k < N_LAYERS for k in ahead):
            setter = (layer.set_modules_to_backward_prefetch if backward
                      else layer.set_modules_to_forward_prefetch)
            setter([model.layers[k] for k in ahead])
    want = EXPECTED[(backward, num_to_prefetch)]

    def step(m, ids):
        events = {False: [], True: []}
        with recording(impl, sharded, events[False]):
            loss = m(ids).square().mean()
        with recording(impl, sharded, events[True]):
            loss.backward()
        got = layers_only(events[backward])
        if got != want:
            raise AssertionError(f"{'backward' if backward else 'forward'} events {got}, "
                                 f"expected {want}")
        return loss
    train_and_compare(model, ref, step)
    check_sharded_parity(impl, model, ref, "after training", grads=False)


for _n in (1, 2):
    behaviour(f"explicit forward prefetch of the next {_n} layer(s): all-gather order, then "
              "training parity", SOURCE + "test_set_modules_to_forward_prefetch"
              )(lambda impl, n=_n: prefetch_order(impl, n, backward=False))
    behaviour(f"explicit backward prefetch of the previous {_n} layer(s): all-gather order, "
              "then training parity", SOURCE + "test_set_modules_to_backward_prefetch"
              )(lambda impl, n=_n: prefetch_order(impl, n, backward=True))


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
