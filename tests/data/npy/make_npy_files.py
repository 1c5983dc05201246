#!/usr/bin/python3
"""NumPy's side of ferry's .npy/.npz tests (checkpoint/npy.h).

  make_npy_files.py golden DIR   the committed files in tests/data/npy
                                 (tests/checkpoint/npy_test.cpp)
  make_npy_files.py live DIR     files np.save/np.savez write while the
                                 tests run (tests/checkpoint/npy_live_test.cpp)
  make_npy_files.py check DIR    reads what ferry wrote into DIR (by
                                 npy_live_test.cpp) with NumPy; exit 1 on
                                 any difference

Needs Debian's python3-numpy (1.24.2). Values are deterministic (fixed seeds);
the zip records' dates are the clock's.

X.expected (X a .npy or .npz), one line per array:
  NAME DESCR FORTRAN SHAPE CRC32
NAME the .npz key (arr_0 for a .npy), DESCR numpy's dtype.str, FORTRAN
True/False as the header says, SHAPE the extents joined by ',' ('-' for a
0-d array), CRC32 zlib's CRC-32 (8 hex digits) of the elements in row-major
order as little-endian bytes (floats as their bit patterns).

headers.golden (golden only): one line per header numpy writes,
  DESCR FORTRAN SHAPE HEX
the whole header (magic to '\\n') as numpy.lib.format writes it for an
array of that description; a SHAPE of the form NxE is N extents of E, and
its HEX is then LENGTH:CRC32 of the header bytes (too long to spell out).
"""
import io
import os
import sys
import zipfile
import zlib

import numpy as np
import numpy.lib.format as npformat

KINDS = ["b1", "i1", "u1", "i2", "u2", "i4", "u4", "i8", "u8", "f2", "f4", "f8"]


def le_bytes(a):
    """The elements of `a`, row-major, as little-endian bytes; floats by
    their bits (a view as unsigned integers, so no NaN is touched)."""
    c = np.ascontiguousarray(a)
    size = c.dtype.itemsize
    order = c.dtype.str[0]
    if c.dtype.kind == "c":
        size //= 2
        c = c.view(order + "f%d" % size)
    u = c.view(("|" if size == 1 else order) + "u%d" % size)
    return u.astype("<u%d" % size).tobytes()


def crc(a):
    return "%08x" % (zlib.crc32(le_bytes(a)) & 0xFFFFFFFF)


def shape_text(shape):
    return ",".join(str(d) for d in shape) if shape else "-"


def line(name, a, fortran):
    return "%s %s %s %s %s\n" % (name, a.dtype.str, fortran, shape_text(a.shape), crc(a))


def values(kind, shape, rng):
    """Random elements of `kind` ('<f4' and so on), float specials
    included (NaN, both infinities, -0.0, a subnormal)."""
    n = int(np.prod(shape)) if shape else 1
    k, size = kind[0], int(kind[1:])
    if k == "b":
        a = rng.integers(0, 2, n).astype(bool)
    elif k in "iu":
        info = np.iinfo("%s%d" % (k, size))
        a = rng.integers(info.min, info.max, n, dtype="%s%d" % (k, size), endpoint=True)
    else:
        a = (rng.standard_normal(n) * 100).astype("f%d" % size)
        specials = np.array([np.nan, np.inf, -np.inf, -0.0], dtype="f%d" % size)
        a[: min(n, 4)] = specials[: min(n, 4)]
        if n > 4:
            a[4] = np.finfo("f%d" % size).smallest_subnormal
    return a.reshape(shape)


def in_order(a, order):
    if a.dtype.itemsize == 1:
        return a
    return a.astype(a.dtype.newbyteorder(order))


def write_npy(d, name, a, fortran=False):
    path = os.path.join(d, name)
    np.save(path, a, allow_pickle=False)
    with open(path + ".expected", "w") as out:
        out.write(line("arr_0", a, fortran))


def write_npz(d, name, arrays, compressed):
    path = os.path.join(d, name)
    (np.savez_compressed if compressed else np.savez)(path, **arrays)
    with open(path + ".expected", "w") as out:
        for key, a in arrays.items():
            out.write(line(key, a, a.ndim > 1 and a.flags.f_contiguous and not a.flags.c_contiguous))


def write_files(d):
    os.makedirs(d, exist_ok=True)
    rng = np.random.default_rng(27)
    for kind in KINDS:
        a = values(kind, (2, 3), rng)
        if a.dtype.itemsize == 1:
            write_npy(d, "%s.npy" % kind, a)
        else:
            write_npy(d, "%s_le.npy" % kind, in_order(a, "<"))
            write_npy(d, "%s_be.npy" % kind, in_order(a, ">"))
    f = np.asfortranarray(values("f4", (2, 3, 4), rng))
    write_npy(d, "f4_fortran_le.npy", f, True)
    write_npy(d, "f4_fortran_be.npy", np.asfortranarray(in_order(f, ">")), True)
    write_npy(d, "f8_scalar.npy", values("f8", (), rng))
    write_npy(d, "i4_empty.npy", np.zeros((0, 3), dtype="<i4"))
    write_npy(d, "u2_column.npy", in_order(values("u2", (7,), rng), ">"))
    mixed = {
        "weight": in_order(values("f4", (3, 4), rng), "<"),
        "steps": in_order(values("i2", (5,), rng), ">"),
        "mask": values("b1", (2, 2), rng),
        "scale": in_order(values("f8", (), rng), ">"),
        "columns": np.asfortranarray(in_order(values("f2", (3, 5), rng), ">")),
        "none": np.zeros((0,), dtype="<u8"),
    }
    write_npz(d, "stored.npz", mixed, False)
    write_npz(d, "deflated.npz", mixed, True)
    # 2 MiB that deflate to about 3 KiB: the output far outgrows the input.
    big = {"steps": np.repeat(np.arange(64, dtype="<f4"), 8192).reshape(512, 1024)}
    write_npz(d, "deflated_steps.npz", big, True)
    np.savez(os.path.join(d, "empty.npz"))
    open(os.path.join(d, "empty.npz.expected"), "w").close()
    # Complex arrays (ferry's C64 and C128), each part swapped on its own.
    z = (values("f4", (2, 2), rng) + 1j * values("f4", (2, 2), rng)).astype("<c8")
    write_npy(d, "c8_le.npy", z)
    write_npy(d, "c16_be.npy", z.astype(">c16"))


def header_bytes(descr, fortran, shape):
    buf = io.BytesIO()
    npformat._write_array_header(buf, {"descr": descr, "fortran_order": fortran, "shape": shape}, None)
    return buf.getvalue()


def write_headers(path):
    shapes = [(), (0,), (3,), (3, 4), (0, 3), (4, 0), (2, 3, 4), (1,) * 8, (7,) * 64,
              (18446744073709551615,), (10**19, 1), (1, 10**19), (123456789, 42, 7)]
    with open(path, "w") as out:
        for kind in KINDS:
            for order in ("|",) if kind[1] == "1" else ("<", ">"):
                descr = order + kind
                # Every shape for f4; the first extents' growth spaces for the rest.
                for shape in shapes if kind == "f4" else [(), (3,), (3, 4), (10**19, 1)]:
                    for fortran in (False, True) if len(shape) > 1 else (False,):
                        out.write("%s %s %s %s\n" % (descr, fortran, shape_text(shape),
                                                     header_bytes(descr, fortran, shape).hex()))
        # Over 65535 bytes: version 2.0.
        for n, e in ((2980, 18446744073709551615), (3000, 1)):
            b = header_bytes("<f4", False, (e,) * n)
            out.write("<f4 False %dx%d %d:%08x\n" % (n, e, len(b), zlib.crc32(b) & 0xFFFFFFFF))


# ---------------------------------------------------------------------------
# check: what ferry wrote, as NumPy reads it.

def check(d):
    bad = 0
    names = sorted(n for n in os.listdir(d) if n.endswith((".npy", ".npz")))
    if not names:
        print("check: no files in", d)
        return 1
    for name in names:
        path = os.path.join(d, name)
        want = {}
        with open(path + ".expected") as f:
            for row in f:
                key, descr, fortran, shape, c = row.split()
                want[key] = (descr, fortran, shape, c)
        got = {}
        if name.endswith(".npy"):
            with open(path, "rb") as f:
                version = npformat.read_magic(f)
                hdr = npformat._read_array_header(f, version)
            a = np.load(path, allow_pickle=False)
            got["arr_0"] = (a.dtype.str, str(hdr[1]), shape_text(a.shape), crc(a))
            # np.save of what NumPy read gives ferry's file, byte for byte.
            buf = io.BytesIO()
            np.save(buf, a, allow_pickle=False)
            with open(path, "rb") as f:
                if buf.getvalue() != f.read():
                    print("%s: np.save of the array is not ferry's file, byte for byte" % name)
                    bad += 1
        else:
            with zipfile.ZipFile(path) as z:
                broken = z.testzip()
                if broken is not None:
                    print("%s: zipfile: bad CRC in %s" % (name, broken))
                    bad += 1
            with np.load(path, allow_pickle=False) as npz:
                for key in npz.files:
                    a = npz[key]
                    f = a.ndim > 1 and a.flags.f_contiguous and not a.flags.c_contiguous
                    got[key] = (a.dtype.str, str(f), shape_text(a.shape), crc(a))
        if got != want:
            print("%s: NumPy read %r, ferry wrote %r" % (name, got, want))
            bad += 1
    print("check: %d files, %d differ" % (len(names), bad))
    return 1 if bad else 0


def main():
    if len(sys.argv) != 3 or sys.argv[1] not in ("golden", "live", "check"):
        print(__doc__, file=sys.stderr)
        return 2
    mode, d = sys.argv[1], sys.argv[2]
    if mode == "check":
        return check(d)
    write_files(d)
    if mode == "golden":
        write_headers(os.path.join(d, "headers.golden"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
