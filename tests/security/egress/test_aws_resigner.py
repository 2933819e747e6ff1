"""The AWS credential's injector (``Resigner``) against a foreign key and against an answer that would carry the
real keys back into the sandbox, in process (botocore signs offline: ``tests.fixtures.sigv4``)."""

from __future__ import annotations

import pytest

from broker.egress.injectors.interface import InjectionRefused
from broker.egress.terminate.masking import Masker
from tests.fixtures.sigv4 import resigner, sts_head


def test_a_request_signed_with_another_key_is_refused_with_sts_xml() -> None:
    injector = resigner()
    head, _ = sts_head(injector, keys_of="other")
    with pytest.raises(InjectionRefused) as refused:
        injector.begin(head)
    assert refused.value.answer.status == 403
    assert b"<Code>InvalidClientTokenId</Code>" in refused.value.answer.body
    assert refused.value.reason.startswith("sigv4: signed with another access key id")


def test_answers_never_carry_the_real_key_id_secret_or_token_back() -> None:
    injector = resigner()
    real = injector._real
    assert real is not None and real.session_token is not None
    answer = (
        b"<Error><AWSAccessKeyId>" + real.access_key_id.encode() + b"</AWSAccessKeyId><CanonicalRequest>"
        b"X-Amz-Security-Token="
        + real.session_token.reveal_bytes()
        + b"&"
        + real.secret_access_key.reveal_bytes()
        + b"</CanonicalRequest></Error>"
    )
    masker = Masker(injector.mask_pairs())
    out = b"".join(masker.feed(answer[i : i + 7]) for i in range(0, len(answer), 7)) + masker.flush()
    assert len(out) == len(answer)  # the same length: the answer's framing holds
    for secret in (
        real.access_key_id.encode(),
        real.session_token.reveal_bytes(),
        real.secret_access_key.reveal_bytes(),
    ):
        assert secret not in out
    assert injector.placeholder.access_key_id.encode() in out
