"""PyTorch modules sharded by libfsdp, with the semantics of FSDP2's `fully_shard`: PyTorch computes
forward and backward on CPU; libfsdp shards, all-gathers, reduce-scatters, steps the optimizer and
writes checkpoints.

    sharded = libfsdp.pytorch.FullyShard(ctx, model, model.blocks)   # each block, then the root
    loss = loss_fn(sharded(x), y)       # or model(x): FullyShard works through the module's hooks
    loss.backward()                     # each unit's reduction starts when its gradients are in
    opt.step(); opt.zero_grad()         # opt = ctx.optimizer("adamw", sharded.units, lr=...)

Units. Every listed submodule becomes one unit, and the root one more (FSDP2: `fully_shard` on
each block, then on the root). A parameter belongs to the innermost listed module that contains
every module using it: a weight tied between the embedding and the output head lives in the unit
of their common listed ancestor (the root) and both use it; autograd sums its two gradients.
Listing two modules that are not nested but share a parameter is refused (FSDP2 needs the same).

Between uses a parameter is this rank's part of its shard (a flat view of the float32 master
shard, as FSDP1's use_orig_params), and after backward p.grad the matching part of the gradient
shard (None for a parameter that has had no gradient since p.grad was last None): torch.optim over
model.parameters() steps the shards, and model.state_dict() / load_state_dict() give and take full
tensors through state-dict hooks. A unit's forward pre-hook unshards it and points its parameters
at the library's unsharded buffer (no copy); its forward hook reshards it (not the root's, which
backward needs first, as FSDP2 does). Tensors autograd saves from parameters are kept as positions
in the buffer and found again after the unit is unsharded for backward. Before a unit's backward
its parameters' .grad are the library's full-gradient buffers, so autograd accumulates into them
(what p.grad held is first taken into the gradient shard); when every gradient is in, the unit is
resharded and its reduction starts. At the end of backward (an autograd callback) units left over
are reduced in unit order (a parameter that got no gradient reduces as zero), every reduction is
waited for, and p.grad shows the gradient shards.

Mixed precision (`MixedPrecisionPolicy`, FSDP2's fields): shards and optimizer state stay float32,
unshard casts to param_dtype, gradients reduce in reduce_dtype (default: param_dtype). Parameters
that are bfloat16 or float16 in the model get float32 masters and compute in their own dtype.
float16 steps go through `libfsdp.GradScaler`. Activation checkpointing
(torch.utils.checkpoint, use_reentrant=False): recomputation finds the unit unsharded for backward.
Meta-device models are materialized one unit at a time (reset_parameters, or param_init_fn)."""
import ctypes
import dataclasses
import functools
import inspect

import numpy as np
import torch

from . import _check, _lib, _refuse, _view
from .context import Context

# torch dtype -> the library's name, for the dtypes a unit computes or reduces in.
_LIB_DTYPE = {torch.float32: "float32", torch.float64: "float64", torch.bfloat16: "bfloat16",
              torch.float16: "float16"}
# PyTorch >= 2.1 hooks a gradient's arrival on the tensor; older versions on its AccumulateGrad node.
_POST_ACCUMULATE = hasattr(torch.Tensor, "register_post_accumulate_grad_hook")
# PyTorch >= 2.0 gives forward pre-hooks the keyword arguments too (FSDP2 casts both).
_KWARGS_HOOKS = "with_kwargs" in inspect.signature(torch.nn.Module.register_forward_pre_hook).parameters
# numpy dtype of a unit's buffers -> torch dtype (numpy shows bfloat16 as uint16 bits).
_TORCH_OF = {np.dtype(np.float32): torch.float32, np.dtype(np.float64): torch.float64,
             np.dtype(np.float16): torch.float16, np.dtype(np.uint16): torch.bfloat16}


@dataclasses.dataclass(frozen=True)
class MixedPrecisionPolicy:
    """FSDP2's MixedPrecisionPolicy. param_dtype: what unsharded parameters (and full gradients)
    are; reduce_dtype: what gradients are reduced in (None: param_dtype); output_dtype: the root's
    floating outputs are cast to it; cast_forward_inputs: each unit's floating positional inputs
    are cast to its param_dtype."""
    param_dtype: torch.dtype = None
    reduce_dtype: torch.dtype = None
    output_dtype: torch.dtype = None
    cast_forward_inputs: bool = True


def _torch_view(address, dtype, shape):
    """A torch tensor over library memory (no copy); bfloat16 from its bits (numpy has none, and
    older torch has no uint16)."""
    array = _view(address, dtype, shape)
    if dtype == np.uint16:
        return torch.from_numpy(array.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(array)


def _functions(*names):
    """The torch functions of these dotted names that this PyTorch has."""
    out = set()
    for name in names:
        obj = torch
        for part in name.split("."):
            obj = getattr(obj, part, None)
        if obj is not None:
            out.add(obj)
    return out


# Over one rank's part of a gradient, these give that rank's answer alone: a norm (clipping, LAMB's
# trust ratio) or torch.amp.GradScaler's inf check, after which ranks would step differently.
_NORMS = _functions("norm", "Tensor.norm", "linalg.norm", "linalg.vector_norm",
                    "linalg.matrix_norm", "_foreach_norm", "frobenius_norm")
_INF_CHECKS = _functions("_amp_foreach_non_finite_check_and_unscale_")


class _GradShard(torch.Tensor):
    """p.grad between steps: this rank's part of the parameter's gradient (a view of the
    gradient shard). Elementwise work on it (torch.optim's optimizers, zero_grad) is that of a
    plain tensor; a norm or torch.amp.GradScaler's inf check over it raises libfsdp.Error
    instead of silently giving this rank's answer alone."""
    where = "a FullyShard parameter"

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if func in _NORMS:
            _refuse("FullyShard", f"{getattr(func, '__name__', func)} over the gradient of "
                    f"{_where_of(args)}: p.grad holds this rank's part of the gradient only, so "
                    "its norm would be this rank's alone; clip with ctx.clip_grad_norm(max_norm, "
                    "norm_type) (the global norm over every unit), not "
                    "torch.nn.utils.clip_grad_norm_; an optimizer that needs whole-parameter "
                    "norms (LAMB, LARS) cannot run over shard views")
        if func in _INF_CHECKS:
            _refuse("FullyShard", f"torch.amp.GradScaler over the gradient of {_where_of(args)}: "
                    "its inf check would see this rank's part of the gradients only, and ranks "
                    "would skip different steps; use libfsdp.GradScaler (every rank skips alike)")
        return super().__torch_function__(func, types, args, kwargs or {})


def _where_of(args):
    """The parameter a _GradShard among args (or in a list among them) belongs to."""
    for a in args:
        for t in (a if isinstance(a, (list, tuple)) else (a,)):
            if isinstance(t, _GradShard) and "where" in t.__dict__:
                return t.where
    return _GradShard.where


class _UnitState:
    """One unit and the module it was made for."""

    def __init__(self, module, where, unit, params, reshard_after_forward):
        self.module, self.where, self.unit = module, where, unit
        self.params = params                   # [(name, Parameter)] in unit order
        # The parameters the unit has gradient memory for (requires_grad at wrapping); of them,
        # active() are those requiring a gradient now (one may be frozen after wrapping).
        self.trainable = frozenset(i for i, (_, p) in enumerate(params) if p.requires_grad)
        self.dtype = _TORCH_OF[unit.param_dtype]  # what the parameters are while unsharded
        self.reshard_after_forward = reshard_after_forward
        self.offsets = None   # element offsets of the parameters from the region's start
        self.extent = 0       # elements from the region's start to the end of the last one
        self.start = 0        # offset of parameter 0 from the region's start, in bytes
        self.region = None    # torch view of the unsharded parameters while unsharded
        self.prepared = False  # this backward gave its parameters their gradient buffers
        self.pending = 0      # gradients still to arrive in this backward
        self.reduced = False  # its reduction started in this backward
        self.shard_views = []  # per parameter: its part of this rank's shard (1-D torch view)
        self.grad_views = None  # per trainable parameter: its part of the gradient shard
        self.got_grad = {}    # index -> True: autograd gave it a gradient in this backward
        self.user_grads = None  # index -> p.grad as the user left it (None: not yet taken)
        self.accumulators = {}  # index -> hooked AccumulateGrad node (PyTorch < 2.1 only)

    def active(self):
        """[(index, parameter)] of the unit's trainable parameters that require a gradient now."""
        return [(i, p) for i, (_, p) in enumerate(self.params)
                if i in self.trainable and p.requires_grad]

    def check_requires_grad(self):
        """A parameter frozen at wrapping has no gradient memory in the unit: unfreezing it after
        wrapping is refused (libfsdp.Error naming it) rather than training it wrongly."""
        for i, (name, p) in enumerate(self.params):
            if p.requires_grad and i not in self.trainable:
                _refuse("FullyShard", f"parameter \"{name}\" of module '{self.where}': "
                        "requires_grad was set after FullyShard wrapped it frozen, and its unit "
                        "holds no gradient for it; set requires_grad before FullyShard (freezing "
                        "after wrapping is supported)")


def _register_pre_hook(module, fn):
    """module's forward pre-hook fn(module, args, kwargs) -> None or (args, kwargs). Before
    PyTorch 2.0, kwargs is {} and only the positional arguments can be replaced."""
    if _KWARGS_HOOKS:
        module.register_forward_pre_hook(fn, with_kwargs=True)
        return

    def positional(m, args):
        out = fn(m, args, {})
        return None if out is None else out[0]
    module.register_forward_pre_hook(positional)


def _is_dataclass(value):
    return dataclasses.is_dataclass(value) and not isinstance(value, type)


def _tensors(value):
    """The tensors in a module's output, at any depth of tuples (namedtuples too), lists, dicts
    and dataclasses."""
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (tuple, list)):
        for v in value:
            yield from _tensors(v)
    elif isinstance(value, dict):
        for v in value.values():
            yield from _tensors(v)
    elif _is_dataclass(value):
        for f in dataclasses.fields(value):
            yield from _tensors(getattr(value, f.name))


def _cast(value, dtype):
    """`value` with its floating tensors cast to dtype, at any depth of the containers _tensors
    walks; each container keeps its type (a namedtuple stays one, a dataclass is replaced)."""
    if isinstance(value, torch.Tensor):
        return value.to(dtype) if value.is_floating_point() and value.dtype != dtype else value
    if isinstance(value, tuple) and hasattr(value, "_fields"):  # a namedtuple
        return type(value)(*(_cast(v, dtype) for v in value))
    if isinstance(value, tuple):
        return tuple(_cast(v, dtype) for v in value)
    if isinstance(value, list):
        return [_cast(v, dtype) for v in value]
    if isinstance(value, dict):
        out = {k: _cast(v, dtype) for k, v in value.items()}
        return out if type(value) is dict else type(value)(out)
    if _is_dataclass(value):
        return dataclasses.replace(value, **{f.name: _cast(getattr(value, f.name), dtype)
                                             for f in dataclasses.fields(value) if f.init})
    return value


class FullyShard:
    """Shards `root`'s parameters over `ctx`: one unit per module of `submodules` (in forward
    order), and one for the root with the parameters no listed module took.

    mp_policy: MixedPrecisionPolicy (None: compute in the parameters' dtype). reshard_after_forward:
    False keeps every unit unsharded from forward to backward (ZeRO-2-like; the root always is).
    prefetch: the library all-gathers the next unit while this one computes. find_unused_parameters:
    as DDP's: ranks may leave different parameters without gradient; every unit then stays
    unsharded from forward to backward and every reduction waits for the end of backward, in unit
    order, so that all ranks issue the same collectives. param_init_fn(module): fills a meta-device module's
    parameters once materialized on CPU (default: its reset_parameters()). sync_module_states:
    every rank starts from rank 0's values (PyTorch's sync_module_states)."""

    def __init__(self, ctx, root, submodules=(), *, mp_policy=None, reshard_after_forward=True,
                 prefetch=True, find_unused_parameters=False, param_init_fn=None,
                 sync_module_states=True):
        plan = self._plan(ctx, root, submodules, mp_policy, param_init_fn)
        self.ctx, self.root, self.mp_policy = ctx, root, mp_policy or MixedPrecisionPolicy()
        self.find_unused_parameters = bool(find_unused_parameters)
        self.states, self._requests = [], []
        self._in_backward, self._attached = False, []
        created, replaced = [], []
        try:
            for module, where, params in plan:
                is_root = module is root
                fresh = self._materialize(root, params, param_init_fn, replaced)
                unit = self._create_unit(ctx, where, fresh, sync_module_states)
                created.append(unit)
                for (_, old), (_, p) in zip(params, fresh):
                    if p is not old:  # materialized from meta: its values now live in the shards
                        p.data = torch.empty(0, dtype=p.dtype)
                params = fresh
                # The root, and every unit under find_unused_parameters, stays unsharded from
                # forward to backward: an unshard in backward is collective, and ranks whose
                # losses use different units would issue different ones.
                state = _UnitState(module, where, unit, params,
                                   reshard_after_forward and not is_root
                                   and not self.find_unused_parameters)
                self.states.append(state)
        except BaseException:
            for unit in reversed(created):
                unit.destroy()
            for holder, name, old in reversed(replaced):
                holder._parameters[name] = old
            raise
        # Nothing can fail from here on: the model changes now. The root's first pre-hook marks
        # the iteration (the library's prefetch follows the unshard order between the marks).
        _register_pre_hook(root, self._begin_forward_hook)
        # The public names (PyTorch >= 2.4 / 2.0) or, before them, the same hooks' private ones;
        # plain functions, as the public ones mark the hook with an attribute.
        def save_hook(*args):
            return self._state_dict_hook(*args)

        def load_hook(*args):
            return self._load_state_dict_hook(*args)
        getattr(root, "register_state_dict_post_hook", root._register_state_dict_hook)(save_hook)
        if hasattr(root, "register_load_state_dict_pre_hook"):
            root.register_load_state_dict_pre_hook(load_hook)
        else:
            root._register_load_state_dict_pre_hook(load_hook, with_module=True)
        for state in self.states:
            self._take_storage(state)
            _register_pre_hook(state.module, self._pre_forward_hook(state))
            state.module.register_forward_hook(self._post_forward_hook(state))
        self.root_state = self.states[-1] if self.states and self.states[-1].module is root else None
        self._wrap_root_forward()
        ctx.set_prefetch(prefetch, prefetch)

    # ---- planning: every check before anything is created ----------------------------------
    @staticmethod
    def _plan(ctx, root, submodules, policy, param_init_fn):
        call = "FullyShard"
        if not isinstance(ctx, Context):
            _refuse(call, f"ctx: a libfsdp.Context is needed, got {type(ctx).__name__}")
        if not isinstance(root, torch.nn.Module):
            _refuse(call, f"root: a torch.nn.Module is needed, got {type(root).__name__}")
        if getattr(root, "_libfsdp_fully_shard", False):
            _refuse(call, "root: FullyShard was already applied to this module")
        if policy is not None and not isinstance(policy, MixedPrecisionPolicy):
            _refuse(call, f"mp_policy: a MixedPrecisionPolicy is needed, got "
                    f"{type(policy).__name__}")
        if param_init_fn is not None and not callable(param_init_fn):
            _refuse(call, "param_init_fn: a callable taking a module is needed")
        policy = policy or MixedPrecisionPolicy()
        for field in ("param_dtype", "reduce_dtype"):
            value = getattr(policy, field)
            if value is not None and value not in _LIB_DTYPE:
                _refuse(call, f"mp_policy.{field}: {value} is not one of "
                        f"{sorted(str(d) for d in _LIB_DTYPE)}")
        if policy.output_dtype is not None and not (isinstance(policy.output_dtype, torch.dtype)
                                                    and policy.output_dtype.is_floating_point):
            _refuse(call, f"mp_policy.output_dtype: {policy.output_dtype} is not a floating dtype")
        if isinstance(submodules, torch.nn.Module) and not isinstance(submodules,
                                                                      torch.nn.ModuleList):
            submodules = [submodules]
        names = {}
        for name, m in root.named_modules():
            names.setdefault(id(m), name or "<root>")
        listed = []
        for k, m in enumerate(submodules):
            if not isinstance(m, torch.nn.Module):
                _refuse(call, f"submodules[{k}]: a torch.nn.Module is needed, got "
                        f"{type(m).__name__}")
            if id(m) not in names:
                _refuse(call, f"submodules[{k}] ({type(m).__name__}): not a submodule of root")
            if any(m is other for other in listed):
                _refuse(call, f"submodules[{k}] ('{names[id(m)]}'): listed twice")
            if m is not root:
                listed.append(m)
        listed.append(root)  # the root takes what no listed submodule took
        inside = [{id(x) for x in m.modules()} for m in listed]
        order = {id(m): k for k, m in enumerate(listed)}
        # The innermost listed module around every module of the tree.
        innermost = {}

        def walk(module, around):
            if id(module) in innermost:
                return
            around = order.get(id(module), around)
            innermost[id(module)] = around
            for child in module.children():
                walk(child, around)
        walk(root, order[id(root)])
        # Every parameter: the modules holding it, its unit.
        uses, first_name = {}, {}
        for mname, m in root.named_modules():
            for pname, p in m._parameters.items():
                if p is None:
                    continue
                full = f"{mname}.{pname}" if mname else pname
                first_name.setdefault(id(p), full)
                uses.setdefault(id(p), (p, set()))[1].add(innermost[id(m)])
        owner = {}
        for pid, (p, units) in uses.items():
            name = first_name[pid]
            if not p.is_floating_point() or p.is_complex():
                _refuse(call, f"parameter \"{name}\": dtype {p.dtype}; only floating-point "
                        "parameters can be sharded")
            if p.device.type not in ("cpu", "meta"):
                _refuse(call, f"parameter \"{name}\": on {p.device}; FullyShard runs PyTorch on "
                        "the CPU (host memory); move the model to the CPU or the meta device")
            chosen = None
            for k in units:  # the outermost; every other one must lie inside it
                if all(id(listed[j]) in inside[k] for j in units):
                    chosen = k
            if chosen is None:
                a, b = sorted(units)[:2]
                _refuse(call, f"parameter \"{name}\": used by '{names[id(listed[a])]}' and "
                        f"'{names[id(listed[b])]}', listed modules neither of which contains the "
                        "other; a shared (tied) parameter must live in a listed module that "
                        "contains both (leave one of them out, or list a common ancestor)")
            owner[pid] = chosen
        plan = []
        for k, m in enumerate(listed):
            params = [(first_name[pid], p) for pid, (p, _) in uses.items() if owner[pid] == k]
            if not params:
                continue
            where = names[id(m)]
            storage = {torch.float64 if p.dtype == torch.float64 else torch.float32
                       for _, p in params}
            if len(storage) > 1:
                _refuse(call, f"module '{where}': float64 and lower-precision parameters in one "
                        "unit; a unit has one dtype (list the float64 part as its own submodule)")
            wide = storage.pop() == torch.float64
            for field in ("param_dtype", "reduce_dtype"):
                value = getattr(policy, field)
                if value is not None and (value == torch.float64) != wide:
                    _refuse(call, f"mp_policy.{field}: {value} for module '{where}', whose "
                            f"parameters are {'float64' if wide else 'float32 or lower'}: float32 "
                            "masters compute and reduce in float32, bfloat16 or float16; float64 "
                            "parameters only in float64")
            for name, p in params:
                if p.device.type == "meta" and param_init_fn is None:
                    holder = FullyShard._holders(root, p)[0][0]
                    if not hasattr(holder, "reset_parameters"):
                        _refuse(call, f"parameter \"{name}\": on the meta device, and its module "
                                f"({type(holder).__name__}) has no reset_parameters(); pass "
                                "param_init_fn")
            plan.append((m, where, params))
        return plan

    @staticmethod
    def _holders(root, p):
        """(module, attribute) pairs that hold parameter p."""
        return [(m, n) for m in root.modules() for n, q in m._parameters.items() if q is p]

    # ---- construction ------------------------------------------------------------------------
    def _materialize(self, root, params, init_fn, replaced):
        """Meta parameters of one unit become CPU parameters with values (every module holding
        one gets new parameters, then reset_parameters() or init_fn); others are returned as
        they are."""
        if not any(p.device.type == "meta" for _, p in params):
            return params
        fresh, holders = {}, []
        for name, p in params:
            if p.device.type != "meta":
                continue
            for m, attr in self._holders(root, p):
                if m not in holders:
                    holders.append(m)
        for m in holders:  # every meta parameter of a holder (reset_parameters fills them all)
            for attr, q in list(m._parameters.items()):
                if q is None or q.device.type != "meta":
                    continue
                if id(q) not in fresh:
                    fresh[id(q)] = torch.nn.Parameter(torch.empty(q.shape, dtype=q.dtype),
                                                      requires_grad=q.requires_grad)
                replaced.append((m, attr, q))
                m._parameters[attr] = fresh[id(q)]
            for attr, b in list(m._buffers.items()):
                if b is not None and b.device.type == "meta":
                    m._buffers[attr] = torch.zeros(b.shape, dtype=b.dtype)
        with torch.no_grad():
            for m in holders:
                (init_fn or (lambda mod: mod.reset_parameters()))(m)
        return [(name, fresh.get(id(p), p)) for name, p in params]

    def _create_unit(self, ctx, where, params, sync):
        storage = torch.float64 if params[0][1].dtype == torch.float64 else torch.float32
        policy = self.mp_policy
        compute = policy.param_dtype
        if compute is None and params[0][1].dtype in (torch.bfloat16, torch.float16):
            compute = params[0][1].dtype  # a low-precision model: float32 masters, its dtype
        values = []
        for name, p in params:
            v = p.detach()
            v = v.to(storage) if v.dtype != storage else v
            values.append((name, v.contiguous().numpy(), p.requires_grad))
        return ctx.unit(values, name=where, sync_from_rank0=sync,
                        param_dtype=_LIB_DTYPE.get(compute),
                        reduce_dtype=_LIB_DTYPE.get(policy.reduce_dtype))

    def _take_storage(self, state):
        """Points every parameter at its part of this rank's shard, and hooks the arrival of
        each trainable parameter's gradient. The hook lives on the tensor, not on its
        AccumulateGrad node: autograd makes a new node when the parameter's dtype changes
        (float32 shard views between uses, param_dtype buffers in use). Before PyTorch 2.1,
        _hook_accumulators hooks each new node as the unit is unsharded."""
        unit = state.unit
        shard = torch.from_numpy(unit.shard())  # float32 or float64: the storage dtype
        for i, (_, p) in enumerate(state.params):
            shard_off, _, length = unit.shard_range(i)
            state.shard_views.append(shard[shard_off:shard_off + length])
            if p.requires_grad and _POST_ACCUMULATE:
                p.register_post_accumulate_grad_hook(self._grad_done_hook(state, i))
        self._detach(state)

    def _hook_accumulators(self, state):
        """PyTorch < 2.1: hooks each trainable parameter's AccumulateGrad node (made here, at the
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
            with torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack):
                return inner(*args, **kwargs)
        root.forward = forward
        root._libfsdp_fully_shard = True

    @property
    def units(self):
        return [s.unit for s in self.states]

    def numel(self):
        """The model's parameter count at full size (a tied parameter once): what
        sum(p.numel() for p in model.parameters()) gave before wrapping, now that each p holds
        this rank's part. Local."""
        return sum(int(np.prod(state.unit.shapes[i], dtype=np.int64))
                   for state in self.states for i in range(len(state.params)))

    # ---- parameters pointing at the unsharded buffer, or at nothing ------------------------
    def _attach(self, state):
        unit = state.unit
        unit.unshard()
        ptr = ctypes.c_void_p()
        _check(_lib.fsdp_param_data(unit._handle, 0, ctypes.byref(ptr)))
        size = unit.param_dtype.itemsize
        if state.offsets is None:  # the layout is fixed: offsets from parameter 0 once
            addrs = [ptr.value]
            for i in range(1, len(state.params)):
                p = ctypes.c_void_p()
                _check(_lib.fsdp_param_data(unit._handle, i, ctypes.byref(p)))
                addrs.append(p.value)
            lo = min(addrs)
            state.start = ptr.value - lo
            state.offsets = [(a - lo) // size for a in addrs]
            state.extent = max(o + int(np.prod(s, dtype=np.int64))
                               for o, s in zip(state.offsets, unit.shapes))
        state.region = _torch_view(ptr.value - state.start, unit.param_dtype, (state.extent,))
        region = state.region
        for (_, p), off, shape in zip(state.params, state.offsets, unit.shapes):
            n = int(np.prod(shape, dtype=np.int64))
            p.data = region[off:off + n].view(shape)
        if not _POST_ACCUMULATE:
            self._hook_accumulators(state)
        self._attached.append(state)

    def _detach(self, state):
        for (_, p), view in zip(state.params, state.shard_views):
            p.data = view
        state.region = None
        if state in self._attached:
            self._attached.remove(state)

    def _reshard(self, state):
        self._detach(state)
        state.unit.reshard()

    def _give_grads(self, state):
        """Points the trainable parameters' .grad at the library's full-gradient buffers (zeroed,
        or holding earlier micro-batches under no_sync), after taking over what the user left in
        p.grad."""
        self._take_user_grads(state)
        for i, p in state.active():
            ptr = ctypes.c_void_p()
            _check(_lib.fsdp_grad_data(state.unit._handle, i, ctypes.byref(ptr)))
            p.grad = _torch_view(ptr.value, state.unit.param_dtype, state.unit.shapes[i])

    def _take_user_grads(self, state):
        """Before a backward touches a unit: p.grad as the user left it becomes what the
        reduction adds to, as autograd accumulates into p.grad. None (zero_grad()) zeroes that
        parameter's part of the gradient shard; the shard view itself (also after an in-place
        zero_grad(set_to_none=False)) is used as it is; another tensor of its shape is copied in.
        Under no_sync the shard is not touched: p.grad is only put back after backward."""
        active = state.active()
        if state.user_grads is not None or not active:  # a frozen unit: p.grad stays as it is
            return
        state.user_grads = {i: p.grad for i, p in active}
        if not self.ctx.grad_sync:
            return
        views = self._grad_views(state)
        for i, g in state.user_grads.items():
            view = views[i]
            if g is None:
                view.zero_()
            elif g.data_ptr() != view.data_ptr() or g.shape != view.shape:
                if g.shape != view.shape:
                    name = state.params[i][0]
                    _refuse("FullyShard", f"parameter \"{name}\" of module '{state.where}': "
                            f"p.grad has shape {tuple(g.shape)}, but this rank's part of the "
                            f"parameter has shape {tuple(view.shape)}")
                view.copy_(g.detach())

    def _grad_views(self, state):
        """Per trainable parameter, its part of this rank's gradient shard (1-D torch views; the
        shard's address is fixed once it exists)."""
        if state.grad_views is None:
            grad = torch.from_numpy(state.unit.shard_grad())
            state.grad_views = {}
            for i in sorted(state.trainable):
                shard_off, _, length = state.unit.shard_range(i)
                view = grad[shard_off:shard_off + length].as_subclass(_GradShard)
                view.where = f"parameter \"{state.params[i][0]}\" of module '{state.where}'"
                state.grad_views[i] = view
        return state.grad_views

    def _show_grads(self, state):
        """After backward: each trainable parameter's p.grad is its part of the gradient shard,
        or None if it has had no gradient since the user last set p.grad to None (PyTorch's
        rule: torch.optim then skips it). Under no_sync, p.grad goes back to what it was."""
        if state.user_grads is None:
            return
        if not self.ctx.grad_sync:
            for i, g in state.user_grads.items():
                state.params[i][1].grad = g
            return
        views = self._grad_views(state)
        for i, g in state.user_grads.items():
            got = g is not None or state.got_grad.get(i) or self.find_unused_parameters
            state.params[i][1].grad = views[i] if got else None

    # ---- hooks ---------------------------------------------------------------------------------
    def _cast_inputs(self, dtype, args, kwargs):
        """(args, kwargs) cast to a low-precision compute dtype under cast_forward_inputs (FSDP2
        casts every floating tensor of both, at any depth); None when nothing is cast."""
        if self.mp_policy.cast_forward_inputs and dtype in (torch.bfloat16, torch.float16):
            return _cast(args, dtype), _cast(kwargs, dtype)
        return None

    def _begin_forward_hook(self, module, args, kwargs):
        if not self._in_backward:
            self.ctx.begin_forward()
        if self.root_state is None:  # a root without parameters of its own casts as FSDP2's does
            return self._cast_inputs(self.mp_policy.param_dtype, args, kwargs)
        return None

    def _pre_forward_hook(self, state):
        def hook(module, args, kwargs):
            state.check_requires_grad()
            if state.region is None:  # in backward: recomputation (activation checkpointing)
                self._attach(state)
            return self._cast_inputs(state.dtype, args, kwargs)
        return hook

    def _post_forward_hook(self, state):
        def hook(module, args, output):
            if self._in_backward:  # recomputation: the unit stays unsharded for its backward
                return None
            needs_grad = [t for t in _tensors(output) if t.requires_grad]
            if state.reshard_after_forward or not needs_grad:
                self._reshard(state)
            for t in needs_grad:
                t.register_hook(self._pre_backward_hook(state))
            if module is self.root and self.mp_policy.output_dtype is not None:
                return _cast(output, self.mp_policy.output_dtype)
            return None
        return hook

    def _pre_backward_hook(self, state):
        def hook(grad):
            if not self._in_backward:
                self._in_backward = True
                self.ctx.begin_backward()
                torch.autograd.Variable._execution_engine.queue_callback(self._finish_backward)
            if state.prepared:
                return None
            state.prepared = True
            if state.region is None:
                self._attach(state)
            self._give_grads(state)
            state.pending = len(state.active())
            return None
        return hook

    def _grad_done_hook(self, state, index):
        def hook(param):
            if not state.prepared:
                raise RuntimeError(
                    f"libfsdp: a parameter of module '{state.where}' got a gradient that did not "
                    "flow through that module's output; FullyShard needs each parameter used "
                    "inside the forward of the module whose unit holds it")
            state.got_grad[index] = True
            state.pending -= 1
            if state.pending == 0:
                for _, p in state.active():
                    p.grad = None
                self._reshard(state)
                if not self.find_unused_parameters:
                    self._requests.append(state.unit.reduce_grads_async())
                    state.reduced = True
        return hook

    def _finish_backward(self):
        """End of backward (an autograd callback): units not yet reduced (parameters without a
        gradient, frozen units, or all of them under find_unused_parameters) in unit order, on
        every rank alike; then every reduction is waited for."""
        try:
            for state in self.states:
                if state.reduced:
                    continue
                active = state.active()
                for _, p in active:
                    p.grad = None
                if state.region is not None:
                    self._reshard(state)
                # A unit none of whose parameters requires a gradient now (frozen, also after
                # wrapping) is not reduced: requires_grad is the same on every rank.
                if active:
                    if not state.prepared:  # no gradient at all: zeros
                        self._take_user_grads(state)
                        for i, _ in active:
                            state.unit.grad(i)
                    self._requests.append(state.unit.reduce_grads_async())
            requests, self._requests = self._requests, []
            for r in requests:
                r.wait()
            for state in self.states:
                self._show_grads(state)
        finally:
            self._in_backward = False
            for state in self.states:
                state.prepared, state.reduced, state.pending = False, False, 0
                state.got_grad, state.user_grads = {}, None

    def _pack(self, t):
        if not self._attached or not isinstance(t, torch.Tensor):
            return t
        ptr = t.data_ptr()
        for state in self._attached:
            region = state.region
            base = region.data_ptr()
            if t.dtype == region.dtype and base <= ptr < base + region.numel() * t.element_size():
                return (state, (ptr - base) // t.element_size(), t.size(), t.stride())
        return t

    def _unpack(self, packed):
        if isinstance(packed, torch.Tensor):
            return packed
        state, offset, size, stride = packed
        if state.region is None:
            raise RuntimeError(f"libfsdp: the parameters of module '{state.where}' are needed in "
                               "backward but the unit is sharded (is its output part of the "
                               "loss?)")
        return state.region.as_strided(size, stride, offset)

    # ---- the loop ------------------------------------------------------------------------------
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

    # ---- state dicts ------------------------------------------------------------------------------
    def _names(self):
        """Every name under which root.state_dict() lists each parameter (tied ones twice), and
        its persistent buffers."""
        params, buffers = {}, {}

        def walk(module, prefix, seen):
            if id(module) in seen:
                return
            seen = seen | {id(module)}
            for n, p in module._parameters.items():
                if p is not None:
                    params.setdefault(id(p), []).append(prefix + n)
            for n, b in module._buffers.items():
                if b is not None and n not in module._non_persistent_buffers_set:
                    buffers[prefix + n] = b
            for n, child in module._modules.items():
                if child is not None:
                    walk(child, prefix + n + ".", seen)
        walk(self.root, "", frozenset())
        return params, buffers

    def _twin(self, state, sync=False, values=None):
        """A float32 (storage dtype) unit with the same layout as `state`'s, optionally created
        from full `values` (rank 0's with sync): its shard lines up with the unit's."""
        unit = state.unit
        descs = []
        for i, (name, p) in enumerate(state.params):
            if values is None:
                descs.append((name, unit.shapes[i], unit.dtype, p.requires_grad))
            else:
                descs.append((name, values[i], p.requires_grad))
        return self.ctx.unit(descs, name=f"{state.where} (state dict)", sync_from_rank0=sync)

    def _full_values(self, state):
        """The unit's full master values (storage dtype), one numpy array per parameter."""
        return state.unit.gather()

    def _check_sharded(self, call, reading=False):
        """State dicts are taken outside backward; reading one also while units stay gathered
        after a forward (reshard_after_forward=False: the masters are read, not the gathered
        copies); loading one only when every unit is sharded (a gathered copy would not see it)."""
        if self._in_backward:
            _refuse(call, "inside backward; call it between steps")
        if self._attached and not reading:
            names = ", ".join(f"'{s.where}'" for s in self._attached)
            _refuse(call, f"units {names} are unsharded (after a forward, before its backward); "
                    "load it between steps")

    def state_dict(self, full=True):
        """The model's state as plain tensors, under root.state_dict()'s names (tied parameters
        under each of theirs). full=True: full float32 (or float64) master values on every rank
        (collective); full=False: this rank's own part, {name: (values, param_offset)} where
        values are the parameter's flattened elements [param_offset, param_offset + len). Buffers
        are included as they are. Keys in root.state_dict()'s order."""
        self._check_sharded("FullyShard.state_dict", reading=True)
        names, buffers = self._names()
        out = {}
        for state in self.states:
            if full:
                values = self._full_values(state)
            for i, (_, p) in enumerate(state.params):
                if full:
                    tensor = torch.from_numpy(values[i])
                else:
                    shard_off, param_off, length = state.unit.shard_range(i)
                    tensor = (torch.from_numpy(state.unit.shard()[shard_off:shard_off + length]
                                               .copy()), param_off)
                for name in names[id(p)]:
                    out[name] = tensor
        for name, b in buffers.items():
            out[name] = b.detach().clone()
        # In root.state_dict()'s order, as nn.Module gives its keys (FSDP2 keeps it too).
        order = {k: n for n, k in enumerate(self.root.state_dict(keep_vars=True))}
        return dict(sorted(out.items(), key=lambda kv: (order.get(kv[0], len(order)), kv[0])))

    def _agree_with_rank0(self, error):
        """Collective: every rank learns whether rank 0 found `error` (a libfsdp.Error or None)."""
        refused = self.ctx.broadcast(np.array([0 if error is None else 1], np.int32))[0]
        if error is not None:
            raise error
        if refused:
            _refuse("FullyShard.load_state_dict", "rank 0 refused its state_dict (see its error)")

    def load_state_dict(self, state_dict, strict=True, from_rank0=False):
        """Loads full tensors (as nn.Module.state_dict() gives them, any floating dtype) into the
        shards: each rank keeps its part; local. from_rank0=True: only rank 0's dict is read (the
        others may pass {}) and must hold every parameter; collective. Every name and shape is
        checked before anything is written: a refused dict changes nothing (with from_rank0, on
        every rank)."""
        call = "FullyShard.load_state_dict"
        self._check_sharded(call)
        if not isinstance(state_dict, dict):
            _refuse(call, f"state_dict: a dict is needed, got {type(state_dict).__name__}")
        names, buffers = self._names()
        reads = not from_rank0 or self.ctx.group()[0] == 0
        entries = [(state, i, names[id(p)]) for state in self.states
                   for i, (_, p) in enumerate(state.params)]
        error = None
        if reads:
            try:
                self._check_state_dict(call, state_dict, entries, buffers,
                                       strict or from_rank0)
            except Exception as e:  # noqa: BLE001 - a libfsdp.Error, given to the agreement
                error = e
        if from_rank0:
            self._agree_with_rank0(error)
        elif error is not None:
            raise error
        key_of = {}
        if reads:
            for state, i, aliases in entries:
                key_of[(id(state), i)] = next((a for a in aliases if a in state_dict), None)
        for state in self.states:
            dtype = torch.float64 if state.unit.dtype == np.float64 else torch.float32
            full = []
            for i in range(len(state.params)):
                key = key_of.get((id(state), i))
                full.append(None if key is None else
                            state_dict[key].detach().to(dtype).contiguous().numpy())
            if from_rank0:  # rank 0's values reach every rank through a twin unit's creation
                twin = self._twin(state, sync=True, values=full if reads else [
                    np.zeros(s, state.unit.dtype) for s in state.unit.shapes])
                state.unit.shard()[...] = twin.shard()
                twin.destroy()
                continue
            shard = state.unit.shard()
            for i, v in enumerate(full):
                if v is None:
                    continue
                shard_off, param_off, length = state.unit.shard_range(i)
                shard[shard_off:shard_off + length] = v.reshape(-1)[param_off:param_off + length]
        if reads:
            with torch.no_grad():
                for name, b in buffers.items():
                    if name in state_dict:
                        b.copy_(state_dict[name])

    def _state_dict_hook(self, module, state_dict, prefix, local_metadata):
        """model.state_dict(): each parameter's full master values at its original shape, in
        place of this rank's part (FSDP1's full state dict). Collective over the shard group:
        every rank calls it. keep_vars=True gives the Parameters themselves, gathering nothing."""
        names, _ = self._names()
        keys = [(state, i, prefix + name) for state in self.states
                for i, (_, p) in enumerate(state.params) for name in names[id(p)]]
        if not any(k in state_dict and not isinstance(state_dict[k], torch.nn.Parameter)
                   for _, _, k in keys):
            return
        self._check_sharded("FullyShard: model.state_dict()", reading=True)
        full = {id(state): self._full_values(state) for state in self.states}
        for state, i, key in keys:
            if key in state_dict and not isinstance(state_dict[key], torch.nn.Parameter):
                state_dict[key] = torch.from_numpy(full[id(state)][i])

    def _load_state_dict_hook(self, module, state_dict, prefix, local_metadata, strict,
                              missing_keys, unexpected_keys, error_msgs):
        """model.load_state_dict(): full tensors of the original shapes (model.state_dict()'s)
        are cut to this rank's part, which nn.Module then copies into the shard. Local. Every
        entry is checked before any is cut: a wrong shape changes nothing."""
        call = "FullyShard: model.load_state_dict()"
        if local_metadata.get("assign_to_params_buffers"):
            _refuse(call, "assign=True would replace the shard views; load without assign")
        self._check_sharded(call)
        names, _ = self._names()
        cut = {}
        for state in self.states:
            for i, (_, p) in enumerate(state.params):
                shape = tuple(state.unit.shapes[i])
                _, param_off, length = state.unit.shard_range(i)
                for name in names[id(p)]:
                    v = state_dict.get(prefix + name)
                    if not isinstance(v, torch.Tensor):
                        continue  # absent or not a tensor: nn.Module reports it
                    if tuple(v.shape) != shape:
                        _refuse(call, f"state_dict[\"{prefix + name}\"]: shape "
                                f"{tuple(v.shape)}, but the parameter has shape {shape}")
                    cut[prefix + name] = v.detach().reshape(-1)[param_off:param_off + length]
        state_dict.update(cut)

    @staticmethod
    def _check_state_dict(call, state_dict, entries, buffers, strict):
        known = {a for _, _, aliases in entries for a in aliases} | set(buffers)
        missing = [aliases[0] for _, _, aliases in entries
                   if not any(a in state_dict for a in aliases)]
        missing += [n for n in buffers if n not in state_dict]
        unexpected = [n for n in state_dict if n not in known]
        if strict and (missing or unexpected):
            _refuse(call, f"state_dict: missing keys {missing[:5]}, unexpected keys "
                    f"{unexpected[:5]}")
        for state, i, aliases in entries:
            for key in aliases:
                if key not in state_dict:
                    continue
                v = state_dict[key]
                if not isinstance(v, torch.Tensor) or not v.is_floating_point():
                    _refuse(call, f"state_dict[\"{key}\"]: a floating-point tensor is needed, "
                            f"got {getattr(v, 'dtype', type(v).__name__)}")
                if tuple(v.shape) != tuple(state.unit.shapes[i]):
                    _refuse(call, f"state_dict[\"{key}\"]: shape {tuple(v.shape)}, but the "
                            f"parameter has shape {tuple(state.unit.shapes[i])}")
        for name, b in buffers.items():
            if name in state_dict and tuple(state_dict[name].shape) != tuple(b.shape):
                _refuse(call, f"state_dict[\"{name}\"]: shape {tuple(state_dict[name].shape)}, "
                        f"but the buffer has shape {tuple(b.shape)}")
