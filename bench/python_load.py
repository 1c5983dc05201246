#!/usr/bin/python3
"""The Python side of bench/interop_bench.cpp: writes the 1 GiB state dict
with torch.save, or times loads of it.

  python_load.py save PT          torch.save of checkpoint_bench's state dict
                                  (256 x 4 MiB f32, a tied pair, 200 small:
                                  457 tensors)
  python_load.py time PT ST FERRY each load below, from the page cache:
                                  one line "name seconds", the median of 3
                                  after one untimed load

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


def median_seconds(load):
    """The median of 3 loads, after one untimed: a process's first loads
    of a GiB pay for growing its heap (torch.load 2-3x slower)."""
    load()
    times = []
    for _ in range(3):
        gc.collect()
        start = time.perf_counter()
        loaded = load()
        times.append(time.perf_counter() - start)
        del loaded
    return sorted(times)[1]


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
        print(name, median_seconds(load), flush=True)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "save":
        save(sys.argv[2])
    elif len(sys.argv) == 5 and sys.argv[1] == "time":
        time_loads(*sys.argv[2:])
    else:
        sys.exit(__doc__)
