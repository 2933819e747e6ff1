"""The masker's spellings keep an answer's length, and a session spells each secret once, until it is revoked."""

from __future__ import annotations

import base64
from datetime import UTC, datetime, timedelta
from urllib.parse import quote

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.egress.injectors.swap import Injection
from broker.egress.terminate.ca import SessionCA
from broker.egress.terminate.interceptor import Interceptor
from broker.egress.terminate.masking import ONE_PASS, Masker, spellings
from broker.vocab.secret import Secret

SECRET, STAND_IN = b"ab+c/def==ghij~klmn", b"QWERTYUIOPasdfghjkl"


def test_every_spelling_has_a_stand_in_of_its_length() -> None:
    pairs = dict(spellings(SECRET, STAND_IN))
    assert pairs[SECRET] == STAND_IN
    for form in (quote(SECRET, safe="-_.~").encode(), SECRET.hex().upper().encode(), SECRET.hex(" ").encode()):
        assert form in pairs
    assert any(base64.b64encode(SECRET)[:-4] in form for form in pairs)  # the characters of the secret alone
    assert all(len(form) == len(stand_in) and form != stand_in for form, stand_in in pairs.items())


def test_a_stand_in_of_another_length_stands_in_for_the_raw_bytes_only() -> None:
    assert spellings(SECRET, b"short") == ((SECRET, b"short"),)


def test_a_short_spelling_is_left_out_but_the_raw_secret_never() -> None:
    assert all(len(form) >= 8 or form == b"abc" for form, _ in spellings(b"abc", b"xyz"))
    assert Masker([(b"abc", b"xyz")]).whole(b"[abc]") == b"[xyz]"


def test_a_session_spells_each_secret_once_and_forgets_them_when_revoked() -> None:
    interceptor = Interceptor(SessionCA(["api.test"], datetime.now(UTC) + timedelta(minutes=5)))
    interceptor.add(Injection(frozenset({("api.test", 443)}), Secret("p" * 19), Secret(SECRET.decode())))
    first = interceptor.spell(SECRET, STAND_IN)
    assert interceptor.spell(SECRET, STAND_IN) is first
    masker = interceptor.masker("api.test", 443)
    # The placeholder escaped where the secret is: "ab%2Bc" becomes "pp%70p".
    escaped = b"".join(b"p" if quote(chr(byte), safe="-_.~") == chr(byte) else b"%70" for byte in SECRET)
    assert masker.feed(b"x" + quote(SECRET, safe="").encode()) + masker.flush() == b"x" + escaped
    interceptor.revoke()
    assert interceptor.spell(SECRET, STAND_IN) is not first and not interceptor.masker("api.test", 443).active


def naive(pairs: list[tuple[bytes, bytes]], value: bytes) -> bytes:
    """Every spelling of every secret replaced, longest first: what the masker promises, searched the long way."""
    forms = sorted(
        (form for secret, stand_in in pairs for form in spellings(secret, stand_in)), key=lambda f: -len(f[0])
    )
    for form, stand_in in forms:
        value = value.replace(form, stand_in)
    return value


@settings(max_examples=200, deadline=None)
@given(
    secret=st.binary(min_size=1, max_size=48),
    cut=st.integers(min_value=0, max_value=200),
    around=st.lists(st.binary(max_size=30), min_size=1, max_size=5),
)
def test_skipping_the_spellings_longer_than_a_value_masks_it_as_searching_them_all(
    secret: bytes, cut: int, around: list[bytes]
) -> None:
    """The masker leaves out the spellings that cannot fit in what it searches; a value of any length, holding any
    spelling of the secret whole or cut short, comes out as every spelling searched would leave it."""
    stand_in = bytes(b ^ 0x55 for b in secret)
    pairs = [(secret, stand_in), (b"another-secret-of-more-length", b"ANOTHER-STAND-IN-OF-SAME-LEN")]
    forms = [form for form, _ in spellings(secret, stand_in)]
    value = b"".join(part + forms[i % len(forms)] for i, part in enumerate(around))[:cut]
    assert Masker(pairs).whole(value) == naive(pairs, value)
    masker = Masker(pairs)
    assert masker.feed(value) + masker.flush() == naive(pairs, value)


def test_a_session_keeps_how_it_searches_its_secrets_until_it_is_revoked() -> None:
    interceptor = Interceptor(SessionCA(["api.test"], datetime.now(UTC) + timedelta(minutes=5)))
    interceptor.add(Injection(frozenset({("api.test", 443)}), Secret("p" * 19), Secret(SECRET.decode())))
    assert interceptor.masker("api.test", 443).spelled is interceptor.masker("api.test", 443).spelled
    assert interceptor.masker("api.test", 443).whole(b"<" + SECRET + b">") == b"<" + b"p" * 19 + b">"
    interceptor.revoke()
    assert not interceptor.masker("api.test", 443).active


@settings(max_examples=150, deadline=None)
@given(
    secrets=st.lists(st.binary(min_size=8, max_size=64), min_size=3, max_size=4, unique=True),
    cuts=st.lists(st.integers(min_value=1, max_value=400), max_size=6),
    around=st.lists(st.binary(max_size=40), min_size=1, max_size=6),
)
def test_one_search_for_many_spellings_misses_none_in_a_body_cut_anywhere(
    secrets: list[bytes], cuts: list[int], around: list[bytes]
) -> None:
    """With many spellings (several secrets: one automaton search of each piece first), a body holding any of them,
    arriving in pieces cut anywhere, comes out as every spelling searched in the whole body would leave it."""
    pairs = [(secret, bytes(b ^ 0x55 for b in secret)) for secret in secrets]
    forms = [form for secret, stand_in in pairs for form, _ in spellings(secret, stand_in)]
    assert len(forms) > ONE_PASS
    body = b"".join(part + forms[(7 * i) % len(forms)] for i, part in enumerate(around))
    masker, out, start = Masker(pairs), b"", 0
    for cut in sorted(cuts):
        out += masker.feed(body[start:cut])
        start = max(start, cut)
    out += masker.feed(body[start:]) + masker.flush()
    assert out == naive(pairs, body)


def test_more_spellings_than_one_search_can_hold_are_each_searched_and_nothing_is_printed(
    capfd: pytest.CaptureFixture[str],
) -> None:
    """Past what RE2 compiles (hundreds of long secrets) the masker searches each spelling, as with few, and RE2's
    complaint, which would quote the pattern and so the secrets, is never written to stderr."""
    pairs = [(b"%04d" % n * 90, b"%04d" % (n + 5000) * 90) for n in range(400)]
    forms = spellings(*pairs[123])
    body = b"<a>" + forms[3][0] + b"</a>" + pairs[7][0]
    masker = Masker(pairs)
    assert masker.feed(body) + masker.flush() == naive(pairs, body) != body
    assert capfd.readouterr().err == ""
