"""Renewed STS keys behind the same placeholder (``Resigner.rotated``, swapped in by ``Interceptor.rotate``).

A request under way when the keys are swapped keeps the keys it began with: a streaming upload re-signed in the
old chain finishes in the old chain (checked by verifying what went upstream under the old real keys, the way
AWS would); the next request is re-signed with the new keys. The sandbox's placeholder, and the secret its
signatures are verified with, never change. Chunk signatures come from tests/fixtures/sigv4_chunks.py (AWS's
formula, checked against AWS's published example), not from the code under test.
"""

from __future__ import annotations

import os

import pytest

from broker.egress.injectors.interface import InjectionRefused, RequestHead
from broker.egress.injectors.sigv4 import Head, Verifier
from broker.egress.injectors.sigv4.resigner import Resigner
from broker.egress.terminate.ca import SessionCA
from broker.egress.terminate.interceptor import Interceptor
from providers.aws.files import placeholder_keys
from tests.fixtures.sigv4 import HOSTS, Captured, forward, header, make_keys, sts_head
from tests.fixtures.sigv4_chunks import signed_upload

S3 = ("s3.us-east-1.amazonaws.com", 443)
DATA = os.urandom(300_000).replace(b"\r", b"\x00")  # no CR inside: the checks below look for framing


def no_ca(hosts: object) -> SessionCA:
    raise AssertionError("these tests never make the session CA")


def proxied() -> tuple[Interceptor, Resigner]:
    real = make_keys()
    injector = Resigner("store", HOSTS, placeholder_keys(real), real)
    interceptor = Interceptor(no_ca)
    interceptor.add_injector(injector)
    return interceptor, injector


def current(interceptor: Interceptor) -> Resigner:
    (injector,) = interceptor.injectors(*S3)
    assert isinstance(injector, Resigner)
    return injector


def request_head(captured: Captured) -> RequestHead:
    return RequestHead(captured.head.method, captured.head.target, captured.head.headers)


def key_id_of(head: RequestHead | Head) -> str:
    authorization = (header(Head(head.method, head.target, head.headers), b"authorization") or b"").decode()
    return authorization.partition("Credential=")[2].partition("/")[0]


def test_an_upload_under_way_finishes_in_the_old_chain_and_the_next_request_uses_the_new_keys() -> None:
    interceptor, first = proxied()
    old = first._real
    assert old is not None
    upload = signed_upload(DATA, keys=first.placeholder, trailer=True)
    passage = current(interceptor).begin(request_head(upload))
    assert passage.head is not None  # a streaming upload's head goes on at once, re-signed
    sent_head, sent = passage.head, bytearray()
    half = len(upload.body) // 2
    for part in passage.feed(upload.body[:half]):
        sent += part

    renewed = make_keys()
    assert interceptor.rotate("store", renewed)  # the swap, mid-upload
    assert interceptor.draining("store")  # its old keys are not revoked while the upload goes on

    for part in passage.feed(upload.body[half:]):
        sent += part
    ending = passage.end()
    for part in ending.pieces:
        sent += part
    passage.close()
    assert not interceptor.draining("store")  # the upload is over: the old keys may be revoked
    assert key_id_of(sent_head) == old.access_key_id
    # What went upstream is one whole chain under the old keys: a verifier holding them accepts every chunk.
    upstream = Captured(Head(sent_head.method, sent_head.target, sent_head.headers), bytes(sent))
    forward(Verifier(old, make_keys()), upstream)
    with pytest.raises(AssertionError):
        forward(Verifier(renewed, make_keys()), upstream)

    # The next request begins on the new keys, still verified with the unchanged placeholder.
    now = current(interceptor)
    assert now is not first and now.placeholder == first.placeholder
    head, body = sts_head(now)
    assert key_id_of(head) == first.placeholder.access_key_id
    passage = now.begin(head)
    passage.feed(body)
    ending = passage.end()
    assert ending.head is not None and key_id_of(ending.head) == renewed.access_key_id
    token = header(Head(ending.head.method, ending.head.target, ending.head.headers), b"x-amz-security-token")
    assert renewed.session_token is not None and token == renewed.session_token.reveal_bytes()
    passage.close()
    # A second upload after the swap is chained under the new keys from its first chunk.
    again = signed_upload(DATA, keys=first.placeholder)
    forward(Verifier(renewed, make_keys()), Captured(*forward_through(now, again)))


def forward_through(injector: Resigner, upload: Captured) -> tuple[Head, bytes]:
    passage = injector.begin(request_head(upload))
    out = bytearray()
    for part in passage.feed(upload.body):
        out += part
    ending = passage.end()
    for part in ending.pieces:
        out += part
    head = passage.head or ending.head
    passage.close()
    assert head is not None
    return Head(head.method, head.target, head.headers), bytes(out)


def test_only_the_placeholder_is_accepted_before_and_after_the_swap() -> None:
    interceptor, first = proxied()
    old = first._real
    assert old is not None
    renewed = make_keys()
    interceptor.rotate("store", renewed)
    now = current(interceptor)
    for signer in (old, renewed):  # the real keys, old or new, never sign for the sandbox
        forged = Resigner("forger", HOSTS, signer, make_keys())
        head, _ = sts_head(forged)
        with pytest.raises(InjectionRefused):
            now.begin(head)


def test_answers_never_carry_the_new_keys_or_the_ones_they_replaced() -> None:
    interceptor, first = proxied()
    old = first._real
    assert old is not None and old.session_token is not None
    # AWS's session tokens vary in length from one session to the next
    renewed = make_keys(token_length=len(old.session_token.reveal()) + 40)
    interceptor.rotate("store", renewed)
    masker = interceptor.masker(*S3)
    assert renewed.session_token is not None
    secrets = [
        renewed.access_key_id.encode(),
        renewed.secret_access_key.reveal_bytes(),
        renewed.session_token.reveal_bytes(),
        old.access_key_id.encode(),
        old.secret_access_key.reveal_bytes(),
        old.session_token.reveal_bytes(),
    ]
    echoed = b"<Error>" + b"|".join(secrets) + b"</Error>"
    masked = masker.feed(echoed) + masker.flush()
    assert len(masked) == len(echoed)  # the answer keeps its length (and its framing)
    assert all(secret not in masked for secret in secrets)
    interceptor.revoke()
    assert current(interceptor).mask_pairs() == []


def test_a_revoked_session_takes_no_renewed_keys() -> None:
    interceptor, _ = proxied()
    interceptor.revoke()
    assert not interceptor.rotate("store", make_keys())
    head, _ = sts_head(current(interceptor))
    with pytest.raises(InjectionRefused):
        current(interceptor).begin(head)
