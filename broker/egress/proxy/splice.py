"""Copying an open CONNECT tunnel in the kernel: ``os.splice`` through a pipe, one thread per direction.

The bytes of a plain tunnel are opaque to the proxy, so they never enter
Python: each direction moves socket -> pipe -> socket with the GIL released
and no buffer of the proxy's own (a pipe's pages are the kernel's), which
keeps the proxy's memory flat and its CPU per byte close to what a C relay
of the same design spends (bench/proxy/egress.py). Two threads per tunnel, and tunnels count against the proxy's
connection limit, so threads are bounded too. A half-close passes on; an
error, or ``idle_timeout`` without progress, in either direction shuts both
sockets down, which ends the other direction as well. Where the kernel
cannot splice a socket the direction falls back to a bounded copy buffer.

A client that reached the proxy over TLS (a gateway's listener off loopback)
has no plain socket to hand to the kernel: its tunnel is copied on the event
loop instead (``relay``), a chunk at a time with back-pressure both ways.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import os
import socket
import struct
import threading
from collections.abc import Callable, Sequence

CHUNK = 64 * 1024  # a default pipe's capacity, and the fallback's buffer
#: A busy direction's pipe. Against the default 64 KiB it cuts the proxy's CPU per byte by about a quarter
#: (fewer splices and wake-ups; bench/proxy/egress.py, alternating rounds); the bytes are still the kernel's.
BULK_PIPE = 512 * 1024
#: What enlarged pipes of this process may hold together. A pipe's capacity counts against its user's
#: ``fs.pipe-user-pages-soft`` (64 MiB by default) whether it is filled or not, and past that limit every new
#: pipe of the user gets 8 KiB, so the proxy keeps well under it: a direction past the budget keeps 64 KiB.
BULK_BUDGET = 32 * 1024 * 1024


class _Budget:
    def __init__(self, total: int) -> None:
        self._spare = total
        self._lock = threading.Lock()

    def take(self, size: int) -> bool:
        with self._lock:
            if self._spare < size:
                return False
            self._spare -= size
            return True

    def give(self, size: int) -> None:
        with self._lock:
            self._spare += size


_BUDGET = _Budget(BULK_BUDGET)


async def connect(addresses: Sequence[object], port: int, timeout: float) -> socket.socket:
    """A connected socket to the first of ``addresses`` that answers; the last error when none does."""
    loop = asyncio.get_running_loop()
    last: Exception = OSError(errno.EHOSTUNREACH, "no address")
    for address in addresses:
        text = str(address)
        sock = socket.socket(socket.AF_INET6 if ":" in text else socket.AF_INET, socket.SOCK_STREAM)
        sock.setblocking(False)
        try:
            await asyncio.wait_for(loop.sock_connect(sock, (text, port)), timeout)
        except (OSError, TimeoutError) as exc:
            sock.close()
            last = exc
            continue
        except BaseException:
            sock.close()
            raise
        return sock
    raise last


async def detach(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> tuple[socket.socket, bytes]:
    """The client's socket taken off the event loop, and what the loop had read from it but not handed out."""
    transport = writer.transport
    fd = os.dup(transport.get_extra_info("socket").fileno())
    transport.abort()  # closes the loop's descriptor only: the connection lives on in ``fd``
    reader.feed_eof()
    buffered = await reader.read()
    return socket.socket(fileno=fd), buffered


async def tunnel(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    upstream: socket.socket,
    to_client: bytes,
    to_upstream: bytes,
    idle_timeout: float,
) -> None:
    """Take the client off the loop and copy both ways until both are done (``to_*`` go first).

    Cancelling tears the tunnel down; both sockets are closed in the end, ``upstream`` too when it fails early.
    """
    if writer.get_extra_info("ssl_object") is not None:  # no plain socket to splice: the loop copies it
        await relay(reader, writer, upstream, to_client, to_upstream, idle_timeout)
        return
    try:
        client, buffered = await detach(reader, writer)
    except BaseException:
        upstream.close()
        raise
    loop = asyncio.get_running_loop()
    finished: asyncio.Future[None] = loop.create_future()

    def settle() -> None:
        if not finished.done():
            finished.set_result(None)

    def done() -> None:
        with contextlib.suppress(RuntimeError):  # the loop is already closed: nobody is waiting
            loop.call_soon_threadsafe(settle)

    copy = Tunnel(client, upstream, idle_timeout, done)
    copy.start(to_client, to_upstream + buffered)
    try:
        await asyncio.shield(finished)
    finally:
        if not finished.done():
            copy.abort()


async def relay(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    upstream: socket.socket,
    to_client: bytes,
    to_upstream: bytes,
    idle_timeout: float,
) -> None:
    """Copy a tunnel both ways on the event loop until one side ends it (a half-close passes on where the other side
    can take one), or ``idle_timeout`` passes without progress in a direction."""
    try:
        up_reader, up_writer = await asyncio.open_connection(sock=upstream, limit=CHUNK)
    except BaseException:
        upstream.close()
        raise

    async def copy(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
        while data := await asyncio.wait_for(source.read(CHUNK), idle_timeout):
            sink.write(data)
            await sink.drain()
        if sink.can_write_eof():
            sink.write_eof()
            await asyncio.Event().wait()  # the other direction ends the tunnel

    try:
        writer.write(to_client)
        up_writer.write(to_upstream)
        directions = [asyncio.ensure_future(copy(reader, up_writer)), asyncio.ensure_future(copy(up_reader, writer))]
        try:
            await asyncio.wait(directions, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for direction in directions:
                direction.cancel()
            await asyncio.gather(*directions, return_exceptions=True)
    finally:
        up_writer.transport.abort()


class Tunnel:
    """Two sockets and the two threads copying between them; the last thread to end closes both."""

    def __init__(
        self, client: socket.socket, upstream: socket.socket, idle_timeout: float, done: Callable[[], None]
    ) -> None:
        self.client = client
        self.upstream = upstream
        self._done = done
        self._running = 2
        self._lock = threading.Lock()
        timeval = struct.pack("ll", int(idle_timeout), int(idle_timeout % 1 * 1_000_000))
        for sock in (client, upstream):
            sock.setblocking(True)
            with contextlib.suppress(OSError):  # bounds each splice and send: no progress for this long ends it
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, timeval)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, timeval)

    def start(self, to_client: bytes, to_upstream: bytes) -> None:
        for source, sink, first, name in (
            (self.client, self.upstream, to_upstream, "egress-up"),
            (self.upstream, self.client, to_client, "egress-down"),
        ):
            try:
                threading.Thread(target=self._direction, args=(source, sink, first), name=name, daemon=True).start()
            except RuntimeError:  # no thread to be had: the tunnel ends here
                self.abort()
                self._ended()

    def abort(self) -> None:
        """Shut both sockets down: each blocked copy returns at once and its thread ends."""
        for sock in (self.client, self.upstream):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def _direction(self, source: socket.socket, sink: socket.socket, first: bytes) -> None:
        try:
            if first:
                sink.sendall(first)
            _copy(source, sink)
            sink.shutdown(socket.SHUT_WR)  # the half-close passes on
        except OSError:
            self.abort()
        finally:
            self._ended()

    def _ended(self) -> None:
        """One direction is over; after the second, close both sockets and report."""
        with self._lock:
            self._running -= 1
            last = self._running == 0
        if last:
            self.client.close()
            self.upstream.close()
            self._done()


def _copy(source: socket.socket, sink: socket.socket) -> None:
    """Everything from ``source`` to ``sink`` until end of stream, through a pipe when the kernel allows it.

    The pipe grows to ``BULK_PIPE`` the first time a splice fills it, while the process's budget allows.
    """
    read_end, write_end = os.pipe2(os.O_CLOEXEC)
    size, grown = CHUNK, 0
    try:
        src, dst = source.fileno(), sink.fileno()
        while True:
            try:
                moved = os.splice(src, write_end, size, flags=os.SPLICE_F_MOVE)
            except OSError as exc:
                if exc.errno != errno.EINVAL:
                    raise
                _copy_buffered(source, sink)  # this kernel cannot splice this socket (the pipe is empty)
                return
            if moved == 0:
                return
            full = moved == size
            while moved:
                moved -= os.splice(read_end, dst, moved, flags=os.SPLICE_F_MOVE)
            if full and not grown and _BUDGET.take(BULK_PIPE):
                try:
                    size = grown = fcntl.fcntl(write_end, fcntl.F_SETPIPE_SZ, BULK_PIPE)
                except OSError:  # over the user's pipe limits: stay at the default
                    _BUDGET.give(BULK_PIPE)
                    grown = -1
    finally:
        if grown > 0:
            _BUDGET.give(BULK_PIPE)
        os.close(read_end)
        os.close(write_end)


def _copy_buffered(source: socket.socket, sink: socket.socket) -> None:
    buffer = bytearray(CHUNK)
    view = memoryview(buffer)
    while received := source.recv_into(buffer):
        sink.sendall(view[:received])
