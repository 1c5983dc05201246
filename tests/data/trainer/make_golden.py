#!/usr/bin/python3
"""Writes the small IDX files tests/trainer/idx_test.cpp reads, with Python's
own gzip and struct (an encoder independent of ferry's decoder):

    cd tests/data/trainer && /usr/bin/python3 make_golden.py

f32-2x3-idx.gz   f32, dims 2 x 3, gzip'd: the float patterns listed in F32
i16-4-idx        i16, dims 4, raw: -32768, -1, 0, 32767
tiny/            a two-split classification set in the MNIST layout:
                 t10k: 3 images of 2 x 4 pixels (pixel k of image i is
                 16 i + k), labels 9 0 3; images gzip'd, labels raw.
                 train: 2 images of 2 x 4 (pixel k of image i is
                 255 - 16 i - k), labels 1 7 (gzip'd); the images raw, and
                 beside them a gzip'd twin of all-zero pixels that the
                 loader must not pick.
"""
import gzip
import struct

F32 = [0x7F800001, 0x80000000, 0x3FC00000, 0x00000001, 0x7F800000, 0xFFC12345]


def idx(code, dims, payload):
    return bytes([0, 0, code, len(dims)]) + b"".join(struct.pack(">I", d) for d in dims) + payload


def gz(data):
    # mtime 0: the same bytes on every run.
    return gzip.compress(data, compresslevel=9, mtime=0)


def write(name, data):
    with open(name, "wb") as f:
        f.write(data)


write("f32-2x3-idx.gz", gz(idx(0x0D, [2, 3], b"".join(struct.pack(">I", v) for v in F32))))
write("i16-4-idx", idx(0x0B, [4], b"".join(struct.pack(">h", v) for v in [-32768, -1, 0, 32767])))
write("tiny/t10k-images-idx3-ubyte.gz", gz(idx(0x08, [3, 2, 4], bytes(16 * i + k for i in range(3) for k in range(8)))))
write("tiny/t10k-labels-idx1-ubyte", idx(0x08, [3], bytes([9, 0, 3])))
write("tiny/train-images-idx3-ubyte", idx(0x08, [2, 2, 4], bytes(255 - 16 * i - k for i in range(2) for k in range(8))))
# A different gzip'd twin: the loader must prefer the uncompressed file.
write("tiny/train-images-idx3-ubyte.gz", gz(idx(0x08, [2, 2, 4], bytes(16))))
write("tiny/train-labels-idx1-ubyte.gz", gz(idx(0x08, [2], bytes([1, 7]))))
