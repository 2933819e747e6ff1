"""Verify a request signed with the placeholder key, then re-sign it with the real one: the API the proxy calls.

    verifier = Verifier(placeholder, real, spool_dir=session_tmpfs)
    verdict = verifier.begin(head)            # Passage, or Refusal (answer it, send nothing upstream)
    if passage.head: send it upstream          # None: the head waits until the body checked (a hashed body)
    for piece in body: send(passage.feed(piece))  # raises RequestRefused: abort, upstream gets no whole request
    ending = passage.end()                     # raises RequestRefused likewise
    send(ending.head if any, then ending.pieces); passage.close()

What is re-signed is exactly what was verified: the same method, target,
headers and signed-header list; only the Authorization header (or the
presigned query's credential, token and signature) and the session token
change, and the signing date stays the client's. Only the actions
``Actions`` lets through are re-signed (``broker.egress.injectors.sigv4.actions``: no
request that answers with new credentials).

A body the signature covers by its hash is spooled, and nothing of the
request, not even its head, is released before the whole body matches (and,
for STS, before the action it names is read from it): a refused request
sends nothing upstream. A declared hash is checked against the signature at
once, so a bad signature is refused before the body is read. aws-chunked
bodies stream (``broker.egress.injectors.sigv4.bodies``): the head goes at once, each
chunk once its signature checks, so before a bad chunk upstream has the head
and the chunks before it, and then a connection closed mid-body.
"""

from __future__ import annotations

import hmac
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import quote, unquote

from broker.egress.injectors.sigv4 import checks
from broker.egress.injectors.sigv4.actions import FORM_LIMIT, Actions
from broker.egress.injectors.sigv4.bodies import Hashed, PassThrough, SignedChunks, UnsignedTrailer, spool_factory
from broker.egress.injectors.sigv4.canonical import SigningInput, SigningKeys, authorization, sign
from broker.egress.injectors.sigv4.chain import ChunkChain
from broker.egress.injectors.sigv4.checksums import TrailerChecks, declared_trailers
from broker.egress.injectors.sigv4.chunks import ChunkReader
from broker.egress.injectors.sigv4.parsing import (
    QUERY_SIGNATURE,
    QUERY_TOKEN,
    Target,
    one_header,
    read_signature,
    split_target,
)
from broker.egress.injectors.sigv4.spool import Spool, SpoolLimits
from broker.egress.injectors.sigv4.values import (
    Head,
    Header,
    PayloadMode,
    Reason,
    Refusal,
    RequestRefused,
    Signed,
    refuse,
)
from broker.vocab.secret import AwsKeys

METHOD = re.compile(rb"[A-Z]{1,20}")
MISMATCH = (
    "The request signature we calculated does not match the signature you provided. "
    "Check your key and signing method (checked with this session's placeholder key)."
)
Body = PassThrough | Hashed | UnsignedTrailer | SignedChunks


@dataclass(frozen=True)
class Ending:
    """What ``end`` releases: the re-signed head when it waited for the body, then the rest of the body."""

    head: Head | None
    pieces: Iterator[bytes] = field(default_factory=lambda: iter(()))


class Passage:
    """One verified request on its way upstream; ``close`` it when done (it may hold a spool)."""

    def __init__(
        self, head: Head | None, body: Body, mode: PayloadMode, signed: Signed, settle: Callable[[Hashed], Head] | None
    ) -> None:
        self.head = head
        self.mode = mode
        self.signed = signed
        self._body = body
        self._settle = settle
        self._closed = False

    def feed(self, piece: bytes) -> Iterable[bytes]:
        """The pieces that may go upstream now (consume them before the next call)."""
        if self._closed:
            raise RuntimeError("the passage is closed")
        try:
            return self._body.feed(piece)
        except RequestRefused:
            self.close()
            raise

    def end(self, trailers: Sequence[Header] = ()) -> Ending:
        """The body is complete (``trailers``: the HTTP trailers, which SigV4 does not cover, so none may come)."""
        try:
            if trailers:
                refuse(Reason.MALFORMED, "HTTP trailers are not part of a SigV4 request", self.signed.scope.service)
            pieces = iter(self._body.end())
            head = self._settle(self._body) if self._settle and isinstance(self._body, Hashed) else None
            return Ending(head, pieces)
        except RequestRefused:
            self.close()
            raise

    def close(self) -> None:
        self._closed = True
        self._body.close()

    def __enter__(self) -> Passage:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


class Verifier:
    """Verifies requests signed with ``placeholder`` and re-signs them with ``real`` (one credential's keys)."""

    def __init__(
        self,
        placeholder: AwsKeys,
        real: AwsKeys,
        *,
        spool_dir: Path | None = None,
        spool: SpoolLimits | None = None,
        clock: Callable[[], datetime] | None = None,
        actions: Actions | None = None,
    ) -> None:
        if (placeholder.session_token is None) != (real.session_token is None):
            raise ValueError("the placeholder and the real keys must both have a session token, or neither")
        self.placeholder = placeholder
        self.real = real
        self._signing = SigningKeys(placeholder), SigningKeys(real)  # each signing key derived once, kept with them
        self.spool_dir = spool_dir
        self.spool = spool or SpoolLimits()
        self.clock = clock or (lambda: datetime.now(UTC))
        self.actions = actions or Actions()

    def begin(self, head: Head) -> Passage | Refusal:
        """Check the head; a ``Passage`` to forward it through, or the ``Refusal`` to answer instead."""
        try:
            return self._begin(head)
        except RequestRefused as refused:
            return refused.refusal

    def _begin(self, head: Head) -> Passage:
        if not METHOD.fullmatch(head.method):
            refuse(Reason.MALFORMED, "the request method is not an HTTP token")
        target = split_target(head.target)
        signed = read_signature(head, target)
        checks.check_key(signed, self.placeholder)
        checks.check_token(head, target, signed, self.placeholder)
        checks.check_time(signed, self.clock())
        checks.check_headers(head, signed)
        mode, payload = checks.payload_mode(head, signed)
        service = signed.scope.service
        self.actions.check_head(head, target, service)
        reads = self.actions.reads_body(service)
        if reads and mode is not PayloadMode.HASHED:
            refuse(
                Reason.ACTION, "an STS request's body must be covered by its signature (it names the action)", service
            )
        signing = _signing_input(head, target, signed, payload or "")
        if mode is PayloadMode.HASHED:  # nothing goes upstream, not even the head, before the body matched
            if payload is not None:  # the hash is declared: the signature checks now, before the body is read
                self._verify(signing, signed)

            def settle(body: Hashed) -> Head:
                whole = signing if payload is not None else replace(signing, payload=body.digest)
                if payload is None:  # the body's hash is part of the signature: it checks now
                    self._verify(whole, signed)
                if reads:  # the action it names (STS), before anything is signed with the real keys
                    self.actions.check_body(head, target, body.read(FORM_LIMIT))
                return self._signed(head, target, signed, whole)[0]

            body = Hashed(Spool(self.spool_dir, self.spool), payload, service)
            return Passage(None, body, mode, signed, settle)
        assert payload is not None  # only a hashed body's hash is unknown before the body
        self._verify(signing, signed)
        new_head, new_signature = self._signed(head, target, signed, signing)
        return Passage(new_head, self._body(head, signed, mode, payload, new_signature), mode, signed, None)

    def _verify(self, signing: SigningInput, signed: Signed) -> None:
        """``signing`` checks against the placeholder key (``SIGNATURE`` refused otherwise)."""
        if not hmac.compare_digest(sign(signing, self._signing[0]), signed.signature):
            refuse(Reason.SIGNATURE, MISMATCH, signed.scope.service)

    def _signed(self, head: Head, target: Target, signed: Signed, signing: SigningInput) -> tuple[Head, str]:
        """The request of ``signing`` (verified) signed with the real keys, and its new signature (the seed of the
        real chunk chain)."""
        real_token = self.real.session_token.reveal() if self.real.session_token is not None else None
        if signed.presigned:
            values = {"X-Amz-Credential": f"{self.real.access_key_id}/{signed.scope.text()}"}
            if real_token is not None:
                values[QUERY_TOKEN] = real_token
            ours = signing.with_query(values)
            values[QUERY_SIGNATURE] = signature = sign(ours, self._signing[1])
            return Head(head.method, _requery(target, values).encode("ascii"), head.headers), signature
        ours = signing if real_token is None else signing.with_header("x-amz-security-token", real_token)
        signature = sign(ours, self._signing[1])
        new_authorization = authorization(self.real, ours, signature).encode("ascii")
        headers: list[Header] = []
        for name, value in head.headers:
            lower = name.lower()
            if lower == b"authorization":
                value = new_authorization
            elif lower == b"x-amz-security-token" and real_token is not None:
                value = real_token.encode("ascii")
            headers.append((name, value))
        return Head(head.method, head.target, tuple(headers)), signature

    def _body(self, head: Head, signed: Signed, mode: PayloadMode, payload: str, new_signature: str) -> Body:
        service = signed.scope.service
        if mode is PayloadMode.UNSIGNED:
            return PassThrough()
        length = checks.decoded_length(head, service)
        trailer_header = one_header(head, b"x-amz-trailer")
        with_trailer = mode in (PayloadMode.UNSIGNED_TRAILER, PayloadMode.SIGNED_CHUNKS_TRAILER)
        if not with_trailer and trailer_header is not None:
            refuse(Reason.MALFORMED, "x-amz-trailer with a payload mode that has no trailers", service)
        trailers = TrailerChecks(declared_trailers(trailer_header, service), service) if with_trailer else None
        if mode is PayloadMode.UNSIGNED_TRAILER:
            return UnsignedTrailer(ChunkReader(False, service), trailers, length, service)
        scope, stamp = signed.scope, signed.timestamp
        chains = (
            ChunkChain(self.placeholder, scope, stamp, signed.signature),
            ChunkChain(self.real, scope, stamp, new_signature),
        )
        spools = spool_factory(self.spool_dir, self.spool)
        return SignedChunks(ChunkReader(True, service), trailers, length, service, chains, spools)


def _signing_input(head: Head, target: Target, signed: Signed, payload: str) -> SigningInput:
    query = target.decoded()
    if signed.presigned:
        query = [(name, value) for name, value in query if name != QUERY_SIGNATURE]
    return SigningInput(
        method=head.method.decode("ascii"),
        path=target.path,
        query=tuple(query),
        headers=tuple((name.decode("latin-1"), value.decode("latin-1")) for name, value in head.headers),
        signed_headers=signed.signed_headers,
        payload=payload,
        scope=signed.scope,
        timestamp=signed.timestamp,
    )


def _requery(target: Target, values: dict[str, str]) -> str:
    """The target with the named query parameters' values replaced (percent-encoded), everything else as sent."""
    items = []
    for item in target.items:
        key, _, _ = item.partition("=")
        name = unquote(key)
        items.append(f"{key}={quote(values[name], safe='-_.~')}" if name in values else item)
    return f"{target.path}?{'&'.join(items)}"
