"""ferry.distributed: the torch.distributed backend "ferry".

    import torch.distributed as dist
    import ferry.distributed
    dist.init_process_group("ferry")

Importing this module registers the backend. Its ranks may be any mix of
x86-64, ARM (64- and 32-bit) and big-endian machines: values cross the
ring in a recorded byte order, and an f32 allreduce (what DDP does) gives
every rank the same bits. A dead, silent or misbehaving rank fails every
rank's collective with an error naming it, within FERRY_TIMEOUT at most
(at once when its connection closes).

Rendezvous: what init_process_group reads (env://: MASTER_ADDR,
MASTER_PORT, RANK, WORLD_SIZE, as torchrun and ferry-run set them; under
SLURM without RANK and WORLD_SIZE, importing this module sets them from
SLURM_PROCID and SLURM_NTASKS, as ferry-train reads them), plus ferry's own
variables: FERRY_SECRET or FERRY_SECRET_FILE (the same on every rank;
ferry-run sets one on a single node), FERRY_AUTH (none, frames, encrypt),
FERRY_TIMEOUT (seconds; default the smaller of init_process_group's timeout
and 60), FERRY_CHUNK_BYTES, FERRY_RING_ORDER, FERRY_SEND_BUFFER. Rank 0
binds the ring's port on MASTER_ADDR; the port travels through
torch.distributed's store.

Collectives (python/distributed/process_group.h has the details):
all_reduce (SUM, AVG, PRODUCT, MIN, MAX, BAND, BOR, BXOR), reduce,
broadcast, all_gather, gather, scatter, reduce_scatter, barrier, on CPU
tensors of f32, f64, f16, bf16, integer and bool dtypes. all_to_all and
send/recv raise "ProcessGroup ferry does not support ...".

DDP communication hooks, sending gradient buckets rounded to 16 bits with
error feedback (what ferry-train --compress does):

    model = DistributedDataParallel(model)
    model.register_comm_hook(None, ferry.distributed.bf16_hook)

Errors: a failed collective raises CommError (a RuntimeError) naming the
rank at fault; inside DDP's backward it arrives as a RuntimeError with the
same text.
"""
import os

import torch
import torch.distributed as dist

from . import _distributed
from ._distributed import CommError

__all__ = ["BACKEND", "CommError", "bf16_hook", "fp16_hook", "describe"]

BACKEND = "ferry"


def _slurm_rendezvous():
    """RANK and WORLD_SIZE from SLURM's variables when a job step sets only those."""
    for var, slurm in (("RANK", "SLURM_PROCID"), ("WORLD_SIZE", "SLURM_NTASKS"), ("LOCAL_RANK", "SLURM_LOCALID")):
        if not os.environ.get(var) and os.environ.get(slurm):
            os.environ[var] = os.environ[slurm]


def _register():
    if BACKEND.upper() in getattr(dist.Backend, "_plugins", {}):
        return  # imported twice (a reload): the first registration stands
    dist.Backend.register_backend(BACKEND, _distributed.create_process_group)


_slurm_rendezvous()
_register()


def _group(state):
    """The process group a hook's state names: None means the default group."""
    return state if state is not None else dist.distributed_c10d._get_default_group()


def _compressed_hook(compression):
    def hook(state, bucket):
        work = _distributed.allreduce_compressed(_group(state), bucket.buffer(), compression, bucket.index())
        return work.get_future().then(lambda fut: fut.value()[0])

    hook.__name__ = f"{compression}_hook"
    hook.__qualname__ = hook.__name__
    hook.__doc__ = (
        f"DDP communication hook: each gradient bucket is averaged over the group with its values sent as "
        f"{compression} (half the bytes of f32), and what the rounding loses is kept per bucket and added to the "
        f"next step's gradients (error feedback), so nothing is lost for good. state: the ferry process group, "
        f"or None for the default one. Every rank ends with the same bits."
    )
    return hook


bf16_hook = _compressed_hook("bf16")
fp16_hook = _compressed_hook("f16")


def describe(group=None):
    """The ring's configuration as this rank sees it: rank, world_size, timeout_s, auth, chunk_bytes."""
    return _distributed.describe(_group(group))
