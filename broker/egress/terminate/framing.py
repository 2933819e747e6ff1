"""One framing per request: where the client's body ends, decided once, and the only framing header sent upstream.

An HTTP/1.1 request says where its body ends with ``Transfer-Encoding:
chunked`` or with ``Content-Length``. h11, which reads the client's request,
takes the chunked coding when both are present, as RFC 9112 (section 6.3)
says; a server or a front that frames by ``Content-Length`` instead (Python's
``http.server`` does, and so do others) finds the body's end elsewhere, and
the bytes the proxy took for a body become a request of their own on the
upstream connection: one no operations check saw and no ``egress.request``
record names, whose answer the next request of the tunnel then gets
(request smuggling). The proxy is the intermediary the RFC asks to remove the
``Content-Length`` of such a message; it does more:

- a request that carries both, or ``Transfer-Encoding`` in HTTP/1.0 (RFC 9112
  section 6.1: its framing is faulty), is refused with 400 before anything
  else is done with it (``Refusal.FRAMING``: counted, and the
  ``egress.request`` record of a terminated host names it);
- what goes upstream is framed by the proxy: every ``Content-Length`` and
  ``Transfer-Encoding`` of the head is taken out and one header of the proxy's
  put back (``framed``): ``Transfer-Encoding: chunked`` for a chunked body,
  ``Content-Length`` with the count h11 holds the client to otherwise, and
  none for a request without a body. The upstream h11 connection frames the
  body by that header and refuses to send a byte more or less than it says.

A credential's injector that changes a body's length sets the framing of the
head it sends itself (``broker.egress.injectors.interface``); that head's
framing is read the same way (``declared``) and written the same way.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from broker.egress.exchange.refusals import Refusal, Refused

Header = tuple[bytes, bytes]
FRAMING_HEADERS = frozenset({b"content-length", b"transfer-encoding"})
_LENGTH = re.compile(rb"[0-9]{1,19}")


@dataclass(frozen=True)
class Framing:
    """A request body's framing: ``length`` bytes (``Content-Length``), or chunked when ``length`` is None."""

    length: int | None

    @property
    def header(self) -> Header:
        if self.length is None:
            return (b"transfer-encoding", b"chunked")
        return (b"content-length", str(self.length).encode("ascii"))


def _refused(reason: str) -> Refused:
    return Refused(400, f"{reason}: a request has one framing", Refusal.FRAMING)


def declared(headers: Sequence[Header], http_version: bytes = b"1.1") -> Framing | None:
    """The one framing ``headers`` (names in lower case) give a request body; None: no body. ``Refused`` (400)
    when they give two, or one that is not plain (see the module docstring)."""
    codings = [value for name, value in headers if name == b"transfer-encoding"]
    lengths = [value for name, value in headers if name == b"content-length"]
    if codings and lengths:
        raise _refused("Transfer-Encoding and Content-Length together")
    if codings:
        if http_version != b"1.1":
            raise _refused(f"Transfer-Encoding in an HTTP/{http_version.decode('ascii', 'replace')} request")
        if len(codings) != 1 or codings[0].strip().lower() != b"chunked":
            raise _refused("a Transfer-Encoding other than one chunked")
        return Framing(None)
    if not lengths:
        return None
    if len(lengths) != 1 or not _LENGTH.fullmatch(lengths[0].strip()):
        raise _refused("a Content-Length that is not one number")
    return Framing(int(lengths[0]))


def framed(headers: Sequence[Header], framing: Framing | None) -> list[Header]:
    """``headers`` without any framing header of their own, and with ``framing``'s, the proxy's, last."""
    kept = [(name, value) for name, value in headers if name not in FRAMING_HEADERS]
    if framing is not None:
        kept.append(framing.header)
    return kept
