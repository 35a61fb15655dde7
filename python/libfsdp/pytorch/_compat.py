"""What differs between the PyTorch versions FullyShard runs on (Debian's 1.13 to current)."""
import inspect

import torch

# PyTorch >= 2.6 has FSDP2's fully_shard and public DTensor, which fully_shard (the drop-in) needs.
TORCH_2_6 = tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2]) >= (2, 6)
def _reduce_none_is_own_dtype():
    if not TORCH_2_6:  # no FSDP2; and importing torch.distributed.fsdp can fail on old releases
        return False
    try:
        from torch.distributed.fsdp._fully_shard._fsdp_param import FSDPParam
    except ImportError:
        return False
    return hasattr(FSDPParam, "unsharded_grad_dtype")


# MixedPrecisionPolicy(reduce_dtype=None): FSDP2 of newer PyTorch (FSDPParam.unsharded_grad_dtype;
# 2.15 has it, 2.6 not) gives the gathered parameters' gradients the parameters' own dtype and
# reduces in it; older FSDP2 reduces in param_dtype, the dtype the gradients were computed in.
REDUCE_NONE_IS_OWN_DTYPE = _reduce_none_is_own_dtype()

# PyTorch >= 2.1 hooks a gradient's arrival on the tensor; older versions on its AccumulateGrad
# node.
POST_ACCUMULATE = hasattr(torch.Tensor, "register_post_accumulate_grad_hook")
# PyTorch >= 2.0 gives forward pre-hooks the keyword arguments too (FSDP2 casts both).
KWARGS_HOOKS = "with_kwargs" in inspect.signature(
    torch.nn.Module.register_forward_pre_hook).parameters


def register_pre_hook(module, fn):
    """module's forward pre-hook fn(module, args, kwargs) -> None or (args, kwargs). Before
    PyTorch 2.0, kwargs is {} and only the positional arguments can be replaced."""
    if KWARGS_HOOKS:
        module.register_forward_pre_hook(fn, with_kwargs=True)
        return

    def positional(m, args):
        out = fn(m, args, {})
        return None if out is None else out[0]
    module.register_forward_pre_hook(positional)


def register_state_dict_hooks(module, save, load):
    """save(module, state_dict, prefix, local_metadata) after module.state_dict();
    load(module, state_dict, prefix, local_metadata, strict, missing, unexpected, errors) before
    module.load_state_dict(). The public names (PyTorch >= 2.4 / 2.0) or, before them, the same
    hooks' private ones; given plain functions, as the public ones mark the hook with an
    attribute."""
    def save_hook(*args):
        return save(*args)

    def load_hook(*args):
        return load(*args)
    getattr(module, "register_state_dict_post_hook", module._register_state_dict_hook)(save_hook)
    if hasattr(module, "register_load_state_dict_pre_hook"):
        module.register_load_state_dict_pre_hook(load_hook)
    else:
        module._register_load_state_dict_pre_hook(load_hook, with_module=True)
