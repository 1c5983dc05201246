#!/usr/bin/python3
"""The Python side of bench/interop_bench.cpp: writes the 1 GiB state dict
with torch.save, or times loads of it.

  python_load.py save PT          torch.save of checkpoint_bench's state dict
                                  (256 x 4 MiB f32, a tied pair, 200 small:
                                  457 tensors)
  python_load.py time PT ST FERRY each load below, from the page cache:
                                  one line "name first median best": seconds
                                  of the process's first load of it, and the
                                  median and the least of 5 more

ferry is imported from the build tree (PYTHONPATH, set by the benchmark).
"""
import gc
import sys
import time

import torch


def save(path):
    torch.manual_seed(0)
    sd = {}
    for i in range(256):
        sd[f"layers.{i}.weight"] = torch.randn(1024, 1024)
    sd["lm_head.weight"] = sd["layers.0.weight"]
    for i in range(200):
        sd[f"small.{i}"] = torch.randn(16 + i)
    torch.save(sd, path)


def seconds(load):
    """The first load (this process has not yet allocated a GiB: torch.load
    pays for growing its heap, 10-20x slower), then the median and the least
    of 5 more. torch.load's later loads are bimodal: ~100 ms where glibc
    reuses the freed heap, ~600 ms where every tensor is a fresh mmap
    (page faults and zeroing), varying from process to process; the
    benchmark sets glibc's MALLOC_ variables to keep the heap."""
    times = []
    for _ in range(6):
        gc.collect()
        start = time.perf_counter()
        loaded = load()
        times.append(time.perf_counter() - start)
        del loaded
    rest = sorted(times[1:])
    return times[0], rest[2], rest[0]


def time_loads(pt, st, fe):
    import ferry

    loads = {
        "torch_load": lambda: torch.load(pt),
        "torch_load_weights_only": lambda: torch.load(pt, weights_only=True),
        "ferry_load_pt": lambda: ferry.load(pt),
        "ferry_load_pt_torch": lambda: ferry.load(pt, framework="torch"),
        "ferry_load_safetensors": lambda: ferry.load(st),
        "ferry_load_ferry": lambda: ferry.load(fe),
        "ferry_load_ferry_torch": lambda: ferry.load(fe, framework="torch"),
    }
    for name, load in loads.items():
        print(name, *seconds(load), flush=True)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "save":
        save(sys.argv[2])
    elif len(sys.argv) == 5 and sys.argv[1] == "time":
        time_loads(*sys.argv[2:])
    else:
        sys.exit(__doc__)
