"""One unit and the modules it was made for (as FSDP2's FSDPParamGroup): its ShardedParams, its
training-state machine, its unsharded buffer's views while gathered, its prefetch, and the
gradients it hands to autograd and back to the user."""
import ctypes
import enum

import torch

from .. import _check, _lib, _refuse
from . import _device
from ._grad_shard import GradShard
from ._param import NOT_TAKEN, TORCH_OF, ShardedParam, shows


class KeptViews:
    """Torch views of library buffers, built once per (what, address): the pool hands a unit few
    distinct buffers, so a view is made per buffer rather than per use (a hot path). The address
    (fsdp_param_data / fsdp_grad_data) is only the key; the views come from the binding's
    buffers through _device.tensor."""

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


class Unsharded:
    """The views of a gathered unit's parameters (in unit order) and where each lies, so that a
    tensor autograd saves from one is found by its address (Hooks.pack) and rebuilt over the
    views of the next gather (Hooks.unpack)."""

    def __init__(self, views):
        self.views = views
        self.spans = [(v.data_ptr(), v.data_ptr() + v.numel() * v.element_size())
                      for v in views]
        self.lo = min((a for a, b in self.spans if b > a), default=0)
        self.hi = max((b for a, b in self.spans), default=0)

    def find(self, t):
        """(index, offset in elements) of the view `t` lies in (same dtype), or None."""
        ptr = t.data_ptr()
        if not self.lo <= ptr < self.hi:
            return None
        for i, ((a, b), v) in enumerate(zip(self.spans, self.views)):
            if a <= ptr < b and t.dtype == v.dtype and t.device == v.device:
                return i, (ptr - a) // t.element_size()
        return None

    def rebuild(self, index, offset, size, stride):
        view = self.views[index]
        return view.as_strided(size, stride, view.storage_offset() + offset)


class Phase(enum.Enum):
    """Where a unit is in a backward pass (whether it is gathered is `ParamGroup.gathered`).
    IDLE -> BACKWARD (its pre-backward hook gave the parameters their gradient buffers) ->
    REDUCING (every gradient in: resharded, reduction started) -> IDLE at the end of backward;
    a unit whose gradients do not all arrive goes from BACKWARD (or IDLE) to IDLE there."""
    IDLE = "idle"
    BACKWARD = "backward"
    REDUCING = "reducing"


class ParamGroup:
    """The unit of `modules` (fully_shard([a, b]) gives one unit several; the first is
    `module`), named `where` in messages. params: [(name, Parameter)] in unit order.
    reshard_after_forward: as asked (None: the default, which is True unless the root's
    pre-hook says otherwise)."""

    def __init__(self, modules, where, unit, params, policy, reshard_after_forward):
        self.modules, self.where, self.unit = list(modules), where, unit
        self.policy = policy  # its MixedPrecisionPolicy (input and output casts)
        shard = _device.tensor(unit.shard())  # float32 or float64: the storage dtype
        self.device = shard.device  # the CPU, or the context's GPU
        self.fsdp_params = [ShardedParam(unit, i, name, p, shard)
                            for i, (name, p) in enumerate(params)]
        self.dtype = TORCH_OF[unit.param_dtype]  # what the parameters are while unsharded
        self.requested_reshard = reshard_after_forward
        self.reshard_after_forward = reshard_after_forward is not False
        self.phase = Phase.IDLE
        self.pending = 0      # in BACKWARD: gradients still to arrive
        self.region = None    # while gathered: the Unsharded views of the parameters
        # Views of the unsharded buffer ("params") and of full-gradient buffers (index i).
        self.kept = KeptViews(8 * (len(params) + 1))
        self.grad_shard_viewed = False  # each trainable parameter has its grad_view
        self.shows_placeholders = False  # between forward and backward: see show_placeholders
        self.dtensors = False  # fully_shard: the modules hold sharded Parameters between uses
        # Explicit prefetch (FSDP2's set_modules_to_forward_prefetch / _backward_prefetch): the
        # groups this one's pre-forward / pre-backward all-gathers ahead (None: the default), and
        # this unit's own all-gather started that way and not yet taken by gather().
        self.forward_prefetch, self.backward_prefetch = [], None
        self.prefetch_request = None
        self.hooks = None  # the Hooks that run this unit (the root's, once fully_shard merged)

    @property
    def module(self):
        return self.modules[0]

    @property
    def any_ranks(self):
        """The unit is used by any subset of ranks (fully_shard(used_by="any_ranks")): gathered
        by reading the other ranks' shards one-sidedly, never prefetched, its gradients reduced
        at the step boundary that ends every rank's backward."""
        return self.unit.used_by == "any_ranks"

    @property
    def params(self):
        """[(name, Parameter)] in unit order."""
        return [(fp.name, fp.param) for fp in self.fsdp_params]

    def trainable(self):
        """The ShardedParams the unit has gradient memory for (requires_grad at wrapping, or all
        under frozen_may_train), in index order; of them, active() require a gradient now."""
        return [fp for fp in self.fsdp_params if fp.trainable]

    def active(self):
        return [fp for fp in self.fsdp_params if fp.active]

    # ---- the training-state machine ---------------------------------------------------------
    def begin_backward(self):
        """IDLE -> BACKWARD: the gradients of active() are now awaited."""
        assert self.phase is Phase.IDLE, self.phase
        self.phase = Phase.BACKWARD
        self.pending = len(self.active())

    def gradient_arrived(self, fp):
        """One awaited gradient is in; True when it was the last (BACKWARD -> REDUCING is then
        the caller's start_reduction())."""
        if self.phase is not Phase.BACKWARD:
            raise RuntimeError(
                f"libfsdp: a parameter of module '{self.where}' got a gradient that did not "
                "flow through that module's output; FullyShard needs each parameter used "
                "inside the forward of the module whose unit holds it")
        fp.got_grad = True
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
        sync = self.unit.grad_sync
        for fp in self.fsdp_params:
            fp.user_grad, fp.grad_buffer = NOT_TAKEN, None
            if sync:
                fp.got_grad = False

    # ---- parameters ---------------------------------------------------------------------------
    @property
    def gathered(self):
        return self.region is not None

    def check_parameters(self, take_replaced=True):
        """Before the unit is gathered: what the user did to its parameters between uses. A
        parameter frozen at wrapping has no gradient memory in the unit: unfreezing it is
        refused (libfsdp.Error naming it) rather than training it wrongly. A parameter whose
        storage was replaced by a tensor of its part's shape (module.to_empty(), p.data = ...)
        is taken into the shard (take_replaced; the root's pre-hook does it for every unit before
        any is gathered or prefetched); of another shape, refused."""
        if self.dtensors:  # fully_shard: what the user did to the sharded ones
            if take_replaced and not self.shows_placeholders:
                self.adopt_applied()
            for fp in self.fsdp_params:
                fp.refuse_meta(self.where)
            for fp in self.fsdp_params:
                fp.param.requires_grad_(fp.sharded.requires_grad)
        for fp in self.fsdp_params:
            if fp.param.requires_grad and not fp.trainable:
                _refuse("FullyShard", f"parameter \"{fp.name}\" of module '{self.where}': "
                        "requires_grad was set after FullyShard wrapped it frozen, and its unit "
                        "holds no gradient for it; set requires_grad before FullyShard, or pass "
                        "FullyShard(..., frozen_may_train=True) (freezing after wrapping is "
                        "supported)")
        if not take_replaced or self.shows_placeholders or self.dtensors:
            return
        for fp in self.fsdp_params:
            if fp.param.data.shape != fp.shard_view.shape:
                _refuse("FullyShard", f"parameter \"{fp.name}\" of module '{self.where}': "
                        f"replaced by a tensor of shape {tuple(fp.param.data.shape)}, but between "
                        f"uses it is this rank's part of its shard, of shape "
                        f"{tuple(fp.shard_view.shape)} (load full values with "
                        "model.load_state_dict())")
        for fp in self.fsdp_params:  # every one checked: now take them over
            fp.take_replaced()

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
        ptr = ctypes.c_void_p()  # the buffer's address: which kept views are its
        _check(_lib.fsdp_param_data(unit._handle, 0, ctypes.byref(ptr)))
        self.region = self.kept.get("params", ptr.value, lambda: Unsharded(
            [_device.tensor(unit.param(fp.index)) for fp in self.fsdp_params]))
        for fp, view in zip(self.fsdp_params, self.region.views):
            fp.param.data = view
        self._show(sharded=False)

    def show_shards(self):
        """Points the parameters back at their parts of the shard (the unit is not resharded
        here: see Hooks.reshard)."""
        for fp in self.fsdp_params:
            fp.param.data = fp.shard_view
        self.region = None
        self.shows_placeholders = False
        self._show(sharded=True)

    def show_placeholders(self):
        """Points the parameters at empty tensors of the compute dtype (not resharded here)."""
        for fp in self.fsdp_params:
            fp.param.data = torch.empty(0, dtype=self.dtype, device=self.device)
        self.region = None
        self.shows_placeholders = True
        self._show(sharded=True)

    def _show(self, sharded):
        if self.dtensors:
            for fp in self.fsdp_params:
                fp.show(sharded)

    # ---- fully_shard's full-shape sharded parameters ------------------------------------------
    def use_dtensors(self, make, holders, meta):
        """fully_shard: between uses the modules hold, in place of each parameter p, a new
        Parameter make(i, local, requires_grad) (a DTensor of p's full shape whose local tensor
        is p's rows of this rank's shard, a view); in use they hold p itself, at the unsharded
        buffer. holders[i]: the (module, attribute) pairs that hold parameter i; meta[i]: it was
        on the meta device. p stays what autograd and this group work on; the user sees the
        sharded Parameters and their gradients."""
        for fp, h, m in zip(self.fsdp_params, holders, meta):
            fp.use_dtensor(make, h, m)
        self.dtensors = True
        self._show(sharded=True)

    def sharded_params(self):
        """What the modules hold between uses: the sharded Parameters (fully_shard), or the
        parameters themselves (FullyShard)."""
        return [fp.held() for fp in self.fsdp_params]

    def adopt_applied(self):
        """fully_shard, before a gather and after module._apply (to_empty(), to()): what the
        modules hold now becomes each sharded Parameter (ShardedParam.adopt_applied)."""
        if not self.dtensors:
            return
        for fp in self.fsdp_params:
            fp.adopt_applied(self.where)
        self._show(sharded=True)

    def publish_grads(self):
        """fully_shard: each sharded Parameter's .grad from p.grad."""
        if self.dtensors:
            for fp in self.fsdp_params:
                fp.publish_grad()

    # ---- gradients ----------------------------------------------------------------------------
    def give_grad_buffers(self):
        """Points the active parameters' .grad at the library's full-gradient buffers (zeroed,
        or holding earlier micro-batches under no_sync), so autograd accumulates into them."""
        for fp in self.fsdp_params:
            fp.grad_buffer = None
        ptr = ctypes.c_void_p()
        for fp in self.active():
            _check(_lib.fsdp_grad_data(self.unit._handle, fp.index, ctypes.byref(ptr)))
            fp.param.grad = fp.grad_buffer = self.kept.get(
                fp.index, ptr.value, lambda: _device.tensor(self.unit.grad(fp.index)))

    def take_grads_from_autograd(self):
        """Every gradient of this backward is in: the library's buffers hold them and p.grad
        lets go."""
        for fp in self.active():
            fp.take_grad_from_autograd()
        for fp in self.fsdp_params:
            fp.grad_buffer = None

    @property
    def took_user_grads(self):
        """This backward has taken p.grad as the user left it (take_user_grads)."""
        return any(fp.user_grad is not NOT_TAKEN for fp in self.fsdp_params)

    def take_user_grads(self):
        """Before a backward touches the unit: p.grad as the user left it becomes what the
        reduction adds to, as autograd accumulates into p.grad. None (zero_grad()) zeroes that
        parameter's part of the gradient shard; the shard view itself (also after an in-place
        zero_grad(set_to_none=False)) is used as it is; another tensor of its shape is copied in.
        Without gradient sync for the unit (no_sync, or its own switch off) the shard is not
        touched: p.grad is only put back after backward. A frozen unit's p.grad stays as it
        is."""
        active = self.active()
        if self.took_user_grads or not active:
            return
        for fp in active:
            fp.user_grad = fp.users_grad()
        if self.grad_shard_viewed and any(isinstance(fp.user_grad, GradShard) for fp in active):
            # p.grad still the shard's view after the library's zero_grad (or a step that marked
            # it without gradient): its gradient is None, as zero_grad(set_to_none=True) leaves it.
            none = self.unit.grad_none()
            for fp in active:
                g = fp.user_grad
                if none[fp.index] and fp.grad_view is not None and isinstance(g, GradShard) \
                        and shows(g, fp.grad_view):
                    fp.user_grad = None
        if not self.unit.grad_sync:  # asked of the library: the context's and the unit's
            return
        self.view_grad_shard()
        for fp in active:
            g, view = fp.user_grad, fp.grad_view
            if g is None:
                view.zero_()
            elif not shows(g, view):
                if g.shape != view.shape:
                    _refuse("FullyShard", f"parameter \"{fp.name}\" of module '{self.where}': "
                            f"p.grad has shape {tuple(g.shape)}, but this rank's part of the "
                            f"parameter has shape {tuple(view.shape)}")
                view.copy_(g.detach())

    def view_grad_shard(self):
        """Gives each trainable parameter its grad_view, its part of this rank's gradient shard
        (a 1-D GradShard; the shard's address is fixed once it exists), once; after that only
        writes the zeros of a shard zero_grads marked."""
        if self.grad_shard_viewed:
            ptr = ctypes.c_void_p()
            _check(_lib.fsdp_shard_grad(self.unit._handle, ctypes.byref(ptr), None))
            return
        grad = _device.tensor(self.unit.shard_grad())
        for fp in self.trainable():
            shard_off, _, length = self.unit.shard_range(fp.index)
            view = grad[shard_off:shard_off + length].as_subclass(GradShard)
            view.where = f"parameter \"{fp.name}\" of module '{self.where}'"
            view.ctx = self.unit.context  # whose groups its norms are summed over
            fp.grad_view = view
        self.grad_shard_viewed = True

    def got_gradients(self, every_parameter):
        """After backward, per trainable parameter (in index order: the same length on every
        rank), 1.0 if it has a gradient here: p.grad was not None before this backward, or
        autograd gave one since the last reduction (every_parameter: all count as having one);
        0.0 if not, or if p.grad is not shown (see show_grads)."""
        shown = self.took_user_grads and self.unit.grad_sync
        return [float(shown and fp.user_grad is not NOT_TAKEN and (
            fp.user_grad is not None or fp.got_grad or every_parameter))
            for fp in self.trainable()]

    def show_grads(self, got):
        """After backward: each active parameter's p.grad is its part of the gradient shard, or
        None if `got` (agreed over the ranks, in got_gradients' order) says it has had no
        gradient since the user last set p.grad to None (PyTorch's rule: torch.optim then skips
        it); the library's optimizers skip it too (fsdp_grad_set_none). Without gradient sync
        for the unit, p.grad goes back to what it was."""
        if not self.took_user_grads:
            return
        if not self.unit.grad_sync:
            self.restore_user_grads()
            return
        self.view_grad_shard()
        for fp, has in zip(self.trainable(), got):
            taken = fp.user_grad is not NOT_TAKEN
            if taken:
                fp.param.grad = fp.grad_view if has else None
            if not has or not taken:  # none anywhere, or frozen now
                self.unit.set_grad_none(fp.index)
        self.publish_grads()

    def restore_user_grads(self):
        """p.grad back to what the user left before this backward (taken by take_user_grads)."""
        for fp in self.fsdp_params:
            if fp.user_grad is not NOT_TAKEN:
                fp.param.grad = fp.user_grad
        self.publish_grads()
