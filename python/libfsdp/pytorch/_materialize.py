"""Construction: meta-device parameters materialized one unit at a time, and each unit created
from its parameters' values."""
import numpy as np
import torch

from ._unit_assignment import owners as owners_of, unit_dtypes
from ._param import TORCH_OF


def _has_meta(tensors):
    return any(t is not None and t.device.type == "meta" for t in tensors)


def materialize(root, module, params, init_fn, replaced):
    """Meta tensors of one unit become CPU tensors with values: every module holding one of its
    meta parameters gets new parameters (and its meta buffers zeros), then init_fn or its
    reset_parameters(); so does each module under `module` that holds meta buffers but no
    parameter (a listed module's own buffer; those under listed modules materialized before
    are on the CPU already), with its reset_parameters() if it has one. Returns params with the
    new parameters; `replaced` gets (dict, key, old tensor) for each tensor replaced."""
    owners = owners_of(root, [p for _, p in params if p.device.type == "meta"])
    buffer_only = [m for m in module.modules() if m not in owners and
                   _has_meta(m._buffers.values()) and not _has_meta(m._parameters.values())]
    if not owners and not buffer_only:
        return params
    fresh = {}
    for m in owners + buffer_only:  # every meta tensor of a holder (reset_parameters fills all)
        for attr, q in list(m._parameters.items()):
            if q is None or q.device.type != "meta":
                continue
            if id(q) not in fresh:
                fresh[id(q)] = torch.nn.Parameter(torch.empty(q.shape, dtype=q.dtype),
                                                  requires_grad=q.requires_grad)
            replaced.append((m._parameters, attr, q))
            m._parameters[attr] = fresh[id(q)]
        for attr, b in list(m._buffers.items()):
            if b is not None and b.device.type == "meta":
                replaced.append((m._buffers, attr, b))
                m._buffers[attr] = torch.zeros(b.shape, dtype=b.dtype)
    with torch.no_grad():
        for m in owners:
            initialize(m, init_fn)
        for m in buffer_only:
            if init_fn is not None or hasattr(m, "reset_parameters"):
                initialize(m, init_fn)
    return [(name, fresh.get(id(p), p)) for name, p in params]


def initialize(module, init_fn):
    """init_fn(module), or the module's own reset_parameters() (FSDP2's convention)."""
    if init_fn is not None:
        init_fn(module)
    else:
        module.reset_parameters()


def broadcast_from_rank0(ctx, tensor):
    """Rank 0's values of a CPU tensor, written into it on every rank (fsdp_broadcast over the
    world group; bfloat16 through its bits). Collective."""
    with torch.no_grad():
        t = tensor.detach()
        bits = t.contiguous()
        if bits.dtype == torch.bfloat16:
            bits = bits.view(torch.int16)
        if bits.dim() == 0:
            bits = bits.reshape(1)
        values = ctx.broadcast(bits.numpy())
        if values.ctypes.data != t.data_ptr():  # a copy was broadcast: back into the tensor
            t.copy_(torch.from_numpy(values).view(t.dtype).reshape(t.shape))


def create_unit(ctx, where, params, sync, policy, frozen_may_train=False, layout="flat",
                used_by="all_ranks"):
    """The unit of `params` in the library's storage dtype, computing and reducing in the dtypes
    of _unit_assignment.unit_dtypes; sync: every rank starts from rank 0's values; frozen_may_train: frozen
    parameters get gradient memory too; a meta-device parameter starts as zeros (fully_shard:
    initialized after to_empty(), as FSDP2's); layout: "flat" or "dim0"; used_by: "all_ranks"
    or "any_ranks" (Context.unit's)."""
    storage_name, compute, reduce = unit_dtypes(params, policy)
    storage = TORCH_OF[np.dtype(storage_name)]
    values = []
    for name, p in params:
        if p.device.type == "meta":
            values.append((name, tuple(p.shape), storage_name,
                           p.requires_grad or frozen_may_train))
            continue
        v = p.detach().to(device="cpu", dtype=storage)  # initial values are read from host memory
        values.append((name, v.contiguous().numpy(), p.requires_grad or frozen_may_train))
    return ctx.unit(values, name=where, sync_from_rank0=sync, param_dtype=compute,
                    reduce_dtype=reduce, layout=layout, used_by=used_by)
