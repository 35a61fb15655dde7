"""fully_shard's DeviceMesh and the libfsdp context behind it: the process group DTensor needs
(the user's, or a gloo group over the library's world made here), the mesh (the user's, or one
over the world) and the context whose sharding the mesh describes, one per kind of mesh and
placement (host memory, or one GPU: _device.placement_of)."""
import os
import socket

import numpy as np
import torch

from .. import Error, _refuse, init

HOST = ("host", -1)
# (strategy, sharding factor, memory space, device[, "hpz"]) -> the Context of fully_shard's units
_contexts = {}
_world_mesh = {}  # device type -> the 1-D mesh over the world made for mesh=None


def _context(key):
    """The context of `key` (made once; collective the first time)."""
    if key not in _contexts:
        _contexts[key] = init(strategy=key[0], sharding_factor=key[1], memory_space=key[2],
                              device=key[3])
    return _contexts[key]


def _world_context(placement=HOST):
    """The context of full sharding over MPI_COMM_WORLD in `placement` (made once)."""
    return _context(("full", 0) + tuple(placement))


def ensure_process_group(call, placement=HOST):
    """torch.distributed's default group, over the same ranks as the library's world: the user's
    (checked), or a gloo group made here, its TCPStore's address broadcast by the library from
    rank 0 (no init_process_group needed). Collective the first time."""
    import torch.distributed as dist
    ctx = _world_context(placement)
    rank, world = ctx.group("world")
    if dist.is_initialized():
        if (dist.get_rank(), dist.get_world_size()) != (rank, world):
            _refuse(call, f"torch.distributed's default group is rank {dist.get_rank()} of "
                    f"{dist.get_world_size()}, but MPI_COMM_WORLD is rank {rank} of {world}; "
                    "fully_shard needs both over the same processes in the same order")
        return
    store = None
    address = np.zeros(258, np.uint8)  # host name (<= 255 bytes), then the port (2 bytes)
    if rank == 0:
        host = os.environ.get("LIBFSDP_STORE_HOST") or socket.gethostname()
        store = dist.TCPStore(host, 0, world, True, wait_for_workers=False)
        name = host.encode()[:255]
        address[:len(name)] = np.frombuffer(name, np.uint8)
        address[256:258] = np.frombuffer(int(store.port).to_bytes(2, "little"), np.uint8)
    address = ctx.broadcast(address)
    if rank != 0:
        host = bytes(address[:256]).rstrip(b"\0").decode()
        port = int.from_bytes(bytes(address[256:258]), "little")
        store = dist.TCPStore(host, port, world, False)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=world)


def resolve(mesh, call, placement=HOST):
    """(context, mesh, placements of a parameter's shard) for fully_shard's `mesh` argument, the
    context in `placement` ((memory space, device) of the module's parameters): None, the
    world's 1-D mesh (full sharding); a 1-D mesh over every rank in order (full sharding); a 2-D
    (replicate, shard) mesh over every rank, shard groups of consecutive ranks (hybrid
    sharding). Any other mesh, and a mesh of another device type than the parameters', is
    refused naming it."""
    from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
    from torch.distributed.tensor import Replicate, Shard
    device_type = "cuda" if placement[0] == "cuda" else "cpu"
    if mesh is not None and not isinstance(mesh, DeviceMesh):
        _refuse(call, f"mesh: a torch DeviceMesh or None is needed, got {type(mesh).__name__}")
    if mesh is not None and mesh.device_type != device_type:
        _refuse(call, f"mesh: device type {mesh.device_type!r}, but the module's parameters are "
                f"on {'the CPU' if device_type == 'cpu' else f'cuda:{placement[1]}'}: a "
                f"\"{device_type}\" mesh is needed (move the module first)")
    ensure_process_group(call, placement)
    ctx = _world_context(placement)
    rank, world = ctx.group("world")
    if mesh is None:
        if device_type not in _world_mesh:
            _world_mesh[device_type] = init_device_mesh(device_type, (world,))
        return ctx, _world_mesh[device_type], (Shard(0),)
    ranks = mesh.mesh.reshape(-1).tolist()
    if ranks != list(range(world)):
        _refuse(call, f"mesh: {mesh} covers ranks {ranks}; the library shards over every rank of "
                f"MPI_COMM_WORLD (0..{world - 1}) in order")
    if mesh.ndim == 1:
        return ctx, mesh, (Shard(0),)
    if mesh.ndim != 2:
        _refuse(call, f"mesh: {mesh.ndim} dimensions; 1 (shard) or 2 (replicate, shard) are "
                "supported")
    factor = int(mesh.size(1))
    hybrid = _context(("hybrid", factor) + tuple(placement))
    if hybrid.group("shard") != (rank % factor, factor):
        _refuse(call, f"mesh: its shard dimension ({factor} ranks) is not the library's hybrid "
                f"shard group here (rank {hybrid.group('shard')[0]} of "
                f"{hybrid.group('shard')[1]})")
    return hybrid, mesh, (Replicate(), Shard(0))



def hpz_variant(ctx, ranks, call, where):
    """The context of `ctx`'s mesh with hpZ on (fsdp_config_t.hpz, made once): its units are
    resharded after forward to the `ranks` ranks of their shard group on one node, FSDP2's
    reshard_after_forward=ranks. libfsdp.Error naming the module when the library's node group
    (FSDP_GROUP_NODE) is not of `ranks` ranks. Collective the first time."""
    key = next(k for k, c in _contexts.items() if c is ctx) + ("hpz",)
    what = f"module '{where}': reshard_after_forward={ranks}"
    if key not in _contexts:
        try:
            made = init(strategy=key[0], sharding_factor=key[1], memory_space=key[2],
                        device=key[3], hpz=True)
        except Error as e:
            _refuse(call, f"{what}: {e}")
        node = made.group("node")[1]
        if node != ranks:
            made.finalize()
            shard = ctx.group("shard")[1]
            if node == 1:
                _refuse(call, f"{what}: each shard group of {shard} ranks lies inside one node "
                        "here, where the library keeps no smaller post-forward group (hpZ "
                        "reshards to a shard group's ranks on one node); pass True")
            _refuse(call, f"{what}: the library reshards after forward to the shard group's "
                    f"ranks on one node ({node}, hpZ), not to groups of {ranks}")
        _contexts[key] = made
    return _contexts[key]
