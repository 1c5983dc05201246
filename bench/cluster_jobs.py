"""Running the ranks of one job on the simulated cluster (scripts/netns-cluster).

Shared by bench/train_compare and bench/seed_experiments: each rank is a
process in its node's network namespace with the variables torchrun would
set; the first rank to fail, or the timeout, ends the run; the topology is
removed after each run. Rank 0's output is echoed to stderr with a prefix.
"""
import json
import os
import platform
import secrets
import shutil
import signal
import subprocess
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PYTHON = "/usr/bin/python3"  # Debian's, which has python3-torch
CLUSTER = os.path.join(ROOT, "scripts", "netns-cluster")


class Failure(Exception):
    pass


def parse_layouts(prog, text):
    """'1x1,2x2' -> [('1x1', 1, 1), ('2x2', 2, 2)]."""
    layouts = []
    for item in text.split(","):
        item = item.strip()
        try:
            n, p = (int(v) for v in item.split("x"))
        except ValueError:
            raise SystemExit(f"{prog}: layout '{item}' is not NODESxPROCS (e.g. 2x2)")
        if not (1 <= n <= 16 and 1 <= p <= 16):
            raise SystemExit(f"{prog}: layout '{item}' out of range (1..16 x 1..16)")
        layouts.append((item, n, p))
    return layouts


def cluster(prefix, *cmd):
    r = subprocess.run([CLUSTER, "--prefix", prefix, *cmd], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        raise Failure(f"scripts/netns-cluster {' '.join(cmd)}: {r.stderr.strip() or 'failed'}")
    return r.stdout.strip()


def kill_all(procs):
    """TERM every rank's process group, KILL what is left after 3 s."""
    for p in procs:
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
    deadline = time.monotonic() + 3
    for p in procs:
        try:
            p.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait()


def _tee(stream, log, prefix):
    with log:
        for line in iter(stream.readline, b""):
            log.write(line)
            log.flush()
            sys.stderr.write(prefix + line.decode(errors="replace"))
            sys.stderr.flush()


def run_ranks(cmd, *, tag, nodes, per_node, logdir, prefix, rate, port, threads, timeout,
              no_netns=False, env_extra=None):
    """Runs cmd as every rank of a nodes x per_node world; returns the bytes
    the nodes' links sent (every node's eth0 transmit counter after the run,
    headers included; None without namespaces). Raises Failure naming the
    first rank that failed and its log."""
    world = nodes * per_node
    if no_netns:
        master = "127.0.0.1"
    else:
        cluster(prefix, "up", "--nodes", str(nodes), "--rate", rate)
        master = cluster(prefix, "addr", "0")
    base_env = dict(os.environ, MASTER_ADDR=master, MASTER_PORT=str(port), WORLD_SIZE=str(world),
                    LOCAL_WORLD_SIZE=str(per_node), OMP_NUM_THREADS=str(threads),
                    FERRY_SECRET=secrets.token_hex(32), GLOO_SOCKET_IFNAME="lo" if no_netns else "eth0",
                    **(env_extra or {}))
    procs, tees = [], []
    start = time.monotonic()
    wire_bytes = None
    try:
        for rank in range(world):
            node, local = divmod(rank, per_node)
            env = dict(base_env, RANK=str(rank), LOCAL_RANK=str(local), GROUP_RANK=str(node))
            argv = cmd if no_netns else [CLUSTER, "--prefix", prefix, "exec", str(node), *cmd]
            log = open(os.path.join(logdir, f"{tag}-rank{rank}.log"), "wb")
            if rank == 0:  # rank 0's progress lines go to stderr too
                p = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=log,
                                     stderr=subprocess.PIPE, start_new_session=True)
                t = threading.Thread(target=_tee, args=(p.stderr, log, f"  [{tag}] "), daemon=True)
                t.start()
                tees.append(t)
            else:
                p = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=log,
                                     stderr=subprocess.STDOUT, start_new_session=True)
                log.close()
            procs.append(p)
        # Wait for all; the first rank to fail (or the timeout) ends the run.
        while True:
            codes = [p.poll() for p in procs]
            bad = [(r, c) for r, c in enumerate(codes) if c not in (None, 0)]
            if bad:
                rank, code = bad[0]
                what = f"signal {-code}" if code < 0 else f"status {code}"
                raise Failure(f"{tag}: rank {rank} exited with {what} "
                              f"(log: {os.path.join(logdir, f'{tag}-rank{rank}.log')})")
            if all(c == 0 for c in codes):
                break
            if time.monotonic() - start > timeout:
                raise Failure(f"{tag}: ranks still running after {timeout:.0f} s (logs: {logdir}/{tag}-rank*.log)")
            time.sleep(0.1)
        if not no_netns:
            wire_bytes = sum(int(cluster(prefix, "exec", str(n), "cat", "/sys/class/net/eth0/statistics/tx_bytes"))
                             for n in range(nodes))
    finally:
        kill_all(procs)
        for t in tees:
            t.join(timeout=2)
        if not no_netns:
            cluster(prefix, "down")
    return wire_bytes


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def machine():
    return {"cpu": cpu_model(), "cores": os.cpu_count(), "kernel": platform.release()}


def become_root_or_exit(prog, script, argv):
    """The namespaces need root: re-run under sudo when there is one."""
    if os.geteuid() == 0:
        return
    if shutil.which("sudo"):
        os.execvp("sudo", ["sudo", "--", PYTHON, os.path.abspath(script), *argv])
    sys.exit(f"{prog}: needs root for the network namespaces (or --no-netns)")


def unwind_on_signals():
    """SIGTERM (make killed, a CI timeout), SIGHUP and SIGINT unwind like
    Ctrl-C: ranks killed, topology removed."""
    def on_term(signum, frame):
        raise KeyboardInterrupt
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(sig, on_term)


def ignore_signals():
    """During the final teardown: a second Ctrl-C must not skip it."""
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)


def write_json(path, report):
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(report, f, indent=1)
        f.write("\n")
    os.replace(tmp, path)


def check_fashion_mnist(prog, data):
    for split in ("train", "t10k"):
        for kind in ("images-idx3", "labels-idx1"):
            path = os.path.join(data, f"{split}-{kind}-ubyte.gz")
            if not os.path.isfile(path):
                sys.exit(f"{prog}: no {path} (Debian package dataset-fashion-mnist, or --data DIR)")
