"""The trailing checksums of an aws-chunked body, checked before its last bytes go upstream.

``x-amz-trailer`` names the trailers the client will send after the body;
each must arrive, and no other. The checksums the standard library computes
(CRC32, SHA-1, SHA-256) are compared with the body as it streamed past; the
others (CRC32C, CRC64NVME) go on unchecked and S3 checks them itself, as it
does every checksum. A trailer is unsigned in ``STREAMING-UNSIGNED-PAYLOAD-
TRAILER``, so this catches damage, not a forger, who could fix the checksum.
"""

from __future__ import annotations

import base64
import hashlib
import zlib
from collections.abc import Sequence
from typing import Protocol

from broker.egress.injectors.sigv4.values import Reason, refuse


class _Running(Protocol):
    def update(self, data: bytes) -> None: ...

    def digest(self) -> bytes: ...


class _Crc32:
    def __init__(self) -> None:
        self._value = 0

    def update(self, data: bytes) -> None:
        self._value = zlib.crc32(data, self._value)

    def digest(self) -> bytes:
        return self._value.to_bytes(4, "big")


def _running(name: str) -> _Running | None:
    if name == "x-amz-checksum-crc32":
        return _Crc32()
    if name == "x-amz-checksum-sha1":
        return hashlib.sha1()  # noqa: S324 (S3's checksum algorithm, not a security use)
    if name == "x-amz-checksum-sha256":
        return hashlib.sha256()
    return None


def declared_trailers(value: str | None, service: str) -> tuple[str, ...]:
    """The trailer names an ``x-amz-trailer`` header announces (lower-case); it must announce at least one."""
    names = tuple(name.strip().lower() for name in (value or "").split(",") if name.strip())
    if not names or len(set(names)) != len(names):
        refuse(Reason.MALFORMED, "a trailer payload needs an x-amz-trailer header naming each trailer once", service)
    return names


class TrailerChecks:
    """The announced trailers' checksums, run over the decoded body, compared when the trailers arrive."""

    def __init__(self, declared: Sequence[str], service: str) -> None:
        self._declared = tuple(declared)
        self._service = service
        self._running = {name: r for name in declared if (r := _running(name)) is not None}

    def update(self, data: bytes) -> None:
        for running in self._running.values():
            running.update(data)

    def check(self, trailers: Sequence[tuple[str, str]]) -> None:
        names = [name for name, _ in trailers]
        if sorted(names) != sorted(self._declared):
            refuse(Reason.CHECKSUM, "the body's trailers are not the ones x-amz-trailer announced", self._service)
        for name, value in trailers:
            running = self._running.get(name)
            if running is not None and base64.b64encode(running.digest()).decode("ascii") != value:
                refuse(Reason.CHECKSUM, f"the body does not match its {name} trailer", self._service)
