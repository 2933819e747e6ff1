"""Which AWS actions the re-signer signs with the real keys: none that would hand the sandbox new credentials.

The real STS keys sign whatever the proxy re-signs, and some AWS actions
answer with credentials of their own: STS's ``AssumeRole`` (a chained role's
keys, usable anywhere and untouched by the session's revocation) and its
kin (``AssumeRoleWithSAML``, ``AssumeRoleWithWebIdentity``, ``AssumeRoot``),
``GetSessionToken``, ``GetFederationToken``, the token and credential
actions (``GetWebIdentityToken``, ``GetDelegatedAccessToken``,
``GetServiceBearerToken``, ``GetScopedCredentials``), and S3's
``CreateSession`` (``GET /BUCKET?session``, S3 Express). So:

- an STS request is re-signed only for an action the operator lists
  (``Actions.sts``: ``[providers.NAME] proxy_sts_actions``, by default
  ``GetCallerIdentity`` alone), and never for one whose name says it answers
  with credentials (``answers_with_credentials``: ``Assume*``, ``Get*Token``,
  ``Get*Credential(s)``), even when listed (``Actions`` refuses such a list);
- the action is read from everywhere AWS reads one: the query's ``Action``
  (a GET, a presigned URL), the form body's (a POST, as the SDKs send it)
  and ``X-Amz-Target`` (the JSON protocol's ``Service.Operation``); a
  request names exactly one action, once. Parameter names are compared
  case-insensitively, percent-decoded, with ``;`` taken as a separator as
  well as ``&``; the action itself is compared exactly, so any other
  spelling is refused;
- an STS body is read whole before anything goes upstream: its hash must be
  covered by the signature (``reads_body``), it may not be encoded
  (``Content-Encoding``), and it is read at most ``FORM_LIMIT`` bytes;
- an S3 request naming the ``session`` sub-resource is refused.

Each refusal is ``Reason.ACTION``: 403 ``AccessDenied`` in the service's
XML, before the request is re-signed, nothing upstream.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from urllib.parse import unquote_plus

from broker.egress.injectors.sigv4.canonical import S3_SERVICES
from broker.egress.injectors.sigv4.parsing import Target, header_values
from broker.egress.injectors.sigv4.values import Head, Reason, refuse

STS = "sts"
DEFAULT_STS_ACTIONS = frozenset({"GetCallerIdentity"})
#: STS actions that answer with credentials or a token good elsewhere (checked case-insensitively).
CREDENTIAL_ACTION = re.compile(r"assume.*|get.*(?:token|credentials?)", re.IGNORECASE)
ACTION_NAME = re.compile(r"[A-Za-z][A-Za-z0-9]{0,127}")
#: The most of an STS form body read for its action (an SDK's is well under a kilobyte).
FORM_LIMIT = 256 * 1024
#: The services whose ``session`` sub-resource is CreateSession (S3 Express signs it as ``s3express``).
SESSION_SERVICES = S3_SERVICES | {"s3express"}
SEPARATORS = re.compile(r"[&;]")
NEVER = "answers with new credentials; the broker's proxy never re-signs it"


def answers_with_credentials(action: str) -> bool:
    """Whether an STS action's name says it answers with credentials (never re-signed, never listable)."""
    return CREDENTIAL_ACTION.fullmatch(action) is not None


@dataclass(frozen=True)
class Actions:
    """The STS actions re-signed for one credential (see the module docstring)."""

    sts: frozenset[str] = DEFAULT_STS_ACTIONS

    def __post_init__(self) -> None:
        wrong = sorted(a for a in self.sts if answers_with_credentials(a) or not ACTION_NAME.fullmatch(a))
        if wrong:
            raise ValueError(f"STS actions the proxy never re-signs: {', '.join(wrong)}")

    @staticmethod
    def reads_body(service: str) -> bool:
        """Whether a request signed for ``service`` names its action in its body (STS: held and read whole)."""
        return service == STS

    def check_head(self, head: Head, target: Target, service: str) -> None:
        """Refuse, on its head, a request for an action never re-signed, or for an STS action not listed."""
        if service in SESSION_SERVICES and any(name.lower() == "session" for name in _names(target.items)):
            refuse(Reason.ACTION, f"S3 CreateSession {NEVER}", service)
        if service != STS:
            return
        if any(value.strip().lower() not in (b"", b"identity") for value in header_values(head, b"content-encoding")):
            refuse(Reason.ACTION, "an STS request body may not be encoded; send it as a plain form", service)
        for action in _in_head(head, target):
            self._allowed(action)

    def check_body(self, head: Head, target: Target, body: bytes | None) -> None:
        """The STS request's one action, from its head and its whole ``body`` (None: longer than ``FORM_LIMIT``),
        is one this credential's proxy re-signs; ``RequestRefused`` otherwise."""
        if body is None:
            refuse(Reason.ACTION, f"an STS request body over {FORM_LIMIT} bytes: its action cannot be read", STS)
        named = [*_in_head(head, target), *_actions((body.decode("latin-1"),))]
        if not named:
            refuse(Reason.ACTION, "the STS request names no action", STS)
        if len(named) > 1:
            refuse(Reason.ACTION, "the STS request names an action more than once", STS)
        self._allowed(named[0])

    def _allowed(self, action: str) -> None:
        shown = f"sts:{action}" if ACTION_NAME.fullmatch(action) else "the STS action named"
        if answers_with_credentials(action):
            refuse(Reason.ACTION, f"{shown} {NEVER}", STS)
        if action not in self.sts:
            listed = ", ".join(sorted(self.sts)) or "none"
            refuse(
                Reason.ACTION,
                f"{shown} is not among the STS actions the broker's proxy re-signs ({listed}: proxy_sts_actions)",
                STS,
            )


def _in_head(head: Head, target: Target) -> list[str]:
    """The actions a request names in its query and its ``X-Amz-Target`` headers."""
    named = list(_actions(target.items))
    for value in header_values(head, b"x-amz-target"):
        named.append(value.decode("latin-1").strip().rpartition(".")[2])
    return named


def _actions(items: tuple[str, ...]) -> Iterator[str]:
    """The values of every ``action`` parameter (any case) among raw ``name=value`` items."""
    for item in items:
        for part in SEPARATORS.split(item):
            name, _, value = part.partition("=")
            if unquote_plus(name).strip().lower() == "action":
                yield unquote_plus(value)


def _names(items: tuple[str, ...]) -> Iterator[str]:
    for item in items:
        for part in SEPARATORS.split(item):
            yield unquote_plus(part.partition("=")[0])
