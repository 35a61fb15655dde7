"""libfsdp.GradScaler: the library's sharded loss scaler (fsdp_grad_scaler_*), for float16 compute
or float32 parameters under torch.autocast, with the shape of PyTorch's torch.amp.GradScaler: scale(loss), unscale_(opt), step(opt),
update(), get_scale(). Every rank skips the same steps (inf/NaN on any rank)."""
import ctypes

from . import _check, _lib, _refuse


class GradScaler:
    """A loss scaler over one context (collective to create; settings must agree across ranks)."""

    def __init__(self, ctx, init_scale=65536.0, growth_factor=2.0, backoff_factor=0.5,
                 growth_interval=2000):
        if not isinstance(growth_interval, int) or isinstance(growth_interval, bool):
            _refuse("fsdp_grad_scaler_create", "growth_interval: an int is needed, got "
                    f"{type(growth_interval).__name__}")
        self._handle = ctypes.c_void_p()
        _check(_lib.fsdp_grad_scaler_create(ctx._handle, float(init_scale), float(growth_factor),
                                            float(backoff_factor), growth_interval,
                                            ctypes.byref(self._handle)))
        self.skipped_steps = 0

    def get_scale(self):
        scale = ctypes.c_double()
        _check(_lib.fsdp_grad_scaler_scale(self._handle, ctypes.byref(scale)))
        return scale.value

    def scale(self, loss):
        """The loss multiplied by the current scale (backward on it)."""
        return loss * self.get_scale()

    def unscale_(self, opt):
        """Divides the gradient shards of `opt`'s units by the scale (before clipping). Collective."""
        _check(_lib.fsdp_grad_scaler_unscale(self._handle, opt._handle))

    def step(self, opt):
        """Unscales if not done, then steps `opt` unless a rank found inf/NaN; returns True when
        the step was skipped. Collective."""
        skipped = ctypes.c_int()
        _check(_lib.fsdp_grad_scaler_step(self._handle, opt._handle, ctypes.byref(skipped)))
        self.skipped_steps += skipped.value
        return bool(skipped.value)

    def update(self):
        """Backs the scale off after a skipped step, grows it after growth_interval clean ones."""
        _check(_lib.fsdp_grad_scaler_update(self._handle))

    def destroy(self):
        _check(_lib.fsdp_grad_scaler_destroy(ctypes.byref(self._handle)))
