"""The AWS credential's injector (``Resigner``) on its own: what it lets through, revocation.

Requests are made by botocore offline (``tests.fixtures.sigv4``); the request path around the injector is
tested through the real proxy in ``tests/integration/egress/sigv4/test_sandbox.py``, the attacks on it in
``tests/security/egress/test_aws_resigner.py`` and ``test_aws_signatures.py``.
"""

from __future__ import annotations

import os
import tracemalloc
from pathlib import Path

import pytest

from broker.core.inputs.config import load_config
from broker.egress.injectors.interface import InjectionRefused, RequestHead
from broker.egress.injectors.sigv4.resigner import Resigner
from broker.egress.operations import Answer
from providers.aws.files import placeholder_keys
from tests.fixtures.brokerenv import make_env
from tests.fixtures.sigv4 import HOSTS, make_keys, resigner, sts_head
from tests.fixtures.sigv4_chunks import signed_upload


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


def test_a_signed_chunk_larger_than_memory_goes_on_from_its_spool_piece_by_piece(tmp_path: Path) -> None:
    real = make_keys()
    injector = Resigner("store", HOSTS, placeholder_keys(real), real, spool_dir=tmp_path)
    data = os.urandom(16 << 20)
    upload = signed_upload(data, host="s3.us-east-1.amazonaws.com", size=len(data), keys=injector.placeholder)
    passage = injector.begin(RequestHead(upload.head.method, upload.head.target, upload.head.headers))
    assert not isinstance(passage, Answer)
    sent = 0
    tracemalloc.start()
    try:
        for start in range(0, len(upload.body), 65536):
            for piece in passage.feed(upload.body[start : start + 65536]):  # taken as they come, like the proxy
                sent += len(piece)
        sent += sum(len(piece) for piece in passage.end().pieces)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
        passage.close()
    assert sent == len(upload.body)
    assert peak < 2 << 20  # the 16 MiB chunk was never held whole: it went from the spool in pieces
