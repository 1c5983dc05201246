#!/usr/bin/env python3
"""Writes the seed corpus of fuzz/gguf_fuzzer.cpp into fuzz/corpus/gguf/,
each file named by the SHA-1 of its bytes (as the other corpora are): a few
valid GGUF files in both byte orders (and gguf-py's old "FUGG" magic), and
the published crash shapes, each broken in exactly one way. The layout is
checkpoint/gguf.h's. Run from the repository root: python3 fuzz/gguf_seeds.py
"""
import hashlib
import os
import struct

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus", "gguf")


class G:
    def __init__(self, order="<"):
        self.o = order
        self.b = bytearray()

    def put(self, fmt, *v):
        self.b += struct.pack(self.o + fmt, *v)
        return self

    def raw(self, data):
        self.b += data
        return self

    def s(self, text):
        data = text.encode() if isinstance(text, str) else text
        return self.put("Q", len(data)).raw(data)

    def header(self, n_tensors, n_kv, version=3, magic=b"GGUF"):
        return self.raw(magic).put("I", version).put("Q", n_tensors).put("Q", n_kv)

    def tensor(self, name, ne, ggml_type, offset):
        self.s(name).put("I", len(ne))
        for e in ne:
            self.put("Q", e)
        return self.put("I", ggml_type).put("Q", offset)

    def pad(self, align=32):
        self.b += bytes((-len(self.b)) % align)
        return self


def valid(order="<", magic=b"GGUF", version=3):
    g = G(order).header(2, 5, version, magic)
    g.s("general.architecture").put("I", 8).s("llama")
    g.s("general.alignment").put("I", 4).put("I", 32)
    g.s("t.bool").put("I", 7).put("B", 1)
    g.s("t.floats").put("I", 9).put("I", 6).put("Q", 2).put("ff", 0.5, -1.0)
    g.s("t.nested").put("I", 9).put("I", 9).put("Q", 1).put("I", 8).put("Q", 2).s("a").s("\u2581b")
    g.tensor("w", [4, 2], 0, 0)    # f32, 32 bytes
    g.tensor("q", [32], 8, 32)     # q8_0: one 34-byte block
    g.pad()
    g.put("8f", *[float(i) for i in range(8)])
    g.put("e", 0.25).raw(bytes(range(32)))
    return g.pad().b


def crash(build):
    g = G()
    build(g)
    return g.b


SEEDS = [
    valid("<"),
    valid(">"),
    valid(">", b"FUGG"),
    valid("<", version=2),
    # An extent of 2^42+1 whose byte count wraps 2^64 (llama.cpp PR #18674).
    crash(lambda g: g.header(1, 0).tensor("t", [2**42 + 1, 2**22], 0, 0).pad().raw(bytes(32))),
    # n_dims 9 (gguf-tools #25).
    crash(lambda g: g.header(1, 0).tensor("t", [1] * 9, 0, 0).pad()),
    # A string length of 2^62 (ggml PR #1516).
    crash(lambda g: g.header(0, 1).put("Q", 2**62).raw(b"k").raw(bytes(16))),
    # An array of 2^61 strings in a small file.
    crash(lambda g: g.header(0, 1).s("k").put("I", 9).put("I", 8).put("Q", 2**61).raw(bytes(64))),
    # Alignment 3.
    crash(lambda g: g.header(1, 1).s("general.alignment").put("I", 4).put("I", 3).tensor("t", [4], 0, 0).raw(bytes(64))),
    # Two tensors over the same bytes.
    crash(lambda g: g.header(2, 0).tensor("a", [8], 0, 0).tensor("b", [8], 0, 0).pad().raw(bytes(64))),
    # Data past the end of the file.
    crash(lambda g: g.header(1, 0).tensor("a", [1024], 0, 0).pad().raw(bytes(16))),
    # A key twice, a tensor name twice.
    crash(lambda g: g.header(0, 2).s("k").put("I", 0).put("B", 1).s("k").put("I", 0).put("B", 2)),
    crash(lambda g: g.header(2, 0).tensor("a", [8], 0, 0).tensor("a", [8], 0, 32).pad().raw(bytes(64))),
    # ggml type 99, and removed type 4 (q4_2).
    crash(lambda g: g.header(1, 0).tensor("t", [32], 99, 0).pad().raw(bytes(32))),
    crash(lambda g: g.header(1, 0).tensor("t", [32], 4, 0).pad().raw(bytes(32))),
    # A bool of 2; arrays nested 17 deep.
    crash(lambda g: g.header(0, 1).s("k").put("I", 7).put("B", 2)),
    crash(lambda g: [g.header(0, 1).s("k").put("I", 9)] + [g.put("I", 9).put("Q", 1) for _ in range(16)]
          + [g.put("I", 0).put("Q", 0)]),
]


def main():
    os.makedirs(OUT, exist_ok=True)
    for data in SEEDS:
        name = hashlib.sha1(bytes(data)).hexdigest()
        with open(os.path.join(OUT, name), "wb") as f:
            f.write(bytes(data))
    print(len(SEEDS), "seeds in", OUT)


if __name__ == "__main__":
    main()
