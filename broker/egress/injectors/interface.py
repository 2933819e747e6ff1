"""The credential step of a terminated request: how one credential puts its secret into what goes upstream.

Every ``inject: proxy`` credential is an ``Injector`` for its hosts. For each
request to one of them (after the guards and the operations decision) the
proxy asks each injector of the host in turn to ``begin`` on the request's
head, as the client sent it:

- ``None``: the request holds none of this credential's placeholders; the
  next injector is asked, and a request no injector takes goes out as it is
  (a placeholder elsewhere is worthless);
- an ``Answer``: the request is refused (the answer says why, in the shape
  the client's SDK prints) and nothing is sent upstream; ``begin`` may raise
  ``InjectionRefused`` instead, which does the same and gives the evidence
  record its reason;
- a ``Passage``: the request on its way upstream. ``head`` is what goes
  upstream, or ``None`` while it waits for the body (a signature over the
  body's hash can only be made at its end); each piece of the client's body
  goes through ``feed``, which returns what may go upstream now (nothing
  while the head waits); ``end`` returns the head if it waited, and the last
  pieces. ``feed`` and ``end`` may refuse (``InjectionRefused``): the proxy
  then sends no complete request upstream (it closes the upstream connection
  mid-body) and answers the client with the refusal's answer when it still
  can. An injector that changes the body's length sets the head's framing
  (``Content-Length``, or ``Transfer-Encoding: chunked``) itself.

The header swap of GitHub and Vault tokens (``broker.egress.injectors.swap``) is a
passage whose head changes and whose body passes untouched. A SigV4
re-signer verifies the head and the body and re-signs both; a header
template (``Authorization: Bearer {}`` for any service) changes one header.
``mask_pairs`` names the secrets that must never come back in an answer
(each with what replaces it, of the same length), ``forget`` drops them when
the session is revoked. A passage may also screen its answer
(``Screening``): the answer, after the masker, is read through its
``AnswerScreen``, which refuses one that carries what the session must not
get (the AWS re-signer: credentials the session does not own); the proxy
holds the answer's head and first ``hold`` bytes back meanwhile, so such a
refusal is a clean answer, and cuts the answer off when it comes later.
An injector whose clients print errors of their own shape
(``AnswersRevoked``: the AWS re-signer, whose SDKs read an XML error) gives
the answer every request to its hosts gets after the revocation, so the
client says what happened; the others get the proxy's line of text.
Rotation swaps one injector for another
(``Interceptor.replace``): a request keeps the passage it began with, the
next one begins on the new injector, so no request fails during a swap.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, cast, runtime_checkable

from broker.egress.operations import Answer

Header = tuple[bytes, bytes]


@dataclass(frozen=True)
class RequestHead:
    """A request head inside a terminated tunnel: method, origin-form target, headers (names in lower case)."""

    method: bytes
    target: bytes
    headers: tuple[Header, ...]


@dataclass(frozen=True)
class Ending:
    """What ``Passage.end`` releases: the head when it waited for the body, then the last pieces of the body."""

    head: RequestHead | None = None
    pieces: Iterator[bytes] = field(default_factory=lambda: iter(()))


class InjectionRefused(Exception):
    """A passage refused the request (or a screen its answer); ``answer`` is what the client gets when it can still
    get one; ``why`` the reason of the ``egress.refused`` record that counts it (``exchange.refusals.Refusal``)."""

    def __init__(self, answer: Answer, reason: str, why: str = "credential") -> None:
        super().__init__(reason)
        self.answer = answer
        self.reason = reason
        self.why = why


class Passage(Protocol):
    """One request on its way upstream through one credential's injector."""

    head: RequestHead | None

    def feed(self, piece: bytes) -> Iterable[bytes]:
        """What may go upstream now for this piece of the client's body (consume it before the next call)."""
        ...

    def end(self) -> Ending:
        """The client's body is complete."""
        ...

    def close(self) -> None:
        """Release what the passage holds (a spool); called once, whatever happened."""
        ...


class AnswerScreen(Protocol):
    """What an answer may not carry, read after the masker: first the head's values (``head``), then the body in
    pieces (``scan``); each raises ``InjectionRefused`` when the answer may not go on."""

    @property
    def hold(self) -> int | None:
        """Bytes of the body held back with the head, so a refusal within them is a clean answer; None: the whole
        answer (one over the proxy's bound is refused, unchecked)."""
        ...

    def head(self, values: Sequence[bytes]) -> None: ...

    def scan(self, data: bytes, *, final: bool = False) -> None:
        """The next piece of the body (``final``: nothing follows); a value split across pieces is found."""
        ...


@runtime_checkable
class Screening(Protocol):
    """A passage whose answer is read through a screen (see the module docstring)."""

    def answer_screen(self) -> AnswerScreen | None: ...


_SCREENING: dict[type, bool] = {}  # whether a passage class screens (a runtime protocol check walks its members)


def answer_screen(passage: Passage) -> AnswerScreen | None:
    """The screen ``passage``'s answer is read through (``Screening``), or None; the protocol is checked once per
    passage class, not on every request."""
    kind = type(passage)
    screening = _SCREENING.get(kind)
    if screening is None:
        screening = _SCREENING[kind] = isinstance(passage, Screening)
    return cast(Screening, passage).answer_screen() if screening else None


class Injector(Protocol):
    """One credential's way into requests to its hosts (see the module docstring)."""

    @property
    def credential(self) -> str:
        """The credential's name, for the evidence records."""
        ...

    @property
    def hosts(self) -> frozenset[tuple[str, int]]: ...

    @property
    def upstream_ca_file(self) -> Path | None:
        """What the real hosts' certificates are checked against; None: the system's CAs."""
        ...

    def begin(self, head: RequestHead) -> Passage | Answer | None: ...

    def mask_pairs(self) -> Sequence[tuple[bytes, bytes]]:
        """(secret, stand-in of the same length): what an answer from the hosts must never carry back."""
        ...

    def forget(self) -> None:
        """The session is revoked: drop the secret; ``begin`` refuses from now on."""
        ...


@runtime_checkable
class AnswersRevoked(Protocol):
    """An injector that answers its hosts' requests after the session is revoked itself (see the module docstring)."""

    def revoked_answer(self, head: RequestHead) -> Answer: ...


class HeadOnly:
    """A passage whose head is ready at once and whose body goes upstream as it came."""

    def __init__(self, head: RequestHead) -> None:
        self.head: RequestHead | None = head

    def feed(self, piece: bytes) -> Iterable[bytes]:
        return (piece,)

    def end(self) -> Ending:
        return Ending()

    def close(self) -> None:
        return None
