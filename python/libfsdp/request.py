"""libfsdp.Request: an asynchronous operation in flight (fsdp_request_t)."""
import ctypes

from . import _check, _lib


class Request:
    """An operation in flight (fsdp_request_t): wait() once, or test()."""

    def __init__(self, handle):
        self._handle = handle

    def test(self):
        done = ctypes.c_int()
        _check(_lib.fsdp_test(self._handle, ctypes.byref(done)))
        return bool(done.value)

    def wait(self):
        _check(_lib.fsdp_wait(ctypes.byref(self._handle)))
