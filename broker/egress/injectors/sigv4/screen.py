"""What an answer from an AWS host may not carry back to the sandbox: credentials the session does not own.

The answer masker (``broker.egress.injectors.swap.Masker``) turns the session's own
keys into their placeholders before anything else reads the answer; what is
left that looks like AWS credentials belongs to someone else: the answer to
an action that mints (``broker.egress.injectors.sigv4.actions`` refuses those it
knows), an S3 Express ``CreateSession``, an upstream handing keys out.
``KeyScreen`` reads an answer after the masker (its head's values, then its
body) and refuses it when it holds an AWS access key id (``AKIA``, ``ASIA``,
``ABIA`` or ``ACCA`` and 16 upper-case letters and digits, standing alone)
other than the placeholders the sandbox holds, or a field of a secret
access key or session token (``<SecretAccessKey>``, ``"SessionToken":``, in
any case): 502, in the service's XML, and nothing of it is passed on.

How much is held (``hold``): an STS answer whole (they are small: one over
the proxy's bound is refused unchecked), so that refusal is always a clean
502; any other service's answer (S3's objects can be any size) streams, its
head and first ``HOLD`` bytes held back, so an API answer (a
``CreateSession``, an error) is refused cleanly, and a key id found past
them cuts the answer off: the client gets a truncated body, never the key.
Key ids are looked for in the whole answer (a search for their fixed
prefixes, in each piece where it lies: no copy of it, several times the
masker's speed); the secret and token fields in the held part, where the APIs
that hand credentials out answer. The screen keeps the last bytes of each
piece and looks again where two pieces meet, so a key id or a field split
across them is found.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence

from broker.egress.injectors.interface import InjectionRefused
from broker.egress.injectors.sigv4.errors import error_response
from broker.egress.injectors.sigv4.values import Reason, Refusal
from broker.egress.operations import Answer

#: An AWS access key id: long-term (AKIA), temporary (ASIA), a bearer token's (ABIA), a context credential's (ACCA);
#: one standing alone (no letter or digit either side: ``standalone``). No look-behind: it would cost 40x the time.
KEY_ID = re.compile(rb"A(?:KIA|SIA|BIA|CCA)[A-Z0-9]{16}")
ALNUM = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789")
#: A secret access key's or session token's field, in XML or JSON, in any case.
FIELD = re.compile(rb'(?i)<(?:secretaccesskey|sessiontoken)>|"(?:secretaccesskey|sessiontoken)"[ \t\r\n]{0,8}:')
#: What a piece's end keeps for the next: enough for a key id or a field split across two pieces.
KEEP = 48
#: Bytes of a streamed answer held back with its head.
HOLD = 64 * 1024
STATUS = 502
WHY = "unknown-key"


class KeyScreen:
    """One answer's screen (see the module docstring); ``known``: the key ids the sandbox holds (placeholders)."""

    def __init__(self, known: Collection[str], service: str) -> None:
        self._known = frozenset(key.encode("ascii") for key in known)
        self._service = service
        self._context = b""  # the byte before the tail (what a key id at the tail's start must not follow)
        self._tail = b""  # the last KEEP bytes seen (a piece itself is scanned where it lies, never copied)
        self._seen = 0  # bytes of the body seen
        self.hold: int | None = None if service == "sts" else HOLD

    def head(self, values: Sequence[bytes]) -> None:
        for value in values:
            self._check(value, fields=True, final=True)

    def scan(self, data: bytes, *, final: bool = False) -> None:
        fields = self.hold is None or self._seen < self.hold
        self._seen += len(data)
        if self._tail:  # what starts in the kept tail and runs on into this piece (a few bytes, copied)
            joint = self._context + self._tail + data[:KEEP]
            lead = len(self._context)
            self._check(joint, start=lead, below=lead + len(self._tail), fields=fields, final=final)
        previous = (self._context + self._tail)[-1:]
        self._check(data, before=previous[0] if previous else None, fields=fields, final=final)  # not copied
        if len(data) > KEEP:
            self._context, self._tail = data[-KEEP - 1 : -KEEP], data[-KEEP:]
            return
        rest = self._tail + data
        if len(rest) > KEEP:
            self._context, self._tail = rest[-KEEP - 1 : -KEEP], rest[-KEEP:]
        else:
            self._tail = rest

    def _check(
        self,
        buffer: bytes,
        *,
        start: int = 0,
        below: int | None = None,
        before: int | None = None,
        fields: bool,
        final: bool,
    ) -> None:
        """Refuse what ``buffer`` holds from ``start`` on (a key id starting at or past ``below`` is left to another
        look; ``before``: the byte preceding ``buffer``). A key id touching the end waits for the next piece,
        unless ``final``: it may go on there."""
        end = len(buffer)
        for found in KEY_ID.finditer(buffer, start, end if below is None else min(end, below + 20)):
            first, last = found.start(), found.end()
            if below is not None and first >= below:
                break
            if last == end and not final:
                break
            preceding = buffer[first - 1] if first else before
            alone = (preceding is None or preceding not in ALNUM) and (last == end or buffer[last] not in ALNUM)
            if alone and found.group() not in self._known:
                self._refuse("an AWS access key id that is not this session's")
        if fields and FIELD.search(buffer, start) is not None:
            self._refuse("a secret access key or session token")

    def _refuse(self, what: str) -> None:
        message = f"the answer holds {what}; the broker's proxy does not pass on credentials the session does not own"
        _, headers, body = error_response(Refusal(Reason.CREDENTIALS, message, self._service))
        content_type = next((v.decode() for k, v in headers if k == b"content-type"), "application/xml")
        extra = tuple((k.decode(), v.decode()) for k, v in headers if k not in (b"content-type", b"content-length"))
        raise InjectionRefused(Answer(STATUS, content_type, body, extra), f"sigv4: {message}", WHY)
