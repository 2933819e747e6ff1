"""What ``exec --network allowlist`` adds to a sandboxed command: the bridge in front of it and the proxy hints.

The command runs behind ``broker.egress.proxy.forwarder`` (the host's python3 from
``/usr``), which listens on ``127.0.0.1:PROXY_PORT`` in the sandbox's own
network namespace and carries each connection to the proxy's Unix socket.
A container's (``relay_argv``) serves the namespace the container joins, from
the host, as the sandbox user.
"""

from __future__ import annotations

from pathlib import Path

PROXY_PORT = 3128
PYTHON = "/usr/bin/python3"
NO_PROXY = "localhost,127.0.0.1"


def _source() -> str:
    return (Path(__file__).parent / "forwarder.py").read_text(encoding="utf-8")


def forwarder_argv(socket_inside: str, command: list[str]) -> list[str]:
    """The argv that runs ``command`` behind the forwarder (listening before the command starts)."""
    return [PYTHON, "-I", "-S", "-c", _source(), str(PROXY_PORT), socket_inside, *command]


def relay_argv(socket_dir: str, owner: tuple[int, int]) -> list[str]:
    """The argv of a container's forwarder: started as root in the container's network namespace, serving it as
    ``owner`` (uid, gid), each connection to ``proxy.sock`` in ``socket_dir``."""
    return [PYTHON, "-I", "-S", "-c", _source(), "serve", str(PROXY_PORT), socket_dir, str(owner[0]), str(owner[1])]


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
