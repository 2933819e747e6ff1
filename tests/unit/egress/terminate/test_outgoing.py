"""What a terminated tunnel writes upstream at once: small pieces joined, a large one passed on as it is, in order."""

from __future__ import annotations

import os

from broker.egress.terminate.outgoing import LARGE, Outgoing


def test_a_small_request_is_one_piece() -> None:
    ready = Outgoing()
    for piece in (b"PUT / HTTP/1.1\r\nhost: x\r\n\r\n", b"5\r\n", b"hello", b"\r\n", b"0\r\n\r\n"):
        ready.add(piece)
    assert ready.take() == [b"PUT / HTTP/1.1\r\nhost: x\r\n\r\n5\r\nhello\r\n0\r\n\r\n"]
    assert not ready


def test_a_large_piece_goes_as_it_is_between_the_small_ones_in_order() -> None:
    big, other = os.urandom(LARGE), os.urandom(4 * LARGE)
    ready = Outgoing()
    for piece in (b"head", b"4000\r\n", big, b"\r\n", b"10000\r\n", other, None, b"", b"\r\n"):
        ready.add(piece)
    pieces = ready.take()
    assert pieces == [b"head4000\r\n", big, b"\r\n10000\r\n", other, b"\r\n"]
    assert pieces[1] is big and pieces[3] is other  # not copied on their way
    assert not ready and ready.take() == []


def test_nothing_ready_is_false() -> None:
    ready = Outgoing()
    ready.add(b"")
    ready.add(None)
    assert not ready


def test_a_framed_piece_s_parts_keep_its_data_apart_and_uncopied() -> None:
    big = os.urandom(4 * LARGE)
    ready = Outgoing()
    ready.add(b"head")
    ready.extend([b"10000\r\n", big, b"\r\n"])  # what h11's send_with_data_passthrough gives for one piece
    ready.extend(None)
    ready.extend([b"0\r\n\r\n"])
    assert ready.size == 4 + 7 + len(big) + 2 + 5  # what the writer flushes on, once it reaches a bound
    pieces = ready.take()
    assert pieces == [b"head10000\r\n", big, b"\r\n0\r\n\r\n"] and pieces[1] is big
    assert ready.size == 0
