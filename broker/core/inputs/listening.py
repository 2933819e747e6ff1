"""Where ``broker serve`` listens besides its socket: an ``ADDRESS:PORT`` read once (``[daemon] metrics_listen``,
``[gateway] listen``), and the ``[gateway]`` table.

The gateway is one HTTP proxy for many sessions (``broker.egress.gateway``).
Off loopback it speaks TLS only: a ``listen`` address that is not loopback
without ``cert_file`` and ``key_file`` is refused here, in one line naming
them, so ``broker serve`` never starts a gateway that would carry proxy
credentials in the clear. ``advertise`` is the ``HOST:PORT`` sandboxes reach
it at (what each session's ``proxy_url`` names): by default the listen
address, which a wildcard (``0.0.0.0``, ``::``) cannot be. ``ca_file`` is the
CA certificate a client needs to trust ``cert_file`` (a private CA): it goes
into each gateway session's ``ca-bundle.pem``.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from broker.vocab.errors import ConfigError
from broker.vocab.fields import Fields, shown

DEFAULT_GATEWAY_CONNECTIONS = 4096
MAX_GATEWAY_CONNECTIONS = 65536
HOST_PORT = re.compile(r"(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9][A-Za-z0-9.-]{0,252}):[0-9]{1,5}")


@dataclass(frozen=True)
class GatewayConfig:
    """``[gateway]``: where the gateway listens, its TLS, and the address sessions are given."""

    listen: tuple[str, int]
    advertise: tuple[str, int]  # the host (a name or an address) and port a session's proxy_url names
    cert_file: Path | None = None
    key_file: Path | None = None
    ca_file: Path | None = None
    max_connections: int = DEFAULT_GATEWAY_CONNECTIONS

    @property
    def tls(self) -> bool:
        return self.cert_file is not None


def listen_address(value: str, where: str) -> tuple[str, int]:
    """``127.0.0.1:9464`` or ``[::1]:9464``: an IP address (never a name) and a port."""
    host, colon, port = value.rpartition(":")
    literal = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    try:
        address = ipaddress.ip_address(literal)
    except ValueError:
        address = None
    if not colon or address is None or (address.version == 6) != (literal != host) or not port.isdigit():
        raise ConfigError(f"{where}: {shown(value, 64)} is not ADDRESS:PORT (127.0.0.1:9464, [::1]:9464)")
    if not 0 < int(port) < 65536:
        raise ConfigError(f"{where}: port {shown(port, 8)} is not 1-65535")
    return str(address), int(port)


def read_gateway(table: Fields, resolve: Callable[[str], Path]) -> GatewayConfig:
    """The ``[gateway]`` table (``resolve``: a path relative to the config file's directory)."""
    listen_text = table.req_string("listen", max_len=64)
    listen = listen_address(listen_text, table.where("listen"))
    cert = table.string("cert_file", required=False, max_len=4096)
    key = table.string("key_file", required=False, max_len=4096)
    ca = table.string("ca_file", required=False, max_len=4096)
    advertised = table.string("advertise", required=False, max_len=262)
    connections = table.integer("max_connections", minimum=1, maximum=MAX_GATEWAY_CONNECTIONS)
    table.done()
    if (cert is None) != (key is None):
        missing = "key_file" if key is None else "cert_file"
        raise ConfigError(f"gateway.{missing}: required with gateway.{'cert_file' if key is None else 'key_file'}")
    loopback = ipaddress.ip_address(listen[0]).is_loopback
    if cert is None and not loopback:
        raise ConfigError(
            f"gateway.listen {shown(listen_text, 64)} is not a loopback address: set gateway.cert_file and"
            " gateway.key_file (off loopback the gateway speaks TLS only)"
        )
    if ca is not None and cert is None:
        raise ConfigError("gateway.ca_file: only with gateway.cert_file (a gateway without TLS has no certificate)")
    return GatewayConfig(
        listen=listen,
        advertise=_advertised(advertised, listen, table.where("advertise")),
        cert_file=resolve(cert) if cert is not None else None,
        key_file=resolve(key) if key is not None else None,
        ca_file=resolve(ca) if ca is not None else None,
        max_connections=connections or DEFAULT_GATEWAY_CONNECTIONS,
    )


def _advertised(value: str | None, listen: tuple[str, int], where: str) -> tuple[str, int]:
    if value is None:
        if ipaddress.ip_address(listen[0]).is_unspecified:
            raise ConfigError(
                f"{where}: required when gateway.listen is {listen[0]} (every address): set the HOST:PORT"
                " sandboxes reach the gateway at"
            )
        return listen
    if not HOST_PORT.fullmatch(value) or not 0 < int(value.rpartition(":")[2]) < 65536:
        raise ConfigError(f"{where}: {shown(value, 64)} is not HOST:PORT (gateway.example:3128, 10.89.0.1:3128)")
    host, _, port = value.rpartition(":")
    return host.strip("[]"), int(port)
