"""The config's ``[providers.NAME]`` instances: each built from its table, and how they reference each other.

An instance may name hosts the proxy puts its secret in (``proxy_hosts``), keep its own secret in another
instance (an OAuth refresh token in Vault's KV: ``UsesKeptSecrets``), or sign with the broker's issuer
(``UsesIssuer``), whose key another instance may hold (``[identity] transit_key``). Each of those references is
checked here, once every instance is built, so a config naming a missing or unsuitable instance fails at load.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from broker.core.inputs.directories import resolve_path
from broker.core.inputs.identity import IdentityConfig
from broker.egress.destinations import Destination, DestinationError, parse_destination
from broker.vocab.errors import ConfigError
from broker.vocab.fields import Fields, shown
from providers.registry import known_types, provider_class

if TYPE_CHECKING:
    from providers.base import Provider, ProxyFacts

INSTANCE_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,31}")


@dataclass(frozen=True)
class ProxyTarget:
    """``proxy_hosts`` and ``upstream_ca_file`` of one provider instance: where the proxy puts its secret in,
    and how (the facts its provider type declares)."""

    hosts: tuple[Destination, ...]
    facts: ProxyFacts
    upstream_ca_file: Path | None = None


def build_instances(
    table: Fields | None, identity: IdentityConfig | None, base: Path
) -> tuple[dict[str, Provider[Any]], dict[str, ProxyTarget], IdentityConfig | None]:
    """Every ``[providers.NAME]`` built (cheaply: no network, no SDK import), where the proxy puts each one's secret
    in, and ``identity`` with its transit key's instance named; a ``ConfigError`` naming the key at fault."""
    providers: dict[str, Provider[Any]] = {}
    proxy_targets: dict[str, ProxyTarget] = {}
    if table is not None:
        for name, _ in table.items():
            if not INSTANCE_NAME.fullmatch(name):
                raise ConfigError(f"providers.{shown(name)}: instance names are lower-case letters, digits, _ and -")
            instance = table.mapping(name)
            assert instance is not None
            type_name = instance.req_string("type")
            try:
                cls = provider_class(type_name)
            except KeyError:
                raise ConfigError(
                    f"providers.{name}.type: unknown provider type {type_name[:40]!r}"
                    f" (known: {', '.join(known_types())})"
                ) from None
            target = _proxy_target(instance, name, cls.proxy, base)
            providers[name] = cls.from_config(name, instance, base)
            if target is None and cls.proxy is not None and (defaults := providers[name].default_proxy_hosts()):
                target = ProxyTarget(tuple(parse_destination(host) for host in defaults), cls.proxy)  # AWS's
            if target is not None:
                proxy_targets[name] = target
            instance.done()
    _hand_keepers(providers)
    if identity is not None and "identity" not in providers:  # [identity] alone: manifests ask provider: identity
        providers["identity"] = provider_class("identity").from_config(
            "identity", Fields({}, "providers.identity", ConfigError), base
        )
    return providers, proxy_targets, issuer_users_checked(identity, providers)


def _hand_keepers(providers: dict[str, Provider[Any]]) -> None:
    """Each instance keeping a secret of its own in another (``UsesKeptSecrets``: an OAuth refresh token in
    Vault's KV) takes that one, once every instance is built; it names its own key when there is none."""
    if not providers:
        return
    from providers.capabilities import UsesKeptSecrets

    for provider in providers.values():
        if isinstance(provider, UsesKeptSecrets):
            provider.use_keepers(providers)


def issuer_users_checked(identity: IdentityConfig | None, providers: dict[str, Provider[Any]]) -> IdentityConfig | None:
    """Every instance that signs with the issuer has one; the transit key's instance (named, or the one vault
    instance) can sign and needs none. ``identity`` with that instance named."""
    if not providers:
        return identity
    from providers.capabilities import TransitSigning, UsesIssuer  # the provider base: only with providers

    for name, provider in providers.items():
        needed = provider.issuer_needed if isinstance(provider, UsesIssuer) else None
        if needed is not None and identity is None:
            raise ConfigError(f"providers.{name}.{needed}: needs [identity] issuer (the broker signs its tokens)")
    if identity is None or identity.transit_key is None:
        return identity
    vaults = [name for name, provider in providers.items() if isinstance(provider, TransitSigning)]
    if identity.transit_vault is None and len(vaults) != 1:
        raise ConfigError("identity.transit_vault: name the vault instance whose transit engine holds transit_key")
    holder = identity.transit_vault or vaults[0]
    vault = providers.get(holder)
    if not isinstance(vault, TransitSigning):
        raise ConfigError(f"identity.transit_vault: {shown(holder)} is not a vault instance of this config")
    if isinstance(vault, UsesIssuer) and vault.issuer_needed is not None:
        raise ConfigError(
            f"identity.transit_vault: providers.{holder} logs in with the issuer's own tokens, so it cannot hold"
            " the issuer's key; use a vault instance that logs in otherwise (token_file, AppRole)"
        )
    return dataclasses.replace(identity, transit_vault=holder)


def _proxy_target(instance: Fields, name: str, facts: ProxyFacts | None, base: Path) -> ProxyTarget | None:
    if facts is None:
        return None  # any proxy_hosts is an unknown key for the types the proxy cannot put in
    hosts = instance.string_list("proxy_hosts", required=False, max_items=16)
    ca_file = instance.string("upstream_ca_file", required=False, max_len=4096)
    if hosts is None:
        if ca_file is not None:
            raise ConfigError(f"providers.{name}.upstream_ca_file: only used with proxy_hosts")
        return None
    destinations = []
    for index, text in enumerate(hosts):
        try:
            destination = parse_destination(text)
        except DestinationError as exc:
            raise ConfigError(f"providers.{name}.proxy_hosts[{index}]: {exc}") from None
        if destination.wildcard:
            raise ConfigError(f"providers.{name}.proxy_hosts[{index}]: name each host; a wildcard is not allowed")
        destinations.append(destination)
    return ProxyTarget(tuple(destinations), facts, resolve_path(base, ca_file) if ca_file is not None else None)
