"""Inside the sandbox: listen on 127.0.0.1:PORT, carry each connection to the proxy's Unix socket, run the command.

The sandbox has its own network namespace with nothing but loopback, so
this bridge is its only way out. It runs as the host's ``/usr/bin/python3``
(``-I -S``, standard library only: nothing is installed into the sandbox),
started by bubblewrap as the sandbox user: ``python3 -I -S -c SOURCE PORT
SOCKET CMD ARGS...``. It binds the port first, then runs the command as its
child, forwards stop signals to it and exits with its status.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sys
import threading

CHUNK = 65536


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


def main(argv: list[str]) -> int:
    port, path, command = int(argv[0]), argv[1], argv[2:]
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", port))
    listener.listen(128)
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
