"""One rank of the torch 2 tests of ferry.distributed (test_torch2.py):
FSDP, DeviceMesh and DTensor, tensor parallelism and
torch.distributed.checkpoint, each run twice in this one process: over the
default group, backend "ferry", and over a gloo group of the same ranks
(dist.new_group(backend="gloo")), with every result compared here, bit for
bit, between the two, and with what one process computes alone where it
can. Started by test_torch2.py with torchrun's variables; --dir is a
folder all ranks share (the checkpoints, and rank R's summary rank<R>.json:
each phase's losses and CRC32Cs of its values, per backend, and the
seconds it took). Exits 1 with a traceback when a check fails.

What gloo cannot run on CPU in torch 2.6 is compared with the closest
thing it can (each place says why). FSDP2 (fully_shard) is not here:
torch 2.6 cannot run it on CPU over any backend (its first all-gather
asks torch.cpu.Stream for record_event, which it lacks).
"""
import argparse
import itertools
import json
import os
import time

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed._functional_collectives import AsyncCollectiveTensor
from torch.distributed.checkpoint.state_dict import (StateDictOptions, get_model_state_dict, get_state_dict,
                                                     set_state_dict)
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import FullyShardedDataParallel, ShardingStrategy
from torch.distributed.fsdp.wrap import ModuleWrapPolicy
from torch.distributed.tensor import DTensor, Partial, Replicate, Shard, distribute_tensor
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

import ferry.distributed as fd

STEPS = 4
FULL = StateDictOptions(full_state_dict=True)


def plain(t):
    """The plain tensor holding t's values: a DTensor's local tensor, an
    AsyncCollectiveTensor's (RowwiseParallel's output) result."""
    if isinstance(t, DTensor):
        t = t.to_local()
    return t.wait() if isinstance(t, AsyncCollectiveTensor) else t


def crc(t):
    """CRC32C of a tensor's values (little-endian, ferry._distributed.crc32c)."""
    return fd._distributed.crc32c(plain(t).detach().contiguous())


def flat(state):
    """A state dict's leaves in key order: (dotted key, value)."""
    out = []
    for key in sorted(state, key=str):
        value = state[key]
        if isinstance(value, dict):
            out += [(f"{key}.{k}", v) for k, v in flat(value)]
        else:
            out.append((str(key), value))
    return out


def assert_same(a, b, what):
    """Two state dicts (or lists of tensors) hold the same keys and bits."""
    a, b = (flat(x) if isinstance(x, dict) else list(enumerate(x)) for x in (a, b))
    assert [k for k, _ in a] == [k for k, _ in b], (what, [k for k, _ in a], [k for k, _ in b])
    for (key, x), (_, y) in zip(a, b):
        if isinstance(x, torch.Tensor):
            x, y = plain(x), plain(y)
            assert x.dtype == y.dtype and x.shape == y.shape and torch.equal(x, y), (what, key, x, y)
        else:
            assert x == y, (what, key, x, y)


def full_crcs(state):
    return {key: crc(value) for key, value in flat(state) if isinstance(value, torch.Tensor)}


def model():
    """The tiny MLP every training phase starts from (seed 0). Sizes are
    prime: FSDP pads its flat shards on 2 and 3 ranks."""
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(11, 23), nn.ReLU(), nn.Linear(23, 7), nn.ReLU(), nn.Linear(7, 5))


def batches(rank):
    g = torch.Generator().manual_seed(1000 + rank)
    return [(torch.randn(8, 11, generator=g), torch.randint(0, 5, (8,), generator=g)) for _ in range(STEPS + 1)]


def step(net, opt, batch):
    x, y = batch
    opt.zero_grad()
    loss = nn.functional.cross_entropy(net(x), y)
    loss.backward()
    opt.step()
    return loss.item()


def fsdp(group=None, mesh=None):
    """FULL_SHARD FSDP, one unit per Linear, over `group` or a 1-D `mesh`
    (its state dicts then hold DTensors, not ShardedTensors): (model, Adam,
    losses)."""
    net = FullyShardedDataParallel(model(), process_group=group, device_mesh=mesh, device_id=torch.device("cpu"),
                                   sharding_strategy=ShardingStrategy.FULL_SHARD,
                                   auto_wrap_policy=ModuleWrapPolicy({nn.Linear}))
    opt = torch.optim.Adam(net.parameters(), lr=1e-2)
    return net, opt, [step(net, opt, b) for b in batches(dist.get_rank())[:STEPS]]


def same_sum_order(gloo_pg):
    """ferry's reduce_scatter_tensor and gloo's add each element's addends
    in the same order. A float sum of three depends on which two are added
    first (2**25 + -2**25 + 1 is 1 or 0): every order of those addends over
    the ranks, in every rank's piece, sums alike on both. On 2 ranks
    there is no order to differ (a sum of two floats does not depend on
    it), and the check is trivially true. (Their all_reduce orders
    differ: the DTensor values below are integers.)"""
    rank, world = dist.get_rank(), dist.get_world_size()
    addends = [2.0 ** 25, -2.0 ** 25, 1.0] + [0.0] * (world - 3)
    orders = list(itertools.permutations(range(world)))
    mine = torch.tensor([addends[order[rank]] for _ in range(world) for order in orders])
    sums = []
    for group in (None, gloo_pg):
        out = torch.empty(len(orders))
        dist.reduce_scatter_tensor(out, mine.clone(), group=group)
        sums.append(out)
    assert torch.equal(sums[0], sums[1]), sums


def phase_fsdp(ferry_pg, gloo_pg, ferry_mesh, gloo_mesh, summary):
    """Trains FSDP four ways: over each backend's group, and over each
    backend's mesh. Returns {name: (model, optimizer)}."""
    runs = {"ferry": fsdp(group=ferry_pg), "gloo": fsdp(group=gloo_pg),
            "mesh-ferry": fsdp(mesh=ferry_mesh), "mesh-gloo": fsdp(mesh=gloo_mesh)}
    states = {name: get_model_state_dict(net, options=FULL) for name, (net, _, _) in runs.items()}
    losses = {name: run[2] for name, run in runs.items()}
    # A group or a mesh of the same backend: the same collectives, the same bits.
    for backend in ("ferry", "gloo"):
        assert losses[f"mesh-{backend}"] == losses[backend], (backend, losses)
        assert_same(states[f"mesh-{backend}"], states[backend], f"fsdp: mesh vs group, {backend}")
    # Both backends reduce-scatter the gradients (FSDP divides them by 2
    # before and by world/2 after a SUM), and each adds an element's
    # addends in the same order (same_sum_order): the runs agree bit for bit.
    same_sum_order(gloo_pg)
    assert losses["ferry"] == losses["gloo"], losses
    assert_same(states["ferry"], states["gloo"], "fsdp: ferry vs gloo")
    summary["fsdp"] = {name: {"losses": losses[name], "params": full_crcs(states[name])} for name in runs}
    return {name: (net, opt) for name, (net, opt, _) in runs.items()}


def integers(shape, seed, low=-4, high=5):
    """Small integers as f32: every sum and product below is exact, so
    their order (the ring's, gloo's, one process's) cannot change a bit."""
    return torch.randint(low, high, shape, generator=torch.Generator().manual_seed(seed)).float()


def dtensor_values(mesh, rank, world):
    """Every DTensor operation of the test over `mesh`: {name: local tensor}."""
    out = {}
    full = integers((2 * world, 3 * world), 1)
    rand = torch.randn(2 * world, 3 * world, generator=torch.Generator().manual_seed(2))
    for name, value in (("int", full), ("randn", rand)):
        rows = distribute_tensor(value, mesh, [Shard(0)])
        out[f"{name} shard(0)"] = rows.to_local()
        out[f"{name} shard(0)->replicate"] = rows.redistribute(mesh, [Replicate()]).to_local()  # all_gather
        cols = rows.redistribute(mesh, [Shard(1)])  # on CPU: all_gather and chunk (shard_0_to_1)
        out[f"{name} shard(0)->shard(1)"] = cols.to_local()
        out[f"{name} shard(0)->shard(1) all_to_all"] = shard_0_to_1(rows.to_local(), mesh)
        out[f"{name} shard(1).full_tensor"] = cols.full_tensor()
        out[f"{name} replicate->shard(1)"] = distribute_tensor(value, mesh, [Replicate()]).redistribute(
            mesh, [Shard(1)]).to_local()
    # Partial: each rank's own addend, summed by all_reduce or reduce_scatter.
    mine = integers((2 * world, 3), 10 + rank)
    partial = DTensor.from_local(mine, mesh, [Partial()])
    out["partial->replicate"] = partial.redistribute(mesh, [Replicate()]).to_local()
    out["partial->shard(0)"] = partial.redistribute(mesh, [Shard(0)]).to_local()
    # Matmuls: rows times a replicated matrix (no communication), and
    # columns times rows (a Partial result, summed on full_tensor).
    a, b = integers((2 * world, 3 * world), 3), integers((3 * world, 4), 4)
    da, db = distribute_tensor(a, mesh, [Shard(0)]), distribute_tensor(b, mesh, [Replicate()])
    out["matmul shard(0) x replicate"] = (da @ db).full_tensor()
    da, db = distribute_tensor(a, mesh, [Shard(1)]), distribute_tensor(b, mesh, [Shard(0)])
    product = da @ db
    assert product.placements[0].is_partial(), product.placements
    out["matmul shard(1) x shard(0)"] = product.full_tensor()
    return out


def shard_0_to_1(rows, mesh):
    """Shard(0)->Shard(1) by all_to_all_single. On a CPU mesh torch 2.6's
    DTensor redistributes it by an all_gather and a chunk ("Gloo does not
    support alltoall"); on any other mesh by _dtensor::shard_dim_alltoall,
    whose all_to_all (the list form) gloo lacks. This is that op's
    exchange in the functional collective gloo has too: this rank's rows
    cut into one block of columns per rank, block r to rank r; the blocks
    received, in rank order, are this rank's columns."""
    blocks = torch.cat(rows.chunk(mesh.size(), 1), 0).contiguous()
    return plain(funcol.all_to_all_single(blocks, None, None, mesh))


def dtensor_reference(rank, world):
    """What dtensor_values must give, from one process's own arithmetic."""
    out = {}
    full = integers((2 * world, 3 * world), 1)
    rand = torch.randn(2 * world, 3 * world, generator=torch.Generator().manual_seed(2))
    for name, value in (("int", full), ("randn", rand)):
        out[f"{name} shard(0)"] = value.chunk(world, 0)[rank]
        out[f"{name} shard(0)->replicate"] = value
        out[f"{name} shard(0)->shard(1)"] = value.chunk(world, 1)[rank]
        out[f"{name} shard(0)->shard(1) all_to_all"] = value.chunk(world, 1)[rank]
        out[f"{name} shard(1).full_tensor"] = value
        out[f"{name} replicate->shard(1)"] = value.chunk(world, 1)[rank]
    total = sum(integers((2 * world, 3), 10 + r) for r in range(world))
    out["partial->replicate"] = total
    out["partial->shard(0)"] = total.chunk(world, 0)[rank]
    a, b = integers((2 * world, 3 * world), 3), integers((3 * world, 4), 4)
    out["matmul shard(0) x replicate"] = a @ b
    out["matmul shard(1) x shard(0)"] = a @ b
    return out


def tensor_parallel(world, mesh=None):
    """A Colwise-then-Rowwise MLP over `mesh` (None: in one process),
    integer weights and inputs: (output, {parameter: full gradient}) after
    one forward and backward. DTensor adds the Rowwise layer's replicated
    bias to its Partial sum as bias / world on each rank: that bias is a
    multiple of the world size, so that every sum stays exact."""
    net = nn.Sequential(nn.Linear(6, 4 * world), nn.ReLU(), nn.Linear(4 * world, 5))
    with torch.no_grad():
        for i, p in enumerate(net.parameters()):
            p.copy_(integers(p.shape, 20 + i, -2, 3))
        net[2].bias.mul_(world)
    if mesh is not None:
        net = parallelize_module(net, mesh, {"0": ColwiseParallel(), "2": RowwiseParallel()})
    y = net(integers((3, 6), 30))
    (y * integers(y.shape, 31)).sum().backward()
    grads = {name: p.grad.full_tensor() if isinstance(p.grad, DTensor) else p.grad
             for name, p in net.named_parameters()}
    return y, grads


def phase_dtensor(ferry_mesh, gloo_mesh, summary):
    rank, world = dist.get_rank(), dist.get_world_size()
    ferry, gloo = dtensor_values(ferry_mesh, rank, world), dtensor_values(gloo_mesh, rank, world)
    reference = dtensor_reference(rank, world)
    assert_same(ferry, gloo, "dtensor: ferry vs gloo")
    assert_same(ferry, reference, "dtensor: ferry vs one process")
    # DTensor's own all_to_all op (the Shard(0)->Shard(1) of a mesh that is
    # not CPU), on ferry's group.
    rows = distribute_tensor(integers((2 * world, 3 * world), 1), ferry_mesh, [Shard(0)]).to_local()
    cols = torch.ops._dtensor.shard_dim_alltoall(rows, 0, 1, ferry_mesh.get_group().group_name)
    assert torch.equal(cols, reference["int shard(0)->shard(1)"]), cols
    summary["dtensor"] = {"ferry": {k: crc(v) for k, v in ferry.items()},
                          "gloo": {k: crc(v) for k, v in gloo.items()}}
    # crc32c reads a tensor's own bytes; a DTensor holds none (its data
    # pointer is null): refused, not read.
    try:
        fd._distributed.crc32c(distribute_tensor(torch.ones(world, 2), ferry_mesh, [Shard(0)]))
        raise AssertionError("crc32c read a DTensor")
    except fd.Error as e:
        assert e.name == "unsupported" and "subclass" in e.context, e

    (f_out, f_grads), (g_out, g_grads) = tensor_parallel(world, ferry_mesh), tensor_parallel(world, gloo_mesh)
    r_out, r_grads = tensor_parallel(world)
    assert_same([f_out], [g_out], "tp output: ferry vs gloo")
    assert_same(f_grads, g_grads, "tp gradients: ferry vs gloo")
    assert_same([f_out], [r_out], "tp output: ferry vs one process")
    assert_same(f_grads, r_grads, "tp gradients: ferry vs one process")
    summary["tp"] = {"ferry": [crc(f_out)] + [crc(g) for g in f_grads.values()],
                     "gloo": [crc(g_out)] + [crc(g) for g in g_grads.values()]}


def snapshot(net, opt):
    """Model and optimizer state, full tensors (cloned)."""
    model_state, optim_state = get_state_dict(net, opt, options=FULL)
    return {"model": {k: v.clone() for k, v in model_state.items()},
            "optim": {k: (v.clone() if isinstance(v, torch.Tensor) else v) for k, v in flat(optim_state)}}


def save(net, opt, path, group):
    model_state, optim_state = get_state_dict(net, opt)
    dcp.save({"model": model_state, "optim": optim_state}, storage_writer=dcp.FileSystemWriter(path),
             process_group=group)


def load(net, opt, path, group):
    model_state, optim_state = get_state_dict(net, opt)
    state = {"model": model_state, "optim": optim_state}
    dcp.load(state, storage_reader=dcp.FileSystemReader(path), process_group=group)
    set_state_dict(net, opt, model_state_dict=state["model"], optim_state_dict=state["optim"])


# (checkpoint, the model it goes into): each backend's checkpoint loaded
# by the other backend's job and by its own, for FSDP's ShardedTensor
# shards (over a group) and its DTensor shards (over a mesh), and each
# kind of shards into the other kind over the other backend.
LOADS = [("gloo", "ferry"), ("ferry", "gloo"), ("ferry", "ferry"), ("gloo", "gloo"),
         ("mesh-gloo", "mesh-ferry"), ("mesh-ferry", "mesh-gloo"), ("mesh-ferry", "mesh-ferry"),
         ("mesh-gloo", "mesh-gloo"), ("ferry", "mesh-gloo"), ("mesh-ferry", "gloo")]


def phase_checkpoint(runs, groups, folder, summary):
    """Saves each trained FSDP model with its optimizer through DCP over
    its own backend, trains one step more (every value moves), loads each
    checkpoint of LOADS over the loading model's backend and compares its
    full state bit for bit with the state saved."""
    extra = batches(dist.get_rank())[STEPS]
    saved = {}
    for name, (net, opt) in runs.items():
        saved[name] = snapshot(net, opt)
        save(net, opt, os.path.join(folder, name), groups[name])
        step(net, opt, extra)
        assert not torch.equal(snapshot(net, opt)["model"]["0.weight"], saved[name]["model"]["0.weight"]), name
    for source, into in LOADS:
        load(*runs[into], os.path.join(folder, source), groups[into])
        assert_same(snapshot(*runs[into]), saved[source], f"{source}'s checkpoint loaded into {into}")
    summary["checkpoint"] = {"loaded": [f"{source} -> {into}" for source, into in LOADS],
                             "saved": {name: full_crcs(state["model"]) for name, state in saved.items()}}


def meshes_2d():
    """A 2 x 2 mesh ("dp", "tp") of 4 ranks over each backend: ferry's from
    init_device_mesh (its groups are new_group()s of the default backend,
    ferry's), gloo's from gloo groups of the same ranks."""
    ferry_mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    assert {dist.get_backend(ferry_mesh.get_group(d)) for d in ("dp", "tp")} == {"ferry"}
    layout = torch.arange(4).view(2, 2)
    mine = {}
    for dim in range(2):
        # Every rank makes every group, in one order (new_group's rule).
        for ranks in layout.swapdims(-1, dim).reshape(-1, 2).tolist():
            group = dist.new_group(ranks, backend="gloo")
            if dist.get_rank() in ranks:
                mine[dim] = group
    gloo_mesh = DeviceMesh.from_group([mine[0], mine[1]], "cpu", mesh=layout, mesh_dim_names=("dp", "tp"))
    return ferry_mesh, gloo_mesh


def dtensor_2d(mesh):
    """DTensor over both dimensions of a 2 x 2 `mesh`, and the
    tensor-parallel MLP on its "tp" dimension: {name: local tensor}."""
    dp, tp = mesh.get_coordinate()
    full = integers((8, 12), 40)
    both = distribute_tensor(full, mesh, [Shard(0), Shard(1)])
    out = {"shard(0),shard(1)": both.to_local(),
           "->replicate,shard(1)": both.redistribute(mesh, [Replicate(), Shard(1)]).to_local(),
           "->shard(0),replicate": both.redistribute(mesh, [Shard(0), Replicate()]).to_local(),
           "->shard(1),shard(0)": both.redistribute(mesh, [Shard(1), Shard(0)]).to_local(),
           "full_tensor": both.full_tensor(),
           "shard(0),shard(0)": distribute_tensor(full, mesh, [Shard(0), Shard(0)]).to_local()}
    # Partial over both dimensions (an all_reduce on each), and over "tp"
    # only (replicated over "dp": an addend that depends on tp alone).
    out["partial,partial->replicate"] = DTensor.from_local(integers((4, 6), 50 + dist.get_rank()), mesh,
                                                           [Partial(), Partial()]).full_tensor()
    out["replicate,partial->shard(1)"] = DTensor.from_local(integers((4, 6), 60 + tp), mesh,
                                                            [Replicate(), Partial()]).redistribute(
        mesh, [Replicate(), Shard(1)]).to_local()
    a, b = integers((8, 12), 41), integers((12, 4), 42)
    product = distribute_tensor(a, mesh, [Shard(0), Shard(1)]) @ distribute_tensor(b, mesh, [Replicate(), Shard(0)])
    assert product.placements[1].is_partial(), product.placements
    out["matmul"] = product.full_tensor()
    y, grads = tensor_parallel(2, mesh["tp"])
    out["tp output"] = plain(y)
    out.update({f"tp {name}": g for name, g in grads.items()})
    return out


def dtensor_2d_reference(dp, tp):
    """What dtensor_2d must give at mesh coordinate (dp, tp)."""
    full = integers((8, 12), 40)
    out = {"shard(0),shard(1)": full.chunk(2, 0)[dp].chunk(2, 1)[tp],
           "->replicate,shard(1)": full.chunk(2, 1)[tp],
           "->shard(0),replicate": full.chunk(2, 0)[dp],
           "->shard(1),shard(0)": full.chunk(2, 1)[dp].chunk(2, 0)[tp],
           "full_tensor": full,
           "shard(0),shard(0)": full.chunk(2, 0)[dp].chunk(2, 0)[tp]}
    out["partial,partial->replicate"] = sum(integers((4, 6), 50 + r) for r in range(4))
    out["replicate,partial->shard(1)"] = (integers((4, 6), 60) + integers((4, 6), 61)).chunk(2, 1)[tp]
    out["matmul"] = integers((8, 12), 41) @ integers((12, 4), 42)
    y, grads = tensor_parallel(2)
    out["tp output"] = y
    out.update({f"tp {name}": g for name, g in grads.items()})
    return out


def phase_2d(gloo_pg, folder, summary):
    """DTensor on a 2 x 2 mesh over each backend, compared bit for bit with
    each other and with one process; then DCP of 2-D sharded DTensors,
    each backend's checkpoint loaded over the other one, also into other
    placements (resharded)."""
    ferry_mesh, gloo_mesh = meshes_2d()
    dp, tp = ferry_mesh.get_coordinate()
    assert gloo_mesh.get_coordinate() == [dp, tp]
    ferry, gloo = dtensor_2d(ferry_mesh), dtensor_2d(gloo_mesh)
    assert_same(ferry, gloo, "2-D dtensor: ferry vs gloo")
    assert_same(ferry, dtensor_2d_reference(dp, tp), "2-D dtensor: ferry vs one process")
    summary["dtensor_2d"] = {"ferry": {k: crc(v) for k, v in ferry.items()},
                             "gloo": {k: crc(v) for k, v in gloo.items()}}

    w, v = integers((8, 12), 70), torch.randn(6, 5, generator=torch.Generator().manual_seed(71))

    def state(mesh, w_places, v_places, fill=None):
        return {"w": distribute_tensor(w if fill is None else torch.full_like(w, fill), mesh, w_places),
                "v": distribute_tensor(v if fill is None else torch.full_like(v, fill), mesh, v_places),
                "step": 7 if fill is None else 0}

    meshes, groups = {"ferry": ferry_mesh, "gloo": gloo_mesh}, {"ferry": None, "gloo": gloo_pg}
    for name, mesh in meshes.items():
        dcp.save(state(mesh, [Shard(0), Shard(1)], [Replicate(), Shard(0)]),
                 storage_writer=dcp.FileSystemWriter(os.path.join(folder, f"2d-{name}")), process_group=groups[name])
    loaded = []
    # (checkpoint, the backend that loads it, its placements of w and v)
    for source, into, w_places, v_places in (("ferry", "gloo", [Shard(0), Shard(1)], [Replicate(), Shard(0)]),
                                             ("gloo", "ferry", [Shard(0), Shard(1)], [Replicate(), Shard(0)]),
                                             ("ferry", "gloo", [Shard(1), Replicate()], [Shard(1), Shard(0)]),
                                             ("gloo", "ferry", [Replicate(), Shard(0)], [Shard(0), Shard(0)])):
        target = state(meshes[into], w_places, v_places, fill=-1.0)
        dcp.load(target, storage_reader=dcp.FileSystemReader(os.path.join(folder, f"2d-{source}")),
                 process_group=groups[into])
        want = state(meshes[into], w_places, v_places)
        assert_same(target, want, f"2-D checkpoint of {source} loaded over {into} as {w_places}, {v_places}")
        loaded.append(f"{source} -> {into} {w_places} {v_places}")
    summary["checkpoint_2d"] = loaded


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dir", required=True, help="a folder every rank shares")
    ap.add_argument("--mesh", choices=["1d", "2d"], default="1d",
                    help="1d: FSDP, DTensor, tensor parallelism and DCP on the world; 2d: DTensor and DCP on a "
                         "2 x 2 mesh (4 ranks)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("ferry")
    rank, world = dist.get_rank(), dist.get_world_size()
    ferry_pg = dist.group.WORLD
    gloo_pg = dist.new_group(backend="gloo")
    assert dist.get_backend(ferry_pg) == "ferry" and dist.get_backend(gloo_pg) == "gloo"
    summary = {"world": world, "seconds": {}}
    t = time.perf_counter()
    if args.mesh == "2d":
        phase_2d(gloo_pg, args.dir, summary)
        summary["seconds"]["2d"] = time.perf_counter() - t
    else:
        # The default group is ferry's: a 1-D mesh of the world is that group.
        ferry_mesh = init_device_mesh("cpu", (world,), mesh_dim_names=("x",))
        assert ferry_mesh.get_group().group_name == ferry_pg.group_name
        gloo_mesh = DeviceMesh.from_group(gloo_pg, "cpu", mesh_dim_names=("x",))
        runs = phase_fsdp(ferry_pg, gloo_pg, ferry_mesh, gloo_mesh, summary)
        summary["seconds"]["fsdp"] = time.perf_counter() - t
        t = time.perf_counter()
        phase_dtensor(ferry_mesh, gloo_mesh, summary)
        summary["seconds"]["dtensor"] = time.perf_counter() - t
        t = time.perf_counter()
        groups = {"ferry": ferry_pg, "gloo": gloo_pg, "mesh-ferry": ferry_pg, "mesh-gloo": gloo_pg}
        phase_checkpoint(runs, groups, args.dir, summary)
        summary["seconds"]["checkpoint"] = time.perf_counter() - t

    with open(os.path.join(args.dir, f"rank{rank}.json"), "w") as out:
        json.dump(summary, out)
    dist.barrier()  # rank 0 serves the store: nobody leaves before everyone is done with it
    dist.destroy_process_group()
    print("ok", flush=True)


if __name__ == "__main__":
    main()
