"""What a job would hold and send per rank (fsdp_plan_*, doc/planning.md): the planner of the C
library, asked from Python. Nothing here restates its rules."""
import ctypes
import json

from . import _capi
from . import _check, _choice, _config, _lib, _refuse
from .optimizer import _hyperparams, defaults


def plan(model, format, world_size, ranks_per_node=0, rank=0, optimizer="adamw",
         hyperparams=None, prefetch_forward=False, prefetch_backward=False, **config):
    """The plan of one rank as a dict (fsdp_plan_describe's JSON: the job, each unit, "memory"
    by fsdp_memory_stats' names, "traffic" per training step). Local; needs no MPI.

    model: a file; format: "layout" (the layout JSON of doc/planning.md), "hf" (a Hugging Face
    config.json) or "checkpoint" (a libfsdp checkpoint). world_size, ranks_per_node (0: one
    node), rank. optimizer: "sgd", "adamw" or None (no library optimizer), with `hyperparams` a
    dict of overrides (e.g. {"momentum": 0.9}, {"amsgrad": 1}). prefetch_forward/_backward as
    fsdp_set_prefetch. Every other keyword is init's (strategy, sharding_factor, param_dtype,
    reduce_dtype, max_unsharded, memory_space, cpu_offload, transport, ...)."""
    call = "fsdp_plan_describe"
    fmt = _choice("fsdp_plan_read_model", "format", _capi.PLAN_FORMATS, format)
    for arg, value in (("world_size", world_size), ("ranks_per_node", ranks_per_node),
                       ("rank", rank)):
        if not isinstance(value, int) or isinstance(value, bool):
            _refuse(call, f"{arg}: an int is needed, got {type(value).__name__}")
    cfg = _config(call, **config)
    job = _capi.initialized("FSDP_PLAN_JOB_INIT")
    job.config = ctypes.pointer(cfg)
    job.world_size, job.ranks_per_node = world_size, ranks_per_node
    if optimizer is None:
        if hyperparams:
            _refuse(call, "hyperparams: given without an optimizer")
        job.no_optimizer = 1
    else:
        job.optimizer = _choice(call, "optimizer", _capi.OPTIMIZERS, optimizer)
        hp = _hyperparams(call, optimizer, defaults(optimizer), dict(hyperparams or {}))
        job.hyperparams = ctypes.pointer(hp)
    job.prefetch_forward = 1 if prefetch_forward else 0
    job.prefetch_backward = 1 if prefetch_backward else 0
    handle = ctypes.c_void_p()
    _check(_lib.fsdp_plan_create(ctypes.byref(handle)))
    try:
        _check(_lib.fsdp_plan_read_model(handle, str(model).encode(), fmt))
        length = ctypes.c_size_t()
        _check(_lib.fsdp_plan_describe(handle, ctypes.byref(job), rank, None, 0,
                                       ctypes.byref(length)))
        buf = ctypes.create_string_buffer(length.value + 1)
        _check(_lib.fsdp_plan_describe(handle, ctypes.byref(job), rank, buf, len(buf), None))
    finally:
        _check(_lib.fsdp_plan_destroy(ctypes.byref(handle)))
    return json.loads(buf.value.decode())
