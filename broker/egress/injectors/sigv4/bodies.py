"""What happens to a request body on its way upstream, one class per payload mode.

Each takes the body's pieces in order (``feed``) and hands back what may go
upstream now; ``end`` hands back the rest once the body checked, and raises
``RequestRefused`` when it does not (the caller then sends nothing more, so
upstream never sees a complete request). What is handed back is an iterable
to consume before the next call. Memory per request stays within the spool's
``memory`` bound plus one chunk line: a hashed body is spooled
(``broker.egress.injectors.sigv4.spool``), an aws-chunked body streams, held back only
one chunk at a time (signed chunks) and, at the end, its last chunk and
trailers until they check.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from broker.egress.injectors.sigv4.chain import ChunkChain
from broker.egress.injectors.sigv4.checksums import TrailerChecks
from broker.egress.injectors.sigv4.chunks import ChunkData, ChunkEnd, ChunkHead, ChunkReader, Event, Finished, Trailer
from broker.egress.injectors.sigv4.spool import Spool, SpoolFull, SpoolLimits
from broker.egress.injectors.sigv4.values import Reason, refuse

CRLF = b"\r\n"
TRAILER_SIGNATURE = "x-amz-trailer-signature"


class PassThrough:
    """``UNSIGNED-PAYLOAD`` (and S3 presigned URLs): the body is not covered by the signature and goes on as is."""

    def feed(self, piece: bytes) -> Iterable[bytes]:
        return (piece,)

    def end(self) -> Iterable[bytes]:
        return ()

    def close(self) -> None:
        return None


class Hashed:
    """A body covered by its SHA-256: spooled, hashed, and released only when the hash is the one expected
    (``expected``), or, when the signature itself waits for the hash (``expected`` None), once it is known."""

    def __init__(self, spool: Spool, expected: str | None, service: str) -> None:
        self._spool = spool
        self._expected = expected
        self._service = service
        self._hash = hashlib.sha256()

    def feed(self, piece: bytes) -> Iterable[bytes]:
        try:
            self._spool.write(piece)
        except SpoolFull as error:
            refuse(Reason.TOO_LARGE, f"{error}; send it as UNSIGNED-PAYLOAD, aws-chunked or in parts", self._service)
        self._hash.update(piece)
        return ()

    @property
    def digest(self) -> str:
        return self._hash.hexdigest()

    def read(self, limit: int) -> bytes | None:
        """The whole body, when it is at most ``limit`` bytes (None otherwise), for a check that reads it."""
        return b"".join(self._spool.pieces()) if self._spool.size <= limit else None

    def end(self) -> Iterable[bytes]:
        if self._expected is not None and not hmac.compare_digest(self.digest, self._expected):
            refuse(Reason.PAYLOAD_HASH, "the body does not hash to its x-amz-content-sha256", self._service)
        return self._spool.pieces()

    def close(self) -> None:
        self._spool.close()


class _Chunked:
    """The parts of an aws-chunked body every mode shares: the reader, the trailing checksums, the length."""

    def __init__(self, reader: ChunkReader, checks: TrailerChecks | None, length: int | None, service: str) -> None:
        self._reader = reader
        self._checks = checks
        self._length = length
        self._service = service
        self._held: list[bytes] = []  # the last chunk and the trailers, until they check
        self._trailers: list[Trailer] = []

    def feed(self, piece: bytes) -> Iterable[bytes]:
        out: list[Iterable[bytes]] = []
        for event in self._reader.feed(piece):
            out.append(self._on(event))
        return _chain(out)

    def end(self) -> Iterable[bytes]:
        self._reader.finish()
        return ()

    def close(self) -> None:
        return None

    def _on(self, event: Event) -> Iterable[bytes]:
        raise NotImplementedError

    def _trailer(self, event: Trailer) -> None:
        self._trailers.append(event)

    def _finished(self, signature_line: bytes | None) -> Iterable[bytes]:
        if self._length is not None and self._reader.decoded != self._length:
            refuse(Reason.CHUNK, "the body's length is not its x-amz-decoded-content-length", self._service)
        trailers = [t for t in self._trailers if t.name != TRAILER_SIGNATURE]
        if self._checks is not None:
            self._checks.check([(t.name, t.value) for t in trailers])
        elif trailers:
            refuse(Reason.CHUNK, "trailers in a body that announced none", self._service)
        lines = [t.raw + CRLF for t in trailers]
        if signature_line is not None:
            lines.append(signature_line + CRLF)
        return (*self._held, *lines, CRLF)


class UnsignedTrailer(_Chunked):
    """``STREAMING-UNSIGNED-PAYLOAD-TRAILER`` (botocore's S3 default): chunks stream through unchanged; the
    last chunk and the trailers wait until the trailing checksum matches the body."""

    def _on(self, event: Event) -> Iterable[bytes]:
        if isinstance(event, ChunkData):
            if self._checks is not None:
                self._checks.update(event.data)
            return (event.data,)
        if isinstance(event, ChunkHead):
            if event.size == 0:
                self._held.append(event.raw + CRLF)
                return ()
            return (event.raw + CRLF,)
        if isinstance(event, ChunkEnd):
            return () if self._held else (CRLF,)
        if isinstance(event, Trailer):
            if event.name == TRAILER_SIGNATURE:
                refuse(Reason.CHUNK, "a trailer signature in an unsigned body", self._service)
            self._trailer(event)
            return ()
        assert isinstance(event, Finished)
        return self._finished(None)


class SignedChunks(_Chunked):
    """``STREAMING-AWS4-HMAC-SHA256-PAYLOAD`` (and ``-TRAILER``): each chunk is held until its signature checks
    in the placeholder's chain, then goes on with its signature in the real chain (the same length, so the
    body's length holds); the trailers' signature likewise."""

    def __init__(
        self,
        reader: ChunkReader,
        checks: TrailerChecks | None,
        length: int | None,
        service: str,
        chains: tuple[ChunkChain, ChunkChain],
        spools: Callable[[], Spool],
    ) -> None:
        super().__init__(reader, checks, length, service)
        self._given, self._ours = chains
        self._spools = spools
        self._head: ChunkHead | None = None
        self._hash = hashlib.sha256()
        self._spool: Spool | None = None
        self._count = 0

    def _on(self, event: Event) -> Iterable[bytes]:
        if isinstance(event, ChunkHead):
            self._head, self._hash, self._spool = event, hashlib.sha256(), self._spools()
            return ()
        if isinstance(event, ChunkData):
            assert self._spool is not None
            try:
                self._spool.write(event.data)
            except SpoolFull as error:
                refuse(Reason.TOO_LARGE, f"a chunk is too large: {error}", self._service)
            self._hash.update(event.data)
            if self._checks is not None:
                self._checks.update(event.data)
            return ()
        if isinstance(event, ChunkEnd):
            return self._chunk_end()
        if isinstance(event, Trailer):
            if self._trailers and self._trailers[-1].name == TRAILER_SIGNATURE:
                refuse(Reason.CHUNK, "trailers after the trailer signature", self._service)
            self._trailer(event)
            return ()
        assert isinstance(event, Finished)
        return self._finished(self._trailer_signature())

    def _chunk_end(self) -> Iterable[bytes]:
        head, spool = self._head, self._spool
        assert head is not None and head.signature is not None and spool is not None
        self._count += 1
        digest = self._hash.hexdigest()
        if not hmac.compare_digest(self._given.chunk(digest), head.signature):
            spool.close()
            refuse(Reason.CHUNK, f"the signature of chunk {self._count} does not match", self._service)
        line = head.raw.partition(b";")[0] + b";chunk-signature=" + self._ours.chunk(digest).encode("ascii") + CRLF
        if head.size == 0:
            spool.close()
            self._held.append(line)
            return ()
        return _chain([(line,), _drained(spool), (CRLF,)])

    def _trailer_signature(self) -> bytes | None:
        signatures = [t for t in self._trailers if t.name == TRAILER_SIGNATURE]
        if self._checks is None:
            if signatures:
                refuse(Reason.CHUNK, "a trailer signature in a body that announced no trailers", self._service)
            return None
        if len(signatures) != 1 or self._trailers[-1].name != TRAILER_SIGNATURE:
            refuse(Reason.CHUNK, "the trailers must end with one x-amz-trailer-signature", self._service)
        trailers = [(t.name, t.value) for t in self._trailers[:-1]]
        if not hmac.compare_digest(self._given.trailer(trailers), signatures[0].value):
            refuse(Reason.CHUNK, "the trailer signature does not match", self._service)
        return f"{TRAILER_SIGNATURE}:{self._ours.trailer(trailers)}".encode("ascii")

    def close(self) -> None:
        if self._spool is not None:
            self._spool.close()


def _drained(spool: Spool) -> Iterator[bytes]:
    try:
        yield from spool.pieces()
    finally:
        spool.close()


def _chain(parts: list[Iterable[bytes]]) -> Iterator[bytes]:
    for part in parts:
        yield from part


def spool_factory(directory: Path | None, limits: SpoolLimits) -> Callable[[], Spool]:
    return lambda: Spool(directory, limits)
