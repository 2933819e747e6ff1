"""The policy: its files loaded into rules, and the deny-by-default decision.

A session is allowed only when every requested credential is covered by a
grant of some rule whose ``tasks`` and ``requesters`` match. What one rule
says, and how it is read, is ``broker.core.inputs.rules`` (provider-specific
grant fields are compiled by the provider type); this module owns the
files, rule matching and TTL capping.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from broker.core.inputs.approval import ApprovalNeed, Delegation
from broker.core.inputs.config import Config
from broker.core.inputs.limits import capped
from broker.core.inputs.manifest import Manifest
from broker.core.inputs.rules import Rule, compile_rule
from broker.core.inputs.strictdata import parse_document
from broker.egress.allowlist.lists import NO_NETWORK, NetworkDecision, decide_network
from broker.egress.operations import NO_OPERATIONS, Operations, narrowed
from broker.host.limits import NO_LIMITS, Limits
from broker.vocab.errors import PolicyFileError
from broker.vocab.fields import Fields
from broker.vocab.files import read_regular_file
from providers.base import CredentialRequest

if TYPE_CHECKING:
    from broker.core.broker import Requester

MAX_POLICY_BYTES = 256 * 1024
MAX_DENIAL_CHARS = 1000


@dataclass(frozen=True)
class Policy:
    rules: tuple[Rule, ...]
    files: tuple[str, ...]


@dataclass(frozen=True)
class CredentialDecision:
    name: str
    provider: str
    allowed: bool
    rule: str | None
    ttl: int | None
    reasons: tuple[str, ...]

    def to_json(self) -> dict[str, object]:
        return {
            "name": self.name,
            "provider": self.provider,
            "allowed": self.allowed,
            "rule": self.rule,
            "ttl": self.ttl,
            "reasons": list(self.reasons),
        }


@dataclass(frozen=True)
class Decision:
    task: str
    requester: str
    allowed: bool
    session_ttl: int
    credentials: tuple[CredentialDecision, ...]
    network: NetworkDecision = NO_NETWORK
    operations: Operations = NO_OPERATIONS  # the effective operations: the network rule's, narrowed by the manifest
    operations_reasons: tuple[str, ...] = ()  # each key by which the manifest widens them
    approval: ApprovalNeed | None = None  # minted only once a person approved (broker.core.approvals)
    delegation: Delegation = field(default_factory=Delegation)  # its rules' smallest (depth 0: no children)
    limits: Limits = NO_LIMITS  # the sandbox's: the manifest's within its rules' (broker.core.inputs.limits)
    limits_reasons: tuple[str, ...] = ()  # each sandbox.limits key above a rule's

    @property
    def reasons(self) -> tuple[str, ...]:
        credentials = (f"{c.name}: {reason}" for c in self.credentials if not c.allowed for reason in c.reasons)
        return (
            *credentials,
            *(f"network: {reason}" for reason in self.network.reasons),
            *self.operations_reasons,
            *self.limits_reasons,
        )

    def denial_message(self, prefix: str = "denied by policy") -> str:
        """One line naming what fell outside; bounded, with the rest left to ``broker policy check``."""
        reasons = list(self.reasons)
        message, shown = f"{prefix}: ", 0
        for reason in reasons:
            if shown and len(message) + len(reason) > MAX_DENIAL_CHARS:
                break
            message += ("; " if shown else "") + reason
            shown += 1
        if shown < len(reasons):
            message += f"; and {len(reasons) - shown} more (broker policy check --task ... lists them all)"
        return message

    def credential(self, name: str) -> CredentialDecision:
        return next(c for c in self.credentials if c.name == name)

    def to_json(self) -> dict[str, object]:
        return {
            "task": self.task,
            "requester": self.requester,
            "allowed": self.allowed,
            "session_ttl": self.session_ttl,
            "credentials": [c.to_json() for c in self.credentials],
            **({"network": self.network.to_json()} if self.network.requested else {}),
            **({"operations": self._operations_json()} if self._has_operations() else {}),
            **({"approval": self.approval.to_json()} if self.approval is not None and self.allowed else {}),
            **(self.delegation.to_json() if self.delegation.depth and self.allowed else {}),
            **({"limits": self._limits_json()} if not self.limits.empty or self.limits_reasons else {}),
        }

    def _limits_json(self) -> dict[str, object]:
        """The sandbox's limits (memory in bytes, cpus, pids), and each key by which the manifest is above a rule's."""
        return {**self.limits.to_json(), "reasons": list(self.limits_reasons)}

    def _has_operations(self) -> bool:
        return not self.operations.empty or bool(self.operations_reasons)

    def _operations_json(self) -> dict[str, object]:
        """The effective operations (what the session's proxy enforces), the rule they come from, what widened."""
        return {"rule": self.network.rule, **self.operations.to_json(), "reasons": list(self.operations_reasons)}


# -- loading -----------------------------------------------------------------------------


def policy_files(directory: Path) -> list[Path]:
    if not directory.is_dir():
        raise PolicyFileError(f"policy directory {directory} does not exist")
    return sorted(p for p in directory.iterdir() if p.suffix in (".yaml", ".yml") and p.is_file())


def load_policy(directory: Path, config: Config) -> Policy:
    files = policy_files(directory)
    rules: list[Rule] = []
    seen: dict[str, str] = {}
    for path in files:
        for rule in load_policy_file(path, config):
            if rule.id in seen:
                raise PolicyFileError(f"{path.name}: rule id {rule.id!r} is also defined in {seen[rule.id]}")
            seen[rule.id] = path.name
            rules.append(rule)
    if not rules:
        raise PolicyFileError(f"no policy rules in {directory}: every request would be denied")
    return Policy(rules=tuple(rules), files=tuple(p.name for p in files))


def load_policy_file(path: Path, config: Config) -> list[Rule]:
    data, _ = read_regular_file(path, what="policy file", max_bytes=MAX_POLICY_BYTES, error=PolicyFileError)

    class FileError(PolicyFileError):
        def __init__(self, message: str) -> None:
            super().__init__(f"{path.name}: {message}")

    document = parse_document(data, what="policy file", max_bytes=MAX_POLICY_BYTES, as_json=False, error=FileError)
    fields = Fields(document, "", FileError)
    rules = [compile_rule(item, config, path.name) for item in fields.list_of_mappings("rules", max_items=1000)]
    fields.done()
    return rules


# -- deciding ----------------------------------------------------------------------------


def _smallest(*values: int | None) -> int:
    present = [v for v in values if v is not None]
    return min(present)


def decide(
    policy: Policy, manifest: Manifest, requester: Requester, config: Config, *, network_rule: str | None = None
) -> Decision:
    """The decision for ``manifest``; ``network_rule``: only that rule's network may allow its destinations (a
    running session's own rule, ``session allow``), not the first rule that covers them."""
    rules = [r for r in policy.rules if r.applies_to(manifest.task, requester)]
    root_reason = ""
    if 0 in (manifest.sandbox.uid, manifest.sandbox.gid):
        matching = len(rules)
        rules = [r for r in rules if r.allow_root_sandbox]
        if matching and not rules:
            root_reason = "sandbox uid/gid 0 (root) needs a rule with allow_root_sandbox: true"
    if rules:
        identity_reasons = [r.sandbox_reason(manifest.sandbox.uid, manifest.sandbox.gid) for r in rules]
        allowing = [r for r, reason in zip(rules, identity_reasons, strict=True) if reason is None]
        if not allowing:
            root_reason = "; ".join(reason for reason in identity_reasons if reason)
        rules = allowing
    requested_session_ttl = manifest.ttl or config.default_ttl
    session_cap = _smallest(requested_session_ttl, config.max_ttl)
    decisions: list[CredentialDecision] = []
    used_rules: list[Rule] = []
    for request in manifest.credentials:
        decision, rule = _decide_credential(request, rules, session_cap, config, manifest.task, requester)
        if root_reason and not decision.allowed:
            decision = CredentialDecision(request.name, request.provider, False, None, None, (root_reason,))
        decisions.append(decision)
        if rule is not None:
            used_rules.append(rule)
    session_ttl = _smallest(session_cap, *(r.max_ttl for r in used_rules))
    # A credential never outlives its session; the session's cap may push it below a minimum.
    final: list[CredentialDecision] = []
    for d in decisions:
        if d.ttl is None:
            final.append(d)
            continue
        ttl = min(d.ttl, session_ttl)
        minimum = config.providers[d.provider].min_ttl
        if ttl < minimum:
            reason = f"session ttl capped to {ttl}s, below the {minimum}s minimum of this provider"
            final.append(CredentialDecision(d.name, d.provider, False, None, None, (reason,)))
        else:
            final.append(CredentialDecision(d.name, d.provider, True, d.rule, ttl, ()))
    networks = [(r.id, r.network) for r in rules if network_rule in (None, r.id)]
    network = decide_network(manifest.network, networks)
    if network_rule is not None and not networks and manifest.network:
        network = NetworkDecision(manifest.network, False, None, (f"rule {network_rule} does not apply to it now",))
    if root_reason and not network.allowed:
        network = NetworkDecision(network.requested, False, None, (root_reason,))
    # The rule whose network allows the destinations limits what the session does there (none: no proxy to limit).
    asked = manifest.operations
    limiting = next((r for r in rules if r.id == network.rule), None) if network.allowed else None
    operations, widening = (NO_OPERATIONS, ()) if not limiting else narrowed(limiting.id, limiting.operations, asked)
    drawn = {rule.id: rule for rule in (*used_rules, *(r for r in rules if r.id == network.rule))}
    limits, over = capped(manifest.sandbox.limits, ((rule.id, rule.limits) for rule in drawn.values()))
    allowed = all(d.allowed for d in final) and network.allowed and not widening and not over
    needs = tuple((rule.id, rule.approval) for rule in drawn.values() if rule.approval is not None)
    delegation = Delegation.smallest(rule.delegation for rule in drawn.values())
    approval = ApprovalNeed(needs) if needs else None
    return Decision(
        manifest.task,
        str(requester),
        allowed,
        session_ttl,
        tuple(final),
        network,
        operations,
        widening,
        approval,
        delegation,
        limits,
        over,
    )


def _decide_credential(
    request: CredentialRequest,
    rules: list[Rule],
    session_cap: int,
    config: Config,
    task: str,
    requester: Requester,
) -> tuple[CredentialDecision, Rule | None]:
    provider = config.providers[request.provider]
    reasons: list[str] = []
    if not rules:
        reasons.append(f"no rule matches task {task!r} and requester {str(requester)!r}")
    for rule in rules:
        grants = [g for g in rule.grants if g.provider == request.provider]
        if not grants:
            reasons.append(f"rule {rule.id}: no grant for provider {request.provider!r}")
        for grant in grants:
            outside = grant.check(request)
            ttl = _smallest(
                request.ttl or session_cap,
                session_cap,
                rule.max_ttl,
                grant.max_ttl,
                config.max_ttl,
                provider.max_ttl,
            )
            if ttl < provider.min_ttl:
                outside.append(f"ttl capped to {ttl}s, below the {provider.min_ttl}s minimum of {provider.type_name}")
            if not outside:
                decision = CredentialDecision(request.name, request.provider, True, rule.id, ttl, ())
                return decision, rule
            reasons.extend(f"rule {rule.id}: {reason}" for reason in outside)
    return CredentialDecision(request.name, request.provider, False, None, None, tuple(reasons)), None
