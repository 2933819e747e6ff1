"""``broker renew`` of a running session's proxied credentials: the exec that holds them renews them now.

Proxied credentials live in the running exec's proxy (directly, or in the
daemon that holds the exec), renewed there behind their placeholders
(``broker.core.running.rotating`` before they end,
``broker.core.running.refreshing`` on a new KV version). ``broker renew
--session S`` cannot renew them from outside: the exec holds the session
lock, and only its proxy can take a new secret. So it asks the exec through
its control socket (``broker.host.control``), and ``Renewal`` here is what
the exec does then, for each proxied credential or the one named: a
``kind: secret`` has its KV version checked at once (a new one swapped in;
the same one: ``unchanged``), any other that can take a new secret behind
its placeholder is renewed at once, with the same steps, records and log
events as a renewal the exec starts itself (an AWS key pair the proxy
re-signs with as well); one that cannot (the session is ending) is
reported ``cannot``. The answer
lists what was done; the logging is the renewals' own. ``ask_running`` is
the asking side: with no exec of the session on this host it refuses
(exit 2); a renewal denied by the policy is exit 3, one that failed exit 4
(``outcome_error``), after the list is shown.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from broker.host.control import ask_renew
from broker.vocab.errors import BadInput, BrokerError, PolicyDenied, ProviderError

if TYPE_CHECKING:
    from broker.core.broker import Broker
    from broker.core.inputs.manifest import Manifest
    from broker.core.running.refreshing import SecretRefresher
    from broker.core.running.rotating import Rotator

CANNOT = "it cannot be renewed behind its placeholder now (the session is ending, or its proxy takes no new secret)"


class Renewal:
    """Called from the control socket's thread; the exec attaches its rotator and refresher once they run."""

    def __init__(self, manifest: Manifest) -> None:
        self.manifest = manifest
        self._lock = threading.Lock()
        self._rotator: Rotator | None = None
        self._refresher: SecretRefresher | None = None

    def attach(self, rotator: Rotator, refresher: SecretRefresher) -> None:
        with self._lock:
            self._rotator, self._refresher = rotator, refresher

    def __call__(self, credential: str | None) -> list[dict[str, str]] | None:
        """What renewing ``credential`` (None: every proxied one) now did; None while nothing renews here."""
        with self._lock:
            rotator, refresher = self._rotator, self._refresher
        if rotator is None or refresher is None:
            return None
        names = list(self.manifest.proxied) if credential is None else [credential]
        done = []
        for name in names:
            if name not in self.manifest.proxied:
                done.append({"name": name, "outcome": "unknown", "reason": "not a proxied credential of the session"})
            elif name in refresher.watched:
                checked = refresher.renew_now([name])
                done.extend(item.to_json() for item in checked)
                if not checked:  # stopped meanwhile: the session is ending
                    done.append({"name": name, "outcome": "failed", "reason": "the session is ending"})
            else:
                renewed = rotator.rotate_now(name)
                done.append(renewed if renewed is not None else {"name": name, "outcome": "cannot", "reason": CANNOT})
        return done


@dataclass(frozen=True)
class RunningRenewal:
    """What the running exec did for one proxied credential (``outcome`` and its details, as the exec said)."""

    fields: Mapping[str, str]

    @property
    def name(self) -> str:
        return self.fields.get("name", "")

    @property
    def outcome(self) -> str:
        return self.fields.get("outcome", "")

    @property
    def old_outcome(self) -> str:
        return self.fields.get("old_outcome", "")

    def to_json(self) -> dict[str, str]:
        return {**self.fields, "proxied": "true"}


def ask_running(broker: Broker, session_id: str, proxied: Sequence[str]) -> list[RunningRenewal]:
    """Have the exec running ``session_id`` renew its proxied credentials now; what it did."""
    done = ask_renew(broker.config.state_dir, session_id, None)
    if done is None:
        names = ", ".join(repr(name) for name in proxied)
        raise BadInput(
            f"session {session_id} runs no broker exec on this host: its inject: proxy credentials ({names})"
            " are renewed only by the exec whose proxy holds them, while it runs"
        )
    return [RunningRenewal(item) for item in done]


def outcome_error(renewals: Sequence[RunningRenewal]) -> BrokerError | None:
    """The error a renew answers with, after listing them: a denial (exit 3), else a failure (exit 4), else a
    credential that cannot be renewed (exit 2); None when each was renewed or unchanged."""
    for outcome, error in (("denied", PolicyDenied), ("failed", ProviderError), ("cannot", BadInput)):
        first = next((r for r in renewals if r.outcome == outcome), None)
        if first is not None:
            return error(f"renewal of {first.name!r} {outcome}: {first.fields.get('reason', '')}")
    return None
