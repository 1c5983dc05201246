"""A world of one on backend "ferry": every collective is complete when
its call returns (nothing to send, no hand-off to the worker thread), and
gives what the lone rank holds. Started by test_distributed.py."""
import torch
import torch.distributed as dist

import ferry
import ferry.distributed  # noqa: F401 (registers the backend)


def main():
    dist.init_process_group("ferry")
    assert dist.get_world_size() == 1
    t = torch.arange(5, dtype=torch.float32)
    for op in (dist.ReduceOp.SUM, dist.ReduceOp.AVG, dist.ReduceOp.MAX):
        work = dist.all_reduce(t, op=op, async_op=True)
        assert work.is_completed(), op
        work.wait()
        assert torch.equal(t, torch.arange(5, dtype=torch.float32)), t
    b = torch.ones(3, dtype=torch.bfloat16)
    assert dist.broadcast(b, src=0, async_op=True).is_completed()
    out = [torch.zeros(4)]
    dist.all_gather(out, torch.full((4,), 7.0))
    assert torch.equal(out[0], torch.full((4,), 7.0))
    rs = torch.zeros(2)
    dist.reduce_scatter(rs, [torch.tensor([1.0, 2.0])])
    assert torch.equal(rs, torch.tensor([1.0, 2.0]))
    assert dist.barrier(async_op=True).is_completed()
    try:  # a call the backend refuses still raises in the caller
        dist.reduce_scatter(torch.zeros(3), [torch.zeros(2)])
        raise AssertionError("accepted")
    except ferry.Error as e:  # ferry's, not torch's RuntimeError
        assert (e.code, e.name) == (313, "bad_argument") and "this rank's piece" in e.context, e
    dist.destroy_process_group()
    print("ok", flush=True)


if __name__ == "__main__":
    main()
