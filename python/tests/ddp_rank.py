"""One rank of a small DDP job, for the tests of ferry.distributed.

The reference MLP (Linear 784->32, BatchNorm1d, ReLU, Linear 32->10, Adam
lr 1e-3) on synthetic data (each rank its own batches, seeded by rank),
wrapped in DistributedDataParallel on the backend named by --backend,
under the variables torchrun (or ferry-run) sets. With --check, every
gradient bucket's allreduced result is summed up as a CRC32C of its values
stored little-endian (ferry._distributed.crc32c: the same on every
architecture), and after each step every rank compares the list of CRCs
with every other rank's: one difference fails the job. Prints "step K" as
each step ends (the kill test waits for it; "imported" before the
rendezvous, the mixed tests' cue), and rank 0 writes --out: the
losses, the final parameters' CRC32C and the seconds the training took
(after the rendezvous). With --hook given more than once, the job trains
once per hook, one after another in the same process group (each from the
same start; "step K" counts from 1 again), and --out holds a list of those
summaries. At most one of them may be a ferry hook (f32, bf16, fp16): a
second model could reuse the first one's parameter addresses, by which
ferry's hooks keep each bucket's rounding error.

Exits 1 with one line "rank R: error: ..." on stderr when a collective
fails, 2 when the ranks' results differ. Before it, for a ferry.Error, a
line "rank R: ferry error: code C NAME peer P" (P: the CommError's peer,
None, or - for an Error that is not a CommError). With --plain on torch
>= 2.6 and backend ferry, each all_reduce's Work.get_future_result() is
checked: a failure is printed first, "rank R: work result N" (c10d's
WorkResult: 1 timeout, 2 comm error), and one that wait() then does not
raise exits 2.
"""
import argparse
import datetime
import json
import os
import sys
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--backend", default="ferry", choices=["ferry", "gloo"])
    ap.add_argument("--hook", action="append", choices=["none", "f32", "bf16", "fp16"],
                    help="none (the default): torch's allreduce_hook; f32: ferry's hook path uncompressed (the "
                         "baseline of bf16 and fp16); repeated: one training per hook")
    ap.add_argument("--plain", action="store_true",
                    help="no DDP: average the gradients with one dist.all_reduce each")
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--check", action="store_true", help="compare every bucket's result across ranks each step")
    ap.add_argument("--timeout", type=float, default=60, help="init_process_group's timeout, seconds")
    ap.add_argument("--out", help="rank 0 writes a JSON summary here")
    ap.add_argument("--leave", action="store_true",
                    help="exit with an all_reduce in flight and without destroy_process_group")
    args = ap.parse_args()
    if sum(hook != "none" for hook in args.hook or []) > 1:
        ap.error("at most one ferry hook (f32, bf16, fp16) per job")

    import ferry.distributed as fd  # registers "ferry"; also gives crc32c to the gloo run

    torch.set_num_threads(1)
    rank = int(os.environ["RANK"])
    print("imported", flush=True)  # the mixed tests start the x86-64 rank on this
    try:
        dist.init_process_group(args.backend, timeout=datetime.timedelta(seconds=args.timeout))
        summaries = [train(args, hook, rank, fd) for hook in args.hook or ["none"]]
        if rank == 0 and args.out:
            with open(args.out, "w") as f:
                json.dump(summaries[0] if len(summaries) == 1 else summaries, f)
        if args.leave:
            dist.all_reduce(torch.ones(1 << 20), async_op=True)
            return
        dist.barrier()  # rank 0 holds the store: nobody leaves before everyone is done with it
        if args.backend == "gloo":
            # gloo's teardown in torch 1.13 sometimes never returns (pytorch
            # #75097; CI saw rank 0 hang after its last step). gloo is only
            # the reference here: its results are written, so leave at once.
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(0)
        dist.destroy_process_group()
    except (RuntimeError, fd.Error) as e:
        if isinstance(e, fd.Error):  # ferry's family: what a program can act on
            peer = getattr(e, "peer", "-")
            print(f"rank {rank}: ferry error: code {e.code} {e.name} peer {peer}", file=sys.stderr, flush=True)
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        print(f"rank {rank}: error: {type(e).__name__}: {first}", file=sys.stderr, flush=True)
        sys.exit(1)


def train(args, hook, rank, fd):
    """Trains from the same start with one hook; rank 0's summary."""
    t0 = time.perf_counter()
    world = dist.get_world_size()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(784, 32), nn.BatchNorm1d(32), nn.ReLU(), nn.Linear(32, 10))
    if not args.plain:
        model = DistributedDataParallel(model)
    if hook == "none":
        from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook as inner
    elif hook == "f32":
        inner = fd._compressed_hook("f32_hook", "none")
    else:
        inner = fd.bf16_hook if hook == "bf16" else fd.fp16_hook
    crcs = []

    def checked(state, bucket):
        def record(fut):
            result = fut.value()
            crcs.append(fd._distributed.crc32c(result))
            return result
        return inner(state, bucket).then(record)

    if not args.plain:
        model.register_comm_hook(None, checked if args.check else inner)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    future_results = args.backend == "ferry" and hasattr(dist.Work, "get_future_result")
    data = torch.Generator().manual_seed(1000 + rank)
    losses = []
    for step in range(args.steps):
        x = torch.randn(args.batch, 784, generator=data)
        y = torch.randint(0, 10, (args.batch,), generator=data)
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        if args.plain:
            for p in model.parameters():
                work = dist.all_reduce(p.grad, op=dist.ReduceOp.AVG, async_op=True)
                # torch >= 2.6: the outcome, never an exception (ferry's;
                # gloo's Work has no getFutureResult)
                result = work.get_future_result().wait() if future_results else 0
                if result != 0:
                    print(f"rank {rank}: work result {result}", file=sys.stderr, flush=True)
                work.wait()
                if result != 0:
                    print(f"rank {rank}: error: get_future_result() said {result}, but wait() succeeded",
                          file=sys.stderr, flush=True)
                    sys.exit(2)
        optimizer.step()
        losses.append(loss.item())
        if args.check:
            mine = torch.tensor(crcs, dtype=torch.int64)
            every = [torch.zeros_like(mine) for _ in range(world)]
            dist.all_gather(every, mine)
            for r, theirs in enumerate(every):
                if not torch.equal(theirs, mine):
                    print(f"rank {rank}: step {step}: bucket CRC32Cs {mine.tolist()} but rank {r} has "
                          f"{theirs.tolist()}", file=sys.stderr, flush=True)
                    sys.exit(2)
            crcs.clear()
        print(f"step {step + 1}", flush=True)
    params = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    param_crc = fd._distributed.crc32c(params)
    every = [torch.zeros(1, dtype=torch.int64) for _ in range(world)]
    dist.all_gather(every, torch.tensor([param_crc], dtype=torch.int64))
    if any(int(e) != param_crc for e in every):
        print(f"rank {rank}: parameters differ across ranks: {[int(e) for e in every]}", file=sys.stderr)
        sys.exit(2)
    return {"backend": args.backend, "hook": hook, "world": world, "losses": losses, "param_crc32c": param_crc,
            "params": params.tolist(), "seconds": time.perf_counter() - t0, "machine": os.uname().machine}


if __name__ == "__main__":
    main()
