"""The bench's moto server in a process of its own (a ThreadedMotoServer, as scripts/demo uses).

    python scripts/bench_servers.py moto PORT

Runs until SIGTERM. A separate process keeps moto's request handling off the
bench driver's GIL and off the GitHub emulator's, as real services would be.
"""

from __future__ import annotations

import logging
import signal
import sys
import threading


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] != "moto":
        sys.stderr.write(__doc__)
        return 2
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=int(argv[1]), verbose=False)
    server.start()
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    signal.signal(signal.SIGINT, lambda *_: done.set())
    print("moto listening", flush=True)
    done.wait()
    server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
