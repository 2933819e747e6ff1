"""``[telemetry]``: where traces go (``otlp_endpoint``), under which service name, with which headers.

Read with the rest of the config and cheap: the standard library and
``broker.vocab`` only, so a config without ``[telemetry]`` costs nothing and
one with it loads OpenTelemetry only when tracing starts
(``broker.telemetry.traces``).

The endpoint is an OTLP/HTTP collector: ``https://`` anywhere, plain
``http://`` only on loopback (span attributes are ids, not secrets, but
they still say who did what). A base URL (no path) gets the standard
``/v1/traces``; a URL with a path is used as it is. It may not carry a user,
a password or a query: headers a collector needs (an API key) are read from
``headers_file``, an owner-only file of ``Name: value`` lines, kept in
``Secret`` until the exporter sends them.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from broker.vocab.errors import ConfigError
from broker.vocab.fields import Fields, shown
from broker.vocab.secret import Secret, read_secret_file

SERVICE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
HEADER_NAME = re.compile(r"[A-Za-z0-9!#$%&'*+.^_`|~-]{1,64}")
HEADER_VALUE = re.compile(r"[\x21-\x7e](?:[\x20-\x7e]{0,4094}[\x21-\x7e])?")
MAX_HEADERS = 16
DEFAULT_TIMEOUT = 1  # seconds a command waits at most for its traces to leave (a dead collector costs that)
MAX_TIMEOUT = 10
TRACES_PATH = "/v1/traces"
LOOPBACK_NAMES = ("localhost",)


@dataclass(frozen=True)
class TelemetryConfig:
    """``[telemetry]`` as read: the traces URL and how to reach it."""

    otlp_endpoint: str  # the full URL spans are POSTed to
    service_name: str = "broker"
    headers_file: Path | None = None
    ca_file: Path | None = None
    timeout: int = DEFAULT_TIMEOUT


def parse_telemetry(fields: Fields, base: Path) -> TelemetryConfig | None:
    """``[telemetry]`` (``fields`` is its table); None when it names no endpoint."""
    endpoint = fields.string("otlp_endpoint", required=False, max_len=1024)
    service = fields.string("service_name", required=False, pattern=SERVICE_NAME, max_len=64)
    headers = fields.string("headers_file", required=False, max_len=4096)
    ca_file = fields.string("ca_file", required=False, max_len=4096)
    timeout = fields.duration("timeout")
    fields.done()
    if endpoint is None:
        if service or headers or ca_file or timeout:
            raise fields.fail("otlp_endpoint", "required by the other [telemetry] keys")
        return None
    if timeout is not None and timeout > MAX_TIMEOUT:
        raise fields.fail("timeout", f"at most {MAX_TIMEOUT}s: every command waits that long for a dead collector")
    return TelemetryConfig(
        otlp_endpoint=traces_url(endpoint, fields.where("otlp_endpoint")),
        service_name=service or "broker",
        headers_file=_resolve(base, headers),
        ca_file=_resolve(base, ca_file),
        timeout=timeout or DEFAULT_TIMEOUT,
    )


def traces_url(value: str, where: str) -> str:
    """The URL spans are POSTed to, from ``otlp_endpoint``; a ConfigError for anything unsafe or malformed."""
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 - a port out of range or not a number raises here
    except ValueError:
        raise ConfigError(f"{where}: {shown(value, 80)} is not a URL") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"{where}: {shown(value, 80)} is not an http:// or https:// URL")
    if parts.username is not None or parts.password is not None:
        raise ConfigError(f"{where}: no user or password in the URL; put the collector's headers in headers_file")
    if parts.query or parts.fragment:
        raise ConfigError(f"{where}: no query or fragment; put the collector's headers in headers_file")
    if parts.scheme == "http" and not _loopback(parts.hostname):
        raise ConfigError(f"{where}: plain http:// only to a collector on loopback; use https:// for {parts.hostname}")
    path = parts.path if parts.path not in ("", "/") else TRACES_PATH
    return f"{parts.scheme}://{parts.netloc}{path}"


def _loopback(host: str) -> bool:
    if host.lower() in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _resolve(base: Path, value: str | None) -> Path | None:
    if value is None:
        return None
    path = Path(value)
    return path if path.is_absolute() else base / path


def read_headers(path: Path) -> dict[str, Secret]:
    """The collector's headers from ``headers_file``: ``Name: value`` lines, ``#`` comments, owner-only."""
    text = read_secret_file(path, "telemetry headers_file").reveal()
    headers: dict[str, Secret] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        name, colon, value = line.partition(":")
        name, value = name.strip(), value.strip()
        if not colon or not HEADER_NAME.fullmatch(name) or not HEADER_VALUE.fullmatch(value):
            raise ConfigError(f"telemetry headers_file {path}: line {number} is not 'Name: value'")
        if name.lower() in (known.lower() for known in headers):
            raise ConfigError(f"telemetry headers_file {path}: line {number} repeats {name}")
        headers[name] = Secret(value)
    if len(headers) > MAX_HEADERS:
        raise ConfigError(f"telemetry headers_file {path}: more than {MAX_HEADERS} headers")
    return headers
