"""A placeholder shares nothing with its secret beyond the secret's declared public prefix (``ghs_``, ``sk-``, ...).

The sandbox reads the placeholder from its file and environment, so every
character of it that is the secret's is given away. A key whose random part
happens to start with letters and ``_`` (``QbWxTkPz_...``, common in base64url
keys) once kept those letters as if they were a kind's prefix: up to 12
characters, half of a short key. Here: a property over many random secrets
(with and without a public prefix), the case found, and the same key as a
``kind: secret`` read from OpenBao by a real ``broker exec``, whose sandbox
must see none of it.
"""

from __future__ import annotations

import secrets
import string

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.vocab.secret import Secret
from providers.placeholders import placeholder_for
from tests.fixtures.openbao import OpenBao
from tests.fixtures.sandbox import sandbox_unavailable
from tests.integration.egress.test_any_service import Service, service  # noqa: F401  (the fixture)

#: The public prefixes a placeholder may keep, as the services that issue such keys publish them.
PUBLIC = (
    *("ghs_", "ghp_", "gho_", "ghu_", "ghr_", "github_pat_", "hvs.", "hvb.", "hvr.", "s.", "b.", "r."),
    *("sk-", "sk-proj-", "sk-svcacct-", "sk-admin-", "sk-ant-api03-", "sk-ant-admin01-"),
    *("xoxb-", "xoxp-", "xoxa-", "xoxe-", "xapp-", "sk_live_", "sk_test_", "rk_live_", "rk_test_"),
    *("glpat-", "npm_", "pypi-", "hf_", "gsk_", "r8_", "pplx-", "xai-", "AIza"),
)
BASE64URL = string.ascii_letters + string.digits + "-_"


def shared(secret: str, placeholder: str) -> int:
    """How many of the secret's first characters the placeholder repeats."""
    return next((i for i, (a, b) in enumerate(zip(secret, placeholder, strict=False)) if a != b), len(secret))


def declared(secret: str) -> int:
    """The length of the public prefix a placeholder of ``secret`` may keep (the longest; at most half of it)."""
    return max((len(p) for p in PUBLIC if secret.startswith(p) and 2 * len(p) <= len(secret)), default=0)


def test_the_prefixes_kept_are_published_ones() -> None:
    from providers.placeholders import PREFIXES

    assert set(PREFIXES) == set(PUBLIC)


@settings(max_examples=3000, deadline=None)
@given(
    prefix=st.sampled_from(("", "", *PUBLIC)),
    rest=st.text(alphabet=BASE64URL + ".", min_size=1, max_size=64),
)
def test_a_placeholder_repeats_no_character_of_its_secret_past_the_public_prefix(prefix: str, rest: str) -> None:
    secret = prefix + rest
    placeholder = placeholder_for(Secret(secret)).reveal()
    assert len(placeholder) == len(secret) and placeholder != secret
    assert shared(secret, placeholder) <= declared(secret), (secret, placeholder)


def test_random_base64url_keys_keep_nothing() -> None:
    """Keys as services mint them (``secrets.token_urlsafe``): none of their characters lead the placeholder."""
    for length in (12, 32):
        for _ in range(3000):
            secret = secrets.token_urlsafe(length)
            placeholder = placeholder_for(Secret(secret)).reveal()
            assert shared(secret, placeholder) <= declared(secret), (secret, placeholder)


@pytest.mark.parametrize(
    ("secret", "kept"),
    [
        ("QbWxTkPz_" + "g7OvfJPe0c_", ""),  # the case found: letters then '_' are not a kind's prefix
        ("abcd-efgh-" + "Zx9" * 8, ""),  # nor lower-case words with '-'
        ("ghs_" + "A1b2" * 9, "ghs_"),
        ("hvs." + "CAESI" * 18, "hvs."),
        ("sk-ant-api03-" + "Zx9_" * 20, "sk-ant-api03-"),
        ("sk-proj-" + "A1b2C3d4" * 6, "sk-proj-"),
        ("github_pat_" + "11ABCDEFG" * 9, "github_pat_"),
    ],
)
def test_only_a_public_prefix_is_kept(secret: str, kept: str) -> None:
    for _ in range(200):  # the character after the prefix is random: never the secret's, whatever is drawn
        placeholder = placeholder_for(Secret(secret)).reveal()
        assert placeholder.startswith(kept) and shared(secret, placeholder) == len(kept), placeholder


@pytest.mark.server
@pytest.mark.skipif(bool(sandbox_unavailable()), reason=str(sandbox_unavailable()))
def test_a_kind_secret_of_no_known_shape_puts_none_of_it_in_the_sandbox(service: Service, openbao: OpenBao) -> None:  # noqa: F811
    """A made-up key (letters then '_', no public prefix) in OpenBao's KV, delivered by ``broker exec`` with
    ``inject: proxy``: the sandbox's file and variable hold a placeholder that starts with none of it."""
    secret = "QbWxTkPz_" + secrets.token_urlsafe(24)
    openbao.client().secrets.kv.v2.create_or_update_secret(path="llm/openai", secret={"api_key": secret})
    inside = 'echo "env=$OPENAI_API_KEY"; echo "file=$(cat /run/secrets/openai/secret)"'
    result = service.env.run_process("exec", "--task", str(service.task()), "--", "sh", "-c", inside, timeout=120)
    assert result.code == 0, result.stderr
    values = dict(line.split("=", 1) for line in result.stdout.splitlines() if "=" in line)
    assert values["env"] == values["file"] and len(values["env"]) == len(secret)
    assert shared(secret, values["env"]) == 0, (secret, values["env"])
    assert secret[:4] not in result.stdout + result.stderr
