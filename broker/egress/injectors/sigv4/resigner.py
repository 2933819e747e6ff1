"""An ``inject: proxy`` AWS credential as the proxy's credential step: every request to its hosts verified, re-signed.

``Resigner`` is the ``Injector`` (``broker.egress.injectors.interface``) of one
AWS credential. Its hosts are AWS's (the provider's ``proxy_hosts``): a
request to them goes upstream only re-signed, so it never passes unchanged.
Each request is handed to the ``Verifier``: signed with the placeholder key
id and checking, for an action it re-signs (``actions``: STS's by name, none
that answers with new credentials, ``broker.egress.injectors.sigv4.actions``), it goes
on re-signed with the real STS keys; signed with anything else, unsigned,
tampered, SigV4A, any mechanism the verifier cannot check, or for another
action, it is refused (``InjectionRefused`` carrying the 403 with the S3 or
STS XML error body the SDKs print; ``why``: ``action`` for an action, else
``credential``) and nothing goes upstream. A body whose hash the signature
covers is checked whole before anything of the request goes; an aws-chunked
body that stops checking midway (a chunk signature, a trailing checksum) is
refused mid-body, so upstream never gets a whole request.

Answers from these hosts never carry the real key id, secret or session
token back: an S3 error echoes the access key id, and a SignatureDoesNotMatch
answer its canonical request with the token (raw from a header, URI-encoded
from a presigned URL's query, and all of it again as hex bytes); each
becomes its placeholder, in the same spelling (``mask_pairs``, spelled by
``broker.egress.terminate.masking``; the same lengths). What is left of an
answer after that may not hold credentials the session does not own (an
access key id other than the placeholder, a secret key or token field): each
answer is read through a ``KeyScreen`` (``broker.egress.injectors.sigv4.screen``) and
refused with 502 when it does. After ``forget``
(revocation), every request is refused with ``AccessDenied`` naming the
revocation, in the XML of the signature's service (the host's when the
signature does not read): ``revoked_answer``, which the proxy also gives
every request to these hosts once the session is revoked, so an SDK raises
an error that says so.

``rotated`` is the renewal behind the placeholder: a new ``Resigner`` with the
same placeholder keys (the sandbox signs as before, and is verified with the
same placeholder secret) and the renewed STS keys for re-signing. The proxy
swaps it in (``Interceptor.rotate``); a request under way keeps the passage
it began with, so a streaming upload that started before the swap finishes
its chunk chain with the keys it was re-signed with, and the next request
begins on the new keys. The keys it replaced stay in its ``mask_pairs``, so
an answer to a request still under way never carries them back either.
``busy`` counts the requests still under way on a ``Resigner``: the old keys
are revoked only once the one they were replaced in has none left (or they
end), so a long upload re-signed with them is not cut off by their revocation.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path

from broker.egress.injectors.interface import Ending, InjectionRefused, RequestHead
from broker.egress.injectors.sigv4.actions import Actions
from broker.egress.injectors.sigv4.errors import error_response
from broker.egress.injectors.sigv4.parsing import read_signature, split_target
from broker.egress.injectors.sigv4.screen import KeyScreen
from broker.egress.injectors.sigv4.spool import SpoolLimits
from broker.egress.injectors.sigv4.values import Head, Reason, Refusal, RequestRefused
from broker.egress.injectors.sigv4.verifier import Passage as Verified
from broker.egress.injectors.sigv4.verifier import Verifier
from broker.egress.operations import Answer
from broker.vocab.secret import AwsKeys

REVOKED = "this session has been revoked; its AWS credentials are no longer put in"


def refused(refusal: Refusal, host_service: str) -> InjectionRefused:
    """The exception that answers ``refusal`` (403, the XML error of the signature's service or the host's)."""
    status, headers, body = error_response(refusal, host_service)
    content_type = next((v.decode() for k, v in headers if k == b"content-type"), "application/xml")
    extra = tuple((k.decode(), v.decode()) for k, v in headers if k not in (b"content-type", b"content-length"))
    answer = Answer(status, content_type, body, extra)
    why = "action" if refusal.reason is Reason.ACTION else "credential"
    return InjectionRefused(answer, f"sigv4: {refusal.reason.summary}: {refusal.message}", why)


def host_service(host: str) -> str:
    """The error shape a host's clients expect when the signature named no service: STS's for ``sts.*``."""
    return "sts" if host.startswith("sts.") else "s3"


class ResignedPassage:
    """A verified request on its way upstream (the request path's ``Passage`` over the verifier's)."""

    def __init__(
        self, verified: Verified, service: str, closed: Callable[[], None] = lambda: None, known: Sequence[str] = ()
    ) -> None:
        self._verified = verified
        self._service = service
        self._closed: Callable[[], None] | None = closed
        self._known = known
        self.head: RequestHead | None = _request_head(verified.head) if verified.head is not None else None

    def answer_screen(self) -> KeyScreen:
        """What reads the answer: no access key id but ``known`` (the placeholders), no secret or token field."""
        return KeyScreen(self._known, self._service)

    def feed(self, piece: bytes) -> Iterable[bytes]:
        """The pieces that may go upstream now, checked before this returns; a spooled chunk's bytes are read
        from its spool as they are taken, so a chunk larger than memory is never held whole."""
        try:
            pieces = self._verified.feed(piece)
        except RequestRefused as error:
            raise refused(error.refusal, self._service) from None
        return self._pieces(iter(pieces))

    def end(self) -> Ending:
        try:
            ending = self._verified.end()
        except RequestRefused as error:
            raise refused(error.refusal, self._service) from None
        head = _request_head(ending.head) if ending.head is not None else None
        return Ending(head, self._pieces(ending.pieces))

    def _pieces(self, pieces: Iterator[bytes]) -> Iterator[bytes]:
        try:
            yield from pieces
        except RequestRefused as error:
            raise refused(error.refusal, self._service) from None

    def close(self) -> None:
        closed, self._closed = self._closed, None
        try:
            self._verified.close()
        finally:
            if closed is not None:
                closed()


class Resigner:
    """The injector of one ``inject: proxy`` AWS credential (see the module docstring)."""

    def __init__(
        self,
        name: str,
        hosts: frozenset[tuple[str, int]],
        placeholder: AwsKeys,
        real: AwsKeys,
        *,
        upstream_ca_file: Path | None = None,
        spool_dir: Path | None = None,
        spool: SpoolLimits | None = None,
        previous: AwsKeys | None = None,
        actions: Actions | None = None,
    ) -> None:
        self._name = name
        self._hosts = hosts
        self._upstream_ca_file = upstream_ca_file
        self._spool_dir = spool_dir
        self._spool = spool
        self._actions = actions or Actions()
        self.placeholder = placeholder
        self._real: AwsKeys | None = real
        self._previous = previous  # the keys this one replaced: still masked in answers to requests under way
        self._verifier: Verifier | None = Verifier(
            placeholder, real, spool_dir=spool_dir, spool=spool, actions=self._actions
        )
        self._open = 0
        self._mutex = threading.Lock()

    @property
    def busy(self) -> int:
        """How many requests re-signed by this injector are still under way (their passages not closed)."""
        with self._mutex:
            return self._open

    def _closed(self) -> None:
        with self._mutex:
            self._open -= 1

    @property
    def credential(self) -> str:
        return self._name

    @property
    def hosts(self) -> frozenset[tuple[str, int]]:
        return self._hosts

    @property
    def upstream_ca_file(self) -> Path | None:
        return self._upstream_ca_file

    def begin(self, head: RequestHead) -> ResignedPassage:
        """The verified, re-signed passage; raises ``InjectionRefused`` for anything else (nothing goes upstream)."""
        verifier = self._verifier
        if verifier is None:
            raise _revoked(head)
        verdict = verifier.begin(Head(head.method, head.target, head.headers))
        if isinstance(verdict, Refusal):
            raise refused(verdict, host_service(_host(head)))
        with self._mutex:
            self._open += 1
        return ResignedPassage(verdict, verdict.signed.scope.service, self._closed, (self.placeholder.access_key_id,))

    def rotated(self, real: AwsKeys) -> Resigner:
        """This credential's injector with the renewed STS keys ``real`` behind the same placeholder (after
        ``forget`` the proxy drops it at once: ``Interceptor.rotate``)."""
        return Resigner(
            self._name,
            self._hosts,
            self.placeholder,
            real,
            upstream_ca_file=self._upstream_ca_file,
            spool_dir=self._spool_dir,
            spool=self._spool,
            previous=self._real,
            actions=self._actions,
        )

    def revoked_answer(self, head: RequestHead) -> Answer:
        """What a request to these hosts gets once the session is revoked: 403 and the S3 or STS XML error with
        ``AccessDenied`` and a message naming the revocation (the same as ``begin`` after ``forget``)."""
        return _revoked(head).answer

    def mask_pairs(self) -> Sequence[tuple[bytes, bytes]]:
        real = self._real
        if real is None:
            return []
        pairs = self._pairs(real)
        if self._previous is not None:
            pairs += self._pairs(self._previous)
        return [(secret, stand_in) for secret, stand_in in pairs if len(secret) == len(stand_in)]

    def _pairs(self, real: AwsKeys) -> list[tuple[bytes, bytes]]:
        """Each real value with its placeholder; a renewed token of another length gets the placeholder's token
        cut or repeated to its length (an answer keeps its length, and still never carries the real one)."""
        pairs = [
            (real.access_key_id.encode(), self.placeholder.access_key_id.encode()),
            (real.secret_access_key.reveal_bytes(), self.placeholder.secret_access_key.reveal_bytes()),
        ]
        if real.session_token is not None and self.placeholder.session_token is not None:
            token = real.session_token.reveal_bytes()
            pairs.append((token, _fitted(self.placeholder.session_token.reveal_bytes(), len(token))))
        return pairs

    def forget(self) -> None:
        self._verifier = None
        self._real = None
        self._previous = None


def _fitted(stand_in: bytes, length: int) -> bytes:
    return (stand_in * (length // max(len(stand_in), 1) + 1))[:length]


def _revoked(head: RequestHead) -> InjectionRefused:
    """The refusal of a revoked session's request, in the shape of the service its signature names, else its
    host's (STS's for ``sts.*``)."""
    try:
        signed = read_signature(Head(head.method, head.target, head.headers), split_target(head.target))
        service = signed.scope.service
    except RequestRefused:
        service = host_service(_host(head))
    return refused(Refusal(Reason.REVOKED, REVOKED, service), service)


def _request_head(head: Head) -> RequestHead:
    return RequestHead(head.method, head.target, head.headers)


def _host(head: RequestHead) -> str:
    return next((value.decode("latin-1") for name, value in head.headers if name == b"host"), "")
