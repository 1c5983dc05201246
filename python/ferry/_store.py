"""The key-value store ferry.distributed rendezvouses through: a
torch.distributed Store whose wire format has one byte order (big-endian),
so that ranks of any byte order share it. torch's TCPStore sends its
integers in the host's order: a big-endian rank cannot use a little-endian
master's, and the reverse. It carries only the rendezvous (a few keys, a
few hundred bytes), so it is written in Python.

Rank 0 serves it on MASTER_ADDR:MASTER_PORT (a thread of its process, like
TCPStore's); every rank, rank 0 too, is a client over one connection.

Protocol, each message one request and one reply on a TCP connection:
  request  u8 op, u32 count, then count fields: u32 length, bytes
  reply    u8 status (0 ok, 1 no such key, 2 error), u32 length, bytes
Integers are big-endian. Ops and their fields:
  1 SET key value           -> empty
  2 GET key                 -> the value, or status 1 (the client polls)
  3 ADD key decimal-delta   -> the new value in decimal (a missing key is 0)
  4 CHECK key...            -> b"1" if every key is set, else b"0"
  5 DELETE key              -> b"1" if the key was there, else b"0"
  6 NUM_KEYS                -> the count in decimal
  7 COMPARE_SET key expected desired -> the value now stored
Limits: 1,024 fields and 64 MiB in one request, 1,024 open connections
(torch's keys and values are a few bytes; the limits bound what one client
can make the server hold or start). A request over them closes its
connection; a connection over them is closed at once.
"""
import socket
import socketserver
import struct
import sys
import threading
import time
from datetime import timedelta

import torch.distributed as dist

from . import CommError, _distributed

SET, GET, ADD, CHECK, DELETE, NUM_KEYS, COMPARE_SET = range(1, 8)
OK, MISSING, ERROR = range(3)
MAX_FIELDS = 1024
MAX_REQUEST = 64 << 20
MAX_CONNECTIONS = 1024


def _comm_error(name, context):
    """ferry.CommError with comm/'s code `name` (timed_out, connect_failed,
    ...): what the C++ half raises, so the store's failures are one family
    with the ring's (docs/errors.md). No one rank is at fault: peer None."""
    code, message = _distributed.comm_codes[name]
    return CommError(f"{context}: {message}", code, name, context)


def _read_exact(sock, n):
    chunks = []
    while n > 0:
        chunk = sock.recv(min(n, 1 << 20))
        if not chunk:
            raise ConnectionError("the store's connection closed")
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def _fields(payload):
    return struct.pack(">I", len(payload)) + b"".join(struct.pack(">I", len(f)) + f for f in payload)


class _Handler(socketserver.BaseRequestHandler):
    def setup(self):
        with self.server.lock:
            self.server.connections += 1
            self.admitted = self.server.connections <= MAX_CONNECTIONS

    def finish(self):
        with self.server.lock:
            self.server.connections -= 1

    def handle(self):
        if not self.admitted:
            return
        sock = self.request
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        data, lock = self.server.data, self.server.lock
        try:
            while True:
                op = _read_exact(sock, 1)[0]
                (count,) = struct.unpack(">I", _read_exact(sock, 4))
                if count > MAX_FIELDS:
                    return
                fields, size = [], 0
                for _ in range(count):
                    (length,) = struct.unpack(">I", _read_exact(sock, 4))
                    size += length
                    if size > MAX_REQUEST:
                        return
                    fields.append(_read_exact(sock, length))
                status, reply = OK, b""
                with lock:
                    try:
                        if op == SET and count == 2:
                            data[fields[0]] = fields[1]
                        elif op == GET and count == 1:
                            if fields[0] in data:
                                reply = data[fields[0]]
                            else:
                                status = MISSING
                        elif op == ADD and count == 2:
                            value = int(data.get(fields[0], b"0")) + int(fields[1])
                            data[fields[0]] = reply = str(value).encode()
                        elif op == CHECK:
                            reply = b"1" if all(k in data for k in fields) else b"0"
                        elif op == DELETE and count == 1:
                            reply = b"1" if data.pop(fields[0], None) is not None else b"0"
                        elif op == NUM_KEYS and count == 0:
                            reply = str(len(data)).encode()
                        elif op == COMPARE_SET and count == 3:
                            key, expected, desired = fields
                            current = data.get(key)
                            if (current is None and expected == b"") or current == expected:
                                data[key] = desired
                            reply = data.get(key, expected)
                        else:
                            status, reply = ERROR, b"bad request"
                    except ValueError as e:
                        status, reply = ERROR, str(e).encode()
                sock.sendall(struct.pack(">BI", status, len(reply)) + reply)
        except (ConnectionError, OSError):
            return


class _Server(socketserver.ThreadingMixIn, socketserver.TCPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, host, port):
        # Every interface, as TCPStore listens: MASTER_ADDR may name this
        # host by an address other ranks reach but it does not bind.
        self.address_family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
        self.data, self.lock, self.connections = {}, threading.Lock(), 0
        super().__init__(("::" if self.address_family == socket.AF_INET6 else "", port), _Handler)


class Store(dist.Store):
    """A torch.distributed Store of one byte order (see the module's text).
    is_master: serve it here (rank 0). timeout: how long get() and wait()
    wait for a key, and connecting for the server."""

    def __init__(self, host, port, is_master, timeout=timedelta(seconds=300)):
        super().__init__()
        self._timeout = timeout.total_seconds()
        self._lock = threading.Lock()
        self._server, self._sock = None, None
        if is_master:
            self._server = _Server(host, port)
            threading.Thread(target=self._server.serve_forever, args=(0.1,), name="ferry-store", daemon=True).start()
        deadline = time.monotonic() + self._timeout
        while True:
            try:
                self._sock = socket.create_connection((host, port), timeout=self._timeout)
                break
            except OSError as e:
                if time.monotonic() > deadline:
                    raise _comm_error("connect_failed",
                                      f"ferry: the rendezvous store at {host}:{port} cannot be reached: {e}") from e
                time.sleep(0.1)
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def _call(self, op, *fields):
        fields = [f.encode() if isinstance(f, str) else bytes(f) for f in fields]
        with self._lock:
            if self._sock is None:
                raise _comm_error("aborted", "ferry: the rendezvous store's connection failed earlier")
            try:
                self._sock.sendall(bytes([op]) + _fields(fields))
                status, length = struct.unpack(">BI", _read_exact(self._sock, 5))
                reply = _read_exact(self._sock, length)
            except OSError as e:
                # A reply cut short leaves the stream out of step: no later call may use it.
                self._sock.close()
                self._sock = None
                raise _comm_error("peer_lost", f"ferry: the rendezvous store's connection failed: {e}") from e
        if status == ERROR:
            raise _comm_error("protocol_error",
                              f"ferry: the rendezvous store refused a request: {reply.decode(errors='replace')}")
        return status, reply

    def _poll(self, ready, keys, timeout=None):
        limit = self._timeout if timeout is None else timeout.total_seconds()
        deadline = time.monotonic() + limit
        pause = 0.001
        while True:
            result = ready()
            if result is not None:
                return result
            if limit > 0 and time.monotonic() > deadline:
                raise _comm_error("timed_out",
                                  f"ferry: the rendezvous store did not get {', '.join(keys)} within {limit:g} s")
            time.sleep(pause)
            pause = min(pause * 2, 0.05)

    def set(self, key, value):
        self._call(SET, key, value)

    def get(self, key):
        def ready():
            status, reply = self._call(GET, key)
            return reply if status == OK else None
        return self._poll(ready, [key])

    def add(self, key, value):
        return int(self._call(ADD, key, str(int(value)))[1])

    def compare_set(self, key, expected, desired):
        return self._call(COMPARE_SET, key, expected, desired)[1]

    def check(self, keys):
        return self._call(CHECK, *keys)[1] == b"1"

    def wait(self, keys, timeout=None):
        self._poll(lambda: True if self.check(keys) else None, keys, timeout)

    def delete_key(self, key):
        return self._call(DELETE, key)[1] == b"1"

    def num_keys(self):
        return int(self._call(NUM_KEYS)[1])

    def set_timeout(self, timeout):
        self._timeout = timeout.total_seconds()

    def close(self):
        """Closes the connection, and on rank 0 stops serving and frees the port."""
        with self._lock:
            if self._sock is not None:
                self._sock.close()
                self._sock = None
        if self._server is not None:
            if not sys.is_finalizing():  # then the serving thread is gone: shutdown() would wait for it forever
                self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __del__(self):
        try:
            self.close()
        except Exception:  # the interpreter may be finalising
            pass
