"""FullyShard's hooks on the model, acting on a ShardState (the groups, which are gathered, the
reductions in flight): each unit's forward pre-hook gathers it and casts its inputs, its forward
hook reshards it and hooks its outputs' gradients; the first of those starts the unit's backward;
each parameter's gradient arrival counts down to the unit's reduction; an autograd callback ends
backward. Tensors autograd saves from parameters are kept as positions in the unsharded buffer
(saved-tensor hooks around the root's forward). A group's hooks find the Hooks that run it now
through group.hooks (fully_shard hands a group to the Hooks of an outer call)."""
import functools

import numpy as np
import torch

from ._compat import POST_ACCUMULATE
from ._param_group import Phase
from ._structures import cast, tensors


def _autograd_running():
    """Whether this thread is inside autograd's backward (PyTorch >= 2.1 says so; before, a
    root forward is taken as never running inside backward)."""
    task = getattr(torch._C, "_current_graph_task_id", None)
    return task is not None and task() != -1


def cast_inputs(policy, dtype, args, kwargs):
    """(args, kwargs) cast to a low-precision compute dtype under the policy's
    cast_forward_inputs (FSDP2 casts every floating tensor of both, at any depth); None when
    nothing is cast."""
    if policy.cast_forward_inputs and dtype in (torch.bfloat16, torch.float16):
        return cast(args, dtype), cast(kwargs, dtype)
    return None


class Hooks:
    """The hooks of the groups of `state` (a ShardState)."""

    def __init__(self, state):
        self.state = state

    def adopt(self, group):
        """This Hooks runs `group` from now on, a group of its state."""
        group.hooks = self

    # ---- gathered or sharded ----------------------------------------------------------------
    def gather(self, group):
        group.gather()
        if POST_ACCUMULATE:
            if any(fp.trainable and fp.hooked is None for fp in group.fsdp_params):
                self.hook_gradients(group)  # a parameter unfrozen since (frozen_may_train)
        else:
            self._hook_accumulators(group)
        self.state.gathered.append(group)

    def reshard(self, group, placeholders=False):
        """Releases the unit; its parameters show their shard parts, or with placeholders
        (between forward and backward, when a unit computes in another dtype than its float32
        shards) empty tensors of the compute dtype: a dtype change would make autograd drop the
        parameter's AccumulateGrad node, and a module called twice in one forward would get a
        second one (two arrivals per gradient). End of backward shows the parts."""
        if placeholders and group.dtype != group.fsdp_params[0].shard_view.dtype:
            group.show_placeholders()
        else:
            group.show_shards()
        if group in self.state.gathered:
            self.state.gathered.remove(group)
        group.unit.reshard()

    @staticmethod
    def hook_gradients(group):
        """Hooks the arrival of each trainable parameter's gradient. The hook lives on the
        tensor, not on its AccumulateGrad node: autograd makes a new node when the parameter's
        dtype changes (float32 shard views between uses, param_dtype buffers in use); a
        parameter frozen now is hooked when a gather finds it unfrozen. Before PyTorch 2.1,
        _hook_accumulators hooks each new node as the unit is gathered."""
        if POST_ACCUMULATE:
            for fp in group.active():
                if fp.hooked is None:  # once per parameter
                    fp.param.register_post_accumulate_grad_hook(Hooks._grad_done_hook(group, fp))
                    fp.hooked = fp.param

    @staticmethod
    def _hook_accumulators(group):
        """PyTorch < 2.1: hooks each active parameter's AccumulateGrad node (made here, at the
        unsharded shape and dtype, if autograd dropped the last one) unless already hooked."""
        with torch.enable_grad():
            for fp in group.active():
                p = fp.param
                node = p.expand_as(p).grad_fn.next_functions[0][0]
                if fp.hooked is not node:
                    done = Hooks._grad_done_hook(group, fp)
                    node.register_hook(lambda *unused, done=done, p=p: done(p))
                    fp.hooked = node

    def wrap_root_forward(self):
        """The root's forward runs with the saved-tensor hooks that keep parameters as positions
        (model(x) and sharded(x) alike)."""
        root = self.state.root
        inner = root.forward

        @functools.wraps(inner)
        def forward(*args, **kwargs):
            return self.root_forward(inner, args, kwargs)
        root.forward = forward
        root._libfsdp_fully_shard = True

    def root_forward(self, inner, args, kwargs):
        state = self.state
        with torch.autograd.graph.saved_tensors_hooks(self.pack, self.unpack):
            out = inner(*args, **kwargs)
        if not state.in_backward:
            state.release_prefetches()  # forward prefetches this forward did not use
        if state.root_group is None and state.root_policy.output_dtype is not None:
            out = cast(out, state.root_policy.output_dtype)  # a root without a unit
        return out

    # ---- forward ------------------------------------------------------------------------------
    def begin_forward_hook(self, module, args, kwargs):
        state = self.state
        state.join_stream()  # the optimizer step queued on it comes before the all-gathers
        if state.in_backward and not _autograd_running():
            self._recover_from_failed_backward()
        if not state.in_backward:
            # fsdp_begin_forward is collective: it marks the iteration only when this forward may
            # gather a unit every rank uses. A forward whose units are all used by any subset of
            # ranks or already gathered (FSDPModule.unshard() on every rank first) makes no
            # collective call, so that some ranks may run it alone (an evaluation on rank 0).
            if any(not g.any_ranks and not g.gathered for g in state.groups):
                for ctx in state.contexts():  # releases what prefetch gathered, nobody claimed
                    ctx.begin_forward()
            # What the user did to the parameters between uses, for every unit before any is
            # gathered or prefetched in this iteration (a replaced part reaches the shard first).
            for group in state.groups:
                if not group.gathered:
                    group.check_parameters()
        if state.root_group is None:  # a root without parameters of its own casts as FSDP2's
            return cast_inputs(state.root_policy, state.root_policy.param_dtype, args, kwargs)
        return None

    @staticmethod
    def pre_forward_hook(group):
        def hook(module, args, kwargs):
            self = group.hooks  # the Hooks whose root this unit's module lies under now
            self.state.join_stream()
            if not group.gathered:  # also in backward: recomputation (activation checkpointing)
                group.check_parameters(take_replaced=False)  # done for all at the root's
                self.gather(group)
            if not self.state.in_backward:
                self.prefetch(group.forward_prefetch)
            return cast_inputs(group.policy, group.dtype, args, kwargs)
        return hook

    @staticmethod
    def prefetch(targets):
        """Explicit prefetch: the all-gathers of `targets` (groups not yet gathered) start now,
        in list order; their own hooks take them. Units used by any subset of ranks are skipped,
        as the library never prefetches them: a rank that will not run one would read it for
        nothing; their own pre-forward or pre-backward gathers them."""
        for target in targets:
            if not target.gathered and target.phase is Phase.IDLE and not target.any_ranks:
                target.check_parameters(take_replaced=False)
                target.prefetch()

    @staticmethod
    def post_forward_hook(group):
        def hook(module, args, output):
            self = group.hooks
            # Recomputation in backward (activation checkpointing): the unit stays gathered for
            # its backward, and the outputs are cast as in forward.
            if not self.state.in_backward:
                needs_grad = [t for t in tensors(output) if t.requires_grad]
                if group.reshard_after_forward or not needs_grad:
                    self.reshard(group, placeholders=bool(needs_grad))
                for t in needs_grad:
                    t.register_hook(Hooks._pre_backward_hook(group))
            if group.policy.output_dtype is not None:  # each unit's, as FSDP2 casts
                return cast(output, group.policy.output_dtype)
            return None
        return hook

    # ---- backward -----------------------------------------------------------------------------
    @staticmethod
    def _pre_backward_hook(group):
        def hook(grad):
            self = group.hooks
            state = self.state
            state.join_stream()  # autograd's stream for this module's backward
            if not state.in_backward:
                state.in_backward = True
                for ctx in state.contexts():
                    ctx.begin_backward()
                torch.autograd.Variable._execution_engine.queue_callback(self._finish_backward)
            if group.phase is not Phase.IDLE:
                return None
            if not group.gathered:
                self.gather(group)
            group.take_user_grads()
            group.give_grad_buffers()
            group.begin_backward()
            if group.backward_prefetch is not None:
                self.prefetch(group.backward_prefetch)
            return None
        return hook

    @staticmethod
    def _grad_done_hook(group, fp):
        def hook(param):
            self = group.hooks
            state = self.state
            if group.gradient_arrived(fp):
                state.join_stream()  # the reduction reads what autograd wrote on it
                group.take_grads_from_autograd()
                self.reshard(group)
                if not state.find_unused_parameters:
                    group.start_reduction()
                    # At most one reduction in flight, as FSDP2's post-backward waits for the
                    # previous reduce-scatter: its full gradient goes back to the pool before
                    # this unit's starts, so full gradients never pile up in backward.
                    if state.requests:
                        state.requests.pop().wait()
                    state.requests.append(group.unit.reduce_grads_async())
        return hook

    def _finish_backward(self):
        """End of backward (an autograd callback): units not yet reduced (parameters without a
        gradient, or all of them under find_unused_parameters) in unit order, on every rank
        alike; then every reduction is waited for, each context's step boundary reduces the
        units used by any subset of ranks, and p.grad shows the gradient shards."""
        state = self.state
        find_unused = state.find_unused_parameters
        state.join_stream()  # the optimizer step queued on it comes after the reductions
        try:
            for group in state.groups:
                if group.phase is Phase.REDUCING:
                    continue
                active = group.active()
                if group.phase is Phase.BACKWARD:  # p.grad are the library's buffers
                    group.take_grads_from_autograd()
                if group.gathered:
                    self.reshard(group)
                if group.any_ranks and group.phase is Phase.IDLE:
                    # Not used on this rank in this backward, perhaps on others: the boundary
                    # below reduces it on every rank if some rank wrote a gradient (this rank
                    # adding zeros), into the gradient shard as the user left p.grad, as on the
                    # ranks that used it (their pre-backward took it). Its parameters show their
                    # shard parts, whose shape p.grad takes (a unit never gathered here held its
                    # initial values until now).
                    group.show_shards()
                    group.take_user_grads()
                    continue
                # Not reduced: a unit none of whose parameters requires a gradient now (frozen,
                # also after wrapping; requires_grad is the same on every rank), and one whose
                # output never reached the loss (no gradient at all: its p.grad and gradient shard
                # stay as they were, as PyTorch leaves such parameters; without
                # find_unused_parameters every rank runs the same units' backward). Under
                # find_unused_parameters a unit this rank did not use reduces zeros, since
                # another rank may have used it.
                if active and (group.phase is not Phase.IDLE or find_unused):
                    if group.phase is Phase.IDLE:  # no gradient here: zeros
                        group.take_user_grads()
                        for fp in active:
                            group.unit.grad(fp.index)
                    state.requests.append(group.unit.reduce_grads_async())
            requests, state.requests = state.requests, []
            for r in requests:
                r.wait()
            state.release_prefetches()  # backward prefetches of units whose backward never ran
            # Which parameters have a gradient, agreed over every rank (one reduction for all
            # units), so that every rank's part of a parameter is stepped or skipped alike.
            # The flags have the same length on every rank (every unit's trainable parameters).
            got = [group.got_gradients(find_unused) for group in state.groups]
            flags = np.array([has for g in got for has in g], dtype=np.float64)
            if flags.size and not find_unused:
                state.ctx.allreduce(flags, op="max", group="world")
            # The last library call of backward: the gradients of units used by any subset of
            # ranks are kept where they were written until here, where every rank reduces those
            # some rank wrote (fsdp_step_boundary; without such units it does nothing). It opens
            # the update phase in which torch's optimizer step writes the shards other ranks read
            # one-sidedly: any later library call before that step would end it early.
            for ctx in state.contexts():
                ctx.step_boundary()
            at = 0
            for group, g in zip(state.groups, got):
                if group.shows_placeholders:
                    group.show_shards()
                group.show_grads(flags[at:at + len(g)] != 0)
                at += len(g)
        finally:
            state.in_backward = False
            for group in state.groups:
                group.end_backward()

    def _recover_from_failed_backward(self):
        """A backward that raised never ran _finish_backward (autograd skips its callbacks): the
        next forward puts every unit back as between steps. p.grad is what the user had
        before that backward; gradients that backward wrote stay in the library's buffers and
        add to the next reduction, as autograd's partial accumulation stays in p.grad."""
        state = self.state
        for r in state.requests:
            try:
                r.wait()
            except Exception:  # noqa: BLE001 - its error was that backward's
                pass
        state.requests = []
        for group in state.groups:
            try:
                group.release_prefetch()
            except Exception:  # noqa: BLE001 - the failed backward's error is the one reported
                group.prefetch_request = None
            if group.phase is not Phase.IDLE:  # p.grad are the library's buffers
                for fp in group.active():
                    fp.param.grad = None
            if group.gathered:
                self.reshard(group)
            elif group.shows_placeholders:
                group.show_shards()
            if group.took_user_grads:
                group.restore_user_grads()
            group.end_backward()
        state.in_backward = False

    # ---- saved tensors ------------------------------------------------------------------------
    def pack(self, t):
        gathered = self.state.gathered
        if not gathered or not isinstance(t, torch.Tensor):
            return t
        for group in gathered:
            found = group.region.find(t)
            if found is not None:
                return (group, *found, t.size(), t.stride())
        return t

    @staticmethod
    def unpack(packed):
        if isinstance(packed, torch.Tensor):
            return packed
        group, index, offset, size, stride = packed
        if not group.gathered:
            raise RuntimeError(f"libfsdp: the parameters of module '{group.where}' are needed in "
                               "backward but the unit is sharded (is its output part of the "
                               "loss?)")
        return group.region.rebuild(index, offset, size, stride)
