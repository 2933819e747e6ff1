"""``inject: proxy`` and ``operations`` at issue: the placeholders in the files, the secrets and limits in the proxy.

A session whose egress goes through its proxy (``broker exec --network
allowlist``) is issued with an ``Interception`` (``session_interception``):
the proxy's ``Interceptor`` and what issue puts into it. Only that caller
imports this module; an issue without a proxy loads none of what it stands
on (the interceptor, the injectors, the session CA, graphql-core for the
operations checker, the re-signer).

Each proxied credential's provider hands over its files with placeholders
in them and the secret the proxy puts in (``Placeholding``: no module here
knows where a provider's files hold a secret); the core makes the injector
for it and gives it to the proxy's ``Interceptor``: a token's header swap
for its provider's proxy hosts, guarded as the provider type says (request
headers stripped, an answer key refused: Vault's response wrapping,
``answer_guard``); a credential whose request names its own hosts and header
(``kind: secret``: ``CredentialRequest.delivery``) a ``HeaderTemplate`` for
those hosts, checked upstream against ``[egress] upstream_ca_file``, its
``env`` variable, if any, holding the placeholder (a placeholder is not a
secret); AWS keys a ``Resigner`` for its provider's hosts and the bucket
hosts the session's ``network`` allows, re-signing only the STS actions its
provider lists. The hint naming a provider's address
(``ProxyFacts.address_env``) becomes its first proxy host over https; a
renewal's secret goes behind the same placeholder (``proxy_secret``).

The interceptor also gets the session's effective operations (from the
policy decision). The session's CA is made in memory once both are known,
for the proxy hosts of the proxied credentials and the hosts the operations
limit; its certificate (``ca.pem``) and a bundle of the system CAs plus it
(``ca-bundle.pem``) go into the session directory, and the hints point every
common client at the bundle (and each provider type's own clients:
``Provider.ca_env``).

A session a gateway serves (``gateway``: its proxy credential,
``broker.egress.gateway.passes``) gets that credential too when it is
delivered (``deliver``): ``proxy/credential`` (the secret, 0400) and
``proxy/env`` (the proxy variables with it) in its directory, the gateway's
CA (``[gateway] ca_file``) in its bundle, the hints that make clients send
it, and the ``proxy_url`` (without the secret) its document names.
"""

from __future__ import annotations

import functools
import ssl
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path, PurePosixPath

from broker.core.inputs.config import Config
from broker.core.inputs.instances import ProxyTarget
from broker.core.inputs.manifest import Manifest
from broker.core.inputs.policy import Decision
from broker.egress.destinations import Destination, DestinationError, allowed, parse_destination
from broker.egress.gateway.passes import PROXY_DIR, GatewayPass
from broker.egress.injectors.sigv4.actions import DEFAULT_STS_ACTIONS, STS, Actions
from broker.egress.injectors.sigv4.resigner import Resigner
from broker.egress.injectors.swap import AnswerGuard, Injection
from broker.egress.injectors.template import HeaderTemplate
from broker.egress.operations.checker import OperationsChecker
from broker.egress.terminate.ca import SessionCA, ca_bundle
from broker.egress.terminate.interceptor import Interceptor
from broker.host.sessiondir import SessionDirectory
from broker.vocab.errors import ConfigError, ProviderError
from broker.vocab.files import read_bounded
from broker.vocab.secret import AwsKeys, Secret
from providers.base import CredentialRequest, MintedCredential, ProxyFacts
from providers.capabilities import Placeholding
from providers.registry import provider_classes

MAX_SYSTEM_BUNDLE = 4 * 1024 * 1024
CA_FILE, BUNDLE_FILE = "ca.pem", "ca-bundle.pem"
#: The variables common clients read for the CAs they trust (all set to the bundle: some replace the system
#: store); each provider type adds its own clients' (``ca_hint_names``).
CA_HINTS = ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "GIT_SSL_CAINFO", "NODE_EXTRA_CA_CERTS")


class Interception:
    """A session's interception as issue builds it: the proxy's ``interceptor`` and the steps that fill it."""

    def __init__(self, config: Config, interceptor: Interceptor) -> None:
        self.config = config
        self.interceptor = interceptor
        self.gateway: GatewayPass | None = None  # a gateway serves the session: its proxy credential

    @property
    def terminates(self) -> bool:
        """Whether the proxy terminates TLS for any host of the session (then the sandbox gets the CA)."""
        return self.interceptor.terminates

    def limit(self, decision: Decision) -> None:
        """Hand the decision's effective operations to the proxy (none without destinations)."""
        checker = operations_checker(decision)
        if checker is not None:
            self.interceptor.limit(checker)

    def hold(
        self,
        request: CredentialRequest,
        credential: MintedCredential,
        spool_dir: Path | None = None,
        network: tuple[Destination, ...] = (),
    ) -> MintedCredential:
        """``credential`` with its files holding placeholders (its provider's ``Placeholding``); the interceptor gets
        the injector that puts the secret in for its hosts: a token's header swap, a ``kind: secret``'s header
        template, or an AWS credential's re-signer (its keys, for its provider's hosts and those of its request's
        ``more_proxy_hosts`` that ``network`` allows; ``spool_dir`` holds the bodies it checks before they go
        upstream)."""
        config, interceptor = self.config, self.interceptor
        provider = placeholding(config, request)
        target = config.proxy_targets.get(request.provider)
        delivery = request.delivery()  # a credential naming its own hosts and header (kind: secret)
        if delivery is None and target is not None and target.facts.resigns:
            more = allowed_hosts(request.more_proxy_hosts(tuple(map(str, target.hosts))), network)
            target = replace(target, hosts=(*target.hosts, *(h for h in more if h not in target.hosts)))
            actions = resigned_actions(request.provider, config.providers[request.provider].proxy_actions())
            held = provider.placeholders(request, credential, https_address(target))
            if not isinstance(held.secret, AwsKeys) or not isinstance(held.placeholder, AwsKeys):
                raise ProviderError(f"credential {request.name!r}: its provider hands the re-signer no keys")
            hosts = frozenset((h.host, h.port) for h in target.hosts)
            interceptor.add_injector(
                Resigner(
                    request.name,
                    hosts,
                    held.placeholder,
                    held.secret,
                    upstream_ca_file=target.upstream_ca_file,
                    spool_dir=spool_dir,
                    actions=actions,
                )
            )
            return replace(credential, files=held.files)
        held = provider.placeholders(request, credential, https_address(target) if target is not None else "")
        secret, placeholder = held.secret, held.placeholder
        if not isinstance(secret, Secret) or not isinstance(placeholder, Secret):
            raise ProviderError(f"credential {request.name!r}: its provider hands the proxy no token to put in")
        if delivery is not None:
            hosts = frozenset((d.host, d.port) for d in map(parse_destination, delivery.hosts))
            interceptor.add_injector(
                HeaderTemplate(request.name, hosts, delivery.header, placeholder, secret, interceptor.upstream_ca_file)
            )
            env = dict(credential.env) | ({delivery.env: placeholder.reveal()} if delivery.env else {})
            return replace(credential, files=held.files, env=env)
        assert target is not None  # inject: proxy needs the provider's proxy hosts (the manifest's check)
        interceptor.add(
            Injection(
                frozenset((h.host, h.port) for h in target.hosts),
                placeholder,
                secret,
                target.upstream_ca_file,
                frozenset(header.encode() for header in target.facts.token_headers),
                answer_guard(target.facts),
                name=request.name,
            )
        )
        env = dict(credential.env)
        address = target.facts.address_env
        if address is not None and address in env:
            env[address] = https_address(target)
        return replace(credential, files=held.files, env=env)

    def deliver(self, directory: SessionDirectory, session_id: str, mount_path: PurePosixPath) -> Delivered:
        """Write what the sandbox needs of its proxy into the session's ``directory`` (the CA files when the proxy
        terminates a host or the gateway has a CA of its own; a gateway's proxy credential); the hints for it."""
        gateway = self.gateway
        extra = gateway.address.ca_pem if gateway is not None else b""
        env: dict[str, str] = {}
        if self.interceptor.terminates or extra:
            for name, data in ca_files(self.interceptor if self.interceptor.terminates else None, extra).items():
                directory.write_file(name, data)
            env.update(ca_hints(mount_path))
        if gateway is None:
            return Delivered(env)
        bundle = mount_path / BUNDLE_FILE if extra else None  # the gateway's CA is there
        directory.write_credential(PROXY_DIR, gateway.files(session_id, bundle))
        env.update(gateway.hints(mount_path, bundle))
        return Delivered(env, gateway.proxy_url(session_id))


@dataclass(frozen=True)
class Delivered:
    """What the session document gets of its proxy: the hints, and a gateway's proxy URL (no secret in it)."""

    env: dict[str, str]
    proxy_url: str | None = None


def session_interception(config: Config, manifest: Manifest) -> Interception:
    """The interception of a session whose egress goes through its proxy (its CA, made once the hosts are known,
    lives no longer than the session may)."""
    ttl = min(manifest.ttl or config.default_ttl, config.max_ttl)
    not_after = datetime.now(UTC) + timedelta(seconds=ttl)

    def make_ca(hosts: Sequence[str]) -> SessionCA:
        return SessionCA(hosts, not_after, label=manifest.task)

    interceptor = Interceptor(make_ca, upstream_ca_file=config.egress_upstream_ca_file)
    try:
        interceptor.load_trust()
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"egress.upstream_ca_file: cannot be loaded ({type(exc).__name__})") from None
    return Interception(config, interceptor)


def operations_checker(decision: Decision) -> OperationsChecker | None:
    """What checks each request against the decision's effective operations; None when there are none."""
    if decision.operations.empty or decision.network.rule is None:
        return None
    return OperationsChecker(decision.operations, decision.network.rule)


def answer_guard(facts: ProxyFacts) -> AnswerGuard | None:
    """What the proxy keeps from a provider's hosts beyond the swap, as its type declares it (None: nothing)."""
    if not facts.stripped_headers and facts.refused_answer_key is None:
        return None
    return AnswerGuard(
        facts.label,
        frozenset(header.encode() for header in facts.stripped_headers),
        facts.refused_answer_key,
        facts.refused_answer_name,
    )


def placeholding(config: Config, request: CredentialRequest) -> Placeholding:
    """The provider of ``request`` as the one that hands its placeholders over."""
    provider = config.providers[request.provider]
    if not isinstance(provider, Placeholding):
        raise ConfigError(f"providers.{request.provider}: its type hands the proxy no placeholders")
    return provider


def proxy_secret(config: Config, request: CredentialRequest, credential: MintedCredential) -> Secret | AwsKeys:
    """What the proxy puts in for a renewed ``credential``, behind the placeholder the first one got (its
    provider's ``Placeholding``)."""
    return placeholding(config, request).proxy_secret(credential)


def https_address(target: ProxyTarget) -> str:
    """Where the sandbox reaches a provider through the proxy: its first proxy host over https."""
    first = target.hosts[0]
    return f"https://{first.host}" + ("" if first.port == 443 else f":{first.port}")


def resigned_actions(provider: str, actions: Mapping[str, frozenset[str]]) -> Actions:
    """What a re-signer signs at all: the actions its provider lists, by service (``proxy_sts_actions``)."""
    try:
        return Actions(sts=actions.get(STS, DEFAULT_STS_ACTIONS))
    except ValueError as error:
        raise ConfigError(f"providers.{provider}.proxy_sts_actions: {error}") from None


def allowed_hosts(texts: Sequence[str], network: tuple[Destination, ...]) -> tuple[Destination, ...]:
    """The hosts of ``texts`` that ``network`` allows (the one check the proxy makes of every destination); one
    that is not a valid destination names nothing to terminate and is left out."""
    hosts: list[Destination] = []
    for text in texts:
        try:
            host = parse_destination(text)
        except DestinationError:
            continue
        if allowed(network, host.host, host.port) and host not in hosts:
            hosts.append(host)
    return tuple(hosts)


def ca_files(interceptor: Interceptor | None, extra: bytes = b"") -> dict[str, bytes]:
    """``ca.pem`` (the session CA, when the proxy terminates a host) and ``ca-bundle.pem`` (the system CAs, when
    found, plus the session CA and ``extra``: a gateway's own CA)."""
    system = b""
    cafile = ssl.get_default_verify_paths().cafile
    if cafile:
        try:
            system, _ = read_bounded(Path(cafile), MAX_SYSTEM_BUNDLE)
        except OSError:
            system = b""
    ours = (interceptor.ca.pem if interceptor is not None else b"") + extra
    files = {BUNDLE_FILE: ca_bundle(ours, system)}
    if interceptor is not None:
        files[CA_FILE] = interceptor.ca.pem
    return files


@functools.cache
def ca_hint_names() -> tuple[str, ...]:
    """``CA_HINTS``, then every provider type's ``ca_env`` (by type name)."""
    classes = sorted(provider_classes(), key=lambda cls: cls.type_name)
    return CA_HINTS + tuple(name for cls in classes for name in cls.ca_env)


def ca_hints(mount_path: PurePosixPath) -> dict[str, str]:
    return dict.fromkeys(ca_hint_names(), str(mount_path / BUNDLE_FILE))
