"""The Python module: round trips of every dtype, .pt files against
torch.load, sharing, ferry::libtorch interop, a ferry-train checkpoint in a
torch.nn model, and hostile files. Run by CTest (python_test), which sets
PYTHONPATH to the build's package and names the programs below."""
import gzip
import io
import json
import os
import pickle
import subprocess
import sys
import threading
import zipfile

import numpy as np
import pytest
import torch

import ferry
from conftest import program

SPECIAL_F32 = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -1e-40, 3.4e38], dtype=np.float32)
# A NaN with a payload and its sign bit set: survives every path bit for bit.
PAYLOAD_NAN = np.array([0xFFC12345], dtype=np.uint32).view(np.float32)


def every_numpy_dtype():
    rng = np.random.default_rng(7)
    return {
        "bool": np.array([True, False, True]),
        "u8": np.arange(0, 250, 7, dtype=np.uint8),
        "i8": np.arange(-100, 100, 9, dtype=np.int8),
        "u16": np.array([0, 1, 65535], dtype=np.uint16),
        "i16": np.arange(-30000, 30000, 1999, dtype=np.int16),
        "u32": np.array([0, 2**32 - 1], dtype=np.uint32),
        "i32": rng.integers(-2**31, 2**31, (3, 4), dtype=np.int32),
        "u64": np.array([0, 2**64 - 1], dtype=np.uint64),
        "i64": np.array([-2**63, -1, 0, 2**63 - 1], dtype=np.int64),
        "f16": np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 6e-8, 65504], dtype=np.float16),
        "f32": np.concatenate([SPECIAL_F32, PAYLOAD_NAN]),
        "f64": rng.standard_normal((2, 3)),
        "scalar": np.array(2.5),
        "empty": np.zeros((0, 3), dtype=np.float32),
    }


def same_bits(a, b):
    a, b = np.asarray(a), np.asarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and np.ascontiguousarray(a).tobytes() == np.ascontiguousarray(b).tobytes()


def torch_bits(t):
    """A torch tensor's elements as bytes, whatever its dtype."""
    t = t.detach().contiguous().reshape(-1)
    return (t if t.dtype == torch.bool else t.view(torch.uint8)).numpy().tobytes()


def test_torch_dtypes_of_this_release_round_trip(tmp_path):
    """Every dtype the running torch has that ferry carries (torch 2.x: the
    float8s, fnuz ones too, the wide unsigned types, complex32), saved from
    torch and loaded as torch, in both byte orders."""
    names = ["complex64", "complex128", "uint16", "uint32", "uint64", "float8_e4m3fn", "float8_e5m2",
             "float8_e4m3fnuz", "float8_e5m2fnuz", "complex32"]
    patterns = torch.arange(64, dtype=torch.int64) * 0x0101010101010101 + 0x0102030405060708
    want = {n: patterns.view(torch.uint8)[: 64 * 8].view(getattr(torch, n)) for n in names if hasattr(torch, n)}
    for order in ("little", "big"):
        path = tmp_path / f"{order}.ferry"
        ferry.save(path, want, order=order)
        got = ferry.load(path, framework="torch")
        for n, t in want.items():
            assert torch_same(got[n], t), n


def torch_same(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and a.stride() == b.stride() and torch_bits(a) == torch_bits(b)


@pytest.mark.parametrize("fmt,order", [("ferry", "little"), ("ferry", "big"), ("safetensors", None)])
def test_every_numpy_dtype_round_trips(tmp_path, fmt, order):
    want = every_numpy_dtype()
    path = tmp_path / f"x.{fmt}"
    ferry.save(path, want, {"note": "é", "epoch": 3}, order=order)
    got = ferry.load(path)
    assert sorted(got) == sorted(want)
    for name in want:
        assert same_bits(got[name], want[name]), name
        assert not got[name].flags.writeable
    with ferry.open(path) as ck:
        assert ck.format == fmt
        assert ck.metadata() == {"note": "é", "epoch": "3"}
        assert ck.info("i32")["dtype"] == "I32" and ck.info("i32")["shape"] == (3, 4)
        ck.verify()


def test_bits_of_dtypes_numpy_lacks_round_trip_with_dtypes(tmp_path):
    bf16 = torch.tensor(SPECIAL_F32).to(torch.bfloat16)
    ferry.save(tmp_path / "a.ferry", {"w": bf16, "f": torch.ones(2)})
    arrays = ferry.load(tmp_path / "a.ferry")
    with ferry.open(tmp_path / "a.ferry") as ck:
        kinds = {name: ck.info(name)["dtype"] for name in ck}
    assert kinds == {"w": "BF16", "f": "F32"}
    ferry.save(tmp_path / "b.ferry", arrays, dtypes={"w": kinds["w"]})
    again = ferry.load(tmp_path / "b.ferry", framework="torch")
    assert torch_same(again["w"], bf16)
    with pytest.raises(TypeError):
        ferry.save(tmp_path / "c.ferry", arrays, dtypes={"f": "BF16"})  # 4-byte elements
    with pytest.raises(KeyError):
        ferry.save(tmp_path / "c.ferry", arrays, dtypes={"missing": "BF16"})


def test_a_closed_checkpoint_says_so_and_options_carry_to_torch(tmp_path):
    path = os.path.join(os.environ["FERRY_TEST_DATA_DIR"], "pytorch", "golden_little.pt")
    ck = ferry.open(path, pytorch_order="big")  # no byteorder record: read as big
    as_big = ck.load(framework="torch")
    arrays = ferry.load(path, pytorch_order="big")
    for name, t in as_big.items():
        if t.dtype != torch.bfloat16:
            assert t.numpy().tobytes() == np.ascontiguousarray(arrays[name]).tobytes(), name
    little = ferry.load(path)
    assert any(not same_bits(little[n], arrays[n]) for n in little if little[n].dtype.itemsize > 1)
    ck.close()
    assert "closed" in repr(ck)
    with pytest.raises(ValueError, match="closed"):
        ck.keys()
    with pytest.raises(ValueError, match="closed"):
        ck.load(framework="torch")


def test_arrays_view_the_mapping_and_keep_it_alive(tmp_path):
    base = np.arange(100, dtype=np.float32)
    ferry.save(tmp_path / "v.ferry", {"base": base, "tail": base[10:], "odd": base[1::2]})
    got = ferry.load(tmp_path / "v.ferry")
    # Views of one base come back as views of one storage.
    assert np.shares_memory(got["base"], got["tail"]) and np.shares_memory(got["base"], got["odd"])
    assert got["odd"].strides == (8,)
    with ferry.open(tmp_path / "v.ferry") as ck:
        assert ck.info("tail")["offset"] == 10 and sorted(ck.info("base")["shared_with"]) == ["odd", "tail"]
    tail = got.pop("tail")
    del got
    os.remove(tmp_path / "v.ferry")  # the mapping outlives the name and the dict
    assert same_bits(tail, base[10:])


def test_torch_round_trip_keeps_dtypes_views_and_sharing(tmp_path):
    torch.manual_seed(0)
    emb = torch.nn.Parameter(torch.randn(10, 4))
    grid = torch.arange(60, dtype=torch.float32).view(6, 10)
    want = {
        "embed.weight": emb, "out.weight": emb,  # tied
        "bf16": torch.tensor(SPECIAL_F32).to(torch.bfloat16),
        "f16": torch.tensor(SPECIAL_F32).to(torch.float16),
        "nan": torch.from_numpy(PAYLOAD_NAN.copy()),
        "bool": torch.tensor([True, False]), "u8": torch.arange(5, dtype=torch.uint8),
        "i8": torch.tensor([-128, 127], dtype=torch.int8), "i16": torch.tensor([-3, 3], dtype=torch.int16),
        "i32": torch.tensor([2**31 - 1], dtype=torch.int32), "i64": torch.tensor([-2**63], dtype=torch.int64),
        "f64": torch.randn(3, dtype=torch.float64), "scalar": torch.tensor(1.5),
        "grid": grid, "row": grid[2], "transposed": grid.t(), "block": grid[1:4, 2:7],
    }
    ferry.save(tmp_path / "t.ferry", want)
    got = ferry.load(tmp_path / "t.ferry", framework="torch")
    for name, t in want.items():
        assert torch_same(got[name], t), name
        assert got[name].storage_offset() == t.storage_offset(), name
    assert got["embed.weight"].data_ptr() == got["out.weight"].data_ptr()
    assert got["row"].storage().data_ptr() == got["grid"].storage().data_ptr()
    # Writable, privately: the file does not change.
    got["grid"][0, 0] = 1234.0
    assert got["transposed"][0, 0] == 1234.0
    assert ferry.load(tmp_path / "t.ferry", framework="torch")["grid"][0, 0] == 0.0


def test_pt_files_read_as_torch_load_reads_them(tmp_path):
    torch.manual_seed(1)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.BatchNorm1d(8), torch.nn.Linear(8, 8))
    model[2].weight = model[0].weight  # tied
    state = dict(model.state_dict())
    state["half"] = torch.randn(3).to(torch.bfloat16)
    state["view"] = state["0.weight"][2:, 1::2]
    state["config"] = {"lr": 0.1, "name": "run"}
    torch.save(state, tmp_path / "m.pt")
    want = torch.load(tmp_path / "m.pt")
    got = ferry.load(tmp_path / "m.pt", framework="torch")
    tensors = {k: v for k, v in want.items() if isinstance(v, torch.Tensor)}
    assert sorted(got) == sorted(tensors)
    for name, t in tensors.items():
        assert torch_same(got[name], t), name
    assert got["0.weight"].data_ptr() == got["2.weight"].data_ptr()
    assert got["view"].storage().data_ptr() == got["0.weight"].storage().data_ptr()
    arrays = ferry.load(tmp_path / "m.pt")
    assert arrays["half"].dtype == np.uint16
    assert arrays["half"].tobytes() == torch_bits(want["half"])
    with ferry.open(tmp_path / "m.pt") as ck:
        assert ck.format == "pytorch"
        assert json.loads(ck.metadata()["config.lr"]) == 0.1
        # torch.save writes the byteorder record since 2.1.
        assert ck.metadata()["pytorch.byteorder"] == ("absent" if torch.__version__ < "2.1" else "little")
        ck.verify()
    # And on to .ferry and .safetensors.
    ferry.save(tmp_path / "m.ferry", got)
    ferry.save(tmp_path / "m.safetensors", got, shared="copy")
    for other in ("m.ferry", "m.safetensors"):
        again = ferry.load(tmp_path / other, framework="torch")
        for name, t in tensors.items():
            assert torch_bits(again[name]) == torch_bits(t), (other, name)


def test_save_pt_is_what_torch_load_weights_only_reads(tmp_path):
    # A model's state dict with tied weights and views, from torch and
    # from numpy, saved by ferry as .pt: torch.load(weights_only=True), the
    # safe load, reads the same bits, views and sharing.
    torch.manual_seed(2)
    model = torch.nn.Sequential(torch.nn.Linear(6, 6), torch.nn.BatchNorm1d(6), torch.nn.Linear(6, 6))
    model[2].weight = model[0].weight  # tied
    state = dict(model.state_dict())
    state["half"] = torch.tensor([0.0, -0.0, float("nan"), float("-inf"), 1e-40], dtype=torch.float32).to(torch.bfloat16)
    state["view"] = state["0.weight"][2:, 1::2]
    state["scalar"] = torch.tensor(3.5, dtype=torch.float64)
    state["complex"] = torch.tensor([1 + 2j, -0.0 - 3j], dtype=torch.complex64)
    state["empty"] = torch.empty(0, 3)
    state["tail"] = torch.arange(70010, dtype=torch.int16)[70000:]  # offset 70000: a 4-byte pickle int
    if hasattr(torch, "float8_e4m3fn"):  # torch 2.x
        state["f8"] = torch.arange(256, dtype=torch.int32).to(torch.uint8).view(torch.float8_e4m3fn)
        state["u16"] = torch.tensor([0, 1, 0xFFFF], dtype=torch.int32).to(torch.uint16)
    ferry.save(tmp_path / "m.pt", state)
    got = torch.load(tmp_path / "m.pt", weights_only=True)
    assert list(got) == list(state)
    for name, t in state.items():
        assert got[name].dtype == t.dtype, name
        assert got[name].shape == t.shape and got[name].stride() == t.stride(), name
        assert got[name].storage_offset() == t.storage_offset(), name
        assert torch_bits(got[name]) == torch_bits(t), name
    assert got["0.weight"].data_ptr() == got["2.weight"].data_ptr()
    assert got["view"].storage().data_ptr() == got["0.weight"].storage().data_ptr()
    model.load_state_dict({k: v for k, v in got.items() if k in model.state_dict()})
    # numpy arrays, and ferry's own reading of its file.
    ferry.save(tmp_path / "a.pth", {"x": np.arange(6, dtype=">i4").reshape(2, 3)})
    assert torch.equal(torch.load(tmp_path / "a.pth", weights_only=True)["x"], torch.arange(6, dtype=torch.int32).reshape(2, 3))
    assert sorted(ferry.load(tmp_path / "m.pt")) == sorted(state)
    with pytest.raises(ferry.Error, match="little-endian only"):
        ferry.save(tmp_path / "b.pt", state, order="big")
    with pytest.raises(ValueError, match="no metadata"):
        ferry.save(tmp_path / "c.pt", state, metadata={"k": "v"})


def test_golden_big_endian_pt_reads_as_the_little_one():
    data = os.path.join(os.environ["FERRY_TEST_DATA_DIR"], "pytorch")
    little = ferry.load(os.path.join(data, "golden_little.pt"))
    big = ferry.load(os.path.join(data, "golden_big.pt"))
    assert list(little) == list(big)
    for name in little:
        assert same_bits(little[name], big[name]), name


@pytest.mark.torch_cpp
def test_tied_weights_cross_to_cpp_and_back(tmp_path):
    tied = program("FERRY_TORCH_TIED")
    emb = torch.randn(20, 6)
    ferry.save(tmp_path / "py.ferry", {"embed.weight": emb, "decoder.weight": emb, "bias": torch.zeros(20)})
    subprocess.run([tied, tmp_path / "py.ferry", tmp_path / "cpp.ferry", "embed.weight", "decoder.weight"], check=True)
    got = ferry.load(tmp_path / "cpp.ferry", framework="torch")
    assert got["embed.weight"].data_ptr() == got["decoder.weight"].data_ptr()
    assert torch.equal(got["decoder.weight"], emb)


def read_idx(path):
    with gzip.open(path) as f:
        data = f.read()
    dims = data[3]
    shape = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(dims)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)


@pytest.mark.trainer
def test_ferry_train_checkpoint_reaches_its_test_accuracy_in_torch_nn(tmp_path):
    ck, metrics = tmp_path / "ck.ferry", tmp_path / "metrics.jsonl"
    subprocess.run([program("FERRY_RUN"), "-n", "1", program("FERRY_TRAIN"), "--limit", "3000",
                    "--test-limit", "1000", "--epochs", "2", "--threads", "1", "--hidden", "32,16",
                    "--checkpoint", ck, "--metrics", metrics, "--progress", "plain"],
                   check=True, stdout=subprocess.DEVNULL)
    epochs = [json.loads(line) for line in open(metrics) if '"epoch"' in line]
    test_acc = [e for e in epochs if e.get("kind") == "epoch"][-1]["test_acc"]

    class Mlp(torch.nn.Module):  # train/model.h's mlp_impl
        def __init__(self):
            super().__init__()
            self.fc1, self.bn1 = torch.nn.Linear(784, 32), torch.nn.BatchNorm1d(32)
            self.fc2, self.bn2 = torch.nn.Linear(32, 16), torch.nn.BatchNorm1d(16)
            self.out = torch.nn.Linear(16, 10)

        def forward(self, x):
            x = torch.relu(self.bn1(self.fc1(x)))
            return self.out(torch.relu(self.bn2(self.fc2(x))))

    model = Mlp()
    weights = ferry.load(ck, framework="torch")
    model.load_state_dict({k: weights[k] for k in model.state_dict()})
    model.eval()
    images = read_idx("/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz")[:1000]
    labels = read_idx("/usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz")[:1000]
    x = torch.from_numpy(images.reshape(1000, 784).astype(np.float32) / np.float32(255))
    with torch.no_grad():
        acc = (model(x).argmax(1) == torch.from_numpy(labels.astype(np.int64))).float().mean().item()
    assert test_acc > 0.5
    assert abs(acc - test_acc) <= 0.002, (acc, test_acc)  # one sample in 1000 may round the other way


def evil_pickle(tmp_path):
    class Evil:
        def __reduce__(self):
            return (os.system, ("echo ferry-was-pwned",))

    path = tmp_path / "evil.pt"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("evil/data.pkl", pickle.dumps({"w": Evil()}, protocol=2))
        z.writestr("evil/version", "3\n")
    return path


def test_hostile_files_raise_ferry_error(tmp_path):
    with pytest.raises(ferry.Error) as e:
        ferry.load(evil_pickle(tmp_path))
    assert e.value.name == "pickle_forbidden_global"
    assert e.value.code == 418
    assert "global 'posix.system': not on the allowed list" in str(e.value)
    assert "evil.pt" in e.value.context

    (tmp_path / "junk.pt").write_bytes(b"PK\x03\x04" + b"\0" * 100)
    with pytest.raises(ferry.Error):
        ferry.load(tmp_path / "junk.pt")
    with pytest.raises(FileNotFoundError):
        ferry.load(tmp_path / "missing.ferry")
    with pytest.raises(ferry.Error) as e:
        tied = torch.zeros(4)
        ferry.save(tmp_path / "s.safetensors", {"a": tied, "b": tied[:2]})
    assert e.value.name == "shared_storage"


def test_one_error_family():
    # ferry.Error: code, name, context; CommError adds the rank at fault.
    assert issubclass(ferry.CommError, ferry.Error) and issubclass(ferry.CommError, RuntimeError)
    e = ferry.CommError("rank 2: link from rank 1: peer's connection closed or reset", 304, "peer_lost",
                        "rank 2: link from rank 1", 1)
    assert (e.code, e.name, e.context, e.peer) == (304, "peer_lost", "rank 2: link from rank 1", 1)
    assert ferry.CommError("m", 305, "timed_out", "c").peer is None
    assert "CommError" in ferry.__all__ and "Error" in ferry.__all__


def test_names_from_a_file_reach_an_error_as_one_printable_line(tmp_path):
    # A real torch.save whose tensor name could forge a line or drive the
    # terminal; its storage corrupted, so verify() names it.
    name = "w\nferry: model.pt: ok, 3 tensors\x1b[2K\x1b[1A\r"
    torch.save({name: torch.arange(64, dtype=torch.float32)}, tmp_path / "m.pt")
    data = bytearray((tmp_path / "m.pt").read_bytes())
    data[data.find(torch.arange(64, dtype=torch.float32).numpy().tobytes()) + 9] ^= 1
    (tmp_path / "m.pt").write_bytes(data)
    with pytest.raises(ferry.Error) as e:
        ferry.open(tmp_path / "m.pt").verify()
    text = str(e.value)
    assert e.value.name == "crc32_mismatch"
    assert not any(ord(c) < 0x20 or ord(c) == 0x7F for c in text), repr(text)
    assert "tensor 'w\\nferry: model.pt: ok, 3 tensors\\x1b[2K\\x1b[1A\\r'" in e.value.context, e.value.context


def test_files_without_tensors_load_as_metadata(tmp_path):
    torch.save(torch.nn.ReLU().state_dict(), tmp_path / "empty.pt")
    assert ferry.load(tmp_path / "empty.pt", "torch") == {}
    torch.save([1, 2.5, "x"], tmp_path / "list.pt")
    with ferry.open(tmp_path / "list.pt") as f:
        assert len(f) == 0
        assert f.metadata()["root"] == '[1,2.5,"x"]'


def test_every_flipped_byte_is_an_error_or_a_value(tmp_path):
    ferry.save(tmp_path / "ok.ferry", {"a": np.arange(6, dtype=np.float32).reshape(2, 3), "b": np.array([1, 2])})
    torch.save({"a": torch.arange(6.0).view(2, 3), "n": 3}, tmp_path / "ok.pt")
    for name in ("ok.ferry", "ok.pt"):
        data = (tmp_path / name).read_bytes()
        for i in range(len(data)):
            bad = bytearray(data)
            bad[i] ^= 0xFF
            (tmp_path / "bad").write_bytes(bad)
            try:
                ferry.load(tmp_path / "bad")
                ferry.open(tmp_path / "bad").verify()
            except ferry.Error as e:
                assert e.name and str(e)


def test_checksums_catch_changed_data(tmp_path):
    ferry.save(tmp_path / "c.ferry", {"a": np.arange(1000, dtype=np.float32)})
    data = bytearray((tmp_path / "c.ferry").read_bytes())
    at = data.find(np.arange(1000, dtype=np.float32).tobytes())
    data[at + 40] ^= 1
    (tmp_path / "c.ferry").write_bytes(data)
    with pytest.raises(ferry.Error) as e:
        ferry.load(tmp_path / "c.ferry")
    assert e.value.name == "checksum_mismatch"


def test_loading_releases_the_gil(tmp_path):
    # The main thread counts while another runs verify(): with the GIL held
    # through the call it could not count at all during one. Progress, not
    # time, so a loaded machine slows it without failing it.
    ferry.save(tmp_path / "big.ferry", {"a": np.zeros(256 << 20, dtype=np.uint8)})
    ck = ferry.open(tmp_path / "big.ferry")
    count, during, done = [0], [], threading.Event()

    def work():
        for _ in range(4):
            before = count[0]
            ck.verify()
            during.append(count[0] - before)
        done.set()

    thread = threading.Thread(target=work)
    thread.start()
    while not done.is_set():
        count[0] += 1
    thread.join()
    assert max(during) > 0, during


def test_dtype_table_comes_from_the_extension():
    table = ferry._ferry.dtypes
    assert list(table) == ["BOOL", "U8", "I8", "U16", "I16", "U32", "I32", "U64", "I64", "F16", "BF16", "F32",
                           "F64", "F8_E4M3", "F8_E5M2", "F8_E4M3FNUZ", "F8_E5M2FNUZ", "C32", "C64",
                           "C128"]  # code order
    assert [d["code"] for d in table.values()] == list(range(1, 21))
    for name, d in table.items():
        assert np.dtype(d["numpy"]).itemsize == d["bytes"], name
        if hasattr(torch, d["torch"]):  # the float8s and wide unsigned types came in later torch releases
            assert torch.empty(0, dtype=getattr(torch, d["torch"])).element_size() == d["bytes"], name
    assert ferry._NUMPY_DTYPES["u2"] == "U16" and ferry._NUMPY_DTYPES["b1"] == "BOOL"
    assert ferry._NUMPY_DTYPES["c8"] == "C64" and ferry._NUMPY_DTYPES["c16"] == "C128"
    assert {n for n, d in table.items() if d["numpy_bits"]} == {"BF16", "F8_E4M3", "F8_E5M2", "F8_E4M3FNUZ",
                                                                "F8_E5M2FNUZ", "C32"}


def test_info_names_the_cpu_features_and_kernels():
    info = ferry.info()
    assert info["version"].count(".") == 2
    enabled = info["enabled_cpu_features"]
    assert enabled == "none (portable paths)" or set(enabled.split()) <= set(info["cpu_features"].split()), info
    assert {"byte_swap", "crc32c"} <= set(info["kernels"]), info
    assert all(info["kernels"].values()), info


def run_python_with_cpu_features(value, code):
    env = dict(os.environ, FERRY_CPU_FEATURES=value)
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)


def test_ferry_cpu_features_narrows_and_refuses_unknown_names():
    r = run_python_with_cpu_features("none", "import ferry, json; print(json.dumps(ferry.info()))")
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout)
    assert info["enabled_cpu_features"] == "none (portable paths)"
    assert info["kernels"]["byte_swap"] == "scalar" and info["kernels"]["crc32c"] == "table", info
    r = run_python_with_cpu_features("avx9", "import ferry\ntry:\n    ferry.info()\nexcept ferry.Error as e:\n"
                                     "    print(e.context)")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("FERRY_CPU_FEATURES: unknown CPU feature 'avx9'"), r.stdout
