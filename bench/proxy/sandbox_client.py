"""The long-session figure's client, run inside the sandbox: steady requests with the placeholder, timed.

``bench/proxy/longsession.py`` passes this file's text to the system's ``python3 -I
-c`` in ``broker exec`` (the sandbox sees ``/usr`` but not this checkout), so
it uses the standard library alone. Arguments: seconds, requests per second
to each target, the targets as JSON (``host`` HOST:PORT, ``path``, ``file``
holding the placeholder, ``header`` and its ``form``). Each target keeps one
tunnel through the session's proxy (``HTTPS_PROXY``, the session CA in
``SSL_CERT_FILE``), reopened only after a failure; the placeholder is read
from its file before every request. At the end one JSON line: the wall-clock
start, how far behind schedule it ended, and per target the distinct
placeholders seen, the tunnels opened and every request's (start s, ms,
status).
"""

from __future__ import annotations

import http.client
import json
import os
import ssl
import sys
import time
import urllib.parse
from typing import Any


class Target:
    def __init__(self, spec: dict[str, str], proxy: urllib.parse.SplitResult, context: ssl.SSLContext) -> None:
        self.spec, self.proxy, self.context = spec, proxy, context
        self.placeholders: set[str] = set()
        self.samples: list[tuple[float, float, str]] = []
        self.tunnels = 0
        self.connection: http.client.HTTPSConnection | None = None

    def send(self, start: float) -> None:
        spec = self.spec
        with open(spec["file"]) as file:
            placeholder = file.read().strip()
        self.placeholders.add(placeholder)
        if self.connection is None:
            self.connection = http.client.HTTPSConnection(
                self.proxy.hostname or "127.0.0.1", self.proxy.port, context=self.context, timeout=30
            )
            host, port = spec["host"].rsplit(":", 1)
            self.connection.set_tunnel(host, int(port))
            self.tunnels += 1
        begun = time.perf_counter()
        try:
            self.connection.request("GET", spec["path"], headers={spec["header"]: spec["form"].format(placeholder)})
            response = self.connection.getresponse()
            response.read()
            status = str(response.status)
        except (OSError, http.client.HTTPException) as exc:
            status = type(exc).__name__
            self.connection.close()
            self.connection = None
        self.samples.append((round(begun - start, 3), round((time.perf_counter() - begun) * 1000, 2), status))


def main() -> None:
    seconds, rate = float(sys.argv[1]), float(sys.argv[2])
    proxy = urllib.parse.urlsplit(os.environ["HTTPS_PROXY"])
    context = ssl.create_default_context(cafile=os.environ["SSL_CERT_FILE"])
    targets = {name: Target(spec, proxy, context) for name, spec in json.loads(sys.argv[3]).items()}
    epoch, start = time.time(), time.perf_counter()
    tick = 0
    while (due := start + tick / rate) < start + seconds:
        now = time.perf_counter()
        if now < due:
            time.sleep(due - now)
        for target in targets.values():
            target.send(start)
        tick += 1
    out: dict[str, Any] = {"epoch": epoch, "behind_schedule_s": round(time.perf_counter() - start - seconds, 2)}
    for name, target in targets.items():
        out[name] = {"placeholders": len(target.placeholders), "tunnels": target.tunnels, "samples": target.samples}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
