"""The screen of an AWS answer (after the masker): an access key id other than the session's placeholder, or a secret
key or session token field, refuses it with 502 in the service's XML, wherever the pieces of the answer split."""

from __future__ import annotations

import pytest

from broker.egress.injectors.interface import InjectionRefused
from broker.egress.injectors.sigv4.screen import HOLD, KeyScreen
from tests.fixtures.sigv4 import PUBLISHED_KEY_ID

PLACEHOLDER = "ASIAPLACEHOLDER00001"
FOREIGN = PUBLISHED_KEY_ID  # AWS's documented example key id


def screened(answer: bytes, split: int, service: str = "sts") -> InjectionRefused | None:
    """The refusal of ``answer`` given in two pieces split at ``split``, or None when it passes."""
    screen = KeyScreen([PLACEHOLDER], service)
    try:
        screen.scan(answer[:split])
        screen.scan(answer[split:], final=True)
    except InjectionRefused as refused:
        return refused
    return None


@pytest.mark.parametrize("split", range(0, 40))
def test_a_foreign_key_id_is_found_wherever_the_answer_splits(split: int) -> None:
    answer = f"<Credentials><AccessKeyId>{FOREIGN}</AccessKeyId>".encode()
    refused = screened(answer, split)
    assert refused is not None and refused.answer.status == 502 and refused.why == "unknown-key"
    assert b"<Code>AccessDenied</Code>" in refused.answer.body and FOREIGN.encode() not in refused.answer.body
    assert "credentials the session does not own" in refused.reason


@pytest.mark.parametrize("split", range(0, 40))
def test_the_placeholder_and_longer_runs_of_capitals_pass(split: int) -> None:
    assert screened(f"<Key>{PLACEHOLDER}</Key>".encode(), split) is None
    assert screened(f"<Token>{FOREIGN}Z</Token>".encode(), split) is None  # 21 letters and digits: not a key id
    assert screened(f"<Token>X{FOREIGN}</Token>".encode(), split) is None


def test_secret_and_token_fields_are_refused_in_xml_and_json_in_any_case() -> None:
    for answer in (b"<SecretAccessKey>x</SecretAccessKey>", b'{"sessionToken" : "x"}', b"<SESSIONTOKEN>x"):
        refused = screened(answer, 5)
        assert refused is not None and "a secret access key or session token" in refused.reason


def test_the_head_is_screened_and_only_sts_is_held_whole() -> None:
    with pytest.raises(InjectionRefused):
        KeyScreen([PLACEHOLDER], "s3").head([b"application/xml", f"note {FOREIGN}".encode()])
    assert KeyScreen([PLACEHOLDER], "sts").hold is None and KeyScreen([PLACEHOLDER], "s3").hold == HOLD
    s3 = KeyScreen([PLACEHOLDER], "s3")
    s3.scan(b"x" * HOLD)
    s3.scan(b'"SessionToken": past the held part of a streamed object, fields are not looked for')
    with pytest.raises(InjectionRefused) as refused:
        s3.scan(f"but key ids are: {FOREIGN}.".encode(), final=True)
    assert b"<Error><Code>AccessDenied</Code>" in refused.value.answer.body  # S3's shape


@pytest.mark.parametrize("split", range(60, 140, 3))
def test_pieces_longer_than_what_is_kept_between_them(split: int) -> None:
    lead = b"y" * 100
    assert screened(lead + f"X{FOREIGN} {PLACEHOLDER}".encode(), split, "s3") is None
    assert screened(lead + f"/{FOREIGN}/".encode() + lead, split, "s3") is not None


def pieces_of(answer: bytes, size: int) -> InjectionRefused | None:
    screen = KeyScreen([PLACEHOLDER], "s3")
    try:
        for start in range(0, len(answer), size):
            screen.scan(answer[start : start + size])
        screen.scan(b"", final=True)
    except InjectionRefused as refused:
        return refused
    return None


@pytest.mark.parametrize("size", [1, 2, 7, 19, 20, 21, 47, 48, 49, 50, 97])
def test_an_answer_in_many_small_pieces(size: int) -> None:
    lead, trail = b"y" * 130, b"z" * 130
    assert pieces_of(lead + f" {FOREIGN} ".encode() + trail, size) is not None
    assert pieces_of(lead + f" {FOREIGN}".encode(), size) is not None  # at the very end
    assert pieces_of(lead + f" {PLACEHOLDER} ".encode() + trail, size) is None
    assert pieces_of(lead + f"Q{FOREIGN}Q".encode() + trail, size) is None
    assert pieces_of(lead + f"q{FOREIGN}".encode(), size) is None  # a lower-case letter before: not standing alone
