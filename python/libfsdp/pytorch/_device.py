"""Where fully_shard's units keep their memory, as torch sees it: the library placement of a
module's parameters (host memory for CPU ones, the GPU of CUDA ones), torch tensors over the
buffers the binding hands out, and the caller's CUDA stream a CUDA context orders its work
against (fsdp_set_stream)."""
import numpy as np
import torch

from .. import _refuse


def placement_of(params, call, where, mesh_device_type=None):
    """(memory_space, device) of the context for `params` ([(name, Parameter)]) of module
    `where`: ("host", -1) for CPU parameters, ("cuda", index) for parameters on one GPU; when all
    are on the meta device, the mesh's device type says (a "cuda" mesh: the current GPU; none or
    "cpu": host memory). Parameters on two devices, on another device type, or on a GPU other
    than torch.cuda.current_device() (the one torch's collectives and FSDP2's mesh use) are
    refused naming them."""
    devices = {}
    for name, p in params:
        if p.device.type != "meta":
            devices.setdefault(p.device, name)
    if len(devices) > 1:
        (d0, n0), (d1, n1) = list(devices.items())[:2]
        _refuse(call, f"module '{where}': parameter \"{n0}\" is on {d0} and \"{n1}\" on {d1}; "
                "one unit's parameters live on one device")
    if not devices:
        return ("cuda", torch.cuda.current_device()) if mesh_device_type == "cuda" else \
            ("host", -1)
    device, name = next(iter(devices.items()))
    if device.type == "cpu":
        return "host", -1
    if device.type != "cuda":
        _refuse(call, f"module '{where}': parameter \"{name}\" is on {device}; libfsdp keeps "
                "units in host memory (CPU parameters) or on a CUDA GPU")
    index = device.index if device.index is not None else torch.cuda.current_device()
    if index != torch.cuda.current_device():
        _refuse(call, f"module '{where}': parameter \"{name}\" is on cuda:{index} but "
                f"torch.cuda.current_device() is {torch.cuda.current_device()}; call "
                f"torch.cuda.set_device({index}) first (each rank uses its current GPU)")
    return "cuda", index


def device_of(ctx):
    """The torch.device of a context's memory (its placement: the CPU, or its GPU)."""
    placement = ctx.placement()
    if placement["memory_space"] == "cuda":
        return torch.device("cuda", placement["device"])
    return torch.device("cpu")


def tensor(buffer):
    """A torch tensor over a buffer the binding hands out (a numpy array for host memory, a
    DLPack exporter for CUDA memory), no copy: torch.from_dlpack. bfloat16 comes as 16-bit
    integer bits (numpy has none) and is viewed as bfloat16; numpy's uint16 goes as int16, which
    every PyTorch takes."""
    if isinstance(buffer, np.ndarray) and buffer.dtype == np.uint16:
        buffer = buffer.view(np.int16)
    t = torch.from_dlpack(buffer)
    if t.dtype == torch.int16 or t.dtype == getattr(torch, "uint16", torch.int16):
        t = t.view(torch.bfloat16)
    return t


def join_stream(contexts, device):
    """On a GPU: the contexts order their next work after what torch queued on its current
    stream, and hand memory out to work queued on it after theirs (fsdp_set_stream); the CPU
    never waits. Nothing on the host."""
    if device.type == "cuda":
        stream = torch.cuda.current_stream(device).cuda_stream
        for ctx in contexts:
            ctx.set_stream(stream)
