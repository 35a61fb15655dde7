"""FSDP2's MixedPrecisionPolicy, and the dtypes a policy may name."""
import dataclasses

import torch

# torch dtype -> the library's name, for the dtypes a unit computes or reduces in.
LIB_DTYPE = {torch.float32: "float32", torch.float64: "float64", torch.bfloat16: "bfloat16",
             torch.float16: "float16"}


@dataclasses.dataclass(frozen=True)
class MixedPrecisionPolicy:
    """FSDP2's MixedPrecisionPolicy. param_dtype: what unsharded parameters (and full gradients)
    are; reduce_dtype: what gradients are reduced in (None: what the installed PyTorch's FSDP2
    reduces in, _compat.REDUCE_NONE_IS_OWN_DTYPE); output_dtype: the root's
    floating outputs are cast to it; cast_forward_inputs: each unit's floating inputs (positional
    and keyword, inside structured values too) are cast to its param_dtype."""
    param_dtype: torch.dtype = None
    reduce_dtype: torch.dtype = None
    output_dtype: torch.dtype = None
    cast_forward_inputs: bool = True
