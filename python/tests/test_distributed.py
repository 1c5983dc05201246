"""ferry.distributed, the torch.distributed backend "ferry": collectives,
DDP against gloo, the compression hooks, and failures (a killed rank, a
configuration that differs, a missing secret), each rank a separate
python3 (this interpreter) started with torchrun's variables set by hand,
or by ferry-run."""
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time

import pytest
import torch
import torch.distributed as dist

import ferry
from conftest import program

pytestmark = pytest.mark.distributed
HERE = os.path.dirname(os.path.abspath(__file__))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(script, world, args=(), env_of=lambda rank: {}):
    """Starts `world` ranks of `script` with torchrun's variables set by hand."""
    port = str(free_port())
    ranks = []
    for rank in range(world):
        # USE_LIBUV=0: torch 2.x's TCPStore (gloo's env://) asks for libuv,
        # which Debian's torch 2.6 is built without; ferry-run sets it too.
        env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=port, RANK=str(rank), WORLD_SIZE=str(world),
                   LOCAL_RANK=str(rank), FERRY_SECRET="test secret", OMP_NUM_THREADS="1", USE_LIBUV="0")
        for name, value in env_of(rank).items():
            if value is None:
                env.pop(name, None)
            else:
                env[name] = value
        ranks.append(subprocess.Popen([sys.executable, os.path.join(HERE, script), *args], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    return ranks


def finish(ranks, timeout=120):
    """Each rank's (exit code, stdout, stderr)."""
    results = []
    for p in ranks:
        try:
            out, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            for q in ranks:
                q.kill()
            raise
        results.append((p.returncode, out, err))
    return results


def run_ok(script, world, args=(), env_of=lambda rank: {}):
    results = finish(start(script, world, args, env_of))
    # Every failed rank's own words: the first to fail is often not rank 0
    # (a sanitizer report ends rank 1, and rank 0 only sees a lost peer).
    failed = [f"rank {rank} exited {code}:\n{err[-30000:]}"
              for rank, (code, out, err) in enumerate(results) if code != 0]
    assert not failed, "\n".join(failed)
    return results


def test_every_collective_and_dtype_on_three_ranks():
    for code, out, err in run_ok("collectives_rank.py", 3):
        assert out.strip().endswith("ok")


def test_a_world_of_one_completes_each_collective_at_once():
    for code, out, err in run_ok("world_of_one_rank.py", 1):
        assert out.strip() == "ok"


def ddp(tmp_path, world, *args, name="run"):
    out = tmp_path / f"{name}.json"
    run_ok("ddp_rank.py", world, ["--out", str(out), *args])
    return json.loads(out.read_text())


def test_ddp_on_ferry_agrees_bit_for_bit_across_ranks_and_with_gloo(tmp_path):
    # --check: every bucket's allreduced gradients have one CRC32C on every
    # rank, every step (the rank exits 2 otherwise), and so do the final
    # parameters.
    ferry = ddp(tmp_path, 3, "--backend", "ferry", "--steps", "50", "--check", name="ferry")
    gloo = ddp(tmp_path, 3, "--backend", "gloo", "--steps", "50", name="gloo")
    assert len(ferry["losses"]) == 50
    # The same job: only the order of the sums' additions differs. Adam's
    # normalised steps carry that into the last digits, and a little further
    # for a parameter whose gradient is near zero (its step's sign may flip).
    diff = (torch.tensor(ferry["params"]) - torch.tensor(gloo["params"])).abs()
    assert diff.mean() < 1e-5 and (diff > 1e-4).float().mean() < 0.01, (diff.mean(), diff.max())
    assert ferry["losses"][-1] == pytest.approx(gloo["losses"][-1], rel=1e-3)


@pytest.fixture(scope="module")
def uncompressed(tmp_path_factory):
    # The baseline takes the hooks' own path uncompressed: only the rounding
    # differs. One run for both hooks' tests.
    return ddp(tmp_path_factory.mktemp("f32"), 2, "--steps", "50", "--hook", "f32", name="plain")


@pytest.mark.parametrize("hook", ["bf16", "fp16"])
def test_compression_hooks_agree_across_ranks_and_track_f32(tmp_path, hook, uncompressed):
    packed = ddp(tmp_path, 2, "--steps", "50", "--hook", hook, "--check", name=hook)
    assert packed["hook"] == hook
    # Error feedback keeps the compressed run close to the f32 one.
    assert packed["losses"][-1] == pytest.approx(uncompressed["losses"][-1], abs=0.02)
    assert torch.allclose(torch.tensor(packed["params"]), torch.tensor(uncompressed["params"]), atol=0.01)
    assert packed["param_crc32c"] != uncompressed["param_crc32c"]  # the hook did change what was sent


@pytest.mark.trainer
def test_ddp_under_ferry_run(tmp_path):
    out = tmp_path / "run.json"
    env = dict(os.environ)
    env.pop("FERRY_SECRET", None)  # ferry-run makes one up on a single node
    r = subprocess.run([program("FERRY_RUN"), "-n", "2", sys.executable, os.path.join(HERE, "ddp_rank.py"),
                        "--steps", "20", "--check", "--out", str(out)], env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr[-30000:]
    assert len(json.loads(out.read_text())["losses"]) == 20


def test_slurm_variables_stand_in_for_rank_and_world_size(tmp_path):
    out = tmp_path / "slurm.json"
    run_ok("ddp_rank.py", 2, ["--steps", "3", "--out", str(out)],
           env_of=lambda rank: {"RANK": None, "WORLD_SIZE": None, "SLURM_PROCID": str(rank), "SLURM_NTASKS": "2"})
    assert json.loads(out.read_text())["world"] == 2


def test_leaving_with_collectives_in_flight_exits_cleanly():
    # The interpreter must not finalise under a worker that still needs the
    # GIL (it used to abort: "terminate called without an active exception").
    for _ in range(4):
        run_ok("ddp_rank.py", 2, ["--steps", "3", "--hook", "bf16", "--leave"])


def start_and_signal(sig, args, step, env_of=lambda rank: {}):
    """Three ranks of ddp_rank.py; once rank 1 printed "step STEP", it gets
    `sig`. Returns the ranks and the monotonic time of the signal."""
    ranks = start("ddp_rank.py", 3, ["--steps", "1000000", *args], env_of)
    for line in ranks[1].stdout:
        if line.strip() == f"step {step}":
            break
    ranks[1].send_signal(sig)
    return ranks, time.monotonic()


@pytest.mark.parametrize("mode", ["ddp", "plain"])
def test_a_killed_rank_is_named_by_every_other_within_5_s(mode):
    # A collective's Work raises ferry.distributed.CommError (DDP's forward
    # broadcasts buffers through one); DDP's backward raises RuntimeError
    # with the collective's text.
    errors = ("RuntimeError", "CommError") if mode == "ddp" else ("CommError",)
    ranks, killed = start_and_signal(signal.SIGKILL, ["--plain"] if mode == "plain" else [], 30)
    try:
        for rank in (0, 2):
            _, err = ranks[rank].communicate(timeout=30)
            took = time.monotonic() - killed
            assert ranks[rank].returncode == 1, err[-2000:]
            line = err.strip().splitlines()[-1]
            assert any(line.startswith(f"rank {rank}: error: {e}: ") for e in errors) and "rank 1" in line, line
            if mode == "plain":  # a CommError: ferry.Error's code and name, and the rank at fault as .peer
                info = [l for l in err.splitlines() if l.startswith(f"rank {rank}: ferry error: ")]
                assert info and re.fullmatch(rf"rank {rank}: ferry error: code 3\d\d \w+ peer 1", info[-1]), info
                if hasattr(dist.Work, "get_future_result"):  # torch >= 2.6: WorkResult COMM_ERROR
                    assert [l for l in err.splitlines() if "work result" in l] == [f"rank {rank}: work result 2"], \
                        err[-2000:]
            assert took < 5, f"rank {rank} took {took:.1f} s to fail: {line}"
            print(f"{mode}: rank {rank} failed {took:.2f} s after rank 1 was killed: {line}")
    finally:
        for p in ranks:
            p.kill()
            p.wait()


def test_a_silent_rank_is_named_after_ferry_timeout():
    ranks, stopped = start_and_signal(signal.SIGSTOP, ["--plain"], 20, env_of=lambda rank: {"FERRY_TIMEOUT": "2"})
    try:
        lines = []
        for rank in (0, 2):
            _, err = ranks[rank].communicate(timeout=60)
            took = time.monotonic() - stopped
            lines.append(err.strip().splitlines()[-1])
            assert ranks[rank].returncode == 1 and "no progress" in lines[-1], lines[-1]
            if hasattr(dist.Work, "get_future_result"):  # torch >= 2.6: WorkResult TIMEOUT
                assert [l for l in err.splitlines() if "work result" in l] == [f"rank {rank}: work result 1"], \
                    err[-2000:]
            assert took < 2 + 5, f"rank {rank} took {took:.1f} s to fail: {lines[-1]}"
        # Rank 1's successor names it; rank 0 may name the neighbour it waited on.
        assert "waiting for rank 1" in lines[1], lines
    finally:
        for p in ranks:
            p.kill()
            p.wait()


def failure_lines(results):
    return [err.strip().splitlines()[-1] if err.strip() else "" for _, _, err in results]


def test_a_configuration_that_differs_is_named():
    results = finish(start("ddp_rank.py", 2, ["--steps", "5"],
                           env_of=lambda rank: {"FERRY_AUTH": "frames"} if rank == 1 else {}))
    lines = failure_lines(results)
    assert all(code != 0 for code, _, _ in results), lines
    assert any("rank 1" in l and "auth" in l.lower() for l in lines), lines


def test_a_rank_without_the_secret_is_refused():
    # Rank 0 refuses the stranger and waits for a rank 1 that never comes:
    # it ends at its timeout (kept short, but long enough for both ranks to
    # import torch on a loaded machine), rank 1 at once.
    results = finish(start("ddp_rank.py", 2, ["--steps", "5", "--timeout", "15"],
                           env_of=lambda rank: {"FERRY_SECRET": "another secret"} if rank == 1 else {}))
    lines = failure_lines(results)
    assert all(code != 0 for code, _, _ in results), lines
    assert any("secret" in l for l in lines), lines


def test_no_secret_is_one_clear_error():
    env = {"FERRY_SECRET": ""}
    results = finish(start("ddp_rank.py", 2, ["--steps", "5", "--timeout", "10"], env_of=lambda rank: env))
    lines = failure_lines(results)
    assert all("FERRY_SECRET" in l for l in lines), lines
    # A configuration error is a ferry.Error (not a CommError, not torch's RuntimeError): bad_config.
    assert all(l.startswith(f"rank {r}: error: Error: ") for r, l in enumerate(lines)), lines
    for r, (_, _, err) in enumerate(results):
        assert f"rank {r}: ferry error: code 308 bad_config peer -" in err, err[-2000:]


# The mixed ring: an x86-64 rank (this interpreter's), an aarch64 and an
# s390x one (FERRY_MIXED_PYTHON runs their Python under qemu-user, with the
# package of the tree FERRY_MIXED_TREE_PREFIX<arch>: scripts/qemu-python and
# the cross trees on torch 1.13, scripts/debian13-python and the
# torch26-<arch> trees on torch 2.6). CTest's python_mixed_test runs these
# (label cross); python_test leaves them out.
MIXED = ["native", "aarch64", "s390x"]


def start_mixed(args, archs=MIXED):
    """Starts the ranks under qemu first and the x86-64 one once they have
    imported torch (a minute each on torch 2.6), so that --timeout times
    the rendezvous alone. (Reading their first line before finish()'s
    communicate() is safe: they print nothing more until the x86-64 rank
    joins the rendezvous.)"""
    qemu_python = program("FERRY_MIXED_PYTHON")
    tree_prefix = program("FERRY_MIXED_TREE_PREFIX")
    port = str(free_port())
    ranks = {}
    try:
        for rank, arch in sorted(enumerate(archs), key=lambda ra: ra[1] == "native"):
            env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=port, RANK=str(rank),
                       WORLD_SIZE=str(len(archs)), FERRY_SECRET="test secret", OMP_NUM_THREADS="1", USE_LIBUV="0")
            if arch == "native":
                command = [sys.executable]
                for r, p in ranks.items():
                    line = p.stdout.readline().strip()
                    if line != "imported":
                        p.kill()
                        raise AssertionError(f"the {archs[r]} rank said {line!r}: {p.communicate()[1][-3000:]}")
            else:
                command = [qemu_python, arch]
                env["FERRY_CROSS_BUILD_DIR"] = tree_prefix + arch
            ranks[rank] = subprocess.Popen([*command, os.path.join(HERE, "ddp_rank.py"), *args], env=env,
                                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    except BaseException:
        for p in ranks.values():
            p.kill()
            p.wait()
        raise
    return [ranks[r] for r in range(len(archs))]


# Both trainings, torch's allreduce hook and ferry's bf16 one, in one job:
# each rank under qemu pays for `import torch` once (about 10 CPU-s on
# torch 1.13, 70 on 2.6).
@pytest.mark.mixed
def test_mixed_architectures_train_with_bit_identical_buckets(tmp_path):
    out = tmp_path / "mixed.json"
    results = finish(start_mixed(["--steps", "50", "--check", "--hook", "none", "--hook", "bf16", "--out", str(out)]),
                     timeout=360)
    for arch, (code, _, err) in zip(MIXED, results):
        assert code == 0, f"the {arch} rank exited {code}:\n{err[-30000:]}"
    summaries = json.loads(out.read_text())
    assert [s["hook"] for s in summaries] == ["none", "bf16"]
    for summary in summaries:
        assert summary["world"] == 3 and len(summary["losses"]) == 50
        print(f"mixed ring x86-64 + aarch64 + s390x, hook {summary['hook']}: 50 steps in {summary['seconds']:.1f} s, "
              f"every bucket bit-identical")


# An x86-64 and an s390x rank: byte orders that differ are what Gloo
# cannot join.
@pytest.mark.mixed
def test_gloo_cannot_form_the_mixed_ring():
    archs = ["native", "s390x"]
    results = finish(start_mixed(["--backend", "gloo", "--timeout", "15", "--steps", "5"], archs), timeout=240)
    lines = failure_lines(results)
    for arch, (code, _, _), line in zip(archs, results, lines):
        print(f"gloo, {arch} rank: exit {code}: {line}")
    assert all(code != 0 for code, _, _ in results), lines
    assert all(line.startswith(f"rank {r}: error: ") for r, line in enumerate(lines)), lines


def test_every_error_of_the_backend_is_one_of_ferrys_family(monkeypatch):
    import ferry.distributed as fd

    # One class each, whichever extension raises it (_ferry or _distributed).
    assert fd.CommError is ferry.CommError and fd._distributed.CommError is ferry.CommError
    assert fd.Error is ferry.Error and fd._distributed.Error is ferry.Error
    assert issubclass(ferry.CommError, ferry.Error) and issubclass(ferry.CommError, RuntimeError)
    assert not issubclass(ferry.Error, RuntimeError)
    assert fd._distributed.comm_codes["bad_config"][0] == 308
    # Configuration: a rank outside the world, no secret.
    with pytest.raises(ferry.Error) as e:
        fd._distributed.check_environment(3, 2)
    assert type(e.value) is ferry.Error and (e.value.code, e.value.name) == (308, "bad_config"), e.value
    assert "rank 3 of a world of 2" in e.value.context and str(e.value).startswith(e.value.context)
    monkeypatch.setenv("FERRY_SECRET", "")
    monkeypatch.delenv("FERRY_SECRET_FILE", raising=False)
    with pytest.raises(ferry.Error) as e:
        fd._distributed.check_environment(0, 2)
    assert e.value.name == "bad_config" and "FERRY_SECRET" in e.value.context, e.value
    monkeypatch.delenv("RANK", raising=False)
    with pytest.raises(ferry.Error) as e:  # init_process_group's env:// rendezvous without RANK
        torch.distributed.init_process_group("ferry")
    assert e.value.name == "bad_config" and "RANK is not set" in e.value.context, e.value
    # A call the backend does not support.
    with pytest.raises(ferry.Error) as e:
        fd._distributed.crc32c(torch.zeros(4).to_sparse())
    assert (e.value.code, e.value.name) == (312, "unsupported"), e.value


def test_the_rendezvous_store_serves_every_op_and_survives_hostile_clients():
    from datetime import timedelta
    import struct
    from ferry import _store

    port = free_port()
    master = _store.Store("127.0.0.1", port, True, timedelta(seconds=5))
    other = _store.Store("127.0.0.1", port, False, timedelta(seconds=5))
    master.set("a", b"\x00\xff")
    assert other.get("a") == b"\x00\xff"
    assert other.add("n", 5) == 5 and master.add("n", -2) == 3
    assert master.check(["a", "n"]) and not master.check(["a", "missing"])
    assert other.compare_set("c", b"", b"first") == b"first"
    assert other.compare_set("c", b"wrong", b"second") == b"first"
    assert master.num_keys() == 3
    assert master.delete_key("c") and not master.delete_key("c")
    with pytest.raises(ferry.CommError, match="did not get late within") as e:  # and so a RuntimeError, as torch's
        other.wait(["late"], timedelta(milliseconds=200))
    assert isinstance(e.value, RuntimeError) and (e.value.code, e.value.name, e.value.peer) == (305, "timed_out", None)
    # Garbage, a count over the limit, a field over the limit, a short
    # message: each closes that connection only.
    for junk in [b"\x09" + struct.pack(">I", 0), b"\x01" + struct.pack(">I", 5000),
                 b"\x01" + struct.pack(">II", 1, (64 << 20) + 1), b"\x01\x00"]:
        with socket.create_connection(("127.0.0.1", port)) as s:
            s.sendall(junk)
            s.shutdown(socket.SHUT_WR)
            s.settimeout(5)
            reply = s.recv(100)
            assert reply in (b"", bytes([_store.ERROR]) + struct.pack(">I", 11) + b"bad request"), reply
    assert other.get("a") == b"\x00\xff"
