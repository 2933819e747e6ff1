"""The ``BrokerRevokedSessions`` inline role policy: which STS sessions of a role are cut off, until when.

STS credentials cannot be revoked, so ``revoke = "deny-policy"`` attaches an
explicit Deny to the role. One inline policy per role holds every revoked
session; IAM documents carry no free-form data, so each entry's lifetime is
encoded in the ``Sid`` of the statement holding it:

* ``BrokerRevokedSourceUntil20261129T1200Z``: ``Deny * on *`` when
  ``aws:SourceIdentity`` is one of the listed broker session ids. The broker
  passes its session id as ``SourceIdentity`` to every AssumeRole, and AWS
  carries it, unchangeable, into every session chained from it; so one short
  value (``s-`` and 12 characters) cuts off exactly that broker session's
  sessions of this role and whatever was chained from them back into it.
  A chained session lives at most an hour, so entries are kept an hour
  beyond the credentials' expiry.
* ``BrokerRevokedUntil20261129T1100Z``: the same on ``aws:userid``
  (``<RoleId>:<RoleSessionName>``): written only for a session without a source
  identity, and read back from policies written by older brokers, which
  listed every session under both keys.

Entries are grouped by expiry rounded *up* to the hour: an entry never leaves
before its credentials expire (an hour late at worst), and since STS
credentials live at most 12 h, at most 14 buckets end after any given moment.
A bucket costs 148 characters of the role's 10,240-character inline-policy
budget, an entry 17: 200 revoked broker sessions need about 5,500 characters
even spread over every bucket, and a role with no other inline policy holds
about 470 (``providers.aws.deny_policy.budget`` reserves the room at issue). Every
rewrite drops the buckets that have ended. Statements the broker did not
write (other Sids) are kept verbatim. This module is pure: the provider does
the IAM calls, the budget check and the read-back.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

POLICY_NAME = "BrokerRevokedSessions"
#: All inline policies of one role together, whitespace not counted (IAM quota).
ROLE_INLINE_BUDGET = 10_240
USERID = "aws:userid"
SOURCE_IDENTITY = "aws:SourceIdentity"
_SID_PREFIX = {USERID: "BrokerRevokedUntil", SOURCE_IDENTITY: "BrokerRevokedSourceUntil"}
_SID = re.compile(r"(BrokerRevokedUntil|BrokerRevokedSourceUntil)([0-9]{8}T[0-9]{4})Z")
_SID_TIME = "%Y%m%dT%H%M"
#: A session chained from a revoked one lives at most this long after it started.
CHAINED_SESSION_SECONDS = 3600


@dataclass(frozen=True, order=True)
class DenyEntry:
    """One value of one condition key, denied until ``until`` (a whole hour, UTC)."""

    until: datetime
    key: str
    value: str


def bucket_end(moment: datetime) -> datetime:
    """``moment`` rounded up to the next whole hour in UTC (unchanged when already whole)."""
    moment = moment.astimezone(UTC) if moment.tzinfo else moment.replace(tzinfo=UTC)
    floor = moment.replace(minute=0, second=0, microsecond=0)
    return floor if floor == moment else floor + timedelta(hours=1)


def entries_for(assumed_role_id: str, source_identity: str, expires_at: datetime) -> tuple[DenyEntry, ...]:
    """What revoking one assumed-role session adds: its source identity, else its user id.

    The source identity (the broker session id) already names the session
    itself, and also what was chained from it; listing the user id as well
    would cost about 60 more characters per session for nothing.
    """
    if source_identity:
        chained = expires_at + timedelta(seconds=CHAINED_SESSION_SECONDS)
        return (DenyEntry(bucket_end(chained), SOURCE_IDENTITY, source_identity),)
    return (DenyEntry(bucket_end(expires_at), USERID, assumed_role_id),)


@dataclass(frozen=True)
class DenyList:
    """The parsed policy: the broker's entries plus anything else, kept as compact JSON."""

    entries: frozenset[DenyEntry] = frozenset()
    foreign: tuple[str, ...] = ()
    version: str = "2012-10-17"

    @classmethod
    def parse(cls, document: Mapping[str, Any] | None) -> DenyList:
        if not document:
            return cls()
        statements = document.get("Statement", [])
        if isinstance(statements, Mapping):
            statements = [statements]
        entries: set[DenyEntry] = set()
        foreign: list[str] = []
        for statement in statements if isinstance(statements, list) else []:
            parsed = _parse_statement(statement)
            if parsed is None:
                foreign.append(json.dumps(statement, separators=(",", ":"), sort_keys=True))
            else:
                entries.update(parsed)
        version = document.get("Version")
        return cls(frozenset(entries), tuple(foreign), version if isinstance(version, str) else "2012-10-17")

    def pruned(self, now: datetime) -> DenyList:
        """Without the entries whose bucket has ended."""
        kept = frozenset(e for e in self.entries if e.until > now)
        return DenyList(kept, self.foreign, self.version)

    def merged(self, new: Iterable[DenyEntry]) -> DenyList:
        """With ``new`` added; a value stays once, in the latest of its buckets."""
        latest: dict[tuple[str, str], DenyEntry] = {}
        for entry in sorted([*self.entries, *new]):
            latest[(entry.key, entry.value)] = entry
        return DenyList(frozenset(latest.values()), self.foreign, self.version)

    def covers(self, wanted: Iterable[DenyEntry]) -> bool:
        """Whether each wanted value is denied at least until its wanted time."""
        have: dict[tuple[str, str], datetime] = {}
        for entry in self.entries:
            key = (entry.key, entry.value)
            have[key] = max(have.get(key, entry.until), entry.until)
        return all((w.key, w.value) in have and have[(w.key, w.value)] >= w.until for w in wanted)

    def values(self, key: str) -> list[str]:
        return sorted(e.value for e in self.entries if e.key == key)

    def document(self) -> dict[str, Any] | None:
        """The policy to put, or None when nothing is left (delete the policy instead)."""
        buckets: dict[tuple[datetime, str], list[str]] = {}
        for entry in self.entries:
            buckets.setdefault((entry.until, entry.key), []).append(entry.value)
        statements: list[dict[str, Any]] = [json.loads(text) for text in self.foreign]
        for (until, key), values in sorted(buckets.items(), key=lambda item: (item[0][0], item[0][1])):
            statements.append(
                {
                    "Sid": _SID_PREFIX[key] + until.strftime(_SID_TIME) + "Z",
                    "Effect": "Deny",
                    "Action": "*",
                    "Resource": "*",
                    "Condition": {"StringEquals": {key: sorted(values)}},
                }
            )
        if not statements:
            return None
        return {"Version": self.version, "Statement": statements}


def policy_size(document: Mapping[str, Any] | None) -> int:
    """Characters IAM counts for one policy: its JSON without whitespace."""
    if not document:
        return 0
    text = json.dumps(document, separators=(",", ":"), ensure_ascii=False)
    return sum(1 for char in text if not char.isspace())


def _parse_statement(statement: object) -> set[DenyEntry] | None:
    """The entries of one broker statement, or None for anything the broker did not write."""
    if not isinstance(statement, Mapping) or set(statement) != {
        "Sid",
        "Effect",
        "Action",
        "Resource",
        "Condition",
    }:
        return None
    match = _SID.fullmatch(str(statement["Sid"]))
    if match is None or statement["Effect"] != "Deny":
        return None
    if statement["Action"] not in ("*", ["*"]) or statement["Resource"] not in ("*", ["*"]):
        return None
    key = USERID if match.group(1) == _SID_PREFIX[USERID] else SOURCE_IDENTITY
    condition = statement["Condition"]
    if not isinstance(condition, Mapping) or set(condition) != {"StringEquals"}:
        return None
    inner = condition["StringEquals"]
    if not isinstance(inner, Mapping) or set(inner) != {key}:
        return None
    values = inner[key]
    values = [values] if isinstance(values, str) else values
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        return None
    until = datetime.strptime(match.group(2), _SID_TIME).replace(tzinfo=UTC)
    return {DenyEntry(until, key, value) for value in values}
