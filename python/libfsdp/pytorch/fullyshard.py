"""libfsdp.pytorch.FullyShard: the API, and its construction (plan, materialize, create the
units, then take the parameters over and hook the model). A FullyShard composes a ShardState
(the groups and what they share), the Hooks that run them and the StateDicts that read and
write them; fully_shard (the drop-in) builds the same three pieces per call."""
import functools
import weakref

import numpy as np
import torch

from .. import _refuse

from . import _materialize, _unit_assignment
from ._compat import register_pre_hook, register_state_dict_hooks
from ._hooks import Hooks
from ._options import Options
from ._param_group import ParamGroup
from ._state import ShardState
from ._state_dict import StateDicts


class FullyShard:
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
        options = Options(reshard_after_forward=reshard_after_forward, prefetch=bool(prefetch),
                          find_unused_parameters=bool(find_unused_parameters),
                          sync_module_states=bool(sync_module_states),
                          frozen_may_train=bool(frozen_may_train))
        plan, ignored, root_policy = _unit_assignment.assign_units(ctx, root, submodules, mp_policy, param_init_fn,
                                                ignored_params, reshard_after_forward)
        state = ShardState(ctx, root, root_policy, options, ignored)
        self._compose(state)
        created, replaced = [], []
        try:
            for module, where, params, policy in plan:
                fresh = _materialize.materialize(root, module, params, param_init_fn, replaced)
                unit = _materialize.create_unit(ctx, where, fresh, options.sync_module_states,
                                                policy, options.frozen_may_train)
                created.append(unit)
                for (_, old), (_, p) in zip(params, fresh):
                    if p is not old:  # materialized from meta: its values now live in the shards
                        p.data = torch.empty(0, dtype=p.dtype)
                group = ParamGroup([module], where, unit, fresh, policy,
                                   options.reshards(module is root))
                self._hooks.adopt(group)
                state.groups.append(group)
            # Meta buffers no unit's module holds (a root without parameters of its own).
            _materialize.materialize(root, root, [], param_init_fn, replaced)
            if options.sync_module_states:  # buffers too, as DDP's and FSDP1's
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
        hooks = self._hooks
        register_pre_hook(root, hooks.begin_forward_hook)
        register_state_dict_hooks(root, self._state_dicts.state_dict_hook,
                                  self._state_dicts.load_state_dict_hook)
        for group in state.groups:
            group.show_shards()  # each parameter: its part of this rank's shard
            hooks.hook_gradients(group)
            register_pre_hook(group.module, hooks.pre_forward_hook(group))
            group.module.register_forward_hook(hooks.post_forward_hook(group))
        if state.groups and state.groups[-1].module is root:
            state.root_group = state.groups[-1]
        # FSDP2's spelling on each listed module and the root: module.set_requires_gradient_sync,
        # module.unshard(), module.reshard(); register_fsdp_forward_method finds the handle.
        for module in [g.module for g in state.groups if g.module is not root] + [root]:
            for name in ("set_requires_gradient_sync", "unshard", "reshard",
                         "set_modules_to_forward_prefetch", "set_modules_to_backward_prefetch"):
                module.__dict__[name] = functools.partial(getattr(self, name), module=module)
            module.__dict__["_libfsdp_handle"] = weakref.ref(self)
        hooks.wrap_root_forward()
        ctx.set_prefetch(options.prefetch, options.prefetch)

    def _compose(self, state):
        self.ctx = state.ctx
        self._state = state
        self._hooks = Hooks(state)
        self._state_dicts = StateDicts(state)

    @classmethod
    def _drop_in(cls, ctx, root, policy):
        """An empty group for one fully_shard call on `root` (_fully_shard.py): no unit yet,
        no hook; _adopt gives it its units."""
        self = cls.__new__(cls)
        self._compose(ShardState(ctx, root, policy))
        ctx.set_prefetch(True, True)
        return self

    def _adopt(self, shards, group):
        """The groups of earlier fully_shard calls' FullyShards (`shards`, whose roots lie under
        this one's), then `group` (this call's ParamGroup, or None): their hooks now run for this
        state, whose root is this call's module."""
        state = self._state
        for shard in shards:
            for g in shard._state.groups:
                self._hooks.adopt(g)
                if g.requested_reshard is None:  # a root until now: a unit under this one
                    g.reshard_after_forward = True
                for m in g.modules:
                    m.__dict__["_libfsdp_group"] = self
                state.groups.append(g)
            shard._state.root = None
        if group is not None:
            self._hooks.adopt(group)
            state.groups.append(group)
        state.root_group = group
        # Messages name modules and parameters as the root's named_modules() and
        # named_parameters() do.
        modules = {id(m): n for n, m in state.root.named_modules()}
        params = {}
        for n, p in state.root.named_parameters(remove_duplicate=False):
            params.setdefault(id(p), n)
        for g in state.groups:
            g.where = "+".join(modules.get(id(m)) or "<root>" for m in g.modules)
            for fp in g.fsdp_params:
                fp.name = params.get(id(fp.held()), fp.name)

    @property
    def root(self):
        """The model (None once fully_shard merged this group into an outer call's)."""
        return self._state.root

    @property
    def states(self):
        """The ParamGroup of each listed module, then the root's, in unit order."""
        return self._state.groups

    @property
    def root_state(self):
        """The root's ParamGroup (None when the root holds no parameter of its own)."""
        return self._state.root_group

    @property
    def find_unused_parameters(self):
        return self._state.find_unused_parameters

    def _begin_root_forward(self, module, args, kwargs):
        """fully_shard's root pre-hook: the root's unit stays gathered after forward unless
        reshard_after_forward was given (FSDP2's default for the root), then the iteration's
        start as FullyShard's root."""
        group = self._state.root_group
        if group is not None and group.requested_reshard is None and not self._state.in_backward:
            group.reshard_after_forward = False
        return self._hooks.begin_forward_hook(module, args, kwargs)

    @property
    def units(self):
        """The libfsdp.Unit of each listed module, then the root's (for ctx.optimizer)."""
        return [g.unit for g in self._state.groups]

    def numel(self):
        """The model's parameter count at full size (a tied parameter once): what
        sum(p.numel() for p in model.parameters()) gave before wrapping, now that each p holds
        this rank's part. Local."""
        return sum(int(np.prod(fp.shape, dtype=np.int64))
                   for g in self._state.groups for fp in g.fsdp_params)

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
        for group in self._state.groups_under(module, recurse):
            group.unit.set_grad_sync(requires_gradient_sync)

    def unshard(self, module=None):
        """FSDP2's unshard(): gathers the units of `module` and of every listed module under it
        (None: all) ahead of their forward, which then finds them gathered. Collective."""
        self._state.check_sharded("FullyShard.unshard", reading=True)
        for group in self._state.groups_under(module):
            if not group.gathered:
                group.check_parameters()
                self._hooks.gather(group)

    def reshard(self, module=None):
        """FSDP2's reshard(): releases the gathered units of `module` and of every listed module
        under it (None: all), e.g. after a forward under reshard_after_forward=False that no
        backward follows. Collective over the units' groups; refused inside backward."""
        self._state.check_sharded("FullyShard.reshard", reading=True)
        for group in self._state.groups_under(module):
            group.release_prefetch()
            if group.gathered:
                self._hooks.reshard(group)

    def set_modules_to_forward_prefetch(self, modules, module=None):
        """FSDP2's set_modules_to_forward_prefetch: when `module`'s forward starts (None: the
        root's), the units of `modules` (listed modules or the root) start their all-gathers, in
        list order, so they are ready when their forwards run; [] turns it off. Also reachable as
        module.set_modules_to_forward_prefetch(modules). The library's own prefetch
        (prefetch=True) still follows the recorded order; prefetch=False leaves only these.
        Local; every rank sets the same lists."""
        call = "FullyShard.set_modules_to_forward_prefetch"
        self._state.group_of(module, call, "module").forward_prefetch = \
            self._groups_of(modules, call)

    def set_modules_to_backward_prefetch(self, modules, module=None):
        """FSDP2's set_modules_to_backward_prefetch: when `module`'s backward starts (None: the
        root's), the units of `modules` start their all-gathers, in list order, instead of
        waiting for their own backward; [] turns it off. Units whose backward never runs are
        resharded at the end of backward. Local; every rank sets the same lists."""
        call = "FullyShard.set_modules_to_backward_prefetch"
        self._state.group_of(module, call, "module").backward_prefetch = \
            self._groups_of(modules, call)

    def _groups_of(self, modules, call):
        if isinstance(modules, torch.nn.Module) or not hasattr(modules, "__iter__"):
            _refuse(call, f"modules: a list of modules, got {type(modules).__name__}")
        return [self._state.group_of(m, call, "modules") for m in modules]

    def register_forward_method(self, module, method_name):
        """FSDP2's register_fsdp_forward_method: calling module.<method_name>() (vit's
        forward_features, a decoder's generate step) gathers and reshards `module`'s unit, casts
        its inputs and outputs, marks the iteration (the root) and keeps saved parameters as
        positions, as module(...) does. `module` is the root or a listed module."""
        call = "register_fsdp_forward_method"
        hooks, root = self._hooks, self.root
        groups = [g for g in self._state.groups if g.module is module]
        if module is not root and not groups:
            _refuse(call, f"module: {type(module).__name__} is neither the root nor a module "
                    "FullyShard listed")
        method = getattr(module, method_name, None)
        if not callable(method):
            _refuse(call, f"method_name: {type(module).__name__} has no method "
                    f"{method_name!r}")
        pre = hooks.pre_forward_hook(groups[0]) if groups else None
        post = hooks.post_forward_hook(groups[0]) if groups else None

        @functools.wraps(method)
        def forward_method(*args, **kwargs):
            if module is root:
                cast = hooks.begin_forward_hook(module, args, kwargs)
                args, kwargs = cast if cast is not None else (args, kwargs)
            if pre is not None:
                cast = pre(module, args, kwargs)
                args, kwargs = cast if cast is not None else (args, kwargs)
            with torch.autograd.graph.saved_tensors_hooks(hooks.pack, hooks.unpack):
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
        state, root = self._state, self.root
        state.check_sharded(call)
        if param_init_fn is not None and not callable(param_init_fn):
            _refuse(call, "param_init_fn: a callable taking a module is needed")
        place = {id(fp.param): fp for g in state.groups for fp in g.fsdp_params}
        plans = []
        for group in state.groups:
            owners = _unit_assignment.owners(root, [fp.param for fp in group.fsdp_params])
            for m in owners:
                if param_init_fn is None and not hasattr(m, "reset_parameters"):
                    _refuse(call, f"module '{group.where}': {type(m).__name__} holds a parameter "
                            "and has no reset_parameters(); pass param_init_fn")
            plans.append(owners)
        for owners in plans:
            mine = {id(q): q for m in owners for q in m._parameters.values()
                    if q is not None and id(q) in place}
            for q in mine.values():  # full-size tensors while the modules initialize them
                fp = place[id(q)]
                q.data = torch.empty(fp.shape, dtype=fp.shard_view.dtype)
            try:
                with torch.no_grad():
                    for m in owners:
                        _materialize.initialize(m, param_init_fn)
            except BaseException:  # the shards keep their values; the parameters view them
                for q in mine.values():
                    q.data = place[id(q)].shard_view
                raise
            with torch.no_grad():
                for q in mine.values():
                    fp = place[id(q)]
                    if sync_module_states:
                        _materialize.broadcast_from_rank0(self.ctx, q.data)
                    full, q.data = q.data, fp.shard_view
                    fp.write_part(full)
        # A module that holds buffers but no parameter of its own (FSDP2's test MLP with its
        # buffer) resets them too, as FSDP2's to_empty() + reset_parameters() of every module do.
        with torch.no_grad():
            for m in root.modules():
                own = [q for q in m._parameters.values() if q is not None]
                if not own and any(b is not None for b in m._buffers.values()) and (
                        param_init_fn is not None or hasattr(m, "reset_parameters")):
                    _materialize.initialize(m, param_init_fn)
        if sync_module_states:  # what reset_parameters() set beside them: buffers, ignored ones
            for t in list(root.buffers()) + [p for p in root.parameters()
                                              if id(p) in state.ignored]:
                _materialize.broadcast_from_rank0(self.ctx, t)

    def state_dict(self, full=True):
        return self._state_dicts.state_dict(full)
    state_dict.__doc__ = StateDicts.state_dict.__doc__

    def load_state_dict(self, state_dict, strict=True, from_rank0=False):
        return self._state_dicts.load_state_dict(state_dict, strict, from_rank0)
    load_state_dict.__doc__ = StateDicts.load_state_dict.__doc__

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
