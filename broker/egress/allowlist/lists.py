"""Manifest ``network.allow`` and policy ``network``: reading the lists, and deciding whether a rule covers them.

A session's destinations are allowed when one rule that applies to the
session (task, requester, sandbox identity) covers every one of them; the
reasons otherwise name each destination that fell outside each rule.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from broker.egress.destinations import Destination, DestinationError, parse_destination
from broker.vocab.fields import Fields, describe, shown

MAX_DESTINATIONS = 200


def read_destinations(fields: Fields, key: str) -> tuple[Destination, ...]:
    """The list under ``key`` (absent: empty), each entry strictly parsed; errors name the entry's index."""
    value = fields.raw(key)
    if value is None:
        return ()
    if not isinstance(value, list):
        raise fields.fail(key, f"expected a list of HOST:PORT, got {describe(value)}")
    if len(value) > MAX_DESTINATIONS:
        raise fields.fail(key, f"has more than {MAX_DESTINATIONS} items")
    result: list[Destination] = []
    for index, item in enumerate(value):
        where = f"{key}[{index}]"
        try:
            destination = parse_destination(item)
        except DestinationError as exc:
            text = shown(item) if isinstance(item, str) else describe(item)
            raise fields.fail(where, f"{text}: {exc}") from None
        if destination in result:
            raise fields.fail(where, f"{shown(str(destination))} is listed twice")
        result.append(destination)
    return tuple(result)


def read_network_section(fields: Fields | None) -> tuple[Destination, ...]:
    """The manifest's ``network`` mapping: ``allow`` is its one key and needs at least one entry."""
    if fields is None:
        return ()
    allow = read_destinations(fields, "allow")
    fields.done()
    if not allow:
        raise fields.fail("allow", "required: at least one HOST:PORT (leave out the network section for none)")
    return allow


@dataclass(frozen=True)
class NetworkDecision:
    requested: tuple[Destination, ...]
    allowed: bool
    rule: str | None
    reasons: tuple[str, ...]

    def to_json(self) -> dict[str, object]:
        return {
            "allow": [str(d) for d in self.requested],
            "allowed": self.allowed,
            "rule": self.rule,
            "reasons": list(self.reasons),
        }


NO_NETWORK = NetworkDecision((), True, None, ())


def decide_network(
    requested: tuple[Destination, ...], rules: Sequence[tuple[str, tuple[Destination, ...]]]
) -> NetworkDecision:
    """Allowed when one of ``rules`` (id, network) covers every requested destination."""
    if not requested:
        return NO_NETWORK
    if not rules:
        return NetworkDecision(requested, False, None, ("no rule applies to this task, requester and sandbox",))
    reasons: list[str] = []
    for rule_id, network in rules:
        if not network:
            reasons.append(f"rule {rule_id}: allows no network destinations")
            continue
        outside = [d for d in requested if not any(entry.covers(d) for entry in network)]
        if not outside:
            return NetworkDecision(requested, True, rule_id, ())
        reasons.extend(f"rule {rule_id}: {d} is not in its network" for d in outside)
    return NetworkDecision(requested, False, None, tuple(reasons))
