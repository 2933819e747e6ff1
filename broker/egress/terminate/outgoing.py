"""What is ready to go upstream on a terminated tunnel, gathered between two writes.

Small pieces (a request head, a chunk line, a short body) are joined so a
small request goes in one write: one TLS record, one system call. A large
piece (a streamed body's data) is kept as it is and handed to the writer
beside the others (``StreamWriter.writelines``): joining it would copy every
byte of an upload once more on its way, and a TLS record holds only 16 KiB,
so joining it saves no record.
"""

from __future__ import annotations

from collections.abc import Iterable

LARGE = 16 * 1024  # a TLS record's worth of plaintext


class Outgoing:
    """The bytes ready for the next write, in order: small pieces joined, large ones as they are."""

    def __init__(self) -> None:
        self._pieces: list[bytes] = []
        self._small = bytearray()
        self.size = 0  # bytes ready

    def __bool__(self) -> bool:
        return bool(self._pieces or self._small)

    def add(self, data: bytes | None) -> None:
        if not data:
            return
        self.size += len(data)
        if len(data) < LARGE:
            self._small.extend(data)
            return
        self._close_small()
        self._pieces.append(data)

    def extend(self, parts: Iterable[bytes] | None) -> None:
        """The parts of one framed piece (h11's ``send_with_data_passthrough``): its frame and its data."""
        for part in parts or ():
            self.add(part)

    def take(self) -> list[bytes]:
        """Everything ready, in order; the buffer is empty afterwards."""
        self._close_small()
        pieces, self._pieces = self._pieces, []
        self.size = 0
        return pieces

    def _close_small(self) -> None:
        if self._small:
            self._pieces.append(bytes(self._small))
            self._small.clear()
