#!/usr/bin/python3
"""Writes the seed corpora of fuzz/npy_header_fuzzer.cpp (fuzz/corpus/npy_header)
and fuzz/npz_fuzzer.cpp (fuzz/corpus/npz), each file named by the SHA-1 of
its bytes (as the other corpora are): small files NumPy writes (Debian's
python3-numpy: /usr/bin/python3) and crafted shapes, each broken in one
way. The layout is checkpoint/npy.h's. Run from the repository root:
/usr/bin/python3 fuzz/npy_seeds.py (zip dates are the clock's, so the .npz
seeds' names change from run to run).
"""
import hashlib
import io
import os
import struct
import zipfile
import zlib

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))


def put(kind, data):
    d = os.path.join(HERE, "corpus", kind)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, hashlib.sha1(data).hexdigest()), "wb") as f:
        f.write(data)


def saved(a):
    b = io.BytesIO()
    np.save(b, a, allow_pickle=False)
    return b.getvalue()


def npy(text, data=b"", major=1, pad=True):
    body = text.encode("latin-1")
    if pad:
        prefix = 10 if major == 1 else 12
        body += b" " * ((64 - (prefix + len(body) + 1) % 64) % 64)
    body += b"\n"
    n = struct.pack("<H", len(body)) if major == 1 else struct.pack("<I", len(body))
    return b"\x93NUMPY" + bytes([major, 0]) + n + body + data


def d(descr, shape, fortran="False"):
    return "{'descr': '%s', 'fortran_order': %s, 'shape': %s, }" % (descr, fortran, shape)


def npz(arrays, compressed):
    b = io.BytesIO()
    (np.savez_compressed if compressed else np.savez)(b, **arrays)
    return b.getvalue()


def raw_zip(records, zip64=False):
    """records: (name, content, method, declared size or None, crc or None)."""
    out = bytearray()
    central = bytearray()
    for name, content, method, declared, crc in records:
        stored = content if method == 0 else zlib.compress(content, 9)[2:-4]
        size = len(content) if declared is None else declared
        crc = zlib.crc32(content) if crc is None else crc
        nb = name.encode()
        offset = len(out)
        sat = 0xFFFFFFFF
        extra = struct.pack("<HHQQ", 1, 16, size, len(stored)) if zip64 else b""
        out += struct.pack("<IHHHHHIIIHH", 0x04034B50, 45 if zip64 else 20, 0, method, 0, 0x21, crc,
                           sat if zip64 else len(stored), sat if zip64 else size, len(nb), len(extra)) + nb + extra + stored
        cextra = struct.pack("<HHQQQ", 1, 24, size, len(stored), offset) if zip64 else b""
        central += struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 45, 45, 0, method, 0, 0x21, crc,
                               sat if zip64 else len(stored), sat if zip64 else size, len(nb), len(cextra), 0, 0, 0, 0,
                               sat if zip64 else offset) + nb + cextra
    dir_offset = len(out)
    out += central
    n = len(records)
    if zip64:
        at = len(out)
        out += struct.pack("<IQHHIIQQQQ", 0x06064B50, 44, 45, 45, 0, 0, n, n, len(central), dir_offset)
        out += struct.pack("<IIQI", 0x07064B50, 0, at, 1)
        out += struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, 0xFFFF, 0xFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0)
    else:
        out += struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, n, n, len(central), dir_offset, 0)
    return bytes(out)


def main():
    rng = np.random.default_rng(27)
    # npy_header: NumPy's own files...
    for dt in ["|b1", "|u1", "<i2", ">u4", "<i8", ">f2", "<f4", ">f8"]:
        put("npy_header", saved(rng.integers(0, 100, (2, 3)).astype(dt)))
    put("npy_header", saved(np.asfortranarray(rng.standard_normal((2, 3, 2)).astype(">f4"))))
    put("npy_header", saved(np.float64(1.5).reshape(())))
    put("npy_header", saved(np.zeros((0, 3), "<i4")))
    # ...and crafted headers: other spellings, versions, each rule broken once.
    four = np.arange(4, dtype="<f4").tobytes()
    for text, major in [
        ('{"shape": (4,), "fortran_order": False, "descr": "<f4"}', 1),
        ("{'descr':'<f4','fortran_order':False,'shape':(4L,),}", 1),
        (d("<f4", "(4,)"), 2),
        (d("<f4", "(4,)"), 3),
        (d("<f4", "(2, 2)", "True"), 1),
        (d("=f4", "(4,)"), 1),
        (d("|f4", "(4,)"), 1),
    ]:
        put("npy_header", npy(text, four, major))
    for text in [
        d("|O", "(4,)"), d("<c8", "(2,)"), d("<U4", "(4,)"),
        "{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (4,), }",
        d("<f4", "(4)"), d("<f4", "(04,)"), d("<f4", "(18446744073709551616,)"),
        d("<f4", "(4294967296, 4294967296)"), d("<f8", "(0, 4294967296, 4294967296)"),
        d("<f4", "(" + "1, " * 65 + ")"), d("<f4", "(4,)", "true"),
        "{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (4,), }",
        "{'descr': '<f4', 'shape': (4,), }",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (4,), 'x': 1, }",
        "{'de\\x73cr': '<f4', 'fortran_order': False, 'shape': (4,), }",
    ]:
        put("npy_header", npy(text, four))
    put("npy_header", npy(d("<f4", "(4,)"), four, pad=False)[:-1])  # truncated data
    put("npy_header", npy(d("<f4", "(4,)"), four + b"\0"))  # trailing byte
    put("npy_header", b"\x93NUMPY\x01\x00\x10\x27" + b" " * 10)  # length 10000, cut short
    put("npy_header", b"\x93NUMPY\x04\x00\x00\x00")  # version 4.0
    # npz: NumPy's own files (stored and deflated, mixed orders, empty)...
    arrays = {"w": rng.standard_normal((3, 4)).astype("<f4"), "s": np.arange(5, dtype=">i2"),
              "m": np.array([[True, False], [False, True]]), "c": np.asfortranarray(np.ones((2, 3), ">f2"))}
    put("npz", npz(arrays, False))
    put("npz", npz(arrays, True))
    put("npz", npz({"z": np.zeros(4096, "<f8")}, True))
    put("npz", npz({}, False))
    # ...and crafted zips.
    rec = saved(np.arange(6, dtype="<i4"))
    big = saved(np.zeros(1 << 16, "|u1"))
    small = saved(np.zeros(16, "|u1"))
    put("npz", raw_zip([("a.npy", rec, 0, None, None), ("b.npy", rec, 8, None, None)], zip64=True))
    put("npz", raw_zip([("a.npy", big, 8, len(small), zlib.crc32(small))]))  # a deflate bomb
    put("npz", raw_zip([("a.npy", small, 8, 1 << 40, None)], zip64=True))  # beyond deflate's ratio
    put("npz", raw_zip([("a.npy", small, 8, 1 << 30, None)]))
    put("npz", raw_zip([("a.npy", rec, 8, None, zlib.crc32(rec) ^ 1)]))  # CRC mismatch
    put("npz", raw_zip([("a.npy", rec, 0, None, zlib.crc32(rec) ^ 1)]))
    put("npz", raw_zip([("a.npy", rec[:-4], 8, len(rec), zlib.crc32(rec))]))  # stream too short
    put("npz", raw_zip([(".npy", rec, 0, None, None)]))
    put("npz", raw_zip([("a.npy", b"not a numpy file", 0, None, None)]))
    put("npz", raw_zip([("a.npy", rec, 0, None, None), ("a.npy", rec, 0, None, None)]))


if __name__ == "__main__":
    main()
