"""One parameter of a unit (as FSDP2's FSDPParam): the Parameter autograd works on, its part of
this rank's shard and of the gradient shard, what the current backward did with its gradient,
and, under fully_shard, the full-shape sharded Parameter the modules hold between uses."""
import numpy as np
import torch

from .. import _refuse
from ._grad_shard import GradShard

# numpy dtype of a unit's buffers -> torch dtype (numpy shows bfloat16 as uint16 bits).
TORCH_OF = {np.dtype(np.float32): torch.float32, np.dtype(np.float64): torch.float64,
            np.dtype(np.float16): torch.float16, np.dtype(np.uint16): torch.bfloat16}

# ShardedParam.user_grad before a backward took p.grad as the user left it.
NOT_TAKEN = object()


def shows(g, view):
    """Whether tensor g is `view` (p.grad still the part of the gradient shard it was given)."""
    return g is view or (g.data_ptr() == view.data_ptr() and g.shape == view.shape)


class ShardedParam:
    """Parameter `index` of `unit`: `param` (named `name` in messages) is what the modules and
    autograd work on; between uses it shows `shard_view`, its part of this rank's shard."""

    def __init__(self, unit, index, name, param, shard):
        self.unit, self.index = unit, index
        self.name, self.param = name, param
        self.shape = tuple(unit.shapes[index])
        # The unit has gradient memory for it (requires_grad at wrapping, or frozen_may_train).
        self.trainable = bool(unit.requires_grad[index])
        shard_off, _, length = unit.shard_range(index)
        self.shard_view = shard[shard_off:shard_off + length]  # 1-D torch view of the shard
        self.grad_view = None     # its part of the gradient shard (a GradShard), once made
        self.grad_buffer = None   # in backward: the full-gradient buffer given to autograd
        self.user_grad = NOT_TAKEN  # in backward: p.grad as the user left it
        self.got_grad = False     # autograd gave it a gradient since the last reduction
        self.hooked = None        # what its arrival hook is on: param, or its AccumulateGrad node
        # fully_shard: the full-shape sharded Parameter (a DTensor over its rows of the shard)
        # and the (module, attribute) pairs that hold it; None for FullyShard, whose parameters
        # show their parts themselves.
        self.sharded, self.holders = None, ()
        self._grad_dtensor = None  # (gradient view, its DTensor), made once per view

    @property
    def active(self):
        """It trains now: the unit holds its gradient and it requires one."""
        return self.trainable and self.param.requires_grad

    def part_of(self, full):
        """This rank's part of the parameter's full value (a tensor or array of its shape): the
        elements its shard holds, flattened."""
        _, param_off, length = self.unit.shard_range(self.index)
        return full.reshape(-1)[param_off:param_off + length]

    def write_part(self, full):
        """Writes this rank's part of the parameter's full value into the shard."""
        with torch.no_grad():
            self.shard_view.copy_(torch.as_tensor(self.part_of(full)))

    def rows(self, flat):
        """A flat part of the parameter (its shard or gradient view) as its rows."""
        return flat.view(-1, *self.shape[1:])

    def take_replaced(self):
        """A parameter whose storage the user replaced by a tensor of its part's shape
        (module.to_empty(), p.data = ...): the values go into the shard and it views it again."""
        view, p = self.shard_view, self.param
        if view.numel() and p.data.data_ptr() != view.data_ptr():
            with torch.no_grad():
                view.copy_(p.data)
            p.data = view

    # ---- fully_shard's full-shape sharded Parameter --------------------------------------------
    def use_dtensor(self, make, holders, meta):
        """fully_shard: make(index, local, requires_grad) is the Parameter the modules hold between
        uses (local: its rows of this rank's shard, or an empty meta tensor of their shape when
        the parameter was on the meta device, as FSDP2's until to_empty() or a load)."""
        local = self.rows(self.shard_view)
        if meta:
            local = torch.empty(local.shape, dtype=local.dtype, device="meta")
        self.sharded, self.holders = make(self.index, local, self.param.requires_grad), holders

    def show(self, sharded):
        """fully_shard: the modules hold the sharded Parameter (between uses) or param (in use)."""
        if self.sharded is not None:
            for module, attr in self.holders:
                module._parameters[attr] = self.sharded if sharded else self.param

    def held(self):
        """What the modules hold between uses: the sharded Parameter, or param (FullyShard)."""
        return self.param if self.sharded is None else self.sharded

    def adopt_applied(self, where):
        """fully_shard: what the modules hold now becomes the sharded Parameter (FSDP2's
        reset_sharded_param): a new DTensor Parameter (load_state_dict(assign=True)) or new
        storage under the old one (to_empty()) is copied into its rows of the shard, and its
        local tensor is those rows again. A local tensor still on the meta device stays there
        (the forward refuses it); a device (the unit's: the CPU or its GPU), dtype or shape
        change is refused."""
        module, attr = self.holders[0]
        now = module._parameters[attr]
        if now is self.param:  # gathered: the unsharded parameter itself
            return
        local = now.to_local() if hasattr(now, "to_local") else now
        if local.is_meta:
            return
        view = self.rows(self.shard_view)
        if not hasattr(now, "to_local") or local.device != view.device \
                or local.dtype != view.dtype or local.shape != view.shape:
            _refuse("fully_shard", f"parameter \"{self.name}\" of module '{where}': now "
                    f"{type(now).__name__} {local.dtype} {tuple(local.shape)} on "
                    f"{local.device}; its shard is a DTensor whose local tensor is "
                    f"{view.dtype} {tuple(view.shape)} on {view.device} (to_empty(device="
                    f"'{view.device}'), "
                    "in-place changes and load_state_dict of such DTensors are supported)")
        if view.numel() and local.data_ptr() != view.data_ptr():
            with torch.no_grad():
                view.copy_(local)
        now._local_tensor = view
        self.sharded = now

    def refuse_meta(self, where):
        """fully_shard: still on the meta device (never to_empty()'d nor loaded) is refused by
        name before its unit is gathered, as FSDP2 refuses it."""
        if self.sharded is not None and self.sharded.to_local().is_meta:
            _refuse("fully_shard", f"parameter \"{self.name}\" of module '{where}' is on the meta "
                    f"device: call module.to_empty(device='{self.shard_view.device}') and "
                    "initialize it (or load a state dict with assign=True) before the forward")

    def sharded_like(self, local):
        """A DTensor laid out as the sharded Parameter, over `local` (its rows)."""
        from torch.distributed.tensor import DTensor
        sh = self.sharded
        return DTensor.from_local(local, sh.device_mesh, sh.placements, run_check=False,
                                  shape=sh.shape, stride=sh.stride())

    # ---- its gradient ---------------------------------------------------------------------------
    def users_grad(self):
        """The gradient the user left: p.grad (FullyShard), or under fully_shard the sharded
        Parameter's gradient as a flat tensor (the gradient shard's view itself when it still
        shows it; None stays None)."""
        if self.sharded is None:
            return self.param.grad
        g = self.sharded.grad
        if g is None:
            return None
        local = g.to_local() if hasattr(g, "to_local") else g
        if self.grad_view is not None and shows(local.reshape(-1), self.grad_view):
            return self.grad_view
        return local.reshape(-1)

    def publish_grad(self):
        """fully_shard: the sharded Parameter's .grad from p.grad (None, or a DTensor over its
        rows of the gradient shard, made once per view)."""
        if self.sharded is None:
            return
        g = self.param.grad
        if g is None:
            self.sharded.grad = None
            return
        kept = self._grad_dtensor
        if kept is None or kept[0] is not g:
            local = self.rows(g.as_subclass(torch.Tensor) if isinstance(g, GradShard) else g)
            kept = self._grad_dtensor = (g, self.sharded_like(local))
        self.sharded.grad = kept[1]

    def take_grad_from_autograd(self):
        """Its gradient of this backward is in the library's buffer and p.grad lets go. Autograd
        rebinds p.grad instead of adding in place under backward(create_graph=True): that
        gradient is copied into the buffer."""
        buf, g = self.grad_buffer, self.param.grad
        if buf is not None and g is not None and (g.data_ptr() != buf.data_ptr()
                                                  or g.shape != buf.shape):
            with torch.no_grad():
                buf.copy_(g.detach())
        self.param.grad = None
