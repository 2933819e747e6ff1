"""The aws-chunked reader: the same events wherever the pieces split, and a piece that is all data passed on
as it is (the bytes most of an upload is made of are not copied on their way through)."""

from __future__ import annotations

import os

import pytest

from broker.egress.injectors.sigv4 import RequestRefused
from broker.egress.injectors.sigv4.chunks import ChunkData, ChunkEnd, ChunkHead, ChunkReader, Event, Finished, Trailer

DATA = os.urandom(300)
BODY = b"100\r\n" + DATA[:256] + b"\r\n2c\r\n" + DATA[256:] + b"\r\n0\r\nx-amz-checksum-crc32:AAAAAA==\r\n\r\n"


def _events(pieces: list[bytes]) -> list[Event]:
    reader = ChunkReader(signed=False)
    events = [event for piece in pieces for event in reader.feed(piece)]
    reader.finish()
    return events


def _merged(events: list[Event]) -> list[object]:
    """The events with each chunk's data joined (where the pieces split a chunk's data differs, nothing else)."""
    out: list[object] = []
    for event in events:
        if isinstance(event, ChunkData) and out and isinstance(out[-1], bytes):
            out[-1] += event.data
        else:
            out.append(bytes(event.data) if isinstance(event, ChunkData) else event)
    return out


def test_every_split_of_the_body_gives_the_same_events() -> None:
    whole = _merged(_events([BODY]))
    assert whole == [
        ChunkHead(256, None, b"100"),
        DATA[:256],
        ChunkEnd(),
        ChunkHead(44, None, b"2c"),
        DATA[256:],
        ChunkEnd(),
        ChunkHead(0, None, b"0"),
        ChunkEnd(),
        Trailer("x-amz-checksum-crc32", "AAAAAA==", b"x-amz-checksum-crc32:AAAAAA=="),
        Finished(),
    ]
    for cut in range(1, len(BODY)):
        assert _merged(_events([BODY[:cut], BODY[cut:]])) == whole, cut
    assert _merged(_events([BODY[i : i + 1] for i in range(len(BODY))])) == whole


def test_a_piece_that_is_all_data_is_passed_on_not_copied() -> None:
    reader = ChunkReader(signed=False)
    assert list(reader.feed(b"100\r\n")) == [ChunkHead(256, None, b"100")]
    first, second = DATA[:100], DATA[100:256]
    (one,) = reader.feed(first)
    (two,) = reader.feed(second)
    assert isinstance(one, ChunkData) and one.data is first
    assert isinstance(two, ChunkData) and two.data is second
    # a piece that is only partly data gives its data part alone
    events = list(reader.feed(b"\r\n2c\r\n" + DATA[256:280]))
    assert events == [ChunkEnd(), ChunkHead(44, None, b"2c"), ChunkData(DATA[256:280])]


def test_data_past_a_chunk_s_size_is_still_refused() -> None:
    reader = ChunkReader(signed=False)
    with pytest.raises(RequestRefused):
        list(reader.feed(b"2\r\nabc\r\n"))
