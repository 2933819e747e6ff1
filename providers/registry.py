"""The closed mapping of provider type names to their classes: adding a provider type is one line here.

Classes are imported on first use so that a command touching only Vault never
pays for importing boto3. Nothing named in a config is ever imported: only
the entries below exist.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from providers.base import Provider

PROVIDER_TYPES: dict[str, str] = {
    "vault": "providers.vault.provider:VaultProvider",
    "aws_sts": "providers.aws.provider:AwsStsProvider",
    "github_app": "providers.github.provider:GitHubAppProvider",
    "oauth": "providers.oauth.provider:OAuthProvider",
    "identity": "providers.identity.provider:IdentityProvider",
    "token_exchange": "providers.token_exchange.provider:TokenExchangeProvider",
}


def known_types() -> list[str]:
    return sorted(PROVIDER_TYPES)


def provider_class(type_name: str) -> type[Provider[Any]]:
    """The class for ``type_name``; KeyError for unknown types (callers word the error)."""
    module_name, _, class_name = PROVIDER_TYPES[type_name].partition(":")
    module = importlib.import_module(module_name)
    cls: type[Provider[Any]] = getattr(module, class_name)
    return cls


def provider_classes() -> list[type[Provider[Any]]]:
    """Every registered class, in the order above (each imported: for facts about every type, not one instance's)."""
    return [provider_class(type_name) for type_name in PROVIDER_TYPES]
