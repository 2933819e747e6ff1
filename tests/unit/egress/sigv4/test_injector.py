"""The AWS credential's injector (``Resigner``) on its own: what it lets through, what answers carry back, revocation.

Requests are made by botocore offline (``tests.fixtures.sigv4``); the request path around the injector is
tested through the real proxy in ``tests/test_aws_proxy_exec.py``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.core.credential.aws_held import placeholder_keys
from broker.core.inputs.config import load_config
from broker.egress.inject import Masker
from broker.egress.sigv4.injector import Resigner
from broker.egress.terminate.injector import InjectionRefused, RequestHead
from tests.fixtures.brokerenv import make_env
from tests.fixtures.sigv4 import capture, client, make_keys

HOSTS = frozenset({("sts.us-east-1.amazonaws.com", 443), ("s3.us-east-1.amazonaws.com", 443)})


def resigner() -> Resigner:
    real = make_keys()
    return Resigner("store", HOSTS, placeholder_keys(real), real)


def sts_head(injector: Resigner, *, keys_of: str = "placeholder") -> tuple[RequestHead, bytes]:
    keys = injector.placeholder if keys_of == "placeholder" else make_keys()
    sent = capture(client("sts", keys), lambda aws: aws.get_caller_identity())
    return RequestHead(sent.head.method, sent.head.target, sent.head.headers), sent.body


def test_placeholders_have_the_real_shapes_and_differ_from_the_real_keys() -> None:
    real = make_keys(token_length=412)
    stand_in = placeholder_keys(real)
    assert stand_in.access_key_id.startswith("ASIA") and len(stand_in.access_key_id) == 20
    assert stand_in.access_key_id[4:].isalnum() and stand_in.access_key_id.isupper()
    assert len(stand_in.secret_access_key.reveal()) == 40
    assert stand_in.session_token is not None and len(stand_in.session_token.reveal()) == 412
    assert stand_in.access_key_id != real.access_key_id
    assert stand_in.secret_access_key.reveal() != real.secret_access_key.reveal()


def test_a_placeholder_signed_request_goes_on_with_the_real_key_id_and_token() -> None:
    injector = resigner()
    head, body = sts_head(injector)
    passage = injector.begin(head)
    assert passage.head is None  # STS's body hash is part of the signature: the head waits for the body
    assert list(passage.feed(body)) == []
    ending = passage.end()
    assert ending.head is not None
    headers = {name.lower(): value for name, value in ending.head.headers}
    real = injector._real
    assert real is not None and real.session_token is not None
    assert real.access_key_id.encode() in headers[b"authorization"]
    assert headers[b"x-amz-security-token"] == real.session_token.reveal_bytes()
    assert b"".join(ending.pieces) == body
    passage.close()


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


def test_after_forget_every_request_is_refused_and_nothing_is_left_to_mask() -> None:
    injector = resigner()
    head, _ = sts_head(injector)
    injector.forget()
    with pytest.raises(InjectionRefused) as refused:
        injector.begin(head)
    assert b"revoked" in refused.value.answer.body
    assert injector.mask_pairs() == []


def test_an_aws_provider_without_proxy_hosts_re_signs_for_its_region_s_sts_and_s3_hosts(tmp_path: Path) -> None:
    env = make_env(tmp_path)
    try:
        env.add_provider("aws", {"type": "aws_sts", "region": "eu-west-2"})
        env.add_provider("mine", {"type": "aws_sts", "region": "eu-west-2", "proxy_hosts": ["127.0.0.1:8443"]})
        config = load_config(env.write_config())
    finally:
        env.cleanup()
    assert [str(h) for h in config.proxy_targets["aws"].hosts] == [
        "sts.eu-west-2.amazonaws.com:443",
        "s3.eu-west-2.amazonaws.com:443",
    ]
    assert [str(h) for h in config.proxy_targets["mine"].hosts] == ["127.0.0.1:8443"]
