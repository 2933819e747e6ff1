"""A service key's placeholder keeps its prefix and nothing else; the header template fills its own header only."""

from __future__ import annotations

import pytest

from broker.egress.injectors.interface import HeadOnly, RequestHead
from broker.egress.injectors.template import HeaderTemplate
from broker.vocab.secret import Secret
from providers.placeholders import placeholder_for


@pytest.mark.parametrize(
    ("secret", "prefix"),
    [
        ("sk-proj-" + "A1b2C3d4" * 6, "sk-proj-"),
        ("sk-ant-api03-" + "Zx9_" * 20, "sk-ant-api03-"),
        ("sk-" + "q" * 48, "sk-"),
        ("ghp_" + "a1" * 18, "ghp_"),
        ("hvs." + "B" * 90, "hvs."),
        ("xoxb-" + "1234567890-" * 3, "xoxb-"),
        ("AbCdEfGh" * 6, ""),  # no prefix: all of it random
        ("ab-cd-" + "x" * 4, ""),  # a "prefix" longer than half the secret would show too much of it
    ],
)
def test_a_placeholder_keeps_the_prefix_and_nothing_else(secret: str, prefix: str) -> None:
    placeholder = placeholder_for(Secret(secret)).reveal()
    assert len(placeholder) == len(secret) and placeholder != secret
    assert placeholder.startswith(prefix)
    assert placeholder[len(prefix) :].isalnum()
    assert secret[len(prefix) : len(prefix) + 8] not in placeholder  # the random part is new


def test_the_template_fills_only_its_own_header_with_the_placeholder() -> None:
    placeholder, secret = Secret("sk-" + "p" * 20), Secret("sk-" + "s" * 20)
    template = HeaderTemplate(
        "openai", frozenset({("api.openai.com", 443)}), "Authorization: Bearer {}", placeholder, secret
    )

    def sent(*headers: tuple[bytes, bytes]) -> tuple[tuple[bytes, bytes], ...] | None:
        passage = template.begin(RequestHead(b"GET", b"/", headers))
        assert passage is None or isinstance(passage, HeadOnly)
        return None if passage is None or passage.head is None else passage.head.headers

    p, s = placeholder.reveal_bytes(), secret.reveal_bytes()
    assert sent((b"authorization", b"Bearer " + p)) == ((b"authorization", b"Bearer " + s),)
    assert sent((b"authorization", b"bearer " + p)) == ((b"authorization", b"Bearer " + s),)
    assert sent((b"authorization", b"Basic " + p)) is None
    assert sent((b"authorization", b"Bearer " + p + b"x")) is None
    assert sent((b"x-api-key", p)) is None
    assert template.mask_pairs() == [(s, p)]
    template.forget()
    assert sent((b"authorization", b"Bearer " + p)) is None and template.mask_pairs() == []


@pytest.mark.parametrize("length", [12, 23, 40])
def test_a_rotated_value_of_another_length_stays_behind_the_same_placeholder(length: int) -> None:
    """A new KV version may be shorter or longer: the sandbox's placeholder still selects it, and an answer
    echoing it shows a stand-in of its own length (the body's framing holds), never the value."""
    placeholder, old = Secret("sk-" + "p" * 20), Secret("sk-" + "s" * 20)
    template = HeaderTemplate("openai", frozenset({("api.openai.com", 443)}), "x-api-key: {}", placeholder, old)
    new = Secret("sk-" + "n" * (length - 3))
    rotated = template.rotated(new)
    passage = rotated.begin(RequestHead(b"GET", b"/", ((b"x-api-key", placeholder.reveal_bytes()),)))
    assert isinstance(passage, HeadOnly) and passage.head is not None
    assert passage.head.headers == ((b"x-api-key", new.reveal_bytes()),)
    [(secret, stand_in)] = rotated.mask_pairs()
    assert secret == new.reveal_bytes() and len(stand_in) == length and b"n" * 8 not in stand_in
    assert stand_in[:length].startswith(placeholder.reveal_bytes()[: min(length, 23)])
    assert template.mask_pairs() == [(old.reveal_bytes(), placeholder.reveal_bytes())]  # the old one unchanged
