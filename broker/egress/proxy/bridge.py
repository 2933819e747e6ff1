"""What ``exec --network allowlist`` adds to a sandboxed command: the bridge in front of it and the proxy hints.

The command runs behind ``broker.egress.proxy.forwarder`` (the host's python3 from
``/usr``), which listens on ``127.0.0.1:PROXY_PORT`` in the sandbox's own
network namespace and carries each connection to the proxy's Unix socket.
"""

from __future__ import annotations

from pathlib import Path

PROXY_PORT = 3128
PYTHON = "/usr/bin/python3"
NO_PROXY = "localhost,127.0.0.1"


def forwarder_argv(socket_inside: str, command: list[str]) -> list[str]:
    """The argv that runs ``command`` behind the forwarder (listening before the command starts)."""
    source = (Path(__file__).parent / "forwarder.py").read_text(encoding="utf-8")
    return [PYTHON, "-I", "-S", "-c", source, str(PROXY_PORT), socket_inside, *command]


def proxy_hints(port: int = PROXY_PORT) -> dict[str, str]:
    """The variables every common client reads (upper and lower case: curl only reads lower-case http_proxy)."""
    url = f"http://127.0.0.1:{port}"
    return {
        "HTTP_PROXY": url,
        "HTTPS_PROXY": url,
        "http_proxy": url,
        "https_proxy": url,
        "NO_PROXY": NO_PROXY,
        "no_proxy": NO_PROXY,
    }
