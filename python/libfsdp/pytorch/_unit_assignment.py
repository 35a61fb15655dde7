"""Which unit each parameter goes to, decided before anything is created: every argument
checked, and each parameter given to the unit of the innermost listed module that contains every module using it."""
import torch

from .. import Error, _refuse
from ..context import Context
from ..unit import resolve_precision, storage_dtype
from ._compat import REDUCE_NONE_IS_OWN_DTYPE
from .policy import LIB_DTYPE, MixedPrecisionPolicy


def unit_dtypes(params, policy):
    """(storage, param_dtype, reduce_dtype) as library names for the unit of `params` [(name,
    Parameter)] under `policy`: the library's storage dtype of the parameters' dtype
    (fsdp_storage_dtype), the policy's dtypes (None: the default), and for a low-precision model
    without a policy param_dtype its own dtype (FSDP2 computes in the parameters' dtype). Without
    a reduce_dtype, gradients reduce in what the installed PyTorch's FSDP2 reduces them in
    (_compat.REDUCE_NONE_IS_OWN_DTYPE: the parameters' own dtype, else param_dtype)."""
    own = LIB_DTYPE[params[0][1].dtype]
    storage = storage_dtype(own)
    compute = LIB_DTYPE.get(policy.param_dtype)
    if compute is None and own != storage:
        compute = own
    reduce = LIB_DTYPE.get(policy.reduce_dtype)
    if reduce is None and REDUCE_NONE_IS_OWN_DTYPE:
        reduce = own
    return storage, compute, reduce


def assign_units(ctx, root, submodules, policy, param_init_fn, ignored_params=None,
                 reshard_after_forward=None):
    """([(module, name, [(parameter name, Parameter)])] in unit order (the listed submodules,
    then the root with what no listed module took; a module left without parameters gets no
    unit), the ids of the ignored parameters left out), or libfsdp.Error naming the argument,
    module or parameter; nothing is created."""
    call = "FullyShard"
    if not isinstance(ctx, Context):
        _refuse(call, f"ctx: a libfsdp.Context is needed, got {type(ctx).__name__}")
    if not isinstance(root, torch.nn.Module):
        _refuse(call, f"root: a torch.nn.Module is needed, got {type(root).__name__}")
    if getattr(root, "_libfsdp_fully_shard", False):
        _refuse(call, "root: FullyShard was already applied to this module")
    ignored = ignored_ids(root, ignored_params)
    if reshard_after_forward is not None and not isinstance(reshard_after_forward, bool):
        _refuse(call, f"reshard_after_forward = {reshard_after_forward!r}: None, True or False "
                "(fully_shard, the drop-in, takes FSDP2's ints)")
    if param_init_fn is not None and not callable(param_init_fn):
        _refuse(call, "param_init_fn: a callable taking a module is needed")
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
    policy_of = policies(policy, listed, names)
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
            if p is None or id(p) in ignored:
                continue
            full = f"{mname}.{pname}" if mname else pname
            first_name.setdefault(id(p), full)
            uses.setdefault(id(p), (p, set()))[1].add(innermost[id(m)])
    owner = {}
    for pid, (p, units) in uses.items():
        name = first_name[pid]
        if p.dtype not in LIB_DTYPE:
            _refuse(call, f"parameter \"{name}\": dtype {p.dtype}; the library's parameters "
                    f"are {', '.join(sorted(str(d) for d in LIB_DTYPE))}")
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
        storage = {storage_dtype(LIB_DTYPE[p.dtype]) for _, p in params}
        if len(storage) > 1:
            _refuse(call, f"module '{where}': parameters stored in {' and '.join(sorted(storage))}"
                    " in one unit; a unit has one dtype (list the float64 part as its own "
                    "submodule)")
        try:
            resolve_precision(ctx, *unit_dtypes(params, policy_of(m)))
        except Error as e:
            _refuse(call, f"mp_policy for module '{where}': {e}")
        for name, p in params:
            if p.device.type == "meta" and param_init_fn is None:
                holder = holders(root, p)[0][0]
                if not hasattr(holder, "reset_parameters"):
                    _refuse(call, f"parameter \"{name}\": on the meta device, and its module "
                            f"({type(holder).__name__}) has no reset_parameters(); pass "
                            "param_init_fn")
        plan.append((m, where, params, policy_of(m)))
    return plan, ignored, policy_of(root)


def policies(mp_policy, listed, names):
    """policy_of(module) for the listed modules and the root: mp_policy is one
    MixedPrecisionPolicy for all, None (MixedPrecisionPolicy()), or a dict {module: policy} as
    FSDP2 takes one per fully_shard call (a module it does not name: MixedPrecisionPolicy()).
    Every policy is checked; libfsdp.Error names the entry."""
    def check(p, what):
        if not isinstance(p, MixedPrecisionPolicy):
            _refuse("FullyShard", f"{what}: a MixedPrecisionPolicy is needed, got "
                    f"{type(p).__name__}")
        for field in ("param_dtype", "reduce_dtype"):
            value = getattr(p, field)
            if value is not None and value not in LIB_DTYPE:
                _refuse("FullyShard", f"{what}.{field}: {value} is not one of "
                        f"{sorted(str(d) for d in LIB_DTYPE)}")
        if p.output_dtype is not None and not (isinstance(p.output_dtype, torch.dtype)
                                               and p.output_dtype.is_floating_point):
            _refuse("FullyShard", f"{what}.output_dtype: {p.output_dtype} is not a floating "
                    "dtype")
    if mp_policy is None:
        mp_policy = MixedPrecisionPolicy()
    if not isinstance(mp_policy, dict):
        check(mp_policy, "mp_policy")
        return lambda module: mp_policy
    ids = {id(m) for m in listed}
    for m, p in mp_policy.items():
        if not isinstance(m, torch.nn.Module) or id(m) not in ids:
            what = f"'{names[id(m)]}'" if id(m) in names else type(m).__name__
            _refuse("FullyShard", f"mp_policy[{what}]: a key must be a listed submodule or the "
                    "root")
        check(p, f"mp_policy['{names[id(m)]}']")
    by_id = {id(m): p for m, p in mp_policy.items()}
    default = MixedPrecisionPolicy()
    return lambda module: by_id.get(id(module), default)


def ignored_ids(root, ignored_params):
    """The ids of `ignored_params` (FSDP2's ignored_params: parameters of root left unsharded and
    unreduced), or libfsdp.Error naming what is not one of root's parameters."""
    if ignored_params is None:
        return frozenset()
    if isinstance(ignored_params, torch.Tensor):
        _refuse("FullyShard", "ignored_params: a collection of parameters is needed, got one "
                "tensor")
    own = {id(p) for p in root.parameters()}
    out = set()
    for k, p in enumerate(ignored_params):
        if not isinstance(p, torch.nn.Parameter) or id(p) not in own:
            _refuse("FullyShard", f"ignored_params[{k}]: not a parameter of root "
                    f"({type(p).__name__}{tuple(p.shape) if hasattr(p, 'shape') else ''})")
        out.add(id(p))
    return frozenset(out)


def owners(root, params):
    """The modules holding any of `params` (Parameters), in the order first met."""
    out = []
    for p in params:
        for m, _ in holders(root, p):
            if m not in out:
                out.append(m)
    return out


def holders(root, p):
    """(module, attribute) pairs that hold parameter p."""
    return [(m, n) for m in root.modules() for n, q in m._parameters.items() if q is p]
