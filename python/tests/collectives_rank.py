"""One rank of the collectives test of ferry.distributed: every collective
the backend offers, on every dtype, checked against the values each rank
can compute alone. Started by test_distributed.py with torchrun's
variables. Exits 0 when every check held; an AssertionError otherwise."""
import os
import sys

import math
import torch
import torch.distributed as dist

import ferry
import ferry.distributed as fd

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16,
          torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8, torch.bool]


def value(r, n=6, dtype=torch.float32):
    """Rank r's tensor: small integers, exact in every dtype."""
    return ((torch.arange(n) * 3 + r * 5) % 7).to(dtype)


def main():
    dist.init_process_group("ferry")
    rank, world = dist.get_rank(), dist.get_world_size()
    assert dist.get_backend() == "ferry"
    assert fd.describe()["world_size"] == world
    every = [value(r) for r in range(world)]

    for dtype in DTYPES:
        mine = [value(r, dtype=dtype) for r in range(world)]
        ops = [dist.ReduceOp.SUM, dist.ReduceOp.PRODUCT, dist.ReduceOp.MIN, dist.ReduceOp.MAX]
        if dtype.is_floating_point:
            ops.append(dist.ReduceOp.AVG)
        else:
            ops += [dist.ReduceOp.BAND, dist.ReduceOp.BOR, dist.ReduceOp.BXOR]
        for op in ops:
            t = mine[rank].clone()
            dist.all_reduce(t, op=op)
            want = mine[0].clone()
            for x in mine[1:]:
                if op in (dist.ReduceOp.SUM, dist.ReduceOp.AVG):
                    want = want + x if dtype != torch.bool else want | x
                elif op == dist.ReduceOp.PRODUCT:
                    want = want * x if dtype != torch.bool else want & x
                elif op == dist.ReduceOp.MIN:
                    want = torch.minimum(want, x)
                elif op == dist.ReduceOp.MAX:
                    want = torch.maximum(want, x)
                elif op == dist.ReduceOp.BAND:
                    want = want & x
                elif op == dist.ReduceOp.BOR:
                    want = want | x
                else:
                    want = want ^ x
            if op == dist.ReduceOp.AVG:
                want = (want.double() / world).to(dtype)
            assert t.dtype == dtype and torch.equal(t, want.to(dtype)), (dtype, op, t, want)

        b = mine[rank].clone()
        dist.broadcast(b, src=world - 1)
        assert torch.equal(b, mine[world - 1]), (dtype, b)
        out = [torch.zeros_like(mine[0]) for _ in range(world)]
        dist.all_gather(out, mine[rank])
        assert all(torch.equal(o, m) for o, m in zip(out, mine)), (dtype, out)

    # AVG of integers is refused at the call, naming the op: a ferry.Error
    # (not a CommError: nothing failed on the ring).
    try:
        dist.all_reduce(torch.ones(3, dtype=torch.int64), op=dist.ReduceOp.AVG)
        raise AssertionError("AVG of int64 was accepted")
    except ferry.Error as e:
        assert type(e) is ferry.Error and (e.code, e.name) == (312, "unsupported"), (type(e), e.code, e.name)
        assert "AVG" in e.context and str(e).startswith(e.context), e

    # A large f32 allreduce (many chunks) agrees bit for bit across ranks,
    # and equals the sum in ring order to rounding.
    g = torch.Generator().manual_seed(rank)
    big = torch.randn(3_000_001, generator=g)
    total = big.clone()
    dist.all_reduce(total)
    crcs = [torch.zeros(1, dtype=torch.int64) for _ in range(world)]
    dist.all_gather(crcs, torch.tensor([fd._distributed.crc32c(total)]))
    assert len({int(c) for c in crcs}) == 1, crcs
    ref = sum(torch.randn(3_000_001, generator=torch.Generator().manual_seed(r)) for r in range(world))
    assert torch.allclose(total, ref, atol=1e-5), (total - ref).abs().max()

    # Special values survive: NaN payloads, signed zeros, infinities (broadcast moves bits).
    special = torch.tensor([float("nan"), -0.0, float("inf"), -float("inf"), 1e-45]).view(torch.int32)
    special[0] = 0x7FC0_1234  # a NaN with a payload
    s = special.view(torch.float32).clone() if rank == 0 else torch.zeros(5)
    dist.broadcast(s, 0)
    assert torch.equal(s.view(torch.int32), special), s.view(torch.int32)

    # The kernels' rules hold on every rank (comm-protocol.md, Reductions):
    # a NaN wins MIN and MAX, quieted with its payload; min(-0, +0) is -0 and
    # max(-0, +0) is +0 whichever rank holds which; inf + -inf is the
    # positive quiet NaN 0x7FC00000 (x86 alone would make 0xFFC00000).
    z = torch.tensor([-0.0 if rank == 0 else 0.0, float("inf") if rank == 0 else -float("inf"), 5.0])
    z.view(torch.int32)[2] = 0x7F80_1234 if rank == 1 else z.view(torch.int32)[2]  # a signalling NaN
    lo, hi, tot = z.clone(), z.clone(), z.clone()
    dist.all_reduce(lo, op=dist.ReduceOp.MIN)
    dist.all_reduce(hi, op=dist.ReduceOp.MAX)
    dist.all_reduce(tot)
    assert lo.view(torch.int32).tolist() == [-0x8000_0000, -0x80_0000, 0x7FC0_1234], lo.view(torch.int32)
    assert hi.view(torch.int32).tolist() == [0, 0x7F80_0000, 0x7FC0_1234], hi.view(torch.int32)
    assert tot.view(torch.int32).tolist()[1:] == [0x7FC0_0000, 0x7FC0_1234], tot.view(torch.int32)
    # Integer sums and products wrap around, as in C and in torch.
    w = torch.tensor([2**31 - 1 if rank == 0 else 1, -3], dtype=torch.int32)
    dist.all_reduce(w)
    assert w.tolist() == [-2**31 + world - 2, -3 * world], w

    # Non-contiguous tensors are reduced in place.
    m = (torch.arange(12, dtype=torch.float32).reshape(3, 4) + rank).t()
    dist.all_reduce(m)
    want = sum(torch.arange(12, dtype=torch.float32).reshape(3, 4) + r for r in range(world)).t()
    assert torch.equal(m, want), m

    # Parameters (leaves that require grad) are reduced in place, as by any
    # backend, on every path: f32, f16/bf16 through f32, and f64.
    for dtype in (torch.float32, torch.bfloat16, torch.float64):
        p = torch.nn.Parameter(torch.full((3,), float(rank + 1), dtype=dtype))
        dist.all_reduce(p.data if dtype == torch.float32 else p)
        assert torch.equal(p.detach(), torch.full((3,), float(world * (world + 1) // 2), dtype=dtype)), p

    # reduce, gather, scatter, reduce_scatter, all_gather_into_tensor, barrier.
    r_ = value(rank)
    dist.reduce(r_, dst=0)
    if rank == 0:
        assert torch.equal(r_, sum(every)), r_
    gl = [torch.zeros(6) for _ in range(world)] if rank == 1 else None
    dist.gather(value(rank), gather_list=gl, dst=1)
    if rank == 1:
        assert all(torch.equal(a, b) for a, b in zip(gl, every)), gl
    sc = torch.zeros(6)
    dist.scatter(sc, scatter_list=[value(r) * 2 for r in range(world)] if rank == 0 else None, src=0)
    assert torch.equal(sc, value(rank) * 2), sc
    rs = torch.zeros(6)
    dist.reduce_scatter(rs, [value(r + rank) for r in range(world)])
    assert torch.equal(rs, sum(value(rank + r) for r in range(world))), rs
    # Uneven pieces (reduce_scatter_v): piece r has r + 2 elements, of f64
    # and int32 alike; rank r keeps the sum of every rank's piece r.
    for dtype in (torch.float64, torch.int32):
        pieces = [value(r + rank, n=r + 2, dtype=dtype) for r in range(world)]
        out = torch.zeros(rank + 2, dtype=dtype)
        dist.reduce_scatter(out, pieces)
        assert torch.equal(out, sum(value(rank + r, n=rank + 2, dtype=dtype) for r in range(world))), out
    # bf16 pieces (summed through f32) into a non-contiguous output, and a
    # MIN reduce_scatter_tensor of int64.
    out = torch.zeros(3, 2, dtype=torch.bfloat16).t()
    dist.reduce_scatter(out, [value(r + rank, dtype=torch.bfloat16).reshape(3, 2).t() for r in range(world)])
    want = sum(value(rank + r) for r in range(world)).reshape(3, 2).t().to(torch.bfloat16)
    assert torch.equal(out, want), out
    big = torch.cat([value(r + 2 * rank, dtype=torch.int64) for r in range(world)])
    mine = torch.zeros(6, dtype=torch.int64)
    dist.reduce_scatter_tensor(mine, big, op=dist.ReduceOp.MIN)
    want = torch.stack([value(rank + 2 * r, dtype=torch.int64) for r in range(world)]).min(0).values
    assert torch.equal(mine, want), mine
    try:  # this rank's piece must have the output's size: said before anything is sent
        dist.reduce_scatter(torch.zeros(rank + 3), [torch.zeros(r + 2) for r in range(world)])
        raise AssertionError("a reduce_scatter output of the wrong size was accepted")
    except ferry.Error as e:
        assert (e.code, e.name) == (313, "bad_argument") and "this rank's piece" in e.context, e
    flat = torch.zeros(6 * world)
    dist.all_gather_into_tensor(flat, value(rank))
    assert torch.equal(flat, torch.cat(every)), flat
    dist.barrier()

    # all_gather_coalesced: several tensors of one dtype, any shapes, in one
    # allgather; complex tensors travel viewed as real ones.
    ins = [value(rank, n=4).reshape(2, 2), value(rank, n=1), value(rank, n=3) * 2]
    outs = [[torch.zeros_like(t) for t in ins] for _ in range(world)]
    dist.all_gather_coalesced(outs, ins)
    for r in range(world):
        want = [value(r, n=4).reshape(2, 2), value(r, n=1), value(r, n=3) * 2]
        assert all(torch.equal(o, w) for o, w in zip(outs[r], want)), (r, outs[r])
    z = torch.complex(value(rank, n=3), -value(rank, n=3))
    zs = [[torch.zeros_like(z)] for _ in range(world)]
    dist.all_gather_coalesced(zs, [z])
    assert all(torch.equal(zs[r][0], torch.complex(value(r, n=3), -value(r, n=3))) for r in range(world)), zs

    # The multi-tensor forms, as PyTorch's test_c10d_gloo.py runs them on
    # the process group: several tensors per rank.
    pg = dist.distributed_c10d._get_default_group()
    for root in range(world):
        for which in range(2):
            xs = [torch.tensor([rank * 2 + 0.0]), torch.tensor([rank * 2 + 1.0])]
            opts = dist.BroadcastOptions()
            opts.rootRank, opts.rootTensor = root, which
            pg.broadcast(xs, opts).wait()
            assert all(torch.equal(x, torch.tensor([root * 2.0 + which])) for x in xs), (root, which, xs)
    cases = [(dist.ReduceOp.SUM, float(sum(range(2 * world)))),
             (dist.ReduceOp.PRODUCT, float(math.prod(range(1, 2 * world + 1)))),
             (dist.ReduceOp.MIN, 1.0), (dist.ReduceOp.MAX, float(2 * world))]
    for op, want in cases:
        base = 0.0 if op == dist.ReduceOp.SUM else 1.0
        xs = [torch.tensor([rank * 2 + base]), torch.tensor([rank * 2 + base + 1])]
        opts = dist.AllreduceOptions()
        opts.reduceOp = op
        fut = pg.allreduce(xs, opts).get_future()
        fut.wait()
        assert all(torch.equal(x, torch.tensor([want])) for x in fut.value()), (op, fut.value())
    # f16 sums of several tensors are formed in f32 and rounded once.
    hs = [torch.full((3,), 2048.0, dtype=torch.half), torch.ones(3, dtype=torch.half)]
    opts = dist.AllreduceOptions()
    pg.allreduce(hs, opts).wait()
    assert all(torch.equal(h, torch.full((3,), 2049.0 * world).half()) for h in hs), hs
    for n in (1, 2, 3):
        ins = [torch.tensor([n * rank + i]) for i in range(n)]
        outs = [[torch.tensor([-1]) for _ in range(n * world)] for _ in range(n)]
        fut = pg.allgather(outs, ins).get_future()
        fut.wait()
        got = fut.value() if n > 1 else [fut.value()]
        want = [[torch.tensor([i]) for i in range(n * world)] for _ in range(n)]
        assert all(torch.equal(a, b) for x, y in zip(got, want) for a, b in zip(x, y)), (n, got)
        assert all(torch.equal(a, b) for x, y in zip(outs, want) for a, b in zip(x, y)), (n, outs)
    try:
        opts = dist.AllreduceOptions()
        opts.reduceOp = dist.ReduceOp.AVG
        pg.allreduce([torch.ones(1), torch.ones(1)], opts).wait()
        raise AssertionError("AVG over two tensors per rank was accepted")
    except ferry.Error as e:
        assert e.name == "unsupported" and "one tensor per rank" in e.context, e

    # Async: wait() and the future both hold the result.
    t = torch.ones(4)
    work = dist.all_reduce(t, async_op=True)
    work.wait()
    assert torch.equal(work.get_future().value()[0], torch.full((4,), float(world)))

    # A subgroup forms its own ring.
    sub = dist.new_group([0, world - 1])
    if rank in (0, world - 1):
        t = torch.full((3,), float(rank))
        dist.all_reduce(t, group=sub)
        assert torch.equal(t, torch.full((3,), float(world - 1))), t

    # Point to point (a receive posted before the send) and all-to-all, in
    # each receiver's byte order.
    if world > 1:
        nxt, prv = (rank + 1) % world, (rank - 1) % world
        got = torch.empty(5, dtype=torch.float64)
        req = dist.irecv(got, prv, tag=3)
        dist.send(torch.arange(5, dtype=torch.float64) + rank * 10, nxt, tag=3)
        req.wait()
        assert torch.equal(got, torch.arange(5, dtype=torch.float64) + prv * 10), got
    out = torch.empty(world, dtype=torch.int32)
    dist.all_to_all_single(out, torch.tensor([rank * 100 + r for r in range(world)], dtype=torch.int32))
    assert torch.equal(out, torch.tensor([r * 100 + rank for r in range(world)], dtype=torch.int32)), out

    # What the backend does not do, it says by name (torch 2 refuses it
    # before asking the backend, with a ValueError).
    try:
        dist.monitored_barrier()
        raise AssertionError("monitored_barrier was accepted")
    except (RuntimeError, ValueError) as e:
        assert "monitored_barrier" in str(e), e

    dist.barrier()  # rank 0 holds the store: nobody leaves before everyone is done with it
    dist.destroy_process_group()
    print(f"rank {rank}: ok", flush=True)


if __name__ == "__main__":
    sys.exit(main())
