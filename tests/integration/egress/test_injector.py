"""The credential step's interface (``broker.egress.injectors.interface``), driven through the real proxy.

Three injectors of the shapes later credentials take: one that holds the
head until the body has been read and signs over the body (as a SigV4
re-signer must for a signed payload hash), refusing mid-body; one that
puts a secret into a header template (``x-api-key: {}``); and the rotation
of that secret behind the same placeholder (``Interceptor.replace``). The
upstream records what reached it; the operations check runs first.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from pathlib import Path

from broker.egress.injectors.interface import Ending, HeadOnly, InjectionRefused, RequestHead
from broker.egress.operations import Answer
from tests.fixtures.operations_stage import API, Stage, stage
from tests.integration.egress.test_evidence import RawTunnel

__all__ = ["stage"]

SECRET, ROTATED, PLACEHOLDER = b"sk-real-0123456789", b"sk-next-0123456789", b"sk-fake-0123456789"
XML = "application/xml"


class BodySigner:
    """Holds the head until the body ended, then signs its SHA-256 into a header; refuses a body saying ``stop``."""

    credential = "signer"
    upstream_ca_file: Path | None = None

    def __init__(self, hosts: frozenset[tuple[str, int]], upstream_ca_file: Path | None) -> None:
        self.hosts, self.upstream_ca_file = hosts, upstream_ca_file
        self.spooled: list[bytes] = []

    def begin(self, head: RequestHead) -> HeadOnly | Answer | SigningPassage | None:
        if (b"authorization", b"Sign " + PLACEHOLDER) not in head.headers:
            return None
        if (b"x-refuse", b"at-once") in head.headers:
            return Answer(403, XML, b"<Error><Code>AccessDenied</Code></Error>")
        return SigningPassage(self, head)

    def mask_pairs(self) -> Sequence[tuple[bytes, bytes]]:
        return [(SECRET, PLACEHOLDER)]

    def forget(self) -> None:
        return None


class SigningPassage:
    def __init__(self, injector: BodySigner, head: RequestHead) -> None:
        self.injector = injector
        self.original = head
        self.head: RequestHead | None = None  # waits for the body
        self.digest = hashlib.sha256()
        self.pieces: list[bytes] = []
        self.closed = False

    def feed(self, piece: bytes) -> Iterable[bytes]:
        if b"stop" in piece:
            raise InjectionRefused(Answer(403, XML, b"<Error><Code>SignatureDoesNotMatch</Code></Error>"), "stop")
        self.digest.update(piece)
        self.pieces.append(piece)
        return ()  # nothing goes before the head

    def end(self) -> Ending:
        signature = hashlib.sha256(SECRET + self.digest.hexdigest().encode()).hexdigest().encode()
        headers = [(n, b"Sign " + SECRET if n == b"authorization" else v) for n, v in self.original.headers]
        headers.append((b"x-body-signature", signature))
        head = RequestHead(self.original.method, self.original.target, tuple(headers))
        return Ending(head, iter(self.pieces))

    def close(self) -> None:
        self.closed = True
        self.injector.spooled = self.pieces


class Template:
    """``x-api-key: {}``: the placeholder in that one header becomes ``secret``."""

    upstream_ca_file: Path | None = None

    def __init__(self, stage: Stage, secret: bytes, credential: str = "llm") -> None:
        self.hosts, self.secret, self.credential = hosts(stage), secret, credential
        self.upstream_ca_file = stage.interceptor.upstream_ca_file  # the test CA, as the provider's would be

    def begin(self, head: RequestHead) -> HeadOnly | None:
        if (b"x-api-key", PLACEHOLDER) not in head.headers:
            return None
        headers = tuple((n, self.secret if n == b"x-api-key" else v) for n, v in head.headers)
        return HeadOnly(RequestHead(head.method, head.target, headers))

    def mask_pairs(self) -> Sequence[tuple[bytes, bytes]]:
        return [(self.secret, PLACEHOLDER)]

    def forget(self) -> None:
        return None


def hosts(stage: Stage) -> frozenset[tuple[str, int]]:
    return frozenset({(API, stage.ports[API])})


def test_a_passage_whose_head_waits_for_the_body_signs_it_and_refuses_mid_body(stage: Stage) -> None:
    signer = BodySigner(hosts(stage), stage.interceptor.upstream_ca_file)
    stage.interceptor.add_injector(signer)
    tunnel = RawTunnel(stage, API)
    body = b'{"event": "COMMENT", "body": "' + b"x" * 300_000 + b'"}'
    review = "/api/v3/repos/octo/widgets/pulls/7/reviews"
    sign = [("Authorization", "Sign " + PLACEHOLDER.decode()), ("Content-Length", str(len(body)))]
    status, _ = tunnel.exchange(tunnel.head("POST", review, sign), body)
    assert status == 201
    [seen] = stage.api.seen
    headers = {name.lower(): value for name, value in seen.headers}
    assert headers["authorization"] == "Sign " + SECRET.decode()
    expected = hashlib.sha256(SECRET + hashlib.sha256(body).hexdigest().encode()).hexdigest()
    assert headers["x-body-signature"] == expected
    assert len(seen.body) == len(body) and hashlib.sha256(seen.body).digest() == hashlib.sha256(body).digest()

    stop = b'{"event": "COMMENT", "body": "stop"}'
    sign[1] = ("Content-Length", str(len(stop)))
    status, answer = tunnel.exchange(tunnel.head("POST", review, sign), stop)
    assert (status, answer) == (403, b"<Error><Code>SignatureDoesNotMatch</Code></Error>")
    fresh = RawTunnel(stage, API)
    status, answer = fresh.exchange(fresh.head("GET", "/api/v3/user", [sign[0], ("x-refuse", "at-once")]))
    assert (status, answer) == (403, b"<Error><Code>AccessDenied</Code></Error>")
    assert len(stage.api.seen) == 1  # neither refusal sent a whole request upstream
    records = stage.records(3)
    assert [(r["credential"], r["decision"], r["status"]) for r in records] == [
        ("signer", "allowed", 201),
        ("signer", "refused", 403),
        ("signer", "refused", 403),
    ]
    assert "then refused: stop" in records[1]["reason"]


def test_a_header_template_puts_the_secret_in_and_rotation_swaps_it_between_requests(stage: Stage) -> None:
    stage.interceptor.add_injector(Template(stage, SECRET))
    tunnel = RawTunnel(stage, API)
    key = [("x-api-key", PLACEHOLDER.decode())]
    assert tunnel.exchange(tunnel.head("GET", "/api/v3/user", key))[0] == 200
    stage.interceptor.replace("llm", Template(stage, ROTATED))
    assert tunnel.exchange(tunnel.head("GET", "/api/v3/user", key))[0] == 200  # the same tunnel, the new secret
    assert [dict(s.headers)["x-api-key"] for s in stage.api.seen] == [SECRET.decode(), ROTATED.decode()]
    assert [r["credential"] for r in stage.records(2)] == ["llm", "llm"]
    # The answer never carries the secret back: the upstream's JSON echo of the path holds none here, and the
    # records never hold a header value at all.
    assert SECRET.decode() not in stage.log.path.read_text() and ROTATED.decode() not in stage.log.path.read_text()
