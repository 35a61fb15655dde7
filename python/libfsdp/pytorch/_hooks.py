"""FullyShard's hooks on the model, as a mixin of FullyShard (whose state they share: ctx,
root, states, the gathered units, the reductions in flight): each unit's forward pre-hook gathers
it and casts its inputs, its forward hook reshards it and hooks its outputs' gradients; the first
of those starts the unit's backward; each parameter's gradient arrival counts down to the unit's
reduction; an autograd callback ends backward. Tensors autograd saves from parameters are kept as
positions in the unsharded buffer (saved-tensor hooks around the root's forward)."""
import functools

import numpy as np
import torch

from ._compat import POST_ACCUMULATE
from ._structures import cast, tensors
from ._unit_state import Phase


def _autograd_running():
    """Whether this thread is inside autograd's backward (PyTorch >= 2.1 says so; before, a
    root forward is taken as never running inside backward)."""
    task = getattr(torch._C, "_current_graph_task_id", None)
    return task is not None and task() != -1


class Hooks:
    # ---- gathered or sharded ----------------------------------------------------------------
    def _gather(self, state):
        state.gather()
        if POST_ACCUMULATE:
            if len(state.accumulators) < len(state.trainable):
                self._hook_gradients(state)  # a parameter unfrozen since (frozen_may_train)
        else:
            self._hook_accumulators(state)
        self._gathered.append(state)

    def _reshard(self, state, placeholders=False):
        """Releases the unit; its parameters show their shard parts, or with placeholders
        (between forward and backward, when a unit computes in another dtype than its float32
        shards) empty tensors of the compute dtype: a dtype change would make autograd drop the
        parameter's AccumulateGrad node, and a module called twice in one forward would get a
        second one (two arrivals per gradient). End of backward shows the parts."""
        if placeholders and state.dtype != state.shard_views[0].dtype:
            state.show_placeholders()
        else:
            state.show_shards()
        if state in self._gathered:
            self._gathered.remove(state)
        state.unit.reshard()

    def _hook_gradients(self, state):
        """Hooks the arrival of each trainable parameter's gradient. The hook lives on the
        tensor, not on its AccumulateGrad node: autograd makes a new node when the parameter's
        dtype changes (float32 shard views between uses, param_dtype buffers in use); a
        parameter frozen now is hooked when a gather finds it unfrozen. Before PyTorch 2.1,
        _hook_accumulators hooks each new node as the unit is gathered."""
        if POST_ACCUMULATE:
            for i, p in state.active():
                if i not in state.accumulators:  # once per parameter
                    p.register_post_accumulate_grad_hook(self._grad_done_hook(state, i))
                    state.accumulators[i] = p

    def _hook_accumulators(self, state):
        """PyTorch < 2.1: hooks each active parameter's AccumulateGrad node (made here, at the
        unsharded shape and dtype, if autograd dropped the last one) unless already hooked."""
        with torch.enable_grad():
            for i, p in state.active():
                node = p.expand_as(p).grad_fn.next_functions[0][0]
                if state.accumulators.get(i) is not node:
                    done = self._grad_done_hook(state, i)
                    node.register_hook(lambda *unused, done=done, p=p: done(p))
                    state.accumulators[i] = node

    def _wrap_root_forward(self):
        """The root's forward runs with the saved-tensor hooks that keep parameters as positions
        (model(x) and sharded(x) alike)."""
        root, inner = self.root, self.root.forward

        @functools.wraps(inner)
        def forward(*args, **kwargs):
            return self._root_forward(inner, args, kwargs)
        root.forward = forward
        root._libfsdp_fully_shard = True

    def _root_forward(self, inner, args, kwargs):
        with torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack):
            out = inner(*args, **kwargs)
        if not self._in_backward:
            self._release_prefetches()  # forward prefetches this forward did not use
        if self.root_state is None and self.root_policy.output_dtype is not None:
            out = cast(out, self.root_policy.output_dtype)  # a root without a unit
        return out

    # ---- forward ------------------------------------------------------------------------------
    @staticmethod
    def _cast_inputs(policy, dtype, args, kwargs):
        """(args, kwargs) cast to a low-precision compute dtype under the policy's
        cast_forward_inputs (FSDP2 casts every floating tensor of both, at any depth); None when
        nothing is cast."""
        if policy.cast_forward_inputs and dtype in (torch.bfloat16, torch.float16):
            return cast(args, dtype), cast(kwargs, dtype)
        return None

    def _begin_forward_hook(self, module, args, kwargs):
        if self._in_backward and not _autograd_running():
            self._recover_from_failed_backward()
        if not self._in_backward:
            for ctx in self._contexts():  # releases what prefetch gathered and nobody claimed
                ctx.begin_forward()
            # What the user did to the parameters between uses, for every unit before any is
            # gathered or prefetched in this iteration (a replaced part reaches the shard first).
            for state in self.states:
                if not state.gathered:
                    state.check_parameters()
        if self.root_state is None:  # a root without parameters of its own casts as FSDP2's does
            return self._cast_inputs(self.root_policy, self.root_policy.param_dtype, args, kwargs)
        return None

    @staticmethod
    def _pre_forward_hook(state):
        def hook(module, args, kwargs):
            self = state.owner  # the FullyShard whose root this unit's module lies under now
            if not state.gathered:  # also in backward: recomputation (activation checkpointing)
                state.check_parameters(take_replaced=False)  # done for all at the root's
                self._gather(state)
            if not self._in_backward:
                self._prefetch(state.forward_prefetch)
            return self._cast_inputs(state.policy, state.dtype, args, kwargs)
        return hook

    def _prefetch(self, targets):
        """Explicit prefetch: the all-gathers of `targets` (UnitStates not yet gathered) start
        now, in list order; their own hooks take them."""
        for target in targets:
            if not target.gathered and target.phase is Phase.IDLE:
                target.check_parameters(take_replaced=False)
                target.prefetch()

    def _release_prefetches(self):
        for state in self.states:
            state.release_prefetch()

    @staticmethod
    def _post_forward_hook(state):
        def hook(module, args, output):
            self = state.owner
            # Recomputation in backward (activation checkpointing): the unit stays gathered for
            # its backward, and the outputs are cast as in forward.
            if not self._in_backward:
                needs_grad = [t for t in tensors(output) if t.requires_grad]
                if state.reshard_after_forward or not needs_grad:
                    self._reshard(state, placeholders=bool(needs_grad))
                for t in needs_grad:
                    t.register_hook(self._pre_backward_hook(state))
            if state.policy.output_dtype is not None:  # each unit's, as FSDP2 casts
                return cast(output, state.policy.output_dtype)
            return None
        return hook

    # ---- backward -----------------------------------------------------------------------------
    @staticmethod
    def _pre_backward_hook(state):
        def hook(grad):
            self = state.owner
            if not self._in_backward:
                self._in_backward = True
                for ctx in self._contexts():
                    ctx.begin_backward()
                torch.autograd.Variable._execution_engine.queue_callback(self._finish_backward)
            if state.phase is not Phase.IDLE:
                return None
            if not state.gathered:
                self._gather(state)
            state.take_user_grads()
            state.give_grad_buffers()
            state.begin_backward()
            if state.backward_prefetch is not None:
                self._prefetch(state.backward_prefetch)
            return None
        return hook

    @staticmethod
    def _grad_done_hook(state, index):
        def hook(param):
            self = state.owner
            if state.gradient_arrived(index):
                state.take_grads_from_autograd()
                self._reshard(state)
                if not self.find_unused_parameters:
                    state.start_reduction()
                    # At most one reduction in flight, as FSDP2's post-backward waits for the
                    # previous reduce-scatter: its full gradient goes back to the pool before
                    # this unit's starts, so full gradients never pile up in backward.
                    if self._requests:
                        self._requests.pop().wait()
                    self._requests.append(state.unit.reduce_grads_async())
        return hook

    def _finish_backward(self):
        """End of backward (an autograd callback): units not yet reduced (parameters without a
        gradient, or all of them under find_unused_parameters) in unit order, on every rank
        alike; then every reduction is waited for and p.grad shows the gradient shards."""
        try:
            for state in self.states:
                if state.phase is Phase.REDUCING:
                    continue
                active = state.active()
                if state.phase is Phase.BACKWARD:  # p.grad are the library's buffers
                    state.take_grads_from_autograd()
                if state.gathered:
                    self._reshard(state)
                # Not reduced: a unit none of whose parameters requires a gradient now (frozen,
                # also after wrapping; requires_grad is the same on every rank), and one whose
                # output never reached the loss (no gradient at all: its p.grad and gradient shard
                # stay as they were, as PyTorch leaves such parameters; without
                # find_unused_parameters every rank runs the same units' backward). Under
                # find_unused_parameters a unit this rank did not use reduces zeros, since
                # another rank may have used it.
                if active and (state.phase is not Phase.IDLE or self.find_unused_parameters):
                    if state.phase is Phase.IDLE:  # no gradient here: zeros
                        state.take_user_grads()
                        for i, _ in active:
                            state.unit.grad(i)
                    self._requests.append(state.unit.reduce_grads_async())
            requests, self._requests = self._requests, []
            for r in requests:
                r.wait()
            self._release_prefetches()  # backward prefetches of units whose backward never ran
            # Which parameters have a gradient, agreed over every rank (one reduction for all
            # units), so that every rank's part of a parameter is stepped or skipped alike.
            # The flags have the same length on every rank (every unit's trainable parameters).
            got = [state.got_gradients(self.find_unused_parameters) for state in self.states]
            flags = np.array([has for g in got for has in g], dtype=np.float64)
            if flags.size and not self.find_unused_parameters:
                self.ctx.allreduce(flags, op="max", group="world")
            at = 0
            for state, g in zip(self.states, got):
                if state.shows_placeholders:
                    state.show_shards()
                state.show_grads(flags[at:at + len(g)] != 0)
                at += len(g)
        finally:
            self._in_backward = False
            for state in self.states:
                state.end_backward()

    def _recover_from_failed_backward(self):
        """A backward that raised never ran _finish_backward (autograd skips its callbacks): the
        next forward puts every unit back as between steps. p.grad is what the user had
        before that backward; gradients that backward wrote stay in the library's buffers and
        add to the next reduction, as autograd's partial accumulation stays in p.grad."""
        for r in self._requests:
            try:
                r.wait()
            except Exception:  # noqa: BLE001 - its error was that backward's
                pass
        self._requests = []
        for state in self.states:
            try:
                state.release_prefetch()
            except Exception:  # noqa: BLE001 - the failed backward's error is the one reported
                state.prefetch_request = None
            if state.phase is not Phase.IDLE:  # p.grad are the library's buffers
                for _, p in state.active():
                    p.grad = None
            if state.gathered:
                self._reshard(state)
            elif state.shows_placeholders:
                state.show_shards()
            if state.user_grads is not None:
                for i, g in state.user_grads.items():
                    state.params[i][1].grad = g
                state.publish_grads()
            state.end_backward()
        self._in_backward = False

    # ---- saved tensors ------------------------------------------------------------------------
    def _pack(self, t):
        if not self._gathered or not isinstance(t, torch.Tensor):
            return t
        ptr = t.data_ptr()
        for state in self._gathered:
            region = state.region
            base = region.data_ptr()
            if t.dtype == region.dtype and base <= ptr < base + region.numel() * t.element_size():
                return (state, (ptr - base) // t.element_size(), t.size(), t.stride())
        return t

    def _unpack(self, packed):
        if isinstance(packed, torch.Tensor):
            return packed
        state, offset, size, stride = packed
        if not state.gathered:
            raise RuntimeError(f"libfsdp: the parameters of module '{state.where}' are needed in "
                               "backward but the unit is sharded (is its output part of the "
                               "loss?)")
        return state.region.as_strided(size, stride, offset)
