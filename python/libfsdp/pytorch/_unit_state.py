"""One unit and the module it was made for: its training-state machine, its parameters' views
(this rank's part of the shard between uses, the unsharded buffer in use) and the gradients it
hands to autograd and back to the user."""
import ctypes
import enum
import math

import numpy as np
import torch

from .. import _check, _lib, _refuse, _view
from ._grad_shard import GradShard

# numpy dtype of a unit's buffers -> torch dtype (numpy shows bfloat16 as uint16 bits).
TORCH_OF = {np.dtype(np.float32): torch.float32, np.dtype(np.float64): torch.float64,
            np.dtype(np.float16): torch.float16, np.dtype(np.uint16): torch.bfloat16}


def torch_view(address, dtype, shape):
    """A torch tensor over library memory (no copy); bfloat16 from its bits (numpy has none, and
    older torch has no uint16)."""
    array = _view(address, dtype, shape)
    if dtype == np.uint16:
        return torch.from_numpy(array.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(array)


class KeptViews:
    """Torch views of library buffers, built once per (what, address): the pool hands a unit few
    distinct buffers, so a view is made per buffer rather than per use (a hot path)."""

    def __init__(self, limit):
        self._views, self._limit = {}, limit

    def get(self, what, address, build):
        key = (what, address)
        views = self._views.get(key)
        if views is None:
            if len(self._views) >= self._limit:
                self._views.clear()
            views = self._views[key] = build()
        return views


def shows(g, view):
    """Whether tensor g is `view` (p.grad still the part of the gradient shard it was given)."""
    return g is view or (g.data_ptr() == view.data_ptr() and g.shape == view.shape)


class Phase(enum.Enum):
    """Where a unit is in a backward pass (whether it is gathered is `UnitState.gathered`).
    IDLE -> BACKWARD (its pre-backward hook gave the parameters their gradient buffers) ->
    REDUCING (every gradient in: resharded, reduction started) -> IDLE at the end of backward;
    a unit whose gradients do not all arrive goes from BACKWARD (or IDLE) to IDLE there."""
    IDLE = "idle"
    BACKWARD = "backward"
    REDUCING = "reducing"


class UnitState:
    """One unit and the module it was made for."""

    def __init__(self, module, where, unit, params, policy, reshard_after_forward):
        self.module, self.where, self.unit = module, where, unit
        self.modules = [module]  # fully_shard([a, b]): every module of the unit, first is module
        self.policy = policy  # its MixedPrecisionPolicy (input and output casts)
        self.params = params                   # [(name, Parameter)] in unit order
        # The parameters the unit has gradient memory for (requires_grad at wrapping, or all
        # under frozen_may_train); of them, active() are those requiring a gradient now.
        self.trainable = frozenset(i for i, trains in enumerate(unit.requires_grad) if trains)
        self.dtype = TORCH_OF[unit.param_dtype]  # what the parameters are while unsharded
        self.reshard_after_forward = reshard_after_forward
        self.requested_reshard = reshard_after_forward  # fully_shard's argument (None: default)
        self.phase = Phase.IDLE
        self.pending = 0      # in BACKWARD: gradients still to arrive
        self.got_grad = {}    # index -> True: autograd gave it a gradient in this backward
        self.user_grads = None  # index -> p.grad as the user left it (None: not yet taken)
        self.offsets = None   # element offsets of the parameters from the region's start
        self.extent = 0       # elements from the region's start to the end of the last one
        self.start = 0        # offset of parameter 0 from the region's start, in bytes
        self.region = None    # torch view of the unsharded parameters while gathered
        # Views of the unsharded buffer ("params") and of full-gradient buffers (index i).
        self.kept = KeptViews(8 * (len(params) + 1))
        self.grad_views = None  # per trainable parameter: its part of the gradient shard
        self.grad_buffers = {}  # in backward: index -> the full-gradient buffer given to autograd
        self.shows_placeholders = False  # between forward and backward: see show_placeholders
        self.accumulators = {}  # index -> its hooked parameter (or AccumulateGrad node < 2.1)
        # Explicit prefetch (FSDP2's set_modules_to_forward_prefetch / _backward_prefetch): the
        # units this one's pre-forward / pre-backward all-gathers ahead (None: the default), and
        # this unit's own all-gather started that way and not yet taken by gather().
        self.forward_prefetch, self.backward_prefetch = [], None
        self.prefetch_request = None
        self.owner = None  # the FullyShard whose hooks run this unit (the root's, once merged)
        # fully_shard (the drop-in): per parameter, its full-shape sharded Parameter (a DTensor
        # over its rows of the shard) and the (module, attribute) pairs that hold it; None for
        # FullyShard, whose parameters show their parts themselves. See use_dtensors.
        self.sharded = None
        self.grad_dtensors = {}  # index -> (gradient view, its DTensor), made once per view
        shard = torch.from_numpy(unit.shard())  # float32 or float64: the storage dtype
        self.shard_views = []  # per parameter: its part of this rank's shard (1-D torch view)
        for i in range(len(params)):
            shard_off, _, length = unit.shard_range(i)
            self.shard_views.append(shard[shard_off:shard_off + length])

    def part_of(self, i, full):
        """This rank's part of parameter i's full value (a tensor or array of its shape): the
        elements its shard holds, flattened."""
        _, param_off, length = self.unit.shard_range(i)
        return full.reshape(-1)[param_off:param_off + length]

    def write_part(self, i, full):
        """Writes this rank's part of parameter i's full value into the shard."""
        with torch.no_grad():
            self.shard_views[i].copy_(torch.as_tensor(self.part_of(i, full)))

    # ---- the training-state machine ---------------------------------------------------------
    def begin_backward(self):
        """IDLE -> BACKWARD: the gradients of active() are now awaited."""
        assert self.phase is Phase.IDLE, self.phase
        self.phase = Phase.BACKWARD
        self.pending = len(self.active())

    def gradient_arrived(self, index):
        """One awaited gradient is in; True when it was the last (BACKWARD -> REDUCING is then
        the caller's start_reduction())."""
        if self.phase is not Phase.BACKWARD:
            raise RuntimeError(
                f"libfsdp: a parameter of module '{self.where}' got a gradient that did not "
                "flow through that module's output; FullyShard needs each parameter used "
                "inside the forward of the module whose unit holds it")
        self.got_grad[index] = True
        self.pending -= 1
        return self.pending == 0

    def start_reduction(self):
        """BACKWARD -> REDUCING."""
        assert self.phase is Phase.BACKWARD, self.phase
        self.phase = Phase.REDUCING

    def end_backward(self):
        """Any phase -> IDLE, forgetting this backward's gradients; which parameters got one is
        kept while the unit accumulates without sync (no_sync), since the reduction that ends
        the accumulation carries them."""
        self.phase, self.pending = Phase.IDLE, 0
        self.user_grads, self.grad_buffers = None, {}
        if self.unit.grad_sync:
            self.got_grad = {}

    # ---- parameters ---------------------------------------------------------------------------
    @property
    def gathered(self):
        return self.region is not None

    def active(self):
        """[(index, parameter)] of the unit's trainable parameters that require a gradient now."""
        return [(i, p) for i, (_, p) in enumerate(self.params)
                if i in self.trainable and p.requires_grad]

    def check_parameters(self, take_replaced=True):
        """Before the unit is gathered: what the user did to its parameters between uses. A
        parameter frozen at wrapping has no gradient memory in the unit: unfreezing it is
        refused (libfsdp.Error naming it) rather than training it wrongly. A parameter whose
        storage was replaced by a tensor of its part's shape (module.to_empty(), p.data = ...)
        is taken into the shard (take_replaced; the root's pre-hook does it for every unit before
        any is gathered or prefetched); of another shape, refused."""
        if self.sharded is not None:  # fully_shard: what the user did to the sharded ones
            if take_replaced and not self.shows_placeholders:
                self.adopt_applied()
            self.refuse_meta()
            for (sh, _), (_, p) in zip(self.sharded, self.params):
                p.requires_grad_(sh.requires_grad)
        for i, (name, p) in enumerate(self.params):
            if p.requires_grad and i not in self.trainable:
                _refuse("FullyShard", f"parameter \"{name}\" of module '{self.where}': "
                        "requires_grad was set after FullyShard wrapped it frozen, and its unit "
                        "holds no gradient for it; set requires_grad before FullyShard, or pass "
                        "FullyShard(..., frozen_may_train=True) (freezing after wrapping is "
                        "supported)")
        if not take_replaced or self.shows_placeholders or self.sharded is not None:
            return
        for i, (name, p) in enumerate(self.params):
            view = self.shard_views[i]
            if p.data.shape == view.shape and (not view.numel()
                                               or p.data.data_ptr() == view.data_ptr()):
                continue
            if p.data.shape != view.shape:
                _refuse("FullyShard", f"parameter \"{name}\" of module '{self.where}': "
                        f"replaced by a tensor of shape {tuple(p.data.shape)}, but between uses "
                        f"it is this rank's part of its shard, of shape {tuple(view.shape)} (load "
                        "full values with model.load_state_dict())")
        for i, (_, p) in enumerate(self.params):  # every one checked: now take them over
            view = self.shard_views[i]
            if view.numel() and p.data.data_ptr() != view.data_ptr():
                with torch.no_grad():
                    view.copy_(p.data)
                p.data = view

    def prefetch(self):
        """Starts the unit's all-gather ahead of its use (fsdp_unshard_async); gather() takes it.
        Collective: every rank prefetches the same units in the same order."""
        if not self.gathered and self.prefetch_request is None:
            self.prefetch_request = self.unit.unshard_async()

    def _take_prefetch(self):
        """Waits for prefetch()'s all-gather, if one was started; whether there was one."""
        request, self.prefetch_request = self.prefetch_request, None
        if request is not None:
            request.wait()
        return request is not None

    def release_prefetch(self):
        """An all-gather prefetch() started that gather() never took: waited for and resharded
        (a hint nobody used; local)."""
        if self._take_prefetch():
            self.unit.reshard()

    def gather(self):
        """Unshards the unit (or takes prefetch()'s all-gather) and points its parameters at the
        unsharded buffer (no copy)."""
        unit = self.unit
        if not self._take_prefetch():
            unit.unshard()
        ptr = ctypes.c_void_p()
        _check(_lib.fsdp_param_data(unit._handle, 0, ctypes.byref(ptr)))
        size = unit.param_dtype.itemsize
        if self.offsets is None:  # the layout is fixed: offsets from parameter 0 once
            addrs = [ptr.value]
            for i in range(1, len(self.params)):
                p = ctypes.c_void_p()
                _check(_lib.fsdp_param_data(unit._handle, i, ctypes.byref(p)))
                addrs.append(p.value)
            lo = min(addrs)
            self.start = ptr.value - lo
            self.offsets = [(a - lo) // size for a in addrs]
            self.extent = max(o + int(np.prod(s, dtype=np.int64))
                              for o, s in zip(self.offsets, unit.shapes))
        address = ptr.value - self.start

        def build():
            region = torch_view(address, unit.param_dtype, (self.extent,))
            return region, [region[off:off + math.prod(shape)].view(shape)
                            for off, shape in zip(self.offsets, unit.shapes)]
        views = self.kept.get("params", address, build)
        self.region = views[0]
        for (_, p), view in zip(self.params, views[1]):
            p.data = view
        self._register(sharded=False)

    def show_shards(self):
        """Points the parameters back at their parts of the shard (the unit is not resharded
        here: see FullyShard._reshard)."""
        for (_, p), view in zip(self.params, self.shard_views):
            p.data = view
        self.region = None
        self.shows_placeholders = False
        self._register(sharded=True)

    def show_placeholders(self):
        """Points the parameters at empty tensors of the compute dtype (not resharded here)."""
        for _, p in self.params:
            p.data = torch.empty(0, dtype=self.dtype)
        self.region = None
        self.shows_placeholders = True
        self._register(sharded=True)

    # ---- fully_shard's full-shape sharded parameters ------------------------------------------
    def use_dtensors(self, make, holders, meta):
        """fully_shard: between uses the modules hold, in place of each parameter p, a new
        Parameter make(i, local) (a DTensor of p's full shape whose local tensor is `local`, p's
        rows of this rank's shard, a view); in use they hold p itself, at the unsharded buffer.
        holders[i]: the (module, attribute) pairs that hold parameter i; meta[i]: it was on the
        meta device (its local tensor is, until to_empty() or a load). p stays what autograd
        and this state work on; the user sees the sharded Parameters and their gradients."""
        self.sharded = []
        for i, (_, p) in enumerate(self.params):
            local = self.rows(i, self.shard_views[i])
            if meta[i]:  # as FSDP2's: on the meta device until to_empty() or a load
                local = torch.empty(local.shape, dtype=local.dtype, device="meta")
            self.sharded.append((make(i, local, p.requires_grad), holders[i]))
        self._register(sharded=True)

    def sharded_params(self):
        """What the modules hold between uses: the sharded Parameters (fully_shard), or the
        parameters themselves (FullyShard)."""
        if self.sharded is None:
            return [p for _, p in self.params]
        return [sh for sh, _ in self.sharded]

    def adopt_applied(self):
        """fully_shard, before a gather and after module._apply (to_empty(), to()): what the
        modules hold now becomes the sharded Parameter (FSDP2's reset_sharded_param): a new
        DTensor Parameter (load_state_dict(assign=True)) or new storage under the old one
        (to_empty()) is copied into its rows of the shard, and its local tensor is those rows
        again. A local tensor still on the meta device stays there (the forward refuses it); a
        device, dtype or shape change is refused."""
        if self.sharded is None:
            return
        for i, (sh, holders) in enumerate(self.sharded):
            module, attr = holders[0]
            now = module._parameters[attr]
            if now is self.params[i][1]:  # gathered: the unsharded parameter itself
                continue
            local = now.to_local() if hasattr(now, "to_local") else now
            if local.is_meta:
                continue
            view = self.rows(i, self.shard_views[i])
            name = self.params[i][0]
            if not hasattr(now, "to_local") or local.device.type != "cpu" \
                    or local.dtype != view.dtype or local.shape != view.shape:
                _refuse("fully_shard", f"parameter \"{name}\" of module '{self.where}': now "
                        f"{type(now).__name__} {local.dtype} {tuple(local.shape)} on "
                        f"{local.device}; its shard is a DTensor whose local tensor is "
                        f"{view.dtype} {tuple(view.shape)} on the CPU (to_empty(device='cpu'), "
                        "in-place changes and load_state_dict of such DTensors are supported)")
            if view.numel() and local.data_ptr() != view.data_ptr():
                with torch.no_grad():
                    view.copy_(local)
            now._local_tensor = view
            if now is not sh:
                self.sharded[i] = (now, holders)
        self._register(sharded=True)

    def refuse_meta(self):
        """fully_shard: a parameter still on the meta device (never to_empty()'d nor loaded) is
        refused by name before its unit is gathered, as FSDP2 refuses it."""
        for i, (sh, _) in enumerate(self.sharded or ()):
            if sh.to_local().is_meta:
                _refuse("fully_shard", f"parameter \"{self.params[i][0]}\" of module "
                        f"'{self.where}' is on the meta device: call module.to_empty(device="
                        "'cpu') and initialize it (or load a state dict with assign=True) "
                        "before the forward")

    def rows(self, i, flat):
        """A flat part of parameter i (its shard or gradient view) as its rows."""
        return flat.view(-1, *self.unit.shapes[i][1:])

    def _register(self, sharded):
        if self.sharded is None:
            return
        for (sh, holders), (_, p) in zip(self.sharded, self.params):
            for module, attr in holders:
                module._parameters[attr] = sh if sharded else p

    def sharded_param(self, i):
        """What the modules hold for parameter i between uses (fully_shard), or p (FullyShard)."""
        return self.params[i][1] if self.sharded is None else self.sharded[i][0]

    def _user_grad(self, i, p):
        """The gradient the user left for parameter i: p.grad (FullyShard), or under fully_shard
        the sharded Parameter's gradient as a flat tensor (the gradient shard's view itself when
        it still shows it; None stays None)."""
        if self.sharded is None:
            return p.grad
        g = self.sharded[i][0].grad
        if g is None:
            return None
        local = g.to_local() if hasattr(g, "to_local") else g
        view = (self.grad_views or {}).get(i)
        if view is not None and shows(local.reshape(-1), view):
            return view
        return local.reshape(-1)

    def publish_grads(self):
        """fully_shard: each sharded Parameter's .grad from p.grad (None, or a DTensor over its
        rows of the gradient shard, made once per view)."""
        if self.sharded is None:
            return
        for i, ((sh, _), (_, p)) in enumerate(zip(self.sharded, self.params)):
            g = p.grad
            if g is None:
                sh.grad = None
                continue
            kept = self.grad_dtensors.get(i)
            if kept is None or kept[0] is not g:
                local = self.rows(i, g.as_subclass(torch.Tensor) if isinstance(g, GradShard)
                                  else g)
                kept = self.grad_dtensors[i] = (g, self.sharded_like(i, local))
            sh.grad = kept[1]

    def sharded_like(self, i, local):
        """A DTensor laid out as parameter i's sharded Parameter, over `local` (its rows)."""
        from torch.distributed.tensor import DTensor
        sh = self.sharded[i][0]
        return DTensor.from_local(local, sh.device_mesh, sh.placements, run_check=False,
                                  shape=sh.shape, stride=sh.stride())

    # ---- gradients ----------------------------------------------------------------------------
    def give_grad_buffers(self):
        """Points the active parameters' .grad at the library's full-gradient buffers (zeroed,
        or holding earlier micro-batches under no_sync), so autograd accumulates into them."""
        self.grad_buffers = {}
        ptr = ctypes.c_void_p()
        for i, p in self.active():
            _check(_lib.fsdp_grad_data(self.unit._handle, i, ctypes.byref(ptr)))
            address, shape = ptr.value, self.unit.shapes[i]
            p.grad = self.grad_buffers[i] = self.kept.get(
                i, address, lambda: torch_view(address, self.unit.param_dtype, shape))

    def take_grads_from_autograd(self):
        """Every gradient of this backward is in: the library's buffers hold them and p.grad
        lets go. Autograd rebinds p.grad instead of adding in place under
        backward(create_graph=True): that gradient is copied into the buffer."""
        for i, p in self.active():
            buf = self.grad_buffers.get(i)
            g = p.grad
            if buf is not None and g is not None and (g.data_ptr() != buf.data_ptr()
                                                      or g.shape != buf.shape):
                with torch.no_grad():
                    buf.copy_(g.detach())
            p.grad = None
        self.grad_buffers = {}

    def take_user_grads(self):
        """Before a backward touches the unit: p.grad as the user left it becomes what the
        reduction adds to, as autograd accumulates into p.grad. None (zero_grad()) zeroes that
        parameter's part of the gradient shard; the shard view itself (also after an in-place
        zero_grad(set_to_none=False)) is used as it is; another tensor of its shape is copied in.
        Without gradient sync for the unit (no_sync, or its own switch off) the shard is not
        touched: p.grad is only put back after backward. A frozen unit's p.grad stays as it
        is."""
        active = self.active()
        if self.user_grads is not None or not active:
            return
        self.user_grads = {i: self._user_grad(i, p) for i, p in active}
        if self.grad_views is not None and any(
                isinstance(g, GradShard) for g in self.user_grads.values()):
            # p.grad still the shard's view after the library's zero_grad (or a step that marked
            # it without gradient): its gradient is None, as zero_grad(set_to_none=True) leaves it.
            none = self.unit.grad_none()
            for i, g in self.user_grads.items():
                view = self.grad_views.get(i)
                if none[i] and view is not None and isinstance(g, GradShard) and shows(g, view):
                    self.user_grads[i] = None
        if not self.unit.grad_sync:  # asked of the library: the context's and the unit's
            return
        views = self.gradient_views()
        for i, g in self.user_grads.items():
            view = views[i]
            if g is None:
                view.zero_()
            elif not shows(g, view):
                if g.shape != view.shape:
                    name = self.params[i][0]
                    _refuse("FullyShard", f"parameter \"{name}\" of module '{self.where}': "
                            f"p.grad has shape {tuple(g.shape)}, but this rank's part of the "
                            f"parameter has shape {tuple(view.shape)}")
                view.copy_(g.detach())

    def gradient_views(self):
        """Per trainable parameter, its part of this rank's gradient shard (1-D GradShard views;
        the shard's address is fixed once it exists)."""
        if self.grad_views is not None:  # its address is fixed: only the zeros are written
            ptr = ctypes.c_void_p()
            _check(_lib.fsdp_shard_grad(self.unit._handle, ctypes.byref(ptr), None))
            return self.grad_views
        grad = self.unit.shard_grad()  # writes the zeros of a shard zero_grads marked, first
        if self.grad_views is None:
            grad = torch.from_numpy(grad)
            self.grad_views = {}
            for i in sorted(self.trainable):
                shard_off, _, length = self.unit.shard_range(i)
                view = grad[shard_off:shard_off + length].as_subclass(GradShard)
                view.where = f"parameter \"{self.params[i][0]}\" of module '{self.where}'"
                view.ctx = self.unit.context  # whose groups its norms are summed over
                self.grad_views[i] = view
        return self.grad_views

    def got_gradients(self, every_parameter):
        """After backward, per trainable parameter (in index order: the same length on every
        rank), 1.0 if it has a gradient here: p.grad was not None before this backward, or
        autograd gave one since the last reduction (every_parameter: all count as having one);
        0.0 if not, or if p.grad is not shown (see show_grads)."""
        shown = self.user_grads is not None and self.unit.grad_sync
        return [float(shown and i in self.user_grads and (
            self.user_grads[i] is not None or bool(self.got_grad.get(i)) or every_parameter))
            for i in sorted(self.trainable)]

    def show_grads(self, got):
        """After backward: each active parameter's p.grad is its part of the gradient shard, or
        None if `got` (agreed over the ranks, in got_gradients' order) says it has had no
        gradient since the user last set p.grad to None (PyTorch's rule: torch.optim then skips
        it); the library's optimizers skip it too (fsdp_grad_set_none). Without gradient sync
        for the unit, p.grad goes back to what it was."""
        if self.user_grads is None:
            return
        if not self.unit.grad_sync:
            for i, g in self.user_grads.items():
                self.params[i][1].grad = g
            self.publish_grads()
            return
        views = self.gradient_views()
        for i, has in zip(sorted(self.trainable), got):
            if i in self.user_grads:
                self.params[i][1].grad = views[i] if has else None
            if not has or i not in self.user_grads:  # none anywhere, or frozen now
                self.unit.set_grad_none(i)
        self.publish_grads()
