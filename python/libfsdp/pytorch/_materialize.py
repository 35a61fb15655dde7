"""Construction: meta-device parameters materialized one unit at a time, and each unit created
from its parameters' values."""
import torch

from ._plan import holders
from .policy import LIB_DTYPE


def materialize(root, params, init_fn, replaced):
    """Meta parameters of one unit become CPU parameters with values (every module holding
    one gets new parameters, then reset_parameters() or init_fn); others are returned as
    they are."""
    if not any(p.device.type == "meta" for _, p in params):
        return params
    fresh, owners = {}, []
    for name, p in params:
        if p.device.type != "meta":
            continue
        for m, attr in holders(root, p):
            if m not in owners:
                owners.append(m)
    for m in owners:  # every meta parameter of a holder (reset_parameters fills them all)
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
        for m in owners:
            (init_fn or (lambda mod: mod.reset_parameters()))(m)
    return [(name, fresh.get(id(p), p)) for name, p in params]


def create_unit(ctx, where, params, sync, policy):
    """The unit of `params` (float32 masters, or float64), computing in the policy's param_dtype
    (or a low-precision model's own dtype) and reducing in its reduce_dtype; sync: every rank
    starts from rank 0's values."""
    storage = torch.float64 if params[0][1].dtype == torch.float64 else torch.float32
    compute = policy.param_dtype
    if compute is None and params[0][1].dtype in (torch.bfloat16, torch.float16):
        compute = params[0][1].dtype  # a low-precision model: float32 masters, its dtype
    values = []
    for name, p in params:
        v = p.detach()
        v = v.to(storage) if v.dtype != storage else v
        values.append((name, v.contiguous().numpy(), p.requires_grad))
    return ctx.unit(values, name=where, sync_from_rank0=sync,
                    param_dtype=LIB_DTYPE.get(compute),
                    reduce_dtype=LIB_DTYPE.get(policy.reduce_dtype))
