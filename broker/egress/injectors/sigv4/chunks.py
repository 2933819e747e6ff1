"""Reading an aws-chunked body as it streams: chunk heads, data, the empty last chunk, the trailers.

The framing (Amazon S3 API reference, "Transferring Payload in Multiple
Chunks" and "Including Trailing Headers"):

    HEX-SIZE[;chunk-signature=SIG]\\r\\n DATA \\r\\n   ...   0[;chunk-signature=SIG]\\r\\n TRAILER-LINES \\r\\n

where each trailer line is ``name:value\\r\\n`` (none without trailers). The
reader is strict: a signature on every chunk when the body is signed and on
none when it is not, bounded lines, no bytes after the end. Events carry the
raw chunk line so an unchanged body can be written again byte for byte.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import NoReturn

from broker.egress.injectors.sigv4.values import Reason, refuse

CHUNK_LINE = re.compile(rb"([0-9a-fA-F]{1,16})(?:;chunk-signature=([0-9a-f]{64}))?")
TRAILER_LINE = re.compile(rb"([!#$%&'*+.^_`|~0-9A-Za-z-]+):[ \t]*([\x20-\x7e]*?)[ \t]*")
MAX_LINE = 1024
MAX_TRAILERS = 16


@dataclass(frozen=True)
class ChunkHead:
    size: int
    signature: str | None
    raw: bytes  # the line as sent, without its CRLF


@dataclass(frozen=True)
class ChunkData:
    data: bytes


@dataclass(frozen=True)
class ChunkEnd:
    """The chunk's data (and its CRLF) are complete."""


@dataclass(frozen=True)
class Trailer:
    name: str  # lower-case
    value: str
    raw: bytes  # the line as sent, without its CRLF


@dataclass(frozen=True)
class Finished:
    """The empty line after the trailers: the body is complete."""


Event = ChunkHead | ChunkData | ChunkEnd | Trailer | Finished
_HEAD, _DATA, _DATA_END, _TRAILERS, _DONE = range(5)


class ChunkReader:
    """Turns the pieces of an aws-chunked body into events; ``signed`` says whether chunks carry signatures."""

    def __init__(self, signed: bool, service: str | None = None) -> None:
        self._signed = signed
        self._service = service
        self._state = _HEAD
        self._line = bytearray()
        self._left = 0  # data bytes of the current chunk still to come
        self._trailers = 0
        self.decoded = 0  # data bytes seen so far

    def feed(self, data: bytes) -> Iterator[Event]:
        view = memoryview(data)
        while view:
            if self._state == _DATA:
                take = min(self._left, len(view))
                self._left -= take
                self.decoded += take
                # A piece that is all data goes on as it is: no copy of the bytes most of a body is made of.
                yield ChunkData(data if take == len(data) else bytes(view[:take]))
                view = view[take:]
                if not self._left:
                    self._state = _DATA_END
                continue
            if self._state == _DONE:
                self._fail("bytes follow the end of the aws-chunked body")
            end = bytes(view[: MAX_LINE + 2]).find(b"\n")
            if end < 0:
                self._line += view
                view = view[len(view) :]
                if len(self._line) > MAX_LINE:
                    self._fail("an aws-chunked line is too long")
                continue
            self._line += view[: end + 1]
            view = view[end + 1 :]
            line, self._line = bytes(self._line), bytearray()
            if len(line) > MAX_LINE + 2 or not line.endswith(b"\r\n"):
                self._fail("an aws-chunked line must be short and end in CRLF")
            yield from self._on_line(line[:-2])

    def finish(self) -> None:
        """The body ended: refused unless the aws-chunked framing ended too."""
        if self._state != _DONE:
            self._fail("the aws-chunked body ended early")

    def _on_line(self, line: bytes) -> Iterator[Event]:
        if self._state == _DATA_END:
            if line:
                self._fail("a chunk's data is longer than its size")
            self._state = _HEAD
            yield ChunkEnd()
        elif self._state == _HEAD:
            yield from self._on_chunk_line(line)
        elif not line:
            self._state = _DONE
            yield Finished()
        else:
            match = TRAILER_LINE.fullmatch(line)
            self._trailers += 1
            if match is None or self._trailers > MAX_TRAILERS:
                self._fail("a malformed trailer in the aws-chunked body")
            yield Trailer(match.group(1).decode("ascii").lower(), match.group(2).decode("ascii"), line)

    def _on_chunk_line(self, line: bytes) -> Iterator[Event]:
        match = CHUNK_LINE.fullmatch(line)
        if match is None:
            self._fail("a malformed aws-chunked chunk line")
        signature = match.group(2).decode("ascii") if match.group(2) else None
        if (signature is not None) != self._signed:
            self._fail("every chunk must carry a chunk-signature" if self._signed else "unexpected chunk-signature")
        size = int(match.group(1), 16)
        yield ChunkHead(size, signature, line)
        if size:
            self._left = size
            self._state = _DATA
        else:
            self._state = _TRAILERS
            yield ChunkEnd()

    def _fail(self, message: str) -> NoReturn:
        refuse(Reason.CHUNK, message, self._service)
