"""ferry.load of a .pt file against torch 2.6's fastest load,
torch.load(path, mmap=True, weights_only=True), and against the machine's
own ceiling, in one run (make bench; run by the Debian 13 root's Python:
scripts/debian13-python amd64, with PYTHONPATH=build/torch26/python).

The file is checkpoint_bench's 1 GiB state dict as torch 2.6's torch.save
writes it (bench/python_load.py's save: 256 x 4 MiB f32, a tied pair, 200
small; 457 tensors). A load returns lazily mapped tensors, so each timed
load is followed by the same cheap pass over every byte it returned: the
max over a uint64 view of each tensor (uint8 where its size is not a
multiple of 8), through NumPy, for torch's tensors and ferry's alike. The
ceiling is that pass over the whole file mapped once: no load that reads
every byte can beat it.

  torch_mmap        torch.load(mmap=True, weights_only=True) + the pass
  torch_load        torch.load(weights_only=True) + the pass (reported)
  ferry_load        ferry.load(framework="torch") + the pass
  ferry_load_crc    ferry.open(); .verify() (every zip CRC-32, which torch
                    never checks); .load("torch") + the pass
  mapped_once       the whole file mapped and passed over once (the ceiling)

Each from the page cache: the first in the process, then the median and
the best of 5 more, interleaved so that drift is shared. Prints a ratio
table and writes --out JSON. Exits 1 if a goal is missed with --strict.
"""
import argparse
import gc
import json
import mmap
import os
import statistics
import sys
import tempfile
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from python_load import save  # noqa: E402 (the same state dict as the 1.13 benchmark)

import ferry  # noqa: E402

GOALS = [  # (name, numerator, denominator, at least): ratios of times, higher is better for ferry
    ("torch mmap load / ferry.load", "torch_mmap", "ferry_load", 1.15),
    ("whole file mapped once / ferry.load (share of the ceiling)", "mapped_once", "ferry_load", 0.9),
    ("torch mmap load / ferry.load with every CRC-32", "torch_mmap", "ferry_load_crc", 1.0),
]


def passed_over(tensors):
    """The pass: the max over a uint64 (or uint8) view of each tensor."""
    top = 0
    for t in tensors:
        a = t.detach().numpy().reshape(-1).view(np.uint8)
        if a.size % 8 == 0:
            a = a.view(np.uint64)
        if a.size:
            top = max(top, int(a.max()))
    return top


def mapped_once(path):
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ) as m:
        a = np.frombuffer(m, dtype=np.uint8)
        whole = a[: a.size // 8 * 8].view(np.uint64)
        top = int(whole.max())
        del a, whole
    return top


def ferry_crc(path):
    c = ferry.open(path)
    c.verify()
    return passed_over(c.load("torch").values())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", help="JSON results")
    ap.add_argument("--dir", help="where the 1 GiB file is written (default: a temporary folder, removed)")
    ap.add_argument("--repetitions", type=int, default=5)
    ap.add_argument("--strict", action="store_true", help="exit 1 when a goal is missed")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir) as d:
        pt = os.path.join(d, "model.pt")
        save(pt)
        with open(pt, "rb") as f:  # into the page cache
            while f.read(64 << 20):
                pass
        loads = {
            "torch_mmap": lambda: passed_over(torch.load(pt, mmap=True, weights_only=True).values()),
            "torch_load": lambda: passed_over(torch.load(pt, weights_only=True).values()),
            "ferry_load": lambda: passed_over(ferry.load(pt, framework="torch").values()),
            "ferry_load_crc": lambda: ferry_crc(pt),
            "mapped_once": lambda: mapped_once(pt),
        }
        times = {name: [] for name in loads}
        maxima = {}
        for _ in range(1 + args.repetitions):
            for name, load in loads.items():
                gc.collect()
                start = time.perf_counter()
                maxima[name] = load()
                times[name].append(time.perf_counter() - start)
                gc.collect()
        size = os.path.getsize(pt)
    # Every load read the same bytes: the same maximum (the whole file's
    # includes the zip's own records, so it may only be larger).
    tensor_maxima = {maxima[n] for n in loads if n != "mapped_once"}
    assert len(tensor_maxima) == 1 and maxima["mapped_once"] >= tensor_maxima.pop(), maxima
    result = {name: {"first_s": t[0], "median_s": statistics.median(t[1:]), "best_s": min(t[1:])}
              for name, t in times.items()}
    print(f"\n.pt load on torch {torch.__version__}: {size / 2**30:.2f} GiB, 457 tensors, page cache, "
          f"each load + a max over every byte it returned\n")
    print("| load | median | best | first in its process |\n|---|---|---|---|")
    for name, r in result.items():
        print(f"| {name} | {r['median_s'] * 1e3:.1f} ms | {r['best_s'] * 1e3:.1f} ms | {r['first_s'] * 1e3:.1f} ms |")
    print("\n| goal (medians) | measured | target |\n|---|---|---|")
    missed = []
    goals = []
    for goal, num, den, least in GOALS:
        v = result[num]["median_s"] / result[den]["median_s"]
        met = v >= least
        goals.append({"goal": goal, "ratio": v, "at_least": least, "met": met})
        print(f"| {goal} | {v:.2f}x {'(met)' if met else '(MISSED)'} | >= {least}x |")
        if not met:
            missed.append(goal)
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"torch": torch.__version__, "bytes": size, "loads": result, "goals": goals}, f, indent=1)
    if missed and args.strict:
        sys.exit(1)


if __name__ == "__main__":
    main()
