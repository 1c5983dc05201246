#!/usr/bin/python3
"""Writes .pt files with torch.save and, beside each, X.pt.expected: what
torch.load read back, for ferry's tests to compare with (pt_expected.h).

  make_pt_files.py live DIR     files the tests write at run time
                                (tests/checkpoint/pytorch_live_test.cpp)
  make_pt_files.py golden DIR   the committed files in tests/data/pytorch
                                (tests/checkpoint/pytorch_golden_test.cpp)
  make_pt_files.py check DIR    torch.load(weights_only=True) of each file
                                ferry wrote into DIR/ferry (pytorch_live_test's
                                FerryWritesWhatTorchLoads) gives the tensors
                                of DIR/X.pt.expected (with mmap=True too,
                                where torch has it)

Needs Debian's python3-torch: 1.13 (Debian 12), or 2.6 (Debian 13, in the
roots scripts/debian13-root makes, natively and under qemu), where the live
files add every dtype torch 2.6 saves (every_dtype_2). Deterministic: fixed
seeds, no clocks.

X.pt.expected, one line per tensor, then one per non-tensor leaf:
  NAME DTYPE [SHAPE] [STRIDES] OFFSET STORAGE_GROUP CRC32
  META KEY JSON
NAME is the tensor's path of dict keys and list indexes joined by '.';
DTYPE ferry's name; OFFSET in elements; STORAGE_GROUP numbers storages in
order of first use (tensors over one storage share it); CRC32 is zlib's
CRC-32 of the elements in row-major order as little-endian bytes. A leaf's
JSON: null, true/false, ints, floats as '%.17g' (NaN, Infinity), str as
json.dumps does it without ASCII escapes, lists and tuples as arrays.
"""
import io
import json
import math
import os
import pickle
import struct
import sys
import zipfile
import zlib
from collections import OrderedDict

import torch

DTYPES = {
    torch.bool: "BOOL", torch.uint8: "U8", torch.int8: "I8", torch.int16: "I16",
    torch.int32: "I32", torch.int64: "I64", torch.float16: "F16",
    torch.bfloat16: "BF16", torch.float32: "F32", torch.float64: "F64",
    torch.complex64: "C64", torch.complex128: "C128",
}
# The dtypes of later releases, by torch's name: ferry's name (the bits
# types are read as unsigned integers of their size).
DTYPES.update({getattr(torch, k): v for k, v in {
    "uint16": "U16", "uint32": "U32", "uint64": "U64", "float8_e4m3fn": "F8_E4M3",
    "float8_e5m2": "F8_E5M2", "float8_e4m3fnuz": "F8_E4M3FNUZ", "float8_e5m2fnuz": "F8_E5M2FNUZ",
    "complex32": "C32", "bits8": "U8", "bits16": "U16", "bits1x8": "U8", "bits2x4": "U8",
    "bits4x2": "U8"}.items() if hasattr(torch, k)})
# An integer dtype of each width, to see any tensor's elements as bytes.
BITS = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
STORAGE_WIDTH = {
    "DoubleStorage": 8, "FloatStorage": 4, "HalfStorage": 2, "BFloat16Storage": 2,
    "LongStorage": 8, "IntStorage": 4, "ShortStorage": 2, "CharStorage": 1,
    "ByteStorage": 1, "BoolStorage": 1,
}


def leaf_json(v):
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if math.isnan(v):
            return "NaN"
        if math.isinf(v):
            return "Infinity" if v > 0 else "-Infinity"
        return "%.17g" % v
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)
    if isinstance(v, (list, tuple)):
        return "[" + ",".join(leaf_json(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ",".join(json.dumps(str(k), ensure_ascii=False) + ":" + leaf_json(x)
                              for k, x in v.items()) + "}"
    raise TypeError(f"no JSON for {type(v).__name__}")


def holds_tensor(v):
    if isinstance(v, torch.Tensor):
        return True
    if isinstance(v, dict):
        return any(holds_tensor(x) for x in v.values())
    if isinstance(v, (list, tuple)):
        return any(holds_tensor(x) for x in v)
    return False


def element_bytes(t):
    """The elements of t in row-major order as little-endian bytes."""
    c = t.detach().contiguous()
    if c.is_complex():  # each part on its own
        c = c.reshape(-1).view(BITS[c.element_size() // 2])
    elif c.dtype != torch.bool:
        c = c.view(BITS[c.element_size()])
    a = c.numpy()
    return a.astype(a.dtype.newbyteorder("<"), copy=False).tobytes()


def expected_lines(obj):
    """What torch.load read, in the X.pt.expected format."""
    lines, groups = [], {}

    def walk(v, path):
        if isinstance(v, torch.Tensor):
            group = groups.setdefault(v.storage().data_ptr(), len(groups))
            lines.append(" ".join([
                path, DTYPES[v.dtype],
                "[" + ",".join(map(str, v.shape)) + "]",
                "[" + ",".join(map(str, v.stride())) + "]",
                str(v.storage_offset()), str(group),
                "%08x" % zlib.crc32(element_bytes(v))]))
        elif isinstance(v, dict) and v:
            for k, x in v.items():
                walk(x, f"{path}.{k}" if path else str(k))
        elif isinstance(v, (list, tuple)) and holds_tensor(v):
            for i, x in enumerate(v):
                walk(x, f"{path}.{i}" if path else str(i))
        else:
            lines.append(f"META {path} {leaf_json(v)}")

    # A root dict is walked whatever it holds (an empty one gives no line); a
    # root list or tuple only if it holds a tensor; any other root is "root".
    if isinstance(obj, dict):
        for k, x in obj.items():
            walk(x, str(k))
    elif isinstance(obj, (list, tuple)) and holds_tensor(obj):
        walk(obj, "")
    else:
        walk(obj, "root")
    return "".join(line + "\n" for line in lines)


def save(obj, path, **kwargs):
    """torch.save, then X.pt.expected from what torch.load reads back."""
    torch.save(obj, path, **kwargs)
    write_expected(path, torch.load(path, weights_only=False))


def write_expected(path, loaded):
    with open(path + ".expected", "w", encoding="utf-8") as f:
        f.write(expected_lines(loaded))


class Net(torch.nn.Module):
    """Tied input and output embeddings, a BatchNorm (running buffers and
    num_batches_tracked) and a linear layer."""

    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(50, 16)
        self.norm = torch.nn.BatchNorm1d(16)
        self.hidden = torch.nn.Linear(16, 16)
        self.out = torch.nn.Linear(16, 50, bias=False)
        self.out.weight = self.embed.weight

    def forward(self, x):
        return self.out(torch.relu(self.hidden(self.norm(self.embed(x)))))


def trained_net():
    torch.manual_seed(0)
    net = Net()
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    for _ in range(2):
        x = torch.randint(0, 50, (8,))
        loss = torch.nn.functional.cross_entropy(net(x), x)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return net, opt


def every_dtype():
    """bool u8 i8 i16 i32 i64 f16 bf16 f32 f64, 0-d, empty, strided and
    offset views, and float values that byte swaps and narrowing break."""
    torch.manual_seed(1)
    base = torch.arange(60, dtype=torch.float32) * 0.25 - 3
    special = torch.tensor([0.0, -0.0, float("inf"), float("-inf"), float("nan"),
                            1e-45, -1e-40, 3.4e38], dtype=torch.float32)
    d = OrderedDict()
    d["bool"] = torch.tensor([True, False, True])
    d["u8"] = torch.arange(0, 250, 7, dtype=torch.uint8)
    d["i8"] = torch.arange(-100, 100, 9, dtype=torch.int8)
    d["i16"] = torch.arange(-30000, 30000, 1999, dtype=torch.int16)
    d["i32"] = torch.randint(-2**31, 2**31 - 1, (3, 4), dtype=torch.int32)
    d["i64"] = torch.tensor([-2**63, -1, 0, 1, 2**63 - 1], dtype=torch.int64)
    d["f16"] = special.to(torch.float16)
    d["bf16"] = special.to(torch.bfloat16)
    d["f32"] = special
    d["f64"] = torch.randn(2, 3, dtype=torch.float64)
    d["scalar"] = torch.tensor(2.5, dtype=torch.float64)
    d["empty"] = torch.zeros(0, 3)
    d["base"] = base
    d["offset"] = base[7:19]                 # storage offset 7
    d["strided"] = base[1::4]                # stride 4
    d["transposed"] = base.view(6, 10).t()   # strides [1, 10]
    d["narrow"] = base.view(6, 10)[2:5, 3:8]
    return d


def every_dtype_2():
    """What torch 2.x saves beyond every_dtype(): the unsigned integers, the
    float8s (fnuz among them), complex (32 too, as a bit pattern: torch has
    few operators on it) and the bits types, each over values that a byte
    swap or a wrong part order breaks."""
    d = OrderedDict()
    d["c64"] = torch.tensor([1 + 2j, -0.0 - 3.5j, complex(float("inf"), float("nan"))], dtype=torch.complex64)
    d["c128"] = torch.tensor([[1e-310 + 1j, -2 - 0j], [3 + 4j, 5 - 6j]], dtype=torch.complex128)
    d["c128_t"] = d["c128"].t()
    if not hasattr(torch, "uint16"):
        return d
    d["u16"] = torch.tensor([0, 1, 0x1234, 0xFFFF], dtype=torch.int32).to(torch.uint16)
    d["u32"] = torch.tensor([0, 1, 0x12345678, 0xFFFFFFFF], dtype=torch.int64).to(torch.uint32)
    d["u64"] = torch.tensor([0, 1, 0x0102030405060708, -1], dtype=torch.int64).view(torch.uint64)
    patterns = torch.arange(256, dtype=torch.int32).to(torch.uint8)  # every byte
    for name in ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz"):
        d[name] = patterns.view(getattr(torch, name))
    d["c32"] = torch.tensor([0x3C00, 0xC000, 0x7E01, 0x8000, 0x0001, 0xFC00], dtype=torch.int32).to(torch.uint16).view(
        torch.complex32)
    d["bits16"] = torch.tensor([0x0102, -2], dtype=torch.int16).view(torch.bits16)
    d["bits8"] = torch.tensor([1, 2, 255], dtype=torch.uint8).view(torch.bits8)
    return d


def nested():
    torch.manual_seed(2)
    a = torch.randn(4)
    return {
        "layers": [a, (torch.ones(2, dtype=torch.int64), 3, "x"), {"b": a[1:]}],
        "meta": {"epoch": 3, "name": "run \u00e9\u00e8 \"q\"\n", "nan": float("nan"),
                 "inf": float("-inf"), "lr": 1e-05, "none": None, "flags": [True, False],
                 "shape": (3, 4), "records": [{"a": 1}, [2.5, None]]},
        "empty": {},
        7: torch.zeros(2, 2, dtype=torch.int16),
    }


def live(out):
    net, opt = trained_net()
    save(net.state_dict(), os.path.join(out, "state_dict.pt"))
    save(opt.state_dict(), os.path.join(out, "adam.pt"))
    save(nested(), os.path.join(out, "nested.pt"))
    save(every_dtype(), os.path.join(out, "dtypes.pt"))
    save(every_dtype(), os.path.join(out, "protocol4.pt"), pickle_protocol=4)
    stream = io.BytesIO()  # records under "archive/"
    torch.save(net.state_dict(), stream)
    with open(os.path.join(out, "stream.pt"), "wb") as f:
        f.write(stream.getvalue())
    write_expected(os.path.join(out, "stream.pt"), torch.load(os.path.join(out, "stream.pt"), weights_only=False))
    save(every_dtype_2(), os.path.join(out, "dtypes_2.pt"))
    # Many tensors, each its own storage: what the pickle's values cost
    # per tensor (limits::max_pickle_memory).
    save(OrderedDict((f"model.layers.{i}.self_attn.q_proj.weight", torch.full((4, 4), float(i)))
                     for i in range(2000)), os.path.join(out, "many_tensors.pt"))
    # Valid files without tensors: checkpoints of metadata only.
    save(torch.nn.ReLU().state_dict(), os.path.join(out, "empty_state_dict.pt"))
    save([1, 2.5, "x"], os.path.join(out, "no_tensors.pt"))
    # Files of other kinds, each refused naming its kind: TorchScript
    # (deflated code/ records) and the legacy format in protocols 2 and 4.
    torch.jit.save(torch.jit.script(torch.nn.Linear(2, 2)), os.path.join(out, "torchscript.pt"))
    for protocol in (2, 4):
        torch.save(net.state_dict(), os.path.join(out, f"legacy{protocol}.pt"),
                   _use_new_zipfile_serialization=False, pickle_protocol=protocol)


class _StorageKeys(pickle.Unpickler):
    """Reads data.pkl for its storages' keys and element widths only: the
    rebuild functions are never called."""

    def __init__(self, data):
        super().__init__(io.BytesIO(data))
        self.width = {}

    def find_class(self, module, name):
        if module == "torch._utils":
            return lambda *args: None
        return super().find_class(module, name)

    def persistent_load(self, pid):
        _, storage_type, key, _, _ = pid
        self.width[key] = STORAGE_WIDTH[storage_type.__name__]
        return None


def swapped(data, width):
    if width == 1:
        return data
    words = struct.unpack(f"<{len(data) // width}{'BHIQ'[width.bit_length() - 1]}", data)
    return struct.pack(f">{len(words)}{'BHIQ'[width.bit_length() - 1]}", *words)


def write_torch_like_zip(path, records):
    """A zip as PyTorch writes one: every record stored, its data 64-byte
    aligned by an 'FB' extra field, flag bit 3 with the sizes and CRC-32 in
    a data descriptor, ZIP64 end records."""
    out = bytearray()
    central = bytearray()
    for name, data in records:
        n = name.encode()
        offset = len(out)
        pad = (-(offset + 30 + len(n) + 4)) % 64
        extra = b"FB" + struct.pack("<H", pad) + b"Z" * pad
        crc = zlib.crc32(data)
        out += struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, 8, 0, 0, 0x21, 0, 0, 0, len(n), len(extra))
        out += n + extra
        assert len(out) % 64 == 0
        out += data
        out += struct.pack("<IIII", 0x08074B50, crc, len(data), len(data))
        central += struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 0x031E, 20, 8, 0, 0, 0x21, crc,
                               len(data), len(data), len(n), 0, 0, 0, 0, 0, offset)
        central += n
    cd_offset = len(out)
    out += central
    eocd64 = len(out)
    out += struct.pack("<IQHHIIQQQQ", 0x06064B50, 44, 0x031E, 45, 0, 0, len(records), len(records),
                       len(central), cd_offset)
    out += struct.pack("<IIQI", 0x07064B50, 0, eocd64, 1)
    out += struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, 0xFFFF, 0xFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0)
    with open(path, "wb") as f:
        f.write(out)


def golden(out):
    little = os.path.join(out, "golden_little.pt")
    net, opt = trained_net()
    obj = {"model": net.state_dict(), "optimizer": opt.state_dict(), "tensors": every_dtype(),
           "epoch": 2, "note": "written by torch 1.13 on x86-64"}
    save(obj, little)
    save(obj, os.path.join(out, "golden_protocol4.pt"), pickle_protocol=4)

    with zipfile.ZipFile(little) as z:
        names = z.namelist()
        records = [(n, z.read(n)) for n in names]
    prefix = names[0].split("/")[0]

    # The same file as a big-endian host's torch >= 2.1 writes it: a
    # byteorder record and every storage's elements swapped.
    keys = _StorageKeys(dict(records)[f"{prefix}/data.pkl"])
    keys.load()
    big = []
    for name, data in records:
        if name.startswith(f"{prefix}/data/"):
            data = swapped(data, keys.width[name.rsplit("/", 1)[1]])
        big.append((name.replace(prefix + "/", "golden_big/", 1), data))
        if name.endswith("/data.pkl"):
            big.append(("golden_big/byteorder", b"big"))
    write_torch_like_zip(os.path.join(out, "golden_big.pt"), big)
    write_expected(os.path.join(out, "golden_big.pt"), torch.load(little, weights_only=False))

    # Python's zipfile: no padding, so storages start anywhere.
    rezipped = os.path.join(out, "golden_rezipped.pt")
    with zipfile.ZipFile(rezipped, "w", zipfile.ZIP_STORED) as z:
        for name, data in records:
            info = zipfile.ZipInfo(name.replace(prefix + "/", "golden_rezipped/", 1), (1980, 1, 1, 0, 0, 0))
            z.writestr(info, data)
    write_expected(rezipped, torch.load(rezipped, weights_only=False))


def check(folder):
    """Exits non-zero naming every file of folder/ferry whose tensors, as
    torch.load(weights_only=True) reads them, differ from the tensor lines
    of folder/X.pt.expected (a state dict holds no metadata)."""
    names = sorted(n for n in os.listdir(os.path.join(folder, "ferry")) if n.endswith(".pt"))
    if not names:
        sys.exit(f"{folder}/ferry: no .pt files (run pytorch_live_test first)")
    loads = [{"weights_only": True}]
    if "mmap" in torch.load.__code__.co_varnames:  # torch >= 2.1
        loads.append({"weights_only": True, "mmap": True})
    bad = 0
    for name in names:
        with open(os.path.join(folder, name + ".expected"), encoding="utf-8") as f:
            want = "".join(line for line in f if not line.startswith("META "))
        for kwargs in loads:
            got = expected_lines(torch.load(os.path.join(folder, "ferry", name), **kwargs))
            if got != want:
                bad += 1
                print(f"{name} ({kwargs}): torch read\n{got}instead of\n{want}", file=sys.stderr)
    print(f"torch {torch.__version__} read {len(names)} files ferry wrote, {len(loads)} ways: {bad} differ")
    sys.exit(1 if bad else 0)


def main():
    if len(sys.argv) != 3 or sys.argv[1] not in ("live", "golden", "check"):
        sys.exit(__doc__)
    if sys.argv[1] == "check":
        check(sys.argv[2])
        return
    os.makedirs(sys.argv[2], exist_ok=True)
    (live if sys.argv[1] == "live" else golden)(sys.argv[2])


if __name__ == "__main__":
    main()
