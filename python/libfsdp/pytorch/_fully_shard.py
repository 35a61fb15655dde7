"""libfsdp.pytorch.fully_shard: FSDP2's fully_shard, drop-in. Each call makes one unit of the
module's (or modules') parameters that no earlier call took, in the dim-0 layout (FSDP2's Shard(0)
chunks), and swaps the module's class for an FSDPModule one; between uses every parameter is a
full-shape DTensor whose local tensor is this rank's rows of the shard (a view). The calls made
bottom-up form one FullyShard group per model: a call on a module that contains earlier ones
adopts their units (theirs first, in call order), and the outermost module is the root."""
import functools

import torch

from .. import _capi, _choice, _refuse
from . import _device, _mesh, _unit_assignment
from ._compat import TORCH_2_6, register_pre_hook
from ._materialize import create_unit
from ._hooks import Hooks
from ._param_group import ParamGroup
from .fullyshard import FullyShard
from .policy import MixedPrecisionPolicy

_TorchFSDPModule, _TorchPolicy, _TorchOffload = object, None, None
if TORCH_2_6:  # FSDP2's classes, so that isinstance checks and FSDP2's own helpers find ours
    from torch.distributed.fsdp import FSDPModule as _TorchFSDPModule
    from torch.distributed.fsdp import MixedPrecisionPolicy as _TorchPolicy
    from torch.distributed.fsdp import OffloadPolicy as _TorchOffload

CALL = "fully_shard"


class FSDPModule(_TorchFSDPModule):
    """The class fully_shard gives a module (FSDP<Name>(FSDPModule, Name)); under PyTorch >= 2.6
    a subclass of torch.distributed.fsdp.FSDPModule. FSDP2's methods act on the module's unit;
    those libfsdp cannot honour raise libfsdp.Error."""

    def __new__(cls, *args, **kwargs):  # as FSDP2's: the module class after the FSDPModules
        orig = next(c for c in cls.__mro__ if issubclass(c, torch.nn.Module)
                    and not issubclass(c, FSDPModule) and c is not _TorchFSDPModule)
        self = orig.__new__(orig, *args, **kwargs)
        self.__init__(*args, **kwargs)
        return self

    def __deepcopy__(self, memo):
        _refuse("copy.deepcopy", f"{type(self).__name__}: a module fully_shard sharded cannot be "
                "copied (its parameters are views of the library's shards); copy the model "
                "before fully_shard, as FSDP2 requires")

    # ---- the module's unit --------------------------------------------------------------------
    def _libfsdp(self):
        group = self.__dict__.get("_libfsdp_group")
        if group is None:
            _refuse(CALL, f"{type(self).__name__}: no unit (made by a copy of the module?)")
        return group

    def _own_groups(self):
        return [g for g in self._libfsdp()._state.groups if any(m is self for m in g.modules)]

    def _groups(self, recurse):
        return (self._libfsdp()._state.groups_under(self, recurse) if recurse
                else self._own_groups())

    def unshard(self, async_op=False):
        """Gathers this module's unit (not those of modules under it, as FSDP2's). async_op:
        returns a handle whose wait() its forward also waits for. Collective."""
        shard = self._libfsdp()
        shard._state.check_sharded("FSDPModule.unshard", reading=True)
        shard._state.join_stream()
        for group in self._own_groups():
            if not group.gathered:
                group.check_parameters(take_replaced=False)
                if async_op:
                    group.prefetch()
                else:
                    shard._hooks.gather(group)
        return _Handle() if async_op else None

    def reshard(self):
        """Releases this module's unit if gathered (not those under it, as FSDP2's)."""
        shard = self._libfsdp()
        shard._state.check_sharded("FSDPModule.reshard", reading=True)
        shard._state.join_stream()
        for group in self._own_groups():
            group.release_prefetch()
            if group.gathered:
                shard._hooks.reshard(group)

    def set_requires_gradient_sync(self, requires_gradient_sync, *, recurse=True):
        """False: backward accumulates this module's gradients (and with recurse, those of the
        FSDPModules under it) locally; True: the next backward reduces their sum."""
        if not isinstance(requires_gradient_sync, bool):
            _refuse("FSDPModule.set_requires_gradient_sync", "requires_gradient_sync: True or "
                    f"False, got {requires_gradient_sync!r}")
        for group in self._groups(recurse):
            group.unit.set_grad_sync(requires_gradient_sync)

    def set_reshard_after_forward(self, reshard_after_forward, recurse=True):
        """Whether this module's unit (and with recurse those under it) is resharded after
        forward (all-gathered again for backward) or kept gathered until its backward."""
        if not isinstance(reshard_after_forward, bool):
            _refuse("FSDPModule.set_reshard_after_forward", "reshard_after_forward: True or "
                    f"False, got {reshard_after_forward!r}")
        for group in self._groups(recurse):
            group.reshard_after_forward = group.requested_reshard = reshard_after_forward

    def set_reshard_after_backward(self, reshard_after_backward, *, recurse=True):
        """Accepted: True is what happens; with False (torchtitan's chunked loss) the unit is
        still resharded when its gradients are in and all-gathered again at its next use: the
        results are the same, at the cost of those all-gathers."""
        if not isinstance(reshard_after_backward, bool):
            _refuse("FSDPModule.set_reshard_after_backward", "reshard_after_backward: True or "
                    f"False, got {reshard_after_backward!r}")

    def set_unshard_in_backward(self, unshard_in_backward):
        """True (the default) only: a unit is gathered for its backward."""
        if unshard_in_backward is not True:
            _refuse("FSDPModule.set_unshard_in_backward", f"unshard_in_backward="
                    f"{unshard_in_backward!r}: libfsdp gathers every unit whose module's backward "
                    "runs; skipping it is not supported")

    def set_modules_to_forward_prefetch(self, modules):
        """When this module's forward starts, the units of `modules` start their all-gathers."""
        self._libfsdp().set_modules_to_forward_prefetch(list(modules), module=self)

    def set_modules_to_backward_prefetch(self, modules):
        """When this module's backward starts, the units of `modules` start their all-gathers."""
        self._libfsdp().set_modules_to_backward_prefetch(list(modules), module=self)

    def set_is_last_backward(self, is_last_backward):
        """Accepted and without effect: every backward ends with its reductions finished and the
        gradients in p.grad, which is what FSDP2 does for the last backward (False lets FSDP2
        skip that wait between micro-batches; the results are the same)."""
        if not isinstance(is_last_backward, bool):
            _refuse("FSDPModule.set_is_last_backward", "is_last_backward: True or False, got "
                    f"{is_last_backward!r}")

    def set_post_optim_event(self, event):
        """On the host without effect (the optimizer step has finished when the next forward
        starts). On a GPU the current stream waits for `event` (a torch.cuda.Event recorded
        after an optimizer step on another stream), so the next forward's all-gathers, ordered
        after the current stream (fsdp_set_stream), follow that step."""
        if self._libfsdp()._state.device.type == "cuda":
            torch.cuda.current_stream(self._libfsdp()._state.device).wait_event(event)

    def set_gradient_divide_factor(self, factor):
        """This module's unit reduces its gradients as the ranks' sum divided by `factor` (one
        division after the sum; 1.0: the sum, as torchtitan's disable_fsdp_gradient_division
        sets); FSDP2 multiplies each rank's gradient by 1/factor before summing instead, the
        same up to rounding (bitwise for 1.0 and for the ranks' count).
        fsdp_unit_set_grad_divide_factor. Local; every rank sets the same factor."""
        try:
            value = float(factor)
        except (TypeError, ValueError):
            value = -1.0
        if not value > 0 or value == float("inf"):
            _refuse("FSDPModule.set_gradient_divide_factor", f"factor={factor!r}: a positive "
                    "finite number is needed")
        for group in self._own_groups():
            group.unit.set_grad_divide_factor(value)

    def set_force_sum_reduction_for_comms(self, enable):
        """Accepted (True or False) and without effect: the library's reductions always sum in
        communication and divide once afterwards, which is what True asks of FSDP2."""
        if not isinstance(enable, bool):
            _refuse("FSDPModule.set_force_sum_reduction_for_comms", f"enable: True or False, "
                    f"got {enable!r}")

    def _get_fsdp_state(self):
        _refuse(CALL, f"{type(self).__name__}: a module libfsdp sharded has no FSDP2 state; "
                "FSDP2's internals cannot act on it")

    def _apply(self, fn, *args, **kwargs):
        """module.to_empty() / to(): the parameters of every unit under this module come back to
        their places in the shards (the new values copied in), as FSDP2's reset_sharded_param."""
        self.reshard()
        # nn.Module's (FSDP2's FSDPModule._apply would look for its own state).
        base = super(_TorchFSDPModule, self) if _TorchFSDPModule is not object else super()
        out = base._apply(fn, *args, **kwargs)
        for group in self._libfsdp()._state.groups_under(self):
            group.adopt_applied()
        return out


def _refusing(name):
    def method(self, *args, **kwargs):
        _refuse(f"FSDPModule.{name}", "an FSDP2 method libfsdp does not implement (its units "
                "communicate through the library's transports, not torch process groups)")
    method.__name__ = name
    return method


for _name in dir(_TorchFSDPModule):  # every other FSDP2 method raises, never does nothing
    if not _name.startswith("_") and _name not in FSDPModule.__dict__ \
            and callable(getattr(_TorchFSDPModule, _name)):
        setattr(FSDPModule, _name, _refusing(_name))


class _Handle:
    """unshard(async_op=True)'s handle: the module's forward takes the all-gather."""

    def wait(self):
        return None


_classes = {}


def _swap_class(module):
    cls = type(module)
    if isinstance(module, FSDPModule):
        return
    if cls not in _classes:
        _classes[cls] = type(f"FSDP{cls.__name__}", (FSDPModule, cls), {})
    module.__class__ = _classes[cls]


def _check_args(modules, reshard_after_forward, shard_placement_fn, mp_policy, offload_policy,
                used_by):
    if isinstance(modules, torch.nn.Module):
        modules = [modules]
    elif isinstance(modules, (list, tuple)) and modules:
        for k, m in enumerate(modules):
            if not isinstance(m, torch.nn.Module):
                _refuse(CALL, f"module[{k}]: a torch.nn.Module is needed, got "
                        f"{type(m).__name__}")
        if len({id(m) for m in modules}) != len(modules):
            _refuse(CALL, "module: a module is listed twice")
    else:
        _refuse(CALL, f"module: a torch.nn.Module or a non-empty list of them is needed, got "
                f"{type(modules).__name__}")
    for m in modules:
        group = m.__dict__.get("_libfsdp_group")
        if group is not None:
            _refuse(CALL, f"module ({type(m).__name__}): fully_shard was already applied to it")
    if reshard_after_forward is not None and not isinstance(reshard_after_forward, (bool, int)):
        _refuse(CALL, f"reshard_after_forward: None, True, False or an int, got "
                f"{type(reshard_after_forward).__name__}")
    if shard_placement_fn is not None and not callable(shard_placement_fn):
        _refuse(CALL, "shard_placement_fn: a callable taking a parameter is needed")
    _choice(CALL, "used_by", _capi.USED_BY, used_by)
    policy = _policy(mp_policy)
    if offload_policy is not None and _TorchOffload is not None \
            and not isinstance(offload_policy, _TorchOffload):
        _refuse(CALL, f"offload_policy: an OffloadPolicy is needed, got "
                f"{type(offload_policy).__name__}")
    return modules, policy


def _policy(mp_policy):
    """libfsdp's MixedPrecisionPolicy of FSDP2's (or of libfsdp's) policy, every field."""
    if mp_policy is None:
        return MixedPrecisionPolicy()
    if isinstance(mp_policy, MixedPrecisionPolicy):
        return mp_policy
    if _TorchPolicy is not None and isinstance(mp_policy, _TorchPolicy):
        return MixedPrecisionPolicy(param_dtype=mp_policy.param_dtype,
                                    reduce_dtype=mp_policy.reduce_dtype,
                                    output_dtype=mp_policy.output_dtype,
                                    cast_forward_inputs=mp_policy.cast_forward_inputs)
    _refuse(CALL, f"mp_policy: a MixedPrecisionPolicy is needed, got {type(mp_policy).__name__}")


def _resharding(value, ctx, where):
    """(reshard_after_forward as a bool, the context of the unit): None stays None (True, but
    False for the root); an int is FSDP2's number of ranks to reshard to after forward: the
    shard group's size is True, 1 is False, the shard group's ranks on one node are hpZ's (the
    unit goes to _mesh.hpz_variant's context); other factors, and ints that are not factors of
    the shard group's size, are refused."""
    if value is None or isinstance(value, bool):
        return value, ctx
    shard = ctx.group("shard")[1]
    if value < 1 or value > shard or shard % value:
        _refuse(CALL, f"module '{where}': reshard_after_forward={value}: an int must be a factor "
                f"of the shard group's size {shard} (FSDP2's rule)")
    if value == shard:
        return True, ctx
    if value == 1:
        return False, ctx
    return True, _mesh.hpz_variant(ctx, value, CALL, where)


def _data_parallel_dims(mesh, dims):
    """FSDP2's dp_mesh_dims (torch 2.15: `mesh` is the full SPMD mesh, `dims` names its
    data-parallel dimensions) where they are the whole mesh: a 1-D mesh whose dimension is the
    shard one, or a 2-D (replicate, shard) mesh; the mesh is then the one libfsdp shards over.
    Other layouts (model-parallel dimensions beside them, flattened dimensions) are refused
    naming them."""
    names = getattr(mesh, "mesh_dim_names", None) or ()
    shard = tuple(getattr(dims, "shard_names", ()) or ())
    replicate = tuple(getattr(dims, "replicate_names", ()) or ())
    if mesh is None or not names or (shard, replicate) not in (
            (tuple(names), ()), (tuple(names[1:]), tuple(names[:1]))) or len(shard) != 1:
        _refuse(CALL, f"dp_mesh_dims={dims!r}: with mesh dimensions {tuple(names)}; libfsdp "
                "takes a mesh whose dimensions are all data-parallel: (shard,) or (replicate, "
                "shard), one name each")


def fully_shard(module, *, mesh=None, reshard_after_forward=None, shard_placement_fn=None,
                mp_policy=None, offload_policy=None, ignored_params=None, dp_mesh_dims=None,
                used_by="all_ranks"):
    """FSDP2's fully_shard(module) with its arguments: see doc/pytorch.md. Returns `module`
    (the first of a list), its class swapped for an FSDPModule one. Collective.

    used_by (libfsdp's, not FSDP2's): "all_ranks", every rank runs the module's forward and
    backward in every step (FSDP2's rule), or "any_ranks", any subset of ranks may (a mixture of
    experts' expert, which the router sends no token to on some ranks): the unit is gathered by
    reading the other ranks' shards one-sidedly, never prefetched, and its gradients are reduced
    at the end of every rank's backward (ranks that did not use it add zeros). Host memory
    only."""
    if not TORCH_2_6:
        _refuse(CALL, f"PyTorch {torch.__version__}: fully_shard needs PyTorch >= 2.6 (DTensor "
                "and FSDP2's classes); FullyShard runs on older versions")
    if dp_mesh_dims is not None:
        _data_parallel_dims(mesh, dp_mesh_dims)
    modules, policy = _check_args(module, reshard_after_forward, shard_placement_fn, mp_policy,
                                  offload_policy, used_by)
    first = modules[0]
    where = type(first).__name__ if len(modules) == 1 else \
        "[" + ", ".join(type(m).__name__ for m in modules) + "]"
    # The context's placement follows the parameters' device (those of earlier calls under these
    # modules included: one model lives on one device).
    ignored = {id(p) for p in ignored_params or ()}
    placement = _device.placement_of(
        [(n, p) for k, m in enumerate(modules) for n, p in m.named_parameters()
         if id(p) not in ignored], CALL, where, getattr(mesh, "device_type", None))
    ctx, mesh, placements = _mesh.resolve(mesh, CALL, placement)
    requested, ctx = _resharding(reshard_after_forward, ctx, where)
    # The groups of earlier calls on modules under these: their units come first.
    adopted = []
    for m in modules:
        for sub in m.modules():
            shard = sub.__dict__.get("_libfsdp_group")
            if shard is not None and shard.root is sub and shard not in adopted:
                adopted.append(shard)
    device = _device.device_of(ctx)
    for shard in adopted:  # meta parameters say nothing of where earlier calls put their units
        if shard._state.device != device:
            _refuse(CALL, f"module '{where}': its parameters are on {device}, but the units "
                    f"fully_shard made under it are on {shard._state.device}; one model lives "
                    "on one device")
    taken = {id(p) for shard in adopted for g in shard.states for p in g.sharded_params()}
    params, names = [], set()
    for k, m in enumerate(modules):
        skip = [p for p in m.parameters() if id(p) in taken]
        if ignored_params is not None:
            skip += [p for p in ignored_params if any(p is q for q in m.parameters())]
        plan, _, _ = _unit_assignment.assign_units(ctx, m, [], policy, lambda _: None, skip)
        for _, _, ps, _ in plan:
            for name, p in ps:
                if any(p is q for _, q in params):
                    continue  # a parameter two of the modules share: once
                full = name if len(modules) == 1 else f"{k}.{name}"
                names.add(full)
                params.append((full, p))
    for name, p in params:
        if p.dim() == 0:
            _refuse(CALL, f"parameter \"{name}\" of module '{where}': a 0-dimensional "
                    "parameter has no dimension 0 to shard (FSDP2 needs one too)")
        if shard_placement_fn is not None:
            placement = shard_placement_fn(p)
            if placement is not None and getattr(placement, "dim", None) != 0:
                _refuse(CALL, f"shard_placement_fn: returned {placement!r} for parameter "
                        f"\"{name}\" of module '{where}'; libfsdp shards along dimension 0 only "
                        "(Shard(0) or None)")
    holders = [[(h, a) for m in modules for h, a in _unit_assignment.holders(m, p)] for _, p in params]
    holders = [list(dict.fromkeys(hs)) for hs in holders]
    shard = FullyShard._drop_in(ctx, first, policy)
    group = None
    if params:
        unit = create_unit(ctx, where, params, False, policy, frozen_may_train=True,
                           layout="dim0", used_by=used_by)
        # The module sees its own Parameter objects again once gathered; meta ones are replaced
        # by ones on the context's device (the values live in the shards).
        inner = [(n, p if p.device.type != "meta" else
                  torch.nn.Parameter(torch.empty(0, dtype=p.dtype, device=device),
                                     requires_grad=p.requires_grad))
                 for n, p in params]
        group = ParamGroup(modules, where, unit, inner, policy, requested)

        def make(i, local, requires_grad):
            from torch.distributed.tensor import DTensor
            shape = tuple(unit.shapes[i])
            stride = tuple(torch.empty(shape, device="meta").stride())
            dt = DTensor.from_local(local, mesh, placements, run_check=False,
                                    shape=torch.Size(shape), stride=stride)
            return torch.nn.Parameter(dt, requires_grad=requires_grad)
        group.use_dtensors(make, holders, [p.device.type == "meta" for _, p in params])
    shard._adopt(adopted, group)
    for m in modules:
        m.__dict__["_libfsdp_group"] = shard
        _swap_class(m)
    _install_hooks(first, modules, group)
    return first


def _install_hooks(first, modules, group):
    """The hooks of one call: the root's (acting while `first` is its group's root), then the
    unit's on each of its modules (a list: gathered by the first module to run, resharded after
    the last)."""
    register_pre_hook(first, _root_pre_hook)
    inner = first.forward

    @functools.wraps(inner)
    def forward(*args, **kwargs):
        shard = first.__dict__["_libfsdp_group"]
        if shard.root is not first:
            return inner(*args, **kwargs)
        return shard._hooks.root_forward(inner, args, kwargs)
    first.forward = forward
    if group is None:
        return
    Hooks.hook_gradients(group)
    pre, post = Hooks.pre_forward_hook(group), Hooks.post_forward_hook(group)
    if len(modules) == 1:
        register_pre_hook(first, pre)
        first.register_forward_hook(post)
        return
    running = set()

    def group_pre(module, args, kwargs):
        if not running:
            running.update(id(m) for m in modules)
        return pre(module, args, kwargs)

    def group_post(module, args, output):
        running.discard(id(module))
        keep = group.reshard_after_forward
        if running:  # not the last module of the unit: stays gathered, outputs hooked
            group.reshard_after_forward = False
        try:
            return post(module, args, output)
        finally:
            group.reshard_after_forward = keep
    for m in modules:
        register_pre_hook(m, group_pre)
        m.register_forward_hook(group_post)


def _root_pre_hook(module, args, kwargs):
    shard = module.__dict__["_libfsdp_group"]
    if shard.root is not module:
        return None
    return shard._begin_root_forward(module, args, kwargs)


def units(module):
    """The libfsdp.Unit of each fully_shard call under `module`'s root, in call order (for
    ctx.optimizer and checkpoints of the library's own)."""
    group = getattr(module, "__dict__", {}).get("_libfsdp_group")
    if group is None:
        _refuse("libfsdp.pytorch.units", f"module: {type(module).__name__} was not given to "
                "fully_shard")
    return group.units


__all__ = ["fully_shard", "FSDPModule", "units"]
