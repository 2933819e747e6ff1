"""The broker's working parts for one command: config, store, log, keys and the caller (``Requester``).

``Broker.open`` builds them from a loaded ``Config``; the operations
(``issuing``, ``revoking``, ``status``) take a ``Broker``. Nothing here prints
or exits.
"""

from __future__ import annotations

import os
import pwd
import secrets
import string
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from functools import cached_property
from typing import TYPE_CHECKING, Any

from broker.audit.keys import AuditKeys, load_or_create_keys
from broker.audit.log import AppendLog, IssuanceLog
from broker.audit.witness import FlushResult, flush, note_checkpoint
from broker.core.identity.issuer import Issuer
from broker.core.inputs.config import Config
from broker.core.store import ensure_state_dir, open_config_store, state_room
from broker.core.store.interface import SessionStore
from broker.core.store.locks import lock_dir, session_lock
from broker.core.warming import sdk_ready
from broker.host.keepsafe import KeepSafe
from broker.host.sessiondir import RuntimeDir, prepare_runtime_dir
from broker.vocab.globs import any_match
from broker.vocab.holding import Lock
from broker.vocab.session_ids import check_session_id
from broker.vocab.time import utcnow
from providers.capabilities import SharesLocks, UsesIssuer, Warming

if TYPE_CHECKING:
    from broker.audit.room import LogRoom
    from broker.core.inputs.policy import Policy
    from broker.core.inputs.policy_source import PolicySource
    from broker.telemetry.metrics import BrokerMetrics

SESSION_ALPHABET = string.ascii_lowercase + string.digits


def new_session_id() -> str:
    return "s-" + "".join(secrets.choice(SESSION_ALPHABET) for _ in range(12))


@dataclass(frozen=True)
class Requester:
    """The caller of the broker: OS user name and uid (what policy rules name in ``requesters``), and the groups
    the kernel counts it in (its gid and supplementary groups: what an approver's ``group:NAME`` is checked on)."""

    name: str
    uid: int
    groups: frozenset[int] = frozenset()

    @classmethod
    def of_uid(cls, uid: int, groups: frozenset[int] = frozenset()) -> Requester:
        """The user ``uid`` (no name when it has no account)."""
        try:
            name = pwd.getpwuid(uid).pw_name
        except KeyError:
            name = ""
        return cls(name=name, uid=uid, groups=groups)

    @classmethod
    def current(cls) -> Requester:
        """This process's user, with this process's groups."""
        return cls.of_uid(os.getuid(), frozenset((os.getgid(), *os.getgroups())))

    def __str__(self) -> str:
        return self.name or f"uid:{self.uid}"

    def matches(self, pattern: str) -> bool:
        if pattern.startswith("uid:"):
            return pattern == f"uid:{self.uid}"
        return any_match((pattern,), self.name)


def hand_issuer(config: Config, issuer: Issuer | None) -> None:
    """Each provider that signs with the issuer gets it (the config refused one that needs it without it)."""
    if issuer is None:
        return
    for provider in config.providers.values():
        if isinstance(provider, UsesIssuer):
            provider.use_issuer(issuer)


def preload_providers(broker: Broker, names: set[str], *, minting: bool = True) -> None:
    """Import the SDKs of these providers in this thread, before worker threads use them (or wait for the
    warm-up that imports them: ``broker.core.warming``)."""
    for name in sorted(names):
        provider = broker.config.providers.get(name)
        if isinstance(provider, Warming):
            sdk_ready(provider)
            provider.preload(minting)


@dataclass
class Broker:
    config: Config
    store: SessionStore
    log: AppendLog
    keys: AuditKeys
    requester: Requester
    clock: Callable[[], datetime] = field(default=utcnow)
    #: The counters of the process serving ``/metrics`` (the daemon); None in a command, which counts nothing.
    metrics: BrokerMetrics | None = None
    #: Where ``policy`` comes from, made at the first decision; a copy (``dataclasses.replace``) reads its own.
    _policies: PolicySource | None = field(default=None, init=False, repr=False, compare=False)
    _policy_lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False, compare=False)
    #: The log's room on state_dir's file system (``broker.audit.room``); None in a fleet.
    room: LogRoom | None = None
    #: The broker as an OpenID Connect issuer (``[identity]``); None without one.
    issuer: Issuer | None = None

    @classmethod
    def open(cls, config: Config, store: SessionStore | None = None, *, teardown: bool = False) -> Broker:
        """The broker of ``config``; ``store`` is its store when the command opened it already. ``teardown``: it
        revokes or sweeps (a revoke, a sweep, the daemon): on a nearly full disk the reserve's room is given back
        before the store opens."""
        ensure_state_dir(config)
        room = state_room(config)
        if teardown and room is not None:
            room.release()
        keys = load_or_create_keys(config.audit_key, config.fingerprint_key)
        store = store if store is not None else open_config_store(config)
        fleet = store.fleet_state()
        for provider in config.providers.values():
            if not isinstance(provider, SharesLocks):
                continue
            provider.use_lock_dir(lock_dir(config.state_dir))
            if fleet is not None:
                provider.use_fleet(fleet)
        log = store.issuance_log(keys) or IssuanceLog(config.state_dir, keys)
        requester = Requester.current()
        issuer = Issuer.of(config, log, str(requester)) if config.identity is not None else None
        hand_issuer(config, issuer)
        return cls(config=config, store=store, log=log, keys=keys, requester=requester, room=room, issuer=issuer)

    def ready_to_issue(self) -> None:
        """Before a new issue decides anything: room for it on the log's file system (``[audit] min_free``), and a
        log that can take records (not torn, not unreadable)."""
        if self.room is not None:
            self.room.check_issue()
        self.log.head()

    def make_room(self) -> None:
        """Before a revoke or a sweep writes: the reserve's room, when the log's file system is nearly full."""
        if self.room is not None:
            self.room.release()

    def session_lock(self, session_id: str) -> Lock:
        """The lock ``issue``, ``exec`` and ``revoke`` hold on a session: shared by the fleet, else a file lock."""
        shared = self.store.shared_lock("session:" + check_session_id(session_id, "session id"))
        return shared if shared is not None else session_lock(self.config.state_dir, session_id)

    @property
    def policy(self) -> Policy:
        """The policy as its files say now: read at the first decision, then again when they change or at least
        every ``[egress] policy_refresh`` (``broker.core.inputs.policy_source``: a running exec decides for hours)."""
        with self._policy_lock:
            if self._policies is None:
                # not for revoke, sweep or status: no YAML to load
                from broker.core.inputs.policy_source import PolicySource

                config = self.config
                self._policies = PolicySource(config.policy_dir, config, config.policy_refresh)
            source = self._policies
        return source.current()

    @cached_property
    def runtime(self) -> RuntimeDir:
        return prepare_runtime_dir(self.config.runtime_dir, self.config.mount_tmpfs)

    @cached_property
    def keepsafe(self) -> KeepSafe:
        return KeepSafe(self.config.runtime_dir)

    def checkpoint(self) -> dict[str, Any] | None:
        """Sign the log head if this command appended since its last checkpoint; queue it for the witness."""
        checkpoint = self.log.checkpoint(str(self.requester))
        if checkpoint is not None:
            self.store.set_log_head(int(checkpoint["seq"]), str(checkpoint["hash"]))
            if self.config.witness is not None:
                note_checkpoint(self.store, self.config.witness, checkpoint, self.clock())
        return checkpoint

    def witness(self) -> FlushResult | None:
        """Send the checkpoints the witness has not received yet; a failure stays pending, never raises."""
        witness = self.config.witness
        if witness is None:
            return None
        return flush(self.store, witness, self.clock())

    def close(self) -> None:
        """Sign the log head if this command appended, witness it, then release everything."""
        try:
            self.checkpoint()
            self.witness()
        finally:
            self.store.close()
            for provider in self.config.providers.values():
                provider.close()
