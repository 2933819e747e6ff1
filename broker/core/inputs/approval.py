"""What a policy rule says beyond its grants about who decides and who may pass access on.

``approval: {approvers: [UID or "group:NAME"], timeout: 15m}``: a session
under the rule mints nothing until one of the approvers approves it (see
``broker.core.approvals``). ``delegate: true`` (with ``delegate_depth``,
default 1): a session of the rule run by ``broker exec`` gets a socket on
which its sandbox may ask for child sessions that are at most as wide as it
(see ``broker.core.delegation``), at most ``delegate_rate`` a minute (default
10) and ``delegate_total`` in the session's life (default 256).

An approver is a uid (``1000``, or ``"uid:1000"``) or a group
(``"group:release"``); a caller matches a group when the kernel counts it
among the caller's groups (its gid or a supplementary group, from
``SO_PEERCRED``/``SO_PEERGROUPS`` through the daemon), with the group's name
looked up when the decision is made (a group removed since matches no one).
"""

from __future__ import annotations

import grp
import re
from collections.abc import Collection, Iterable
from dataclasses import dataclass

from broker.vocab.fields import Fields, shown

DEFAULT_APPROVAL_TIMEOUT = 15 * 60
MAX_APPROVAL_TIMEOUT = 7 * 24 * 3600
MAX_APPROVERS = 100
MAX_DELEGATE_DEPTH = 8
DEFAULT_DELEGATE_RATE = 10  # children a minute
MAX_DELEGATE_RATE = 600
DEFAULT_DELEGATE_TOTAL = 256  # children in a session's life
MAX_DELEGATE_TOTAL = 100_000
MAX_ID = 2**32 - 2
GROUP_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,31}")
UID_TEXT = re.compile(r"uid:([0-9]{1,10})")


@dataclass(frozen=True)
class Approver:
    """One entry of ``approvers``: ``uid:N`` or ``group:NAME``, as it is stored and shown."""

    text: str

    def matches(self, uid: int, groups: Collection[int]) -> bool:
        kind, _, value = self.text.partition(":")
        if kind == "uid":
            return uid == int(value)
        try:
            return grp.getgrnam(value).gr_gid in groups
        except KeyError:  # the group is gone: it approves nothing
            return False


@dataclass(frozen=True)
class ApprovalRule:
    approvers: tuple[Approver, ...]
    timeout: int

    def to_json(self) -> dict[str, object]:
        return {"approvers": [a.text for a in self.approvers], "timeout": self.timeout}


def read_approval(fields: Fields) -> ApprovalRule | None:
    """A rule's ``approval`` mapping, or None when it has none."""
    section = fields.mapping("approval", required=False)
    if section is None:
        return None
    raw = section.raw("approvers")
    if not isinstance(raw, list) or not raw:
        raise section.fail("approvers", 'expected a non-empty list of uids or "group:NAME"')
    if len(raw) > MAX_APPROVERS:
        raise section.fail("approvers", f"has more than {MAX_APPROVERS} items")
    approvers: list[Approver] = []
    for index, item in enumerate(raw):
        approver = _approver(item)
        if approver is None:
            found = shown(str(item)) if isinstance(item, str | int) else type(item).__name__
            raise section.fail(f"approvers[{index}]", f'{found} is not a uid or "group:NAME"')
        if approver in approvers:
            raise section.fail(f"approvers[{index}]", f"{approver.text} is listed twice")
        approvers.append(approver)
    timeout = section.duration("timeout")
    timeout = DEFAULT_APPROVAL_TIMEOUT if timeout is None else timeout
    if timeout > MAX_APPROVAL_TIMEOUT:
        raise section.fail("timeout", "is longer than 7 days")
    section.done()
    return ApprovalRule(tuple(approvers), timeout)


def _approver(item: object) -> Approver | None:
    if isinstance(item, int) and not isinstance(item, bool):
        return Approver(f"uid:{item}") if 0 <= item <= MAX_ID else None
    if not isinstance(item, str):
        return None
    if (match := UID_TEXT.fullmatch(item)) and int(match.group(1)) <= MAX_ID:
        return Approver(f"uid:{int(match.group(1))}")
    kind, _, name = item.partition(":")
    return Approver(item) if kind == "group" and GROUP_NAME.fullmatch(name) else None


@dataclass(frozen=True)
class Delegation:
    """What a rule lets its sessions pass on: levels of children (0: none), children a minute and in all."""

    depth: int = 0
    rate: int = DEFAULT_DELEGATE_RATE
    total: int = DEFAULT_DELEGATE_TOTAL

    @classmethod
    def smallest(cls, delegations: Iterable[Delegation]) -> Delegation:
        """A session's, from those of the rules it draws on: the smallest of each (no rules: none)."""
        found = list(delegations)
        if not found:
            return NO_DELEGATION
        return cls(min(d.depth for d in found), min(d.rate for d in found), min(d.total for d in found))

    def to_json(self) -> dict[str, object]:
        return {"delegate_depth": self.depth, "delegate_rate": self.rate, "delegate_total": self.total}


NO_DELEGATION = Delegation()


def read_delegation(fields: Fields) -> Delegation:
    """``delegate``, ``delegate_depth``, ``delegate_rate`` and ``delegate_total``; each of the last three needs
    ``delegate: true``."""
    delegate = fields.boolean("delegate", False)
    depth = fields.integer("delegate_depth", minimum=1, maximum=MAX_DELEGATE_DEPTH)
    rate = fields.integer("delegate_rate", minimum=1, maximum=MAX_DELEGATE_RATE)
    total = fields.integer("delegate_total", minimum=1, maximum=MAX_DELEGATE_TOTAL)
    for key, value in (("delegate_depth", depth), ("delegate_rate", rate), ("delegate_total", total)):
        if value is not None and not delegate:
            raise fields.fail(key, "needs delegate: true")
    if not delegate:
        return NO_DELEGATION
    return Delegation(depth or 1, rate or DEFAULT_DELEGATE_RATE, total or DEFAULT_DELEGATE_TOTAL)


@dataclass(frozen=True)
class ApprovalNeed:
    """The approvals a decision needs: one per rule it draws on that says ``approval``.

    One person decides: an approver must be named by every such rule (a
    request under a deploy rule and a database rule needs someone both
    trust), and the request waits for the shortest of their timeouts.
    """

    rules: tuple[tuple[str, ApprovalRule], ...]

    @property
    def timeout(self) -> int:
        return min(rule.timeout for _, rule in self.rules)

    @property
    def approvers(self) -> tuple[tuple[str, ...], ...]:
        """Per rule, who may approve (``uid:N``, ``group:NAME``)."""
        return tuple(tuple(a.text for a in rule.approvers) for _, rule in self.rules)

    def to_json(self) -> dict[str, object]:
        return {
            "rules": [rule_id for rule_id, _ in self.rules],
            "approvers": [list(texts) for texts in self.approvers],
            "timeout": self.timeout,
        }


def may_approve(approvers: tuple[tuple[str, ...], ...], uid: int, groups: Collection[int]) -> bool:
    """Whether the caller ``uid`` with ``groups`` is an approver of every rule that asked for one."""
    return bool(approvers) and all(any(Approver(t).matches(uid, groups) for t in texts) for texts in approvers)
