"""ferry: tensor checkpoints that read the same on every machine.

    import ferry
    weights = ferry.load("model.pt")                       # {name: numpy array}
    weights = ferry.load("model.ferry", framework="torch")  # {name: torch.Tensor}
    weights = ferry.load("model.gguf", dequantize=True)    # quantized tensors as float32
    with ferry.open("model.safetensors") as ck:             # lazy: nothing read yet
        print(ck.keys(), ck.info("fc1.weight"), ck.metadata())
    ferry.save("out.ferry", weights, {"epoch": "3"})

Reads .ferry, .safetensors, PyTorch .pt files (torch.save's zip format,
read as data: nothing in the file is run), NumPy .npy/.npz and llama.cpp's
GGUF, in either byte order. Writes each of them, atomically (.pt as
torch.save writes a state dict, for torch.load(weights_only=True)).
Tensors are views of the file's mapping, not copies, when the
file's byte order is the machine's; numpy arrays are read-only, torch
tensors writable (each over a private copy-on-write mapping). bf16 and
float8 become numpy uint16 and uint8 arrays of their bits.

Errors in a file raise ferry.Error (.code, .name, .context); a missing file
raises FileNotFoundError, other OS errors OSError. ferry.distributed raises
ferry.Error too, and ferry.CommError (a ferry.Error with .peer) for a
failed connection or collective. Every code: docs/errors.md.
"""
import functools
import json
import os
import sys

from . import _ferry

__all__ = ["Error", "CommError", "Checkpoint", "open", "load", "save", "info"]


class Error(Exception):
    """An error ferry reports: a checkpoint it cannot read or write, a
    configuration or a call the torch backend refuses.

    code: ferry's stable error number, whose block names the module
    (docs/errors.md: 1..99 base, 300..399 comm, 400..499 checkpoint, ...);
    name: its name, e.g. "crc32_mismatch" or "bad_config";
    context: what failed and where (file, record, tensor, pickle offset,
    variable). str(error) is the one line the ferry tool prints.
    """

    def __init__(self, message, code, name, context):
        super().__init__(message)
        self.code = code
        self.name = name
        self.context = context


class CommError(Error, RuntimeError):
    """A failed connection or collective of ferry.distributed (comm/'s
    comm_error): code and name in comm/'s block (peer_lost, timed_out,
    forged_frame, ...), context the sentence naming the ranks involved.

    peer: the rank at fault (the lost, silent or misbehaving one), or None
    when no one rank is. Also a RuntimeError, as torch's backends' errors are.
    """

    def __init__(self, message, code, name, context, peer=None):
        super().__init__(message, code, name, context)
        self.peer = peer


def info():
    """What this ferry runs with, for bug reports (as `ferry --version`):

        {"version": "0.1.0",
         "cpu_features": "sse2 ssse3 sse4.2 avx2 f16c",   # found on this CPU
         "enabled_cpu_features": "sse2 ssse3 sse4.2 avx2 f16c",
         "kernels": {"byte_swap": "avx2", "crc32c": "sse4.2", ...}}

    FERRY_CPU_FEATURES (read once, at ferry's first kernel dispatch) narrows the enabled
    features, e.g. "sse2,ssse3" or "none" for the portable paths; it never
    enables one the CPU lacks. A name ferry does not know raises ferry.Error.
    """
    return _ferry.cpu_info()


# ferry's dtypes, exported by the extension (python/module.cpp) so there is
# one table: {name: {"code", "bytes", "numpy", "numpy_bits", "torch"}}.
_DTYPES = _ferry.dtypes
# ferry's dtype names, torch's names for them and their widths in bytes.
_TORCH_NAMES = {name: d["torch"] for name, d in _DTYPES.items()}
_WIDTHS = {name: d["bytes"] for name, d in _DTYPES.items()}


@functools.lru_cache(maxsize=None)
def _torch_dtypes(torch):
    """{ferry dtype name: torch dtype}, where this torch has the dtype."""
    return {k: getattr(torch, v) for k, v in _TORCH_NAMES.items() if hasattr(torch, v)}


@functools.lru_cache(maxsize=None)
def _ferry_dtype_names(torch):
    """{torch dtype: ferry dtype name}."""
    return {v: k for k, v in _torch_dtypes(torch).items()}


# {numpy "<kind><bytes>": the ferry dtype saved for it}: the dtypes numpy
# holds as themselves, not as their bits.
_NUMPY_DTYPES = {d["numpy"]: name for name, d in _DTYPES.items() if not d["numpy_bits"]}


def _as_torch(reader, dequantize=False):
    """Every tensor of `reader` (opened copy-on-write) as torch tensors;
    tensors of one dtype over one storage in the file share one torch
    storage (other dtypes over it view the same memory)."""
    import torch

    dtypes = _torch_dtypes(torch)
    entries, storages = reader.storages(dequantize)
    bases = {}  # (storage, dtype): the whole storage as a 1-d tensor of dtype
    out = {}
    for name, dtype, shape, strides, offset, storage in entries:
        if dtype not in dtypes:
            raise TypeError(f"tensor '{name}': torch {torch.__version__} has no {dtype} "
                            "dtype; load with framework='numpy'")
        base = bases.get((storage, dtype))
        if base is None:
            array = storages[storage]
            base = (torch.frombuffer(array, dtype=dtypes[dtype]) if array.size
                    else torch.empty(0, dtype=dtypes[dtype]))
            bases[(storage, dtype)] = base
        out[name] = base.as_strided(shape, strides, offset)
    return out


class Checkpoint:
    """An open checkpoint file. Opening reads its index only (names,
    dtypes, shapes, metadata); get() and load() read tensors."""

    def __init__(self, path, *, pytorch_order=None, gguf_order=None):
        self._path = os.fspath(path)
        self._orders = (pytorch_order, gguf_order)
        self._open = _ferry.Reader(self._path, pytorch_order, False, gguf_order)

    @property
    def _reader(self):
        if self._open is None:
            raise ValueError(f"{self._path}: the checkpoint is closed")
        return self._open

    @property
    def format(self):
        """'ferry', 'safetensors', 'pytorch', 'npy', 'npz' or 'gguf' (and
        'ferry_set' or 'safetensors_sharded' for an index of shards)."""
        return self._reader.format

    @property
    def order(self):
        """The byte order of the file's tensor data: 'little' or 'big'."""
        return self._reader.order

    def keys(self):
        """Tensor names, in the file's order."""
        return self._reader.keys()

    def __iter__(self):
        return iter(self.keys())

    def __len__(self):
        return len(self.keys())

    def __contains__(self, name):
        try:
            self._reader.info(name)
            return True
        except KeyError:
            return False

    def info(self, name):
        """dtype (ferry's name, e.g. 'BF16'), shape, strides and offset (in
        elements), storage index, nbytes, and the tensors sharing its storage.
        GGUF tensors add ggml_type ('q4_K', 'f16', ...) and quantized (True:
        the tensor is its raw blocks, a U8 array whose last extent counts
        bytes; get(name, dequantize=True) gives float32 values)."""
        return self._reader.info(name)

    def get(self, name, *, dequantize=False):
        """One tensor as a read-only numpy array (CRC-checked for .ferry).
        dequantize: a quantized GGUF tensor as float32 values (a writable
        array of its own) instead of its blocks."""
        return self._reader.get(name, dequantize)

    def __getitem__(self, name):
        return self.get(name)

    def metadata(self):
        """The file's metadata: {str: str}. For .pt files, each non-tensor
        leaf as JSON text, and 'pytorch.byteorder'; for GGUF, each value as
        text (arrays as JSON)."""
        return self._reader.metadata()

    def gguf_metadata(self):
        """A GGUF file's metadata with each value's GGUF type, in file
        order: numbers as numpy scalars of their type (numpy.uint32(32)),
        bools, str, arrays as numpy arrays or lists (of str, or of arrays);
        empty numeric arrays are one shared read-only array per type. The
        values cost at most about 14 times the header's bytes in Python
        objects (an array of one-element arrays: 13 bytes each in the file,
        a numpy array of about 170 in Python), besides the reader's parse.
        ferry.save(..., format="gguf") writes them back with the same types.
        ValueError for other formats."""
        return self._reader.gguf_metadata()

    def verify(self):
        """Checks every checksum (CRC32C for .ferry, the zip's CRC-32 for
        .pt); raises ferry.Error on the first mismatch."""
        self._reader.verify()

    def load(self, framework="numpy", *, dequantize=False):
        """Every tensor: see ferry.load."""
        return _load(self._reader.path, framework, dequantize, *self._orders, reader=self._reader)

    def close(self):
        """Drops the index; arrays already returned stay valid. Other
        methods then raise ValueError."""
        self._open = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        if self._open is None:
            return f"<ferry.Checkpoint {self._path!r} closed>"
        return f"<ferry.Checkpoint {self._path!r} {self.format}, {len(self)} tensors>"


def open(path, *, pytorch_order=None, gguf_order=None):  # noqa: A001 (the API's name)
    """Opens a checkpoint lazily (see Checkpoint). `pytorch_order` ('little'
    or 'big') is the byte order of a .pt file without a byteorder record
    (torch < 2.1); default little. `gguf_order` forces a GGUF file's byte
    order where its version field cannot tell (GGUF does not record it;
    ferry detects it as llama.cpp does)."""
    return Checkpoint(path, pytorch_order=pytorch_order, gguf_order=gguf_order)


def load(path, framework="numpy", *, dequantize=False, pytorch_order=None, gguf_order=None):
    """Every tensor of a checkpoint (any format ferry.open reads): {name: array}.

    framework="numpy": read-only arrays viewing the file's mapping (no copy
    when the file's byte order is this machine's); bf16 and float8 as their
    bits (uint16, uint8). framework="torch": writable tensors over private
    copy-on-write mappings; tensors that share a storage in the file share
    one here (tied weights keep equal data_ptr()). dequantize: a GGUF
    file's quantized tensors as float32 (ferry's dequantizers give ggml's
    bits); without it, as their raw blocks (uint8, see Checkpoint.info).
    """
    return _load(os.fspath(path), framework, dequantize, pytorch_order, gguf_order)


def _load(path, framework, dequantize, pytorch_order, gguf_order, reader=None):
    if framework == "numpy":
        return (reader or _ferry.Reader(path, pytorch_order, False, gguf_order)).load(dequantize)
    if framework == "torch":
        return _as_torch(_ferry.Reader(path, pytorch_order, True, gguf_order), dequantize)
    raise ValueError(f"framework must be 'numpy' or 'torch', not {framework!r}")


def _root(array):
    import numpy as np

    while isinstance(array.base, np.ndarray):
        array = array.base
    return array


class _Storages:
    """Groups tensors into storages: views of one torch storage, or of one
    numpy base array, become one storage written once."""

    def __init__(self):
        self.buffers = []
        self._index = {}
        self._keep = []  # objects whose memory the buffers view

    def add(self, key, buffer, owner):
        index = self._index.get(key)
        if index is None:
            index = self._index[key] = len(self.buffers)
            self.buffers.append(buffer)
            self._keep.append(owner)
        return index

    def own(self, buffer, owner):
        self.buffers.append(buffer)
        self._keep.append(owner)
        return len(self.buffers) - 1


def _torch_entry(name, t, storages, torch):
    names = _ferry_dtype_names(torch)
    if t.dtype not in names:
        raise TypeError(f"tensor '{name}': ferry has no dtype for {t.dtype}")
    t = t.detach()
    if t.device.type != "cpu":
        t = t.cpu()
    if t.layout != torch.strided:
        raise TypeError(f"tensor '{name}': ferry saves dense tensors, not {t.layout}")
    storage = t.untyped_storage() if hasattr(t, "untyped_storage") else t.storage()
    width = t.element_size()
    nbytes = storage.nbytes()
    if nbytes % width:  # a storage that is not whole elements of this dtype: copy the tensor
        t = t.clone()
        storage = t.untyped_storage() if hasattr(t, "untyped_storage") else t.storage()
        nbytes = storage.nbytes()
    # The whole storage as bytes, through a view of this tensor's dtype.
    whole = t.as_strided((nbytes // width,), (1,), 0)
    raw = whole.view(torch.uint8).numpy()
    index = storages.add(("torch", storage.data_ptr(), nbytes, t.dtype), raw, t)
    return (name, names[t.dtype], list(t.shape), list(t.stride()), t.storage_offset(), index)


def _numpy_entry(name, a, storages, np):
    a = np.asarray(a)
    if a.dtype.byteorder not in ("=", "|"):
        a = a.astype(a.dtype.newbyteorder("="))
    kind = f"{a.dtype.kind}{a.dtype.itemsize}"
    if kind not in _NUMPY_DTYPES:
        raise TypeError(f"tensor '{name}': ferry has no dtype for numpy {a.dtype}")
    width = a.dtype.itemsize
    root = _root(a)
    if root is not a and root.flags.c_contiguous:
        start = a.__array_interface__["data"][0] - root.__array_interface__["data"][0]
        if (start >= 0 and start % width == 0 and root.nbytes % width == 0
                and all(s >= 0 and s % width == 0 for s in a.strides)):
            raw = root.reshape(-1).view(np.uint8)
            index = storages.add(("numpy", id(root), a.dtype.str), raw, root)
            return (name, _NUMPY_DTYPES[kind], list(a.shape), [s // width for s in a.strides],
                    start // width, index)
    if not a.flags.c_contiguous:
        a = np.ascontiguousarray(a)
    raw = a.reshape(-1).view(np.uint8)
    strides = [s // width for s in a.strides] if a.size else _contiguous(a.shape)
    return (name, _NUMPY_DTYPES[kind], list(a.shape), strides, 0, storages.add(("numpy", id(a), a.dtype.str), raw, a))


def _retyped(entry, dtype, itemsize):
    """A numpy entry with ferry dtype `dtype` (same width) instead of numpy's."""
    name = entry[0]
    if dtype not in _WIDTHS:
        raise ValueError(f"tensor '{name}': no ferry dtype {dtype!r} (one of {', '.join(_WIDTHS)})")
    if _WIDTHS[dtype] != itemsize:
        raise TypeError(f"tensor '{name}': a {dtype} element is {_WIDTHS[dtype]} bytes, the array's {itemsize}")
    return (name, dtype) + entry[2:]


def _contiguous(shape):
    strides, n = [], 1
    for extent in reversed(shape):
        strides.append(n)
        n *= max(extent, 1)
    return list(reversed(strides))


_FORMATS = ("ferry", "safetensors", "pt", "npy", "npz", "gguf")
_SUFFIXES = {".safetensors": "safetensors", ".pt": "pt", ".pth": "pt", ".npy": "npy", ".npz": "npz", ".gguf": "gguf"}


def save(path, tensors, metadata=None, *, format=None, order=None, alignment=None, shared="refuse", dtypes=None,
         compress=False, nested_arrays=False):
    """Writes {name: numpy array or torch tensor} atomically: the file
    appears whole or not at all.

    format: 'ferry', 'safetensors', 'pt', 'npy', 'npz' or 'gguf'; default
    from the suffix (.safetensors, .pt or .pth, .npy, .npz, .gguf, else
    .ferry). 'pt' writes what torch.save(state_dict) writes, which
    torch.load(path, weights_only=True) reads (views and shared storages
    kept; dtypes torch 1.13 lacks, such as uint16 and float8, need torch
    2.x, as torch's own files do). order: 'little' or 'big' (not
    safetensors or .pt, which are little-endian; default this machine's). alignment: where each storage starts (.ferry, safetensors:
    default 64; GGUF: general.alignment, default 32). Views of one torch
    storage or one numpy base array are written once and stay views
    (.ferry, .pt); safetensors cannot share, so `shared` says what to do there:
    'refuse' (ferry.Error naming the tensors), 'copy' (each tensor's own
    bytes), or 'alias' (once, named in the metadata as Hugging Face does).
    metadata: {str: str} (other values stored as their JSON text); for
    GGUF, typed values as Checkpoint.gguf_metadata gives them (plain ints
    become i32, floats f32, as gguf-py writes them); .pt/.npy/.npz hold none.
    dtypes: {name: ferry dtype} for numpy arrays holding the bits of a
    dtype numpy lacks, as ferry.load returns them: e.g. {"w": "BF16"} for
    a uint16 array (the widths must agree); for GGUF also {name: ggml type}
    for a uint8 array of quantized blocks, e.g. {"w": "q4_K"}. compress:
    .npz only, deflate each array (as numpy.savez_compressed). A .npy file
    holds one array. nested_arrays: GGUF only, write metadata arrays of
    arrays (gguf-py reads them; ggml cannot, so they are refused without it,
    as by ferry convert without --nested-arrays).
    """
    import numpy as np

    path = os.fspath(path)
    if format is None:
        format = next((f for suffix, f in _SUFFIXES.items() if path.endswith(suffix)), "ferry")
    if format not in _FORMATS:
        raise ValueError(f"format must be one of {', '.join(map(repr, _FORMATS))}, not {format!r}")
    if shared not in ("refuse", "copy", "alias"):
        raise ValueError(f"shared must be 'refuse', 'copy' or 'alias', not {shared!r}")
    if compress and format != "npz":
        raise ValueError(f"compress= is for .npz files, not {format}")
    if nested_arrays and format != "gguf":
        raise ValueError(f"nested_arrays= is for GGUF files, not {format}")
    if format in ("pt", "npy", "npz") and (metadata or alignment is not None):
        raise ValueError(f"{format} files hold no metadata and have no alignment")
    torch = sys.modules.get("torch")  # torch tensors come only once torch is imported
    storages, entries, ggml_types = _Storages(), [], {}
    dtypes = dict(dtypes or {})
    for name, t in tensors.items():
        if not isinstance(name, str):
            raise TypeError(f"tensor names are str, not {type(name).__name__}")
        is_torch = torch is not None and isinstance(t, torch.Tensor)
        if format == "gguf":  # GGUF tensors are row-major
            t = t.contiguous() if is_torch else np.ascontiguousarray(t)
        if is_torch:
            if name in dtypes:
                raise TypeError(f"tensor '{name}': dtypes= is for numpy arrays; torch tensors carry their dtype")
            entries.append(_torch_entry(name, t, storages, torch))
        else:
            entries.append(_numpy_entry(name, t, storages, np))
            if name in dtypes:
                dtype = dtypes.pop(name)
                if format == "gguf" and dtype.upper() in _WIDTHS:
                    dtype = dtype.upper()  # ggml's "bf16", "f16", "i8": ferry's dtypes of those names
                if format == "gguf" and dtype not in _WIDTHS:
                    ggml_types[name] = dtype  # quantized blocks; save_gguf checks the type and the bytes
                else:
                    entries[-1] = _retyped(entries[-1], dtype, np.asarray(t).dtype.itemsize)
    if dtypes:
        raise KeyError(f"dtypes= names tensors that are not saved: {sorted(dtypes)}")
    if format == "gguf":
        meta = dict(metadata or {})
        if alignment is not None:
            if "general.alignment" in meta:
                raise ValueError("alignment= and metadata['general.alignment'] both given")
            meta["general.alignment"] = np.uint32(alignment)
        _ferry.save_gguf(path, entries, storages.buffers, meta, order, ggml_types, nested_arrays)
    else:
        meta = {str(k): v if isinstance(v, str) else json.dumps(v) for k, v in (metadata or {}).items()}
        _ferry.save(path, entries, storages.buffers, meta, format, order, 0 if alignment is None else alignment,
                    shared, compress)
