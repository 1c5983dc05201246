#!/usr/bin/python3
"""The NumPy side of bench/formats_bench.cpp: times numpy.load of a file
from the page cache and prints the median seconds of 5 loads after a first
one (which pays for growing the heap).

  numpy_load.py npy FILE          numpy.load(FILE)
  numpy_load.py npy-native FILE   numpy.load(FILE), then the values in this
                                  machine's byte order (astype), as a
                                  program must have them to compute
  numpy_load.py npz FILE          numpy.load(FILE)["x"]
"""
import gc
import sys
import time

import numpy as np


def load(how, path):
    if how == "npy":
        return np.load(path)
    if how == "npy-native":
        a = np.load(path)
        return a.astype(a.dtype.newbyteorder("="), copy=False)
    if how == "npz":
        with np.load(path) as z:
            return z["x"]
    raise SystemExit(f"numpy_load.py: unknown mode {how!r}")


def main():
    how, path = sys.argv[1], sys.argv[2]
    times = []
    for _ in range(6):
        gc.collect()
        start = time.perf_counter()
        a = load(how, path)
        times.append(time.perf_counter() - start)
        del a
    print(sorted(times[1:])[2])


if __name__ == "__main__":
    main()
