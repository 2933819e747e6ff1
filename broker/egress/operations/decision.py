"""What the operations check answers for one request: the decision, and the answer the proxy sends on a refusal.

A ``Decision`` is what the evidence record keeps (allowed or not, the rule,
a one-line reason, which kind of section decided); a refused one carries the
``Answer`` the proxy sends instead of forwarding: GitHub's error shape for
``github_api`` (a 403 whose JSON ``message`` names the rule), a receive-pack
status report for a refused push (built in ``git``), plain text otherwise.

A request whose answer depends on its body gets a ``BodyCheck`` instead: the
proxy holds the body while it feeds it in, and forwards what it held (then the
rest) once a ``Decision`` comes back allowed.

An allowed ``Decision`` may carry an ``AnswerRewrite``: the answer then goes
through it on its way back (MCP: a ``tools/list`` answer without the tools
the session may not call), held within the rewrite's own bound; and
``details``, the fields its kind adds to the ``egress.request`` record.
"""

from __future__ import annotations

import enum
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

DOCUMENTATION_URL = (
    "https://github.com/scoped-credential-broker/broker/blob/main/docs/SPEC.md#operations-not-just-hosts"
)
MAX_REASON = 300
_UNPRINTABLE = re.compile(r"[^ -~]")


class Kind(enum.Enum):
    """Which section decided."""

    GIT = "git"
    GITHUB_API = "github_api"
    HTTP = "http"
    MCP = "mcp"
    NONE = "none"  # no section names the host: operations do not limit it


@dataclass(frozen=True)
class Answer:
    """A complete HTTP answer the proxy sends itself."""

    status: int
    content_type: str
    body: bytes
    extra_headers: tuple[tuple[str, str], ...] = ()

    def headers(self) -> list[tuple[bytes, bytes]]:
        """The answer's headers (``Content-Length`` included), as h11 takes them."""
        fixed = [("Content-Type", self.content_type), ("Content-Length", str(len(self.body)))]
        return [(name.encode(), value.encode()) for name, value in (*fixed, *self.extra_headers)]


@dataclass(frozen=True)
class Decision:
    allowed: bool
    rule: str
    reason: str
    kind: Kind
    answer: Answer | None = None  # on a refusal: what to send instead of forwarding
    rewrite: AnswerRewrite | None = field(default=None, compare=False)  # allowed: what the answer goes through
    details: Mapping[str, object] = field(default_factory=dict, compare=False)  # the kind's own record fields

    def to_json(self) -> dict[str, object]:
        """The fields of the evidence record."""
        return {
            "decision": "allowed" if self.allowed else "refused",
            "rule": self.rule,
            "operations": self.kind.value,
            "reason": self.reason,
        }


class AnswerRefused(Exception):
    """An answer an ``AnswerRewrite`` cannot pass on (one line; the proxy answers 502 or cuts the answer off)."""


class AnswerRewrite(Protocol):
    """What an answer goes through before the client gets it; state for one answer."""

    def head(self, status: int, headers: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
        """The answer's headers as the client gets them (a rewritten body's ``Content-Length`` dropped), or
        ``AnswerRefused``; headers are lower-case names."""

    def feed(self, data: bytes) -> bytes:
        """The next piece of the body; what goes to the client now (``AnswerRefused`` past the rewrite's bound)."""

    def end(self) -> bytes:
        """The body ended: what is left to send."""


class BodyCheck(Protocol):
    """The rest of a decision that needs the request body, fed as it arrives."""

    #: The most body bytes the proxy may have to hold before ``feed`` or ``end`` decides.
    limit: int

    def feed(self, data: bytes) -> Decision | None:
        """The next piece of the body; a ``Decision`` as soon as one can be made, else ``None``."""

    def end(self) -> Decision:
        """The body ended (with no decision yet)."""


def clipped(text: str, limit: int = MAX_REASON) -> str:
    """One line of printable ASCII at most ``limit`` long: request text goes into reasons, answers and records."""
    cleaned = _UNPRINTABLE.sub("?", " ".join(text[: 4 * limit].split()))
    return cleaned if len(cleaned) <= limit else cleaned[: limit - 3] + "..."


def allowed(rule: str, kind: Kind, reason: str) -> Decision:
    return Decision(True, rule, clipped(reason), kind)


def refused_github(rule: str, reason: str, *, graphql: bool = False) -> Decision:
    """A 403 with GitHub's error body (``message``, ``documentation_url``, ``status``), which gh and octokit print."""
    message = clipped(f"refused by policy {rule}: {reason}")
    document: dict[str, object] = {"message": message, "documentation_url": DOCUMENTATION_URL, "status": "403"}
    if graphql:
        document["errors"] = [{"type": "FORBIDDEN", "message": message}]
    body = json.dumps(document).encode()
    answer = Answer(403, "application/json; charset=utf-8", body)
    return Decision(False, rule, clipped(reason), Kind.GITHUB_API, answer)


def refused_text(rule: str, kind: Kind, reason: str) -> Decision:
    """A 403 with one line of text."""
    answer = Answer(403, "text/plain; charset=utf-8", clipped(f"refused by policy {rule}: {reason}").encode() + b"\n")
    return Decision(False, rule, clipped(reason), kind, answer)
