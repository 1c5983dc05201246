#!/usr/bin/python3
"""The reference training job as PyTorch DDP, the peer of ferry-train.

Fashion-MNIST, MLP Linear(784, 32) -> BatchNorm1d(32) -> ReLU -> Linear(32, 10),
Adam (lr 1e-3), cross-entropy, batch 32 per rank, DistributedSampler
(shuffle=True, seed=0, set_epoch every epoch), gloo, DistributedDataParallel.
--backend ferry runs the same script on ferry's torch.distributed backend
(import ferry.distributed), and --hook bf16/fp16 adds its compression hook.
Inputs are the uint8 pixels / 255 as float32, flattened to 784; nothing else.

Ranks are started with the variables torchrun would set (MASTER_ADDR,
MASTER_PORT, RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE): Debian's
torchrun (python3-torch 1.13) fails under Python 3.11 with an AttributeError
in torch/distributed/elastic/multiprocessing/api.py (to_map). bench/train_compare
starts them. Run it with /usr/bin/python3 (Debian's torch).

Between nodes, gloo must be told the interface (GLOO_SOCKET_IFNAME=eth0):
by default it binds to the address the host name resolves to, which in a
network namespace is a loopback address the other nodes cannot reach.

Accuracies in the summary are fractions (0..1). Train accuracy and loss are
over the samples seen in the last epoch (DistributedSampler pads by wrapping,
so a few samples may be seen twice), summed over ranks. Test accuracy is over
the whole test set, each image evaluated exactly once: rank r takes images
r, r+W, r+2W, ... (no padding) and the counts are summed over ranks. Before
evaluating, every rank takes rank 0's BatchNorm buffers (what DDP itself
does at the start of each forward), so the model evaluated is the model
rank 0 saves.
"""
import argparse
import datetime
import gzip
import json
import os
import struct
import sys
import tempfile
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def read_idx(path, want_magic, want_dims):
    """A gzip'd IDX file: big-endian magic (0x0000 08 ndim), big-endian u32 dims, uint8 data."""
    with gzip.open(path, "rb") as f:
        data = f.read()
    if len(data) < 4 + 4 * want_dims:
        raise ValueError(f"{path}: truncated header")
    magic = struct.unpack(">I", data[:4])[0]
    if magic != want_magic:
        raise ValueError(f"{path}: magic {magic:#010x}, want {want_magic:#010x}")
    dims = struct.unpack(f">{want_dims}I", data[4:4 + 4 * want_dims])
    offset = 4 + 4 * want_dims
    count = int(np.prod(dims))
    if len(data) - offset != count:
        raise ValueError(f"{path}: {len(data) - offset} data bytes, header says {count}")
    return np.frombuffer(data, dtype=np.uint8, offset=offset).reshape(dims)


def load_split(directory, split):
    images = read_idx(os.path.join(directory, f"{split}-images-idx3-ubyte.gz"), 0x00000803, 3)
    labels = read_idx(os.path.join(directory, f"{split}-labels-idx1-ubyte.gz"), 0x00000801, 1)
    if images.shape[0] != labels.shape[0] or images.shape[1:] != (28, 28):
        raise ValueError(f"{directory}: {split} images {images.shape}, labels {labels.shape}")
    if labels.max() > 9:
        raise ValueError(f"{directory}: {split} label {labels.max()} out of 0..9")
    x = torch.from_numpy(images.reshape(-1, 784).astype(np.float32) / np.float32(255.0))
    y = torch.from_numpy(labels.astype(np.int64))
    return x, y


def make_model():
    return nn.Sequential(nn.Linear(784, 32), nn.BatchNorm1d(32), nn.ReLU(), nn.Linear(32, 10))


def env_int(name):
    value = os.environ.get(name)
    if value is None:
        sys.exit(f"ddp_reference: {name} is not set (start ranks with MASTER_ADDR, MASTER_PORT, "
                 "RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE)")
    return int(value)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--batch", type=int, default=32, help="batch size per rank")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--seed", type=int, default=0, help="model init and sampler seed")
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--threads", type=int, default=1, help="torch.set_num_threads")
    ap.add_argument("--limit", type=int, default=0, help="train on the first N samples only (0: all)")
    ap.add_argument("--summary", help="rank 0 writes a JSON summary here")
    ap.add_argument("--checkpoint", help="rank 0 saves the state_dict here (default: a temp file, removed)")
    ap.add_argument("--timeout", type=float, default=300, help="the process group's timeout, seconds")
    ap.add_argument("--backend", default="gloo", choices=["gloo", "ferry"],
                    help="torch.distributed backend; ferry needs ferry.distributed on PYTHONPATH")
    ap.add_argument("--hook", default="none", choices=["none", "bf16", "fp16"],
                    help="DDP communication hook: ferry.distributed.bf16_hook or fp16_hook (backend ferry)")
    args = ap.parse_args()
    if args.hook != "none" and args.backend != "ferry":
        ap.error("--hook needs --backend ferry")
    if args.backend == "ferry":
        import ferry.distributed  # registers the backend

    for name in ("MASTER_ADDR", "MASTER_PORT"):
        if name not in os.environ:
            env_int(name)
    rank, world = env_int("RANK"), env_int("WORLD_SIZE")
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", world))
    nodes = max(1, world // max(1, local_world))

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)

    # Not timed: reading and decoding the files (~0.3 s, the same on every layout).
    train_x, train_y = load_split(args.data, "train")
    test_x, test_y = load_split(args.data, "t10k")
    if args.limit > 0:
        train_x, train_y = train_x[:args.limit], train_y[:args.limit]

    # wall_s covers: process group rendezvous, DDP construction (rank 0's
    # parameters and buffers broadcast), every epoch's training and test
    # evaluation, up to the end of the final evaluation on rank 0. Not the
    # interpreter start, imports, data loading, or the final barrier and
    # checkpoint save (total_s adds those two).
    t0 = time.perf_counter()
    dist.init_process_group(args.backend, rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=args.timeout))
    model = DistributedDataParallel(make_model())
    if args.hook != "none":
        model.register_comm_hook(None, getattr(ferry.distributed, f"{args.hook}_hook"))
    init_s = time.perf_counter() - t0  # includes waiting for the slowest rank to start
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    loss_fn = nn.CrossEntropyLoss()
    train_set = TensorDataset(train_x, train_y)
    sampler = DistributedSampler(train_set, num_replicas=world, rank=rank, shuffle=True, seed=args.seed)
    loader = DataLoader(train_set, batch_size=args.batch, sampler=sampler, num_workers=0)
    shard_x, shard_y = test_x[rank::world], test_y[rank::world]

    history = []
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        model.train()
        stats = torch.zeros(3, dtype=torch.float64)  # loss sum, correct, count
        for x, y in loader:
            optimizer.zero_grad()
            out = model(x)
            loss = loss_fn(out, y)
            loss.backward()
            optimizer.step()
            stats[0] += loss.item() * y.numel()
            stats[1] += (out.argmax(1) == y).sum().item()
            stats[2] += y.numel()
        dist.all_reduce(stats)

        # Evaluate rank 0's model: its BatchNorm buffers to everyone, then
        # the plain module (no DDP collectives, shards may differ in size).
        for buf in model.module.buffers():
            dist.broadcast(buf, 0)
        model.eval()
        correct = torch.zeros(2, dtype=torch.float64)  # correct, count
        with torch.no_grad():
            for i in range(0, shard_x.shape[0], 1000):
                out = model.module(shard_x[i:i + 1000])
                correct[0] += (out.argmax(1) == shard_y[i:i + 1000]).sum().item()
                correct[1] += out.shape[0]
        dist.all_reduce(correct)
        if int(correct[1]) != test_x.shape[0]:
            raise RuntimeError(f"evaluated {int(correct[1])} test images, not {test_x.shape[0]}")
        entry = {"epoch": epoch + 1, "train_loss": stats[0].item() / stats[2].item(),
                 "train_acc": stats[1].item() / stats[2].item(),
                 "test_acc": correct[0].item() / correct[1].item(),
                 "elapsed_s": time.perf_counter() - t0}
        history.append(entry)
        if rank == 0:
            print(f"ddp: epoch {epoch + 1}/{args.epochs} loss {entry['train_loss']:.4f} "
                  f"train {100 * entry['train_acc']:.2f}% test {100 * entry['test_acc']:.2f}% "
                  f"{entry['elapsed_s']:.1f} s", file=sys.stderr, flush=True)
    wall = time.perf_counter() - t0

    dist.barrier()
    if rank == 0:
        path = args.checkpoint
        if path is None:
            fd, path = tempfile.mkstemp(prefix="ddp_reference-", suffix=".pt")
            os.close(fd)
        torch.save(model.module.state_dict(), path)
        if args.checkpoint is None:
            os.unlink(path)
    total = time.perf_counter() - t0

    if rank == 0 and args.summary:
        last = history[-1] if history else {}
        summary = {"trainer": "ddp", "backend": args.backend, "hook": args.hook, "world": world, "nodes": nodes, "wall_s": wall,
                   "train_loss": last.get("train_loss"), "train_acc": last.get("train_acc"),
                   "test_acc": last.get("test_acc"), "epochs": args.epochs,
                   "total_s": total, "init_s": init_s, "batch": args.batch, "lr": args.lr, "seed": args.seed,
                   "threads": args.threads, "train_samples": int(train_x.shape[0]),
                   "torch": torch.__version__, "history": history}
        tmp = args.summary + ".tmp"
        with open(tmp, "w") as f:
            json.dump(summary, f, indent=1)
            f.write("\n")
        os.replace(tmp, args.summary)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
