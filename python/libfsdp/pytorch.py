"""PyTorch modules sharded by libfsdp: PyTorch computes forward and backward on CPU, libfsdp does
the sharding, communication, optimizer and checkpoints (module and autograd hooks).

    sharded = libfsdp.pytorch.FullyShard(ctx, model, [model.embed, *model.blocks, model.head])
    loss = loss_fn(sharded(x), y)
    sharded.backward(loss)      # reduce-scatters each unit's gradient as soon as it is complete
    opt.step(); opt.zero_grad() # opt = ctx.optimizer("adamw", sharded.units, lr=...)

Each listed submodule becomes one unit holding its parameters. Between calls a parameter holds no
storage (an empty tensor); a unit's forward pre-hook unshards it and points its parameters at the
library's unsharded buffer (no copy), its forward hook reshards it. Tensors autograd saves from
those parameters are recorded as positions in the buffer and re-pointed at the buffer unsharded
again for backward (torch.autograd.graph.saved_tensors_hooks). Before a unit's backward, its
parameters' .grad are the library's full-gradient buffers, so autograd accumulates straight into
them; when every parameter's gradient is in, the unit is resharded and its reduction starts.
Limits: every parameter must take part in the loss (as DDP without find_unused_parameters), a
parameter must belong to exactly one listed submodule, parameters must be float32 or float64."""
import torch

from . import _refuse


class _UnitState:
    def __init__(self, unit, params):
        self.unit, self.params = unit, params  # params: [(name, Parameter)] in unit order
        self.flat = None        # torch view of the unsharded buffer while unsharded
        self.pending = 0        # gradients still to arrive in this backward
        self.accumulators = []  # the parameters' AccumulateGrad nodes (kept alive)


class FullyShard:
    """Shards `root`'s parameters over `ctx`, one unit per module of `submodules` (in forward
    order), and runs `root` with libfsdp's unshard / reshard / reduce cycle."""

    def __init__(self, ctx, root, submodules, prefetch=True):
        call = "FullyShard"
        owner = {}
        for k, module in enumerate(submodules):
            for p in module.parameters():
                if id(p) in owner:
                    _refuse(call, f"submodules[{k}]: a parameter already belongs to submodules"
                            f"[{owner[id(p)]}]; each parameter must be in one unit")
                owner[id(p)] = k
        uncovered = [n for n, p in root.named_parameters() if id(p) not in owner]
        if uncovered:
            _refuse(call, f"submodules: parameters in no listed submodule: {uncovered[:5]}")
        names = {id(p): n for n, p in root.named_parameters()}
        self.ctx, self.root, self.states, self._requests = ctx, root, [], []
        self._empty = {}
        for k, module in enumerate(submodules):
            params = [(names[id(p)], p) for p in module.parameters()]
            for n, p in params:
                if p.dtype not in (torch.float32, torch.float64) or not p.requires_grad:
                    _refuse(call, f"submodules[{k}]: parameter \"{n}\": float32 or float64 "
                            "with requires_grad=True is needed")
            unit = ctx.unit([(n, p.detach().contiguous().numpy()) for n, p in params],
                            name=f"unit{k}", sync_from_rank0=True)
            state = _UnitState(unit, params)
            for _, p in params:  # created at the real shape: AccumulateGrad records it
                acc = p.expand_as(p).grad_fn.next_functions[0][0]
                acc.register_hook(self._grad_done_hook(state))
                state.accumulators.append(acc)
            self._detach(state)
            module.register_forward_pre_hook(self._pre_forward_hook(state))
            module.register_forward_hook(self._post_forward_hook(state))
            self.states.append(state)
        ctx.set_prefetch(prefetch, prefetch)

    @property
    def units(self):
        return [s.unit for s in self.states]

    # ---- parameters pointing at the unsharded buffer, or at nothing ------------------------
    def _attach(self, state):
        state.unit.unshard()
        # The whole unit as one tensor: its parameters lie in order in the unsharded buffer.
        state.flat = torch.from_numpy(state.unit.unsharded())
        offset = 0
        for (_, p), shape in zip(state.params, state.unit.shapes):
            n = int(torch.Size(shape).numel())
            p.data = state.flat[offset:offset + n].view(shape)
            offset += n

    def _detach(self, state):
        for _, p in state.params:
            p.data = self._empty.setdefault(p.dtype, torch.empty(0, dtype=p.dtype))
        state.flat = None

    # ---- hooks ---------------------------------------------------------------------------------
    def _pre_forward_hook(self, state):
        def hook(module, inputs):
            self._attach(state)
        return hook

    def _post_forward_hook(self, state):
        def hook(module, inputs, output):
            self._detach(state)
            state.unit.reshard()
            if isinstance(output, torch.Tensor) and output.requires_grad:
                output.register_hook(self._pre_backward_hook(state))
        return hook

    def _pre_backward_hook(self, state):
        def hook(grad):
            self._attach(state)
            for i, (_, p) in enumerate(state.params):
                p.grad = torch.from_numpy(state.unit.grad(i))  # autograd adds into it
            state.pending = len(state.params)
        return hook

    def _grad_done_hook(self, state):
        def hook(*unused):
            state.pending -= 1
            if state.pending == 0:
                for _, p in state.params:
                    p.grad = None
                self._detach(state)
                state.unit.reshard()
                self._requests.append(state.unit.reduce_grads_async())
        return hook

    def _pack(self, t):
        ptr = t.data_ptr()
        for state in self.states:
            if state.flat is None:
                continue
            base = state.flat.data_ptr()
            if base <= ptr < base + state.flat.numel() * state.flat.element_size():
                return (state, (ptr - base) // t.element_size(), t.size(), t.stride())
        return t

    def _unpack(self, packed):
        if isinstance(packed, torch.Tensor):
            return packed
        state, offset, size, stride = packed
        if state.flat is None:
            raise RuntimeError(f"libfsdp: unit {state.unit.names[0]}... is sharded but its "
                               "parameters are needed (is every unit's output part of the loss?)")
        return state.flat.as_strided(size, stride, offset)

    # ---- the loop ------------------------------------------------------------------------------
    def __call__(self, *args, **kwargs):
        self.ctx.begin_forward()
        with torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack):
            return self.root(*args, **kwargs)

    def backward(self, loss):
        """loss.backward() with each unit's reduction started as its gradients complete; returns
        when every reduction has finished (the optimizer can step)."""
        self.ctx.begin_backward()
        with torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack):
            loss.backward()
        for state in self.states:
            if state.pending:
                _refuse("FullyShard.backward", f"unit of \"{state.params[0][0]}\": "
                        f"{state.pending} parameter(s) got no gradient; every parameter must "
                        "take part in the loss")
        requests, self._requests = self._requests, []
        for r in requests:
            r.wait()

