"""Writing one role's ``BrokerRevokedSessions`` policy: read, prune, merge, budget, put, read back.

IAM has no compare-and-swap for policy documents, so two revocations racing
on one role could each write a document lacking the other's entry. The
provider serialises revocations per role inside one process; against writers
elsewhere, each write is followed by a pause (``settle_seconds``) and a read
back, and the whole read-modify-write is retried until the entries are seen.
A writer that holds the role's host lock with no other hosts writing
(``read_back = False``) skips both: nothing can have overwritten its write.
The reads of one round go out together (``providers.overlap``).
The document layout and its pruning live in ``providers.aws.deny_policy.layout``.
``DenyPolicies``, which the provider holds, decides which writer runs:
under the fleet's lock from the store's records, or under this host's.
"""

from __future__ import annotations

import contextlib
import json
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import unquote

from broker.vocab.errors import ProviderError
from providers.aws.clients import AwsClients
from providers.aws.deny_policy.layout import POLICY_NAME, ROLE_INLINE_BUDGET, DenyEntry, DenyList, policy_size
from providers.aws.deny_policy.locks import RoleLocks
from providers.aws.errors import AwsErrors, ProviderFacts
from providers.capabilities import DenyRecord, FleetState
from providers.clock import aware
from providers.overlap import together


@dataclass(frozen=True)
class DenyPolicyWriter:
    provider: ProviderFacts
    iam: Any  # a boto3 IAM client of the broker's own identity
    settle_seconds: float = 1.0
    attempts: int = 5
    #: False when no other writer can interleave (the host lock held, no other hosts): no pause, no read back.
    read_back: bool = True

    def update(
        self,
        role_name: str,
        wanted: tuple[DenyEntry, ...],
        now: datetime | None = None,
        check: Callable[[], object] | None = None,
    ) -> None:
        """Make the role's deny policy hold ``wanted`` (nothing: just prune); ProviderError otherwise.

        ``check`` (the role id still the revoked session's) runs alongside the
        first reads and stops the update before anything is written.
        """
        for attempt in range(self.attempts):
            moment = now or datetime.now(UTC)
            others, current = self.snapshot(role_name, check if attempt == 0 else None)
            new = DenyList.parse(current).pruned(moment).merged(wanted).document()
            if new == current:
                return  # nothing to prune, everything wanted already there
            self._write(role_name, new, others)
            if not wanted or not self.read_back:
                return
            time.sleep(self.settle_seconds)
            if DenyList.parse(self.read(role_name)).covers(wanted):
                return
            time.sleep(random.uniform(0, self.settle_seconds * (attempt + 1)))  # noqa: S311 - jitter
        raise ProviderError(
            f"aws {self.provider.name}: the deny policy of role {role_name} kept losing this revocation"
            f" to concurrent updates ({self.attempts} attempts)"
        )

    def snapshot(self, role_name: str, check: Callable[[], object] | None = None) -> tuple[int, dict[str, Any] | None]:
        """(what the role's other inline policies use, its deny policy), read together with ``check``."""
        checks = (check,) if check is not None else ()
        return together(lambda: self.other_inline_size(role_name), lambda: self.read(role_name), *checks)

    def write_whole(
        self,
        role_name: str,
        stored: tuple[DenyEntry, ...],
        now: datetime,
        snapshot: tuple[int, dict[str, Any] | None] | None = None,
    ) -> None:
        """Fleet mode: write the policy as the store says it is, never merely what one writer read.

        The caller holds the role's lock shared by every host and ``stored``
        holds every entry any host has added, so each write is a superset of
        the last one whatever IAM's read-after-write lag; the read (``snapshot``
        when the caller made it already) only keeps statements the broker did
        not write and entries older brokers left.
        """
        others, current = snapshot if snapshot is not None else self.snapshot(role_name)
        new = DenyList.parse(current).merged(stored).pruned(now).document()
        if new != current:
            self._write(role_name, new, others)

    def _write(self, role_name: str, document: dict[str, Any] | None, others: int) -> None:
        if document is None:
            with AwsErrors(self.provider, "DeleteRolePolicy", missing_ok=True):
                self.iam.delete_role_policy(RoleName=role_name, PolicyName=POLICY_NAME)
            return
        total = others + policy_size(document)
        if total > ROLE_INLINE_BUDGET:
            raise ProviderError(
                f"aws {self.provider.name}: the inline policies of role {role_name} would total {total}"
                f" characters with this revocation, above IAM's limit of {ROLE_INLINE_BUDGET} even after"
                " pruning expired entries; it stays pending until older sessions expire"
            )
        text = json.dumps(document, separators=(",", ":"))
        with AwsErrors(self.provider, "PutRolePolicy"):
            self.iam.put_role_policy(RoleName=role_name, PolicyName=POLICY_NAME, PolicyDocument=text)

    def read(self, role_name: str) -> dict[str, Any] | None:
        """The current deny policy, or None when the role has none."""
        with AwsErrors(self.provider, "GetRolePolicy", missing_ok=True) as errors:
            response = self.iam.get_role_policy(RoleName=role_name, PolicyName=POLICY_NAME)
        if errors.missing:
            return None
        document: dict[str, Any] = as_document(response["PolicyDocument"])
        return document

    def other_inline_size(self, role_name: str) -> int:
        """What the role's other inline policies already use of the shared budget."""
        total = 0
        with AwsErrors(self.provider, "ListRolePolicies"):
            for page in self.iam.get_paginator("list_role_policies").paginate(RoleName=role_name):
                for policy_name in page.get("PolicyNames", []):
                    if policy_name == POLICY_NAME:
                        continue
                    response = self.iam.get_role_policy(RoleName=role_name, PolicyName=policy_name)
                    total += policy_size(as_document(response["PolicyDocument"]))
        return total


def as_document(value: object) -> Any:
    """boto3 decodes policy documents to dicts; tolerate URL-encoded JSON text too."""
    if isinstance(value, str):
        return json.loads(unquote(value))
    return value


class DenyPolicies:
    """The deny policies of the roles one provider revokes on, each written by one writer at a time."""

    def __init__(
        self, clients: AwsClients, locks: RoleLocks, *, settle_seconds: float, attempts: int, shared_writers: bool
    ) -> None:
        self.clients = clients
        self.locks = locks
        #: Wait after writing the deny policy before reading it back, so a concurrent writer is seen.
        self.settle_seconds = settle_seconds
        self.attempts = attempts
        self.shared_writers = shared_writers

    def update(
        self,
        role_name: str,
        wanted: tuple[DenyEntry, ...],
        now: datetime | None = None,
        check: Callable[[], object] | None = None,
    ) -> None:
        """Serialise writers of one role: threads by a lock, this host's brokers by a file lock.

        With the host lock no other writer can interleave, so the write needs
        no pause and no read back; ``shared_role_writers = true`` (brokers on
        several hosts revoking on the same roles) keeps the pause that lets IAM
        settle and the read back. ``check`` runs alongside the first reads
        (GetRolePolicy buys the entries to keep, ListRolePolicies the room the
        other inline policies leave), so the critical path is one round of
        reads and the PutRolePolicy.
        """
        lock = self.locks.writer(role_name)
        fleet = self.locks.fleet
        if fleet is not None:
            with lock:
                self._update_fleet(fleet, role_name, wanted, aware(now or datetime.now(UTC)), check)
            return
        host_lock = self.locks.host_writer(role_name)
        exclusive = host_lock is not None and not self.shared_writers
        settle = 0.0 if exclusive else self.settle_seconds
        iam = self.clients.client("iam")
        writer = DenyPolicyWriter(self.clients, iam, settle, self.attempts, read_back=not exclusive)
        with lock, host_lock or contextlib.nullcontext():
            writer.update(role_name, wanted, now, check)

    def _update_fleet(
        self,
        fleet: FleetState,
        role_name: str,
        wanted: tuple[DenyEntry, ...],
        now: datetime,
        check: Callable[[], object] | None = None,
    ) -> None:
        """Add ``wanted`` to the store's deny records of the role, then write the whole policy they make.

        Under the role's lock shared by every host: no two hosts write at once,
        and each write holds everything any host revoked. ``check`` runs alongside
        the policy reads, before anything is added to the store.
        """
        scope = "aws-role:" + self.locks.key(role_name)
        writer = DenyPolicyWriter(self.clients, self.clients.client("iam"))
        with fleet.lock(scope, f"the deny policy of role {role_name}"):
            snapshot = writer.snapshot(role_name, check)
            fleet.add_deny_records(scope, [DenyRecord(e.until, e.key, e.value) for e in wanted])
            stored = tuple(DenyEntry(r.until, r.key, r.value) for r in fleet.deny_records(scope, now))
            writer.write_whole(role_name, stored, now, snapshot)
