"""Inside the sandbox: listen on 127.0.0.1:PORT, carry each connection to the proxy's Unix socket, run the command.

The sandbox has its own network namespace with nothing but loopback, so
this bridge is its only way out. It runs as the host's ``/usr/bin/python3``
(``-I -S``, standard library only: nothing is installed into the sandbox),
started by bubblewrap as the sandbox user: ``python3 -I -S -c SOURCE PORT
SOCKET CMD ARGS...``. It binds the port first, then runs the command as its
child, forwards stop signals to it and exits with its status.

For a container (``serve PORT DIRECTORY UID GID``) it is a host process in
the network namespace the container joins (``broker.host.containers.relay``
starts it there, as root): it brings that namespace's loopback up, binds the
port, opens the proxy socket's directory, becomes UID:GID with no other
group, says ``ready`` on its standard output and serves until it is stopped
(or its parent dies), each connection reaching ``proxy.sock`` through the
directory it opened.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import os
import signal
import socket
import struct
import sys
import threading

CHUNK = 65536
SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1
PR_SET_PDEATHSIG = 1


def _pump(source: socket.socket, sink: socket.socket) -> None:
    try:
        while data := source.recv(CHUNK):
            sink.sendall(data)
        sink.shutdown(socket.SHUT_WR)
    except OSError:
        for end in (source, sink):
            with contextlib.suppress(OSError):
                end.shutdown(socket.SHUT_RDWR)


def _bridge(client: socket.socket, path: str) -> None:
    upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        upstream.connect(path)
    except OSError:
        client.close()
        upstream.close()
        return
    back = threading.Thread(target=_pump, args=(upstream, client), daemon=True)
    back.start()
    _pump(client, upstream)
    back.join()
    client.close()
    upstream.close()


def _serve(listener: socket.socket, path: str) -> None:
    while True:
        client, _ = listener.accept()
        threading.Thread(target=_bridge, args=(client, path), daemon=True).start()


def _listen(port: int) -> socket.socket:
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", port))
    listener.listen(128)
    return listener


def _loopback_up() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        asked = struct.pack("16sH22x", b"lo", 0)
        flags = struct.unpack("16sH22x", fcntl.ioctl(probe, SIOCGIFFLAGS, asked))[1]
        if not flags & IFF_UP:
            fcntl.ioctl(probe, SIOCSIFFLAGS, struct.pack("16sH22x", b"lo", flags | IFF_UP))


def serve(argv: list[str]) -> int:
    port, directory, uid, gid = int(argv[0]), argv[1], int(argv[2]), int(argv[3])
    parent = os.getppid()
    _loopback_up()
    listener = _listen(port)
    folder = os.open(directory, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    os.setgroups([])
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)  # cleared by the uid change: now
    if os.getppid() != parent:
        return 1
    sys.stdout.write("ready\n")
    sys.stdout.close()
    _serve(listener, f"/proc/self/fd/{folder}/proxy.sock")
    return 0


def main(argv: list[str]) -> int:
    if argv[0] == "serve":
        return serve(argv[1:])
    port, path, command = int(argv[0]), argv[1], argv[2:]
    listener = _listen(port)
    child = os.fork()
    if child == 0:
        listener.close()
        try:
            os.execvp(command[0], command)  # noqa: S606 (the sandboxed command, as exec runs it)
        except OSError:
            os._exit(127)
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, lambda number, frame: os.kill(child, number))
    threading.Thread(target=_serve, args=(listener, path), daemon=True).start()
    _, status = os.waitpid(child, 0)
    return os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
