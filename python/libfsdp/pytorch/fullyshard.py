"""libfsdp.pytorch.FullyShard: the API, and its construction (plan, materialize, create the
units, then take the parameters over and hook the model)."""
import functools
import weakref

import numpy as np
import torch

from .. import _refuse

from . import _materialize, _plan
from ._compat import register_pre_hook, register_state_dict_hooks
from ._hooks import Hooks
from ._state_dict import StateDicts
from ._unit_state import UnitState


class FullyShard(Hooks, StateDicts):
    """Shards `root`'s parameters over `ctx`: one unit per module of `submodules` (in forward
    order), and one for the root with the parameters no listed module took.

    mp_policy: a MixedPrecisionPolicy for every unit (None: compute in the parameters' dtype), or
    a dict {module: MixedPrecisionPolicy} over the listed submodules and the root, as FSDP2 takes
    one per fully_shard call (a module it leaves out: MixedPrecisionPolicy()).
    reshard_after_forward: None (FSDP2's default) reshards every unit but the root's after forward,
    True the root's too, False none (every unit unsharded from forward to backward, ZeRO-2-like).
    prefetch: the library all-gathers the next unit while this one computes. find_unused_parameters:
    as DDP's: ranks may leave different parameters without gradient; every unit then stays
    unsharded from forward to backward and every reduction waits for the end of backward, in unit
    order, so that all ranks issue the same collectives. param_init_fn(module): fills a
    meta-device module's parameters once materialized on CPU (default: its reset_parameters()).
    sync_module_states:
    every rank starts from rank 0's parameter and buffer values (PyTorch's sync_module_states;
    collective). ignored_params:
    parameters of root left as they are (FSDP2's ignored_params): not sharded, their gradients
    not reduced (DDP or the caller reduces them); state dicts carry them as plain tensors.
    frozen_may_train: parameters frozen (requires_grad=False) at wrapping get gradient memory
    and optimizer state as the others, so that requires_grad_(True) later trains them (by
    default they cost none, and unfreezing one is refused); while frozen they have no gradient
    (p.grad None) and no optimizer touches them."""

    def __init__(self, ctx, root, submodules=(), *, mp_policy=None, reshard_after_forward=None,
                 prefetch=True, find_unused_parameters=False, param_init_fn=None,
                 sync_module_states=True, ignored_params=None, frozen_may_train=False):
        ctx._host_memory("FullyShard")  # a CUDA context: refused before anything is touched
        plan, ignored, self.root_policy = _plan.plan(ctx, root, submodules, mp_policy,
                                                     param_init_fn, ignored_params,
                                                     reshard_after_forward)
        self.ctx, self.root = ctx, root
        self.find_unused_parameters = bool(find_unused_parameters)
        self._ignored = ignored  # ids of parameters left unsharded and unreduced
        self.states, self._requests = [], []   # the reductions in flight in this backward
        self._in_backward, self._gathered = False, []  # the gathered units' states
        created, replaced = [], []
        try:
            for module, where, params, policy in plan:
                is_root = module is root
                fresh = _materialize.materialize(root, module, params, param_init_fn, replaced)
                unit = _materialize.create_unit(ctx, where, fresh, sync_module_states, policy,
                                                bool(frozen_may_train))
                created.append(unit)
                for (_, old), (_, p) in zip(params, fresh):
                    if p is not old:  # materialized from meta: its values now live in the shards
                        p.data = torch.empty(0, dtype=p.dtype)
                # The root, and every unit under find_unused_parameters, stays gathered from
                # forward to backward: an unshard in backward is collective, and ranks whose
                # losses use different units would issue different ones.
                self.states.append(UnitState(module, where, unit, fresh, policy,
                                             reshard_after_forward is not False
                                             and (not is_root or reshard_after_forward is True)
                                             and not self.find_unused_parameters))
                self.states[-1].owner = self
            # Meta buffers no unit's module holds (a root without parameters of its own).
            _materialize.materialize(root, root, [], param_init_fn, replaced)
            if sync_module_states:  # buffers too, as DDP's and FSDP1's sync_module_states
                for b in root.buffers():
                    _materialize.broadcast_from_rank0(ctx, b)
        except BaseException:
            for unit in reversed(created):
                unit.destroy()
            for tensors, name, old in reversed(replaced):
                tensors[name] = old
            raise
        # Nothing can fail from here on: the model changes now. The root's first pre-hook marks
        # the iteration (the library's prefetch follows the unshard order between the marks).
        register_pre_hook(root, self._begin_forward_hook)
        register_state_dict_hooks(root, self._state_dict_hook, self._load_state_dict_hook)
        for state in self.states:
            state.show_shards()  # each parameter: its part of this rank's shard
            self._hook_gradients(state)
            register_pre_hook(state.module, self._pre_forward_hook(state))
            state.module.register_forward_hook(self._post_forward_hook(state))
        self.root_state = (self.states[-1] if self.states and self.states[-1].module is root
                           else None)
        # FSDP2's spelling on each listed module and the root: module.set_requires_gradient_sync,
        # module.unshard(), module.reshard(); register_fsdp_forward_method finds the handle.
        for module in [s.module for s in self.states if s.module is not root] + [root]:
            for name in ("set_requires_gradient_sync", "unshard", "reshard",
                         "set_modules_to_forward_prefetch", "set_modules_to_backward_prefetch"):
                module.__dict__[name] = functools.partial(getattr(self, name), module=module)
            module.__dict__["_libfsdp_handle"] = weakref.ref(self)
        self._wrap_root_forward()
        ctx.set_prefetch(prefetch, prefetch)

    @classmethod
    def _drop_in(cls, ctx, root, policy):
        """An empty group for one fully_shard call on `root` (_fully_shard.py): no unit yet,
        no hook; _adopt gives it its units."""
        self = cls.__new__(cls)
        self.ctx, self.root, self.root_policy = ctx, root, policy
        self.find_unused_parameters = False
        self._ignored = frozenset()
        self.states, self._requests = [], []
        self._in_backward, self._gathered = False, []
        self.root_state = None
        ctx.set_prefetch(True, True)
        return self

    def _adopt(self, groups, state):
        """The units of earlier fully_shard calls' groups (`groups`, whose roots lie under this
        one's), then `state` (this call's unit, or None): their hooks now run for this group,
        whose root is this call's module."""
        for group in groups:
            for s in group.states:
                s.owner = self
                if s.requested_reshard is None:  # a root until now: a unit under this one
                    s.reshard_after_forward = True
                for m in s.modules:
                    m.__dict__["_libfsdp_group"] = self
                self.states.append(s)
            group.root = None
        if state is not None:
            state.owner = self
            self.states.append(state)
        self.root_state = state
        # Messages name modules and parameters as the root's named_modules() and
        # named_parameters() do.
        modules = {id(m): n for n, m in self.root.named_modules()}
        params = {}
        for n, p in self.root.named_parameters(remove_duplicate=False):
            params.setdefault(id(p), n)
        for s in self.states:
            s.where = "+".join(modules.get(id(m)) or "<root>" for m in s.modules)
            s.params = [(params.get(id(sh), name), p) for sh, (name, p)
                        in zip(s.sharded_params(), s.params)]

    def _contexts(self):
        """Every context this group's units live in (begin_forward / begin_backward each)."""
        out = {id(self.ctx): self.ctx}
        for s in self.states:
            out.setdefault(id(s.unit.context), s.unit.context)
        return list(out.values())

    def _begin_root_forward(self, module, args, kwargs):
        """fully_shard's root pre-hook: the root's unit stays gathered after forward unless
        reshard_after_forward was given (FSDP2's default for the root), then the iteration's
        start as FullyShard's root."""
        state = self.root_state
        if state is not None and state.requested_reshard is None and not self._in_backward:
            state.reshard_after_forward = False
        return self._begin_forward_hook(module, args, kwargs)

    @property
    def units(self):
        """The libfsdp.Unit of each listed module, then the root's (for ctx.optimizer)."""
        return [s.unit for s in self.states]

    def numel(self):
        """The model's parameter count at full size (a tied parameter once): what
        sum(p.numel() for p in model.parameters()) gave before wrapping, now that each p holds
        this rank's part. Local."""
        return sum(int(np.prod(state.unit.shapes[i], dtype=np.int64))
                   for state in self.states for i in range(len(state.params)))

    def set_requires_gradient_sync(self, requires_gradient_sync, module=None, recurse=True):
        """FSDP2's set_requires_gradient_sync: False makes backward accumulate the gradients of
        `module`'s unit (and, with recurse, of every unit under it; module None: the root, so
        all) locally, as no_sync() does for all; True communicates them again, their sum at the
        next backward (fsdp_unit_set_grad_sync). Also reachable as
        module.set_requires_gradient_sync(flag, recurse=True) on each listed module and the
        root. Local; every rank switches the same units."""
        if not isinstance(requires_gradient_sync, bool):
            _refuse("FullyShard.set_requires_gradient_sync", "requires_gradient_sync: True or "
                    f"False, got {requires_gradient_sync!r}")
        for state in self._states_under(module, recurse):
            state.unit.set_grad_sync(requires_gradient_sync)

    def _states_under(self, module, recurse=True):
        module = self.root if module is None else module
        inside = {id(m) for m in module.modules()} if recurse else {id(module)}
        return [s for s in self.states if any(id(m) in inside for m in s.modules)]

    def unshard(self, module=None):
        """FSDP2's unshard(): gathers the units of `module` and of every listed module under it
        (None: all) ahead of their forward, which then finds them gathered. Collective."""
        self._check_sharded("FullyShard.unshard", reading=True)
        for state in self._states_under(module):
            if not state.gathered:
                state.check_parameters()
                self._gather(state)

    def reshard(self, module=None):
        """FSDP2's reshard(): releases the gathered units of `module` and of every listed module
        under it (None: all), e.g. after a forward under reshard_after_forward=False that no
        backward follows. Collective over the units' groups; refused inside backward."""
        self._check_sharded("FullyShard.reshard", reading=True)
        for state in self._states_under(module):
            state.release_prefetch()
            if state.gathered:
                self._reshard(state)

    def set_modules_to_forward_prefetch(self, modules, module=None):
        """FSDP2's set_modules_to_forward_prefetch: when `module`'s forward starts (None: the
        root's), the units of `modules` (listed modules or the root) start their all-gathers, in
        list order, so they are ready when their forwards run; [] turns it off. Also reachable as
        module.set_modules_to_forward_prefetch(modules). The library's own prefetch
        (prefetch=True) still follows the recorded order; prefetch=False leaves only these.
        Local; every rank sets the same lists."""
        call = "FullyShard.set_modules_to_forward_prefetch"
        self._state_of(module, call, "module").forward_prefetch = self._states_of(modules, call)

    def set_modules_to_backward_prefetch(self, modules, module=None):
        """FSDP2's set_modules_to_backward_prefetch: when `module`'s backward starts (None: the
        root's), the units of `modules` start their all-gathers, in list order, instead of
        waiting for their own backward; [] turns it off. Units whose backward never runs are
        resharded at the end of backward. Local; every rank sets the same lists."""
        call = "FullyShard.set_modules_to_backward_prefetch"
        self._state_of(module, call, "module").backward_prefetch = self._states_of(modules, call)

    def _state_of(self, module, call, arg):
        module = self.root if module is None else module
        for state in self.states:
            if any(m is module for m in state.modules):
                return state
        name = next((n for n, m in self.root.named_modules() if m is module), None)
        what = (f"module '{name or '<root>'}'" if name is not None
                else f"a {type(module).__name__} outside the model")
        _refuse(call, f"{arg}: {what} ({type(module).__name__}) has no unit of this FullyShard "
                "(a listed module, or the root when it holds parameters)")

    def _states_of(self, modules, call):
        if isinstance(modules, torch.nn.Module) or not hasattr(modules, "__iter__"):
            _refuse(call, f"modules: a list of modules, got {type(modules).__name__}")
        return [self._state_of(m, call, "modules") for m in modules]

    def register_forward_method(self, module, method_name):
        """FSDP2's register_fsdp_forward_method: calling module.<method_name>() (vit's
        forward_features, a decoder's generate step) gathers and reshards `module`'s unit, casts
        its inputs and outputs, marks the iteration (the root) and keeps saved parameters as
        positions, as module(...) does. `module` is the root or a listed module."""
        call = "register_fsdp_forward_method"
        states = [s for s in self.states if s.module is module]
        if module is not self.root and not states:
            _refuse(call, f"module: {type(module).__name__} is neither the root nor a module "
                    "FullyShard listed")
        method = getattr(module, method_name, None)
        if not callable(method):
            _refuse(call, f"method_name: {type(module).__name__} has no method "
                    f"{method_name!r}")
        pre = self._pre_forward_hook(states[0]) if states else None
        post = self._post_forward_hook(states[0]) if states else None

        @functools.wraps(method)
        def forward_method(*args, **kwargs):
            if module is self.root:
                cast = self._begin_forward_hook(module, args, kwargs)
                args, kwargs = cast if cast is not None else (args, kwargs)
            if pre is not None:
                cast = pre(module, args, kwargs)
                args, kwargs = cast if cast is not None else (args, kwargs)
            with torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack):
                out = method(*args, **kwargs)
            if post is not None:
                cast = post(module, args, out)
                out = cast if cast is not None else out
            return out
        module.__dict__[method_name] = forward_method

    def reset_parameters(self, param_init_fn=None, sync_module_states=True):
        """Initializes every parameter again after wrapping (FSDP2's to_empty() then
        reset_parameters() on the modules): one unit at a time, each module holding one of its
        parameters gets full-size tensors, runs param_init_fn(module) or its reset_parameters(),
        and this rank's part goes into the shard. sync_module_states: rank 0's values on every
        rank (collective). Every module is checked first: one without reset_parameters() (and no
        param_init_fn) is refused by name and nothing changes."""
        call = "FullyShard.reset_parameters"
        self._check_sharded(call)
        if param_init_fn is not None and not callable(param_init_fn):
            _refuse(call, "param_init_fn: a callable taking a module is needed")
        place = {id(p): (state, i) for state in self.states
                 for i, (_, p) in enumerate(state.params)}
        plans = []
        for state in self.states:
            owners = _plan.owners(self.root, [p for _, p in state.params])
            for m in owners:
                if param_init_fn is None and not hasattr(m, "reset_parameters"):
                    _refuse(call, f"module '{state.where}': {type(m).__name__} holds a parameter "
                            "and has no reset_parameters(); pass param_init_fn")
            plans.append(owners)
        for state, owners in zip(self.states, plans):
            mine = {id(q): q for m in owners for q in m._parameters.values()
                    if q is not None and id(q) in place}
            for q in mine.values():  # full-size tensors while the modules initialize them
                st, i = place[id(q)]
                q.data = torch.empty(st.unit.shapes[i], dtype=st.shard_views[i].dtype)
            try:
                with torch.no_grad():
                    for m in owners:
                        _materialize.initialize(m, param_init_fn)
            except BaseException:  # the shards keep their values; the parameters view them
                for q in mine.values():
                    st, i = place[id(q)]
                    q.data = st.shard_views[i]
                raise
            with torch.no_grad():
                for q in mine.values():
                    st, i = place[id(q)]
                    if sync_module_states:
                        _materialize.broadcast_from_rank0(self.ctx, q.data)
                    full, q.data = q.data, st.shard_views[i]
                    st.write_part(i, full)
        # A module that holds buffers but no parameter of its own (FSDP2's test MLP with its
        # buffer) resets them too, as FSDP2's to_empty() + reset_parameters() of every module do.
        with torch.no_grad():
            for m in self.root.modules():
                own = [q for q in m._parameters.values() if q is not None]
                if not own and any(b is not None for b in m._buffers.values()) and (
                        param_init_fn is not None or hasattr(m, "reset_parameters")):
                    _materialize.initialize(m, param_init_fn)
        if sync_module_states:  # what reset_parameters() set beside them: buffers, ignored ones
            for t in list(self.root.buffers()) + [p for p in self.root.parameters()
                                                   if id(p) in self._ignored]:
                _materialize.broadcast_from_rank0(self.ctx, t)

    def __call__(self, *args, **kwargs):
        return self.root(*args, **kwargs)

    def backward(self, loss):
        """loss.backward(): every unit's reduction has finished when it returns."""
        loss.backward()

    def no_sync(self):
        """Context manager: backward passes inside accumulate full gradients locally (no
        communication); the first backward after it reduces their sum (DDP's no_sync)."""
        ctx = self.ctx

        class _NoSync:
            def __enter__(self):
                ctx.set_grad_sync(False)

            def __exit__(self, *exc):
                ctx.set_grad_sync(True)
        return _NoSync()
