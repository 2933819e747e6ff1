"""The answers the proxy gives itself inside a terminated tunnel: a refusal's ``Answer``, a line of text, ``100``.

A refusal keeps the connection when the rest of the request can still be
read and dropped (``close=False``); the proxy says ``Connection: close``
otherwise. Nothing is sent once the exchange no longer allows an answer
(the upstream's answer had begun): the connection is then closed.
"""

from __future__ import annotations

import asyncio
import http

import h11

from broker.egress.operations import Answer

TEXT = "text/plain; charset=utf-8"


def text_answer(status: int, reason: str) -> Answer:
    return Answer(status, TEXT, f"broker egress proxy: {reason}\n".encode())


def can_answer(conn: h11.Connection) -> bool:
    return conn.our_state in (h11.IDLE, h11.SEND_RESPONSE)


def send_answer(conn: h11.Connection, writer: asyncio.StreamWriter, answer: Answer, *, close: bool) -> bool:
    """Send ``answer`` when the exchange still allows one; whether it was sent."""
    if not can_answer(conn):
        return False
    headers = answer.headers()
    if close:
        headers.append((b"connection", b"close"))
    try:
        reason = http.HTTPStatus(answer.status).phrase.encode()
        writer.write(conn.send(h11.Response(status_code=answer.status, headers=headers, reason=reason)) or b"")
        if answer.body:
            writer.write(conn.send(h11.Data(data=answer.body)) or b"")
        writer.write(conn.send(h11.EndOfMessage()) or b"")
    except h11.LocalProtocolError:
        return False
    return True


def send_continue(conn: h11.Connection, writer: asyncio.StreamWriter) -> None:
    """``100 Continue`` when the client waits for it before it sends the body the proxy is about to read."""
    if conn.they_are_waiting_for_100_continue:
        writer.write(conn.send(h11.InformationalResponse(status_code=100, headers=[], reason=b"Continue")) or b"")
