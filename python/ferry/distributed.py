"""ferry.distributed: the torch.distributed backend "ferry".

    import torch.distributed as dist
    import ferry.distributed
    dist.init_process_group("ferry")
    model = DistributedDataParallel(model)
    model.register_comm_hook(None, ferry.distributed.bf16_hook)   # optional

Importing this module registers the backend, a process group over ferry's
ring (python/distributed/process_group.h). Its ranks may be any mix of
x86-64, aarch64 and s390x machines; an f32 allreduce (what DDP does) gives
every rank the same bits. A failed collective raises ferry.CommError (a
ferry.Error and a RuntimeError, with .code, .name, .context and .peer, the
rank at fault); inside DDP's backward, a RuntimeError with the same text.
A bad configuration (FERRY_SECRET, FERRY_AUTH, ...), a call the backend
does not support or arguments that do not fit a collective raise
ferry.Error (bad_config, unsupported, bad_argument: docs/errors.md).

Rendezvous, configuration (FERRY_SECRET, FERRY_AUTH, FERRY_TIMEOUT, ...),
the collectives and the store: docs/torch-distributed.md. Two things happen
at import: under SLURM, RANK, WORLD_SIZE and LOCAL_RANK are set from
SLURM_PROCID, SLURM_NTASKS and SLURM_LOCALID when unset (as ferry-train
reads them); and dist.init_process_group is wrapped so that backend "ferry"
with env:// rendezvouses through ferry's store of one byte order (_store.py)
in place of torch's TCPStore, which a big-endian rank cannot share with
little-endian ones.
"""
import atexit
import datetime
import functools
import os
import weakref

import torch
import torch.distributed as dist

from . import _distributed, _store
from . import CommError, Error

__all__ = ["BACKEND", "CommError", "Error", "bf16_hook", "fp16_hook", "describe"]

BACKEND = "ferry"


def _slurm_rendezvous():
    """RANK and WORLD_SIZE from SLURM's variables when a job step sets only those."""
    for var, slurm in (("RANK", "SLURM_PROCID"), ("WORLD_SIZE", "SLURM_NTASKS"), ("LOCAL_RANK", "SLURM_LOCALID")):
        if not os.environ.get(var) and os.environ.get(slurm):
            os.environ[var] = os.environ[slurm]


def _config_error(context):
    """ferry.Error bad_config, as the C++ half raises for FERRY_* variables."""
    code, message = _distributed.comm_codes["bad_config"]
    return Error(f"{context}: {message}", code, "bad_config", context)


def _env_int(name, default=None):
    value = os.environ.get(name) or default
    if not value:
        raise _config_error(f"ferry: {name} is not set (init_process_group's env:// rendezvous needs it)")
    try:
        return int(value)
    except ValueError:
        raise _config_error(f"ferry: {name}={value!r} is not an integer") from None


def _with_ferry_store(init):
    """init_process_group, but for backend "ferry" with the env:// rendezvous
    (the default) the store is ferry's (_store.Store: one byte order, so a
    big-endian rank can join), served by rank 0 on MASTER_ADDR:MASTER_PORT
    in place of torch's TCPStore. Any other backend, an explicit store or
    another init_method goes to torch's init_process_group unchanged."""

    @functools.wraps(init)
    def init_process_group(backend=None, init_method=None, timeout=None, world_size=-1, rank=-1, store=None,
                           *args, **kwargs):
        # torchrun's agent may hold a TCPStore on MASTER_PORT for its ranks:
        # they use that one (torch's env:// handler connects to it).
        agent_store = os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == str(True)
        if (backend is not None and str(backend).lower() == BACKEND and store is None
                and init_method in (None, "env://") and not agent_store):
            rank = rank if rank >= 0 else _env_int("RANK")
            world_size = world_size if world_size > 0 else _env_int("WORLD_SIZE")
            _distributed.check_environment(rank, world_size)  # a bad variable is this rank's error, not a hang
            wait = timeout if timeout is not None else datetime.timedelta(minutes=30)
            store = _store.Store(os.environ.get("MASTER_ADDR") or "127.0.0.1",
                                 _env_int("MASTER_PORT", "29500"), rank == 0, wait)
            init_method = None
        result = init(backend, init_method, timeout if timeout is not None else _default_timeout(), world_size, rank,
                      store, *args, **kwargs)
        if isinstance(store, _store.Store):
            # The default group holds the store from C++ only since torch 2
            # (through a PrefixStore): the Python object, which serves its
            # calls, lives as long as the group does.
            _stores[dist.distributed_c10d._get_default_group()] = store
        return result

    init_process_group.__wrapped_by_ferry__ = True
    return init_process_group


_stores = weakref.WeakKeyDictionary()  # {default group: ferry's store}


def _default_timeout():
    return dist.distributed_c10d.default_pg_timeout


def _register():
    if BACKEND.upper() in getattr(dist.Backend, "_plugins", {}):
        return  # imported twice (a reload): the first registration stands
    if _distributed.backend_api:  # torch 2.x: a c10d::Backend, for CPU tensors ("cpu" as a list, not a string)
        dist.Backend.register_backend(BACKEND, _distributed.create_process_group, devices=["cpu"])
    else:
        dist.Backend.register_backend(BACKEND, _distributed.create_process_group)
    if not getattr(dist.init_process_group, "__wrapped_by_ferry__", False):
        dist.init_process_group = dist.distributed_c10d.init_process_group = _with_ferry_store(
            dist.distributed_c10d.init_process_group)


_slurm_rendezvous()
_register()
# Before the interpreter finalises: a group's worker thread may still need
# the GIL for a queued collective (process_group.h, drain_all).
atexit.register(_distributed.drain)


def _group(state):
    """The process group a hook's state names: None means the default group."""
    return state if state is not None else dist.distributed_c10d._get_default_group()


def _compressed_hook(name, compression):
    def hook(state, bucket):
        # The residual's key: the bucket's index and its first parameter's
        # address, so that two models on one group keep theirs apart.
        key = hash((bucket.index(), bucket.parameters()[0].data_ptr()))
        work = _distributed.allreduce_compressed(_group(state), bucket.buffer(), compression, key)
        return work.get_future().then(lambda fut: fut.value()[0])

    hook.__name__ = name
    hook.__qualname__ = hook.__name__
    hook.__doc__ = (
        f"DDP communication hook: each gradient bucket is averaged over the group with its values sent as "
        f"{compression} (half the bytes of f32), and what the rounding loses is kept per bucket and added to the "
        f"next step's gradients (error feedback), so nothing is lost for good. state: the ferry process group, "
        f"or None for the default one. Every rank ends with the same bits."
    )
    return hook


bf16_hook = _compressed_hook("bf16_hook", "bf16")
fp16_hook = _compressed_hook("fp16_hook", "f16")


def describe(group=None):
    """The ring's configuration as this rank sees it: rank, world_size, timeout_s, auth, chunk_bytes."""
    return _distributed.describe(_group(group))
