"""What one session's proxy terminates, and what it does inside: the ``Interceptor``.

The proxy terminates TLS (with the session CA) for two kinds of host: the
hosts of ``inject: proxy`` credentials (each an ``Injector`` that puts its
secret in) and the hosts the session's effective ``operations`` limit (an
``OperationsChecker`` decides each request). A host may be both. The CA is
made once every host is known (``ca`` on first use, when the core makes it
lazily: the operations come from the policy decision, the credentials from
minting) and is name-constrained to exactly those hosts.

Upstream, the real host's certificate is checked against its credential's
``upstream_ca_file`` (its provider's), or, for a host only operations limit,
against ``[egress] upstream_ca_file``; None means the system's CAs.

``relimit`` replaces the operations while the proxy runs (``session
allow`` applies its rule's at once), only within the CA made at issue.

``revoke`` makes every request to a terminated host refused at once and
drops the secrets (an AWS host's refusal is its SDKs' XML error:
``revoked_answer``); ``replace`` swaps one credential's injector for another
(rotation): requests already under way keep the passage they began with.
"""

from __future__ import annotations

import ssl
import threading
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from broker.egress.destinations import Destination
from broker.egress.injectors.interface import AnswersRevoked, Header, Injector, RequestHead
from broker.egress.injectors.swap import AnswerGuard, HeaderSwap, Injection
from broker.egress.operations import Answer, BodyCheck, Decision
from broker.egress.terminate.ca import SessionCA
from broker.egress.terminate.masking import Masker, Pair, Spelled, spellings
from broker.vocab.secret import AwsKeys, Secret

if TYPE_CHECKING:  # graphql-core: for a session the operations limit only
    from broker.egress.operations.checker import OperationsChecker

CAFactory = Callable[[Sequence[str]], SessionCA]
MAX_SPELLED = 64  # secrets whose spellings a session keeps: its credentials', each renewal's, each Basic pair's


def ca_name(destination: Destination) -> str:
    """How the session CA names an operations host: the name, ``*.`` + the suffix, or the address."""
    if destination.address is not None:
        return str(destination.address)
    return f"*.{destination.host}" if destination.wildcard else destination.host


class Interceptor:
    """The session's terminated hosts, their injectors and operations, and the CA and upstream trust for them."""

    def __init__(self, ca: SessionCA | CAFactory, *, upstream_ca_file: Path | None = None) -> None:
        self._ca = ca if isinstance(ca, SessionCA) else None
        self._make_ca = ca if not isinstance(ca, SessionCA) else None
        self._injectors: list[Injector] = []
        self._guards: dict[tuple[str, int], AnswerGuard] = {}
        self.operations: OperationsChecker | None = None
        self.upstream_ca_file = upstream_ca_file  # for hosts no credential of the session goes to
        self._revoked = threading.Event()
        self._upstream: dict[Path | None, ssl.SSLContext] = {}
        self._replaced: dict[str, Injector] = {}  # each rotated credential's injector before its last rotation
        self._spelled: dict[Pair, tuple[Pair, ...]] = {}  # each secret's spellings, made once (``spell``)
        self._masks: dict[tuple[Pair, ...], Spelled] = {}  # a host's secrets in all their spellings (``masker``)
        self._mutex = threading.Lock()

    # -- building (at issue) ------------------------------------------------------------------

    def add(self, injection: Injection) -> None:
        """An ``inject: proxy`` token: its header swap, and what its provider keeps from its hosts (its guard)."""
        self.add_injector(HeaderSwap(injection))
        if injection.guard is not None:
            self._guards.update(dict.fromkeys(injection.hosts, injection.guard))

    def add_injector(self, injector: Injector) -> None:
        with self._mutex:
            if self._ca is not None and any(not self._ca.covers(host) for host, _ in injector.hosts):
                raise ValueError("an injection host outside the session CA")
            self._injectors.append(injector)

    def limit(self, operations: OperationsChecker) -> None:
        """The session's effective operations (before the CA is made: their hosts go into it)."""
        with self._mutex:
            if self._ca is not None and any(not self._ca.covers(ca_name(h)) for h in operations.operations.hosts()):
                raise ValueError("an operations host outside the session CA")
            self.operations = operations

    def relimit(self, operations: OperationsChecker | None) -> list[str]:
        """The running session's operations replaced (``session allow``: its rule's, as the policy has them now);
        the names the session CA does not cover, and then nothing changed. The sandbox trusts only the CA made at
        issue, so every host the new operations limit must be one it covers (a session that terminated nothing
        at issue has no CA: any limited host is outside it)."""
        names = [ca_name(host) for host in operations.operations.hosts()] if operations is not None else []
        with self._mutex:
            outside = [name for name in names if self._ca is None or not self._ca.covers(name)]
            if not outside:
                self.operations = operations
        return outside

    def ca_hosts(self) -> list[str]:
        """The names the session CA is constrained to: every credential host and operations host."""
        names = {host for injector in self._injectors for host, _ in injector.hosts}
        if self.operations is not None:
            names.update(ca_name(h) for h in self.operations.operations.hosts())
        return sorted(names)

    @property
    def terminates(self) -> bool:
        """Whether the proxy terminates TLS for any host of this session (then the sandbox needs the CA)."""
        return bool(self._injectors) or (self.operations is not None and not self.operations.operations.empty)

    @property
    def ca(self) -> SessionCA:
        with self._mutex:
            if self._ca is None:
                assert self._make_ca is not None
                self._ca = self._make_ca(self.ca_hosts())
            return self._ca

    def replace(self, credential: str, injector: Injector) -> None:
        """Swap ``credential``'s injector (a rotated secret): requests from now on begin on the new one."""
        with self._mutex:
            at = next(i for i, old in enumerate(self._injectors) if old.credential == credential)
            if self._ca is not None and any(not self._ca.covers(host) for host, _ in injector.hosts):
                raise ValueError("an injection host outside the session CA")
            self._injectors[at] = injector

    def can_rotate(self, credential: str) -> bool:
        """Whether ``credential``'s injector can take a renewed secret behind its placeholder (``rotated``)."""
        with self._mutex:
            return any(i.credential == credential and hasattr(i, "rotated") for i in self._injectors)

    def rotate(self, credential: str, secret: Secret | AwsKeys) -> bool:
        """Put the renewed ``secret`` behind ``credential``'s unchanged placeholder: requests from now on carry
        it, a request under way keeps the one it began with (a token; for a re-signed AWS credential, its new
        STS key id, secret and session token). False once the session is revoked (nothing is
        handed a secret after that) or when its injector cannot rotate."""
        with self._mutex:
            current = next((i for i in self._injectors if i.credential == credential), None)
        rotated = getattr(current, "rotated", None)
        if self.revoked or rotated is None:
            return False
        self.replace(credential, rotated(secret))
        with self._mutex:
            if current is not None:
                self._replaced[credential] = current
        if self.revoked:  # revoked meanwhile: what was just put in is dropped as well
            self.revoke()
            return False
        return True

    def draining(self, credential: str) -> bool:
        """Whether requests begun on ``credential``'s injector before its last rotation are still under way (an
        injector that counts them: a re-signer, whose old keys a long upload may still be sending under)."""
        with self._mutex:
            old = self._replaced.get(credential)
        return bool(getattr(old, "busy", 0))

    # -- deciding (in the proxy) ----------------------------------------------------------------

    def injectors(self, host: str, port: int) -> list[Injector]:
        return [i for i in self._injectors if (host, port) in i.hosts]

    def intercepts(self, host: str, port: int) -> bool:
        """Whether the proxy terminates TLS for ``host``:``port`` (canonical)."""
        if self.injectors(host, port):
            return True
        return self.operations is not None and self.operations.limits(host, port)

    def limited(self, host: str, port: int) -> bool:
        """Whether operations limit ``host``:``port`` (plain HTTP to it is checked as well)."""
        return self.operations is not None and self.operations.limits(host, port)

    def decide(
        self, host: str, port: int, method: bytes, target: bytes, headers: Iterable[Header]
    ) -> Decision | BodyCheck | None:
        """The operations decision on a request's head; None when no operations apply to the session."""
        if self.operations is None:
            return None
        return self.operations.check(host, port, method, target, headers)

    def answer_guard(self, host: str, port: int) -> AnswerGuard | None:
        """What the provider of the credential of ``host``:``port`` keeps from it (None: nothing)."""
        return self._guards.get((host, port))

    def credential_ports(self, host: str) -> list[int]:
        """The ports ``host`` (canonical) is a credential host on, whichever port it is asked for on."""
        return sorted({p for injector in self._injectors for h, p in injector.hosts if h == host})

    def revoked_answer(self, host: str, port: int, head: RequestHead) -> Answer | None:
        """What a request to ``host``:``port`` gets once the session is revoked, in the shape its clients print (an
        AWS host: the S3 or STS XML error naming the revocation); None: the proxy's line of text."""
        for injector in self.injectors(host, port):
            if isinstance(injector, AnswersRevoked):
                return injector.revoked_answer(head)
        return None

    def answers_revoked(self, host: str, port: int) -> bool:
        """Whether a revoked session's requests to ``host``:``port`` are answered inside the tunnel
        (``revoked_answer``): its CONNECT is then let through, every request in it refused."""
        return any(isinstance(injector, AnswersRevoked) for injector in self.injectors(host, port))

    def revoke(self) -> None:
        """From now on every request to a terminated host is refused, and the secrets are dropped."""
        self._revoked.set()
        with self._mutex:
            replaced = list(self._replaced.values())
            self._spelled.clear()
            self._masks.clear()
        for injector in [*self._injectors, *replaced]:
            injector.forget()

    @property
    def revoked(self) -> bool:
        return self._revoked.is_set()

    def upstream_context(self, host: str, port: int) -> ssl.SSLContext:
        """TLS to the real host, verified against its credential's ``upstream_ca_file``, ``[egress]
        upstream_ca_file`` for a host no credential goes to, or the system's CAs."""
        mine = self.injectors(host, port)
        ca_file = mine[0].upstream_ca_file if mine else self.upstream_ca_file
        with self._mutex:
            context = self._upstream.get(ca_file)
            if context is None:
                cafile = str(ca_file) if ca_file is not None else None
                context = self._upstream[ca_file] = ssl.create_default_context(cafile=cafile)
        return context

    def load_trust(self) -> None:
        """Load ``upstream_ca_file`` now (an unreadable file is an error at issue, not at the first request)."""
        self.upstream_context("", 0)

    def masker(self, host: str, port: int, sent: Sequence[Header] = (), swapped: Sequence[Header] = ()) -> Masker:
        """What turns the secrets of ``host``:``port`` back into their stand-ins in an answer, and each header
        an injector changed (``sent`` became ``swapped``: a Basic pair is base64) back into what was sent. The same
        secrets are searched for the same way from one answer to the next (``Spelled``, kept like ``spell``'s)."""
        pairs = [pair for injector in self.injectors(host, port) for pair in injector.mask_pairs()]
        if len(sent) == len(swapped):
            for (_, before), (_, after) in zip(sent, swapped, strict=True):
                if before != after:
                    new, old = after.partition(b" ")[2].strip() or after, before.partition(b" ")[2].strip() or before
                    if len(new) == len(old):  # the stand-in keeps the answer's length (and its framing)
                        pairs.append((new, old))
        key = tuple(pairs)
        with self._mutex:
            found = self._masks.get(key)
        if found is None:
            found = Spelled(pairs, self.spell)
            with self._mutex:
                if len(self._masks) >= MAX_SPELLED:
                    del self._masks[next(iter(self._masks))]
                if not self.revoked:
                    self._masks[key] = found
        return Masker(found)

    def spell(self, secret: bytes, stand_in: bytes) -> tuple[Pair, ...]:
        """``spellings`` of a secret, made once for the session rather than for every answer (a renewed secret's
        are made anew; past ``MAX_SPELLED`` the oldest are dropped, and on revocation all of them)."""
        with self._mutex:
            found = self._spelled.get((secret, stand_in))
        if found is None:
            found = spellings(secret, stand_in)
            with self._mutex:
                if len(self._spelled) >= MAX_SPELLED:
                    del self._spelled[next(iter(self._spelled))]
                if not self.revoked:
                    self._spelled[secret, stand_in] = found
        return found

    def swap(self, host: str, port: int, headers: Sequence[Header]) -> list[Header]:
        """``headers`` with the placeholder of a header-swapping credential of ``host``:``port`` put in."""
        if self.revoked:
            return list(headers)
        for injector in self.injectors(host, port):
            if isinstance(injector, HeaderSwap):
                swapped = injector.swap(headers)
                if swapped is not None:
                    return swapped
        return list(headers)
