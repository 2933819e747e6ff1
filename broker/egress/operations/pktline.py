"""git's pkt-line framing: reading packets out of bytes that arrive in pieces, writing packets and side-band data.

A packet is four hex digits giving its length (the four included) and that
many bytes less four of payload; ``0000`` is a flush. Lengths 1 to 3 (``0001``
delim and ``0002`` response-end belong to protocol v2, which a push never
uses) and anything over git's 65520 are refused, as are length digits that are
not exactly four hex digits (Python's ``int`` would take ``" 1ab"`` or
``"0x1a"``; git does not).
"""

from __future__ import annotations

import re

MAX_PACKET = 65520  # git's LARGE_PACKET_MAX
SIDEBAND_MAX = {"side-band-64k": MAX_PACKET, "side-band": 1000}  # git's LARGE_PACKET_MAX, DEFAULT_PACKET_MAX
FLUSH_BYTES = b"0000"
_LENGTH = re.compile(rb"[0-9a-fA-F]{4}")


class PacketError(ValueError):
    """Bytes that are not pkt-lines; the message says what is wrong (the bytes are not echoed)."""


class Flush:
    """The flush packet (``0000``)."""

    def __repr__(self) -> str:
        return "FLUSH"


FLUSH = Flush()


class PacketReader:
    """Packets out of pieces of a stream; ``consumed`` counts the bytes of the packets returned so far."""

    def __init__(self) -> None:
        self._buffer = bytearray()
        self._at = 0  # where the next packet starts in the buffer
        self.consumed = 0

    def push(self, data: bytes) -> None:
        if self._at:
            del self._buffer[: self._at]
            self._at = 0
        self._buffer += data

    @property
    def pending(self) -> int:
        """Bytes received but not yet returned as packets."""
        return len(self._buffer) - self._at

    def next(self) -> bytes | Flush | None:
        """The next packet's payload, ``FLUSH``, or ``None`` when its bytes have not all arrived yet."""
        at, buffer = self._at, self._buffer
        if len(buffer) - at < 4:
            return None
        head = bytes(buffer[at : at + 4])
        if not _LENGTH.fullmatch(head):
            raise PacketError("a pkt-line length that is not four hex digits")
        length = int(head, 16)
        if length == 0:
            self._at += 4
            self.consumed += 4
            return FLUSH
        if length < 4:
            raise PacketError(f"a special packet ({head.decode()}) where a push has none")
        if length > MAX_PACKET:
            raise PacketError(f"a pkt-line longer than {MAX_PACKET} bytes")
        if len(buffer) - at < length:
            return None
        self._at += length
        self.consumed += length
        return bytes(buffer[at + 4 : at + length])


def packet(payload: bytes) -> bytes:
    """One pkt-line holding ``payload``."""
    if len(payload) + 4 > MAX_PACKET:
        raise PacketError(f"a pkt-line longer than {MAX_PACKET} bytes")
    return b"%04x" % (len(payload) + 4) + payload


def sideband(band: int, data: bytes, max_packet: int) -> bytes:
    """``data`` in side-band ``band`` packets of at most ``max_packet`` bytes each (git's ``send_sideband``)."""
    room = max_packet - 5
    return b"".join(packet(bytes([band]) + data[at : at + room]) for at in range(0, len(data), room))
