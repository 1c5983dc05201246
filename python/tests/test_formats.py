"""ferry.load/open/save with NumPy's .npy/.npz and llama.cpp's GGUF, in
both byte orders, checked against NumPy itself (np.load, np.save) and
against the GGUF block layouts written out in numpy."""
import numpy as np
import pytest

import ferry


def test_npy_both_ways_in_both_orders(tmp_path):
    a = np.arange(12, dtype=np.float32).reshape(3, 4) / 3
    for order, descr in (("little", "<f4"), ("big", ">f4")):
        p = tmp_path / f"{order}.npy"
        ferry.save(p, {"a": a}, order=order)
        back = np.load(p)
        assert back.dtype.str == descr
        assert np.array_equal(back, a)
        assert ferry.open(p).format == "npy" and ferry.open(p).order == order
    # NumPy's own files, big-endian and Fortran order, read by ferry.
    p = tmp_path / "numpy.npy"
    np.save(p, np.asfortranarray(a.astype(">f8")))
    got = ferry.load(p)["arr_0"]  # a .npy's one array, named as numpy.savez names an unnamed one
    assert got.dtype == np.float64 and np.array_equal(got, a.astype(np.float64))


def test_complex_through_every_format_that_has_it(tmp_path):
    z = np.array([1 + 2j, -0.0 - 3.5j, complex(np.inf, np.nan)], dtype=np.complex64)
    for suffix, arrays in ((".ferry", {"z": z, "zz": z.astype(np.complex128)}), (".safetensors", {"z": z}),
                           (".npy", {"z": z.astype(">c16")})):
        for order in ("little", "big") if suffix != ".safetensors" else ("little",):
            p = tmp_path / f"c_{order}{suffix}"
            ferry.save(p, arrays, order=order)
            got = ferry.load(p)
            for name, a in arrays.items():
                back = got[name if suffix != ".npy" else "arr_0"]
                assert back.dtype == a.dtype.newbyteorder("=") and back.tobytes() == a.astype(back.dtype).tobytes()
    assert np.load(tmp_path / "c_big.npy").dtype.str == ">c16"
    # safetensors has no complex128: one line naming the dtype and the format.
    with pytest.raises(ferry.Error, match="safetensors has no dtype C128"):
        ferry.save(tmp_path / "c128.safetensors", {"zz": z.astype(np.complex128)})
    with pytest.raises(ferry.Error, match="dtype C64 has no GGUF tensor type"):
        ferry.save(tmp_path / "c.gguf", {"z": z})
    assert not (tmp_path / "c.gguf").exists() and not (tmp_path / "c128.safetensors").exists()


@pytest.mark.safetensors
def test_safetensors_library_and_ferry_read_each_other(tmp_path):
    """Every dtype both support, each way: what ferry writes the library
    loads, and what the library writes ferry loads, the same bytes."""
    import torch
    from safetensors.torch import load_file, save_file
    torch.manual_seed(3)
    base = torch.randn(3, 5)
    tensors = {
        "bool": base > 0, "u8": (base * 40).to(torch.uint8), "i8": (base * 40).to(torch.int8),
        "i16": (base * 900).to(torch.int16), "i32": (base * 9e8).to(torch.int32),
        "i64": (base * 9e17).to(torch.int64), "f16": base.half(), "bf16": base.bfloat16(), "f32": base,
        "f64": base.double(), "f8_e4m3": base.to(torch.float8_e4m3fn), "f8_e5m2": base.to(torch.float8_e5m2),
    }
    ferry.save(tmp_path / "ferry.safetensors", tensors)
    theirs = load_file(tmp_path / "ferry.safetensors")
    save_file(tensors, tmp_path / "theirs.safetensors")
    ours = ferry.load(tmp_path / "theirs.safetensors", framework="torch")
    for name, t in tensors.items():
        for got in (theirs[name], ours[name]):
            assert got.dtype == t.dtype, name
            assert got.contiguous().view(torch.uint8).tolist() == t.contiguous().view(torch.uint8).tolist(), name
    # The wide unsigned types through NumPy (the library's torch side of
    # 0.4 has no uint16..64).
    from safetensors.numpy import load_file as np_load, save_file as np_save
    arrays = {f"u{8 * w}": (np.arange(6, dtype=np.uint64) * 0x0102030405060708).astype(f"<u{w}") for w in (2, 4, 8)}
    ferry.save(tmp_path / "u.safetensors", arrays)
    np_save(arrays, tmp_path / "theirs_u.safetensors")
    for got in (np_load(tmp_path / "u.safetensors"), ferry.load(tmp_path / "theirs_u.safetensors")):
        for name, a in arrays.items():
            assert got[name].dtype == a.dtype and got[name].tobytes() == a.tobytes(), name


def test_npy_holds_one_array(tmp_path):
    with pytest.raises(ValueError, match="one array"):
        ferry.save(tmp_path / "two.npy", {"a": np.zeros(2), "b": np.zeros(2)})
    with pytest.raises(ValueError, match="no metadata"):
        ferry.save(tmp_path / "m.npy", {"a": np.zeros(2)}, {"k": "v"})


@pytest.mark.parametrize("compress", [False, True])
def test_npz_against_numpy(tmp_path, compress):
    arrays = {"w": np.linspace(-1, 1, 30, dtype=np.float16).reshape(5, 6), "steps": np.array([1, -2, 3], np.int64),
              "mask": np.array([True, False]), "empty": np.zeros((0, 3), np.uint8)}
    p = tmp_path / "f.npz"
    ferry.save(p, arrays, compress=compress, order="big")
    with np.load(p) as z:
        assert sorted(z.files) == sorted(arrays)
        for k, v in arrays.items():
            assert np.array_equal(z[k], v) and z[k].shape == v.shape
    q = tmp_path / "numpy.npz"
    (np.savez_compressed if compress else np.savez)(q, **arrays)
    got = ferry.load(q)
    for k, v in arrays.items():
        assert np.array_equal(got[k], v) and got[k].dtype == v.dtype


def q8_0_blocks(rng, n_blocks):
    """Q8_0 blocks (little-endian f16 scale, 32 int8) and the values ggml's
    dequantize_row_q8_0 gives for them: scale * q."""
    d = rng.uniform(0.01, 1, n_blocks).astype("<f2")
    q = rng.integers(-128, 128, (n_blocks, 32), dtype=np.int8)
    blocks = np.concatenate([d.view(np.uint8).reshape(-1, 2), q.view(np.uint8)], axis=1)
    return blocks, (d.astype(np.float32)[:, None] * q.astype(np.float32)).reshape(-1)


def test_gguf_typed_metadata_quantized_blocks_and_dequantization(tmp_path):
    rng = np.random.default_rng(1)
    blocks, values = q8_0_blocks(rng, 8)  # 256 values: one row of 256
    meta = {"general.architecture": "llama", "llama.context_length": np.uint32(2048), "t.i8": np.int8(-3),
            "t.f64": np.float64(0.1), "t.flag": True, "t.count": 7, "t.scale": 0.5,
            "tokenizer.ggml.tokens": ["a", "\u2581the", ""], "t.ids": np.array([1, 2, 3], np.uint64)}
    f = np.arange(64, dtype=np.float32).reshape(2, 32)
    p = tmp_path / "m.gguf"
    ferry.save(p, {"tok.weight": blocks.reshape(1, -1), "norm": f}, meta, dtypes={"tok.weight": "q8_0"})
    with ferry.open(p) as ck:
        assert ck.format == "gguf" and ck.order == "little"
        md = ck.gguf_metadata()
        assert list(md) == list(meta)
        assert type(md["llama.context_length"]) is np.uint32 and md["llama.context_length"] == 2048
        assert type(md["t.i8"]) is np.int8 and type(md["t.f64"]) is np.float64
        assert type(md["t.count"]) is np.int32 and type(md["t.scale"]) is np.float32  # gguf-py's rules
        assert md["t.flag"] is True and md["tokenizer.ggml.tokens"] == ["a", "\u2581the", ""]
        assert md["t.ids"].dtype == np.uint64 and list(md["t.ids"]) == [1, 2, 3]
        info = ck.info("tok.weight")
        assert info["ggml_type"] == "q8_0" and info["quantized"] and info["shape"] == (1, 8 * 34)
        assert ck.info("norm")["ggml_type"] == "f32" and not ck.info("norm")["quantized"]
        assert np.array_equal(ck.get("tok.weight"), blocks.reshape(1, -1))  # the raw blocks
        deq = ck.get("tok.weight", dequantize=True)
        assert deq.dtype == np.float32 and deq.shape == (1, 256)
        assert np.array_equal(deq.view(np.uint32), values.reshape(1, 256).view(np.uint32))
        assert deq.flags.writeable and not ck.get("norm", dequantize=True).flags.writeable  # never a writable mapping
    every = ferry.load(p, dequantize=True)
    assert every["tok.weight"].dtype == np.float32 and np.array_equal(every["norm"], f)


def test_gguf_round_trip_is_byte_identical_and_big_endian_reads_the_same(tmp_path):
    rng = np.random.default_rng(2)
    blocks, values = q8_0_blocks(rng, 16)
    p, again, be = tmp_path / "a.gguf", tmp_path / "again.gguf", tmp_path / "be.gguf"
    meta = {"general.alignment": np.uint32(64), "general.name": "x"}
    tensors = {"w": blocks.reshape(2, -1), "b": np.arange(6, dtype=np.float16)}
    ferry.save(p, tensors, meta, dtypes={"w": "q8_0"})
    with ferry.open(p) as ck:
        kinds = {n: ck.info(n)["ggml_type"] for n in ck.keys() if ck.info(n)["quantized"]}
        ferry.save(again, ck.load(), ck.gguf_metadata(), dtypes=kinds)
    assert again.read_bytes() == p.read_bytes()
    ferry.save(be, tensors, meta, dtypes={"w": "q8_0"}, order="big")
    assert be.read_bytes() != p.read_bytes()
    with ferry.open(be) as ck:
        assert ck.order == "big"
        assert ck.gguf_metadata()["general.alignment"] == 64
        assert np.array_equal(ck.get("w"), blocks.reshape(2, -1))  # blocks come back in this host's order
        assert np.array_equal(ck.get("w", dequantize=True).reshape(-1).view(np.uint32), values.view(np.uint32))
        assert np.array_equal(ck.get("b"), tensors["b"])


def test_gguf_refusals(tmp_path):
    with pytest.raises(ferry.Error, match="array of arrays") as e:  # ggml cannot read them
        ferry.save(tmp_path / "n.gguf", {"a": np.zeros(32, np.float32)}, {"t.nested": [[1, 2], [3]]})
    assert e.value.name == "bad_value" and not (tmp_path / "n.gguf").exists()
    with pytest.raises(TypeError, match="GGUF holds no"):
        ferry.save(tmp_path / "x.gguf", {"a": np.zeros(32, np.float32)}, {"k": object()})
    with pytest.raises(ValueError, match="whole blocks"):
        ferry.save(tmp_path / "x.gguf", {"a": np.zeros((1, 33), np.uint8)}, dtypes={"a": "q8_0"})
    with pytest.raises(TypeError, match="outside i64"):
        ferry.save(tmp_path / "x.gguf", {"a": np.zeros(32, np.float32)}, {"k": 1 << 70})
    # ggml's lower-case names of plain types are ferry's dtypes: bf16 bits as uint16.
    ferry.save(tmp_path / "b.gguf", {"w": np.zeros(4, np.uint16)}, dtypes={"w": "bf16"})
    assert ferry.open(tmp_path / "b.gguf").info("w")["ggml_type"] == "bf16"
    with pytest.raises(ValueError, match="no ggml type"):
        ferry.save(tmp_path / "x.gguf", {"a": np.zeros((1, 34), np.uint8)}, dtypes={"a": "q9_9"})
    ferry.save(tmp_path / "y.ferry", {"a": np.zeros(2)})
    with pytest.raises(ValueError, match="not a GGUF file"):
        ferry.open(tmp_path / "y.ferry").gguf_metadata()


def test_gguf_dequantized_torch_tensors(tmp_path):
    import torch
    rng = np.random.default_rng(3)
    blocks, values = q8_0_blocks(rng, 8)
    p = tmp_path / "t.gguf"
    ferry.save(p, {"w": blocks.reshape(1, -1)}, dtypes={"w": "q8_0"})
    t = ferry.load(p, framework="torch", dequantize=True)["w"]
    assert t.dtype == torch.float32 and t.shape == (1, 256)
    assert torch.equal(t.reshape(-1), torch.from_numpy(values))


@pytest.mark.parametrize("suffix", [".npz", ".gguf", ".safetensors"])
def test_more_tensors_than_the_kernel_has_mappings(tmp_path, suffix):
    # 70,000 tensors: a mapping per storage ran out of vm.max_map_count
    # (65,530) and ferry.load aborted; np.load reads the .npz as well.
    n = 70_000
    path = tmp_path / f"many{suffix}"
    ferry.save(path, {f"t{i}": np.array([i], np.float32) for i in range(n)})
    loaded = ferry.load(path)
    assert len(loaded) == n
    assert all(loaded[f"t{i}"][0] == i for i in range(0, n, 997))
    if suffix == ".npz":
        with np.load(path) as theirs:
            assert theirs[f"t{n - 1}"][0] == n - 1


def test_nested_gguf_arrays_only_when_asked(tmp_path):
    meta = {"t.nested": [[1, 2], [3]]}
    with pytest.raises(ferry.Error, match="t.nested.*array of arrays"):
        ferry.save(tmp_path / "n.gguf", {"a": np.zeros(32, np.float32)}, meta)
    ferry.save(tmp_path / "n.gguf", {"a": np.zeros(32, np.float32)}, meta, nested_arrays=True)
    got = ferry.open(tmp_path / "n.gguf").gguf_metadata()["t.nested"]
    assert [list(x) for x in got] == [[1, 2], [3]]


def test_empty_gguf_arrays_share_one_read_only_array(tmp_path):
    # An array of 1M empty u8 arrays (12 bytes each in the file) was 1M
    # numpy objects (1.19 GB for 5.5M of them); now one, read-only.
    import struct
    n = 1_000_000
    path = tmp_path / "empties.gguf"
    with open(path, "wb") as f:
        f.write(b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + struct.pack("<Q", 1) + b"a" + struct.pack("<IIQ", 9, 9, n))
        f.write(struct.pack("<IQ", 0, 0) * n)
    got = ferry.open(path).gguf_metadata()["a"]
    assert len(got) == n and got[0].dtype == np.uint8 and got[0].size == 0
    assert all(e is got[0] for e in got[:1000]) and got[-1] is got[0]
    assert not got[0].flags.writeable
