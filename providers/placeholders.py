"""A token's placeholder, and a token credential's files with it: what every provider of tokens hands the proxy.

A placeholder has the shape of the secret it stands for (its public prefix,
one of a known list such as ``ghs_``, ``hvs.`` or ``sk-ant-api03-``, then
random letters and digits to the same length), so clients accept it
unchanged; nothing else of the secret is in it (``placeholder_for``). The
proxy puts the real token in its place on the way out
(``broker.egress.injectors``).

``token_placeholders`` and ``token_secret`` are the ``Placeholding``
capability of a provider whose credential is one token (GitHub, Vault and
its ``kind: secret``): each file holding the token holds its placeholder
instead, and a file holding any other secret is refused (the proxy could not
stand in for it). A provider whose files hold more than one secret, or hold
it in a format of their own, implements the capability itself (AWS:
``providers.aws.files``).
"""

from __future__ import annotations

import secrets
import string
from typing import Any

from broker.vocab.errors import ProviderError
from broker.vocab.secret import Secret
from providers.base import MintedCredential, ProxiedCredential

ALPHABET = string.ascii_letters + string.digits
#: The public prefixes that name a token's kind, kept in its placeholder so that clients and scanners still tell
#: it apart: the product's own providers' (GitHub, Vault and OpenBao, current and legacy) and the common APIs' an
#: agent calls. Only these: whatever else a secret starts with is its random material, never kept.
PREFIXES = tuple(
    sorted(
        {
            *("ghs_", "ghp_", "gho_", "ghu_", "ghr_", "github_pat_"),  # GitHub
            *("hvs.", "hvb.", "hvr.", "s.", "b.", "r."),  # Vault and OpenBao
            *("sk-", "sk-proj-", "sk-svcacct-", "sk-admin-"),  # OpenAI
            *("sk-ant-api03-", "sk-ant-admin01-"),  # Anthropic
            *("xoxb-", "xoxp-", "xoxa-", "xoxe-", "xapp-"),  # Slack
            *("sk_live_", "sk_test_", "rk_live_", "rk_test_"),  # Stripe
            *("glpat-", "npm_", "pypi-", "hf_", "gsk_", "r8_", "pplx-", "xai-", "AIza"),
        },
        key=lambda prefix: (-len(prefix), prefix),  # the longest first: sk-ant-api03- before sk-
    )
)


def public_prefix(value: str) -> str:
    """The known public prefix ``value`` starts with (``PREFIXES``), when it is at most half of it; else ``""``."""
    return next((p for p in PREFIXES if value.startswith(p) and len(p) * 2 <= len(value)), "")


def placeholder_for(secret: Secret) -> Secret:
    """A random value of ``secret``'s shape: its public prefix, then letters and digits to the same length. Nothing
    past the prefix is the secret's: the first random character is never the one the secret has there."""
    value = secret.reveal()
    prefix = public_prefix(value)
    start = len(prefix)
    while True:
        candidate = prefix + "".join(secrets.choice(ALPHABET) for _ in range(len(value) - start))
        if candidate[start : start + 1] != value[start : start + 1] or not value:
            return Secret(candidate)


def token_placeholders(request: Any, credential: MintedCredential, address: str) -> ProxiedCredential:
    """``Placeholding.placeholders`` of a one-token credential: its files with the token's placeholder; ``address``
    is not needed (the core points the provider's address hint at it, ``ProxyFacts.address_env``)."""
    placeholder = placeholder_for(credential.secret)
    files: dict[str, Secret | str] = {}
    for name, content in credential.files.items():
        if isinstance(content, Secret):
            if content != credential.secret:
                raise ProviderError(
                    f"credential {request.name!r}: a file holds another secret the proxy cannot stand in for"
                )
            content = placeholder
        files[name] = content
    return ProxiedCredential(files, credential.secret, placeholder)


def token_secret(credential: MintedCredential) -> Secret:
    """``Placeholding.proxy_secret`` of a one-token credential: the token."""
    return credential.secret
