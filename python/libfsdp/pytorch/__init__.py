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
are reduced in unit order (a parameter that got no gradient reduces as zero; a unit that got none
at all is not reduced, but under find_unused_parameters), every reduction is waited for, and
p.grad shows the gradient shards.

Mixed precision (`MixedPrecisionPolicy`, FSDP2's fields): shards and optimizer state stay float32,
unshard casts to param_dtype, gradients reduce in reduce_dtype (default: what the installed
PyTorch's FSDP2 reduces in, the parameters' own dtype on 2.15, param_dtype on 2.6). Parameters
that are bfloat16 or float16 in the model get float32 masters and compute in their own dtype.
float16 steps go through `libfsdp.GradScaler`. Activation checkpointing
(torch.utils.checkpoint, use_reentrant=False): recomputation finds the unit unsharded for backward.
Meta-device models are materialized one unit at a time (reset_parameters, or param_init_fn).

The package, one job per file, composed as FSDP2's FSDPState -> FSDPParamGroup -> FSDPParam:
fullyshard.py (the FullyShard API and its construction: a ShardState, its Hooks and StateDicts),
_options.py (the constructor's choices beside its policies, one value), policy.py
(MixedPrecisionPolicy), _unit_assignment.py (checks, and the unit of each parameter, before
anything is created), _materialize.py (meta-device parameters, unit creation), _state.py
(ShardState: one model's groups and what they share), _param_group.py (ParamGroup: one unit, its
state machine and its unsharded views), _param.py (ShardedParam: one parameter's shard and
gradient views), _hooks.py (Hooks: forward/backward hooks, the end of backward, saved tensors),
_grad_shard.py (p.grad's guard against local norms), _state_dict.py (StateDicts: state dicts,
also through the module's own hooks), _structures.py (tensors inside structured values),
_compat.py (what differs between PyTorch versions), _fully_shard.py (fully_shard, the drop-in, on
the same pieces)."""
from .. import _refuse
from ._fully_shard import FSDPModule, fully_shard, units
from .fullyshard import FullyShard
from .policy import MixedPrecisionPolicy

__all__ = ["fully_shard", "FSDPModule", "units", "FullyShard", "MixedPrecisionPolicy",
           "register_fsdp_forward_method"]


def register_fsdp_forward_method(module, method_name):
    """FSDP2's register_fsdp_forward_method(module, method_name), for a module FullyShard
    wrapped (the root or a listed module): see FullyShard.register_forward_method."""
    group = module.__dict__.get("_libfsdp_group") if hasattr(module, "__dict__") else None
    if group is not None:  # fully_shard's
        group.register_forward_method(module, method_name)
        return
    handle = module.__dict__.get("_libfsdp_handle") if hasattr(module, "__dict__") else None
    if handle is None or handle() is None:
        _refuse("register_fsdp_forward_method", f"module: {type(module).__name__} is not a "
                "module FullyShard wrapped (its root or a listed submodule)")
    handle().register_forward_method(module, method_name)
