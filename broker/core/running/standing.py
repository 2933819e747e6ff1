"""Whether the policy still allows a running session: its manifest decided again as the policy is now.

An operator withdraws a grant (an incident, a leaked agent) while an exec
runs for hours. Everything the exec still does for its session decides with
the policy as its files say now (``Broker.policy`` reads changed files
again): a renewal behind a placeholder (``rotating``), a ``kind: secret``'s
new version (``refreshing``), a child for its sandbox (``broker.sock``,
``broker.core.running.session_socket``) and ``session allow`` (``allowing``) each
ask ``require`` first. ``Standing`` is that decision for one session: its
manifest, read for its own sandbox identity when the exec began, for the
session's requester. A denial is a withdrawal: what asked is refused (exit
3, the policy's reasons), and ``session.policy_withdrawn`` is logged once
(again only if the policy allowed the session in between). A timer
(``broker.core.running.timers``: a thread of its own, or a gateway's shared
scheduler) decides again every ``[egress] policy_refresh`` seconds (default
60), so a withdrawal is logged, and the policy files read again, even while
nothing renews. ``network_rule`` is the rule whose network allowed the session at
issue (recorded with its manifest): the one ``session allow`` may add to.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from typing import Any

from broker.core.broker import Broker
from broker.core.inputs.manifest import Manifest
from broker.core.inputs.policy import Decision, decide
from broker.core.running.timers import OwnThreads, Timer, Timers
from broker.vocab.errors import BrokerError, PolicyDenied
from broker.vocab.logs import event

LOG = logging.getLogger("broker.standing")
WITHDRAWN = "session.policy_withdrawn"


def recorded_network_rule(stored: Mapping[str, Any] | None) -> str | None:
    """The rule recorded with a session's manifest (``Manifest.stored``); None when none was (no network)."""
    rule = (stored or {}).get("network_rule")
    return rule if isinstance(rule, str) else None


class Standing:
    """One running session as the policy decides it now; shared by what the exec does for it (thread-safe)."""

    def __init__(
        self,
        broker: Broker,
        manifest: Manifest,
        session_id: str,
        network_rule: str | None,
        every: float | None = None,
        timers: Timers | None = None,
    ) -> None:
        self.broker = broker
        self.manifest = manifest
        self.session_id = session_id
        self.network_rule = network_rule
        self.every = float(every if every is not None else broker.config.policy_refresh)
        self._withdrawn = False
        self._mutex = threading.Lock()
        self._timers = timers or OwnThreads()
        self._timer: Timer | None = None

    @property
    def withdrawn(self) -> bool:
        with self._mutex:
            return self._withdrawn

    def check(self) -> Decision:
        """The session's manifest decided now; a denial is logged as a withdrawal, once."""
        broker = self.broker
        decision = decide(broker.policy, self.manifest, broker.requester, broker.config)
        with self._mutex:
            newly = not decision.allowed and not self._withdrawn
            self._withdrawn = not decision.allowed
            if newly:  # under the mutex: two callers at once log it once
                broker.log.append(
                    WITHDRAWN,
                    session=self.session_id,
                    task=self.manifest.task,
                    requester=str(broker.requester),
                    reason=decision.denial_message("the policy no longer allows this session"),
                )
                broker.checkpoint()
        return decision

    def require(self, prefix: str) -> Decision:
        """``check``, raising ``PolicyDenied`` (its message begins with ``prefix``) when the session is withdrawn."""
        decision = self.check()
        if not decision.allowed:
            message = decision.denial_message(f"{prefix}: the policy no longer allows session {self.session_id}")
            raise PolicyDenied(message, decision.reasons)
        return decision

    def start(self) -> Standing:
        self._timer = self._timers.start("policy-standing", self._step, self.every)
        return self

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.stop()

    def __enter__(self) -> Standing:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _step(self) -> float:
        try:
            self.check()
        except BrokerError as exc:  # a policy that does not load: every decision fails closed meanwhile
            event(LOG, "policy not decided", session=self.session_id, error=exc.message)
        except Exception:  # a bug: the decisions the exec makes still decide for themselves
            LOG.exception("policy standing check failed")
        return self.every
