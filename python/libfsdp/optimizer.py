"""libfsdp.Optimizer: the library's sharded SGD and AdamW (PyTorch's update rules)."""
import collections
import ctypes
import functools

from . import _capi
from . import _check, _choice, _lib, _refuse
from ._dlpack import hand_out, state_buffer

# fsdp_hyperparams_t's fields, and "betas" for (beta1, beta2) as torch.optim takes them.
_FIELDS = {f for f, _ in _capi.Hyperparams._fields_ if f != "size"} | {"betas"}

KindInfo = collections.namedtuple("KindInfo", "states hyperparams step_count kept_when")


@functools.lru_cache(maxsize=None)
def kind_info(kind):
    """What the library's optimizer `kind` ("sgd", "adamw") keeps and reads, as the library says
    (fsdp_optimizer_kind_info): its state buffers' names (Optimizer.state), the hyperparameters
    its update reads, step_count: whether the update reads the update count itself (AdamW's
    bias correction) or only whether it is 0 (SGD's momentum restarts at 0, continues after),
    and kept_when: {state: the hyperparameter that must be on for it to exist, or None}."""
    code = _choice("fsdp_optimizer_kind_info", "kind", _capi.OPTIMIZERS, kind)
    nstates, nhyper, step_count = ctypes.c_int(), ctypes.c_int(), ctypes.c_int()
    _check(_lib.fsdp_optimizer_kind_info(code, None, ctypes.byref(nstates), ctypes.byref(nhyper),
                                         ctypes.byref(step_count)))

    def names(fn, n, *extra):
        out = []
        for i in range(n):
            name, cond = ctypes.c_char_p(), ctypes.c_char_p()
            _check(fn(code, i, ctypes.byref(name), *[ctypes.byref(cond) for _ in extra]))
            out.append((name.value.decode(), cond.value.decode() if cond.value else None))
        return out
    states = names(_lib.fsdp_optimizer_state_name, nstates.value, "kept_when")
    return KindInfo(tuple(n for n, _ in states),
                    tuple(n for n, _ in names(_lib.fsdp_optimizer_hyperparam_name, nhyper.value)),
                    bool(step_count.value), {n: cond for n, cond in states})


def defaults(kind):
    """The kind's default hyperparameters (fsdp_optimizer_defaults: FSDP_SGD_DEFAULTS,
    FSDP_ADAMW_DEFAULTS) as an fsdp_hyperparams_t."""
    code = _choice("fsdp_optimizer_defaults", "kind", _capi.OPTIMIZERS, kind)
    hp = _capi.Hyperparams(ctypes.sizeof(_capi.Hyperparams))
    _check(_lib.fsdp_optimizer_defaults(code, ctypes.byref(hp)))
    return hp


def group_of(patterns, name):
    """The hyperparameter group of parameter `name` among groups with these glob patterns, group
    0's (the defaults') first, by the library's own rule (fsdp_param_group_of: the first later
    group whose pattern matches, fnmatch(3), else 0)."""
    patterns = [str(p).encode() for p in patterns]
    array = (ctypes.c_char_p * max(len(patterns), 1))(*patterns)
    group = ctypes.c_int()
    _check(_lib.fsdp_param_group_of(array, len(patterns), str(name).encode(),
                                    ctypes.byref(group)))
    return group.value


def _hyperparams(call, kind, base, overrides):
    hp = _capi.Hyperparams()
    ctypes.memmove(ctypes.byref(hp), ctypes.byref(base), ctypes.sizeof(hp))
    for key, value in overrides.items():
        if key not in _FIELDS:
            _refuse(call, f"{key}: not a hyperparameter of {kind} (known: {sorted(_FIELDS)})")
        if key == "betas":
            if len(value) != 2:
                _refuse(call, "betas: a pair (beta1, beta2) is needed")
            hp.beta1, hp.beta2 = float(value[0]), float(value[1])
        elif dict(hp._fields_)[key] is ctypes.c_int:  # flags (nesterov, amsgrad, maximize)
            setattr(hp, key, int(value))  # the library refuses what is not 0 or 1
        else:
            setattr(hp, key, float(value))
    return hp


class Optimizer:
    """A sharded optimizer over units of one context. Create with Context.optimizer()."""

    @classmethod
    def _create(cls, ctx, kind, units, overrides):
        call = "fsdp_optimizer_create"
        code = _choice(call, "kind", _capi.OPTIMIZERS, kind)
        units = list(units)
        if not units or any(u.context is not ctx for u in units):
            _refuse(call, "units: one or more units of this context are needed")
        hp = _hyperparams(call, kind, defaults(kind), overrides)
        handles = (ctypes.c_void_p * len(units))(*[u._handle for u in units])
        handle = ctypes.c_void_p()
        _check(_lib.fsdp_optimizer_create(ctx._handle, code, ctypes.byref(hp), len(units),
                                          handles, ctypes.byref(handle)))
        opt = cls()
        opt._handle, opt.kind, opt._defaults, opt._units = handle, kind, hp, units
        return opt

    def add_group(self, pattern, **overrides):
        """A hyperparameter group for the parameters matching the glob `pattern` (that no earlier
        group took); returns how many it took. Collective."""
        hp = _hyperparams("fsdp_optimizer_add_group", self.kind, self._defaults, overrides)
        matched = ctypes.c_int()
        _check(_lib.fsdp_optimizer_add_group(self._handle, pattern.encode(), ctypes.byref(hp),
                                             None, ctypes.byref(matched)))
        return matched.value

    def set_lr(self, lr, group=-1):
        _check(_lib.fsdp_optimizer_set_lr(self._handle, group, float(lr)))

    def step(self):
        _check(_lib.fsdp_optimizer_step(self._handle))

    def zero_grad(self, set_to_none=True):
        """torch.optim's zero_grad: every gradient of the optimizer's units None
        (fsdp_optimizer_zero_grad), or with set_to_none=False zero, so the next step still
        updates those parameters (weight decay, momentum); a parameter whose gradient is None
        (fsdp_grad_none: it had none in the last backward) stays None, as torch.optim leaves a
        None p.grad alone, so no step moves it. Local."""
        none = {} if set_to_none else {id(u): u.grad_none() for u in self._units}
        _check(_lib.fsdp_optimizer_zero_grad(self._handle))
        if not set_to_none:  # fsdp_shard_grad writes the zeros: the gradients are zero, not None
            ptr = ctypes.c_void_p()
            for unit in self._units:
                if any(unit.requires_grad):
                    _check(_lib.fsdp_shard_grad(unit._handle, ctypes.byref(ptr), None))
                    for i, (was_none, trains) in enumerate(zip(none[id(unit)],
                                                               unit.requires_grad)):
                        if was_none and trains:
                            unit.set_grad_none(i)

    def state_dlpack(self, unit, name):
        """This rank's state buffer `name` of `unit` ("exp_avg", "exp_avg_sq"; "momentum") as a
        libfsdp.DLPackBuffer (fsdp_optimizer_state_dlpack): 1-D, laid out like
        unit.shard_grad(), in the unit's dtype, allocated as zeros if no update made it yet;
        valid for the optimizer's life. Local."""
        return state_buffer(self._handle, unit._handle, str(name).encode())

    def state(self, unit, name):
        """state_dlpack's buffer as a numpy view in host memory, the DLPackBuffer itself in CUDA
        memory. Writing it, with set_steps, restores the optimizer from another source. Local."""
        return hand_out(self.state_dlpack(unit, name))

    def steps(self, unit):
        """Updates made to `unit` so far. Local."""
        steps = ctypes.c_int64()
        _check(_lib.fsdp_optimizer_steps(self._handle, unit._handle, ctypes.byref(steps)))
        return steps.value

    def param_steps(self, unit, param):
        """Updates made to one parameter (index or name) of `unit`: the unit's count unless steps
        skipped it without a gradient (fsdp_optimizer_param_steps). Local."""
        steps = ctypes.c_int64()
        _check(_lib.fsdp_optimizer_param_steps(self._handle, unit._handle, unit.index(param),
                                               ctypes.byref(steps)))
        return steps.value

    def set_param_steps(self, unit, param, steps):
        """Sets one trainable parameter's update count (fsdp_optimizer_set_param_steps). Local."""
        _check(_lib.fsdp_optimizer_set_param_steps(self._handle, unit._handle,
                                                   unit.index(param), int(steps)))

    def set_steps(self, unit, steps):
        """Sets the update count of `unit` (>= 0). Local."""
        _check(_lib.fsdp_optimizer_set_steps(self._handle, unit._handle, int(steps)))

    def destroy(self):
        _check(_lib.fsdp_optimizer_destroy(ctypes.byref(self._handle)))
